// libFuzzer target: the tokenizers on arbitrary bytes, and detokenization of arbitrary ids.
// Vocabularies: the bundled model's SentencePiece one and, when ../shared is present, the MPT
// byte-level BPE one. Input byte 0 chooses the vocabulary and the operation:
//   encode (with/without special-token parsing), decode of in-range ids (each must decode),
//   decode of raw ids (out-of-range ones must be refused with hllm::Error, never read).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "hllm/io/gguf_reader.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace {

std::vector<std::unique_ptr<hllm::Tokenizer>> load_tokenizers() {
  std::vector<std::unique_ptr<hllm::Tokenizer>> out;
  for (const char* path :
       {HLLM_MODELS_DIR "/kjv-llama.gguf", HLLM_SHARED_DIR "/tokenizers/ggml-vocab-mpt.gguf",
        HLLM_SHARED_DIR "/tokenizers/ggml-vocab-llama-spm.gguf"})
    if (std::filesystem::exists(path))
      out.push_back(std::make_unique<hllm::Tokenizer>(
          hllm::vocabulary_from_gguf(hllm::gguf::File::open(path))));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tokenizers = load_tokenizers();
  if (size == 0 || tokenizers.empty()) return 0;
  const hllm::Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  const int mode = (data[0] / 4) % 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode < 2) {
    const auto ids = tok.encode(text, true, mode == 1);
    (void)tok.decode(ids);
    return 0;
  }
  std::vector<std::int32_t> ids((size - 1) / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data + 1, ids.size() * 4);
  if (mode == 2) {
    for (auto& id : ids)
      id = static_cast<std::int32_t>(static_cast<std::uint32_t>(id) % tok.vocab_size());
    hllm::StreamingDecoder stream(tok);
    for (auto id : ids) (void)stream.push(id);
    (void)stream.flush();
    (void)tok.decode(ids, true);
  } else {
    try {
      (void)tok.decode(ids);
    } catch (const hllm::Error&) {
    }
  }
  return 0;
}
