// Matrix-matrix (and, with one token, matrix-vector) products for plain floating-point weights
// (f32, f16, bf16), written once against VecF32 and compiled per ISA (see isa_kernels.hpp). No
// include guard, by design.
//
// y[t][r] = sum_c w[r][c] * x[t][c] for rows r in [row_begin, row_end): a caller splits the rows
// across threads. Register blocking: a tile of kRows weight rows × kTokens tokens keeps
// kRows·kTokens accumulators in registers, so each weight vector loaded is used kTokens times
// and each activation vector kRows times. Decode (one token) is memory-bound and streams the
// weights once; prefill reuses every weight load across four tokens.

template <std::size_t kRows, std::size_t kTokens, class W>
inline void matmul_tile(const W* w, std::size_t cols, const float* x, float* y,
                        std::size_t y_stride) {
  using V = VecF32;
  typename V::Reg acc[kRows][kTokens];
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i)
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] = V::zero();
  std::size_t c = 0;
  for (; c + V::lanes <= cols; c += V::lanes) {
    typename V::Reg xv[kTokens];
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) xv[j] =
        V::load(x + j * cols + c);
    _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i) {
      const typename V::Reg wv = V::load(w + i * cols + c);
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] =
          V::fma(wv, xv[j], acc[i][j]);
    }
  }
  if (c < cols) {  // ragged tail: masked loads fill the missing lanes with zeros
    const std::size_t n = cols - c;
    typename V::Reg xv[kTokens];
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) xv[j] =
        V::load(x + j * cols + c, n);
    _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i) {
      const typename V::Reg wv = V::load(w + i * cols + c, n);
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] =
          V::fma(wv, xv[j], acc[i][j]);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i)
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) y[j * y_stride + i] =
          V::sum(acc[i][j]);
}

#if HLLM_ISA_LEVEL >= 1
// n columns (n even) of one 16-row group's BF16 pair panel (core/bf16_panels.hpp) from `panel`
// as floats, column after column: a pair's even column by a 16-bit shift, its odd column by a
// mask, exactly; AVX-512's GEMM (gemm_float_panels) and AVX2's batches (bf16_x16_widened_chunks)
// widen a chunk so.   out: [n][16]
inline void widen_panel_columns(const bf16* panel, std::size_t n, float* out) {
  using V = VecF32;
  const auto* pairs = reinterpret_cast<const std::uint32_t*>(panel);
  for (std::size_t k = 0; k < n / 2; ++k)
    _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kBf16PanelRows / V::lanes; ++part) {
      typename V::Reg even, odd;
      V::load_bf16_pairs(pairs + k * kBf16PanelRows + part * V::lanes, even, odd);
      V::store(out + 32 * k + part * V::lanes, even);
      V::store(out + 32 * k + 16 + part * V::lanes, odd);
    }
}
#endif

#if HLLM_ISA_LEVEL == 2
// Prefill on AVX-512: packed 16-row panels, the float twin of gemm_panels-inl.hpp. A panel holds
// kFloatPanelCols columns of 16 weight rows transposed and widened to float32 (panel[c] lane r
// = w[r][c]), so one FMA with an embedded broadcast of x[t][c] does 16 outputs' multiply-adds
// and a tile of two panels × 8 tokens keeps 16 accumulators busy; the panel (16 KiB) is reused
// by every token of a chunk, so packing (one scatter per 16 weights) is amortised over up to 512
// tokens (a chunk's token panel, 512 KiB, stays in L2; 512 rather than 256 tokens packs each
// weight panel half as often). The panel sizes are in kernels/scratch.hpp, which sizes the token
// panel's scratch.

// In-register transpose of a 16×16 float matrix (r[i] = row i → r[c] = column c): unpack pairs,
// then 4×4 blocks within 128-bit lanes, then the lanes themselves; 64 shuffles, no memory.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Now r[4i + k], 128-bit lane L, holds rows 4i..4i+3 of column 4L + k.
  _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k) {
    t[4 * k + 0] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 * k + 1] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    t[4 * k + 2] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[4 * k + 3] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
  }
  _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[4 * k + 0], t[4 * k + 2], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[4 * k + 0], t[4 * k + 2], 0xdd);
    r[4 + k] = _mm512_shuffle_f32x4(t[4 * k + 1], t[4 * k + 3], 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(t[4 * k + 1], t[4 * k + 3], 0xdd);
  }
}

// out[c][i] = float(src[i·stride + c]) for c < n, i < 16; rows i >= valid_rows read as zeros.
// The layout of both panels: the 16 values of one column side by side. (Token rows read in
// place would be a power of two apart and share one L1 set; transposed, a tile's broadcasts
// for one column come from one cache line.)
template <class T>
inline void pack_columns(const T* src, std::size_t stride, std::size_t valid_rows, std::size_t n,
                         float* out) {
  __m512 r[16];
  for (std::size_t c = 0; c < n; c += 16) {
    const std::size_t width = std::min<std::size_t>(16, n - c);
    _Pragma("GCC unroll 16") for (std::size_t i = 0; i < 16; ++i) r[i] =
        i >= valid_rows ? _mm512_setzero_ps()
        : width == 16   ? VecF32::load(src + i * stride + c)
                        : VecF32::load(src + i * stride + c, width);
    transpose16x16(r);
    for (std::size_t k = 0; k < width; ++k) _mm512_store_ps(out + (c + k) * 16, r[k]);
  }
}

// 16 rows' values of one panel column as floats (f16 widens exactly).   p: [16]
inline __m512 load_panel_column(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_panel_column(const f16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// n columns of one 16-row group's F16 panel from `panel` as floats (widen_panel_columns' BF16
// twin is above).   out: [n][16]
inline void widen_panel_columns(const f16* panel, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n * kFloatPanelRows; i += 16)
    _mm512_store_ps(out + i, load_panel_column(panel + i));
}

// y[j][0..16·kPanels) (+)= [panel 0; panel 1] · x[j][0..n) for the `count` <= 8 tokens
// x[first .. first + count) of one xpanel group: with two panels each broadcast feeds two FMAs
// (one load per 1.6 FMAs instead of one per FMA with one panel and 16 tokens); one panel takes
// the odd group at the end of a row range, every output summed in the same order either way:
// column after column, one FMA each, as the panels' decode (float_x16_tile) sums it.
// accumulate: add to y (a later column chunk continues the sum in the same order).
//   panels[p]: [n][16]
template <std::size_t kPanels>
inline void float_panel_tile(const float* const* panels, const float* xgroup, std::size_t first,
                             std::size_t n, std::size_t count, float* y, std::size_t y_stride,
                             bool accumulate) {
  __m512 acc[kPanels][8];
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j)
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) acc[p][j] =
          accumulate && j < count ? _mm512_loadu_ps(y + j * y_stride + 16 * p)
                                  : _mm512_setzero_ps();
  for (std::size_t c = 0; c < n; ++c) {
    __m512 w[kPanels];
    _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) w[p] =
        _mm512_loadu_ps(panels[p] + c * kFloatPanelRows);
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j) {
      const __m512 xj = _mm512_set1_ps(xgroup[c * 16 + first + j]);
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) acc[p][j] =
          _mm512_fmadd_ps(w[p], xj, acc[p][j]);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j) if (j < count)
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p)
          _mm512_storeu_ps(y + j * y_stride + 16 * p, acc[p][j]);
}

// The token tiles of one column chunk for one pair of row groups (or the odd last group):
// tile(panels, t, count, out) computes tokens [t, t + count), count <= 8, into out = y + t·rows,
// with panels a compile-time 1 or 2. The outputs the next tile reloads (rows floats apart) are
// prefetched first: the misses hide behind this tile's arithmetic. Shared with the BF16 GEMM.
//   y: [chunk][rows] from the group's first row
template <class Tile>
inline void run_panel_tiles(std::size_t chunk, std::size_t panels, float* y, std::size_t rows,
                            Tile&& tile) {
  for (std::size_t t = 0; t < chunk; t += 8) {
    for (std::size_t j = t + 8; j < std::min(t + 16, chunk); ++j)
      for (std::size_t p = 0; p < panels; ++p)
        _mm_prefetch(reinterpret_cast<const char*>(y + j * rows + 16 * p), _MM_HINT_T0);
    const std::size_t count = std::min<std::size_t>(8, chunk - t);
    if (panels == 2)
      tile(std::integral_constant<std::size_t, 2>{}, t, count, y + t * rows);
    else
      tile(std::integral_constant<std::size_t, 1>{}, t, count, y + t * rows);
  }
}

// Token groups [group_begin, group_end) of x: [n_tokens][cols] as the GEMM's token panels,
// every column block, into `packed_panels` (kFloatTokenPanels, kernels/scratch.hpp: its
// elements(cols, n_tokens) floats, 64-byte aligned): the values the GEMM packs per chunk without
// them.
inline void pack_float_token_groups(const float* x, std::size_t cols, std::size_t n_tokens,
                                    std::size_t group_begin, std::size_t group_end,
                                    void* packed_panels) {
  auto* const packed = static_cast<float*>(packed_panels);
  for (std::size_t c0 = 0; c0 < cols; c0 += kFloatPanelCols) {
    const std::size_t n = std::min(kFloatPanelCols, cols - c0);
    for (std::size_t g = group_begin; g < group_end; ++g)
      pack_columns(x + 16 * g * cols + c0, cols, std::min<std::size_t>(16, n_tokens - 16 * g), n,
                   packed + kFloatTokenPanels.offset(c0, 16 * g, n, n_tokens));
  }
}

// Rows [row_begin, row_begin + 16·groups) of y: [n_tokens][rows] for 16-row panels P:
// [rows/16][cols][16] (core/float_panels.hpp; P = bf16: the pair panels of core/bf16_panels.hpp,
// the same element offsets per group and column chunk), F32 read in place, F16 and BF16 widened
// once per chunk (widen_panel_columns). The token panels are read from
// `packed` (pack_float_token_groups, once per operation for every chunk) or, where it is
// nullptr, packed per token chunk into the caller's scratch (kFloatTokenChunk · kFloatPanelCols
// floats, 64-byte aligned).
template <class P>
inline void gemm_float_panels(const P* panels, std::size_t rows, std::size_t cols, const float* x,
                              const float* packed, std::size_t n_tokens, float* y,
                              std::size_t row_begin, std::size_t groups, void* scratch) {
  // F16 and BF16 panels as floats: [2][kFloatPanelCols][16] (unused for F32, read in place).
  alignas(64) float widened[std::is_same_v<P, float> ? 1 : 2]
                           [std::is_same_v<P, float> ? 16 : kFloatPanelCols * kFloatPanelRows];
  for (std::size_t t0 = 0; t0 < n_tokens; t0 += kFloatTokenChunk) {
    const std::size_t chunk = std::min(kFloatTokenChunk, n_tokens - t0);
    for (std::size_t c0 = 0; c0 < cols; c0 += kFloatPanelCols) {
      const std::size_t n = std::min(kFloatPanelCols, cols - c0);
      const float* xpanel;
      if (packed != nullptr) {
        xpanel = packed + kFloatTokenPanels.offset(c0, t0, n, n_tokens);
      } else {
        float* const own = static_cast<float*>(scratch);
        for (std::size_t t = 0; t < chunk; t += 16)
          pack_columns(x + (t0 + t) * cols + c0, cols, std::min<std::size_t>(16, chunk - t), n,
                       own + t * n);
        xpanel = own;
      }
      for (std::size_t g = 0; g < groups; g += 2) {
        const std::size_t r = row_begin + g * kFloatPanelRows,
                          count = std::min<std::size_t>(2, groups - g);
        const P* const first =
            panels + (r / kFloatPanelRows) * float_x16_group_elements(cols) + c0 * kFloatPanelRows;
        const float* panel_of[2];
        for (std::size_t p = 0; p < count; ++p) {
          const P* panel = first + p * float_x16_group_elements(cols);
          if constexpr (std::is_same_v<P, float>) {
            panel_of[p] = panel;
          } else {  // widened once per chunk, not once per token tile
            widen_panel_columns(panel, n, widened[p]);
            panel_of[p] = widened[p];
          }
        }
        if (count == 1) panel_of[1] = panel_of[0];
        run_panel_tiles(chunk, count, y + t0 * rows + r, rows,
                        [&](auto k_panels, std::size_t t, std::size_t tokens, float* out) {
                          float_panel_tile<k_panels()>(panel_of, xpanel + (t / 16 * 16) * n, t % 16,
                                                       n, tokens, out, rows, c0 > 0);
                        });
      }
    }
  }
}
#endif

// Calls tile(k_tokens, t) for token tiles [t, t + k_tokens) covering [0, n_tokens) in order:
// as few tiles as kMax (at most 8) tokens per tile allow, their sizes within one of each other
// (8 tokens with kMax 6: two of 4, not 6 and 2, whose short tile would wait on the FMA
// latency); one weight load feeds every token's accumulators of a tile. k_tokens is a
// std::integral_constant, so each tile keeps its accumulators in registers.
template <std::size_t kMax = 4, class Tile>
inline void for_token_tiles(std::size_t n_tokens, Tile&& tile) {
  static_assert(kMax >= 1 && kMax <= 8);
  const std::size_t tiles = (n_tokens + kMax - 1) / kMax;
  std::size_t t = 0;
  for (std::size_t i = 0; i < tiles; ++i) {
    const std::size_t size = (n_tokens - t + (tiles - i) - 1) / (tiles - i);  // in [1, kMax]
    // The tile of that many tokens, the largest tried first.
    [&]<std::size_t... k>(std::index_sequence<k...>) {
      (void)((size == kMax - k ? (tile(std::integral_constant<std::size_t, kMax - k>{}, t), true)
                               : false) ||
             ...);
    }
    (std::make_index_sequence<kMax>{});
    t += size;
  }
}

// The register tiles over rows [row_begin, row_end) of y: [n_tokens][rows], with w_rows pointing
// at row row_begin's weights (rows `cols` apart: the matrix itself, or a copy of some of its
// rows).   w_rows: [row_end − row_begin][cols], x: [n_tokens][cols]
template <class W>
inline void matmul_row_tiles(const W* w_rows, std::size_t rows, std::size_t cols, const float* x,
                             std::size_t n_tokens, float* y, std::size_t row_begin,
                             std::size_t row_end) {
  constexpr std::size_t kRows = 4, kRowBlock = 16;
  const auto row = [&](std::size_t r) { return w_rows + (r - row_begin) * cols; };
  // Blocks of kRowBlock rows, each block's weights read from memory once and from cache by every
  // token tile after the first; in a block, 4 rows at a time, then the rows left one at a time.
  for (std::size_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const std::size_t r1 = std::min(row_end, r0 + kRowBlock);
    for_token_tiles(n_tokens, [&](auto k_tokens, std::size_t t) {
      constexpr std::size_t k = k_tokens();
      std::size_t r = r0;
      for (; r + kRows <= r1; r += kRows)
        matmul_tile<kRows, k>(row(r), cols, x + t * cols, y + t * rows + r, rows);
      for (; r < r1; ++r) matmul_tile<1, k>(row(r), cols, x + t * cols, y + t * rows + r, rows);
    });
  }
}

// w: [rows][cols], x: [n_tokens][cols], y: [n_tokens][rows]; computes rows [row_begin, row_end).
// Every token count runs on the register tiles, whose arithmetic for one output (16 or 8 lanes
// of partial sums over the columns, then one horizontal sum) does not depend on the tile: batch
// invariant. The packed-panel GEMM sums in another order, so it runs on the panel layouts
// (matmul_float_x16), which are what a load repacks F32 and F16 into on AVX-512.
template <class W>
inline void matmul_float(const W* w, std::size_t rows, std::size_t cols, const float* x,
                         std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                         void* /*scratch*/) {
  matmul_row_tiles(w + row_begin * cols, rows, cols, x, n_tokens, y, row_begin, row_end);
}

// F32 and F16 weights in 16-row panels (DType::f32_x16, f16_x16; core/float_panels.hpp): each
// output summed column after column in one FMA chain, in the lanes of one AVX-512 register per
// 16 rows (two AVX2 registers, 16 scalars), for decode and prefill alike. AVX-512 prefill (8
// tokens or more) runs the packed GEMM on the panels in place, which sums in that same order, so
// the kernel is batch invariant. (AVX2's BF16 batches run it on column chunks widened to float,
// bf16_x16_widened_chunks.)
//   y: [kTokens][rows] outputs (rows y_stride apart) of kGroups consecutive groups of `cols`
//   columns from `first` for kTokens tokens x: [kTokens] rows x_stride apart; each column's
//   weights are loaded once for the tokens. accumulate: continue the sums y holds (a later
//   column chunk, in the same order). kFromMemory: the panels stream from memory, whose lines
//   each group asks for ahead as it reaches them (prefetch_stream_ahead); false for panels
//   already in cache (bf16_x16_widened_chunks' widened chunk).
template <std::size_t kGroups, std::size_t kTokens, bool kFromMemory = true, class P>
inline void float_x16_tile(const P* first, std::size_t cols, const float* x, std::size_t x_stride,
                           float* y, std::size_t y_stride, bool accumulate = false) {
  using V = VecF32;
  constexpr std::size_t kParts = kFloatPanelRows / V::lanes;
  const std::size_t group = float_x16_group_elements(cols);
  typename V::Reg acc[kGroups][kParts][kTokens];
  _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
      _Pragma("GCC unroll 16") for (std::size_t part = 0; part < kParts; ++part)
          _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) acc[g][part][t] =
              accumulate ? V::load(y + t * y_stride + g * kFloatPanelRows + part * V::lanes)
                         : V::zero();
  constexpr std::size_t kColumnsPerLine = 64 / (kFloatPanelRows * sizeof(P));  // F32 1, F16 2
  for (std::size_t c = 0; c < cols; ++c) {
    if (kFromMemory && c % kColumnsPerLine == 0)
      _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
          prefetch_stream_ahead(first + g * group + c * kFloatPanelRows, 64);
    // The column's weights first, then each token's broadcast meets all of them at once, so
    // that one broadcast is live at a time (token by token inside the weights' loop, AVX2's six
    // tokens' broadcasts lived across both halves and spilled the accumulators).
    typename V::Reg w[kGroups][kParts];
    _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
        _Pragma("GCC unroll 16") for (std::size_t part = 0; part < kParts; ++part) w[g][part] =
            V::load(first + g * group + c * kFloatPanelRows + part * V::lanes);
    _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) {
      const typename V::Reg xt = V::set1(x[t * x_stride + c]);
      _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
          _Pragma("GCC unroll 16") for (std::size_t part = 0; part < kParts; ++part)
              acc[g][part][t] = V::fma(w[g][part], xt, acc[g][part][t]);
    }
  }
  _Pragma("GCC unroll 2") for (std::size_t g = 0; g < kGroups; ++g)
      _Pragma("GCC unroll 16") for (std::size_t part = 0; part < kParts; ++part)
          _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t)
              V::store(y + t * y_stride + g * kFloatPanelRows + part * V::lanes, acc[g][part][t]);
}

// Tokens per tile of one 16-row group's batches: AVX2 six, whose two accumulators each, the
// column's two weights and one broadcast take 15 of its 16 registers (four tokens' 8
// accumulators were just the FMA latency times its two ports, no slack for a late load);
// AVX-512 four (it takes batches below kFloatPackedMinTokens two groups at a time, and the rest
// to the packed GEMM).
inline constexpr std::size_t kFloatBatchTokens = VecF32::lanes < kFloatPanelRows ? 6 : 4;

// Rows [row_begin, row_end) split at the 16-row groups of a panel layout (F32/F16 and BF16):
// cut(g, lo, hi) for the rows [lo, hi) of group g where the range covers only part of it (at most
// one group at each end), whole(first, groups) for the whole groups from row `first` between them,
// in row order.
template <class Cut, class Whole>
inline void split_at_groups(std::size_t row_begin, std::size_t row_end, Cut&& cut, Whole&& whole) {
  const std::size_t first = (row_begin + 15) / 16 * 16, last = std::max(first, row_end / 16 * 16);
  if (row_begin < first) cut(row_begin / 16, row_begin, std::min(first, row_end));
  if (first < last) whole(first, (last - first) / 16);
  if (last < row_end && row_end > first) cut(last / 16, last, row_end);
}

// w: [rows/16][cols][16] panels, x: [n_tokens][cols], y: [n_tokens][rows]; rows
// [row_begin, row_end), any range (a group cut by the range is computed whole and its rows in
// the range kept). packed: x as the GEMM's token panels (pack_float_token_groups) or nullptr.
template <class P>
inline void matmul_float_x16_packed(const void* weights, std::size_t rows, std::size_t cols,
                                    const float* x, [[maybe_unused]] const void* packed,
                                    std::size_t n_tokens, float* y, std::size_t row_begin,
                                    std::size_t row_end, [[maybe_unused]] void* scratch) {
  const P* panels = static_cast<const P*>(weights);
  const std::size_t group = float_x16_group_elements(cols);
  const auto cut_group = [&](std::size_t g, std::size_t lo, std::size_t hi) {
    alignas(64) float out[kFloatPanelRows];
    for (std::size_t t = 0; t < n_tokens; ++t) {
      float_x16_tile<1, 1>(panels + g * group, cols, x + t * cols, cols, out, 0);
      for (std::size_t r = lo; r < hi; ++r) y[t * rows + r] = out[r % kFloatPanelRows];
    }
  };
  const auto whole_groups = [&](std::size_t first, std::size_t groups) {
    const std::size_t last = first + 16 * groups;
#if HLLM_ISA_LEVEL == 2
    if (n_tokens >= kFloatPackedMinTokens) {
      gemm_float_panels(panels, rows, cols, x, static_cast<const float*>(packed), n_tokens, y,
                        first, groups, scratch);
    } else
#endif
    {
      // Decode and small batches: two groups at a time, up to four tokens per column load (on
      // AVX2 two groups only up to two tokens, whose accumulators then fill its 16 registers: one
      // group's two chains left decode waiting on the FMA latency; larger batches one group, up
      // to kFloatBatchTokens); every token of the batch before the next groups, whose panels
      // are then read from memory once.
      const auto groups_for = [&](auto k_groups, std::size_t r0) {
        for_token_tiles<k_groups() == 1 ? kFloatBatchTokens : 4>(
            n_tokens, [&](auto k_tokens, std::size_t t) {
              float_x16_tile<k_groups(), k_tokens()>(panels + r0 / 16 * group, cols, x + t * cols,
                                                     cols, y + t * rows + r0, rows);
            });
      };
      const auto run = [&](auto k_groups) {
        std::size_t r = first;
        for (; r + 16 * k_groups() <= last; r += 16 * k_groups()) groups_for(k_groups, r);
        for (; r < last; r += 16) groups_for(std::integral_constant<std::size_t, 1>{}, r);
      };
      if (VecF32::lanes == kFloatPanelRows || n_tokens <= 2)
        run(std::integral_constant<std::size_t, 2>{});
      else
        run(std::integral_constant<std::size_t, 1>{});
    }
  };
  split_at_groups(row_begin, row_end, cut_group, whole_groups);
}
template <class P>
inline void matmul_float_x16(const void* weights, std::size_t rows, std::size_t cols,
                             const float* x, std::size_t n_tokens, float* y, std::size_t row_begin,
                             std::size_t row_end, void* scratch) {
  matmul_float_x16_packed<P>(weights, rows, cols, x, nullptr, n_tokens, y, row_begin, row_end,
                             scratch);
}

inline void matmul_f32(const void* w, std::size_t rows, std::size_t cols, const float* x,
                       std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                       void* scratch) {
  matmul_float(static_cast<const float*>(w), rows, cols, x, n_tokens, y, row_begin, row_end,
               scratch);
}
inline void matmul_f16(const void* w, std::size_t rows, std::size_t cols, const float* x,
                       std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                       void* scratch) {
  matmul_float(static_cast<const f16*>(w), rows, cols, x, n_tokens, y, row_begin, row_end, scratch);
}
inline void matmul_bf16(const void* w, std::size_t rows, std::size_t cols, const float* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* scratch) {
  matmul_float(static_cast<const bf16*>(w), rows, cols, x, n_tokens, y, row_begin, row_end,
               scratch);
}
