#pragma once
// Expert routing of a mixture-of-experts layer: from each token's router logits to the experts
// it runs and the weights of their outputs, as llama.cpp's build_moe_ffn reads its files.
//   - Scores: the softmax over the token's logits (Mixtral, Qwen-MoE, DeepSeek-V2), or the
//     sigmoid of each logit on its own (DeepSeek-V3).
//   - Selection: the n_used highest scores, each plus the expert's selection bias where the
//     layer has one (DeepSeek-V3's e_score_correction_bias, GGUF exp_probs_b), among the
//     experts of the n_groups_used best groups where the experts are grouped (DeepSeek-V3: 256
//     experts in 8 groups of 32, a token choosing among 4; a group scored by the sum of its two
//     best biased scores).
//   - Weights: the chosen experts' unbiased scores, renormalized to sum 1 where the model says,
//     then times `scale` (DeepSeek's routed_scaling_factor).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace hllm {

enum class ExpertGating : std::uint8_t {
  softmax,  // score = softmax over the token's router logits
  sigmoid,  // score = sigmoid(logit), each expert on its own
};

struct ExpertRouting {
  std::size_t n_experts = 0, n_used = 0;
  bool normalized = false;  // the chosen weights divided by their sum
  float scale = 1.0f;       // then times this (DeepSeek's routed_scaling_factor)
  ExpertGating gating = ExpertGating::softmax;
  // > 0: the experts are n_groups groups of consecutive indices, and a token chooses among the
  // experts of the n_groups_used groups whose two best selection scores sum highest.
  std::size_t n_groups = 0, n_groups_used = 0;
};

// For each of n_tokens tokens, the n_used experts of highest selection score in descending
// order, ties to the lower index, and their weights. scores: [n_tokens][n_experts], the router
// logits on entry and the scores on return; bias: [n_experts] added to the scores for choosing
// only, or nullptr; group_scores: [n_groups] scratch; chosen: [n_tokens][n_used] expert
// indices; weights: [n_tokens][n_used].
inline void route_tokens(const ExpertRouting& r, float* scores, std::size_t n_tokens,
                         const float* bias, float* group_scores, std::uint32_t* chosen,
                         float* weights) {
  const auto selection = [&](const float* s, std::size_t e) {
    return bias != nullptr ? s[e] + bias[e] : s[e];
  };
  const std::size_t per_group = r.n_groups > 0 ? r.n_experts / r.n_groups : r.n_experts;
  // A chosen group's score becomes +inf: the scores are finite, so it marks the group.
  constexpr float kChosenGroup = std::numeric_limits<float>::infinity();
  for (std::size_t t = 0; t < n_tokens; ++t) {
    float* s = scores + t * r.n_experts;
    if (r.gating == ExpertGating::softmax) {
      const float max = *std::max_element(s, s + r.n_experts);
      float total = 0.0f;
      for (std::size_t e = 0; e < r.n_experts; ++e) total += std::exp(s[e] - max);
      for (std::size_t e = 0; e < r.n_experts; ++e) s[e] = std::exp(s[e] - max) / total;
    } else {
      for (std::size_t e = 0; e < r.n_experts; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
    }
    if (r.n_groups > 0) {
      for (std::size_t g = 0; g < r.n_groups; ++g) {
        float first = -std::numeric_limits<float>::infinity(), second = first;
        for (std::size_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          const float v = selection(s, e);
          if (v > first) {
            second = first;
            first = v;
          } else if (v > second) {
            second = v;
          }
        }
        group_scores[g] = first + second;
      }
      for (std::size_t j = 0; j < r.n_groups_used; ++j) {
        std::size_t best = r.n_groups;
        for (std::size_t g = 0; g < r.n_groups; ++g)
          if (group_scores[g] != kChosenGroup &&
              (best == r.n_groups || group_scores[g] > group_scores[best]))
            best = g;
        group_scores[best] = kChosenGroup;
      }
    }
    std::uint32_t* c = chosen + t * r.n_used;
    float* w = weights + t * r.n_used;
    float chosen_total = 0.0f;
    for (std::size_t j = 0; j < r.n_used; ++j) {
      // The best selection not yet taken, in a chosen group; strict > keeps the lower index
      // among equals.
      std::size_t best = r.n_experts;
      for (std::size_t e = 0; e < r.n_experts; ++e) {
        if (r.n_groups > 0 && group_scores[e / per_group] != kChosenGroup) continue;
        if (std::find(c, c + j, static_cast<std::uint32_t>(e)) != c + j) continue;
        if (best == r.n_experts || selection(s, e) > selection(s, best)) best = e;
      }
      c[j] = static_cast<std::uint32_t>(best);
      w[j] = s[best];
      chosen_total += w[j];
    }
    // The sum is kept from 0 as llama.cpp keeps it (at float16's smallest normal), which only
    // sigmoid scores can come near.
    if (r.normalized)
      for (std::size_t j = 0; j < r.n_used; ++j) w[j] /= std::max(chosen_total, 6.103515625e-5f);
    if (r.scale != 1.0f)
      for (std::size_t j = 0; j < r.n_used; ++j) w[j] *= r.scale;
  }
}

}  // namespace hllm
