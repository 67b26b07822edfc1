#pragma once
// FP8 E4M3 values and the FP8 KV block (not a GGUF type: only the KV cache holds it). E4M3 is
// the "E4M3FN" of the OCP 8-bit floating point format (PyTorch's float8_e4m3fn): a sign, 4
// exponent bits with bias 7 and 3 mantissa bits, so exponent field e > 0 is (1 + m/8)·2^(e−7),
// e = 0 the subnormals (m/8)·2^-6, the largest finite value 448 (S.1111.110) and no infinity.
// The format's NaN, S.1111.111, is never written here: conversion from float saturates at ±448
// and turns NaN into +0. Reading it gives ±480 (its bits taken as a normal number, which is what
// the fast decode below does; nothing in this library stores it).

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hllm/core/half.hpp"

namespace hllm {

inline constexpr std::size_t kQKFP8 = 32;

// The IEEE f16 whose value is E4M3 byte b's value times 2^-8, subnormals included: the sign
// moves to bit 15 and the 7 bits of exponent and mantissa to bits 7..13, where they become f16's
// exponent (bias 15 = 7 + 8) and the top of its mantissa. Why: one shift and mask per value, then
// the hardware's f16 conversion (vcvtph2ps), is a vector decode with no table.
constexpr std::uint16_t e4m3_to_f16_bits(std::uint8_t b) noexcept {
  return static_cast<std::uint16_t>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
}

// E4M3 byte b as float: exact.
constexpr float e4m3_to_float(std::uint8_t b) noexcept {
  return detail::f16_bits_to_float(e4m3_to_f16_bits(b)) * 256.0f;
}

// value → the nearest E4M3 byte, ties to even, saturating at ±448 (infinities included), NaN
// → +0; subnormals exact.
constexpr std::uint8_t e4m3_from_float(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint8_t sign = static_cast<std::uint8_t>((x >> 24) & 0x80u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0;              // NaN
  if (abs >= 0x43e00000u) return sign | 0x7eu;  // 448 and beyond: saturate
  const std::uint32_t exponent = abs >> 23;     // biased float exponent
  if (exponent < 121) {
    // Below 2^-6: a subnormal (or zero) of value M·2^(exponent − 150), M the mantissa with its
    // implicit bit, i.e. M >> (141 − exponent) units of 2^-9, rounded to nearest even. A carry
    // to 8 units is 2^-6, the smallest normal's code 0x08.
    const std::uint32_t shift = 141 - exponent;
    if (shift >= 25) return sign;  // below half the smallest subnormal (2^-10): rounds to zero
    const std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t result = m >> shift;
    const std::uint32_t remainder = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint8_t>(sign | result);
  }
  // Normal: keep 3 of the 23 mantissa bits; adding 2^19 − 1 plus the lowest kept bit rounds to
  // nearest, ties to even, and a carry moves into the exponent. Below 448 the result stays at
  // most 0x7e (448 itself): the largest float below 448 rounds to it.
  const std::uint32_t rounded = (abs + 0x7ffffu + ((abs >> 20) & 1u)) >> 20;
  return static_cast<std::uint8_t>(sign | (rounded - ((127u - 7u) << 3)));
}

// value[i] = d · e4m3(qs[i]): 32 values in 34 bytes, 8.5 bits per value (Q8_0's size) with a
// floating-point spread inside the block, so small values keep their relative precision.
struct BlockFP8 {
  f16 d;
  std::uint8_t qs[kQKFP8];
};
static_assert(sizeof(BlockFP8) == 34, "BlockFP8: an f16 scale and 32 bytes");

// x: [32] → y: d = max|x| / 448 (so the largest magnitude lands on E4M3's largest finite value),
// stored as f16, and each x / d (the stored d: what the decode multiplies by) rounded to the
// nearest E4M3, ties to even. The f16 rounding of d may put x / d up to 2^-11 past 448: that
// saturates to 448, within half an E4M3 step of the exact quotient.
inline void quantize_block_fp8(const float* x, BlockFP8& y) {
  float amax = 0.0f;
  for (std::size_t j = 0; j < kQKFP8; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  y.d = f16::from_float(amax / 448.0f);
  const float d = y.d.to_float();
  for (std::size_t j = 0; j < kQKFP8; ++j) y.qs[j] = d != 0.0f ? e4m3_from_float(x[j] / d) : 0;
}

// Value j of a block.
inline float fp8_value(const BlockFP8& block, std::size_t j) noexcept {
  return to_float(block.d) * e4m3_to_float(block.qs[j]);
}

}  // namespace hllm
