// libFuzzer target: llama2.c checkpoint headers and tensor layout, and tokenizer.bin. The first
// input byte chooses which; the rest is the file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hllm/io/llama2c.hpp"
#include "hllm/io/mapped_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  try {
    auto file = std::make_shared<const hllm::io::MappedFile>(
        hllm::io::MappedFile::from_memory(bytes, "fuzz.bin"));
    if (data[0] & 1) {
      (void)hllm::llama2c::load_vocabulary(*file);
    } else {
      (void)hllm::llama2c::load_model(file);
    }
  } catch (const hllm::Error&) {
  }
  return 0;
}
