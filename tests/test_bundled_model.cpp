// The bundled model (models/kjv-llama.gguf, trained by tools/train/) against its PyTorch
// reference (tools/train/reference_outputs.py, float64 on the same F16-rounded weights):
// logits on a held-out passage, the tokenizer on the prompt, and a 64-token greedy continuation.

#include <gtest/gtest.h>

#include <vector>

#include "golden_file.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"
#include "test_util.hpp"

namespace {

using hllm::test::GoldenFile;

std::vector<std::int32_t> ids(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

class BundledModel : public ::testing::Test {
 protected:
  BundledModel()
      : loaded_(hllm::load_gguf_model(HLLM_MODELS_DIR "/kjv-llama.gguf")),
        model_(loaded_.config, loaded_.weights),
        golden_("bundled_model.bin") {}
  hllm::GgufModel loaded_;
  hllm::Llama<> model_;
  GoldenFile golden_;
};

TEST_F(BundledModel, HeldOutLogitsMatchPyTorch) {
  const auto tokens = ids(golden_["tokens"]);
  ASSERT_EQ(tokens.size(), 128u);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> prefill(model_, {.isa = isa});
    // Absolute 1e-4 (logits span -22..14): float32 evaluation lands near 6e-6.
    EXPECT_LE(
        hllm::test::max_abs_diff(prefill.prefill(tokens, hllm::Logits::all), golden_["logits"]),
        1e-4f);
    hllm::Session<> decode(model_, {.isa = isa});
    std::vector<float> decoded;
    for (std::int32_t t : tokens) {
      const auto row = decode.decode(t);
      decoded.insert(decoded.end(), row.begin(), row.end());
    }
    EXPECT_LE(hllm::test::max_abs_diff(decoded, golden_["logits"]), 1e-4f);
  }
}

TEST_F(BundledModel, TokenizerEncodesThePromptAsSentencePieceDoes) {
  const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*loaded_.file));
  EXPECT_EQ(tokenizer.encode("In the beginning"), ids(golden_["prompt_tokens"]));
}

// Greedy decoding is argmax at every step; the reference's smallest top-two margin (0.0037) is
// far above our float32 error (~1e-5 of the logit scale), so the tokens must agree exactly.
TEST_F(BundledModel, GreedyContinuationMatchesPyTorch) {
  const auto prompt = ids(golden_["prompt_tokens"]);
  const auto expected = ids(golden_["greedy_tokens"]);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> session(model_, {.isa = isa});
    hllm::Sampler greedy({.temperature = 0.0f, .repeat_penalty = 1.0f});
    const auto result =
        hllm::generate(session, prompt, greedy, {.max_tokens = static_cast<int>(expected.size())});
    EXPECT_EQ(result.tokens, expected);
  }
}

}  // namespace
