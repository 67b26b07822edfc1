#pragma once
// Chat templates: turn a conversation (system/user/assistant messages) into the exact prompt text
// a chat-tuned model was trained on.
//
// A GGUF file carries its template as a Jinja program (tokenizer.chat_template). We do not run
// Jinja: the handful of families that cover most Llama-architecture chat models are recognised by
// their marker strings (as llama.cpp's llm_chat_detect_template does) and rendered by hand-written
// code that reproduces what the reference Jinja prints for them.
//
// Every format renders incrementally: the text for the first N messages (with the generation
// prompt when message N is a user turn) is a prefix of the text for N+1 messages. A chat program
// can therefore keep the conversation in the KV cache and evaluate only the new text each turn.
//
// Special-token texts (<s>, <|im_start|>, ...) are written literally; tokenize the result with
// parse_special so they become their ids. Formats whose template writes BOS itself say so
// (chat_template_writes_bos), and the caller must then not add another.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/tokenizer/tokenizer.hpp"

namespace hllm {

enum class ChatFormat {
  llama2,  // Llama 2 chat: <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] reply </s>
  llama3,  // Llama 3 instruct: <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  chatml,  // ChatML (SmolLM2, Qwen, ...): <|im_start|>role\n...<|im_end|>\n
  zephyr,  // Zephyr / TinyLlama chat: <|user|>\n...</s>\n<|assistant|>\n
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" (ChatML and Llama 3 accept any role)
  std::string content;
};

inline const char* to_string(ChatFormat format) noexcept {
  switch (format) {
    case ChatFormat::llama2: return "llama2";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::zephyr: return "zephyr";
  }
  return "unknown";
}

// The format called `name` ("llama2", "llama3", "chatml", "zephyr"; "llama-2"/"llama-3" too).
// Throws hllm::Error(invalid_argument) listing the known names otherwise.
inline ChatFormat chat_format_from_name(std::string_view name) {
  if (name == "llama2" || name == "llama-2") return ChatFormat::llama2;
  if (name == "llama3" || name == "llama-3") return ChatFormat::llama3;
  if (name == "chatml") return ChatFormat::chatml;
  if (name == "zephyr") return ChatFormat::zephyr;
  throw Error(ErrorKind::invalid_argument, "unknown chat format '" + std::string(name) +
                                               "' (known: llama2, llama3, chatml, zephyr)");
}

// Recognises the family of a tokenizer.chat_template Jinja string by its markers. Throws
// hllm::Error(unsupported) for an empty or unrecognised template, naming the markers it did find
// so the user can tell which family it is and pick a format by name instead.
inline ChatFormat detect_chat_format(std::string_view jinja) {
  const auto has = [&](std::string_view marker) {
    return jinja.find(marker) != std::string_view::npos;
  };
  if (jinja.empty())
    throw Error(ErrorKind::unsupported, "the model has no chat template; choose a format by name",
                {}, "tokenizer.chat_template");
  // Order matters where families share markers. ChatML's <|im_start|> is unambiguous unless a
  // sibling format reuses it with a different layout (Phi-4 writes <|im_sep|> after the role).
  if (has("<|im_start|>") && !has("<|im_sep|>")) return ChatFormat::chatml;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFormat::llama3;
  // [INST] alone is also Mistral's, which has no system block and a different BOS rule; only
  // the <<SYS>> block tells Llama 2 apart.
  if (has("[INST]") && has("<<SYS>>")) return ChatFormat::llama2;
  // Phi-3 also uses <|user|>/<|assistant|> but ends turns with <|end|>.
  if (has("<|user|>") && has("<|assistant|>") && !has("<|end|>")) return ChatFormat::zephyr;

  std::string found;
  for (std::string_view marker :
       {"<|im_start|>", "<|im_sep|>", "[INST]", "<<SYS>>", "<|user|>", "<|assistant|>", "<|end|>",
        "<start_of_turn>", "<|start_header_id|>", "<|header_start|>", "<|START_OF_TURN_TOKEN|>",
        "<|start_of_role|>", "### Instruction:", "USER: "}) {
    if (has(marker)) found += (found.empty() ? "" : ", ") + std::string(marker);
  }
  std::string what = "unrecognised chat template (";
  what += found.empty() ? "no known markers" : "markers found: " + found;
  if (has("[INST]") && !has("<<SYS>>")) what += "; [INST] without <<SYS>> is Mistral-style";
  what += "); supported: llama2, llama3, chatml, zephyr — choose one by name to force it";
  throw Error(ErrorKind::unsupported, what, {}, "tokenizer.chat_template");
}

// Whether the rendered text begins with (and, for Llama 2, repeats per turn) the BOS token's
// text, so the caller must not add BOS when tokenizing.
inline bool chat_template_writes_bos(ChatFormat format) noexcept {
  return format == ChatFormat::llama2 || format == ChatFormat::llama3;
}

// Texts that end an assistant turn: generation stops when the model produces one. The first is
// the format's own end-of-turn marker; the rest are end-of-text tokens the same models also emit.
inline std::vector<std::string_view> chat_stop_strings(ChatFormat format) {
  switch (format) {
    case ChatFormat::llama2: return {"</s>"};
    case ChatFormat::llama3: return {"<|eot_id|>", "<|end_of_text|>"};
    case ChatFormat::chatml: return {"<|im_end|>", "<|endoftext|>"};
    case ChatFormat::zephyr: return {"</s>"};
  }
  return {};
}

// The text the template writes after an assistant message's content: what a chat program must
// evaluate after a generated reply (its stop token is sampled but never evaluated) before the
// next user turn, so that the KV cache holds exactly the rendered conversation.
inline std::string_view chat_assistant_suffix(ChatFormat format) noexcept {
  switch (format) {
    case ChatFormat::llama2: return " </s>";
    case ChatFormat::llama3: return "<|eot_id|>";
    case ChatFormat::chatml: return "<|im_end|>\n";
    case ChatFormat::zephyr: return "</s>\n";
  }
  return {};
}

// Token ids that end an assistant turn for this format in this vocabulary: each stop string that
// is a single token, plus EOS. Stop strings the vocabulary lacks are skipped (a Zephyr-style
// fine-tune of a Llama 2 base has </s> but no <|im_end|>).
inline std::vector<std::int32_t> chat_stop_tokens(ChatFormat format, const Tokenizer& tokenizer) {
  std::vector<std::int32_t> ids;
  const auto add = [&](std::int32_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (std::string_view text : chat_stop_strings(format)) {
    const std::vector<std::int32_t> encoded =
        tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
    if (encoded.size() == 1 && tokenizer.text(encoded[0]) == text) add(encoded[0]);
  }
  add(tokenizer.eos());
  return ids;
}

namespace detail {

// Python's str.strip() over ASCII whitespace, which is what the reference templates apply
// (`| trim`, `.strip()`).
inline std::string_view chat_trim(std::string_view s) {
  const auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// meta-llama/Llama-2-*-chat-hf: an optional leading system message is folded into the first user
// turn; user and assistant must then alternate, starting with the user. Each user turn opens with
// BOS, each assistant turn closes with EOS, and the combined first-turn content is stripped.
inline std::string render_llama2(std::span<const ChatMessage> messages) {
  std::size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  std::string out;
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if (m.role != (expect_user ? "user" : "assistant"))
      throw Error(ErrorKind::invalid_argument,
                  "llama2 chat: message " + std::to_string(i) + " has role '" + m.role +
                      "'; after an optional system message, roles must alternate user/assistant");
    std::string content = m.content;
    if (i == first && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (expect_user) {
      out += "<s>[INST] ";
      out += chat_trim(content);
      out += " [/INST]";
    } else {
      out += " ";
      out += chat_trim(content);
      out += " </s>";
    }
  }
  return out;
}

}  // namespace detail

// The prompt text for `messages`. add_generation_prompt appends the header that makes the model
// answer as the assistant (a no-op for Llama 2, whose user turn already ends where the reply
// starts). Throws hllm::Error(invalid_argument) for a message with an empty role, or, for Llama
// 2, roles that do not alternate user/assistant after an optional system message.
inline std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages,
                               bool add_generation_prompt) {
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role.empty())
      throw Error(ErrorKind::invalid_argument,
                  "chat message " + std::to_string(i) + " has an empty role");
  std::string out;
  switch (format) {
    case ChatFormat::llama2: return detail::render_llama2(messages);
    case ChatFormat::llama3:
      // Meta's template: BOS once, then one header + trimmed content + <|eot_id|> per message.
      out = "<|begin_of_text|>";
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += detail::chat_trim(m.content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::chatml:
      for (const ChatMessage& m : messages)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::zephyr:
      // HuggingFaceH4/zephyr-7b-beta: '<|role|>\n' + content + eos_token, then the newline
      // that follows each {{ }} in the template (Hugging Face renders with trim_blocks, which
      // removes newlines after {% %} tags only).
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      return out;
  }
  throw Error(ErrorKind::invalid_argument, "render_chat: invalid ChatFormat");
}

}  // namespace hllm
