#pragma once
// Latent attention's W_kb and W_vb from the one kv_b matrix that Hugging Face checkpoints
// (kv_b_proj) and GGUF files converted before llama.cpp split it (attn_kv_b) hold:
// [n_heads][nope + v][kv_lora], each head's key rows then its value rows. llama.cpp's converter
// splits it as done here: W_kb per head transposed to [kv_lora][nope] (the absorbed query
// multiplies by it), W_vb per head as it is, [v][kv_lora]. The result is an owned float32 copy:
// the kernels read rows of the transposed matrix, which the source's blocks cannot give.

#include <cstddef>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/weights.hpp"

namespace hllm {

// The TensorSpec of the unsplit kv_b named `name`: [n_heads·(nope + v)][kv_lora].
inline TensorSpec latent_kv_b_spec(const ModelConfig& c, std::string name) {
  return {std::move(name), static_cast<std::size_t>(c.n_heads * (c.mla_nope_dim + c.mla_v_dim)),
          static_cast<std::size_t>(c.kv_lora_rank)};
}

// `part` (attn_k_b's or attn_v_b's spec) cut from kv_b (any weight type), stored in a new
// buffer appended to `owned`.
inline WeightTensor split_latent_kv_b(const WeightTensor& kv_b, const ModelConfig& c,
                                      const TensorSpec& part,
                                      std::vector<AlignedBuffer<std::byte>>& owned) {
  const auto heads = static_cast<std::size_t>(c.n_heads),
             latent = static_cast<std::size_t>(c.kv_lora_rank),
             nope = static_cast<std::size_t>(c.mla_nope_dim),
             v = static_cast<std::size_t>(c.mla_v_dim);
  const bool keys = part.name.ends_with(".attn_k_b.weight");
  AlignedBuffer<std::byte> buf(part.rows * part.cols * sizeof(float));
  float* dst =
      reinterpret_cast<float*>(buf.data());  // [heads][kv_lora][nope] or [heads][v][kv_lora]
  std::vector<float> row(latent);            // [kv_lora]
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < (keys ? nope : v); ++i) {
      reference::dequantize_row(kv_b, h * (nope + v) + (keys ? i : nope + i), row.data());
      for (std::size_t j = 0; j < latent; ++j) {
        if (keys)
          dst[(h * latent + j) * nope + i] = row[j];
        else
          dst[(h * v + i) * latent + j] = row[j];
      }
    }
  owned.push_back(std::move(buf));
  return {DType::f32, owned.back().data(), part.rows, part.cols, part.name};
}

}  // namespace hllm
