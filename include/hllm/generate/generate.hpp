#pragma once
// The generation loop: prefill a prompt, then alternately sample and decode until a stop
// condition. It is a template over the session type so that it depends only on the two calls it
// makes, not on the model code; tests drive it with a fake session.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/generate/sampler.hpp"

namespace hllm {

struct GenerateOptions {
  // Generated tokens at most; 0 generates nothing; -1: no limit (until a stop token or the end
  // of the context, as llama.cpp's -n -1).
  int max_tokens = 128;
  // Tokens that end generation (reason stop_token), e.g. a chat template's end-of-turn marker.
  std::vector<std::int32_t> stop_tokens;
  // The end-of-text token (-1: none); sampling it ends generation (reason eos). Apart from
  // stop_tokens so that a caller can tell the model finishing from a marker it chose.
  std::int32_t eos = -1;
};

// Why generate() returned.
enum class StopReason {
  eos,                   // the model sampled opts.eos
  stop_token,            // the model sampled one of opts.stop_tokens
  stop_string,           // the text contained a stop string (serve/engine.hpp's requests)
  max_tokens,            // opts.max_tokens tokens were generated
  context_full,          // the session's context cannot take the next token
  cancelled,             // on_token returned false
  callback = cancelled,  // the name before 0.1.0's stop reasons; kept for existing callers
};

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::stop_token: return "stop_token";
    case StopReason::stop_string: return "stop_string";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_full: return "context_full";
    default: return "cancelled";
  }
}

// Throws invalid_argument, naming `who`, unless opts.max_tokens >= -1.
inline void check_generate_options(const GenerateOptions& opts, const char* who) {
  if (opts.max_tokens < -1)
    throw Error(ErrorKind::invalid_argument,
                std::string(who) + ": max_tokens must be >= 0, or -1 for no limit, got " +
                    std::to_string(opts.max_tokens));
}

// Whether a sampled token ends generation before it is kept: eos, then any of stop_tokens.
inline std::optional<StopReason> stop_before(std::int32_t token, const GenerateOptions& opts) {
  if (opts.eos >= 0 && token == opts.eos) return StopReason::eos;
  if (std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), token) != opts.stop_tokens.end())
    return StopReason::stop_token;
  return std::nullopt;
}

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // generated tokens, excluding the prompt and any stop token
  StopReason reason;
};

// What generate() needs from a model session. Both calls return the logits of the last token
// they processed; the span only has to stay valid until the next call on the session.
template <class Session>
concept GenerationSession = requires(Session& session, std::span<const std::int32_t> tokens,
                                     std::int32_t token) {
  { session.prefill(tokens) } -> std::convertible_to<std::span<const float>>;
  { session.decode(token) } -> std::convertible_to<std::span<const float>>;
};

// A session that says how many tokens it holds and how many it can hold (hllm::Session does):
// generate() then ends with context_full instead of letting decode() throw.
template <class Session>
concept BoundedSession = requires(const Session& session) {
  { session.position() } -> std::convertible_to<std::size_t>;
  { session.context() } -> std::convertible_to<std::size_t>;
};

// Called with each generated token; returning false stops generation.
// std::predicate: invocable, with a result usable as a bool.
template <class F>
concept TokenCallback = std::predicate<F&, std::int32_t>;

// Generates up to opts.max_tokens tokens after `prompt`. Each step samples with history =
// prompt + tokens generated so far, then:
//   - opts.eos ends generation (reason eos), any of opts.stop_tokens too (reason stop_token);
//     the token is neither passed to on_token nor included in the result;
//   - otherwise the token is appended and passed to on_token; false ends generation (reason
//     cancelled) with that token included;
//   - reaching max_tokens ends generation (reason max_tokens);
//   - a BoundedSession whose context has no room for the token ends generation (reason
//     context_full) with the token included: it was sampled and shown, only never decoded;
//   - otherwise the token is decoded and the loop continues.
// The final token is never decoded, so no forward pass is wasted: prefill runs once and decode
// runs once per generated token except the last. max_tokens == 0 returns at once without even a
// prefill. Throws invalid_argument for an empty prompt or max_tokens < -1; a prompt longer than
// the context is the session's error (capacity); errors from the session, the sampler or on_token
// propagate.
template <GenerationSession Session, TokenCallback OnToken>
GenerateResult generate(Session& session, std::span<const std::int32_t> prompt, Sampler& sampler,
                        const GenerateOptions& opts, OnToken&& on_token) {
  if (prompt.empty()) throw Error(ErrorKind::invalid_argument, "generate: prompt is empty");
  check_generate_options(opts, "generate");

  GenerateResult result{{}, StopReason::max_tokens};
  if (opts.max_tokens == 0) return result;
  const bool unlimited = opts.max_tokens < 0;
  const auto max_tokens = static_cast<std::size_t>(opts.max_tokens);

  // The sampler wants one contiguous history, so the prompt is copied once up front.
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  std::span<const float> logits = session.prefill(prompt);

  while (true) {
    const std::int32_t token = sampler.sample(logits, history);
    if (const std::optional<StopReason> stop = stop_before(token, opts)) {
      result.reason = *stop;
      return result;
    }
    history.push_back(token);
    result.tokens.push_back(token);
    if (!static_cast<bool>(std::invoke(on_token, token))) {
      result.reason = StopReason::cancelled;
      return result;
    }
    if (!unlimited && result.tokens.size() == max_tokens) {
      result.reason = StopReason::max_tokens;
      return result;
    }
    if constexpr (BoundedSession<Session>) {
      if (session.position() >= session.context()) {
        result.reason = StopReason::context_full;
        return result;
      }
    }
    logits = session.decode(token);
  }
}

// Same, without a per-token callback.
template <GenerationSession Session>
GenerateResult generate(Session& session, std::span<const std::int32_t> prompt, Sampler& sampler,
                        const GenerateOptions& opts) {
  return generate(session, prompt, sampler, opts, [](std::int32_t) { return true; });
}

}  // namespace hllm
