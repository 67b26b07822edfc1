#pragma once
// The model of a benchmark program (hllm-bench, hllm-batched-bench): a GGUF file mapped in
// place, or random weights of a preset's shape (common/synthetic.hpp), repacked as a load
// would repack them for the ISA the benchmark runs (--isa may differ from this process's best).

#include <string>
#include <utility>

#include "common/cli.hpp"
#include "common/progress.hpp"
#include "common/synthetic.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/repack.hpp"

namespace hllm::examples {

struct BenchModel {
  ModelConfig config;
  ModelWeights weights;
  std::string name;       // the file, or "PRESET (synthetic)"
  std::string type_name;  // the file type of the projections, e.g. "Q4_0"
};

// -m/--model, --preset and --type, as the benchmark programs take them.
inline void model_source_options(cli::Parser& cli, std::string& path, std::string& preset,
                                 std::string& type) {
  cli.path("-m,--model", path, "Model file (or --preset)");
  std::string names;
  for (const std::string& name : presets::names()) names += name + ", ";
  cli.text("--preset", preset, "Random weights of a preset's shape: " + names + "tiny")
      ->type_name("NAME");
  cli.text("--type", type, "Weight type of a preset (default f32)")
      ->type_name("f32|f16|bf16|q8_0|q4_0");
}

// After parsing: the preset's weight type from --type (a bad name fails the command line), or
// f32 for a file, whose types are its own.
inline DType preset_type(cli::Parser& cli, const std::string& path, const std::string& type) {
  if (!path.empty()) return DType::f32;
  try {
    return parse_dtype(type);
  } catch (const Error& e) {
    cli.fail(e.message());
  }
}

// path non-empty: the file; else the preset with weights of `type`. mode: as LoadOptions::repack
// (automatic: the panels the kernels of run_isa read, and huge pages for a file's projections).
// plain: the preset's Llama twin (synthetic_config). f16_as_bf16: as LoadOptions::f16_as_bf16.
inline BenchModel load_bench_model(const std::string& path, const std::string& preset, DType type,
                                   Isa run_isa, Repack mode, bool log, bool plain = false,
                                   bool f16_as_bf16 = false) {
  BenchModel m;
  const RepackPlan plan = repack_plan(mode, kernels::table_for(run_isa), f16_as_bf16);
  if (!path.empty()) {
    GgufModel loaded = load_gguf_model(path, {.repack = Repack::never});
    m.config = loaded.config;
    m.weights = std::move(loaded.weights);
    m.type_name = dtype_name(m.weights.layers.at(0).wq.type);
    repack_weights(m.weights, plan, loaded.file->is_mapped(), load_progress(log));
    m.name = path;
  } else {
    m.config = synthetic_config(preset, plain);
    m.weights = synthetic_weights(m.config, type, 1);
    m.type_name = dtype_name(type);
    // In memory, not a file mapping: the source stays (and so does its memory), so nothing is
    // moved just for huge pages.
    RepackPlan in_memory = plan;
    in_memory.move_all = false;
    repack_weights(m.weights, in_memory, false, load_progress(log));
    m.name = preset + (plain ? " (synthetic, plain Llama twin)" : " (synthetic)");
  }
  // The file's type, and what a load made of it where that is another type.
  const DType stored = file_type_of(m.weights.layers.at(0).wq.type);
  if (m.type_name != dtype_name(stored)) m.type_name += " as " + dtype_name(stored);
  return m;
}

}  // namespace hllm::examples
