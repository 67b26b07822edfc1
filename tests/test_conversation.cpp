// Conversation (generate/conversation.hpp) on the bundled model: keeping the chat in the KV cache
// turn after turn must be the same as rendering and evaluating the whole conversation from
// scratch each turn, in tokens and in replies; and a message or reply that does not fit is
// handled without losing the conversation.

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "hllm/generate/chat_template.hpp"
#include "hllm/generate/conversation.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace {

// Greedy without a repetition penalty: the reply depends on the logits alone, not on which
// tokens the sampler is shown as history.
hllm::SamplerParams greedy() { return {.temperature = 0.0f, .repeat_penalty = 1.0f}; }

std::string without_spaces(std::string text) {
  std::erase(text, ' ');
  return text;
}

class ConversationTest : public ::testing::Test {
 protected:
  ConversationTest()
      : loaded_(hllm::load_gguf_model(HLLM_MODELS_DIR "/kjv-llama.gguf")),
        model_(loaded_.config, loaded_.weights),
        tokenizer_(hllm::vocabulary_from_gguf(*loaded_.file)) {}
  hllm::GgufModel loaded_;
  hllm::Llama<> model_;
  hllm::Tokenizer tokenizer_;
};

// Two references each turn. Tokens: a fresh session that prefills everything the conversation
// evaluated, in one go, must give the same reply as the cache kept across turns. Text: what the
// cache holds, decoded, must be the template's rendering of the messages so far. (Tokenizing the
// whole rendering again is no reference: a reply's tokens are what the model sampled, often not
// the tokenizer's segmentation of their text.) Replies are cut at a few tokens, so each ends on
// a token that was sampled but not decoded, and Llama 2's format puts " </s>" (a space after a
// reply) into the stream: both are what the conversation has to get right. The model has no
// chat markers of its own; the formats' markup is plain text to it, which this test needs.
TEST_F(ConversationTest, TurnsKeptInTheCacheEqualTheConversationEvaluatedAtOnce) {
  const std::vector<std::string> user = {"And God said", "Let there be light", "In the beginning",
                                         "and the earth was"};
  for (const hllm::ChatFormat format :
       {hllm::ChatFormat::llama2, hllm::ChatFormat::chatml, hllm::ChatFormat::zephyr}) {
    SCOPED_TRACE(hllm::to_string(format));
    hllm::Session<> session(model_, {.context = 512});
    hllm::Conversation chat(session, tokenizer_, format, "Speak as the scripture does.");
    hllm::Sampler sampler(greedy());
    std::vector<std::int32_t> pending;  // the last reply's final token: sampled, not decoded
    for (std::size_t turn = 0; turn < user.size(); ++turn) {
      SCOPED_TRACE("turn " + std::to_string(turn));
      const std::vector<std::int32_t> before = chat.tokens();
      const std::size_t n_messages = chat.messages().size();
      const int max_tokens = 3 + static_cast<int>(turn);
      std::string streamed;
      const hllm::ChatReply reply =
          chat.reply(user[turn], sampler, {.max_tokens = max_tokens}, [&](std::string_view piece) {
            streamed += piece;
            return true;
          });
      EXPECT_EQ(reply.reason, hllm::StopReason::max_tokens);
      EXPECT_EQ(reply.text, tokenizer_.decode(reply.tokens));
      EXPECT_EQ(streamed, reply.text);
      ASSERT_EQ(chat.messages().size(), n_messages + 2);
      EXPECT_EQ(chat.messages()[n_messages].content, user[turn]);
      EXPECT_EQ(chat.messages().back().role, "assistant");
      EXPECT_EQ(chat.messages().back().content, reply.text);

      // The cache: what it held, then this turn (starting with the previous reply's last
      // token), then the reply but its last token.
      const std::vector<std::int32_t>& held = chat.tokens();
      ASSERT_EQ(held.size(), before.size() + reply.prompt_tokens + reply.tokens.size() - 1);
      EXPECT_TRUE(std::equal(before.begin(), before.end(), held.begin()));
      EXPECT_TRUE(std::equal(pending.begin(), pending.end(), held.begin() + before.size()));
      EXPECT_TRUE(std::equal(reply.tokens.begin(), reply.tokens.end() - 1,
                             held.end() - (reply.tokens.size() - 1)));
      EXPECT_EQ(session.position(), held.size());
      if (turn == 0) {
        EXPECT_EQ(held.front(), tokenizer_.vocabulary().bos_id);
      }

      const std::vector<std::int32_t> prompt(held.begin(), held.end() - (reply.tokens.size() - 1));
      hllm::Session<> fresh(model_, {.context = 512});
      hllm::Sampler fresh_sampler(greedy());
      EXPECT_EQ(hllm::generate(fresh, prompt, fresh_sampler, {.max_tokens = max_tokens}).tokens,
                reply.tokens);

      pending = {reply.tokens.back()};
      std::vector<std::int32_t> everything = held;
      everything.push_back(reply.tokens.back());
      const std::string rendering = hllm::render_chat(format, chat.messages(), false);
      const std::string_view suffix = hllm::chat_assistant_suffix(format);
      // The bundled vocabulary is SentencePiece's, which puts a space in front of every
      // fragment ("<s> [INST]", "the <|im_end|>": the markers are plain text to it), and a
      // rendering's space before a reply ("[/INST] ,") is in the reply's first token only if the
      // model sampled it so: the texts agree but for spaces. BOS is the session's, not the
      // template's, except where the template writes it.
      const std::int32_t bos = tokenizer_.vocabulary().bos_id;
      const std::string bos_text =
          hllm::chat_template_writes_bos(format) ? "" : tokenizer_.decode(std::span(&bos, 1), true);
      EXPECT_EQ(without_spaces(tokenizer_.decode(everything, true)),
                without_spaces(bos_text + rendering.substr(0, rendering.size() - suffix.size())));
    }
  }
}

TEST_F(ConversationTest, AMessageThatDoesNotFitIsRefusedAndTheChatGoesOn) {
  hllm::Session<> session(model_, {.context = 64});
  hllm::Conversation chat(session, tokenizer_, hllm::ChatFormat::zephyr);
  hllm::Sampler sampler(greedy());
  const hllm::ChatReply first = chat.reply("In the beginning", sampler, {.max_tokens = 4});
  const std::vector<std::int32_t> tokens = chat.tokens();
  const auto messages = chat.messages();
  std::string long_message;
  for (int i = 0; i < 20; ++i) long_message += "and the earth was without form ";
  try {
    chat.reply(long_message, sampler);
    FAIL() << "a message past the context was accepted";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::capacity);
    EXPECT_NE(std::string(e.what()).find("of the context's 64 are left"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(chat.tokens(), tokens);
  EXPECT_EQ(session.position(), tokens.size());
  ASSERT_EQ(chat.messages().size(), messages.size());
  const hllm::ChatReply second = chat.reply("And God said", sampler, {.max_tokens = 4});
  EXPECT_FALSE(second.tokens.empty());
  EXPECT_EQ(chat.messages().size(), messages.size() + 2);
  EXPECT_NE(first.reason, hllm::StopReason::context_full);
}

TEST_F(ConversationTest, AReplyThatFillsTheContextEndsTheConversationUntilReset) {
  hllm::Session<> session(model_, {.context = 40});
  hllm::Conversation chat(session, tokenizer_, hllm::ChatFormat::zephyr);
  hllm::Sampler sampler(greedy());
  const hllm::ChatReply reply = chat.reply("In the beginning", sampler);  // no token limit
  EXPECT_EQ(reply.reason, hllm::StopReason::context_full);
  EXPECT_EQ(session.position(), session.context());
  EXPECT_EQ(reply.prompt_tokens + reply.tokens.size(), session.context() + 1);
  EXPECT_THROW(chat.reply("And God said", sampler), hllm::Error);
  chat.reset();
  EXPECT_EQ(session.position(), 0u);
  EXPECT_TRUE(chat.messages().empty());
  EXPECT_FALSE(chat.reply("And God said", sampler, {.max_tokens = 2}).tokens.empty());
}

// A callback that stops the reply keeps what was shown; the next turn goes on from there.
TEST_F(ConversationTest, ACancelledReplyIsKeptAndTheNextTurnFollowsIt) {
  hllm::Session<> session(model_, {.context = 256});
  hllm::Conversation chat(session, tokenizer_, hllm::ChatFormat::chatml);
  hllm::Sampler sampler(greedy());
  int pieces = 0;
  const hllm::ChatReply cut =
      chat.reply("In the beginning", sampler, {}, [&](std::string_view) { return ++pieces < 2; });
  EXPECT_EQ(cut.reason, hllm::StopReason::cancelled);
  EXPECT_EQ(pieces, 2);
  EXPECT_EQ(chat.messages().back().content, cut.text);
  const std::size_t held = chat.tokens().size();
  const hllm::ChatReply next = chat.reply("And God said", sampler, {.max_tokens = 3});
  EXPECT_EQ(next.tokens.size(), 3u);
  // The turn evaluated the cancelled reply's last token before the new markup.
  EXPECT_EQ(chat.tokens()[held], cut.tokens.back());
}

// An error inside a turn (here the callback's) leaves the conversation as it was.
TEST_F(ConversationTest, AnErrorInsideATurnChangesNothing) {
  hllm::Session<> session(model_, {.context = 256});
  hllm::Conversation chat(session, tokenizer_, hllm::ChatFormat::llama2);
  hllm::Sampler sampler(greedy());
  chat.reply("In the beginning", sampler, {.max_tokens = 3});
  const std::vector<std::int32_t> tokens = chat.tokens();
  const std::size_t n_messages = chat.messages().size();
  EXPECT_THROW(chat.reply("And God said", sampler, {},
                          [](std::string_view) -> bool {
                            throw hllm::Error(hllm::ErrorKind::internal, "callback failed");
                          }),
               hllm::Error);
  EXPECT_EQ(chat.tokens(), tokens);
  EXPECT_EQ(chat.messages().size(), n_messages);
  EXPECT_EQ(session.position(), tokens.size());
}

}  // namespace
