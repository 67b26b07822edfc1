#pragma once
// IEEE binary16 (`f16`) and bfloat16 (`bf16`) storage types, bit-for-bit the GGUF F16 and BF16
// element layouts. Conversion from float rounds to nearest, ties to even (what hardware
// converters and PyTorch do), keeps NaN a quiet NaN, and handles subnormals exactly. The types
// are storage only: arithmetic happens in float.

#include <bit>
#include <cstdint>
#include <type_traits>

namespace hllm {

namespace detail {

constexpr std::uint16_t float_to_f16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    // Quiet NaN, keeping the top payload bits so NaN-boxing survives where it can.
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = 65504 + half an ulp: from here on, round-to-nearest-even gives infinity.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  const std::uint32_t exponent = abs >> 23;  // biased float exponent
  const std::uint32_t mantissa = abs & 0x7fffffu;
  if (exponent < 113) {
    // Result is a half subnormal (or zero): value = M * 2^(exponent - 150) with the implicit
    // bit in M, i.e. M >> (126 - exponent) units of 2^-24, rounded to nearest even.
    const std::uint32_t shift = 126 - exponent;
    if (shift >= 25) return sign;  // below half the smallest subnormal: rounds to zero
    const std::uint32_t m = mantissa | 0x800000u;
    std::uint32_t result = m >> shift;
    const std::uint32_t remainder = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);  // a carry into bit 10 is the right normal
  }
  std::uint32_t result = ((exponent - 112) << 10) | (mantissa >> 13);
  const std::uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;  // carry is fine
  return static_cast<std::uint16_t>(sign | result);
}

constexpr float f16_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalise so the leading 1 becomes the implicit bit.
  std::uint32_t float_exponent = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return std::bit_cast<float>(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

constexpr std::uint16_t float_to_bf16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; overflow carries
  // into the exponent and lands on infinity exactly when it should.
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

struct f16 {
  std::uint16_t bits = 0;
  static constexpr f16 from_bits(std::uint16_t b) noexcept { return f16{b}; }
  static constexpr f16 from_float(float v) noexcept { return f16{detail::float_to_f16_bits(v)}; }
  constexpr float to_float() const noexcept { return detail::f16_bits_to_float(bits); }
  friend constexpr bool operator==(f16, f16) = default;
};

struct bf16 {
  std::uint16_t bits = 0;
  static constexpr bf16 from_bits(std::uint16_t b) noexcept { return bf16{b}; }
  static constexpr bf16 from_float(float v) noexcept { return bf16{detail::float_to_bf16_bits(v)}; }
  constexpr float to_float() const noexcept { return detail::bf16_bits_to_float(bits); }
  friend constexpr bool operator==(bf16, bf16) = default;
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "GGUF F16/BF16 elements are 2 bytes");

// Uniform element access for templated code: to_float(x) and from_float<T>(v) for every
// floating-point element type the model can hold.
constexpr float to_float(float v) noexcept { return v; }
constexpr float to_float(f16 v) noexcept { return v.to_float(); }
constexpr float to_float(bf16 v) noexcept { return v.to_float(); }

template <class T>
constexpr T from_float(float v) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return T::from_float(v);
  }
}

}  // namespace hllm
