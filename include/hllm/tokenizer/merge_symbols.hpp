#pragma once
// The pieces of a text that a bigram-merging tokenizer joins (llama.cpp's llm_symbol), shared by
// the SentencePiece (spm_tokenizer.hpp) and byte-level BPE (bpe_tokenizer.hpp) tokenizers: one
// symbol per UTF-8 character, grouped by its lead byte alone like llama.cpp (so invalid bytes form
// short symbols of their own), linked to its neighbours; a merge joins a symbol with its right
// neighbour, which stays in place with length 0.

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

#include "hllm/tokenizer/unicode.hpp"

namespace hllm::tokenizer {

class MergeSymbols {
 public:
  struct Symbol {
    int prev;            // −1: the first
    int next;            // −1: the last
    std::size_t offset;  // into the text
    std::size_t length;  // 0 once merged into its left neighbour
  };

  // `text` must outlive this object.
  explicit MergeSymbols(std::string_view text) : text_(text) {
    for (std::size_t offset = 0; offset < text.size();) {
      const std::size_t length =
          std::min(unicode::utf8_sequence_length(static_cast<unsigned char>(text[offset])),
                   text.size() - offset);
      const int index = static_cast<int>(symbols_.size());
      symbols_.push_back(
          {index - 1, offset + length == text.size() ? -1 : index + 1, offset, length});
      offset += length;
    }
  }

  int size() const noexcept { return static_cast<int>(symbols_.size()); }
  const Symbol& operator[](int i) const { return symbols_[static_cast<std::size_t>(i)]; }
  std::string_view piece(int i) const { return text_.substr((*this)[i].offset, (*this)[i].length); }

  // Joins symbol `right` (left's live right neighbour) onto symbol `left`.
  void merge(int left, int right) {
    Symbol& l = symbols_[static_cast<std::size_t>(left)];
    Symbol& r = symbols_[static_cast<std::size_t>(right)];
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) symbols_[static_cast<std::size_t>(r.next)].prev = left;
  }

  // Calls emit(piece) for every symbol left after the merges, in text order.
  template <class Emit>
  void for_each_piece(Emit&& emit) const {
    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = (*this)[i].next)
      if ((*this)[i].length != 0) emit(piece(i));
  }

 private:
  std::string_view text_;
  std::vector<Symbol> symbols_;
};

}  // namespace hllm::tokenizer
