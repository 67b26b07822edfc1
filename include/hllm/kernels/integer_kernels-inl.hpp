// The integer-dot kernels (8-bit activations times quantized weights) in their order:
// primitives first. kernels/kernel_bodies-inl.hpp includes this list in every ISA's namespace,
// and kernels/isa_avx2.hpp and isa_avx512.hpp again in the VNNI ones (HLLM_QUANT_VNNI 1), so each
// build gets the same kernels. No include guard, by design.
// clang-format off
#include "hllm/simd/lanes16-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/gemm_panels-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
