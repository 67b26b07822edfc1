// libFuzzer target: chat-template detection on arbitrary template text, and rendering of
// arbitrary conversations (messages split from the input at NUL bytes, roles cycling) to
// segments, which are tokenized with a vocabulary that has every format's markers as control
// tokens. Checked: the segments are canonical (non-empty, adjacent ones of different kinds) and
// spell render_chat's text, and the encoded conversation holds exactly the control tokens its
// markup segments hold on their own: nothing in a message ever becomes a marker.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/generate/chat_template.hpp"
#include "hllm/tokenizer/tokenizer.hpp"

namespace {

// SentencePiece with byte fallback only: any text encodes, and no merge of plain text can
// produce a marker (there are no multi-character plain tokens), so every control id in the
// output came from the partition.
hllm::Tokenizer marker_tokenizer() {
  hllm::Vocabulary v;
  v.model = "llama";
  const auto add = [&](std::string text, hllm::TokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(0.0f);
    v.token_types.push_back(static_cast<std::int32_t>(type));
  };
  add("<unk>", hllm::TokenType::unknown);
  add("<s>", hllm::TokenType::control);
  add("</s>", hllm::TokenType::control);
  for (const char* marker :
       {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|user|>", "<|assistant|>",
        "<|system|>", "[INST]", "[/INST]", "<<SYS>>", "<</SYS>>"})
    add(marker, hllm::TokenType::control);
  add("\xE2\x96\x81", hllm::TokenType::normal);
  static constexpr char hex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b)
    add(std::string("<0x") + hex[b / 16] + hex[b % 16] + ">", hllm::TokenType::byte);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return hllm::Tokenizer(std::move(v));
}

std::size_t count_special(const hllm::Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::size_t n = 0;
  for (std::int32_t id : ids) {
    const hllm::TokenType type = t.vocabulary().type_of(static_cast<std::size_t>(id));
    n += type == hllm::TokenType::control || type == hllm::TokenType::unknown;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const hllm::Tokenizer tokenizer = marker_tokenizer();
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
    std::vector<hllm::ChatSegment> segments;
    try {
      segments = hllm::render_chat_segments(format, messages, data[0] & 1);
    } catch (const hllm::Error&) {
      continue;
    }
    std::size_t markup_special = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if (segments[i].text.empty() || (i > 0 && segments[i].kind == segments[i - 1].kind))
        __builtin_trap();
      if (segments[i].kind == hllm::ChatSegmentKind::markup)
        markup_special += count_special(tokenizer, tokenizer.encode(segments[i].text, false, true));
    }
    if (hllm::chat_text(segments) != hllm::render_chat(format, messages, data[0] & 1))
      __builtin_trap();
    if (count_special(tokenizer, hllm::encode_chat(tokenizer, segments, false)) != markup_special)
      __builtin_trap();
  }
  return 0;
}
