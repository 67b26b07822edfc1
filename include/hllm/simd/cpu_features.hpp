#pragma once
// What the CPU this process runs on can execute, read once from CPUID and XGETBV. XGETBV matters:
// a CPU may implement AVX-512 while the operating system does not save its registers, and then
// the instructions must not be used.

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HLLM_X86 1
#else
#define HLLM_X86 0
#endif

namespace hllm {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16
  bool avx512_vnni = false;  // vpdpbusd
  bool avx_vnni = false;     // the VEX-encoded vpdpbusd (Alder Lake and later)
  bool amd = false;          // CPUID's vendor is "AuthenticAMD"
};

// Whether vdpbf16ps outruns the FP32 FMA: AMD's AVX512-BF16 cores (Zen 4, Zen 5) issue it at the
// FMA's rate with twice its multiply-adds per lane, Intel's (Sapphire and Emerald Rapids) at half
// that rate, so there an exact FP32 GEMM on BF16 weights widened to float is the faster
// (docs/performance.md, "BF16 prompts on Intel").
constexpr bool bf16_dot_outruns_fma(const CpuFeatures& f) noexcept {
  return f.avx512_bf16 && f.amd;
}

namespace detail {

inline CpuFeatures read_cpu_features() noexcept {
  CpuFeatures f;
#if HLLM_X86
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx))  // "AuthenticAMD" in ebx, edx, ecx
    f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  f.fma = (ecx >> 12) & 1;
  f.f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return CpuFeatures{};
  std::uint32_t xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  const bool os_saves_ymm = (xcr0_low & 0x6) == 0x6;    // SSE + AVX state
  const bool os_saves_zmm = (xcr0_low & 0xe6) == 0xe6;  // + opmask, ZMM0-15 high, ZMM16-31
  if (!os_saves_ymm) return CpuFeatures{};
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = (ebx >> 5) & 1;
  if (os_saves_zmm) {
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    f.avx512_vnni = (ecx >> 11) & 1;
  }
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  f.avx_vnni = (eax >> 4) & 1;
  if (os_saves_zmm) f.avx512_bf16 = (eax >> 5) & 1;
  (void)xcr0_high;
#endif
  return f;
}

}  // namespace detail

// Read once per process.
inline const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = detail::read_cpu_features();
  return features;
}

}  // namespace hllm
