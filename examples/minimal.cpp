// hllm-minimal: the smallest complete program: load a GGUF model, tokenize a prompt, sample a
// continuation and stream it. Usage: hllm-minimal MODEL.gguf ["prompt"]
#include <cstdio>
#include <exception>

#include "hllm/hllm.hpp"

int main(int argc, char** argv) try {
  if (argc < 2) return std::fprintf(stderr, "usage: hllm-minimal MODEL.gguf [PROMPT]\n"), 2;
  hllm::GgufModel file = hllm::load_gguf_model(argv[1]);
  const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*file.file));
  const hllm::Llama<> model(file.config, std::move(file.weights));
  hllm::Session<> session(model);

  const char* prompt = argc > 2 ? argv[2] : "Once upon a time";
  hllm::Sampler sampler({.temperature = 0.7f, .seed = 1});
  hllm::StreamingDecoder text(tokenizer);
  const std::vector<std::int32_t> ids = tokenizer.encode(prompt);
  for (std::int32_t id : ids) text.push(id);  // the continuation then starts with its space
  std::printf("%s", prompt);
  hllm::generate(session, ids, sampler, {.max_tokens = 64, .stop_tokens = {tokenizer.eos()}},
                 [&](std::int32_t token) {
                   std::printf("%s", text.push(token).c_str());
                   return std::fflush(stdout) == 0;
                 });
  std::printf("%s\n", text.flush().c_str());
} catch (const std::exception& e) {
  std::fprintf(stderr, "hllm-minimal: %s\n", e.what());
  return 1;
}
