#pragma once
// The norm of a model's blocks and of its output, as its config names it: RMSNorm (Llama and
// most families) or LayerNorm (Command-R, weight only; Falcon, with a bias).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hllm/core/error.hpp"
#include "hllm/core/tensor.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/dispatch.hpp"

namespace hllm {

enum class NormKind : std::uint8_t {
  rms,    // x / sqrt(mean(x²) + eps) · w
  layer,  // (x − mean) / sqrt(var + eps) · w (+ b)
};

inline const char* norm_kind_name(NormKind k) noexcept {
  return k == NormKind::rms ? "RMSNorm" : "LayerNorm";
}

class Norm {
 public:
  Norm(NormKind kind, float eps) : kind_(kind), eps_(eps) {
    if (!(eps > 0.0f) || !std::isfinite(eps))
      throw Error(ErrorKind::invalid_argument, "norm epsilon must be positive and finite");
  }
  NormKind kind() const noexcept { return kind_; }
  float eps() const noexcept { return eps_; }

  // x, out: [n_tokens][dim] (may alias), weight: [1][dim] f32, bias: [1][dim] f32 or empty
  // (none; LayerNorm only).
  void forward(MatrixView<const float> x, const WeightTensor& weight, const WeightTensor& bias,
               MatrixView<float> out, const kernels::KernelTable& kernels) const {
    forward(x, weight.as<float>(), bias.empty() ? nullptr : bias.as<float>(), out, kernels);
  }
  // The same on raw vectors: weight: [dim], bias: [dim] or nullptr.
  void forward(MatrixView<const float> x, const float* weight, const float* bias,
               MatrixView<float> out, const kernels::KernelTable& kernels) const {
    for (std::size_t t = 0; t < x.extent(0); ++t) {
      if (kind_ == NormKind::rms)
        kernels.rms_norm(x.row(t).data(), weight, x.extent(1), eps_, out.row(t).data());
      else
        kernels.layer_norm(x.row(t).data(), weight, bias, x.extent(1), eps_, out.row(t).data());
    }
  }

 private:
  NormKind kind_;
  float eps_;
};

}  // namespace hllm
