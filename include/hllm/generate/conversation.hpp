#pragma once
// A chat kept in a session's KV cache across turns. Each reply() evaluates only what the chat
// template adds for the new message (the templates render incrementally, chat_template.hpp),
// then generates the assistant's reply, which stays in the cache for the next turn. What a
// program would otherwise have to get right by hand lives here:
//   - the offset into the rendered conversation that the cache already holds;
//   - the template's closing text after a reply (evaluated with the next turn: it begins with
//     the stop token that was sampled but never decoded);
//   - a reply cut at max_tokens, whose last token was sampled but not decoded either;
//   - SentencePiece's space: new text that starts with ' ' (Llama 2's " </s>") would get a
//     second one from the tokenizer, where tokenizing the whole conversation at once (as Meta's
//     reference code does) gives the lone "\u2581" token;
//   - BOS at the start, unless the template writes it;
//   - a message too long for what is left of the context is refused, the conversation unchanged.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/generate/chat_template.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/tokenizer/spm_tokenizer.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"

namespace hllm {

struct ReplyOptions {
  int max_tokens = -1;  // tokens of reply at most; -1: until a stop token or the context is full
};

struct ChatReply {
  std::string text;                  // the reply's text (also the last entry of messages())
  std::vector<std::int32_t> tokens;  // its tokens, without the stop token
  StopReason reason = StopReason::stop_token;
  std::size_t prompt_tokens = 0;  // tokens evaluated before the reply: the message and markup
};

// What a Conversation needs from a session (hllm::Session has it all).
template <class S>
concept ConversationSession = GenerationSession<S> && BoundedSession<S> && requires(S& s) {
  s.reset();
  s.rewind(std::size_t{});
};

template <ConversationSession S>
class Conversation {
 public:
  // Takes the session over from its start (it is reset). `system`, if not empty, begins the
  // conversation as a system message. The session and tokenizer must outlive the conversation.
  Conversation(S& session, const Tokenizer& tokenizer, ChatFormat format, std::string system = {})
      : session_(session),
        tokenizer_(tokenizer),
        format_(format),
        stop_tokens_(chat_stop_tokens(format, tokenizer)),
        spm_space_(sentencepiece_space(tokenizer)),
        system_(std::move(system)) {
    reset();
  }

  // Sends a user message and generates the reply: on_text(piece) receives its text as it is
  // decoded (complete UTF-8 only) and may return false to stop it (reason cancelled). Throws
  // hllm::Error(capacity), changing nothing, if the message and one token of reply do not fit in
  // what is left of the context. After a reply that ends with context_full, every message is
  // refused until reset(). Errors from the session, sampler or callback leave the conversation
  // as it was before the call.
  template <class OnText>
  requires std::predicate<OnText&, std::string_view> ChatReply reply(std::string_view message,
                                                                     Sampler& sampler,
                                                                     const ReplyOptions& options,
                                                                     OnText&& on_text) {
    const std::size_t n_messages = messages_.size(), position = session_.position();
    const std::size_t history = history_.size();
    messages_.push_back({"user", std::string(message)});
    try {
      const std::vector<std::int32_t> turn = turn_tokens();
      const std::size_t left = session_.context() - position;
      if (turn.size() >= left)
        throw Error(ErrorKind::capacity, "that message takes " + std::to_string(turn.size()) +
                                             " tokens, and only " + std::to_string(left) +
                                             " of the context's " +
                                             std::to_string(session_.context()) + " are left");
      ChatReply out;
      out.prompt_tokens = turn.size();
      StreamingDecoder stream(tokenizer_);
      const GenerateResult result = generate(
          session_, turn, sampler, {.max_tokens = options.max_tokens, .stop_tokens = stop_tokens_},
          [&](std::int32_t token) {
            const std::string piece = stream.push(token);
            out.text += piece;
            return piece.empty() ||
                   static_cast<bool>(std::invoke(on_text, std::string_view(piece)));
          });
      const std::string tail = stream.flush();
      out.text += tail;
      if (!tail.empty()) std::invoke(on_text, std::string_view(tail));
      out.tokens = result.tokens;
      out.reason = result.reason;

      // Commit: the cache holds the turn and the reply's tokens, but a reply that did not end on
      // a stop token ends on a token sampled and never decoded, which the next turn evaluates.
      // The template's closing text comes with the next turn too.
      std::vector<std::int32_t> undecoded;
      if (result.reason != StopReason::stop_token && !out.tokens.empty())
        undecoded.push_back(out.tokens.back());
      messages_.push_back({"assistant", out.text});
      const std::size_t rendered =
          render_chat(format_, messages_, false).size() - chat_assistant_suffix(format_).size();
      history_.insert(history_.end(), turn.begin(), turn.end());
      history_.insert(history_.end(), out.tokens.begin(),
                      out.tokens.end() - static_cast<std::ptrdiff_t>(undecoded.size()));
      undecoded_ = std::move(undecoded);
      rendered_ = rendered;
      return out;
    } catch (...) {
      // Back to the state before this call: the cache, the history and the messages.
      messages_.resize(n_messages);
      history_.resize(history);
      session_.rewind(position);
      throw;
    }
  }
  ChatReply reply(std::string_view message, Sampler& sampler, const ReplyOptions& options = {}) {
    return reply(message, sampler, options, [](std::string_view) { return true; });
  }

  // The messages so far: the system message (if any), then user and assistant in turn.
  const std::vector<ChatMessage>& messages() const noexcept { return messages_; }
  // Every token the session's cache holds for this conversation, in order: a fresh session that
  // prefills these is in the same state.
  const std::vector<std::int32_t>& tokens() const noexcept { return history_; }
  ChatFormat format() const noexcept { return format_; }
  const S& session() const noexcept { return session_; }

  // Starts over: the session is reset and only the system message is kept.
  void reset() {
    session_.reset();
    messages_.clear();
    if (!system_.empty()) messages_.push_back({"system", system_});
    history_.clear();
    undecoded_.clear();
    rendered_ = 0;
  }

 private:
  // The lone "\u2581" token of a SentencePiece vocabulary that prefixes text with a space, or -1.
  static std::int32_t sentencepiece_space(const Tokenizer& tokenizer) {
    if (!tokenizer.is_sentencepiece() || !tokenizer.vocabulary().add_space_prefix) return -1;
    const auto& tokens = tokenizer.vocabulary().tokens;
    const auto it = std::find(tokens.begin(), tokens.end(), tokenizer::spm_space);
    return it == tokens.end() ? -1 : static_cast<std::int32_t>(it - tokens.begin());
  }

  // The tokens this turn evaluates: the previous reply's undecoded token, the closing markup,
  // the new message and the generation prompt.
  std::vector<std::int32_t> turn_tokens() const {
    const std::vector<ChatSegment> segments = render_chat_segments(format_, messages_, true);
    std::vector<ChatSegment> delta = chat_segments_from(segments, rendered_);
    std::vector<std::int32_t> turn = undecoded_;
    const bool starting = session_.position() == 0;
    if (!starting && spm_space_ >= 0 && !delta.empty() && !delta.front().text.empty() &&
        delta.front().text.front() == ' ') {
      delta.front().text.erase(0, 1);
      turn.push_back(spm_space_);
    }
    const std::vector<std::int32_t> fresh =
        encode_chat(tokenizer_, delta, starting && !chat_template_writes_bos(format_));
    turn.insert(turn.end(), fresh.begin(), fresh.end());
    return turn;
  }

  S& session_;
  const Tokenizer& tokenizer_;
  ChatFormat format_;
  std::vector<std::int32_t> stop_tokens_;
  std::int32_t spm_space_;
  std::string system_;
  std::vector<ChatMessage> messages_;
  std::vector<std::int32_t> history_;    // tokens in the cache, in order
  std::vector<std::int32_t> undecoded_;  // the last reply's final token, when it was not a stop
  std::size_t rendered_ = 0;             // bytes of the rendering the cache holds
};

}  // namespace hllm
