#pragma once
// The kernel bodies compiled for no vector ISA: namespace hllm::kernels::scalar, every
// machine's fallback (kernels/isa_kernels.hpp explains the scheme).

#include "hllm/kernels/isa_headers.hpp"

#define HLLM_ISA_LEVEL 0
#define HLLM_QUANT_VNNI 0
namespace hllm::kernels::scalar {
#include "hllm/kernels/kernel_bodies-inl.hpp"
}  // namespace hllm::kernels::scalar
#undef HLLM_QUANT_VNNI
#undef HLLM_ISA_LEVEL
