#pragma once
// Options shared by the model loaders (load_gguf_model, load_hf_model, load_llama2c_model).

#include "hllm/io/progress.hpp"

namespace hllm {

// Load-time relayout of the projection weights for decode (model/repack.hpp): the blocks'
// Q4_0, Q8_0, Q4_K and Q6_K matrices go into 16-row panels (8-row groups where the shape does
// not allow them), which the AVX-512 VNNI decode kernels read as one stream with one row per
// vector lane; BF16 ones go into the 16-row pair panels of the AVX512-BF16 GEMM
// (core/bf16_panels.hpp); and the projections move from the file mapping into one buffer of
// transparent huge pages (a decode stream over 4 KiB pages pays a TLB walk per page, two-level in
// a VM, and restarts the prefetcher at each page boundary). Each source tensor's pages are
// returned to the kernel once copied, so the peak resident size stays about the file's.
// docs/performance.md measures what each of these gains.
enum class Repack {
  // For a model mapped from a file: interleave where this process's kernels (kernels::active())
  // prefer it (VNNI for the quantized types, AVX512-BF16 for BF16 panels), move the rest where
  // the kernel grants huge pages (repack_plan in model/repack.hpp). Memory the caller lent
  // (gguf::File::from_memory) is left in place.
  automatic,
  never,   // every weight stays in the file's layout, in place in the mapping
  always,  // interleave and move whatever the CPU and the source (every ISA has the kernels)
};

struct LoadOptions {
  // Scan every weight tensor for NaN and ±Inf (quantized ones dequantized block by block) and
  // throw Error(format) naming the file, the tensor, the first bad element and its byte offset.
  // Off by default: it reads (and dequantizes) the whole file at load time, instead of leaving
  // the pages to the first forward pass (docs/reliability.md gives the cost).
  bool check_finite = false;
  // Costs one copy of the projection weights at load.
  Repack repack = Repack::automatic;
  // Called per tensor during the slow parts of a load (io/progress.hpp): stage "checking" for
  // check_finite, "repacking" for the repack, which reads every page of the file. Mapping a file
  // and validating its tensors takes milliseconds and reports nothing. load_gguf_model reports;
  // the Hugging Face and llama2.c loaders do not yet.
  ProgressCallback progress;
};

}  // namespace hllm
