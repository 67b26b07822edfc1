#pragma once
// How attention turns a query·key dot product into a softmax score: dot · scale, then, where a
// model caps its attention logits (Gemma 2), softcap · tanh(score / softcap), which bends large
// scores smoothly towards ±softcap. One definition for every kernel and its reference twin.

#include <cmath>

namespace hllm {

struct AttentionScoring {
  float scale = 1.0f;
  float softcap = 0.0f;  // 0: none

  // Implicit from a scale alone: most callers have no cap.
  constexpr AttentionScoring(float score_scale, float cap = 0.0f) noexcept  // NOLINT
      : scale(score_scale), softcap(cap) {}

  bool capped() const noexcept { return softcap > 0.0f; }
  // An already scaled score, capped.
  float cap(float score) const noexcept { return softcap * std::tanh(score / softcap); }
  float operator()(float dot) const noexcept {
    const float score = dot * scale;
    return capped() ? cap(score) : score;
  }
};

}  // namespace hllm
