#pragma once
// The kernel bodies compiled for AVX-512 (namespace hllm::kernels::avx512), the integer kernels
// once more with AVX-512 VNNI (avx512_vnni), and the BF16 prefill GEMM (avx512_bf16); nothing
// off x86 (kernels/isa_kernels.hpp explains the scheme).

#include "hllm/kernels/isa_headers.hpp"

#if HLLM_X86
#define HLLM_ISA_LEVEL 2
#define HLLM_QUANT_VNNI 0
HLLM_TARGET_AVX512_BEGIN
namespace hllm::kernels::avx512 {
#include "hllm/kernels/kernel_bodies-inl.hpp"
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
#endif
