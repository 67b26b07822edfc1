#pragma once
// Element types of weight tensors, numbered as GGUF numbers them (ggml_type), so a tensor type
// read from a file maps to this enum without a translation table.

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
  // Not file types: Q4_0, Q8_0, Q4_K and Q6_K repacked at load time with 8 rows interleaved block
  // by block (Interleaved8 in quant_blocks.hpp), for the decode kernels; the same four, Q4_1 and
  // Q5_K in 16-row panels (Interleaved16), for the VNNI decode and GEMM, where the shape allows;
  // and BF16 in 16-row column-pair panels (bf16_panels.hpp), for the BF16 GEMM and decode; F32
  // and F16 in 16-row panels (float_panels.hpp), for the FP32 GEMM and decode. Numbered past
  // every ggml type; the GGUF reader and writer refuse them (DTypeInfo::in_files).
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

// Block sizes from the GGUF specification: q8_0 = f16 scale + 32 int8; q4_0 = f16 scale + 16
// bytes of nibbles; q4_1 adds an f16 min; q4_k, q5_k and q6_k are 256-element super-blocks.
inline bool dtype_info(DType type, DTypeInfo& info) noexcept {
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
    // Same bytes per block as their source types; `rows` must be a multiple of 8.
    case DType::q4_0_x8: info = {"Q4_0_X8", 32, 18, false}; return true;
    case DType::q8_0_x8: info = {"Q8_0_X8", 32, 34, false}; return true;
    // The 6-bit scales unpacked to bytes: 1184 bytes per 8 rows' super-block.
    case DType::q4_k_x8: info = {"Q4_K_X8", 256, 148, false}; return true;
    case DType::q6_k_x8: info = {"Q6_K_X8", 256, 210, false}; return true;
    // A column pair of one row is the unit: `rows` a multiple of 16, `cols` even.
    case DType::bf16_x16: info = {"BF16_X16", 2, 4, false}; return true;
    // Same bytes per block as their source types; `rows` a multiple of 16, blocks per row even.
    case DType::q4_0_x16: info = {"Q4_0_X16", 32, 18, false}; return true;
    case DType::q8_0_x16: info = {"Q8_0_X16", 32, 34, false}; return true;
    case DType::q4_1_x16: info = {"Q4_1_X16", 32, 20, false}; return true;
    // As Q4_K_X8; `rows` a multiple of 16.
    case DType::q4_k_x16: info = {"Q4_K_X16", 256, 148, false}; return true;
    // 3392 bytes per 16 rows' super-block: the file's 210 per row, padded to whole cache lines.
    case DType::q6_k_x16: info = {"Q6_K_X16", 256, 212, false}; return true;
    // Q4_K_X16 with the fifth bits: 2880 bytes per 16 rows' super-block.
    case DType::q5_k_x16: info = {"Q5_K_X16", 256, 180, false}; return true;
    // `rows` a multiple of 16.
    case DType::f32_x16: info = {"F32_X16", 1, 4, false}; return true;
    case DType::f16_x16: info = {"F16_X16", 1, 2, false}; return true;
  }
  return false;
}

inline std::string dtype_name(DType type) {
  DTypeInfo info{};
  if (dtype_info(type, info)) return info.name;
  return "type#" + std::to_string(static_cast<std::uint32_t>(type));
}

// The file type a weight came from: the source type of a repacked layout, else the type itself.
constexpr DType file_type_of(DType type) noexcept {
  switch (type) {
    case DType::q4_0_x8: return DType::q4_0;
    case DType::q8_0_x8: return DType::q8_0;
    case DType::q4_k_x8: return DType::q4_k;
    case DType::q6_k_x8: return DType::q6_k;
    case DType::bf16_x16: return DType::bf16;
    case DType::q4_0_x16: return DType::q4_0;
    case DType::q4_1_x16: return DType::q4_1;
    case DType::q8_0_x16: return DType::q8_0;
    case DType::q4_k_x16: return DType::q4_k;
    case DType::q6_k_x16: return DType::q6_k;
    case DType::q5_k_x16: return DType::q5_k;
    case DType::f32_x16: return DType::f32;
    case DType::f16_x16: return DType::f16;
    default: return type;
  }
}

// Whether a quantized type keeps at most 6 bits per weight, so its own rounding is at least as
// coarse as that of 8-bit activations: a product with such weights may take 8-bit activations
// without moving the result by more than the weights already do. Llama::forward decides the
// output projection's path with it (and repack_weights which output to interleave).
constexpr bool is_at_most_6_bit(DType type) noexcept {
  switch (file_type_of(type)) {
    case DType::q4_0:
    case DType::q4_1:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k: return true;
    default: return false;
  }
}

// The type named `name` in either case ("q8_0" or "Q8_0"); throws for an unknown name.
inline DType parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q8_0,
                  DType::q4_k, DType::q5_k, DType::q6_k}) {
    const std::string canonical = dtype_name(t);
    bool same = canonical.size() == name.size();
    for (std::size_t i = 0; same && i < name.size(); ++i)
      same = canonical[i] == (name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i]);
    if (same) return t;
  }
  throw Error(ErrorKind::invalid_argument, "unknown tensor type '" + std::string(name) + "'");
}

}  // namespace hllm
