#pragma once
// Part of hllm's implementation (hllm/implementation.hpp): the AVX-512 kernels and their table.
// Compiled once per program; nothing off x86.

#include "hllm/implementation/kernel_tables.hpp"
#include "hllm/kernels/isa_avx512.hpp"
#include "hllm/simd/cpu_features.hpp"

#if HLLM_X86
namespace hllm::kernels::detail {

// AVX-512 plus whichever of its optional extensions (VNNI, BF16) this CPU has.
const KernelTable& avx512_table() {
  static const KernelTable made = [] {
    KernelTable table = cpu_features().avx512_vnni
                            ? HLLM_ATTENTION(avx512, HLLM_KERNEL_TABLE(avx512, avx512_vnni))
                            : HLLM_ATTENTION(avx512, HLLM_KERNEL_TABLE(avx512, avx512));
    table.prefer(LayoutKind::float_panels16);
    table.prefer(LayoutKind::bf16_pairs16);
    // With AVX512-BF16 the pair panels are also the vdpbf16ps GEMM's own, which sessions take
    // where it outruns the FP32 FMAs.
    if (cpu_features().avx512_bf16) {
      table.matmul_bf16_x16_dot = &avx512_bf16::matmul_bf16_x16_dot;
      table.pack_bf16_tokens = &avx512_bf16::pack_bf16_token_groups;
      table.matmul_bf16_x16_packed = &avx512_bf16::matmul_bf16_x16_packed;
      table.bf16_dot_preferred = bf16_dot_outruns_fma(cpu_features());
    }
    // The FP32 GEMM of the float panels (BF16's widened) reads token panels packed once per
    // operation.
    table.pack_float_tokens = &avx512::pack_float_token_groups;
    table.layouts[layout_index(DType::f32_x16)].packed = &avx512::matmul_float_x16_packed<float>;
    table.layouts[layout_index(DType::f16_x16)].packed = &avx512::matmul_float_x16_packed<f16>;
    table.layouts[layout_index(DType::bf16_x16)].packed = &avx512::matmul_bf16_x16_exact_packed;
    // Without VNNI the AVX-512 integer panels are compiled and tested but not measured (no such
    // CPU here), so a load keeps the file's layout there. The 8-row groups run directly with
    // AVX-512 VNNI only.
    if (cpu_features().avx512_vnni) {
      table.prefer(LayoutKind::quant_panels16);
      table.prefer(LayoutKind::quant_groups8);
    }
    return table;
  }();
  return made;
}

}  // namespace hllm::kernels::detail
#endif
