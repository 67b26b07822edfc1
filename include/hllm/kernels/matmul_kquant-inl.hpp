// Q4_K, Q5_K and Q6_K weights against on-the-fly 8-bit activations, compiled per ISA after
// matmul_quant-inl.hpp (whose primitives it uses). No include guard, by design.
//
// Both formats pack 256 values into a super-block with per-sub-block scales:
//   Q4_K: 8 sub-blocks of 32, value = d·sc_j·q − dmin·m_j (q a nibble, sc/m 6-bit);
//   Q5_K: the same with a fifth bit of q from qh;
//   Q6_K: 16 sub-blocks of 16, value = d·sc_j·(q − 32) (q 6-bit, sc signed 8-bit).
// Activation blocks hold 32 values, so one 32-value slice of a super-block meets one activation
// block: its integer dot Σq·xq is exact, the Q4_K minimum comes back through the block's sum
// (−dmin·m_j·Σxq) and the Q6_K offset through the sums of its two 16-value halves (bias_lo and
// bias_hi). The float steps per slice: x_d·(s·dot − min·sum) in the order the scalar twin
// uses.

#if HLLM_ISA_LEVEL >= 1

// The 32 values of slice j of a Q4_K/Q5_K super-block as unsigned bytes: the low (j even) or
// high nibbles of qs[32·(j/2) ..], plus for Q5_K bit j of qh[l] as value l's bit 4.
template <class Block>
inline __m256i k_slice_values(const Block& b, std::size_t j) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (j / 2)));
  __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, static_cast<int>(4 * (j & 1))),
                               _mm256_set1_epi8(0x0f));
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    q = _mm256_or_si256(
        q,
        _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(j)), _mm256_set1_epi8(1)), 4));
  }
  return q;
}

// One weight row (`supers` super-blocks) against one token's activation blocks (decode).
// Q4_K and Q5_K (Q4_K plus a fifth bit per value from qh).
template <class Block>
inline float kquant_row_with_minimums(const Block* w, const BlockQ8Act* x, std::size_t supers) {
  // Four accumulators (one per 64-value group) so consecutive FMAs do not wait on each other.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  // The minimums' sum in four scalar chains too: one chain would add 4 cycles of latency per
  // 32 values, far below the memory speed.
  float minimum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (std::size_t s = 0; s < supers; ++s) {
    const Block& b = w[s];
    const float d = scale_of(b.d), dmin = scale_of(b.dmin);
    _Pragma("GCC unroll 4") for (std::size_t g = 0; g < 4; ++g) {
      _Pragma("GCC unroll 2") for (std::size_t half = 0; half < 2; ++half) {
        const std::size_t j = 2 * g + half;
        const BlockQ8Act& a = x[8 * s + j];
        std::uint8_t sc = 0, m = 0;
        reference::q4_k_scale_min(j, b.scales, sc, m);
        const __m256i dot = dot_u8s8(_mm256_setzero_si256(), k_slice_values(b, j), load_act(a));
        acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(a.d * (d * sc)), acc[g]);
        minimum[g] += a.d * (dmin * m) * static_cast<float>(a.sum);
      }
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) -
         ((minimum[0] + minimum[1]) + (minimum[2] + minimum[3]));
}
inline float kquant_row(const BlockQ4_K* w, const BlockQ8Act* x, std::size_t supers) {
  return kquant_row_with_minimums(w, x, supers);
}
inline float kquant_row(const BlockQ5_K* w, const BlockQ8Act* x, std::size_t supers) {
  return kquant_row_with_minimums(w, x, supers);
}

#if HLLM_ISA_LEVEL == 2
// Eight bytes (lo, then hi) as eight floats.
inline __m256 widen_bytes(std::uint32_t lo, std::uint32_t hi) {
  const __m128i bytes = _mm_cvtsi64_si128(static_cast<long long>(
      static_cast<std::uint64_t>(lo) | (static_cast<std::uint64_t>(hi) << 32)));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// The 8 six-bit scales and minimums of a Q4_K/Q5_K super-block as two float vectors, without a
// branch per sub-block: the 12 bytes as three words, rearranged with masks (the packing of
// reference::q4_k_scale_min, all eight at once).
inline void q4_k_scales_minimums(const std::uint8_t* packed, __m256& scales, __m256& minimums) {
  std::uint32_t w[3];
  std::memcpy(w, packed, 12);
  constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const std::uint32_t sc_lo = w[0] & low6, m_lo = w[1] & low6;
  const std::uint32_t sc_hi = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);
  const std::uint32_t m_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);
  scales = widen_bytes(sc_lo, sc_hi);
  minimums = widen_bytes(m_lo, m_hi);
}

// Decode rows of Q4_K/Q5_K with the per-sub-block scalar work moved out, as quant_row8 does for
// Q4_0: the token's xd[b] = d_x and xds[b] = d_x·Σxq are computed once per call, a super-block's
// 8 scales and minimums convert as vectors, each slice's scale is one lane permute, and the
// minimums are summed with one FMA per super-block.
template <class Block>
inline float kquant_row8(const Block* w, const BlockQ8Act* x, std::size_t supers, const float* xd,
                         const float* xds) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m256 minimum = _mm256_setzero_ps();
  for (std::size_t s = 0; s < supers; ++s) {
    const Block& b = w[s];
    __m256 sc, m;
    q4_k_scales_minimums(b.scales, sc, m);
    const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(scale_of(b.d))),
                                       _mm256_loadu_ps(xd + 8 * s));
    minimum = _mm256_fmadd_ps(_mm256_mul_ps(m, _mm256_set1_ps(scale_of(b.dmin))),
                              _mm256_loadu_ps(xds + 8 * s), minimum);
    _Pragma("GCC unroll 4") for (std::size_t g = 0; g < 4; ++g) {
      _Pragma("GCC unroll 2") for (std::size_t half = 0; half < 2; ++half) {
        const std::size_t j = 2 * g + half;
        const __m256i dot =
            dot_u8s8(_mm256_setzero_si256(), k_slice_values(b, j), load_act(x[8 * s + j]));
        acc[g] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(dot),
            _mm256_permutevar8x32_ps(scale, _mm256_set1_epi32(static_cast<int>(j))), acc[g]);
      }
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) -
         hsum(minimum);
}
#endif

inline float kquant_row(const BlockQ6_K* w, const BlockQ8Act* x, std::size_t supers) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_K& b = w[s];
    const float d = scale_of(b.d);
    _Pragma("GCC unroll 8") for (std::size_t slice = 0; slice < 8; ++slice) {
      const __m256i q = q6_k_slice_values(b, slice);
      const BlockQ8Act& a = x[8 * s + slice];
      // Lanes 0-3 sum values 0..15 (scale 2·slice), lanes 4-7 values 16..31 (2·slice + 1); each
      // half starts at its −32·Σxq (bias / 4, exact: a multiple of 128).
      const __m256i start = _mm256_setr_epi32(a.bias_lo >> 2, 0, 0, 0, a.bias_hi >> 2, 0, 0, 0);
      const __m256i dot = dot_u8s8(start, q, load_act(a));
      const float lo = a.d * (d * static_cast<float>(b.scales[2 * slice]));
      const float hi = a.d * (d * static_cast<float>(b.scales[2 * slice + 1]));
      acc[slice & 3] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_setr_m128(_mm_set1_ps(lo), _mm_set1_ps(hi)), acc[slice & 3]);
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

#else  // scalar twin: the same integer dots and the same float steps, value by value

template <class Block>
inline float kquant_row_with_minimums(const Block* w, const BlockQ8Act* x, std::size_t supers) {
  float acc = 0.0f, minimum = 0.0f;
  for (std::size_t s = 0; s < supers; ++s) {
    const Block& b = w[s];
    const float d = to_float(b.d), dmin = to_float(b.dmin);
    for (std::size_t j = 0; j < 8; ++j) {
      const BlockQ8Act& a = x[8 * s + j];
      std::uint8_t sc = 0, m = 0;
      reference::q4_k_scale_min(j, b.scales, sc, m);
      const std::uint8_t* q = b.qs + 32 * (j / 2);
      const int shift = static_cast<int>(4 * (j & 1));
      std::int32_t dot = 0;
      for (std::size_t l = 0; l < 32; ++l) {
        int value = (q[l] >> shift) & 0x0f;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) value |= ((b.qh[l] >> j) & 1) << 4;
        dot += value * a.qs[l];
      }
      acc += static_cast<float>(dot) * (a.d * (d * sc));
      minimum += a.d * (dmin * m) * static_cast<float>(a.sum);
    }
  }
  return acc - minimum;
}
inline float kquant_row(const BlockQ4_K* w, const BlockQ8Act* x, std::size_t supers) {
  return kquant_row_with_minimums(w, x, supers);
}
inline float kquant_row(const BlockQ5_K* w, const BlockQ8Act* x, std::size_t supers) {
  return kquant_row_with_minimums(w, x, supers);
}

inline float kquant_row(const BlockQ6_K* w, const BlockQ8Act* x, std::size_t supers) {
  float acc = 0.0f;
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_K& b = w[s];
    const float d = to_float(b.d);
    for (std::size_t slice = 0; slice < 8; ++slice) {
      std::size_t ql_offset = 0, qh_offset = 0;
      int ql_shift = 0, qh_shift = 0;
      reference::q6_k_slice_layout(slice, ql_offset, ql_shift, qh_offset, qh_shift);
      const BlockQ8Act& a = x[8 * s + slice];
      std::int32_t dot[2] = {a.bias_lo >> 2, a.bias_hi >> 2};  // −32·Σxq of each half
      for (std::size_t l = 0; l < 32; ++l) {
        const int q = ((b.ql[ql_offset + l] >> ql_shift) & 0x0f) |
                      (((b.qh[qh_offset + l] >> qh_shift) & 0x03) << 4);
        dot[l / 16] += q * a.qs[l];
      }
      acc += static_cast<float>(dot[0]) * (a.d * (d * static_cast<float>(b.scales[2 * slice])));
      acc += static_cast<float>(dot[1]) * (a.d * (d * static_cast<float>(b.scales[2 * slice + 1])));
    }
  }
  return acc;
}

#endif

// w: [rows][cols/256] super-blocks, x: [n_tokens][cols/32] activation blocks, y: [n_tokens][rows];
// rows [row_begin, row_end).
template <class Block>
inline void matmul_kquant(const void* weights, std::size_t rows, std::size_t cols,
                          const BlockQ8Act* x, std::size_t n_tokens, float* y,
                          std::size_t row_begin, std::size_t row_end) {
  const Block* w = static_cast<const Block*>(weights);
  const std::size_t supers = cols / kQK_K, blocks = cols / 32;
  // Every token count on the row kernels, token by token: batch invariant. (The packed GEMM sums
  // in another order; it runs on the 16-row panels a load repacks K-quants into on VNNI CPUs.)
  // Blocks of kRowBlock rows, each block's weights read from memory once and from L1 by every
  // token after the first.
  constexpr std::size_t kRowBlock = 16;
  for (std::size_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const std::size_t r1 = std::min(row_end, r0 + kRowBlock);
    for (std::size_t t = 0; t < n_tokens; ++t) {
#if HLLM_ISA_LEVEL == 2
      if constexpr (!std::is_same_v<Block, BlockQ6_K>) {
        if (blocks <= kDecodeMaxBlocks) {
          float xd[kDecodeMaxBlocks], xds[kDecodeMaxBlocks];
          for (std::size_t b = 0; b < blocks; ++b) {
            xd[b] = x[t * blocks + b].d;
            xds[b] = x[t * blocks + b].d_sum;
          }
          for (std::size_t r = r0; r < r1; ++r)
            y[t * rows + r] = kquant_row8(w + r * supers, x + t * blocks, supers, xd, xds);
          continue;
        }
      }
#endif
      for (std::size_t r = r0; r < r1; ++r)
        y[t * rows + r] = kquant_row(w + r * supers, x + t * blocks, supers);
    }
  }
}
inline void matmul_q4_k(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_kquant<BlockQ4_K>(w, rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_q5_k(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_kquant<BlockQ5_K>(w, rows, cols, x, n_tokens, y, row_begin, row_end);
}
inline void matmul_q6_k(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                        void* /*scratch*/) {
  matmul_kquant<BlockQ6_K>(w, rows, cols, x, n_tokens, y, row_begin, row_end);
}
