#pragma once
// Options shared by the model loaders (load_gguf_model, load_hf_model, load_llama2c_model).

namespace hllm {

struct LoadOptions {
  // Scan every weight tensor for NaN and ±Inf (quantized ones dequantized block by block) and
  // throw Error(format) naming the file, the tensor, the first bad element and its byte offset.
  // Off by default: it reads (and dequantizes) the whole file at load time, about 1.6 s for a
  // 590 MiB Q4_0 file on one core, instead of leaving the pages to the first forward pass.
  bool check_finite = false;
};

}  // namespace hllm
