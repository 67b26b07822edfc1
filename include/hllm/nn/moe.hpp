#pragma once
// The mixture-of-experts FFN (Shazeer et al. 2017; Mixtral, Qwen2-MoE, DeepSeek): a router
// scores the experts for each token (router · x, then nn/expert_routing.hpp), the n_used it
// chooses are run on it and their outputs summed, weighted as the routing says; a shared
// expert, where the model has one, runs for every token, scaled by sigmoid(w · x) or ungated.
//
// A forward chunk's tokens are grouped by expert: each chosen expert's matrices are read once
// for all the chunk's tokens that chose it, and an expert no token chose is not read at all
// (in decode, only the n_used chosen experts' weights are read). A single token runs its chosen
// experts together: every gate and up row in one parallel job, every down row in another, where
// one job per expert and projection would cost a wake-up and a barrier each (OLMoE: 8 experts
// of 1024 rows, 16 jobs a layer).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/kernels/activation.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/nn/expert_routing.hpp"
#include "hllm/nn/gated_ffn.hpp"

namespace hllm {

// The routing and gathering buffers of a chunk of up to max_tokens tokens, allocated once per
// session (empty for a dense model).
struct MoeScratch {
  MoeScratch() = default;
  MoeScratch(std::size_t max_tokens, std::size_t dim, std::size_t expert_ffn,
             const ExpertRouting& r)
      : logits(max_tokens * r.n_experts),
        group_scores(r.n_groups),
        weights(max_tokens * r.n_used),
        chosen(max_tokens * r.n_used),
        slots(max_tokens * r.n_used),
        expert_begin(r.n_experts + 1),
        rows_in(max_tokens * dim),
        rows_out(max_tokens * dim),
        token_gate(r.n_used * expert_ffn),
        token_up(r.n_used * expert_ffn),
        token_out(r.n_used * dim),
        products(2 * r.n_used),
        downs(r.n_used),
        order(r.n_used) {}
  AlignedBuffer<float> logits;              // [T][n_experts] router logits, then scores
  AlignedBuffer<float> group_scores;        // [n_groups]
  AlignedBuffer<float> weights;             // [T][n_used]
  std::vector<std::uint32_t> chosen;        // [T][n_used]
  std::vector<std::uint32_t> slots;         // [T·n_used] token·n_used + j, grouped by expert
  std::vector<std::uint32_t> expert_begin;  // [n_experts + 1] each expert's first slot
  AlignedBuffer<float> rows_in;             // [T][dim] the tokens of one expert, gathered
  AlignedBuffer<float> rows_out;            // [T][dim] their outputs
  // One token's chosen experts at once (forward_token):
  AlignedBuffer<float> token_gate;         // [n_used][expert_ffn], then act(gate) ⊙ up
  AlignedBuffer<float> token_up;           // [n_used][expert_ffn]
  AlignedBuffer<float> token_out;          // [n_used][dim]
  std::vector<Compute::Product> products;  // [2·n_used] gate and up of each
  std::vector<Compute::ProductOf> downs;   // [n_used]
  std::vector<std::uint32_t> order;        // [n_used] choices by expert index
};

struct MoeWeights {
  const WeightTensor* router;                      // [n_experts][dim]
  const std::vector<FeedForwardWeights>* experts;  // n_experts
  const FeedForwardWeights* shared;                // nullptr: none
  const float* shared_gate;                        // [dim]; nullptr: ungated (DeepSeek)
  const float* selection_bias;                     // [n_experts]; nullptr: none
};

class MixtureOfExperts {
 public:
  // x: [n_tokens][dim], out: [n_tokens][dim] (must not alias x); gate_scratch, up_scratch:
  // [n_tokens][max(expert_ffn, shared_ffn)] each.
  static void forward(const Compute& compute, const MoeWeights& w, const ExpertRouting& r,
                      GateActivation activation, const float* x, std::size_t n_tokens,
                      std::size_t dim, float* out, MoeScratch& s, float* gate_scratch,
                      float* up_scratch) {
    compute.matmul(*w.router, x, n_tokens, s.logits.data());
    route_tokens(r, s.logits.data(), n_tokens, w.selection_bias, s.group_scores.data(),
                 s.chosen.data(), s.weights.data());
    const std::size_t ffn = (*w.experts)[0].gate.rows;
    const bool one_pass_fits =
        ffn * r.n_used <= s.token_gate.size() &&
        (compute.activation_blocks() == 0 || (ffn / 32) * r.n_used <= compute.activation_blocks());
    if (n_tokens == 1 && one_pass_fits)
      forward_token(compute, w, r, activation, x, dim, ffn, out, s);
    else
      forward_grouped(compute, w, r, activation, x, n_tokens, dim, out, s, gate_scratch,
                      up_scratch);
    add_shared_expert(compute, w, activation, x, n_tokens, dim, out, s, gate_scratch, up_scratch);
  }

 private:
  // out = the chosen experts' outputs of the chunk's tokens, grouped by expert.
  static void forward_grouped(const Compute& compute, const MoeWeights& w, const ExpertRouting& r,
                              GateActivation activation, const float* x, std::size_t n_tokens,
                              std::size_t dim, float* out, MoeScratch& s, float* gate_scratch,
                              float* up_scratch) {
    // Counting sort of the (token, choice) slots by expert, stable in token order.
    const std::size_t n_slots = n_tokens * r.n_used;
    std::fill(s.expert_begin.begin(), s.expert_begin.end(), 0u);
    for (std::size_t i = 0; i < n_slots; ++i) ++s.expert_begin[s.chosen[i] + 1];
    for (std::size_t e = 0; e < r.n_experts; ++e) s.expert_begin[e + 1] += s.expert_begin[e];
    // Scatter: slots in token order land in their expert's range (expert_begin[e] serves as
    // expert e's write cursor and ends at its range's end), then the starts are restored.
    for (std::size_t i = 0; i < n_slots; ++i)
      s.slots[s.expert_begin[s.chosen[i]]++] = static_cast<std::uint32_t>(i);
    for (std::size_t e = r.n_experts; e > 0; --e) s.expert_begin[e] = s.expert_begin[e - 1];
    s.expert_begin[0] = 0;

    std::fill(out, out + n_tokens * dim, 0.0f);
    for (std::size_t e = 0; e < r.n_experts; ++e) {
      const std::uint32_t begin = s.expert_begin[e], end = s.expert_begin[e + 1];
      if (begin == end) continue;  // no token chose it: its weights are not read
      for (std::uint32_t i = begin; i < end; ++i) {
        const float* row = x + (s.slots[i] / r.n_used) * dim;
        std::copy(row, row + dim, s.rows_in.data() + (i - begin) * dim);
      }
      GatedFeedForward::forward(compute, (*w.experts)[e], activation, s.rows_in.data(), end - begin,
                                s.rows_out.data(), gate_scratch, up_scratch);
      for (std::uint32_t i = begin; i < end; ++i) {
        float* o = out + (s.slots[i] / r.n_used) * dim;
        const float weight = s.weights[s.slots[i]];
        const float* y = s.rows_out.data() + (i - begin) * dim;
        for (std::size_t d = 0; d < dim; ++d) o[d] += weight * y[d];
      }
    }
  }

  // out = the chosen experts' outputs of one token (x: [dim]) weighed and summed in expert index
  // order, as forward()'s grouped loop sums them, so a token gets the same bits either way.
  static void forward_token(const Compute& compute, const MoeWeights& w, const ExpertRouting& r,
                            GateActivation activation, const float* x, std::size_t dim,
                            std::size_t ffn, float* out, MoeScratch& s) {
    const std::size_t k = r.n_used;
    for (std::size_t j = 0; j < k; ++j) s.order[j] = static_cast<std::uint32_t>(j);
    std::sort(s.order.begin(), s.order.end(),
              [&](std::uint32_t a, std::uint32_t b) { return s.chosen[a] < s.chosen[b]; });
    for (std::size_t j = 0; j < k; ++j) {
      const FeedForwardWeights& f = (*w.experts)[s.chosen[s.order[j]]];
      s.products[2 * j] = {&f.gate, s.token_gate.data() + j * ffn};
      s.products[2 * j + 1] = {&f.up, s.token_up.data() + j * ffn};
    }
    compute.matmul_fused(s.products, x, 1);
    const kernels::GateActivationFn act = compute.gate_activation(activation);
    for (std::size_t j = 0; j < k; ++j) {
      float* h = s.token_gate.data() + j * ffn;  // [ffn]
      act(h, s.token_up.data() + j * ffn, ffn, h);
      s.downs[j] = {&(*w.experts)[s.chosen[s.order[j]]].down, h, s.token_out.data() + j * dim};
    }
    compute.matmul_each(s.downs, 1);
    std::fill(out, out + dim, 0.0f);
    for (std::size_t j = 0; j < k; ++j) {
      const float weight = s.weights[s.order[j]];
      const float* y = s.token_out.data() + j * dim;
      for (std::size_t d = 0; d < dim; ++d) out[d] += weight * y[d];
    }
  }

  // out += sigmoid(shared_gate · x) · shared(x) for each token, where the model has a shared
  // expert (shared(x) alone where it is ungated).
  static void add_shared_expert(const Compute& compute, const MoeWeights& w,
                                GateActivation activation, const float* x, std::size_t n_tokens,
                                std::size_t dim, float* out, MoeScratch& s, float* gate_scratch,
                                float* up_scratch) {
    if (w.shared == nullptr) return;
    GatedFeedForward::forward(compute, *w.shared, activation, x, n_tokens, s.rows_out.data(),
                              gate_scratch, up_scratch);
    for (std::size_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * dim;
      double dot = 0.0;
      if (w.shared_gate != nullptr)
        for (std::size_t d = 0; d < dim; ++d) dot += static_cast<double>(w.shared_gate[d]) * xt[d];
      const float g =
          w.shared_gate != nullptr ? static_cast<float>(1.0 / (1.0 + std::exp(-dot))) : 1.0f;
      const float* y = s.rows_out.data() + t * dim;
      for (std::size_t d = 0; d < dim; ++d) out[t * dim + d] += g * y[d];
    }
  }
};

}  // namespace hllm
