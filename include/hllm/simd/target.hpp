#pragma once
// Macros that open and close a region of code compiled for one ISA, whatever the compiler flags
// of the translation unit. GCC uses `#pragma GCC target`; clang applies a target attribute to
// every function in the region. Only code inside the region may use that ISA's intrinsics, and
// it may only run after a CPUID check (simd/isa.hpp).
//
// The AVX-VNNI region is the AVX2 one plus the VEX-encoded vpdpbusd. The AVX-512 region enables
// F/BW/VL/DQ only. BF16 and VNNI are optional extensions even on
// AVX-512 CPUs, so the kernels that use them are compiled in regions of their own (or carry
// HLLM_TARGET_AVX512_BF16 / _VNNI) and are chosen only after their own CPUID check; the compiler
// can never slip those instructions into the rest of the AVX-512 code.

#if defined(__clang__)
// clang-format off
// (_Pragma takes exactly one string literal, so these lines must not be split.)
#define HLLM_TARGET_AVX2_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define HLLM_TARGET_AVX_VNNI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avxvnni\"))), apply_to = function)")
#define HLLM_TARGET_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq\"))), apply_to = function)")
#define HLLM_TARGET_AVX512_VNNI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni\"))), apply_to = function)")
#define HLLM_TARGET_AVX512_BF16_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16\"))), apply_to = function)")
#define HLLM_TARGET_END _Pragma("clang attribute pop")
// clang-format on
#elif defined(__GNUC__)
#define HLLM_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define HLLM_TARGET_AVX_VNNI_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c,avxvnni\")")
#define HLLM_TARGET_AVX512_BEGIN \
  _Pragma("GCC push_options")    \
      _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq\")")
#define HLLM_TARGET_AVX512_VNNI_BEGIN \
  _Pragma("GCC push_options")         \
      _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni\")")
#define HLLM_TARGET_AVX512_BF16_BEGIN \
  _Pragma("GCC push_options")         \
      _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16\")")
#define HLLM_TARGET_END _Pragma("GCC pop_options")
#else
#error "hllm's run-time ISA dispatch needs GCC or clang"
#endif

#define HLLM_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define HLLM_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
