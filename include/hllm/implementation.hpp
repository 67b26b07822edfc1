#pragma once
// hllm's implementation: what a program compiles once, in exactly one translation unit, so that
// no other translation unit compiles a kernel (stb style). With CMake, linking hllm::hllm does
// it for you (the hllm_kernels library, built from cmake/hllm_kernels.cpp: optimised whatever
// the build type). Without CMake, one .cpp of the program holds just
//
//   #include "hllm/implementation.hpp"
//
// and is compiled with optimisation (-O2) even in a debug build:
//
//   g++ -std=c++20 -O2 -Iinclude -c kernels.cpp
//   g++ -std=c++20 -g -Iinclude main.cpp kernels.o -pthread
//
// It defines the kernel tables, one per ISA (the kernel bodies come from kernels/isa_kernels.hpp,
// inline), and hllm::kernels::table_for(), which kernels/dispatch.hpp declares; and it
// instantiates Session<>, Llama<> and the six KVCache<KV>, which their headers declare extern. A
// second translation unit including this header breaks the link (table_for defined twice); a
// program with none fails to link with "undefined reference to hllm::kernels::table_for".

#include <string>

#include "hllm/core/error.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/isa_kernels.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/isa.hpp"

// The table of namespace ns, its integer-dot kernels from quant_ns (AVX-512 and AVX2 have VNNI
// builds beside them): the common kernels, one line per file type, then every layout of the
// registry (core/layouts.hpp) with the kernels of its kind.
#define HLLM_KERNEL_TABLE(ns, quant_ns)                                                        \
  [] {                                                                                         \
    KernelTable t{.isa = Isa::ns,                                                              \
                  .rms_norm = &ns::rms_norm,                                                   \
                  .layer_norm = &ns::layer_norm,                                               \
                  .silu_mul = &ns::silu_mul,                                                   \
                  .gelu_mul = &ns::gelu_mul,                                                   \
                  .gelu = &ns::gelu,                                                           \
                  .soft_cap = &ns::soft_cap,                                                   \
                  .rope = &ns::rope,                                                           \
                  .quantize_activations = &ns::quantize_activations};                          \
    const auto set = [&t](DType type, LayoutKernels k) { t.layouts[layout_index(type)] = k; }; \
    set(DType::f32, {.matmul = &ns::matmul_f32});                                              \
    set(DType::f16, {.matmul = &ns::matmul_f16});                                              \
    set(DType::bf16, {.matmul = &ns::matmul_bf16});                                            \
    set(DType::q8_0,                                                                           \
        {.quant = &quant_ns::matmul_q8_0, .exact = &ns::matmul_dequant<BlockQ8_0, kQK8_0>});   \
    set(DType::q4_0,                                                                           \
        {.quant = &quant_ns::matmul_q4_0, .exact = &ns::matmul_dequant<BlockQ4_0, kQK4_0>});   \
    set(DType::q4_1,                                                                           \
        {.quant = &quant_ns::matmul_q4_1, .exact = &ns::matmul_dequant<BlockQ4_1, kQK4_1>});   \
    set(DType::q4_k,                                                                           \
        {.quant = &quant_ns::matmul_q4_k, .exact = &ns::matmul_dequant<BlockQ4_K, kQK_K>});    \
    set(DType::q5_k,                                                                           \
        {.quant = &quant_ns::matmul_q5_k, .exact = &ns::matmul_dequant<BlockQ5_K, kQK_K>});    \
    set(DType::q6_k,                                                                           \
        {.quant = &quant_ns::matmul_q6_k, .exact = &ns::matmul_dequant<BlockQ6_K, kQK_K>});    \
    for_each_repacked_layout([&]<class L>() {                                                  \
      using Unit = typename L::Unit;                                                           \
      using Block = typename L::Block;                                                         \
      if constexpr (L::kind == LayoutKind::quant_groups8)                                      \
        set(L::type, {.quant = &quant_ns::matmul_x8<Block>,                                    \
                      .exact = &ns::matmul_dequant<Unit, L::block_elements>});                 \
      else if constexpr (L::kind == LayoutKind::quant_panels16)                                \
        set(L::type, {.quant = &quant_ns::matmul_x16<Block>,                                   \
                      .exact = &ns::matmul_dequant<Unit, L::block_elements>});                 \
      else if constexpr (L::kind == LayoutKind::float_panels16)                                \
        set(L::type, {.matmul = &ns::matmul_float_x16<Block>});                                \
      else                                                                                     \
        set(L::type, {.matmul = &ns::matmul_bf16_x16});                                        \
    });                                                                                        \
    return t;                                                                                  \
  }()

namespace hllm::kernels {

// A table with the attention entries of namespace ns filled in for every cache element type
// (kKVTypes): the lambda names ns's three kernels of one type.
#define HLLM_ATTENTION(ns, table)                                                  \
  with_attention(table, []<class KV>() {                                           \
    return AttentionKernels{&ns::attend_head_rows<KV>, &ns::attend_group_rows<KV>, \
                            &ns::attend_group_paged<KV>};                          \
  })
template <class F>
KernelTable with_attention(KernelTable table, F kernels_of) {
  for (const KVType type : kKVTypes)
    table.attention[static_cast<std::size_t>(type)] =
        with_kv_element(type, [&]<class KV>() { return kernels_of.template operator()<KV>(); });
  return table;
}

// Declared in kernels/dispatch.hpp. Not inline: one definition per program, here.
const KernelTable& table_for(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported,
                std::string("this CPU cannot run the ") + to_string(isa) + " kernels");
  static const KernelTable scalar_table = HLLM_ATTENTION(scalar, HLLM_KERNEL_TABLE(scalar, scalar));
#if HLLM_X86
  // AVX2, and AVX2 with AVX-VNNI's integer dots; both run every kind of panel (the 8-row groups
  // only by copying rows out).
  static const KernelTable avx2_table = [] {
    KernelTable table = HLLM_ATTENTION(avx2, HLLM_KERNEL_TABLE(avx2, avx2));
    table.prefer(LayoutKind::quant_panels16);
    table.prefer(LayoutKind::float_panels16);
    table.prefer(LayoutKind::bf16_pairs16);
    return table;
  }();
  static const KernelTable avx_vnni_table = [] {
    KernelTable table = HLLM_ATTENTION(avx2, HLLM_KERNEL_TABLE(avx2, avx_vnni));
    table.isa = Isa::avx_vnni;
    table.prefer(LayoutKind::quant_panels16);
    table.prefer(LayoutKind::float_panels16);
    table.prefer(LayoutKind::bf16_pairs16);
    return table;
  }();
  // AVX-512 plus whichever of its optional extensions (VNNI, BF16) this CPU has.
  static const KernelTable avx512_table = [] {
    KernelTable table = cpu_features().avx512_vnni
                            ? HLLM_ATTENTION(avx512, HLLM_KERNEL_TABLE(avx512, avx512_vnni))
                            : HLLM_ATTENTION(avx512, HLLM_KERNEL_TABLE(avx512, avx512));
    table.prefer(LayoutKind::float_panels16);
    table.prefer(LayoutKind::bf16_pairs16);
    // With AVX512-BF16 the pair panels are also the vdpbf16ps GEMM's own.
    if (cpu_features().avx512_bf16) table.matmul_bf16_x16_dot = &avx512_bf16::matmul_bf16_x16_dot;
    // Without VNNI the AVX-512 integer panels are compiled and tested but not measured (no such
    // CPU here), so a load keeps the file's layout there. The 8-row groups run directly with
    // AVX-512 VNNI only.
    if (cpu_features().avx512_vnni) {
      table.prefer(LayoutKind::quant_panels16);
      table.prefer(LayoutKind::quant_groups8);
    }
    return table;
  }();
  switch (isa) {
    case Isa::avx512: return avx512_table;
    case Isa::avx2: return avx2_table;
    case Isa::avx_vnni: return avx_vnni_table;
    default: break;
  }
#endif
  return scalar_table;
}

}  // namespace hllm::kernels

#undef HLLM_KERNEL_TABLE
#undef HLLM_ATTENTION

// The model code for the dynamic spec, which the headers declare extern: compiled here once.
namespace hllm {
template class KVCache<float>;
template class KVCache<f16>;
template class KVCache<bf16>;
template class KVCache<BlockQ8_0>;
template class KVCache<BlockQ4_0>;
template class KVCache<BlockFP8>;
template class Llama<DynamicSpec>;
template class Session<DynamicSpec>;
}  // namespace hllm
