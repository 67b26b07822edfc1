// Multi-head latent attention (ModelConfig::kv_lora_rank, DeepSeek-V2/V3): the absorbed form the
// block runs (the cache holds one [RoPE key | latent] row per token, queries multiplied into the
// latent space, W_vb applied after attention) against the expanded form written out here in
// double precision (every head's keys and values decompressed from the latent, as
// DeepseekV2Attention computes them), with and without the query's low-rank projection, prefill
// and decode, on every ISA; decode after a prefill equal to the whole prefill; 8-bit weights
// through the integer kernels close to the scalar ISA's; the cache's size per token.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/synthetic.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/model/forward_context.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/session.hpp"
#include "hllm/serve/engine.hpp"
#include "model_logits.hpp"
#include "test_util.hpp"

namespace {

using hllm::test::all_close;

// A two-layer model with latent attention: 4 heads, a latent of 64, RoPE keys of 16, query and
// key parts without RoPE of 32, values of 32 (every width a multiple of 32, for the 8-bit kernels).
hllm::ModelConfig latent_config(std::int64_t q_lora_rank) {
  hllm::ModelConfig c;
  c.vocab_size = 64;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ffn_dim = 96;
  c.context_length = 64;
  c.rms_eps = 1e-6f;
  c.kv_lora_rank = 64;
  c.q_lora_rank = q_lora_rank;
  c.mla_nope_dim = 32;
  c.mla_v_dim = 32;
  c.rope.layout = hllm::RopeLayout::interleaved;  // DeepSeek's q_pe and k_pe rows
  c.rope.theta = 10000.0f;
  c.rope.rot_dims = 16;
  c.n_kv_heads = 1;
  c.head_dim = c.rope.rot_dims + c.kv_lora_rank;
  return c;
}

// y = W x for a float tensor W: [rows][cols].
std::vector<double> matvec(const hllm::WeightTensor& w, std::span<const double> x) {
  std::vector<double> y(w.rows, 0.0);
  for (std::size_t r = 0; r < w.rows; ++r)
    for (std::size_t c = 0; c < w.cols; ++c) y[r] += double(w.as<float>()[r * w.cols + c]) * x[c];
  return y;
}

std::vector<double> rms_norm(std::span<const double> x, const hllm::WeightTensor& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(w.as<float>()[i]);
  return y;
}

// Rotates pairs (2i, 2i + 1) of x[0..rot) by position · theta^(-2i/rot).
void rope_interleaved(double* x, std::size_t rot, double theta, std::size_t position) {
  for (std::size_t i = 0; i < rot / 2; ++i) {
    const double angle = double(position) * std::pow(theta, -2.0 * double(i) / double(rot));
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * std::cos(angle) - b * std::sin(angle);
    x[2 * i + 1] = a * std::sin(angle) + b * std::cos(angle);
  }
}

// The logits [T][vocab] of the expanded form: per head, k_h = [W_kb_h^T c | RoPE(k_pe)] and
// v_h = W_vb_h c from each token's normed latent c; q_h = [q_nope_h | RoPE(q_pe_h)]; scores
// q_h · k_h / sqrt(nope + rot); then Wo, a SwiGLU FFN, the output norm and projection.
std::vector<float> expanded_logits(const hllm::ModelConfig& c, const hllm::ModelWeights& w,
                                   const std::vector<std::int32_t>& tokens) {
  const auto dim = static_cast<std::size_t>(c.dim), heads = static_cast<std::size_t>(c.n_heads),
             latent = static_cast<std::size_t>(c.kv_lora_rank),
             rot = static_cast<std::size_t>(c.rope.rot_dims),
             nope = static_cast<std::size_t>(c.mla_nope_dim),
             vdim = static_cast<std::size_t>(c.mla_v_dim), q_head = nope + rot,
             ffn = static_cast<std::size_t>(c.ffn_dim);
  const double eps = c.rms_eps, scale = 1.0 / std::sqrt(double(q_head));
  const std::size_t T = tokens.size();
  std::vector<std::vector<double>> h(T);  // [T][dim]
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < dim; ++i)
      h[t].push_back(w.token_embedding.as<float>()[std::size_t(tokens[t]) * dim + i]);
  for (const hllm::LayerWeights& l : w.layers) {
    // keys[t][h]: [nope | rot]; values[t][h]: [v]; queries[t][h]: [nope | rot]
    std::vector<std::vector<std::vector<double>>> keys(T), values(T), queries(T);
    for (std::size_t t = 0; t < T; ++t) {
      const std::vector<double> n = rms_norm(h[t], l.attn_norm, eps);
      const std::vector<double> q =
          c.q_lora_rank > 0 ? matvec(l.wq_b, rms_norm(matvec(l.wq_a, n), l.q_a_norm, eps))
                            : matvec(l.wq, n);      // [heads][q_head]
      std::vector<double> kv = matvec(l.wkv_a, n);  // [latent | rot]
      const std::vector<double> latent_normed =
          rms_norm(std::span(kv).first(latent), l.kv_a_norm, eps);
      rope_interleaved(kv.data() + latent, rot, c.rope.theta, t);
      for (std::size_t hd = 0; hd < heads; ++hd) {
        std::vector<double> key(q_head, 0.0), value(vdim, 0.0);
        for (std::size_t i = 0; i < nope; ++i)
          for (std::size_t j = 0; j < latent; ++j)
            key[i] += double(l.wk_b.as<float>()[(hd * latent + j) * nope + i]) * latent_normed[j];
        std::copy_n(kv.data() + latent, rot, key.data() + nope);
        for (std::size_t i = 0; i < vdim; ++i)
          for (std::size_t j = 0; j < latent; ++j)
            value[i] += double(l.wv_b.as<float>()[(hd * vdim + i) * latent + j]) * latent_normed[j];
        std::vector<double> query(q.begin() + long(hd * q_head),
                                  q.begin() + long((hd + 1) * q_head));
        rope_interleaved(query.data() + nope, rot, c.rope.theta, t);
        keys[t].push_back(key);
        values[t].push_back(value);
        queries[t].push_back(query);
      }
    }
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> heads_out;  // [heads][v]
      for (std::size_t hd = 0; hd < heads; ++hd) {
        std::vector<double> scores(t + 1);
        double top = -1e300;
        for (std::size_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (std::size_t i = 0; i < q_head; ++i) dot += queries[t][hd][i] * keys[s][hd][i];
          scores[s] = dot * scale;
          top = std::max(top, scores[s]);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - top));
        std::vector<double> out(vdim, 0.0);
        for (std::size_t s = 0; s <= t; ++s)
          for (std::size_t i = 0; i < vdim; ++i) out[i] += scores[s] / total * values[s][hd][i];
        heads_out.insert(heads_out.end(), out.begin(), out.end());
      }
      const std::vector<double> projected = matvec(l.wo, heads_out);
      for (std::size_t i = 0; i < dim; ++i) h[t][i] += projected[i];
      const std::vector<double> n = rms_norm(h[t], l.ffn_norm, eps);
      const std::vector<double> gate = matvec(l.ffn.gate, n), up = matvec(l.ffn.up, n);
      std::vector<double> act(ffn);
      for (std::size_t i = 0; i < ffn; ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const std::vector<double> down = matvec(l.ffn.down, act);
      for (std::size_t i = 0; i < dim; ++i) h[t][i] += down[i];
    }
  }
  std::vector<float> logits;
  for (std::size_t t = 0; t < T; ++t)
    for (double v : matvec(w.output, rms_norm(h[t], w.output_norm, eps)))
      logits.push_back(static_cast<float>(v));
  return logits;
}

std::vector<std::int32_t> some_tokens(std::size_t n) {
  std::mt19937 rng(7);
  return hllm::test::random_tokens(n, rng, 64);
}

class LatentAttention : public ::testing::TestWithParam<std::int64_t> {};

// The absorbed block equals the expanded reference, prefill and decode, every ISA.
TEST_P(LatentAttention, AbsorbedEqualsTheExpandedReference) {
  const hllm::ModelConfig c = latent_config(GetParam());
  const hllm::ModelWeights weights = hllm::random_weights(c, hllm::DType::f32, 1);
  const std::vector<std::int32_t> tokens = some_tokens(24);
  const std::vector<float> expected = expanded_logits(c, weights, tokens);
  const hllm::Llama<> model(c, weights);
  hllm::test::expect_prefill_and_decode_logits(model, tokens, expected);
}

// Decode after a prefill reads the latents the prefill cached: the logits equal the whole
// prompt's, every ISA.
TEST_P(LatentAttention, DecodeAfterPrefillEqualsThePrefill) {
  const hllm::ModelConfig c = latent_config(GetParam());
  const std::vector<std::int32_t> tokens = some_tokens(20);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 2));
  const std::size_t vocab = model.vocab_size(), split = 13;
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> whole(model, {.threads = 2, .isa = isa});
    const std::span<const float> all = whole.prefill(tokens, hllm::Logits::all);
    const std::vector<float> expected(all.begin(), all.end());
    hllm::Session<> parts(model, {.threads = 2, .isa = isa});
    parts.prefill(std::span(tokens).first(split));
    for (std::size_t t = split; t < tokens.size(); ++t) {
      const std::span<const float> logits = parts.decode(tokens[t]);
      EXPECT_TRUE(all_close(std::vector<float>(logits.begin(), logits.end()),
                            std::span(expected).subspan(t * vocab, vocab), 1e-5f))
          << "token " << t;
    }
  }
}

// A decoded token's 16 heads share one KV head, so the threads split its heads (halves,
// quarters) rather than the (token, KV head) pairs: the logits are the same bits for any
// thread count, every ISA.
TEST_P(LatentAttention, DecodeIsBitIdenticalForAnyThreadCount) {
  hllm::ModelConfig c = latent_config(GetParam());
  c.n_heads = 16;
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 5));
  const std::vector<std::int32_t> tokens = some_tokens(40);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    std::vector<std::vector<float>> runs;
    for (const std::size_t threads : {1u, 2u, 3u, 4u, 8u}) {
      hllm::Session<> session(model, {.threads = threads, .isa = isa});
      session.prefill(std::span(tokens).first(39));
      const std::span<const float> l = session.decode(tokens[39]);
      runs.emplace_back(l.begin(), l.end());
    }
    for (std::size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[0]) << i;
  }
}

// 8-bit weights: W_kb's and W_vb's per-head products through the integer kernels (each head's
// input quantized on its own), near the float reference. Across ISAs: with float activations
// every ISA gives the scalar ISA's logits within 1e-5; with 8-bit ones within 1e-2, since a
// one-ulp difference in a kernel's float input can move an 8-bit rounding, and attention
// sharpens such a step (the low-rank query quantizes twice in a row: measured 7e-3 of the
// logits' scale where the float path agrees to 4e-7).
TEST_P(LatentAttention, Q8_0WeightsStayCloseAcrossIsas) {
  const hllm::ModelConfig c = latent_config(GetParam());
  const hllm::ModelWeights weights = hllm::random_weights(c, hllm::DType::f32, 3);
  hllm::ConvertedModel q8 = hllm::convert_model(c, weights, hllm::DType::q8_0);
  const hllm::Llama<> model(q8.config, std::move(q8.weights));
  const std::vector<std::int32_t> tokens = some_tokens(24);
  const auto logits_of = [&](hllm::Isa isa, bool exact, std::size_t threads) {
    hllm::Session<> session(model, {.threads = threads, .isa = isa, .exact = exact});
    const std::span<const float> l = session.prefill(tokens, hllm::Logits::all);
    return std::vector<float>(l.begin(), l.end());
  };
  const std::vector<float> scalar = logits_of(hllm::Isa::scalar, false, 1),
                           scalar_exact = logits_of(hllm::Isa::scalar, true, 1);
  EXPECT_TRUE(all_close(scalar, expanded_logits(c, weights, tokens), 0.05f));
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    EXPECT_TRUE(all_close(logits_of(isa, true, 2), scalar_exact, 1e-5f));
    EXPECT_TRUE(all_close(logits_of(isa, false, 2), scalar, 1e-2f));
    hllm::Session<> one(model, {.max_batch = 1, .threads = 2, .isa = isa});
    std::vector<float> decoded;
    for (std::int32_t t : tokens) {
      const std::span<const float> logits = one.decode(t);
      decoded.insert(decoded.end(), logits.begin(), logits.end());
    }
    EXPECT_TRUE(all_close(decoded, scalar, 1e-2f));
  }
}

INSTANTIATE_TEST_SUITE_P(QueryProjection, LatentAttention, ::testing::Values(0, 64),
                         [](const auto& p) {
                           return p.param == 0 ? std::string("direct") : std::string("low_rank");
                         });

// Repacking at load keeps each head's W_kb and W_vb rows whole: with values of 24 per head a
// 16-row panel would straddle two heads' views, so W_vb stays in the file's layout (F32) or
// takes 8-row groups (Q8_0) while W_kb (64 rows a head) takes panels; the logits equal the
// unrepacked model's, every ISA, with float activations (8-bit ones differ by rounding
// steps: the other tests' bound). DeepSeek-V3's golden (v_head_dim 24) caught a panel that
// straddled two heads.
TEST(LatentAttentionRepack, PanelsNeverStraddleTwoHeads) {
  hllm::ModelConfig c = latent_config(0);
  c.mla_v_dim = 24;
  const std::vector<std::int32_t> tokens = some_tokens(12);
  for (hllm::DType type : {hllm::DType::f32, hllm::DType::q8_0}) {
    SCOPED_TRACE(hllm::dtype_name(type));
    hllm::ConvertedModel m =
        hllm::convert_model(c, hllm::random_weights(c, hllm::DType::f32, 4), type);
    hllm::ModelWeights repacked = m.weights;
    hllm::repack_weights(repacked, hllm::RepackPlan::all(), false);
    const hllm::LayoutSpec* v_layout = hllm::repacked_layout(repacked.layers[0].wv_b.type);
    EXPECT_TRUE(v_layout == nullptr || 24 % v_layout->group_rows == 0);
    EXPECT_EQ(v_layout == nullptr, type == hllm::DType::f32);
    EXPECT_NE(repacked.layers[0].wk_b.type, type);
    const hllm::Llama<> plain(m.config, m.weights), packed(m.config, std::move(repacked));
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(hllm::to_string(isa));
      for (const bool exact : {true, false}) {
        hllm::Session<> a(plain, {.threads = 2, .isa = isa, .exact = exact}),
            b(packed, {.threads = 2, .isa = isa, .exact = exact});
        const std::span<const float> la = a.prefill(tokens, hllm::Logits::all);
        const std::vector<float> expected(la.begin(), la.end());
        EXPECT_TRUE(all_close(b.prefill(tokens, hllm::Logits::all), expected,
                              exact || type == hllm::DType::f32 ? 1e-5f : 1e-2f));
      }
    }
  }
  const hllm::WeightTensor panels{hllm::DType::f32_x16, nullptr, 32, 32, "w"};
  EXPECT_EQ(hllm::test::catch_error([&] { panels.row_range(8, 16, "half"); }).kind(),
            hllm::ErrorKind::internal);
}

// What hllm-bench --save writes for a DeepSeek-shaped preset (examples/common/synthetic.hpp):
// W_kb and W_vb 3-D as llama.cpp's converter writes them, the experts stacked; the file loads
// and gives the logits of the same synthetic weights in memory.
TEST(LatentAttentionFile, SyntheticGgufLoadsAsTheModelInMemory) {
  hllm::ModelConfig c = latent_config(64);
  c.architecture = "deepseek2";
  c.vocab_size = 320;  // the synthetic vocabulary's bytes and more
  c.n_experts = 4, c.n_experts_used = 2, c.expert_ffn_dim = 32, c.n_dense_layers = 1;
  c.shared_expert_ffn_dim = 32, c.shared_expert_ungated = true;
  hllm::test::TempDir tmp;
  hllm::examples::save_synthetic_gguf(tmp / "m.gguf", c, hllm::DType::q8_0, 1,
                                      hllm::examples::synthetic_vocabulary(320));
  hllm::GgufModel file = hllm::load_gguf_model(tmp / "m.gguf", {.repack = hllm::Repack::never});
  EXPECT_EQ(file.config.kv_lora_rank, 64);
  const hllm::Llama<> loaded(file.config, std::move(file.weights)),
      memory(c, hllm::examples::synthetic_weights(c, hllm::DType::q8_0, 1));
  const std::vector<std::int32_t> tokens = some_tokens(8);
  hllm::Session<> a(loaded, {.threads = 1, .isa = hllm::Isa::scalar}),
      b(memory, {.threads = 1, .isa = hllm::Isa::scalar});
  const std::span<const float> la = a.prefill(tokens, hllm::Logits::all);
  const std::vector<float> expected(la.begin(), la.end());
  EXPECT_TRUE(all_close(b.prefill(tokens, hllm::Logits::all), expected, 1e-6f));
}

// The cache holds one row of rot + kv_lora values per token and layer, read as the key and as
// the value, where the expanded form holds n_heads · (nope + rot) keys and n_heads · v values.
TEST(LatentAttentionConfig, CacheHoldsTheLatentOnce) {
  const hllm::ModelConfig c = latent_config(0);
  EXPECT_EQ(c.kv_dim(), 80);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_FLOAT_EQ(c.resolved_attention_scale(), 1.0f / std::sqrt(48.0f));
  const std::int64_t expanded = c.n_heads * (c.mla_q_head_dim() + c.mla_v_dim);
  EXPECT_EQ(expanded, 4 * (48 + 32));  // 4× the 80 the cache holds at this shape
  EXPECT_EQ(c.kv_value_rows(), hllm::KVValues::keys);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  const hllm::Session<> session(model, {.context = 32, .kv_type = hllm::KVType::f16});
  EXPECT_EQ(session.kv_cache().value_rows(), hllm::KVValues::keys);
  EXPECT_EQ(session.kv_cache().bytes(), 2u * 32u * 80u * sizeof(hllm::f16));
}

// A cache that reads values from the key rows gives the logits of one with value rows of their
// own (the block writes a copy of the key row there), prefill chunks and decodes: the same bits
// for float and f16 rows; for Q8_0 rows, rotated (rows of 128: Hadamard blocks of 128 for keys,
// 64 for values), as close to the float logits. A plain attention layer refuses such a cache.
TEST(LatentAttentionConfig, ValuesReadFromKeyRowsEqualValuesOfTheirOwn) {
  hllm::ModelConfig c = latent_config(64);
  c.kv_lora_rank = 112;  // rows of 16 + 112 = 128
  c.head_dim = c.rope.rot_dims + c.kv_lora_rank;
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 6));
  const std::vector<std::int32_t> tokens = some_tokens(20);
  const std::size_t vocab = model.vocab_size(), head_dim = 128;
  const auto run = [&]<class KV>(hllm::KVValues values) {
    hllm::ForwardContext context(c, c.rope.rot_dims, 8, 2, std::nullopt, false);
    hllm::KVCache<KV> cache(2, 1, head_dim, 32, values);
    std::vector<float> logits(tokens.size() * vocab);
    for (std::size_t start = 0; start < tokens.size();) {  // prefill chunks of 8 and 4, decodes
      const std::size_t n = start < 12 ? std::min<std::size_t>(8, 12 - start) : 1;
      model.forward(context.compute(), std::span(tokens).subspan(start, n), start, cache,
                    context.scratch(), logits.data() + start * vocab, true);
      start += n;
    }
    return logits;
  };
  const std::vector<float> exact = run.operator()<float>(hllm::KVValues::separate);
  EXPECT_EQ(run.operator()<float>(hllm::KVValues::keys), exact);
  EXPECT_EQ(run.operator()<hllm::f16>(hllm::KVValues::keys),
            run.operator()<hllm::f16>(hllm::KVValues::separate));
  // Q8_0: the value rows quantize under another rotation, so the two differ by quantization
  // noise; reading the key rows must cost no more accuracy than rows of their own.
  const auto max_error = [&](const std::vector<float>& logits) {
    float error = 0.0f;
    for (std::size_t i = 0; i < exact.size(); ++i)
      error = std::max(error, std::abs(logits[i] - exact[i]));
    return error;
  };
  const float shared_error = max_error(run.operator()<hllm::BlockQ8_0>(hllm::KVValues::keys)),
              own_error = max_error(run.operator()<hllm::BlockQ8_0>(hllm::KVValues::separate));
  std::printf("Q8_0 cache, max |logit error| against f32: values read from keys %g, own %g\n",
              double(shared_error), double(own_error));
  EXPECT_LT(shared_error, 0.05f);
  EXPECT_LT(shared_error, 2.0f * own_error);

  hllm::ModelConfig plain = latent_config(0);  // the same widths with plain attention
  plain.kv_lora_rank = plain.mla_nope_dim = plain.mla_v_dim = 0;
  plain.rope.rot_dims = 0;
  plain.head_dim = 0;
  const hllm::Llama<> dense(plain, hllm::random_weights(plain, hllm::DType::f32, 1));
  hllm::ForwardContext context(plain, dense.rope().rot_dims(), 4, 1, std::nullopt, false);
  hllm::KVCache<float> shared(
      static_cast<std::size_t>(plain.n_layers), static_cast<std::size_t>(plain.n_kv_heads),
      static_cast<std::size_t>(plain.resolved_head_dim()), 8, hllm::KVValues::keys);
  std::vector<float> logits(dense.vocab_size());
  const std::int32_t token = 1;
  EXPECT_THROW(dense.forward(context.compute(), std::span(&token, 1), 0, shared, context.scratch(),
                             logits.data(), false),
               hllm::Error);
}

// A paged pool (Engine) holds each latent row once too, 16-token blocks of 2 layers × 80 f16
// values; its batches, chunked prefills and shared prefix blocks give every request the tokens
// a lone Session gives it.
TEST(LatentAttentionConfig, EngineRequestsGetTheirLoneSessionsTokens) {
  const hllm::ModelConfig c = latent_config(64);
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 8));
  hllm::Engine<> engine(model, {.kv_type = hllm::KVType::f16,
                                .kv_tokens = 512,
                                .max_step_tokens = 16,
                                .max_sequences = 4,
                                .threads = 2});
  EXPECT_EQ(engine.stats().kv_block_bytes, 16u * 2u * 80u * sizeof(hllm::f16));
  std::mt19937 rng(9);
  const std::vector<std::int32_t> prefix = hllm::test::random_tokens(20, rng, 64);
  std::vector<hllm::Request> requests;
  for (std::size_t i = 0; i < 5; ++i) {
    hllm::Request r;
    r.prompt = prefix;
    for (std::int32_t t : hllm::test::random_tokens(3 + i, rng, 64)) r.prompt.push_back(t);
    r.sampler.temperature = 0.0f;
    r.generate.max_tokens = 6;
    requests.push_back(r);
  }
  std::vector<std::vector<std::int32_t>> done(requests.size());
  std::map<hllm::RequestId, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    hllm::Request r = requests[i];
    r.on_done = [&](const hllm::Completion& completion) {
      done[index.at(completion.id)] = completion.tokens;
    };
    index[engine.submit(std::move(r))] = i;
  }
  engine.run_until_idle();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(done[i].size(), 6u) << "request " << i;
    hllm::Session<> session(model, {.threads = 1, .kv_type = hllm::KVType::f16});
    hllm::Sampler sampler(requests[i].sampler);
    EXPECT_EQ(done[i],
              hllm::generate(session, requests[i].prompt, sampler, requests[i].generate).tokens)
        << "request " << i;
  }
}

// What latent attention does not combine with, or a cache shape other than its own, is named.
TEST(LatentAttentionConfig, InconsistentConfigsAreNamed) {
  const auto field_of = [](void (*edit)(hllm::ModelConfig&)) {
    hllm::ModelConfig c = latent_config(0);
    edit(c);
    return hllm::test::catch_error([&] { c.validate(); }).field();
  };
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.head_dim = 64; }), "head_dim");
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.n_kv_heads = 4; }), "head_dim");
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.mla_v_dim = 0; }), "mla_v_dim");
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.rope.rot_dims = 0; }), "rope.rot_dims");
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.qkv_bias = true; }), "kv_lora_rank");
  EXPECT_EQ(field_of([](hllm::ModelConfig& c) { c.q_lora_rank = -1; }), "q_lora_rank");
  EXPECT_NO_THROW(latent_config(64).validate());
}

}  // namespace
