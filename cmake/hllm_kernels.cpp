// The one translation unit of a program that compiles hllm's kernels: the hllm_kernels library
// (cmake/hllmKernels.cmake), which hllm::hllm links. See hllm/implementation.hpp.
#include "hllm/implementation.hpp"
