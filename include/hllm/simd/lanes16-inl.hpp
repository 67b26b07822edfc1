// Sixteen-lane vectors for the 16-row panel kernels (kernels/gemm_panels-inl.hpp and
// kernels/matmul_interleaved-inl.hpp): one 64-byte panel line (16 rows × 4 bytes) is one `Int`,
// 16 rows' floats one `Float`. AVX-512: one zmm each; AVX2: two ymm (rows 0-7 and 8-15) with the
// same arithmetic in every lane, so a panel kernel gives the same bits on both. No include
// guard: kernels/isa_kernels.hpp includes this file per vector ISA, after vec-inl.hpp, with
// HLLM_ISA_LEVEL 1 (AVX2) or 2 (AVX-512) and HLLM_QUANT_VNNI 1 where the integer dot is
// vpdpbusd (AVX-512 VNNI on zmm, AVX-VNNI's VEX form on ymm).
//
// Interface (static members of Lanes16): Int: load_int(p) (64 bytes), splat32, splat8, zero_int,
// bit_and, bit_or, bit_xor, select(a, b, mask) (bits of b where mask is set, else of a),
// shr16<n>, shr32<n>, shl32<n>, sar32<n>, shr32(v, n), add8, add32, abs8, sign8(x, q) (x negated
// where q < 0), keep_order(v) (a compiler barrier on v), madd16(a, b) (each int32 lane the sum of
// its two int16 products, vpmaddwd), pairs16(low, high) (int16 pairs from two lanes' low 16
// bits), load_s8_int(p) (16 bytes as int32 lanes), dot(acc, u, s) (each int32 lane plus its
// four u·s products: u unsigned bytes, s signed), and dot_runs (below: several chains of dots, the
// emulated dot's int16 sums added in runs); Float: to_float, load(const float*), load(const f16*),
// load_u8 / load_s8 (16 bytes as floats), store, splat, zero, mul, fma(a, b, c) = a·b + c, fnma(a,
// b, c) = c − a·b; lanes (16). On AVX2, Lanes8 (one ymm) does each half's arithmetic with the
// same names, for the ones a panel tile uses (TileLanes, below).
//
// Without VNNI the dot is vpmaddubsw + vpmaddwd. vpmaddubsw sums each pair of u·s products in
// int16 with saturation, so it is exact only while |u0·s0 + u1·s1| < 2^15: for u ≤ 128 (s is an
// activation, |s| ≤ 127). kWideUnsigned says whether the kernels may form larger u (the VNNI
// panels' values offset by 128, high nibbles multiplied in place as q & 0xf0). dot_runs adds
// several pairs' int16 sums before the one widening vpmaddwd while they cannot overflow (u ≤ 15:
// eight groups, 8·2·15·127 < 2^15), which is most of the cost of the emulated dot.

inline constexpr bool kWideUnsigned = HLLM_QUANT_VNNI;

#if HLLM_ISA_LEVEL == 2

struct Lanes16 {
  using Int = __m512i;
  using Float = __m512;
  static constexpr std::size_t lanes = 16;
  static Int load_int(const void* p) { return _mm512_loadu_si512(p); }
  static Int splat32(std::int32_t v) { return _mm512_set1_epi32(v); }
  static Int splat8(std::uint8_t v) { return _mm512_set1_epi8(static_cast<char>(v)); }
  static Int zero_int() { return _mm512_setzero_si512(); }
  static Int bit_and(Int a, Int b) { return _mm512_and_si512(a, b); }
  static Int bit_or(Int a, Int b) { return _mm512_or_si512(a, b); }
  static Int bit_xor(Int a, Int b) { return _mm512_xor_si512(a, b); }
  static Int select(Int a, Int b, Int mask) { return _mm512_ternarylogic_epi32(a, b, mask, 0xD8); }
  template <int n>
  static Int shr16(Int a) {
    return _mm512_srli_epi16(a, n);
  }
  template <int n>
  static Int shr32(Int a) {
    return _mm512_srli_epi32(a, n);
  }
  template <int n>
  static Int shl32(Int a) {
    return _mm512_slli_epi32(a, n);
  }
  template <int n>
  static Int sar32(Int a) {
    return _mm512_srai_epi32(a, n);
  }
  static Int shr32(Int a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static Int shl32(Int a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static Int add8(Int a, Int b) { return _mm512_add_epi8(a, b); }
  static Int add32(Int a, Int b) { return _mm512_add_epi32(a, b); }
  static Int abs8(Int a) { return _mm512_abs_epi8(a); }
  static Int sign8(Int x, Int q) {  // AVX-512 has no vpsignb: negate under q's sign bits
    return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(q), _mm512_setzero_si512(), x);
  }
  static Int pair_sums(Int u, Int s) { return _mm512_maddubs_epi16(u, s); }
  static Int add16(Int a, Int b) { return _mm512_add_epi16(a, b); }
  static void keep_order(Int& a) { __asm__("" : "+v"(a)); }
  static Int widen_pairs(Int acc, Int p) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
  }
  static Int madd16(Int a, Int b) { return _mm512_madd_epi16(a, b); }
  static Int pairs16(Int low, Int high) {
    return _mm512_mask_blend_epi16(0xAAAAAAAA, low, _mm512_slli_epi32(high, 16));
  }
  static Int load_s8_int(const std::int8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Int dot(Int acc, Int u, Int s) {
#if HLLM_QUANT_VNNI
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return widen_pairs(acc, pair_sums(u, s));
#endif
  }
  static Float to_float(Int a) { return _mm512_cvtepi32_ps(a); }
  static Float load(const float* p) { return _mm512_loadu_ps(p); }
  static Float load(const f16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Float load_u8(const std::uint8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static Float load_s8(const std::int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* p, Float v) { _mm512_storeu_ps(p, v); }
  static Float splat(float v) { return _mm512_set1_ps(v); }
  static Float zero() { return _mm512_setzero_ps(); }
  static Float mul(Float a, Float b) { return _mm512_mul_ps(a, b); }
  static Float fma(Float a, Float b, Float c) { return _mm512_fmadd_ps(a, b, c); }
  static Float fnma(Float a, Float b, Float c) { return _mm512_fnmadd_ps(a, b, c); }
};

#elif HLLM_ISA_LEVEL == 1

// Eight lanes, one ymm: the arithmetic of each half of Lanes16, and the lanes a panel tile
// computes in on AVX2 (TileLanes, below).
struct Lanes8 {
  using Int = __m256i;
  using Float = __m256;
  static constexpr std::size_t lanes = 8;
  static Int splat32(std::int32_t v) { return _mm256_set1_epi32(v); }
  static Int add32(Int a, Int b) { return _mm256_add_epi32(a, b); }
  static Int add16(Int a, Int b) { return _mm256_add_epi16(a, b); }
  static Int sign8(Int x, Int q) { return _mm256_sign_epi8(x, q); }
  static Int pair_sums(Int u, Int s) { return _mm256_maddubs_epi16(u, s); }
  static void keep_order(Int& a) { __asm__("" : "+x"(a)); }
  static Int madd16(Int a, Int b) { return _mm256_madd_epi16(a, b); }
  static Int widen_pairs(Int acc, Int p) { return add32(acc, madd16(p, _mm256_set1_epi16(1))); }
  static Int dot(Int acc, Int u, Int s) {
#if HLLM_QUANT_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return widen_pairs(acc, pair_sums(u, s));
#endif
  }
  static Float to_float(Int a) { return _mm256_cvtepi32_ps(a); }
  static Float load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Float v) { _mm256_storeu_ps(p, v); }
  static Float splat(float v) { return _mm256_set1_ps(v); }
  static Float zero() { return _mm256_setzero_ps(); }
  static Float mul(Float a, Float b) { return _mm256_mul_ps(a, b); }
  static Float fma(Float a, Float b, Float c) { return _mm256_fmadd_ps(a, b, c); }
  static Float fnma(Float a, Float b, Float c) { return _mm256_fnmadd_ps(a, b, c); }
};

struct Lanes16 {
  struct Int {
    __m256i lo, hi;  // rows 0-7, 8-15
  };
  struct Float {
    __m256 lo, hi;
  };
  static constexpr std::size_t lanes = 16;
  using H = Lanes8;  // each half's arithmetic
  static Int load_int(const void* p) {
    const auto* v = static_cast<const __m256i*>(p);
    return {_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)};
  }
  static Int splat32(std::int32_t v) { return {H::splat32(v), H::splat32(v)}; }
  static Int splat8(std::uint8_t v) {
    const __m256i b = _mm256_set1_epi8(static_cast<char>(v));
    return {b, b};
  }
  static Int zero_int() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static Int bit_and(Int a, Int b) {
    return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)};
  }
  static Int bit_or(Int a, Int b) {
    return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)};
  }
  static Int bit_xor(Int a, Int b) {
    return {_mm256_xor_si256(a.lo, b.lo), _mm256_xor_si256(a.hi, b.hi)};
  }
  static Int select(Int a, Int b, Int mask) {
    return {_mm256_or_si256(_mm256_andnot_si256(mask.lo, a.lo), _mm256_and_si256(mask.lo, b.lo)),
            _mm256_or_si256(_mm256_andnot_si256(mask.hi, a.hi), _mm256_and_si256(mask.hi, b.hi))};
  }
  template <int n>
  static Int shr16(Int a) {
    return {_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)};
  }
  template <int n>
  static Int shr32(Int a) {
    return {_mm256_srli_epi32(a.lo, n), _mm256_srli_epi32(a.hi, n)};
  }
  template <int n>
  static Int shl32(Int a) {
    return {_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)};
  }
  template <int n>
  static Int sar32(Int a) {
    return {_mm256_srai_epi32(a.lo, n), _mm256_srai_epi32(a.hi, n)};
  }
  static Int shr32(Int a, int n) {
    const __m128i count = _mm_cvtsi32_si128(n);
    return {_mm256_srl_epi32(a.lo, count), _mm256_srl_epi32(a.hi, count)};
  }
  static Int shl32(Int a, int n) {
    const __m128i count = _mm_cvtsi32_si128(n);
    return {_mm256_sll_epi32(a.lo, count), _mm256_sll_epi32(a.hi, count)};
  }
  static Int add8(Int a, Int b) {
    return {_mm256_add_epi8(a.lo, b.lo), _mm256_add_epi8(a.hi, b.hi)};
  }
  static Int add32(Int a, Int b) { return {H::add32(a.lo, b.lo), H::add32(a.hi, b.hi)}; }
  static Int abs8(Int a) { return {_mm256_abs_epi8(a.lo), _mm256_abs_epi8(a.hi)}; }
  static Int sign8(Int x, Int q) { return {H::sign8(x.lo, q.lo), H::sign8(x.hi, q.hi)}; }
  static Int pair_sums(Int u, Int s) {
    return {H::pair_sums(u.lo, s.lo), H::pair_sums(u.hi, s.hi)};
  }
  static Int add16(Int a, Int b) { return {H::add16(a.lo, b.lo), H::add16(a.hi, b.hi)}; }
  static void keep_order(Int& a) { __asm__("" : "+x"(a.lo), "+x"(a.hi)); }
  static Int madd16(Int a, Int b) { return {H::madd16(a.lo, b.lo), H::madd16(a.hi, b.hi)}; }
  static Int pairs16(Int low, Int high) {
    return {_mm256_blend_epi16(low.lo, _mm256_slli_epi32(high.lo, 16), 0xAA),
            _mm256_blend_epi16(low.hi, _mm256_slli_epi32(high.hi, 16), 0xAA)};
  }
  static Int load_s8_int(const std::int8_t* p) {
    return {_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Int dot(Int acc, Int u, Int s) {
    return {H::dot(acc.lo, u.lo, s.lo), H::dot(acc.hi, u.hi, s.hi)};
  }
  static Float to_float(Int a) { return {H::to_float(a.lo), H::to_float(a.hi)}; }
  static Float load(const float* p) { return {H::load(p), H::load(p + 8)}; }
  static Float load(const f16* p) {
    const auto* v = reinterpret_cast<const __m128i*>(p);
    return {_mm256_cvtph_ps(_mm_loadu_si128(v)), _mm256_cvtph_ps(_mm_loadu_si128(v + 1))};
  }
  static Float load_u8(const std::uint8_t* p) {
    const auto* v = reinterpret_cast<const __m128i*>(p);
    return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(v))),
            _mm256_cvtepi32_ps(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
  }
  static Float load_s8(const std::int8_t* p) {
    return {_mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
            _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))))};
  }
  static void store(float* p, Float v) {
    H::store(p, v.lo);
    H::store(p + 8, v.hi);
  }
  static Float splat(float v) { return {H::splat(v), H::splat(v)}; }
  static Float zero() { return {H::zero(), H::zero()}; }
  static Float mul(Float a, Float b) { return {H::mul(a.lo, b.lo), H::mul(a.hi, b.hi)}; }
  static Float fma(Float a, Float b, Float c) {
    return {H::fma(a.lo, b.lo, c.lo), H::fma(a.hi, b.hi, c.hi)};
  }
  static Float fnma(Float a, Float b, Float c) {
    return {H::fnma(a.lo, b.lo, c.lo), H::fnma(a.hi, b.hi, c.hi)};
  }
};

#endif

#if HLLM_ISA_LEVEL >= 1
// The lanes a panel tile computes in (kernels/gemm_panels-inl.hpp): the 16 rows at once, but on
// AVX2 without VNNI one half of them (8 rows, one ymm) at a time, so that a tile's dot chains
// (two registers each: the emulated dot's int16 run and its int32 sum) and its tokens' float
// accumulators fit the 16 registers, where all 16 rows at once spilled them to the stack in
// every block. With AVX-VNNI's one-instruction dot the halves would load each activation
// broadcast twice per product, and the whole rows are faster. part_of<L>(v, i): part i of v, a
// 16-lane Int or Float, in L's lanes (half i for Lanes8, v itself for Lanes16); the arithmetic
// in each lane is the same either way, so the results are too.
#if HLLM_ISA_LEVEL == 2 || HLLM_QUANT_VNNI
using TileLanes = Lanes16;
#else
using TileLanes = Lanes8;
#endif
template <class L, class V>
inline auto part_of(const V& v, [[maybe_unused]] std::size_t i) {
  if constexpr (L::lanes == Lanes16::lanes)
    return v;
  else
    return i == 0 ? v.lo : v.hi;
}

// The lane type (Lanes16, or AVX2's Lanes8) whose Int is Int. (By overloads: a vector type as a
// template argument of a trait would lose its attributes, which GCC warns of; declared only, for
// decltype.)
Lanes16 lanes_of(const Lanes16::Int&);
#if HLLM_ISA_LEVEL == 1
Lanes8 lanes_of(const Lanes8::Int&);
#endif
template <class Int>
using LanesOf = decltype(lanes_of(std::declval<const Int&>()));

// acc[c] + Σ_k dot(u_kc, s_kc) over groups k < kGroups for kChains independent chains c, where
// operands(k, c, u, s) sets chain c's operands of group k and every u byte is at most
// kMaxUnsigned (at most 128 without VNNI). Group after group, the chains interleaved (a dot's
// latency is several cycles). Without VNNI, runs of the pairs' int16 sums are added before one
// widening, as many as cannot reach 2^15 (2·kMaxUnsigned·127 each). keep_order (an empty asm
// statement) pins each sum where it is: left free, GCC reassociated the run into a tree whose
// leaves, every group's vpmaddubsw, were all live at once and spilled to the stack.
// run_weight(k0, c) (int16 pairs, default 1) multiplies chain c's run that starts at group k0
// as it is widened, for free: a Q6_K sub-block's scale (gemm_panels-inl.hpp, kScaledRuns). Only
// the emulated dot has runs to weigh. Int: Lanes16::Int, or a panel tile's TileLanes::Int.
template <class L>
struct OneRunWeight {
  typename L::Int operator()(std::size_t, std::size_t) const { return L::splat32(0x00010001); }
};
template <int kMaxUnsigned, std::size_t kGroups, class Int, std::size_t kChains, class Operands,
          class RunWeight = OneRunWeight<LanesOf<Int>>>
inline void dot_runs(Int (&acc)[kChains], Operands operands, RunWeight run_weight = {}) {
  using L = LanesOf<Int>;
  static_assert(HLLM_QUANT_VNNI || kMaxUnsigned <= 128, "vpmaddubsw pairs saturate past u = 128");
  constexpr std::size_t kRun = 32767 / (2 * kMaxUnsigned * 127);
  Int u, s;
  if constexpr (HLLM_QUANT_VNNI || kRun < 2) {
    static_assert(std::is_same_v<RunWeight, OneRunWeight<L>>,
                  "only runs of int16 pairs are weighed");
    _Pragma("GCC unroll 8") for (std::size_t k = 0; k < kGroups; ++k)
        _Pragma("GCC unroll 16") for (std::size_t c = 0; c < kChains; ++c) {
      operands(k, c, u, s);
      acc[c] = L::dot(acc[c], u, s);
      if constexpr (!HLLM_QUANT_VNNI) L::keep_order(acc[c]);
    }
  } else {
    constexpr std::size_t kSpan = std::min(kRun, kGroups);
    static_assert(kGroups % kSpan == 0, "whole runs");
    _Pragma("GCC unroll 8") for (std::size_t k0 = 0; k0 < kGroups; k0 += kSpan) {
      Int pairs[kChains];
      _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
        operands(k0, c, u, s);
        pairs[c] = L::pair_sums(u, s);
      }
      _Pragma("GCC unroll 8") for (std::size_t k = k0 + 1; k < k0 + kSpan; ++k)
          _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) {
        operands(k, c, u, s);
        pairs[c] = L::add16(pairs[c], L::pair_sums(u, s));
        L::keep_order(pairs[c]);
      }
      _Pragma("GCC unroll 8") for (std::size_t c = 0; c < kChains; ++c) acc[c] =
          L::add32(acc[c], L::madd16(pairs[c], run_weight(k0, c)));
    }
  }
}

#endif
