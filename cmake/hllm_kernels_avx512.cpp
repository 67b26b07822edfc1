// One of the four translation units of the hllm_kernels library (cmake/hllmKernels.cmake), which
// hllm::hllm links: the AVX-512 kernels (VNNI, BF16) and their table. See hllm/implementation.hpp.
#include "hllm/implementation/kernels_avx512.hpp"
