// Model families beyond Llama (model/architecture.hpp): tiny random checkpoints that
// tools/gen_family_goldens.py wrote with their float64 reference logits (Hugging Face
// transformers where the pinned version has the class), loaded directly from safetensors and
// after conversion to GGUF, prefill and decode, on every ISA; and the errors a file of a
// family gets when a tensor or key is wrong.

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/io/hf_model.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "model_logits.hpp"
#include "test_util.hpp"

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
  bool qkv_bias, qk_norm, tied, fused;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

// What a loaded config must say of the family.
void expect_family(const hllm::ModelConfig& c, const Family& f) {
  EXPECT_EQ(c.architecture, f.name);
  EXPECT_EQ(c.qkv_bias, f.qkv_bias);
  EXPECT_EQ(c.qk_norm, f.qk_norm);
  EXPECT_EQ(c.tied_embeddings, f.tied);
  EXPECT_EQ(c.rope.layout, hllm::RopeLayout::neox);  // HF's rows, and qwen files keep them
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
  EXPECT_EQ(file.get_string("general.architecture"), f.name);
  EXPECT_TRUE(file.has(std::string(f.name) + ".embedding_length"));
  EXPECT_FALSE(file.has("llama.embedding_length"));
  EXPECT_EQ(file.find_tensor("blk.1.attn_k.bias") != nullptr, f.qkv_bias);
  EXPECT_EQ(file.find_tensor("blk.1.attn_k_norm.weight") != nullptr, f.qk_norm);
  EXPECT_EQ(file.find_tensor("output.weight") == nullptr, f.tied);
  EXPECT_EQ(file.find_tensor("blk.1.attn_qkv.weight") != nullptr, f.fused);
  EXPECT_EQ(file.find_tensor("blk.1.ffn_gate.weight") == nullptr, f.fused);

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

// Quantized, the variants still run on every ISA's integer kernels: Q8_0 logits stay close to
// the reference (the bound is loose; the exact figures are the fixtures' business).
TEST_P(FamilyCheckpoint, Q8_0ConversionStaysClose) {
  const hllm::HfModel hf = hllm::load_hf_model(kFamilies + f.name);
  hllm::ConvertedModel q8 = hllm::convert_model(hf.config, hf.weights, hllm::DType::q8_0);
  const hllm::Llama<> model(q8.config, std::move(q8.weights));
  const auto tokens = golden_tokens(g);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> session(model, {.threads = 2, .isa = isa});
    EXPECT_TRUE(all_close(session.prefill(tokens, hllm::Logits::all), g["logits"], 3e-2f));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyCheckpoint,
                         ::testing::Values(Family{"qwen2", true, false, true, false},
                                           Family{"qwen3", false, true, false, false},
                                           Family{"phi3", false, false, false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

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
  c.qk_norm = true;
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

}  // namespace
