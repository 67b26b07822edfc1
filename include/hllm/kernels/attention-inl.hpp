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
  return VecF32::mul(VecF32::set1(to_float(block.d)), VecF32::load(block.qs + d % kQK8_0));
}
inline VecF32::Reg load_kv(const BlockQ8_0* row, std::size_t d, std::size_t n) {
  const BlockQ8_0& block = row[d / kQK8_0];
  return VecF32::mul(VecF32::set1(to_float(block.d)), VecF32::load(block.qs + d % kQK8_0, n));
}
// Values j..j + lanes of a block are nibbles of qs[j % 16 ..]: the low ones for j < 16.
inline VecF32::Reg load_kv(const BlockQ4_0* row, std::size_t d) {
  const BlockQ4_0& block = row[d / kQK4_0];
  const std::size_t j = d % kQK4_0;
  const VecF32::Reg q = VecF32::load_nibbles(block.qs + j % (kQK4_0 / 2), j < kQK4_0 / 2 ? 0 : 4);
  return VecF32::mul(VecF32::set1(to_float(block.d)), VecF32::sub(q, VecF32::set1(8.0f)));
}
inline VecF32::Reg load_kv(const BlockFP8* row, std::size_t d) {
  const BlockFP8& block = row[d / kQKFP8];
  return VecF32::mul(VecF32::set1(to_float(block.d) * 256.0f),
                     VecF32::load_e4m3(block.qs + d % kQKFP8));
}
template <class Block>
requires std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockFP8>
inline VecF32::Reg load_kv(const Block* row, std::size_t d, std::size_t n) {
  float values[VecF32::lanes] = {};
  for (std::size_t i = 0; i < n; ++i) values[i] = kv_value(row, d + i);
  return VecF32::load(values, n);
}

template <class KV>
inline float dot_head(const float* q, const KV* k, std::size_t head_dim) {
  using V = VecF32;
  typename V::Reg acc = V::zero();
  std::size_t d = 0;
  for (; d + V::lanes <= head_dim; d += V::lanes) acc = V::fma(V::load(q + d), load_kv(k, d), acc);
  if (d < head_dim) acc = V::fma(V::load(q + d, head_dim - d), load_kv(k, d, head_dim - d), acc);
  return V::sum(acc);
}

// out = out * scale + p * v.   out, v: [head_dim]
template <class KV>
inline void scale_add_head(float* out, float scale, float p, const KV* v, std::size_t head_dim) {
  using V = VecF32;
  const typename V::Reg s = V::set1(scale), pv = V::set1(p);
  std::size_t d = 0;
  for (; d + V::lanes <= head_dim; d += V::lanes)
    V::store(out + d, V::fma(pv, load_kv(v, d), V::mul(V::load(out + d), s)));
  if (d < head_dim) {
    const std::size_t n = head_dim - d;
    V::store(out + d, V::fma(pv, load_kv(v, d, n), V::mul(V::load(out + d, n), s)), n);
  }
}

// One query head against n_keys keys/values with an online softmax, tile by tile, as
// reference::attend_head. q: [head_dim], keys, values: n_keys rows of head_dim values (Rows:
// ConsecutiveRows or BlockRows), out: [head_dim]
template <class Rows>
inline void attend_head(const float* q, const Rows& keys, const Rows& values, std::size_t n_keys,
                        std::size_t head_dim, AttentionScoring scoring, float* out) {
  constexpr std::size_t kTile = 32;
  float scores[kTile];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (std::size_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (std::size_t start = 0; start < n_keys; start += kTile) {
    const std::size_t count = std::min(kTile, n_keys - start);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < count; ++j) {
      scores[j] = scoring(dot_head(q, keys(start + j), head_dim));
      tile_max = std::max(tile_max, scores[j]);
    }
    const float new_max = std::max(running_max, tile_max);
    float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    exp_shifted(scores, count, new_max);
    for (std::size_t j = 0; j < count; ++j) {
      const float p = scores[j];
      running_sum += p;
      // The first key of a tile also applies the tile's rescale of the accumulator.
      scale_add_head(out, correction, p, values(start + j), head_dim);
      correction = 1.0f;
    }
    running_max = new_max;
  }
  if (running_sum > 0.0f) {
    const float inv = 1.0f / running_sum;
    for (std::size_t d = 0; d < head_dim; ++d) out[d] *= inv;
  }
}

#if HLLM_ISA_LEVEL == 2
// G query heads that share one KV head (GQA), against the same n_keys keys and values: the
// keys and values are read once for all G, and 16 keys at a time are transposed (16·head_dim
// values → head_dim vectors of 16 keys) so each query's 16 scores come from head_dim FMAs with
// no horizontal sums; softmax runs on the 16-lane score vectors and the value pass keeps G
// accumulators per 16 dimensions in registers. Same online softmax as attend_head.
// q: [G][head_dim], keys, values: n_keys rows, out: [G][head_dim]; head_dim % 16 == 0 and at
// most kMaxTiledHeadDim: the 576 of latent attention's one row per token (DeepSeek's 512 + 64,
// read by all 16 heads), which a tile of keys transposes into 36 KB.
inline constexpr std::size_t kMaxTiledHeadDim = 576;
template <std::size_t G, class Rows>
inline void attend_group_tiles(const float* q, const Rows& keys, const Rows& values,
                               std::size_t n_keys, std::size_t head_dim, AttentionScoring scoring,
                               float* out) {
  constexpr std::size_t kKeys = 16;
  alignas(64) float key_columns[kMaxTiledHeadDim * kKeys];  // [head_dim][16 keys]
  alignas(64) float p[G][kKeys];
  // Per head, in 16 lanes so that one vector exp rescales every head (lanes >= G stay 0).
  alignas(64) float running_max[16] = {}, new_max[16] = {}, correction[16];
  float running_sum[G];
  for (std::size_t g = 0; g < G; ++g) {
    running_max[g] = -std::numeric_limits<float>::infinity();
    running_sum[g] = 0.0f;
  }
  std::fill(out, out + G * head_dim, 0.0f);
  for (std::size_t start = 0; start < n_keys; start += kKeys) {
    const std::size_t count = std::min(kKeys, n_keys - start);
    const __mmask16 valid = VecF32::mask(count);
    // The tile's row addresses, once (a paged cache's cost a block-table lookup each).
    const typename Rows::element_type* key_rows[kKeys];
    const typename Rows::element_type* value_rows[kKeys];
    for (std::size_t j = 0; j < count; ++j) {
      key_rows[j] = keys(start + j);
      value_rows[j] = values(start + j);
    }
    // Transpose the tile's keys: key_columns[d][j] = keys[start + j][d].
    for (std::size_t d0 = 0; d0 < head_dim; d0 += 16) {
      __m512 r[16];
      _Pragma("GCC unroll 16") for (std::size_t j = 0; j < 16; ++j) r[j] =
          j < count ? load_kv(key_rows[j], d0) : _mm512_setzero_ps();
      transpose16x16(r);
      _Pragma("GCC unroll 16") for (std::size_t k = 0; k < 16; ++k)
          _mm512_store_ps(key_columns + (d0 + k) * kKeys, r[k]);
    }
    // Scores of every head first (four FMA chains each: a head's head_dim products are one
    // dependency chain otherwise), then one vector exp for all heads' rescale factors instead
    // of a scalar exp per head and tile, which would cost a sizeable share of the kernel.
    __m512 scores[G];
    _Pragma("GCC unroll 8") for (std::size_t g = 0; g < G; ++g) {
      const float* qg = q + g * head_dim;
      __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
      for (std::size_t d = 0; d < head_dim; d += 4)
        _Pragma("GCC unroll 4") for (std::size_t i = 0; i < 4; ++i) s[i] = _mm512_fmadd_ps(
            _mm512_set1_ps(qg[d + i]), _mm512_load_ps(key_columns + (d + i) * kKeys), s[i]);
      __m512 scaled =
          _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])),
                        _mm512_set1_ps(scoring.scale));
      if (scoring.capped()) scaled = soft_capped(scaled, _mm512_set1_ps(scoring.softcap));
      scores[g] = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid,
                                     scaled);
      new_max[g] = std::max(running_max[g], _mm512_reduce_max_ps(scores[g]));
    }
    const __m512 new_max_v = _mm512_load_ps(new_max);
    _mm512_store_ps(correction, VecF32::exp(_mm512_sub_ps(_mm512_load_ps(running_max), new_max_v)));
    _mm512_store_ps(running_max, new_max_v);
    _Pragma("GCC unroll 8") for (std::size_t g = 0; g < G; ++g) {
      const __m512 e = _mm512_maskz_mov_ps(
          valid, VecF32::exp(_mm512_sub_ps(scores[g], _mm512_set1_ps(new_max[g]))));
      _mm512_store_ps(p[g], e);
      running_sum[g] = running_sum[g] * correction[g] + VecF32::sum(e);
    }
    // out[g] = out[g]·correction[g] + Σ_j p[g][j]·v_j, 16 dimensions at a time.
    for (std::size_t d0 = 0; d0 < head_dim; d0 += 16) {
      __m512 o[G];
      _Pragma("GCC unroll 8") for (std::size_t g = 0; g < G; ++g) o[g] =
          _mm512_mul_ps(_mm512_loadu_ps(out + g * head_dim + d0), _mm512_set1_ps(correction[g]));
      for (std::size_t j = 0; j < count; ++j) {
        const __m512 v = load_kv(value_rows[j], d0);
        _Pragma("GCC unroll 8") for (std::size_t g = 0; g < G; ++g) o[g] =
            _mm512_fmadd_ps(_mm512_set1_ps(p[g][j]), v, o[g]);
      }
      _Pragma("GCC unroll 8") for (std::size_t g = 0; g < G; ++g)
          _mm512_storeu_ps(out + g * head_dim + d0, o[g]);
    }
  }
  for (std::size_t g = 0; g < G; ++g)
    if (running_sum[g] > 0.0f) {
      const float inv = 1.0f / running_sum[g];
      for (std::size_t d = 0; d < head_dim; ++d) out[g * head_dim + d] *= inv;
    }
}
#endif

// `group` query heads sharing one KV head: q, out: [group][head_dim], keys, values: n_keys
// rows. The tiled kernel above where it applies, else one head at a time.
template <class Rows>
inline void attend_group(const float* q, const Rows& keys, const Rows& values, std::size_t n_keys,
                         std::size_t head_dim, std::size_t group, AttentionScoring scoring,
                         float* out) {
#if HLLM_ISA_LEVEL == 2
  if (head_dim % 16 == 0 && head_dim <= kMaxTiledHeadDim && attention_group_tiled(group)) {
    switch (group) {
      case 1: return attend_group_tiles<1>(q, keys, values, n_keys, head_dim, scoring, out);
      case 2: return attend_group_tiles<2>(q, keys, values, n_keys, head_dim, scoring, out);
      case 4: return attend_group_tiles<4>(q, keys, values, n_keys, head_dim, scoring, out);
      case 8: return attend_group_tiles<8>(q, keys, values, n_keys, head_dim, scoring, out);
      case 16: return attend_group_tiles<16>(q, keys, values, n_keys, head_dim, scoring, out);
      default: break;
    }
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
