// hllm-generate: loads a model, tokenizes a prompt and streams the generated text.
//
//   hllm-generate [-m FILE.gguf] [-p PROMPT] [-n N] [-t N] [-c N] [--temp T] [--top-k K]
//                 [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--isa ISA]
//                 [--synthetic PRESET] [--check-finite] [--kv-type f32|f16|bf16|q8_0]
//
// Flags follow llama.cpp's spelling. Without -m it runs the bundled model (models/), if this
// checkout has it; --synthetic runs random weights of a preset's shape (noise by design: for the
// pipeline and its speed, not for text). A model file without a tokenizer takes the prompt as
// token ids and prints ids.

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/synthetic.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

#ifndef HLLM_DEFAULT_MODEL
#define HLLM_DEFAULT_MODEL ""
#endif

namespace {

const char* kUsage =
    "usage: hllm-generate [-m FILE.gguf] [-p PROMPT] [-n N] [-t THREADS] [-c CONTEXT]\n"
    "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
    "         [--isa scalar|avx2|avx512] [--synthetic tiny|tinyllama-1.1b|...] [--check-finite]\n"
    "         [--kv-type f32|f16|bf16|q8_0]\n"
    "         [--pre-tokenizer NAME]\n"
    "  --check-finite: read every weight at load and refuse NaN or Inf\n"
    "  --pre-tokenizer NAME: the pre-tokenizer for a file whose tokenizer.ggml.pre hllm does not\n"
    "    know (refused otherwise), e.g. default, llama-bpe, qwen2\n"
    "  --kv-type: the KV cache's element type (default f32; q8_0 takes a quarter of the memory)\n"
    "  default model: " HLLM_DEFAULT_MODEL "\n";

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string synthetic;
  std::string prompt = "In the beginning";
  bool prompt_given = false;
  int n_predict = 128;
  std::size_t threads = 0;
  std::size_t context = 0;
  std::optional<hllm::Isa> isa;
  hllm::cli::KvType kv_type = hllm::cli::KvType::f32;
  bool check_finite = false;
  hllm::SamplerParams sampler{.seed = 42};
};

Options parse(int argc, char** argv) {
  Options o;
  hllm::cli::Args args(argc, argv, "hllm-generate", kUsage);
  while (args.next()) {
    if (args.is("-m", "--model"))
      o.model_path = args.path();
    else if (args.is("--pre-tokenizer"))
      o.vocabulary.pretokenizer_fallback = args.value();
    else if (args.is("-p", "--prompt")) {
      o.prompt = args.value();
      o.prompt_given = true;
    } else if (args.is("-n", "--n-predict"))
      o.n_predict = args.number<int>(0, 1 << 20);
    else if (args.is("-t", "--threads"))
      o.threads = args.number<std::size_t>(1, hllm::kMaxThreads);
    else if (args.is("-c", "--ctx-size"))
      o.context = args.number<std::size_t>(0, hllm::kMaxContext);
    else if (args.sampling(o.sampler))
      continue;
    else if (args.is("--synthetic"))
      o.synthetic = args.value();
    else if (args.is("--isa"))
      o.isa = args.isa();
    else if (args.is("--kv-type"))
      o.kv_type = args.kv_type();
    else if (args.is("--check-finite"))
      o.check_finite = true;
    else
      args.unknown();
  }
  args.check_sampling(o.sampler);
  if (!o.model_path.empty() && !o.synthetic.empty()) args.fail("give -m or --synthetic, not both");
  if (o.model_path.empty() && o.synthetic.empty()) {
    if (std::filesystem::exists(HLLM_DEFAULT_MODEL))
      o.model_path = HLLM_DEFAULT_MODEL;
    else
      o.synthetic = "tiny";
  }
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

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
    const auto load_start = std::chrono::steady_clock::now();
    hllm::ModelConfig config;
    hllm::ModelWeights weights;
    std::unique_ptr<hllm::Tokenizer> tokenizer;
    std::string model_name;
    if (!options.model_path.empty()) {
      hllm::GgufModel loaded =
          hllm::load_gguf_model(options.model_path, {.check_finite = options.check_finite});
      if (loaded.file->has("tokenizer.ggml.model"))
        tokenizer = std::make_unique<hllm::Tokenizer>(
            hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
      config = loaded.config;
      weights = std::move(loaded.weights);
      model_name = options.model_path;
    } else {
      config = hllm::examples::synthetic_config(options.synthetic);
      weights = hllm::examples::synthetic_weights(config, hllm::DType::f32, 1);
      model_name = "synthetic " + options.synthetic + " (random weights: output is noise)";
    }
    // The cache's element type is a template parameter: one instantiation per --kv-type.
    return hllm::cli::with_kv_type(options.kv_type, [&]<class KV>() -> int {
      using Spec = hllm::ModelSpec<hllm::AnyWeight, KV>;
      const hllm::Llama<Spec> model(config, std::move(weights));
      hllm::Session<Spec> session(
          model, {.context = options.context, .threads = options.threads, .isa = options.isa});
      const double load_seconds = seconds_since(load_start);

      const std::vector<std::int32_t> prompt =
          tokenizer ? tokenizer->encode(options.prompt)
                    : parse_ids(options.prompt_given ? options.prompt : "1");  // 1: BOS
      std::fprintf(stderr, "model: %s\n", model_name.c_str());
      hllm::GenerateOptions generate_options{.max_tokens = options.n_predict};
      std::optional<hllm::StreamingDecoder> stream;
      if (tokenizer) {
        if (tokenizer->eos() >= 0) generate_options.stop_tokens.push_back(tokenizer->eos());
        stream.emplace(*tokenizer);
        for (std::int32_t id : prompt) stream->push(id);  // so the continuation's spacing is right
        std::printf("%s", options.prompt.c_str());
      } else {
        std::printf("prompt ids:");
        for (auto t : prompt) std::printf(" %d", t);
        std::printf("\ngenerated ids:");
      }
      std::fflush(stdout);

      hllm::Sampler sampler(options.sampler);
      const auto start = std::chrono::steady_clock::now();
      double prompt_seconds = 0;
      bool first = true;
      const auto result =
          hllm::generate(session, prompt, sampler, generate_options, [&](std::int32_t token) {
            if (first) prompt_seconds = seconds_since(start);
            first = false;
            if (stream)
              std::printf("%s", stream->push(token).c_str());
            else
              std::printf(" %d", token);
            std::fflush(stdout);
            return true;
          });
      if (stream) std::printf("%s", stream->flush().c_str());
      const double gen_seconds = seconds_since(start) - prompt_seconds;

      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      std::printf("\n\n");
      std::fflush(stdout);  // the statistics go to stderr; keep them after the text
      std::fprintf(stderr, "load time: %.3f s\n", load_seconds);
      std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s\n", prompt.size(),
                   prompt_seconds > 0 ? double(prompt.size()) / prompt_seconds : 0.0);
      // The first generated token comes out of the prompt pass; the rest each cost one decode.
      std::fprintf(
          stderr, "generated: %zu tokens, %.1f tokens/s%s\n", result.tokens.size(),
          result.tokens.size() > 1 && gen_seconds > 0
              ? double(result.tokens.size() - 1) / gen_seconds
              : 0.0,
          result.reason == hllm::StopReason::stop_token ? " (stopped at end of text)" : "");
      std::fprintf(stderr, "ISA path: %s, %zu threads, KV cache %s\n",
                   hllm::to_string(session.isa()), session.threads(),
                   hllm::cli::to_string(options.kv_type));
      std::fprintf(stderr, "peak memory: %.1f MiB resident\n", double(usage.ru_maxrss) / 1024.0);
      return 0;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-generate: %s\n", e.what());
    return 1;
  }
}
