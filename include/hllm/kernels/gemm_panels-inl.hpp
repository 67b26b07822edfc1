// Prefill GEMM for Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K weights: 8-bit activations times 16-row
// weight panels, written once against the 16-lane primitives (simd/lanes16-inl.hpp) and compiled
// for AVX2, AVX-VNNI, AVX-512 and AVX-512 VNNI. Included by isa_kernels.hpp before
// matmul_interleaved-inl.hpp, which calls it on the load-time 16-row panels (Interleaved16) for
// batches of kDecodeBelowTokens tokens or more. No include guard, by design.
//
// Why a packed panel: an integer dot (vpdpbusd, or vpmaddubsw + vpmaddwd) multiplies the
// unsigned bytes of its first operand by the signed bytes of its second and sums each group of
// four into one int32 lane. If the first operand holds four consecutive weights of each of 16
// rows and the second is one activation group of four broadcast to every lane, one dot does 64
// multiply-adds for 16 outputs and no horizontal sum is ever needed. The file layout (one row's
// block after another) does not give that operand; the load-time panels do, and each K-chunk of
// a 16-row group is unpacked into a small panel (kPanelBlocks blocks, L1/L2-resident) with plain
// loads, reused by every token of the chunk. Each token's output is summed block after block in
// one FMA chain, the decode kernels' order (decode_group16), so prefill and decode give a token
// the same bits (batch invariance), on every ISA: the integer dots are exact and the float
// operations the same, lane for lane.
//
// The values' form depends on the dot (kWideUnsigned). With VNNI, every format with an integer
// offset is packed as u = value + 128: Q8_0 bytes flipped (q + 128), Q4_0 nibbles + 120 (value
// u − 8), Q6_K 6-bit values + 96 (value q − 32). The offset comes back out exactly through the
// activation block's sum, Σ (u − 128)·x = Σ u·x − 128·Σx, so the int32 accumulator starts at the
// block's precomputed bias −128·Σx: one broadcast load, the same for every format. vpmaddubsw
// would saturate on such bytes, so without VNNI the values stay small: Q4_0 nibbles and Q6_K
// values as they are, starting at their own offset terms (bias/16 = −8·Σx; Q6_K's, weighed by
// its two scales, below: kScaledRuns), and Q8_0 as |q| against the activation with q's sign
// (vpsignb), starting at 0. Each block's integer dot is exact (32 terms below 2^15 each), then
// scaled by d_w·d_x and accumulated in float, block by block in order, as the scalar twin does.

#if HLLM_ISA_LEVEL >= 1

inline constexpr std::size_t kPanelRows = 16;    // one int32 lane per row
inline constexpr std::size_t kPanelBlocks = 32;  // K-chunk: 1024 weights per row per panel
inline constexpr std::size_t kTokenChunk = 256;  // activations of one chunk stay in L2

// Formats whose values have an integer offset (value ∝ q − offset); Q4_1, Q4_K and Q5_K have a
// float minimum instead.
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
// Q8_0 without VNNI: |q| meets the activation with q's sign, the panel keeps both.
template <class Block>
inline constexpr bool kSignedPanel = std::is_same_v<Block, BlockQ8_0> && !kWideUnsigned;
// The integer offset a panel's values carry (value = u − offset) and their largest u.
template <class Block>
inline constexpr int kPanelOffset = !kHasOffset<Block> || kSignedPanel<Block> ? 0
                                    : kWideUnsigned                           ? 128
                                    : std::is_same_v<Block, BlockQ4_0>        ? 8
                                                                              : 32;
template <class Block>
inline constexpr int kPanelMax = kWideUnsigned                      ? 255
                                 : kSignedPanel<Block>              ? 128
                                 : std::is_same_v<Block, BlockQ6_K> ? 63
                                 : std::is_same_v<Block, BlockQ5_K> ? 31
                                                                    : 15;
// The accumulator's start for values offset by `offset`: −offset·Σx, from the block's bias
// −128·Σx, a multiple of 128, so its arithmetic shift by 7 is −Σx exactly (a signed division
// would round toward zero with extra steps).
inline std::int32_t offset_start(std::int32_t bias, int offset) { return (bias >> 7) * offset; }

// Q6_K with the emulated dot: each 16-value sub-block's scale weighs its runs' int16 pair sums
// in the widening vpmaddwd (dot_runs' run_weight) instead of 1, and the offset term
// −32·(scale_lo·Σx_lo + scale_hi·Σx_hi) is one more vpmaddwd, of (32·scale_lo, 32·scale_hi)
// against the activation's (−Σx_lo, −Σx_hi): one exact int32 chain per slice and token
// (|scale·dot| < 2^24 per sub-block), scaled by d·d_x once, where two chains, two conversions and
// two float scalings were. With VNNI the dot has no int16 runs: two chains, as before.
template <class Block>
inline constexpr bool kScaledRuns = std::is_same_v<Block, BlockQ6_K> && !kWideUnsigned;
struct Q6kRunScales {
  Lanes16::Int low, high;  // [16] row r's scale of values 0..15 (16..31) as an int16 pair
  Lanes16::Int offsets;    // [16] (32·scale_lo, 32·scale_hi) of row r
};
// A sub-block's run weight: row r's scale (of its 16 values) as an int16 pair.
inline Lanes16::Int q6_k_run_weight(const std::int8_t* scales) {
  const Lanes16::Int scale = Lanes16::load_s8_int(scales);
  return Lanes16::pairs16(scale, scale);
}
// The offset term's weights of a slice, (32·scale_lo, 32·scale_hi), from its two sub-blocks'
// 16 row scales.
inline Lanes16::Int q6_k_run_offsets(const std::int8_t* low_scales,
                                     const std::int8_t* high_scales) {
  using L = Lanes16;
  return L::pairs16(L::shl32<5>(L::load_s8_int(low_scales)),
                    L::shl32<5>(L::load_s8_int(high_scales)));
}
// The run weights of a slice from its two sub-blocks' 16 row scales.
inline Q6kRunScales q6_k_run_scales(const std::int8_t* low_scales, const std::int8_t* high_scales) {
  return {q6_k_run_weight(low_scales), q6_k_run_weight(high_scales),
          q6_k_run_offsets(low_scales, high_scales)};
}
// The chain's start: the slice's offset term, from its scales' `offsets` (16 lanes, or a
// tile's part of them).
template <class Int>
inline Int q6_k_scaled_start(Int offsets, const BlockQ8Act& a) {
  using L = LanesOf<Int>;
  return L::madd16(offsets, L::splat32(static_cast<std::int32_t>(a.neg_half_sums)));
}
struct NoRunScales {};

// The activation group a.qs[4k..4k+3] in every int32 lane of L (the signed operand of a panel
// dot).
template <class L = Lanes16>
inline typename L::Int broadcast_group(const BlockQ8Act& a, std::size_t k) {
  std::int32_t group;
  std::memcpy(&group, a.qs + 4 * k, 4);
  return L::splat32(group);
}

// One 32-weight slice of 16 rows of Block: values[k] lane r = row r's weights 4k..4k+3
// (unsigned, in the form above). A K-chunk of them stays in L1 (22 KiB; Q8_0 without VNNI, which
// keeps the signed weights too, 38 KiB).
template <class Block>
struct alignas(64) PanelBlock {
  Lanes16::Int values[8];
  Lanes16::Float scales;     // [16] row r's scale (Q6_K: of values 0..15; kScaledRuns: d)
  Lanes16::Float scales_hi;  // [16] Q6_K with VNNI: row r's scale of values 16..31
  Lanes16::Float mins;       // [16] Q4_K/Q5_K: row r's minimum, dmin·m_j; Q4_1: its m
  Lanes16::Int signs[kSignedPanel<Block> ? 8 : 1];  // kSignedPanel: the weights q (values |q|)
  [[no_unique_address]] std::conditional_t<kScaledRuns<Block>, Q6kRunScales, NoRunScales>
      run_scales;
};

// The high nibbles of q's bytes for a dot: with VNNI in place (q & 0xf0 = 16·nibble, one AND;
// the dot is shifted back by high_nibble_dot, exactly, as 16 divides it), else shifted down.
inline Lanes16::Int high_nibbles(Lanes16::Int q) {
  if constexpr (kWideUnsigned) return Lanes16::bit_and(q, Lanes16::splat8(0xf0));
  return Lanes16::bit_and(Lanes16::shr16<4>(q), Lanes16::splat8(0x0f));
}
inline Lanes16::Int high_nibble_dot(Lanes16::Int dot) {
  if constexpr (kWideUnsigned) return Lanes16::sar32<4>(dot);
  return dot;
}

// Bits of a Q5_K panel plane shifted down by kShift within each 16-bit lane and masked: the
// shift moves the neighbouring byte's bits only into bits the mask clears.
template <int kShift>
inline Lanes16::Int q5_k_plane_bits(const std::uint8_t (&plane)[16][4], std::uint8_t mask) {
  return Lanes16::bit_and(Lanes16::shr16<kShift>(Lanes16::load_int(plane)), Lanes16::splat8(mask));
}
// Group k (values 4k..4k+3 of 16 rows) of a Q5_K panel sub-block from its five planes
// (quant_blocks.hpp, q5_k_plane_bytes): groups 0..4 one AND each, 5..7 gathered from the planes'
// bits 5-7 (k is a constant once the callers' loops are unrolled).
inline Lanes16::Int q5_k_group(const std::uint8_t (&planes)[5][16][4], std::size_t k) {
  using L = Lanes16;
  switch (k) {
    case 5:  // top bits 0-4: plane 0's three, plane 1's low two
      return L::bit_or(q5_k_plane_bits<5>(planes[0], 0x07), q5_k_plane_bits<2>(planes[1], 0x18));
    case 6:  // top bits 5-9: plane 1's high one, plane 2's three, plane 3's low one
      return L::bit_or(
          L::bit_or(q5_k_plane_bits<7>(planes[1], 0x01), q5_k_plane_bits<4>(planes[2], 0x0e)),
          q5_k_plane_bits<1>(planes[3], 0x10));
    case 7:  // top bits 10-14: plane 3's high two, plane 4's three
      return L::bit_or(q5_k_plane_bits<6>(planes[3], 0x03), q5_k_plane_bits<3>(planes[4], 0x1c));
    default: return L::bit_and(L::load_int(planes[k]), L::splat8(0x1f));
  }
}

// Panel registers k and k + 4 from q, the 16 rows' Q4_0 (Q4_1) quant bytes 4k..4k+3: byte i of a
// row holds weight i (low nibble) and weight i + 16 (high nibble); Q4_0 values carry the panel
// offset (nibble + 120 with VNNI), Q4_1's stay nibbles.
template <class Block>
inline void q4_panel_values(Lanes16::Int q, std::size_t k, PanelBlock<Block>& p) {
  using L = Lanes16;
  const L::Int mask = L::splat8(0x0f);
  p.values[k] = L::bit_and(q, mask);
  p.values[k + 4] = L::bit_and(L::shr16<4>(q), mask);
  if constexpr (kPanelOffset<Block> == 128) {
    const L::Int to_offset_128 = L::splat8(120);
    p.values[k] = L::add8(p.values[k], to_offset_128);
    p.values[k + 4] = L::add8(p.values[k + 4], to_offset_128);
  }
}

// Group k (values 4k..4k+3 of each of 16 rows) of a Q6_K panel half's slice i, or of all four
// (q6_k_panel_quants): q[0..2] the
// 6-bit values (one AND each: bits 0-5 of the three registers), q[3] slice 3's value times 4,
// assembled in place from the registers' top bit pairs (bits 6-7 of register 0, 1, 2 become
// bits 2-3, 4-5, 6-7; the 16-bit shifts' spill from the neighbouring byte is masked off).
// Without VNNI, 4·q would saturate vpmaddubsw: q[3] is shifted down to q (its bits 0-1 are clear,
// so the 16-bit shift's spill into bits 6-7 is zero). kSlice3Times4 says which.
inline constexpr bool kSlice3Times4 = kWideUnsigned;
// Slice i's values as 4·q on every slice (bits 0-1 clear, at most 252: VNNI operands only):
// slices 0-2 their register shifted up, slice 3 as above.
inline Lanes16::Int q6_k_slice_quants_times4(const BlockQ6_Kx16::Half& half, std::size_t k,
                                             std::size_t i) {
  using L = Lanes16;
  if (i < 3) return L::bit_and(L::shl32<2>(L::load_int(half.qs[k][i])), L::splat8(0xfc));
  const L::Int r0 = L::load_int(half.qs[k][0]), r1 = L::load_int(half.qs[k][1]),
               r2 = L::load_int(half.qs[k][2]);
  const L::Int bits23_45 = L::select(L::shr16<4>(r0), L::shr16<2>(r1), L::splat8(0x30));
  return L::bit_and(L::select(bits23_45, r2, L::splat8(0xc0)), L::splat8(0xfc));
}
inline Lanes16::Int q6_k_slice_quants(const BlockQ6_Kx16::Half& half, std::size_t k,
                                      std::size_t i) {
  using L = Lanes16;
  if (i < 3) return L::bit_and(L::load_int(half.qs[k][i]), L::splat8(0x3f));
  const L::Int times4 = q6_k_slice_quants_times4(half, k, 3);
  return kSlice3Times4 ? times4 : L::shr16<2>(times4);
}
inline void q6_k_panel_quants(const BlockQ6_Kx16::Half& half, std::size_t k, Lanes16::Int (&q)[4]) {
  _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) q[i] = q6_k_slice_quants(half, k, i);
}

// acc + d_x·(dot_lo·scale_lo + dot_hi·scale_hi): a Q6_K slice's two 16-value sub-block dots (exact
// int32, or 4× that with scales a quarter) weighed by d·scale each and the activation block's
// d_x once, in this order wherever a Q6_K slice with two chains is added (the packed GEMM, the
// decodes), so a token's result does not depend on the path. One multiply fewer per slice and
// token than weighing each dot by scale·d_x.
template <class Int, class Float>
[[gnu::always_inline]] inline Float q6_k_weigh_slice(Int dot_lo, Float scale_lo, Int dot_hi,
                                                     Float scale_hi, float d_x, Float acc) {
  using L = LanesOf<Int>;
  const Float sum = L::fma(L::to_float(dot_hi), scale_hi, L::mul(L::to_float(dot_lo), scale_lo));
  return L::fma(sum, L::splat(d_x), acc);
}

// y[j][0..16) (+)= panel · x[j] for kTokens tokens over the panel's n blocks. x: token j's
// blocks at x + j·x_stride; y: token j's 16 outputs at y + j·y_stride. accumulate: add to y
// (a later K-chunk continues the sum the earlier one stored, in the same order). The rows are
// computed in parts (TileLanes: AVX2 without VNNI one half after the other), each part over
// every block.
template <std::size_t kTokens, class Block>
inline void panel_tile(const PanelBlock<Block>* panel, std::size_t n, const BlockQ8Act* x,
                       std::size_t x_stride, float* y, std::size_t y_stride, bool accumulate) {
  // Q8_0 without VNNI keeps its whole rows: its sign step (sign8 per broadcast) made halves slower.
  using L = std::conditional_t<kSignedPanel<Block>, Lanes16, TileLanes>;
  constexpr std::size_t kParts = Lanes16::lanes / L::lanes;
  // Several tokens' dot chains interleaved: a dot has a latency of several cycles
  // (docs/performance.md). AVX-512: eight (Q6_K with VNNI four: its two accumulators per token
  // would not fit the 32 registers with eight); AVX2: four, a chain's registers and a token's
  // accumulators within its 16 (without VNNI on half the rows), but two for Q6_K with VNNI and
  // Q8_0 without, which compute whole rows.
  constexpr bool kTwoChainsPerToken = std::is_same_v<Block, BlockQ6_K> && !kScaledRuns<Block>;
  constexpr std::size_t kChains =
      std::min<std::size_t>(kTokens, HLLM_ISA_LEVEL == 2 ? (kTwoChainsPerToken ? 4 : 8)
                                     : kSignedPanel<Block> || kTwoChainsPerToken ? 2
                                                                                 : 4);
  _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kParts; ++part) {
    float* const y_part = y + part * L::lanes;
    typename L::Float acc[kTokens];
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j) acc[j] =
        accumulate ? L::load(y_part + j * y_stride) : L::zero();
    for (std::size_t b = 0; b < n; ++b) {
      const PanelBlock<Block>& p = panel[b];
      const auto values = [&](std::size_t k) { return part_of<L>(p.values[k], part); };
      _Pragma("GCC unroll 2") for (std::size_t j0 = 0; j0 < kTokens; j0 += kChains) {
        const BlockQ8Act* a[kChains];
        _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) a[c] =
            &x[(j0 + c) * x_stride + b];
        if constexpr (kTwoChainsPerToken) {
          // Two scales per slice: each 16-value half has its own accumulator and offset.
          typename L::Int dot[2 * kChains];  // [half][chain]
          _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
            dot[c] = L::splat32(offset_start(a[c]->bias_lo, kPanelOffset<Block>));
            dot[kChains + c] = L::splat32(offset_start(a[c]->bias_hi, kPanelOffset<Block>));
          }
          dot_runs<kPanelMax<Block>, 4>(
              dot, [&](std::size_t k, std::size_t i, typename L::Int& u, typename L::Int& s) {
                const std::size_t half = i / kChains, c = i % kChains;
                u = values(k + 4 * half);
                s = broadcast_group<L>(*a[c], k + 4 * half);
              });
          _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) acc[j0 + c] =
              q6_k_weigh_slice(dot[c], part_of<L>(p.scales, part), dot[kChains + c],
                               part_of<L>(p.scales_hi, part), a[c]->d, acc[j0 + c]);
        } else {
          typename L::Int dot[kChains];
          _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
            if constexpr (kScaledRuns<Block>)
              dot[c] = q6_k_scaled_start(part_of<L>(p.run_scales.offsets, part), *a[c]);
            else
              dot[c] = L::splat32(offset_start(a[c]->bias, kPanelOffset<Block>));
          }
          const auto operands = [&](std::size_t k, std::size_t c, typename L::Int& u,
                                    typename L::Int& s) {
            u = values(k);
            s = broadcast_group<L>(*a[c], k);
            if constexpr (kSignedPanel<Block>) s = L::sign8(s, part_of<L>(p.signs[k], part));
          };
          if constexpr (kScaledRuns<Block>)
            dot_runs<kPanelMax<Block>, 8>(dot, operands, [&](std::size_t k0, std::size_t) {
              return part_of<L>(k0 < 4 ? p.run_scales.low : p.run_scales.high, part);
            });
          else
            dot_runs<kPanelMax<Block>, 8>(dot, operands);
          _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
            const typename L::Float d = L::splat(a[c]->d);
            acc[j0 + c] =
                L::fma(L::to_float(dot[c]), L::mul(part_of<L>(p.scales, part), d), acc[j0 + c]);
            if constexpr (std::is_same_v<Block, BlockQ4_1>)  // + m · d_x·Σxq (decode_group16's)
              acc[j0 + c] = L::fma(part_of<L>(p.mins, part), L::splat(a[c]->d_sum), acc[j0 + c]);
            else if constexpr (kHasMinimum<Block>)  // − dmin·m_j · d_x·Σxq
              acc[j0 + c] = L::fnma(part_of<L>(p.mins, part), L::splat(a[c]->d_sum), acc[j0 + c]);
          }
        }
      }
    }
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < kTokens; ++j)
        L::store(y_part + j * y_stride, acc[j]);
  }
}

// Tokens per tile: each token's 16 float accumulators take one of AVX-512's 32 registers but
// two of AVX2's 16 (one per tile part without VNNI).
inline constexpr std::size_t kPanelTileTokens = HLLM_ISA_LEVEL == 2 ? 8 : 4;

// Tokens [0, n_tokens) of one panel, kPanelTileTokens at a time, the tail in 4/2/1 pieces.
template <class Block>
inline void panel_tokens(const PanelBlock<Block>* panel, std::size_t n, const BlockQ8Act* x,
                         std::size_t x_stride, std::size_t n_tokens, float* y, std::size_t y_stride,
                         bool accumulate) {
  std::size_t t = 0;
  if constexpr (kPanelTileTokens == 8)
    for (; t + 8 <= n_tokens; t += 8)
      panel_tile<8, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                           accumulate);
  for (; n_tokens - t >= 4; t += 4)
    panel_tile<4, Block>(panel, n, x + t * x_stride, x_stride, y + t * y_stride, y_stride,
                         accumulate);
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
// panel's, so packing is plain loads (Q8_0 holds q + 128, kept with VNNI and flipped back to q
// otherwise; Q4_0 nibbles are split and offset as above, Q4_1's split, Q4_K's by slice, Q6_K's
// values unpacked by q6_k_panel_quants), where the file's and the 8-row layouts take a gather per
// register.
template <class Block>
struct Interleaved16Panels {
  const Interleaved16<Block>* w;  // r must be a multiple of 16
  std::size_t units;              // per row
  void pack(std::size_t r, std::size_t b0, std::size_t n, PanelBlock<Block>* out) const {
    using L = Lanes16;
    const Interleaved16<Block>* group = w + (r / 16) * units;
    for (std::size_t b = b0; b < b0 + n; ++b) {
      PanelBlock<Block>& p = out[b - b0];
      if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        // Slice j of super-block b / 8: slice j % 4 of half j / 4, values offset by the panel's.
        const BlockQ6_Kx16& unit = group[b / 8];
        const std::size_t j = b % 8, i = j % 4;
        const BlockQ6_Kx16::Half& half = unit.halves[j / 4];
        const L::Float d = L::load(unit.d);
        if constexpr (kScaledRuns<Block>) {
          p.scales = d;
          p.run_scales = q6_k_run_scales(half.scales[2 * i], half.scales[2 * i + 1]);
        } else {
          p.scales = L::mul(d, L::load_s8(half.scales[2 * i]));
          p.scales_hi = L::mul(d, L::load_s8(half.scales[2 * i + 1]));
        }
        _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) {
          L::Int q[4];
          q6_k_panel_quants(half, k, q);
          // 4·q has bits 0-1 clear, so the 16-bit shift's spill into bits 6-7 is zero.
          const L::Int value = i == 3 && kSlice3Times4 ? L::shr16<2>(q[3]) : q[i];
          p.values[k] = kPanelOffset<Block> == 128 ? L::add8(value, L::splat8(96)) : value;
        }
      } else if constexpr (std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>) {
        // Slice j of super-block b / 8: the low (j even) or high nibbles of pair j / 2 (Q5_K:
        // sub-block j's planes).
        const Interleaved16<Block>& unit = group[b / 8];
        const std::size_t j = b % 8;
        const auto& pair = unit.pairs[j / 2];
        p.scales = L::mul(L::load_u8(pair.scales[j % 2]), L::load(unit.d));
        p.mins = L::mul(L::load_u8(pair.mins[j % 2]), L::load(unit.dmin));
        _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) {
          if constexpr (std::is_same_v<Block, BlockQ5_K>)
            p.values[k] = q5_k_group(pair.planes[j % 2], k);
          else
            p.values[k] = L::bit_and(
                L::shr32(L::load_int(pair.qs[k]), static_cast<int>(4 * (j & 1))), L::splat8(0x0f));
        }
      } else {
        const Interleaved16<Block>& unit = group[b / 2];
        const std::size_t h = b % 2;
        p.scales = L::load(unit.d[h]);
        if constexpr (std::is_same_v<Block, BlockQ4_1>) p.mins = L::load(unit.m[h]);
        if constexpr (!std::is_same_v<Block, BlockQ8_0>) {
          _Pragma("GCC unroll 4") for (std::size_t k = 0; k < 4; ++k)
              q4_panel_values<Block>(L::load_int(unit.qs[h][k]), k, p);
        } else if constexpr (kSignedPanel<Block>) {
          _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) {
            p.signs[k] = L::bit_xor(L::load_int(unit.qs[h][k]), L::splat8(0x80));
            p.values[k] = L::abs8(p.signs[k]);
          }
        } else {
          _Pragma("GCC unroll 8") for (std::size_t k = 0; k < 8; ++k) p.values[k] =
              L::load_int(unit.qs[h][k]);
        }
      }
    }
    // Ask for the chunk after this one while this one's tokens run: the units that follow its
    // units in memory (the same group's next K-chunk, or the next group's first). A small batch's
    // few tokens per chunk gave the hardware prefetcher too little time: with the request 4 and
    // 8 tokens through a 32000×2048 K-quant matrix from DRAM ran 1.3-1.4× faster on a Zen 5; a
    // prompt's chunk of 256 tokens ran the same (docs/performance.md, small batches).
    constexpr std::size_t kBlocksPerUnit = Interleaved16<Block>::kValues / 32;
    const std::size_t first = b0 / kBlocksPerUnit, end = (b0 + n) / kBlocksPerUnit;
    const std::size_t bytes = (end - first) * sizeof(Interleaved16<Block>);
    prefetch_stream_ahead(group + first, bytes, bytes);
  }
};

// Rows [row_begin, row_begin + 16·groups) of y: [n_tokens][rows] for weights w (a panel
// source) of `blocks` 32-value slices per row and x: [n_tokens][blocks] activation blocks.
template <class Block, class Panels>
inline void gemm_packed(const Panels& w, std::size_t rows, std::size_t blocks, const BlockQ8Act* x,
                        std::size_t n_tokens, float* y, std::size_t row_begin, std::size_t groups) {
  static_assert(kPanelBlocks % kSlicesPerBlock<Block> == 0, "K-chunks hold whole blocks");
  PanelBlock<Block> panel[kPanelBlocks];
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

#endif  // HLLM_ISA_LEVEL >= 1
