// The optimized kernels against their scalar reference twins (kernels/reference.hpp), on every
// ISA this CPU supports, forced one by one, over random shapes with ragged tails; plus the
// thread pool and the ISA selection.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "hllm/core/thread_pool.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/isa_kernels.hpp"  // the avx512/avx512_vnni kernels called directly
#include "hllm/kernels/reference.hpp"
#include "hllm/model/repack.hpp"
#include "test_util.hpp"

namespace {

using hllm::Isa;

template <class T>
std::vector<T> to_type(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = hllm::from_float<T>(v[i]);
  return out;
}

// Cache rows of head_dim values, written as the KV cache writes them (store_kv_row: rows of the
// block types are quantized per 32 values).   values: [n][head_dim]
template <class KV>
std::vector<KV> kv_rows(const std::vector<float>& values, std::size_t head_dim) {
  const std::size_t n = values.size() / head_dim, per_row = hllm::kv_row_elements<KV>(head_dim);
  std::vector<KV> rows(n * per_row);
  for (std::size_t j = 0; j < n; ++j)
    hllm::store_kv_row(values.data() + j * head_dim, head_dim, rows.data() + j * per_row);
  return rows;
}

// Error bound of a float32 dot product of n terms summed in any order (Higham, Accuracy and
// Stability of Numerical Algorithms, §3.1): |computed - exact| <= gamma_n · sum |w_i x_i| with
// gamma_n = n·u / (1 - n·u), u = 2^-24. Both the kernel and the reference obey it, so they
// differ by at most twice that. Weights are already exact in float (f16/bf16 widen exactly).
double dot_error_bound(std::size_t n, double sum_abs) {
  const double u = std::ldexp(1.0, -24);
  const double nu = static_cast<double>(n + 1) * u;  // +1: the final rounding of the store
  return 2.0 * nu / (1.0 - nu) * sum_abs;
}

// Each of actual: [n][rows] within dot_error_bound of the reference product of w: [rows][cols]
// (float, f16 or bf16) and x: [n][cols], plus Σ|w·x|·activation_rounding where the kernel rounded
// its activations (2^-8 for bf16: |x − bf16(x)| <= 2^-8·|x|).
template <class W>
void expect_within_dot_bound(const std::vector<W>& w, const std::vector<float>& x,
                             const std::vector<float>& actual, std::size_t rows, std::size_t cols,
                             std::size_t n, double activation_rounding, const std::string& what) {
  std::vector<float> expected(n * rows);
  hllm::reference::matmul(w.data(), rows, cols, x.data(), n, expected.data());
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t r = 0; r < rows; ++r) {
      double sum_abs = 0;
      for (std::size_t c = 0; c < cols; ++c)
        sum_abs += std::fabs(double(hllm::to_float(w[r * cols + c])) * x[t * cols + c]);
      const double bound = dot_error_bound(cols, sum_abs) + sum_abs * activation_rounding;
      const std::size_t i = t * rows + r;
      ASSERT_LE(std::fabs(double(actual[i]) - expected[i]), bound)
          << what << " rows " << rows << " cols " << cols << " tokens " << n << " at [" << t << "]["
          << r << "]";
    }
}

// A kernel call's scratch, as Compute hands each thread its own (kernels/scratch.hpp).
hllm::AlignedBuffer<std::byte> scratch_for(std::size_t cols, std::size_t n_tokens) {
  return hllm::AlignedBuffer<std::byte>(hllm::kernels::matmul_scratch_bytes(cols, n_tokens));
}

template <class W>
void check_matmul(Isa isa, std::size_t rows, std::size_t cols, std::size_t n_tokens,
                  std::uint32_t seed) {
  const auto w_float = hllm::test::random_vector(rows * cols, seed);
  const auto w = to_type<W>(w_float);
  const auto x = hllm::test::random_vector(n_tokens * cols, seed + 1);
  std::vector<float> actual(n_tokens * rows, NAN);
  const auto& table = hllm::kernels::table_for(isa);
  const hllm::kernels::MatmulFn fn = table.matmul_for(hllm::WeightTensor::dtype_of<W>());
  ASSERT_NE(fn, nullptr);
  // Two row ranges, split at an odd row, as threads would: each must write exactly its rows.
  const std::size_t split = rows / 2 | 1;
  auto scratch = scratch_for(cols, n_tokens);
  fn(w.data(), rows, cols, x.data(), n_tokens, actual.data(), 0, std::min(split, rows),
     scratch.data());
  fn(w.data(), rows, cols, x.data(), n_tokens, actual.data(), std::min(split, rows), rows,
     scratch.data());
  expect_within_dot_bound(w, x, actual, rows, cols, n_tokens, 0, hllm::to_string(isa));
}

class KernelIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!hllm::cpu_supports(GetParam()))
      GTEST_SKIP() << "this CPU cannot run " << hllm::to_string(GetParam());
  }
};

// Shapes with ragged tails in every dimension: columns not a multiple of 8 or 16, odd row
// counts (not a multiple of the 4-row tile), token counts not a multiple of the 4-token tile.
TEST_P(KernelIsa, MatmulMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::size_t> rows_dist(1, 70), cols_dist(1, 300), tokens_dist(1, 9);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t rows = rows_dist(rng), cols = cols_dist(rng), n = tokens_dist(rng);
    const auto seed = static_cast<std::uint32_t>(trial * 7);
    check_matmul<float>(GetParam(), rows, cols, n, seed);
    check_matmul<hllm::f16>(GetParam(), rows, cols, n, seed);
    check_matmul<hllm::bf16>(GetParam(), rows, cols, n, seed);
  }
  for (std::size_t cols : {1u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 64u, 2048u})
    check_matmul<float>(GetParam(), 5, cols, 5, 99);
}

// Prefill-sized batches take the packed-panel GEMM on AVX-512 (16-row panels, 256-column
// chunks, 512-token chunks, 8-token tiles): shapes across each boundary, ragged everywhere.
TEST_P(KernelIsa, PrefillGemmMatchesReferenceAcrossPanelAndChunkBoundaries) {
  for (auto [rows, cols, n] : {std::tuple{16u, 1u, 8u},
                               {37u, 17u, 31u},
                               {48u, 257u, 17u},
                               {21u, 600u, 300u},
                               {64u, 256u, 271u},
                               {40u, 40u, 530u},
                               {17u, 33u, 9u}}) {
    const auto seed = static_cast<std::uint32_t>(rows + cols + n);
    check_matmul<float>(GetParam(), rows, cols, n, seed);
    check_matmul<hllm::f16>(GetParam(), rows, cols, n, seed);
    check_matmul<hllm::bf16>(GetParam(), rows, cols, n, seed);
  }
}

// The vector exp is Cephes' reduction and polynomial (~2 ulp), std::exp is within 1 ulp, and a
// division and a multiplication follow: 8 ulp of relative slack (2^-21) covers it. Inputs span
// the range where silu goes from -0 through its minimum to the identity, plus the saturating
// ends and a ragged tail.
TEST_P(KernelIsa, SiluMulMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  std::vector<float> gate = hllm::test::random_vector(1001, 3),
                     up = hllm::test::random_vector(1001, 4);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] *= 12.0f;
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = -87.0f, gate[4] = 88.0f;
  std::vector<float> expected(gate.size()), actual(gate.size());
  hllm::reference::silu_mul(gate.data(), up.data(), gate.size(), expected.data());
  table.silu_mul(gate.data(), up.data(), gate.size(), actual.data());
  for (std::size_t i = 0; i < gate.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], std::fabs(expected[i]) * std::ldexp(1.0, -21) + 1e-37)
        << "gate " << gate[i] << " up " << up[i];
}

// GeGLU: both sides compute g / (1 + e^-2z), z = sqrt(2/pi)(g + 0.044715 g^3), z rounded a few
// times in a different order: e^-2z moves by ~2|z|·(few ulp), so the slack grows with |z| on
// top of SiLU's 8 ulp. Inputs from the saturating negative end (-0) through the identity.
TEST_P(KernelIsa, GeluMulMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  std::vector<float> gate = hllm::test::random_vector(1001, 5),
                     up = hllm::test::random_vector(1001, 6);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] *= 6.0f;
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = -12.0f, gate[4] = 12.0f;
  std::vector<float> expected(gate.size()), actual(gate.size());
  hllm::reference::gelu_mul(gate.data(), up.data(), gate.size(), expected.data());
  table.gelu_mul(gate.data(), up.data(), gate.size(), actual.data());
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i], z = std::fabs(0.7978845608f * (g + 0.044715f * g * g * g));
    const double slack = std::ldexp(1.0, -21) + std::min(z, 100.0f) * std::ldexp(1.0, -20);
    ASSERT_NEAR(actual[i], expected[i], std::fabs(expected[i]) * slack + 1e-37)
        << "gate " << g << " up " << up[i];
  }
  // The activation itself, against its definition at a few points: gelu(0) = 0, gelu(x) → x
  // for large x and → -0 for very negative x, gelu(1) = 0.841192 (PyTorch's tanh GELU).
  const float points[] = {0.0f, 1.0f, 10.0f, -10.0f}, ones[] = {1, 1, 1, 1};
  float out[4];
  table.gelu_mul(points, ones, 4, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.841192f, 1e-6f);
  EXPECT_FLOAT_EQ(out[2], 10.0f);
  EXPECT_NEAR(out[3], 0.0f, 1e-30f);
}

// The exact GELU against std::erf in double: the kernel's erf (Abramowitz and Stegun 7.1.26) is
// within 1.5e-7 of erf, which moves gelu(x) = x/2·(1 + erf) by at most |x|·0.75e-7, plus float
// rounding of x − h: a bound of 2.5e-7·|x| + 4 ulp of the result. Inputs over ±8 with a ragged
// tail, and the saturating ends.
TEST_P(KernelIsa, GeluMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  std::vector<float> x = hllm::test::random_vector(1001, 8);
  for (float& v : x) v *= 8.0f;
  x[0] = -100.0f, x[1] = 100.0f, x[2] = 0.0f, x[3] = -5.0f, x[4] = 5.0f, x[5] = 1.0f;
  std::vector<float> expected = x, actual = x;
  hllm::reference::gelu(expected.data(), expected.size());
  table.gelu(actual.data(), actual.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i],
                2.5e-7 * std::fabs(x[i]) + std::fabs(expected[i]) * std::ldexp(1.0, -21) + 1e-37)
        << "x " << x[i];
  // Against the definition: gelu(0) = 0, gelu(1) = Φ(1) = 0.841345 (not the tanh form's
  // 0.841192), gelu(100) = 100, gelu(-100) = -0.
  EXPECT_EQ(actual[2], 0.0f);
  EXPECT_NEAR(actual[5], 0.8413447f, 3e-7f);
  EXPECT_EQ(actual[1], 100.0f);
  EXPECT_NEAR(actual[0], 0.0f, 1e-30f);
}

// Soft-capping: cap·tanh(x/cap) against std::tanh. The vector tanh is Cephes' (~2 ulp: its
// polynomial near 0, its exp beyond), then a division and a product: 8 ulp of relative slack.
// Both ends saturate at ±cap exactly; a ragged tail.
TEST_P(KernelIsa, SoftCapMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  for (float cap : {3.0f, 30.0f, 50.0f}) {
    std::vector<float> x = hllm::test::random_vector(517, 8);
    for (float& v : x) v *= 4.0f * cap;
    x[0] = 0.0f, x[1] = 1e6f, x[2] = -1e6f, x[3] = 1e-3f;
    std::vector<float> expected = x, actual = x;
    hllm::reference::soft_cap(expected.data(), expected.size(), cap);
    table.soft_cap(actual.data(), actual.size(), cap);
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(actual[i], expected[i], std::fabs(expected[i]) * std::ldexp(1.0, -21))
          << "x " << x[i];
    EXPECT_EQ(actual[1], cap);
    EXPECT_EQ(actual[2], -cap);
  }
}

// RoPE: each output is a·c ∓ b·s; the vector kernels may fuse one product into the final
// rounding (vfmaddsub), so the two sides differ by at most 2 ulp of |a·c| + |b·s|. Both layouts,
// full and partial rotation, ragged pair counts.
TEST_P(KernelIsa, RopeMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  for (auto layout : {hllm::RopeLayout::interleaved, hllm::RopeLayout::neox})
    for (auto [head_dim, rot_dims] :
         {std::pair{64u, 64u}, {128u, 128u}, {80u, 40u}, {10u, 6u}, {6u, 2u}, {34u, 34u}}) {
      const std::size_t n_heads = 3, half = rot_dims / 2;
      const auto x = hllm::test::random_vector(n_heads * head_dim, head_dim + rot_dims);
      const auto angle = hllm::test::random_vector(half, rot_dims);
      std::vector<float> cos(half), sin(half);
      for (std::size_t i = 0; i < half; ++i)
        cos[i] = std::cos(angle[i]), sin[i] = std::sin(angle[i]);
      auto expected = x, actual = x;
      hllm::reference::rope(expected.data(), n_heads, head_dim, rot_dims, layout, cos.data(),
                            sin.data());
      table.rope(actual.data(), n_heads, head_dim, rot_dims, layout, cos.data(), sin.data());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::size_t d = i % head_dim;
        if (d >= rot_dims) {
          ASSERT_EQ(actual[i], x[i]) << "unrotated dimension " << d << " changed";
          continue;
        }
        const std::size_t pair = layout == hllm::RopeLayout::interleaved ? d / 2 : d % half;
        const std::size_t a = layout == hllm::RopeLayout::interleaved ? (i & ~std::size_t{1})
                                                                      : i - (d >= half ? half : 0);
        const std::size_t b = layout == hllm::RopeLayout::interleaved ? a + 1 : a + half;
        const double bound =
            std::ldexp(2.0, -24) * (std::fabs(x[a] * cos[pair]) + std::fabs(x[b] * sin[pair]) +
                                    std::fabs(x[a] * sin[pair]) + std::fabs(x[b] * cos[pair]));
        ASSERT_NEAR(actual[i], expected[i], bound)
            << hllm::to_string(GetParam()) << " head_dim " << head_dim << " rot " << rot_dims;
      }
    }
}

TEST_P(KernelIsa, RmsNormMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  for (std::size_t n : {1u, 5u, 16u, 17u, 63u, 256u, 2049u}) {
    const auto x = hllm::test::random_vector(n, 3), w = hllm::test::random_vector(n, 4);
    std::vector<float> expected(n), actual(n);
    hllm::reference::rms_norm(x.data(), w.data(), n, 1e-5f, expected.data());
    table.rms_norm(x.data(), w.data(), n, 1e-5f, actual.data());
    // The mean of squares in float vs double: relative error <= gamma_n (see above) on a
    // positive sum, halved by the square root, plus a few roundings in the scaling.
    EXPECT_TRUE(hllm::test::all_close(actual, expected, 1e-5f)) << n;
  }
}

TEST_P(KernelIsa, LayerNormMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  for (std::size_t n : {1u, 5u, 16u, 17u, 63u, 256u, 2049u}) {
    // An offset mean, so that subtracting it matters, with and without a bias.
    auto x = hllm::test::random_vector(n, 5);
    for (float& v : x) v += 3.0f;
    const auto w = hllm::test::random_vector(n, 6), b = hllm::test::random_vector(n, 7);
    for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
      std::vector<float> expected(n), actual(n);
      hllm::reference::layer_norm(x.data(), w.data(), bias, n, 1e-5f, expected.data());
      table.layer_norm(x.data(), w.data(), bias, n, 1e-5f, actual.data());
      // Sums of n terms in float against double, as for RMSNorm; the deviations are O(1) after
      // the mean's O(3) is taken out, so the mean's rounding (|mean|·gamma_n) stays far below
      // the tolerance.
      EXPECT_TRUE(hllm::test::all_close(actual, expected, 1e-5f))
          << n << (bias != nullptr ? " with bias" : "");
    }
  }
}

// Scores are scaled dot products, soft-capped in half of the calls (a cap of 0.5 bends these
// scores hard), so both paths of AttentionScoring meet every kernel.
hllm::AttentionScoring test_scoring(std::size_t head_dim, std::size_t n_keys) {
  return {1.0f / std::sqrt(static_cast<float>(head_dim)), n_keys % 2 == 1 ? 0.5f : 0.0f};
}

template <class KV>
void check_attention(Isa isa, std::size_t n_keys, std::size_t head_dim) {
  const auto q = hllm::test::random_vector(head_dim, 5);
  const auto k = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 6), head_dim);
  const auto v = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 7), head_dim);
  std::vector<float> expected(head_dim), actual(head_dim);
  const hllm::AttentionScoring scoring = test_scoring(head_dim, n_keys);
  hllm::reference::attend_head(q.data(), k.data(), v.data(), n_keys, head_dim, scoring,
                               expected.data());
  hllm::kernels::table_for(isa).attend_head_for<KV>()(q.data(), k.data(), v.data(), n_keys,
                                                      head_dim, scoring, actual.data());
  // Scores differ by the dot-product bound (|q||k| ~ head_dim here, times 2·head_dim·u), which
  // moves softmax weights by the same relative amount; the output is a convex combination of
  // values of size ~1, so 1e-5 of the output scale covers head_dim up to 128 with margin. (Rows
  // of the block types: both read the same dequantized values, d·q rounded once, so the same
  // bound holds.)
  EXPECT_TRUE(hllm::test::all_close(actual, expected, 1e-5f))
      << hllm::to_string(isa) << " keys " << n_keys << " head_dim " << head_dim;
}

TEST_P(KernelIsa, AttentionMatchesReference) {
  for (std::size_t n_keys : {1u, 2u, 31u, 32u, 33u, 100u})
    for (std::size_t head_dim : {8u, 20u, 64u, 128u}) {
      check_attention<float>(GetParam(), n_keys, head_dim);
      check_attention<hllm::f16>(GetParam(), n_keys, head_dim);
      check_attention<hllm::bf16>(GetParam(), n_keys, head_dim);
      if (head_dim % 32 == 0) {
        check_attention<hllm::BlockQ8_0>(GetParam(), n_keys, head_dim);
        check_attention<hllm::BlockQ4_0>(GetParam(), n_keys, head_dim);
        check_attention<hllm::BlockFP8>(GetParam(), n_keys, head_dim);
      }
    }
}

// Query heads sharing a KV head, attended together (the tiled kernel where head_dim is a
// multiple of the vector's lanes, 8 on AVX2 and 16 on AVX-512, in tiles of up to the lanes'
// heads, each padded to a power of two; one head at a time otherwise), against the reference
// one head at a time: same bound as above. Key counts around both tiles (8 and 16 keys); latent
// attention's 16 heads over rows of 576 too, and groups past the lanes (12, 16, 19).
template <class KV>
void check_grouped_attention(Isa isa, std::size_t group, std::size_t n_keys, std::size_t head_dim) {
  const auto q = hllm::test::random_vector(group * head_dim, 15);
  const auto k = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 16), head_dim);
  const auto v = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 17), head_dim);
  const hllm::AttentionScoring scoring = test_scoring(head_dim, n_keys);
  std::vector<float> expected(group * head_dim), actual(group * head_dim);
  for (std::size_t g = 0; g < group; ++g)
    hllm::reference::attend_head(q.data() + g * head_dim, k.data(), v.data(), n_keys, head_dim,
                                 scoring, expected.data() + g * head_dim);
  hllm::kernels::table_for(isa).attend_group_for<KV>()(q.data(), k.data(), v.data(), n_keys,
                                                       head_dim, group, scoring, actual.data());
  EXPECT_TRUE(hllm::test::all_close(actual, expected, 1e-5f))
      << hllm::to_string(isa) << " group " << group << " keys " << n_keys << " head_dim "
      << head_dim;
}

TEST_P(KernelIsa, GroupedAttentionMatchesReferencePerHead) {
  for (std::size_t group : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 12u, 19u})
    for (std::size_t n_keys : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 100u})
      for (std::size_t head_dim : {8u, 16u, 20u, 24u, 64u, 128u}) {
        check_grouped_attention<hllm::f16>(GetParam(), group, n_keys, head_dim);
        if (head_dim % 32 == 0) {
          check_grouped_attention<hllm::BlockQ8_0>(GetParam(), group, n_keys, head_dim);
          check_grouped_attention<hllm::BlockQ4_0>(GetParam(), group, n_keys, head_dim);
          check_grouped_attention<hllm::BlockFP8>(GetParam(), group, n_keys, head_dim);
        }
      }
  for (std::size_t n_keys : {1u, 17u, 100u}) {  // DeepSeek's latent rows: 16 heads, 512 + 64
    check_grouped_attention<hllm::f16>(GetParam(), 16, n_keys, 576);
    check_grouped_attention<hllm::BlockQ8_0>(GetParam(), 16, n_keys, 576);
    check_grouped_attention<float>(GetParam(), 16, n_keys, 592);  // past latent attention's rows
    check_grouped_attention<hllm::f16>(GetParam(), 8, n_keys, 1040);  // any multiple of 16
  }
}

// Which path a group of query heads takes, shown by its bits: the one-head fallback calls the
// one-head kernel for each head, so a group that falls back gives those bits exactly, while the
// tiled kernel sums its keys across lanes in another order and differs in some bit. On every
// vector ISA (AVX2 and AVX-VNNI as well as AVX-512) groups of any size (1 to 17, multi-query's
// 32 and 71) of heads of 64 or 128 take the tile (SmolLM2's 3 and Qwen2.5's 7 padded); heads
// of 20 (not a multiple of the lanes) fall back; the scalar twin always does.
template <class KV>
bool group_gives_per_head_bits(Isa isa, std::size_t group, std::size_t head_dim) {
  constexpr std::size_t kKeys = 100;
  const auto q = hllm::test::random_vector(group * head_dim, 41);
  const auto k = kv_rows<KV>(hllm::test::random_vector(kKeys * head_dim, 42), head_dim);
  const auto v = kv_rows<KV>(hllm::test::random_vector(kKeys * head_dim, 43), head_dim);
  const hllm::AttentionScoring scoring(1.0f / std::sqrt(static_cast<float>(head_dim)));
  const auto& table = hllm::kernels::table_for(isa);
  std::vector<float> per_head(group * head_dim), grouped(group * head_dim);
  for (std::size_t g = 0; g < group; ++g)
    table.attend_head_for<KV>()(q.data() + g * head_dim, k.data(), v.data(), kKeys, head_dim,
                                scoring, per_head.data() + g * head_dim);
  table.attend_group_for<KV>()(q.data(), k.data(), v.data(), kKeys, head_dim, group, scoring,
                               grouped.data());
  return grouped == per_head;
}

TEST_P(KernelIsa, GroupedAttentionTakesTheTileWhereItApplies) {
  const Isa isa = GetParam();
  const bool tiled = isa != Isa::scalar;
  for (std::size_t group = 1; group <= 17; ++group)
    for (std::size_t head_dim : {64u, 128u}) {
      EXPECT_EQ(group_gives_per_head_bits<float>(isa, group, head_dim), !tiled)
          << hllm::to_string(isa) << " f32 group " << group << " head_dim " << head_dim;
      EXPECT_EQ(group_gives_per_head_bits<hllm::f16>(isa, group, head_dim), !tiled)
          << hllm::to_string(isa) << " f16 group " << group << " head_dim " << head_dim;
      EXPECT_EQ(group_gives_per_head_bits<hllm::BlockQ8_0>(isa, group, head_dim), !tiled)
          << hllm::to_string(isa) << " q8_0 group " << group << " head_dim " << head_dim;
    }
  for (std::size_t group : {32u, 71u})
    EXPECT_EQ(group_gives_per_head_bits<float>(isa, group, 64), !tiled)
        << hllm::to_string(isa) << " f32 group " << group;
  EXPECT_TRUE(group_gives_per_head_bits<float>(isa, 4, 20)) << hllm::to_string(isa);
}

// A group's heads attended in parts (as LlamaBlock splits one KV head's heads over threads)
// give the same bits as all together: 16 heads in parts of each size from 8 down (the last part
// what is left: 16 = 7 + 7 + 2, 5 + 5 + 5 + 1, ..., padded tiles beside unpadded ones), over
// latent attention's 576-wide rows, GQA's 64 and 128 and 24 (tiled on AVX2 only), key counts
// around both tiles, softcapped too.
template <class KV>
void check_group_split_is_bit_identical(Isa isa, std::size_t n_keys, std::size_t head_dim,
                                        hllm::AttentionScoring scoring) {
  constexpr std::size_t kGroup = 16;
  const auto q = hllm::test::random_vector(kGroup * head_dim, 31);
  const auto k = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 32), head_dim);
  const auto v = kv_rows<KV>(hllm::test::random_vector(n_keys * head_dim, 33), head_dim);
  const auto attend = hllm::kernels::table_for(isa).attend_group_for<KV>();
  std::vector<float> whole(kGroup * head_dim), parts(kGroup * head_dim);
  attend(q.data(), k.data(), v.data(), n_keys, head_dim, kGroup, scoring, whole.data());
  for (std::size_t part = 8; part >= 1; --part) {
    for (std::size_t first = 0; first < kGroup; first += part)
      attend(q.data() + first * head_dim, k.data(), v.data(), n_keys, head_dim,
             std::min(part, kGroup - first), scoring, parts.data() + first * head_dim);
    ASSERT_EQ(parts, whole) << hllm::to_string(isa) << " parts of " << part << " keys " << n_keys
                            << " head_dim " << head_dim;
  }
}

TEST_P(KernelIsa, GroupSplitIntoPartsIsBitIdentical) {
  for (std::size_t n_keys : {1u, 7u, 9u, 15u, 16u, 33u, 100u})
    for (std::size_t head_dim : {24u, 64u, 128u, 576u}) {
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const hllm::AttentionScoring plain(scale), capped(scale, 2.0f);
      check_group_split_is_bit_identical<float>(GetParam(), n_keys, head_dim, plain);
      check_group_split_is_bit_identical<hllm::f16>(GetParam(), n_keys, head_dim, capped);
      if (head_dim % 32 == 0)
        check_group_split_is_bit_identical<hllm::BlockQ8_0>(GetParam(), n_keys, head_dim, plain);
    }
}

// One key, so softmax gives it weight 1 and every attention path returns its value row exactly
// (0·correction + 1·v, divided by 1): a row holding every code of a block type shows each
// ISA's vector decode equals kv_value bit for bit, on the one-head and the grouped paths. FP8
// and Q8_0: all 256 byte codes (8 blocks; FP8's two NaN codes included, which read as ±480);
// Q4_0: all 16 nibbles in both halves of every block. Scales that are not powers of two, so the
// product's rounding is checked too.
template <class KV>
void check_every_code_decodes_as_kv_value(Isa isa) {
  constexpr std::size_t kHeadDim = 256, kBlocks = kHeadDim / 32;
  std::vector<KV> v(kBlocks);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    v[b].d = hllm::f16::from_float(0.3f + 0.77f * static_cast<float>(b));
    for (std::size_t i = 0; i < sizeof(v[b].qs); ++i) {
      using Code = std::remove_reference_t<decltype(v[b].qs[i])>;
      if constexpr (std::is_same_v<KV, hllm::BlockQ4_0>)  // low nibble i + b, high 15 - i + b
        v[b].qs[i] = static_cast<Code>(((i + b) & 15) | (((15 - i + b) & 15) << 4));
      else  // every byte: int8 codes for Q8_0, E4M3 codes for FP8
        v[b].qs[i] = static_cast<Code>(32 * b + i);
    }
  }
  const std::vector<KV> k = v;
  const auto q = hllm::test::random_vector(4 * kHeadDim, 3, 1e-3f);
  const auto& table = hllm::kernels::table_for(isa);
  std::vector<float> head(kHeadDim), group(4 * kHeadDim);
  table.attend_head_for<KV>()(q.data(), k.data(), v.data(), 1, kHeadDim, 0.0625f, head.data());
  table.attend_group_for<KV>()(q.data(), k.data(), v.data(), 1, kHeadDim, 4, 0.0625f, group.data());
  for (std::size_t d = 0; d < kHeadDim; ++d) {
    const float expected = hllm::kv_value(v.data(), d);
    ASSERT_EQ(head[d], expected) << hllm::to_string(isa) << " value " << d;
    for (std::size_t g = 0; g < 4; ++g)
      ASSERT_EQ(group[g * kHeadDim + d], expected)
          << hllm::to_string(isa) << " head " << g << " value " << d;
  }
}

TEST_P(KernelIsa, EveryBlockCodeDecodesAsKvValue) {
  check_every_code_decodes_as_kv_value<hllm::BlockQ8_0>(GetParam());
  check_every_code_decodes_as_kv_value<hllm::BlockQ4_0>(GetParam());
  check_every_code_decodes_as_kv_value<hllm::BlockFP8>(GetParam());
}

// Attention through a paged cache's block table (rows spread over shuffled blocks of a pool,
// each block holding this head's rows among other layers' and heads' rows, starting at any
// position as a sliding window would) is the contiguous kernel's arithmetic on other addresses:
// bit-identical to it on the same rows, on every ISA, every element type, every group path.
template <class KV>
void check_paged_attention(Isa isa, std::size_t group, std::size_t first, std::size_t n_keys,
                           std::size_t head_dim, std::size_t block_tokens) {
  const std::size_t row = hllm::kv_row_elements<KV>(head_dim);
  const std::size_t positions = first + n_keys;
  const std::size_t n_blocks = (positions + block_tokens - 1) / block_tokens;
  // A block: [2 (K, V)][3 heads of other layers or heads, then ours, then 2 more][slots][row].
  const std::size_t heads = 6, ours = 3, block_elements = 2 * heads * block_tokens * row;
  const auto k = kv_rows<KV>(hllm::test::random_vector(positions * head_dim, 26), head_dim);
  const auto v = kv_rows<KV>(hllm::test::random_vector(positions * head_dim, 27), head_dim);
  std::vector<std::uint32_t> blocks(n_blocks);
  for (std::size_t b = 0; b < n_blocks; ++b)  // the odd ones of 2·n_blocks + 1 pool slots, reversed
    blocks[b] = static_cast<std::uint32_t>(2 * (n_blocks - 1 - b) + 1);
  const auto filler = kv_rows<KV>(
      hllm::test::random_vector((2 * n_blocks + 1) * block_elements / row * head_dim, 28),
      head_dim);
  std::vector<KV> pool(filler.begin(), filler.end());  // [pool blocks][block_elements]
  for (std::size_t p = 0; p < positions; ++p) {
    KV* base = pool.data() + blocks[p / block_tokens] * block_elements + (p % block_tokens) * row;
    std::copy_n(k.data() + p * row, row, base + ours * block_tokens * row);
    std::copy_n(v.data() + p * row, row, base + (heads + ours) * block_tokens * row);
  }
  const hllm::kernels::KVBlockRows keys{
      pool.data(),  blocks.data(), block_elements, ours * block_tokens * row,
      block_tokens, row,           first};
  hllm::kernels::KVBlockRows values = keys;
  values.offset = (heads + ours) * block_tokens * row;

  const auto q = hllm::test::random_vector(group * head_dim, 25);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto& table = hllm::kernels::table_for(isa);
  std::vector<float> expected(group * head_dim), actual(group * head_dim);
  table.attend_group_for<KV>()(q.data(), k.data() + first * row, v.data() + first * row, n_keys,
                               head_dim, group, scale, expected.data());
  table.attend_group_paged_for<KV>()(q.data(), keys, values, n_keys, head_dim, group, scale,
                                     actual.data());
  EXPECT_EQ(actual, expected) << hllm::to_string(isa) << " group " << group << " first " << first
                              << " keys " << n_keys << " head_dim " << head_dim << " block "
                              << block_tokens;
}

TEST_P(KernelIsa, PagedAttentionIsTheContiguousKernelBitForBit) {
  for (std::size_t block_tokens : {16u, 4u, 1u})
    for (std::size_t group : {1u, 3u, 4u})
      for (std::size_t first : {0u, 5u, 16u})
        for (std::size_t n_keys : {1u, 15u, 16u, 17u, 70u})
          for (std::size_t head_dim : {20u, 64u}) {
            check_paged_attention<float>(GetParam(), group, first, n_keys, head_dim, block_tokens);
            check_paged_attention<hllm::bf16>(GetParam(), group, first, n_keys, head_dim,
                                              block_tokens);
            if (head_dim % 32 == 0) {
              check_paged_attention<hllm::f16>(GetParam(), group, first, n_keys, head_dim,
                                               block_tokens);
              check_paged_attention<hllm::BlockQ8_0>(GetParam(), group, first, n_keys, head_dim,
                                                     block_tokens);
              check_paged_attention<hllm::BlockQ4_0>(GetParam(), group, first, n_keys, head_dim,
                                                     block_tokens);
              check_paged_attention<hllm::BlockFP8>(GetParam(), group, first, n_keys, head_dim,
                                                    block_tokens);
            }
          }
}

// Weights of a file type repacked as a loader repacks them (hllm::repack_tensor).
std::vector<std::byte> interleaved_bytes(hllm::DType file_type, const std::vector<std::byte>& bytes,
                                         std::size_t rows, std::size_t cols, hllm::DType to) {
  const hllm::WeightTensor w{file_type, bytes.data(), rows, cols, "w"};
  std::vector<std::byte> out(hllm::WeightTensor{to, {}, rows, cols, {}}.bytes());
  EXPECT_EQ(hllm::repack_tensor(w, to, out.data()), to);
  return out;
}

// rows × cols weights of a quantized type: Q8_0/Q4_0 by quantizing random floats; Q4_1 as random
// nibbles with d about 1/8 and m about −1 (values in about [−1, 1]); Q4_K/Q6_K as
// random blocks (every bit pattern is a valid block) with scales d, dmin of about 1/64, so
// values stay near unit size and every scale, minimum and 6-bit value gets exercised; the
// repacked types (Q4_0_X8, ...) as their file type's, repacked.
std::vector<std::byte> random_weight_bytes(hllm::DType type, std::size_t rows, std::size_t cols,
                                           std::uint32_t seed) {
  if (const hllm::DType file_type = hllm::file_type_of(type); file_type != type)
    return interleaved_bytes(file_type, random_weight_bytes(file_type, rows, cols, seed), rows,
                             cols, type);
  if (type == hllm::DType::q8_0 || type == hllm::DType::q4_0)
    return hllm::quant::quantize(type, hllm::test::random_vector(rows * cols, seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.5f / 64, 1.5f / 64);
  if (type == hllm::DType::q4_1) {  // value = d·nibble + m
    std::vector<hllm::BlockQ4_1> blocks(rows * cols / 32);
    for (auto& b : blocks) {
      b.d = hllm::from_float<hllm::f16>(scale(rng) * 8);
      b.m = hllm::from_float<hllm::f16>(-scale(rng) * 64);
      for (auto& q : b.qs) q = static_cast<std::uint8_t>(rng());
    }
    std::vector<std::byte> bytes(blocks.size() * sizeof(hllm::BlockQ4_1));
    std::memcpy(bytes.data(), blocks.data(), bytes.size());
    return bytes;
  }
  const std::size_t block_bytes = type == hllm::DType::q4_k   ? sizeof(hllm::BlockQ4_K)
                                  : type == hllm::DType::q5_k ? sizeof(hllm::BlockQ5_K)
                                                              : sizeof(hllm::BlockQ6_K);
  std::vector<std::byte> bytes(rows * cols / hllm::kQK_K * block_bytes);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  const std::size_t blocks = rows * cols / hllm::kQK_K;
  for (std::size_t i = 0; i < blocks; ++i) {
    if (type == hllm::DType::q4_k) {
      auto* block = reinterpret_cast<hllm::BlockQ4_K*>(bytes.data()) + i;
      block->d = hllm::from_float<hllm::f16>(scale(rng));
      block->dmin = hllm::from_float<hllm::f16>(scale(rng));
    } else if (type == hllm::DType::q5_k) {
      auto* block = reinterpret_cast<hllm::BlockQ5_K*>(bytes.data()) + i;
      block->d = hllm::from_float<hllm::f16>(scale(rng) / 2);  // 5-bit values
      block->dmin = hllm::from_float<hllm::f16>(scale(rng));
    } else {
      auto* block = reinterpret_cast<hllm::BlockQ6_K*>(bytes.data()) + i;
      block->d = hllm::from_float<hllm::f16>(scale(rng) / 16);  // scales reach ±127
    }
  }
  return bytes;
}

// Quantized weights with 8-bit activations. Two derived bounds:
//  - against the exact product (reference::matmul: dequantized weights times float32 x), the
//    activation rounding: each x_i moves by at most d_x/2 (d_x = its block's max|x|/127), so
//    |error| <= Σ_i |w_i| · d_x(i)/2, plus float summation rounding;
//  - against the scalar integer twin, only the float summation order differs: the integer dot
//    of each block is exact, so the difference is bounded by the float-rounding term alone.
// The kernel under test runs rows [0, split) and [split, rows) in two calls, as two threads would.
template <class Block>
void check_quant_matmul(Isa isa, hllm::DType type, std::size_t rows, std::size_t cols,
                        std::size_t n_tokens, std::uint32_t seed, std::size_t split = 0) {
  const auto bytes = random_weight_bytes(type, rows, cols, seed);
  const hllm::WeightTensor w{type, bytes.data(), rows, cols, "w"};
  const auto x = hllm::test::random_vector(n_tokens * cols, seed + 1);
  std::vector<float> exact(n_tokens * rows), fast(n_tokens * rows, NAN), twin(n_tokens * rows, NAN);
  hllm::reference::matmul(w, x.data(), n_tokens, exact.data());

  const std::size_t blocks = cols / 32;
  std::vector<hllm::BlockQ8Act> xq(n_tokens * blocks);
  const auto& table = hllm::kernels::table_for(isa);
  const auto& scalar = hllm::kernels::table_for(Isa::scalar);
  for (std::size_t t = 0; t < n_tokens; ++t)
    table.quantize_activations(x.data() + t * cols, cols, xq.data() + t * blocks);
  // The vectorized quantizer must produce the scalar one's blocks exactly.
  std::vector<hllm::BlockQ8Act> xq_scalar(xq.size());
  for (std::size_t t = 0; t < n_tokens; ++t)
    scalar.quantize_activations(x.data() + t * cols, cols, xq_scalar.data() + t * blocks);
  for (std::size_t b = 0; b < xq.size(); ++b) {
    ASSERT_EQ(xq[b].d, xq_scalar[b].d);
    ASSERT_EQ(xq[b].sum, xq_scalar[b].sum);
    ASSERT_EQ(xq[b].bias, xq_scalar[b].bias);
    ASSERT_EQ(xq[b].bias_lo, xq_scalar[b].bias_lo);
    ASSERT_EQ(xq[b].bias_hi, xq_scalar[b].bias_hi);
    ASSERT_EQ(xq[b].d_sum, xq_scalar[b].d_sum);
    ASSERT_EQ(xq[b].neg_half_sums, xq_scalar[b].neg_half_sums);
    ASSERT_EQ(0, std::memcmp(xq[b].qs, xq_scalar[b].qs, 32));
  }
  if (split == 0) split = rows / 2 | 1;
  auto scratch = scratch_for(cols, n_tokens);
  table.quant_matmul_for(type)(bytes.data(), rows, cols, xq.data(), n_tokens, fast.data(), 0,
                               std::min(split, rows), scratch.data());
  table.quant_matmul_for(type)(bytes.data(), rows, cols, xq.data(), n_tokens, fast.data(),
                               std::min(split, rows), rows, scratch.data());
  scalar.quant_matmul_for(type)(bytes.data(), rows, cols, xq.data(), n_tokens, twin.data(), 0, rows,
                                scratch.data());

  // Q4_1/Q4_K/Q5_K kernels sum s·q·x and min·x apart and add them at the end, so their float
  // rounding scales with Σ|s·q·x| + Σ|min·x| <= Σ|w·x| + 2·Σ|min·x|: the minimums are the values
  // of the same blocks with every nibble zeroed.
  std::vector<std::byte> zeroed = bytes;
  const bool has_minimum = hllm::file_type_of(type) == hllm::DType::q4_k ||
                           hllm::file_type_of(type) == hllm::DType::q5_k ||
                           hllm::file_type_of(type) == hllm::DType::q4_1;
  if (type == hllm::DType::q4_1)
    for (std::size_t i = 0; i < rows * cols / 32; ++i)
      std::memset(reinterpret_cast<hllm::BlockQ4_1*>(zeroed.data())[i].qs, 0,
                  sizeof(hllm::BlockQ4_1::qs));
  if (type == hllm::DType::q4_1_x16)  // one unit holds 16 rows' two blocks
    for (std::size_t i = 0; i < rows * cols / 32 / 32; ++i)
      std::memset(reinterpret_cast<hllm::BlockQ4_1x16*>(zeroed.data())[i].qs, 0,
                  sizeof(hllm::BlockQ4_1x16::qs));
  const bool k_quant = has_minimum && hllm::file_type_of(type) != hllm::DType::q4_1;
  for (std::size_t i = 0; k_quant && i < rows * cols / hllm::kQK_K; ++i) {
    if (type == hllm::DType::q4_k_x8) {
      if (i % 8 == 0)  // one group holds 8 rows' super-block
        std::memset(reinterpret_cast<hllm::BlockQ4_Kx8*>(zeroed.data())[i / 8].qs, 0,
                    sizeof(hllm::BlockQ4_Kx8::qs));
    } else if (type == hllm::DType::q4_k_x16) {
      if (i % 16 == 0)  // one unit holds 16 rows' super-block
        for (auto& pair : reinterpret_cast<hllm::BlockQ4_Kx16*>(zeroed.data())[i / 16].pairs)
          std::memset(pair.qs, 0, sizeof pair.qs);
    } else if (type == hllm::DType::q5_k_x16) {
      if (i % 16 == 0) {
        auto& unit = reinterpret_cast<hllm::BlockQ5_Kx16*>(zeroed.data())[i / 16];
        for (auto& pair : unit.pairs) std::memset(pair.planes, 0, sizeof pair.planes);
      }
    } else if (type == hllm::DType::q4_k) {
      std::memset(reinterpret_cast<hllm::BlockQ4_K*>(zeroed.data())[i].qs, 0, hllm::kQK_K / 2);
    } else {
      auto& block = reinterpret_cast<hllm::BlockQ5_K*>(zeroed.data())[i];
      std::memset(block.qs, 0, sizeof block.qs);
      std::memset(block.qh, 0, sizeof block.qh);
    }
  }
  const hllm::WeightTensor minimums{type, zeroed.data(), rows, cols, "minimums"};
  std::vector<float> dequantized(cols), minimum(cols, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    hllm::reference::dequantize_row(w, r, dequantized.data());
    if (has_minimum) hllm::reference::dequantize_row(minimums, r, minimum.data());
    for (std::size_t t = 0; t < n_tokens; ++t) {
      double rounding = 0, sum_abs = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        rounding += std::fabs(dequantized[c]) * xq[t * blocks + c / 32].d / 2;
        sum_abs += std::fabs(double(dequantized[c]) * x[t * cols + c]) +
                   2 * std::fabs(double(minimum[c]) * x[t * cols + c]);
      }
      const double float_bound = dot_error_bound(cols, sum_abs + rounding);
      const std::size_t i = t * rows + r;
      ASSERT_LE(std::fabs(double(fast[i]) - exact[i]), rounding + float_bound)
          << hllm::to_string(isa) << " " << hllm::dtype_name(type) << " rows " << rows << " cols "
          << cols << " tokens " << n_tokens << " at [" << t << "][" << r << "]";
      ASSERT_LE(std::fabs(double(fast[i]) - twin[i]), float_bound)
          << hllm::to_string(isa) << " vs scalar twin, " << hllm::dtype_name(type);
    }
  }
}

TEST_P(KernelIsa, QuantizedMatmulMatchesTwinAndExactWithinDerivedBounds) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<std::size_t> rows_dist(1, 40), blocks_dist(1, 12),
      tokens_dist(1, 9);
  for (int trial = 0; trial < 30; ++trial) {
    const std::size_t rows = rows_dist(rng), cols = 32 * blocks_dist(rng), n = tokens_dist(rng);
    const auto seed = static_cast<std::uint32_t>(trial * 13 + 1);
    check_quant_matmul<hllm::BlockQ8_0>(GetParam(), hllm::DType::q8_0, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ4_0>(GetParam(), hllm::DType::q4_0, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ4_1>(GetParam(), hllm::DType::q4_1, rows, cols, n, seed);
  }
}

// Q4_K, Q5_K and Q6_K: 256-value super-blocks, so columns come in multiples of 256; decode sizes
// (one row at a time), prefill sizes (packed panels: 32-slice K-chunks hold 4 super-blocks, so
// 5 super-blocks cross a chunk), ragged row remainders and the 256-token chunk.
TEST_P(KernelIsa, KQuantMatmulMatchesTwinAndExactWithinDerivedBounds) {
  for (auto [rows, supers, n] : {std::tuple{7u, 1u, 1u},
                                 {16u, 2u, 3u},
                                 {37u, 5u, 9u},
                                 {48u, 3u, 31u},
                                 {21u, 1u, 270u},
                                 {64u, 2u, 270u}}) {
    const std::size_t cols = hllm::kQK_K * supers;
    const auto seed = static_cast<std::uint32_t>(rows * 3 + supers + n);
    check_quant_matmul<hllm::BlockQ4_K>(GetParam(), hllm::DType::q4_k, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ5_K>(GetParam(), hllm::DType::q5_k, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ6_K>(GetParam(), hllm::DType::q6_k, rows, cols, n, seed);
  }
}

// Prefill-sized batches take the packed-panel GEMM on VNNI CPUs (16-row panels, 32-block
// K-chunks, 256-token chunks): shapes that cross each of those boundaries, with row counts that
// leave a ragged remainder for the tile kernel, and token counts that exercise every tail size.
TEST_P(KernelIsa, QuantizedPrefillGemmMatchesTwinAcrossPanelAndChunkBoundaries) {
  for (auto [rows, blocks, n] : {std::tuple{16u, 1u, 8u},
                                 {37u, 33u, 31u},
                                 {48u, 70u, 17u},
                                 {21u, 64u, 300u},
                                 {64u, 5u, 271u}}) {
    const std::size_t cols = 32 * blocks;
    const auto seed = static_cast<std::uint32_t>(rows * 7 + blocks + n);
    check_quant_matmul<hllm::BlockQ8_0>(GetParam(), hllm::DType::q8_0, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ4_0>(GetParam(), hllm::DType::q4_0, rows, cols, n, seed);
    check_quant_matmul<hllm::BlockQ4_1>(GetParam(), hllm::DType::q4_1, rows, cols, n, seed);
  }
}

// check_quant_matmul for repacked types over (rows, blocks of 32, tokens) shapes, each with the
// row range split on a group boundary (group_rows) and on an odd row (a range that starts and
// ends inside groups). Q4_K/Q6_K get whole super-blocks (8 blocks; 5 of them cross a 32-slice
// K-chunk).
void check_repacked_quant_matmuls(
    Isa isa, std::initializer_list<std::tuple<unsigned, unsigned, unsigned>> shapes,
    unsigned group_rows, unsigned seed_step, std::initializer_list<hllm::DType> types) {
  for (auto [rows, blocks, n] : shapes) {
    const auto seed = static_cast<std::uint32_t>(rows * seed_step + blocks + n);
    const std::size_t cols = 32 * blocks;
    const std::size_t k_cols = hllm::kQK_K * ((blocks + 7) / 8 + (blocks > 32 ? 1 : 0));
    for (std::size_t split :
         {std::max(group_rows, rows / 2 / group_rows * group_rows), rows / 2 | 1})
      for (hllm::DType type : types) switch (hllm::file_type_of(type)) {
          case hllm::DType::q8_0:
            check_quant_matmul<hllm::BlockQ8_0>(isa, type, rows, cols, n, seed, split);
            break;
          case hllm::DType::q4_0:
            check_quant_matmul<hllm::BlockQ4_0>(isa, type, rows, cols, n, seed, split);
            break;
          case hllm::DType::q4_1:
            check_quant_matmul<hllm::BlockQ4_1>(isa, type, rows, cols, n, seed, split);
            break;
          case hllm::DType::q4_k:
            check_quant_matmul<hllm::BlockQ4_K>(isa, type, rows, k_cols, n, seed, split);
            break;
          case hllm::DType::q5_k:
            check_quant_matmul<hllm::BlockQ5_K>(isa, type, rows, k_cols, n, seed, split);
            break;
          default: check_quant_matmul<hllm::BlockQ6_K>(isa, type, rows, k_cols, n, seed, split);
        }
  }
}

// Q4_0/Q8_0/Q4_K/Q6_K repacked 8 rows to a group (Interleaved8): on VNNI CPUs whole groups take the
// interleaved decode kernel (under 8 tokens) or the packed-panel GEMM (16-row panels from two
// groups, the last group of an odd count by the decode kernel); other ISAs and rows outside
// whole groups copy rows out to the row-major kernels. Decode and prefill token counts, K-chunk
// crossings (33, 70 blocks) and the 256-token chunk.
TEST_P(KernelIsa, InterleavedQuantMatmulMatchesTwinAndExactWithinDerivedBounds) {
  using hllm::DType;
  check_repacked_quant_matmuls(GetParam(),
                               {{8u, 1u, 1u},
                                {16u, 3u, 2u},
                                {24u, 33u, 1u},
                                {40u, 70u, 7u},
                                {56u, 5u, 8u},
                                {24u, 64u, 17u},
                                {48u, 33u, 271u}},
                               8, 5,
                               {DType::q8_0_x8, DType::q4_0_x8, DType::q4_k_x8, DType::q6_k_x8});
}

// Q4_0/Q4_1/Q8_0 in 16-row panels of two block columns and Q4_K/Q5_K/Q6_K of one super-block
// column (Interleaved16): on vector ISAs whole groups take decode_group16 (small batches) or the
// packed-panel GEMM, whose panels load straight from them; other ISAs and rows outside whole
// groups copy rows out. Decode and prefill token counts, K-chunk crossings (34, 70 blocks) and
// the 256-token chunk.
TEST_P(KernelIsa, PanelQuantMatmulMatchesTwinAndExactWithinDerivedBounds) {
  using hllm::DType;
  check_repacked_quant_matmuls(GetParam(),
                               {{16u, 2u, 1u},
                                {32u, 34u, 1u},
                                {48u, 70u, 7u},
                                {64u, 6u, 8u},
                                {32u, 64u, 17u},
                                {48u, 34u, 271u}},
                               16, 3,
                               {DType::q8_0_x16, DType::q4_0_x16, DType::q4_1_x16, DType::q4_k_x16,
                                DType::q5_k_x16, DType::q6_k_x16});
}

// Repacking keeps every block: each reads back bit for bit (Q4_K's unpacked scales pack again
// into the same 12 bytes: random bytes, every bit pattern), and the exact (dequantizing)
// kernels give the row-major layout's results bit for bit.
template <class Block, template <class> class Group = hllm::Interleaved8>
void check_interleaved_layout(Isa isa, hllm::DType type, hllm::DType interleaved, std::size_t cols,
                              std::size_t rows = 24) {
  const auto& table = hllm::kernels::table_for(isa);
  const std::size_t n = 5, units = cols / (sizeof(Block) > 40 ? hllm::kQK_K : 32);
  const auto x = hllm::test::random_vector(n * cols, 9);
  const auto plain = random_weight_bytes(type, rows, cols, 8);
  const auto packed = interleaved_bytes(type, plain, rows, cols, interleaved);
  const auto* groups = reinterpret_cast<const Group<Block>*>(packed.data());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t u = 0; u < units; ++u) {
      const Block block = hllm::block_at(groups, units, r, u);
      ASSERT_EQ(0,
                std::memcmp(&block, plain.data() + (r * units + u) * sizeof(Block), sizeof(Block)))
          << hllm::dtype_name(interleaved) << " row " << r << " block " << u;
    }
  std::vector<float> from_plain(n * rows), from_packed(n * rows);
  auto scratch = scratch_for(cols, n);
  table.dequant_matmul_for(type)(plain.data(), rows, cols, x.data(), n, from_plain.data(), 0, rows,
                                 scratch.data());
  table.dequant_matmul_for(interleaved)(packed.data(), rows, cols, x.data(), n, from_packed.data(),
                                        0, rows, scratch.data());
  EXPECT_EQ(from_plain, from_packed) << hllm::dtype_name(interleaved);
}

TEST_P(KernelIsa, InterleavedLayoutReadsBackAndDequantizesLikeTheFileLayout) {
  check_interleaved_layout<hllm::BlockQ4_0>(GetParam(), hllm::DType::q4_0, hllm::DType::q4_0_x8,
                                            96);
  check_interleaved_layout<hllm::BlockQ8_0>(GetParam(), hllm::DType::q8_0, hllm::DType::q8_0_x8,
                                            96);
  check_interleaved_layout<hllm::BlockQ4_K>(GetParam(), hllm::DType::q4_k, hllm::DType::q4_k_x8,
                                            512);
  check_interleaved_layout<hllm::BlockQ6_K>(GetParam(), hllm::DType::q6_k, hllm::DType::q6_k_x8,
                                            512);
  check_interleaved_layout<hllm::BlockQ4_0, hllm::Interleaved16>(GetParam(), hllm::DType::q4_0,
                                                                 hllm::DType::q4_0_x16, 128, 32);
  check_interleaved_layout<hllm::BlockQ8_0, hllm::Interleaved16>(GetParam(), hllm::DType::q8_0,
                                                                 hllm::DType::q8_0_x16, 128, 32);
  check_interleaved_layout<hllm::BlockQ4_1, hllm::Interleaved16>(GetParam(), hllm::DType::q4_1,
                                                                 hllm::DType::q4_1_x16, 128, 32);
  check_interleaved_layout<hllm::BlockQ4_K, hllm::Interleaved16>(GetParam(), hllm::DType::q4_k,
                                                                 hllm::DType::q4_k_x16, 512, 32);
  check_interleaved_layout<hllm::BlockQ5_K, hllm::Interleaved16>(GetParam(), hllm::DType::q5_k,
                                                                 hllm::DType::q5_k_x16, 512, 32);
  check_interleaved_layout<hllm::BlockQ6_K, hllm::Interleaved16>(GetParam(), hllm::DType::q6_k,
                                                                 hllm::DType::q6_k_x16, 512, 32);
}

// Which layout each shape gets: the 16-row panels where they fit (rows a multiple of 16, an even
// number of blocks), else the 8-row groups, else none; and repack_tensor refuses a layout the
// shape does not allow.
// What a load repacks for each ISA's table (Repack::automatic): the quantized 16-row panels, the
// F32/F16 panels and the BF16 pair panels on every vector ISA, the 8-row groups only with AVX-512
// VNNI (elsewhere they would copy rows out); and a plan without groups8 keeps a shape only they fit
// in the file's layout while its neighbour takes the panels.
TEST(Repack, EachIsaRepacksTheLayoutsItsKernelsRun) {
  using hllm::DType;
  for (const Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    const auto& table = hllm::kernels::table_for(isa);
    const hllm::RepackPlan plan = hllm::repack_plan(hllm::Repack::automatic, table);
    // Whether the plan takes the layouts of `kind`: all of them or none.
    const auto takes = [&](hllm::LayoutKind kind) {
      std::size_t taken = 0, of_kind = 0;
      for (std::size_t i = 0; i < hllm::kRepackedLayouts.size(); ++i)
        if (hllm::kRepackedLayouts[i].kind == kind) ++of_kind, taken += plan.layouts[i];
      EXPECT_TRUE(taken == 0 || taken == of_kind) << static_cast<int>(kind);
      return taken == of_kind;
    };
    const bool vector = isa != Isa::scalar;
    const bool vnni512 = isa == Isa::avx512 && hllm::cpu_features().avx512_vnni;
    EXPECT_EQ(takes(hllm::LayoutKind::quant_panels16), vector && (isa != Isa::avx512 || vnni512));
    EXPECT_EQ(takes(hllm::LayoutKind::quant_groups8), vnni512);
    EXPECT_EQ(takes(hllm::LayoutKind::float_panels16), vector);
    EXPECT_EQ(takes(hllm::LayoutKind::bf16_pairs16), vector);
  }
  const auto panels = random_weight_bytes(DType::q4_0, 32, 128, 1);
  const auto groups = random_weight_bytes(DType::q4_0, 24, 128, 2);
  for (const bool groups8 : {false, true}) {
    hllm::ModelWeights weights;
    weights.layers.resize(1);
    weights.layers[0].wq = {DType::q4_0, panels.data(), 32, 128, "wq"};
    weights.layers[0].wk = {DType::q4_0, groups.data(), 24, 128, "wk"};
    hllm::repack_weights(weights,
                         groups8 ? hllm::RepackPlan::of_kinds({hllm::LayoutKind::quant_panels16,
                                                               hllm::LayoutKind::quant_groups8})
                                 : hllm::RepackPlan::of_kinds({hllm::LayoutKind::quant_panels16}),
                         false);
    EXPECT_EQ(weights.layers[0].wq.type, DType::q4_0_x16);
    EXPECT_EQ(weights.layers[0].wk.type, groups8 ? DType::q4_0_x8 : DType::q4_0);
  }
}

// The layout registry (core/layouts.hpp): every layout packs a matrix of its file type into
// exactly the bytes its DTypeInfo gives (the buffer is that size, so ASan sees an overrun) and
// reads every row back to the file's very bytes; a shape it does not fit is refused; its sizes
// agree with dtype_info. Random bytes: every bit pattern is a block of these formats.
TEST(Layouts, EveryLayoutPacksAndReadsBackEveryRowExactly) {
  std::mt19937 rng(17);
  for (const hllm::LayoutSpec& spec : hllm::kRepackedLayouts) {
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(hllm::repacked_layout(spec.type), &spec);
    EXPECT_EQ(hllm::file_type_of(spec.type), spec.source);
    hllm::DTypeInfo info{};
    ASSERT_TRUE(hllm::dtype_info(spec.type, info));
    EXPECT_EQ(std::string(info.name), spec.name);
    EXPECT_FALSE(info.in_files);
    const hllm::DTypeInfo file = hllm::file_dtype_info(spec.source);
    const std::size_t rows = 3 * spec.group_rows, cols = 3 * spec.unit_columns;
    std::vector<std::byte> bytes(rows * cols / file.block_elements * file.block_bytes);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    const hllm::WeightTensor w{spec.source, bytes.data(), rows, cols, "w"};
    std::vector<std::byte> packed(hllm::WeightTensor{spec.type, nullptr, rows, cols, "w"}.bytes());
    ASSERT_EQ(hllm::repack_tensor(w, spec.type, packed.data()), spec.type);
    const std::size_t row_bytes = bytes.size() / rows;
    std::vector<std::byte> row(row_bytes);
    for (std::size_t r = 0; r < rows; ++r) {
      spec.read_row(packed.data(), rows, cols, r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), bytes.data() + r * row_bytes, row_bytes)) << "row " << r;
    }
    // Rows outside whole groups, and columns outside whole units, do not fit.
    const hllm::WeightTensor ragged_rows{spec.source, nullptr, rows + spec.group_rows / 2, cols,
                                         "w"};
    EXPECT_FALSE(spec.fits(ragged_rows.rows, cols));
    EXPECT_THROW(hllm::repack_tensor(ragged_rows, spec.type, packed.data()), hllm::Error);
    if (spec.unit_columns > file.block_elements) {
      EXPECT_FALSE(spec.fits(rows, cols + file.block_elements));
      EXPECT_THROW(
          hllm::repack_tensor({spec.source, nullptr, rows, cols + file.block_elements, "w"},
                              spec.type, packed.data()),
          hllm::Error);
    }
    // Another type's matrix is refused.
    const hllm::DType other = spec.source == hllm::DType::f32 ? hllm::DType::f16 : hllm::DType::f32;
    EXPECT_THROW(hllm::repack_tensor({other, nullptr, rows, cols, "w"}, spec.type, packed.data()),
                 hllm::Error);
  }
}

// LoadOptions::f16_as_bf16: a plan with it puts F16 projections into the BF16 pair panels,
// their values rounded to nearest even: the very bytes a BF16 matrix of the rounded values
// packs into. A shape the pair panels do not fit keeps to F16's own layouts. repack_plan sets
// it only where the table has the BF16 dot (AVX512-BF16), and only when asked.
TEST(Repack, F16AsBf16RoundsIntoThePairPanels) {
  using hllm::DType;
  const auto w16 = to_type<hllm::f16>(hllm::test::random_vector(32 * 64, 5));
  const auto odd = to_type<hllm::f16>(hllm::test::random_vector(32 * 63, 6));
  std::vector<hllm::bf16> rounded(w16.size());
  for (std::size_t i = 0; i < w16.size(); ++i)
    rounded[i] = hllm::bf16::from_float(hllm::to_float(w16[i]));
  std::vector<std::byte> expected(rounded.size() * sizeof(hllm::bf16));
  hllm::repack_tensor({DType::bf16, rounded.data(), 32, 64, "w"}, DType::bf16_x16, expected.data());
  hllm::ModelWeights weights;
  weights.layers.resize(1);
  weights.layers[0].wq = {DType::f16, w16.data(), 32, 64, "wq"};
  weights.layers[0].wk = {DType::f16, odd.data(), 32, 63, "wk"};
  hllm::RepackPlan plan = hllm::RepackPlan::all();
  plan.f16_as_bf16 = true;
  hllm::repack_weights(weights, plan, false);
  ASSERT_EQ(weights.layers[0].wq.type, DType::bf16_x16);
  EXPECT_EQ(0, std::memcmp(weights.layers[0].wq.data, expected.data(), expected.size()));
  EXPECT_EQ(weights.layers[0].wk.type, DType::f16_x16);  // odd columns: F16's own panels
  for (const Isa isa : hllm::test::supported_isas()) {
    const auto& table = hllm::kernels::table_for(isa);
    EXPECT_EQ(hllm::repack_plan(hllm::Repack::automatic, table, true).f16_as_bf16,
              table.preferred_bf16_dot() != nullptr)
        << hllm::to_string(isa);
    EXPECT_FALSE(hllm::repack_plan(hllm::Repack::automatic, table).f16_as_bf16);
    EXPECT_FALSE(hllm::repack_plan(hllm::Repack::never, table, true).f16_as_bf16);
  }
}

TEST(Repack, QuantizedTypesTakeThePanelsWhereTheShapeAllows) {
  using hllm::DType;
  for (DType type : {DType::q4_0, DType::q8_0}) {
    const bool q4 = type == DType::q4_0;
    const auto of = [&](std::size_t rows, std::size_t cols) {
      return hllm::interleaved_type(hllm::WeightTensor{type, nullptr, rows, cols, "w"});
    };
    EXPECT_EQ(of(32, 128), q4 ? DType::q4_0_x16 : DType::q8_0_x16);
    EXPECT_EQ(of(24, 128), q4 ? DType::q4_0_x8 : DType::q8_0_x8);  // rows not a multiple of 16
    EXPECT_EQ(of(32, 96), q4 ? DType::q4_0_x8 : DType::q8_0_x8);   // 3 blocks per row
    EXPECT_EQ(of(20, 128), type);
    const auto bytes = random_weight_bytes(type, 24, 128, 3);
    std::vector<std::byte> out(bytes.size());
    EXPECT_THROW(hllm::repack_tensor(hllm::WeightTensor{type, bytes.data(), 24, 128, "w"},
                                     q4 ? DType::q4_0_x16 : DType::q8_0_x16, out.data()),
                 hllm::Error);
  }
  // Q4_1 has the panels only: no 8-row groups.
  for (auto [rows, cols, layout] :
       {std::tuple{32u, 128u, DType::q4_1_x16}, {24u, 128u, DType::q4_1}, {32u, 96u, DType::q4_1}})
    EXPECT_EQ(hllm::interleaved_type(hllm::WeightTensor{DType::q4_1, nullptr, rows, cols, "w"}),
              layout);
  {
    const auto bytes = random_weight_bytes(DType::q4_1, 24, 128, 3);
    std::vector<std::byte> out(bytes.size());
    EXPECT_THROW(hllm::repack_tensor(hllm::WeightTensor{DType::q4_1, bytes.data(), 24, 128, "w"},
                                     DType::q4_1_x16, out.data()),
                 hllm::Error);
  }
  for (DType type : {DType::q4_k, DType::q6_k}) {
    const bool q4 = type == DType::q4_k;
    const auto of = [&](std::size_t rows) {
      return hllm::interleaved_type(hllm::WeightTensor{type, nullptr, rows, 256, "w"});
    };
    EXPECT_EQ(of(32), q4 ? DType::q4_k_x16 : DType::q6_k_x16);
    EXPECT_EQ(of(24), q4 ? DType::q4_k_x8 : DType::q6_k_x8);
    EXPECT_EQ(of(20), type);
    const auto bytes = random_weight_bytes(type, 32, 256, 4);
    const DType groups = q4 ? DType::q4_k_x8 : DType::q6_k_x8;  // the 8-row groups fit too
    // Exactly the layout's size (Q4_K_X8 is larger than the file's), so ASan sees any overrun.
    std::vector<std::byte> out(hllm::WeightTensor{groups, nullptr, 32, 256, "w"}.bytes());
    EXPECT_EQ(hllm::repack_tensor(hllm::WeightTensor{type, bytes.data(), 32, 256, "w"}, groups,
                                  out.data()),
              groups);
    EXPECT_THROW(hllm::repack_tensor(hllm::WeightTensor{type, bytes.data(), 32, 256, "w"},
                                     q4 ? DType::q4_0_x16 : DType::q8_0_x16, out.data()),
                 hllm::Error);
  }
}

// BF16 weights repacked into 16-row pair panels (DType::bf16_x16): rows a multiple of 16, odd
// pair counts (the decode loop takes pairs two at a time), prefill and decode token counts,
// both column and token chunk boundaries of the GEMM.
const std::tuple<unsigned, unsigned, unsigned> kBf16PanelShapes[] = {
    {16u, 2u, 1u},     {16u, 30u, 8u}, {48u, 64u, 3u}, {48u, 530u, 17u}, {80u, 258u, 271u},
    {32u, 600u, 530u}, {96u, 40u, 5u}, {32u, 6u, 2u},  {80u, 130u, 1u}};

struct Bf16Panels {
  std::vector<hllm::bf16> rows;   // [rows][cols], the file's layout
  std::vector<float> x;           // [n][cols]
  std::vector<std::byte> panels;  // the same weights repacked as a loader repacks them
};
Bf16Panels bf16_panels(std::size_t rows, std::size_t cols, std::size_t n, std::uint32_t seed) {
  Bf16Panels p{to_type<hllm::bf16>(hllm::test::random_vector(rows * cols, seed)),
               hllm::test::random_vector(n * cols, seed + 1),
               {}};
  const hllm::WeightTensor w{hllm::DType::bf16, p.rows.data(), rows, cols, "w"};
  EXPECT_EQ(hllm::interleaved_type(w), hllm::DType::bf16_x16);
  p.panels.resize(w.bytes());
  EXPECT_EQ(hllm::repack_tensor(w, p.panels.data()), hllm::DType::bf16_x16);
  return p;
}

// The layout: every element where bf16_x16_index says, each group copied back to the file's
// rows, the reference product (rows read back) equal to the file layout's; rows not a multiple
// of 16 or odd columns are not repacked.
TEST(Bf16Panels, RepackedLayoutReadsBackEveryElement) {
  for (auto [rows, cols, n] : kBf16PanelShapes) {
    const Bf16Panels p = bf16_panels(rows, cols, n, rows + cols);
    const auto* packed = reinterpret_cast<const hllm::bf16*>(p.panels.data());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        ASSERT_EQ(packed[hllm::bf16_x16_index(cols, r, c)].bits, p.rows[r * cols + c].bits)
            << r << ", " << c;
    std::vector<hllm::bf16> group(16 * cols);
    for (std::size_t g = 0; g < rows / 16; ++g) {
      hllm::deinterleave_bf16_group(reinterpret_cast<const std::uint32_t*>(p.panels.data()) +
                                        g * hllm::bf16_x16_group_dwords(cols),
                                    cols, group.data());
      ASSERT_EQ(0, std::memcmp(group.data(), p.rows.data() + 16 * g * cols, group.size() * 2));
    }
    std::vector<float> from_rows(n * rows), from_panels(n * rows);
    hllm::reference::matmul({hllm::DType::bf16, p.rows.data(), rows, cols, "w"}, p.x.data(), n,
                            from_rows.data());
    hllm::reference::matmul({hllm::DType::bf16_x16, p.panels.data(), rows, cols, "w"}, p.x.data(),
                            n, from_panels.data());
    EXPECT_EQ(from_rows, from_panels);
  }
  const hllm::bf16 one = hllm::from_float<hllm::bf16>(1.0f);
  EXPECT_EQ(hllm::interleaved_type({hllm::DType::bf16, &one, 24, 64, "w"}), hllm::DType::bf16);
  EXPECT_EQ(hllm::interleaved_type({hllm::DType::bf16, &one, 32, 63, "w"}), hllm::DType::bf16);
}

// The kernel on the panels within the derived bound (activations_rounded: bf16 activations),
// for rows [0, split) and [split, rows) computed in two calls.
void expect_bf16_product(const Bf16Panels& p, hllm::kernels::MatmulFn fn, std::size_t rows,
                         std::size_t cols, std::size_t n, std::size_t split,
                         bool activations_rounded, const std::string& what) {
  std::vector<float> actual(n * rows, NAN);
  auto scratch = scratch_for(cols, n);
  fn(p.panels.data(), rows, cols, p.x.data(), n, actual.data(), 0, split, scratch.data());
  fn(p.panels.data(), rows, cols, p.x.data(), n, actual.data(), split, rows, scratch.data());
  expect_within_dot_bound(p.rows, p.x, actual, rows, cols, n,
                          activations_rounded ? std::ldexp(1.0, -8) : 0,
                          what + " split " + std::to_string(split));
}

// The float-activation kernel (exact path and decode): AVX-512 reads whole groups in place,
// other ISAs and partial groups copy rows back to the row-major tiles.
TEST_P(KernelIsa, Bf16PanelMatmulMatchesReference) {
  const hllm::kernels::MatmulFn fn =
      hllm::kernels::table_for(GetParam()).matmul_for(hllm::DType::bf16_x16);
  ASSERT_NE(fn, nullptr);
  for (auto [rows, cols, n] : kBf16PanelShapes) {
    const Bf16Panels p = bf16_panels(rows, cols, n, rows * cols + n);
    for (std::size_t split : {std::size_t{rows} / 2 / 16 * 16, std::size_t{rows} / 2 | 1})
      expect_bf16_product(p, fn, rows, cols, n, split, false, hllm::to_string(GetParam()));
  }
}

// F32 and F16 weights repacked into 16-row panels (DType::f32_x16, f16_x16): the GEMM (AVX-512,
// 8 tokens or more; column chunks of 256 and token chunks of 512 crossed), four groups at a time
// and one at a time under that (batches split into token tiles of every size up to AVX2's six),
// and groups cut by a row range, against the reference on every ISA.
template <class W>
void check_float_panels(Isa isa, hllm::DType type) {
  for (auto [rows, cols, n] : {std::tuple{16u, 3u, 1u},
                               {80u, 300u, 2u},
                               {96u, 257u, 9u},
                               {32u, 600u, 530u},
                               {64u, 40u, 17u},
                               {48u, 70u, 7u},
                               {16u, 33u, 13u}}) {
    const auto w = to_type<W>(hllm::test::random_vector(rows * cols, rows + cols));
    const auto x = hllm::test::random_vector(n * cols, n);
    const hllm::WeightTensor file{hllm::WeightTensor::dtype_of<W>(), w.data(), rows, cols, "w"};
    ASSERT_EQ(hllm::interleaved_type(file), type);
    std::vector<std::byte> panels(file.bytes());
    ASSERT_EQ(hllm::repack_tensor(file, panels.data()), type);
    const hllm::kernels::MatmulFn fn = hllm::kernels::table_for(isa).matmul_for(type);
    ASSERT_NE(fn, nullptr);
    for (std::size_t split : {std::size_t{rows} / 2 / 16 * 16, std::size_t{rows} / 2 | 1}) {
      std::vector<float> actual(n * rows, NAN);
      auto scratch = scratch_for(cols, n);
      fn(panels.data(), rows, cols, x.data(), n, actual.data(), 0, split, scratch.data());
      fn(panels.data(), rows, cols, x.data(), n, actual.data(), split, rows, scratch.data());
      expect_within_dot_bound(w, x, actual, rows, cols, n, 0,
                              hllm::dtype_name(type) + " split " + std::to_string(split));
    }
  }
}
TEST_P(KernelIsa, FloatPanelMatmulMatchesReference) {
  check_float_panels<float>(GetParam(), hllm::DType::f32_x16);
  check_float_panels<hllm::f16>(GetParam(), hllm::DType::f16_x16);
}

// The AVX512-BF16 kernel on the panels rounds activations to bf16 (8 significant bits:
// |x − bf16(x)| <= 2^-8·|x|), so against the exact product it may differ by Σ|w·x|·2^-8 on top of
// the float summation bound: the GEMM (8 tokens or more) and the panels' own dot tile under 8
// tokens, rows of a partial group on the float-activation kernel. Prefill and decode sizes, odd
// pair counts, row ranges split inside groups, every chunk boundary.
TEST(KernelAvx512Bf16, PanelDotMatchesReferenceWithinActivationRounding) {
  if (!hllm::cpu_supports(Isa::avx512) ||
      hllm::kernels::table_for(Isa::avx512).matmul_bf16_x16_dot == nullptr)
    GTEST_SKIP() << "needs AVX512-BF16";
  const auto& table = hllm::kernels::table_for(Isa::avx512);
  for (auto [rows, cols, n] : kBf16PanelShapes) {
    const Bf16Panels p = bf16_panels(rows, cols, n, rows + 3 * cols + n);
    for (std::size_t split : {std::size_t{rows} / 2 / 16 * 16, std::size_t{rows} / 2 | 1})
      expect_bf16_product(p, table.matmul_bf16_x16_dot, rows, cols, n, split, true, "avx512_bf16");
  }
}

// The token panels packed once per operation (pack_bf16_tokens, in two ranges of token groups as
// two threads would) hold the values each chunk packs for itself, so the GEMM gives the same bits
// from either: prefill sizes, token chunks of 512 and column blocks of 256 crossed, odd pair
// counts, row ranges split inside groups. And a Compute that keeps room for the panels
// (ComputeLimits::bf16_token_panels) gives the bits of one that does not, through matmul and the
// fused gate/up, on two threads.
TEST(KernelAvx512Bf16, TokenPanelsPackedOnceGiveTheChunksBits) {
  if (!hllm::cpu_supports(Isa::avx512) ||
      hllm::kernels::table_for(Isa::avx512).pack_bf16_tokens == nullptr)
    GTEST_SKIP() << "needs AVX512-BF16";
  const auto& table = hllm::kernels::table_for(Isa::avx512);
  ASSERT_NE(table.matmul_bf16_x16_packed, nullptr);
  for (auto [rows, cols, n] : kBf16PanelShapes) {
    if (n < hllm::kernels::kBf16PackedMinTokens) continue;
    const Bf16Panels p = bf16_panels(rows, cols, n, 7 * rows + cols + n);
    hllm::AlignedBuffer<std::uint32_t> packed(hllm::kernels::kBf16TokenPanels.elements(cols, n));
    const std::size_t groups = (n + 15) / 16;
    table.pack_bf16_tokens(p.x.data(), cols, n, 0, groups / 2, packed.data());
    table.pack_bf16_tokens(p.x.data(), cols, n, groups / 2, groups, packed.data());
    for (std::size_t split : {std::size_t{rows} / 2 / 16 * 16, std::size_t{rows} / 2 | 1}) {
      std::vector<float> per_chunk(n * rows, NAN), once(n * rows, NAN);
      auto scratch = scratch_for(cols, n);
      for (auto [begin, end] :
           {std::pair{std::size_t{0}, split}, std::pair{split, std::size_t{rows}}}) {
        table.matmul_bf16_x16_dot(p.panels.data(), rows, cols, p.x.data(), n, per_chunk.data(),
                                  begin, end, scratch.data());
        table.matmul_bf16_x16_packed(p.panels.data(), rows, cols, p.x.data(), packed.data(), n,
                                     once.data(), begin, end, scratch.data());
      }
      ASSERT_EQ(0, std::memcmp(per_chunk.data(), once.data(), once.size() * sizeof(float)))
          << rows << "x" << cols << ", " << n << " tokens, split " << split;
    }
  }

  const std::size_t rows = 96, cols = 600, n = 40;
  const Bf16Panels gate = bf16_panels(rows, cols, n, 5), up = bf16_panels(rows, cols, n, 6);
  const hllm::WeightTensor gate_w{hllm::DType::bf16_x16, gate.panels.data(), rows, cols, "gate"},
      up_w{hllm::DType::bf16_x16, up.panels.data(), rows, cols, "up"};
  hllm::ThreadPool pool(2);
  std::vector<hllm::BlockQ8Act> activations(n * (cols / 32 + 1));
  // The sessions of a CPU that prefers the kernel (an Intel CPU's table does not: the table
  // copied with the preference set, so the Compute path runs here too).
  hllm::kernels::KernelTable preferring = table;
  preferring.bf16_dot_preferred = true;
  const hllm::Compute per_chunk(preferring, pool, activations, {cols, n, false}),
      once(preferring, pool, activations, {cols, n, true});
  EXPECT_EQ(per_chunk.token_panel_bytes(), 0u);
  EXPECT_EQ(once.token_panel_bytes(), hllm::kernels::kBf16TokenPanels.bytes(cols, n));
  // An exact session (no 8-bit scratch) never runs the bf16-activation GEMM: it keeps room for
  // the FP32 GEMM's token panels instead, as a session of a table that does not prefer it.
  EXPECT_EQ(hllm::Compute(preferring, pool, {}, {cols, n, true}).token_panel_bytes(),
            hllm::kernels::kFloatTokenPanels.bytes(cols, n));
  hllm::kernels::KernelTable exact_fp32 = table;
  exact_fp32.bf16_dot_preferred = false;
  EXPECT_EQ(hllm::Compute(exact_fp32, pool, activations, {cols, n, true}).token_panel_bytes(),
            hllm::kernels::kFloatTokenPanels.bytes(cols, n));
  for (std::size_t tokens : {std::size_t{8}, std::size_t{17}, n}) {
    std::vector<float> a(tokens * rows), b(tokens * rows);
    per_chunk.matmul(gate_w, gate.x.data(), tokens, a.data());
    once.matmul(gate_w, gate.x.data(), tokens, b.data());
    EXPECT_EQ(a, b) << "matmul, " << tokens << " tokens";
    std::vector<float> ga(tokens * rows), ua(tokens * rows), gb(tokens * rows), ub(tokens * rows);
    per_chunk.gate_up_activated(gate_w, up_w, hllm::GateActivation::silu, gate.x.data(), tokens,
                                ga.data(), ua.data(), ga.data());
    once.gate_up_activated(gate_w, up_w, hllm::GateActivation::silu, gate.x.data(), tokens,
                           gb.data(), ub.data(), gb.data());
    EXPECT_EQ(ga, gb) << "gate/up, " << tokens << " tokens";
  }
}

// The same for the FP32 GEMM of the F32/F16/BF16 panels (AVX-512; from kFloatPackedMinTokens
// tokens): token panels packed once (in two ranges of token groups) give the bits the chunks' own
// do, for token chunks of 512 and column blocks of 256 crossed and row ranges split inside groups;
// and a Compute keeping room for them (ComputeLimits::float_token_panels) the bits of one that does
// not.
template <class W>
void check_float_token_panels(hllm::DType type) {
  const auto& table = hllm::kernels::table_for(Isa::avx512);
  const hllm::kernels::PackedMatmulFn packed_fn = table.kernels_for(type).packed;
  ASSERT_NE(packed_fn, nullptr);
  // A width ending one past a column block (BF16: a pair past it, pair panels need even widths).
  constexpr unsigned kRagged = std::is_same_v<W, hllm::bf16> ? 258u : 257u;
  for (auto [rows, cols, n] :
       {std::tuple{32u, 600u, 530u}, {96u, kRagged, 40u}, {64u, 300u, 33u}}) {
    const auto w = to_type<W>(hllm::test::random_vector(rows * cols, rows + cols));
    const auto x = hllm::test::random_vector(n * cols, n + 1);
    const hllm::WeightTensor file{hllm::WeightTensor::dtype_of<W>(), w.data(), rows, cols, "w"};
    std::vector<std::byte> panels(file.bytes());
    ASSERT_EQ(hllm::repack_tensor(file, panels.data()), type);
    hllm::AlignedBuffer<float> packed(hllm::kernels::kFloatTokenPanels.elements(cols, n));
    const std::size_t groups = (n + 15) / 16;
    table.pack_float_tokens(x.data(), cols, n, 0, groups / 2, packed.data());
    table.pack_float_tokens(x.data(), cols, n, groups / 2, groups, packed.data());
    for (std::size_t split : {std::size_t{rows} / 2 / 16 * 16, std::size_t{rows} / 2 | 1}) {
      std::vector<float> per_chunk(n * rows, NAN), once(n * rows, NAN);
      auto scratch = scratch_for(cols, n);
      for (auto [begin, end] :
           {std::pair{std::size_t{0}, split}, std::pair{split, std::size_t{rows}}}) {
        table.matmul_for(type)(panels.data(), rows, cols, x.data(), n, per_chunk.data(), begin, end,
                               scratch.data());
        packed_fn(panels.data(), rows, cols, x.data(), packed.data(), n, once.data(), begin, end,
                  scratch.data());
      }
      ASSERT_EQ(0, std::memcmp(per_chunk.data(), once.data(), once.size() * sizeof(float)))
          << hllm::dtype_name(type) << " " << rows << "x" << cols << ", " << n << " tokens";
    }
  }
  const std::size_t rows = 96, cols = 300, n = 40;
  const auto w = to_type<W>(hllm::test::random_vector(rows * cols, 9));
  const auto x = hllm::test::random_vector(n * cols, 10);
  const hllm::WeightTensor file{hllm::WeightTensor::dtype_of<W>(), w.data(), rows, cols, "w"};
  std::vector<std::byte> panels(file.bytes());
  ASSERT_EQ(hllm::repack_tensor(file, panels.data()), type);
  const hllm::WeightTensor repacked{type, panels.data(), rows, cols, "w"};
  hllm::ThreadPool pool(2);
  const hllm::Compute per_chunk(table, pool, {}, {cols, n}),
      once(table, pool, {}, {cols, n, false, true});
  EXPECT_EQ(per_chunk.token_panel_bytes(), 0u);
  EXPECT_EQ(once.token_panel_bytes(), hllm::kernels::kFloatTokenPanels.bytes(cols, n));
  // AVX2 has no float GEMM to read them: no room kept.
  EXPECT_EQ(hllm::Compute(hllm::kernels::table_for(Isa::avx2), pool, {}, {cols, n, false, true})
                .token_panel_bytes(),
            0u);
  std::vector<float> a(n * rows), b(n * rows);
  per_chunk.matmul(repacked, x.data(), n, a.data());
  once.matmul(repacked, x.data(), n, b.data());
  EXPECT_EQ(a, b) << hllm::dtype_name(type);
}
TEST(KernelAvx512, FloatTokenPanelsPackedOnceGiveTheChunksBits) {
  if (!hllm::cpu_supports(Isa::avx512)) GTEST_SKIP() << "needs AVX-512";
  check_float_token_panels<float>(hllm::DType::f32_x16);
  check_float_token_panels<hllm::f16>(hllm::DType::f16_x16);
  check_float_token_panels<hllm::bf16>(hllm::DType::bf16_x16);  // the pairs widened
}

#if HLLM_X86
// AVX-512 CPUs without VNNI get the vpmaddubsw build of the integer kernels; this machine may
// have VNNI, so call both builds directly: the integer dots are exact and the float operations
// identical, so their results must agree bit for bit.
TEST(KernelAvx512, WithAndWithoutVnniAgreeExactly) {
  if (!hllm::cpu_supports(Isa::avx512) || !hllm::cpu_features().avx512_vnni)
    GTEST_SKIP() << "needs AVX-512 with VNNI to run both builds";
  const std::size_t rows = 37, cols = 256, n = 6;
  const auto x = hllm::test::random_vector(n * cols, 3);
  std::vector<hllm::BlockQ8Act> xq(n * cols / 32);
  for (std::size_t t = 0; t < n; ++t)
    hllm::kernels::avx512::quantize_activations(x.data() + t * cols, cols,
                                                xq.data() + t * cols / 32);
  using hllm::DType;
  namespace plain_isa = hllm::kernels::avx512;
  namespace vnni_isa = hllm::kernels::avx512_vnni;
  for (auto [type, plain_fn, vnni_fn] :
       {std::tuple{DType::q8_0, &plain_isa::matmul_q8_0, &vnni_isa::matmul_q8_0},
        {DType::q4_0, &plain_isa::matmul_q4_0, &vnni_isa::matmul_q4_0},
        {DType::q4_1, &plain_isa::matmul_q4_1, &vnni_isa::matmul_q4_1}}) {
    const auto bytes = random_weight_bytes(type, rows, cols, 4);
    std::vector<float> plain(n * rows), vnni(n * rows);
    plain_fn(bytes.data(), rows, cols, xq.data(), n, plain.data(), 0, rows, nullptr);
    vnni_fn(bytes.data(), rows, cols, xq.data(), n, vnni.data(), 0, rows, nullptr);
    EXPECT_EQ(plain, vnni) << hllm::dtype_name(type);
  }
}

// The 16-row panel kernels are written once against 16-lane primitives (simd/lanes16-inl.hpp):
// one zmm or two ymm per line, vpdpbusd or vpmaddubsw + vpmaddwd (int16 pair sums added in runs
// that cannot overflow), values offset by 128 with VNNI and small otherwise. The integer dots are
// exact and the float operations the same lane for lane, so every vector build must give the
// same bits: AVX2, AVX-VNNI, AVX-512 (called directly: its table takes the VNNI build where the
// CPU has it) and AVX-512 VNNI, by decode (1-3 tokens) and by the GEMM (4 and more), on values
// that reach the operands' extremes (random bytes: Q8_0's -128, every nibble and 6-bit value).
// Except Q6_K between the two dots: the emulated one weighs its sub-blocks' scales in integers
// (kScaledRuns), the VNNI one in floats, so there the builds of one dot agree bit for bit and
// the two dots within the float rounding of the sum (dot_error_bound of Σ|w·x|, x the
// quantized activations).
TEST(PanelKernels, EveryVectorBuildGivesTheSameBits) {
  using hllm::DType;
  using Fn = hllm::kernels::QuantMatmulFn;
  struct Build {
    const char* name;
    bool runs, vnni;
    Fn q8_0, q4_0, q4_1, q4_k, q5_k, q6_k;
  };
  namespace k = hllm::kernels;
  const auto& f = hllm::cpu_features();
  const bool avx512 = hllm::cpu_supports(Isa::avx512);
  const std::vector<Build> builds = {
      {"avx2", hllm::cpu_supports(Isa::avx2), false, &k::avx2::matmul_x16<hllm::BlockQ8_0>,
       &k::avx2::matmul_x16<hllm::BlockQ4_0>, &k::avx2::matmul_x16<hllm::BlockQ4_1>,
       &k::avx2::matmul_x16<hllm::BlockQ4_K>, &k::avx2::matmul_x16<hllm::BlockQ5_K>,
       &k::avx2::matmul_x16<hllm::BlockQ6_K>},
      {"avx_vnni", hllm::cpu_supports(Isa::avx_vnni), true,
       &k::avx_vnni::matmul_x16<hllm::BlockQ8_0>, &k::avx_vnni::matmul_x16<hllm::BlockQ4_0>,
       &k::avx_vnni::matmul_x16<hllm::BlockQ4_1>, &k::avx_vnni::matmul_x16<hllm::BlockQ4_K>,
       &k::avx_vnni::matmul_x16<hllm::BlockQ5_K>, &k::avx_vnni::matmul_x16<hllm::BlockQ6_K>},
      {"avx512", avx512, false, &k::avx512::matmul_x16<hllm::BlockQ8_0>,
       &k::avx512::matmul_x16<hllm::BlockQ4_0>, &k::avx512::matmul_x16<hllm::BlockQ4_1>,
       &k::avx512::matmul_x16<hllm::BlockQ4_K>, &k::avx512::matmul_x16<hllm::BlockQ5_K>,
       &k::avx512::matmul_x16<hllm::BlockQ6_K>},
      {"avx512_vnni", avx512 && f.avx512_vnni, true, &k::avx512_vnni::matmul_x16<hllm::BlockQ8_0>,
       &k::avx512_vnni::matmul_x16<hllm::BlockQ4_0>, &k::avx512_vnni::matmul_x16<hllm::BlockQ4_1>,
       &k::avx512_vnni::matmul_x16<hllm::BlockQ4_K>, &k::avx512_vnni::matmul_x16<hllm::BlockQ5_K>,
       &k::avx512_vnni::matmul_x16<hllm::BlockQ6_K>}};
  std::size_t ran = 0;
  for (const Build& b : builds) ran += b.runs;
  if (ran < 2) GTEST_SKIP() << "needs two vector builds this CPU runs; it runs " << ran;
  for (const bool k_quant : {false, true})
    for (const std::size_t n : {1u, 3u, 4u, 9u}) {
      const std::size_t rows = 48, cols = k_quant ? 512 : 192;
      const auto x = hllm::test::random_vector(n * cols, static_cast<std::uint32_t>(n + cols));
      std::vector<hllm::BlockQ8Act> xq(n * cols / 32);
      for (std::size_t t = 0; t < n; ++t)
        k::table_for(Isa::scalar)
            .quantize_activations(x.data() + t * cols, cols, xq.data() + t * cols / 32);
      const auto types = k_quant ? std::vector{DType::q4_k_x16, DType::q5_k_x16, DType::q6_k_x16}
                                 : std::vector{DType::q8_0_x16, DType::q4_0_x16, DType::q4_1_x16};
      for (const DType type : types) {
        const DType file = hllm::file_type_of(type);
        const auto plain = random_weight_bytes(file, rows, cols, static_cast<std::uint32_t>(n));
        const auto packed = interleaved_bytes(file, plain, rows, cols, type);
        auto scratch = scratch_for(cols, n);
        // Σ|w·x| per output [t][r], for Q6_K across the two dots.
        std::vector<double> sum_abs(n * rows, 0.0);
        const hllm::WeightTensor w{file, plain.data(), rows, cols, "w"};
        std::vector<float> row(cols);
        for (std::size_t r = 0; r < rows; ++r) {
          hllm::reference::dequantize_row(w, r, row.data());
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t c = 0; c < cols; ++c) {
              const hllm::BlockQ8Act& a = xq[(t * cols + c) / 32];
              sum_abs[t * rows + r] += std::fabs(double(row[c]) * a.d * a.qs[c % 32]);
            }
        }
        const char* first_name = nullptr;
        bool first_vnni = false;
        std::vector<float> first_of_dot[2];  // [vnni]: the first result of each dot
        for (const Build& b : builds) {
          if (!b.runs) continue;
          const Fn fn = file == DType::q8_0   ? b.q8_0
                        : file == DType::q4_0 ? b.q4_0
                        : file == DType::q4_1 ? b.q4_1
                        : file == DType::q4_k ? b.q4_k
                        : file == DType::q5_k ? b.q5_k
                                              : b.q6_k;
          std::vector<float> y(n * rows, NAN);
          fn(packed.data(), rows, cols, xq.data(), n, y.data(), 0, rows, scratch.data());
          if (first_name == nullptr) first_name = b.name, first_vnni = b.vnni;
          std::vector<float>& same_dot = first_of_dot[b.vnni];
          if (same_dot.empty()) same_dot = y;
          const std::vector<float>& first = first_of_dot[first_vnni];
          for (std::size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(same_dot[i]))
                << hllm::dtype_name(type) << " " << b.name << " vs the first build of its dot, "
                << n << " tokens, output " << i;
            if (file == DType::q6_k)
              ASSERT_LE(std::fabs(double(y[i]) - first[i]), dot_error_bound(cols, sum_abs[i]))
                  << b.name << " vs " << first_name << ", " << n << " tokens, output " << i;
            else
              ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(first[i]))
                  << hllm::dtype_name(type) << " " << b.name << " vs " << first_name << ", " << n
                  << " tokens, output " << i;
          }
        }
      }
    }
}
#endif

// The float-activation kernels for quantized weights against reference::matmul: the same
// dequantized weights and float activations, so only the summation order differs.
TEST_P(KernelIsa, DequantizingMatmulMatchesReference) {
  const auto& table = hllm::kernels::table_for(GetParam());
  for (hllm::DType type : {hllm::DType::q8_0, hllm::DType::q4_0, hllm::DType::q4_1,
                           hllm::DType::q4_k, hllm::DType::q5_k, hllm::DType::q6_k}) {
    const bool super =
        type == hllm::DType::q4_k || type == hllm::DType::q5_k || type == hllm::DType::q6_k;
    // (Decode rows of Q8_0 and Q6_K take their own AVX-512 dot products: one token, several
    // blocks per row.)
    for (auto [rows, cols, n] :
         {std::tuple{7u, 64u, 1u}, {13u, 288u, 5u}, {4u, 32u, 9u}, {5u, 768u, 1u}}) {
      if (super) cols = cols == 768 ? 768 : 256;  // three super-blocks per row, or one
      const auto bytes = random_weight_bytes(type, rows, cols, 5);
      const hllm::WeightTensor w{type, bytes.data(), rows, cols, "w"};
      const auto x = hllm::test::random_vector(n * cols, 6);
      std::vector<float> expected(n * rows), actual(n * rows);
      hllm::reference::matmul(w, x.data(), n, expected.data());
      auto scratch = scratch_for(cols, n);
      table.dequant_matmul_for(type)(bytes.data(), rows, cols, x.data(), n, actual.data(), 0, rows,
                                     scratch.data());
      // |x| ~ 1 and |w| ~ 1 here, so Σ|w x| <= cols · max and the Higham bound is at most
      // 2(cols+1)u · cols·4; 1e-4 relative to the largest output covers it for cols <= 768
      // (random signs: the largest output is ~√cols, the bound's Σ|w x| ~ cols).
      EXPECT_TRUE(hllm::test::all_close(actual, expected, 1e-4f)) << hllm::dtype_name(type);
    }
  }
}

TEST_P(KernelIsa, ComputeSplitsRowsAcrossThreadsExactly) {
  // The threaded matmul gives bit-identical results for any thread count: the chunks depend on
  // the shape only, and each output is computed inside one chunk by the same kernel, whichever
  // thread claims it. Shapes large enough to be split (decode rows, prefill GEMM panels and a
  // ragged last chunk), float and BF16 weights (the GEMMs' token panels in per-thread scratch).
  for (auto [rows, cols, n] : {std::tuple{203u, 256u, 3u}, {600u, 256u, 1u}, {203u, 160u, 40u}}) {
    const auto w = hllm::test::random_vector(rows * cols, 8);
    const auto x = hllm::test::random_vector(n * cols, 9);
    ASSERT_GT(hllm::Compute::chunks_for(rows * cols * n), 1u);
    const auto w_bf16 = to_type<hllm::bf16>(w);
    for (const hllm::WeightTensor& tensor :
         {hllm::WeightTensor{hllm::DType::f32, w.data(), rows, cols, "w"},
          hllm::WeightTensor{hllm::DType::bf16, w_bf16.data(), rows, cols, "w"}}) {
      std::vector<float> one(n * rows), many(n * rows);
      hllm::ThreadPool single(1);
      hllm::Compute(hllm::kernels::table_for(GetParam()), single)
          .matmul(tensor, x.data(), n, one.data());
      for (std::size_t threads : {2u, 5u, 40u}) {
        hllm::ThreadPool pool(threads);
        std::fill(many.begin(), many.end(), NAN);
        hllm::Compute(hllm::kernels::table_for(GetParam()), pool)
            .matmul(tensor, x.data(), n, many.data());
        EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
            << hllm::dtype_name(tensor.type) << " " << rows << "x" << cols << " n " << n
            << " threads " << threads;
      }
    }
  }
}

// Every matmul kernel is batch invariant: a token's outputs are the same bits whether it runs
// alone or among any number of other tokens, wherever it sits among them. The batched forward's
// promise that a sequence's logits do not depend on its batch (model/batch.hpp) rests on it, as
// does a prefill chunk's equality with decoding its tokens one by one. Decode, the small-batch
// tiles and the prefill GEMMs of every type and layout, fast and exact; ragged row counts (rows
// outside whole panels) and columns that cross the GEMMs' K-chunks.
TEST_P(KernelIsa, EveryMatmulIsBatchInvariant) {
  using hllm::DType;
  const std::size_t cols = 1280, max_tokens = 40;
  const auto x = hllm::test::random_vector(max_tokens * cols, 11);
  hllm::ThreadPool pool(1);
  std::vector<hllm::BlockQ8Act> activations(max_tokens * cols / 32);
  const hllm::Compute compute(hllm::kernels::table_for(GetParam()), pool, activations,
                              {cols, max_tokens});
  struct Case {
    DType type;
    std::size_t rows;
  };
  std::vector<Case> cases;
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                     DType::q4_k, DType::q5_k, DType::q6_k}) {
    cases.push_back({type, 250});
    cases.push_back({type, 256});
  }
  for (DType type :
       {DType::f32_x16, DType::f16_x16, DType::bf16_x16, DType::q8_0_x8, DType::q4_0_x8,
        DType::q4_k_x8, DType::q6_k_x8, DType::q8_0_x16, DType::q4_0_x16, DType::q4_1_x16,
        DType::q4_k_x16, DType::q5_k_x16, DType::q6_k_x16})
    cases.push_back({type, 256});
  std::vector<std::string> failures;
  for (const Case& c : cases) {
    const DType file_type = hllm::file_type_of(c.type);
    std::vector<std::byte> bytes;
    if (file_type == DType::f32 || file_type == DType::f16 || file_type == DType::bf16) {
      bytes = hllm::quant::quantize(file_type, hllm::test::random_vector(c.rows * cols, 12));
      if (c.type != file_type) bytes = interleaved_bytes(file_type, bytes, c.rows, cols, c.type);
    } else {
      bytes = random_weight_bytes(c.type, c.rows, cols, 12);
    }
    const hllm::WeightTensor w{c.type, bytes.data(), c.rows, cols, "w"};
    for (bool exact : {false, true}) {
      const auto run = [&](const float* in, std::size_t n, float* out) {
        if (exact)
          compute.matmul_exact(w, in, n, out);
        else
          compute.matmul(w, in, n, out);
      };
      std::vector<float> alone(max_tokens * c.rows), together(max_tokens * c.rows);
      for (std::size_t t = 0; t < max_tokens; ++t)
        run(x.data() + t * cols, 1, alone.data() + t * c.rows);
      for (std::size_t n : {2u, 3u, 4u, 5u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 40u}) {
        const std::size_t first = max_tokens - n;  // the tokens' rows differ from the singles'
        run(x.data() + first * cols, n, together.data());
        if (std::memcmp(together.data(), alone.data() + first * c.rows,
                        n * c.rows * sizeof(float)) != 0) {
          failures.push_back(hllm::dtype_name(c.type) + " " + std::to_string(c.rows) + " rows" +
                             (exact ? " exact" : "") + " from " + std::to_string(n) + " tokens");
          break;
        }
      }
    }
  }
  std::string list;
  for (const std::string& f : failures) list += "\n  " + f;
  EXPECT_TRUE(failures.empty()) << "not batch invariant:" << list;
}

// A matmul wider, or with more tokens, than the scratch was sized for is refused before any
// thread runs.
TEST(Compute, RefusesCallsPastItsScratch) {
  hllm::ThreadPool pool(2);
  const hllm::Compute compute(hllm::kernels::active(), pool, {}, {.max_cols = 64, .max_tokens = 4});
  const auto w = hllm::test::random_vector(16 * 128, 1);
  const auto x = hllm::test::random_vector(8 * 128, 2);
  std::vector<float> y(8 * 16);
  const hllm::WeightTensor wide{hllm::DType::f32, w.data(), 16, 128, "w"};
  const hllm::WeightTensor fits{hllm::DType::f32, w.data(), 32, 64, "w"};
  EXPECT_THROW(compute.matmul(wide, x.data(), 1, y.data()), hllm::Error);
  EXPECT_THROW(compute.matmul(fits, x.data(), 5, y.data()), hllm::Error);
  EXPECT_NO_THROW(compute.matmul(fits, x.data(), 4, y.data()));
}

// Every layout of the registry (kKernelLayouts) has its kernels in every table: float types a
// float matmul, quantized ones the integer-dot and the exact kernel, and every other type none.
TEST_P(KernelIsa, EveryLayoutHasItsKernelsAndOtherTypesNone) {
  const auto& table = hllm::kernels::table_for(GetParam());
  EXPECT_EQ(table.isa, GetParam());
  for (const hllm::DType type : hllm::kernels::kKernelLayouts) {
    const hllm::DType file = hllm::file_type_of(type);
    const bool is_float =
        file == hllm::DType::f32 || file == hllm::DType::f16 || file == hllm::DType::bf16;
    const auto& k = table.kernels_for(type);
    EXPECT_EQ(k.matmul != nullptr, is_float) << hllm::dtype_name(type);
    EXPECT_EQ(k.quant != nullptr, !is_float) << hllm::dtype_name(type);
    EXPECT_EQ(k.exact != nullptr, !is_float) << hllm::dtype_name(type);
    EXPECT_EQ(hllm::kernels::layout_index(type) < hllm::kernels::kLayoutCount, true);
  }
  for (const auto type : {static_cast<hllm::DType>(7), static_cast<hllm::DType>(0x30000)}) {
    EXPECT_EQ(hllm::kernels::layout_index(type), hllm::kernels::kLayoutCount);
    EXPECT_EQ(table.quant_matmul_for(type), nullptr);
    EXPECT_EQ(table.matmul_for(type), nullptr);
    EXPECT_EQ(table.dequant_matmul_for(type), nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, KernelIsa, ::testing::ValuesIn(hllm::kIsasBestFirst),
                         [](const auto& param_info) { return hllm::to_string(param_info.param); });

TEST(ThreadPool, RunsEveryIndexOnceAndReuses) {
  hllm::ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(4);
  for (int round = 0; round < 200; ++round)
    pool.run([&](std::size_t index, std::size_t count) {
      EXPECT_EQ(count, 4u);
      hits[index].fetch_add(1);
    });
  for (auto& h : hits) EXPECT_EQ(h.load(), 200);
}

TEST(ThreadPool, ParallelForCoversTheRangeInGrains) {
  for (std::size_t threads : {1u, 2u, 3u, 7u}) {
    hllm::ThreadPool pool(threads);
    for (std::size_t n : {0u, 1u, 5u, 16u, 100u, 1001u}) {
      for (std::size_t max_chunks : {1u, 4u, 32u, 1000u}) {
        std::vector<std::atomic<int>> covered(n);
        pool.parallel_for(n, 16, max_chunks,
                          [&](std::size_t begin, std::size_t end, std::size_t thread) {
                            EXPECT_EQ(begin % 16, 0u);
                            EXPECT_LT(begin, end);
                            EXPECT_LT(thread, threads);
                            for (std::size_t i = begin; i < end; ++i) covered[i].fetch_add(1);
                          });
        for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(covered[i].load(), 1) << n << " " << i;
      }
    }
  }
}

// The chunks of a range depend on the range, the grain and the chunk count only: the same
// boundaries whatever the pool, all whole grains but the last, none empty.
TEST(ThreadPool, ChunkingIgnoresTheThreadCount) {
  for (std::size_t n : {1u, 31u, 32u, 2560u, 5632u, 32000u})
    for (std::size_t max_chunks : {1u, 7u, 32u}) {
      const hllm::ThreadPool::Chunking c(n, 32, max_chunks);
      EXPECT_EQ(c.chunks, std::min<std::size_t>(max_chunks, (n + 31) / 32));
      EXPECT_EQ(c.begin(0), 0u);
      EXPECT_EQ(c.begin(c.chunks), n);
      for (std::size_t i = 0; i < c.chunks; ++i) {
        EXPECT_EQ(c.begin(i) % 32, 0u);
        EXPECT_LT(c.begin(i), c.begin(i + 1));
      }
      std::vector<std::pair<std::size_t, std::size_t>> seen[2];
      for (std::size_t threads : {1u, 3u}) {
        hllm::ThreadPool pool(threads);
        std::mutex m;
        pool.parallel_for(n, 32, max_chunks, [&](std::size_t begin, std::size_t end) {
          const std::lock_guard lock(m);
          seen[threads == 3].emplace_back(begin, end);
        });
        std::sort(seen[threads == 3].begin(), seen[threads == 3].end());
      }
      EXPECT_EQ(seen[0], seen[1]);
    }
}

// Every chunk runs exactly once, job after job, with more threads than chunks and with more
// chunks than threads; each call learns the index of the thread that runs it.
TEST(ThreadPool, ClaimsEveryChunkExactlyOnce) {
  for (std::size_t threads : {1u, 2u, 4u, 9u}) {
    hllm::ThreadPool pool(threads);
    for (std::size_t n_chunks : {0u, 1u, 3u, 32u, 500u}) {
      std::vector<std::atomic<int>> hits(n_chunks);
      for (int round = 0; round < 50; ++round)
        pool.for_chunks(n_chunks, [&](std::size_t chunk, std::size_t thread) {
          EXPECT_LT(thread, threads);
          hits[chunk].fetch_add(1);
        });
      for (std::size_t i = 0; i < n_chunks; ++i) EXPECT_EQ(hits[i].load(), 50) << i;
    }
  }
  hllm::ThreadPool pool(2);
  EXPECT_THROW(pool.for_chunks(hllm::ThreadPool::kMaxChunks + 1, [](std::size_t, std::size_t) {}),
               hllm::Error);
}

// Thread i runs the chunks of its lane, [n·i/threads, n·(i+1)/threads), front to back and
// consecutively (a matmul's rows as one stream per thread); others take a lane's chunks only from
// its back. So of its own lane, each thread ran a run of consecutive chunks from the lane's front.
TEST(ThreadPool, EachThreadRunsItsLaneFrontToBack) {
  for (std::size_t threads : {2u, 3u}) {
    hllm::ThreadPool pool(threads);
    for (std::size_t n_chunks : {2u, 7u, 32u, 64u}) {
      for (int round = 0; round < 20; ++round) {
        std::vector<std::vector<std::size_t>> ran(threads);  // each written by its thread only
        pool.for_chunks(
            n_chunks, [&](std::size_t chunk, std::size_t thread) { ran[thread].push_back(chunk); });
        for (std::size_t t = 0; t < threads; ++t) {
          const std::size_t lane_begin = n_chunks * t / threads,
                            lane_end = n_chunks * (t + 1) / threads;
          std::vector<std::size_t> own;
          for (std::size_t c : ran[t])
            if (c >= lane_begin && c < lane_end) own.push_back(c);
          for (std::size_t k = 0; k < own.size(); ++k)
            EXPECT_EQ(own[k], lane_begin + k) << threads << " threads, " << n_chunks << " chunks";
        }
      }
    }
  }
}

// A thread that stalls inside a chunk (as one preempted by another process would) holds back
// only that chunk: the others take every chunk still unclaimed, and the job ends when the
// stalled chunk does. Chunk 0 stalls; whichever thread claims it (the caller, first in its lane,
// or a worker that took the caller's lane from its end, then reaching chunk 0 last) starts no
// chunk after it.
TEST(ThreadPool, AStalledThreadLeavesTheOtherChunksToTheRest) {
  hllm::ThreadPool pool(3);
  constexpr std::size_t kChunks = 64;
  std::vector<std::atomic<int>> hits(kChunks);
  std::vector<std::atomic<std::size_t>> runner(kChunks), start(kChunks);
  std::atomic<std::size_t> starts{0};
  pool.for_chunks(kChunks, [&](std::size_t chunk, std::size_t thread) {
    start[chunk].store(starts.fetch_add(1));
    hits[chunk].fetch_add(1);
    runner[chunk].store(thread);
    // 100 ms is far longer than the other 63 chunks take, and than the workers take to wake.
    if (chunk == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  std::size_t by_stalled_after = 0;
  for (std::size_t i = 0; i < kChunks; ++i) {
    EXPECT_EQ(hits[i].load(), 1);
    by_stalled_after += runner[i].load() == runner[0].load() && start[i].load() > start[0].load();
  }
  EXPECT_EQ(by_stalled_after, 0u);
}

// CoreSharing::leave_busy_cores, with the machine's runnable-task count replaced by
// fake_runnable: while other processes' tasks fill the CPUs, jobs run on the caller alone; when
// the CPUs are free again, on every thread; a count that is busy only now and then changes
// nothing. Each job's chunks sleep, so the workers have time to wake and claim.
std::atomic<std::size_t> fake_runnable{0};
std::atomic<bool> fake_alternates{false};
std::optional<std::size_t> fake_runnable_tasks() {
  static std::atomic<std::size_t> calls{0};
  if (fake_alternates.load() && calls.fetch_add(1) % 2 == 1) return std::size_t{1};
  return fake_runnable.load();
}
// Runs 8-chunk jobs for `ms` milliseconds and returns the threads that ran chunks of them.
std::set<std::size_t> run_jobs_for(hllm::ThreadPool& pool, int ms) {
  std::set<std::size_t> ran;
  std::mutex mutex;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    pool.for_chunks(8, [&](std::size_t, std::size_t thread) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      const std::lock_guard<std::mutex> lock(mutex);
      ran.insert(thread);
    });
  }
  return ran;
}

TEST(ThreadPool, StepsAsideWhileOtherProcessesHoldItsCores) {
  const std::size_t cpus = hllm::whole_machine_cpus();
  if (cpus < 2) GTEST_SKIP() << "the process may not use every CPU, or there is only one";
  fake_alternates = false;
  fake_runnable = 1;  // no more than the pool's own threads: the CPUs are free
  hllm::ThreadPool pool(2, hllm::CoreSharing::leave_busy_cores, fake_runnable_tasks);
  EXPECT_EQ(run_jobs_for(pool, 100), (std::set<std::size_t>{0, 1}));
  EXPECT_EQ(pool.active_threads(), 2u);

  fake_runnable = 2 + cpus;  // other processes' tasks on every CPU
  run_jobs_for(pool, 100);   // 10 counts, 3 in a row step aside
  EXPECT_EQ(pool.active_threads(), 1u);
  EXPECT_EQ(run_jobs_for(pool, 30), std::set<std::size_t>{0});

  fake_runnable = 1;  // the caller alone (the worker sleeps): free again
  run_jobs_for(pool, 30);
  EXPECT_EQ(pool.active_threads(), 2u);
  EXPECT_EQ(run_jobs_for(pool, 200), (std::set<std::size_t>{0, 1}));

  hllm::ThreadPool fixed(2, hllm::CoreSharing::use_all, fake_runnable_tasks);
  fake_runnable = 2 + cpus;
  EXPECT_EQ(run_jobs_for(fixed, 60), (std::set<std::size_t>{0, 1}));
  EXPECT_EQ(fixed.active_threads(), 2u);
}

TEST(ThreadPool, AnOccasionalBusyCountChangesNothing) {
  const std::size_t cpus = hllm::whole_machine_cpus();
  if (cpus < 2) GTEST_SKIP() << "the process may not use every CPU, or there is only one";
  fake_runnable = 2 + cpus;
  fake_alternates = true;  // busy at every other count only
  hllm::ThreadPool pool(2, hllm::CoreSharing::leave_busy_cores, fake_runnable_tasks);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < end) {
    run_jobs_for(pool, 5);
    ASSERT_EQ(pool.active_threads(), 2u);
  }
  fake_alternates = false;
}

// The real count reads: at least the reading thread itself is runnable.
TEST(ThreadPool, CountsTheMachinesRunnableTasks) {
  const std::optional<std::size_t> runnable = hllm::runnable_tasks();
#if defined(__linux__)
  ASSERT_TRUE(runnable.has_value());
  EXPECT_GE(*runnable, 1u);
#else
  EXPECT_FALSE(runnable.has_value());
#endif
}

TEST(ThreadPool, RejectsZeroAndAbsurdThreadCounts) {
  EXPECT_THROW(hllm::ThreadPool(0), hllm::Error);
  EXPECT_THROW(hllm::ThreadPool(100000), hllm::Error);
  EXPECT_GE(hllm::default_thread_count(), 1u);
}

// The choice among ISAs from CPU features, for CPUs this machine is not: AVX-VNNI is chosen over
// plain AVX2 where the CPU has it, AVX-512 over both, and never without AVX2 itself.
TEST(Isa, ChoosesAvxVnniWhereTheCpuHasItAndAvx512IsAbsent) {
  hllm::CpuFeatures f;
  EXPECT_EQ(hllm::best_isa_for(f), Isa::scalar);
  f.avx_vnni = true;  // (not without AVX2)
  EXPECT_EQ(hllm::best_isa_for(f), Isa::scalar);
  f.avx2 = f.fma = f.f16c = true;
  EXPECT_EQ(hllm::best_isa_for(f), Isa::avx_vnni);  // Alder Lake, Zen 5 with AVX-512 off
  EXPECT_TRUE(hllm::supports(f, Isa::avx2));
  f.avx_vnni = false;
  EXPECT_EQ(hllm::best_isa_for(f), Isa::avx2);  // Zen 3, Haswell
  EXPECT_FALSE(hllm::supports(f, Isa::avx_vnni));
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  EXPECT_EQ(hllm::best_isa_for(f), Isa::avx512);  // Skylake-X
  f.avx_vnni = true;
  EXPECT_EQ(hllm::best_isa_for(f), Isa::avx512);  // Sapphire Rapids, Zen 5
  EXPECT_EQ(hllm::parse_isa("avx_vnni"), Isa::avx_vnni);
  EXPECT_STREQ(hllm::to_string(Isa::avx_vnni), "avx_vnni");
  // The running CPU: an AVX-VNNI table exactly where the CPU has AVX-VNNI.
  if (hllm::cpu_supports(Isa::avx_vnni))
    EXPECT_EQ(hllm::kernels::table_for(Isa::avx_vnni).isa, Isa::avx_vnni);
  else
    EXPECT_THROW(hllm::kernels::table_for(Isa::avx_vnni), hllm::Error);
}

// Which CPUs run BF16 panels on vdpbf16ps by default: AVX512-BF16 from AMD (Zen 4, Zen 5: at the
// FMA's rate, twice its multiply-adds), not from Intel (half that rate: the FP32 GEMM on the
// widened pairs is the faster); and the running CPU's AVX-512 table says the same.
TEST(Isa, PrefersTheBf16DotWhereItOutrunsTheFma) {
  hllm::CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  EXPECT_FALSE(hllm::bf16_dot_outruns_fma(f));  // no AVX512-BF16
  f.avx512_bf16 = true;
  EXPECT_FALSE(hllm::bf16_dot_outruns_fma(f));  // Sapphire Rapids, Emerald Rapids
  f.amd = true;
  EXPECT_TRUE(hllm::bf16_dot_outruns_fma(f));  // Zen 4, Zen 5
  f.avx512_bf16 = false;
  EXPECT_FALSE(hllm::bf16_dot_outruns_fma(f));
  if (!hllm::cpu_supports(Isa::avx512)) GTEST_SKIP() << "the table part needs AVX-512";
  const auto& table = hllm::kernels::table_for(Isa::avx512);
  EXPECT_EQ(table.matmul_bf16_x16_dot != nullptr, hllm::cpu_features().avx512_bf16);
  EXPECT_EQ(table.preferred_bf16_dot() != nullptr,
            hllm::bf16_dot_outruns_fma(hllm::cpu_features()));
  // Either way the exact BF16 panels have the FP32 GEMM.
  EXPECT_NE(table.kernels_for(hllm::DType::bf16_x16).packed, nullptr);
}

TEST(Isa, ParsesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(hllm::parse_isa("avx2"), Isa::avx2);
  EXPECT_THROW(hllm::parse_isa("sse9"), hllm::Error);
  EXPECT_TRUE(hllm::cpu_supports(Isa::scalar));
  EXPECT_TRUE(hllm::cpu_supports(hllm::best_supported_isa()));
}

TEST(Isa, EnvironmentOverride) {
  ::setenv("HLLM_ISA", "scalar", 1);
  EXPECT_EQ(hllm::selected_isa(), Isa::scalar);
  ::setenv("HLLM_ISA", "bogus", 1);
  EXPECT_THROW(hllm::selected_isa(), hllm::Error);
  ::unsetenv("HLLM_ISA");
  EXPECT_EQ(hllm::selected_isa(), hllm::best_supported_isa());
}

}  // namespace
