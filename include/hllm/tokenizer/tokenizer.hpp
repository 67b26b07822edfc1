#pragma once
// Tokenizer: text <-> token ids for a Vocabulary, dispatching to SentencePiece BPE ("llama") or
// byte-level BPE ("gpt2"), with llama.cpp's handling of special tokens around them.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/tokenizer/bpe_tokenizer.hpp"
#include "hllm/tokenizer/spm_tokenizer.hpp"
#include "hllm/tokenizer/token_index.hpp"
#include "hllm/tokenizer/unicode.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm {

// How encode() treats special tokens.
struct EncodeOptions {
  // Adds BOS/EOS as the vocabulary's add_bos/add_eos say.
  bool add_special = true;
  // Turns the texts of control tokens (like "<s>", "<|begin_of_text|>") into their ids; without
  // it they are tokenized as plain text, which is what text from a user must get.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Validates the vocabulary and builds the lookups. Throws hllm::Error: format for an
  // inconsistent vocabulary, unsupported for a model other than "llama"/"gpt2" or an unknown
  // pre-tokenizer.
  explicit Tokenizer(Vocabulary vocab) : vocab_(std::make_unique<Vocabulary>(std::move(vocab))) {
    vocab_->validate();
    index_ = std::make_unique<tokenizer::TokenIndex>(*vocab_);
    if (vocab_->model == "llama") {
      spm_ = std::make_unique<tokenizer::SpmTokenizer>(*vocab_, *index_);
    } else if (vocab_->model == "gpt2") {
      bpe_ = std::make_unique<tokenizer::BpeTokenizer>(*vocab_, *index_);
    } else {
      throw Error(ErrorKind::unsupported, "tokenizer model '" + vocab_->model + "'", {},
                  "tokenizer.ggml.model");
    }
    // Texts split out before tokenizing, longest first so that a special token containing
    // another wins (llama.cpp's cache_special_tokens; we sort stably so ties keep id order).
    for (std::size_t id = 0; id < vocab_->size(); ++id) {
      const TokenType type = vocab_->type_of(id);
      if ((type == TokenType::control || type == TokenType::user_defined ||
           type == TokenType::unknown) &&
          !vocab_->tokens[id].empty())
        special_tokens_.push_back(static_cast<std::int32_t>(id));
    }
    std::stable_sort(
        special_tokens_.begin(), special_tokens_.end(),
        [&](std::int32_t a, std::int32_t b) { return text(a).size() > text(b).size(); });
  }

  // A byte range [offset, offset + length) of a text.
  struct TextRange {
    std::size_t offset = 0;
    std::size_t length = 0;
  };

  // Token ids for `text`, e.g. encode(text, {.add_special = false, .parse_special = true}).
  // User-defined tokens are always split out, as llama.cpp and Hugging Face do.
  std::vector<std::int32_t> encode(std::string_view text, EncodeOptions options = {}) const {
    const TextRange whole{0, text.size()};
    std::span<const TextRange> ranges;
    if (options.parse_special) ranges = {&whole, 1};
    return encode_ranges(text, ranges, options.add_special);
  }

  // The same with positional flags, kept for existing callers; EncodeOptions names them. A
  // template on an exact bool so that encode(text, {}) means EncodeOptions{}, not add_special =
  // false (a braced list converts to bool more readily than to a struct).
  template <std::same_as<bool> Bool>
  std::vector<std::int32_t> encode(std::string_view text, Bool add_special,
                                   bool parse_special = false) const {
    return encode(text, EncodeOptions{.add_special = add_special, .parse_special = parse_special});
  }

  // Token ids for `text`, where control and unknown tokens are recognised only where their text
  // lies wholly inside one of `special_ranges` (sorted by offset, not overlapping, within the
  // text); everywhere else their texts are plain text. The text is cut into fragments exactly as
  // encode(text, {.add_special = add_special, .parse_special = true}) cuts it, except at the
  // occurrences left as text, so a text whose only control-token texts lie inside the ranges gets
  // the same ids as that call. This is how a chat prompt keeps the template's markers apart from
  // the messages (encode_chat). Throws hllm::Error(invalid_argument) for ranges that are unsorted,
  // overlap or leave the text.
  std::vector<std::int32_t> encode_with_special_ranges(std::string_view text,
                                                       std::span<const TextRange> special_ranges,
                                                       bool add_special = true) const {
    std::size_t end = 0;
    for (const TextRange& r : special_ranges) {
      if (r.offset < end || r.offset > text.size() || r.length > text.size() - r.offset)
        throw Error(ErrorKind::invalid_argument,
                    "special-token range at " + std::to_string(r.offset) + " (length " +
                        std::to_string(r.length) + ") overlaps the one before it or leaves the " +
                        std::to_string(text.size()) + "-byte text");
      end = r.offset + r.length;
    }
    return encode_ranges(text, special_ranges, add_special);
  }

  // The text of `ids`. Control and unknown tokens decode to nothing unless `special` is set;
  // for SentencePiece vocabularies the one space that encoding put in front of the text is
  // removed from the first piece that has text (as SentencePiece's own decoder does).
  std::string decode(std::span<const std::int32_t> ids, bool special = false) const {
    std::string out;
    bool strip_leading_space = vocab_->add_space_prefix && spm_ != nullptr;
    for (std::int32_t id : ids) {
      std::string piece = token_to_piece(id, special);
      if (piece.empty()) continue;
      if (strip_leading_space && piece.front() == ' ') piece.erase(0, 1);
      strip_leading_space = false;
      out += piece;
    }
    return out;
  }

  // The bytes one token stands for (which may be part of a UTF-8 character).
  std::string token_to_piece(std::int32_t id, bool special = false) const {
    check_id(id);
    const std::string_view token = text(id);
    switch (vocab_->type_of(static_cast<std::size_t>(id))) {
      case TokenType::control:
      case TokenType::unknown: return special ? std::string(token) : std::string();
      case TokenType::user_defined: return std::string(token);
      case TokenType::normal:
        return spm_ ? tokenizer::spm_unescape_spaces(token) : decode_byte_mapped(token);
      case TokenType::byte: {
        if (const int b = parse_byte_token(token); b >= 0)
          return std::string(1, static_cast<char>(b));
        return std::string(token);
      }
      default: return {};  // unused and undefined tokens have no text, as in llama.cpp
    }
  }

  // The vocabulary's text for a token, unchanged (U+2581 and GPT-2 byte characters included).
  std::string_view text(std::int32_t id) const {
    check_id(id);
    return vocab_->tokens[static_cast<std::size_t>(id)];
  }

  std::int32_t bos() const noexcept { return vocab_->bos_id; }
  std::int32_t eos() const noexcept { return vocab_->eos_id; }
  std::int32_t unk() const noexcept { return vocab_->unk_id; }
  std::int32_t pad() const noexcept { return vocab_->pad_id; }
  std::size_t vocab_size() const noexcept { return vocab_->size(); }
  bool is_control(std::int32_t id) const {
    check_id(id);
    return vocab_->type_of(static_cast<std::size_t>(id)) == TokenType::control;
  }
  // True for SentencePiece vocabularies, whose decoding drops the leading space.
  bool is_sentencepiece() const noexcept { return spm_ != nullptr; }
  const Vocabulary& vocabulary() const noexcept { return *vocab_; }

  // Throws hllm::Error(out_of_range) unless id names a token.
  void check_id(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_->size())
      throw Error(ErrorKind::out_of_range, "token id " + std::to_string(id) +
                                               " is outside the vocabulary of " +
                                               std::to_string(vocab_->size()) + " tokens");
  }

 private:
  // A piece of the input: either raw text (token < 0) or a special token found in it.
  struct Fragment {
    std::int32_t token;
    std::size_t offset;
    std::size_t length;
  };

  // The one body behind both encode entry points; the ranges are already checked.
  std::vector<std::int32_t> encode_ranges(std::string_view text,
                                          std::span<const TextRange> special_ranges,
                                          bool add_special) const {
    std::vector<std::int32_t> out;
    const std::vector<Fragment> fragments = partition(text, special_ranges);
    if (add_special && vocab_->add_bos) out.push_back(vocab_->bos_id);
    if (spm_) {
      // SentencePiece adds a space in front of the text; llama.cpp does that at the start and
      // after every special token, and then writes all spaces as U+2581.
      bool after_special = true;
      for (const Fragment& f : fragments) {
        if (f.token >= 0) {
          out.push_back(f.token);
          after_special = true;
          continue;
        }
        std::string piece;
        if (vocab_->add_space_prefix && after_special) piece = " ";
        piece.append(text.substr(f.offset, f.length));
        spm_->encode(tokenizer::spm_escape_spaces(piece), out);
        after_special = false;
      }
    } else {
      for (const Fragment& f : fragments) {
        if (f.token >= 0)
          out.push_back(f.token);
        else
          bpe_->encode(text.substr(f.offset, f.length), out);
      }
    }
    if (add_special && vocab_->add_eos) out.push_back(vocab_->eos_id);
    return out;
  }

  // llama.cpp's tokenizer_st_partition: for each special token, longest first, cut every raw
  // fragment at each (leftmost, non-overlapping) occurrence of its text. A control or unknown
  // token counts only where its text lies inside one of `special_ranges` (sorted, disjoint);
  // an occurrence outside them stays text, and the search goes on from its next byte, so an
  // occurrence that overlaps it but lies inside a range is still found.
  std::vector<Fragment> partition(std::string_view text,
                                  std::span<const TextRange> special_ranges) const {
    const auto in_a_range = [&](std::size_t offset, std::size_t length) {
      // The last range that starts at or before `offset` is the only one that can hold it.
      const auto after =
          std::upper_bound(special_ranges.begin(), special_ranges.end(), offset,
                           [](std::size_t value, const TextRange& r) { return value < r.offset; });
      if (after == special_ranges.begin()) return false;
      const TextRange& r = *(after - 1);
      return offset + length <= r.offset + r.length;
    };
    std::vector<Fragment> fragments;
    if (!text.empty()) fragments.push_back({-1, 0, text.size()});
    for (std::int32_t id : special_tokens_) {
      const bool user_defined =
          vocab_->type_of(static_cast<std::size_t>(id)) == TokenType::user_defined;
      if (!user_defined && special_ranges.empty()) continue;
      const std::string_view needle = this->text(id);
      std::vector<Fragment> next;
      next.reserve(fragments.size());
      for (const Fragment& f : fragments) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        const std::string_view raw = text.substr(f.offset, f.length);
        std::size_t from = 0;  // where the search goes on
        std::size_t cut = 0;   // where the raw text not yet emitted begins
        for (std::size_t at; (at = raw.find(needle, from)) != std::string_view::npos;) {
          if (!user_defined && !in_a_range(f.offset + at, needle.size())) {
            from = at + 1;
            continue;
          }
          if (at > cut) next.push_back({-1, f.offset + cut, at - cut});
          next.push_back({id, f.offset + at, needle.size()});
          from = cut = at + needle.size();
        }
        if (cut < raw.size()) next.push_back({-1, f.offset + cut, raw.size() - cut});
      }
      fragments = std::move(next);
    }
    return fragments;
  }

  // "<0xNN>" -> NN, or -1 if the text is not of that form.
  static int parse_byte_token(std::string_view token) {
    if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
    const auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(token[3]);
    const int lo = hex(token[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

  // GPT-2 alphabet -> bytes. A character outside the alphabet (not produced by conversion
  // tools) is kept as its UTF-8, where llama.cpp would write an "[UNK_BYTE_...]" marker.
  static std::string decode_byte_mapped(std::string_view token) {
    const auto& mapping = unicode::ByteMapping::instance();
    std::string out;
    out.reserve(token.size());
    for (std::size_t offset = 0; offset < token.size();) {
      const std::size_t start = offset;
      const char32_t cp = unicode::decode_one(token, offset);
      const int b = mapping.byte_of(cp);
      if (b >= 0)
        out += static_cast<char>(b);
      else
        out.append(token.substr(start, offset - start));
    }
    return out;
  }

  // Heap-allocated so that the tokenizers' pointers into it stay valid when a Tokenizer moves.
  std::unique_ptr<Vocabulary> vocab_;
  std::unique_ptr<tokenizer::TokenIndex> index_;
  std::unique_ptr<tokenizer::SpmTokenizer> spm_;
  std::unique_ptr<tokenizer::BpeTokenizer> bpe_;
  std::vector<std::int32_t> special_tokens_;
};

}  // namespace hllm
