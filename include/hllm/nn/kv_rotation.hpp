#pragma once
// The rotation of quantized KV caches (llama.cpp's "attention rotation"): keys and queries, and
// values and the attention output, are multiplied by an orthonormal Walsh–Hadamard matrix H
// before keys and values are stored. Attention is unchanged in exact arithmetic, since
// (Hq)·(Hk) = q·k and Σ p·(Hv) = H(Σ p·v) with H its own inverse, but a rotated row spreads a
// few large dimensions (the outliers some models' keys carry) over all of them, so a block
// quantizer's one scale per 32 values fits every value better. On SmolLM2-135M the Q4_0 cache's
// perplexity rise over f32 falls from 15% to about 4% (docs/performance.md).
//
// As llama.cpp (0c1e570): only for the quantized element types (Q8_0, Q4_0, FP8) and a head dim
// that is a multiple of 64; keys and queries in blocks of the largest power of two from 64 that
// divides the head dim, values and the output in blocks of 64.

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "hllm/core/kv_element.hpp"

namespace hllm {

struct KVRotation {
  std::size_t key_block = 0;    // 0: keys and queries are not rotated
  std::size_t value_block = 0;  // 0: values and the output are not rotated
  bool active() const noexcept { return key_block != 0; }
};

// The rotation a cache of element type KV with rows of head_dim values uses.
template <class KV>
constexpr KVRotation kv_rotation(std::size_t head_dim) noexcept {
  constexpr bool quantized = kv_values_per_element < KV >> 1;
  if (!quantized || head_dim == 0 || head_dim % 64 != 0) return {};
  std::size_t key_block = 64;
  while (head_dim % (key_block * 2) == 0) key_block *= 2;
  return {key_block, 64};
}

// x ← H x over each of the n / block consecutive blocks of `block` values (a power of two): the
// fast Walsh–Hadamard transform, scaled by 1/√block so H is orthonormal and its own inverse.
// H's row i, column j is (−1)^popcount(i & j) / √block (Sylvester's construction).   x: [n]
inline void hadamard_rotate(float* x, std::size_t n, std::size_t block) noexcept {
  const float scale = 1.0f / std::sqrt(static_cast<float>(block));
  for (std::size_t base = 0; base + block <= n; base += block) {
    float* v = x + base;
    for (std::size_t half = 1; half < block; half *= 2)
      for (std::size_t i = 0; i < block; i += 2 * half)
        for (std::size_t j = i; j < i + half; ++j) {
          const float a = v[j], b = v[j + half];
          v[j] = a + b;
          v[j + half] = a - b;
        }
    for (std::size_t i = 0; i < block; ++i) v[i] *= scale;
  }
}

}  // namespace hllm
