// One of the four translation units of the hllm_kernels library (cmake/hllmKernels.cmake), which
// hllm::hllm links: table_for and the model code for the dynamic spec. See hllm/implementation.hpp.
#include "hllm/implementation/model.hpp"
