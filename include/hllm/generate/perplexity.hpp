#pragma once
// Perplexity arithmetic, kept apart from any model so that it can be checked on hand-made logits.
//
// Perplexity is exp of the mean negative log-likelihood (NLL) of the tokens scored. We follow
// llama.cpp's perplexity tool so numbers are comparable: the text is cut into non-overlapping
// windows of `context` tokens, each evaluated from an empty KV cache with BOS in its first
// position, and only the second half of each window is scored (positions context/2 .. context-2
// predict the next token), so every scored token sees at least context/2 tokens of history.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "hllm/core/error.hpp"

namespace hllm {

// -log softmax(logits)[target], computed in double with the maximum subtracted so that large
// logits cannot overflow exp. Throws hllm::Error: invalid_argument for empty logits or a
// non-finite maximum (NaN or +inf anywhere, or all -inf), out_of_range for a target outside the
// logits. A target whose logit is -inf has infinite NLL, which is returned as +inf.
inline double token_nll(std::span<const float> logits, std::int32_t target) {
  if (logits.empty()) throw Error(ErrorKind::invalid_argument, "token_nll: logits are empty");
  if (target < 0 || static_cast<std::size_t>(target) >= logits.size())
    throw Error(ErrorKind::out_of_range, "token_nll: target " + std::to_string(target) +
                                             " is outside " + std::to_string(logits.size()) +
                                             " logits");
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) {
    if (std::isnan(x)) throw Error(ErrorKind::invalid_argument, "token_nll: a logit is NaN");
    if (x > max) max = x;
  }
  if (!std::isfinite(max))
    throw Error(ErrorKind::invalid_argument,
                "token_nll: maximum logit is " + std::to_string(max) + ", not finite");
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  return std::log(sum) + max - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

// Running mean of per-token NLLs, with the standard error of the mean carried over to the
// perplexity: for PPL = exp(mean), d PPL = PPL * d mean (llama.cpp reports the same estimate).
class PerplexityAccumulator {
 public:
  void add(double nll) {
    sum_ += nll;
    sum_squares_ += nll * nll;
    ++count_;
  }
  std::size_t count() const noexcept { return count_; }
  double mean_nll() const noexcept { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }
  double perplexity() const noexcept { return std::exp(mean_nll()); }
  // Standard error of the mean NLL: sqrt(variance / (n - 1)); 0 with fewer than two tokens.
  double mean_nll_error() const noexcept {
    if (count_ < 2) return 0.0;
    const double n = static_cast<double>(count_);
    const double mean = sum_ / n;
    const double variance = std::max(0.0, sum_squares_ / n - mean * mean);
    return std::sqrt(variance / (n - 1.0));
  }
  double perplexity_error() const noexcept { return perplexity() * mean_nll_error(); }

 private:
  double sum_ = 0.0;
  double sum_squares_ = 0.0;
  std::size_t count_ = 0;
};

// How a token sequence splits into perplexity windows.
struct PerplexityPlan {
  std::size_t windows;       // whole windows of `context` tokens; a partial tail is dropped
  std::size_t first_scored;  // first position in a window whose logits are scored
  std::size_t scored_per_window;
};

// Throws hllm::Error(invalid_argument) for a context below 4 tokens (no second half to score),
// and capacity when the text is shorter than one window, naming both counts.
inline PerplexityPlan plan_perplexity(std::size_t n_tokens, std::size_t context) {
  if (context < 4)
    throw Error(ErrorKind::invalid_argument,
                "perplexity needs a context of at least 4 tokens, got " + std::to_string(context));
  if (n_tokens < context)
    throw Error(ErrorKind::capacity,
                "the text has " + std::to_string(n_tokens) + " tokens, fewer than one window of " +
                    std::to_string(context) + "; give a longer text or a smaller context (-c)");
  const std::size_t first = context / 2;
  return {n_tokens / context, first, context - 1 - first};
}

// Adds the NLLs of one window: `logits` holds [context][vocab] (Logits::all), `window` the
// tokens evaluated; position j's logits are scored against window[j + 1] for j from
// plan.first_scored to context - 2.
inline void score_window(std::span<const float> logits, std::span<const std::int32_t> window,
                         std::size_t vocab, const PerplexityPlan& plan,
                         PerplexityAccumulator& acc) {
  const std::size_t context = window.size();
  if (vocab == 0 || logits.size() != context * vocab)
    throw Error(ErrorKind::invalid_argument, "score_window: " + std::to_string(logits.size()) +
                                                 " logits for " + std::to_string(context) +
                                                 " tokens of a " + std::to_string(vocab) +
                                                 "-token vocabulary");
  for (std::size_t j = plan.first_scored; j + 1 < context; ++j)
    acc.add(token_nll(logits.subspan(j * vocab, vocab), window[j + 1]));
}

}  // namespace hllm
