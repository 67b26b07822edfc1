// hllm-perplexity: the perplexity of a model on a text file, computed as llama.cpp's perplexity
// tool does so that the numbers can be compared.
//
//   hllm-perplexity -m FILE.gguf -f TEXT.txt [-c 512] [-t N] [-b BATCH] [--isa ISA]
//
// The whole file is tokenized (with BOS when the vocabulary adds one) and cut into
// non-overlapping windows of -c tokens; a partial last window is dropped. Each window is
// evaluated from an empty KV cache with BOS in its first position, and the second half of it is
// scored (generate/perplexity.hpp has the details). Prints the running perplexity after each
// window, then the final estimate with its standard error.

#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "hllm/hllm.hpp"

namespace {

struct Options {
  std::string model_path;
  hllm::VocabularyOptions vocabulary;  // --pre-tokenizer
  std::string text_path;
  std::size_t context = 512;
  std::size_t batch = 512;
  std::size_t threads = 0;
  std::optional<hllm::Isa> isa;
  hllm::KVType kv_type = hllm::KVType::f32;
};

Options parse(int argc, char** argv, hllm::cli::Parser& cli) {
  Options o;
  cli.path("-m,--model", o.model_path, "Model file (required)")->required();
  cli.path("-f,--file", o.text_path, "The text to score (required)")->required();
  cli.context(o.context, 4, hllm::kMaxContext,
              "Window length in tokens; the second half of each window is scored");
  cli.number_in<std::size_t>("-b,--batch-size", o.batch, 1, 65536, "a number of tokens",
                             "Tokens per forward pass while evaluating a window");
  cli.threads(o.threads);
  cli.isa(o.isa);
  cli.kv_type(o.kv_type);
  cli.pre_tokenizer(o.vocabulary);
  cli.parse(argc, argv);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  hllm::cli::Parser cli("hllm-perplexity",
                        "The perplexity of a model on a text file, as llama.cpp's llama-perplexity "
                        "computes it.");
  const Options options = parse(argc, argv, cli);
  try {
    hllm::GgufModel loaded = hllm::load_gguf_model(options.model_path);
    const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*loaded.file, options.vocabulary));
    const std::string text = hllm::io::read_text_file(options.text_path);
    const std::vector<std::int32_t> tokens = tokenizer.encode(text, {.add_special = true});
    const std::size_t c = options.context;
    const hllm::PerplexityPlan plan = hllm::plan_perplexity(tokens.size(), c);

    if (c > static_cast<std::size_t>(loaded.config.context_length))
      std::fprintf(stderr, "warning: -c %zu exceeds the model's training context of %lld\n", c,
                   static_cast<long long>(loaded.config.context_length));
    const hllm::Llama<> model(loaded.config, std::move(loaded.weights));
    hllm::Session<> session(model, {.context = c,
                                    .max_batch = std::min(options.batch, c),
                                    .threads = options.threads,
                                    .isa = options.isa,
                                    .kv_type = options.kv_type});
    const bool bos_first = tokenizer.vocabulary().add_bos && tokenizer.bos() >= 0;
    std::fprintf(stderr,
                 "model: %s\ntext: %s, %zu tokens\n%zu windows of %zu tokens, scoring %zu tokens "
                 "each (positions %zu..%zu); ISA %s, %zu threads, KV cache %s\n",
                 options.model_path.c_str(), options.text_path.c_str(), tokens.size(), plan.windows,
                 c, plan.scored_per_window, plan.first_scored, c - 2,
                 hllm::to_string(session.isa()), session.threads(),
                 hllm::to_string(session.kv_type()));

    hllm::PerplexityAccumulator acc;
    std::vector<std::int32_t> window(c);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t w = 0; w < plan.windows; ++w) {
      std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(w * c), c, window.begin());
      // Every window starts a sequence, so it starts with BOS like the first (llama.cpp
      // overwrites the window's first token, which is never scored anyway).
      if (bos_first) window[0] = tokenizer.bos();
      session.reset();
      const std::span<const float> logits = session.prefill(window, hllm::Logits::all);
      hllm::score_window(logits, window, model.vocab_size(), plan, acc);
      std::printf("[%zu]%.4f,", w + 1, acc.perplexity());
      if (w == 0) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "%.2f s per window, about %.1f s in all\n", seconds,
                     seconds * static_cast<double>(plan.windows));
      }
      std::fflush(stdout);
    }
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f (%zu tokens scored of %zu)\n",
                acc.perplexity(), acc.perplexity_error(), acc.count(), tokens.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-perplexity: %s\n", e.what());
    return 1;
  }
}
