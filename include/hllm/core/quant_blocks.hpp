#pragma once
// Quantized block layouts, bit-for-bit those of GGUF / ggml (ggml-common.h). A row of a
// quantized tensor is cols / block_elements consecutive blocks; blocks in a file are only 2-byte
// aligned, so code that reads them from raw bytes copies each block out (memcpy) first.

#include <cstddef>
#include <cstdint>

#include "hllm/core/dtype.hpp"
#include "hllm/core/half.hpp"

namespace hllm {

inline constexpr std::size_t kQK8_0 = 32;
inline constexpr std::size_t kQK4_0 = 32;
inline constexpr std::size_t kQK4_1 = 32;
inline constexpr std::size_t kQK_K = 256;  // k-quant super-block

// value[i] = d * qs[i]
struct BlockQ8_0 {
  f16 d;
  std::int8_t qs[kQK8_0];
};

// value[i] = d * (nibble_i - 8); byte j holds element j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
  f16 d;
  std::uint8_t qs[kQK4_0 / 2];
};

// value[i] = d * nibble_i + m, nibbles arranged as in Q4_0.
struct BlockQ4_1 {
  f16 d;
  f16 m;
  std::uint8_t qs[kQK4_1 / 2];
};

// 8 sub-blocks of 32: value = d * scale_j * nibble - dmin * min_j, with 6-bit scale_j and min_j
// packed into `scales` (see get_scale_min_k4 in the reference kernels). Each 32-byte group of
// qs holds sub-block 2g in its low nibbles and sub-block 2g+1 in its high nibbles.
struct BlockQ4_K {
  f16 d;
  f16 dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQK_K / 2];
};

// Q4_K with a fifth bit: value = d * scale_j * (nibble + 16·h) - dmin * min_j, where h is bit j
// of qh[l] for value l of sub-block j (same scales and nibble layout as Q4_K).
struct BlockQ5_K {
  f16 d;
  f16 dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};

// 16 sub-blocks of 16: value = d * scales[j] * (q - 32), q a 6-bit value whose low 4 bits are
// in ql and high 2 bits in qh.
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];
  std::uint8_t qh[kQK_K / 4];
  std::int8_t scales[kQK_K / 16];
  f16 d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "block structs must match the GGUF byte layouts (and DTypeInfo)");

// Activations quantized on the fly for the integer dot products of quantized weights: 32 values
// x[i] ≈ d * qs[i], with d = max|x| / 127 and qs rounded to nearest (ties to even), plus
// sum = Σ qs[i] for the weight formats whose values carry an offset or a minimum, and
// sum_lo = Σ qs[0..15] for Q6_K, whose scales and offsets cover 16 values. (Not a file format:
// d stays float32, unlike ggml's f16, because nothing is saved.)
struct BlockQ8Act {
  float d;
  std::int32_t sum;
  std::int32_t sum_lo;
  std::int8_t qs[32];
};
static_assert(sizeof(BlockQ8Act) == 44);

}  // namespace hllm
