// hllm-chat: an interactive chat with an instruction-tuned model.
//
//   hllm-chat -m FILE.gguf [-t N] [-c N] [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
//             [--repeat-penalty R] [--repeat-last-n N] [-s SEED] [--system TEXT]
//             [--chat-template NAME|FILE] [--isa ISA] [--kv-type f32|f16|bf16|q8_0|q4_0|fp8]
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

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "common/chat_loop.hpp"
#include "common/cli.hpp"
#include "common/progress.hpp"
#include "hllm/hllm.hpp"

namespace {

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string system;
  std::string chat_template;  // a format's name or a template file; empty: the model's
  int max_reply = 1024;
  std::size_t threads = 0;
  std::size_t context = hllm::cli::kContextNotGiven;
  std::optional<hllm::Isa> isa;
  hllm::KVType kv_type = hllm::KVType::f32;
  bool log_disable = false;
  hllm::SamplerParams sampler{.seed = 42};
  bool seed_drawn = false;
};

Options parse(int argc, char** argv, hllm::cli::Parser& cli) {
  Options o;
  cli.path("-m,--model", o.model_path, "Model file (required)")->required();
  cli.threads(o.threads);
  cli.context(o.context, hllm::kMaxContext);
  cli.number_in<int>("-n,--n-predict", o.max_reply, 1, 1 << 20, "a number of tokens",
                     "Tokens per reply at most");
  cli.sampling(o.sampler);
  cli.text("--system", o.system, "A system message to begin the conversation with");
  hllm::cli::chat_template(cli, o.chat_template);
  cli.isa(o.isa);
  cli.kv_type(o.kv_type);
  cli.pre_tokenizer(o.vocabulary);
  cli.flag("--log-disable", o.log_disable, "Print nothing on stderr but errors");
  cli.parse(argc, argv);
  o.sampler.seed = cli.seed();
  o.seed_drawn = cli.seed_was_drawn();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  hllm::cli::Parser cli("hllm-chat", "Chats with an instruction-tuned model, a message a line.");
  const Options options = parse(argc, argv, cli);
  try {
    hllm::GgufModel loaded = hllm::load_gguf_model(
        options.model_path, {.progress = hllm::examples::load_progress(!options.log_disable)});
    const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
    const hllm::ChatFormat format = hllm::cli::resolve_chat_format(
        options.chat_template, loaded.file->get_string_or("tokenizer.chat_template", ""));
    const hllm::Llama<> model(loaded.config, std::move(loaded.weights));
    hllm::Session<> session(model, {.context = hllm::cli::session_context(
                                        options.context, model.config().context_length),
                                    .threads = options.threads,
                                    .isa = options.isa,
                                    .kv_type = options.kv_type});
    hllm::SamplerParams sampler_params = options.sampler;
    sampler_params.repeat_last_n = cli.repeat_last_n(session.context());
    hllm::Sampler sampler(sampler_params);
    hllm::Conversation chat(session, tokenizer, format, options.system);
    return hllm::cli::run_chat_loop(chat, sampler,
                                    {.program = "hllm-chat",
                                     .model = options.model_path,
                                     .seed = options.sampler.seed,
                                     .seed_drawn = options.seed_drawn,
                                     .max_reply = options.max_reply,
                                     .log = !options.log_disable});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-chat: %s\n", e.what());
    return 1;
  }
}
