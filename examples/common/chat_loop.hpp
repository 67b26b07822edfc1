#pragma once
// The interactive chat of hllm-chat and of hllm-generate -cnv: the --chat-template flag, the
// choice of format, and the loop that reads one user message per line from stdin and streams
// each reply to stdout, with the turn's speed on stderr. The conversation stays in the session's
// KV cache (hllm::Conversation). Blank lines are not sent; a message longer than what is left
// of the context is refused and the chat goes on; a reply that fills the context ends the chat
// (status 0: running out of context is an expected end, not a failure).

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>

#include "common/cli.hpp"
#include "hllm/core/error.hpp"
#include "hllm/generate/chat_template.hpp"
#include "hllm/generate/conversation.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/io/input_file.hpp"

namespace hllm::cli {

inline bool is_chat_format_name(const std::string& name) {
  try {
    chat_format_from_name(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// --chat-template NAME|FILE (alias --chat-format): a format's name, or a file holding the Jinja
// template to recognise. Empty: the model's tokenizer.chat_template.
inline CLI::Option* chat_template(Parser& cli, std::string& target) {
  return cli
      .text("--chat-template,--chat-format", target,
            "The chat format: llama2, llama3, chatml or zephyr, or a file holding the Jinja "
            "template to recognise (default: the model's tokenizer.chat_template)")
      ->type_name("NAME|FILE")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (is_chat_format_name(v) || (!v.empty() && std::filesystem::exists(v))) return {};
            throw UsageError(
                "--chat-template must be llama2, llama3, chatml, zephyr or a template file, got '" +
                v + "'");
          },
          ""));
}

// The format --chat-template names, else the one its file's template is, else the model's own
// template's (its tokenizer.chat_template): each recognised the same way. Throws hllm::Error
// with a hint if none is known.
inline ChatFormat resolve_chat_format(const std::string& option,
                                      const std::string& model_template) {
  try {
    if (is_chat_format_name(option)) return chat_format_from_name(option);
    return detect_chat_format(option.empty() ? model_template
                                             : io::read_text_file(option, "chat template"));
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.message()) +
                              "\n  (pass --chat-template llama2|llama3|chatml|zephyr)");
  }
}

struct ChatLoopOptions {
  const char* program;     // for messages: "hllm-chat"
  std::string_view model;  // the model's name, for the first lines on stderr
  std::uint64_t seed = 0;  // the sampler's seed, and whether it was drawn (--seed -1)
  bool seed_drawn = false;
  int max_reply = -1;  // tokens per reply at most; -1: until a stop token or the context ends
  bool log = true;     // the model, format and seed lines, each turn's speed and the summary
};

// Runs the chat until EOF or "/exit" on stdin. Returns the program's exit status.
template <class Session>
int run_chat_loop(Conversation<Session>& chat, Sampler& sampler, const ChatLoopOptions& options) {
  const Session& session = chat.session();
  auto log = [&](const char* format, auto... args) {
    if (options.log) std::fprintf(stderr, format, args...);
  };
  log("model: %.*s\nchat format: %s, context %zu tokens, ISA %s, %zu threads, KV cache %s\n",
      static_cast<int>(options.model.size()), options.model.data(), to_string(chat.format()),
      session.context(), to_string(session.isa()), session.threads(), to_string(session.kv_type()));
  log("seed: %llu%s\n", static_cast<unsigned long long>(options.seed),
      options.seed_drawn ? " (random)" : "");
  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!io::read_line(std::cin, line, "standard input") || line == "/exit") break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // not a message

    const auto start = std::chrono::steady_clock::now();
    double first_at = -1;
    ChatReply reply;
    try {
      reply =
          chat.reply(line, sampler, {.max_tokens = options.max_reply}, [&](std::string_view piece) {
            if (first_at < 0)
              first_at =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
          });
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::capacity) throw;
      std::fprintf(stderr, "%s: %s; it was not sent (send a shorter one, or /exit)\n",
                   options.program, e.what());
      continue;
    }
    std::printf("\n");
    std::fflush(stdout);
    // The turn's speed: its prompt pass (which yields the first token), then one decode per
    // further token.
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double prompt_s = first_at < 0 ? total : first_at;
    const std::size_t n = reply.tokens.size();
    log("[prompt %zu tokens, %.1f tokens/s; reply %zu tokens, %.1f tokens/s]\n",
        reply.prompt_tokens, prompt_s > 0 ? double(reply.prompt_tokens) / prompt_s : 0.0, n,
        n > 1 && total > prompt_s ? double(n - 1) / (total - prompt_s) : 0.0);
    if (reply.reason == StopReason::context_full) {
      std::fprintf(stderr,
                   "\n%s: the context is full (%zu tokens); the conversation ends here. Use a "
                   "larger -c to chat longer.\n",
                   options.program, session.context());
      return 0;
    }
  }
  log("[%zu of %zu context tokens used]\n", session.position(), session.context());
  return 0;
}

}  // namespace hllm::cli
