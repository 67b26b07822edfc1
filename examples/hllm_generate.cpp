// hllm-generate: streams text (or, without a tokenizer, token ids) from a prompt.
//
//   hllm-generate [-m FILE.gguf] [-p PROMPT] [-n N] [-t N] [-c N] [--temp T] [--top-k K]
//                 [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]
//                 [--synthetic PRESET]
//
// Flags follow llama.cpp's spelling. Until GGUF loading lands (see the README's status table),
// the program runs a synthetic model (random weights of a preset shape, default "tiny"), whose
// output is noise by construction: it demonstrates the pipeline and its speed, not language.

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "hllm/hllm.hpp"

namespace {

struct Options {
  std::string model_path;
  std::string synthetic = "tiny";
  std::string prompt = "1 15 27 3";
  int n_predict = 32;
  std::size_t threads = 1;
  std::size_t context = 0;
  hllm::SamplerParams sampler{.seed = 42};
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "hllm-generate: %s\n"
               "usage: hllm-generate [-m FILE] [-p PROMPT] [-n N] [-t N] [-c N] [--temp T]\n"
               "         [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
               "         [--synthetic tiny|%s]\n",
               message.c_str(), "tinyllama-1.1b|llama-2-7b|...");
  std::exit(2);
}

template <class T>
T parse_number(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    double value = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    if constexpr (std::is_integral_v<T>) {
      if (value != static_cast<double>(static_cast<long long>(value)))
        throw std::invalid_argument(text);
    }
    return static_cast<T>(value);
  } catch (const std::exception&) {
    usage_error("flag " + flag + " expects a number, got '" + text + "'");
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("flag " + flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-m" || flag == "--model")
      o.model_path = value();
    else if (flag == "-p" || flag == "--prompt")
      o.prompt = value();
    else if (flag == "-n" || flag == "--n-predict")
      o.n_predict = parse_number<int>(flag, value());
    else if (flag == "-t" || flag == "--threads") {
      const long long t = parse_number<long long>(flag, value());
      if (t < 1 || t > 1024) usage_error("-t must be in [1, 1024]");
      o.threads = static_cast<std::size_t>(t);
    } else if (flag == "-c" || flag == "--ctx-size") {
      const long long c = parse_number<long long>(flag, value());
      if (c < 0) usage_error("-c must be >= 0");
      o.context = static_cast<std::size_t>(c);
    } else if (flag == "--temp")
      o.sampler.temperature = parse_number<float>(flag, value());
    else if (flag == "--top-k")
      o.sampler.top_k = parse_number<int>(flag, value());
    else if (flag == "--top-p")
      o.sampler.top_p = parse_number<float>(flag, value());
    else if (flag == "--min-p")
      o.sampler.min_p = parse_number<float>(flag, value());
    else if (flag == "--repeat-penalty")
      o.sampler.repeat_penalty = parse_number<float>(flag, value());
    else if (flag == "--seed")
      o.sampler.seed = parse_number<std::uint64_t>(flag, value());
    else if (flag == "--synthetic")
      o.synthetic = value();
    else if (flag == "-h" || flag == "--help")
      usage_error("help");
    else
      usage_error("unknown flag '" + flag + "'");
  }
  if (o.n_predict < 0) usage_error("-n must be >= 0");
  return o;
}

hllm::ModelConfig synthetic_config(const std::string& name) {
  if (name != "tiny") return hllm::presets::by_name(name);
  hllm::ModelConfig c;
  c.name = "tiny";
  c.vocab_size = 512;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_dim = 704;
  c.context_length = 512;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
    if (!options.model_path.empty())
      throw hllm::Error(hllm::ErrorKind::unsupported,
                        "loading model files arrives with GGUF support; use --synthetic for now",
                        options.model_path);
    hllm::validate_sampler_params(options.sampler);
    const auto load_start = std::chrono::steady_clock::now();
    const hllm::ModelConfig config = synthetic_config(options.synthetic);
    const hllm::Llama<> model(config, hllm::random_weights(config, hllm::DType::f32, 1));
    hllm::Session<> session(model, {.context = options.context});
    const double load_seconds = seconds_since(load_start);

    std::vector<std::int32_t> prompt;
    for (std::size_t pos = 0; pos < options.prompt.size();) {
      std::size_t used = 0;
      prompt.push_back(std::stoi(options.prompt.substr(pos), &used));
      pos += used;
      while (pos < options.prompt.size() && options.prompt[pos] == ' ') ++pos;
    }
    std::printf("synthetic model '%s' (random weights: output is noise by design)\nprompt ids:",
                config.name.c_str());
    for (auto t : prompt) std::printf(" %d", t);
    std::printf("\ngenerated ids:");

    hllm::Sampler sampler(options.sampler);
    const auto start = std::chrono::steady_clock::now();
    double prompt_seconds = 0;
    bool first = true;
    const auto result = hllm::generate(session, prompt, sampler,
                                       {.max_tokens = options.n_predict, .stop_tokens = {}},
                                       [&](std::int32_t token) {
                                         if (first) prompt_seconds = seconds_since(start);
                                         first = false;
                                         std::printf(" %d", token);
                                         std::fflush(stdout);
                                         return true;
                                       });
    const double total = seconds_since(start);
    const double gen_seconds = total - prompt_seconds;
    std::printf("\n\nload time: %.3f s\n", load_seconds);
    std::printf("prompt: %zu tokens, %.1f tokens/s\n", prompt.size(),
                prompt_seconds > 0 ? double(prompt.size()) / prompt_seconds : 0.0);
    std::printf("generated: %zu tokens, %.1f tokens/s\n", result.tokens.size(),
                gen_seconds > 0 && result.tokens.size() > 1
                    ? double(result.tokens.size() - 1) / gen_seconds
                    : 0.0);
    std::printf("ISA path: scalar (reference kernels)\n");
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("peak memory: %.1f MiB resident\n", double(usage.ru_maxrss) / 1024.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-generate: %s\n", e.what());
    return 1;
  }
}
