#pragma once
// Types shared by the GGUF reader and writer: metadata value types (numbered as the GGUF
// specification numbers them), the tensor index entry, and little-endian byte helpers that are
// correct on any host (memcpy-free assembly from bytes, so unaligned reads are never UB).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hllm/core/dtype.hpp"

namespace hllm::gguf {

inline constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
inline constexpr std::uint32_t kVersion = 3;          // what the writer produces
inline constexpr std::size_t kDefaultAlignment = 32;
inline constexpr const char* kAlignmentKey = "general.alignment";

enum class ValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

inline const char* to_string(ValueType type) noexcept {
  switch (type) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "?";
}

inline bool is_valid(ValueType type) noexcept { return static_cast<std::uint32_t>(type) <= 12; }

inline bool is_integer(ValueType type) noexcept {
  switch (type) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64: return true;
    default: return false;
  }
}

// Bytes of one value of a fixed-size type; 0 for string and array (variable size).
inline std::size_t fixed_size(ValueType type) noexcept {
  switch (type) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64: return 8;
    default: return 0;
  }
}

struct TensorInfo {
  std::string name;
  DType type;
  std::vector<std::uint64_t> dims;  // GGUF order: dims[0] = innermost (columns)
  std::uint64_t offset;             // relative to the data section
  std::uint64_t size_bytes;
  const std::byte* data;  // into the file's bytes
};

namespace detail {

inline std::uint64_t load_le(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
inline std::uint16_t load_u16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(load_le(p, 2));
}
inline std::uint32_t load_u32(const std::byte* p) noexcept {
  return static_cast<std::uint32_t>(load_le(p, 4));
}
inline std::uint64_t load_u64(const std::byte* p) noexcept { return load_le(p, 8); }

inline void store_le(std::vector<std::byte>& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
}

}  // namespace detail
}  // namespace hllm::gguf
