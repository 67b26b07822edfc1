// libFuzzer target: chat-template detection on arbitrary template text, and rendering of
// arbitrary conversations (messages split from the input at NUL bytes, roles cycling).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/generate/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    (void)hllm::detect_chat_format(input);
  } catch (const hllm::Error&) {
  }
  if (size == 0) return 0;
  static const char* kRoles[] = {"system", "user", "assistant", "user", "tool"};
  std::vector<hllm::ChatMessage> messages;
  std::size_t start = 1;
  for (std::size_t i = 1; i <= size; ++i)
    if (i == size || data[i] == 0) {
      messages.push_back(
          {kRoles[(data[0] + messages.size()) % 5], std::string(input.substr(start, i - start))});
      start = i + 1;
    }
  for (auto format : {hllm::ChatFormat::llama2, hllm::ChatFormat::llama3, hllm::ChatFormat::chatml,
                      hllm::ChatFormat::zephyr}) {
    try {
      (void)hllm::render_chat(format, messages, data[0] & 1);
    } catch (const hllm::Error&) {
    }
  }
  return 0;
}
