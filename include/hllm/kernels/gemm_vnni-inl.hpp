// Prefill GEMM for Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K weights on AVX-512 VNNI: 8-bit activations
// times 16-row weight panels with vpdpbusd. Included by isa_kernels.hpp in the VNNI namespace
// only, before matmul_interleaved-inl.hpp, which calls it on the load-time 16-row panels
// (Interleaved16) for batches of kPackedMinTokens tokens or more. No include guard, by design.
//
// Why a packed panel: vpdpbusd multiplies 64 unsigned bytes of its first operand by 64 signed
// bytes of its second and sums each group of four into one of 16 int32 lanes. If the first
// operand holds four consecutive weights of each of 16 rows and the second is one activation
// group of four broadcast to every lane (an embedded m32 broadcast, no shuffle), one
// instruction does 64 multiply-adds for 16 outputs and no horizontal sum is ever needed. The
// file layout (one row's block after another) does not give that operand; the load-time panels
// do, and each K-chunk of a 16-row group is unpacked into a small panel (kPanelBlocks blocks,
// 18 KiB, L1/L2-resident) with plain loads, reused by every token of the chunk. Each token's
// output is summed block after block in one FMA chain, the decode kernels' order
// (decode_group16), so prefill and decode give a token the same bits (batch invariance).
//
// vpdpbusd wants unsigned weights, so every format with an integer offset is packed as
// u = value + 128: Q8_0 bytes flipped (q + 128), Q4_0 nibbles + 120 (value u − 8), Q6_K 6-bit
// values + 96 (value q − 32). The offset comes back out exactly through the activation block's
// sum, Σ (u − 128)·x = Σ u·x − 128·Σx, so the int32 accumulator starts at the block's
// precomputed bias −128·Σx: one broadcast load, the same for every format, instead of a
// per-format multiply and a move from a general register in every block and token. Each block's
// integer dot is exact (|u·x| ≤ 255·127, 32 terms), then scaled by d_w·d_x and accumulated in
// float, block by block in order, as the scalar twin does.

#if HLLM_QUANT_VNNI

inline constexpr std::size_t kPanelRows = 16;    // one zmm lane per row
inline constexpr std::size_t kPanelBlocks = 32;  // K-chunk: 1024 weights per row per panel
inline constexpr std::size_t kTokenChunk = 256;  // activations of one chunk stay in L2
inline constexpr std::size_t kPackedMinTokens = 4;

// One 32-weight slice of 16 rows: values[k] lane r = row r's weights 4k..4k+3 (unsigned).
struct alignas(64) PanelBlock {
  __m512i values[8];
  __m512 scales;     // [16] row r's scale (Q6_K: of values 0..15)
  __m512 scales_hi;  // [16] Q6_K: row r's scale of values 16..31
  __m512 mins;       // [16] Q4_K/Q5_K: row r's minimum, dmin·m_j; Q4_1: its m
};

// Formats whose packed values carry the offset 128 (value ∝ u − 128); Q4_1, Q4_K and Q5_K have
// a float minimum instead.
template <class Block>
inline constexpr bool kHasOffset =
    std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockQ8_0> ||
    std::is_same_v<Block, BlockQ6_K>;
// 32-value slices per Block.
template <class Block>
inline constexpr std::size_t kSlicesPerBlock =
    std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K> ||
            std::is_same_v<Block, BlockQ6_K>
        ? 8
        : 1;
// Formats with a float minimum per slice: value = scale·q − min (Q4_K, Q5_K) or scale·q + m
// (Q4_1).
template <class Block>
inline constexpr bool kHasMinimum =
    std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K> ||
    std::is_same_v<Block, BlockQ4_1>;

// Panel registers k and k + 4 from q, the 16 rows' Q4_0 (Q4_1) quant bytes 4k..4k+3: byte i of a
// row holds weight i (low nibble) and weight i + 16 (high nibble); Q4_0 values are offset to
// nibble + 120, Q4_1's stay nibbles.
template <class Block>
inline void q4_panel_values(__m512i q, std::size_t k, PanelBlock& p) {
  const __m512i mask = _mm512_set1_epi8(0x0f);
  p.values[k] = _mm512_and_si512(q, mask);
  p.values[k + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
  if constexpr (std::is_same_v<Block, BlockQ4_0>) {
    const __m512i to_offset_128 = _mm512_set1_epi8(120);
    p.values[k] = _mm512_add_epi8(p.values[k], to_offset_128);
    p.values[k + 4] = _mm512_add_epi8(p.values[k + 4], to_offset_128);
  }
}

// 16 unsigned bytes at p as floats (a 16-row panel's unpacked Q4_K scales or minimums).
inline __m512 bytes_to_floats(const std::uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Group k (values 4k..4k+3 of each of 16 rows) of a Q6_K panel half's four slices: q[0..2] the
// 6-bit values (one AND each: bits 0-5 of the three registers), q[3] slice 3's value times 4,
// assembled in place from the registers' top bit pairs (bits 6-7 of register 0, 1, 2 become
// bits 2-3, 4-5, 6-7; the 16-bit shifts' spill from the neighbouring byte is masked off).
inline void q6_k_panel_quants(const BlockQ6_Kx16::Half& half, std::size_t k, __m512i (&q)[4]) {
  const __m512i low6 = _mm512_set1_epi8(0x3f);
  const __m512i r0 = _mm512_loadu_si512(half.qs[k][0]), r1 = _mm512_loadu_si512(half.qs[k][1]),
                r2 = _mm512_loadu_si512(half.qs[k][2]);
  q[0] = _mm512_and_si512(r0, low6);
  q[1] = _mm512_and_si512(r1, low6);
  q[2] = _mm512_and_si512(r2, low6);
  constexpr int kSelect = 0xD8;  // ternary logic: c ? b : a
  const __m512i bits23_45 = _mm512_ternarylogic_epi32(
      _mm512_srli_epi16(r0, 4), _mm512_srli_epi16(r1, 2), _mm512_set1_epi8(0x30), kSelect);
  q[3] = _mm512_and_si512(
      _mm512_ternarylogic_epi32(bits23_45, r2, _mm512_set1_epi8(static_cast<char>(0xc0)), kSelect),
      _mm512_set1_epi8(static_cast<char>(0xfc)));
}

// The activation group a.qs[4k..4k+3] in every lane (the s8 operand of vpdpbusd).
inline __m512i broadcast_group(const BlockQ8Act& a, std::size_t k) {
  std::int32_t group;
  std::memcpy(&group, a.qs + 4 * k, 4);
  return _mm512_set1_epi32(group);
}

// y[j][0..16) (+)= panel · x[j] for kTokens tokens over the panel's n blocks. x: token j's
// blocks at x + j·x_stride; y: token j's 16 outputs at y + j·y_stride. accumulate: add to y
// (a later K-chunk continues the sum the earlier one stored, in the same order).
template <std::size_t kTokens, class Block>
inline void panel_tile(const PanelBlock* panel, std::size_t n, const BlockQ8Act* x,
                       std::size_t x_stride, float* y, std::size_t y_stride, bool accumulate) {
  __m512 acc[kTokens];
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[j] =
      accumulate ? _mm512_loadu_ps(y + j * y_stride) : _mm512_setzero_ps();
  for (std::size_t b = 0; b < n; ++b) {
    const PanelBlock& p = panel[b];
    // Eight tokens' dot chains interleaved: vpdpbusd has a latency of several cycles, which
    // four chains in flight do not cover (docs/performance.md). Q6_K keeps four: its two
    // accumulators per token would not fit the 32 registers with eight.
    constexpr std::size_t kChains =
        std::min<std::size_t>(kTokens, std::is_same_v<Block, BlockQ6_K> ? 4 : 8);
    _Pragma("GCC unroll 2") for (std::size_t j0 = 0; j0 < kTokens; j0 += kChains) {
      const BlockQ8Act* a[kChains];
      _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) a[c] =
          &x[(j0 + c) * x_stride + b];
      if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        // Two scales per slice: each 16-value half has its own accumulator and offset.
        __m512i lo[kChains], hi[kChains];
        _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
          lo[c] = _mm512_set1_epi32(a[c]->bias_lo);
          hi[c] = _mm512_sub_epi32(_mm512_set1_epi32(a[c]->bias), lo[c]);
        }
        _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k)
            _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
          lo[c] = _mm512_dpbusd_epi32(lo[c], p.values[k], broadcast_group(*a[c], k));
          hi[c] = _mm512_dpbusd_epi32(hi[c], p.values[k + 4], broadcast_group(*a[c], k + 4));
        }
        _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
          const __m512 d = _mm512_set1_ps(a[c]->d);
          acc[j0 + c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[c]), _mm512_mul_ps(p.scales, d), acc[j0 + c]);
          acc[j0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[c]), _mm512_mul_ps(p.scales_hi, d),
                                        acc[j0 + c]);
        }
      } else {
        __m512i dot[kChains];
        _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) dot[c] =
            kHasOffset<Block> ? _mm512_set1_epi32(a[c]->bias) : _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k)
            _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) dot[c] =
                _mm512_dpbusd_epi32(dot[c], p.values[k], broadcast_group(*a[c], k));
        _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
          const __m512 d = _mm512_set1_ps(a[c]->d);
          acc[j0 + c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[c]), _mm512_mul_ps(p.scales, d), acc[j0 + c]);
          if constexpr (std::is_same_v<Block, BlockQ4_1>)  // + m · d_x·Σxq (decode_group16's)
            acc[j0 + c] = _mm512_fmadd_ps(p.mins, _mm512_set1_ps(a[c]->d_sum), acc[j0 + c]);
          else if constexpr (kHasMinimum<Block>)  // − dmin·m_j · d_x·Σxq
            acc[j0 + c] = _mm512_fnmadd_ps(p.mins, _mm512_set1_ps(a[c]->d_sum), acc[j0 + c]);
        }
      }
    }
  }
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j)
      _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

// Tokens [0, n_tokens) of one panel, 8 at a time, the tail in 4/2/1 pieces.
template <class Block>
inline void panel_tokens(const PanelBlock* panel, std::size_t n, const BlockQ8Act* x,
                         std::size_t x_stride, std::size_t n_tokens, float* y, std::size_t y_stride,
                         bool accumulate) {
  std::size_t t = 0;
  for (; t + 8 <= n_tokens; t += 8)
    panel_tile<8, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                         accumulate);
  if (n_tokens - t >= 4) {
    panel_tile<4, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                         accumulate);
    t += 4;
  }
  if (n_tokens - t >= 2) {
    panel_tile<2, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                         accumulate);
    t += 2;
  }
  if (t < n_tokens)
    panel_tile<1, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                         accumulate);
}

// Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K in 16-row panels (Interleaved16): the unit's registers are the
// panel's, so packing is plain loads (Q8_0 already holds q + 128; Q4_0 nibbles are split and
// offset as above, Q4_1's split, Q4_K's by slice, Q6_K's values unpacked by q6_k_panel_quants),
// where the file's and the 8-row layouts take a gather per register.
template <class Block>
struct Interleaved16Panels {
  const Interleaved16<Block>* w;  // r must be a multiple of 16
  std::size_t units;              // per row
  void pack(std::size_t r, std::size_t b0, std::size_t n, PanelBlock* out) const {
    const Interleaved16<Block>* group = w + (r / 16) * units;
    for (std::size_t b = b0; b < b0 + n; ++b) {
      PanelBlock& p = out[b - b0];
      if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        // Slice j of super-block b / 8: slice j % 4 of half j / 4, values offset to q + 96.
        const BlockQ6_Kx16& unit = group[b / 8];
        const std::size_t j = b % 8, i = j % 4;
        const BlockQ6_Kx16::Half& half = unit.halves[j / 4];
        const __m512 d = VecF32::load(unit.d);
        const auto scales = [&](const std::int8_t* sub) {
          return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(sub)))));
        };
        p.scales = scales(half.scales[2 * i]);
        p.scales_hi = scales(half.scales[2 * i + 1]);
        _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) {
          __m512i q[4];
          q6_k_panel_quants(half, k, q);
          // 4·q has bits 0-1 clear, so the 16-bit shift's spill into bits 6-7 is zero.
          p.values[k] =
              _mm512_add_epi8(i == 3 ? _mm512_srli_epi16(q[3], 2) : q[i], _mm512_set1_epi8(96));
        }
      } else if constexpr (std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>) {
        // Slice j of super-block b / 8: the low (j even) or high nibbles of pair j / 2 (Q5_K:
        // with bit j of the qh words as bit 4).
        const Interleaved16<Block>& unit = group[b / 8];
        const std::size_t j = b % 8;
        p.scales =
            _mm512_mul_ps(bytes_to_floats(unit.pairs[j / 2].scales[j % 2]), VecF32::load(unit.d));
        p.mins =
            _mm512_mul_ps(bytes_to_floats(unit.pairs[j / 2].mins[j % 2]), VecF32::load(unit.dmin));
        const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(4 * (j & 1)));
        const __m512i mask = _mm512_set1_epi8(0x0f);
        _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) {
          p.values[k] = _mm512_and_si512(
              _mm512_srl_epi32(_mm512_loadu_si512(unit.pairs[j / 2].qs[k]), shift), mask);
          if constexpr (std::is_same_v<Block, BlockQ5_K>)
            p.values[k] = _mm512_or_si512(
                p.values[k],
                _mm512_slli_epi32(
                    _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512(unit.qh[k]),
                                                      _mm_cvtsi32_si128(static_cast<int>(j))),
                                     _mm512_set1_epi8(1)),
                    4));
        }
      } else {
        const Interleaved16<Block>& unit = group[b / 2];
        const std::size_t h = b % 2;
        p.scales = VecF32::load(unit.d[h]);
        if constexpr (std::is_same_v<Block, BlockQ4_1>) p.mins = VecF32::load(unit.m[h]);
        if constexpr (!std::is_same_v<Block, BlockQ8_0>) {
          _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k)
              q4_panel_values<Block>(_mm512_loadu_si512(unit.qs[h][k]), k, p);
        } else {
          _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) p.values[k] =
              _mm512_loadu_si512(unit.qs[h][k]);
        }
      }
    }
  }
};

// Rows [row_begin, row_begin + 16·groups) of y: [n_tokens][rows] for weights w (a panel
// source) of `blocks` 32-value slices per row and x: [n_tokens][blocks] activation blocks.
template <class Block, class Panels>
inline void gemm_packed(const Panels& w, std::size_t rows, std::size_t blocks, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t groups) {
  static_assert(kPanelBlocks % kSlicesPerBlock<Block> == 0, "K-chunks hold whole blocks");
  PanelBlock panel[kPanelBlocks];
  for (std::size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const std::size_t chunk = std::min(kTokenChunk, n_tokens - t0);
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t r = row_begin + g * kPanelRows;
      for (std::size_t b0 = 0; b0 < blocks; b0 += kPanelBlocks) {
        const std::size_t n = std::min(kPanelBlocks, blocks - b0);
        w.pack(r, b0, n, panel);
        panel_tokens<Block>(panel, n, x + t0 * blocks + b0, blocks, chunk, y + t0 * rows + r, rows,
                            b0 > 0);
      }
    }
  }
}

#endif  // HLLM_QUANT_VNNI
