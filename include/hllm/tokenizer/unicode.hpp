#pragma once
// UTF-8 and Unicode helpers for the tokenizers: decoding with llama.cpp's treatment of invalid
// bytes, code point categories (\p{L}, \p{N}, \s, ...), and GPT-2's byte <-> unicode mapping.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/tokenizer/unicode_tables.hpp"

namespace hllm::unicode {

// Category bits, the same as llama.cpp's unicode_cpt_flags so that our pre-tokenizers make the
// same decisions. Every code point has exactly one category bit (Cn is `undefined`, not zero);
// `whitespace` is the Unicode White_Space property and comes on top of the category.
enum Flag : std::uint16_t {
  undefined = 0x01,
  number = 0x02,       // \p{N}
  letter = 0x04,       // \p{L}
  separator = 0x08,    // \p{Z}
  mark = 0x10,         // \p{M}
  punctuation = 0x20,  // \p{P}
  symbol = 0x40,       // \p{S}
  control = 0x80,      // \p{C}
  whitespace = 0x100,  // \s
};

// What every invalid byte decodes to.
inline constexpr char32_t replacement_character = 0xFFFD;

struct CodepointFlags {
  std::uint16_t bits = 0;
  bool is_number() const { return bits & number; }
  bool is_letter() const { return bits & letter; }
  bool is_punctuation() const { return bits & punctuation; }
  bool is_symbol() const { return bits & symbol; }
  bool is_mark() const { return bits & mark; }
  bool is_whitespace() const { return bits & whitespace; }
};

inline CodepointFlags flags_of(char32_t cp) {
  if (cp > 0x10FFFF) return {undefined};
  const auto& runs = tables::flag_runs;
  // The last run starting at or before cp holds its flags; run 0 starts at code point 0.
  const auto* next =
      std::upper_bound(std::begin(runs), std::end(runs), cp,
                       [](char32_t c, const tables::FlagRun& r) { return c < r.first; });
  return {std::prev(next)->flags};
}

// Length of the UTF-8 sequence that `lead` starts, judged from its top four bits only, exactly
// as llama.cpp's unicode_len_utf8 does: continuation bytes and 0xF8..0xFF count as 1 or 4. The
// SentencePiece tokenizer groups raw bytes with it, so an invalid byte never stops it.
inline std::size_t utf8_sequence_length(unsigned char lead) {
  static constexpr std::array<std::uint8_t, 16> lengths = {1, 1, 1, 1, 1, 1, 1, 1,
                                                           1, 1, 1, 1, 2, 2, 3, 4};
  return lengths[lead >> 4];
}

// Decodes one code point at `offset`, advancing it. An invalid or truncated sequence consumes
// exactly one byte and yields U+FFFD, which is what llama.cpp's unicode_cpts_from_utf8 does;
// overlong forms and surrogates are accepted as llama.cpp accepts them.
inline char32_t decode_one(std::string_view text, std::size_t& offset) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto is_continuation = [&](std::size_t i) {
    return i < text.size() && (byte(i) & 0xC0) == 0x80;
  };
  const unsigned char lead = byte(offset);
  if (lead < 0x80) {
    offset += 1;
    return lead;
  }
  if ((lead & 0xE0) == 0xC0 && is_continuation(offset + 1)) {
    const char32_t cp = (char32_t(lead & 0x1F) << 6) | (byte(offset + 1) & 0x3F);
    offset += 2;
    return cp;
  }
  if ((lead & 0xF0) == 0xE0 && is_continuation(offset + 1) && is_continuation(offset + 2)) {
    const char32_t cp = (char32_t(lead & 0x0F) << 12) | (char32_t(byte(offset + 1) & 0x3F) << 6) |
                        (byte(offset + 2) & 0x3F);
    offset += 3;
    return cp;
  }
  if ((lead & 0xF8) == 0xF0 && is_continuation(offset + 1) && is_continuation(offset + 2) &&
      is_continuation(offset + 3)) {
    const char32_t cp = (char32_t(lead & 0x07) << 18) | (char32_t(byte(offset + 1) & 0x3F) << 12) |
                        (char32_t(byte(offset + 2) & 0x3F) << 6) | (byte(offset + 3) & 0x3F);
    offset += 4;
    return cp;
  }
  offset += 1;
  return replacement_character;
}

inline std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (std::size_t offset = 0; offset < text.size();) cps.push_back(decode_one(text, offset));
  return cps;
}

// Appends the UTF-8 form of cp; values past U+10FFFF (never produced by decode_one) become
// U+FFFD rather than garbage.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    append_utf8(out, replacement_character);
  }
}

inline std::string encode_utf8(std::span<const char32_t> cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

// Length of a valid UTF-8 character at `offset` (1..4), 0 if the bytes there are invalid, or
// -1 if they are a valid but incomplete beginning (more bytes could complete them).
inline int valid_char_length(std::string_view bytes, std::size_t offset) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(offset);
  int length = 0;
  char32_t min_value = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    min_value = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    min_value = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    min_value = 0x10000;
  } else {
    return 0;
  }
  char32_t cp = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    const std::size_t at = offset + static_cast<std::size_t>(i);
    if (at >= bytes.size()) {
      // Incomplete so far; the second byte of E0/ED/F0/F4 sequences has a narrower range, but
      // the full check below catches those once the bytes are there.
      return -1;
    }
    if ((byte(at) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(at) & 0x3F);
  }
  if (cp < min_value || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return length;
}

// GPT-2's reversible byte -> printable code point mapping: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 upwards in byte order. Byte-level BPE vocabularies
// store token text in this alphabet.
class ByteMapping {
 public:
  ByteMapping() {
    std::fill(std::begin(byte_of_codepoint_), std::end(byte_of_codepoint_), -1);
    char32_t next_unprintable = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_unprintable++;
      codepoint_of_byte_[static_cast<std::size_t>(b)] = cp;
      byte_of_codepoint_[cp] = static_cast<std::int16_t>(b);
      text_of_byte_[static_cast<std::size_t>(b)].clear();
      append_utf8(text_of_byte_[static_cast<std::size_t>(b)], cp);
    }
  }

  static const ByteMapping& instance() {
    static const ByteMapping mapping;
    return mapping;
  }

  // The UTF-8 text that stands for `byte` in vocabulary tokens.
  const std::string& text_of(unsigned char byte) const { return text_of_byte_[byte]; }

  // The byte a code point stands for, or -1 if it is not part of the mapping.
  int byte_of(char32_t cp) const {
    return cp < std::size(byte_of_codepoint_) ? byte_of_codepoint_[cp] : -1;
  }

  // Maps every byte of `raw` to its stand-in text.
  std::string encode(std::string_view raw) const {
    std::string out;
    out.reserve(raw.size() * 2);
    for (char c : raw) out += text_of(static_cast<unsigned char>(c));
    return out;
  }

 private:
  std::array<char32_t, 256> codepoint_of_byte_{};
  std::array<std::string, 256> text_of_byte_{};
  std::int16_t byte_of_codepoint_[256 + 68 + 1]{};
};

}  // namespace hllm::unicode
