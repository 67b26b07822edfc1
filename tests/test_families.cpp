// Model families beyond Llama (model/architecture.hpp): tiny random checkpoints that
// tools/gen_family_goldens.py wrote with their float64 reference logits (Hugging Face
// transformers where the pinned version has the class), loaded directly from safetensors and
// after conversion to GGUF, prefill and decode, on every ISA; and the errors a file of a
// family gets when a tensor or key is wrong.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/io/hf_model.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "model_logits.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::test::all_close;
using hllm::test::GoldenFile;

const std::string kFamilies = HLLM_GOLDEN_DIR "/families/";

std::vector<std::int32_t> golden_tokens(const GoldenFile& g) {
  std::vector<std::int32_t> tokens;
  for (float t : g["tokens"]) tokens.push_back(static_cast<std::int32_t>(t));
  return tokens;
}

void expect_logits_match(const hllm::ModelConfig& config, hllm::ModelWeights weights,
                         const GoldenFile& g) {
  const hllm::Llama<> model(config, std::move(weights));
  hllm::test::expect_prefill_and_decode_logits(model, golden_tokens(g), g["logits"]);
}

struct Family {
  const char* name;
  bool qkv_bias, tied, fused;
  hllm::QkNorm qk_norm = hllm::QkNorm::none;
  hllm::BlockLayout layout = hllm::BlockLayout::pre_norm;
  std::int64_t experts = 0;            // and 2 used, as the goldens have them
  bool renormalized = false;           // the chosen experts' weights
  const char* architecture = nullptr;  // nullptr: the name
  bool sandwich() const { return layout == hllm::BlockLayout::sandwich; }
  bool parallel() const { return layout == hllm::BlockLayout::parallel; }
  bool output_norms() const { return sandwich() || layout == hllm::BlockLayout::post_norm; }
  std::string arch() const { return architecture != nullptr ? architecture : name; }
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

// What a loaded config must say of the family.
void expect_family(const hllm::ModelConfig& c, const Family& f) {
  EXPECT_EQ(c.architecture, f.arch());
  EXPECT_EQ(c.n_experts, f.experts);
  EXPECT_EQ(c.n_experts_used, f.experts > 0 ? 2 : 0);
  EXPECT_EQ(c.expert_weights_normalized, f.renormalized);
  EXPECT_EQ(c.qkv_bias, f.qkv_bias);
  EXPECT_EQ(c.qk_norm, f.qk_norm);
  EXPECT_EQ(c.tied_embeddings, f.tied);
  EXPECT_EQ(c.layout, f.layout);
  // HF's rows, which these families' GGUF files keep (llama's converter permutes them);
  // Cohere's checkpoints hold interleaved pairs already.
  if (f.arch() == "command-r" || f.arch() == "deepseek2") {
    EXPECT_EQ(c.rope.layout, hllm::RopeLayout::interleaved);
  } else if (f.arch() != "llama") {
    EXPECT_EQ(c.rope.layout, hllm::RopeLayout::neox);
  }
  // The parallel families' goldens: LayerNorm (Falcon's with a bias and a plain GELU MLP, one
  // KV head), Command-R's logit scale.
  EXPECT_EQ(c.norm, f.parallel() ? hllm::NormKind::layer : hllm::NormKind::rms);
  if (f.parallel()) {
    EXPECT_EQ(c.rms_eps, 1e-5f);
  }
  EXPECT_EQ(c.logit_scale, f.arch() == "command-r" ? 0.25f : 0.0f);
  const bool falcon = f.arch() == "falcon";
  EXPECT_EQ(c.norm_bias, falcon);
  EXPECT_EQ(c.gated_ffn, !falcon);
  // Falcon-40B's form: two KV heads, two input norms per block.
  const bool falcon_40b = std::string(f.name) == "falcon-40b";
  EXPECT_EQ(c.parallel_ffn_norm, falcon_40b);
  if (falcon) {
    EXPECT_EQ(c.ffn_activation, hllm::GateActivation::gelu);
    EXPECT_EQ(c.n_kv_heads, falcon_40b ? 2 : 1);
  }
  const bool v3 = std::string(f.name) == "deepseek3";
  EXPECT_EQ(c.expert_gating, v3 ? hllm::ExpertGating::sigmoid : hllm::ExpertGating::softmax);
  EXPECT_EQ(c.n_expert_groups, v3 ? 4 : 0);
  EXPECT_EQ(c.n_expert_groups_used, v3 ? 2 : 0);
  EXPECT_EQ(c.expert_selection_bias, v3);
  if (v3) {  // low-rank queries, V3's YaRN (mscale 1 on both), experts routed by groups
    EXPECT_EQ(c.kv_lora_rank, 32);
    EXPECT_EQ(c.q_lora_rank, 64);
    EXPECT_EQ(c.mla_nope_dim, 32);
    EXPECT_EQ(c.mla_v_dim, 24);
    EXPECT_EQ(c.head_dim, 40);
    EXPECT_EQ(c.rope.scaling.attention_factor, 1.0f);
    const double mscale = 0.1 * std::log(4.0) + 1.0;
    EXPECT_NEAR(c.resolved_attention_scale(), mscale * mscale / std::sqrt(40.0), 1e-6);
    EXPECT_EQ(c.n_dense_layers, 1);
    EXPECT_EQ(c.shared_expert_ffn_dim, 32);
    EXPECT_EQ(c.expert_weights_scale, 2.5f);
  }
  if (std::string(f.name) == "deepseek2") {  // latent attention, YaRN's score factor, experts
    EXPECT_EQ(c.kv_lora_rank, 64);
    EXPECT_EQ(c.q_lora_rank, 0);
    EXPECT_EQ(c.mla_nope_dim, 32);
    EXPECT_EQ(c.mla_v_dim, 32);
    EXPECT_EQ(c.rope.rot_dims, 16);
    EXPECT_EQ(c.head_dim, 80);
    EXPECT_EQ(c.n_kv_heads, 1);
    EXPECT_EQ(c.rope.scaling.type, hllm::RopeScalingType::yarn);
    EXPECT_EQ(c.rope.scaling.factor, 4.0f);
    EXPECT_EQ(c.rope.scaling.attention_factor, 1.0f);  // cos and sin unscaled
    const double mscale = 0.1 * 0.707 * std::log(4.0) + 1.0;
    EXPECT_NEAR(c.resolved_attention_scale(), mscale * mscale / std::sqrt(48.0), 1e-6);
    EXPECT_EQ(c.n_dense_layers, 1);
    EXPECT_EQ(c.shared_expert_ffn_dim, 64);  // two shared experts of 32
    EXPECT_TRUE(c.shared_expert_ungated);
    EXPECT_EQ(c.expert_weights_scale, 2.0f);
  }
  if (f.arch() == "gemma3") {  // Gemma 2's variants, QK-norm, and a RoPE per kind of layer
    EXPECT_EQ(c.ffn_activation, hllm::GateActivation::gelu_tanh);
    EXPECT_TRUE(c.scale_embeddings);
    EXPECT_EQ(c.attn_softcap, 0.0f);
    EXPECT_EQ(c.final_softcap, 20.0f);
    EXPECT_EQ(c.sliding_window, 8);
    EXPECT_EQ(c.sliding_window_pattern, 6);
    EXPECT_EQ(c.window_rope_theta, 10000.0f);
    EXPECT_EQ(c.rope.theta, 1e6f);
    EXPECT_EQ(c.rope.scaling.type, hllm::RopeScalingType::linear);
    EXPECT_EQ(c.rope.scaling.factor, 4.0f);
    EXPECT_TRUE(c.uses_window_rope(4));
    EXPECT_FALSE(c.uses_window_rope(5));
    EXPECT_FLOAT_EQ(c.resolved_attention_scale(), 0.25f);  // 1/sqrt(16)
    return;
  }
  EXPECT_EQ(c.window_rope_theta, 0.0f);
  if (f.sandwich()) {  // Gemma 2's goldens: every variant of the family, at the checkpoint's values
    EXPECT_EQ(c.ffn_activation, hllm::GateActivation::gelu_tanh);
    EXPECT_TRUE(c.scale_embeddings);
    EXPECT_EQ(c.attn_softcap, 5.0f);
    EXPECT_EQ(c.final_softcap, 3.0f);
    EXPECT_EQ(c.sliding_window, 8);
    EXPECT_EQ(c.sliding_window_pattern, 2);
    EXPECT_FLOAT_EQ(c.resolved_attention_scale(), 0.25f);  // 1/sqrt(16)
  }
}

class FamilyCheckpoint : public ::testing::TestWithParam<Family> {
 protected:
  const Family f = GetParam();
  const GoldenFile g{std::string("families/") + f.name + "/logits.bin"};
};

TEST_P(FamilyCheckpoint, SafetensorsLogitsMatchTheReference) {
  hllm::HfModel hf = hllm::load_hf_model(kFamilies + f.name);
  expect_family(hf.config, f);
  expect_logits_match(hf.config, std::move(hf.weights), g);
}

// Converted as hllm-convert does, written by our GGUF writer, read back: the file holds the
// family's keys and tensors, and its logits are the reference's.
TEST_P(FamilyCheckpoint, GgufConversionLogitsMatchTheReference) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + f.name);
  const hllm::ConvertedModel converted =
      hllm::convert_model(hf.config, hf.weights, hllm::DType::f32);
  hllm::test::TempDir tmp;
  hllm::save_gguf_model(tmp / "model.gguf", converted.config, converted.weights);

  const hllm::gguf::File file = hllm::gguf::File::open(tmp / "model.gguf");
  EXPECT_EQ(file.get_string("general.architecture"), f.arch());
  EXPECT_TRUE(file.has(f.arch() + ".embedding_length"));
  if (f.arch() != "llama") {
    EXPECT_FALSE(file.has("llama.embedding_length"));
  }
  EXPECT_EQ(file.find_tensor("blk.1.ffn_gate_exps.weight") != nullptr, f.experts > 0);
  EXPECT_EQ(file.find_tensor("blk.1.ffn_down_shexp.weight") != nullptr,
            f.arch() == "qwen2moe" || f.arch() == "deepseek2");
  EXPECT_EQ(file.find_tensor("blk.1.attn_k.bias") != nullptr, f.qkv_bias);
  EXPECT_EQ(file.find_tensor("blk.1.attn_k_norm.weight") != nullptr,
            f.qk_norm != hllm::QkNorm::none);
  EXPECT_EQ(file.find_tensor("output.weight") == nullptr, f.tied);
  EXPECT_EQ(file.find_tensor("blk.1.attn_qkv.weight") != nullptr, f.fused);
  EXPECT_EQ(file.find_tensor("blk.1.ffn_gate.weight") == nullptr, f.fused || f.experts > 0);
  EXPECT_EQ(file.find_tensor("blk.1.post_attention_norm.weight") != nullptr, f.output_norms());
  EXPECT_EQ(file.find_tensor("blk.1.post_ffw_norm.weight") != nullptr, f.output_norms());
  EXPECT_EQ(file.find_tensor("blk.1.attn_norm.weight") == nullptr,
            f.layout == hllm::BlockLayout::post_norm);
  EXPECT_EQ(file.find_tensor("blk.1.ffn_norm.weight") == nullptr,
            f.layout == hllm::BlockLayout::post_norm || f.parallel());
  EXPECT_EQ(file.has(f.arch() + ".attention.layer_norm_epsilon"), f.parallel());
  EXPECT_EQ(file.has(f.arch() + ".logit_scale"), f.arch() == "command-r");
  EXPECT_EQ(file.find_tensor("blk.1.attn_norm.bias") != nullptr, f.arch() == "falcon");
  EXPECT_EQ(file.find_tensor("blk.1.attn_norm_2.bias") != nullptr,
            std::string(f.name) == "falcon-40b");
  EXPECT_EQ(file.find_tensor("output_norm.bias") != nullptr, f.arch() == "falcon");
  EXPECT_EQ(file.find_tensor("blk.1.ffn_up.weight") != nullptr, f.experts == 0);
  EXPECT_EQ(file.find_tensor("blk.1.exp_probs_b.bias") != nullptr,
            std::string(f.name) == "deepseek3");

  hllm::GgufModel gguf = hllm::load_gguf_model(tmp / "model.gguf");
  expect_family(gguf.config, f);
  expect_logits_match(gguf.config, std::move(gguf.weights), g);
}

// The same checkpoint converted by llama.cpp's own convert_hf_to_gguf.py
// (tools/convert_families_llamacpp.py): hllm reads the keys, tensor names and row order that
// users' files have, and gives the reference's logits.
TEST_P(FamilyCheckpoint, LlamaCppConvertedGgufLogitsMatchTheReference) {
  hllm::GgufModel gguf = hllm::load_gguf_model(kFamilies + f.name + "/llamacpp-f32.gguf");
  expect_family(gguf.config, f);
  expect_logits_match(gguf.config, std::move(gguf.weights), g);
}

// Quantized, the variants still run on every ISA's integer kernels: every ISA's Q8_0 logits
// agree with the scalar ISA's (the same 8-bit products, summed in another order), and stay
// near the reference. That bound is loose: these tiny random models amplify weight rounding
// (Q8_0 with float activations, SessionOptions::exact, is as far off: 2% for qwen3, 7% for
// gemma2, whose post-sublayer norms rescale small outputs to unit size; F16 weights 0.06% and
// 0.3%); the exact figures on real shapes are the fixtures' business. With experts, a token whose
// two best router scores nearly tie may pick another expert once the weights are rounded, a jump
// of its output (mixtral: 19% with Q8_0, 0.05% with F16 weights), so the bound there is 25%.
// DeepSeek-V3's sigmoid scores lie closer (and groups add decisions): its Q8_0 and BF16 weights
// move some token's experts (Q8_0 with float activations 44% of the logits' scale, BF16 50%,
// F16 0.1%), so there F16 weights stand in for the reference check. F16 stays within 2% for
// every family.
TEST_P(FamilyCheckpoint, Q8_0ConversionStaysClose) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + f.name);
  const auto tokens = golden_tokens(g);
  {
    hllm::ConvertedModel f16 = hllm::convert_model(hf.config, hf.weights, hllm::DType::f16);
    const hllm::Llama<> half(f16.config, std::move(f16.weights));
    hllm::Session<> session(half, {.threads = 1, .isa = hllm::Isa::scalar});
    EXPECT_TRUE(all_close(session.prefill(tokens, hllm::Logits::all), g["logits"], 0.02f));
  }
  hllm::ConvertedModel q8 = hllm::convert_model(hf.config, hf.weights, hllm::DType::q8_0);
  const hllm::Llama<> model(q8.config, std::move(q8.weights));
  hllm::Session<> scalar(model, {.threads = 1, .isa = hllm::Isa::scalar});
  const std::span<const float> prefilled = scalar.prefill(tokens, hllm::Logits::all);
  const std::vector<float> scalar_logits(prefilled.begin(), prefilled.end());
  if (std::string(f.name) != "deepseek3") {
    EXPECT_TRUE(all_close(scalar_logits, g["logits"], f.experts > 0 ? 0.25f : 0.1f));
  }
  // Each ISA's activations differ from the scalar ISA's in their last bits, so now and then an
  // activation that lies on a rounding boundary of its 8-bit block rounds the other way: one
  // step of its block's scale, which these tiny random models carry to its token's logits as up
  // to about 1% of their scale (qwen2moe built with clang: token 36 of 40, 0.6%, its router
  // logits up to 1% apart, the same experts chosen; the other tokens within 2e-4). A kernel that
  // mistakes a block, a scale or a tail is off by the logits' whole scale.
  constexpr float kIsaAgreement = 0.01f;
  const std::size_t vocab = model.vocab_size(), last = tokens.size() - 1;
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> session(model, {.threads = 2, .isa = isa});
    EXPECT_TRUE(
        all_close(session.prefill(tokens, hllm::Logits::all), scalar_logits, kIsaAgreement));
    // The last token decoded after the others (8-bit activations through the decode paths:
    // with experts, every chosen expert's rows in one job per projection), in a session of
    // one-token chunks, whose activation scratch is the smallest a session has.
    hllm::Session<> one(model, {.max_batch = 1, .threads = 2, .isa = isa});
    one.prefill(std::span(tokens).first(last));
    const std::span<const float> decoded = one.decode(tokens[last]);
    EXPECT_TRUE(all_close(std::vector<float>(decoded.begin(), decoded.end()),
                          std::span(scalar_logits).subspan(last * vocab, vocab), kIsaAgreement));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyCheckpoint,
    ::testing::Values(
        Family{"qwen2", true, true, false},
        Family{"qwen3", false, false, false, hllm::QkNorm::per_head},
        Family{"phi3", false, false, true},
        Family{"gemma2", false, true, false, {}, hllm::BlockLayout::sandwich},
        Family{"gemma3", false, true, false, hllm::QkNorm::per_head, hllm::BlockLayout::sandwich},
        Family{"gemma3-mm", false, true, false, hllm::QkNorm::per_head, hllm::BlockLayout::sandwich,
               0, false, "gemma3"},
        Family{"mixtral", false, false, false, {}, {}, 4, true, "llama"},
        Family{"qwen2moe", true, false, false, {}, {}, 4},
        Family{"qwen3moe", false, false, false, hllm::QkNorm::per_head, {}, 4, true},
        Family{"olmoe", false, false, false, hllm::QkNorm::whole, {}, 4},
        Family{"olmo2", false, false, false, hllm::QkNorm::whole, hllm::BlockLayout::post_norm},
        Family{"command-r", false, true, false, {}, hllm::BlockLayout::parallel},
        Family{"command-r-plus", false, true, false, hllm::QkNorm::each_head,
               hllm::BlockLayout::parallel, 0, false, "command-r"},
        Family{"deepseek2", false, false, false, {}, {}, 4},
        Family{"deepseek3", false, false, false, {}, {}, 8, true, "deepseek2"},
        Family{"falcon", false, true, true, {}, hllm::BlockLayout::parallel},
        Family{
            "falcon-40b", false, true, true, {}, hllm::BlockLayout::parallel, 0, false, "falcon"}),
    [](const auto& p) {  // test names take no '-': command_r
      std::string name = p.param.name;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// A GGUF file of a family, written from the qwen2 checkpoint, then altered by `edit`.
std::string qwen2_gguf_with(const hllm::test::TempDir& tmp,
                            const std::function<void(hllm::gguf::Writer&)>& edit) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "qwen2");
  const hllm::ConvertedModel c = hllm::convert_model(hf.config, hf.weights, hllm::DType::f32);
  hllm::gguf::Writer out = hllm::gguf_model_writer(c.config, c.weights);
  edit(out);
  const std::string path = tmp / "edited.gguf";
  out.write(path);
  return path;
}

using hllm::test::catch_error;

TEST(FamilyGguf, MissingBiasIsNamed) {
  hllm::test::TempDir tmp;
  const std::string path =
      qwen2_gguf_with(tmp, [](hllm::gguf::Writer& w) { w.remove_tensor("blk.1.attn_v.bias"); });
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(path); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.field(), "blk.1.attn_v.bias");
  EXPECT_EQ(e.file(), path);
}

TEST(FamilyGguf, MisshapenBiasIsNamedWithTheExpectedShape) {
  hllm::test::TempDir tmp;
  const std::string path = qwen2_gguf_with(tmp, [](hllm::gguf::Writer& w) {
    w.remove_tensor("blk.0.attn_q.bias");
    w.add_tensor("blk.0.attn_q.bias", hllm::DType::f32, {63},
                 std::vector<std::byte>(63 * sizeof(float)));
  });
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(path); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.field(), "blk.0.attn_q.bias");
  EXPECT_NE(e.message().find("[64, 1]"), std::string::npos) << e.message();
}

TEST(FamilyGguf, KeysAreReadUnderTheArchitecturesPrefix) {
  hllm::test::TempDir tmp;
  const std::string path = qwen2_gguf_with(
      tmp, [](hllm::gguf::Writer& w) { w.remove("qwen2.attention.layer_norm_rms_epsilon"); });
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(path); });
  EXPECT_EQ(e.field(), "qwen2.attention.layer_norm_rms_epsilon") << e.what();
}

TEST(FamilyGguf, UnknownArchitectureListsTheKnownOnes) {
  hllm::test::TempDir tmp;
  const std::string path =
      qwen2_gguf_with(tmp, [](hllm::gguf::Writer& w) { w.set("general.architecture", "mamba"); });
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(path); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  EXPECT_EQ(e.field(), "general.architecture");
  EXPECT_NE(e.message().find("'mamba'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("llama, qwen2, qwen3"), std::string::npos) << e.message();
}

// A Llama file may carry q/k/v biases (llama.cpp loads them when present): the GGUF llama
// reader takes them from the tensors, and the writer refuses biases a family cannot hold.
TEST(FamilyGguf, LlamaBiasesAreOptionalQwen3RefusesThem) {
  hllm::ModelConfig c;
  c.vocab_size = 32, c.dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1;
  c.ffn_dim = 48, c.context_length = 64, c.qkv_bias = true;
  const hllm::ModelWeights w = hllm::random_weights(c, hllm::DType::f32, 3);
  hllm::test::TempDir tmp;
  hllm::save_gguf_model(tmp / "llama.gguf", c, w);
  const hllm::GgufModel back = hllm::load_gguf_model(tmp / "llama.gguf");
  EXPECT_TRUE(back.config.qkv_bias);
  EXPECT_EQ(back.config.architecture, "llama");

  c.architecture = "qwen3";
  c.qk_norm = hllm::QkNorm::per_head;
  c.rope.layout = hllm::RopeLayout::neox;
  const hllm::Error e = catch_error(
      [&] { hllm::gguf_model_writer(c, hllm::random_weights(c, hllm::DType::f32, 3)); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
}

TEST(FamilyGguf, LoneLlamaBiasNamesTheMissingOne) {
  hllm::ModelConfig c;
  c.vocab_size = 32, c.dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1;
  c.ffn_dim = 48, c.context_length = 64, c.qkv_bias = true;
  const hllm::ModelWeights w = hllm::random_weights(c, hllm::DType::f32, 3);
  hllm::gguf::Writer out = hllm::gguf_model_writer(c, w);
  out.remove_tensor("blk.0.attn_k.bias");
  out.remove_tensor("blk.0.attn_v.bias");
  hllm::test::TempDir tmp;
  out.write(tmp / "lone.gguf");
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "lone.gguf"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.field(), "blk.0.attn_k.bias");
}

// phi3 files may hold q, k and v apart (llama.cpp reads both), and their sliding window is
// ignored as llama.cpp ignores it, while the Hugging Face checkpoint keeps its window.
TEST(FamilyGguf, Phi3ReadsSeparateQkvAndIgnoresTheFilesWindow) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "phi3");
  EXPECT_EQ(hf.config.sliding_window, 2047);
  const hllm::ConvertedModel c = hllm::convert_model(hf.config, hf.weights, hllm::DType::f32);
  hllm::gguf::Writer out = hllm::gguf_model_writer(c.config, c.weights);
  EXPECT_TRUE(out.remove_tensor("blk.0.attn_qkv.weight"));
  for (const auto& [name, w] :
       {std::pair{"attn_q", &c.weights.layers[0].wq}, std::pair{"attn_k", &c.weights.layers[0].wk},
        std::pair{"attn_v", &c.weights.layers[0].wv}})
    out.add_tensor(std::string("blk.0.") + name + ".weight", w->type, {w->cols, w->rows},
                   std::span(static_cast<const std::byte*>(w->data), w->bytes()));
  hllm::test::TempDir tmp;
  out.write(tmp / "apart.gguf");
  hllm::GgufModel gguf = hllm::load_gguf_model(tmp / "apart.gguf");
  EXPECT_EQ(gguf.config.sliding_window, 0);
  const GoldenFile g("families/phi3/logits.bin");
  expect_logits_match(gguf.config, std::move(gguf.weights), g);
}

// What a gemma2 file leaves out, llama.cpp takes from its defaults (soft-caps 50 and 30, a 4096
// window on the even layers), and so does hllm; what a file cannot say, the writer refuses.
TEST(FamilyGguf, Gemma2DefaultsAreLlamaCppsAndTheWriterRefusesWhatFilesCannotHold) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "gemma2");
  hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
  for (const char* key : {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
                          "gemma2.attention.sliding_window"})
    EXPECT_TRUE(out.remove(key)) << key;
  hllm::test::TempDir tmp;
  out.write(tmp / "defaults.gguf");
  const hllm::ModelConfig c = hllm::load_gguf_model(tmp / "defaults.gguf").config;
  EXPECT_EQ(c.attn_softcap, 50.0f);
  EXPECT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.window_of(0), 4096);
  EXPECT_EQ(c.window_of(1), 0);

  const auto refused = [&](const std::function<void(hllm::ModelConfig&)>& edit) {
    hllm::ModelConfig bad = hf.config;
    edit(bad);
    return catch_error([&] { hllm::gguf_model_writer(bad, hf.weights); }).kind() ==
           hllm::ErrorKind::unsupported;
  };
  EXPECT_TRUE(refused([](auto& x) { x.attn_softcap = 0.0f; }));  // a reader would cap at 50
  EXPECT_TRUE(refused([](auto& x) { x.sliding_window = 0; }));   // ... and window 4096
  EXPECT_TRUE(refused([](auto& x) { x.sliding_window_pattern = 6; }));
  EXPECT_TRUE(refused([](auto& x) { x.attention_scale = 0.5f; }));
  EXPECT_TRUE(refused([](auto& x) { x.ffn_activation = hllm::GateActivation::silu; }));
  EXPECT_TRUE(refused([](auto& x) { x.layout = hllm::BlockLayout::pre_norm; }));
  // And a llama file cannot hold Gemma's variants either.
  EXPECT_TRUE(refused([](auto& x) {
    x.architecture = "llama";
    x.rope.layout = hllm::RopeLayout::interleaved;
  }));
}

// What a gemma3 file leaves out, llama.cpp's gemma3 graph takes from its defaults: the windowed
// layers' RoPE base 10000, no final soft-cap, a window pattern of 6 (a file's own is read), and
// no window at all without attention.sliding_window; the writer refuses what files cannot hold.
TEST(FamilyGguf, Gemma3DefaultsAreLlamaCppsAndTheWriterRefusesWhatFilesCannotHold) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "gemma3");
  hllm::test::TempDir tmp;
  const auto read_without = [&](std::initializer_list<const char*> keys) {
    hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
    for (const char* key : keys) EXPECT_TRUE(out.remove(key)) << key;
    out.write(tmp / "defaults.gguf");
    return hllm::load_gguf_model(tmp / "defaults.gguf").config;
  };
  hllm::ModelConfig c =
      read_without({"gemma3.rope.freq_base_swa", "gemma3.final_logit_softcapping"});
  EXPECT_EQ(c.window_rope_theta, 10000.0f);
  EXPECT_EQ(c.final_softcap, 0.0f);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  c = read_without({"gemma3.attention.sliding_window"});
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.window_rope_theta, 0.0f);  // every layer global, on rope.freq_base
  EXPECT_FALSE(c.uses_window_rope(0));
  {
    hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
    out.set("gemma3.attention.sliding_window_pattern", std::uint32_t{3});
    out.set("gemma3.rope.freq_base_swa", 20000.0f);
    out.write(tmp / "pattern.gguf");
    const hllm::ModelConfig p = hllm::load_gguf_model(tmp / "pattern.gguf").config;
    EXPECT_EQ(p.sliding_window_pattern, 3);
    EXPECT_EQ(p.window_rope_theta, 20000.0f);
    EXPECT_FALSE(p.uses_window_rope(2));
  }

  const auto refused = [&](const std::function<void(hllm::ModelConfig&)>& edit) {
    hllm::ModelConfig bad = hf.config;
    edit(bad);
    return catch_error([&] { hllm::gguf_model_writer(bad, hf.weights); }).kind() ==
           hllm::ErrorKind::unsupported;
  };
  EXPECT_TRUE(refused([](auto& x) { x.attn_softcap = 50.0f; }));  // llama.cpp reads no such key
  EXPECT_TRUE(refused([](auto& x) { x.qk_norm = hllm::QkNorm::none; }));
  EXPECT_TRUE(refused([](auto& x) { x.sliding_window_pattern = 2; }));
  hllm::ModelConfig uncapped = hf.config;  // the final cap is optional in gemma3 files
  uncapped.final_softcap = 0.0f;
  EXPECT_NO_THROW(hllm::gguf_model_writer(uncapped, hf.weights));
  const hllm::HfModel gemma2 = hllm::load_hf_model(kFamilies + "gemma2");
  hllm::ModelConfig local_rope = gemma2.config;  // gemma2 files have one RoPE for all layers
  local_rope.window_rope_theta = 10000.0f;
  EXPECT_EQ(catch_error([&] { hllm::gguf_model_writer(local_rope, gemma2.weights); }).kind(),
            hllm::ErrorKind::unsupported);
}

// Gemma 3's config.json: the windowed layers as layer_types lists them (newer transformers),
// which must repeat a pattern; rope_local_base_freq defaults to 10000, is not read without a
// window, and must be positive.
TEST(FamilyHf, Gemma3LayerTypesAndLocalRope) {
  const auto config = [] {
    return nlohmann::json::parse(
        hllm::io::read_text_file(kFamilies + "gemma3/config.json", "config.json"));
  };
  nlohmann::json j = config();
  j.erase("sliding_window_pattern");
  j["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").sliding_window_pattern, 3);
  j["layer_types"][4] = "full_attention";
  hllm::Error e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  EXPECT_EQ(e.field(), "layer_types");
  j["layer_types"] = {"sliding_attention"};  // one entry for six layers
  EXPECT_EQ(catch_error([&] { hllm::hf_model_config(j, "config.json"); }).field(), "layer_types");
  j.erase("layer_types");
  j.erase("rope_local_base_freq");
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").window_rope_theta, 10000.0f);
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").sliding_window_pattern, 6);  // the class's
  j["sliding_window"] = nullptr;
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").window_rope_theta, 0.0f);
  j = config();
  j["rope_local_base_freq"] = -1.0;
  e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.field(), "rope_local_base_freq");
}

// Command-R: a file without logit_scale gets none (llama.cpp's default; config.json's default
// is Cohere's 0.0625); a command-r file holding attn_q_norm is Command R+'s (each head's own
// QK-norm), so one without attn_k_norm names it missing, and use_qk_norm says the same in
// config.json; in a falcon file or another family's config.json they are refused; the writer
// refuses a LayerNorm or a logit scale for families whose files cannot say them, and RMSNorm
// for command-r.
TEST(FamilyGguf, CommandRDefaultsAndRefusals) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "command-r");
  hllm::test::TempDir tmp;
  {
    hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
    EXPECT_TRUE(out.remove("command-r.logit_scale"));
    out.write(tmp / "unscaled.gguf");
    EXPECT_EQ(hllm::load_gguf_model(tmp / "unscaled.gguf").config.logit_scale, 0.0f);
  }
  {
    hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
    out.add_tensor("blk.0.attn_q_norm.weight", hllm::DType::f32, {16, 4},
                   std::vector<std::byte>(64 * sizeof(float)));
    out.write(tmp / "qk_norm.gguf");
    const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "qk_norm.gguf"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
    EXPECT_EQ(e.field(), "blk.0.attn_k_norm.weight");
  }
  {
    const hllm::HfModel falcon = hllm::load_hf_model(kFamilies + "falcon");
    hllm::gguf::Writer out = hllm::gguf_model_writer(falcon.config, falcon.weights);
    out.add_tensor("blk.0.attn_q_norm.weight", hllm::DType::f32, {16, 4},
                   std::vector<std::byte>(64 * sizeof(float)));
    out.write(tmp / "falcon_qk_norm.gguf");
    const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "falcon_qk_norm.gguf"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
    EXPECT_EQ(e.field(), "blk.0.attn_q_norm.weight");
  }
  nlohmann::json j = nlohmann::json::parse(
      hllm::io::read_text_file(kFamilies + "command-r/config.json", "config.json"));
  j.erase("logit_scale");
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").logit_scale, 0.0625f);
  j["use_qk_norm"] = true;
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").qk_norm, hllm::QkNorm::each_head);
  nlohmann::json qwen2_config = nlohmann::json::parse(
      hllm::io::read_text_file(kFamilies + "qwen2/config.json", "config.json"));
  qwen2_config["use_qk_norm"] = true;
  EXPECT_EQ(catch_error([&] { hllm::hf_model_config(qwen2_config, "config.json"); }).field(),
            "use_qk_norm");

  const auto refused = [](hllm::ModelConfig c, const hllm::ModelWeights& w) {
    return catch_error([&] { hllm::gguf_model_writer(c, w); }).kind() ==
           hllm::ErrorKind::unsupported;
  };
  hllm::ModelConfig rms = hf.config;
  rms.norm = hllm::NormKind::rms;
  EXPECT_TRUE(refused(rms, hf.weights));
  const hllm::HfModel qwen2 = hllm::load_hf_model(kFamilies + "qwen2");
  hllm::ModelConfig layer_norm = qwen2.config, scaled = qwen2.config;
  layer_norm.norm = hllm::NormKind::layer;
  scaled.logit_scale = 0.5f;
  EXPECT_TRUE(refused(layer_norm, qwen2.weights));
  EXPECT_TRUE(refused(scaled, qwen2.weights));
}

// Falcon: what FalconForCausalLM reads beyond Falcon-7B's and Falcon-40B's forms is refused by
// its key (ALiBi, per-head q|k|v, sequential blocks, biases, another activation, two input
// norms outside the new decoder, other counts of them).
TEST(FamilyHf, FalconFlagsBeyondSevenBAreRefusedByName) {
  const auto config = [] {
    return nlohmann::json::parse(
        hllm::io::read_text_file(kFamilies + "falcon/config.json", "config.json"));
  };
  const hllm::ModelConfig c = hllm::hf_model_config(config(), "config.json");
  EXPECT_EQ(c.ffn_dim, 256);
  for (const auto& [key, value] : {std::pair<const char*, nlohmann::json>{"alibi", true},
                                   {"num_ln_in_parallel_attn", 2},
                                   {"num_ln_in_parallel_attn", 3},
                                   {"multi_query", false},
                                   {"parallel_attn", false},
                                   {"bias", true},
                                   {"apply_residual_connection_post_layernorm", true},
                                   {"activation", "relu"}}) {
    nlohmann::json j = config();
    j[key] = value;
    const hllm::Error e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported) << key;
    EXPECT_EQ(e.field(), key);
  }
  nlohmann::json defaults = config();  // Falcon-7B's config.json names neither
  defaults.erase("ffn_hidden_size");
  defaults.erase("max_position_embeddings");
  const hllm::ModelConfig d = hllm::hf_model_config(defaults, "config.json");
  EXPECT_EQ(d.ffn_dim, 4 * d.dim);
  EXPECT_EQ(d.context_length, 2048);
}

// Falcon-40B's config.json (new_decoder_architecture): num_kv_heads groups, multi_query
// ignored, two input norms unless num_ln_in_parallel_attn says one (Falcon2-11B), and
// parallel_attn false refused (FalconDecoderLayer builds such a layer without the norms its
// forward reads).
TEST(FamilyHf, FalconNewDecoderConfig) {
  const auto config = [] {
    return nlohmann::json::parse(
        hllm::io::read_text_file(kFamilies + "falcon-40b/config.json", "config.json"));
  };
  const hllm::ModelConfig c = hllm::hf_model_config(config(), "config.json");
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_TRUE(c.parallel_ffn_norm);
  nlohmann::json one_norm = config();
  one_norm["num_ln_in_parallel_attn"] = 1;
  one_norm["multi_query"] = true;
  const hllm::ModelConfig d = hllm::hf_model_config(one_norm, "config.json");
  EXPECT_FALSE(d.parallel_ffn_norm);
  EXPECT_EQ(d.n_kv_heads, 2);
  nlohmann::json defaults = config();  // null: two norms; no num_kv_heads: one per head
  defaults["num_ln_in_parallel_attn"] = nullptr;
  defaults.erase("num_kv_heads");
  const hllm::ModelConfig e = hllm::hf_model_config(defaults, "config.json");
  EXPECT_TRUE(e.parallel_ffn_norm);
  EXPECT_EQ(e.n_kv_heads, e.n_heads);
  nlohmann::json sequential = config();
  sequential["parallel_attn"] = false;
  EXPECT_EQ(catch_error([&] { hllm::hf_model_config(sequential, "config.json"); }).field(),
            "parallel_attn");
}

// Falcon-40B's q|k|v rows, grouped per KV head in the checkpoint, are read regrouped as
// q | k | v (as llama.cpp's converter writes them): each part equals the checkpoint rows
// FalconAttention._split_heads gives it.
TEST(FamilyHf, FalconGroupedQkvIsReadRegrouped) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "falcon-40b");
  const auto checkpoint = hllm::safetensors::Checkpoint::open(kFamilies + "falcon-40b");
  const auto* fused = checkpoint.find("transformer.h.1.self_attention.query_key_value.weight");
  ASSERT_NE(fused, nullptr);
  const std::byte* file = fused->tensor->data;  // [2][2 + 2][16][64] f32
  const hllm::LayerWeights& l = hf.weights.layers[1];
  constexpr std::size_t head_bytes = 16 * 64 * sizeof(float);
  // (kv head g, slot in its group: 2 queries, k, v) -> the checkpoint's rows of that head
  const auto rows = [&](std::size_t g, std::size_t slot) {
    return file + (g * 4 + slot) * head_bytes;
  };
  const auto head = [&](const hllm::WeightTensor& w, std::size_t h) {
    return static_cast<const std::byte*>(w.data) + h * head_bytes;
  };
  for (std::size_t g = 0; g < 2; ++g) {
    for (std::size_t j = 0; j < 2; ++j)  // query head 2g + j
      EXPECT_EQ(std::memcmp(head(l.wq, 2 * g + j), rows(g, j), head_bytes), 0);
    EXPECT_EQ(std::memcmp(head(l.wk, g), rows(g, 2), head_bytes), 0);
    EXPECT_EQ(std::memcmp(head(l.wv, g), rows(g, 3), head_bytes), 0);
  }
  EXPECT_EQ(l.wq.type, hllm::DType::f32);
}

// In files: Falcon-40B's second norm in another family's file is refused by name; a falcon
// file's LayerNorm biases are required like any tensor, the second norm's too.
TEST(FamilyGguf, FalconSecondNormElsewhereIsRefusedAndItsBiasRequired) {
  hllm::test::TempDir tmp;
  {
    const hllm::HfModel command_r = hllm::load_hf_model(kFamilies + "command-r");
    hllm::gguf::Writer out = hllm::gguf_model_writer(command_r.config, command_r.weights);
    out.add_tensor("blk.0.attn_norm_2.weight", hllm::DType::f32, {64},
                   std::vector<std::byte>(64 * sizeof(float)));
    out.write(tmp / "norm2.gguf");
    const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "norm2.gguf"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
    EXPECT_EQ(e.field(), "blk.0.attn_norm_2.weight");
    hllm::ModelConfig two_norms = command_r.config;
    two_norms.parallel_ffn_norm = true;
    hllm::gguf::Writer metadata;
    EXPECT_EQ(catch_error([&] { hllm::set_gguf_model_metadata(metadata, two_norms); }).kind(),
              hllm::ErrorKind::unsupported);
  }
  for (const char* family : {"falcon", "falcon-40b"}) {
    const hllm::HfModel hf = hllm::load_hf_model(kFamilies + family);
    for (const char* bias : {"blk.1.attn_norm.bias", "blk.1.attn_norm_2.bias"}) {
      hllm::gguf::Writer out = hllm::gguf_model_writer(hf.config, hf.weights);
      if (!out.remove_tensor(bias)) continue;  // (Falcon-7B's files have no attn_norm_2)
      out.write(tmp / "no_bias.gguf");
      const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "no_bias.gguf"); });
      EXPECT_EQ(e.kind(), hllm::ErrorKind::format) << family;
      EXPECT_EQ(e.field(), bias) << family;
    }
  }
}

// Which layers a window applies to: all (pattern 0), every layer but the last of each group of
// n (Gemma 2: n = 2, Gemma 3: n = 6); pattern 1 leaves none windowed.
TEST(FamilyConfig, WindowPatternPicksTheLayers) {
  hllm::ModelConfig c;
  c.sliding_window = 16;
  std::string windowed;
  for (std::int64_t pattern : {0, 1, 2, 6}) {
    c.sliding_window_pattern = pattern;
    for (std::int64_t l = 0; l < 12; ++l) windowed += c.window_of(l) == 16 ? 'w' : '-';
    windowed += ' ';
  }
  EXPECT_EQ(windowed, "wwwwwwwwwwww ------------ w-w-w-w-w-w- wwwww-wwwww- ");
}

// A Gemma 2 checkpoint's norms hold w for a norm that scales by 1 + w: the model holds 1 + w,
// as llama.cpp's converter writes it; other families' norms are used as stored.
TEST(FamilyHf, GemmaNormsAreOffsetByOne) {
  const hllm::HfModel gemma = hllm::load_hf_model(kFamilies + "gemma2");
  const hllm::GgufModel file = hllm::load_gguf_model(kFamilies + "gemma2/llamacpp-f32.gguf");
  const hllm::WeightTensor& ours = gemma.weights.layers[2].post_ffn_norm;
  const hllm::WeightTensor& theirs = file.weights.layers[2].post_ffn_norm;
  ASSERT_EQ(ours.cols, theirs.cols);
  for (std::size_t i = 0; i < ours.cols; ++i)
    EXPECT_EQ(ours.as<float>()[i], theirs.as<float>()[i]) << i;
  const auto* stored = gemma.checkpoint->find("model.layers.2.post_feedforward_layernorm.weight");
  ASSERT_NE(stored, nullptr);
  EXPECT_NE(static_cast<const void*>(stored->tensor->data), ours.data);  // an owned copy
}

TEST(FamilyHf, SlidingWindowFlagAndOutputBiasAreRefusedByName) {
  const auto config_with = [](const char* key, nlohmann::json value) {
    nlohmann::json j = nlohmann::json::parse(
        hllm::io::read_text_file(kFamilies + "qwen2/config.json", "config.json"));
    j[key] = std::move(value);
    return j;
  };
  for (const char* key : {"use_sliding_window", "attention_bias"}) {
    const hllm::Error e =
        catch_error([&] { hllm::hf_model_config(config_with(key, true), "config.json"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
    EXPECT_EQ(e.field(), key);
  }
  // A window that use_sliding_window turns off is no window.
  const hllm::ModelConfig c =
      hllm::hf_model_config(config_with("sliding_window", 4096), "config.json");
  EXPECT_EQ(c.sliding_window, 0);
}

// OLMoE's clip_qkv (null in its released checkpoints) clamps what no block here clamps.
TEST(FamilyHf, ClipQkvIsRefusedByName) {
  nlohmann::json j = nlohmann::json::parse(
      hllm::io::read_text_file(kFamilies + "olmoe/config.json", "config.json"));
  EXPECT_EQ(hllm::hf_model_config(j, "config.json").qk_norm, hllm::QkNorm::whole);
  j["clip_qkv"] = 8.0;
  const hllm::Error e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  EXPECT_EQ(e.field(), "clip_qkv");
}

// Qwen3-MoE files hold renormalized experts narrower than feed_forward_length: the writer says
// their width (expert_feed_forward_length) and refuses what llama.cpp's qwen3moe graph would
// read otherwise (it renormalizes whatever the file says); OLMoE's are not renormalized.
TEST(FamilyGguf, ExpertFilesSayTheirWidthAndRefuseOtherNormalization) {
  for (const char* family : {"qwen3moe", "olmoe"}) {
    SCOPED_TRACE(family);
    const hllm::HfModel hf = hllm::load_hf_model(kFamilies + family);
    hllm::test::TempDir tmp;
    hllm::save_gguf_model(tmp / "m.gguf", hf.config, hf.weights);
    const hllm::gguf::File file = hllm::gguf::File::open(tmp / "m.gguf");
    const std::string key = std::string(family) + ".expert_feed_forward_length";
    EXPECT_EQ(file.has(key), std::string(family) == "qwen3moe");
    hllm::ModelConfig other = hf.config;
    other.expert_weights_normalized = !other.expert_weights_normalized;
    const hllm::Error e = catch_error([&] { hllm::gguf_model_writer(other, hf.weights); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  }
}

// Gemma 3's multimodal checkpoints: the text model's keys come from text_config, with the
// class defaults for those it omits (the golden omits five, and loads: FamilyCheckpoint); one
// without text_config is named.
TEST(FamilyHf, Gemma3MultimodalConfigIsItsTextConfig) {
  nlohmann::json j = nlohmann::json::parse(
      hllm::io::read_text_file(kFamilies + "gemma3-mm/config.json", "config.json"));
  const hllm::ModelConfig c = hllm::hf_model_config(j, "config.json");
  EXPECT_EQ(c.rms_eps, 1e-6f);  // Gemma3TextConfig's defaults
  EXPECT_EQ(c.window_rope_theta, 10000.0f);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  EXPECT_EQ(c.vocab_size, 128);  // the text_config's own
  j.erase("text_config");
  const hllm::Error e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.field(), "text_config");
}

// DeepSeek-V3: what llama.cpp's deepseek2 graph does not do is refused by key or tensor (V2's
// group-limited greedy routing scores a group by its best expert; gating functions past
// sigmoid), a multi-token prediction layer beyond num_nextn_predict_layers is a layer config.json
// does not describe, and the GGUF writer refuses V3's routing outside deepseek2.
TEST(FamilyHf, DeepSeekV3RoutingOutsideLlamaCppsGraphIsRefusedByName) {
  const nlohmann::json base = nlohmann::json::parse(
      hllm::io::read_text_file(kFamilies + "deepseek3/config.json", "config.json"));
  for (const auto& [key, value] :
       {std::pair<const char*, const char*>{"topk_method", "group_limited_greedy"},
        {"scoring_func", "sqrtsoftplus"}}) {
    nlohmann::json j = base;
    j[key] = value;
    const hllm::Error e = catch_error([&] { hllm::hf_model_config(j, "config.json"); });
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported) << key;
    EXPECT_EQ(e.field(), key);
  }
  nlohmann::json greedy = base;  // sigmoid scores, no bias, no groups
  greedy["topk_method"] = "greedy";
  const hllm::ModelConfig c = hllm::hf_model_config(greedy, "config.json");
  EXPECT_EQ(c.expert_gating, hllm::ExpertGating::sigmoid);
  EXPECT_FALSE(c.expert_selection_bias);
  EXPECT_EQ(c.n_expert_groups, 0);

  hllm::test::TempDir tmp;
  nlohmann::json no_mtp = base;
  no_mtp["num_nextn_predict_layers"] = 0;
  std::ofstream(tmp / "config.json") << no_mtp.dump();
  std::filesystem::copy_file(kFamilies + "deepseek3/model.safetensors", tmp / "model.safetensors");
  const hllm::Error e = catch_error([&] { hllm::load_hf_model(tmp.path.string()); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_TRUE(e.field().starts_with("model.layers.3.")) << e.field();

  hllm::HfModel hf = hllm::load_hf_model(kFamilies + "deepseek3");
  hllm::ModelConfig all_groups = hf.config;
  all_groups.n_expert_groups_used = all_groups.n_expert_groups;
  EXPECT_EQ(catch_error([&] { hllm::gguf_model_writer(all_groups, hf.weights); }).kind(),
            hllm::ErrorKind::unsupported);
}

// A deepseek2 file from before llama.cpp's converter split attn_kv_b (no *_mla keys, key and
// value lengths the heads' expanded ones, one KV head per query head): W_kb and W_vb are split
// from attn_kv_b at load, and the logits are the reference's, F32 and with a Q8_0 attn_kv_b.
TEST(FamilyGguf, DeepSeekV2FilesFromBeforeTheKvBSplitLoad) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "deepseek2");
  const hllm::ModelConfig& c = hf.config;  // 4 heads, nope 32, v 32, kv_lora 64, rot 16
  const std::size_t heads = 4, nope = 32, v = 32, latent = 64;
  const GoldenFile g{"families/deepseek2/logits.bin"};
  for (const hllm::DType kv_b_type : {hllm::DType::f32, hllm::DType::q8_0}) {
    SCOPED_TRACE(hllm::dtype_name(kv_b_type));
    hllm::gguf::Writer w = hllm::gguf_model_writer(c, hf.weights);
    for (const char* key :
         {"deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla"})
      w.remove(key);
    w.set("deepseek2.attention.key_length", std::uint32_t(nope + 16));
    w.set("deepseek2.attention.value_length", std::uint32_t(v));
    w.set("deepseek2.attention.head_count_kv", std::uint32_t(heads));
    for (std::size_t l = 0; l < hf.weights.layers.size(); ++l) {
      const std::string blk = "blk." + std::to_string(l) + ".";
      w.remove_tensor(blk + "attn_k_b.weight");
      w.remove_tensor(blk + "attn_v_b.weight");
      // kv_b [heads][nope + v][kv_lora] back from the split parts (k_b: [heads][kv_lora][nope]).
      const float* k_b = hf.weights.layers[l].wk_b.as<float>();
      const float* v_b = hf.weights.layers[l].wv_b.as<float>();
      std::vector<float> kv_b(heads * (nope + v) * latent);
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t j = 0; j < latent; ++j) {
          for (std::size_t i = 0; i < nope; ++i)
            kv_b[(h * (nope + v) + i) * latent + j] = k_b[(h * latent + j) * nope + i];
          for (std::size_t i = 0; i < v; ++i)
            kv_b[(h * (nope + v) + nope + i) * latent + j] = v_b[(h * v + i) * latent + j];
        }
      w.add_tensor(blk + "attn_kv_b.weight", kv_b_type, {latent, heads * (nope + v)},
                   hllm::quant::quantize(kv_b_type, kv_b));
    }
    hllm::test::TempDir tmp;
    w.write(tmp / "old.gguf");
    hllm::GgufModel old = hllm::load_gguf_model(tmp / "old.gguf");
    EXPECT_EQ(old.config.mla_nope_dim, 32);
    EXPECT_EQ(old.config.mla_v_dim, 32);
    EXPECT_EQ(old.config.n_kv_heads, 1);
    if (kv_b_type == hllm::DType::f32) {
      expect_logits_match(old.config, std::move(old.weights), g);
    } else {  // the reference within Q8_0's rounding of those two matrices
      const hllm::Llama<> model(old.config, std::move(old.weights));
      hllm::Session<> session(model, {.threads = 2});
      EXPECT_TRUE(
          all_close(session.prefill(golden_tokens(g), hllm::Logits::all), g["logits"], 0.02f));
    }
  }
}

TEST(FamilyGguf, DeepSeekGatingBeyondSigmoidIsRefusedByKey) {
  hllm::test::TempDir tmp;
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + "deepseek3");
  hllm::gguf::Writer w = hllm::gguf_model_writer(hf.config, hf.weights);
  w.set("deepseek2.expert_gating_func", std::uint32_t{3});
  w.write(tmp / "m.gguf");
  const hllm::Error e = catch_error([&] { hllm::load_gguf_model(tmp / "m.gguf"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  EXPECT_EQ(e.field(), "deepseek2.expert_gating_func");
}

TEST(FamilyConfig, ExpertGroupsMustSplitTheExpertsAndHoldTheChoice) {
  hllm::ModelConfig c = hllm::load_hf_model(kFamilies + "deepseek3").config;  // 8 in 4, 2 kept
  EXPECT_NO_THROW(c.validate());
  for (const auto& [groups, used] : {std::pair{3, 1}, {8, 1}, {4, 0}, {4, 5}}) {
    hllm::ModelConfig bad = c;
    bad.n_expert_groups = groups, bad.n_expert_groups_used = used;
    if (groups == 8) bad.n_experts_used = 2;  // groups of one expert
    EXPECT_EQ(catch_error([&] { bad.validate(); }).field(), "n_expert_groups")
        << groups << " " << used;
  }
  hllm::ModelConfig few = c;  // one group of two kept, three experts chosen
  few.n_expert_groups_used = 1;
  few.n_experts_used = 3;
  EXPECT_EQ(catch_error([&] { few.validate(); }).field(), "n_expert_groups");
  hllm::ModelConfig dense = hllm::test::two_layer_gqa_config();
  dense.expert_gating = hllm::ExpertGating::sigmoid;
  EXPECT_EQ(catch_error([&] { dense.validate(); }).field(), "n_experts");
}

}  // namespace
