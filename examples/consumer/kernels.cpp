// Without CMake, one translation unit of the program compiles hllm's kernels and kernel tables
// (stb style): this file. Compile it with optimisation even in a debug build. (CMake's
// hllm::hllm target builds the same code for you, as four translation units,
// cmake/hllm_kernels_*.cpp; CMakeLists.txt here does not list this one.)
#include "hllm/implementation.hpp"
