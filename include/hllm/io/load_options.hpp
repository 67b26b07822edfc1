#pragma once
// Options shared by the model loaders (load_gguf_model, load_hf_model, load_llama2c_model).

namespace hllm {

// Load-time repacking of Q4_0 and Q8_0 projection weights into 8-row interleaved groups
// (model/repack.hpp), which the AVX-512 VNNI decode kernels read about twice as fast.
enum class Repack {
  automatic,  // repack when this process's kernels (kernels::active()) prefer it
  never,      // keep every weight in the file's layout, in place in the mapping
  always,     // repack whatever the CPU (every ISA has kernels for the repacked types)
};

struct LoadOptions {
  // Scan every weight tensor for NaN and ±Inf (quantized ones dequantized block by block) and
  // throw Error(format) naming the file, the tensor, the first bad element and its byte offset.
  // Off by default: it reads (and dequantizes) the whole file at load time, about 1.6 s for a
  // 590 MiB Q4_0 file on one core, instead of leaving the pages to the first forward pass.
  bool check_finite = false;
  // Repacking copies those weights into one owned buffer, tensor by tensor, and returns each
  // source tensor's pages of a mapped file to the kernel as it goes (MADV_DONTNEED), so the peak
  // resident size stays about the file's size. Costs about 0.3 s per GB at load.
  Repack repack = Repack::automatic;
};

}  // namespace hllm
