#pragma once
// Vocabulary: everything a tokenizer needs, as plain data. It does not know where it came from
// (GGUF, a test, a hand-built toy), so the tokenizers can be tested without any file format;
// vocabulary_gguf.hpp fills one from a GGUF file.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"

namespace hllm {

// Token types as GGUF stores them in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct Vocabulary {
  std::string model;  // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;    // tokenizer.ggml.pre: names the pre-tokenizer of a "gpt2" vocabulary
  std::vector<std::string> tokens;
  std::vector<float> scores;              // empty, or one per token (SentencePiece merge priority)
  std::vector<std::int32_t> token_types;  // empty (all normal), or one TokenType per token
  std::vector<std::string> merges;        // "left right", in rank order ("gpt2" only)
  std::int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;  // -1: none
  bool add_bos = true, add_eos = false;
  bool add_space_prefix = true;  // SentencePiece: prepend ' ' to text that starts a fragment

  std::size_t size() const noexcept { return tokens.size(); }

  TokenType type_of(std::size_t id) const {
    return token_types.empty() ? TokenType::normal : static_cast<TokenType>(token_types[id]);
  }
  float score_of(std::size_t id) const { return scores.empty() ? 0.0f : scores[id]; }

  // Throws hllm::Error (format, naming the field) unless the parts agree with each other:
  // parallel arrays have one entry per token, special ids are -1 or a token, and a special token
  // that must be added exists.
  void validate() const {
    const auto fail = [](const std::string& field, const std::string& message) {
      throw Error(ErrorKind::format, message, {}, field);
    };
    if (tokens.empty()) fail("tokens", "the vocabulary has no tokens");
    if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      fail("tokens", "more tokens than 32-bit ids can address");
    const std::string count = std::to_string(tokens.size());
    if (!scores.empty() && scores.size() != tokens.size())
      fail("scores", std::to_string(scores.size()) + " scores for " + count + " tokens");
    if (!token_types.empty() && token_types.size() != tokens.size())
      fail("token_types", std::to_string(token_types.size()) + " types for " + count + " tokens");
    const auto check_id = [&](const char* field, std::int32_t id) {
      if (id < -1 || (id >= 0 && static_cast<std::size_t>(id) >= tokens.size()))
        fail(field, "token id " + std::to_string(id) + " is outside the vocabulary of " + count +
                        " tokens");
    };
    check_id("bos_id", bos_id);
    check_id("eos_id", eos_id);
    check_id("unk_id", unk_id);
    check_id("pad_id", pad_id);
    if (add_bos && bos_id < 0) fail("add_bos", "add_bos is set but there is no BOS token");
    if (add_eos && eos_id < 0) fail("add_eos", "add_eos is set but there is no EOS token");
  }
};

}  // namespace hllm
