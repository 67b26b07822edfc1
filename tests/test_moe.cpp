// The mixture-of-experts FFN (nn/moe.hpp): routing (softmax, top-k, ties, renormalization) and
// the grouped forward against a direct per-token sum over the chosen experts, including an
// expert no token chose (its weights are NaN: it must not be read), all tokens on one expert,
// k = n_experts, and a chunk equal to its tokens run one at a time. Whole models with experts
// are held to Hugging Face's Mixtral and Qwen2-MoE in test_families.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/thread_pool.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/moe.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::test::all_close;

std::vector<std::uint32_t> route(std::vector<float> logits, const hllm::ExpertRouting& r,
                                 std::vector<float>* weights = nullptr,
                                 const std::vector<float>& bias = {}) {
  const std::size_t tokens = logits.size() / r.n_experts;
  std::vector<std::uint32_t> chosen(tokens * r.n_used);
  std::vector<float> w(tokens * r.n_used), group_scores(r.n_groups);
  hllm::route_tokens(r, logits.data(), tokens, bias.empty() ? nullptr : bias.data(),
                     group_scores.data(), chosen.data(), w.data());
  if (weights != nullptr) *weights = w;
  return chosen;
}

std::vector<std::uint32_t> route(const std::vector<float>& logits, std::size_t n, std::size_t k,
                                 bool normalized, std::vector<float>* weights = nullptr) {
  return route(logits, hllm::ExpertRouting{n, k, normalized}, weights);
}

TEST(ExpertRouting, TiesGoToTheLowerIndexInDescendingOrder) {
  EXPECT_EQ(route({1, 3, 3, 0}, 4, 2, false), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(route({2, 2, 2, 2}, 4, 3, false), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(route({0, 5, 1, 5, 5}, 5, 1, false), (std::vector<std::uint32_t>{1}));
}

TEST(ExpertRouting, WeightsAreTheSoftmaxProbabilitiesOrTheirShareOfTheChosen) {
  const std::vector<float> logits{0.5f, -1.0f, 2.0f, 1.0f};
  double total = 0;
  for (float l : logits) total += std::exp(l);
  std::vector<float> w;
  EXPECT_EQ(route(logits, 4, 2, false, &w), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_NEAR(w[0], std::exp(2.0) / total, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.0) / total, 1e-6);
  route(logits, 4, 2, true, &w);
  EXPECT_NEAR(w[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  // k = n_experts: every expert, best first, weights the whole softmax.
  EXPECT_EQ(route(logits, 4, 4, false, &w), (std::vector<std::uint32_t>{2, 3, 0, 1}));
  EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 1e-6);
}

// DeepSeek's routed_scaling_factor: the weights times the scale, after renormalization.
TEST(ExpertRouting, ScaleMultipliesTheWeightsAfterRenormalization) {
  const std::vector<float> logits{0.5f, -1.0f, 2.0f, 1.0f};
  std::vector<float> plain, scaled;
  route(logits, 4, 2, true, &plain);
  EXPECT_EQ(route(logits, hllm::ExpertRouting{4, 2, true, 2.5f}, &scaled),
            (std::vector<std::uint32_t>{2, 3}));
  EXPECT_NEAR(scaled[0], 2.5f * plain[0], 1e-6);
  EXPECT_NEAR(scaled[0] + scaled[1], 2.5, 1e-6);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// DeepSeek-V3's scores: each logit's sigmoid, chosen by score plus the expert's selection bias
// and weighed by the score alone (renormalized, then scaled).
TEST(ExpertRouting, SigmoidScoresWithASelectionBiasChooseByTheBiasWeighWithout) {
  const std::vector<float> logits{0.5f, -1.0f, 2.0f, 1.0f};
  hllm::ExpertRouting r{4, 2, false};
  r.gating = hllm::ExpertGating::sigmoid;
  std::vector<float> w;
  EXPECT_EQ(route(logits, r, &w), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_NEAR(w[0], sigmoid(2.0), 1e-6);
  EXPECT_NEAR(w[1], sigmoid(1.0), 1e-6);
  // A bias of 0.6 lifts expert 1 (sigmoid(-1) = 0.269) over expert 3 (0.731) and below 2.
  const std::vector<float> bias{0.0f, 0.6f, 0.0f, 0.0f};
  EXPECT_EQ(route(logits, r, &w, bias), (std::vector<std::uint32_t>{2, 1}));
  EXPECT_NEAR(w[1], sigmoid(-1.0), 1e-6);
  r.normalized = true;
  r.scale = 2.5f;
  route(logits, r, &w, bias);
  EXPECT_NEAR(w[0], 2.5 * sigmoid(2.0) / (sigmoid(2.0) + sigmoid(-1.0)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 2.5, 1e-6);
}

// Group-limited routing: a group's score is the sum of its two best biased scores, the token
// keeps the best groups (ties to the lower group) and chooses among their experts only.
TEST(ExpertRouting, GroupsScoredByTheirTwoBestLimitTheChoice) {
  hllm::ExpertRouting r{8, 2, true};
  r.gating = hllm::ExpertGating::sigmoid;
  r.n_groups = 4;  // {0,1} {2,3} {4,5} {6,7}
  r.n_groups_used = 2;
  // Expert 0 is the best alone, but its group's pair (sigmoid 3 + sigmoid -3) sums below
  // {2,3}'s and {4,5}'s; {4,5} ties {6,7} and wins as the lower group, until a bias lifts 7.
  const std::vector<float> logits{3.0f, -3.0f, 1.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> w;
  EXPECT_EQ(route(logits, r, &w), (std::vector<std::uint32_t>{2, 3}));
  r.n_used = 3;  // groups {2,3} and {4,5} (the tie to the lower group)
  EXPECT_EQ(route(logits, r), (std::vector<std::uint32_t>{2, 3, 4}));
  const std::vector<float> bias{0, 0, 0, 0, 0, 0, 0, 0.01f};
  EXPECT_EQ(route(logits, r, &w, bias), (std::vector<std::uint32_t>{2, 3, 7}));
  EXPECT_NEAR(w[2], sigmoid(0.5) / (2 * sigmoid(1.0) + sigmoid(0.5)), 1e-6);
  // Every group kept: the plain top-k.
  r.n_groups_used = 4;
  EXPECT_EQ(route(logits, r), (std::vector<std::uint32_t>{0, 2, 3}));
  // Softmax scores group the same way; with them expert 0's group sums highest (e³ + e⁻³).
  r.gating = hllm::ExpertGating::softmax;
  r.n_groups_used = 1;
  r.n_used = 2;
  EXPECT_EQ(route(logits, r), (std::vector<std::uint32_t>{0, 1}));
}

// Small float experts, a router, and the direct sum the grouped forward must equal.
struct Experts {
  static constexpr std::size_t kDim = 32, kFfn = 48;
  std::vector<std::vector<float>> storage;
  std::vector<hllm::FeedForwardWeights> experts;
  hllm::WeightTensor router;

  hllm::WeightTensor tensor(std::size_t rows, std::size_t cols, std::uint32_t seed) {
    storage.push_back(hllm::test::random_vector(rows * cols, seed));
    for (float& v : storage.back()) v /= std::sqrt(static_cast<float>(cols));
    return {hllm::DType::f32, storage.back().data(), rows, cols, "t"};
  }
  Experts(std::size_t n, std::uint32_t seed) {
    storage.reserve(3 * n + 1);
    for (std::uint32_t e = 0; e < n; ++e)
      experts.push_back({tensor(kFfn, kDim, seed + 3 * e), tensor(kFfn, kDim, seed + 3 * e + 1),
                         tensor(kDim, kFfn, seed + 3 * e + 2)});
    router = tensor(n, kDim, seed + 100);
  }
  // Expert e's weights all NaN: a forward that reads them cannot give finite outputs.
  void poison(std::size_t e) {
    for (const hllm::WeightTensor* t : {&experts[e].gate, &experts[e].up, &experts[e].down})
      std::fill_n(const_cast<float*>(t->as<float>()), t->rows * t->cols,
                  std::numeric_limits<float>::quiet_NaN());
  }

  // out: [T][dim], each token's chosen experts' SwiGLU outputs summed by weight, with the
  // reference kernels one token at a time.
  std::vector<float> direct(const std::vector<float>& x, const hllm::ExpertRouting& r,
                            const float* bias = nullptr) const {
    const std::size_t tokens = x.size() / kDim;
    std::vector<float> out(x.size(), 0.0f), logits(r.n_experts), gate(kFfn), up(kFfn), act(kFfn),
        y(kDim), w(r.n_used), group_scores(r.n_groups);
    std::vector<std::uint32_t> chosen(r.n_used);
    for (std::size_t t = 0; t < tokens; ++t) {
      const float* xt = x.data() + t * kDim;
      hllm::reference::matmul(router, xt, 1, logits.data());
      hllm::route_tokens(r, logits.data(), 1, bias, group_scores.data(), chosen.data(), w.data());
      for (std::size_t j = 0; j < r.n_used; ++j) {
        const hllm::FeedForwardWeights& f = experts[chosen[j]];
        hllm::reference::matmul(f.gate, xt, 1, gate.data());
        hllm::reference::matmul(f.up, xt, 1, up.data());
        hllm::reference::silu_mul(gate.data(), up.data(), kFfn, act.data());
        hllm::reference::matmul(f.down, act.data(), 1, y.data());
        for (std::size_t d = 0; d < kDim; ++d) out[t * kDim + d] += w[j] * y[d];
      }
    }
    return out;
  }

  std::vector<float> grouped(const std::vector<float>& x, const hllm::ExpertRouting& r,
                             hllm::Isa isa, std::size_t threads,
                             const float* bias = nullptr) const {
    const std::size_t tokens = x.size() / kDim;
    hllm::ThreadPool pool(threads);
    const hllm::Compute compute(hllm::kernels::table_for(isa), pool);
    hllm::MoeScratch scratch(tokens, kDim, kFfn, r);
    std::vector<float> out(x.size()), gate(tokens * kFfn), up(tokens * kFfn);
    hllm::MixtureOfExperts::forward(compute, {&router, &experts, nullptr, nullptr, bias}, r,
                                    hllm::GateActivation::silu, x.data(), tokens, kDim, out.data(),
                                    scratch, gate.data(), up.data());
    return out;
  }
};

TEST(MixtureOfExperts, GroupedForwardEqualsTheDirectSumOnEveryIsa) {
  const Experts m(6, 40);
  const std::vector<float> x = hllm::test::random_vector(9 * Experts::kDim, 41);  // 9 tokens
  for (const hllm::ExpertRouting r :
       {hllm::ExpertRouting{6, 2, false}, hllm::ExpertRouting{6, 2, true},
        hllm::ExpertRouting{6, 6, false}})  // k = n_experts
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + " k " + std::to_string(r.n_used));
      EXPECT_TRUE(all_close(m.grouped(x, r, isa, 2), m.direct(x, r), 1e-5f));
    }
}

// DeepSeek-V3's routing through the forward: the layer's selection bias reaches the router,
// groups limit the choice, a chunk and its tokens alone agree, on every ISA.
TEST(MixtureOfExperts, SigmoidGroupedBiasedRoutingEqualsTheDirectSum) {
  const Experts m(8, 70);
  const std::vector<float> x = hllm::test::random_vector(9 * Experts::kDim, 71);
  const std::vector<float> bias = hllm::test::random_vector(8, 72);
  hllm::ExpertRouting r{8, 3, true, 2.5f};
  r.gating = hllm::ExpertGating::sigmoid;
  r.n_groups = 4;
  r.n_groups_used = 2;
  // The bias changes some token's choice (else the test would not show it is read).
  EXPECT_FALSE(all_close(m.direct(x, r, bias.data()), m.direct(x, r), 1e-3f));
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    const std::vector<float> chunk = m.grouped(x, r, isa, 2, bias.data());
    EXPECT_TRUE(all_close(chunk, m.direct(x, r, bias.data()), 1e-5f));
    const std::vector<float> one(x.begin(), x.begin() + Experts::kDim);
    EXPECT_TRUE(all_close(m.grouped(one, r, isa, 2, bias.data()),
                          std::span(chunk).first(Experts::kDim), 1e-6f));
  }
}

// A router that sends every token to expert 0 (and, for k = 2, to expert 1): the others are
// chosen by no token, and with NaN weights they would poison any output they touched.
TEST(MixtureOfExperts, ExpertsNoTokenChoseAreNotRead) {
  Experts m(4, 50);
  std::vector<float>& router = m.storage.back();  // [4][dim]
  std::fill(router.begin(), router.end(), 0.0f);
  const std::vector<float> x = hllm::test::random_vector(7 * Experts::kDim, 51);
  // Logits: expert 0 gets 10 · sum(x), expert 1 gets 5 · sum(x), ... The inputs' sums are made
  // positive below, so the order is 0, 1, 2, 3 for every token.
  std::vector<float> shifted = x;
  for (float& v : shifted) v = std::fabs(v) + 0.1f;
  for (std::size_t d = 0; d < Experts::kDim; ++d)
    router[d] = 10.0f, router[Experts::kDim + d] = 5.0f;
  m.poison(2);
  m.poison(3);
  for (std::size_t k : {1u, 2u}) {
    const hllm::ExpertRouting r{4, k, true};
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + " k " + std::to_string(k));
      const std::vector<float> got = m.grouped(shifted, r, isa, 2);
      for (float v : got) ASSERT_TRUE(std::isfinite(v));
      EXPECT_TRUE(all_close(got, m.direct(shifted, r), 1e-5f));
    }
  }
}

// Grouping by expert does not change a token's result beyond the kernels' own rounding: a chunk
// of tokens equals the same tokens run one at a time, which take the one-token path (every
// chosen expert's rows in one job per projection), on every ISA, with k up to n_experts.
TEST(MixtureOfExperts, ChunkEqualsItsTokensOneAtATime) {
  const Experts m(5, 60);
  const std::vector<float> x = hllm::test::random_vector(12 * Experts::kDim, 61);
  for (const hllm::ExpertRouting r : {hllm::ExpertRouting{5, 2, false}, {5, 5, true}})
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + " k " + std::to_string(r.n_used));
      const std::vector<float> chunk = m.grouped(x, r, isa, 2);
      std::vector<float> single;
      for (std::size_t t = 0; t < 12; ++t) {
        const std::vector<float> one(x.begin() + t * Experts::kDim,
                                     x.begin() + (t + 1) * Experts::kDim);
        const std::vector<float> y = m.grouped(one, r, isa, 2);
        single.insert(single.end(), y.begin(), y.end());
      }
      EXPECT_TRUE(all_close(chunk, single, 1e-6f));
      EXPECT_TRUE(all_close(single, m.direct(x, r), 1e-5f));
    }
}

// DeepSeek's shared experts: no gate, their output added as it is, to the scaled experts' sum,
// on every ISA, a chunk and a token alone.
TEST(MixtureOfExperts, UngatedSharedExpertIsAddedAsItIs) {
  Experts m(4, 80);
  const hllm::FeedForwardWeights shared{m.tensor(Experts::kFfn, Experts::kDim, 81),
                                        m.tensor(Experts::kFfn, Experts::kDim, 82),
                                        m.tensor(Experts::kDim, Experts::kFfn, 83)};
  const std::vector<float> x = hllm::test::random_vector(6 * Experts::kDim, 84);
  const hllm::ExpertRouting r{4, 2, false, 1.5f};
  std::vector<float> expected = m.direct(x, r), gate(Experts::kFfn), up(Experts::kFfn),
                     act(Experts::kFfn), y(Experts::kDim);
  for (std::size_t t = 0; t < 6; ++t) {
    const float* xt = x.data() + t * Experts::kDim;
    hllm::reference::matmul(shared.gate, xt, 1, gate.data());
    hllm::reference::matmul(shared.up, xt, 1, up.data());
    hllm::reference::silu_mul(gate.data(), up.data(), Experts::kFfn, act.data());
    hllm::reference::matmul(shared.down, act.data(), 1, y.data());
    for (std::size_t d = 0; d < Experts::kDim; ++d) expected[t * Experts::kDim + d] += y[d];
  }
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::ThreadPool pool(2);
    const hllm::Compute compute(hllm::kernels::table_for(isa), pool);
    for (const std::size_t tokens : {6u, 1u}) {
      hllm::MoeScratch scratch(tokens, Experts::kDim, Experts::kFfn, r);
      std::vector<float> out(tokens * Experts::kDim), g(tokens * Experts::kFfn),
          u(tokens * Experts::kFfn);
      hllm::MixtureOfExperts::forward(compute, {&m.router, &m.experts, &shared, nullptr, nullptr},
                                      r, hllm::GateActivation::silu, x.data(), tokens,
                                      Experts::kDim, out.data(), scratch, g.data(), u.data());
      EXPECT_TRUE(all_close(out, std::span(expected).first(out.size()), 1e-5f)) << tokens;
    }
  }
}

// An expert model's leading dense layers (DeepSeek's first_k_dense_replace) hold the dense
// FFN's tensors and the later layers the experts', in file order; a model whose layers are all
// dense computes what the same weights give a model without experts.
TEST(MixtureOfExperts, LeadingDenseLayersRunTheDenseFfn) {
  hllm::ModelConfig c = hllm::test::two_layer_gqa_config();
  c.n_experts = 4;
  c.n_experts_used = 2;
  c.expert_ffn_dim = 64;
  c.n_dense_layers = 1;
  std::vector<std::string> names;
  for (const hllm::TensorSpec& s : hllm::model_tensor_specs(c)) names.push_back(s.name);
  const auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("blk.0.ffn_gate.weight"));
  EXPECT_FALSE(has("blk.0.ffn_gate_inp.weight"));
  EXPECT_TRUE(has("blk.1.ffn_gate_inp.weight"));
  EXPECT_TRUE(has("blk.1.ffn_down.3.weight"));
  EXPECT_FALSE(has("blk.1.ffn_gate.weight"));
  EXPECT_EQ(names.size(), hllm::model_tensor_count(c));
  for (std::size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(hllm::model_tensor_spec(c, i).name, names[i]);

  c.n_dense_layers = c.n_layers;  // every layer dense: the experts are never built or read
  hllm::ModelConfig dense = c;
  dense.n_experts = dense.n_experts_used = dense.expert_ffn_dim = dense.n_dense_layers = 0;
  const hllm::ModelWeights weights = hllm::random_weights(dense, hllm::DType::f32, 5);
  EXPECT_EQ(hllm::model_tensor_specs(c).size(), hllm::model_tensor_specs(dense).size());
  const std::vector<std::int32_t> tokens{1, 5, 9, 2, 7};
  const hllm::Llama<> expert_model(c, weights), dense_model(dense, weights);
  hllm::Session<> with_experts(expert_model, {.threads = 2});
  hllm::Session<> without(dense_model, {.threads = 2});
  const std::span<const float> a = with_experts.prefill(tokens, hllm::Logits::all);
  EXPECT_TRUE(all_close(std::vector<float>(a.begin(), a.end()),
                        without.prefill(tokens, hllm::Logits::all), 0.0f));
}

// With 8-bit activations (Q8_0 experts, a session's Compute): a token alone runs its experts'
// downs on inputs quantized one by one (Compute::matmul_each) and gets the bits the chunk's
// grouped path gives it, on every ISA, with the shared expert added after either.
TEST(MixtureOfExperts, QuantizedTokenEqualsItsChunkBitForBit) {
  constexpr std::size_t kDim = 64, kFfn = 96, kExperts = 6, kTokens = 5;
  std::vector<std::vector<std::byte>> bytes;
  const auto q8 = [&](std::size_t rows, std::size_t cols, std::uint32_t seed) {
    std::vector<float> v = hllm::test::random_vector(rows * cols, seed);
    for (float& x : v) x /= std::sqrt(static_cast<float>(cols));
    bytes.push_back(hllm::quant::quantize(hllm::DType::q8_0, v));
    return hllm::WeightTensor{hllm::DType::q8_0, bytes.back().data(), rows, cols, "q"};
  };
  bytes.reserve(3 * kExperts + 4);
  std::vector<hllm::FeedForwardWeights> experts;
  for (std::uint32_t e = 0; e < kExperts; ++e)
    experts.push_back(
        {q8(kFfn, kDim, 70 + 3 * e), q8(kFfn, kDim, 71 + 3 * e), q8(kDim, kFfn, 72 + 3 * e)});
  const std::vector<float> router_values = hllm::test::random_vector(kExperts * kDim, 90);
  const hllm::WeightTensor router{hllm::DType::f32, router_values.data(), kExperts, kDim, "r"};
  const hllm::FeedForwardWeights shared{q8(kFfn, kDim, 91), q8(kFfn, kDim, 92), q8(kDim, kFfn, 93)};
  const std::vector<float> shared_gate = hllm::test::random_vector(kDim, 94);
  const std::vector<float> x = hllm::test::random_vector(kTokens * kDim, 95);
  const hllm::ExpertRouting r{kExperts, 3, true};
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::ThreadPool pool(2);
    std::vector<hllm::BlockQ8Act> activations(kTokens * 3 * kFfn / 32);
    const hllm::Compute compute(hllm::kernels::table_for(isa), pool, activations);
    const auto run = [&](const float* in, std::size_t tokens) {
      hllm::MoeScratch scratch(tokens, kDim, kFfn, r);
      std::vector<float> out(tokens * kDim), gate(tokens * kFfn), up(tokens * kFfn);
      hllm::MixtureOfExperts::forward(compute, {&router, &experts, &shared, shared_gate.data()}, r,
                                      hllm::GateActivation::silu, in, tokens, kDim, out.data(),
                                      scratch, gate.data(), up.data());
      return out;
    };
    const std::vector<float> chunk = run(x.data(), kTokens);
    for (std::size_t t = 0; t < kTokens; ++t) {
      const std::vector<float> one = run(x.data() + t * kDim, 1);
      EXPECT_TRUE(std::equal(one.begin(), one.end(), chunk.begin() + t * kDim)) << "token " << t;
    }
  }
}

}  // namespace
