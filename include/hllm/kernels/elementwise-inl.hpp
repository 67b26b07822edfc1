// Vectorized RMSNorm, SiLU·up and RoPE, written once against VecF32 and compiled per ISA (see
// isa_kernels.hpp). No include guard, by design. The reference twins are in kernels/reference.hpp.
// The attention kernels are in attention-inl.hpp.

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

// out[i] = (x[i] − mean) / sqrt(var + eps) · weight[i] + bias[i], mean and var (biased) over
// the n values; no bias term when bias is nullptr (Command-R's norm has none, Falcon's has one).
// The deviations are summed in a second pass, as the reference twin and PyTorch do, rather than
// as E[x²] − mean², which cancels.   x, weight, bias, out: [n]
inline void layer_norm(const float* x, const float* weight, const float* bias, std::size_t n,
                       float eps, float* out) {
  using V = VecF32;
  const std::size_t whole = n / V::lanes * V::lanes;  // the tails run scalar: a zero-filled lane
                                                      // would add mean² to the deviations
  typename V::Reg acc = V::zero();
  for (std::size_t i = 0; i < whole; i += V::lanes) acc = V::add(acc, V::load(x + i));
  float sum = V::sum(acc);
  for (std::size_t i = whole; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  const typename V::Reg m = V::set1(mean);
  acc = V::zero();
  for (std::size_t i = 0; i < whole; i += V::lanes) {
    const typename V::Reg d = V::sub(V::load(x + i), m);
    acc = V::fma(d, d, acc);
  }
  float squares = V::sum(acc);
  for (std::size_t i = whole; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const float inv_std = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  const typename V::Reg scale = V::set1(inv_std);
  for (std::size_t i = 0; i < whole; i += V::lanes) {
    const typename V::Reg y = V::mul(V::mul(V::sub(V::load(x + i), m), scale), V::load(weight + i));
    V::store(out + i, bias != nullptr ? V::add(y, V::load(bias + i)) : y);
  }
  for (std::size_t i = whole; i < n; ++i)
    out[i] = (x[i] - mean) * inv_std * weight[i] + (bias != nullptr ? bias[i] : 0.0f);
}

// silu(g)·u = g / (1 + e^-g) · u, lane by lane. (A function, not a lambda: target regions
// apply to functions, and a vector returned from code outside one changes the ABI.)
inline VecF32::Reg silu_times(VecF32::Reg g, VecF32::Reg u) {
  using V = VecF32;
  return V::mul(V::div(g, V::add(V::set1(1.0f), V::exp(V::mul(g, V::set1(-1.0f))))), u);
}

// gelu(g)·u with GELU's tanh approximation, as reference::gelu_mul: g / (1 + e^-2z) · u,
// z = sqrt(2/pi) · (g + 0.044715 g^3), which is g/2 · (1 + tanh z) without its cancellation.
inline VecF32::Reg gelu_times(VecF32::Reg g, VecF32::Reg u) {
  using V = VecF32;
  const typename V::Reg cube = V::mul(V::mul(g, g), g);
  const typename V::Reg minus_2z =
      V::mul(V::fma(cube, V::set1(0.044715f), g), V::set1(-2.0f * 0.7978845608028654f));
  return V::mul(V::div(g, V::add(V::set1(1.0f), V::exp(minus_2z))), u);
}

// out[i] = times(gate[i], up[i]) lane by lane: one loop for the gated FFN's activations.
template <VecF32::Reg (*Times)(VecF32::Reg, VecF32::Reg)>
inline void gate_times_up(const float* gate, const float* up, std::size_t n, float* out) {
  using V = VecF32;
  std::size_t i = 0;
  for (; i + V::lanes <= n; i += V::lanes)
    V::store(out + i, Times(V::load(gate + i), V::load(up + i)));
  if (i < n) V::store(out + i, Times(V::load(gate + i, n - i), V::load(up + i, n - i)), n - i);
}

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i].   gate, up, out: [n]
inline void silu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  gate_times_up<&silu_times>(gate, up, n, out);
}

// out[i] = gelu(gate[i]) * up[i] (GeGLU).   gate, up, out: [n]
inline void gelu_mul(const float* gate, const float* up, std::size_t n, float* out) {
  gate_times_up<&gelu_times>(gate, up, n, out);
}

// The exact GELU, x/2 · (1 + erf(x/√2)), as reference::gelu (std::erf), with erf by Abramowitz
// and Stegun 7.1.26 (|error| < 1.5e-7): for a = |x|/√2 and t = 1/(1 + p·a), the tail
// h = x/2 · t·P(t)·e^(−a²) = x/2 · erfc(a) gives gelu(x) = x − h for x >= 0 and h for x < 0,
// neither side subtracting nearly equal numbers.
inline VecF32::Reg gelu_exact(VecF32::Reg x) {
  using V = VecF32;
  const typename V::Reg a = V::mul(V::abs(x), V::set1(0.70710678118654752f));
  const typename V::Reg t = V::div(V::set1(1.0f), V::fma(a, V::set1(0.3275911f), V::set1(1.0f)));
  typename V::Reg p = V::set1(1.061405429f);
  p = V::fma(p, t, V::set1(-1.453152027f));
  p = V::fma(p, t, V::set1(1.421413741f));
  p = V::fma(p, t, V::set1(-0.284496736f));
  p = V::fma(p, t, V::set1(0.254829592f));
  const typename V::Reg tail = V::mul(V::mul(p, t), V::exp(V::mul(V::sub(V::zero(), a), a)));
  const typename V::Reg h = V::mul(V::mul(x, V::set1(0.5f)), tail);
  return V::select_less(x, V::zero(), h, V::sub(x, h));
}
// x[i] = gelu(x[i]) in place.   x: [n]
inline void gelu(float* x, std::size_t n) {
  using V = VecF32;
  std::size_t i = 0;
  for (; i + V::lanes <= n; i += V::lanes) V::store(x + i, gelu_exact(V::load(x + i)));
  if (i < n) V::store(x + i, gelu_exact(V::load(x + i, n - i)), n - i);
}

// x[i] = cap · tanh(x[i] / cap) in place, as reference::soft_cap (VecF32::tanh: ~2 ulp).
inline VecF32::Reg soft_capped(VecF32::Reg v, VecF32::Reg cap) {
  return VecF32::mul(cap, VecF32::tanh(VecF32::div(v, cap)));
}
inline void soft_cap(float* x, std::size_t n, float cap) {
  using V = VecF32;
  const typename V::Reg c = V::set1(cap);
  std::size_t i = 0;
  for (; i + V::lanes <= n; i += V::lanes) V::store(x + i, soft_capped(V::load(x + i), c));
  if (i < n) V::store(x + i, soft_capped(V::load(x + i, n - i), c), n - i);
}

// RoPE over n_heads heads of head_dim values, the first rot_dims of each rotated (see
// reference::rope): each pair (a, b) becomes (a·cos − b·sin, a·sin + b·cos). cos, sin:
// [rot_dims/2]. Interleaved pairs are adjacent lanes: vfmaddsub does the − on even lanes and the
// + on odd ones against the pair-swapped vector, with cos and sin duplicated per pair.
inline void rope(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t rot_dims,
                 RopeLayout layout, const float* cos, const float* sin) {
#if HLLM_ISA_LEVEL == 0
  reference::rope(x, n_heads, head_dim, rot_dims, layout, cos, sin);
#else
  using V = VecF32;
  const std::size_t half = rot_dims / 2;
  for (std::size_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    if (layout == RopeLayout::neox) {
      for (std::size_t i = 0; i < half; i += V::lanes) {
        const std::size_t n = std::min(V::lanes, half - i);
        const typename V::Reg a = V::load(head + i, n), b = V::load(head + half + i, n);
        const typename V::Reg c = V::load(cos + i, n), s = V::load(sin + i, n);
        V::store(head + i, V::sub(V::mul(a, c), V::mul(b, s)), n);
        V::store(head + half + i, V::add(V::mul(a, s), V::mul(b, c)), n);
      }
      continue;
    }
    constexpr std::size_t kPairs = V::lanes / 2;
    for (std::size_t i = 0; i < half; i += kPairs) {
      const std::size_t pairs = std::min(kPairs, half - i);
      const typename V::Reg v = V::load(head + 2 * i, 2 * pairs);
#if HLLM_ISA_LEVEL == 2
      const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      const __m512 c = _mm512_permutexvar_ps(twice, V::load(cos + i, pairs));
      const __m512 s = _mm512_permutexvar_ps(twice, V::load(sin + i, pairs));
      const __m512 rotated = _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(_mm512_permute_ps(v, 0xb1), s));
#else
      const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
      const __m256 c = _mm256_permutevar8x32_ps(V::load(cos + i, pairs), twice);
      const __m256 s = _mm256_permutevar8x32_ps(V::load(sin + i, pairs), twice);
      const __m256 rotated = _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(_mm256_permute_ps(v, 0xb1), s));
#endif
      V::store(head + 2 * i, rotated, 2 * pairs);
    }
  }
#endif
}
