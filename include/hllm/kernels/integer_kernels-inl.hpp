// The integer-dot kernels (8-bit activations times quantized weights) in their order:
// primitives first. kernels/isa_kernels.hpp includes this list in every vector ISA's namespace
// and again in the VNNI ones (HLLM_QUANT_VNNI 1), so each build gets the same kernels. No
// include guard, by design.
// clang-format off
#include "hllm/simd/lanes16-inl.hpp"
#include "hllm/kernels/matmul_quant-inl.hpp"
#include "hllm/kernels/matmul_kquant-inl.hpp"
#include "hllm/kernels/gemm_panels-inl.hpp"
#include "hllm/kernels/matmul_interleaved-inl.hpp"
// clang-format on
