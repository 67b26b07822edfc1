#pragma once
// The optional load-time scan for NaN and ±Inf in weights (LoadOptions::check_finite). A
// non-finite weight crashes nothing: it spreads through the activations and turns logits into
// NaN or noise, with no error. Finding it means reading every byte of every tensor, so loaders
// only scan when asked.
//
// Plain float tensors are checked bit by bit (an all-ones exponent), so the scan means the same
// under -ffast-math. Quantized tensors are dequantized block by block, exactly as the model reads
// them, so a NaN or infinite block scale (or min) is found at the first element it spoils.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/reference.hpp"

namespace hllm {

// The first non-finite element of `w` (row-major index, row * cols + column), or nullopt.
// `w.data` may be unaligned. Throws unsupported for a type that cannot be read.
inline std::optional<std::size_t> first_non_finite(const WeightTensor& w) {
  const auto* bytes = static_cast<const std::byte*>(w.data);
  const std::size_t n = w.rows * w.cols;
  auto scan_bits = [&](auto bits_type, auto exponent_mask) -> std::optional<std::size_t> {
    using Bits = decltype(bits_type);
    for (std::size_t i = 0; i < n; ++i) {
      Bits b;
      std::memcpy(&b, bytes + i * sizeof(Bits), sizeof(Bits));
      if ((b & exponent_mask) == exponent_mask) return i;
    }
    return std::nullopt;
  };
  switch (w.type) {
    case DType::f32: return scan_bits(std::uint32_t{}, std::uint32_t{0x7f800000u});
    case DType::f16: return scan_bits(std::uint16_t{}, std::uint16_t{0x7c00u});
    case DType::bf16: return scan_bits(std::uint16_t{}, std::uint16_t{0x7f80u});
    default: break;
  }
  std::vector<float> row(w.cols);
  for (std::size_t r = 0; r < w.rows; ++r) {
    if (!reference::dequantize_quantized_row(w, r, row.data()))
      throw Error(ErrorKind::unsupported, "cannot check weights of type " + dtype_name(w.type), {},
                  w.name);
    for (std::size_t c = 0; c < w.cols; ++c) {
      std::uint32_t b;
      std::memcpy(&b, &row[c], 4);
      if ((b & 0x7f800000u) == 0x7f800000u) return r * w.cols + c;
    }
  }
  return std::nullopt;
}

namespace detail {

// Element `index` of `w` as float32, as the model reads it.
inline float weight_value(const WeightTensor& w, std::size_t index) {
  const auto* bytes = static_cast<const std::byte*>(w.data);
  std::uint32_t b32 = 0;
  std::uint16_t b16 = 0;
  switch (w.type) {
    case DType::f32: {
      std::memcpy(&b32, bytes + 4 * index, 4);
      float v;
      std::memcpy(&v, &b32, 4);
      return v;
    }
    case DType::f16: std::memcpy(&b16, bytes + 2 * index, 2); return f16::from_bits(b16).to_float();
    case DType::bf16:
      std::memcpy(&b16, bytes + 2 * index, 2);
      return bf16::from_bits(b16).to_float();
    default: {
      std::vector<float> row(w.cols);
      reference::dequantize_quantized_row(w, index / w.cols, row.data());
      return row[index % w.cols];
    }
  }
}

}  // namespace detail

// Throws Error(format) if `w` holds a NaN or an infinity, naming `file` and `tensor` (the name in
// the file, which may differ from w.name), the element (index, row, column, value) and, if
// `data_offset` (the file offset of w's first byte) is known, the byte offset of the element or
// of the quantized block that holds it.
inline void check_finite(const WeightTensor& w, const std::string& file, const std::string& tensor,
                         std::optional<std::uint64_t> data_offset) {
  const std::optional<std::size_t> bad = first_non_finite(w);
  if (!bad) return;
  DTypeInfo info{};
  dtype_info(w.type, info);
  const float value = detail::weight_value(w, *bad);
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const char* what = (bits & 0x007fffffu) != 0 ? "NaN" : (bits >> 31 ? "-Inf" : "+Inf");
  std::optional<std::uint64_t> offset;
  if (data_offset) offset = *data_offset + *bad / info.block_elements * info.block_bytes;
  throw Error(ErrorKind::format,
              std::string("non-finite weight: element ") + std::to_string(*bad) + " (row " +
                  std::to_string(*bad / w.cols) + ", column " + std::to_string(*bad % w.cols) +
                  ") of this " + dtype_name(w.type) + " tensor is " + what,
              file, tensor, offset);
}

}  // namespace hllm
