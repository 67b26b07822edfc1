#pragma once
// Byte-level BPE (GGUF model "gpt2"), behaving exactly like llama.cpp's llm_tokenizer_bpe:
// pre-tokenize into words, map each word's bytes to GPT-2's printable alphabet, then within each
// word keep merging the adjacent pair with the lowest merge rank (ties: the leftmost pair).
// A final piece that is not a token is emitted byte by byte (bytes with no token are dropped,
// as llama.cpp drops them).

#include <cstddef>
#include <cstdint>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hllm/tokenizer/merge_symbols.hpp"
#include "hllm/tokenizer/pretokenizer.hpp"
#include "hllm/tokenizer/token_index.hpp"
#include "hllm/tokenizer/unicode.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm::tokenizer {

class BpeTokenizer {
 public:
  BpeTokenizer(const Vocabulary& vocab, const TokenIndex& index)
      : index_(&index), pretokenizer_(PreTokenizer::from_name(vocab.pre)) {
    ranks_.reserve(vocab.merges.size());
    for (std::size_t rank = 0; rank < vocab.merges.size(); ++rank) {
      const std::string& merge = vocab.merges[rank];
      // Split at the first space after the first character, as llama.cpp does; the earliest
      // rank wins if a pair is listed twice. A line without a separator merges nothing.
      const std::size_t space = merge.find(' ', 1);
      if (space == std::string::npos) continue;
      ranks_.emplace(merge, static_cast<std::int32_t>(rank));
    }
  }

  const PreTokenizer& pretokenizer() const noexcept { return pretokenizer_; }

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out) const {
    const auto& bytes = unicode::ByteMapping::instance();
    for (const std::string& word : pretokenizer_.split(text)) encode_word(bytes.encode(word), out);
  }

 private:
  struct Bigram {
    int left;
    int right;
    std::int32_t rank;
    std::string text;  // what the pair spelled when queued, to recognise stale entries
  };
  // Lowest rank on top; among equal ranks the leftmost pair (llm_bigram_bpe::comparator).
  struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  std::int32_t rank_of(std::string_view left, std::string_view right) const {
    std::string key;
    key.reserve(left.size() + 1 + right.size());
    key.append(left).append(1, ' ').append(right);
    const auto it = ranks_.find(key);
    return it == ranks_.end() ? -1 : it->second;
  }

  void encode_word(const std::string& word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    if (pretokenizer_.ignore_merges()) {
      if (const std::int32_t id = index_->find(word); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    MergeSymbols symbols(word);
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view l = symbols.piece(left), r = symbols.piece(right);
      const std::int32_t rank = rank_of(l, r);
      if (rank < 0) return;
      queue.push({left, right, rank, std::string(l) + std::string(r)});
    };
    for (int i = 1; i < symbols.size(); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
      const Bigram top = queue.top();
      queue.pop();
      const MergeSymbols::Symbol &left = symbols[top.left], &right = symbols[top.right];
      if (left.length == 0 || right.length == 0) continue;
      if (top.text.size() != left.length + right.length ||
          std::string_view(word).substr(left.offset, top.text.size()) != top.text ||
          right.offset != left.offset + left.length)
        continue;  // stale: one side changed since the pair was queued
      symbols.merge(top.left, top.right);
      try_add(left.prev, top.left);
      try_add(top.left, left.next);
    }

    symbols.for_each_piece([&](std::string_view piece) {
      if (const std::int32_t id = index_->find(piece); id >= 0) {
        out.push_back(id);
        return;
      }
      // llama.cpp looks each *byte* of the (already byte-mapped) piece up as a one-character
      // token; we do the same so that our ids match, even though those bytes are mostly
      // fragments of the mapped characters.
      for (char c : piece) {
        if (const std::int32_t id = index_->find(std::string_view(&c, 1)); id >= 0)
          out.push_back(id);
      }
    });
  }

  const TokenIndex* index_;
  PreTokenizer pretokenizer_;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> ranks_;
};

}  // namespace hllm::tokenizer
