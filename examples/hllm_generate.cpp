// hllm-generate: loads a model, tokenizes a prompt and streams the generated text.
//
//   hllm-generate [-m FILE.gguf] [-p PROMPT | -f FILE] [-n N] [-t N] [-c N] [-b N] [-s SEED]
//                 [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
//                 [--repeat-last-n N] [-e] [--ignore-eos] [--color] [--no-display-prompt]
//                 [-i | -cnv [--chat-template NAME|FILE]] [--log-disable] [--json] [--isa ISA]
//                 [--synthetic PRESET]
//                 [--check-finite] [--kv-type f32|f16|bf16|q8_0|q4_0|fp8] [--pre-tokenizer NAME]
//                 [-np N]
//
// Flags follow llama.cpp's spelling and meaning (--help lists them). Without -m it runs the
// bundled model (models/), if this checkout has it; --synthetic runs random weights of a
// preset's shape (noise by design: for the pipeline and its speed, not for text). A model file
// without a tokenizer takes the prompt as token ids and prints ids. Generation ends at the end
// of text, after -n tokens (-1: no limit) or when the context is full; the statistics follow on
// stderr in every case (--json: as one JSON object). -i reads more text from stdin after each
// reply and continues the same sequence; -cnv chats in the model's chat format instead, as
// hllm-chat does, with the prompt (if given) as the system message. -np N generates N sequences
// of the same prompt at once, with seeds seed, seed + 1, ..., through the continuous-batching
// engine (serve/engine.hpp): every weight is read once per step for all N.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat_loop.hpp"
#include "common/cli.hpp"
#include "common/progress.hpp"
#include "common/synthetic.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

#ifndef HLLM_DEFAULT_MODEL
#define HLLM_DEFAULT_MODEL ""
#endif

namespace {

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string synthetic;
  std::string prompt = "In the beginning";
  bool prompt_given = false;
  std::string prompt_file;
  bool escape = false;
  int n_predict = 128;
  std::size_t threads = 0;
  std::size_t context = hllm::cli::kContextNotGiven;
  std::size_t batch = 64;
  std::size_t parallel = 1;  // -np
  bool context_shift = false;
  std::size_t keep = 0;  // --keep: prompt tokens a context shift keeps
  std::optional<hllm::Isa> isa;
  hllm::KVType kv_type = hllm::KVType::f32;
  bool check_finite = false;
  bool ignore_eos = false, color = false, no_display_prompt = false, interactive = false;
  bool conversation = false;  // -cnv
  std::string chat_template;  // -cnv's format: a name or a template file; empty: the model's
  bool log_disable = false, json = false;
  hllm::SamplerParams sampler{.seed = 42};
  bool seed_drawn = false;
  hllm::cli::Parser* parser = nullptr;
};

Options parse(int argc, char** argv, hllm::cli::Parser& cli) {
  Options o;
  o.parser = &cli;
  cli.path("-m,--model", o.model_path, "Model file (default: " HLLM_DEFAULT_MODEL ")");
  auto* prompt = cli.text("-p,--prompt", o.prompt, "Prompt (default: \"In the beginning\")");
  auto* file = cli.path("-f,--file", o.prompt_file, "Read the prompt from a file");
  cli.flag("-e,--escape", o.escape, "Process escapes (\\n, \\t, \\xHH, ...) in the prompt");
  cli.number<int>(
      "-n,--n-predict", o.n_predict, "a number of tokens, or -1 for no limit",
      [](int v) { return v >= -1 && v <= (1 << 20); },
      "Tokens to generate (-1: until the end of text or of the context)");
  cli.threads(o.threads);
  cli.context(o.context, hllm::kMaxContext);
  cli.number_in<std::size_t>("-b,--batch-size", o.batch, 1, 65536, "a number of tokens",
                             "Tokens per forward pass while reading the prompt");
  cli.number_in<std::size_t>("--parallel", o.parallel, 1, 256, "a number of sequences",
                             "(also -np) Generate this many sequences of the prompt at once, "
                             "with seeds -s, -s + 1, ... (the continuous-batching engine)");
  cli.flag("--context-shift", o.context_shift,
           "When the context fills, drop half of the tokens after --keep and go on (llama.cpp's "
           "context shift; runs the engine)");
  cli.number_in<std::size_t>("--keep", o.keep, 0, hllm::kMaxContext, "a number of tokens",
                             "Prompt tokens a context shift keeps (default 0)");
  cli.sampling(o.sampler);
  cli.flag("--ignore-eos", o.ignore_eos, "Do not stop at the end-of-text token");
  cli.flag("--color", o.color, "Show the prompt in colour");
  cli.flag("--no-display-prompt", o.no_display_prompt, "Do not print the prompt");
  cli.flag("-i,--interactive", o.interactive,
           "After each reply, read more text from stdin and continue (EOF or /exit ends)");
  cli.flag("--conversation", o.conversation,
           "(also -cnv) Chat with the model in its chat format, a message a line from stdin "
           "(the prompt, if given, is the system message), as hllm-chat does");
  hllm::cli::chat_template(cli, o.chat_template);
  cli.flag("--log-disable", o.log_disable, "Print nothing on stderr but errors (and --json)");
  cli.flag("--json", o.json, "Print the statistics as one JSON object on stderr");
  cli.text("--synthetic", o.synthetic,
           "Random weights of a preset's shape: tiny, tinyllama-1.1b, llama-2-7b, ...")
      ->type_name("PRESET");
  cli.isa(o.isa);
  cli.kv_type(o.kv_type);
  cli.flag("--check-finite", o.check_finite, "Read every weight at load and refuse NaN or Inf");
  cli.pre_tokenizer(o.vocabulary);
  cli.parse(argc, argv);

  o.prompt_given = prompt->count() > 0;
  if ((o.parallel > 1 || o.context_shift) && (o.interactive || o.conversation))
    cli.fail("-np and --context-shift run the engine: not with -i or -cnv");
  if (o.prompt_given && file->count() > 0) cli.fail("give -p PROMPT or -f FILE, not both");
  if (!o.model_path.empty() && !o.synthetic.empty()) cli.fail("give -m or --synthetic, not both");
  if (o.model_path.empty() && o.synthetic.empty()) {
    if (std::filesystem::exists(HLLM_DEFAULT_MODEL))
      o.model_path = HLLM_DEFAULT_MODEL;
    else
      o.synthetic = "tiny";
  }
  o.sampler.seed = cli.seed();
  o.seed_drawn = cli.seed_was_drawn();
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::int32_t> ids;
  long long id = 0;
  while (in >> id) ids.push_back(static_cast<std::int32_t>(id));
  if (!in.eof() || ids.empty())
    throw hllm::Error(
        hllm::ErrorKind::invalid_argument,
        "this model has no tokenizer: give the prompt as token ids, e.g. -p \"1 15 27\"");
  return ids;
}

const char* stop_words(hllm::StopReason r) {
  switch (r) {
    case hllm::StopReason::eos: return "end of text";
    case hllm::StopReason::stop_token: return "stop token";
    case hllm::StopReason::stop_string: return "stop string";
    case hllm::StopReason::context_full: return "the context is full";
    case hllm::StopReason::cancelled: return "cancelled";
    default: return "-n tokens generated";
  }
}

// -np N: N sequences of `prompt` through the engine, each with its own seed; the prompt is
// computed once and shared. One sequence streams its text; more are printed one after another
// once all are done. Then the totals.
int run_parallel(const Options& options, const hllm::Llama<>& model,
                 const hllm::Tokenizer* tokenizer, const std::vector<std::int32_t>& prompt,
                 const std::string& prompt_text, std::size_t context,
                 const hllm::SamplerParams& sampler, double load_seconds) {
  // KV memory for what the sequences can hold: prompt and -n tokens each (the whole context
  // with -n -1), plus a block of slack each.
  const std::size_t per_sequence =
      options.n_predict < 0 ? context
                            : std::min(context, prompt.size() + std::size_t(options.n_predict) + 1);
  hllm::Engine<> engine(model,
                        {.kv_type = options.kv_type,
                         .kv_tokens = options.parallel * (per_sequence + hllm::kDefaultBlockTokens),
                         .context = context,
                         .max_step_tokens = std::max(options.batch, options.parallel),
                         .max_sequences = options.parallel,
                         .threads = options.threads,
                         .isa = options.isa,
                         .tokenizer = tokenizer,
                         .context_shift = options.context_shift});
  std::vector<hllm::Completion> done(options.parallel);
  std::vector<double> first_token_at(options.parallel, -1);
  const bool stream = options.parallel == 1;
  hllm::RequestId first_id = 0;
  const auto start = std::chrono::steady_clock::now();
  hllm::Request r;
  r.prompt = prompt;
  r.sampler = sampler;
  r.generate.max_tokens = options.n_predict;
  r.n_keep = std::min(options.keep, prompt.size());
  if (tokenizer && tokenizer->eos() >= 0 && !options.ignore_eos) r.generate.eos = tokenizer->eos();
  r.on_token = [&](hllm::RequestId id, std::int32_t token) {
    const std::size_t i = id - first_id;
    if (first_token_at[i] < 0) first_token_at[i] = seconds_since(start);
    if (stream && !tokenizer) std::printf(" %d", token);
    return true;
  };
  if (stream && tokenizer) {
    if (!options.no_display_prompt) std::printf("%s", prompt_text.c_str());
    r.on_text = [](hllm::RequestId, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  r.on_done = [&](const hllm::Completion& c) { done[c.id - first_id] = c; };
  // The ids are consecutive from the first; the callbacks run inside run_until_idle().
  first_id = engine.submit_parallel(std::move(r), options.parallel).front();
  engine.run_until_idle();
  const double total = seconds_since(start);

  std::size_t generated = 0, shifts = 0;
  double prompt_seconds = 0;
  for (std::size_t i = 0; i < options.parallel; ++i) {
    const hllm::Completion& c = done[i];
    generated += c.tokens.size();
    shifts += c.context_shifts;
    prompt_seconds = std::max(prompt_seconds, first_token_at[i] < 0 ? total : first_token_at[i]);
    if (stream) {
      std::printf("\n\n");
      continue;
    }
    std::printf("--- sequence %zu (seed %llu, stopped: %s) ---\n", i + 1,
                static_cast<unsigned long long>(sampler.seed + i), stop_words(c.reason));
    if (tokenizer) {
      std::printf("%s%s\n\n", options.no_display_prompt ? "" : prompt_text.c_str(), c.text.c_str());
    } else {
      for (std::int32_t id : c.tokens) std::printf(" %d", id);
      std::printf("\n\n");
    }
  }
  std::fflush(stdout);
  const hllm::EngineStats stats = engine.stats();
  const double gen_seconds = total - prompt_seconds;
  const double gen_rate = gen_seconds > 0 ? double(generated) / gen_seconds : 0;
  if (options.json) {
    std::fprintf(stderr,
                 "{\"load_s\": %.3f, \"parallel\": %zu, \"prompt_tokens\": %zu, "
                 "\"prompt_s\": %.3f, \"generated_tokens\": %zu, \"generation_s\": %.3f, "
                 "\"generation_tokens_per_s\": %.2f, \"steps\": %zu, \"kv_bytes\": %zu, "
                 "\"seed\": %llu, \"kv_type\": \"%s\"}\n",
                 load_seconds, options.parallel, prompt.size(), prompt_seconds, generated,
                 gen_seconds, gen_rate, stats.steps, stats.kv_blocks * stats.kv_block_bytes,
                 static_cast<unsigned long long>(sampler.seed), hllm::to_string(options.kv_type));
    return 0;
  }
  if (options.log_disable) return 0;
  std::fprintf(stderr, "load time: %.3f s\n", load_seconds);
  std::fprintf(stderr, "parallel: %zu sequences of a %zu-token prompt, %zu steps\n",
               options.parallel, prompt.size(), stats.steps);
  std::fprintf(stderr, "generated: %zu tokens in all, %.1f tokens/s together\n", generated,
               gen_rate);
  if (stream) std::fprintf(stderr, "stopped: %s\n", stop_words(done[0].reason));
  if (options.context_shift) std::fprintf(stderr, "context shifts: %zu\n", shifts);
  std::fprintf(stderr, "kv cache: %.1f MiB (%s, %zu blocks of %zu tokens)\n",
               double(stats.kv_blocks * stats.kv_block_bytes) / (1024.0 * 1024.0),
               hllm::to_string(options.kv_type), stats.kv_blocks, hllm::kDefaultBlockTokens);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hllm::cli::Parser cli("hllm-generate",
                        "Generates text after a prompt, as llama.cpp's llama-cli.");
  const Options options = parse(argc, argv, cli);
  // Informational lines on stderr; --log-disable keeps only errors and --json.
  auto log = [&](const char* format, auto... args) {
    if (!options.log_disable) std::fprintf(stderr, format, args...);
  };
  try {
    const auto load_start = std::chrono::steady_clock::now();
    hllm::ModelConfig config;
    hllm::ModelWeights weights;
    std::unique_ptr<hllm::Tokenizer> tokenizer;
    std::string model_name, model_template;
    if (!options.model_path.empty()) {
      hllm::GgufModel loaded = hllm::load_gguf_model(
          options.model_path, {.check_finite = options.check_finite,
                               .progress = hllm::examples::load_progress(!options.log_disable)});
      if (loaded.file->has("tokenizer.ggml.model"))
        tokenizer = std::make_unique<hllm::Tokenizer>(
            hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
      model_template = loaded.file->get_string_or("tokenizer.chat_template", "");
      config = loaded.config;
      weights = std::move(loaded.weights);
      model_name = options.model_path;
    } else {
      config = hllm::examples::synthetic_config(options.synthetic);
      weights = hllm::examples::synthetic_weights(config, hllm::DType::f32, 1);
      model_name = "synthetic " + options.synthetic + " (random weights: output is noise)";
    }
    std::string prompt_text = options.prompt_file.empty()
                                  ? options.prompt
                                  : hllm::io::read_text_file(options.prompt_file);
    if (options.escape) prompt_text = hllm::cli::process_escapes(prompt_text);
    const bool prompt_given = options.prompt_given || !options.prompt_file.empty();

    const hllm::Llama<> model(config, std::move(weights));
    const std::size_t context = hllm::resolved_context(
        hllm::cli::session_context(options.context, config.context_length), config);
    // The session is made only where it is used: -np runs the engine, with a pool of its own.
    const hllm::SessionOptions session_options{.context = context,
                                               .max_batch = options.batch,
                                               .threads = options.threads,
                                               .isa = options.isa,
                                               .kv_type = options.kv_type};
    const double load_seconds = seconds_since(load_start);
    hllm::SamplerParams sampler_params = options.sampler;
    sampler_params.repeat_last_n = options.parser->repeat_last_n(context);
    hllm::Sampler sampler(sampler_params);

    if (options.conversation) {
      if (!tokenizer)
        throw hllm::Error(hllm::ErrorKind::invalid_argument,
                          "-cnv needs a model file with a tokenizer");
      hllm::Session<> session(model, session_options);
      const hllm::ChatFormat format =
          hllm::cli::resolve_chat_format(options.chat_template, model_template);
      hllm::Conversation chat(session, *tokenizer, format, prompt_given ? prompt_text : "");
      return hllm::cli::run_chat_loop(chat, sampler,
                                      {.program = "hllm-generate",
                                       .model = model_name,
                                       .seed = options.sampler.seed,
                                       .seed_drawn = options.seed_drawn,
                                       .max_reply = options.n_predict,
                                       .log = !options.log_disable});
    }

    const std::vector<std::int32_t> prompt =
        tokenizer ? tokenizer->encode(prompt_text)
                  : parse_ids(prompt_given ? prompt_text : "1");  // 1: BOS
    log("model: %s\n", model_name.c_str());
    log("seed: %llu%s\n", static_cast<unsigned long long>(options.sampler.seed),
        options.seed_drawn ? " (random)" : "");
    if (prompt.size() > context) {
      std::fprintf(stderr,
                   "hllm-generate: the prompt is %zu tokens, more than the context of %zu "
                   "tokens (-c)\n",
                   prompt.size(), context);
      return 1;
    }
    if (options.parallel > 1 || options.context_shift)
      return run_parallel(options, model, tokenizer.get(), prompt, prompt_text, context,
                          sampler_params, load_seconds);
    hllm::Session<> session(model, session_options);
    hllm::GenerateOptions generate_options{.max_tokens = options.n_predict};
    std::optional<hllm::StreamingDecoder> stream;
    const bool show_prompt = !options.no_display_prompt;
    if (tokenizer) {
      if (tokenizer->eos() >= 0 && !options.ignore_eos) generate_options.eos = tokenizer->eos();
      stream.emplace(*tokenizer);
      for (std::int32_t id : prompt) stream->push(id);  // so the continuation's spacing is right
      if (show_prompt)
        std::printf("%s%s%s", options.color ? "\x1b[33m" : "", prompt_text.c_str(),
                    options.color ? "\x1b[0m" : "");
    } else if (show_prompt) {
      std::printf("prompt ids:");
      for (auto t : prompt) std::printf(" %d", t);
      std::printf("\ngenerated ids:");
    }
    std::fflush(stdout);

    // Totals over the turns (one without -i): the first token of a turn comes out of its
    // prompt pass, the rest each cost one decode.
    std::size_t prompt_tokens = 0, generated = 0, decoded = 0;
    double prompt_seconds = 0, gen_seconds = 0;
    hllm::StopReason reason = hllm::StopReason::max_tokens;
    auto run_turn = [&](const std::vector<std::int32_t>& input) {
      const auto start = std::chrono::steady_clock::now();
      double first_at = -1;
      const auto result =
          hllm::generate(session, input, sampler, generate_options, [&](std::int32_t token) {
            if (first_at < 0) first_at = seconds_since(start);
            if (stream)
              std::printf("%s", stream->push(token).c_str());
            else
              std::printf(" %d", token);
            std::fflush(stdout);
            return true;
          });
      if (stream) std::printf("%s", stream->flush().c_str());
      std::fflush(stdout);
      const double total = seconds_since(start);
      prompt_tokens += input.size();
      prompt_seconds += first_at < 0 ? total : first_at;
      gen_seconds += first_at < 0 ? 0 : total - first_at;
      generated += result.tokens.size();
      if (result.tokens.size() > 1) decoded += result.tokens.size() - 1;
      reason = result.reason;
      return result;
    };
    hllm::GenerateResult result = run_turn(prompt);

    // -i: each line read is appended to the sequence, after the last generated token (which
    // generate() sampled but never evaluated), and generation continues from it.
    if (options.interactive && tokenizer) {
      const bool tty = isatty(STDIN_FILENO) != 0;
      std::string line;
      while (reason != hllm::StopReason::context_full) {
        if (tty) std::fprintf(stderr, "\n> ");
        if (!hllm::io::read_line(std::cin, line, "standard input") || line == "/exit") break;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        std::vector<std::int32_t> turn;
        if (result.reason != hllm::StopReason::eos && !result.tokens.empty())
          turn.push_back(result.tokens.back());
        const auto text = tokenizer->encode(line + "\n", {.add_special = false});
        turn.insert(turn.end(), text.begin(), text.end());
        if (turn.size() > session.context() - session.position()) {
          std::fprintf(stderr,
                       "hllm-generate: that text is %zu tokens, more than the %zu left in the "
                       "context; it was not added\n",
                       turn.size(), session.context() - session.position());
          continue;
        }
        for (std::int32_t id : text) stream->push(id);
        if (!tty) std::printf("%s", line.c_str());
        std::printf("\n");
        result = run_turn(turn);
      }
    }

    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("\n\n");
    std::fflush(stdout);  // the statistics go to stderr; keep them after the text
    const double prompt_rate = prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0;
    const double gen_rate = decoded > 0 && gen_seconds > 0 ? double(decoded) / gen_seconds : 0;
    const double rss_mib = double(usage.ru_maxrss) / 1024.0;
    if (options.json) {
      std::fprintf(stderr,
                   "{\"load_s\": %.3f, \"prompt_tokens\": %zu, \"prompt_s\": %.3f, "
                   "\"prompt_tokens_per_s\": %.2f, \"generated_tokens\": %zu, "
                   "\"generation_s\": %.3f, \"generation_tokens_per_s\": %.2f, "
                   "\"stop_reason\": \"%s\", \"context\": %zu, \"context_used\": %zu, "
                   "\"seed\": %llu, \"isa\": \"%s\", \"threads\": %zu, \"kv_type\": \"%s\", "
                   "\"peak_rss_mib\": %.1f}\n",
                   load_seconds, prompt_tokens, prompt_seconds, prompt_rate, generated, gen_seconds,
                   gen_rate, hllm::to_string(reason), session.context(), session.position(),
                   static_cast<unsigned long long>(options.sampler.seed),
                   hllm::to_string(session.isa()), session.threads(),
                   hllm::to_string(session.kv_type()), rss_mib);
      return 0;
    }
    log("load time: %.3f s\n", load_seconds);
    log("prompt: %zu tokens, %.1f tokens/s\n", prompt_tokens, prompt_rate);
    log("generated: %zu tokens, %.1f tokens/s (stopped: %s)\n", generated, gen_rate,
        stop_words(reason));
    if (reason == hllm::StopReason::context_full)
      log("context: all %zu tokens used; a larger -c lets it go on\n", session.context());
    log("ISA path: %s, %zu threads, KV cache %s\n", hllm::to_string(session.isa()),
        session.threads(), hllm::to_string(session.kv_type()));
    log("peak memory: %.1f MiB resident\n", rss_mib);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-generate: %s\n", e.what());
    return 1;
  }
}
