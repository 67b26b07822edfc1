#pragma once
// hllm's implementation: what a program compiles once, in one translation unit (or its four parts
// in four), so that no other translation unit compiles a kernel (stb style). With CMake, linking
// hllm::hllm does it for you (the hllm_kernels library, built from cmake/hllm_kernels_*.cpp:
// optimised whatever the build type). Without CMake, one .cpp of the program holds just
//
//   #include "hllm/implementation.hpp"
//
// and is compiled with optimisation (-O2) even in a debug build:
//
//   g++ -std=c++20 -O2 -Iinclude -c kernels.cpp
//   g++ -std=c++20 -g -Iinclude main.cpp kernels.o -pthread
//
// It defines the kernel tables, one per ISA (the kernel bodies come from kernels/isa_*.hpp,
// inline), and hllm::kernels::table_for(), which kernels/dispatch.hpp declares; and it
// instantiates Session<>, Llama<> and the six KVCache<KV>, which their headers declare extern. A
// second translation unit including this header breaks the link (table_for defined twice); a
// program with none fails to link with "undefined reference to hllm::kernels::table_for".
//
// It is four parts, hllm/implementation/kernels_scalar.hpp, kernels_avx2.hpp, kernels_avx512.hpp
// and model.hpp, which a build may instead compile as four translation units, one part each, in
// parallel: CMake's hllm_kernels library does (cmake/hllm_kernels_*.cpp).

#include "hllm/implementation/kernels_avx2.hpp"
#include "hllm/implementation/kernels_avx512.hpp"
#include "hllm/implementation/kernels_scalar.hpp"
#include "hllm/implementation/model.hpp"

#undef HLLM_KERNEL_TABLE
#undef HLLM_ATTENTION
