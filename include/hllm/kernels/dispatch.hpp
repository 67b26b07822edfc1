#pragma once
// Run-time ISA dispatch for a header-only library. The kernel bodies (*-inl.hpp, no include
// guards) are included once per ISA, each time inside namespace hllm::kernels::<isa> and a
// target region (simd/target.hpp), so every ISA gets its own symbols and the linker never
// merges two ISAs' versions. A table of function pointers per ISA is chosen once from CPUID (or
// HLLM_ISA). Standard headers come first, never inside a target region.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/kernels/scratch.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/isa.hpp"
#include "hllm/simd/target.hpp"

#if HLLM_X86
// GCC 12's AVX-512 intrinsics initialise their "undefined" registers from themselves, which its
// own -Wuninitialized then reports at every use; the state at the header's lines decides, so
// the header is read with those two warnings off.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace hllm::kernels {

// y[t][r] for rows [row_begin, row_end) of w: [rows][cols], x: [n_tokens][cols], y:
// [n_tokens][rows]. scratch: matmul_scratch_bytes(cols, n_tokens) bytes, 64-byte aligned, that
// no other thread uses during the call (kernels/scratch.hpp); its contents are not kept.
using MatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols, const float* x,
                          std::size_t n_tokens, float* y, std::size_t row_begin,
                          std::size_t row_end, void* scratch);
// The same for quantized weights against activations quantized to x: [n_tokens][cols/32] blocks.
using QuantMatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols,
                               const BlockQ8Act* x, std::size_t n_tokens, float* y,
                               std::size_t row_begin, std::size_t row_end, void* scratch);
// x: [n] (n a multiple of 32) → out: [n/32] blocks
using QuantizeFn = void (*)(const float* x, std::size_t n, BlockQ8Act* out);
// x, weight, out: [n]
using RmsNormFn = void (*)(const float* x, const float* weight, std::size_t n, float eps,
                           float* out);
// RoPE in place: x: [n_heads][head_dim], the first rot_dims of each head rotated by the
// angles' cos, sin: [rot_dims/2] (see reference::rope).
using RopeFn = void (*)(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t rot_dims,
                        RopeLayout layout, const float* cos, const float* sin);
// out[i] = silu(gate[i]) · up[i].   gate, up, out: [n]
using SiluMulFn = void (*)(const float* gate, const float* up, std::size_t n, float* out);
// q: [head_dim], keys, values: [n_keys][head_dim] of the cache's element type (KV rows,
// core/kv_element.hpp), out: [head_dim]
using AttendHeadFn = void (*)(const float* q, const void* keys, const void* values,
                              std::size_t n_keys, std::size_t head_dim, float scale, float* out);
// `group` query heads that share one KV head: q, out: [group][head_dim].
using AttendGroupFn = void (*)(const float* q, const void* keys, const void* values,
                               std::size_t n_keys, std::size_t head_dim, std::size_t group,
                               float scale, float* out);

struct KernelTable {
  Isa isa;
  MatmulFn matmul_f32, matmul_f16, matmul_bf16;
  RmsNormFn rms_norm;
  SiluMulFn silu_mul;
  RopeFn rope;
  AttendHeadFn attend_head_f32, attend_head_f16, attend_head_bf16, attend_head_q8_0;
  AttendGroupFn attend_group_f32, attend_group_f16, attend_group_bf16, attend_group_q8_0;
  QuantizeFn quantize_activations;
  QuantMatmulFn matmul_q8_0, matmul_q4_0, matmul_q4_k, matmul_q5_k, matmul_q6_k;
  MatmulFn dequant_q8_0, dequant_q4_0, dequant_q4_1, dequant_q4_k, dequant_q5_k, dequant_q6_k;
  // BF16 weights against activations rounded to bf16 (vdpbf16ps), or nullptr where the CPU has
  // no AVX512-BF16. Not exact: Compute::matmul takes it, matmul_exact never does.
  MatmulFn matmul_bf16_dot;
  // Load-time repacked Q8_0 / Q4_0 / Q4_K / Q6_K (DType::*_x8): integer and exact
  // kernels, in every table, since a session may run any ISA on a repacked model.
  QuantMatmulFn matmul_q8_0_x8, matmul_q4_0_x8, matmul_q4_k_x8, matmul_q6_k_x8;
  MatmulFn dequant_q8_0_x8, dequant_q4_0_x8, dequant_q4_k_x8, dequant_q6_k_x8;
  // Load-time repacked BF16 (DType::bf16_x16): float32 activations in every table, and the
  // bf16-activation GEMM beside matmul_bf16_dot (nullptr without AVX512-BF16).
  MatmulFn matmul_bf16_x16, matmul_bf16_x16_dot;
  // Load-time repacked Q8_0 / Q4_0 / Q4_K / Q6_K in 16-row panels (DType::*_x16): as the *_x8
  // ones.
  QuantMatmulFn matmul_q8_0_x16, matmul_q4_0_x16, matmul_q4_k_x16, matmul_q6_k_x16;
  MatmulFn dequant_q8_0_x16, dequant_q4_0_x16, dequant_q4_k_x16, dequant_q6_k_x16;
  // Whether this table's kernels run the repacked types faster than the file's layout (VNNI);
  // loaders repack for it (LoadOptions::repack).
  bool prefers_interleaved = false;

  // The matmul for a weight type, or nullptr if this table has none (quantized types until
  // their kernels land: callers then use the reference path).
  MatmulFn matmul_for(DType type) const noexcept {
    switch (type) {
      case DType::f32: return matmul_f32;
      case DType::f16: return matmul_f16;
      case DType::bf16: return matmul_bf16;
      case DType::bf16_x16: return matmul_bf16_x16;
      default: return nullptr;
    }
  }
  // The float-activation matmul for a quantized weight type (dequantizing), or nullptr.
  MatmulFn dequant_matmul_for(DType type) const noexcept {
    switch (type) {
      case DType::q8_0: return dequant_q8_0;
      case DType::q4_0: return dequant_q4_0;
      case DType::q4_1: return dequant_q4_1;
      case DType::q4_k: return dequant_q4_k;
      case DType::q5_k: return dequant_q5_k;
      case DType::q6_k: return dequant_q6_k;
      case DType::q8_0_x8: return dequant_q8_0_x8;
      case DType::q4_0_x8: return dequant_q4_0_x8;
      case DType::q4_k_x8: return dequant_q4_k_x8;
      case DType::q6_k_x8: return dequant_q6_k_x8;
      case DType::q8_0_x16: return dequant_q8_0_x16;
      case DType::q4_0_x16: return dequant_q4_0_x16;
      case DType::q4_k_x16: return dequant_q4_k_x16;
      case DType::q6_k_x16: return dequant_q6_k_x16;
      default: return nullptr;
    }
  }
  // The integer-dot matmul for a quantized weight type, or nullptr.
  QuantMatmulFn quant_matmul_for(DType type) const noexcept {
    switch (type) {
      case DType::q8_0: return matmul_q8_0;
      case DType::q4_0: return matmul_q4_0;
      case DType::q4_k: return matmul_q4_k;
      case DType::q5_k: return matmul_q5_k;
      case DType::q6_k: return matmul_q6_k;
      case DType::q8_0_x8: return matmul_q8_0_x8;
      case DType::q4_0_x8: return matmul_q4_0_x8;
      case DType::q4_k_x8: return matmul_q4_k_x8;
      case DType::q6_k_x8: return matmul_q6_k_x8;
      case DType::q8_0_x16: return matmul_q8_0_x16;
      case DType::q4_0_x16: return matmul_q4_0_x16;
      case DType::q4_k_x16: return matmul_q4_k_x16;
      case DType::q6_k_x16: return matmul_q6_k_x16;
      default: return nullptr;
    }
  }
  template <class KV>
  AttendGroupFn attend_group_for() const noexcept {
    if constexpr (std::is_same_v<KV, f16>)
      return attend_group_f16;
    else if constexpr (std::is_same_v<KV, bf16>)
      return attend_group_bf16;
    else if constexpr (std::is_same_v<KV, BlockQ8_0>)
      return attend_group_q8_0;
    else
      return attend_group_f32;
  }
  template <class KV>
  AttendHeadFn attend_head_for() const noexcept {
    if constexpr (std::is_same_v<KV, f16>)
      return attend_head_f16;
    else if constexpr (std::is_same_v<KV, bf16>)
      return attend_head_bf16;
    else if constexpr (std::is_same_v<KV, BlockQ8_0>)
      return attend_head_q8_0;
    else
      return attend_head_f32;
  }
};

}  // namespace hllm::kernels

// quant_ns: where the integer-dot kernels come from (AVX-512 has a VNNI build beside it).
#define HLLM_KERNEL_TABLE(ns, quant_ns)                                                           \
  KernelTable {                                                                                   \
    Isa::ns, &ns::matmul_f32, &ns::matmul_f16, &ns::matmul_bf16, &ns::rms_norm, &ns::silu_mul,    \
        &ns::rope, &ns::attend_head_rows<float>, &ns::attend_head_rows<f16>,                      \
        &ns::attend_head_rows<bf16>, &ns::attend_head_rows<BlockQ8_0>,                            \
        &ns::attend_group_rows<float>, &ns::attend_group_rows<f16>, &ns::attend_group_rows<bf16>, \
        &ns::attend_group_rows<BlockQ8_0>, &ns::quantize_activations, &quant_ns::matmul_q8_0,     \
        &quant_ns::matmul_q4_0, &quant_ns::matmul_q4_k, &quant_ns::matmul_q5_k,                   \
        &quant_ns::matmul_q6_k, &ns::matmul_dequant<BlockQ8_0, kQK8_0>,                           \
        &ns::matmul_dequant<BlockQ4_0, kQK4_0>, &ns::matmul_dequant<BlockQ4_1, kQK4_1>,           \
        &ns::matmul_dequant<BlockQ4_K, kQK_K>, &ns::matmul_dequant<BlockQ5_K, kQK_K>,             \
        &ns::matmul_dequant<BlockQ6_K, kQK_K>, nullptr, &quant_ns::matmul_x8<BlockQ8_0>,          \
        &quant_ns::matmul_x8<BlockQ4_0>, &quant_ns::matmul_x8<BlockQ4_K>,                         \
        &quant_ns::matmul_x8<BlockQ6_K>, &ns::matmul_dequant<BlockQ8_0x8, kQK8_0>,                \
        &ns::matmul_dequant<BlockQ4_0x8, kQK4_0>, &ns::matmul_dequant<BlockQ4_Kx8, kQK_K>,        \
        &ns::matmul_dequant<BlockQ6_Kx8, kQK_K>, &ns::matmul_bf16_x16, nullptr,                   \
        &quant_ns::matmul_x16<BlockQ8_0>, &quant_ns::matmul_x16<BlockQ4_0>,                       \
        &quant_ns::matmul_x16<BlockQ4_K>, &quant_ns::matmul_x16<BlockQ6_K>,                       \
        &ns::matmul_dequant<BlockQ8_0x16, kQK8_0>, &ns::matmul_dequant<BlockQ4_0x16, kQK4_0>,     \
        &ns::matmul_dequant<BlockQ4_Kx16, kQK_K>, &ns::matmul_dequant<BlockQ6_Kx16, kQK_K>        \
  }

#define HLLM_ISA_LEVEL 0
#define HLLM_QUANT_VNNI 0
namespace hllm::kernels::scalar {
// The order matters (primitives first), so clang-format must not sort these.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::scalar
#undef HLLM_ISA_LEVEL

#if HLLM_X86
#define HLLM_ISA_LEVEL 1
HLLM_TARGET_AVX2_BEGIN
namespace hllm::kernels::avx2 {
// The order matters (primitives first), so clang-format must not sort these.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::avx2
HLLM_TARGET_END
#undef HLLM_ISA_LEVEL

#define HLLM_ISA_LEVEL 2
HLLM_TARGET_AVX512_BEGIN
namespace hllm::kernels::avx512 {
// The order matters (primitives first), so clang-format must not sort these.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::avx512
HLLM_TARGET_END
#undef HLLM_QUANT_VNNI

// The integer-dot kernels once more with VNNI (vpdpbusd), used where the CPU has it.
#define HLLM_QUANT_VNNI 1
HLLM_TARGET_AVX512_VNNI_BEGIN
namespace hllm::kernels::avx512_vnni {
using avx512::q6_k_slice_values;
using avx512::VecF32;
// clang-format off
#include "hllm/kernels/gemm_vnni-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::avx512_vnni
HLLM_TARGET_END
#undef HLLM_QUANT_VNNI

// The BF16 prefill GEMM (vdpbf16ps), used where the CPU has AVX512-BF16.
HLLM_TARGET_AVX512_BF16_BEGIN
namespace hllm::kernels::avx512_bf16 {
using avx512::transpose16x16;
using avx512::VecF32;
#include "hllm/kernels/gemm_bf16-inl.hpp"
}  // namespace hllm::kernels::avx512_bf16
HLLM_TARGET_END
#undef HLLM_ISA_LEVEL
#else
#undef HLLM_QUANT_VNNI
#endif

namespace hllm::kernels {

// The table of one ISA; throws if this CPU cannot run it.
inline const KernelTable& table_for(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported,
                std::string("this CPU cannot run the ") + to_string(isa) + " kernels");
  static const KernelTable scalar_table = HLLM_KERNEL_TABLE(scalar, scalar);
#if HLLM_X86
  static const KernelTable avx2_table = HLLM_KERNEL_TABLE(avx2, avx2);
  // AVX-512 plus whichever of its optional extensions (VNNI, BF16) this CPU has.
  static const KernelTable avx512_table = [] {
    KernelTable table = cpu_features().avx512_vnni ? HLLM_KERNEL_TABLE(avx512, avx512_vnni)
                                                   : HLLM_KERNEL_TABLE(avx512, avx512);
    if (cpu_features().avx512_bf16) {
      table.matmul_bf16_dot = &avx512_bf16::matmul_bf16_dot;
      table.matmul_bf16_x16_dot = &avx512_bf16::matmul_bf16_x16_dot;
    }
    table.prefers_interleaved = cpu_features().avx512_vnni;
    return table;
  }();
  switch (isa) {
    case Isa::avx512: return avx512_table;
    case Isa::avx2: return avx2_table;
    default: break;
  }
#endif
  return scalar_table;
}

// The table this process uses, chosen once: HLLM_ISA if set, else the best the CPU supports.
inline const KernelTable& active() {
  static const KernelTable& chosen = table_for(selected_isa());
  return chosen;
}

}  // namespace hllm::kernels
