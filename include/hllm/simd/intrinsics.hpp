#pragma once
// <immintrin.h>, read with GCC 12's false warnings off: its AVX-512 intrinsics initialise their
// "undefined" registers from themselves, which its own -Wuninitialized then reports at every use
// in the includer; the state at the header's lines decides, so the header is read with those
// two warnings off. Include this instead of <immintrin.h>.

#include "hllm/simd/cpu_features.hpp"  // HLLM_X86

#if HLLM_X86
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
