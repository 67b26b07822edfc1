#pragma once
// The gated feed-forward network: down(act(gate(x)) ⊙ up(x)), with act SiLU (SwiGLU, Shazeer
// 2020: Llama and most families) or GELU's tanh approximation (GeGLU: Gemma).

#include <cstddef>

#include "hllm/core/error.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/compute.hpp"

namespace hllm {

struct FeedForwardWeights {
  WeightTensor gate;  // [ffn_dim][dim]
  WeightTensor up;    // [ffn_dim][dim]
  WeightTensor down;  // [dim][ffn_dim]
};

class GatedFeedForward {
 public:
  // x: [n_tokens][dim], out: [n_tokens][dim] (must not alias x),
  // gate_scratch, up_scratch: [n_tokens][ffn_dim] each.
  static void forward(const Compute& compute, const FeedForwardWeights& w,
                      GateActivation activation, const float* x, std::size_t n_tokens, float* out,
                      float* gate_scratch, float* up_scratch) {
    compute.gate_up_activated(w.gate, w.up, activation, x, n_tokens, gate_scratch, up_scratch,
                              gate_scratch);
    compute.matmul(w.down, gate_scratch, n_tokens, out);
  }
};

}  // namespace hllm
