#pragma once
// The scalar reference twin of every kernel: the plainest correct loop, in float32, with no
// cleverness. The optimized kernels are tested against these, and the model runs on them when
// HLLM_ISA=scalar. Shapes are in the comments; all arrays are row-major and contiguous.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/weight_tensor.hpp"

namespace hllm {

// How the dimensions of one head are paired for rotation.
enum class RopeLayout {
  interleaved,  // pairs (2i, 2i+1): GGUF `llama` models (llama.cpp's "normal" mode)
  neox,         // pairs (i, i + rot/2): Hugging Face checkpoints, GPT-NeoX
};

namespace reference {

// y[t][r] = sum_c w[r][c] * x[t][c].   w: [rows][cols], x: [n_tokens][cols], y: [n_tokens][rows]
template <class W>
void matmul(const W* w, std::size_t rows, std::size_t cols, const float* x, std::size_t n_tokens,
            float* y) {
  for (std::size_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * cols;
    for (std::size_t r = 0; r < rows; ++r) {
      const W* wr = w + r * cols;
      float sum = 0.0f;
      for (std::size_t c = 0; c < cols; ++c) sum += to_float(wr[c]) * xt[c];
      y[t * rows + r] = sum;
    }
  }
}

// The same for a runtime-typed weight; quantized types join this switch with their own issue.
inline void matmul(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) {
  switch (w.type) {
    case DType::f32: return matmul(w.as<float>(), w.rows, w.cols, x, n_tokens, y);
    case DType::f16: return matmul(w.as<f16>(), w.rows, w.cols, x, n_tokens, y);
    case DType::bf16: return matmul(w.as<bf16>(), w.rows, w.cols, x, n_tokens, y);
    default:
      throw Error(ErrorKind::unsupported,
                  "no reference matmul for weight type " + dtype_name(w.type), {}, w.name);
  }
}

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i].   x, weight, out: [n]
inline void rms_norm(const float* x, const float* weight, std::size_t n, float eps, float* out) {
  double sum_squares = 0.0;  // double: n can be 8192 and the mean must not lose the small terms
  for (std::size_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps));
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * weight[i];
}

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).   gate, up, out: [n]
inline void silu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// Rotates the first rot_dims dimensions of each head by the angles whose cos/sin are given
// (already multiplied by any attention-temperature factor).
// x: [n_heads][head_dim], cos, sin: [rot_dims/2]
inline void rope(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t rot_dims,
                 RopeLayout layout, const float* cos, const float* sin) {
  const std::size_t half = rot_dims / 2;
  for (std::size_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (std::size_t i = 0; i < half; ++i) {
      const std::size_t a = layout == RopeLayout::interleaved ? 2 * i : i;
      const std::size_t b = layout == RopeLayout::interleaved ? 2 * i + 1 : i + half;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos[i] - x1 * sin[i];
      head[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

// Tile size of the online softmax: scores for at most this many keys exist at once.
inline constexpr std::size_t kAttentionTile = 32;

// One query head against n_keys cached keys/values with a streaming (online) softmax:
// out = sum_j softmax(scale * q·k_j) v_j, computed tile by tile so no score row is stored.
// q: [head_dim], keys, values: [n_keys][head_dim], out: [head_dim]
template <class KV>
void attend_head(const float* q, const KV* keys, const KV* values, std::size_t n_keys,
                 std::size_t head_dim, float scale, float* out) {
  float scores[kAttentionTile];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + head_dim, 0.0f);
  for (std::size_t start = 0; start < n_keys; start += kAttentionTile) {
    const std::size_t count = std::min(kAttentionTile, n_keys - start);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < count; ++j) {
      const KV* k = keys + (start + j) * head_dim;
      float dot = 0.0f;
      for (std::size_t d = 0; d < head_dim; ++d) dot += q[d] * to_float(k[d]);
      scores[j] = dot * scale;
      tile_max = std::max(tile_max, scores[j]);
    }
    const float new_max = std::max(running_max, tile_max);
    // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first tile).
    const float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    for (std::size_t d = 0; d < head_dim; ++d) out[d] *= correction;
    for (std::size_t j = 0; j < count; ++j) {
      const float p = std::exp(scores[j] - new_max);
      running_sum += p;
      const KV* v = values + (start + j) * head_dim;
      for (std::size_t d = 0; d < head_dim; ++d) out[d] += p * to_float(v[d]);
    }
    running_max = new_max;
  }
  if (running_sum > 0.0f) {
    const float inv = 1.0f / running_sum;
    for (std::size_t d = 0; d < head_dim; ++d) out[d] *= inv;
  }
}

}  // namespace reference
}  // namespace hllm

namespace hllm::reference {

// Row `row` of a weight matrix as float32 (embedding lookup).   out: [w.cols]
inline void dequantize_row(const WeightTensor& w, std::size_t row, float* out) {
  auto convert = [&](const auto* data) {
    const auto* src = data + row * w.cols;
    for (std::size_t c = 0; c < w.cols; ++c) out[c] = to_float(src[c]);
  };
  switch (w.type) {
    case DType::f32: return convert(w.as<float>());
    case DType::f16: return convert(w.as<f16>());
    case DType::bf16: return convert(w.as<bf16>());
    default:
      throw Error(ErrorKind::unsupported, "no dequantization for weight type " + dtype_name(w.type),
                  {}, w.name);
  }
}

}  // namespace hllm::reference
