#pragma once
// StreamingDecoder: turns token ids, arriving one at a time during generation, into text that
// is always valid UTF-8. A token can end in the middle of a character (byte-fallback tokens,
// byte-level BPE), so the bytes of an unfinished character are held back until the tokens that
// complete it arrive.

#include <cstdint>
#include <string>
#include <string_view>

#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/unicode.hpp"

namespace hllm {

class StreamingDecoder {
 public:
  // `special`: whether control tokens produce their text, as in Tokenizer::decode. The
  // tokenizer must outlive the decoder.
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool special = false)
      : tokenizer_(&tokenizer), special_(special) {}

  // Adds one token and returns the text that is now complete (possibly empty). Throws
  // hllm::Error(out_of_range) for an id outside the vocabulary. Bytes that can never be part
  // of valid UTF-8 are emitted as U+FFFD, one per byte, so the output is always valid UTF-8.
  std::string push(std::int32_t id) {
    std::string piece = tokenizer_->token_to_piece(id, special_);
    if (piece.empty()) return {};
    // The same leading-space rule as Tokenizer::decode, so that concatenating everything
    // push() and flush() return equals decode() of all ids (for valid UTF-8).
    if (first_piece_ && tokenizer_->is_sentencepiece() &&
        tokenizer_->vocabulary().add_space_prefix && piece.front() == ' ')
      piece.erase(0, 1);
    first_piece_ = false;
    pending_ += piece;
    return take_complete();
  }

  // Ends the stream: a character still incomplete is emitted as one U+FFFD (never as raw
  // bytes, so the output stays valid UTF-8). The decoder can then be reused for a new stream.
  std::string flush() {
    std::string out;
    if (!pending_.empty()) unicode::append_utf8(out, unicode::replacement_character);
    reset();
    return out;
  }

  void reset() {
    pending_.clear();
    first_piece_ = true;
  }

  // Bytes held back because they begin a character that is not complete yet.
  std::string_view pending() const noexcept { return pending_; }

 private:
  std::string take_complete() {
    std::string out;
    std::size_t offset = 0;
    while (offset < pending_.size()) {
      const int length = unicode::valid_char_length(pending_, offset);
      if (length < 0) break;  // incomplete: wait for more bytes
      if (length == 0) {
        unicode::append_utf8(out, unicode::replacement_character);
        offset += 1;
        continue;
      }
      out.append(pending_, offset, static_cast<std::size_t>(length));
      offset += static_cast<std::size_t>(length);
    }
    pending_.erase(0, offset);
    return out;
  }

  const Tokenizer* tokenizer_;
  bool special_;
  bool first_piece_ = true;
  std::string pending_;
};

}  // namespace hllm
