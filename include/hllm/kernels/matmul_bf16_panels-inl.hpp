// BF16 weights repacked into 16-row pair panels (DType::bf16_x16, core/bf16_panels.hpp) against
// float32 activations: the exact path of such weights, and their decode. Written once and
// compiled per ISA after matmul_float-inl.hpp (see isa_kernels.hpp). No include guard, by design.
//
// On AVX-512 a whole group is read as it lies: each zmm holds one column pair of 16 rows, the
// even column's bf16 values become floats by a 16-bit shift and the odd column's by a mask, and
// two FMAs with broadcast activations accumulate 16 rows' outputs in the lanes of one register.
// Other ISAs, and rows of a range that starts or ends inside a group, copy the group's rows
// back to the file's layout and run the row-major tiles.

#if HLLM_ISA_LEVEL == 2
// y[j][0..16) = group · x[j] for kTokens tokens, float32 activations; four accumulator chains
// per token (two column pairs at a time, even and odd columns apart), so one token's FMAs
// overlap.   group: [cols/2][16] dwords, x: [kTokens][cols], y: [kTokens] rows y_stride apart
template <std::size_t kTokens>
inline void bf16_x16_group_tile(const std::uint32_t* group, std::size_t cols, const float* x,
                                float* y, std::size_t y_stride) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[kTokens][4];
  _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j)
      _Pragma("GCC unroll 4") for (std::size_t a = 0; a < 4; ++a) acc[j][a] = _mm512_setzero_ps();
  const auto step = [&](std::size_t k, std::size_t a) {
    const __m512i w = _mm512_loadu_si512(group + k * kBf16PanelRows);
    const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(w, high_half));
    _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) {
      acc[j][a] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[j * cols + 2 * k]), acc[j][a]);
      acc[j][a + 1] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[j * cols + 2 * k + 1]), acc[j][a + 1]);
    }
  };
  const std::size_t pairs = cols / 2;
  std::size_t k = 0;
  for (; k + 2 <= pairs; k += 2) step(k, 0), step(k + 1, 2);
  if (k < pairs) step(k, 0);
  _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) _mm512_storeu_ps(
      y + j * y_stride,
      _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_add_ps(acc[j][2], acc[j][3])));
}

// Every token against one whole group.   y: [n_tokens][rows] from the group's first row
inline void bf16_x16_group(const std::uint32_t* group, std::size_t rows, std::size_t cols,
                           const float* x, std::size_t n_tokens, float* y) {
  for_token_tiles(n_tokens, [&](auto k_tokens, std::size_t t) {
    bf16_x16_group_tile<k_tokens()>(group, cols, x + t * cols, y + t * rows, rows);
  });
}
#endif

// w: bf16_x16 panels of a [rows][cols] matrix, x: [n_tokens][cols], y: [n_tokens][rows]; rows
// [row_begin, row_end), any range. scratch holds one group in the file's layout, [16][cols].
inline void matmul_bf16_x16(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                            std::size_t n_tokens, float* y, std::size_t row_begin,
                            std::size_t row_end, void* scratch) {
  const auto* panels = static_cast<const std::uint32_t*>(weights);
  const std::size_t group_dwords = bf16_x16_group_dwords(cols);
  bf16* const group_rows = static_cast<bf16*>(scratch);
  for (std::size_t g = row_begin / kBf16PanelRows; g * kBf16PanelRows < row_end; ++g) {
    const std::size_t first = g * kBf16PanelRows;
    const std::size_t lo = std::max(row_begin, first),
                      hi = std::min(row_end, first + kBf16PanelRows);
#if HLLM_ISA_LEVEL == 2
    if (lo == first && hi == first + kBf16PanelRows) {
      bf16_x16_group(panels + g * group_dwords, rows, cols, x, n_tokens, y + first);
      continue;
    }
#endif
    deinterleave_bf16_group(panels + g * group_dwords, cols, group_rows);
    matmul_row_tiles(group_rows + (lo - first) * cols, rows, cols, x, n_tokens, y, lo, hi);
  }
}
