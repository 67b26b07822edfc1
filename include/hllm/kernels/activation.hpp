#pragma once
// The activation of a gated FFN's gate (nn/gated_ffn.hpp), as a model config names it.

#include <string_view>

namespace hllm {

enum class GateActivation {
  silu,       // SwiGLU: g / (1 + e^-g)
  gelu_tanh,  // GeGLU: GELU's tanh approximation (Gemma; PyTorch's gelu(approximate="tanh"))
};

inline std::string_view gate_activation_name(GateActivation a) noexcept {
  return a == GateActivation::silu ? "silu" : "gelu_tanh";
}

}  // namespace hllm
