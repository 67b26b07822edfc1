// nn/ building blocks and one LlamaBlock against the PyTorch goldens (tools/gen_goldens.py).

#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "hllm/model/llama_block.hpp"
#include "hllm/nn/attention.hpp"
#include "hllm/nn/gated_ffn.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/nn/kv_chunk.hpp"
#include "hllm/nn/rms_norm.hpp"
#include "hllm/nn/rope.hpp"
#include "test_util.hpp"

namespace {

using hllm::test::all_close;
using hllm::test::GoldenFile;

hllm::WeightTensor f32_tensor(const GoldenFile& g, const std::string& key) {
  const auto& a = g.array(key);
  const std::size_t rows = a.shape.size() == 2 ? a.dim(0) : 1;
  const std::size_t cols = a.shape.size() == 2 ? a.dim(1) : a.dim(0);
  return {hllm::DType::f32, a.values.data(), rows, cols, key};
}

TEST(RMSNorm, MatchesPyTorch) {
  const GoldenFile g("rmsnorm.bin");
  const auto& x = g.array("x");
  const std::size_t n = x.dim(0), dim = x.dim(1);
  std::vector<float> out(n * dim);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    std::fill(out.begin(), out.end(), 0.0f);
    hllm::RMSNorm(g.scalar("eps"))
        .forward(hllm::matrix_view(x.values.data(), n, dim), g["weight"].data(),
                 hllm::matrix_view(out.data(), n, dim), hllm::kernels::table_for(isa));
    EXPECT_TRUE(all_close(out, g["out"]));
  }
}

TEST(RMSNorm, RejectsBadEpsilon) {
  EXPECT_THROW(hllm::RMSNorm(0.0f), hllm::Error);
  EXPECT_THROW(hllm::RMSNorm(-1e-5f), hllm::Error);
  EXPECT_THROW(hllm::RMSNorm(NAN), hllm::Error);
}

// Each case of rope.bin: layout, partial rotation and every frequency scaling.
struct RopeCase {
  std::string name;
  hllm::RopeLayout layout;
  hllm::RopeScalingType scaling;
};

class RopeGolden : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeGolden, MatchesPyTorch) {
  const RopeCase& c = GetParam();
  const GoldenFile g("rope.bin");
  const std::string p = c.name + ".";
  hllm::RopeConfig config;
  config.layout = c.layout;
  config.theta = g.scalar(p + "theta");
  config.rot_dims = g.integer(p + "rot_dims");
  config.scaling.type = c.scaling;
  if (g.has(p + "factor")) config.scaling.factor = g.scalar(p + "factor");
  if (g.has(p + "original_context"))
    config.scaling.original_context = g.integer(p + "original_context");
  if (g.has(p + "beta_fast")) config.scaling.beta_fast = g.scalar(p + "beta_fast");
  if (g.has(p + "beta_slow")) config.scaling.beta_slow = g.scalar(p + "beta_slow");
  if (g.has(p + "low_freq_factor"))
    config.scaling.low_freq_factor = g.scalar(p + "low_freq_factor");
  if (g.has(p + "high_freq_factor"))
    config.scaling.high_freq_factor = g.scalar(p + "high_freq_factor");

  const auto& x = g.array(p + "x");  // [T][heads][head_dim]
  const std::size_t n_tokens = x.dim(0), n_heads = x.dim(1), head_dim = x.dim(2);
  const hllm::Rope rope(config, static_cast<std::int64_t>(head_dim));

  // The frequencies themselves: computed in double here, golden in float64 → 1e-6 relative.
  const auto& expected_freq = g[p + "inv_freq"];
  ASSERT_EQ(rope.inv_freq().size(), expected_freq.size());
  for (std::size_t i = 0; i < expected_freq.size(); ++i)
    EXPECT_NEAR(rope.inv_freq()[i], expected_freq[i], 1e-6 * expected_freq[i]) << "frequency " << i;
  EXPECT_NEAR(rope.mscale(), g.scalar(p + "mscale"), 1e-6);

  std::vector<float> out = x.values;
  const auto& pos = g[p + "pos"];
  for (std::size_t t = 0; t < n_tokens; ++t)
    rope.apply(out.data() + t * n_heads * head_dim, n_heads, static_cast<std::int64_t>(pos[t]));
  EXPECT_TRUE(all_close(out, g[p + "out"]));
}

INSTANTIATE_TEST_SUITE_P(
    AllLayoutsAndScalings, RopeGolden,
    ::testing::Values(
        RopeCase{"interleaved", hllm::RopeLayout::interleaved, hllm::RopeScalingType::none},
        RopeCase{"neox", hllm::RopeLayout::neox, hllm::RopeScalingType::none},
        RopeCase{"partial_interleaved", hllm::RopeLayout::interleaved, hllm::RopeScalingType::none},
        RopeCase{"partial_neox", hllm::RopeLayout::neox, hllm::RopeScalingType::none},
        RopeCase{"linear", hllm::RopeLayout::neox, hllm::RopeScalingType::linear},
        RopeCase{"ntk", hllm::RopeLayout::interleaved, hllm::RopeScalingType::ntk},
        RopeCase{"yarn", hllm::RopeLayout::neox, hllm::RopeScalingType::yarn},
        RopeCase{"llama3", hllm::RopeLayout::neox, hllm::RopeScalingType::llama3}),
    [](const auto& param_info) { return param_info.param.name; });

TEST(Rope, PartialRotationLeavesTheRestUntouched) {
  hllm::RopeConfig config;
  config.rot_dims = 16;
  const hllm::Rope rope(config, 64);
  std::vector<float> x = hllm::test::random_vector(2 * 64, 3);
  const std::vector<float> before = x;
  rope.apply(x.data(), 2, 37);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t d = 16; d < 64; ++d) EXPECT_EQ(x[h * 64 + d], before[h * 64 + d]);
  EXPECT_NE(x[0], before[0]);
}

TEST(Rope, FreqFactorsDivideTheFrequencies) {
  hllm::RopeConfig config;
  config.freq_factors.assign(4, 2.0f);
  const hllm::Rope scaled(config, 8);
  const hllm::Rope plain(hllm::RopeConfig{}, 8);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(scaled.inv_freq()[i], plain.inv_freq()[i] / 2);
}

TEST(Rope, RejectsBadConfigurations) {
  hllm::RopeConfig odd;
  odd.rot_dims = 7;
  EXPECT_THROW(hllm::Rope(odd, 64), hllm::Error);
  EXPECT_THROW(hllm::Rope(hllm::RopeConfig{}, 63), hllm::Error);  // odd head_dim, full rotation
  EXPECT_THROW(hllm::Rope(hllm::RopeConfig{}, 0), hllm::Error);
  hllm::RopeConfig too_many;
  too_many.rot_dims = 128;
  EXPECT_THROW(hllm::Rope(too_many, 64), hllm::Error);
  hllm::RopeConfig yarn;
  yarn.scaling.type = hllm::RopeScalingType::yarn;
  yarn.scaling.factor = 4;
  EXPECT_THROW(hllm::Rope(yarn, 64), hllm::Error);  // no original context
  hllm::RopeConfig bad_theta;
  bad_theta.theta = 0.5f;
  EXPECT_THROW(hllm::Rope(bad_theta, 64), hllm::Error);
  hllm::RopeConfig wrong_factors;
  wrong_factors.freq_factors.assign(3, 1.0f);
  EXPECT_THROW(hllm::Rope(wrong_factors, 64), hllm::Error);
}

// --- attention -----------------------------------------------------------------------------

// Stores k, v ([T][kv_heads][head_dim]) for positions 0..T-1 of layer 0 and attends every query.
std::vector<float> attend_all(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, std::size_t n_tokens,
                              const hllm::AttentionShape& shape,
                              hllm::Isa isa = hllm::Isa::scalar) {
  const std::size_t q_width = shape.n_heads * shape.head_dim;
  const std::size_t kv_width = shape.n_kv_heads * shape.head_dim;
  hllm::KVCache<float> cache(1, shape.n_kv_heads, shape.head_dim, n_tokens);
  for (std::size_t t = 0; t < n_tokens; ++t)
    cache.store(0, t, k.data() + t * kv_width, v.data() + t * kv_width);
  cache.advance(n_tokens);
  const hllm::Attention attention(shape);
  std::vector<float> out(n_tokens * q_width);
  for (std::size_t t = 0; t < n_tokens; ++t)
    attention.forward(q.data() + t * q_width, t, cache, 0, out.data() + t * q_width,
                      hllm::kernels::table_for(isa));
  return out;
}

class AttentionGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionGolden, MatchesPyTorch) {
  const GoldenFile g("attention.bin");
  const std::string p = GetParam() + ".";
  const auto& q = g.array(p + "q");
  const auto& k = g.array(p + "k");
  const hllm::AttentionShape shape{q.dim(1), k.dim(1), q.dim(2),
                                   static_cast<std::size_t>(g.integer(p + "window"))};
  // T = 37 keys with tile size 32: the online softmax crosses a tile boundary mid-sequence.
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    EXPECT_TRUE(
        all_close(attend_all(q.values, k.values, g[p + "v"], q.dim(0), shape, isa), g[p + "out"]));
  }
}

INSTANTIATE_TEST_SUITE_P(MhaGqaMqaWithAndWithoutWindow, AttentionGolden,
                         ::testing::Values("mha", "gqa", "mqa", "mha_sw", "gqa_sw", "mqa_sw"));

// GQA whose KV heads are copies reproduces MHA exactly (same arithmetic in the same order);
// MQA likewise. Checked with and without a sliding window.
TEST(Attention, SharedKvHeadsEqualMhaWithCopies) {
  const std::size_t n_tokens = 45, n_heads = 8, head_dim = 16;
  for (std::size_t n_kv_heads : {std::size_t{2}, std::size_t{1}}) {
    for (std::size_t window : {std::size_t{0}, std::size_t{7}}) {
      const std::size_t group = n_heads / n_kv_heads;
      const auto q = hllm::test::random_vector(n_tokens * n_heads * head_dim, 11);
      const auto k = hllm::test::random_vector(n_tokens * n_kv_heads * head_dim, 12);
      const auto v = hllm::test::random_vector(n_tokens * n_kv_heads * head_dim, 13);
      std::vector<float> k_mha(n_tokens * n_heads * head_dim), v_mha(k_mha.size());
      for (std::size_t t = 0; t < n_tokens; ++t)
        for (std::size_t h = 0; h < n_heads; ++h)
          for (std::size_t d = 0; d < head_dim; ++d) {
            const std::size_t src = (t * n_kv_heads + h / group) * head_dim + d;
            k_mha[(t * n_heads + h) * head_dim + d] = k[src];
            v_mha[(t * n_heads + h) * head_dim + d] = v[src];
          }
      const auto shared = attend_all(q, k, v, n_tokens, {n_heads, n_kv_heads, head_dim, window});
      const auto mha = attend_all(q, k_mha, v_mha, n_tokens, {n_heads, n_heads, head_dim, window});
      EXPECT_EQ(shared, mha) << "n_kv_heads " << n_kv_heads << " window " << window;
    }
  }
}

// The sliding window really hides old keys: a query sees exactly the last W positions.
TEST(Attention, SlidingWindowBounds) {
  const hllm::Attention attention({4, 2, 8, 5});
  EXPECT_EQ(attention.first_visible(0), 0u);
  EXPECT_EQ(attention.first_visible(4), 0u);
  EXPECT_EQ(attention.first_visible(5), 1u);
  EXPECT_EQ(attention.first_visible(100), 96u);
}

TEST(Attention, RejectsIndivisibleHeads) {
  try {
    hllm::Attention({6, 4, 8, 0});
    FAIL() << "expected hllm::Error";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos);
  }
  EXPECT_THROW(hllm::Attention({0, 1, 8, 0}), hllm::Error);
}

TEST(KVCache, StoringPastCapacityIsAnError) {
  hllm::KVCache<float> cache(2, 1, 4, 3);
  const std::vector<float> kv(4, 1.0f);
  for (std::size_t p = 0; p < 3; ++p) cache.store(1, p, kv.data(), kv.data());
  try {
    cache.store(0, 3, kv.data(), kv.data());
    FAIL() << "expected hllm::Error";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::capacity);
  }
  EXPECT_THROW(cache.store(2, 0, kv.data(), kv.data()), hllm::Error);  // no such layer
  cache.advance(3);
  EXPECT_THROW(cache.advance(1), hllm::Error);
  EXPECT_THROW(hllm::KVCache<float>(1, 1, 4, 0), hllm::Error);
}

// Rows of `cache` (any element type) stored from random values, each value read back checked by
// within(x, read, block) (block: the 32 values x's own block was quantized from); and rows of
// different layers, heads and positions land in their own places.
template <class KV, class Within>
void expect_rows_read_back_within(Within within) {
  constexpr std::size_t kLayers = 2, kHeads = 3, kHeadDim = 64, kCapacity = 5;
  hllm::KVCache<KV> cache(kLayers, kHeads, kHeadDim, kCapacity);
  auto row_values = [](std::size_t layer, std::size_t position, int which) {
    // Spread over several binades, so FP8's subnormals and Q4_0's clamp are reached.
    auto v = hllm::test::random_vector(kHeads * kHeadDim,
                                       static_cast<unsigned>(100 * layer + 10 * position + which));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= std::ldexp(1.0f, -static_cast<int>(i % 11));
    return v;
  };
  for (std::size_t layer = 0; layer < kLayers; ++layer)
    for (std::size_t p = 0; p < kCapacity; ++p)
      cache.store(layer, p, row_values(layer, p, 0).data(), row_values(layer, p, 1).data());
  for (std::size_t layer = 0; layer < kLayers; ++layer)
    for (std::size_t h = 0; h < kHeads; ++h)
      for (std::size_t p = 0; p < kCapacity; ++p)
        for (int which : {0, 1}) {
          const std::vector<float> x = row_values(layer, p, which);
          const KV* row = which == 0 ? cache.keys(layer, h, p) : cache.values(layer, h, p);
          ASSERT_EQ(row, hllm::kv_row(which == 0 ? cache.keys(layer, h) : cache.values(layer, h), p,
                                      kHeadDim));
          for (std::size_t d = 0; d < kHeadDim; ++d) {
            const float* block = x.data() + h * kHeadDim + d / 32 * 32;
            ASSERT_TRUE(within(x[h * kHeadDim + d], hllm::kv_value(row, d), block))
                << "layer " << layer << " head " << h << " position " << p << " value " << d << ": "
                << x[h * kHeadDim + d] << " read back as " << hllm::kv_value(row, d);
          }
        }
}

// A Q8_0 cache stores each row as head_dim / 32 blocks of ggml's reference rounding: every value
// reads back within half a quantization step (d / 2, d = the block's largest magnitude / 127, and
// the f16 rounding of d moves a value by at most 127 · 2^-11 · d more), and head_dim must be a
// multiple of 32.
TEST(KVCache, Q8_0RowsReadBackWithinHalfAStep) {
  EXPECT_EQ(hllm::KVCache<hllm::BlockQ8_0>(2, 3, 64, 5).bytes(), 2u * 2 * 3 * 5 * 2 * 34);
  expect_rows_read_back_within<hllm::BlockQ8_0>([](float x, float read, const float* block) {
    float amax = 0.0f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(block[i]));
    const float step = amax / 127.0f;
    return std::fabs(read - x) <= step * (0.5f + 127.0f / 2048.0f) + 1e-7f;
  });
  hllm::test::expect_error([] { hllm::KVCache<hllm::BlockQ8_0>(1, 1, 48, 4); },
                           hllm::ErrorKind::unsupported, "", "", std::nullopt, "multiple of 32");
}

// A Q4_0 cache stores rows with ggml's reference Q4_0 rounding: d = m / -8 for m the block's
// value of largest magnitude, so the block spans [-8, 7] steps of |d| = max|x| / 8; a value reads
// back within half a step, except those past 7.5 steps on the side opposite m, which clamp to 7
// (within one step); plus 8 · 2^-11 steps for the f16 rounding of d.
TEST(KVCache, Q4_0RowsReadBackWithinHalfAStep) {
  EXPECT_EQ(hllm::KVCache<hllm::BlockQ4_0>(2, 3, 64, 5).bytes(), 2u * 2 * 3 * 5 * 2 * 18);
  std::size_t clamped = 0;
  expect_rows_read_back_within<hllm::BlockQ4_0>([&](float x, float read, const float* block) {
    float m = 0.0f;
    for (std::size_t i = 0; i < 32; ++i)
      if (std::fabs(block[i]) > std::fabs(m)) m = block[i];
    const float step = std::fabs(m) / 8.0f;
    const bool clamp = x / (m / -8.0f) > 7.5f;
    clamped += clamp;
    return std::fabs(read - x) <= step * ((clamp ? 1.0f : 0.5f) + 8.0f / 2048.0f) + 1e-7f * step;
  });
  EXPECT_GT(clamped, 0u);  // the clamp was exercised
  hllm::test::expect_error([] { hllm::KVCache<hllm::BlockQ4_0>(1, 1, 48, 4); },
                           hllm::ErrorKind::unsupported, "", "", std::nullopt,
                           "a q4_0 KV cache needs head_dim to be a multiple of 32");
}

// An FP8 cache: d = max|x| / 448 (stored as f16) and each x / d rounded to the nearest E4M3,
// so a value reads back within half an E4M3 step: 2^-4 of its magnitude where x / d is normal,
// 2^-10 · d among the subnormals (|x / d| < 2^-6). Where the f16 rounding of d pushes x / d past
// 448, the saturation costs at most 448 · 2^-11 · d, far inside the first bound.
TEST(KVCache, FP8RowsReadBackWithinHalfAStep) {
  EXPECT_EQ(hllm::KVCache<hllm::BlockFP8>(2, 3, 64, 5).bytes(), 2u * 2 * 3 * 5 * 2 * 34);
  std::size_t subnormal = 0;
  expect_rows_read_back_within<hllm::BlockFP8>([&](float x, float read, const float* block) {
    float amax = 0.0f;
    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(block[i]));
    const float d = hllm::f16::from_float(amax / 448.0f).to_float();
    const bool small = std::fabs(x) < std::ldexp(d, -6);
    subnormal += small;
    const float bound = small ? std::ldexp(d, -10) : std::ldexp(std::fabs(x), -4);
    return std::fabs(read - x) <= bound * (1.0f + 1e-6f);
  });
  EXPECT_GT(subnormal, 0u);  // the subnormals were exercised
  hllm::test::expect_error([] { hllm::KVCache<hllm::BlockFP8>(1, 1, 48, 4); },
                           hllm::ErrorKind::unsupported, "", "", std::nullopt,
                           "a fp8 KV cache needs head_dim to be a multiple of 32");
}

// The FP8 quantizer's block: the largest magnitude lands on ±448·d, d is amax / 448 in f16, an
// all-zero block is zeros with d = 0, and the codes are the nearest E4M3 of x / d.
TEST(KVCache, FP8BlockScaleAndCodes) {
  float x[32];
  for (std::size_t i = 0; i < 32; ++i) x[i] = 0.01f * static_cast<float>(i) - 0.1f;
  x[7] = -3.5f;
  hllm::BlockFP8 b;
  hllm::quantize_block_fp8(x, b);
  EXPECT_EQ(b.d.bits, hllm::f16::from_float(3.5f / 448.0f).bits);
  EXPECT_EQ(b.qs[7], 0xfe);  // -448
  for (std::size_t i = 0; i < 32; ++i)
    EXPECT_EQ(b.qs[i], hllm::e4m3_from_float(x[i] / b.d.to_float())) << i;
  const float zeros[32] = {};
  hllm::quantize_block_fp8(zeros, b);
  EXPECT_EQ(b.d.bits, 0u);
  for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(hllm::fp8_value(b, i), 0.0f);
}

// --- SwiGLU and the block ------------------------------------------------------------------

TEST(GatedFeedForward, SwiGLUMatchesPyTorch) {
  const GoldenFile g("swiglu.bin");
  const auto& x = g.array("x");
  const hllm::FeedForwardWeights w{f32_tensor(g, "w_gate"), f32_tensor(g, "w_up"),
                                   f32_tensor(g, "w_down")};
  const std::size_t n = x.dim(0);
  std::vector<float> out(n * x.dim(1)), gate(n * w.gate.rows), up(n * w.up.rows);
  // Every ISA, on one thread and on three (rows split unevenly across threads).
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    for (std::size_t threads : {1u, 3u}) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + " threads " + std::to_string(threads));
      hllm::ThreadPool pool(threads);
      const hllm::Compute compute(hllm::kernels::table_for(isa), pool);
      std::fill(out.begin(), out.end(), 0.0f);
      hllm::GatedFeedForward::forward(compute, w, hllm::GateActivation::silu, x.values.data(), n,
                                      out.data(), gate.data(), up.data());
      EXPECT_TRUE(all_close(out, g["out"]));
    }
  }
}

// The reference matmul against Eigen, an independent implementation, on a ragged shape.
TEST(ReferenceMatmul, MatchesEigen) {
  const std::size_t rows = 37, cols = 53, n = 5;
  const auto w = hllm::test::random_vector(rows * cols, 21);
  const auto x = hllm::test::random_vector(n * cols, 22);
  std::vector<float> y(n * rows);
  hllm::reference::matmul(w.data(), rows, cols, x.data(), n, y.data());
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> W(w.data(), rows, cols), X(x.data(), n, cols);
  const RowMajor Y = X * W.transpose();
  EXPECT_TRUE(all_close(y, std::vector<float>(Y.data(), Y.data() + Y.size()), 1e-5f));
}

TEST(LlamaBlock, MatchesPyTorch) {
  const GoldenFile g("block.bin");
  hllm::ModelConfig c;
  c.vocab_size = 1;
  c.dim = g.integer("dim");
  c.n_layers = 1;
  c.n_heads = g.integer("n_heads");
  c.n_kv_heads = g.integer("n_kv_heads");
  c.ffn_dim = g.integer("ffn_dim");
  c.context_length = 64;
  c.rms_eps = g.scalar("eps");
  c.rope.theta = g.scalar("theta");
  c.rope.layout = hllm::RopeLayout::interleaved;
  c.validate();
  hllm::LayerWeights w;
  w.attn_norm = f32_tensor(g, "attn_norm");
  w.wq = f32_tensor(g, "wq");
  w.wk = f32_tensor(g, "wk");
  w.wv = f32_tensor(g, "wv");
  w.wo = f32_tensor(g, "wo");
  w.ffn_norm = f32_tensor(g, "ffn_norm");
  w.ffn = {f32_tensor(g, "w_gate"), f32_tensor(g, "w_up"), f32_tensor(g, "w_down")};

  const auto& x = g.array("x");
  const std::size_t n = x.dim(0);
  const hllm::Rope rope(c.rope, c.resolved_head_dim());
  const std::size_t half = rope.rot_dims() / 2;
  std::vector<float> cos(n * half), sin(n * half);
  for (std::size_t t = 0; t < n; ++t)
    rope.angles(static_cast<std::int64_t>(t), &cos[t * half], &sin[t * half]);
  hllm::BlockScratch scratch(c, n);
  hllm::LlamaBlock<> block(c, w, 0);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::KVCache<float> cache(1, static_cast<std::size_t>(c.n_kv_heads),
                               static_cast<std::size_t>(c.resolved_head_dim()), 64);
    hllm::ThreadPool pool(2);
    const hllm::Compute compute(hllm::kernels::table_for(isa), pool);
    std::vector<float> residual = x.values;
    hllm::ContiguousKVChunk<float> chunk(cache, 0, n);
    block.forward(compute, residual.data(), n, rope, cos.data(), sin.data(), chunk, scratch);
    EXPECT_TRUE(all_close(residual, g["out"]));
  }
}

}  // namespace
