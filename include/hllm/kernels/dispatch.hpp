#pragma once
// Run-time ISA dispatch: the kernel table's type and the functions that choose a table. A table
// of function pointers per ISA is chosen once from CPUID (or HLLM_ISA).
//
// This header declares table_for() but holds no kernel: the kernel bodies (*-inl.hpp, compiled
// once per ISA by kernels/isa_*.hpp) and table_for()'s definition are in
// hllm/implementation.hpp, which a program compiles once (CMake's hllm::hllm target does it for
// you: the hllm_kernels library, one translation unit per part of it). So a translation unit that
// uses a Session compiles no kernel, and the kernels are optimised even in a Debug build.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/kernels/attention_scoring.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/kernels/scratch.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/isa.hpp"

namespace hllm::kernels {

// y[t][r] for rows [row_begin, row_end) of w: [rows][cols], x: [n_tokens][cols], y:
// [n_tokens][rows]. scratch: matmul_scratch_bytes(cols, n_tokens) bytes, 64-byte aligned, that
// no other thread uses during the call (kernels/scratch.hpp); its contents are not kept.
using MatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols, const float* x,
                          std::size_t n_tokens, float* y, std::size_t row_begin,
                          std::size_t row_end, void* scratch);
// The same for quantized weights against activations quantized to x: [n_tokens][cols/32] blocks.
using QuantMatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols,
                               const BlockQ8Act* x, std::size_t n_tokens, float* y,
                               std::size_t row_begin, std::size_t row_end, void* scratch);
// Token groups [group_begin, group_end) (16 tokens each) of x: [n_tokens][cols] as a prefill
// GEMM's token panels, in the layout kernels/scratch.hpp declares for that GEMM
// (kBf16TokenPanels, kFloatTokenPanels), into packed.
using TokenPackFn = void (*)(const float* x, std::size_t cols, std::size_t n_tokens,
                             std::size_t group_begin, std::size_t group_end, void* packed);
// A MatmulFn whose GEMM reads x's token panels from `packed` (nullptr: packs its own per chunk).
using PackedMatmulFn = void (*)(const void* w, std::size_t rows, std::size_t cols, const float* x,
                                const void* packed, std::size_t n_tokens, float* y,
                                std::size_t row_begin, std::size_t row_end, void* scratch);
// x: [n] (n a multiple of 32) → out: [n/32] blocks
using QuantizeFn = void (*)(const float* x, std::size_t n, BlockQ8Act* out);
// x, weight, out: [n]
using RmsNormFn = void (*)(const float* x, const float* weight, std::size_t n, float eps,
                           float* out);
// x, weight, out: [n]; bias: [n] or nullptr (none)
using LayerNormFn = void (*)(const float* x, const float* weight, const float* bias, std::size_t n,
                             float eps, float* out);
// RoPE in place: x: [n_heads][head_dim], the first rot_dims of each head rotated by the
// angles' cos, sin: [rot_dims/2] (see reference::rope).
using RopeFn = void (*)(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t rot_dims,
                        RopeLayout layout, const float* cos, const float* sin);
// out[i] = act(gate[i]) · up[i], act SiLU or GELU (a gated FFN).   gate, up, out: [n]
using GateActivationFn = void (*)(const float* gate, const float* up, std::size_t n, float* out);
// x[i] = act(x[i]) in place (a plain MLP's hidden layer).   x: [n]
using ActivationFn = void (*)(float* x, std::size_t n);
// x[i] = cap · tanh(x[i] / cap) in place.   x: [n]
using SoftCapFn = void (*)(float* x, std::size_t n, float cap);
// q: [head_dim], keys, values: [n_keys][head_dim] of the cache's element type (KV rows,
// core/kv_element.hpp), out: [head_dim]
using AttendHeadFn = void (*)(const float* q, const void* keys, const void* values,
                              std::size_t n_keys, std::size_t head_dim, AttentionScoring scoring,
                              float* out);
// `group` query heads that share one KV head: q, out: [group][head_dim].
using AttendGroupFn = void (*)(const float* q, const void* keys, const void* values,
                               std::size_t n_keys, std::size_t head_dim, std::size_t group,
                               AttentionScoring scoring, float* out);

// Where the rows of one layer's keys (or values) of one KV head lie in a paged cache
// (nn/paged_kv_storage.hpp), for an attention call over n_keys rows: row j is position
// first + j, at slot (first + j) % block_tokens of block blocks[(first + j) / block_tokens].
// Element e of that row is base[blocks[..] · block_elements + offset + slot · row_elements + e]
// in the cache's element type (KV rows, core/kv_element.hpp).
struct KVBlockRows {
  const void* base = nullptr;             // the pool's first element
  const std::uint32_t* blocks = nullptr;  // block ids in position order
  std::size_t block_elements = 0;         // elements per block
  std::size_t offset = 0;                 // elements from a block's start to these rows
  std::size_t block_tokens = 16;          // rows per block: a power of two
  std::size_t row_elements = 0;           // elements per row: kv_row_elements<KV>(head_dim)
  std::size_t first = 0;                  // the position of row 0
};
// AttendGroupFn over a paged cache's rows; the same arithmetic in the same order as
// AttendGroupFn on those rows stored one after another, so the results are bit-identical.
using AttendGroupPagedFn = void (*)(const float* q, const KVBlockRows& keys,
                                    const KVBlockRows& values, std::size_t n_keys,
                                    std::size_t head_dim, std::size_t group,
                                    AttentionScoring scoring, float* out);

// The attention kernels of one cache element type (core/kv_element.hpp).
struct AttentionKernels {
  AttendHeadFn head = nullptr;
  AttendGroupFn group = nullptr;
  AttendGroupPagedFn paged = nullptr;
};

// The kernels that read one weight layout. Float types fill `matmul`; quantized ones `quant`
// (8-bit activations) and `exact` (float activations, dequantizing: SessionOptions::exact).
struct LayoutKernels {
  MatmulFn matmul = nullptr;
  QuantMatmulFn quant = nullptr;
  MatmulFn exact = nullptr;
  // The float panels' matmul reading token panels packed once per operation (KernelTable::
  // pack_float_tokens; Compute does, from kFloatPackedMinTokens tokens), where it has a GEMM.
  PackedMatmulFn packed = nullptr;
  // A repacked layout only: whether a load puts weights into it for this table (repack_plan in
  // model/repack.hpp), because these kernels run it faster than the file's layout.
  bool preferred = false;
};

// Every weight layout a kernel reads: the file types, then the layouts of the registry
// (core/layouts.hpp). A table holds one LayoutKernels per entry, in this order; the repacked
// layouts' entries are filled from the registry by kind (hllm/implementation/kernel_tables.hpp).
inline constexpr auto kKernelLayouts = [] {
  std::array<DType, std::size(kFileTypes) + kRepackedLayouts.size()> all{};
  std::size_t i = 0;
  for (const DType type : kFileTypes) all[i++] = type;
  for (const LayoutSpec& spec : kRepackedLayouts) all[i++] = spec.type;
  return all;
}();
inline constexpr std::size_t kLayoutCount = kKernelLayouts.size();

// type's index in kKernelLayouts, or kLayoutCount for a type no kernel reads.
constexpr std::size_t layout_index(DType type) noexcept {
  for (std::size_t i = 0; i < kLayoutCount; ++i)
    if (kKernelLayouts[i] == type) return i;
  return kLayoutCount;
}

struct KernelTable {
  Isa isa = Isa::scalar;
  RmsNormFn rms_norm = nullptr;
  LayerNormFn layer_norm = nullptr;
  GateActivationFn silu_mul = nullptr;
  GateActivationFn gelu_mul = nullptr;  // GeGLU, GELU's tanh approximation
  ActivationFn gelu = nullptr;          // exact GELU (erf), in place
  SoftCapFn soft_cap = nullptr;
  RopeFn rope = nullptr;
  QuantizeFn quantize_activations = nullptr;
  // Indexed by layout_index(type).
  LayoutKernels layouts[kLayoutCount] = {};
  // BF16 panels against activations rounded to bf16 (vdpbf16ps; nullptr where the CPU has no
  // AVX512-BF16). Not exact: Compute::matmul takes it where bf16_dot_preferred, matmul_exact
  // never does.
  MatmulFn matmul_bf16_x16_dot = nullptr;
  // The same with the activations' token panels packed once per operation (Compute does, from
  // kBf16PackedMinTokens tokens): set with matmul_bf16_x16_dot.
  TokenPackFn pack_bf16_tokens = nullptr;
  PackedMatmulFn matmul_bf16_x16_packed = nullptr;
  // Whether sessions run BF16 panels on the kernels above (CpuFeatures::bf16_dot_outruns_fma)
  // rather than on the exact FP32 ones, which are the faster where vdpbf16ps issues at half the
  // FMA's rate.
  bool bf16_dot_preferred = false;
  MatmulFn preferred_bf16_dot() const noexcept {
    return bf16_dot_preferred ? matmul_bf16_x16_dot : nullptr;
  }
  // The FP32 GEMM's token panels, for the float panels' LayoutKernels::packed.
  TokenPackFn pack_float_tokens = nullptr;
  // Attention over consecutive rows and through a paged cache's block table, per cache element
  // type, indexed by KVType (a new type adds an entry, not a field per kernel; see the getters).
  AttentionKernels attention[std::size(kKVTypes)] = {};
  // Marks every layout of `kind` as preferred (LayoutKernels::preferred).
  void prefer(LayoutKind kind) noexcept {
    for (const LayoutSpec& spec : kRepackedLayouts)
      if (spec.kind == kind) layouts[layout_index(spec.type)].preferred = true;
  }

  // The kernels of a weight layout; all nullptr for a type no kernel reads.
  const LayoutKernels& kernels_for(DType type) const noexcept {
    static constexpr LayoutKernels kNone{};
    const std::size_t i = layout_index(type);
    return i < kLayoutCount ? layouts[i] : kNone;
  }
  // The float-activation matmul of a float weight type, or nullptr.
  MatmulFn matmul_for(DType type) const noexcept { return kernels_for(type).matmul; }
  // The float-activation matmul for a quantized weight type (dequantizing), or nullptr.
  MatmulFn dequant_matmul_for(DType type) const noexcept { return kernels_for(type).exact; }
  // The integer-dot matmul for a quantized weight type, or nullptr.
  QuantMatmulFn quant_matmul_for(DType type) const noexcept { return kernels_for(type).quant; }
  // The attention kernels for cache element type KV.
  template <class KV>
  const AttentionKernels& attention_for() const noexcept {
    return attention[static_cast<std::size_t>(kv_type_of<KV>())];
  }
  template <class KV>
  AttendGroupFn attend_group_for() const noexcept {
    return attention_for<KV>().group;
  }
  template <class KV>
  AttendGroupPagedFn attend_group_paged_for() const noexcept {
    return attention_for<KV>().paged;
  }
  template <class KV>
  AttendHeadFn attend_head_for() const noexcept {
    return attention_for<KV>().head;
  }
};

// The table of one ISA; throws Error(unsupported) if this CPU cannot run it. Defined in
// hllm/implementation.hpp (its part model.hpp; once per program).
const KernelTable& table_for(Isa isa);

// The table this process uses, chosen once: HLLM_ISA if set, else the best the CPU supports.
inline const KernelTable& active() {
  static const KernelTable& chosen = table_for(selected_isa());
  return chosen;
}

}  // namespace hllm::kernels
