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
  // Remaining tokens one at a time (decode is this loop alone), one weight row at a time: a
  // single sequential stream reads memory fastest (see matmul_quant).
  for (; t < n_tokens; ++t)
    for (std::size_t r = row_begin; r < row_end; ++r)
      matmul_tile<1, 1>(w + r * cols, cols, x + t * cols, y + t * rows + r, rows);
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
                        std::size_t n_tokens, float* y, std::size_t row_begin,
                        std::size_t row_end) {
  matmul_float(static_cast<const bf16*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}

// Block dequantization for the kernel below: the reference code, except for the common block
// types, which get the same arithmetic vectorized (the reference loop with its portable f16
// conversion ran the output projection at a fifth of memory speed).
template <class Block>
inline void dequantize_for_dot(const Block& b, float* out) {
  reference::dequantize_block(b, out);
}
#if HLLM_ISA_LEVEL >= 1
// Stores are as wide as the kernel's VecF32 loads, so the loads forward from the stores (a
// narrower store under a wider load stalls on every block).
inline void dequantize_for_dot(const BlockQ8_0& b, float* out) {
  const float d = _cvtsh_ss(b.d.bits);
#if HLLM_ISA_LEVEL == 2
  for (std::size_t k = 0; k < 32; k += 16) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + k));
    _mm512_storeu_ps(out + k,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(d)));
  }
#else
  for (std::size_t k = 0; k < 32; k += 8) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + k));
    _mm256_storeu_ps(out + k,
                     _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(d)));
  }
#endif
}
inline void dequantize_for_dot(const BlockQ4_0& b, float* out) {
  const float d = _cvtsh_ss(b.d.bits);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  // Low nibbles are elements 0..15, high nibbles 16..31.
  const __m128i halves[2] = {_mm_and_si128(bytes, mask),
                             _mm_and_si128(_mm_srli_epi16(bytes, 4), mask)};
  for (std::size_t h = 0; h < 2; ++h) {
#if HLLM_ISA_LEVEL == 2
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(halves[h]));
    _mm512_storeu_ps(out + h * 16,
                     _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(8.0f)), _mm512_set1_ps(d)));
#else
    for (std::size_t k = 0; k < 2; ++k) {
      const __m128i part = k == 0 ? halves[h] : _mm_unpackhi_epi64(halves[h], halves[h]);
      const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
      _mm256_storeu_ps(out + h * 16 + k * 8,
                       _mm256_mul_ps(_mm256_sub_ps(v, _mm256_set1_ps(8.0f)), _mm256_set1_ps(d)));
    }
#endif
  }
}
#endif

// Quantized weights against float32 activations: each weight block is dequantized (exactly, by
// the reference code) into a small buffer and multiplied with the float activations. Slower than
// the integer kernels but free of activation rounding: the exact path for every quantized type,
// and the one used where precision is worth more than speed (the output projection, which runs
// for one token per prompt). w: [rows][cols/kElements] blocks, x: [n_tokens][cols],
// y: [n_tokens][rows]; rows [row_begin, row_end).
template <std::size_t kTokens, class Block, std::size_t kElements>
inline void dequant_rows(const Block* w, std::size_t rows, std::size_t cols, const float* x,
                         float* y, std::size_t row_begin, std::size_t row_end) {
  using V = VecF32;
  const std::size_t blocks = cols / kElements;
  alignas(64) float values[kElements];
  for (std::size_t r = row_begin; r < row_end; ++r) {
    typename V::Reg acc[kTokens];
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[j] = V::zero();
    for (std::size_t b = 0; b < blocks; ++b) {
      dequantize_for_dot(w[r * blocks + b], values);
      for (std::size_t c = 0; c < kElements; c += V::lanes) {
        const typename V::Reg wv = V::load(values + c);
        _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[j] =
            V::fma(wv, V::load(x + j * cols + b * kElements + c), acc[j]);
      }
    }
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) y[j * rows + r] =
        V::sum(acc[j]);
  }
}

template <class Block, std::size_t kElements>
inline void matmul_dequant(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                           std::size_t n_tokens, float* y, std::size_t row_begin,
                           std::size_t row_end) {
  const Block* w = static_cast<const Block*>(weights);
  // Token counts are compile-time in each call so the accumulators stay in registers.
  std::size_t t = 0;
  for (; t + 4 <= n_tokens; t += 4)
    dequant_rows<4, Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                      row_end);
  switch (n_tokens - t) {
    case 3:
      dequant_rows<3, Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                        row_end);
      break;
    case 2:
      dequant_rows<2, Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                        row_end);
      break;
    case 1:
      dequant_rows<1, Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                        row_end);
      break;
    default: break;
  }
}
