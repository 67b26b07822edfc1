#pragma once
// Options shared by the model loaders (load_gguf_model, load_hf_model, load_llama2c_model).

#include "hllm/io/progress.hpp"

namespace hllm {

// Load-time relayout of the projection weights (model/repack.hpp) into the layouts of the
// registry (core/layouts.hpp) that the kernels prefer: the quantized matrices into 16-row panels
// (8-row groups where the shape does not allow them, with AVX-512 VNNI), which decode reads as
// one stream with one row per vector lane and the prefill GEMM reads in place; F32 and F16 ones
// into 16-row panels and BF16 ones into 16-row pair panels, the FP32 and BF16 GEMMs' own; and
// the projections move from the file mapping into one buffer of
// transparent huge pages (a decode stream over 4 KiB pages pays a TLB walk per page, two-level in
// a VM, and restarts the prefetcher at each page boundary). Each source tensor's pages are
// returned to the kernel once copied, so the peak resident size stays about the file's.
// docs/performance.md measures what each of these gains.
enum class Repack {
  // For a model mapped from a file: repack where this process's kernels (kernels::active())
  // prefer it (every vector ISA; the 8-row groups with AVX-512 VNNI), move the rest where the
  // kernel grants huge pages (repack_plan in model/repack.hpp). Memory the caller lent
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
  // Round F16 projection weights to BF16 (to nearest even) while repacking, where the CPU runs
  // vdpbf16ps faster than FP32 FMAs (AVX512-BF16 on AMD's Zen 4 and Zen 5), so they take the
  // BF16 pair panels and vdpbf16ps: prefill about twice as fast (docs/performance.md), as
  // ik_llama.cpp's -rtr does. Lossy: BF16 keeps 8 of F16's 11 significant bits, and activations
  // are rounded to bf16 too; even SessionOptions::exact then runs on the rounded weights. Off by
  // default; no effect without such a CPU (Intel's issue vdpbf16ps at half the FMA's rate) or
  // without repacking.
  bool f16_as_bf16 = false;
  // Called per tensor during the slow parts of a load (io/progress.hpp): stage "checking" for
  // check_finite, "repacking" for the repack, which reads every page of the file. Mapping a file
  // and validating its tensors takes milliseconds and reports nothing. load_gguf_model reports;
  // the Hugging Face and llama2.c loaders do not yet.
  ProgressCallback progress;
};

}  // namespace hllm
