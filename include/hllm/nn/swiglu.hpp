#pragma once
// The SwiGLU feed-forward network (Shazeer 2020): down(SiLU(gate(x)) ⊙ up(x)).

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

class SwiGLU {
 public:
  // x: [n_tokens][dim], out: [n_tokens][dim] (must not alias x),
  // gate_scratch, up_scratch: [n_tokens][ffn_dim] each.
  static void forward(const Compute& compute, const FeedForwardWeights& w, const float* x,
                      std::size_t n_tokens, float* out, float* gate_scratch, float* up_scratch) {
    compute.gate_up_silu(w.gate, w.up, x, n_tokens, gate_scratch, up_scratch, gate_scratch);
    compute.matmul(w.down, gate_scratch, n_tokens, out);
  }
};

}  // namespace hllm
