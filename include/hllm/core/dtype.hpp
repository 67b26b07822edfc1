#pragma once
// Element types of weight tensors, numbered as GGUF numbers them (ggml_type), so a tensor type
// read from a file maps to this enum without a translation table; and the sizes of the file
// types' blocks. dtype_info, dtype_name and file_type_of, which also cover the repacked layouts,
// are in core/layouts.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hllm/core/error.hpp"

namespace hllm {

enum class DType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  bf16 = 30,
  // Not file types: the layouts a load repacks weights into, each declared with its unit, packer
  // and read-back in core/layouts.hpp (the layout registry). Numbered past every ggml type; the
  // GGUF reader and writer refuse them (DTypeInfo::in_files).
  q4_0_x8 = 0x10000 | 2,
  q8_0_x8 = 0x10000 | 8,
  q4_k_x8 = 0x10000 | 12,
  q6_k_x8 = 0x10000 | 14,
  bf16_x16 = 0x10000 | 30,
  q4_0_x16 = 0x20000 | 2,
  q4_1_x16 = 0x20000 | 3,
  q8_0_x16 = 0x20000 | 8,
  q4_k_x16 = 0x20000 | 12,
  q6_k_x16 = 0x20000 | 14,
  q5_k_x16 = 0x20000 | 13,
  f32_x16 = 0x20000 | 0,
  f16_x16 = 0x20000 | 1,
};

struct DTypeInfo {
  const char* name;
  std::size_t block_elements;  // elements per block (1 for plain float types)
  std::size_t block_bytes;     // bytes per block
  bool in_files = true;  // false: an in-memory layout only, never read from or written to a file
};

// The types a file may hold, in the order tools list them.
inline constexpr DType kFileTypes[] = {DType::f32,  DType::f16,  DType::bf16,
                                       DType::q8_0, DType::q4_0, DType::q4_1,
                                       DType::q4_k, DType::q5_k, DType::q6_k};

// Block sizes of the file types, from the GGUF specification: q8_0 = f16 scale + 32 int8; q4_0 =
// f16 scale + 16 bytes of nibbles; q4_1 adds an f16 min; q4_k, q5_k and q6_k are 256-element
// super-blocks. The repacked layouts' are in core/layouts.hpp (dtype_info covers both).
constexpr bool file_dtype_info(DType type, DTypeInfo& info) noexcept {
  switch (type) {
    case DType::f32: info = {"F32", 1, 4}; return true;
    case DType::f16: info = {"F16", 1, 2}; return true;
    case DType::bf16: info = {"BF16", 1, 2}; return true;
    case DType::q4_0: info = {"Q4_0", 32, 18}; return true;
    case DType::q4_1: info = {"Q4_1", 32, 20}; return true;
    case DType::q8_0: info = {"Q8_0", 32, 34}; return true;
    case DType::q4_k: info = {"Q4_K", 256, 144}; return true;
    case DType::q5_k: info = {"Q5_K", 256, 176}; return true;
    case DType::q6_k: info = {"Q6_K", 256, 210}; return true;
    default: return false;
  }
}
constexpr DTypeInfo file_dtype_info(DType type) noexcept {
  DTypeInfo info{"", 0, 0};
  file_dtype_info(type, info);
  return info;
}

// The type named `name` in either case ("q8_0" or "Q8_0"); throws for an unknown name.
inline DType parse_dtype(std::string_view name) {
  for (DType t : kFileTypes) {
    const std::string_view canonical = file_dtype_info(t).name;
    bool same = canonical.size() == name.size();
    for (std::size_t i = 0; same && i < name.size(); ++i)
      same = canonical[i] == (name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i]);
    if (same) return t;
  }
  throw Error(ErrorKind::invalid_argument, "unknown tensor type '" + std::string(name) + "'");
}

}  // namespace hllm
