#pragma once
// What the implementation's parts share (hllm/implementation.hpp): the macros that fill one ISA's
// kernel table by name, and the functions that return each ISA's table, each defined in its own
// part (kernels_scalar.hpp, kernels_avx2.hpp, kernels_avx512.hpp) so that a build may compile the
// parts in parallel, and called by table_for (model.hpp).

#include "hllm/core/layouts.hpp"
#include "hllm/kernels/dispatch.hpp"

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

namespace detail {
// Each ISA's table, built on first use (a function-local static); defined once per program, in
// the part of its ISA. The x86 ones exist only on x86 (HLLM_X86).
const KernelTable& scalar_table();
const KernelTable& avx2_table();
const KernelTable& avx_vnni_table();
const KernelTable& avx512_table();
}  // namespace detail

}  // namespace hllm::kernels
