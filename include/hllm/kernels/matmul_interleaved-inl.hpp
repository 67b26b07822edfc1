// Matrix products for weights repacked at load time, 8 rows to a group (Interleaved8:
// DType::q4_0_x8, q8_0_x8, q4_k_x8, q6_k_x8) or 16 rows to a panel (Interleaved16: q4_0_x16,
// q4_1_x16, q8_0_x16, q4_k_x16, q5_k_x16, q6_k_x16), written once and compiled per ISA (see
// isa_kernels.hpp), after the row-major kernels it falls back on. No include guard, by design.
//
// The 16-row panels run on every vector ISA (the 16-lane primitives of simd/lanes16-inl.hpp):
// decode and small batches (below kDecodeBelowTokens tokens) with decode_group16_tokens (one Q6_K
// token, and every Q6_K token without AVX-512 VNNI: decode_group16), one row per lane, prefill
// with the packed GEMM, whose panels load straight from them (Interleaved16Panels in
// gemm_panels-inl.hpp); both sum a token's output block after block in one FMA chain, so a
// token gets the same bits from either (batch invariance), and from either ISA. The 8-row groups
// (matrices whose rows are not a multiple of 16) run directly with AVX-512 VNNI only: every token
// count with decode_group8, which loads each activation block once for 8 rows and their 8 scales
// with one load. Everything else (rows outside whole groups; the scalar twin; the 8-row groups
// elsewhere, which a session may choose for a model repacked for VNNI) copies each row's blocks
// out (block_at) and runs the row-major kernels on it: the same integer arithmetic, slower.

#if HLLM_QUANT_VNNI && HLLM_ISA_LEVEL == 2
// Lane l of register z holds part of row z·(16/lanes_per_row) + l/lanes_per_row.
inline __m512i row_of_lane(std::size_t z, std::size_t lanes_per_row) {
  alignas(64) std::int32_t idx[16];
  for (std::size_t l = 0; l < 16; ++l)
    idx[l] = static_cast<std::int32_t>(z * (16 / lanes_per_row) + l / lanes_per_row);
  return _mm512_load_si512(idx);
}

// out[i] = Σ of row i's `lanes_per_row` lanes in acc (kRegs registers, rows in order) + tail[i].
template <std::size_t kRegs>
inline void sum_row_lanes(const __m512 (&acc)[kRegs], std::size_t lanes_per_row, __m256 tail,
                          float* out) {
  alignas(64) float lanes[kRegs * 16];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z)
      _mm512_store_ps(lanes + 16 * z, acc[z]);
  alignas(32) float tails[8];
  _mm256_store_ps(tails, tail);
  for (std::size_t i = 0; i < 8; ++i) {
    float total = 0.0f;
    for (std::size_t l = 0; l < lanes_per_row; ++l) total += lanes[i * lanes_per_row + l];
    out[i] = total + tails[i];
  }
}

// Decode of one group of 8 Q4_0 or Q8_0 rows against one token: out[0..8).
// Q4_0: each zmm holds 4 rows' 16 nibble bytes; the low nibbles meet activations 0..15 and the
// high nibbles 16..31 (each broadcast to every 128-bit lane), so lanes 4i..4i+3 are row i's
// partial dot. Q8_0: each zmm holds 2 rows' 32 bytes, flipped to unsigned (q + 128), against the
// 32 activations broadcast to both halves. The offsets (8, 128) come back out in float through
// xoff (decode_activation_terms), as in quant_row8. Even and odd block columns accumulate in
// separate registers: two independent FMA chains per register.
template <class Block>
inline void decode_group8(const Interleaved8<Block>* w, const BlockQ8Act* x, std::size_t blocks,
                          const float* xd, const float* xoff, float* out) {
  constexpr bool kQ4 = std::is_same_v<Block, BlockQ4_0>;
  constexpr std::size_t kRegs = kQ4 ? 2 : 4;         // zmm registers per block column
  constexpr std::size_t kLanesPerRow = kQ4 ? 4 : 8;  // int32 lanes holding one row's dot
  __m512i lane_rows[kRegs];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) lane_rows[z] =
      row_of_lane(z, kLanesPerRow);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[2][kRegs];
  _Pragma("GCC unroll 2") for (auto& chain : acc) _Pragma("GCC unroll 4") for (auto& a : chain) a =
      _mm512_setzero_ps();
  __m256 offset_acc = _mm256_setzero_ps();
  for (std::size_t b = 0; b < blocks; ++b) {
    const Interleaved8<Block>& g = w[b];
    const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.d)));
    offset_acc = _mm256_fmadd_ps(wd, _mm256_set1_ps(xoff[b]), offset_acc);
    const __m512 scale = _mm512_castps256_ps512(_mm256_mul_ps(wd, _mm256_set1_ps(xd[b])));
    __m512(&sum)[kRegs] = acc[b & 1];
    if constexpr (kQ4) {
      const __m512i x_lo =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs)));
      const __m512i x_hi =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs + 16)));
      _Pragma("GCC unroll 2") for (std::size_t z = 0; z < kRegs; ++z) {
        const __m512i q = _mm512_loadu_si512(g.qs[4 * z]);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(q, low4), x_lo);
        dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4), x_hi);
        sum[z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 _mm512_permutexvar_ps(lane_rows[z], scale), sum[z]);
      }
    } else {
      const __m512i xq =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)));
      _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) {
        const __m512i q = _mm512_xor_si512(_mm512_loadu_si512(g.qs[2 * z]), flip);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xq);
        sum[z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 _mm512_permutexvar_ps(lane_rows[z], scale), sum[z]);
      }
    }
  }
  __m512 total[kRegs];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) total[z] =
      _mm512_add_ps(acc[0][z], acc[1][z]);
  sum_row_lanes(total, kLanesPerRow, offset_acc, out);
}

// Decode of one group of 8 Q4_K rows against one token: out[0..8). Per pair of sub-blocks, each
// zmm holds 2 rows' 32 nibble bytes: the low nibbles (sub-block 2p) and the high ones (2p + 1)
// meet their own activation blocks, broadcast to both halves; each sub-block's 8 row scales
// (unpacked bytes) convert as one vector. The minimums' term, Σ_j dmin·m_j·d_x·Σxq, sums in one
// 8-row vector. xd[b] = d_x and xds[b] = d_x·Σxq of the token's activation blocks.
inline void decode_group8(const BlockQ4_Kx8* w, const BlockQ8Act* x, std::size_t supers,
                          const float* xd, const float* xds, float* out) {
  constexpr std::size_t kRegs = 4, kLanesPerRow = 8;
  __m512i lane_rows[kRegs];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) lane_rows[z] =
      row_of_lane(z, kLanesPerRow);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[2][kRegs];  // [sub-block parity][register]
  _Pragma("GCC unroll 2") for (auto& chain : acc) _Pragma("GCC unroll 4") for (auto& a : chain) a =
      _mm512_setzero_ps();
  __m256 minimum = _mm256_setzero_ps();
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ4_Kx8& g = w[s];
    const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.d)));
    const __m256 wmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.dmin)));
    const BlockQ8Act* a = x + 8 * s;
    _Pragma("GCC unroll 4") for (std::size_t p = 0; p < 4; ++p) {
      __m512 scale[2];
      __m512i xq[2];
      _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
        const std::size_t j = 2 * p + h;
        const __m256 sc = _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g.scales[j]))));
        const __m256 mn = _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g.mins[j]))));
        scale[h] = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm256_mul_ps(sc, wd), _mm256_set1_ps(xd[8 * s + j])));
        minimum = _mm256_fmadd_ps(_mm256_mul_ps(mn, wmin), _mm256_set1_ps(xds[8 * s + j]), minimum);
        xq[h] =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j].qs)));
      }
      _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) {
        const __m512i q = _mm512_loadu_si512(g.qs[p][2 * z]);
        const __m512i lo =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(q, low4), xq[0]);
        const __m512i hi = _mm512_dpbusd_epi32(
            _mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(q, 4), low4), xq[1]);
        acc[0][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo),
                                    _mm512_permutexvar_ps(lane_rows[z], scale[0]), acc[0][z]);
        acc[1][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi),
                                    _mm512_permutexvar_ps(lane_rows[z], scale[1]), acc[1][z]);
      }
    }
  }
  __m512 total[kRegs];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) total[z] =
      _mm512_add_ps(acc[0][z], acc[1][z]);
  sum_row_lanes(total, kLanesPerRow, _mm256_sub_ps(_mm256_setzero_ps(), minimum), out);
}

// Decode of one group of 8 Q6_K rows against one token: out[0..8). Per half of a super-block,
// each zmm holds 2 rows' 32-byte runs of ql (two of them) and qh, which combine into the half's
// four slices of 6-bit values (reference::q6_k_slice_layout) with 16-bit shifts and byte masks.
// A slice has two scales, one per 16 values: lanes 0..3 of a row's 8 hold values 0..15. The
// −32 offset goes into the integer dot's starting value, −32·Σxq of each 16-value half in the
// first lane of its four (the lanes of a row are summed at the end).
inline void decode_group8(const BlockQ6_Kx8* w, const BlockQ8Act* x, std::size_t supers,
                          const float* xd, const float* /*unused*/, float* out) {
  constexpr std::size_t kRegs = 4, kLanesPerRow = 8;
  // Lane l of register z: row 2z + l/8, half (l%8)/4, i.e. entry 8·half + row of a slice's
  // scale vector [half][row].
  __m512i lane_scales[kRegs];
  _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) {
    alignas(64) std::int32_t idx[16];
    for (std::size_t l = 0; l < 16; ++l)
      idx[l] = static_cast<std::int32_t>(8 * ((l % 8) / 4) + 2 * z + l / 8);
    lane_scales[z] = _mm512_load_si512(idx);
  }
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[kRegs];
  _Pragma("GCC unroll 4") for (auto& a : acc) a = _mm512_setzero_ps();
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_Kx8& g = w[s];
    const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.d)));
    const __m512 wd2 = _mm512_insertf32x8(_mm512_castps256_ps512(wd), wd, 1);  // [half][row]
    _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
      __m512 scale[4];
      __m512i start[4], xq[4];
      _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) {
        const std::size_t j = 4 * h + i;
        const BlockQ8Act& a = x[8 * s + j];
        const __m512 sc = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.scales[j]))));
        scale[i] = _mm512_mul_ps(_mm512_mul_ps(sc, wd2), _mm512_set1_ps(xd[8 * s + j]));
        // Lanes 0, 8: −32·Σ of values 0..15 (bias_lo / 4, exact: a multiple of 128); lanes 4, 12:
        // of values 16..31; others 0.
        start[i] = _mm512_maskz_mov_epi32(
            0x1111, _mm512_mask_blend_epi32(0xf0f0, _mm512_set1_epi32(a.bias_lo >> 2),
                                            _mm512_set1_epi32(a.bias_hi >> 2)));
        xq[i] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)));
      }
      _Pragma("GCC unroll 4") for (std::size_t z = 0; z < kRegs; ++z) {
        const __m512i lo_run = _mm512_loadu_si512(g.runs[h][0][2 * z]);
        const __m512i hi_run = _mm512_loadu_si512(g.runs[h][1][2 * z]);
        const __m512i qh = _mm512_loadu_si512(g.runs[h][2][2 * z]);
        const __m512i values[4] = {
            _mm512_or_si512(_mm512_and_si512(lo_run, low4),
                            _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45)),
            _mm512_or_si512(_mm512_and_si512(hi_run, low4),
                            _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo_run, 4), low4),
                            _mm512_and_si512(qh, bits45)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(hi_run, 4), low4),
                            _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45))};
        _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) {
          const __m512i dot = _mm512_dpbusd_epi32(start[i], values[i], xq[i]);
          acc[z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                   _mm512_permutexvar_ps(lane_scales[z], scale[i]), acc[z]);
        }
      }
    }
  }
  sum_row_lanes(acc, kLanesPerRow, _mm256_setzero_ps(), out);
}

// The token's per-block terms decode_group8 takes: xd[b] = d_x, and for Q4_0/Q8_0
// xoff[b] = −offset·d_x·Σxq (offset 8, or 128 for Q8_0 flipped to unsigned), for Q4_K
// xoff[b] = d_x·Σxq (the minimums' factor); Q6_K none (its offset is integer): xoff[b] = 0.
template <class Block>
inline void interleaved_activation_terms(const BlockQ8Act* x, std::size_t blocks, float* xd,
                                         float* xoff) {
  if constexpr (std::is_same_v<Block, BlockQ6_K>) {
    for (std::size_t b = 0; b < blocks; ++b) xd[b] = x[b].d, xoff[b] = 0.0f;
  } else if constexpr (std::is_same_v<Block, BlockQ4_K>) {
    for (std::size_t b = 0; b < blocks; ++b) {
      xd[b] = x[b].d;
      xoff[b] = x[b].d_sum;
    }
  } else {
    decode_activation_terms(x, blocks, std::is_same_v<Block, BlockQ4_0> ? 8.0f : 128.0f, xd, xoff);
  }
}

#endif

#if HLLM_ISA_LEVEL >= 1
// Tokens whose integer chains run side by side in the decode of a group's panel: as many as the
// registers hold (one load and unpack of each weight register serves them all); Q6_K, whose
// chains and slice unpacking fill the registers sooner, with AVX-512 VNNI only.
template <class Block>
inline constexpr std::size_t kDecodeTokens = std::is_same_v<Block, BlockQ6_K> &&
                                                     (HLLM_ISA_LEVEL != 2 || kScaledRuns<BlockQ6_K>)
                                                 ? 1
                                                 : (HLLM_ISA_LEVEL == 2 ? 4 : 2);

// Tokens per pass over a group's panel: twice kDecodeTokens, every token's float accumulator
// held while their chains run kDecodeTokens at a time, so the panel streams from memory once for
// up to 8 tokens with AVX-512 and 4 on AVX2 and AVX-VNNI (in two passes of 4, 8 tokens took 2.2×
// one token's time through a 32000×2048 Q8_0 matrix from DRAM with AVX-512; in one pass that asks
// further ahead, 1.3×; docs/performance.md, small batches). The K-quants on AVX2 and AVX-VNNI
// take one tile: there a Q4_K or Q5_K pass of 4 tokens ran no faster than the GEMM, and 8 tokens
// 1.2-1.8× slower (their chains and the unpacking spill the 16 registers).
template <class Block>
inline constexpr std::size_t kDecodePassTokens =
    (Interleaved16<Block>::kValues == kQK_K) && HLLM_ISA_LEVEL != 2 ? kDecodeTokens<Block>
                                                                    : 2 * kDecodeTokens<Block>;
// Token counts below this run the decode kernel, the others the packed GEMM: with a pass of 4
// tokens or more, decode is the faster up to 8 tokens, for which the GEMM's staging of each panel
// is shared by too few; with a pass of 2 (or a token at a time), up to 4 (a batched decode of 4
// sequences ran 14-45% faster than on the GEMM on AVX2 and AVX-VNNI, 8 level or slower;
// docs/performance.md, small batches).
template <class Block>
inline constexpr std::size_t kDecodeBelowTokens = kDecodePassTokens<Block> >= 4 ? 9 : 5;
// Tokens whose chains run side by side over a Q4_K or Q5_K sub-block pair
// (decode_group16_with_minimums), a pass of more taking two tiles: with AVX-512 VNNI the whole
// pass, past kDecodeTokens one sub-block's chains at a time (accumulate_pair), so each register is
// loaded and unpacked once for every token (Q5_K's 8 tokens through a 32000×2048 matrix from DRAM
// in two tiles 2358-2479 µs, in one 2051-2164; one sub-block at a time, with no spills, from L3
// Q5_K 377-459 → 351-375 µs, Q4_K 331-382 → 322-369; docs/performance.md, small batches);
// otherwise kDecodeTokens.
template <class Block>
inline constexpr std::size_t kPairTileTokens = (HLLM_ISA_LEVEL == 2 && kWideUnsigned)
                                                   ? kDecodePassTokens<Block>
                                                   : kDecodeTokens<Block>;

// One half h of a unit of Q4_0, Q4_1 or Q8_0 panels (one block column, 16 rows) against kChains
// tokens, their integer chains side by side: acc[t] += the 16 rows' scaled dot with token t's
// block x[t·x_stride], for t < kChains. Each block's integer dot is one chain per register of 16
// rows' weights against a broadcast activation group, in the panel GEMM's operand form
// (gemm_panels-inl.hpp: with VNNI Q8_0's q + 128 bytes against a start at the block's bias,
// otherwise |q| against the activation with q's sign), so it is exact and needs no lane sums,
// scale permutes or float offset terms. Q4_0's offset is the low chain's start, bias / 16 =
// −8·Σx; Q4_1's minimums come in after each block's scaled dot: m·d_x·Σx (d_sum), 16 rows at
// once. The high nibbles run a second chain (high_nibbles: with VNNI multiplied in place as
// q & 0xf0). Every token's chain takes the same operations in the same order as one token's
// would.
template <std::size_t kChains, class Block>
[[gnu::always_inline]] inline void accumulate_half_unit(const Interleaved16<Block>& unit,
                                                        std::size_t h, const BlockQ8Act* x,
                                                        std::size_t x_stride, Lanes16::Float* acc) {
  using L = Lanes16;
  const auto a = [&](std::size_t t) -> const BlockQ8Act& { return x[t * x_stride]; };
  L::Int dot[kChains];
  if constexpr (std::is_same_v<Block, BlockQ8_0>) {
    _Pragma("GCC unroll 4") for (std::size_t t = 0; t < kChains; ++t) dot[t] =
        L::splat32(offset_start(a(t).bias, kPanelOffset<Block>));
    dot_runs<kPanelMax<Block>, 8>(dot, [&](std::size_t k, std::size_t t, L::Int& q, L::Int& s) {
      q = L::load_int(unit.qs[h][k]);
      s = broadcast_group(a(t), k);
      if constexpr (kSignedPanel<Block>) {
        const L::Int signed_q = L::bit_xor(q, L::splat8(0x80));
        q = L::abs8(signed_q);
        s = L::sign8(s, signed_q);
      }
    });
  } else {
    L::Int q[4];
    _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k) q[k] = L::load_int(unit.qs[h][k]);
    // [low nibbles of every token, then high], raw nibbles on every ISA: Q4_0's offset of 8 is
    // the low start.
    L::Int chains[2 * kChains];
    _Pragma("GCC unroll 4") for (std::size_t t = 0; t < kChains; ++t) {
      chains[t] = L::splat32(offset_start(a(t).bias, std::is_same_v<Block, BlockQ4_0> ? 8 : 0));
      chains[kChains + t] = L::zero_int();
    }
    dot_runs<kPanelMax<Block>, 4>(chains, [&](std::size_t k, std::size_t c, L::Int& v, L::Int& s) {
      const std::size_t high = c / kChains;
      v = high == 0 ? L::bit_and(q[k], L::splat8(0x0f)) : high_nibbles(q[k]);
      s = broadcast_group(a(c % kChains), k + 4 * high);
    });
    _Pragma("GCC unroll 4") for (std::size_t t = 0; t < kChains; ++t) dot[t] =
        L::add32(chains[t], high_nibble_dot(chains[kChains + t]));
  }
  const L::Float d = L::load(unit.d[h]);
  _Pragma("GCC unroll 4") for (std::size_t t = 0; t < kChains; ++t) {
    acc[t] = L::fma(L::to_float(dot[t]), L::mul(d, L::splat(a(t).d)), acc[t]);
    if constexpr (std::is_same_v<Block, BlockQ4_1>)
      acc[t] = L::fma(L::load(unit.m[h]), L::splat(a(t).d_sum), acc[t]);
  }
}

// Decode of one 16-row group of Q4_0, Q4_1 or Q8_0 panels (Interleaved16) against kTokens ≤
// kDecodePassTokens tokens (x: kTokens rows of activation blocks, x_stride apart): out[t·out_stride
// + r] for rows r < 16, row r in lane r. Past kDecodeTokens the tokens' chains run in two tiles
// (5 tokens: 3 + 2) over the same unit, while it is in L1. The unit's bytes are read in address
// order (alternating the two columns' loads halves the rate at which the hardware prefetcher
// streams the panels from DRAM), the lines stream_prefetch_bytes(kTokens) on asked for in
// passing (prefetch_stream_ahead), once for all the tokens. Each block's scaled dot is added to
// one accumulator per token, block after block, exactly as the packed GEMM (panel_tile) sums a
// token's row: the kernels are batch invariant, a token's outputs the same bits whichever runs
// it and with however many tokens.
template <std::size_t kTokens, class Block>
inline void decode_group16_tokens(const Interleaved16<Block>* w, const BlockQ8Act* x,
                                  std::size_t x_stride, std::size_t units, float* out,
                                  std::size_t out_stride) {
  using L = Lanes16;
  static_assert(kTokens <= kDecodePassTokens<Block>, "at most two chain tiles");
  constexpr std::size_t kFirstTile = kTokens <= kDecodeTokens<Block> ? kTokens : (kTokens + 1) / 2;
  L::Float acc[kTokens];
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) acc[t] = L::zero();
  for (std::size_t u = 0; u < units; ++u) {
    const Interleaved16<Block>& unit = w[u];
    prefetch_stream_ahead(&unit, sizeof(unit), stream_prefetch_bytes(kTokens));
    _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
      accumulate_half_unit<kFirstTile>(unit, h, x + 2 * u + h, x_stride, acc);
      if constexpr (kFirstTile < kTokens)
        accumulate_half_unit<kTokens - kFirstTile>(unit, h, x + kFirstTile * x_stride + 2 * u + h,
                                                   x_stride, acc + kFirstTile);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t)
      L::store(out + t * out_stride, acc[t]);
}

// One pair p of sub-blocks (2p, 2p + 1) of a Q4_K or Q5_K unit against kTokens tokens, their
// integer chains side by side: acc[t] += the 16 rows' sub-block dots with token t's activation
// blocks a[t·x_stride + h] (h = 0, 1), weighed by the 16 row scales d·scale_h·d_x, minus the
// minimum terms dmin·min_h·d_x·Σxq. The low nibbles (sub-block 2p) and the high ones (2p + 1) run
// one chain each per token (high_nibbles for Q4_K; Q5_K's sub-blocks come from their planes,
// q5_k_group), one load and unpack of a register serving every token: both sub-blocks' chains
// at once for up to kDecodeTokens tokens, one sub-block's at a time past that (8 tokens: 8 chains
// instead of 16, which spilled). Then each token's two sub-blocks go into its accumulator in the
// packed GEMM's order (panel_tile): a token's operations are those of a token alone. The scales
// are loaded after the dots (before them, the AVX2 one-token call spilled and ran 5-20% slower).
template <std::size_t kTokens, class Block>
[[gnu::always_inline]] inline void accumulate_pair(const typename Interleaved16<Block>::Pair& pair,
                                                   Lanes16::Float d, Lanes16::Float dmin,
                                                   const BlockQ8Act* a, std::size_t x_stride,
                                                   Lanes16::Float* acc) {
  using L = Lanes16;
  constexpr bool kPlanes = std::is_same_v<Block, BlockQ5_K>;
  constexpr std::size_t kStepSubs = kTokens <= kDecodeTokens<Block> ? 2 : 1;
  _Pragma("GCC unroll 2") for (std::size_t first = 0; first < 2; first += kStepSubs) {
    L::Int dots[kStepSubs * kTokens];  // [sub-block 2p + first + h of every token]
    _Pragma("GCC unroll 16") for (std::size_t c = 0; c < kStepSubs * kTokens; ++c) dots[c] =
        L::zero_int();
    const auto operands = [&](std::size_t k, std::size_t c, L::Int& v, L::Int& x_group) {
      const std::size_t h = first + c / kTokens;
      if constexpr (kPlanes) {
        v = q5_k_group(pair.planes[h], k);
      } else {
        const L::Int q = L::load_int(pair.qs[k]);
        v = h == 0 ? L::bit_and(q, L::splat8(0x0f)) : high_nibbles(q);
      }
      x_group = broadcast_group(a[(c % kTokens) * x_stride + h], k);
    };
    dot_runs<kPanelMax<Block>, 8>(dots, operands);
    if constexpr (!kPlanes)  // the high nibbles' chains
      _Pragma("GCC unroll 8") for (std::size_t c = (1 - first) * kTokens; c < kStepSubs * kTokens;
                                   ++c) dots[c] = high_nibble_dot(dots[c]);
    _Pragma("GCC unroll 2") for (std::size_t step_h = 0; step_h < kStepSubs; ++step_h) {
      const std::size_t h = first + step_h;
      const L::Float scale = L::mul(L::load_u8(pair.scales[h]), d);
      const L::Float minimum = L::mul(L::load_u8(pair.mins[h]), dmin);
      _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) {
        const BlockQ8Act& a_j = a[t * x_stride + h];
        acc[t] =
            L::fma(L::to_float(dots[step_h * kTokens + t]), L::mul(scale, L::splat(a_j.d)), acc[t]);
        acc[t] = L::fnma(minimum, L::splat(a_j.d_sum), acc[t]);
      }
    }
  }
}

// Decode of one 16-row group of Q4_K or Q5_K panels against kTokens ≤ kDecodePassTokens tokens
// (x: kTokens rows of activation blocks, x_stride apart): out[t·out_stride + r] for rows r < 16,
// row r in lane r. Pair by pair (accumulate_pair), past kPairTileTokens in two tiles of tokens over
// the same pair while it is in L1, so the panel streams from memory once for all the tokens. Not
// inlined: inlined into matmul_x16's loop over groups, the AVX2 one-token call ran 10% (Q4_K) and
// 35% (Q5_K) slower on a matrix in L3 (docs/performance.md, small batches).
template <std::size_t kTokens, class Block>
[[gnu::noinline]] inline void decode_group16_with_minimums(const Interleaved16<Block>* w,
                                                           const BlockQ8Act* x,
                                                           std::size_t x_stride, std::size_t supers,
                                                           float* out, std::size_t out_stride) {
  using L = Lanes16;
  static_assert(kTokens <= kDecodePassTokens<Block>, "at most two chain tiles");
  constexpr std::size_t kFirstTile =
      kTokens <= kPairTileTokens<Block> ? kTokens : (kTokens + 1) / 2;
  L::Float acc[kTokens];
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) acc[t] = L::zero();
  for (std::size_t s = 0; s < supers; ++s) {
    const Interleaved16<Block>& unit = w[s];
    // Streams from DRAM stay fast only while the unit's lines are first touched in address
    // order (the hardware prefetcher loses a stream that jumps back): each pair's scale line is
    // asked for before its quants, which its dot reads first. The next units' lines are asked
    // for as well, on every ISA: with AVX-512 that made these decodes 0-25% (Q4_K_M) and 10-22%
    // (Q5_K_M) faster on an Emerald Rapids Xeon, with AVX2 1.5-1.9× on a Zen 5, where the
    // hardware prefetcher alone streamed a Q5_K panel at 12 GB/s (docs/performance.md, "Zen 5").
    prefetch_stream_ahead(&unit, sizeof(unit), stream_prefetch_bytes(kTokens));
    const L::Float d = L::load(unit.d), dmin = L::load(unit.dmin);
    const BlockQ8Act* a = x + 8 * s;
    _Pragma("GCC unroll 4") for (std::size_t p = 0; p < 4; ++p) {
      __builtin_prefetch(unit.pairs[p].scales);
      accumulate_pair<kFirstTile, Block>(unit.pairs[p], d, dmin, a + 2 * p, x_stride, acc);
      if constexpr (kFirstTile < kTokens)
        accumulate_pair<kTokens - kFirstTile, Block>(
            unit.pairs[p], d, dmin, a + kFirstTile * x_stride + 2 * p, x_stride, acc + kFirstTile);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t)
      L::store(out + t * out_stride, acc[t]);
}
template <std::size_t kTokens, class Block>
requires std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>
inline void decode_group16_tokens(const Interleaved16<Block>* w, const BlockQ8Act* x,
                                  std::size_t x_stride, std::size_t supers, float* out,
                                  std::size_t out_stride) {
  decode_group16_with_minimums<kTokens>(w, x, x_stride, supers, out, out_stride);
}

// Decode of one 16-row group of Q6_K panels against one token: out[0..16). Per half of a
// super-block, each slice's two 16-value sub-blocks run one chain each (groups 0..3 and 4..7),
// started at their offset term −32·Σx (slice 3, whose values come as 4·q with VNNI: −128·Σx, the
// activation block's bias_lo and bias_hi, its dots divided by 4 at the end, exactly). Then each
// slice's two dots, weighed by d·scale each and d_x once (q6_k_weigh_slice), go into one
// accumulator, slice after slice, in the packed GEMM's order (panel_tile). With the emulated dot
// (kScaledRuns) a slice's two sub-blocks share one chain instead, started at the slice's offset
// term, their runs weighed by their scales, and the slice's dot weighed by d·d_x. The integer dots
// are exact, so they may run in any grouping: sub-block by sub-block, so the half's registers are
// first touched in address order (the hardware prefetcher loses a DRAM stream that jumps back
// and forth between the two sub-blocks' registers: 3-4x slower on the Zen 4 VM), in passes of
// kQ6kPassSlices slices (kQ6kSliceOrder: slice 3, which reads all three registers of a group,
// first, so a later pass finds its lines in L1). The next unit's lines are asked for in passing
// (prefetch_stream_ahead), the half's scale lines before its quants.
inline constexpr std::size_t kQ6kSliceOrder[4] = {3, 0, 1, 2};
// All four slices' chains at once where 32 registers hold them (AVX-512); two on AVX2, whose 16
// registers hold two chains and their run sums (eight spilled in every group).
inline constexpr std::size_t kQ6kPassSlices = HLLM_ISA_LEVEL == 2 ? 4 : 2;
inline void decode_group16(const BlockQ6_Kx16* w, const BlockQ8Act* x, std::size_t supers,
                           float* out) {
  using L = Lanes16;
  L::Float acc = L::zero();
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_Kx16& unit = w[s];
    const L::Float d = L::load(unit.d);
    prefetch_stream_ahead(&unit, sizeof(unit));
    _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
      const BlockQ6_Kx16::Half& half = unit.halves[h];
      __builtin_prefetch(half.scales[0]);  // read after the quants: asked for first
      __builtin_prefetch(half.scales[4]);
      const BlockQ8Act* a = x + 8 * s + 4 * h;
      const auto times4 = [](std::size_t i) { return i == 3 && kSlice3Times4; };
      // [slice i][16-value sub-block]: 2i + sub; kScaledRuns: [slice i], the sub-blocks' runs
      // weighed by their scales in one chain (gemm_panels-inl.hpp)
      constexpr bool kScaled = kScaledRuns<BlockQ6_K>;
      L::Int dot[8];
      const auto slot = [](std::size_t i, std::size_t sub) { return kScaled ? i : 2 * i + sub; };
      _Pragma("GCC unroll 2") for (std::size_t sub = 0; sub < 2; ++sub)
          _Pragma("GCC unroll 2") for (std::size_t p = 0; p < 4; p += kQ6kPassSlices) {
        L::Int chain[kQ6kPassSlices];
        _Pragma("GCC unroll 4") for (std::size_t c = 0; c < kQ6kPassSlices; ++c) {
          const std::size_t i = kQ6kSliceOrder[p + c];
          const int offset = times4(i) ? 128 : 32;
          if constexpr (kScaled)
            chain[c] = sub == 0
                           ? q6_k_scaled_start(
                                 q6_k_run_offsets(half.scales[2 * i], half.scales[2 * i + 1]), a[i])
                           : dot[i];
          else
            chain[c] = L::splat32(offset_start(sub == 0 ? a[i].bias_lo : a[i].bias_hi, offset));
        }
        const auto operands = [&](std::size_t kk, std::size_t c, L::Int& v, L::Int& x_group) {
          const std::size_t i = kQ6kSliceOrder[p + c], k = 4 * sub + kk;
          v = q6_k_slice_quants(half, k, i);
          x_group = broadcast_group(a[i], k);
        };
        if constexpr (kScaled)
          dot_runs<kPanelMax<BlockQ6_K>, 4>(chain, operands, [&](std::size_t, std::size_t c) {
            return q6_k_run_weight(half.scales[2 * kQ6kSliceOrder[p + c] + sub]);
          });
        else
          dot_runs<kPanelMax<BlockQ6_K>, 4>(chain, operands);
        _Pragma("GCC unroll 4") for (std::size_t c = 0; c < kQ6kPassSlices; ++c)
            dot[slot(kQ6kSliceOrder[p + c], sub)] = chain[c];
      }
      _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) {
        if constexpr (kScaled) {
          acc = L::fma(L::to_float(dot[i]), L::mul(d, L::splat(a[i].d)), acc);
        } else {
          const auto exact = [&](std::size_t sub) {
            return times4(i) ? L::sar32<2>(dot[2 * i + sub]) : dot[2 * i + sub];
          };
          acc = q6_k_weigh_slice(exact(0), L::mul(d, L::load_s8(half.scales[2 * i])), exact(1),
                                 L::mul(d, L::load_s8(half.scales[2 * i + 1])), a[i].d, acc);
        }
      }
    }
  }
  L::store(out, acc);
}

// Slices [first, first + kSlices) of a half of a Q6_K unit against kTokens tokens (a: token 0's
// activation block of slice first, token t's x_stride blocks on): acc[t] += each slice's
// weighed sum (q6_k_weigh_slice) as decode_group16 and the packed GEMM add it. The integer dots,
// one chain per slice, sub-block and token, run side by side, each weight register loaded and
// unpacked once for every token. Every slice's values come as 4·q (q6_k_slice_quants_times4:
// slice 3's form with VNNI, slices 0-2 for one shift more), so each chain starts at its sub-block's
// bias, a broadcast load, and d_quarter = d/4 takes the 4 back, exactly (a power of two).
template <std::size_t kSlices, std::size_t kTokens>
[[gnu::always_inline]] inline void accumulate_q6_k_slices(const BlockQ6_Kx16::Half& half,
                                                          std::size_t first,
                                                          Lanes16::Float d_quarter,
                                                          const BlockQ8Act* a, std::size_t x_stride,
                                                          Lanes16::Float* acc) {
  using L = Lanes16;
  static_assert(kSlice3Times4 && kTokens > 0, "every slice's values as 4·q, as slice 3's");
  constexpr std::size_t kPerSlice = 2 * kTokens;  // chains [slice][sub-block][token]
  const auto block = [&](std::size_t slice, std::size_t t) -> const BlockQ8Act& {
    return a[slice + t * x_stride];
  };
  L::Int dots[kSlices * kPerSlice];
  _Pragma("GCC unroll 2") for (std::size_t slice = 0; slice < kSlices; ++slice)
      _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) {
    dots[slice * kPerSlice + t] = L::splat32(block(slice, t).bias_lo);
    dots[slice * kPerSlice + kTokens + t] = L::splat32(block(slice, t).bias_hi);
  }
  dot_runs<kPanelMax<BlockQ6_K>, 4>(
      dots, [&](std::size_t kk, std::size_t c, L::Int& v, L::Int& x_group) {
        const std::size_t i = first + c / kPerSlice, k = 4 * (c % kPerSlice / kTokens) + kk;
        v = q6_k_slice_quants_times4(half, k, i);
        x_group = broadcast_group(block(c / kPerSlice, c % kTokens), k);
      });
  _Pragma("GCC unroll 2") for (std::size_t slice = 0; slice < kSlices; ++slice) {
    const std::size_t i = first + slice;
    const L::Float scale_lo = L::mul(d_quarter, L::load_s8(half.scales[2 * i])),
                   scale_hi = L::mul(d_quarter, L::load_s8(half.scales[2 * i + 1]));
    _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) acc[t] = q6_k_weigh_slice(
        dots[slice * kPerSlice + t], scale_lo, dots[slice * kPerSlice + kTokens + t], scale_hi,
        block(slice, t).d, acc[t]);
  }
}

// Decode of one 16-row group of Q6_K panels against 2 ≤ kTokens ≤ kDecodePassTokens tokens
// (AVX-512 VNNI; x and out as decode_group16_with_minimums'), every token's chains side by side
// over each half, a slice at a time (two for 2 tokens, so 2 tokens run 8 chains, as 4 do, to hide
// the dot's latency; 3 tokens run 6). In tiles of 2 tokens, each unpacking the half again and
// running 4 chains, 8 tokens took 3.2× one token's time through a 32000×2048 matrix from DRAM
// (docs/performance.md, small batches). One token keeps decode_group16, whose four slices' chains
// side by side hide the latency.
template <std::size_t kTokens>
[[gnu::noinline]] inline void decode_group16_q6_k_tokens(const BlockQ6_Kx16* w, const BlockQ8Act* x,
                                                         std::size_t x_stride, std::size_t supers,
                                                         float* out, std::size_t out_stride) {
  using L = Lanes16;
  static_assert(kTokens >= 2 && kTokens <= kDecodePassTokens<BlockQ6_K>);
  constexpr std::size_t kStepSlices = kTokens == 2 ? 2 : 1;
  L::Float acc[kTokens];
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t) acc[t] = L::zero();
  for (std::size_t s = 0; s < supers; ++s) {
    const BlockQ6_Kx16& unit = w[s];
    const L::Float d_quarter = L::mul(L::load(unit.d), L::splat(0.25f));
    prefetch_stream_ahead(&unit, sizeof(unit), stream_prefetch_bytes(kTokens));
    _Pragma("GCC unroll 2") for (std::size_t h = 0; h < 2; ++h) {
      const BlockQ6_Kx16::Half& half = unit.halves[h];
      __builtin_prefetch(half.scales[0]);  // read after the quants: asked for first
      __builtin_prefetch(half.scales[4]);
      const BlockQ8Act* a = x + 8 * s + 4 * h;
      // More tokens than one tile's: the next unit's half asked for in L1 as well (8 tokens from
      // DRAM ran 1.2× faster; 4 tokens, whose half passes sooner, 1.1× slower).
      if constexpr (kTokens > kDecodeTokens<BlockQ6_K>)
        prefetch_stream_ahead<kIntoL1>(&half, sizeof(half), sizeof(unit));
      _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; i += kStepSlices)
          accumulate_q6_k_slices<kStepSlices, kTokens>(half, i, d_quarter, a + i, x_stride, acc);
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t t = 0; t < kTokens; ++t)
      L::store(out + t * out_stride, acc[t]);
}
template <std::size_t kTokens>
inline void decode_group16_tokens(const BlockQ6_Kx16* w, const BlockQ8Act* x, std::size_t x_stride,
                                  std::size_t supers, float* out, std::size_t out_stride) {
  if constexpr (kTokens == 1 || kDecodeTokens<BlockQ6_K> == 1) {
    for (std::size_t t = 0; t < kTokens; ++t)
      decode_group16(w, x + t * x_stride, supers, out + t * out_stride);
  } else {
    decode_group16_q6_k_tokens<kTokens>(w, x, x_stride, supers, out, out_stride);
  }
}
#endif

// The row-major kernel of the file type (the fallback's).
template <class Block>
inline void matmul_file_layout(const Block* w, std::size_t rows, std::size_t cols,
                               const BlockQ8Act* x, std::size_t n_tokens, float* y,
                               std::size_t row_begin, std::size_t row_end) {
  if constexpr (std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K> ||
                std::is_same_v<Block, BlockQ6_K>)
    matmul_kquant<Block>(w, rows, cols, x, n_tokens, y, row_begin, row_end);
  else
    matmul_quant(w, rows, cols, x, n_tokens, y, row_begin, row_end);
}

// Rows [row_begin, row_end) of a repacked matrix w (`units` blocks of the file type per row)
// through the row-major kernel, each row's blocks copied out first (block_at): every ISA's way for
// rows outside whole groups, and the only way on ISAs without interleaved kernels. scratch holds
// the row ([units] blocks) and then its outputs ([n_tokens] floats, from the next cache line).
template <class Block, class Stored>
inline void matmul_copied_rows(const Stored* w, std::size_t units, std::size_t rows,
                               std::size_t cols, const BlockQ8Act* x, std::size_t n_tokens,
                               float* y, std::size_t row_begin, std::size_t row_end,
                               void* scratch) {
  if (row_begin == row_end) return;
  Block* const row = static_cast<Block*>(scratch);
  float* const out = reinterpret_cast<float*>(static_cast<std::byte*>(scratch) +
                                              round_up_to_line(units * sizeof(Block)));
  for (std::size_t r = row_begin; r < row_end; ++r) {
    for (std::size_t u = 0; u < units; ++u) row[u] = block_at(w, units, r, u);
    matmul_file_layout(row, 1, cols, x, n_tokens, out, 0, 1);
    for (std::size_t t = 0; t < n_tokens; ++t) y[t * rows + r] = out[t];
  }
}

// Rows [row_begin, row_end) of y: [n_tokens][rows] for repacked weights w: [rows/8][units]
// groups (units: blocks of the file type per row) and x: [n_tokens][cols/32] activation blocks.
template <class Block>
inline void matmul_interleaved(const Interleaved8<Block>* w, std::size_t rows, std::size_t cols,
                               const BlockQ8Act* x, std::size_t n_tokens, float* y,
                               std::size_t row_begin, std::size_t row_end, void* scratch) {
  constexpr bool kSuper = std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ6_K>;
  constexpr std::size_t kUnit = kSuper ? kQK_K : 32;
  const std::size_t units = cols / kUnit;
#if HLLM_QUANT_VNNI && HLLM_ISA_LEVEL == 2
  const std::size_t blocks = cols / 32;
  // Every token count on the decode kernel, token by token: its lane sums are not the packed
  // GEMM's order, and one order for every count keeps the kernel batch invariant. (The 8-row
  // groups serve only matrices whose rows are not a multiple of 16; the others take the 16-row
  // panels, GEMM and all.)
  if (row_begin % 8 == 0) {
    if (blocks <= kDecodeMaxBlocks) {
      const std::size_t groups = (row_end - row_begin) / 8;
      float xd[kDecodeMaxBlocks], xoff[kDecodeMaxBlocks];
      for (std::size_t t = 0; groups > 0 && t < n_tokens; ++t) {
        interleaved_activation_terms<Block>(x + t * blocks, blocks, xd, xoff);
        for (std::size_t g = 0; g < groups; ++g) {
          const std::size_t r = row_begin + 8 * g;
          decode_group8(w + (r / 8) * units, x + t * blocks, units, xd, xoff, y + t * rows + r);
        }
      }
      row_begin += groups * 8;
    }
  }
#endif
  matmul_copied_rows<Block>(w, units, rows, cols, x, n_tokens, y, row_begin, row_end, scratch);
}

// The table's entry for Interleaved8<Block> weights.
template <class Block>
inline void matmul_x8(const void* w, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                      std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                      void* scratch) {
  matmul_interleaved(static_cast<const Interleaved8<Block>*>(w), rows, cols, x, n_tokens, y,
                     row_begin, row_end, scratch);
}

// Rows [row_begin, row_end) of y: [n_tokens][rows] for Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K weights in
// 16-row panels, w: [rows/16][cols/kValues] units, and x: [n_tokens][cols/32] activation blocks.
// On every vector ISA, whole groups take the packed-panel GEMM (prefill; its panels are plain loads
// of these) or decode_group16; rows outside whole groups, and the scalar twin, copy rows out.
template <class Block>
inline void matmul_x16(const void* weights, std::size_t rows, std::size_t cols, const BlockQ8Act* x,
                       std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t row_end,
                       void* scratch) {
  using Unit = Interleaved16<Block>;
  const auto* w = static_cast<const Unit*>(weights);
  const std::size_t units = cols / Unit::kValues;  // per row
#if HLLM_ISA_LEVEL >= 1
  const std::size_t blocks = cols / 32;  // activation blocks per token
  if (row_begin % 16 == 0) {
    const std::size_t groups = (row_end - row_begin) / 16;
    if (n_tokens >= kDecodeBelowTokens<Block>) {
      gemm_packed<Block>(Interleaved16Panels<Block>{w, units}, rows, blocks, x, n_tokens, y,
                         row_begin, groups);
    } else {
      // Group by group, every token: a group's panel is read from memory once.
      for (std::size_t g = 0; g < groups; ++g) {
        const std::size_t r = row_begin + 16 * g;
        for_token_tiles<kDecodePassTokens<Block>>(n_tokens, [&](auto k_tokens, std::size_t t) {
          decode_group16_tokens<k_tokens()>(w + (r / 16) * units, x + t * blocks, blocks, units,
                                            y + t * rows + r, rows);
        });
      }
    }
    row_begin += 16 * groups;
  }
#endif
  matmul_copied_rows<Block>(w, units * Unit::kColumns, rows, cols, x, n_tokens, y, row_begin,
                            row_end, scratch);
}
