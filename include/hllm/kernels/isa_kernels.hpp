#pragma once
// The kernel bodies, compiled once per ISA. The *-inl.hpp files (no include guards) are included
// here once per ISA, each time inside namespace hllm::kernels::<isa> and a target region
// (simd/target.hpp), so every ISA gets its own symbols and the linker never merges two ISAs'
// versions. Standard headers come first, never inside a target region.
//
// Everything here is inline: hllm/implementation.hpp includes this header to fill the kernel
// tables (one translation unit per program), and tests or benchmarks that call one ISA's kernel
// directly (hllm::kernels::avx512::matmul_q8_0) may include it in any translation unit. The
// rest of the library reaches the kernels only through the table (kernels/dispatch.hpp), so
// it never includes this header: each includer compiles the kernels it uses.

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
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/kernels/scratch.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/intrinsics.hpp"
#include "hllm/simd/isa.hpp"
#include "hllm/simd/target.hpp"

#define HLLM_ISA_LEVEL 0
#define HLLM_QUANT_VNNI 0
namespace hllm::kernels::scalar {
// The order matters (primitives first), so clang-format must not sort these.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/matmul_dequant-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/integer_kernels-inl.hpp"
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
#include "hllm/kernels/matmul_dequant-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/integer_kernels-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::avx2
HLLM_TARGET_END
#undef HLLM_QUANT_VNNI

// The integer-dot kernels once more with AVX-VNNI (the VEX vpdpbusd on ymm registers: Alder Lake,
// Zen 5 and later), used where the CPU has it and AVX-512 is absent or not chosen.
#define HLLM_QUANT_VNNI 1
HLLM_TARGET_AVX_VNNI_BEGIN
namespace hllm::kernels::avx_vnni {
using avx2::for_token_tiles;
using avx2::q6_k_slice_values;
using avx2::VecF32;
#include "hllm/kernels/integer_kernels-inl.hpp"
}  // namespace hllm::kernels::avx_vnni
HLLM_TARGET_END
#undef HLLM_QUANT_VNNI
#define HLLM_QUANT_VNNI 0
#undef HLLM_ISA_LEVEL

#define HLLM_ISA_LEVEL 2
HLLM_TARGET_AVX512_BEGIN
namespace hllm::kernels::avx512 {
// The order matters (primitives first), so clang-format must not sort these.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/matmul_dequant-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/integer_kernels-inl.hpp"
// clang-format on
}  // namespace hllm::kernels::avx512
HLLM_TARGET_END
#undef HLLM_QUANT_VNNI

// The integer-dot kernels once more with VNNI (vpdpbusd), used where the CPU has it.
#define HLLM_QUANT_VNNI 1
HLLM_TARGET_AVX512_VNNI_BEGIN
namespace hllm::kernels::avx512_vnni {
using avx512::for_token_tiles;
using avx512::q6_k_slice_values;
using avx512::VecF32;
#include "hllm/kernels/integer_kernels-inl.hpp"
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
