// The exact path of quantized weights: float32 activations against weights dequantized block by
// block (SessionOptions::exact, and an output projection kept on float activations: a Q8_0
// file's, Llama::forward). Written once and compiled per ISA after matmul_float-inl.hpp, whose
// VecF32 and token tiles it uses (see isa_kernels.hpp). No include guard, by design.
//
// Each weight block is dequantized exactly as the reference does, into a small buffer or, for
// the hot cases (Q8_0 and Q6_K rows), in registers, then multiplied with the float activations.
// Every layout runs here: a repacked one is read back to the file's blocks (block_at), so both
// give the same bits.

// Block dequantization for the kernel below: the reference code, except for the common block
// types, which get the same arithmetic vectorized (the reference loop's portable f16 conversion
// is far too slow for an output projection read once per token).
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
// The 32 six-bit values of slice `slice` of a Q6_K super-block (reference::q6_k_slice_layout):
// ql nibbles with qh bit pairs above them.
inline __m256i q6_k_slice_values(const BlockQ6_K& b, std::size_t slice) {
  std::size_t ql_offset = 0, qh_offset = 0;
  int ql_shift = 0, qh_shift = 0;
  reference::q6_k_slice_layout(slice, ql_offset, ql_shift, qh_offset, qh_shift);
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + ql_offset));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + qh_offset));
  return _mm256_or_si256(
      _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(ql_shift)), _mm256_set1_epi8(0x0f)),
      _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(qh_shift)),
                                         _mm256_set1_epi8(0x03)),
                        4));
}

#if HLLM_ISA_LEVEL == 2
// Q6_K, slice by slice, each slice as two 16-value halves with their own scales. The output
// projection of Q4_K_M files is Q6_K.
inline void dequantize_for_dot(const BlockQ6_K& b, float* out) {
  const float d = _cvtsh_ss(b.d.bits);
  for (std::size_t slice = 0; slice < 8; ++slice) {
    const __m256i q = q6_k_slice_values(b, slice);
    for (std::size_t half = 0; half < 2; ++half) {
      const __m128i bytes = half == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
      const __m512 v =
          _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)), _mm512_set1_ps(32.0f));
      const float scale = d * static_cast<float>(b.scales[2 * slice + half]);
      _mm512_storeu_ps(out + 32 * slice + 16 * half, _mm512_mul_ps(v, _mm512_set1_ps(scale)));
    }
  }
}
#endif
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
// and the one used where precision is worth more than speed (an output projection of Q8_0
// weights: Llama::forward). Block is the stored layout: a block type, or Interleaved8 of one
// (read back through block_at). w: [rows][cols/kElements] blocks, x: [n_tokens][cols],
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
      dequantize_for_dot(block_at(w, blocks, r, b), values);
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

#if HLLM_ISA_LEVEL >= 1
// One row of the exact path for one token, with each block dequantized in registers instead of
// through a buffer: the same values as dequantize_for_dot (d·q, and (q − 32)·(d·scale) for
// Q6_K, each rounded once), summed in a different order. Several accumulators, so the FMA
// chains overlap. A Q8_0 file's output projection runs here (32000 rows), and Q6_K rows in
// exact sessions (AVX-512), which the buffered loop would bind to its one FMA chain and, for
// Q6_K, to the per-slice unpacking.   row: [blocks] blocks, x: [blocks · block elements]
// block(b): block b of the row (a reference into the file layout, or a copy read back from an
// interleaved group: both layouts sum in the same order, so they agree bit for bit).
template <class RowBlocks>
inline float dot_row_exact_q8_0(RowBlocks&& block, std::size_t blocks, const float* x) {
  using V = VecF32;
  constexpr std::size_t kParts = kQK8_0 / V::lanes;  // registers per block, one chain each
  typename V::Reg acc[kParts];
  _Pragma("GCC unroll 4") for (auto& a : acc) a = V::zero();
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto& q8 = block(b);
    const typename V::Reg d = V::set1(_cvtsh_ss(q8.d.bits));
    _Pragma("GCC unroll 4") for (std::size_t part = 0; part < kParts; ++part) acc[part] =
        V::fma(V::mul(V::load(q8.qs + part * V::lanes), d),
               V::load(x + b * kQK8_0 + part * V::lanes), acc[part]);
  }
  _Pragma("GCC unroll 4") for (std::size_t width = kParts / 2; width > 0; width /= 2)
      _Pragma("GCC unroll 4") for (std::size_t part = 0; part < width; ++part) acc[part] =
          V::add(acc[part], acc[part + width]);
  return V::sum(acc[0]);
}
#endif

#if HLLM_ISA_LEVEL == 2
// Q6_K with no shuffles in the loop (they, not the FMAs, would bound a plain unpacking):
// each 32-bit lane of ql holds 4 consecutive values' nibbles, so lane shifts and masks give 16
// values 4 apart at a time, and the activations are read in that order (x_q6k_order, once per
// call). The 6-bit value is assembled below 2^23's mantissa bits (0x4B000000 | q is the float
// 2^23 + q), so one subtraction yields q − 32 as a float, exactly.
//   xp: [blocks · 256] activations in x_q6k_order; block(b) as for Q8_0
template <class RowBlocks>
inline float dot_row_exact_q6_k(RowBlocks&& block_of, std::size_t blocks, const float* xp) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  const __m512i nibble = _mm512_set1_epi32(0x0f), two_bits = _mm512_set1_epi32(0x30),
                exponent = _mm512_set1_epi32(0x4B000000);
  const __m512 bias = _mm512_set1_ps(8388608.0f + 32.0f);
  // Lanes 0-7 of a register read qh's bit pair 0 (low nibbles) or 2 (high), lanes 8-15 pair 1
  // or 3: the shift that brings value k's pair (at bit 8k + 2·pair) to bits 4-5.
  const __m512i pair_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(2), 1);
  for (std::size_t b = 0; b < blocks; ++b) {
    const auto& block = block_of(b);
    const __m512 scales = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                            reinterpret_cast<const __m128i*>(block.scales)))),
                                        _mm512_set1_ps(_cvtsh_ss(block.d.bits)));
    const float* xb = xp + b * kQK_K;
    _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(block.ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.qh + 32 * h)));
      _Pragma("GCC unroll 2") for (std::size_t part = 0; part < 2; ++part) {
        // Lane i covers values 4i..4i+3 of this 64: scale group 8h + 4·part + i/4.
        const __m512 scale = _mm512_permutexvar_ps(
            _mm512_add_epi32(
                _mm512_srli_epi32(
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2),
                _mm512_set1_epi32(static_cast<int>(8 * h + 4 * part))),
            scales);
        const __m512i pair = _mm512_add_epi32(pair_shift, _mm512_set1_epi32(4 * int(part)));
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {
          const __m512i low = _mm512_srli_epi32(ql, 8 * k + 4 * int(part));
          // qh's pair for value k sits at bit 8k + pair; move it to bits 4-5.
          const __m512i shift = _mm512_add_epi32(pair, _mm512_set1_epi32(8 * k - 4));
          const __m512i high =
              k == 0 && part == 0
                  ? _mm512_sllv_epi32(qh, _mm512_sub_epi32(_mm512_set1_epi32(4), pair))
                  : _mm512_srlv_epi32(qh, shift);
          // (high & 0x30) | 0x4B000000, then the nibble's bits from `low`.
          const __m512i upper = _mm512_ternarylogic_epi32(high, two_bits, exponent, 0xEA);
          const __m512i q = _mm512_ternarylogic_epi32(nibble, low, upper, 0xCA);
          const __m512 w = _mm512_mul_ps(_mm512_sub_ps(_mm512_castsi512_ps(q), bias), scale);
          acc[k] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb + 128 * h + 64 * part + 16 * k), acc[k]);
        }
      }
    }
  }
  return _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// x in the order dot_row_exact_q6_k reads it: within each 64 values, value 4i + k goes to
// 16k + i.   x, xp: [n], n a multiple of 64
inline void x_q6k_order(const float* x, std::size_t n, float* xp) {
  for (std::size_t base = 0; base < n; base += 64)
    for (std::size_t i = 0; i < 16; ++i)
      for (std::size_t k = 0; k < 4; ++k) xp[base + 16 * k + i] = x[base + 4 * i + k];
}
#endif

#if HLLM_ISA_LEVEL == 2
// The 16 rows of one Q6_K panel group (BlockQ6_Kx16) in the file's layout: out[i·supers + s] =
// block s of row i. A unit's registers hold one 4-byte word per row (lane), so the bit shuffles
// run on all 16 rows at once (as GCC/Clang vectors of 16 words) and only the resulting file words
// are spread out to the rows.   group: [supers] units, out: [16][supers]
inline void deinterleave_q6_k_group(const BlockQ6_Kx16* group, std::size_t supers, BlockQ6_K* out) {
  using Words = std::uint32_t __attribute__((vector_size(64)));
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_Kx16& unit = group[s];
    for (std::size_t i = 0; i < 16; ++i) out[i * supers + s].d = unit.d[i];
    for (std::size_t h = 0; h < 2; ++h) {
      const BlockQ6_Kx16::Half& half = unit.halves[h];
      for (std::size_t j = 0; j < 8; ++j)
        for (std::size_t i = 0; i < 16; ++i)
          out[i * supers + s].scales[8 * h + j] = half.scales[j][i];
      for (std::size_t k = 0; k < 8; ++k) {
        Words words[3], q[4], file[3];
        std::memcpy(words, half.qs[k], sizeof words);
        q6_k_panel_values(words, q);
        q6_k_file_from_values(q, file);
        alignas(64) std::uint32_t lanes[3][16];  // [file word][row]
        std::memcpy(lanes, file, sizeof lanes);
        for (std::size_t i = 0; i < 16; ++i)
          for (std::size_t f = 0; f < 3; ++f)
            std::memcpy(q6_k_file_word(out[i * supers + s], h, k, f), &lanes[f][i], 4);
      }
    }
  }
}
#endif

// The exact path for one token (decode): Q8_0 rows (either layout) through the
// register-dequantizing dot product above on the vector ISAs, Q6_K rows on AVX-512, everything
// else through the buffered loop.
template <class Block, std::size_t kElements>
inline void dequant_rows_decode(const Block* w, std::size_t rows, std::size_t cols, const float* x,
                                float* y, std::size_t row_begin, std::size_t row_end,
                                [[maybe_unused]] void* scratch) {
#if HLLM_ISA_LEVEL >= 1
  const std::size_t blocks = cols / kElements;
  using Stored = std::remove_cvref_t<decltype(block_at(w, blocks, 0, 0))>;  // the file's block
  if constexpr (std::is_same_v<Stored, BlockQ8_0>) {
    for (std::size_t r = row_begin; r < row_end; ++r)
      y[r] = dot_row_exact_q8_0(
          [&](std::size_t b) -> decltype(auto) { return block_at(w, blocks, r, b); }, blocks, x);
    return;
  }
#endif
#if HLLM_ISA_LEVEL == 2
  if constexpr (std::is_same_v<Stored, BlockQ6_K>) {
    constexpr std::size_t kMaxCols = 16384;  // 64 KiB of stack; wider rows take the loop below
    if (cols <= kMaxCols) {
      alignas(64) float xp[kMaxCols];
      x_q6k_order(x, cols, xp);
      std::size_t r = row_begin;
      if constexpr (std::is_same_v<Block, BlockQ6_Kx16>) {
        // Whole panel groups: their 16 rows back in the file's layout once (block_at for one
        // row at a time would redo a unit's bit shuffles for each of its rows), then the same
        // row kernel, so the results stay bit for bit the file layout's.
        BlockQ6_K* const rows_of_group = static_cast<BlockQ6_K*>(scratch);  // [16][blocks]
        for (; r % 16 == 0 && r + 16 <= row_end; r += 16) {
          deinterleave_q6_k_group(w + r / 16 * blocks, blocks, rows_of_group);
          for (std::size_t i = 0; i < 16; ++i)
            y[r + i] = dot_row_exact_q6_k(
                [&](std::size_t b) -> const BlockQ6_K& { return rows_of_group[i * blocks + b]; },
                blocks, xp);
        }
      }
      for (; r < row_end; ++r)
        y[r] = dot_row_exact_q6_k(
            [&](std::size_t b) -> decltype(auto) { return block_at(w, blocks, r, b); }, blocks, xp);
      return;
    }
  }
#endif
  dequant_rows<1, Block, kElements>(w, rows, cols, x, y, row_begin, row_end);
}

template <class Block, std::size_t kElements>
inline void matmul_dequant(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                           std::size_t n_tokens, float* y, std::size_t row_begin,
                           std::size_t row_end, void* scratch) {
  const Block* w = static_cast<const Block*>(weights);
#if HLLM_ISA_LEVEL >= 1
  // Q8_0 (vector ISAs) and Q6_K (AVX-512) rows take their register-dequantizing dot products
  // above for every token count, token by token, so a token's outputs do not depend on the
  // others' (batch invariance). Q8_0 (an output projection) runs the tokens inside each row,
  // which stays in L1; Q6_K (exact sessions only) decodes the matrix once per token.
  const std::size_t blocks = cols / kElements;
  using Stored = std::remove_cvref_t<decltype(block_at(w, blocks, 0, 0))>;  // the file's block
  if constexpr (std::is_same_v<Stored, BlockQ8_0>) {
    for (std::size_t r = row_begin; r < row_end; ++r)
      for (std::size_t t = 0; t < n_tokens; ++t)
        y[t * rows + r] = dot_row_exact_q8_0(
            [&](std::size_t b) -> decltype(auto) { return block_at(w, blocks, r, b); }, blocks,
            x + t * cols);
    return;
  }
#endif
#if HLLM_ISA_LEVEL == 2
  if constexpr (std::is_same_v<Stored, BlockQ6_K>) {
    for (std::size_t t = 0; t < n_tokens; ++t)
      dequant_rows_decode<Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                            row_end, scratch);
    return;
  }
#endif
  // The buffered loop's arithmetic per token does not depend on the tile's token count. Token
  // counts are compile-time in each call so the accumulators stay in registers.
  for_token_tiles(n_tokens, [&](auto k_tokens, std::size_t t) {
    if constexpr (k_tokens() == 1)
      dequant_rows_decode<Block, kElements>(w, rows, cols, x + t * cols, y + t * rows, row_begin,
                                            row_end, scratch);
    else
      dequant_rows<k_tokens(), Block, kElements>(w, rows, cols, x + t * cols, y + t * rows,
                                                 row_begin, row_end);
  });
}
