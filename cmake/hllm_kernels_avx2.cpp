// One of the four translation units of the hllm_kernels library (cmake/hllmKernels.cmake), which
// hllm::hllm links: the AVX2 and AVX-VNNI kernels and their tables. See hllm/implementation.hpp.
#include "hllm/implementation/kernels_avx2.hpp"
