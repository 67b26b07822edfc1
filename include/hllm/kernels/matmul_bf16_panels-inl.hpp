// BF16 weights repacked into 16-row pair panels (DType::bf16_x16, core/bf16_panels.hpp) against
// float32 activations: the exact path of such weights, and their decode. Written once and
// compiled per ISA after matmul_float-inl.hpp (see isa_kernels.hpp). No include guard, by design.
//
// On the vector ISAs a whole group is read as it lies: a 64-byte line holds one column pair of 16
// rows (one zmm, two ymm), the even column's bf16 values become floats by a 16-bit shift and the
// odd column's by a mask, and FMAs with broadcast activations accumulate 16 rows' outputs in
// the lanes; AVX-512 prefill widens a chunk of columns once and runs the F32 panels' GEMM. The
// scalar twin, and rows of a range that starts or ends inside a group, copy the group's rows
// back to the file's layout and run the row-major tiles.

#if HLLM_ISA_LEVEL >= 1
// y[j][16g .. 16g + 16) = group g · x[j] for kGroups consecutive groups and kTokens tokens,
// float32 activations: a group's 16 rows in the lanes of kParts registers (one zmm, two ymm), one
// chain per row and token, column after column: the order of the F32 panels' tile, which
// AVX-512's prefill GEMM (gemm_float_panels) and AVX2's batches (bf16_x16_widened_chunks) run on
// widened chunks, so a token's outputs are the same bits alone or in any batch. One token's
// chains then wait two FMA latencies per column pair, too slow to keep enough of the weight
// stream's lines in flight: decode prefetches them 2 KiB ahead. The groups are read side by side,
// each summed exactly as alone.
//   first: kGroups groups of [cols/2][16] dwords, group_dwords apart; x: [kTokens][cols];
//   y: [kTokens] rows y_stride apart
template <std::size_t kGroups, std::size_t kTokens>
inline void bf16_x16_group_tile(const std::uint32_t* first, std::size_t group_dwords,
                                std::size_t cols, const float* x, float* y, std::size_t y_stride) {
  using V = VecF32;
  constexpr std::size_t kParts = kBf16PanelRows / V::lanes;
  typename V::Reg acc[kGroups][kTokens][kParts] = {};  // zeros
  for (std::size_t k = 0; k < cols / 2; ++k)
    _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g) {
      if constexpr (kTokens == 1)
        __builtin_prefetch(first + g * group_dwords + (k + 32) * kBf16PanelRows);
      _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kParts; ++part) {
        typename V::Reg even, odd;
        V::load_bf16_pairs(first + g * group_dwords + k * kBf16PanelRows + part * V::lanes, even,
                           odd);
        _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) {
          auto& a = acc[g][j][part];
          a = V::fma(odd, V::set1(x[j * cols + 2 * k + 1]),
                     V::fma(even, V::set1(x[j * cols + 2 * k]), a));
        }
      }
    }
  _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
      _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j)
          _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kParts; ++part)
              V::store(y + j * y_stride + g * kBf16PanelRows + part * V::lanes, acc[g][j][part]);
}

// Batches on two-register ISAs (AVX2), where four tokens' chains beside a column pair's two
// widened halves would not fit the 16 registers: kFloatPanelCols columns at a time, each chunk
// of every group widened to float into an L1 buffer and run through the F32 panels' tile (up to
// four tokens per column load), then the next chunk, so a chunk's activations (512 KiB at 512
// tokens) are read from L2 by every group, where a whole row per token came from memory for each
// group. Each tile continues its outputs' one chain from the sums the previous chunk stored,
// bf16_x16_group_tile's order; the sums the next tile reloads are prefetched first, their misses
// hidden behind this tile's arithmetic.
//   first: `groups` groups of [cols/2][16] dwords; x: [n_tokens][cols]; y: [n_tokens][rows]
//   from the first group's first row
inline void bf16_x16_widened_chunks(const std::uint32_t* first, std::size_t groups,
                                    std::size_t rows, std::size_t cols, const float* x,
                                    std::size_t n_tokens, float* y) {
  static_assert(kFloatPanelCols % 2 == 0, "chunks hold whole column pairs");
  alignas(64) float widened[kFloatPanelCols][kBf16PanelRows];
  const std::size_t group_dwords = bf16_x16_group_dwords(cols);
  for (std::size_t c0 = 0; c0 < cols; c0 += kFloatPanelCols) {
    const std::size_t n = std::min(kFloatPanelCols, cols - c0);
    for (std::size_t g = 0; g < groups; ++g) {
      widen_panel_columns(
          reinterpret_cast<const bf16*>(first + g * group_dwords + c0 / 2 * kBf16PanelRows), n,
          &widened[0][0]);
      float* const out = y + g * kBf16PanelRows;
      for_token_tiles<kFloatBatchTokens>(n_tokens, [&](auto k_tokens, std::size_t t) {
        for (std::size_t j = t + k_tokens(); j < std::min(t + 2 * k_tokens(), n_tokens); ++j)
          __builtin_prefetch(out + j * rows);
        float_x16_tile<1, k_tokens(), false>(&widened[0][0], n, x + t * cols + c0, cols,
                                             out + t * rows, rows, c0 > 0);
      });
    }
  }
}

// Every token against `groups` whole groups from `first`. Decode (one token) reads two groups
// side by side: one group's panel is one DRAM stream, which a core does not read as fast as two
// (the F32/F16 panels' decode reads two as well). Batches with one register per 16 rows take one
// group at a time, every token before the next group (whose panel is then read from memory
// once), up to 4 tokens per weight load; with two, bf16_x16_widened_chunks.
//   y: [n_tokens][rows] from the first group's first row
inline void bf16_x16_groups(const std::uint32_t* first, std::size_t groups, std::size_t rows,
                            std::size_t cols, const float* x, std::size_t n_tokens, float* y) {
  const std::size_t group_dwords = bf16_x16_group_dwords(cols);
  if constexpr (VecF32::lanes < kBf16PanelRows)
    if (n_tokens > 1) return bf16_x16_widened_chunks(first, groups, rows, cols, x, n_tokens, y);
  std::size_t g = 0;
  if (n_tokens == 1)
    for (; g + 2 <= groups; g += 2)
      bf16_x16_group_tile<2, 1>(first + g * group_dwords, group_dwords, cols, x,
                                y + g * kBf16PanelRows, rows);
  // Two registers per 16 rows reach here with one token only.
  for (; g < groups; ++g)
    for_token_tiles<VecF32::lanes == kBf16PanelRows ? 4 : 1>(
        n_tokens, [&](auto k_tokens, std::size_t t) {
          bf16_x16_group_tile<1, k_tokens()>(first + g * group_dwords, group_dwords, cols,
                                             x + t * cols, y + t * rows + g * kBf16PanelRows, rows);
        });
}
#endif

// w: bf16_x16 panels of a [rows][cols] matrix, x: [n_tokens][cols], y: [n_tokens][rows]; rows
// [row_begin, row_end), any range. With AVX-512, kFloatPackedMinTokens tokens or more run the
// F32 panels' GEMM on the pairs widened (gemm_float_panels), reading `packed` (x as its token
// panels, pack_float_token_groups) or, where it is nullptr, packing per chunk into scratch; in the
// order of bf16_x16_group_tile, which the rest take. scratch also holds one group in the file's
// layout, [16][cols]: rows of a group the range cuts (and every group on the scalar twin) are
// copied back to it and run the row-major tiles.
inline void matmul_bf16_x16_exact_packed(const void* weights, std::size_t rows, std::size_t cols,
                                         const float* x, [[maybe_unused]] const void* packed,
                                         std::size_t n_tokens, float* y, std::size_t row_begin,
                                         std::size_t row_end, void* scratch) {
  const auto* panels = static_cast<const std::uint32_t*>(weights);
  const std::size_t group_dwords = bf16_x16_group_dwords(cols);
  bf16* const group_rows = static_cast<bf16*>(scratch);
  const auto cut_group = [&](std::size_t g, std::size_t lo, std::size_t hi) {
    deinterleave_bf16_group(panels + g * group_dwords, cols, group_rows);
    matmul_row_tiles(group_rows + (lo - g * kBf16PanelRows) * cols, rows, cols, x, n_tokens, y, lo,
                     hi);
  };
  const auto whole_groups = [&](std::size_t first, std::size_t groups) {
#if HLLM_ISA_LEVEL == 2
    if (n_tokens >= kFloatPackedMinTokens)
      return gemm_float_panels(static_cast<const bf16*>(weights), rows, cols, x,
                               static_cast<const float*>(packed), n_tokens, y, first, groups,
                               scratch);
#endif
#if HLLM_ISA_LEVEL >= 1
    bf16_x16_groups(panels + first / kBf16PanelRows * group_dwords, groups, rows, cols, x, n_tokens,
                    y + first);
#else
    for (std::size_t g = first / kBf16PanelRows; g < first / kBf16PanelRows + groups; ++g)
      cut_group(g, g * kBf16PanelRows, (g + 1) * kBf16PanelRows);
#endif
  };
  static_assert(kBf16PanelRows == 16, "split_at_groups splits at 16-row groups");
  split_at_groups(row_begin, row_end, cut_group, whole_groups);
}
inline void matmul_bf16_x16(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                            std::size_t n_tokens, float* y, std::size_t row_begin,
                            std::size_t row_end, void* scratch) {
  matmul_bf16_x16_exact_packed(weights, rows, cols, x, nullptr, n_tokens, y, row_begin, row_end,
                               scratch);
}
