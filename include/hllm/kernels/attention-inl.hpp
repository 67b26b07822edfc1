// Attention of query heads over a KV cache's rows (one head, or the query heads sharing one KV
// head), with an online softmax, written once against VecF32 and compiled per ISA (see
// isa_kernels.hpp) after elementwise-inl.hpp. No include guard, by design. The reference twins are
// in kernels/reference.hpp.

// Where row j of an attention call's keys (or values) is. The kernels below are templates over
// this, so one body serves a KVCache's consecutive rows and a paged cache's blocks with the
// same arithmetic in the same order: only the addresses differ.
template <class KV>
struct ConsecutiveRows {
  using element_type = KV;
  const KV* base;            // [n][row_elements]
  std::size_t row_elements;  // kv_row_elements<KV>(head_dim)
  const KV* operator()(std::size_t j) const noexcept { return base + j * row_elements; }
};
template <class KV>
struct BlockRows {
  using element_type = KV;
  explicit BlockRows(const KVBlockRows& r) noexcept
      : base(static_cast<const KV*>(r.base)),
        blocks(r.blocks),
        block_elements(r.block_elements),
        offset(r.offset),
        slot_mask(r.block_tokens - 1),
        row_elements(r.row_elements),
        first(r.first) {
    while ((std::size_t{1} << block_shift) < r.block_tokens) ++block_shift;
  }
  const KV* operator()(std::size_t j) const noexcept {
    const std::size_t position = first + j;
    return base + std::size_t{blocks[position >> block_shift]} * block_elements + offset +
           (position & slot_mask) * row_elements;
  }
  const KV* base;
  const std::uint32_t* blocks;
  std::size_t block_elements, offset, slot_mask, row_elements, first;
  std::size_t block_shift = 0;
};

// scores[j] = e^(scores[j] − max) for j < count (count <= 32).
inline void exp_shifted(float* scores, std::size_t count, float max) {
  using V = VecF32;
  const typename V::Reg shift = V::set1(max);
  for (std::size_t j = 0; j < count; j += V::lanes) {
    const std::size_t n = std::min(V::lanes, count - j);
    const typename V::Reg e = V::exp(V::add(V::load(scores + j, n), V::mul(shift, V::set1(-1.0f))));
    V::store(scores + j, e, n);
  }
}

// A cache block's f16 scale as a float, exactly to_float's value: F16C's one instruction in the
// vector builds (the generic conversion, once out of line, took 7% of an AVX2 attention step over
// a Q8_0 cache).
inline float block_scale(f16 d) {
#if HLLM_ISA_LEVEL >= 1
  return _cvtsh_ss(d.bits);
#else
  return to_float(d);
#endif
}

// Values [d, d + lanes) (or [d, d + n)) of a cached row as floats, equal to kv_value's: for the
// block types the same product d·q rounded once (Q4_0: d·(q − 8); FP8: the E4M3 value times 2^-8,
// exact in f16, times 256·d, exact in float). A lane group never straddles a block: lanes divide
// 32 and rows are whole blocks, which also means the tail overloads are never reached for block
// rows (they are for the templates' sake, and read through kv_value).
template <class KV>
inline VecF32::Reg load_kv(const KV* row, std::size_t d) {
  return VecF32::load(row + d);
}
template <class KV>
inline VecF32::Reg load_kv(const KV* row, std::size_t d, std::size_t n) {
  return VecF32::load(row + d, n);
}
inline VecF32::Reg load_kv(const BlockQ8_0* row, std::size_t d) {
  const BlockQ8_0& block = row[d / kQK8_0];
  return VecF32::mul(VecF32::set1(block_scale(block.d)), VecF32::load(block.qs + d % kQK8_0));
}
inline VecF32::Reg load_kv(const BlockQ8_0* row, std::size_t d, std::size_t n) {
  const BlockQ8_0& block = row[d / kQK8_0];
  return VecF32::mul(VecF32::set1(block_scale(block.d)), VecF32::load(block.qs + d % kQK8_0, n));
}
// Values j..j + lanes of a block are nibbles of qs[j % 16 ..]: the low ones for j < 16.
inline VecF32::Reg load_kv(const BlockQ4_0* row, std::size_t d) {
  const BlockQ4_0& block = row[d / kQK4_0];
  const std::size_t j = d % kQK4_0;
  const VecF32::Reg q = VecF32::load_nibbles(block.qs + j % (kQK4_0 / 2), j < kQK4_0 / 2 ? 0 : 4);
  return VecF32::mul(VecF32::set1(block_scale(block.d)), VecF32::sub(q, VecF32::set1(8.0f)));
}
inline VecF32::Reg load_kv(const BlockFP8* row, std::size_t d) {
  const BlockFP8& block = row[d / kQKFP8];
  return VecF32::mul(VecF32::set1(block_scale(block.d) * 256.0f),
                     VecF32::load_e4m3(block.qs + d % kQKFP8));
}
template <class Block>
requires std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockFP8>
inline VecF32::Reg load_kv(const Block* row, std::size_t d, std::size_t n) {
  float values[VecF32::lanes] = {};
  for (std::size_t i = 0; i < n; ++i) values[i] = kv_value(row, d + i);
  return VecF32::load(values, n);
}

// The dot products of q with NK key rows, each one FMA chain over the head's dimensions and a lane
// sum (the same arithmetic for a key whatever NK: the chains are independent, interleaved so
// that they run at the FMA units' rate rather than one FMA latency per step).
// q: [head_dim], rows: NK row addresses, dots: [NK]
template <std::size_t NK, class KV>
inline void dot_keys(const float* q, const KV* const* rows, std::size_t head_dim, float* dots) {
  using V = VecF32;
  typename V::Reg acc[NK];
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < NK; ++j) acc[j] = V::zero();
  std::size_t d = 0;
  for (; d + V::lanes <= head_dim; d += V::lanes) {
    const typename V::Reg qd = V::load(q + d);
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < NK; ++j) acc[j] =
        V::fma(qd, load_kv(rows[j], d), acc[j]);
  }
  if (d < head_dim) {
    const std::size_t n = head_dim - d;
    const typename V::Reg qd = V::load(q + d, n);
    _Pragma("GCC unroll 8") for (std::size_t j = 0; j < NK; ++j) acc[j] =
        V::fma(qd, load_kv(rows[j], d, n), acc[j]);
  }
  _Pragma("GCC unroll 8") for (std::size_t j = 0; j < NK; ++j) dots[j] = V::sum(acc[j]);
}

// out[d, d + NV·lanes) = out[..]·correction + Σ_j p[j]·v_j[..], the slice held in registers
// across the keys: per value one multiply, then one FMA per key in key order.
// out: [head_dim], p: [count], rows: count row addresses
template <std::size_t NV, class KV>
inline void accumulate_slice(float* out, std::size_t d, float correction, const float* p,
                             const KV* const* rows, std::size_t count) {
  using V = VecF32;
  typename V::Reg o[NV];
  const typename V::Reg c = V::set1(correction);
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < NV; ++i) o[i] =
      V::mul(V::load(out + d + i * V::lanes), c);
  for (std::size_t j = 0; j < count; ++j) {
    const typename V::Reg pj = V::set1(p[j]);
    _Pragma("GCC unroll 8") for (std::size_t i = 0; i < NV; ++i) o[i] =
        V::fma(pj, load_kv(rows[j], d + i * V::lanes), o[i]);
  }
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < NV; ++i)
      V::store(out + d + i * V::lanes, o[i]);
}

// One query head against n_keys keys/values with an online softmax, tile by tile, as
// reference::attend_head: a tile's scores 8 keys at a time (dot_keys), its values 8 vectors of
// dimensions at a time kept in registers (accumulate_slice). q: [head_dim], keys, values: n_keys
// rows of head_dim values (Rows: ConsecutiveRows or BlockRows), out: [head_dim]
template <class Rows>
inline void attend_head(const float* q, const Rows& keys, const Rows& values, std::size_t n_keys,
                        std::size_t head_dim, AttentionScoring scoring, float* out) {
  using V = VecF32;
  using KV = typename Rows::element_type;
  constexpr std::size_t kTile = 32, kKeysAtOnce = 8, kSliceVectors = 8;
  float scores[kTile];
  const KV* key_rows[kTile];
  const KV* value_rows[kTile];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (std::size_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (std::size_t start = 0; start < n_keys; start += kTile) {
    const std::size_t count = std::min(kTile, n_keys - start);
    for (std::size_t j = 0; j < count; ++j) {
      key_rows[j] = keys(start + j);
      value_rows[j] = values(start + j);
    }
    std::size_t j = 0;
    for (; j + kKeysAtOnce <= count; j += kKeysAtOnce)
      dot_keys<kKeysAtOnce>(q, key_rows + j, head_dim, scores + j);
    for (; j < count; ++j) dot_keys<1>(q, key_rows + j, head_dim, scores + j);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (j = 0; j < count; ++j) {
      scores[j] = scoring(scores[j]);
      tile_max = std::max(tile_max, scores[j]);
    }
    const float new_max = std::max(running_max, tile_max);
    const float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    exp_shifted(scores, count, new_max);
    for (j = 0; j < count; ++j) running_sum += scores[j];
    std::size_t d = 0;
    for (; d + kSliceVectors * V::lanes <= head_dim; d += kSliceVectors * V::lanes)
      accumulate_slice<kSliceVectors>(out, d, correction, scores, value_rows, count);
    for (; d + V::lanes <= head_dim; d += V::lanes)
      accumulate_slice<1>(out, d, correction, scores, value_rows, count);
    if (d < head_dim) {  // the last values of a row narrower than a vector's multiple
      const std::size_t n = head_dim - d;
      typename V::Reg o = V::mul(V::load(out + d, n), V::set1(correction));
      for (j = 0; j < count; ++j) o = V::fma(V::set1(scores[j]), load_kv(value_rows[j], d, n), o);
      V::store(out + d, o, n);
    }
    running_max = new_max;
  }
  if (running_sum > 0.0f) {
    const float inv = 1.0f / running_sum;
    for (std::size_t d = 0; d < head_dim; ++d) out[d] *= inv;
  }
}

#if HLLM_ISA_LEVEL >= 1
// The per-ISA steps of the tiled kernel below, on VecF32's registers (8 or 16 lanes). The lane
// sums and the dots that end in them are always inlined: out of line (GCC's choice varied with
// the group sizes instantiated), the AVX-512 attention ran 1.5-1.7× slower and AVX2's over a
// Q8_0 cache 1.7× (docs/performance.md, "Attention: any group in the tile").
#if HLLM_ISA_LEVEL == 2
// The sums of 16 accumulators' 16 lanes, in one vector: lane 4q + m holds the sum of a[4m + q].
// Every accumulator's lanes are added in the same tree (pairs i, i + 8, then i, i + 4, i, i + 2,
// i, i + 1) whatever its slot, so a sum does not depend on what shares the vector with it.
[[gnu::always_inline]] inline __m512 sum_lanes16(const __m512 a[16]) {
  __m512 b[8], c[4], e[2];
  _Pragma("GCC unroll 8") for (std::size_t i = 0; i < 8; ++i) b[i] =
      _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                    _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) c[i] =
      _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                    _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
  _Pragma("GCC unroll 2") for (std::size_t i = 0; i < 2; ++i) e[i] =
      _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                    _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
}
// Lane i: the sum of a[i]'s lanes (sum_lanes16 over the accumulators in its slot order).
[[gnu::always_inline]] inline __m512 sum_each(const __m512 a[16]) {
  __m512 slots[16];  // sum_lanes16 puts slot 4m + q's sum in lane 4q + m
  _Pragma("GCC unroll 16") for (std::size_t i = 0; i < 16; ++i) slots[i] = a[(i % 4) * 4 + i / 4];
  return sum_lanes16(slots);
}
// Each lane's maximum over the lanes congruent to it modulo G (G a power of two <= 16).
template <std::size_t G>
inline __m512 max_congruent_lanes(__m512 m) {
  if constexpr (G <= 8) m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0x4E));
  if constexpr (G <= 4) m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0xB1));
  if constexpr (G <= 2) m = _mm512_max_ps(m, _mm512_shuffle_ps(m, m, 0x4E));
  if constexpr (G <= 1) m = _mm512_max_ps(m, _mm512_shuffle_ps(m, m, 0xB1));
  return m;
}
// x where `valid` holds, else `otherwise`.
inline __m512 select_lanes(__mmask16 valid, __m512 x, __m512 otherwise) {
  return _mm512_mask_mov_ps(otherwise, valid, x);
}
#else
// Lane i: the sum of a[i]'s 8 lanes, in the same tree for every i ((0+1)+(2+3))+((4+5)+(6+7)).
[[gnu::always_inline]] inline __m256 sum_each(const __m256 a[8]) {
  const __m256 pairs01 = _mm256_hadd_ps(a[0], a[1]), pairs23 = _mm256_hadd_ps(a[2], a[3]),
               pairs45 = _mm256_hadd_ps(a[4], a[5]), pairs67 = _mm256_hadd_ps(a[6], a[7]);
  // Lane i of quads0123 (i < 4) is a[i]'s lanes 0..3 summed, lane i + 4 its lanes 4..7; the same
  // for a[4..8) in quads4567.
  const __m256 quads0123 = _mm256_hadd_ps(pairs01, pairs23),
               quads4567 = _mm256_hadd_ps(pairs45, pairs67);
  return _mm256_add_ps(_mm256_permute2f128_ps(quads0123, quads4567, 0x20),
                       _mm256_permute2f128_ps(quads0123, quads4567, 0x31));
}
// Each lane's maximum over the lanes congruent to it modulo G (G a power of two <= 8).
template <std::size_t G>
inline __m256 max_congruent_lanes(__m256 m) {
  if constexpr (G <= 4) m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 0x01));
  if constexpr (G <= 2) m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
  if constexpr (G <= 1) m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
  return m;
}
inline __m256 select_lanes(__m256i valid, __m256 x, __m256 otherwise) {
  return _mm256_blendv_ps(otherwise, x, _mm256_castsi256_ps(valid));
}
#endif

// The dot products of H query heads with lanes / H key rows: lane j·H + g is head g's with row
// j. Each product is one FMA chain over the head's dimensions then sum_each, the same
// arithmetic whatever H. Always inlined (above). q_rows: H query rows of head_dim,
// rows: lanes / H row addresses.
template <std::size_t H, class KV>
[[gnu::always_inline]] inline VecF32::Reg dot_heads_rows(const float* const* q_rows,
                                                         const KV* const* rows,
                                                         std::size_t head_dim) {
  using V = VecF32;
  constexpr std::size_t kRows = V::lanes / H;
  V::Reg acc[V::lanes];  // [row][head]
  _Pragma("GCC unroll 16") for (std::size_t i = 0; i < V::lanes; ++i) acc[i] = V::zero();
  for (std::size_t d = 0; d < head_dim; d += V::lanes) {
    V::Reg qd[H];
    _Pragma("GCC unroll 8") for (std::size_t g = 0; g < H; ++g) qd[g] = V::load(q_rows[g] + d);
    _Pragma("GCC unroll 16") for (std::size_t j = 0; j < kRows; ++j) {
      const V::Reg k = load_kv(rows[j], d);
      _Pragma("GCC unroll 8") for (std::size_t g = 0; g < H; ++g) acc[j * H + g] =
          V::fma(qd[g], k, acc[j * H + g]);
    }
  }
  return sum_each(acc);
}

// out[g][d .. d + lanes) = out[g][..]·correction[g] + Σ_j p[j·P + g]·v_j[..] for H heads g: each
// head's accumulator is one FMA chain over the keys in order, whatever H.
// out: [H][head_dim] (row stride head_dim), correction: [H], p: [count][P] at the first head.
template <std::size_t H, std::size_t P, class KV>
[[gnu::always_inline]] inline void accumulate_values(float* out, std::size_t head_dim,
                                                     std::size_t d, const float* correction,
                                                     const float* p, const KV* const* value_rows,
                                                     std::size_t count) {
  using V = VecF32;
  V::Reg o[H];
  _Pragma("GCC unroll 8") for (std::size_t g = 0; g < H; ++g) o[g] =
      V::mul(V::load(out + g * head_dim + d), V::set1(correction[g]));
  for (std::size_t j = 0; j < count; ++j) {
    const V::Reg v = load_kv(value_rows[j], d);
    _Pragma("GCC unroll 8") for (std::size_t g = 0; g < H; ++g) o[g] =
        V::fma(V::set1(p[j * P + g]), v, o[g]);
  }
  _Pragma("GCC unroll 8") for (std::size_t g = 0; g < H; ++g)
      V::store(out + g * head_dim + d, o[g]);
}
// The heads one pass of a tile of P lanes of heads covers, the dot's and the value pass's: up to
// 8, the accumulators that stay in registers.
template <std::size_t P>
inline constexpr std::size_t kHeadsPerPass = P < 8 ? P : 8;

// accumulate_values over every vector of a row's dimensions, for Heads heads.
template <std::size_t Heads, std::size_t P, class KV>
inline void accumulate_row_values(float* out, std::size_t head_dim, const float* correction,
                                  const float* p, const KV* const* value_rows, std::size_t count) {
  for (std::size_t d = 0; d < head_dim; d += VecF32::lanes)
    accumulate_values<Heads, P>(out, head_dim, d, correction, p, value_rows, count);
}
// The same for `heads` heads, 1 to min(P, 8), known at run time: the tile is compiled once per
// padded width P and only its value pass once per real head count (one instance per group size
// more than doubled the AVX-512 kernels' compile time).
template <std::size_t P, class KV>
inline void accumulate_tile_values(std::size_t heads, float* out, std::size_t head_dim,
                                   const float* correction, const float* p,
                                   const KV* const* value_rows, std::size_t count) {
  [&]<std::size_t... HeadsLess1>(std::index_sequence<HeadsLess1...>) {
    ((heads == HeadsLess1 + 1 ? accumulate_row_values<HeadsLess1 + 1, P>(out, head_dim, correction,
                                                                         p, value_rows, count)
                              : void()),
     ...);
  }
  (std::make_index_sequence<kHeadsPerPass<P>>());
}

// Asks for rows [first, end) in L1, every line of each (row_bytes). The tiled kernel
// asks for the next tile's keys as it starts a tile: its dot reads a few rows at a time (4 with
// SmolLM2's padded 3 heads, 2 with 8), too few misses in flight where a decode's cache comes
// from L3 or memory. With it SmolLM2-135M decoded at 2048 tokens of context 1.3-1.4× faster on
// Zen 5 (docs/performance.md, "Attention: any group in the tile"); the values need none, the
// value pass reading all of a tile's rows for each vector of dimensions.
template <class Rows>
inline void prefetch_rows(const Rows& rows, std::size_t first, std::size_t end,
                          std::size_t row_bytes) {
  for (std::size_t j = first; j < end; ++j) {
    const char* row = reinterpret_cast<const char*>(rows(j));
    for (std::size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b, 0, 3);
  }
}

// G = group query heads that share one KV head (GQA, or latent attention's 16), against the same
// n_keys keys and values, one key per vector lane a tile (16 with AVX-512, 8 on AVX2): each key row
// is read once for up to H = min(P, 8) heads and each query row once for lanes / H keys, so the
// scores are FMAs of full vectors with one lane sum per (key, head) at the end, and no
// transposes. The heads are padded to P, the power of two at or above G (SmolLM2's 3 to 4,
// Qwen2.5-0.5B's 7 to 8): a padded head repeats the last query row and its lanes are never read.
// A tile's scores sit in memory as [key][P heads], which puts head g in the lanes congruent to g
// modulo P, so the softmax's maxima, exponentials and rescale factors run on whole vectors for
// every head at once. The value pass keeps up to 8 accumulators per vector of dimensions in
// registers, for the G real heads only. Same online softmax as attend_head; a head's arithmetic
// does not depend on G (a (key, head) dot is one lane's chain, sums over keys run in key order),
// so splitting a group changes no bit. q: [G][head_dim], keys, values: n_keys rows,
// out: [G][head_dim]; G <= lanes, head_dim a multiple of the lanes (any width: nothing is staged
// per row). Compiled once per padded width P (G at run time).
template <std::size_t P, class Rows>
inline void attend_group_tiles(const float* q, const Rows& keys, const Rows& values,
                               std::size_t n_keys, std::size_t head_dim, std::size_t group,
                               AttentionScoring scoring, float* out) {
  using V = VecF32;
  constexpr std::size_t kKeys = V::lanes, H = kHeadsPerPass<P>, kUnitRows = kKeys / H;
  static_assert(P <= V::lanes, "a tile holds one lane per head");
  using KV = typename Rows::element_type;
  alignas(64) float scores[kKeys * P];  // [key][head], then the probabilities
  alignas(64) float correction[V::lanes];
  const std::size_t row_bytes = kv_row_elements<KV>(head_dim) * sizeof(KV);
  const float* q_rows[P];  // [head]: heads past the group repeat its last row
  for (std::size_t g = 0; g < P; ++g) q_rows[g] = q + std::min(g, group - 1) * head_dim;
  const V::Reg minus_infinity = V::set1(-std::numeric_limits<float>::infinity());
  V::Reg running_max = minus_infinity;  // lane l: head l % P
  V::Reg running_sum = V::zero();       // lane g < group
  std::fill(out, out + group * head_dim, 0.0f);
  for (std::size_t start = 0; start < n_keys; start += kKeys) {
    const std::size_t count = std::min(kKeys, n_keys - start);
    // The tile's row addresses, once (a paged cache's cost a block-table lookup each); rows past
    // the end repeat the last one, their scores masked below.
    const KV* key_rows[kKeys];
    const KV* value_rows[kKeys];
    for (std::size_t j = 0; j < kKeys; ++j) {
      key_rows[j] = keys(start + std::min(j, count - 1));
      value_rows[j] = values(start + std::min(j, count - 1));
    }
    prefetch_rows(keys, start + kKeys, std::min(n_keys, start + 2 * kKeys), row_bytes);
    // Scores, one (key, head) pair a lane: H heads of lanes / H keys a vector.
    for (std::size_t g0 = 0; g0 < P; g0 += H)
      for (std::size_t j0 = 0; j0 < kKeys; j0 += kUnitRows) {
        const V::Reg dots = dot_heads_rows<H>(q_rows + g0, key_rows + j0, head_dim);
        if constexpr (H == P) {
          V::store(scores + j0 * P, dots);
        } else {  // AVX-512's 16 lanes of heads: 2 keys × 8 heads, each key's 8 lanes to its row
#if HLLM_ISA_LEVEL == 2
          _mm512_mask_storeu_ps(scores + j0 * P + g0, 0x00FF, dots);
          _mm512_mask_storeu_ps(scores + (j0 + 1) * P + g0 - 8, 0xFF00, dots);
#endif
        }
      }
    // Softmax over the tile, [key][head] vectors: flat entry f is key f / P, head f % P, valid
    // below count · P.
    V::Reg tile_max = minus_infinity;
    V::Reg scaled[P];
    _Pragma("GCC unroll 16") for (std::size_t v = 0; v < P; ++v) {
      V::Reg x = V::mul(V::load(scores + V::lanes * v), V::set1(scoring.scale));
      if (scoring.capped()) x = soft_capped(x, V::set1(scoring.softcap));
      const std::size_t valid =
          count * P > V::lanes * v ? std::min(V::lanes, count * P - V::lanes * v) : 0;
      scaled[v] = select_lanes(V::mask(valid), x, minus_infinity);
      tile_max = V::max(tile_max, scaled[v]);
    }
    const V::Reg new_max = V::max(running_max, max_congruent_lanes<P>(tile_max));
    const V::Reg rescale = V::exp(V::sub(running_max, new_max));
    V::store(correction, rescale);
    running_max = new_max;
    // (A masked lane's value is never read: the loops below stop at count.)
    _Pragma("GCC unroll 16") for (std::size_t v = 0; v < P; ++v)
        V::store(scores + V::lanes * v, V::exp(V::sub(scaled[v], new_max)));
    // Each head's tile sum in key order (lanes g < group), then the running sums rescaled.
    V::Reg tile_sum = V::zero();
    for (std::size_t j = 0; j < count; ++j)
      tile_sum = V::add(tile_sum, V::load(scores + j * P, group));
    running_sum = V::fma(running_sum, rescale, tile_sum);
    // out[g] = out[g]·correction[g] + Σ_j p[j][g]·v_j for the G real heads, up to 8 by one
    // vector of dimensions at a time (two vectors per broadcast probability measured slower on
    // Zen 4).
    for (std::size_t g0 = 0; g0 < group; g0 += H)
      accumulate_tile_values<P>(std::min(H, group - g0), out + g0 * head_dim, head_dim,
                                correction + g0, scores + g0, value_rows, count);
  }
  alignas(64) float sums[V::lanes];
  V::store(sums, running_sum);
  for (std::size_t g = 0; g < group; ++g)
    if (sums[g] > 0.0f) {
      const float inv = 1.0f / sums[g];
      for (std::size_t d = 0; d < head_dim; ++d) out[g * head_dim + d] *= inv;
    }
}

// The tiled kernel's instances by padded width: entry i runs tiles of 2^i lanes of heads.
template <class Rows, std::size_t... Log2P>
constexpr auto attend_group_tiles_by_width(std::index_sequence<Log2P...>) {
  using Fn = void (*)(const float*, const Rows&, const Rows&, std::size_t, std::size_t, std::size_t,
                      AttentionScoring, float*);
  return std::array<Fn, sizeof...(Log2P)>{&attend_group_tiles<std::size_t{1} << Log2P, Rows>...};
}
#endif

// `group` query heads sharing one KV head: q, out: [group][head_dim], keys, values: n_keys
// rows. The tiled kernel above on the vector ISAs where rows are whole vectors, else one head at
// a time.
template <class Rows>
inline void attend_group(const float* q, const Rows& keys, const Rows& values, std::size_t n_keys,
                         std::size_t head_dim, std::size_t group, AttentionScoring scoring,
                         float* out) {
#if HLLM_ISA_LEVEL >= 1
  constexpr std::size_t kLanes = VecF32::lanes;
  if (head_dim % kLanes == 0) {
    static constexpr auto by_width =
        attend_group_tiles_by_width<Rows>(std::make_index_sequence<std::bit_width(kLanes)>());
    // A group wider than the vector (16 heads on AVX2's 8 lanes, multi-query's 32 or 71) as
    // tiles of up to kLanes heads: a head's arithmetic is the same in any.
    for (std::size_t first = 0; first < group; first += kLanes) {
      const std::size_t heads = std::min(kLanes, group - first);
      by_width[std::bit_width(heads - 1)](q + first * head_dim, keys, values, n_keys, head_dim,
                                          heads, scoring, out + first * head_dim);
    }
    return;
  }
#endif
  for (std::size_t g = 0; g < group; ++g)
    attend_head(q + g * head_dim, keys, values, n_keys, head_dim, scoring, out + g * head_dim);
}

// The table's entries: the cache's element type erased (keys and values are KV rows).
template <class KV>
inline void attend_group_rows(const float* q, const void* k, const void* v, std::size_t n,
                              std::size_t d, std::size_t group, AttentionScoring scoring,
                              float* out) {
  const ConsecutiveRows<KV> keys{static_cast<const KV*>(k), kv_row_elements<KV>(d)};
  const ConsecutiveRows<KV> values{static_cast<const KV*>(v), kv_row_elements<KV>(d)};
  attend_group(q, keys, values, n, d, group, scoring, out);
}
template <class KV>
inline void attend_head_rows(const float* q, const void* k, const void* v, std::size_t n,
                             std::size_t d, AttentionScoring scoring, float* out) {
  const ConsecutiveRows<KV> keys{static_cast<const KV*>(k), kv_row_elements<KV>(d)};
  const ConsecutiveRows<KV> values{static_cast<const KV*>(v), kv_row_elements<KV>(d)};
  attend_head(q, keys, values, n, d, scoring, out);
}
template <class KV>
inline void attend_group_paged(const float* q, const KVBlockRows& k, const KVBlockRows& v,
                               std::size_t n, std::size_t d, std::size_t group,
                               AttentionScoring scoring, float* out) {
  attend_group(q, BlockRows<KV>(k), BlockRows<KV>(v), n, d, group, scoring, out);
}
