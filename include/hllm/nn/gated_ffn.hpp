#pragma once
// The gated feed-forward network: down(act(gate(x)) ⊙ up(x)), with act SiLU (SwiGLU, Shazeer
// 2020: Llama and most families) or GELU's tanh approximation (GeGLU: Gemma); and, without a
// gate, the plain MLP down(gelu(up(x))) with the exact GELU (Falcon).

#include <cstddef>

#include "hllm/core/error.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/compute.hpp"

namespace hllm {

struct FeedForwardWeights {
  WeightTensor gate;  // [ffn_dim][dim]; empty in a plain MLP
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
    if (w.gate.empty()) {  // plain MLP (ModelConfig::validate: its activation is the exact GELU)
      compute.matmul(w.up, x, n_tokens, up_scratch);
      compute.kernels().gelu(up_scratch, n_tokens * w.up.rows);
      compute.matmul(w.down, up_scratch, n_tokens, out);
      return;
    }
    compute.gate_up_activated(w.gate, w.up, activation, x, n_tokens, gate_scratch, up_scratch,
                              gate_scratch);
    compute.matmul(w.down, gate_scratch, n_tokens, out);
  }
};

}  // namespace hllm
