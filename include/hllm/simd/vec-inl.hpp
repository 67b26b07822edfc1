// Per-ISA vector primitives: one struct `VecF32` per ISA with the same interface, so kernel
// bodies are written once. No include guard: kernels/dispatch.hpp includes this file once per
// ISA, inside namespace hllm::kernels::<isa> and a target region, with HLLM_ISA_LEVEL set to
// 0 (scalar), 1 (AVX2) or 2 (AVX-512). It includes no headers of its own (they must come before
// any target region).
//
// Interface: lanes; zero(); set1(v); load(p) / load(p, n) (first n < lanes elements, the rest 0)
// from float, f16 or bf16; store(p, v) / store(p, v, n); fma(a, b, c) = a*b + c; add; mul; sum(v).

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
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Reg v, std::size_t n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
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
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Reg v, std::size_t n) { _mm256_maskstore_ps(p, mask(n), v); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
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
    return to_float(*p);
  }
  template <class T>
  static Reg load(const T* p, std::size_t n) {
    return n ? to_float(*p) : 0.0f;
  }
  static void store(float* p, Reg v) { *p = v; }
  static void store(float* p, Reg v, std::size_t n) {
    if (n) *p = v;
  }
  static Reg fma(Reg a, Reg b, Reg c) { return a * b + c; }
  static Reg add(Reg a, Reg b) { return a + b; }
  static Reg mul(Reg a, Reg b) { return a * b; }
  static float sum(Reg v) { return v; }
};

#endif
