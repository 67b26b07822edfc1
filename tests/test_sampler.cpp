// Tests for hllm/generate/sampler.hpp and hllm/generate/generate.hpp.

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"

// Counts every allocation in the process, so a test can check that steady-state sampling does
// not allocate. Replacing the global operator new is the only portable way to observe that.
// noinline keeps GCC from inlining the free() into callers and then warning
// (-Wmismatched-new-delete) that it pairs with a `new` expression, which it does not.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

[[gnu::noinline]] void* operator new(std::size_t size) {
  ++g_allocations;
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* memory) noexcept { std::free(memory); }
[[gnu::noinline]] void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace hllm {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<std::int32_t> ids_of(const CandidateList& candidates) {
  std::vector<std::int32_t> ids;
  for (const Candidate& c : candidates) ids.push_back(c.id);
  return ids;
}

// Sampler parameters with every optional stage disabled: plain sampling at temperature 1.
SamplerParams plain_params(std::uint64_t seed = 0) {
  SamplerParams params;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.repeat_penalty = 1.0f;
  params.seed = seed;
  return params;
}

SamplerParams greedy_params() {
  SamplerParams params = plain_params();
  params.temperature = 0.0f;
  return params;
}

// Logits whose softmax is exactly the given probabilities (up to rounding): log p.
std::vector<float> logits_for(const std::vector<double>& probabilities) {
  std::vector<float> logits;
  for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// The distribution used by most truncation tests, with ids deliberately out of order:
//   id 0: 0.15, id 1: 0.50, id 2: 0.05, id 3: 0.30
// Sorted: 1 (0.50), 3 (0.30), 0 (0.15), 2 (0.05); cumulative 0.50, 0.80, 0.95, 1.00.
// Every threshold used below is at least 0.05 away from a boundary, so float rounding in
// softmax cannot move a cut.
std::vector<float> four_token_logits() { return logits_for({0.15, 0.50, 0.05, 0.30}); }

template <class Fn>
void expect_error_kind(Fn&& fn, ErrorKind kind, const std::string& mentions = {}) {
  try {
    fn();
    ADD_FAILURE() << "expected hllm::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    if (!mentions.empty()) {
      EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// softmax

TEST(Softmax, SortsDescendingWithTiesByLowerIdAndNormalises) {
  CandidateList candidates = make_candidates(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f});
  softmax(candidates);
  EXPECT_EQ(ids_of(candidates), (std::vector<std::int32_t>{1, 3, 2, 0}));
  // p ∝ exp(l - 3) = 1, 1, e^-1, e^-2.
  const double sum = 2.0 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(candidates[0].p, 1.0 / sum, 1e-6);
  EXPECT_NEAR(candidates[1].p, 1.0 / sum, 1e-6);
  EXPECT_NEAR(candidates[2].p, std::exp(-1.0) / sum, 1e-6);
  EXPECT_NEAR(candidates[3].p, std::exp(-2.0) / sum, 1e-6);
}

TEST(Softmax, IsStableForHugeLogitsAndGivesMaskedTokensZero) {
  CandidateList candidates = make_candidates(std::vector<float>{1000.0f, 999.0f, -kInf});
  softmax(candidates);
  EXPECT_NEAR(candidates[0].p, 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(candidates[1].p, std::exp(-1.0) / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(candidates[2].id, 2);
  EXPECT_EQ(candidates[2].p, 0.0f);
}

TEST(Softmax, RejectsNaNAndAllMinusInf) {
  CandidateList with_nan = make_candidates(std::vector<float>{1.0f, kNaN});
  expect_error_kind([&] { softmax(with_nan); }, ErrorKind::invalid_argument);
  CandidateList all_masked = make_candidates(std::vector<float>{-kInf, -kInf});
  expect_error_kind([&] { softmax(all_masked); }, ErrorKind::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// top-k

TEST(TopK, KeepsTheKHighestSorted) {
  // Logits 0.1 0.9 0.5 0.7 0.3 -> ranking 1, 3, 2, 4, 0; k = 3 keeps {1, 3, 2}.
  CandidateList candidates = make_candidates(std::vector<float>{0.1f, 0.9f, 0.5f, 0.7f, 0.3f});
  top_k(candidates, 3);
  EXPECT_EQ(ids_of(candidates), (std::vector<std::int32_t>{1, 3, 2}));
}

TEST(TopK, BreaksTiesAtTheCutByLowerId) {
  // Ids 1, 2, 3 tie at 2.0; k = 2 must keep the two lowest ids of the tie: {1, 2}.
  CandidateList candidates = make_candidates(std::vector<float>{1.0f, 2.0f, 2.0f, 2.0f, 0.0f});
  top_k(candidates, 2);
  EXPECT_EQ(ids_of(candidates), (std::vector<std::int32_t>{1, 2}));
}

TEST(TopK, NonPositiveKIsANoOpAndLargeKKeepsAll) {
  const std::vector<float> logits{0.1f, 0.9f, 0.5f};
  CandidateList untouched = make_candidates(logits);
  top_k(untouched, 0);
  EXPECT_EQ(ids_of(untouched), (std::vector<std::int32_t>{0, 1, 2}));
  top_k(untouched, -5);
  EXPECT_EQ(ids_of(untouched), (std::vector<std::int32_t>{0, 1, 2}));

  CandidateList all = make_candidates(logits);
  top_k(all, 10);
  EXPECT_EQ(ids_of(all), (std::vector<std::int32_t>{1, 2, 0}));
}

// ---------------------------------------------------------------------------------------------
// top-p

TEST(TopP, KeepsSmallestPrefixReachingP) {
  // Cumulative 0.50 (id 1), 0.80 (id 3), 0.95 (id 0), 1.00 (id 2).
  struct Case {
    float p;
    std::vector<std::int32_t> expected;
  };
  const std::vector<Case> cases = {
      {0.40f, {1}},           // 0.50 >= 0.40 already
      {0.70f, {1, 3}},        // 0.50 < 0.70 <= 0.80
      {0.85f, {1, 3, 0}},     // 0.80 < 0.85 <= 0.95
      {0.99f, {1, 3, 0, 2}},  // needs everything
      {1.00f, {0, 1, 2, 3}},  // disabled: untouched, not even sorted
  };
  for (const Case& c : cases) {
    CandidateList candidates = make_candidates(four_token_logits());
    top_p(candidates, c.p);
    EXPECT_EQ(ids_of(candidates), c.expected) << "p = " << c.p;
  }
}

TEST(TopP, CumulativeProbabilityExactlyHittingPStopsThere) {
  // Four equal logits: p = 0.25 each, exactly representable, cumulative 0.25, 0.5, 0.75, 1.
  // p = 0.5 is reached exactly after two tokens (>=, as llama.cpp), so two survive; the next
  // float above 0.5 needs a third; p = 0.25 is reached by the first token alone.
  const std::vector<float> uniform(4, 0.0f);
  CandidateList exactly_half = make_candidates(uniform);
  top_p(exactly_half, 0.5f);
  EXPECT_EQ(ids_of(exactly_half), (std::vector<std::int32_t>{0, 1}));

  CandidateList just_above_half = make_candidates(uniform);
  top_p(just_above_half, std::nextafter(0.5f, 1.0f));
  EXPECT_EQ(ids_of(just_above_half), (std::vector<std::int32_t>{0, 1, 2}));

  CandidateList quarter = make_candidates(uniform);
  top_p(quarter, 0.25f);
  EXPECT_EQ(ids_of(quarter), (std::vector<std::int32_t>{0}));
}

TEST(TopP, HonoursMinKeep) {
  // p = 0.4 alone keeps {1}; min_keep = 3 forces {1, 3, 0}; min_keep above the size keeps all;
  // min_keep = 0 still keeps one token.
  CandidateList three = make_candidates(four_token_logits());
  top_p(three, 0.4f, 3);
  EXPECT_EQ(ids_of(three), (std::vector<std::int32_t>{1, 3, 0}));

  CandidateList all = make_candidates(four_token_logits());
  top_p(all, 0.4f, 10);
  EXPECT_EQ(ids_of(all), (std::vector<std::int32_t>{1, 3, 0, 2}));

  CandidateList one = make_candidates(four_token_logits());
  top_p(one, 0.0f, 0);
  EXPECT_EQ(ids_of(one), (std::vector<std::int32_t>{1}));
}

// ---------------------------------------------------------------------------------------------
// min-p

TEST(MinP, KeepsTokensWithAtLeastPTimesTheMaxProbability) {
  // Max probability 0.50 (id 1); the others are 0.30 (id 3), 0.15 (id 0), 0.05 (id 2).
  struct Case {
    float p;
    std::vector<std::int32_t> expected;
  };
  const std::vector<Case> cases = {
      {0.50f, {1, 3}},        // threshold 0.25: 0.30 survives, 0.15 does not
      {0.20f, {1, 3, 0}},     // threshold 0.10: 0.05 dropped
      {0.05f, {1, 3, 0, 2}},  // threshold 0.025: all survive
      {1.00f, {1}},           // only the maximum
      {0.00f, {0, 1, 2, 3}},  // disabled: untouched, not even sorted
  };
  for (const Case& c : cases) {
    CandidateList candidates = make_candidates(four_token_logits());
    min_p(candidates, c.p);
    EXPECT_EQ(ids_of(candidates), c.expected) << "p = " << c.p;
  }
}

TEST(MinP, ProbabilityExactlyAtThresholdSurvives) {
  // Ids 0 and 1 tie for the maximum, so their ratio to it is exactly 1 and min_p = 1 keeps both
  // (>=); id 2 is below. With all four equal, min_p = 1 keeps all four.
  CandidateList tie = make_candidates(std::vector<float>{2.0f, 2.0f, 1.0f});
  min_p(tie, 1.0f);
  EXPECT_EQ(ids_of(tie), (std::vector<std::int32_t>{0, 1}));

  CandidateList uniform = make_candidates(std::vector<float>(4, 0.5f));
  min_p(uniform, 1.0f);
  EXPECT_EQ(ids_of(uniform), (std::vector<std::int32_t>{0, 1, 2, 3}));
}

TEST(MinP, HonoursMinKeep) {
  CandidateList candidates = make_candidates(four_token_logits());
  min_p(candidates, 1.0f, 3);  // alone it would keep {1}
  EXPECT_EQ(ids_of(candidates), (std::vector<std::int32_t>{1, 3, 0}));
}

// ---------------------------------------------------------------------------------------------
// temperature

TEST(Temperature, ScalesLogitsSoSoftmaxFollowsExpOfLogitOverT) {
  const std::vector<float> logits{1.0f, 2.0f, 3.0f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    CandidateList candidates = make_candidates(logits);
    apply_temperature(candidates, temperature);
    softmax(candidates);
    double sum = 0.0;
    for (float l : logits) sum += std::exp(l / temperature);
    for (const Candidate& c : candidates) {
      EXPECT_NEAR(c.p, std::exp(logits[c.id] / temperature) / sum, 1e-6)
          << "T = " << temperature << ", id " << c.id;
    }
  }
}

TEST(Temperature, LowSharpensAndHighFlattens) {
  auto max_probability = [](float temperature) {
    CandidateList candidates = make_candidates(std::vector<float>{1.0f, 2.0f, 3.0f});
    apply_temperature(candidates, temperature);
    softmax(candidates);
    return candidates.front().p;
  };
  EXPECT_GT(max_probability(0.5f), max_probability(1.0f));
  EXPECT_LT(max_probability(2.0f), max_probability(1.0f));
  EXPECT_NEAR(max_probability(1e6f), 1.0 / 3.0, 1e-4);  // T -> inf: uniform
}

TEST(Temperature, RejectsNonPositiveAndNonFinite) {
  for (float bad : {0.0f, -1.0f, kNaN, kInf}) {
    CandidateList candidates = make_candidates(std::vector<float>{1.0f});
    expect_error_kind([&] { apply_temperature(candidates, bad); }, ErrorKind::invalid_argument);
  }
}

// ---------------------------------------------------------------------------------------------
// repetition penalty

TEST(RepetitionPenalty, DividesPositiveMultipliesNegativeAndPenalisesOnce) {
  std::vector<float> logits{2.0f, -2.0f, 0.0f, 4.0f, 1.0f};
  const std::vector<std::int32_t> recent{0, 1, 0, 2, 0};
  apply_repetition_penalty(logits, recent, 2.0f);
  // id 0: 2 / 2 = 1 (once, although it occurs three times); id 1: -2 * 2 = -4;
  // id 2: 0 stays 0; ids 3 and 4 are not recent.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 0.0f, 4.0f, 1.0f}));
}

TEST(RepetitionPenalty, ScratchIsReusableAcrossCalls) {
  std::vector<std::uint8_t> seen;
  std::vector<float> first{2.0f, 2.0f};
  apply_repetition_penalty(first, std::vector<std::int32_t>{0}, 2.0f, seen);
  std::vector<float> second{2.0f, 2.0f};
  apply_repetition_penalty(second, std::vector<std::int32_t>{0, 1}, 2.0f, seen);
  EXPECT_EQ(first, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(second, (std::vector<float>{1.0f, 1.0f}));  // id 0 not left marked by the 1st call
}

TEST(RepetitionPenalty, OneIsANoOpAndBadInputsThrow) {
  std::vector<float> logits{2.0f, -2.0f};
  apply_repetition_penalty(logits, std::vector<std::int32_t>{0, 1}, 1.0f);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -2.0f}));
  expect_error_kind([&] { apply_repetition_penalty(logits, std::vector<std::int32_t>{2}, 1.1f); },
                    ErrorKind::out_of_range);
  expect_error_kind([&] { apply_repetition_penalty(logits, std::vector<std::int32_t>{-1}, 1.1f); },
                    ErrorKind::out_of_range);
  expect_error_kind([&] { apply_repetition_penalty(logits, std::vector<std::int32_t>{0}, 0.0f); },
                    ErrorKind::invalid_argument);
}

TEST(RepetitionPenalty, SamplerPenalisesOnlyTheLastNTokens) {
  // Logits 1.0, 0.9, 0.8 and penalty 1.5 (greedy). History {0, 2, 2}:
  //   last 2 = {2, 2}: id 0 keeps 1.0 -> argmax 0.
  //   last 3 = {0, 2, 2}: id 0 -> 0.667, id 2 -> 0.533, id 1 stays 0.9 -> argmax 1.
  //   last 0: no penalty -> argmax 0.
  const std::vector<float> logits{1.0f, 0.9f, 0.8f};
  const std::vector<std::int32_t> history{0, 2, 2};
  auto greedy_with_window = [&](int last_n) {
    SamplerParams params = greedy_params();
    params.repeat_penalty = 1.5f;
    params.repeat_last_n = last_n;
    Sampler sampler(params);
    return sampler.sample(logits, history);
  };
  EXPECT_EQ(greedy_with_window(2), 0);
  EXPECT_EQ(greedy_with_window(3), 1);
  EXPECT_EQ(greedy_with_window(64), 1);  // window longer than the history
  EXPECT_EQ(greedy_with_window(0), 0);
}

// ---------------------------------------------------------------------------------------------
// greedy

TEST(Greedy, EqualsArgmaxWithLowestIdOnTies) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;  // only to make test inputs; not part of the contract
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> logits(50);
    for (float& l : logits) l = normal(rng);
    Sampler sampler(greedy_params());
    const auto expected =
        static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(sampler.sample(logits, {}), expected);
  }
  // Ties: ids 1 and 3 share the maximum; the lower id wins, for temperature 0 and below.
  const std::vector<float> tied{1.0f, 5.0f, 3.0f, 5.0f};
  Sampler zero(greedy_params());
  EXPECT_EQ(zero.sample(tied, {}), 1);
  SamplerParams negative = greedy_params();
  negative.temperature = -1.0f;
  Sampler below_zero(negative);
  EXPECT_EQ(below_zero.sample(tied, {}), 1);
  EXPECT_EQ(argmax(tied), 1);
}

TEST(Greedy, IgnoresTruncationStagesAndSeed) {
  SamplerParams params = greedy_params();
  params.top_k = 2;
  params.top_p = 0.3f;
  params.min_p = 0.9f;
  const std::vector<float> logits{0.1f, 0.2f, 0.9f, 0.3f};
  for (std::uint64_t seed : {0u, 1u, 2u}) {
    params.seed = seed;
    Sampler sampler(params);
    EXPECT_EQ(sampler.sample(logits, {}), 2);
  }
}

// ---------------------------------------------------------------------------------------------
// random stream

TEST(RandomStream, StandardLibraryMt19937_64IsConformant) {
  // [rand.predef]: the 10000th invocation of a default-constructed mt19937_64 yields this value.
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(RandomStream, UnitIntervalUsesTheTop53Bits) {
  EXPECT_EQ(unit_interval_from_bits(0), 0.0);
  EXPECT_EQ(unit_interval_from_bits(0x7FF), 0.0);  // the low 11 bits are dropped
  EXPECT_EQ(unit_interval_from_bits(1ull << 11), 0x1.0p-53);
  EXPECT_EQ(unit_interval_from_bits(1ull << 63), 0.5);
  EXPECT_EQ(unit_interval_from_bits(~0ull), 1.0 - 0x1.0p-53);  // never reaches 1
}

TEST(RandomStream, DrawPicksTheBucketContainingU) {
  // Sorted p: id 1 0.5, id 3 0.3, id 0 0.2 (cumulative 0.5, 0.8, 1.0); id 2 has p 0.
  const CandidateList candidates{
      {1, 0.0f, 0.5f}, {3, 0.0f, 0.3f}, {0, 0.0f, 0.2f}, {2, 0.0f, 0.0f}};
  EXPECT_EQ(draw(candidates, 0.0), 1);
  EXPECT_EQ(draw(candidates, 0.49), 1);
  EXPECT_EQ(draw(candidates, 0.5), 3);  // the bucket is [0.5, 0.8)
  EXPECT_EQ(draw(candidates, 0.79), 3);
  EXPECT_EQ(draw(candidates, 0.81), 0);
  EXPECT_EQ(draw(candidates, 1.0 - 0x1.0p-53), 0);  // never the zero-probability id 2
}

TEST(RandomStream, SamplerDrawsMatchAnIndependentReimplementation) {
  // The contract: one u = (mt19937_64() >> 11) * 2^-53 per token, then inverse CDF over the
  // distribution sorted by descending probability. Recomputing that here in double arithmetic
  // pins the generator, its seeding, the one-draw-per-token stream and the bucket order. (It
  // cannot catch a switch to std::uniform_real_distribution on libstdc++, which happens to yield
  // nearly the same doubles there; that switch is ruled out by reading sampler.hpp, since the
  // point is that other standard libraries are free to differ.)
  const std::vector<double> probabilities{0.15, 0.50, 0.05, 0.30};
  const std::vector<std::int32_t> sorted_ids{1, 3, 0, 2};
  const std::uint64_t seed = 12345;
  Sampler sampler(plain_params(seed));
  std::mt19937_64 reference(seed);
  const std::vector<float> logits = logits_for(probabilities);
  for (int i = 0; i < 1000; ++i) {
    const double u = static_cast<double>(reference() >> 11) * 0x1.0p-53;
    double cumulative = 0.0;
    std::int32_t expected = sorted_ids.back();
    for (std::int32_t id : sorted_ids) {
      cumulative += probabilities[id];
      if (u < cumulative) {
        expected = id;
        break;
      }
    }
    ASSERT_EQ(sampler.sample(logits, {}), expected) << "draw " << i << ", u = " << u;
  }
}

std::vector<std::int32_t> draw_sequence(Sampler& sampler, std::span<const float> logits, int n) {
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(sampler.sample(logits, {}));
  return tokens;
}

TEST(RandomStream, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(32);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = 0.1f * static_cast<float>(i % 7);

  Sampler first(plain_params(42));
  Sampler second(plain_params(42));
  Sampler other(plain_params(43));
  const auto a = draw_sequence(first, logits, 1000);
  const auto b = draw_sequence(second, logits, 1000);
  const auto c = draw_sequence(other, logits, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(std::set<std::int32_t>(a.begin(), a.end()).size(), 20u);  // really random-looking

  first.reseed(42);  // restarts the stream
  EXPECT_EQ(draw_sequence(first, logits, 1000), a);
}

TEST(RandomStream, EmpiricalFrequenciesMatchTheDistribution) {
  // 10,000 draws from p = {0.15, 0.50, 0.05, 0.30}. Each count is Binomial(n, p_i), with
  // standard deviation sigma_i = sqrt(n p_i (1 - p_i)): 35.7, 50.0, 21.8, 45.8. We allow
  // 5 sigma_i (at most 250 draws, 2.5 percentage points); a correct sampler falls outside with
  // probability ~6e-7 per token, so a failure means a biased sampler, not bad luck (and the
  // seed is fixed anyway, so the test is deterministic).
  const std::vector<double> probabilities{0.15, 0.50, 0.05, 0.30};
  const int n = 10000;
  Sampler sampler(plain_params(2024));
  const std::vector<float> logits = logits_for(probabilities);
  std::vector<int> counts(probabilities.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(logits, {})];
  for (std::size_t id = 0; id < probabilities.size(); ++id) {
    const double p = probabilities[id];
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(counts[id], n * p, 5.0 * sigma) << "token " << id;
  }
}

TEST(RandomStream, TruncationRenormalisesOverTheSurvivors) {
  // top_k = 2 keeps ids 1 (0.50) and 3 (0.30); renormalised 0.625 and 0.375. Ids 0 and 2 must
  // never appear. 5-sigma bound as above: sigma = sqrt(10000 * 0.625 * 0.375) = 48.4.
  SamplerParams params = plain_params(7);
  params.top_k = 2;
  Sampler sampler(params);
  const std::vector<float> logits = four_token_logits();
  const int n = 10000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(logits, {})];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  const double sigma = std::sqrt(n * 0.625 * 0.375);
  EXPECT_NEAR(counts[1], n * 0.625, 5.0 * sigma);
  EXPECT_NEAR(counts[3], n * 0.375, 5.0 * sigma);
}

TEST(RandomStream, MaskedTokensAreNeverSampled) {
  Sampler sampler(plain_params(3));
  const std::vector<float> logits{0.0f, -kInf, 0.0f, -kInf};
  for (int i = 0; i < 1000; ++i) {
    const std::int32_t token = sampler.sample(logits, {});
    ASSERT_TRUE(token == 0 || token == 2) << token;
  }
}

TEST(Sampler, DoesNotAllocateAfterTheFirstCall) {
  SamplerParams params;  // defaults: every stage enabled, penalty over the last 64 tokens
  params.seed = 9;
  Sampler sampler(params);
  std::vector<float> logits(1000);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  std::vector<std::int32_t> history;
  history.reserve(200);
  history.push_back(sampler.sample(logits, history));
  const long before = g_allocations.load();
  for (int i = 0; i < 150; ++i) history.push_back(sampler.sample(logits, history));
  EXPECT_EQ(g_allocations.load() - before, 0);
}

// ---------------------------------------------------------------------------------------------
// validation

TEST(Validation, RejectsOutOfRangeParametersNamingTheField) {
  struct Case {
    const char* field;
    void (*corrupt)(SamplerParams&);
  };
  const std::vector<Case> cases = {
      {"temperature", [](SamplerParams& p) { p.temperature = kNaN; }},
      {"temperature", [](SamplerParams& p) { p.temperature = kInf; }},
      {"top_k", [](SamplerParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplerParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplerParams& p) { p.top_p = 1.5f; }},
      {"top_p", [](SamplerParams& p) { p.top_p = kNaN; }},
      {"min_p", [](SamplerParams& p) { p.min_p = -0.1f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = 1.1f; }},
      {"min_p", [](SamplerParams& p) { p.min_p = kNaN; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = 0.0f; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = -1.0f; }},
      {"repeat_penalty", [](SamplerParams& p) { p.repeat_penalty = kNaN; }},
      {"repeat_last_n", [](SamplerParams& p) { p.repeat_last_n = -1; }},
  };
  for (const Case& c : cases) {
    SamplerParams params;
    c.corrupt(params);
    expect_error_kind([&] { Sampler sampler(params); }, ErrorKind::invalid_argument, c.field);
  }
}

TEST(Validation, AcceptsBoundaryValues) {
  SamplerParams params;
  params.temperature = 0.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 1.0f;
  params.repeat_penalty = 1.0f;
  params.repeat_last_n = 0;
  EXPECT_NO_THROW(Sampler{params});
  params.min_p = 0.0f;
  params.temperature = -2.0f;
  EXPECT_NO_THROW(Sampler{params});
}

TEST(Validation, RejectsBadLogitsAndHistory) {
  auto expect_sample_throws = [](const SamplerParams& params, std::vector<float> logits,
                                 std::vector<std::int32_t> history, ErrorKind kind) {
    Sampler sampler(params);
    expect_error_kind([&] { sampler.sample(logits, history); }, kind);
  };
  for (const SamplerParams& params : {SamplerParams{}, greedy_params()}) {
    expect_sample_throws(params, {}, {}, ErrorKind::invalid_argument);
    expect_sample_throws(params, {0.0f, kNaN}, {}, ErrorKind::invalid_argument);
    expect_sample_throws(params, {0.0f, kInf}, {}, ErrorKind::invalid_argument);
    expect_sample_throws(params, {-kInf, -kInf}, {}, ErrorKind::invalid_argument);
  }
  // A penalised history token outside the vocabulary.
  expect_sample_throws(SamplerParams{}, {0.0f, 1.0f}, {5}, ErrorKind::out_of_range);
}

// ---------------------------------------------------------------------------------------------
// generate()

// A deterministic stand-in for a model: after token t the logits are one-hot at (t + 1) mod
// vocab, so greedy sampling after prompt {3} produces 4, 5, 6, ... It records every call.
class CountingSession {
 public:
  explicit CountingSession(int vocab) : logits_(static_cast<std::size_t>(vocab), 0.0f) {}

  std::span<const float> prefill(std::span<const std::int32_t> tokens) {
    ++prefill_calls;
    prefilled.assign(tokens.begin(), tokens.end());
    return logits_after(tokens.back());
  }

  std::span<const float> decode(std::int32_t token) {
    decoded.push_back(token);
    return logits_after(token);
  }

  int prefill_calls = 0;
  std::vector<std::int32_t> prefilled;
  std::vector<std::int32_t> decoded;

 private:
  std::span<const float> logits_after(std::int32_t token) {
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    logits_[static_cast<std::size_t>(token + 1) % logits_.size()] = 10.0f;
    return logits_;
  }

  std::vector<float> logits_;
};

static_assert(GenerationSession<CountingSession>);

TEST(Generate, StopsAtMaxTokensWithoutDecodingTheLastToken) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  const std::vector<std::int32_t> prompt{1, 2, 3};
  std::vector<std::int32_t> seen;
  const GenerateResult result =
      generate(session, prompt, sampler, GenerateOptions{5, {}}, [&](std::int32_t token) {
        seen.push_back(token);
        return true;
      });
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(result.reason, StopReason::max_tokens);
  EXPECT_EQ(seen, result.tokens);
  EXPECT_EQ(session.prefill_calls, 1);
  EXPECT_EQ(session.prefilled, prompt);
  // n_generated - 1 decodes: every token except the last is fed back.
  EXPECT_EQ(session.decoded, (std::vector<std::int32_t>{4, 5, 6, 7}));
}

TEST(Generate, StopTokenEndsGenerationAndIsNotEmitted) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  std::vector<std::int32_t> seen;
  const GenerateResult result = generate(session, std::vector<std::int32_t>{3}, sampler,
                                         GenerateOptions{100, {9, 7}}, [&](std::int32_t token) {
                                           seen.push_back(token);
                                           return true;
                                         });
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_EQ(result.reason, StopReason::stop_token);
  EXPECT_EQ(seen, result.tokens);
  EXPECT_EQ(session.decoded, (std::vector<std::int32_t>{4, 5, 6}));
}

TEST(Generate, CallbackReturningFalseStopsAfterThatToken) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  const GenerateResult result =
      generate(session, std::vector<std::int32_t>{3}, sampler, GenerateOptions{100, {}},
               [](std::int32_t token) { return token != 6; });
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_EQ(result.reason, StopReason::cancelled);
  EXPECT_EQ(session.decoded, (std::vector<std::int32_t>{4, 5}));
}

TEST(Generate, CallbackStopTakesPrecedenceOverMaxTokensOnTheSameToken) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  const GenerateResult result =
      generate(session, std::vector<std::int32_t>{3}, sampler, GenerateOptions{2, {}},
               [](std::int32_t) { return false; });
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{4}));
  EXPECT_EQ(result.reason, StopReason::callback);
}

// A CountingSession with a context of `capacity` tokens, as hllm::Session reports it: prefill
// and decode throw past it, as the real cache does, so a generate() that overruns it fails.
class BoundedCountingSession : public CountingSession {
 public:
  BoundedCountingSession(int vocab, std::size_t capacity)
      : CountingSession(vocab), capacity_(capacity) {}
  std::span<const float> prefill(std::span<const std::int32_t> tokens) {
    if (tokens.size() > capacity_ - length_) throw Error(ErrorKind::capacity, "capacity exceeded");
    length_ += tokens.size();
    return CountingSession::prefill(tokens);
  }
  std::span<const float> decode(std::int32_t token) {
    if (length_ >= capacity_) throw Error(ErrorKind::capacity, "capacity exceeded");
    ++length_;
    return CountingSession::decode(token);
  }
  std::size_t position() const { return length_; }
  std::size_t context() const { return capacity_; }

 private:
  std::size_t capacity_, length_ = 0;
};

static_assert(BoundedSession<BoundedCountingSession>);
static_assert(!BoundedSession<CountingSession>);

TEST(Generate, EosIsItsOwnStopReasonApartFromStopTokens) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  GenerateOptions options{.max_tokens = 100, .stop_tokens = {8}, .eos = 6};
  const GenerateResult result = generate(session, std::vector<std::int32_t>{3}, sampler, options);
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{4, 5}));
  EXPECT_EQ(result.reason, StopReason::eos);
  EXPECT_STREQ(to_string(result.reason), "eos");
}

// The context fills after 2 prompt tokens + 4 decoded ones: the fifth generated token was
// sampled from the last logits the cache could produce, is returned, and is never decoded.
TEST(Generate, FullContextEndsGenerationKeepingTheTokensSoFar) {
  BoundedCountingSession session(100, 6);
  Sampler sampler(greedy_params());
  std::vector<std::int32_t> seen;
  const GenerateResult result = generate(session, std::vector<std::int32_t>{1, 2}, sampler,
                                         GenerateOptions{50, {}}, [&](std::int32_t token) {
                                           seen.push_back(token);
                                           return true;
                                         });
  EXPECT_EQ(result.reason, StopReason::context_full);
  EXPECT_STREQ(to_string(result.reason), "context_full");
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(seen, result.tokens);
  EXPECT_EQ(session.decoded, (std::vector<std::int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(session.position(), session.context());
}

// -1: no limit but the context (llama.cpp's -n -1); max_tokens still wins when it comes first.
TEST(Generate, UnlimitedMaxTokensRunsUntilTheContextIsFull) {
  BoundedCountingSession session(1000, 40);
  Sampler sampler(greedy_params());
  const GenerateResult result =
      generate(session, std::vector<std::int32_t>{1}, sampler, GenerateOptions{-1, {}});
  EXPECT_EQ(result.reason, StopReason::context_full);
  EXPECT_EQ(result.tokens.size(), 40u);  // 1 prompt + 39 decoded fill 40; the 40th is returned

  BoundedCountingSession roomy(1000, 40);
  const GenerateResult limited =
      generate(roomy, std::vector<std::int32_t>{1}, sampler, GenerateOptions{39, {}});
  EXPECT_EQ(limited.reason, StopReason::max_tokens);
  EXPECT_EQ(limited.tokens.size(), 39u);
}

TEST(Generate, StopReasonsHaveNames) {
  EXPECT_STREQ(to_string(StopReason::stop_token), "stop_token");
  EXPECT_STREQ(to_string(StopReason::max_tokens), "max_tokens");
  EXPECT_STREQ(to_string(StopReason::cancelled), "cancelled");
  EXPECT_EQ(StopReason::callback, StopReason::cancelled);  // the old name still compiles
}

TEST(Generate, ZeroMaxTokensDoesNoWork) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  const GenerateResult result =
      generate(session, std::vector<std::int32_t>{3}, sampler, GenerateOptions{0, {}});
  EXPECT_TRUE(result.tokens.empty());
  EXPECT_EQ(result.reason, StopReason::max_tokens);
  EXPECT_EQ(session.prefill_calls, 0);
  EXPECT_TRUE(session.decoded.empty());
}

TEST(Generate, RejectsEmptyPromptAndNegativeMaxTokens) {
  CountingSession session(10);
  Sampler sampler(greedy_params());
  expect_error_kind(
      [&] { generate(session, std::span<const std::int32_t>{}, sampler, GenerateOptions{}); },
      ErrorKind::invalid_argument, "prompt");
  expect_error_kind(
      [&] {
        generate(session, std::vector<std::int32_t>{1}, sampler, GenerateOptions{-2, {}});
      },
      ErrorKind::invalid_argument, "max_tokens");
  EXPECT_EQ(session.prefill_calls, 0);
}

// Always returns the same flat logits, so greedy choice is decided by the repetition penalty
// alone: the sampler must see prompt + generated tokens as history.
class FlatSession {
 public:
  std::span<const float> prefill(std::span<const std::int32_t>) { return logits_; }
  std::span<const float> decode(std::int32_t) { return logits_; }

 private:
  std::vector<float> logits_ = std::vector<float>(6, 1.0f);
};

TEST(Generate, SamplerHistoryIsPromptPlusGeneratedTokens) {
  // Penalised tokens drop to 0.5, so greedy picks the lowest id not yet in the history:
  // prompt {0, 1} -> 2, 3, 4, 5; then every id is penalised, all tie at 0.5 -> 0.
  FlatSession session;
  SamplerParams params = greedy_params();
  params.repeat_penalty = 2.0f;
  Sampler sampler(params);
  const GenerateResult result =
      generate(session, std::vector<std::int32_t>{0, 1}, sampler, GenerateOptions{5, {}});
  EXPECT_EQ(result.tokens, (std::vector<std::int32_t>{2, 3, 4, 5, 0}));
}

}  // namespace
}  // namespace hllm
