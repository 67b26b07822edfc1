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

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/isa.hpp"
#include "hllm/simd/target.hpp"

#if HLLM_X86
// GCC 12's AVX-512 intrinsics initialise their "undefined" registers from themselves, which its
// own -Wuninitialized then reports at every use; the state at the header's lines decides, so
// the header is read with those two warnings off.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace hllm::kernels {

// y[t][r] for rows [row_begin, row_end) of w: [rows][cols], x: [n_tokens][cols], y: [n_tokens][rows]
using MatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols, const float* x,
                          std::size_t n_tokens, float* y, std::size_t row_begin,
                          std::size_t row_end);
// x, weight, out: [n]
using RmsNormFn = void (*)(const float* x, const float* weight, std::size_t n, float eps,
                           float* out);
// q: [head_dim], keys, values: [n_keys][head_dim] of the cache's element type, out: [head_dim]
using AttendHeadFn = void (*)(const float* q, const void* keys, const void* values,
                              std::size_t n_keys, std::size_t head_dim, float scale, float* out);

struct KernelTable {
  Isa isa;
  MatmulFn matmul_f32, matmul_f16, matmul_bf16;
  RmsNormFn rms_norm;
  AttendHeadFn attend_head_f32, attend_head_f16, attend_head_bf16;

  // The matmul for a weight type, or nullptr if this table has none (quantized types until
  // their kernels land: callers then use the reference path).
  MatmulFn matmul_for(DType type) const noexcept {
    switch (type) {
      case DType::f32: return matmul_f32;
      case DType::f16: return matmul_f16;
      case DType::bf16: return matmul_bf16;
      default: return nullptr;
    }
  }
  template <class KV>
  AttendHeadFn attend_head_for() const noexcept {
    if constexpr (std::is_same_v<KV, f16>) return attend_head_f16;
    else if constexpr (std::is_same_v<KV, bf16>) return attend_head_bf16;
    else return attend_head_f32;
  }
};

}  // namespace hllm::kernels

#define HLLM_KERNEL_TABLE_FOR(ns)                                                          \
  namespace hllm::kernels::ns {                                                            \
  inline const KernelTable& table() {                                                      \
    static const KernelTable t{Isa::ns,         &matmul_f32,      &matmul_f16,             \
                               &matmul_bf16,    &rms_norm,        &attend_head_f32,        \
                               &attend_head_f16, &attend_head_bf16};                       \
    return t;                                                                              \
  }                                                                                        \
  }

#define HLLM_ISA_LEVEL 0
namespace hllm::kernels::scalar {
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
}  // namespace hllm::kernels::scalar
#undef HLLM_ISA_LEVEL
HLLM_KERNEL_TABLE_FOR(scalar)

#if HLLM_X86
#define HLLM_ISA_LEVEL 1
HLLM_TARGET_AVX2_BEGIN
namespace hllm::kernels::avx2 {
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
}  // namespace hllm::kernels::avx2
HLLM_TARGET_END
#undef HLLM_ISA_LEVEL
HLLM_KERNEL_TABLE_FOR(avx2)

#define HLLM_ISA_LEVEL 2
HLLM_TARGET_AVX512_BEGIN
namespace hllm::kernels::avx512 {
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
}  // namespace hllm::kernels::avx512
HLLM_TARGET_END
#undef HLLM_ISA_LEVEL
HLLM_KERNEL_TABLE_FOR(avx512)
#endif

namespace hllm::kernels {

// The table of one ISA; throws if this CPU cannot run it.
inline const KernelTable& table_for(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported, std::string("this CPU cannot run the ") + to_string(isa) +
                                            " kernels");
  switch (isa) {
#if HLLM_X86
    case Isa::avx512: return avx512::table();
    case Isa::avx2: return avx2::table();
#endif
    default: return scalar::table();
  }
}

// The table this process uses, chosen once: HLLM_ISA if set, else the best the CPU supports.
inline const KernelTable& active() {
  static const KernelTable& chosen = table_for(selected_isa());
  return chosen;
}

}  // namespace hllm::kernels
