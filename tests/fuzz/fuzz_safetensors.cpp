// libFuzzer target: the safetensors header parser (length, JSON, dtypes, shapes, offsets).
#include <cstddef>
#include <cstdint>
#include <span>

#include "hllm/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto file = hllm::safetensors::File::from_memory(bytes, "fuzz.safetensors");
    (void)file.metadata();
  } catch (const hllm::Error&) {
  }
  return 0;
}
