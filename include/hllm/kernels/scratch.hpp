#pragma once
// Per-thread scratch of the matmul kernels. Kernels run inside thread-pool jobs, where an
// allocation's failure could not be reported, so they allocate nothing: the caller hands each
// call a 64-byte aligned buffer of matmul_scratch_bytes(cols, n_tokens) bytes that no other
// thread uses at the same time (Compute holds one per thread, sized when it is built).

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/float_panels.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"

namespace hllm::kernels {

// Token panels of the prefill GEMMs: a chunk of kFloatTokenChunk tokens × kFloatPanelCols
// columns in float32 (kernels/matmul_float-inl.hpp), of kBf16TokenChunk tokens × kBf16PanelPairs
// column pairs as bf16 pairs (kernels/gemm_bf16-inl.hpp). A chunk's panel stays in L2; 512
// tokens rather than 256 pack each weight panel half as often (docs/performance.md).
// The FP32 GEMM's panels are kFloatPanelRows (core/float_panels.hpp) × kFloatPanelCols; it runs
// from kFloatPackedMinTokens tokens, under which the panels' own token tiles are faster
// (BM_SmallBatch<f16_x16>: flat to 4 tokens, the GEMM ahead only from about 32).
inline constexpr std::size_t kFloatPanelCols = 256;
inline constexpr std::size_t kFloatTokenChunk = 512, kFloatPackedMinTokens = 32;
inline constexpr std::size_t kBf16PanelPairs = 128;  // 256 columns per panel, 8 KiB
inline constexpr std::size_t kBf16TokenChunk = 512, kBf16PackedMinTokens = 8;

// A prefill GEMM's token panels for a whole matmul, packed once per operation and read by every
// row chunk (Compute holds them): [column block][16-token group][block_elements][16] elements of
// 4 bytes, a column block covering block_cols columns (the last may hold fewer elements per
// token, at the same stride), token group g holding tokens 16g..16g+15 (past n_tokens: zeros),
// element k of token i at [k][i].
struct TokenPanelLayout {
  std::size_t block_cols, block_elements;  // columns of a block, elements per token of a whole one

  constexpr std::size_t block_size(std::size_t n_tokens) const noexcept {
    return (n_tokens + 15) / 16 * 16 * block_elements;
  }
  constexpr std::size_t elements(std::size_t cols, std::size_t n_tokens) const noexcept {
    return (cols + block_cols - 1) / block_cols * block_size(n_tokens);
  }
  constexpr std::size_t bytes(std::size_t cols, std::size_t n_tokens) const noexcept {
    return elements(cols, n_tokens) * 4;
  }
  // Where the panel of tokens t.. (t a multiple of 16) of the column block starting at column c0
  // begins; `width`: that block's elements per token.
  constexpr std::size_t offset(std::size_t c0, std::size_t t, std::size_t width,
                               std::size_t n_tokens) const noexcept {
    return c0 / block_cols * block_size(n_tokens) + t * width;
  }
};
// The vdpbf16ps GEMM's (kernels/gemm_bf16-inl.hpp): bf16 pairs as dwords, kBf16PanelPairs per
// token of a block.
inline constexpr TokenPanelLayout kBf16TokenPanels{2 * kBf16PanelPairs, kBf16PanelPairs};
// The FP32 GEMM's (kernels/matmul_float-inl.hpp): floats, kFloatPanelCols per token of a block.
inline constexpr TokenPanelLayout kFloatTokenPanels{kFloatPanelCols, kFloatPanelCols};

constexpr std::size_t round_up_to_line(std::size_t bytes) noexcept {
  return (bytes + 63) / 64 * 64;
}

// The largest of a repacked matrix's row copies per value (matmul_copied_rows holds one row of
// the file type's blocks): bytes of one row of `cols` values.
constexpr std::size_t copied_row_bytes(std::size_t cols) noexcept {
  return std::max({cols / kQK8_0 * sizeof(BlockQ8_0), cols / kQK4_0 * sizeof(BlockQ4_0),
                   cols / kQK_K * sizeof(BlockQ4_K), cols / kQK_K * sizeof(BlockQ6_K)});
}

// Bytes of scratch any matmul kernel (either table, any weight type) may use in one call with
// `cols` input features and `n_tokens` tokens; grows with both, so the value for the largest
// call covers every smaller one. Each term is one kernel's buffer; a call uses one at a time.
constexpr std::size_t matmul_scratch_bytes(std::size_t cols, std::size_t n_tokens) noexcept {
  std::size_t bytes = 0;
  if (n_tokens >= std::min(kFloatPackedMinTokens, kBf16PackedMinTokens))
    bytes = std::max(kFloatTokenChunk * kFloatPanelCols * sizeof(float),  // gemm_float_packed
                     kBf16TokenChunk * kBf16PanelPairs * sizeof(std::uint32_t));  // gemm_bf16
  // bf16_x16_dot_rows: the activations as bf16 pairs, [n_tokens][cols/2] dwords (few tokens).
  const std::size_t dot_tokens = std::min(n_tokens, kBf16PackedMinTokens - 1);
  bytes = std::max(bytes, round_up_to_line(dot_tokens * (cols / 2) * sizeof(std::uint32_t)));
  // matmul_bf16_x16: one 16-row group in the file's layout, [16][cols] bf16.
  bytes = std::max(bytes, round_up_to_line(kBf16PanelRows * cols * sizeof(bf16)));
  // dequant_rows_decode for Q6_K_X16: one group's 16 rows of super-blocks.
  bytes = std::max(bytes, round_up_to_line(16 * (cols / kQK_K) * sizeof(BlockQ6_K)));
  // matmul_copied_rows: one row's blocks, then the row's n_tokens outputs.
  bytes = std::max(
      bytes, round_up_to_line(copied_row_bytes(cols)) + round_up_to_line(n_tokens * sizeof(float)));
  return bytes;
}

}  // namespace hllm::kernels
