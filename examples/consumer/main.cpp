// The smallest program that uses hllm from another project: builds a tiny random model, runs a
// prompt and greedy-decodes a few tokens. CI builds it four ways (examples/consumer/run.sh):
// three with CMake, one with a plain command line beside kernels.cpp.
#include <cstdio>
#include <vector>

#include "hllm/hllm.hpp"

int main() {
  hllm::ModelConfig config;
  config.vocab_size = 64;
  config.dim = 32;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.ffn_dim = 64;
  config.context_length = 64;
  const hllm::Llama<> model(config, hllm::random_weights(config, hllm::DType::f32, 1));
  hllm::Session<> session(model);
  hllm::Sampler sampler({.temperature = 0.0f});
  const std::vector<std::int32_t> prompt{1, 5, 9};
  const auto result =
      hllm::generate(session, prompt, sampler, {.max_tokens = 8, .stop_tokens = {}});
  std::printf("hllm %s consumer: generated %zu tokens:", hllm::kVersionString,
              result.tokens.size());
  for (auto t : result.tokens) std::printf(" %d", t);
  std::printf("\n");
  return result.tokens.size() == 8 ? 0 : 1;
}
