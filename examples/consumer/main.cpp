// A small program that uses hllm from another project: one model loaded once, two chats on it
// at the same time, each in its own session with its own KV cache type (chosen at run time) and
// its conversation kept in the cache across turns. CI builds it four ways
// (examples/consumer/run.sh): three with CMake, one with a plain command line beside kernels.cpp.
//
//   consumer MODEL.gguf        (run.sh passes the bundled models/kjv-llama.gguf)
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "hllm/hllm.hpp"

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer MODEL.gguf\n");
    return 2;
  }
  hllm::GgufModel file = hllm::load_gguf_model(argv[1]);
  const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*file.file));
  const hllm::Llama<> model(file.config, std::move(file.weights));

  // The model has no chat template of its own (it was not chat-tuned): Zephyr's, by name.
  const std::vector<hllm::KVType> cache_types = {hllm::KVType::f32, hllm::KVType::q8_0};
  std::vector<std::string> transcripts(cache_types.size());
  std::vector<std::size_t> replies(cache_types.size(), 0);  // non-empty replies per chat
  std::vector<std::thread> chats;
  for (std::size_t i = 0; i < cache_types.size(); ++i)
    chats.emplace_back([&, i] {
      hllm::Session<> session(model, {.threads = 1, .kv_type = cache_types[i]});
      hllm::Conversation chat(session, tokenizer, hllm::ChatFormat::zephyr);
      hllm::Sampler greedy({.temperature = 0.0f});
      for (const char* message : {"In the beginning", "And God said"}) {
        const hllm::ChatReply reply = chat.reply(message, greedy, {.max_tokens = 12});
        transcripts[i] += std::string("> ") + message + "\n" + reply.text + "\n";
        if (!reply.tokens.empty()) ++replies[i];
      }
      transcripts[i] += "[" + std::to_string(session.position()) + " tokens in a " +
                        hllm::to_string(session.kv_type()) + " cache of " +
                        std::to_string(session.kv_cache().bytes()) + " bytes]\n";
    });
  for (std::thread& t : chats) t.join();

  std::printf("hllm %s consumer: two chats on one model\n", hllm::kVersionString);
  for (const std::string& t : transcripts) std::printf("%s", t.c_str());
  for (const std::size_t n : replies)
    if (n != 2) return 1;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
