#pragma once
// Chat templates: turn a conversation (system/user/assistant messages) into the exact prompt text
// a chat-tuned model was trained on.
//
// A GGUF file carries its template as a Jinja program (tokenizer.chat_template). We do not run
// Jinja: the handful of families that cover most Llama-architecture chat models are recognised by
// their marker strings (as llama.cpp's llm_chat_detect_template does) and rendered by hand-written
// code that reproduces what the reference Jinja prints for them.
//
// A rendered chat is a sequence of segments, each either markup (the template's own text: turn
// markers, role headers, separators) or content (a message's text). encode_chat tokenizes it so
// that only markup can become control tokens: a message that contains "<|im_end|>" or "</s>"
// gets the tokens of that text, never the marker, so user text cannot open or close a turn.
// render_chat gives the same text as one string, for display and tests only; tokenizing it with
// parse_special would read markers in the messages as real ones. The guarantee covers control
// and unknown tokens; a marker that the vocabulary has only as plain text (Llama 2's [INST] and
// <<SYS>>, Zephyr's <|user|> in most vocabularies) is the same tokens in a message as in the
// template, which no tokenization can change, and user-defined tokens are text everywhere (as in
// llama.cpp and Hugging Face).
//
// Every format renders incrementally: the segments for the first N messages (with the
// generation prompt when message N is a user turn) are, byte for byte and kind for kind, a
// prefix of those for N+1 messages. A chat program can therefore keep the conversation in the KV
// cache and evaluate only the new part each turn (chat_segments_from).
//
// Formats whose template writes BOS itself say so (chat_template_writes_bos), and the caller must
// then not add another.

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
  // "system", "user" or "assistant" (ChatML, Llama 3 and Zephyr accept other names too). The
  // role is written into the template's markup, so it must come from the program, not the user:
  // rendering rejects one that contains '<', '>', '[', ']', '|' or a control character.
  std::string role;
  std::string content;  // the message text; always tokenized as plain text
};

// What a piece of a rendered chat is: the template's text, whose special-token texts become
// their tokens, or a message's text, which never does.
enum class ChatSegmentKind { markup, content };

struct ChatSegment {
  ChatSegmentKind kind = ChatSegmentKind::markup;
  std::string text;
  bool operator==(const ChatSegment&) const = default;
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
        tokenizer.encode(text, {.add_special = false, .parse_special = true});
    if (encoded.size() == 1 && tokenizer.text(encoded[0]) == text) add(encoded[0]);
  }
  add(tokenizer.eos());
  return ids;
}

namespace detail {

// The ASCII whitespace that Python's str.strip() removes.
inline bool chat_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.strip() over ASCII whitespace, which is what the reference templates apply
// (`| trim`, `.strip()`).
inline std::string_view chat_trim(std::string_view s) {
  while (!s.empty() && chat_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && chat_space(s.back())) s.remove_suffix(1);
  return s;
}

// Appends segments, joining each to the one before it when they are of the same kind and
// dropping empty ones, so a rendering has one canonical segmentation.
struct ChatSegmentWriter {
  std::vector<ChatSegment> out;

  void add(ChatSegmentKind kind, std::string_view text) {
    if (text.empty()) return;
    if (!out.empty() && out.back().kind == kind)
      out.back().text += text;
    else
      out.push_back({kind, std::string(text)});
  }
  void markup(std::string_view text) { add(ChatSegmentKind::markup, text); }
  void content(std::string_view text) { add(ChatSegmentKind::content, text); }
};

// chat_trim over the concatenation of `pieces`, cutting into as many pieces as it takes.
inline void chat_trim_segments(std::vector<ChatSegment>& pieces) {
  while (!pieces.empty()) {
    std::string& text = pieces.front().text;
    const auto kept = std::find_if_not(text.begin(), text.end(), chat_space);
    text.erase(text.begin(), kept);
    if (!text.empty()) break;
    pieces.erase(pieces.begin());
  }
  while (!pieces.empty()) {
    std::string& text = pieces.back().text;
    while (!text.empty() && chat_space(text.back())) text.pop_back();
    if (!text.empty()) break;
    pieces.pop_back();
  }
}

// Throws hllm::Error(invalid_argument) for a role that could not be written as template text:
// empty, or holding a character that marker texts are made of, or a control character.
inline void check_chat_role(std::size_t i, std::string_view role) {
  if (role.empty())
    throw Error(ErrorKind::invalid_argument,
                "chat message " + std::to_string(i) + " has an empty role");
  for (const char c : role) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '<' || c == '>' || c == '[' || c == ']' || c == '|')
      throw Error(ErrorKind::invalid_argument,
                  "chat message " + std::to_string(i) + " has role '" + std::string(role) +
                      "'; a role is template text and must not contain '<', '>', '[', ']', '|' "
                      "or control characters");
  }
}

// meta-llama/Llama-2-*-chat-hf: an optional leading system message is folded into the first user
// turn; user and assistant must then alternate, starting with the user. Each user turn opens with
// BOS, each assistant turn closes with EOS, and the combined first-turn content is stripped.
inline void render_llama2(std::span<const ChatMessage> messages, ChatSegmentWriter& out) {
  std::size_t first = 0;
  const ChatMessage* system = nullptr;
  if (!messages.empty() && messages[0].role == "system") {
    system = &messages[0];
    first = 1;
  }
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if (m.role != (expect_user ? "user" : "assistant"))
      throw Error(ErrorKind::invalid_argument,
                  "llama2 chat: message " + std::to_string(i) + " has role '" + m.role +
                      "'; after an optional system message, roles must alternate user/assistant");
    std::vector<ChatSegment> content;
    if (i == first && system != nullptr) {
      content.push_back({ChatSegmentKind::markup, "<<SYS>>\n"});
      content.push_back({ChatSegmentKind::content, system->content});
      content.push_back({ChatSegmentKind::markup, "\n<</SYS>>\n\n"});
    }
    content.push_back({ChatSegmentKind::content, m.content});
    chat_trim_segments(content);
    out.markup(expect_user ? "<s>[INST] " : " ");
    for (const ChatSegment& piece : content) out.add(piece.kind, piece.text);
    out.markup(expect_user ? " [/INST]" : " </s>");
  }
}

}  // namespace detail

// The prompt for `messages`, as markup and content segments (adjacent segments differ in kind,
// none is empty). add_generation_prompt appends the header that makes the model answer as the
// assistant (a no-op for Llama 2, whose user turn already ends where the reply starts). Throws
// hllm::Error(invalid_argument) for a role that is empty or not plain text (ChatMessage::role),
// or, for Llama 2, roles that do not alternate user/assistant after an optional system message.
inline std::vector<ChatSegment> render_chat_segments(ChatFormat format,
                                                     std::span<const ChatMessage> messages,
                                                     bool add_generation_prompt) {
  for (std::size_t i = 0; i < messages.size(); ++i) detail::check_chat_role(i, messages[i].role);
  detail::ChatSegmentWriter out;
  switch (format) {
    case ChatFormat::llama2: detail::render_llama2(messages, out); return std::move(out.out);
    case ChatFormat::llama3:
      // Meta's template: BOS once, then one header + trimmed content + <|eot_id|> per message.
      out.markup("<|begin_of_text|>");
      for (const ChatMessage& m : messages) {
        out.markup("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        out.content(detail::chat_trim(m.content));
        out.markup("<|eot_id|>");
      }
      if (add_generation_prompt) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      return std::move(out.out);
    case ChatFormat::chatml:
      for (const ChatMessage& m : messages) {
        out.markup("<|im_start|>" + m.role + "\n");
        out.content(m.content);
        out.markup("<|im_end|>\n");
      }
      if (add_generation_prompt) out.markup("<|im_start|>assistant\n");
      return std::move(out.out);
    case ChatFormat::zephyr:
      // HuggingFaceH4/zephyr-7b-beta: '<|role|>\n' + content + eos_token, then the newline
      // that follows each {{ }} in the template (Hugging Face renders with trim_blocks, which
      // removes newlines after {% %} tags only).
      for (const ChatMessage& m : messages) {
        out.markup("<|" + m.role + "|>\n");
        out.content(m.content);
        out.markup("</s>\n");
      }
      if (add_generation_prompt) out.markup("<|assistant|>\n");
      return std::move(out.out);
  }
  throw Error(ErrorKind::invalid_argument, "render_chat_segments: invalid ChatFormat");
}

// The text of `segments`, concatenated.
inline std::string chat_text(std::span<const ChatSegment> segments) {
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

// The rendered prompt as one string, for display, lengths and tests. Do not tokenize it with
// parse_special: that reads marker texts inside the messages as real markers. Tokenize
// render_chat_segments with encode_chat instead.
inline std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages,
                               bool add_generation_prompt) {
  return chat_text(render_chat_segments(format, messages, add_generation_prompt));
}

// The segments of the text from byte `offset` on, each keeping its kind (a segment that
// `offset` cuts keeps its tail): what a chat that has already evaluated the first `offset` bytes
// of the rendering must evaluate next. Throws hllm::Error(out_of_range) past the end.
inline std::vector<ChatSegment> chat_segments_from(std::span<const ChatSegment> segments,
                                                   std::size_t offset) {
  std::vector<ChatSegment> out;
  std::size_t start = 0;
  for (const ChatSegment& s : segments) {
    const std::size_t end = start + s.text.size();
    if (end > offset) out.push_back({s.kind, s.text.substr(offset > start ? offset - start : 0)});
    start = end;
  }
  if (offset > start)
    throw Error(ErrorKind::out_of_range, "chat offset " + std::to_string(offset) +
                                             " is past the end of the " + std::to_string(start) +
                                             "-byte rendering");
  return out;
}

// Token ids for rendered chat segments: the special-token texts in markup become their tokens,
// content is always plain text (Tokenizer::encode_with_special_ranges over the concatenated
// text, with the markup as the ranges). A control token's text must lie inside one markup
// segment (adjacent markup segments count as one) to count. For content without control-token
// texts this gives exactly tokenizer.encode(chat_text(segments), {add_special, true}),
// SentencePiece spaces and merges across the markup/content border included. add_special is as in
// Tokenizer::encode; pass !chat_template_writes_bos(format) at the start of a conversation.
inline std::vector<std::int32_t> encode_chat(const Tokenizer& tokenizer,
                                             std::span<const ChatSegment> segments,
                                             bool add_special) {
  std::string text;
  std::vector<Tokenizer::TextRange> markup;
  for (const ChatSegment& s : segments) {
    if (s.kind == ChatSegmentKind::markup) {
      if (!markup.empty() && markup.back().offset + markup.back().length == text.size())
        markup.back().length += s.text.size();
      else
        markup.push_back({text.size(), s.text.size()});
    }
    text += s.text;
  }
  return tokenizer.encode_with_special_ranges(text, markup, add_special);
}

}  // namespace hllm
