// Every kernel body of one ISA, primitives first (each file builds on the ones before it, so
// clang-format must not sort them). No include guard: kernels/isa_scalar.hpp, isa_avx2.hpp and
// isa_avx512.hpp include this file once each, inside the ISA's namespace and target region, with
// HLLM_ISA_LEVEL and HLLM_QUANT_VNNI set.
// clang-format off
#include "hllm/simd/vec-inl.hpp"
#include "hllm/kernels/matmul_float-inl.hpp"
#include "hllm/kernels/matmul_bf16_panels-inl.hpp"
#include "hllm/kernels/matmul_dequant-inl.hpp"
#include "hllm/kernels/elementwise-inl.hpp"
#include "hllm/kernels/attention-inl.hpp"
#include "hllm/kernels/integer_kernels-inl.hpp"
// clang-format on
