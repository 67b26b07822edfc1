// Chat templates: detection from real tokenizer.chat_template strings, the exact text each family
// renders, the prefix property that lets a chat keep its KV cache between turns, and the
// perplexity arithmetic (generate/perplexity.hpp).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/generate/chat_template.hpp"
#include "hllm/generate/perplexity.hpp"
#include "hllm/tokenizer/tokenizer.hpp"

namespace {

using hllm::ChatFormat;
using hllm::ChatMessage;

// Abridged from the templates shipped with the models (the markers and their layout are as in
// the originals; long policy text is cut).
const char* kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

const char* kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// SmolLM2-135M-Instruct's template, verbatim.
const char* kSmolLM2Jinja =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

const char* kZephyrJinja =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hi!"},
    {"assistant", "Hello."},
    {"user", "Name a colour."},
};

std::string render(ChatFormat f, std::size_t n, bool gen) {
  return hllm::render_chat(f, std::span(kConversation).first(n), gen);
}

template <class F>
hllm::Error catch_error(F&& f) {
  try {
    f();
  } catch (const hllm::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no exception";
  return hllm::Error(hllm::ErrorKind::internal, "none");
}

TEST(ChatTemplate, DetectsEachFamilyFromItsJinja) {
  EXPECT_EQ(hllm::detect_chat_format(kLlama2Jinja), ChatFormat::llama2);
  EXPECT_EQ(hllm::detect_chat_format(kLlama3Jinja), ChatFormat::llama3);
  EXPECT_EQ(hllm::detect_chat_format(kSmolLM2Jinja), ChatFormat::chatml);
  EXPECT_EQ(hllm::detect_chat_format(kZephyrJinja), ChatFormat::zephyr);
  // Qwen-style ChatML with tool markup around it is still ChatML.
  EXPECT_EQ(hllm::detect_chat_format("{%- if tools %}{{- '<|im_start|>system\\n' }}{%- endif %}"
                                     "{{- '<|im_start|>' + message.role }}"),
            ChatFormat::chatml);
}

TEST(ChatTemplate, UnknownTemplatesNameWhatWasFound) {
  // Gemma.
  hllm::Error e = catch_error([] {
    hllm::detect_chat_format("{{ '<start_of_turn>' + role + '\\n' + message['content'] }}");
  });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  EXPECT_EQ(e.field(), "tokenizer.chat_template");
  EXPECT_NE(e.message().find("<start_of_turn>"), std::string::npos) << e.message();
  // Mistral: [INST] without <<SYS>>.
  e = catch_error([] {
    hllm::detect_chat_format("{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}");
  });
  EXPECT_NE(e.message().find("Mistral"), std::string::npos) << e.message();
  // Phi-3 shares <|user|>/<|assistant|> with Zephyr but ends turns with <|end|>.
  e = catch_error(
      [] { hllm::detect_chat_format("{{'<|user|>\\n' + c + '<|end|>'}}<|assistant|>"); });
  EXPECT_NE(e.message().find("<|end|>"), std::string::npos) << e.message();
  e = catch_error([] { hllm::detect_chat_format("{{ messages }}"); });
  EXPECT_NE(e.message().find("no known markers"), std::string::npos) << e.message();
  e = catch_error([] { hllm::detect_chat_format(""); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
}

TEST(ChatTemplate, FormatsByName) {
  for (ChatFormat f :
       {ChatFormat::llama2, ChatFormat::llama3, ChatFormat::chatml, ChatFormat::zephyr})
    EXPECT_EQ(hllm::chat_format_from_name(hllm::to_string(f)), f);
  EXPECT_EQ(hllm::chat_format_from_name("llama-3"), ChatFormat::llama3);
  const hllm::Error e = catch_error([] { hllm::chat_format_from_name("vicuna"); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::invalid_argument);
  EXPECT_NE(e.message().find("vicuna"), std::string::npos);
  EXPECT_NE(e.message().find("chatml"), std::string::npos);
}

TEST(ChatTemplate, RendersLlama2) {
  EXPECT_EQ(render(ChatFormat::llama2, 4, true),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi! [/INST] Hello. </s>"
            "<s>[INST] Name a colour. [/INST]");
  // Without a system message there is no <<SYS>> block; contents are stripped.
  const std::vector<ChatMessage> plain = {{"user", "  Hi!\n"}};
  EXPECT_EQ(hllm::render_chat(ChatFormat::llama2, plain, true), "<s>[INST] Hi! [/INST]");
}

TEST(ChatTemplate, RendersLlama3) {
  EXPECT_EQ(render(ChatFormat::llama3, 4, true),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, RendersChatML) {
  EXPECT_EQ(render(ChatFormat::chatml, 4, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nName a colour.<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatFormat::chatml, 2, false),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
}

TEST(ChatTemplate, RendersZephyr) {
  EXPECT_EQ(render(ChatFormat::zephyr, 4, true),
            "<|system|>\nYou are terse.</s>\n"
            "<|user|>\nHi!</s>\n"
            "<|assistant|>\nHello.</s>\n"
            "<|user|>\nName a colour.</s>\n"
            "<|assistant|>\n");
}

// Rendering N messages (with the generation prompt after a user turn) is a prefix of rendering
// N+1, and the assistant message closes with chat_assistant_suffix: together these let a chat
// evaluate only the new text each turn.
TEST(ChatTemplate, RendersIncrementally) {
  for (ChatFormat f :
       {ChatFormat::llama2, ChatFormat::llama3, ChatFormat::chatml, ChatFormat::zephyr}) {
    SCOPED_TRACE(hllm::to_string(f));
    for (std::size_t n = 0; n < kConversation.size(); ++n) {
      const bool ends_with_user = n > 0 && kConversation[n - 1].role == "user";
      const std::string shorter = render(f, n, ends_with_user);
      const std::string longer = render(f, n + 1, kConversation[n].role == "user");
      EXPECT_EQ(longer.substr(0, shorter.size()), shorter) << "n=" << n;
    }
    // The reply text sits between the generation prompt and the suffix.
    const std::string prompt = render(f, 2, true);
    const std::string replied = render(f, 3, false);
    const std::string suffix(hllm::chat_assistant_suffix(f));
    ASSERT_GE(replied.size(), prompt.size() + suffix.size());
    EXPECT_EQ(replied.substr(replied.size() - suffix.size()), suffix);
    EXPECT_NE(replied.find("Hello.", prompt.size()), std::string::npos);
    // The suffix starts with the format's end-of-turn marker (after Llama 2's space).
    const std::string_view stop = hllm::chat_stop_strings(f).front();
    EXPECT_NE(suffix.find(stop), std::string::npos);
  }
}

TEST(ChatTemplate, RejectsBadConversations) {
  const std::vector<ChatMessage> no_role = {{"", "x"}};
  EXPECT_EQ(catch_error([&] { hllm::render_chat(ChatFormat::chatml, no_role, true); }).kind(),
            hllm::ErrorKind::invalid_argument);
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  const hllm::Error e =
      catch_error([&] { hllm::render_chat(ChatFormat::llama2, two_users, true); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::invalid_argument);
  EXPECT_NE(e.message().find("alternate"), std::string::npos);
  // ChatML takes any role.
  const std::vector<ChatMessage> tool = {{"tool", "42"}};
  EXPECT_EQ(hllm::render_chat(ChatFormat::chatml, tool, false), "<|im_start|>tool\n42<|im_end|>\n");
}

TEST(ChatTemplate, StopTokensComeFromTheVocabulary) {
  hllm::Vocabulary v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "\xE2\x96\x81", "a"};
  v.scores = {0, 0, 0, 0, 0, -1, -1};
  v.token_types = {2, 3, 3, 3, 3, 1, 1};
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  const hllm::Tokenizer t(v);
  EXPECT_EQ(hllm::chat_stop_tokens(ChatFormat::chatml, t), (std::vector<std::int32_t>{4, 2}));
  EXPECT_EQ(hllm::chat_stop_tokens(ChatFormat::zephyr, t), (std::vector<std::int32_t>{2}));
  // <|eot_id|> is not in this vocabulary: only EOS remains.
  EXPECT_EQ(hllm::chat_stop_tokens(ChatFormat::llama3, t), (std::vector<std::int32_t>{2}));
  // The rendered markers tokenize to their ids with parse_special.
  const std::vector<ChatMessage> one = {{"user", "a"}};
  const std::vector<std::int32_t> ids =
      t.encode(hllm::render_chat(ChatFormat::chatml, one, false), false, true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 3);
  EXPECT_TRUE(hllm::chat_template_writes_bos(ChatFormat::llama3));
  EXPECT_FALSE(hllm::chat_template_writes_bos(ChatFormat::chatml));
}

TEST(Perplexity, TokenNllIsLogSoftmax) {
  // Uniform over 4: -log(1/4).
  const std::vector<float> uniform = {2.0f, 2.0f, 2.0f, 2.0f};
  EXPECT_NEAR(hllm::token_nll(uniform, 3), std::log(4.0), 1e-12);
  // Large logits do not overflow; the answer is log(1 + e^-1) for the larger one.
  const std::vector<float> big = {1000.0f, 999.0f};
  EXPECT_NEAR(hllm::token_nll(big, 0), std::log1p(std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(hllm::token_nll(big, 1), 1.0 + std::log1p(std::exp(-1.0)), 1e-12);
  const std::vector<float> masked = {0.0f, -INFINITY};
  EXPECT_EQ(hllm::token_nll(masked, 1), INFINITY);
  EXPECT_EQ(catch_error([&] { hllm::token_nll(uniform, 4); }).kind(),
            hllm::ErrorKind::out_of_range);
  const std::vector<float> nan = {0.0f, NAN};
  EXPECT_EQ(catch_error([&] { hllm::token_nll(nan, 0); }).kind(),
            hllm::ErrorKind::invalid_argument);
}

TEST(Perplexity, AccumulatorAndError) {
  hllm::PerplexityAccumulator acc;
  EXPECT_EQ(acc.perplexity(), 1.0);
  acc.add(std::log(4.0));
  EXPECT_EQ(acc.mean_nll_error(), 0.0);
  acc.add(std::log(4.0));
  EXPECT_NEAR(acc.perplexity(), 4.0, 1e-12);
  EXPECT_NEAR(acc.perplexity_error(), 0.0, 1e-6);
  // NLLs 1 and 3: mean 2, population variance 1, standard error sqrt(1 / 1) = 1.
  hllm::PerplexityAccumulator two;
  two.add(1.0);
  two.add(3.0);
  EXPECT_NEAR(two.mean_nll_error(), 1.0, 1e-12);
  EXPECT_NEAR(two.perplexity_error(), std::exp(2.0), 1e-9);
}

TEST(Perplexity, WindowsFollowLlamaCpp) {
  const hllm::PerplexityPlan plan = hllm::plan_perplexity(1100, 512);
  EXPECT_EQ(plan.windows, 2u);
  EXPECT_EQ(plan.first_scored, 256u);
  EXPECT_EQ(plan.scored_per_window, 255u);
  const hllm::Error e = catch_error([] { hllm::plan_perplexity(100, 512); });
  EXPECT_EQ(e.kind(), hllm::ErrorKind::capacity);
  EXPECT_NE(e.message().find("100 tokens"), std::string::npos);
  EXPECT_EQ(catch_error([] { hllm::plan_perplexity(100, 2); }).kind(),
            hllm::ErrorKind::invalid_argument);

  // A window of 4 over a 3-token vocabulary scores position 2 against token 3 only.
  const std::vector<std::int32_t> window = {0, 1, 2, 1};
  std::vector<float> logits(4 * 3, 0.0f);
  logits[2 * 3 + 1] = 1.0f;  // position 2 favours token 1, which is the target
  hllm::PerplexityAccumulator acc;
  hllm::score_window(logits, window, 3, hllm::plan_perplexity(4, 4), acc);
  EXPECT_EQ(acc.count(), 1u);
  EXPECT_NEAR(acc.mean_nll(), std::log(2.0 + std::exp(1.0)) - 1.0, 1e-12);
  EXPECT_EQ(catch_error([&] {
              hllm::score_window(std::span(logits).first(5), window, 3, hllm::plan_perplexity(4, 4),
                                 acc);
            }).kind(),
            hllm::ErrorKind::invalid_argument);
}

}  // namespace
