#pragma once
// The kernel bodies compiled for no vector ISA: namespace hllm::kernels::scalar, every
// machine's fallback (kernels/isa_kernels.hpp explains the scheme).

#include "hllm/kernels/isa_headers.hpp"

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
#undef HLLM_QUANT_VNNI
#undef HLLM_ISA_LEVEL
