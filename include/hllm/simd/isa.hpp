#pragma once
// The instruction-set levels hllm compiles its kernels for, which of them this CPU can run, and
// the HLLM_ISA environment override that lets tests and benchmarks force each one.

#include <cstdlib>
#include <string>
#include <string_view>

#include "hllm/core/error.hpp"
#include "hllm/simd/cpu_features.hpp"

namespace hllm {

enum class Isa {
  scalar,  // portable C++: runs anywhere, the reference twin of every kernel
  avx2,    // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  avx512,  // AVX-512 F/BW/VL/DQ (Skylake-X, Zen 4 and later); BF16/VNNI used where present
  // AVX2 + AVX-VNNI: the AVX2 kernels with the VEX-encoded vpdpbusd for the integer dots (Alder
  // Lake, Zen 5 and later). Last, so the numbers of the others stay what benchmarks print.
  avx_vnni,
};

// Every ISA, in the order best_supported_isa() prefers them, best first.
inline constexpr Isa kIsasBestFirst[] = {Isa::avx512, Isa::avx_vnni, Isa::avx2, Isa::scalar};

inline const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx_vnni: return "avx_vnni";
  }
  return "?";
}

// Whether a CPU with features f can run isa's kernels.
inline bool supports(const CpuFeatures& f, Isa isa) noexcept {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return avx2;
    case Isa::avx_vnni: return avx2 && f.avx_vnni;
    case Isa::avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}
inline bool cpu_supports(Isa isa) noexcept { return supports(cpu_features(), isa); }

// The fastest ISA a CPU with features f can run: AVX-512, then AVX-VNNI, then AVX2.
inline Isa best_isa_for(const CpuFeatures& f) noexcept {
  for (Isa isa : kIsasBestFirst)
    if (supports(f, isa)) return isa;
  return Isa::scalar;
}
inline Isa best_supported_isa() noexcept { return best_isa_for(cpu_features()); }

inline Isa parse_isa(std::string_view name) {
  for (Isa isa : kIsasBestFirst)
    if (name == to_string(isa)) return isa;
  throw Error(ErrorKind::invalid_argument,
              "unknown ISA '" + std::string(name) + "' (expected scalar, avx2, avx_vnni or avx512)",
              {}, "HLLM_ISA");
}

// The ISA the process uses: HLLM_ISA if set (an ISA this CPU lacks is an error, never a crash
// on an illegal instruction), else the best this CPU supports.
inline Isa selected_isa() {
  const char* forced = std::getenv("HLLM_ISA");
  if (forced == nullptr || *forced == '\0') return best_supported_isa();
  const Isa isa = parse_isa(forced);
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported,
                std::string("HLLM_ISA=") + forced + " but this CPU does not support it", {},
                "HLLM_ISA");
  return isa;
}

}  // namespace hllm
