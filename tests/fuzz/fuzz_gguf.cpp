// libFuzzer target: the GGUF reader (header, metadata, tensor index), the llama model mapping
// and the tokenizer built from the file's metadata. Any input must give a parsed file or an
// hllm::Error, never a crash, an out-of-bounds read or a hang.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto file =
        std::make_shared<const hllm::gguf::File>(hllm::gguf::File::from_memory(bytes, "fuzz"));
    for (const std::string& key : file->keys()) (void)file->value_to_string(key);
    for (const auto& tensor : file->tensors()) (void)file->find_tensor(tensor.name);
    try {
      (void)hllm::load_gguf_model(file);
    } catch (const hllm::Error&) {
    }
    if (file->has("tokenizer.ggml.model")) {
      const hllm::Tokenizer tokenizer(hllm::vocabulary_from_gguf(*file));
      (void)tokenizer.encode("In the beginning <s> \xe2\x96\x81 \xff", true, true);
    }
  } catch (const hllm::Error&) {
  }
  return 0;
}
