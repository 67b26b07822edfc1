#pragma once
// The element types a KV cache may hold, and how one cached row (the head_dim keys or values of
// one token and one KV head) is laid out in each. float, f16 and bf16 hold one value per
// element. BlockQ8_0 holds 32 values per element (ggml's Q8_0 block: an f16 scale and 32
// int8), so a row of head_dim values is head_dim / 32 blocks: 8.5 bits per value, 53% of f16's
// bytes, which is what long contexts make the cache's reads cost in decode.

#include <cstddef>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"

namespace hllm {

template <class KV>
inline constexpr bool is_kv_element_v = std::is_same_v<KV, float> || std::is_same_v<KV, f16> ||
                                        std::is_same_v<KV, bf16> || std::is_same_v<KV, BlockQ8_0>;

// The element types by name, to choose one at run time (SessionOptions::kv_type).
enum class KVType { f32, f16, bf16, q8_0 };

template <class KV>
constexpr KVType kv_type_of() noexcept {
  static_assert(is_kv_element_v<KV>, "KV cache type must be float, f16, bf16 or BlockQ8_0");
  if constexpr (std::is_same_v<KV, f16>)
    return KVType::f16;
  else if constexpr (std::is_same_v<KV, bf16>)
    return KVType::bf16;
  else if constexpr (std::is_same_v<KV, BlockQ8_0>)
    return KVType::q8_0;
  else
    return KVType::f32;
}

// "f32", "f16", "bf16" or "q8_0": the names llama.cpp's --cache-type-k takes.
constexpr const char* to_string(KVType type) noexcept {
  switch (type) {
    case KVType::f16: return "f16";
    case KVType::bf16: return "bf16";
    case KVType::q8_0: return "q8_0";
    default: return "f32";
  }
}

// The type to_string names, or nothing for any other text.
constexpr std::optional<KVType> kv_type_from_name(std::string_view name) noexcept {
  for (const KVType type : {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0})
    if (name == to_string(type)) return type;
  return std::nullopt;
}

// f.template operator()<KV>() for the element type `type` names: where a run-time KVType picks
// one of the typed instantiations (AnyKVCache, AnyPagedKVStorage).
template <class F>
decltype(auto) with_kv_element(KVType type, F&& f) {
  switch (type) {
    case KVType::f16: return f.template operator()<f16>();
    case KVType::bf16: return f.template operator()<bf16>();
    case KVType::q8_0: return f.template operator()<BlockQ8_0>();
    case KVType::f32: return f.template operator()<float>();
  }
  throw Error(ErrorKind::invalid_argument,
              "KV cache type " + std::to_string(static_cast<int>(type)) + " is not a KVType");
}

// Values one element holds.
template <class KV>
inline constexpr std::size_t kv_values_per_element = std::is_same_v<KV, BlockQ8_0> ? kQK8_0 : 1;

// Elements of one row of head_dim values (head_dim is a multiple of kv_values_per_element: the
// cache checks it).
template <class KV>
constexpr std::size_t kv_row_elements(std::size_t head_dim) noexcept {
  return head_dim / kv_values_per_element<KV>;
}

// Throws unsupported unless rows of head_dim values are whole elements (a Q8_0 row is whole
// 32-value blocks): the check of every cache that holds KV rows.
template <class KV>
void check_kv_head_dim(std::size_t head_dim) {
  if (head_dim % kv_values_per_element<KV> != 0)
    throw Error(ErrorKind::unsupported,
                "a Q8_0 KV cache needs head_dim to be a multiple of 32 (head dim " +
                    std::to_string(head_dim) + ")");
}

// The product of caller-chosen counts of KV elements, refused before it could wrap to a small
// buffer: Error(capacity, what + " overflows the address space"). The factor 2 of headroom
// covers a cache's keys and values; the rest leaves room for the bytes.
template <class KV>
std::size_t checked_kv_elements(std::initializer_list<std::size_t> factors,
                                const std::string& what) {
  std::size_t product = 1;
  for (const std::size_t factor : factors) {
    if (factor > std::numeric_limits<std::size_t>::max() / 2 / sizeof(KV) / product)
      throw Error(ErrorKind::capacity, what + " overflows the address space");
    product *= factor;
  }
  return product;
}

// Row j of consecutive cached rows.   rows: [n][head_dim] values
template <class KV>
constexpr const KV* kv_row(const KV* rows, std::size_t j, std::size_t head_dim) noexcept {
  return rows + j * kv_row_elements<KV>(head_dim);
}

// Value d of a row as float: what every attention kernel's reading of the cache must equal.
template <class KV>
constexpr float kv_value(const KV* row, std::size_t d) noexcept {
  return to_float(row[d]);
}
inline float kv_value(const BlockQ8_0* row, std::size_t d) noexcept {
  const BlockQ8_0& block = row[d / kQK8_0];
  return to_float(block.d) * static_cast<float>(block.qs[d % kQK8_0]);
}

// Writes head_dim values as one row: rounded to nearest for f16/bf16, quantized per 32 values
// (ggml's reference Q8_0 rounding) for BlockQ8_0.   x: [head_dim]
template <class KV>
void store_kv_row(const float* x, std::size_t head_dim, KV* row) noexcept {
  if constexpr (std::is_same_v<KV, BlockQ8_0>) {
    for (std::size_t b = 0; b < head_dim / kQK8_0; ++b) quantize_block_q8_0(x + b * kQK8_0, row[b]);
  } else {
    for (std::size_t d = 0; d < head_dim; ++d) row[d] = from_float<KV>(x[d]);
  }
}

}  // namespace hllm
