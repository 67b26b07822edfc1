// Prefill GEMM for BF16 weights on AVX512-BF16: vdpbf16ps on packed panels, with activations
// rounded to bf16 (round to nearest even) as llama.cpp does for bf16 weights. Included by
// dispatch.hpp in namespace avx512_bf16 only, after the avx512 kernels and transpose16x16
// (matmul_float-inl.hpp), which it reuses. No include guard, by design.
//
// vdpbf16ps adds, in each of 16 float lanes, a[2i]·b[2i] + a[2i+1]·b[2i+1]: two multiply-adds
// per lane, twice the FP32 FMA's. The panel holds one pair of adjacent columns of 16 weight rows
// per zmm (lane r = row r's pair), the token panel one pair of 16 tokens' activations, and the
// tile broadcasts a token's pair against the weight pairs of two panels (32 rows, 8 tokens:
// 16 accumulators; run_panel_tiles, shared with the FP32 GEMM, prefetches the outputs the next
// tile reloads). This path is the fast path only: the rounding of activations to 8 significant
// bits costs precision (the fixtures' bf16 rms error is no larger than llama.cpp's, which rounds
// the same way), so the table lists it apart from matmul_bf16 and SessionOptions::exact never
// takes it.

inline constexpr std::size_t kBf16PanelPairs = 128;  // 256 columns per panel, 8 KiB
// A chunk's token panel is 256 KiB (L2); 512 tokens rather than 256 pack each weight panel half
// as often: 5% faster (BM_MatmulBf16Dot).
inline constexpr std::size_t kBf16TokenChunk = 512, kBf16PackedMinTokens = 8;

// Column pairs [0, pairs) of 16 rows of bf16 `src` (rows `stride` elements apart, `cols`
// columns valid from src on) → out[pairs][16] dwords; rows >= valid_rows and columns >= cols
// read as zeros.
inline void pack_bf16_pairs(const bf16* src, std::size_t stride, std::size_t valid_rows,
                            std::size_t cols, std::size_t pairs, std::uint32_t* out) {
  __m512 r[16];
  for (std::size_t k = 0; k < pairs; k += 16) {
    const std::size_t elements = std::min<std::size_t>(32, cols - 2 * k);
    const __mmask32 mask = elements == 32 ? ~__mmask32{0} : (__mmask32{1} << elements) - 1;
    _Pragma("GCC unroll 16") for (std::size_t i = 0; i < 16; ++i) r[i] =
        i >= valid_rows
            ? _mm512_setzero_ps()
            : _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, src + i * stride + 2 * k));
    transpose16x16(r);
    const std::size_t width = std::min<std::size_t>(16, pairs - k);
    for (std::size_t c = 0; c < width; ++c)
      _mm512_store_si512(out + (k + c) * 16, _mm512_castps_si512(r[c]));
  }
}

// The same for float activations, rounded to bf16 on the way.
inline void pack_float_pairs(const float* src, std::size_t stride, std::size_t valid_rows,
                             std::size_t cols, std::size_t pairs, std::uint32_t* out) {
  __m512 r[16];
  for (std::size_t k = 0; k < pairs; k += 16) {
    const std::size_t elements = std::min<std::size_t>(32, cols - 2 * k);
    const __mmask16 lo = VecF32::mask(std::min<std::size_t>(16, elements));
    const __mmask16 hi = elements > 16 ? VecF32::mask(elements - 16) : 0;
    _Pragma("GCC unroll 16") for (std::size_t i = 0; i < 16; ++i) {
      if (i >= valid_rows) {
        r[i] = _mm512_setzero_ps();
        continue;
      }
      const float* row = src + i * stride + 2 * k;
      // cvtne2ps_pbh puts its second operand's 16 values first.
      r[i] = _mm512_castsi512_ps(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(
          _mm512_maskz_loadu_ps(hi, row + 16), _mm512_maskz_loadu_ps(lo, row))));
    }
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
        reinterpret_cast<__m512bh>(_mm512_load_si512(panels[p] + k * 16));
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

// y[t][r] for rows [row_begin, row_end) of bf16 w: [rows][cols], x: [n_tokens][cols] floats.
inline void matmul_bf16_dot(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                            std::size_t n_tokens, float* y, std::size_t row_begin,
                            std::size_t row_end) {
  const bf16* w = static_cast<const bf16*>(weights);
  const std::size_t groups = (row_end - row_begin) / 16;
  if (n_tokens < kBf16PackedMinTokens || groups == 0)
    return avx512::matmul_bf16(weights, rows, cols, x, n_tokens, y, row_begin, row_end);
  alignas(64) std::uint32_t panel[2][kBf16PanelPairs * 16];
  thread_local AlignedBuffer<std::uint32_t> xpanel;
  if (xpanel.size() < kBf16TokenChunk * kBf16PanelPairs)
    xpanel = AlignedBuffer<std::uint32_t>(kBf16TokenChunk * kBf16PanelPairs);
  for (std::size_t t0 = 0; t0 < n_tokens; t0 += kBf16TokenChunk) {
    const std::size_t chunk = std::min(kBf16TokenChunk, n_tokens - t0);
    for (std::size_t c0 = 0; c0 < cols; c0 += 2 * kBf16PanelPairs) {
      const std::size_t width = std::min(2 * kBf16PanelPairs, cols - c0);
      const std::size_t pairs = (width + 1) / 2;
      for (std::size_t t = 0; t < chunk; t += 16)
        pack_float_pairs(x + (t0 + t) * cols + c0, cols, std::min<std::size_t>(16, chunk - t),
                         width, pairs, xpanel.data() + t * pairs);
      for (std::size_t g = 0; g < groups; g += 2) {
        const std::size_t r = row_begin + g * 16, panels = std::min<std::size_t>(2, groups - g);
        for (std::size_t p = 0; p < panels; ++p)
          pack_bf16_pairs(w + (r + 16 * p) * cols + c0, cols, 16, width, pairs, panel[p]);
        const std::uint32_t* const panel_of[2] = {panel[0], panel[1]};
        avx512::run_panel_tiles(chunk, panels, y + t0 * rows + r, rows,
                                [&](auto k_panels, std::size_t t, std::size_t count, float* out) {
                                  bf16_panel_tile<k_panels()>(
                                      panel_of, xpanel.data() + (t / 16 * 16) * pairs, t % 16,
                                      pairs, count, out, rows, c0 > 0);
                                });
      }
    }
  }
  const std::size_t done = row_begin + groups * 16;
  if (done < row_end) avx512::matmul_bf16(weights, rows, cols, x, n_tokens, y, done, row_end);
}
