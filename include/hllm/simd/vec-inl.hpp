// Per-ISA vector primitives: one struct `VecF32` per ISA with the same interface, so kernel
// bodies are written once. No include guard: kernels/isa_kernels.hpp includes this file once per
// ISA, inside namespace hllm::kernels::<isa> and a target region, with HLLM_ISA_LEVEL set to
// 0 (scalar), 1 (AVX2) or 2 (AVX-512). It includes no headers of its own (they must come before
// any target region).
//
// Interface: lanes; zero(); set1(v); load(p) / load(p, n) (first n < lanes elements, the rest 0)
// from float, f16, bf16 or int8; load_nibbles(p, shift): lanes bytes' (p[i] >> shift) & 15 (shift
// 0 or 4: a Q4_0 block's low or high nibbles); load_bf16_pairs(p, even, odd) (vector levels:
// lanes dwords of BF16 column pairs as their even and odd elements); load_e4m3(p): lanes E4M3 bytes
// as their values times 2^-8 (core/fp8.hpp's e4m3_to_f16_bits, then f16 to float); store(p, v) /
// store(p, v, n); fma(a, b, c) = a*b + c; add; sub; mul; div; max; abs; select_less(a, b, x, y) = a
// < b ? x : y lane by lane; exp and tanh (vector levels: ~2 ulp, Cephes' polynomials; scalar:
// std::exp, std::tanh); sum(v).

#if HLLM_ISA_LEVEL >= 1
// Shared by the vector exp()s below (Cephes' expf): x = n·ln2 + r with |r| <= ln2/2, ln2 split
// in two so n·ln2_hi is exact; e^r by a degree-6 polynomial (relative error < 2^-23 there).
template <class V>
inline void exp_reduce_impl(typename V::Reg x, typename V::Reg& n, typename V::Reg& r) {
  n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  r = V::fma(n, V::set1(-0.693359375f), x);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
}
template <class V>
inline typename V::Reg exp_polynomial_impl(typename V::Reg r) {
  typename V::Reg p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  return V::add(V::fma(V::mul(p, r), r, r), V::set1(1.0f));
}
// Shared by the vector tanh()s (Cephes' tanhf): below |x| = 0.625, x + x·z·P(z) with z = x²
// (where 1 − 2/(e^2|x| + 1) would lose bits to the subtraction); above, that formula with x's
// sign, which reaches ±1 exactly as e^2|x| overflows (or nears the AVX2 clamp).
template <class V>
inline typename V::Reg tanh_impl(typename V::Reg x) {
  const typename V::Reg a = V::abs(x), z = V::mul(x, x), one = V::set1(1.0f);
  typename V::Reg p = V::set1(-5.70498872745e-3f);
  p = V::fma(p, z, V::set1(2.06390887954e-2f));
  p = V::fma(p, z, V::set1(-5.37397155531e-2f));
  p = V::fma(p, z, V::set1(1.33314422036e-1f));
  p = V::fma(p, z, V::set1(-3.33332819422e-1f));
  const typename V::Reg small = V::fma(V::mul(p, z), x, x);
  const typename V::Reg large =
      V::sub(one, V::div(V::set1(2.0f), V::add(V::exp(V::add(a, a)), one)));  // tanh |x|
  const typename V::Reg signed_large =
      V::select_less(x, V::zero(), V::sub(V::zero(), large), large);
  return V::select_less(a, V::set1(0.625f), small, signed_large);
}
#endif

#if HLLM_ISA_LEVEL == 2

struct VecF32 {
  using Reg = __m512;
  static constexpr std::size_t lanes = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg set1(float v) { return _mm512_set1_ps(v); }
  static __mmask16 mask(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg load(const float* p, std::size_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static Reg load(const f16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg load(const f16* p, std::size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p));
  }
  static Reg widen_bf16(__m256i h) {  // bf16 is the top half of a float: shift into place
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static Reg load(const bf16* p) {
    return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg load(const bf16* p, std::size_t n) {
    return widen_bf16(_mm256_maskz_loadu_epi16(mask(n), p));
  }
  // 16 dwords of BF16 column pairs (core/bf16_panels.hpp) as floats: the low halves (even
  // columns) shifted into place, the high halves (odd columns) masked.
  static void load_bf16_pairs(const std::uint32_t* p, Reg& even, Reg& odd) {
    const __m512i w = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    odd =
        _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static Reg load(const std::int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static Reg load(const std::int8_t* p, std::size_t n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask(n), p)));
  }
  static Reg load_nibbles(const std::uint8_t* p, int shift) {
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srl_epi32(bytes, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(15)));
  }
  static Reg load_e4m3(const std::uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8);
    const __m256i rest = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7);
    return _mm512_cvtph_ps(_mm256_or_si256(sign, rest));
  }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Reg v, std::size_t n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT); }
  static void exp_reduce(Reg x, Reg& n, Reg& r) { exp_reduce_impl<VecF32>(x, n, r); }
  static Reg exp_polynomial(Reg r) { return exp_polynomial_impl<VecF32>(r); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg abs(Reg a) { return _mm512_abs_ps(a); }
  static Reg select_less(Reg a, Reg b, Reg if_less, Reg otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, if_less);
  }
  static Reg tanh(Reg x) { return tanh_impl<VecF32>(x); }
  // e^x within ~2 ulp (see exp_reduce_impl); 2^n applied by vscalefps, which rounds to 0 and
  // overflows to +inf beyond the float range. The clamp keeps the reduction exact (and maps
  // -inf to 0).
  static Reg exp(Reg x) {
    x = _mm512_min_ps(_mm512_max_ps(x, set1(-104.0f)), set1(89.0f));
    Reg n, r;
    exp_reduce(x, n, r);
    return _mm512_scalef_ps(exp_polynomial(r), n);
  }
  // (Not _mm512_reduce_add_ps: GCC 12's version trips -Wuninitialized in its own header.)
  static float sum(Reg v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    __m128 s = _mm512_castps512_ps128(v);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#elif HLLM_ISA_LEVEL == 1

struct VecF32 {
  using Reg = __m256;
  static constexpr std::size_t lanes = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg set1(float v) { return _mm256_set1_ps(v); }
  static __m256i mask(std::size_t n) {
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index);
  }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg load(const float* p, std::size_t n) { return _mm256_maskload_ps(p, mask(n)); }
  static Reg load(const f16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // AVX2 has no 16-bit masked load: copy the tail to a zeroed block (tails only, never the
  // steady state).
  template <class Half>
  static __m128i load_half_tail(const Half* p, std::size_t n) {
    alignas(16) std::uint16_t tail[8] = {};
    std::memcpy(tail, p, n * sizeof(Half));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
  }
  static Reg load(const f16* p, std::size_t n) { return _mm256_cvtph_ps(load_half_tail(p, n)); }
  static Reg widen_bf16(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static Reg load(const bf16* p) {
    return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Reg load(const bf16* p, std::size_t n) { return widen_bf16(load_half_tail(p, n)); }
  static void load_bf16_pairs(const std::uint32_t* p, Reg& even, Reg& odd) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    odd =
        _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static Reg load(const std::int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static Reg load(const std::int8_t* p, std::size_t n) {
    std::int64_t tail = 0;
    std::memcpy(&tail, p, n);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(tail)));
  }
  static Reg load_nibbles(const std::uint8_t* p, int shift) {
    const __m256i bytes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srl_epi32(bytes, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(15)));
  }
  static Reg load_e4m3(const std::uint8_t* p) {
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
    const __m128i rest = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7);
    return _mm256_cvtph_ps(_mm_or_si128(sign, rest));
  }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Reg v, std::size_t n) { _mm256_maskstore_ps(p, mask(n), v); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg round(Reg a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void exp_reduce(Reg x, Reg& n, Reg& r) { exp_reduce_impl<VecF32>(x, n, r); }
  static Reg exp_polynomial(Reg r) { return exp_polynomial_impl<VecF32>(r); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg abs(Reg a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static Reg select_less(Reg a, Reg b, Reg if_less, Reg otherwise) {
    return _mm256_blendv_ps(otherwise, if_less, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static Reg tanh(Reg x) { return tanh_impl<VecF32>(x); }
  // e^x within ~2 ulp; x is clamped to [-87.3, 88.7] first (the result's float range), so
  // 2^n can be built by shifting n into the exponent field.
  static Reg exp(Reg x) {
    x = _mm256_min_ps(_mm256_max_ps(x, set1(-87.3f)), set1(88.7f));
    Reg n, r;
    exp_reduce(x, n, r);
    const __m256i pow2n =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(exp_polynomial(r), _mm256_castsi256_ps(pow2n));
  }
  static float sum(Reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#else

struct VecF32 {
  using Reg = float;
  static constexpr std::size_t lanes = 1;
  static Reg zero() { return 0.0f; }
  static Reg set1(float v) { return v; }
  template <class T>
  static Reg load(const T* p) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<float>(*p);
    else
      return to_float(*p);
  }
  template <class T>
  static Reg load(const T* p, std::size_t n) {
    return n ? load(p) : 0.0f;
  }
  static Reg load_nibbles(const std::uint8_t* p, int shift) {
    return static_cast<float>((*p >> shift) & 15);
  }
  static Reg load_e4m3(const std::uint8_t* p) {
    return to_float(f16::from_bits(e4m3_to_f16_bits(*p)));
  }
  static void store(float* p, Reg v) { *p = v; }
  static void store(float* p, Reg v, std::size_t n) {
    if (n) *p = v;
  }
  static Reg fma(Reg a, Reg b, Reg c) { return a * b + c; }
  static Reg add(Reg a, Reg b) { return a + b; }
  static Reg mul(Reg a, Reg b) { return a * b; }
  static Reg sub(Reg a, Reg b) { return a - b; }
  static Reg div(Reg a, Reg b) { return a / b; }
  static Reg max(Reg a, Reg b) { return std::max(a, b); }
  static Reg abs(Reg a) { return std::fabs(a); }
  static Reg select_less(Reg a, Reg b, Reg if_less, Reg otherwise) {
    return a < b ? if_less : otherwise;
  }
  static Reg exp(Reg x) { return std::exp(x); }
  static Reg tanh(Reg x) { return std::tanh(x); }
  static float sum(Reg v) { return v; }
};

#endif
