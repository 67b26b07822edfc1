#pragma once
// SentencePiece-style BPE (GGUF model "llama"), behaving exactly like llama.cpp's
// llm_tokenizer_spm: split the text into UTF-8 characters, then keep merging the adjacent pair
// whose concatenation is a vocabulary token with the highest score (ties: the leftmost pair),
// and finally emit each piece as its token, or as <0xNN> byte tokens when it is not one.
// The caller has already applied the whitespace rules (leading space, ' ' -> U+2581).

#include <cstddef>
#include <cstdint>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/tokenizer/merge_symbols.hpp"
#include "hllm/tokenizer/token_index.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm::tokenizer {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible stand-in for a space.
inline constexpr std::string_view spm_space = "\xE2\x96\x81";

// Replaces every ' ' with U+2581.
inline std::string spm_escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ')
      out += spm_space;
    else
      out += c;
  }
  return out;
}

// Replaces every U+2581 with ' '.
inline std::string spm_unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text.substr(i, spm_space.size()) == spm_space) {
      out += ' ';
      i += spm_space.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

class SpmTokenizer {
 public:
  SpmTokenizer(const Vocabulary& vocab, const TokenIndex& index) : vocab_(&vocab), index_(&index) {
    // Byte fallback ids, resolved once: "<0xNN>" first, then the bare byte as a token (some
    // vocabularies have it), else the unknown token (-1 if none; encode() then throws).
    for (int b = 0; b < 256; ++b) {
      static constexpr char hex[] = "0123456789ABCDEF";
      const char name[] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
      std::int32_t id = index.find(std::string_view(name, sizeof name));
      if (id < 0) id = index.find(std::string(1, static_cast<char>(b)));
      if (id < 0) id = vocab.unk_id;
      byte_tokens_[static_cast<std::size_t>(b)] = id;
    }
  }

  // Appends the ids of `text` (already escaped) to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out) const {
    if (text.empty()) return;
    MergeSymbols symbols(text);
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::size_t size = symbols[left].length + symbols[right].length;
      const std::int32_t id = index_->find(text.substr(symbols[left].offset, size));
      if (id < 0) return;
      queue.push({left, right, vocab_->score_of(static_cast<std::size_t>(id)), size});
    };
    for (int i = 1; i < symbols.size(); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
      const Bigram top = queue.top();
      queue.pop();
      const MergeSymbols::Symbol &left = symbols[top.left], &right = symbols[top.right];
      // A pair is stale once either side was merged into something else.
      if (left.length == 0 || right.length == 0 || left.length + right.length != top.size) continue;
      symbols.merge(top.left, top.right);
      try_add(left.prev, top.left);
      try_add(top.left, left.next);
    }

    symbols.for_each_piece([&](std::string_view piece) {
      // Every merge produced a token, so a piece that is not one is a single character
      // missing from the vocabulary: emit its bytes.
      const std::int32_t id = index_->find(piece);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
      for (char c : piece) {
        const std::int32_t byte_id = byte_tokens_[static_cast<unsigned char>(c)];
        if (byte_id < 0)
          throw Error(ErrorKind::unsupported,
                      "text needs a byte token, but the vocabulary has neither byte tokens nor "
                      "an unknown token");
        out.push_back(byte_id);
      }
    });
  }

 private:
  struct Bigram {
    int left;
    int right;
    float score;
    std::size_t size;
  };
  // Highest score on top; among equal scores the leftmost pair (llama_bigram_spm::comparator).
  struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  const Vocabulary* vocab_;
  const TokenIndex* index_;
  std::int32_t byte_tokens_[256]{};
};

}  // namespace hllm::tokenizer
