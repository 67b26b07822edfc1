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
};

inline const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

inline bool cpu_supports(Isa isa) noexcept {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::avx512:
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

inline Isa best_supported_isa() noexcept {
  if (cpu_supports(Isa::avx512)) return Isa::avx512;
  if (cpu_supports(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

inline Isa parse_isa(std::string_view name) {
  if (name == "scalar") return Isa::scalar;
  if (name == "avx2") return Isa::avx2;
  if (name == "avx512") return Isa::avx512;
  throw Error(ErrorKind::invalid_argument,
              "unknown ISA '" + std::string(name) + "' (expected scalar, avx2 or avx512)", {},
              "HLLM_ISA");
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
