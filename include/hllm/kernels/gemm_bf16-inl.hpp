// Prefill GEMM for BF16 weights on AVX512-BF16: vdpbf16ps on packed panels, with activations
// rounded to bf16 (round to nearest even) as llama.cpp does for bf16 weights. Included by
// isa_kernels.hpp in namespace avx512_bf16 only, after the avx512 kernels and transpose16x16
// (matmul_float-inl.hpp), which it reuses. No include guard, by design.
//
// vdpbf16ps adds, in each of 16 float lanes, a[2i]·b[2i] + a[2i+1]·b[2i+1]: two multiply-adds
// per lane, twice the FP32 FMA's. The panel holds one pair of adjacent columns of 16 weight rows
// per zmm (lane r = row r's pair), the token panel one pair of 16 tokens' activations, and the
// tile broadcasts a token's pair against the weight pairs of two panels (32 rows, 8 tokens:
// 16 accumulators; run_panel_tiles, shared with the FP32 GEMM, prefetches the outputs the next
// tile reloads). It runs on weights repacked at load time (DType::bf16_x16,
// core/bf16_panels.hpp), which are these panels already and are read in place; decode on them
// runs bf16_x16_dot_tile, which sums in the GEMM's order (batch invariance; BF16 in the file's
// layout takes the float-activation tiles for every token count). This path is the fast path
// only: the rounding of activations to 8 significant bits costs precision (the fixtures' bf16
// rms error is no larger than llama.cpp's, which rounds the same way), so the table lists it
// apart from matmul_bf16_x16 and SessionOptions::exact never takes it; nor does any session
// where vdpbf16ps issues at half the FMA's rate (Intel's cores: KernelTable::bf16_dot_preferred).

// The panel and token-chunk sizes (kBf16PanelPairs, kBf16TokenChunk) are in kernels/scratch.hpp,
// which sizes the token panel's scratch: a chunk's token panel is 256 KiB (L2).

// The first `elements` <= 32 floats of x rounded to bf16 (round to nearest even) as 16 pairs,
// in order; pairs past the end are zeros.
inline __m512i bf16_pairs(const float* x, std::size_t elements) {
  const __mmask16 lo = VecF32::mask(std::min<std::size_t>(16, elements));
  const __mmask16 hi = elements > 16 ? VecF32::mask(elements - 16) : 0;
  // cvtne2ps_pbh puts its second operand's 16 values first.
  return reinterpret_cast<__m512i>(
      _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + 16), _mm512_maskz_loadu_ps(lo, x)));
}

// The same for float activations, rounded to bf16 on the way.
inline void pack_float_pairs(const float* src, std::size_t stride, std::size_t valid_rows,
                             std::size_t cols, std::size_t pairs, std::uint32_t* out) {
  __m512 r[16];
  for (std::size_t k = 0; k < pairs; k += 16) {
    const std::size_t elements = std::min<std::size_t>(32, cols - 2 * k);
    _Pragma("GCC unroll 16") for (std::size_t i = 0; i < 16; ++i) r[i] =
        i >= valid_rows ? _mm512_setzero_ps()
                        : _mm512_castsi512_ps(bf16_pairs(src + i * stride + 2 * k, elements));
    transpose16x16(r);
    const std::size_t width = std::min<std::size_t>(16, pairs - k);
    for (std::size_t c = 0; c < width; ++c)
      _mm512_store_si512(out + (k + c) * 16, _mm512_castps_si512(r[c]));
  }
}

// y[j][0..16·kPanels) (+)= [panel 0; panel 1] · x[j] over `pairs` column pairs for the
// `count` <= 8 tokens x[first .. first + count) of one token-panel group: with two panels a
// vdpbf16ps needs 0.6 loads, not 1.06 as with one panel and 16 tokens; one panel takes the odd
// group at the end of a row range, every output summed in the same order either way.
template <std::size_t kPanels>
inline void bf16_panel_tile(const std::uint32_t* const* panels, const std::uint32_t* xgroup,
                            std::size_t first, std::size_t pairs, std::size_t count, float* y,
                            std::size_t y_stride, bool accumulate) {
  __m512 acc[kPanels][8];
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j)
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) acc[p][j] =
          accumulate && j < count ? _mm512_loadu_ps(y + j * y_stride + 16 * p)
                                  : _mm512_setzero_ps();
  for (std::size_t k = 0; k < pairs; ++k) {
    __m512bh w[kPanels];
    _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) w[p] =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(panels[p] + k * 16));
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j) {
      const __m512bh xj = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(xgroup[k * 16 + first + j])));
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p) acc[p][j] =
          _mm512_dpbf16_ps(acc[p][j], w[p], xj);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < 8; ++j) if (j < count)
      _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kPanels; ++p)
          _mm512_storeu_ps(y + j * y_stride + 16 * p, acc[p][j]);
}

// Token groups [group_begin, group_end) of x: [n_tokens][cols] as the GEMM's token panels,
// every column block, into `packed` (kBf16TokenPanels, kernels/scratch.hpp: its elements(cols,
// n_tokens) dwords, 64-byte aligned): the same values the GEMM packs per chunk without them.
inline void pack_bf16_token_groups(const float* x, std::size_t cols, std::size_t n_tokens,
                                   std::size_t group_begin, std::size_t group_end,
                                   void* packed_panels) {
  auto* const packed = static_cast<std::uint32_t*>(packed_panels);
  for (std::size_t c0 = 0; c0 < cols; c0 += 2 * kBf16PanelPairs) {
    const std::size_t width = std::min(2 * kBf16PanelPairs, cols - c0), pairs = (width + 1) / 2;
    for (std::size_t g = group_begin; g < group_end; ++g)
      pack_float_pairs(x + 16 * g * cols + c0, cols, std::min<std::size_t>(16, n_tokens - 16 * g),
                       width, pairs, packed + kBf16TokenPanels.offset(c0, 16 * g, pairs, n_tokens));
  }
}

// Rows [row_begin, row_begin + 16·groups) of y: [n_tokens][rows] from the panels
// panel_of(r, c0, width, pairs, scratch) gives: columns [c0, c0 + width) of rows r..r+15 as
// `pairs` column pairs of 16 dwords, packed into `scratch` (kBf16PanelPairs·16 dwords, 64-byte
// aligned) or read in place from repacked weights. The token panels are read from `packed`
// (pack_bf16_token_groups, once per operation for every chunk) or, where it is nullptr, packed
// per token chunk into the caller's scratch (kBf16TokenChunk · kBf16PanelPairs dwords, 64-byte
// aligned), which on a Zen 5 cost a quarter of the GEMM's time at 32 row chunks.
template <class PanelOf>
inline void gemm_bf16_panels(std::size_t rows, std::size_t cols, const float* x,
                             const std::uint32_t* packed, std::size_t n_tokens, float* y,
                             std::size_t row_begin, std::size_t groups, void* token_scratch,
                             PanelOf&& panel_of) {
  alignas(64) std::uint32_t scratch[2][kBf16PanelPairs * 16];
  for (std::size_t t0 = 0; t0 < n_tokens; t0 += kBf16TokenChunk) {
    const std::size_t chunk = std::min(kBf16TokenChunk, n_tokens - t0);
    for (std::size_t c0 = 0; c0 < cols; c0 += 2 * kBf16PanelPairs) {
      const std::size_t width = std::min(2 * kBf16PanelPairs, cols - c0);
      const std::size_t pairs = (width + 1) / 2;
      const std::uint32_t* xpanel;
      if (packed != nullptr) {
        xpanel = packed + kBf16TokenPanels.offset(c0, t0, pairs, n_tokens);
      } else {
        std::uint32_t* const own = static_cast<std::uint32_t*>(token_scratch);
        for (std::size_t t = 0; t < chunk; t += 16)
          pack_float_pairs(x + (t0 + t) * cols + c0, cols, std::min<std::size_t>(16, chunk - t),
                           width, pairs, own + t * pairs);
        xpanel = own;
      }
      for (std::size_t g = 0; g < groups; g += 2) {
        const std::size_t r = row_begin + g * 16, panels = std::min<std::size_t>(2, groups - g);
        const std::uint32_t* panel[2] = {};
        for (std::size_t p = 0; p < panels; ++p)
          panel[p] = panel_of(r + 16 * p, c0, width, pairs, scratch[p]);
        avx512::run_panel_tiles(chunk, panels, y + t0 * rows + r, rows,
                                [&](auto k_panels, std::size_t t, std::size_t count, float* out) {
                                  bf16_panel_tile<k_panels()>(panel, xpanel + (t / 16 * 16) * pairs,
                                                              t % 16, pairs, count, out, rows,
                                                              c0 > 0);
                                });
      }
    }
  }
}

// x rounded to bf16 pairs (as pack_float_pairs rounds them), in order.   x: [cols] → out:
// [(cols + 1) / 2] dwords
inline void round_to_bf16_pairs(const float* x, std::size_t cols, std::uint32_t* out) {
  for (std::size_t c = 0; c < cols; c += 32) {
    const std::size_t n = std::min<std::size_t>(32, cols - c);
    _mm512_mask_storeu_epi32(out + c / 2, VecF32::mask((n + 1) / 2), bf16_pairs(x + c, n));
  }
}

// y[j][0..16) = group · x[j] for kTokens tokens of bf16 pairs: one vdpbf16ps per column pair and
// token, in pair order into one accumulator per token, as the GEMM's tile (bf16_panel_tile)
// sums them, so decode and prefill give a token the same bits (batch invariance). Decode on the
// panels: one instruction per 64 bytes of weights (the float-activation kernel needs four), so
// a core keeps more of the stream's cache lines in flight; it asks for them ahead too
// (prefetch_stream_ahead: 24-42% faster decode than without on an Emerald Rapids Xeon).
//   group: [pairs][16] dwords, xpairs: [kTokens][pairs] dwords
template <std::size_t kTokens>
inline void bf16_x16_dot_tile(const std::uint32_t* group, std::size_t pairs,
                              const std::uint32_t* xpairs, float* y, std::size_t y_stride) {
  __m512 acc[kTokens];
  _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) acc[j] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < pairs; ++k) {
    prefetch_stream_ahead(group + k * 16, 64);
    const __m512bh w = reinterpret_cast<__m512bh>(_mm512_loadu_si512(group + k * 16));
    _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) acc[j] = _mm512_dpbf16_ps(
        acc[j], w,
        reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xpairs[j * pairs + k]))));
  }
  _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j)
      _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

// Whole groups [first, last) rows of the panels against n_tokens < kBf16PackedMinTokens tokens,
// activations rounded to bf16 pairs once per call into the caller's scratch.
inline void bf16_x16_dot_rows(const std::uint32_t* panels, std::size_t rows, std::size_t cols,
                              const float* x, std::size_t n_tokens, float* y, std::size_t first,
                              std::size_t last, void* scratch) {
  const std::size_t pairs = cols / 2;
  std::uint32_t* const xpairs = static_cast<std::uint32_t*>(scratch);  // [n_tokens][pairs]
  for (std::size_t t = 0; t < n_tokens; ++t)
    round_to_bf16_pairs(x + t * cols, cols, xpairs + t * pairs);
  for (std::size_t r = first; r < last; r += 16) {
    const std::uint32_t* group = panels + r / 16 * bf16_x16_group_dwords(cols);
    avx512::for_token_tiles(n_tokens, [&](auto k_tokens, std::size_t t) {
      bf16_x16_dot_tile<k_tokens()>(group, pairs, xpairs + t * pairs, y + t * rows + r, rows);
    });
  }
}

// The same for weights repacked into 16-row pair panels (DType::bf16_x16), which are the GEMM's
// panels already: no packing; under kBf16PackedMinTokens tokens (decode) the panels' dot tile.
// Rows outside whole groups take the float-activation kernel (matmul_bf16_x16).
// packed: x as the GEMM's token panels (pack_bf16_token_groups), or nullptr (packed per chunk).
inline void matmul_bf16_x16_packed(const void* weights, std::size_t rows, std::size_t cols,
                                   const float* x, const void* packed_panels, std::size_t n_tokens,
                                   float* y, std::size_t row_begin, std::size_t row_end,
                                   void* scratch) {
  const auto* panels = static_cast<const std::uint32_t*>(weights);
  const auto* packed = static_cast<const std::uint32_t*>(packed_panels);
  const std::size_t first = (row_begin + 15) / 16 * 16, last = row_end / 16 * 16;
  if (first >= last)
    return avx512::matmul_bf16_x16(weights, rows, cols, x, n_tokens, y, row_begin, row_end,
                                   scratch);
  if (row_begin < first)
    avx512::matmul_bf16_x16(weights, rows, cols, x, n_tokens, y, row_begin, first, scratch);
  if (n_tokens < kBf16PackedMinTokens)
    bf16_x16_dot_rows(panels, rows, cols, x, n_tokens, y, first, last, scratch);
  else
    gemm_bf16_panels(rows, cols, x, packed, n_tokens, y, first, (last - first) / 16, scratch,
                     [&](std::size_t r, std::size_t c0, std::size_t, std::size_t,
                         std::uint32_t*) -> const std::uint32_t* {
                       return panels + r / 16 * bf16_x16_group_dwords(cols) + c0 / 2 * 16;
                     });
  if (last < row_end)
    avx512::matmul_bf16_x16(weights, rows, cols, x, n_tokens, y, last, row_end, scratch);
}
inline void matmul_bf16_x16_dot(const void* weights, std::size_t rows, std::size_t cols,
                                const float* x, std::size_t n_tokens, float* y,
                                std::size_t row_begin, std::size_t row_end, void* scratch) {
  matmul_bf16_x16_packed(weights, rows, cols, x, nullptr, n_tokens, y, row_begin, row_end, scratch);
}
