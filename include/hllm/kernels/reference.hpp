#pragma once
// The scalar reference twin of every kernel: the plainest correct loop, in float32, with no
// cleverness. The optimized kernels are tested against these, and the model runs on them when
// HLLM_ISA=scalar. Shapes are in the comments; all arrays are row-major and contiguous.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/float_panels.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/attention_scoring.hpp"

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

// Dequantization of single blocks, exactly as ggml's dequantize_row_* defines each layout.
// out: [block elements]
inline void dequantize_block(const BlockQ8_0& b, float* out) {
  const float d = to_float(b.d);
  for (std::size_t i = 0; i < kQK8_0; ++i) out[i] = d * static_cast<float>(b.qs[i]);
}

inline void dequantize_block(const BlockQ4_0& b, float* out) {
  const float d = to_float(b.d);
  for (std::size_t j = 0; j < kQK4_0 / 2; ++j) {
    out[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
    out[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

inline void dequantize_block(const BlockQ4_1& b, float* out) {
  const float d = to_float(b.d), m = to_float(b.m);
  for (std::size_t j = 0; j < kQK4_1 / 2; ++j) {
    out[j] = static_cast<float>(b.qs[j] & 0x0f) * d + m;
    out[j + kQK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
  }
}

using ::hllm::q4_k_scale_min;  // (quant_blocks.hpp: the repacking needs it too)

// Where the 32 values of slice `slice` (0..7) of a Q6_K super-block live (the layout
// dequantize_block(BlockQ6_K) walks): slice (h, i) = (slice / 4, slice % 4) takes value l from
// the low (i < 2) or high nibble of ql[64h + 32(i & 1) + l] and bits 2i, 2i + 1 of qh[32h + l];
// its two 16-value halves use scales[2·slice] and scales[2·slice + 1].
inline void q6_k_slice_layout(std::size_t slice, std::size_t& ql_offset, int& ql_shift,
                              std::size_t& qh_offset, int& qh_shift) {
  const std::size_t h = slice / 4, i = slice % 4;
  ql_offset = 64 * h + 32 * (i & 1);
  ql_shift = static_cast<int>(4 * (i >> 1));
  qh_offset = 32 * h;
  qh_shift = static_cast<int>(2 * i);
}

inline void dequantize_block(const BlockQ4_K& b, float* out) {
  const float d = to_float(b.d), dmin = to_float(b.dmin);
  const std::uint8_t* q = b.qs;
  for (std::size_t group = 0; group < 4; ++group) {  // 64 elements: two sub-blocks
    std::uint8_t sc = 0, m = 0;
    q4_k_scale_min(2 * group, b.scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    q4_k_scale_min(2 * group + 1, b.scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (std::size_t l = 0; l < 32; ++l) *out++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
    for (std::size_t l = 0; l < 32; ++l) *out++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

inline void dequantize_block(const BlockQ5_K& b, float* out) {
  const float d = to_float(b.d), dmin = to_float(b.dmin);
  for (std::size_t j = 0; j < 8; ++j) {  // sub-block j: nibbles of qs[32·(j/2) ..], bit j of qh
    std::uint8_t sc = 0, m = 0;
    q4_k_scale_min(j, b.scales, sc, m);
    const float scale = d * sc, minimum = dmin * m;
    const std::uint8_t* q = b.qs + 32 * (j / 2);
    for (std::size_t l = 0; l < 32; ++l) {
      const int value = ((q[l] >> (4 * (j & 1))) & 0x0f) | (((b.qh[l] >> j) & 1) << 4);
      *out++ = scale * static_cast<float>(value) - minimum;
    }
  }
}

inline void dequantize_block(const BlockQ6_K& b, float* out) {
  const float d = to_float(b.d);
  const std::uint8_t* ql = b.ql;
  const std::uint8_t* qh = b.qh;
  const std::int8_t* sc = b.scales;
  for (std::size_t half = 0; half < 2; ++half) {  // 128 elements each
    for (std::size_t l = 0; l < 32; ++l) {
      const std::size_t is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    out += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Row `row` of a quantized matrix, block by block. Blocks are copied out of the raw bytes
// first: in a file they are only 2-byte aligned, and this keeps every access well-defined.
// out: [w.cols]
template <class Block, std::size_t BlockElements>
void dequantize_blocks(const WeightTensor& w, std::size_t row, float* out) {
  if (w.cols % BlockElements != 0)
    throw Error(ErrorKind::internal,
                "column count " + std::to_string(w.cols) + " is not a multiple of the block size",
                {}, w.name);
  const std::size_t blocks = w.cols / BlockElements;
  const auto* src = static_cast<const std::byte*>(w.data) + row * blocks * sizeof(Block);
  for (std::size_t b = 0; b < blocks; ++b) {
    Block block;
    std::memcpy(&block, src + b * sizeof(Block), sizeof(Block));
    dequantize_block(block, out + b * BlockElements);
  }
}

// Row `row` of a quantized file type, or of any repacked layout (read back to its file type's
// layout through the registry, core/layouts.hpp), as float32; false for any other type.
//   out: [w.cols]
inline bool dequantize_quantized_row(const WeightTensor& w, std::size_t row, float* out) {
  if (const LayoutSpec* spec = repacked_layout(w.type)) {
    const DTypeInfo file = file_dtype_info(spec->source);
    std::vector<std::byte> bytes(w.cols / file.block_elements * file.block_bytes);  // one row
    spec->read_row(w.data, w.rows, w.cols, row, bytes.data());
    const WeightTensor file_row{spec->source, bytes.data(), 1, w.cols, w.name};
    switch (spec->source) {
      case DType::f32: std::memcpy(out, bytes.data(), w.cols * sizeof(float)); return true;
      case DType::f16:
        for (std::size_t c = 0; c < w.cols; ++c) out[c] = to_float(file_row.as<f16>()[c]);
        return true;
      case DType::bf16:
        for (std::size_t c = 0; c < w.cols; ++c) out[c] = to_float(file_row.as<bf16>()[c]);
        return true;
      default: return dequantize_quantized_row(file_row, 0, out);
    }
  }
  switch (w.type) {
    case DType::q8_0: dequantize_blocks<BlockQ8_0, kQK8_0>(w, row, out); return true;
    case DType::q4_0: dequantize_blocks<BlockQ4_0, kQK4_0>(w, row, out); return true;
    case DType::q4_1: dequantize_blocks<BlockQ4_1, kQK4_1>(w, row, out); return true;
    case DType::q4_k: dequantize_blocks<BlockQ4_K, kQK_K>(w, row, out); return true;
    case DType::q5_k: dequantize_blocks<BlockQ5_K, kQK_K>(w, row, out); return true;
    case DType::q6_k: dequantize_blocks<BlockQ6_K, kQK_K>(w, row, out); return true;
    default: return false;
  }
}

// The same for a runtime-typed weight. Quantized weights are dequantized one row at a time to
// float32 and dotted with the (unquantized) activations: the exact reference of every fast
// integer kernel.
inline void matmul(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) {
  switch (w.type) {
    case DType::f32: return matmul(w.as<float>(), w.rows, w.cols, x, n_tokens, y);
    case DType::f16: return matmul(w.as<f16>(), w.rows, w.cols, x, n_tokens, y);
    case DType::bf16: return matmul(w.as<bf16>(), w.rows, w.cols, x, n_tokens, y);
    default: {
      std::vector<float> row(w.cols);  // [cols]
      for (std::size_t r = 0; r < w.rows; ++r) {
        if (!dequantize_quantized_row(w, r, row.data()))
          throw Error(ErrorKind::unsupported,
                      "no reference matmul for weight type " + dtype_name(w.type), {}, w.name);
        for (std::size_t t = 0; t < n_tokens; ++t) {
          const float* xt = x + t * w.cols;
          float sum = 0.0f;
          for (std::size_t c = 0; c < w.cols; ++c) sum += row[c] * xt[c];
          y[t * w.rows + r] = sum;
        }
      }
      return;
    }
  }
}

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i].   x, weight, out: [n]
inline void rms_norm(const float* x, const float* weight, std::size_t n, float eps, float* out) {
  double sum_squares = 0.0;  // double: n can be 8192 and the mean must not lose the small terms
  for (std::size_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const float inv_rms =
      static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps));
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * weight[i];
}

// out[i] = (x[i] − mean) / sqrt(var + eps) · weight[i] + bias[i] (LayerNorm, Ba et al. 2016;
// no bias term when bias is nullptr), mean and biased var over the n values, in double.
inline void layer_norm(const float* x, const float* weight, const float* bias, std::size_t n,
                       float eps, float* out) {
  double sum = 0.0, squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(n) + eps);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<float>((x[i] - mean) * inv_std * weight[i] +
                                (bias != nullptr ? bias[i] : 0.0f));
}

// x[i] = gelu(x[i]) = x/2 · (1 + erf(x/√2)) in place, the exact GELU (PyTorch's nn.GELU()),
// in double.   x: [n]
inline void gelu(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)));
  }
}

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).   gate, up, out: [n]
inline void silu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// out[i] = gelu(gate[i]) * up[i] (GeGLU) with GELU's tanh approximation, as Gemma and PyTorch's
// gelu(approximate="tanh"): gelu(g) = g/2 · (1 + tanh z), z = sqrt(2/pi) · (g + 0.044715 g^3),
// computed as g / (1 + e^-2z), the same value without 1 + tanh z's cancellation for g < 0.
inline void gelu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i], z = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + std::exp(-2.0f * z)) * up[i];
  }
}

// x[i] = cap · tanh(x[i] / cap), in place: Gemma 2's final-logit soft-capping.   x: [n]
inline void soft_cap(float* x, std::size_t n, float cap) {
  for (std::size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
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
// out = sum_j softmax(scoring(q·k_j)) v_j, computed tile by tile so no score row is stored.
// q: [head_dim], keys, values: [n_keys][head_dim], out: [head_dim]
template <class KV>
void attend_head(const float* q, const KV* keys, const KV* values, std::size_t n_keys,
                 std::size_t head_dim, AttentionScoring scoring, float* out) {
  float scores[kAttentionTile];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + head_dim, 0.0f);
  for (std::size_t start = 0; start < n_keys; start += kAttentionTile) {
    const std::size_t count = std::min(kAttentionTile, n_keys - start);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < count; ++j) {
      const KV* k = kv_row(keys, start + j, head_dim);
      float dot = 0.0f;
      for (std::size_t d = 0; d < head_dim; ++d) dot += q[d] * kv_value(k, d);
      scores[j] = scoring(dot);
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
      const KV* v = kv_row(values, start + j, head_dim);
      for (std::size_t d = 0; d < head_dim; ++d) out[d] += p * kv_value(v, d);
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
      if (dequantize_quantized_row(w, row, out)) return;
      throw Error(ErrorKind::unsupported, "no dequantization for weight type " + dtype_name(w.type),
                  {}, w.name);
  }
}

}  // namespace hllm::reference
