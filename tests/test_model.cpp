// The whole model: Llama + Session against Hugging Face LlamaForCausalLM goldens, prefill vs
// decode consistency for every attention variant, chunking, presets and bad input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "golden_file.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/presets.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/session.hpp"
#include "model_logits.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::test::all_close;
using hllm::test::GoldenFile;

// GGUF tensor name → the golden file's name for it.
std::string golden_key(const std::string& gguf_name) {
  static const std::map<std::string, std::string> kLayerNames = {
      {"attn_norm", "attn_norm"}, {"attn_q", "wq"},      {"attn_k", "wk"},
      {"attn_v", "wv"},           {"attn_output", "wo"}, {"ffn_norm", "ffn_norm"},
      {"ffn_gate", "w_gate"},     {"ffn_up", "w_up"},    {"ffn_down", "w_down"}};
  if (gguf_name == "token_embd.weight") return "tok_embeddings";
  if (gguf_name == "output_norm.weight") return "norm";
  if (gguf_name == "output.weight") return "output";
  // blk.N.<name>.weight
  const std::size_t first_dot = gguf_name.find('.', 4);
  const std::string layer = gguf_name.substr(4, first_dot - 4);
  const std::string name = gguf_name.substr(first_dot + 1, gguf_name.rfind('.') - first_dot - 1);
  return "layers." + layer + "." + kLayerNames.at(name);
}

struct GoldenModel {
  hllm::ModelConfig config;
  hllm::ModelWeights weights;
};

GoldenModel load_golden_model(const GoldenFile& g) {
  GoldenModel m;
  hllm::ModelConfig& c = m.config;
  c.vocab_size = g.integer("vocab_size");
  c.dim = g.integer("dim");
  c.ffn_dim = g.integer("ffn_dim");
  c.n_layers = g.integer("n_layers");
  c.n_heads = g.integer("n_heads");
  c.n_kv_heads = g.integer("n_kv_heads");
  c.context_length = 256;
  c.rms_eps = g.scalar("eps");
  c.tied_embeddings = g.integer("tied") != 0;
  c.rope.theta = g.scalar("theta");
  c.rope.layout = hllm::RopeLayout::neox;  // Hugging Face's half-split layout
  if (g.has("rope.factor")) {
    c.rope.scaling = {.type = hllm::RopeScalingType::llama3,
                      .factor = g.scalar("rope.factor"),
                      .original_context = g.integer("rope.original_context"),
                      .low_freq_factor = g.scalar("rope.low_freq_factor"),
                      .high_freq_factor = g.scalar("rope.high_freq_factor")};
  }
  m.weights = hllm::build_weights(c, hllm::DType::f32,
                                  [&](const hllm::TensorSpec& s, std::span<float> values) {
                                    const auto& src = g[golden_key(s.name)];
                                    ASSERT_EQ(src.size(), values.size()) << s.name;
                                    std::copy(src.begin(), src.end(), values.begin());
                                  });
  return m;
}

std::vector<std::int32_t> golden_tokens(const GoldenFile& g) {
  std::vector<std::int32_t> tokens;
  for (float t : g["tokens"]) tokens.push_back(static_cast<std::int32_t>(t));
  return tokens;
}

class HuggingFaceModel : public ::testing::TestWithParam<std::string> {};

// Logits of the whole 70-token prompt, by one prefill and by 70 decodes.
TEST_P(HuggingFaceModel, LogitsMatchTransformers) {
  const GoldenFile g(GetParam());
  GoldenModel golden = load_golden_model(g);
  const hllm::Llama<> model(golden.config, std::move(golden.weights));
  const auto tokens = golden_tokens(g);
  ASSERT_GE(tokens.size(), 64u);
  hllm::test::expect_prefill_and_decode_logits(model, tokens, g["logits"]);
}

INSTANTIATE_TEST_SUITE_P(UntiedAndTiedLlama3Scaling, HuggingFaceModel,
                         ::testing::Values("model.bin", "model_tied_llama3.bin"));

hllm::ModelConfig tiny_config(std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t window) {
  hllm::ModelConfig c;
  c.vocab_size = 97;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.ffn_dim = 96;
  c.context_length = 128;
  c.sliding_window = window;
  return c;
}

std::vector<std::int32_t> some_tokens(std::size_t n, std::int32_t vocab) {
  std::vector<std::int32_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>((i * 37 + 5) % vocab);
  return tokens;
}

struct Variant {
  const char* name;
  std::int64_t n_heads, n_kv_heads, window;
};

class AttentionVariant : public ::testing::TestWithParam<Variant> {};

// Prefill of N tokens equals N single-token decodes (within 1e-5: only the order in which the
// batch is formed differs, not the arithmetic), and prefill in chunks equals prefill at once.
TEST_P(AttentionVariant, PrefillDecodeAndChunksAgree) {
  const Variant v = GetParam();
  const hllm::ModelConfig c = tiny_config(v.n_heads, v.n_kv_heads, v.window);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 42));
  const auto tokens = some_tokens(50, 97);

  hllm::Session<> whole(model);
  const auto all_span = whole.prefill(tokens, hllm::Logits::all);
  const std::vector<float> all(all_span.begin(), all_span.end());

  hllm::Session<> stepwise(model);
  std::vector<float> decoded;
  for (std::int32_t t : tokens) {
    const auto logits = stepwise.decode(t);
    decoded.insert(decoded.end(), logits.begin(), logits.end());
  }
  EXPECT_LE(hllm::test::max_abs_diff(decoded, all), 1e-5f);

  // Chunks of 7 through max_batch, and irregular prefill calls 13 + 30 + 7.
  hllm::Session<> chunked(model, {.context = 0, .max_batch = 7});
  const auto chunked_span = chunked.prefill(tokens, hllm::Logits::all);
  EXPECT_LE(
      hllm::test::max_abs_diff(std::vector<float>(chunked_span.begin(), chunked_span.end()), all),
      1e-5f);
  hllm::Session<> pieces(model);
  std::vector<float> piecewise;
  std::size_t done = 0;
  for (std::size_t n : {13u, 30u, 7u}) {
    const auto part = pieces.prefill(std::span(tokens).subspan(done, n), hllm::Logits::all);
    piecewise.insert(piecewise.end(), part.begin(), part.end());
    done += n;
  }
  EXPECT_LE(hllm::test::max_abs_diff(piecewise, all), 1e-5f);
  EXPECT_EQ(pieces.position(), tokens.size());

  // Last-token logits are the last row of the full set.
  hllm::Session<> last(model);
  const auto last_logits = last.prefill(tokens);
  EXPECT_TRUE(all_close(last_logits, std::span(all).last(97), 1e-6f));
}

INSTANTIATE_TEST_SUITE_P(MhaGqaMqa, AttentionVariant,
                         ::testing::Values(Variant{"mha", 4, 4, 0}, Variant{"gqa", 8, 2, 0},
                                           Variant{"mqa", 4, 1, 0}, Variant{"mha_window", 4, 4, 9},
                                           Variant{"gqa_window", 8, 2, 9},
                                           Variant{"mqa_window", 4, 1, 9}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// GQA whose KV projections are copied per group reproduces the MHA model exactly.
TEST(Llama, GqaWithCopiedKvHeadsEqualsMha) {
  const hllm::ModelConfig gqa = tiny_config(8, 2, 0);
  const hllm::ModelConfig mha = tiny_config(8, 8, 0);
  const hllm::ModelWeights gqa_weights = hllm::random_weights(gqa, hllm::DType::f32, 5);
  const std::size_t head_dim = 8, group = 4;
  // Copy every tensor, widening wk/wv so that MHA head h holds GQA KV head h / group.
  std::map<std::string, const hllm::WeightTensor*> by_name;
  by_name["token_embd.weight"] = &gqa_weights.token_embedding;
  by_name["output_norm.weight"] = &gqa_weights.output_norm;
  by_name["output.weight"] = &gqa_weights.output;
  for (std::size_t l = 0; l < gqa_weights.layers.size(); ++l) {
    const auto& L = gqa_weights.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    for (auto [name, t] : {std::pair{"attn_norm", &L.attn_norm},
                           {"attn_q", &L.wq},
                           {"attn_k", &L.wk},
                           {"attn_v", &L.wv},
                           {"attn_output", &L.wo},
                           {"ffn_norm", &L.ffn_norm},
                           {"ffn_gate", &L.ffn.gate},
                           {"ffn_up", &L.ffn.up},
                           {"ffn_down", &L.ffn.down}})
      by_name[p + name + ".weight"] = t;
  }
  auto mha_weights = hllm::build_weights(
      mha, hllm::DType::f32, [&](const hllm::TensorSpec& s, std::span<float> out) {
        const hllm::WeightTensor& src = *by_name.at(s.name);
        const float* data = src.as<float>();
        const bool widen = s.name.find("attn_k") != std::string::npos ||
                           s.name.find("attn_v") != std::string::npos;
        for (std::size_t r = 0; r < s.rows; ++r) {
          const std::size_t src_row = widen ? (r / head_dim / group) * head_dim + r % head_dim : r;
          std::copy(data + src_row * s.cols, data + (src_row + 1) * s.cols,
                    out.begin() + r * s.cols);
        }
      });
  const hllm::Llama<> gqa_model(gqa, gqa_weights);
  const hllm::Llama<> mha_model(mha, std::move(mha_weights));
  const auto tokens = some_tokens(20, 97);
  hllm::Session<> a(gqa_model), b(mha_model);
  const auto la = a.prefill(tokens, hllm::Logits::all);
  const auto lb = b.prefill(tokens, hllm::Logits::all);
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin()));
}

// Reduced-precision weights and KV cache run through the same model type.
TEST(Llama, HalfPrecisionWeightsAndCacheStayClose) {
  const hllm::ModelConfig c = tiny_config(8, 2, 0);
  const hllm::Llama<> f32_model(c, hllm::random_weights(c, hllm::DType::f32, 9));
  const hllm::Llama<hllm::ModelSpec<hllm::f16, hllm::f16>> f16_model(
      c, hllm::random_weights(c, hllm::DType::f16, 9));
  const hllm::Llama<hllm::ModelSpec<hllm::bf16, hllm::bf16>> bf16_model(
      c, hllm::random_weights(c, hllm::DType::bf16, 9));
  const auto tokens = some_tokens(30, 97);
  hllm::Session<> s32(f32_model);
  hllm::Session<hllm::ModelSpec<hllm::f16, hllm::f16>> s16(f16_model);
  hllm::Session<hllm::ModelSpec<hllm::bf16, hllm::bf16>> sb16(bf16_model);
  const auto l32 = s32.prefill(tokens);
  // f16 keeps 11 significant bits (relative error 2^-11 per weight), bf16 8 bits (2^-8); through
  // two layers the logits move by a few times that, relative to their scale.
  EXPECT_TRUE(all_close(s16.prefill(tokens), l32, 1e-2f));
  EXPECT_TRUE(all_close(sb16.prefill(tokens), l32, 5e-2f));
  // A model type that fixes f16 weights refuses f32 ones.
  EXPECT_THROW(
      (hllm::Llama<hllm::ModelSpec<hllm::f16>>(c, hllm::random_weights(c, hllm::DType::f32, 9))),
      hllm::Error);
}

// The output projection's path (Llama::forward): a matrix of at most 6 bits per weight (Q4_0
// here) takes 8-bit activations in a fast session, so its logits differ from an exact session's,
// by no more than the activation rounding allows (each activation moves by at most 1/254 of its
// 32-value block's largest magnitude; with random unit-size weights that bounds each logit's
// move by about 1% of the logits' scale: 2e-2); a Q8_0 matrix stays on float activations in
// both, bit for bit. Every other matrix is f32, whose kernels are the same in both sessions.
TEST(Llama, OutputProjectionTakes8BitActivationsOnlyForAtMost6BitMatrices) {
  const hllm::ModelConfig c = tiny_config(4, 4, 0);
  const hllm::ModelWeights f32_weights = hllm::random_weights(c, hllm::DType::f32, 5);
  const hllm::WeightTensor& f32_output = f32_weights.output;
  const float* output_values = f32_output.as<float>();
  const auto tokens = some_tokens(12, 97);
  for (hllm::DType type : {hllm::DType::q4_0, hllm::DType::q8_0}) {
    SCOPED_TRACE(hllm::dtype_name(type));
    const auto bytes = hllm::quant::quantize(
        type, std::vector<float>(output_values, output_values + f32_output.rows * f32_output.cols));
    hllm::ModelWeights weights = f32_weights;
    weights.output = {type, bytes.data(), f32_output.rows, f32_output.cols, "output.weight"};
    const hllm::Llama<> model(c, std::move(weights));
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(hllm::to_string(isa));
      hllm::Session<> fast(model, {.isa = isa}), exact(model, {.isa = isa, .exact = true});
      const auto fast_span = fast.prefill(tokens, hllm::Logits::all);
      const std::vector<float> fast_logits(fast_span.begin(), fast_span.end());
      const auto exact_span = exact.prefill(tokens, hllm::Logits::all);
      const std::vector<float> exact_logits(exact_span.begin(), exact_span.end());
      const auto fast_decode = fast.decode(3);
      const std::vector<float> fast_next(fast_decode.begin(), fast_decode.end());
      const auto exact_decode = exact.decode(3);
      const std::vector<float> exact_next(exact_decode.begin(), exact_decode.end());
      if (hllm::is_at_most_6_bit(type)) {
        EXPECT_GT(hllm::test::max_abs_diff(fast_logits, exact_logits), 0.0f);
        EXPECT_TRUE(all_close(fast_logits, exact_logits, 2e-2f));
        EXPECT_GT(hllm::test::max_abs_diff(fast_next, exact_next), 0.0f);
        EXPECT_TRUE(all_close(fast_next, exact_next, 2e-2f));
      } else {
        EXPECT_EQ(fast_logits, exact_logits);
        EXPECT_EQ(fast_next, exact_next);
      }
    }
  }
}

// A Q8_0 KV cache (head_dim 32: one block per row; GQA, two query heads per KV head). Prefill,
// token-by-token decode and chunked prefill compute k and v in different summation orders
// (1e-6 apart, see above), so a value that lies that close to a rounding boundary quantizes one
// step apart on two paths: it moves by 1/127 of its block's largest magnitude, and so does any
// output it feeds, at most (convex combinations; scores by the same fraction of |q|·|k|·scale):
// the paths agree within 1/127 of the logits' scale. Against the float cache:
// every cached value moves by at most half a step, 0.4% (1/254) of its block's largest
// magnitude, so each attention output (a convex combination of values) moves by at most 0.4% of
// the values' scale and each score by 0.4% of |q|·|k|·scale; through two layers and the output
// projection that stays within a few times 0.4% of the logits' scale: 2% is the bound.
TEST(Llama, Q8_0CacheAgreesAcrossPathsAndStaysNearTheFloatCache) {
  using Q8Cache = hllm::ModelSpec<hllm::AnyWeight, hllm::BlockQ8_0>;
  hllm::ModelConfig c = tiny_config(4, 2, 0);
  c.dim = 128;  // head_dim 32
  const hllm::Llama<> f32_model(c, hllm::random_weights(c, hllm::DType::f32, 21));
  const hllm::Llama<Q8Cache> q8_model(c, hllm::random_weights(c, hllm::DType::f32, 21));
  const auto tokens = some_tokens(40, 97);

  hllm::Session<Q8Cache> whole(q8_model);
  const auto all_span = whole.prefill(tokens, hllm::Logits::all);
  const std::vector<float> all(all_span.begin(), all_span.end());
  hllm::Session<Q8Cache> stepwise(q8_model);
  std::vector<float> decoded;
  for (std::int32_t t : tokens) {
    const auto logits = stepwise.decode(t);
    decoded.insert(decoded.end(), logits.begin(), logits.end());
  }
  EXPECT_TRUE(all_close(decoded, all, 1.0f / 127));
  hllm::Session<Q8Cache> chunked(q8_model, {.context = 0, .max_batch = 7});
  EXPECT_TRUE(all_close(chunked.prefill(tokens, hllm::Logits::all), all, 1.0f / 127));

  hllm::Session<> reference(f32_model);
  const auto float_span = reference.prefill(tokens, hllm::Logits::all);
  const std::vector<float> float_cache(float_span.begin(), float_span.end());
  EXPECT_TRUE(all_close(all, float_cache, 2e-2f));
  // The quantization is real: the logits are not the float cache's bit for bit.
  EXPECT_GT(hllm::test::max_abs_diff(all, float_cache), 0.0f);
  EXPECT_EQ(whole.kv_cache().bytes(), 2 * 2 * 2 * 128 * 34);  // layers·kv heads·context·block
}

// A model keeps room for shared token panels (Session, BatchRunner) only for the GEMMs it has:
// BF16 pair panels, F32/F16 panels, an output projection among them; none for the file's
// layouts or the quantized panels.
TEST(Session, TokenPanelRoomFollowsTheModelsPanelTypes) {
  hllm::ModelConfig c = hllm::test::two_layer_gqa_config();
  c.vocab_size = 320;  // whole 16-row panels for the output projection too
  const hllm::RepackPlan every = hllm::RepackPlan::of_kinds({hllm::LayoutKind::quant_panels16,
                                                             hllm::LayoutKind::float_panels16,
                                                             hllm::LayoutKind::bf16_pairs16});
  struct Case {
    hllm::DType type;
    bool repacked, bf16, floats;
  };
  for (const Case& k :
       {Case{hllm::DType::bf16, true, true, false}, Case{hllm::DType::f32, true, false, true},
        Case{hllm::DType::f16, true, false, true}, Case{hllm::DType::q4_0, true, false, false},
        Case{hllm::DType::bf16, false, false, false},
        Case{hllm::DType::f16, false, false, false}}) {
    SCOPED_TRACE(hllm::dtype_name(k.type) + (k.repacked ? " repacked" : " file layout"));
    std::vector<std::vector<std::byte>> bytes;
    hllm::ModelWeights w = hllm::test::typed_weights(c, k.type, 5, bytes);
    if (k.repacked) hllm::repack_weights(w, every, false);
    const hllm::TokenPanelNeeds needs = hllm::token_panel_needs(w);
    EXPECT_EQ(needs.bf16, k.bf16);
    EXPECT_EQ(needs.floats, k.floats);
  }
  // Only the output projection in BF16 panels: still a BF16 GEMM to keep room for.
  std::vector<std::vector<std::byte>> bytes;
  hllm::ModelWeights w = hllm::test::typed_weights(c, hllm::DType::q4_0, 5, bytes);
  std::vector<std::byte> output = hllm::quant::quantize(
      hllm::DType::bf16, {hllm::random_weights(c, hllm::DType::f32, 6).output.as<float>(),
                          w.output.rows * w.output.cols});
  w.output = {hllm::DType::bf16, output.data(), w.output.rows, w.output.cols, w.output.name};
  hllm::repack_weights(w, every, false);
  EXPECT_EQ(w.output.type, hllm::DType::bf16_x16);
  EXPECT_TRUE(hllm::token_panel_needs(w).bf16);
  EXPECT_FALSE(hllm::token_panel_needs(w).floats);
}

// The cache type is a session option: one model serves sessions of every type at once, and
// each equals the session of a model type that fixes that cache type.
TEST(Session, KVTypeIsChosenAtRunTime) {
  using Q8Cache = hllm::ModelSpec<hllm::AnyWeight, hllm::BlockQ8_0>;
  hllm::ModelConfig c = tiny_config(4, 2, 0);
  c.dim = 128;  // head_dim 32, as a Q8_0 row needs
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 21));
  const hllm::Llama<Q8Cache> q8_model(c, hllm::random_weights(c, hllm::DType::f32, 21));
  const auto tokens = some_tokens(40, 97);

  hllm::Session<> f32(model);
  EXPECT_EQ(f32.kv_type(), hllm::KVType::f32);
  const auto f32_span = f32.prefill(tokens, hllm::Logits::all);
  const std::vector<float> f32_logits(f32_span.begin(), f32_span.end());

  hllm::Session<Q8Cache> fixed(q8_model);
  EXPECT_EQ(fixed.kv_type(), hllm::KVType::q8_0);
  const auto fixed_span = fixed.prefill(tokens, hllm::Logits::all);
  const std::vector<float> fixed_logits(fixed_span.begin(), fixed_span.end());
  hllm::Session<> chosen(model, {.kv_type = hllm::KVType::q8_0});
  EXPECT_EQ(chosen.kv_type(), hllm::KVType::q8_0);
  const auto chosen_logits = chosen.prefill(tokens, hllm::Logits::all);
  EXPECT_TRUE(std::equal(chosen_logits.begin(), chosen_logits.end(), fixed_logits.begin(),
                         fixed_logits.end()));
  // A model type's cache type is only the default.
  hllm::Session<Q8Cache> overridden(q8_model, {.kv_type = hllm::KVType::f32});
  const auto overridden_logits = overridden.prefill(tokens, hllm::Logits::all);
  EXPECT_TRUE(std::equal(overridden_logits.begin(), overridden_logits.end(), f32_logits.begin(),
                         f32_logits.end()));

  // Every type on the one model: its own size, logits near the f32 cache's (bounds as in
  // HalfPrecisionWeightsAndCacheStayClose and Q8_0CacheAgreesAcrossPaths...). Q4_0 and FP8
  // by the same argument: a Q4_0 value moves by at most half a step, 1/16 of its block's
  // largest magnitude (16 times Q8_0's 1/254: 16 × 2% = 32% at most); an FP8 value by at most
  // 2^-4 of its own magnitude, so 1/16 of the block's largest at most too, but, with 3 mantissa
  // bits kept at every magnitude, far less on average. Measured: 0.5% (Q8_0), 8% (Q4_0, about
  // 16 times Q8_0's, as the steps are) and 2% (FP8) of the logits' scale; the 20% and 5% below
  // leave room and still fail on a misread block (a Q4_0 kernel that swaps a block's halves
  // moves them by 76% of their scale).
  const std::size_t values = 2 * 2 * 2 * 128 * 32;  // keys and values · layers · kv heads · ctx · d
  const struct {
    hllm::KVType type;
    std::size_t bytes;
    float tolerance;
  } cases[] = {
      {hllm::KVType::f32, values * 4, 0.0f},          // 4 bytes per value
      {hllm::KVType::f16, values * 2, 1e-2f},         // 2
      {hllm::KVType::bf16, values * 2, 5e-2f},        // 2
      {hllm::KVType::q8_0, values / 32 * 34, 2e-2f},  // 34 per 32 values
      {hllm::KVType::q4_0, values / 32 * 18, 2e-1f},  // 18 per 32
      {hllm::KVType::fp8, values / 32 * 34, 5e-2f},   // 34 per 32
  };
  static_assert(std::size(cases) == std::size(hllm::kKVTypes), "a case for every KV type");
  for (const auto& k : cases) {
    SCOPED_TRACE(hllm::to_string(k.type));
    hllm::Session<> session(model, {.kv_type = k.type});
    EXPECT_EQ(session.kv_type(), k.type);
    EXPECT_EQ(session.kv_cache().type(), k.type);
    EXPECT_EQ(session.kv_cache().bytes(), k.bytes);
    const auto logits = session.prefill(tokens, hllm::Logits::all);
    EXPECT_TRUE(all_close(logits, f32_logits, k.tolerance));
    if (k.type != hllm::KVType::f32) {
      EXPECT_GT(hllm::test::max_abs_diff(logits, f32_logits), 0.0f);
    }
  }
  EXPECT_NO_THROW(chosen.kv_cache().get<hllm::BlockQ8_0>());
  EXPECT_THROW(chosen.kv_cache().get<float>(), hllm::Error);
  EXPECT_EQ(chosen.kv_cache().get<hllm::BlockQ8_0>().length(), tokens.size());
}

TEST(Session, KVTypeNamesRoundTrip) {
  for (hllm::KVType t : hllm::kKVTypes) EXPECT_EQ(hllm::kv_type_from_name(hllm::to_string(t)), t);
  // llama.cpp's --cache-type-k names, plus fp8.
  EXPECT_EQ(hllm::kv_type_from_name("q4_0"), hllm::KVType::q4_0);
  EXPECT_EQ(hllm::kv_type_from_name("fp8"), hllm::KVType::fp8);
  EXPECT_STREQ(hllm::to_string(hllm::KVType::fp8), "fp8");
  EXPECT_EQ(hllm::kv_type_names(), "f32, f16, bf16, q8_0, q4_0 or fp8");
  EXPECT_FALSE(hllm::kv_type_from_name("q5_1").has_value());
  EXPECT_FALSE(hllm::kv_type_from_name("F16").has_value());
  EXPECT_FALSE(hllm::kv_type_from_name("fp8_e4m3").has_value());
}

// Unless it asks, a session gets llama.cpp's default context, or the model's if shorter.
TEST(Session, DefaultContextIs4096OrTheModelsLength) {
  hllm::ModelConfig c = tiny_config(4, 4, 0);
  c.context_length = 8192;
  const hllm::Llama<> long_model(c, hllm::random_weights(c, hllm::DType::f32, 3));
  EXPECT_EQ(hllm::Session<>(long_model).context(), hllm::kDefaultContext);
  EXPECT_EQ(hllm::kDefaultContext, 4096u);
  EXPECT_EQ(hllm::Session<>(long_model, {.context = 8192}).context(), 8192u);
  c.context_length = 128;
  const hllm::Llama<> short_model(c, hllm::random_weights(c, hllm::DType::f32, 3));
  EXPECT_EQ(hllm::Session<>(short_model).context(), 128u);
  EXPECT_EQ(hllm::Session<>(short_model, {.context = 300}).context(), 300u);
}

// --- presets -------------------------------------------------------------------------------

TEST(Presets, RealDimensions) {
  const auto tiny = hllm::presets::TinyLlama_1_1B<>::config();
  EXPECT_EQ(tiny.dim, 2048);
  EXPECT_EQ(tiny.n_layers, 22);
  EXPECT_EQ(tiny.n_heads, 32);
  EXPECT_EQ(tiny.n_kv_heads, 4);
  EXPECT_EQ(tiny.ffn_dim, 5632);
  EXPECT_EQ(tiny.vocab_size, 32000);
  const auto l3 = hllm::presets::Llama3_8B<>::config();
  EXPECT_EQ(l3.vocab_size, 128256);
  EXPECT_EQ(l3.n_kv_heads, 8);
  EXPECT_EQ(l3.ffn_dim, 14336);
  EXPECT_EQ(l3.rope.theta, 500000.0f);
  const auto l32 = hllm::presets::Llama3_2_1B<>::config();
  EXPECT_TRUE(l32.tied_embeddings);
  EXPECT_EQ(l32.rope.scaling.type, hllm::RopeScalingType::llama3);
  EXPECT_EQ(l32.rope.scaling.factor, 32.0f);
  EXPECT_EQ(hllm::presets::Mistral_7B<>::config().sliding_window, 4096);
  EXPECT_EQ(hllm::presets::Llama2_7B<>::config().n_kv_heads, 32);
  for (const auto& name : hllm::presets::names()) {
    const auto c = hllm::presets::by_name(name);
    EXPECT_NO_THROW(c.validate()) << name;
  }
  EXPECT_THROW(hllm::presets::by_name("gpt-5"), hllm::Error);
  // The preset spec types agree with their runtime configs.
  EXPECT_NO_THROW(hllm::presets::TinyLlama_1_1B<>::check(tiny));
  EXPECT_NO_THROW(hllm::presets::Llama3_2_1B<>::check(l32));
  EXPECT_THROW(hllm::presets::TinyLlama_1_1B<>::check(l3), hllm::Error);
  // DeepSeek-V2-Lite: the cache's one row of 512 + 64 per token, 192-wide heads before
  // absorption, YaRN's mscale on the scores.
  const auto ds = hllm::presets::DeepSeek_V2_Lite<>::config();
  EXPECT_NO_THROW(hllm::presets::DeepSeek_V2_Lite<>::check(ds));
  EXPECT_EQ(ds.kv_dim(), 576);
  EXPECT_EQ(ds.mla_q_head_dim(), 192);
  EXPECT_NEAR(ds.resolved_attention_scale(), 0.11472, 1e-5);  // (1 + 0.0707 ln 40)² / sqrt(192)
  EXPECT_EQ(ds.shared_expert_ffn_dim, 2816);
}

TEST(Presets, FixedShapeTypeRefusesOtherShapes) {
  const hllm::ModelConfig c = tiny_config(4, 4, 0);
  try {
    hllm::Llama<hllm::presets::TinyLlama_1_1B<>> model(
        c, hllm::random_weights(c, hllm::DType::f32, 1));
    FAIL() << "expected hllm::Error";
  } catch (const hllm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fixes it to 2048"), std::string::npos) << e.what();
  }
}

// --- bad input -----------------------------------------------------------------------------

hllm::ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hllm::Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no hllm::Error thrown";
  return hllm::ErrorKind::internal;
}

TEST(BadInput, ConfigErrorsNameTheField) {
  auto field_of = [](hllm::ModelConfig c) {
    try {
      c.validate();
    } catch (const hllm::Error& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  auto c = tiny_config(6, 4, 0);
  c.dim = 60;
  EXPECT_EQ(field_of(c), "n_kv_heads");  // 6 % 4 != 0
  c = tiny_config(4, 4, 0);
  c.dim = 0;
  EXPECT_EQ(field_of(c), "dim");
  c = tiny_config(4, 4, 0);
  c.n_layers = -2;
  EXPECT_EQ(field_of(c), "n_layers");
  c = tiny_config(4, 4, 0);
  c.vocab_size = std::int64_t{1} << 40;  // absurd
  EXPECT_EQ(field_of(c), "vocab_size");
  c = tiny_config(4, 4, 0);
  c.dim = 60;  // head_dim 15: odd, cannot rotate in pairs
  EXPECT_THROW(c.validate(), hllm::Error);
  c = tiny_config(4, 4, 0);
  c.rope.rot_dims = 5;
  EXPECT_THROW(c.validate(), hllm::Error);
  c = tiny_config(4, 4, -1);
  EXPECT_EQ(field_of(c), "sliding_window");
}

TEST(BadInput, TokenOutsideVocabulary) {
  const hllm::ModelConfig c = tiny_config(4, 2, 0);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  hllm::Session<> s(model);
  const std::vector<std::int32_t> bad{1, 2, 97};
  EXPECT_EQ(kind_of([&] { s.prefill(bad); }), hllm::ErrorKind::out_of_range);
  EXPECT_EQ(kind_of([&] { s.decode(-1); }), hllm::ErrorKind::out_of_range);
  EXPECT_EQ(s.position(), 0u);  // nothing was committed
  EXPECT_EQ(kind_of([&] { s.prefill({}); }), hllm::ErrorKind::invalid_argument);
}

TEST(BadInput, SequenceLongerThanTheCache) {
  const hllm::ModelConfig c = tiny_config(4, 2, 0);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  hllm::Session<> s(model, {.context = 16, .max_batch = 8});
  EXPECT_EQ(kind_of([&] { s.prefill(some_tokens(17, 97)); }), hllm::ErrorKind::capacity);
  EXPECT_EQ(s.position(), 0u);
  s.prefill(some_tokens(16, 97));
  EXPECT_EQ(kind_of([&] { s.decode(3); }), hllm::ErrorKind::capacity);
  s.rewind(10);
  EXPECT_NO_THROW(s.decode(3));
  EXPECT_EQ(kind_of([&] { hllm::Session<>(model, {.context = std::size_t{1} << 30}); }),
            hllm::ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { hllm::Session<>(model, {.context = 8, .max_batch = 0}); }),
            hllm::ErrorKind::invalid_argument);
}

// Thread counts and context sizes: 0 means the default (the physical core count; the model's
// trained context), anything outside [1, kMaxThreads] or above kMaxContext is refused before
// any thread or buffer exists, and a KV cache that cannot exist is Error(capacity).
TEST(BadInput, ThreadAndContextLimits) {
  const hllm::ModelConfig c = tiny_config(4, 2, 0);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  const auto session_error = [&](hllm::SessionOptions options, hllm::ErrorKind kind,
                                 const std::string& fragment) {
    hllm::test::expect_error([&] { hllm::Session<>(model, options); }, kind, "", "", std::nullopt,
                             fragment);
  };
  for (std::size_t threads : {hllm::kMaxThreads + 1, std::size_t{100000}, ~std::size_t{0}})
    session_error({.threads = threads}, hllm::ErrorKind::invalid_argument,
                  "thread count must be in [1, 512]");
  for (std::size_t context : {hllm::kMaxContext + 1, std::size_t{1} << 40, ~std::size_t{0}})
    session_error({.context = context}, hllm::ErrorKind::invalid_argument,
                  "exceeds the maximum of 16777216");
  for (std::size_t batch : {std::size_t{0}, std::size_t{65537}})
    session_error({.max_batch = batch}, hllm::ErrorKind::invalid_argument,
                  "max_batch must be in [1, 65536]");
  hllm::test::expect_error([] { hllm::ThreadPool pool(0); }, hllm::ErrorKind::invalid_argument, "",
                           "", std::nullopt, "thread count must be in [1, 512], got 0");
  // 0 means the default.
  const hllm::Session<> defaults(model);
  EXPECT_EQ(defaults.threads(), hllm::default_thread_count());
  EXPECT_EQ(defaults.context(), 128u);
  // A context beyond the trained one is the caller's choice (as in llama.cpp); it is allowed.
  EXPECT_EQ(hllm::Session<>(model, {.context = 1000, .threads = 1}).context(), 1000u);
  // KV cache sizes: the product of the four sizes must not wrap around to a small buffer.
  hllm::test::expect_error(
      [] { hllm::KVCache<float>(std::size_t{1} << 20, std::size_t{1} << 20, 64, 1 << 24); },
      hllm::ErrorKind::capacity, "", "", std::nullopt, "its size overflows the address space");
  hllm::test::expect_error([] { hllm::KVCache<float>(2, 2, 16, 0); },
                           hllm::ErrorKind::invalid_argument, "", "", std::nullopt,
                           "KV cache dimensions must be positive");
}

// A prompt longer than the context, through generate(): Error(capacity) before any work, and
// the session is left empty.
TEST(BadInput, PromptLongerThanTheContextThroughGenerate) {
  const hllm::ModelConfig c = tiny_config(4, 2, 0);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  hllm::Session<> s(model, {.context = 16, .threads = 1});
  hllm::Sampler sampler({.seed = 1});
  const auto prompt = some_tokens(17, 97);
  hllm::test::expect_error([&] { hllm::generate(s, prompt, sampler, {.max_tokens = 4}); },
                           hllm::ErrorKind::capacity, "", "", std::nullopt,
                           "17 tokens at position 0 exceed the context of 16 tokens");
  EXPECT_EQ(s.position(), 0u);
  // A token id outside the vocabulary, with its index.
  hllm::test::expect_error(
      [&] {
        s.prefill(std::vector<std::int32_t>{1, 97});
      },
      hllm::ErrorKind::out_of_range, "", "", std::nullopt,
      "token id 97 at index 1 is outside the vocabulary [0, 97)");
}

TEST(BadInput, WeightsOfTheWrongShape) {
  const hllm::ModelConfig c = tiny_config(4, 2, 0);
  hllm::ModelWeights w = hllm::random_weights(c, hllm::DType::f32, 1);
  w.layers[1].wk.rows = 64;  // config implies 32
  try {
    hllm::Llama<> model(c, w);
    FAIL() << "expected hllm::Error";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.field(), "blk.1.attn_k.weight");
    EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  }
}

}  // namespace

namespace {

hllm::ModelConfig threaded_config() {
  // Large enough that matmuls and attention are split across threads (2^17 multiply-adds).
  hllm::ModelConfig c = tiny_config(8, 2, 0);
  c.dim = 256;
  c.ffn_dim = 768;
  c.vocab_size = 512;
  return c;
}

// One model shared read-only by several threads, each generating with its own session and
// sampler: the same tokens as running the generations one by one.
TEST(Concurrency, SessionsOnManyThreadsMatchSequentialRuns) {
  const hllm::ModelConfig c = threaded_config();
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 21));
  constexpr int kSessions = 4;
  auto run = [&](int i) {
    hllm::Session<> session(model, {.threads = 2});
    hllm::Sampler sampler({.temperature = 0.9f, .seed = static_cast<std::uint64_t>(100 + i)});
    const auto prompt = some_tokens(static_cast<std::size_t>(5 + i), 512);
    return hllm::generate(session, prompt, sampler, {.max_tokens = 24}).tokens;
  };
  std::vector<std::vector<std::int32_t>> sequential(kSessions), parallel(kSessions);
  for (int i = 0; i < kSessions; ++i) sequential[i] = run(i);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) threads.emplace_back([&, i] { parallel[i] = run(i); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(parallel, sequential);
}

// Threads split whole output rows and (token, head) pairs, never a sum, so the thread count
// cannot change a single bit of the logits; the same seed gives the same tokens run after run.
TEST(Determinism, ThreadCountAndRepetitionDoNotChangeResults) {
  const hllm::ModelConfig c = threaded_config();
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 22));
  const auto prompt = some_tokens(40, 512);
  std::vector<float> reference;
  for (std::size_t threads : {1u, 2u, 3u}) {
    hllm::Session<> session(model, {.threads = threads});
    const auto logits = session.prefill(prompt, hllm::Logits::all);
    if (reference.empty()) reference.assign(logits.begin(), logits.end());
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), reference.begin())) << threads;
  }
  std::vector<std::int32_t> first;
  for (int run = 0; run < 3; ++run) {
    hllm::Session<> session(model);
    hllm::Sampler sampler({.temperature = 1.0f, .seed = 7});
    const auto tokens = hllm::generate(session, prompt, sampler, {.max_tokens = 16}).tokens;
    if (run == 0) first = tokens;
    EXPECT_EQ(tokens, first);
  }
}

// The projections (and the output matrix) of random f32 weights converted to `type`, the
// embedding and norms kept f32; `bytes` owns the converted matrices.
// Prefill in chunks (every logit) and a few decode steps: what Determinism compares.
std::vector<float> prefill_and_decode(const hllm::Llama<>& model, hllm::SessionOptions options) {
  hllm::Session<> session(model, options);
  const auto prompt = some_tokens(40, 512);
  const auto logits = session.prefill(prompt, hllm::Logits::all);
  std::vector<float> out(logits.begin(), logits.end());
  for (std::int32_t token : {5, 77, 300}) {
    const auto next = session.decode(token);
    out.insert(out.end(), next.begin(), next.end());
  }
  return out;
}

// The chunks of every parallel job depend on the shapes only and the threads claim them in any
// order, so the logits are the same bits for any thread count: every weight type the loaders
// produce, in the file's layout and repacked (interleaved quantized panels, BF16 panels),
// prefill (16-token chunks: the GEMMs) and decode, fast and exact sessions, every ISA. 16
// threads on this machine's few cores are preempted mid-job all the time (a slow thread's
// chunks go to the others), and outnumber the chunks of the smaller jobs. One test per type, so
// that CTest runs them side by side (under ThreadSanitizer the five in one test took four minutes
// of one core).
class DeterminismOfType : public ::testing::TestWithParam<hllm::DType> {};

TEST_P(DeterminismOfType, SameBitsForAnyThreadCount) {
  const hllm::ModelConfig c = threaded_config();
  for (bool repacked : {false, true}) {
    std::vector<std::vector<std::byte>> bytes;
    hllm::ModelWeights weights = hllm::test::typed_weights(c, GetParam(), 23, repacked, bytes);
    const hllm::Llama<> model(c, std::move(weights));
    for (hllm::Isa isa : hllm::test::supported_isas())
      for (bool exact : {false, true}) {
        SCOPED_TRACE(hllm::dtype_name(model.weights().layers[0].wq.type) + " " +
                     hllm::to_string(isa) + (exact ? " exact" : ""));
        const hllm::SessionOptions base{.max_batch = 16, .threads = 1, .isa = isa, .exact = exact};
        const std::vector<float> reference = prefill_and_decode(model, base);
        for (std::size_t threads : {2u, 3u, 4u, 16u}) {
          hllm::SessionOptions options = base;
          options.threads = threads;
          const std::vector<float> logits = prefill_and_decode(model, options);
          ASSERT_EQ(logits.size(), reference.size());
          EXPECT_EQ(0, std::memcmp(logits.data(), reference.data(), logits.size() * 4))
              << threads << " threads";
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryWeightType, DeterminismOfType,
                         ::testing::Values(hllm::DType::f32, hllm::DType::f16, hllm::DType::bf16,
                                           hllm::DType::q8_0, hllm::DType::q4_0),
                         [](const auto& type) { return hllm::dtype_name(type.param); });

}  // namespace
