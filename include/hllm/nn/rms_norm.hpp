#pragma once
// RMSNorm (Zhang & Sennrich 2019), as Llama uses it: y = x / sqrt(mean(x^2) + eps) * weight.

#include <cmath>
#include <cstddef>

#include "hllm/core/error.hpp"
#include "hllm/core/tensor.hpp"
#include "hllm/kernels/dispatch.hpp"

namespace hllm {

class RMSNorm {
 public:
  explicit RMSNorm(float eps) : eps_(eps) {
    if (!(eps > 0.0f) || !std::isfinite(eps))
      throw Error(ErrorKind::invalid_argument, "RMSNorm epsilon must be positive and finite");
  }
  float eps() const noexcept { return eps_; }

  // x, out: [n_tokens][dim] (may alias), weight: [dim]; on the kernels of one ISA.
  void forward(MatrixView<const float> x, const float* weight, MatrixView<float> out,
               const kernels::KernelTable& kernels = kernels::active()) const {
    for (std::size_t t = 0; t < x.extent(0); ++t)
      kernels.rms_norm(x.row(t).data(), weight, x.extent(1), eps_, out.row(t).data());
  }

 private:
  float eps_;
};

}  // namespace hllm
