// Vectorized RMSNorm and single-head attention over a KV cache, written once against VecF32 and
// compiled per ISA (see dispatch.hpp). No include guard, by design. The reference twins are in
// kernels/reference.hpp.

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i].   x, weight, out: [n]
inline void rms_norm(const float* x, const float* weight, std::size_t n, float eps, float* out) {
  using V = VecF32;
  typename V::Reg acc = V::zero();
  std::size_t i = 0;
  for (; i + V::lanes <= n; i += V::lanes) {
    const typename V::Reg v = V::load(x + i);
    acc = V::fma(v, v, acc);
  }
  if (i < n) {
    const typename V::Reg v = V::load(x + i, n - i);
    acc = V::fma(v, v, acc);
  }
  const float inv_rms = 1.0f / std::sqrt(V::sum(acc) / static_cast<float>(n) + eps);
  const typename V::Reg scale = V::set1(inv_rms);
  for (i = 0; i + V::lanes <= n; i += V::lanes)
    V::store(out + i, V::mul(V::mul(V::load(x + i), scale), V::load(weight + i)));
  if (i < n)
    V::store(out + i, V::mul(V::mul(V::load(x + i, n - i), scale), V::load(weight + i, n - i)),
             n - i);
}

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i].   gate, up, out: [n]
inline void silu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  using V = VecF32;
  const typename V::Reg one = V::set1(1.0f), minus = V::set1(-1.0f);
  const auto silu_times = [&](typename V::Reg g, typename V::Reg u) {
    return V::mul(V::div(g, V::add(one, V::exp(V::mul(g, minus)))), u);
  };
  std::size_t i = 0;
  for (; i + V::lanes <= n; i += V::lanes)
    V::store(out + i, silu_times(V::load(gate + i), V::load(up + i)));
  if (i < n) V::store(out + i, silu_times(V::load(gate + i, n - i), V::load(up + i, n - i)), n - i);
}

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

template <class KV>
inline float dot_head(const float* q, const KV* k, std::size_t head_dim) {
  using V = VecF32;
  typename V::Reg acc = V::zero();
  std::size_t d = 0;
  for (; d + V::lanes <= head_dim; d += V::lanes) acc = V::fma(V::load(q + d), V::load(k + d), acc);
  if (d < head_dim) acc = V::fma(V::load(q + d, head_dim - d), V::load(k + d, head_dim - d), acc);
  return V::sum(acc);
}

// out = out * scale + p * v.   out, v: [head_dim]
template <class KV>
inline void scale_add_head(float* out, float scale, float p, const KV* v, std::size_t head_dim) {
  using V = VecF32;
  const typename V::Reg s = V::set1(scale), pv = V::set1(p);
  std::size_t d = 0;
  for (; d + V::lanes <= head_dim; d += V::lanes)
    V::store(out + d, V::fma(pv, V::load(v + d), V::mul(V::load(out + d), s)));
  if (d < head_dim) {
    const std::size_t n = head_dim - d;
    V::store(out + d, V::fma(pv, V::load(v + d, n), V::mul(V::load(out + d, n), s)), n);
  }
}

// One query head against n_keys keys/values with an online softmax, tile by tile, as
// reference::attend_head. q: [head_dim], keys, values: [n_keys][head_dim], out: [head_dim]
template <class KV>
inline void attend_head(const float* q, const KV* keys, const KV* values, std::size_t n_keys,
                        std::size_t head_dim, float scale, float* out) {
  constexpr std::size_t kTile = 32;
  float scores[kTile];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (std::size_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (std::size_t start = 0; start < n_keys; start += kTile) {
    const std::size_t count = std::min(kTile, n_keys - start);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < count; ++j) {
      scores[j] = dot_head(q, keys + (start + j) * head_dim, head_dim) * scale;
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
      scale_add_head(out, correction, p, values + (start + j) * head_dim, head_dim);
      correction = 1.0f;
    }
    running_max = new_max;
  }
  if (running_sum > 0.0f) {
    const float inv = 1.0f / running_sum;
    for (std::size_t d = 0; d < head_dim; ++d) out[d] *= inv;
  }
}

inline void attend_head_f32(const float* q, const void* k, const void* v, std::size_t n,
                            std::size_t d, float scale, float* out) {
  attend_head(q, static_cast<const float*>(k), static_cast<const float*>(v), n, d, scale, out);
}
inline void attend_head_f16(const float* q, const void* k, const void* v, std::size_t n,
                            std::size_t d, float scale, float* out) {
  attend_head(q, static_cast<const f16*>(k), static_cast<const f16*>(v), n, d, scale, out);
}
inline void attend_head_bf16(const float* q, const void* k, const void* v, std::size_t n,
                             std::size_t d, float scale, float* out) {
  attend_head(q, static_cast<const bf16*>(k), static_cast<const bf16*>(v), n, d, scale, out);
}
