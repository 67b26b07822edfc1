#pragma once
// The activation of an FFN (nn/gated_ffn.hpp), as a model config names it: of a gated FFN's gate,
// or of a plain MLP's hidden layer.

#include <string_view>

namespace hllm {

enum class GateActivation {
  silu,       // SwiGLU: g / (1 + e^-g)
  gelu_tanh,  // GeGLU: GELU's tanh approximation (Gemma; PyTorch's gelu(approximate="tanh"))
  gelu,       // exact GELU, x/2 · (1 + erf(x/√2)), of a plain MLP (Falcon: PyTorch's nn.GELU())
};

inline std::string_view gate_activation_name(GateActivation a) noexcept {
  switch (a) {
    case GateActivation::silu: return "silu";
    case GateActivation::gelu_tanh: return "gelu_tanh";
    case GateActivation::gelu: return "gelu";
  }
  return "?";
}

}  // namespace hllm
