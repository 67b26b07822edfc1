// Matrix-matrix (and, with one token, matrix-vector) products for plain floating-point weights
// (f32, f16, bf16), written once against VecF32 and compiled per ISA (see dispatch.hpp). No
// include guard, by design.
//
// y[t][r] = sum_c w[r][c] * x[t][c] for rows r in [row_begin, row_end): a caller splits the rows
// across threads. Register blocking: a tile of kRows weight rows × kTokens tokens keeps
// kRows·kTokens accumulators in registers, so each weight vector loaded is used kTokens times
// and each activation vector kRows times. Decode (one token) is memory-bound and streams the
// weights once; prefill reuses every weight load across four tokens.

template <std::size_t kRows, std::size_t kTokens, class W>
inline void matmul_tile(const W* w, std::size_t cols, const float* x, float* y, std::size_t y_stride) {
  using V = VecF32;
  typename V::Reg acc[kRows][kTokens];
  for (std::size_t i = 0; i < kRows; ++i)
    for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] = V::zero();
  std::size_t c = 0;
  for (; c + V::lanes <= cols; c += V::lanes) {
    typename V::Reg xv[kTokens];
    for (std::size_t j = 0; j < kTokens; ++j) xv[j] = V::load(x + j * cols + c);
    for (std::size_t i = 0; i < kRows; ++i) {
      const typename V::Reg wv = V::load(w + i * cols + c);
      for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] = V::fma(wv, xv[j], acc[i][j]);
    }
  }
  if (c < cols) {  // ragged tail: masked loads fill the missing lanes with zeros
    const std::size_t n = cols - c;
    typename V::Reg xv[kTokens];
    for (std::size_t j = 0; j < kTokens; ++j) xv[j] = V::load(x + j * cols + c, n);
    for (std::size_t i = 0; i < kRows; ++i) {
      const typename V::Reg wv = V::load(w + i * cols + c, n);
      for (std::size_t j = 0; j < kTokens; ++j) acc[i][j] = V::fma(wv, xv[j], acc[i][j]);
    }
  }
  for (std::size_t i = 0; i < kRows; ++i)
    for (std::size_t j = 0; j < kTokens; ++j) y[j * y_stride + i] = V::sum(acc[i][j]);
}

// w: [rows][cols], x: [n_tokens][cols], y: [n_tokens][rows]; computes rows [row_begin, row_end).
template <class W>
inline void matmul_float(const W* w, std::size_t rows, std::size_t cols, const float* x,
                         std::size_t n_tokens, float* y, std::size_t row_begin,
                         std::size_t row_end) {
  constexpr std::size_t kRows = 4, kTokens = 4;
  std::size_t t = 0;
  for (; t + kTokens <= n_tokens; t += kTokens) {
    std::size_t r = row_begin;
    for (; r + kRows <= row_end; r += kRows)
      matmul_tile<kRows, kTokens>(w + r * cols, cols, x + t * cols, y + t * rows + r, rows);
    for (; r < row_end; ++r)
      matmul_tile<1, kTokens>(w + r * cols, cols, x + t * cols, y + t * rows + r, rows);
  }
  for (; t < n_tokens; ++t) {  // remaining tokens one at a time (decode is this loop alone)
    std::size_t r = row_begin;
    for (; r + kRows <= row_end; r += kRows)
      matmul_tile<kRows, 1>(w + r * cols, cols, x + t * cols, y + t * rows + r, rows);
    for (; r < row_end; ++r)
      matmul_tile<1, 1>(w + r * cols, cols, x + t * cols, y + t * rows + r, rows);
  }
}

inline void matmul_f32(const void* w, std::size_t rows, std::size_t cols, const float* x,
                       std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end) {
  matmul_float(static_cast<const float*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_f16(const void* w, std::size_t rows, std::size_t cols, const float* x,
                       std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end) {
  matmul_float(static_cast<const f16*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_bf16(const void* w, std::size_t rows, std::size_t cols, const float* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end) {
  matmul_float(static_cast<const bf16*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
