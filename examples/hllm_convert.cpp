// hllm-convert: converts a model to a GGUF file of a chosen weight type, with our GGUF writer.
//
//   hllm-convert -i INPUT -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_0] [--tokenizer tokenizer.bin]
//                [--log-disable]
//
// INPUT is a GGUF file, a Hugging Face checkpoint (a directory with config.json and
// model.safetensors or an index), or a llama2.c checkpoint (.bin, with --tokenizer for its
// tokenizer.bin). Hugging Face q/k weights are permuted into the interleaved RoPE layout, as
// llama.cpp's converter does; a GGUF input keeps its tokenizer. Progress goes to stderr, a line
// per tensor ("quantizing  4/57 blk.0.attn_k.weight"; one line redrawn on a terminal), so that
// stdout holds only the summary; --log-disable leaves stderr to errors.

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "common/cli.hpp"
#include "common/progress.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/hf_model.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/io/llama2c.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace {

// Whether the file begins with `magic`; refuses what is not a regular file, never blocking.
bool starts_with_magic(const std::string& path, const char* magic) {
  const hllm::io::InputFile in = hllm::io::InputFile::open(path, "model file");
  char head[4] = {};
  return ::pread(in.fd(), head, 4, 0) == 4 && std::memcmp(head, magic, 4) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, tokenizer_path, type_name = "f16";
  bool log_disable = false;
  hllm::cli::Parser cli("hllm-convert",
                        "Converts a model (GGUF, Hugging Face or llama2.c) to a GGUF file.");
  cli.path("-i,--input", input,
           "A .gguf file, a Hugging Face checkpoint directory, or a llama2.c .bin (required)")
      ->required()
      ->type_name("INPUT");
  cli.path("-o,--output", output, "The GGUF file to write (required)")->required();
  cli.text("--type", type_name, "Weight type (default f16)")->type_name("f32|f16|bf16|q8_0|q4_0");
  cli.path("--tokenizer", tokenizer_path, "A llama2.c tokenizer.bin for a llama2.c checkpoint");
  cli.flag("--log-disable", log_disable, "Print nothing on stderr but errors (no progress)");
  cli.parse(argc, argv);
  hllm::DType type = hllm::DType::f16;
  try {
    type = hllm::parse_dtype(type_name);
  } catch (const hllm::Error& e) {
    cli.fail(e.message());
  }

  try {
    hllm::ModelConfig config;
    hllm::ModelWeights weights;
    std::optional<hllm::Vocabulary> vocabulary;
    std::shared_ptr<const hllm::gguf::File> source;  // a GGUF input: its other keys are kept
    if (std::filesystem::is_directory(input) || input.ends_with(".safetensors") ||
        input.ends_with(".json")) {
      hllm::HfModel m = hllm::load_hf_model(input);
      config = m.config;
      weights = std::move(m.weights);
    } else if (starts_with_magic(input, "GGUF")) {
      // In the file's layout: every tensor is read once, so a repack would only cost a copy.
      hllm::GgufModel m = hllm::load_gguf_model(input, {.repack = hllm::Repack::never});
      if (m.file->has("tokenizer.ggml.model")) vocabulary = hllm::vocabulary_from_gguf(*m.file);
      source = m.file;
      config = m.config;
      weights = std::move(m.weights);
    } else {
      hllm::Llama2cModel m = hllm::load_llama2c_model(input);
      config = m.config;
      weights = std::move(m.weights);
    }
    if (!tokenizer_path.empty())
      vocabulary = hllm::llama2c::load_vocabulary(tokenizer_path,
                                                  static_cast<std::size_t>(config.vocab_size));
    const hllm::ConvertedModel converted = hllm::convert_model(
        config, weights, type, hllm::examples::progress_callback({.enabled = !log_disable}));
    hllm::save_gguf_model(output, converted.config, converted.weights, [&](hllm::gguf::Writer& w) {
      if (vocabulary) hllm::write_vocabulary(w, *vocabulary);
      // Everything else the source said (chat template, licence, general.*, ...) is kept.
      if (source) hllm::copy_missing_metadata(*source, w);
    });
    std::printf("wrote %s: %s weights, %lld layers, vocabulary %s (%.1f MiB)\n", output.c_str(),
                hllm::dtype_name(type).c_str(), static_cast<long long>(config.n_layers),
                vocabulary ? "included" : "absent",
                double(std::filesystem::file_size(output)) / (1024.0 * 1024.0));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-convert: %s\n", e.what());
    return 1;
  }
}
