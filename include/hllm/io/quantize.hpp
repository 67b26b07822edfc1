#pragma once
// Float32 → Q8_0 / Q4_0 quantizers, round-to-nearest exactly as ggml's reference
// quantize_row_q8_0_ref / quantize_row_q4_0_ref, for writing test models and small conversions.
// (They are not the importance-weighted quantizers llama-quantize uses for k-quants.)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/quant_blocks.hpp"

namespace hllm::quant {

// x: [n], n a multiple of 32; y: [n / 32]
inline void quantize_row_q8_0(const float* x, std::size_t n, BlockQ8_0* y) {
  require(n % kQK8_0 == 0,
          "quantize_row_q8_0: n = " + std::to_string(n) + " is not a multiple of 32");
  for (std::size_t i = 0; i < n / kQK8_0; ++i) quantize_block_q8_0(x + i * kQK8_0, y[i]);
}

// x: [n], n a multiple of 32; y: [n / 32]. The scale maps the value of largest magnitude to -8,
// so the full 16-level range is used on the side where that value lies.
inline void quantize_row_q4_0(const float* x, std::size_t n, BlockQ4_0* y) {
  require(n % kQK4_0 == 0,
          "quantize_row_q4_0: n = " + std::to_string(n) + " is not a multiple of 32");
  for (std::size_t i = 0; i < n / kQK4_0; ++i) quantize_block_q4_0(x + i * kQK4_0, y[i]);
}

// Quantizes a row-major [rows][cols] float matrix to `type` (f32, f16, bf16, q8_0, q4_0) and
// returns its bytes in GGUF layout.
inline std::vector<std::byte> quantize(DType type, std::span<const float> values) {
  std::vector<std::byte> out;
  auto store = [&](auto* blocks, std::size_t count) {
    out.resize(count * sizeof(*blocks));
    std::memcpy(out.data(), blocks, out.size());
  };
  switch (type) {
    case DType::f32: {
      out.resize(values.size() * 4);
      if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
      return out;
    }
    case DType::f16:
    case DType::bf16: {
      std::vector<std::uint16_t> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i)
        bits[i] =
            type == DType::f16 ? f16::from_float(values[i]).bits : bf16::from_float(values[i]).bits;
      store(bits.data(), bits.size());
      return out;
    }
    case DType::q8_0: {
      std::vector<BlockQ8_0> blocks(values.size() / kQK8_0);
      quantize_row_q8_0(values.data(), values.size(), blocks.data());
      store(blocks.data(), blocks.size());
      return out;
    }
    case DType::q4_0: {
      std::vector<BlockQ4_0> blocks(values.size() / kQK4_0);
      quantize_row_q4_0(values.data(), values.size(), blocks.data());
      store(blocks.data(), blocks.size());
      return out;
    }
    default: throw Error(ErrorKind::unsupported, "no quantizer for " + dtype_name(type));
  }
}

}  // namespace hllm::quant
