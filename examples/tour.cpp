// hllm-tour: the API tour of README.md, as a program that runs. Each region between a
// "// [tour:NAME]" line and the next "// [tour:end]" line is shown verbatim in README.md or
// docs/architecture.md; tools/check_docs.py fails when a copy differs, and CTest runs this
// program on the bundled model, so the documented code compiles and works.
//
//   hllm-tour [MODEL.gguf]        (default: the bundled models/kjv-llama.gguf)
//
// The bundled model has no chat template (it was not chat-tuned), so the chat step falls back
// to a format chosen by name; with a chat model the format comes from the file.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <future>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/hllm.hpp"

#ifndef HLLM_DEFAULT_MODEL
#define HLLM_DEFAULT_MODEL "models/kjv-llama.gguf"
#endif

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : HLLM_DEFAULT_MODEL;

  // [tour:load]
  // Maps the file and validates every field; weights stay views into the mapping (or are
  // repacked at load for this CPU's kernels: LoadOptions::repack).
  hllm::GgufModel file = hllm::load_gguf_model(path);
  const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*file.file));
  // The model is immutable: any number of sessions, on any threads, may share it.
  const hllm::Llama<> model(file.config, std::move(file.weights));
  // [tour:end]

  std::printf("== generate\n");
  // [tour:generate]
  // A session is one sequence: its KV cache, activations and thread pool.
  hllm::Session<> session(model, {.context = 256});  // also .threads, .isa, .kv_type, .exact
  hllm::Sampler sampler({.temperature = 0.8f, .top_k = 40, .seed = 42});
  hllm::StreamingDecoder text(tokenizer);  // emits whole UTF-8 characters only

  const std::string prompt = "In the beginning";
  const std::vector<std::int32_t> ids = tokenizer.encode(prompt);  // with BOS
  for (std::int32_t id : ids) text.push(id);  // so the continuation starts with its space
  std::printf("%s", prompt.c_str());
  const hllm::GenerateResult result =
      hllm::generate(session, ids, sampler, {.max_tokens = 32, .stop_tokens = {tokenizer.eos()}},
                     [&](std::int32_t token) {
                       std::printf("%s", text.push(token).c_str());
                       return true;  // false stops generation
                     });
  std::printf("%s\n[%zu tokens, %s, ISA %s]\n", text.flush().c_str(), result.tokens.size(),
              result.reason == hllm::StopReason::stop_token ? "end of text" : "length limit",
              hllm::to_string(session.isa()));
  // [tour:end]

  std::printf("== chat\n");
  // [tour:chat]
  // A chat model's GGUF names its template; the format can also be chosen by name.
  const std::string jinja = file.file->get_string_or("tokenizer.chat_template", "");
  const hllm::ChatFormat format =
      jinja.empty() ? hllm::ChatFormat::zephyr : hllm::detect_chat_format(jinja);
  // The conversation stays in the session's KV cache: each turn evaluates only its new text.
  // Marker texts typed in a message stay plain text, never control tokens.
  hllm::Session<> chat_session(model);
  hllm::Conversation chat(chat_session, tokenizer, format,
                          "Answer in the words of the King James Bible.");
  for (const char* question : {"Who made the heaven and the earth?", "And what was on it?"}) {
    const hllm::ChatReply reply =
        chat.reply(question, sampler, {.max_tokens = 48}, [](std::string_view piece) {
          std::printf("%.*s", static_cast<int>(piece.size()), piece.data());
          return true;  // false stops the reply
        });
    std::printf("\n[%zu tokens, %s; %zu of %zu context tokens used]\n", reply.tokens.size(),
                hllm::to_string(reply.reason), chat_session.position(), chat_session.context());
  }
  // [tour:end]

  std::printf("== sessions\n");
  // [tour:sessions]
  // Several sequences on one model at once: each session owns its mutable state and only
  // reads the model, so they need no locks. (std::async: an exception reaches get().)
  const std::vector<std::string> prompts = {"And God said", "Blessed are the meek"};
  std::vector<std::future<std::string>> continuations;
  for (const std::string& p : prompts)
    continuations.push_back(std::async(std::launch::async, [&model, &tokenizer, p] {
      hllm::Session<> own(model, {.threads = 1});
      hllm::Sampler greedy({.temperature = 0.0f});  // argmax: the same text on every run
      std::vector<std::int32_t> p_ids = tokenizer.encode(p);
      const hllm::GenerateResult r = hllm::generate(own, p_ids, greedy, {.max_tokens = 16});
      p_ids.insert(p_ids.end(), r.tokens.begin(), r.tokens.end());
      return tokenizer.decode(p_ids);  // the prompt and its continuation
    }));
  for (std::future<std::string>& c : continuations) std::printf("%s\n--\n", c.get().c_str());
  // [tour:end]

  std::printf("== kv-type\n");
  // [tour:kv-type]
  // The KV cache's element type is a session option: f32 (default), f16, bf16, or blocks of 32
  // values: ggml's Q8_0 (8.5 bits per value, 27% of f32's memory) and Q4_0, or FP8 E4M3. One
  // model serves sessions of each.
  hllm::Session<> q8_session(model, {.kv_type = hllm::KVType::q8_0});
  const std::span<const float> logits = q8_session.prefill(tokenizer.encode("In the beginning"));
  std::printf("%zu logits from a %s cache of %zu tokens, %zu bytes\n", logits.size(),
              hllm::to_string(q8_session.kv_type()), q8_session.context(),
              q8_session.kv_cache().bytes());
  // [tour:end]
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hllm-tour: %s\n", e.what());
  return 1;
}
