// Quantized-weight matrix products with on-the-fly 8-bit activations, written once and compiled
// per ISA (see isa_kernels.hpp). No include guard, by design.
//
// Activations are quantized per 32 values (BlockQ8Act); each weight block times its activation
// block is an exact integer dot product, scaled by d_weight · d_activation and accumulated in
// float. The integer products run on
//   - AVX-512 VNNI: vpdpbusd (u8 × s8, four products summed into each int32 lane), 256-bit;
//   - AVX2 (and AVX-512 without VNNI): vpmaddubsw + vpmaddwd, whose int16 intermediate cannot
//     saturate here (|u8·s8| pairs stay below 2·128·127 = 32512);
//   - scalar: plain integer loops, the twin the others are tested against.
// Q4_0 nibbles are unsigned (value = d·(u − 8)), the natural u8 operand; the −8 offset is folded
// into the accumulator's starting value, −8·Σq per lane group, computed once per activation block
// and shared by every weight row of a tile. Q4_1 nibbles are the same operand with a float
// minimum instead (value = d·u + m): Σ(d·u + m)·d_x·q = d·d_x·Σu·q + m·(d_x·Σq), the second
// factor the activation block's d_sum (ggml's vec_dot_q4_1_q8_1 s), computed once when the
// activations are quantized; the minimums' terms are summed apart, as the K-quants' are. Q8_0
// weights are signed: |w| becomes the u8 operand and w's sign moves onto the activation
// (vpsignb).

// x: [n] floats → n/32 blocks (n must be a multiple of 32).
inline void quantize_activations(const float* x, std::size_t n, BlockQ8Act* out) {
  for (std::size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    BlockQ8Act& q = out[b];
#if HLLM_ISA_LEVEL == 2
    const __m512 lo = _mm512_loadu_ps(xb), hi = _mm512_loadu_ps(xb + 16);
    const __m512 amax_v = _mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi));
    const float amax = _mm512_reduce_max_ps(amax_v);
    q.d = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    // cvtps rounds to nearest even under the default MXCSR, like std::nearbyint below.
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv));
    const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q.qs), _mm512_cvtepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q.qs + 16), _mm512_cvtepi32_epi8(qhi));
    const std::int32_t sum_lo = _mm512_reduce_add_epi32(qlo);
    q.set_sums(sum_lo + _mm512_reduce_add_epi32(qhi), sum_lo);
#elif HLLM_ISA_LEVEL == 1
    // The scalar loop's arithmetic on 8 lanes: the same product and rounding per value.
    __m256 v[4];
    _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    q.d = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i i32[4];  // cvtps rounds to nearest even under the default MXCSR, as std::nearbyint
    _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k) i32[k] =
        _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv));
    // packs interleave 128-bit lanes: bytes come out as dwords 0,2,4,6,1,3,5,7 of the result.
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(q.qs),
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const auto sum8 = [](__m256i a) {
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
    };
    const std::int32_t sum_lo = sum8(_mm256_add_epi32(i32[0], i32[1]));
    q.set_sums(sum_lo + sum8(_mm256_add_epi32(i32[2], i32[3])), sum_lo);
#else
    float amax = 0.0f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    q.d = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    std::int32_t sum = 0, sum_lo = 0;
    for (std::size_t i = 0; i < 32; ++i) {
      const auto v = static_cast<std::int32_t>(std::nearbyint(xb[i] * inv));
      q.qs[i] = static_cast<std::int8_t>(v);
      sum += v;
      if (i == 15) sum_lo = sum;
    }
    q.set_sums(sum, sum_lo);
#endif
  }
}

// Q4_0 and Q4_1: 16 bytes of unsigned nibbles per block (low nibbles are elements 0..15).
template <class Block>
inline constexpr bool kNibbleBlock =
    std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockQ4_1>;

#if HLLM_ISA_LEVEL >= 1

// F16C: one instruction instead of the portable bit manipulation (this runs once per block).
inline float scale_of(f16 h) { return _cvtsh_ss(h.bits); }

// 8 int32 lanes; lane k = Σ u[4k..4k+3]·s[4k..4k+3], added to `acc`.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if HLLM_QUANT_VNNI && HLLM_ISA_LEVEL == 2
  return _mm256_dpbusd_epi32(acc, u, s);
#elif HLLM_QUANT_VNNI
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// 16 bytes of Q4_0 (Q4_1) nibbles → 32 u8 values in element order (low nibbles are elements
// 0..15).
inline __m256i unpack_q4(const std::uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

inline __m256i load_act(const BlockQ8Act& a) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One tile: kRows weight rows × kTokens activation rows, all blocks of the row.
// w: kRows rows of `blocks` weight blocks; x: kTokens rows of `blocks` activation blocks.
template <std::size_t kRows, std::size_t kTokens, class Block>
inline void quant_tile(const Block* w, const BlockQ8Act* x, std::size_t blocks, float* y,
                       std::size_t y_stride) {
  __m256 acc[kRows][kTokens];
  _Pragma("GCC unroll 8") for (auto& row : acc) _Pragma("GCC unroll 8") for (auto& a : row) a =
      _mm256_setzero_ps();
  // Q4_1: Σ_b m_w·d_sum per output, one scalar chain each (a few cycles per 32 values, far
  // below the memory speed), added after the lanes' sum. An explicit FMA: left to the compiler,
  // m·d_sum + minimum is contracted in some tile shapes and not in others (not batch invariant).
  [[maybe_unused]] float minimum[kRows][kTokens] = {};
  for (std::size_t b = 0; b < blocks; ++b) {
    __m256i xq[kTokens];
    __m256i start[kTokens];  // the accumulator's starting value: the format's offset term
    float xd[kTokens];
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) {
      const BlockQ8Act& a = x[j * blocks + b];
      xq[j] = load_act(a);
      xd[j] = a.d;
      if constexpr (std::is_same_v<Block, BlockQ4_0>) {
        // −8·Σq spread over the lanes exactly as the products will be: −(8 · q) summed by 4s.
        start[j] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                    dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(8), xq[j]));
      } else {
        start[j] = _mm256_setzero_si256();
      }
    }
    _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i) {
      const Block& wb = w[i * blocks + b];
      const float wd = scale_of(wb.d);
      if constexpr (kNibbleBlock<Block>) {
        const __m256i u = unpack_q4(wb.qs);
        _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) {
          const __m256i dot = dot_u8s8(start[j], u, xq[j]);
          acc[i][j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd * xd[j]), acc[i][j]);
          if constexpr (std::is_same_v<Block, BlockQ4_1>)
            minimum[i][j] = std::fma(scale_of(wb.m), x[j * blocks + b].d_sum, minimum[i][j]);
        }
      } else {
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs));
        const __m256i magnitude = _mm256_sign_epi8(wq, wq);
        _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) {
          const __m256i dot = dot_u8s8(start[j], magnitude, _mm256_sign_epi8(xq[j], wq));
          acc[i][j] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd * xd[j]), acc[i][j]);
        }
      }
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i)
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) {
    y[j * y_stride + i] = hsum(acc[i][j]);
    if constexpr (std::is_same_v<Block, BlockQ4_1>) y[j * y_stride + i] += minimum[i][j];
  }
}

#if HLLM_ISA_LEVEL == 2
// The activation terms of the interleaved decode kernels (matmul_interleaved-inl.hpp): a
// token's block scales xd[b] and offset terms xoff[b] = −offset·xd[b]·Σxq, computed once per call
// for all rows. offset: the weights' integer offset (value ∝ u − offset): 8 for Q4_0, 128 for
// Q8_0 flipped to unsigned.
inline constexpr std::size_t kDecodeMaxBlocks = 1024;
inline void decode_activation_terms(const BlockQ8Act* x, std::size_t blocks, float offset,
                                    float* xd, float* xoff) {
  for (std::size_t b = 0; b < blocks; ++b) {
    xd[b] = x[b].d;
    xoff[b] = -offset * x[b].d * static_cast<float>(x[b].sum);
  }
}
#endif

#else  // scalar twin: the same integer arithmetic, one block at a time

template <std::size_t kRows, std::size_t kTokens, class Block>
inline void quant_tile(const Block* w, const BlockQ8Act* x, std::size_t blocks, float* y,
                       std::size_t y_stride) {
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < kRows; ++i)
      _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) {
    [[maybe_unused]] float minimum = 0.0f;  // Q4_1's Σ m_w·d_sum, added at the end
    float acc = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
      const Block& wb = w[i * blocks + b];
      const BlockQ8Act& a = x[j * blocks + b];
      std::int32_t dot = 0;
      if constexpr (kNibbleBlock<Block>) {
        for (std::size_t k = 0; k < 16; ++k) {
          dot += (wb.qs[k] & 0x0f) * a.qs[k];
          dot += (wb.qs[k] >> 4) * a.qs[k + 16];
        }
        if constexpr (std::is_same_v<Block, BlockQ4_0>) dot -= 8 * a.sum;
      } else {
        for (std::size_t k = 0; k < 32; ++k) dot += wb.qs[k] * a.qs[k];
      }
      acc += static_cast<float>(dot) * (to_float(wb.d) * a.d);
      if constexpr (std::is_same_v<Block, BlockQ4_1>) minimum += to_float(wb.m) * a.d_sum;
    }
    if constexpr (std::is_same_v<Block, BlockQ4_1>) acc += minimum;
    y[j * y_stride + i] = acc;
  }
}

#endif

// w: [rows][cols/32] blocks, x: [n_tokens][cols/32] activation blocks, y: [n_tokens][rows];
// rows [row_begin, row_end). Every token count runs on quant_tile, whose arithmetic for one
// output (each block's integer dot in 8 lanes, scaled into 8 float lanes block after block,
// summed at the end; Q4_1's minimums in one scalar chain, added last) does not depend on the
// tile's shape: a token's outputs are the same bits
// alone or in any batch (batch invariance, tests/test_kernels.cpp). Tiles of 4 rows × 4 tokens,
// the last 1-3 tokens in one tile row: decode is 4 rows × 1 token, four independent FMA chains
// (one row's single chain waits on each block's FMA: docs/performance.md).
template <class Block>
inline void matmul_quant(const Block* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                         std::size_t n_tokens, float* y, std::size_t row_begin,
                         std::size_t row_end) {
  constexpr std::size_t kRows = 4, kRowBlock = 16;
  const std::size_t blocks = cols / 32;
  // Tokens [t, t + k) for rows [r0, r1): 4 rows at a time, then the rows left one at a time.
  const auto rows_for = [&](auto k_tokens, std::size_t t, std::size_t r0, std::size_t r1) {
    constexpr std::size_t k = k_tokens();
    std::size_t r = r0;
    for (; r + kRows <= r1; r += kRows)
      quant_tile<kRows, k>(w + r * blocks, x + t * blocks, blocks, y + t * rows + r, rows);
    for (; r < r1; ++r)
      quant_tile<1, k>(w + r * blocks, x + t * blocks, blocks, y + t * rows + r, rows);
  };
  // Blocks of kRowBlock rows, each block's weights read from memory once and from L1 by every
  // token tile after the first.
  for (std::size_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const std::size_t r1 = std::min(row_end, r0 + kRowBlock);
    std::size_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) rows_for(std::integral_constant<std::size_t, 4>{}, t, r0, r1);
    switch (n_tokens - t) {
      case 3: rows_for(std::integral_constant<std::size_t, 3>{}, t, r0, r1); break;
      case 2: rows_for(std::integral_constant<std::size_t, 2>{}, t, r0, r1); break;
      case 1: rows_for(std::integral_constant<std::size_t, 1>{}, t, r0, r1); break;
      default: break;
    }
  }
}

inline void matmul_q8_0(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_quant(static_cast<const BlockQ8_0*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_q4_0(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_quant(static_cast<const BlockQ4_0*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_q4_1(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_quant(static_cast<const BlockQ4_1*>(w), rows, cols, x, n_tokens, y, row_begin, row_end);
}
