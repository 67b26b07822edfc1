#pragma once
// The kernel bodies compiled for AVX2 (namespace hllm::kernels::avx2) and the integer kernels
// once more with AVX-VNNI (avx_vnni); nothing off x86 (kernels/isa_kernels.hpp explains the
// scheme).

#include "hllm/kernels/isa_headers.hpp"

#if HLLM_X86
#define HLLM_ISA_LEVEL 1
#define HLLM_QUANT_VNNI 0
HLLM_TARGET_AVX2_BEGIN
namespace hllm::kernels::avx2 {
#include "hllm/kernels/kernel_bodies-inl.hpp"
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
#undef HLLM_ISA_LEVEL
#endif
