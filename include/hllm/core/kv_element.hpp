#pragma once
// The element types a KV cache may hold, and how one cached row (the head_dim keys or values of
// one token and one KV head) is laid out in each. float, f16 and bf16 hold one value per
// element. The block types hold 32 values per element, so a row of head_dim values is
// head_dim / 32 blocks: BlockQ8_0 (ggml's Q8_0: an f16 scale and 32 int8) and BlockFP8 (an f16
// scale and 32 FP8 E4M3 bytes, core/fp8.hpp) 34 bytes, 8.5 bits per value, 53% of f16's bytes;
// BlockQ4_0 (ggml's Q4_0: an f16 scale and 32 nibbles) 18 bytes, 4.5 bits per value, 28%. The
// bytes are what long contexts make the cache's reads cost in decode.

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "hllm/core/error.hpp"
#include "hllm/core/fp8.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"

namespace hllm {

template <class KV>
inline constexpr bool is_kv_element_v =
    std::is_same_v<KV, float> || std::is_same_v<KV, f16> || std::is_same_v<KV, bf16> ||
    std::is_same_v<KV, BlockQ8_0> || std::is_same_v<KV, BlockQ4_0> || std::is_same_v<KV, BlockFP8>;

// The element types by name, to choose one at run time (SessionOptions::kv_type). New types go
// at the end, so the numbers of the others stay.
enum class KVType { f32, f16, bf16, q8_0, q4_0, fp8 };

// Whether a cache keeps a value row of its own per token, KV head and layer, or reads the value
// from the key row of the same token: latent attention's cache (ModelConfig::kv_lora_rank),
// whose value is the latent part of the key row, holds each row once, half the memory and half
// the reads.
enum class KVValues { separate, keys };
// Rows a cache holds per token, KV head and layer: key and value, or the key alone.
constexpr std::size_t kv_row_parts(KVValues values) noexcept {
  return values == KVValues::separate ? 2 : 1;
}

// Every KVType, in the enum's order.
inline constexpr KVType kKVTypes[] = {KVType::f32,  KVType::f16,  KVType::bf16,
                                      KVType::q8_0, KVType::q4_0, KVType::fp8};

template <class KV>
constexpr KVType kv_type_of() noexcept {
  static_assert(is_kv_element_v<KV>,
                "KV cache type must be float, f16, bf16, BlockQ8_0, BlockQ4_0 or BlockFP8");
  if constexpr (std::is_same_v<KV, f16>)
    return KVType::f16;
  else if constexpr (std::is_same_v<KV, bf16>)
    return KVType::bf16;
  else if constexpr (std::is_same_v<KV, BlockQ8_0>)
    return KVType::q8_0;
  else if constexpr (std::is_same_v<KV, BlockQ4_0>)
    return KVType::q4_0;
  else if constexpr (std::is_same_v<KV, BlockFP8>)
    return KVType::fp8;
  else
    return KVType::f32;
}

// "f32", "f16", "bf16", "q8_0", "q4_0": the names llama.cpp's --cache-type-k takes for these
// types; and "fp8" for BlockFP8 (E4M3 with an f16 scale per 32 values), which llama.cpp lacks.
constexpr const char* to_string(KVType type) noexcept {
  switch (type) {
    case KVType::f16: return "f16";
    case KVType::bf16: return "bf16";
    case KVType::q8_0: return "q8_0";
    case KVType::q4_0: return "q4_0";
    case KVType::fp8: return "fp8";
    default: return "f32";
  }
}

// The type to_string names, or nothing for any other text.
constexpr std::optional<KVType> kv_type_from_name(std::string_view name) noexcept {
  for (const KVType type : kKVTypes)
    if (name == to_string(type)) return type;
  return std::nullopt;
}

// "f32, f16, bf16, q8_0, q4_0 or fp8": the names, for messages.
inline std::string kv_type_names() {
  std::string names;
  for (const KVType type : kKVTypes) {
    if (!names.empty()) names += type == kKVTypes[std::size(kKVTypes) - 1] ? " or " : ", ";
    names += to_string(type);
  }
  return names;
}

// f.template operator()<KV>() for the element type `type` names: where a run-time KVType picks
// one of the typed instantiations (AnyKVCache, AnyPagedKVStorage).
template <class F>
decltype(auto) with_kv_element(KVType type, F&& f) {
  switch (type) {
    case KVType::f16: return f.template operator()<f16>();
    case KVType::bf16: return f.template operator()<bf16>();
    case KVType::q8_0: return f.template operator()<BlockQ8_0>();
    case KVType::q4_0: return f.template operator()<BlockQ4_0>();
    case KVType::fp8: return f.template operator()<BlockFP8>();
    case KVType::f32: return f.template operator()<float>();
  }
  throw Error(ErrorKind::invalid_argument,
              "KV cache type " + std::to_string(static_cast<int>(type)) + " is not a KVType");
}

// Values one element holds.
template <class KV>
inline constexpr std::size_t kv_values_per_element = 1;
template <>
inline constexpr std::size_t kv_values_per_element<BlockQ8_0> = kQK8_0;
template <>
inline constexpr std::size_t kv_values_per_element<BlockQ4_0> = kQK4_0;
template <>
inline constexpr std::size_t kv_values_per_element<BlockFP8> = kQKFP8;

// Elements of one row of head_dim values (head_dim is a multiple of kv_values_per_element: the
// cache checks it).
template <class KV>
constexpr std::size_t kv_row_elements(std::size_t head_dim) noexcept {
  return head_dim / kv_values_per_element<KV>;
}

// Throws unsupported unless rows of head_dim values are whole elements (a row of a block type
// is whole 32-value blocks): the check of every cache that holds KV rows.
template <class KV>
void check_kv_head_dim(std::size_t head_dim) {
  if (head_dim % kv_values_per_element<KV> != 0)
    throw Error(ErrorKind::unsupported, std::string("a ") + to_string(kv_type_of<KV>()) +
                                            " KV cache needs head_dim to be a multiple of " +
                                            std::to_string(kv_values_per_element<KV>) +
                                            " (head dim " + std::to_string(head_dim) + ")");
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
inline float kv_value(const BlockQ4_0* row, std::size_t d) noexcept {
  const BlockQ4_0& block = row[d / kQK4_0];
  return to_float(block.d) * static_cast<float>(static_cast<int>(q4_0_code(block, d % kQK4_0)) - 8);
}
inline float kv_value(const BlockFP8* row, std::size_t d) noexcept {
  return fp8_value(row[d / kQKFP8], d % kQKFP8);
}

// Writes head_dim values as one row: rounded to nearest for f16/bf16, quantized per 32 values
// for the block types (ggml's reference Q8_0 and Q4_0 roundings; quantize_block_fp8).
// x: [head_dim]
template <class KV>
void store_kv_row(const float* x, std::size_t head_dim, KV* row) noexcept {
  constexpr std::size_t kValues = kv_values_per_element<KV>;
  for (std::size_t e = 0; e < head_dim / kValues; ++e) {
    if constexpr (std::is_same_v<KV, BlockQ8_0>)
      quantize_block_q8_0(x + e * kValues, row[e]);
    else if constexpr (std::is_same_v<KV, BlockQ4_0>)
      quantize_block_q4_0(x + e * kValues, row[e]);
    else if constexpr (std::is_same_v<KV, BlockFP8>)
      quantize_block_fp8(x + e * kValues, row[e]);
    else
      row[e] = from_float<KV>(x[e]);
  }
}

}  // namespace hllm
