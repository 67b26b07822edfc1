#pragma once
// Part of hllm's implementation (hllm/implementation.hpp): the AVX2 kernels and their two tables,
// AVX2 and AVX2 with AVX-VNNI's integer dots. Compiled once per program; nothing off x86.

#include "hllm/implementation/kernel_tables.hpp"
#include "hllm/kernels/isa_avx2.hpp"

#if HLLM_X86
namespace hllm::kernels::detail {

// Both run every kind of panel (the 8-row groups only by copying rows out).
inline KernelTable preferring_panels(KernelTable table) {
  table.prefer(LayoutKind::quant_panels16);
  table.prefer(LayoutKind::float_panels16);
  table.prefer(LayoutKind::bf16_pairs16);
  return table;
}

const KernelTable& avx2_table() {
  static const KernelTable made =
      preferring_panels(HLLM_ATTENTION(avx2, HLLM_KERNEL_TABLE(avx2, avx2)));
  return made;
}

const KernelTable& avx_vnni_table() {
  static const KernelTable made = [] {
    KernelTable table = preferring_panels(HLLM_ATTENTION(avx2, HLLM_KERNEL_TABLE(avx2, avx_vnni)));
    table.isa = Isa::avx_vnni;
    return table;
  }();
  return made;
}

}  // namespace hllm::kernels::detail
#endif
