#pragma once
// Token sampling: turn one step's logits into the next token id.
//
// Each stage of the pipeline is a free function doing one job on a CandidateList, so every stage
// can be tested on a hand-made distribution. Sampler strings the stages together in a fixed order
// and owns the random number generator and the scratch buffers.
//
// Reproducibility: the random stream is fully specified (std::mt19937_64, whose output the C++
// standard fixes, converted to a double by hand rather than through
// std::uniform_real_distribution, whose algorithm is implementation-defined), and every sort uses
// a strict total order, so the same seed and logits give the same tokens with any standard
// library. The one residual source of difference is std::exp, which libms may round differently
// in the last ulp; that can only change a draw that lands within an ulp of a bucket boundary.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"

namespace hllm {

struct Candidate {
  std::int32_t id;
  float logit;
  float p;  // probability; only meaningful after softmax() and until the logits change
};

using CandidateList = std::vector<Candidate>;

namespace detail {

// Descending logit, then ascending id. With distinct ids and no NaN this is a strict total order,
// so std::sort (not stable) and std::nth_element give the same result on every implementation.
inline bool ranks_before(const Candidate& a, const Candidate& b) noexcept {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

// NaN breaks the strict weak ordering the sorts rely on (undefined behaviour, out-of-bounds reads
// in some implementations), so every sorting stage checks for it first.
inline void require_no_nan(const CandidateList& candidates, const char* stage) {
  for (const Candidate& c : candidates) {
    if (std::isnan(c.logit)) {
      throw Error(ErrorKind::invalid_argument,
                  std::string(stage) + ": logit of token " + std::to_string(c.id) + " is NaN");
    }
  }
}

inline void require_vocab_fits_int32(std::size_t size) {
  if (size > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw Error(ErrorKind::out_of_range,
                "vocabulary of " + std::to_string(size) + " logits does not fit int32 token ids");
  }
}

}  // namespace detail

// Refills `out` with one candidate per logit (id = index, p = 0). Reuses out's capacity, so a
// caller that keeps the list across steps does not allocate once it has seen the vocabulary size.
inline void fill_candidates(std::span<const float> logits, CandidateList& out) {
  detail::require_vocab_fits_int32(logits.size());
  out.clear();
  out.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    out.push_back({static_cast<std::int32_t>(i), logits[i], 0.0f});
  }
}

inline CandidateList make_candidates(std::span<const float> logits) {
  CandidateList candidates;
  fill_candidates(logits, candidates);
  return candidates;
}

// Repetition penalty as in CTRL (Keskar et al. 2019) and llama.cpp: for each distinct token in
// `recent_tokens`, a positive logit is divided by `penalty` and a non-positive one multiplied by
// it, so penalty > 1 always makes the token less likely (dividing a negative logit would raise
// it). A token that occurs several times in `recent_tokens` is penalised once.
//
// `seen` is scratch: it is grown to logits.size() and left all-zero on return, so a caller that
// keeps it across steps does not allocate after the first call. Throws invalid_argument for a
// non-finite or non-positive penalty, out_of_range for a token id outside the logits.
inline void apply_repetition_penalty(std::span<float> logits,
                                     std::span<const std::int32_t> recent_tokens, float penalty,
                                     std::vector<std::uint8_t>& seen) {
  if (!(penalty > 0.0f) || !std::isfinite(penalty)) {
    throw Error(ErrorKind::invalid_argument,
                "repeat_penalty must be finite and > 0, got " + std::to_string(penalty));
  }
  for (const std::int32_t token : recent_tokens) {
    if (token < 0 || static_cast<std::size_t>(token) >= logits.size()) {
      throw Error(ErrorKind::out_of_range, "token id " + std::to_string(token) +
                                               " outside vocabulary of " +
                                               std::to_string(logits.size()));
    }
  }
  if (penalty == 1.0f) return;
  if (seen.size() < logits.size()) seen.resize(logits.size(), 0);
  for (const std::int32_t token : recent_tokens) {
    std::uint8_t& already_penalised = seen[static_cast<std::size_t>(token)];
    if (already_penalised) continue;
    already_penalised = 1;
    float& logit = logits[static_cast<std::size_t>(token)];
    logit = logit > 0.0f ? logit / penalty : logit * penalty;
  }
  for (const std::int32_t token : recent_tokens) seen[static_cast<std::size_t>(token)] = 0;
}

// Convenience overload with its own (allocated) scratch.
inline void apply_repetition_penalty(std::span<float> logits,
                                     std::span<const std::int32_t> recent_tokens, float penalty) {
  std::vector<std::uint8_t> seen;
  apply_repetition_penalty(logits, recent_tokens, penalty, seen);
}

// Sorts by descending logit (ties: lower id first) and sets p to the softmax of the logits over
// the list. The max logit is subtracted before exp so exp cannot overflow; the sum is kept in
// double so a 100k-token vocabulary does not lose the tail. -inf logits (masked tokens) get
// p = 0. Throws invalid_argument on a NaN logit, or if the maximum is not finite (all -inf, or
// +inf), since no distribution exists then. An empty list is left alone.
inline void softmax(CandidateList& candidates) {
  if (candidates.empty()) return;
  detail::require_no_nan(candidates, "softmax");
  std::sort(candidates.begin(), candidates.end(), detail::ranks_before);
  const float max_logit = candidates.front().logit;
  if (!std::isfinite(max_logit)) {
    throw Error(ErrorKind::invalid_argument,
                "softmax: maximum logit is " + std::to_string(max_logit) + ", not finite");
  }
  double sum = 0.0;
  for (Candidate& c : candidates) {
    c.p = std::exp(c.logit - max_logit);
    sum += c.p;
  }
  for (Candidate& c : candidates) c.p = static_cast<float>(c.p / sum);
}

// Keeps the k candidates with the highest logits, sorted by descending logit. Ties are broken by
// lower id first, both in the order and at the cut, so the result is deterministic. k <= 0 is a
// no-op (the list is not even sorted); k >= size keeps everything but sorts. p is left stale,
// because truncation changes the normalisation: call softmax() if you need probabilities.
inline void top_k(CandidateList& candidates, int k) {
  if (k <= 0 || candidates.empty()) return;
  detail::require_no_nan(candidates, "top_k");
  const std::size_t keep = std::min(static_cast<std::size_t>(k), candidates.size());
  const auto cut = candidates.begin() + static_cast<std::ptrdiff_t>(keep);
  // nth_element + sort of the head is O(n + k log k), versus O(n log k) for partial_sort.
  if (cut != candidates.end()) {
    std::nth_element(candidates.begin(), cut - 1, candidates.end(), detail::ranks_before);
  }
  std::sort(candidates.begin(), cut, detail::ranks_before);
  candidates.resize(keep);
}

// Nucleus sampling (Holtzman et al. 2019), with llama.cpp's boundary: keeps the smallest prefix
// of the list, in descending probability order, whose cumulative probability is >= p, and never
// fewer than min_keep. p >= 1 is a no-op; p <= 0 keeps min_keep (at least one). Calls softmax()
// first, so on return the list is sorted and p holds the probabilities before truncation (not
// renormalised over the survivors). Throws invalid_argument for NaN p.
inline void top_p(CandidateList& candidates, float p, std::size_t min_keep = 1) {
  if (std::isnan(p)) throw Error(ErrorKind::invalid_argument, "top_p: p is NaN");
  if (p >= 1.0f || candidates.empty()) return;
  softmax(candidates);
  const std::size_t at_least = std::max<std::size_t>(min_keep, 1);
  double cumulative = 0.0;
  std::size_t keep = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    cumulative += candidates[i].p;
    if (cumulative >= p && i + 1 >= at_least) {
      keep = i + 1;
      break;
    }
  }
  candidates.resize(keep);
}

// Min-p sampling (Nguyen et al. 2024): keeps the candidates whose probability is >= p times the
// largest probability, never fewer than min_keep. Unlike top-p the cut adapts to how peaked the
// distribution is. p <= 0 is a no-op. Calls softmax() first (same state on return as top_p).
// Throws invalid_argument for NaN p.
inline void min_p(CandidateList& candidates, float p, std::size_t min_keep = 1) {
  if (std::isnan(p)) throw Error(ErrorKind::invalid_argument, "min_p: p is NaN");
  if (p <= 0.0f || candidates.empty()) return;
  softmax(candidates);
  const float threshold = p * candidates.front().p;
  // Sorted by descending logit means descending p, so the survivors are a prefix.
  std::size_t keep = 0;
  while (keep < candidates.size() && candidates[keep].p >= threshold) ++keep;
  keep = std::min(std::max({keep, min_keep, std::size_t{1}}), candidates.size());
  candidates.resize(keep);
}

// Divides every logit by `temperature`: < 1 sharpens the distribution, > 1 flattens it. p is
// left stale. Throws invalid_argument unless temperature is finite and > 0 (greedy decoding,
// temperature 0, is Sampler's job, not a division by zero).
inline void apply_temperature(CandidateList& candidates, float temperature) {
  if (!(temperature > 0.0f) || !std::isfinite(temperature)) {
    throw Error(ErrorKind::invalid_argument,
                "temperature must be finite and > 0, got " + std::to_string(temperature));
  }
  for (Candidate& c : candidates) c.logit /= temperature;
}

// Index of the largest logit, lowest index on ties. Throws invalid_argument if empty.
inline std::int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw Error(ErrorKind::invalid_argument, "argmax: logits are empty");
  detail::require_vocab_fits_int32(logits.size());
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: an equal later logit does not win
  }
  return static_cast<std::int32_t>(best);
}

// Maps 64 random bits to a double in [0, 1): the top 53 bits times 2^-53. Every result is exact
// and the mapping is the same everywhere, unlike std::uniform_real_distribution.
constexpr double unit_interval_from_bits(std::uint64_t bits) noexcept {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Inverse-CDF draw with u in [0, 1): returns the first candidate (in list order) at which the
// cumulative probability exceeds u times the total. Scaling by the actual total, which rounding
// keeps only near 1, stops rounding from favouring the last candidate. Zero-probability
// candidates are never returned. Throws invalid_argument if no candidate has p > 0.
inline std::int32_t draw(const CandidateList& candidates, double u) {
  double total = 0.0;
  for (const Candidate& c : candidates) {
    if (c.p > 0.0f) total += c.p;
  }
  if (!(total > 0.0)) {
    throw Error(ErrorKind::invalid_argument, "draw: no candidate has positive probability");
  }
  const double target = u * total;
  double cumulative = 0.0;
  std::int32_t last_positive = -1;
  for (const Candidate& c : candidates) {
    if (!(c.p > 0.0f)) continue;
    cumulative += c.p;
    last_positive = c.id;
    if (target < cumulative) return c.id;
  }
  return last_positive;  // reached only when rounding puts target at the very top
}

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 40;               // 0: disabled
  float top_p = 0.95f;          // 1: disabled; must be in (0, 1]
  float min_p = 0.05f;          // 0: disabled; must be in [0, 1]
  float repeat_penalty = 1.1f;  // 1: disabled; must be > 0
  int repeat_last_n = 64;       // how many of the most recent tokens are penalised; 0: none
  std::uint64_t seed = 0;
};

// Throws hllm::Error(invalid_argument), naming the field, for any parameter outside its range
// or NaN. The comparisons are written so that NaN fails them.
inline void validate_sampler_params(const SamplerParams& params) {
  auto reject = [](const char* field, const std::string& rule, const std::string& value) {
    throw Error(ErrorKind::invalid_argument,
                std::string("SamplerParams.") + field + " must be " + rule + ", got " + value);
  };
  if (std::isnan(params.temperature) || std::isinf(params.temperature)) {
    reject("temperature", "finite", std::to_string(params.temperature));
  }
  if (params.top_k < 0) reject("top_k", ">= 0", std::to_string(params.top_k));
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    reject("top_p", "in (0, 1]", std::to_string(params.top_p));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    reject("min_p", "in [0, 1]", std::to_string(params.min_p));
  }
  if (!(params.repeat_penalty > 0.0f) || std::isinf(params.repeat_penalty)) {
    reject("repeat_penalty", "finite and > 0", std::to_string(params.repeat_penalty));
  }
  if (params.repeat_last_n < 0) {
    reject("repeat_last_n", ">= 0", std::to_string(params.repeat_last_n));
  }
}

// The full pipeline: repetition penalty over the last repeat_last_n tokens of history -> top-k
// -> top-p -> min-p -> temperature -> draw. Truncation happens at temperature 1, so temperature
// only reshapes the survivors (this order is part of the contract; llama.cpp's default chain
// differs).
// Greedy mode (temperature <= 0) applies the penalty and then takes the argmax; it does not
// advance the random stream. Not thread-safe: one Sampler per generation stream.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {
    validate_sampler_params(params_);
  }

  const SamplerParams& params() const noexcept { return params_; }

  // Restarts the random stream as if the Sampler had been built with this seed.
  void reseed(std::uint64_t seed) { rng_.seed(seed); }

  // Throws invalid_argument for empty logits, a NaN or +inf logit, or all logits -inf, and
  // out_of_range for a penalised history token outside the vocabulary. After the first call with
  // a given vocabulary size it does not allocate.
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history) {
    check_logits(logits);
    logits_.assign(logits.begin(), logits.end());

    if (params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0) {
      // Sized even while the history is still empty, so the first call does the allocating.
      if (seen_.size() < logits_.size()) seen_.resize(logits_.size(), 0);
      const std::size_t window =
          std::min(history.size(), static_cast<std::size_t>(params_.repeat_last_n));
      apply_repetition_penalty(logits_, history.last(window), params_.repeat_penalty, seen_);
    }

    if (params_.temperature <= 0.0f) return argmax(logits_);

    fill_candidates(logits_, candidates_);
    top_k(candidates_, params_.top_k);
    top_p(candidates_, params_.top_p);
    min_p(candidates_, params_.min_p);
    apply_temperature(candidates_, params_.temperature);
    softmax(candidates_);
    return draw(candidates_, unit_interval_from_bits(rng_()));
  }

 private:
  static void check_logits(std::span<const float> logits) {
    if (logits.empty()) throw Error(ErrorKind::invalid_argument, "sample: logits are empty");
    bool any_above_minus_inf = false;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const float logit = logits[i];
      if (std::isnan(logit) || logit == std::numeric_limits<float>::infinity()) {
        throw Error(ErrorKind::invalid_argument,
                    "sample: logit of token " + std::to_string(i) + " is " + std::to_string(logit));
      }
      any_above_minus_inf = any_above_minus_inf || logit > -std::numeric_limits<float>::infinity();
    }
    if (!any_above_minus_inf) {
      throw Error(ErrorKind::invalid_argument, "sample: every logit is -inf");
    }
  }

  SamplerParams params_;
  std::mt19937_64 rng_;
  // Scratch kept across calls so steady-state sampling does not allocate.
  std::vector<float> logits_;
  CandidateList candidates_;
  std::vector<std::uint8_t> seen_;
};

}  // namespace hllm
