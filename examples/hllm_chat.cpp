// hllm-chat: an interactive chat with an instruction-tuned model.
//
//   hllm-chat -m FILE.gguf [-t N] [-c N] [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//             [--repeat-penalty R] [--repeat-last-n N] [-s SEED] [--system TEXT]
//             [--chat-template NAME|FILE] [--isa ISA] [--kv-type f32|f16|bf16|q8_0]
//             [--pre-tokenizer NAME] [--log-disable]
//
// Reads one user message per line from stdin until EOF or "/exit", and streams each reply to
// stdout, with its speed on stderr. Blank lines are not sent. The chat format comes from the
// model's tokenizer.chat_template, or --chat-template (a format's name, or a file holding a Jinja
// template to recognise). The conversation stays in the session's KV cache: each turn evaluates
// only the text the template adds for it, which is why the templates are required to render
// incrementally. A message longer than what is left of the context is refused and the chat goes
// on; when a reply fills the context, the program says so and ends the conversation (exit status
// 0: running out of context is an expected end, not a failure).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/progress.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/input_file.hpp"

namespace {

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string system;
  std::string chat_template;  // a format's name or a template file; empty: the model's
  int max_reply = 1024;
  std::size_t threads = 0;
  std::size_t context = 0;
  std::optional<hllm::Isa> isa;
  hllm::cli::KvType kv_type = hllm::cli::KvType::f32;
  bool log_disable = false;
  hllm::SamplerParams sampler{.seed = 42};
  bool seed_drawn = false;
};

bool is_format_name(const std::string& name) {
  try {
    hllm::chat_format_from_name(name);
    return true;
  } catch (const hllm::Error&) {
    return false;
  }
}

Options parse(int argc, char** argv, hllm::cli::Parser& cli) {
  Options o;
  cli.path("-m,--model", o.model_path, "Model file (required)")->required();
  cli.threads(o.threads);
  cli.context(o.context, 0, hllm::kMaxContext, "Context size in tokens (0: the model's)");
  cli.number_in<int>("-n,--n-predict", o.max_reply, 1, 1 << 20, "a number of tokens",
                     "Tokens per reply at most");
  cli.sampling(o.sampler);
  cli.text("--system", o.system, "A system message to begin the conversation with");
  cli.text("--chat-template,--chat-format", o.chat_template,
           "The chat format: llama2, llama3, chatml or zephyr, or a file holding the Jinja "
           "template to recognise (default: the model's tokenizer.chat_template)")
      ->type_name("NAME|FILE")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (is_format_name(v) || (!v.empty() && std::filesystem::exists(v))) return {};
            throw hllm::cli::UsageError(
                "--chat-template must be llama2, llama3, chatml, zephyr or a template file, "
                "got '" +
                v + "'");
          },
          ""));
  cli.isa(o.isa);
  cli.kv_type(o.kv_type);
  cli.pre_tokenizer(o.vocabulary);
  cli.flag("--log-disable", o.log_disable, "Print nothing on stderr but errors");
  cli.parse(argc, argv);
  o.sampler.seed = cli.seed();
  o.seed_drawn = cli.seed_was_drawn();
  return o;
}

void say_context_full(std::size_t context) {
  std::fprintf(stderr,
               "\nhllm-chat: the context is full (%zu tokens); the conversation ends here. "
               "Use a larger -c to chat longer.\n",
               context);
}

}  // namespace

int main(int argc, char** argv) {
  hllm::cli::Parser cli("hllm-chat", "Chats with an instruction-tuned model, a message a line.");
  const Options options = parse(argc, argv, cli);
  auto log = [&](const char* format, auto... args) {
    if (!options.log_disable) std::fprintf(stderr, format, args...);
  };
  try {
    hllm::GgufModel loaded = hllm::load_gguf_model(
        options.model_path, {.progress = hllm::examples::load_progress(!options.log_disable)});
    const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
    hllm::ChatFormat format{};
    try {
      // A name, else a template file, else the model's own template: each recognised the same.
      format = is_format_name(options.chat_template)
                   ? hllm::chat_format_from_name(options.chat_template)
                   : hllm::detect_chat_format(
                         options.chat_template.empty()
                             ? loaded.file->get_string_or("tokenizer.chat_template", "")
                             : hllm::io::read_text_file(options.chat_template, "chat template"));
    } catch (const hllm::Error& e) {
      std::fprintf(stderr, "hllm-chat: %s\n  (pass --chat-template llama2|llama3|chatml|zephyr)\n",
                   e.what());
      return 1;
    }
    // The cache's element type is a template parameter: one instantiation per --kv-type.
    return hllm::cli::with_kv_type(options.kv_type, [&]<class KV>() -> int {
      using Spec = hllm::ModelSpec<hllm::AnyWeight, KV>;
      const hllm::Llama<Spec> model(loaded.config, std::move(loaded.weights));
      hllm::Session<Spec> session(
          model, {.context = options.context, .threads = options.threads, .isa = options.isa});
      hllm::SamplerParams sampler_params = options.sampler;
      sampler_params.repeat_last_n = cli.repeat_last_n(session.context());
      hllm::Sampler sampler(sampler_params);
      const std::vector<std::int32_t> stop_tokens = hllm::chat_stop_tokens(format, tokenizer);
      const std::string_view suffix = hllm::chat_assistant_suffix(format);
      log("model: %s\nchat format: %s, context %zu tokens, ISA %s, %zu threads, KV cache %s\n",
          options.model_path.c_str(), hllm::to_string(format), session.context(),
          hllm::to_string(session.isa()), session.threads(), hllm::cli::to_string(options.kv_type));
      log("seed: %llu%s\n", static_cast<unsigned long long>(options.sampler.seed),
          options.seed_drawn ? " (random)" : "");

      std::vector<hllm::ChatMessage> messages;
      if (!options.system.empty()) messages.push_back({"system", options.system});
      // How much of the rendered conversation the KV cache holds, as a length of the rendered
      // text (the segments render incrementally, kinds included, so an offset into their text
      // names what is left to evaluate); and tokens generated but not yet evaluated (a reply cut
      // at -n ends on a token that generate() sampled but never decoded).
      std::size_t rendered = 0;
      std::vector<std::int32_t> undecoded;
      const bool interactive = isatty(STDIN_FILENO) != 0;
      std::int32_t spm_space = -1;  // the lone "\u2581" token of a SentencePiece vocabulary
      if (tokenizer.is_sentencepiece() && tokenizer.vocabulary().add_space_prefix) {
        const auto& tokens = tokenizer.vocabulary().tokens;
        const auto it = std::find(tokens.begin(), tokens.end(), "\xE2\x96\x81");
        if (it != tokens.end()) spm_space = static_cast<std::int32_t>(it - tokens.begin());
      }
      hllm::StreamingDecoder stream(tokenizer);

      std::string line;
      while (true) {
        if (interactive) std::fprintf(stderr, "> ");
        if (!hllm::io::read_line(std::cin, line, "standard input") || line == "/exit") break;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // A blank line is not a message: nothing is sent, the prompt comes back.
        if (line.find_first_not_of(" \t") == std::string::npos) continue;

        messages.push_back({"user", line});
        // Markup and message text apart, so that markers typed by the user stay plain text.
        const std::vector<hllm::ChatSegment> segments =
            hllm::render_chat_segments(format, messages, true);
        // The first turn starts the sequence: BOS, unless the template writes it itself.
        const bool add_bos = session.position() == 0 && !hllm::chat_template_writes_bos(format);
        std::vector<hllm::ChatSegment> delta = hllm::chat_segments_from(segments, rendered);
        std::vector<std::int32_t> turn = undecoded;
        // A SentencePiece tokenizer puts a space in front of text that starts a fragment, so new
        // text that itself starts with a space (Llama 2's " </s>" after a reply) would get two.
        // Tokenizing the whole conversation at once, as Meta's reference code does, gives the
        // reply a trailing lone "\u2581" token instead: write that one.
        if (session.position() > 0 && spm_space >= 0 && !delta.empty() &&
            delta.front().text.front() == ' ') {
          delta.front().text.erase(0, 1);
          turn.push_back(spm_space);
        }
        const std::vector<std::int32_t> fresh = hllm::encode_chat(tokenizer, delta, add_bos);
        turn.insert(turn.end(), fresh.begin(), fresh.end());
        const std::size_t left = session.context() - session.position();
        // No room for the message and at least one token of reply: refuse it, keep the chat.
        if (turn.size() >= left) {
          std::fprintf(stderr,
                       "hllm-chat: that message takes %zu tokens, and only %zu of the context's "
                       "%zu are left; it was not sent (send a shorter one, or /exit)\n",
                       turn.size(), left, session.context());
          messages.pop_back();
          continue;
        }

        // generate() ends with context_full when the cache cannot take the next token.
        hllm::GenerateOptions generate_options{.max_tokens = options.max_reply,
                                               .stop_tokens = stop_tokens};
        std::string reply;
        stream.reset();
        const auto start = std::chrono::steady_clock::now();
        double first_at = -1;
        const hllm::GenerateResult result =
            hllm::generate(session, turn, sampler, generate_options, [&](std::int32_t token) {
              if (first_at < 0)
                first_at =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              const std::string piece = stream.push(token);
              reply += piece;
              std::fwrite(piece.data(), 1, piece.size(), stdout);
              std::fflush(stdout);
              return true;
            });
        const std::string tail = stream.flush();
        reply += tail;
        std::printf("%s\n", tail.c_str());
        std::fflush(stdout);
        // The speed of this turn: its prompt pass (which yields the first token), then one
        // decode per further token.
        const double total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double prompt_s = first_at < 0 ? total : first_at;
        const std::size_t n = result.tokens.size();
        log("[prompt %zu tokens, %.1f tokens/s; reply %zu tokens, %.1f tokens/s]\n", turn.size(),
            prompt_s > 0 ? double(turn.size()) / prompt_s : 0.0, n,
            n > 1 && total > prompt_s ? double(n - 1) / (total - prompt_s) : 0.0);

        messages.push_back({"assistant", reply});
        // The cache now holds the reply's own tokens; the template's closing text (which begins
        // with the stop token that was sampled but not evaluated) is evaluated with the next turn.
        rendered = hllm::render_chat(format, messages, false).size() - suffix.size();
        undecoded.clear();
        if (result.reason != hllm::StopReason::stop_token && !result.tokens.empty())
          undecoded.push_back(result.tokens.back());
        if (result.reason == hllm::StopReason::context_full) {
          say_context_full(session.context());
          return 0;
        }
      }
      log("[%zu of %zu context tokens used]\n", session.position(), session.context());
      return 0;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-chat: %s\n", e.what());
    return 1;
  }
}
