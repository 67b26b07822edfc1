// Model conversion (io/convert.hpp) and the vocabulary writer: what hllm-convert does.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/hf_model.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"
#include "test_util.hpp"

namespace {

const std::string kFixtures = HLLM_SHARED_DIR "/fixtures";

std::vector<float> logits_of(const hllm::ModelConfig& c, const hllm::ModelWeights& w,
                             const std::vector<std::int32_t>& tokens) {
  const hllm::Llama<> model(c, w);
  hllm::Session<> session(model, {.exact = true});
  const auto all = session.prefill(tokens, hllm::Logits::all);
  return {all.begin(), all.end()};
}

hllm::GgufModel reload(const hllm::ConvertedModel& m, std::vector<std::byte>& bytes) {
  bytes = hllm::gguf_model_writer(m.config, m.weights).to_bytes();
  return hllm::load_gguf_model(
      std::make_shared<const hllm::gguf::File>(hllm::gguf::File::from_memory(bytes, "converted")));
}

// A Hugging Face checkpoint (half-split RoPE) converted to GGUF (interleaved RoPE, q/k rows
// permuted) gives the same logits as the checkpoint itself.
TEST(Convert, HuggingFaceToGgufKeepsTheLogits) {
  const hllm::HfModel hf = hllm::load_hf_model(HLLM_GOLDEN_DIR "/formats/hf");
  ASSERT_EQ(hf.config.rope.layout, hllm::RopeLayout::neox);
  const std::vector<std::int32_t> tokens{1, 5, 17, 42, 99, 3, 64, 7, 120, 11};
  const auto expected = logits_of(hf.config, hf.weights, tokens);
  const hllm::ConvertedModel converted =
      hllm::convert_model(hf.config, hf.weights, hllm::DType::f32);
  EXPECT_EQ(converted.config.rope.layout, hllm::RopeLayout::interleaved);
  std::vector<std::byte> bytes;
  const hllm::GgufModel gguf = reload(converted, bytes);
  EXPECT_EQ(gguf.config.rope.layout, hllm::RopeLayout::interleaved);
  EXPECT_TRUE(hllm::test::all_close(logits_of(gguf.config, gguf.weights, tokens), expected, 1e-5f));
}

// Our Q8_0 quantizer is ggml's reference one, so converting the fixture's F32 file reproduces
// the tensors llama-quantize wrote into its Q8_0 file, byte for byte.
TEST(Convert, F32ToQ8_0ReproducesLlamaQuantize) {
  if (!std::filesystem::exists(kFixtures))
    GTEST_SKIP() << "../shared/fixtures not found (a user's clone has no ../shared)";
  const hllm::GgufModel f32 = hllm::load_gguf_model(kFixtures + "/fx-gqa-f32.gguf");
  // The file's layout (no load-time repacking), to compare bytes with our own quantizer's.
  const hllm::GgufModel q8 =
      hllm::load_gguf_model(kFixtures + "/fx-gqa-q8_0.gguf", {.repack = hllm::Repack::never});
  const hllm::ConvertedModel converted =
      hllm::convert_model(f32.config, f32.weights, hllm::DType::q8_0);
  const auto& a = converted.weights.layers;
  const auto& b = q8.weights.layers;
  for (std::size_t l = 0; l < a.size(); ++l) {
    for (auto member : {&hllm::LayerWeights::wq, &hllm::LayerWeights::wk, &hllm::LayerWeights::wv,
                        &hllm::LayerWeights::wo}) {
      const hllm::WeightTensor& x = a[l].*member;
      const hllm::WeightTensor& y = b[l].*member;
      ASSERT_EQ(x.type, y.type) << x.name;
      ASSERT_EQ(x.bytes(), y.bytes()) << x.name;
      EXPECT_EQ(0, std::memcmp(x.data, y.data, x.bytes())) << x.name;
    }
  }
}

TEST(Convert, EveryTargetTypeStaysCloseToTheOriginal) {
  hllm::ModelConfig c;
  c.vocab_size = 96;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 128;
  c.context_length = 64;
  const hllm::ModelWeights w = hllm::random_weights(c, hllm::DType::f32, 3);
  const std::vector<std::int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  const auto expected = logits_of(c, w, tokens);
  // rms error of the logits relative to their rms, bounded by the type's relative rounding of
  // each weight (f16 2^-11, bf16 2^-8, q8_0 about 1/254 of the block maximum, q4_0 about 1/16
  // of it) times a few for the layers that compound it.
  for (auto [type, tolerance] : {std::pair{hllm::DType::f32, 1e-6},
                                 {hllm::DType::f16, 4e-3},
                                 {hllm::DType::bf16, 3e-2},
                                 {hllm::DType::q8_0, 3e-2},
                                 {hllm::DType::q4_0, 0.35}}) {
    const hllm::ConvertedModel converted = hllm::convert_model(c, w, type);
    std::vector<std::byte> bytes;
    const hllm::GgufModel reloaded = reload(converted, bytes);
    EXPECT_EQ(hllm::file_type_of(reloaded.weights.layers[0].wq.type), type);
    EXPECT_EQ(reloaded.weights.layers[0].attn_norm.type, hllm::DType::f32);
    const auto actual = logits_of(reloaded.config, reloaded.weights, tokens);
    double error = 0, scale = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
      scale += expected[i] * expected[i];
    }
    const double relative = std::sqrt(error / scale);
    EXPECT_LE(relative, tolerance) << hllm::dtype_name(type);
    std::printf("%s: rms relative error %.2e\n", hllm::dtype_name(type).c_str(), relative);
  }
}

TEST(Convert, VocabularyRoundTripsThroughGguf) {
  hllm::Vocabulary v;
  v.model = "llama";
  // A SentencePiece vocabulary has its 256 byte-fallback tokens (vocabulary_from_gguf checks).
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.push_back(name);
    v.token_types.push_back(6);
  }
  v.tokens.insert(v.tokens.end(), {"\u2581a", "b"});
  v.token_types.insert(v.token_types.end(), {1, 1});
  v.scores.assign(v.tokens.size(), 0.0f);
  v.scores.end()[-2] = -1.5f;
  v.scores.end()[-1] = -2.0f;
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_space_prefix = false;
  hllm::gguf::Writer w;
  w.set("general.architecture", "llama");
  hllm::write_vocabulary(w, v);
  const auto bytes = w.to_bytes();
  const auto file = hllm::gguf::File::from_memory(bytes, "vocab");
  const hllm::Vocabulary back = hllm::vocabulary_from_gguf(file);
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.scores, v.scores);
  EXPECT_EQ(back.token_types, v.token_types);
  EXPECT_EQ(back.bos_id, 1);
  EXPECT_EQ(back.eos_id, 2);
  EXPECT_EQ(back.unk_id, 0);
  EXPECT_FALSE(back.add_space_prefix);
  EXPECT_EQ(hllm::Tokenizer(back).encode("ab", false), hllm::Tokenizer(v).encode("ab", false));
}

TEST(Convert, RefusesUnwritableTypes) {
  hllm::ModelConfig c;
  c.vocab_size = 32;
  c.dim = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 32;
  c.context_length = 16;
  EXPECT_THROW(
      hllm::convert_model(c, hllm::random_weights(c, hllm::DType::f32, 1), hllm::DType::q4_k),
      hllm::Error);
  EXPECT_THROW(hllm::parse_dtype("q9_9"), hllm::Error);
  EXPECT_EQ(hllm::parse_dtype("q8_0"), hllm::DType::q8_0);
  EXPECT_EQ(hllm::parse_dtype("BF16"), hllm::DType::bf16);
}

// hllm-convert's GGUF path keeps every key it does not rewrite: the chat template, licence,
// general.*, tokenizer keys beyond the vocabulary, values of every type (f64 and bool arrays
// included) bit for bit; it sets general.file_type and general.quantization_version for the
// new weights.
TEST(Convert, KeepsEveryMetadataKeyItDoesNotRewrite) {
  namespace gguf = hllm::gguf;
  const hllm::GgufModel bundled =
      hllm::load_gguf_model(HLLM_MODELS_DIR "/kjv-llama.gguf", {.repack = hllm::Repack::never});
  const hllm::Vocabulary vocabulary = hllm::vocabulary_from_gguf(*bundled.file);
  gguf::Writer source_writer = hllm::gguf_model_writer(bundled.config, bundled.weights);
  hllm::write_vocabulary(source_writer, vocabulary);
  source_writer.set("tokenizer.chat_template",
                    "{% for m in messages %}{{ m.content }}{% endfor %}");
  source_writer.set("general.license", "MIT");
  source_writer.set("general.author", "hllm");
  source_writer.set("general.tags", std::vector<std::string>{"bible", "kjv"});
  source_writer.set("test.f64s", std::vector<double>{0.1, -1e300});
  source_writer.set("test.bools", std::vector<bool>{true, false, true});
  source_writer.set("test.i8", std::int8_t{-7});
  source_writer.set_alignment(64);
  const std::vector<std::byte> source_bytes = source_writer.to_bytes();
  const auto source =
      std::make_shared<const gguf::File>(gguf::File::from_memory(source_bytes, "source.gguf"));
  ASSERT_EQ(source->get_int("general.file_type"), 1);  // the bundled model's F16

  // What hllm-convert does with a GGUF input.
  const hllm::GgufModel m = hllm::load_gguf_model(source, {.repack = hllm::Repack::never});
  const hllm::ConvertedModel q8 = hllm::convert_model(m.config, m.weights, hllm::DType::q8_0);
  gguf::Writer out = hllm::gguf_model_writer(q8.config, q8.weights);
  hllm::write_vocabulary(out, hllm::vocabulary_from_gguf(*m.file));
  hllm::copy_missing_metadata(*m.file, out);
  const std::vector<std::byte> out_bytes = out.to_bytes();
  const gguf::File converted = gguf::File::from_memory(out_bytes, "converted.gguf");

  const std::set<std::string> rewritten = {"general.file_type", "general.quantization_version"};
  for (const std::string& key : source->keys()) {
    ASSERT_TRUE(converted.has(key)) << key << " was lost";
    if (rewritten.count(key) != 0) continue;
    const auto before = source->encoded_value(key), after = converted.encoded_value(key);
    EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin(), after.end()))
        << key << " changed";
  }
  EXPECT_EQ(converted.get_int("general.file_type"), 7);  // llama.cpp's MOSTLY_Q8_0
  EXPECT_EQ(converted.get_int("general.quantization_version"), 2);
  EXPECT_EQ(converted.alignment(), 64u);
  EXPECT_EQ(converted.keys().size(), source->keys().size() + 1);  // + quantization_version
  EXPECT_NO_THROW(hllm::load_gguf_model(
      std::make_shared<const gguf::File>(gguf::File::from_memory(out_bytes, "converted.gguf"))));
}

}  // namespace
