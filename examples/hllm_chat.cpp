// hllm-chat: an interactive chat with an instruction-tuned model.
//
//   hllm-chat -m FILE.gguf [-t N] [-c N] [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//             [--repeat-penalty R] [--seed S] [--system TEXT] [--chat-format NAME] [--isa ISA]
//             [--kv-type f32|f16|bf16|q8_0]
//
// Reads one user message per line from stdin until EOF or "/exit", and streams each reply to
// stdout. The chat format comes from the model's tokenizer.chat_template (or --chat-format).
// The conversation stays in the session's KV cache: each turn evaluates only the text the
// template adds for it, which is why the templates are required to render incrementally. When
// the context fills up, the program says so and ends the conversation (exit status 0: running
// out of context is an expected end, not a failure).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "hllm/hllm.hpp"

namespace {

const char* kUsage =
    "usage: hllm-chat -m FILE.gguf [-t THREADS] [-c CONTEXT] [-n MAX_REPLY_TOKENS]\n"
    "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
    "         [--system TEXT] [--chat-format llama2|llama3|chatml|zephyr]\n"
    "         [--isa scalar|avx2|avx512] [--kv-type f32|f16|bf16|q8_0] [--pre-tokenizer NAME]\n"
    "  --pre-tokenizer NAME: the pre-tokenizer for a file whose tokenizer.ggml.pre hllm does not\n"
    "    know (refused otherwise), e.g. default, llama-bpe, qwen2\n"
    "  Reads one user message per line from stdin; EOF or /exit ends the chat.\n"
    "  --kv-type: the KV cache's element type (default f32; q8_0 takes a quarter of the memory)\n";

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string system;
  std::string chat_format;
  int max_reply = 1024;
  std::size_t threads = 0;
  std::size_t context = 0;
  std::optional<hllm::Isa> isa;
  hllm::cli::KvType kv_type = hllm::cli::KvType::f32;
  hllm::SamplerParams sampler{.seed = 42};
};

Options parse(int argc, char** argv) {
  Options o;
  hllm::cli::Args args(argc, argv, "hllm-chat", kUsage);
  while (args.next()) {
    if (args.is("-m", "--model"))
      o.model_path = args.path();
    else if (args.is("--pre-tokenizer"))
      o.vocabulary.pretokenizer_fallback = args.value();
    else if (args.is("-t", "--threads"))
      o.threads = args.number<std::size_t>(1, hllm::kMaxThreads);
    else if (args.is("-c", "--ctx-size"))
      o.context = args.number<std::size_t>(0, hllm::kMaxContext);
    else if (args.is("-n", "--n-predict"))
      o.max_reply = args.number<int>(1, 1 << 20);
    else if (args.sampling(o.sampler))
      continue;
    else if (args.is("--system"))
      o.system = args.value();
    else if (args.is("--chat-format")) {
      o.chat_format = args.value();
      try {
        hllm::chat_format_from_name(o.chat_format);
      } catch (const hllm::Error& e) {
        args.fail(e.message());
      }
    } else if (args.is("--isa")) {
      o.isa = args.isa();
    } else if (args.is("--kv-type")) {
      o.kv_type = args.kv_type();
    } else
      args.unknown();
  }
  args.check_sampling(o.sampler);
  if (o.model_path.empty()) args.fail("a model is required (-m FILE.gguf)");
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
  const Options options = parse(argc, argv);
  try {
    hllm::GgufModel loaded = hllm::load_gguf_model(options.model_path);
    const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
    hllm::ChatFormat format{};
    if (!options.chat_format.empty()) {
      format = hllm::chat_format_from_name(options.chat_format);
    } else {
      try {
        format =
            hllm::detect_chat_format(loaded.file->get_string_or("tokenizer.chat_template", ""));
      } catch (const hllm::Error& e) {
        std::fprintf(stderr, "hllm-chat: %s\n  (pass --chat-format llama2|llama3|chatml|zephyr)\n",
                     e.what());
        return 1;
      }
    }
    // The cache's element type is a template parameter: one instantiation per --kv-type.
    return hllm::cli::with_kv_type(options.kv_type, [&]<class KV>() -> int {
      using Spec = hllm::ModelSpec<hllm::AnyWeight, KV>;
      const hllm::Llama<Spec> model(loaded.config, std::move(loaded.weights));
      hllm::Session<Spec> session(
          model, {.context = options.context, .threads = options.threads, .isa = options.isa});
      hllm::Sampler sampler(options.sampler);
      const std::vector<std::int32_t> stop_tokens = hllm::chat_stop_tokens(format, tokenizer);
      const std::string_view suffix = hllm::chat_assistant_suffix(format);
      std::fprintf(stderr,
                   "model: %s\nchat format: %s, context %zu tokens, ISA %s, %zu threads, KV cache "
                   "%s\n",
                   options.model_path.c_str(), hllm::to_string(format), session.context(),
                   hllm::to_string(session.isa()), session.threads(),
                   hllm::cli::to_string(options.kv_type));

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
        if (line.empty()) continue;

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
        if (turn.size() > session.context() - session.position()) {
          say_context_full(session.context());
          return 0;
        }

        // generate() decodes every generated token but the last, so this bound keeps the cache
        // within its capacity; reaching it means the context is full.
        const std::size_t room = session.context() - session.position() - turn.size() + 1;
        const int max_tokens = static_cast<int>(
            std::min<std::size_t>(room, static_cast<std::size_t>(options.max_reply)));
        hllm::GenerateOptions generate_options{.max_tokens = max_tokens,
                                               .stop_tokens = stop_tokens};
        std::string reply;
        stream.reset();
        const hllm::GenerateResult result =
            hllm::generate(session, turn, sampler, generate_options, [&](std::int32_t token) {
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

        messages.push_back({"assistant", reply});
        // The cache now holds the reply's own tokens; the template's closing text (which begins
        // with the stop token that was sampled but not evaluated) is evaluated with the next turn.
        rendered = hllm::render_chat(format, messages, false).size() - suffix.size();
        undecoded.clear();
        if (result.reason != hllm::StopReason::stop_token && !result.tokens.empty())
          undecoded.push_back(result.tokens.back());
        if (result.reason == hllm::StopReason::max_tokens && result.tokens.size() == room) {
          say_context_full(session.context());
          return 0;
        }
      }
      std::fprintf(stderr, "[%zu of %zu context tokens used]\n", session.position(),
                   session.context());
      return 0;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-chat: %s\n", e.what());
    return 1;
  }
}
