// One of the four translation units of the hllm_kernels library (cmake/hllmKernels.cmake), which
// hllm::hllm links: the scalar kernels and their table. See hllm/implementation.hpp.
#include "hllm/implementation/kernels_scalar.hpp"
