// hllm-logits -m FILE --tokens-file IDS [--mode prefill|decode] [-t N] -o OUT.f32
// Evaluates the whitespace-separated token ids in IDS as one sequence from position 0 and writes
// the raw little-endian float32 logits, [n_tokens][n_vocab], to OUT. The reference path: float32
// activations and KV cache, so the result is comparable with an exact evaluation.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"

namespace {

std::vector<std::int32_t> read_tokens(const std::string& path) {
  std::istringstream in(hllm::io::read_text_file(path, "token file"));
  std::vector<std::int32_t> tokens;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || id < 0 || id > INT32_MAX)
      throw hllm::Error(hllm::ErrorKind::format,
                        "token " + std::to_string(tokens.size()) + " ('" + word +
                            "') is not a non-negative integer id",
                        path);
    tokens.push_back(static_cast<std::int32_t>(id));
  }
  if (tokens.empty()) throw hllm::Error(hllm::ErrorKind::format, "no token ids in file", path);
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, tokens_path, out_path, mode = "prefill";
  std::size_t threads = 1;
  hllm::cli::Parser cli("hllm-logits",
                        "Writes float32 logits [n_tokens][n_vocab] for the ids in a file, "
                        "evaluated as one sequence.");
  cli.path("-m,--model", model_path, "Model file (required)")->required();
  cli.path("--tokens-file", tokens_path, "Whitespace-separated token ids (required)")
      ->required()
      ->type_name("IDS");
  cli.path("-o,--output", out_path, "The float32 file to write (required)")
      ->required()
      ->type_name("OUT.f32");
  cli.choice("--mode", mode, {"prefill", "decode"},
             "One prefill of all the tokens, or one decode per token");
  cli.threads(threads)->default_str("1");
  cli.parse(argc, argv);
  try {
    // -t sets the session's worker threads; HLLM_ISA picks the kernels.
    const std::vector<std::int32_t> tokens = read_tokens(tokens_path);
    const hllm::GgufModel m = hllm::load_gguf_model(model_path);
    const hllm::Llama<> model(m.config, m.weights);
    hllm::SessionOptions options;
    options.threads = threads;
    options.context =
        std::max<std::size_t>(tokens.size(), static_cast<std::size_t>(m.config.context_length));
    hllm::Session<> session(model, options);
    std::vector<float> logits;  // [n_tokens][vocab]
    if (mode == "prefill") {
      const auto all = session.prefill(tokens, hllm::Logits::all);
      logits.assign(all.begin(), all.end());
    } else {
      for (std::int32_t t : tokens) {
        const auto row = session.decode(t);
        logits.insert(logits.end(), row.begin(), row.end());
      }
    }
    std::FILE* out = std::fopen(out_path.c_str(), "wb");
    if (out == nullptr)
      throw hllm::Error(hllm::ErrorKind::io, std::string("cannot create: ") + std::strerror(errno),
                        out_path);
    const bool ok = std::fwrite(logits.data(), sizeof(float), logits.size(), out) == logits.size();
    if (std::fclose(out) != 0 || !ok)
      throw hllm::Error(hllm::ErrorKind::io, "write failed", out_path);
    std::fprintf(stderr, "hllm-logits: %zu tokens x %zu vocab (%s) -> %s\n", tokens.size(),
                 model.vocab_size(), mode.c_str(), out_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-logits: %s\n", e.what());
    return 1;
  }
}
