#pragma once
// PreTokenizer: splits text into words before byte-level BPE, by the regex set that
// tokenizer.ggml.pre names. llama.cpp runs a list of regexes, each one splitting the pieces the
// previous one produced (both the matches and the text between them become pieces). We do the
// same, with each regex hand-written as a matcher over code points and their Unicode categories,
// because std::regex knows no \p{L}. Each matcher follows what llama.cpp executes for that
// regex: its custom GPT-2 / Llama 3 splitters where it has them, otherwise ECMAScript regex
// semantics over its "collapsed" text (every non-ASCII code point replaced by its category).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/tokenizer/unicode.hpp"

namespace hllm::tokenizer {

// One regex of a pre-tokenizer. The comment on each is the regex it implements.
enum class SplitRule {
  gpt2,            // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  llama3,          // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                   //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,           // the llama3 regex with \p{N} instead of \p{N}{1,3}
  number,          // \p{N}
  number_run,      // \p{N}+
  ascii_digits3,   // [0-9][0-9][0-9]
  punct_run,       // [\p{P}\$\+<=>\^~\|]+            ("default")
  punct_run_tick,  // [\p{P}\$\+<=>\^~\|`]+           (falcon)
  line_break,      // [\r\n]
  space_letters,   // \s?\p{L}+
  space_punct,     // \s?\p{P}+
  cjk_run,         // [一-龥ࠀ-一가-퟿]+
};

class PreTokenizer {
 public:
  // The pre-tokenizer llama.cpp uses for `pre` (tokenizer.ggml.pre). An empty name means
  // "default", as in llama.cpp. Throws hllm::Error(unsupported) for names we do not know.
  static PreTokenizer from_name(std::string_view pre) {
    using R = SplitRule;
    const auto is_any = [&](std::initializer_list<std::string_view> names) {
      for (auto n : names)
        if (pre == n) return true;
      return false;
    };
    if (pre.empty() || pre == "default")
      return {"default", {R::punct_run, R::gpt2, R::number_run, R::ascii_digits3}, false};
    if (is_any({"gpt-2", "mpt", "olmo", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
                "jina-v1-en", "jina-v2-code", "roberta-bpe", "gigachat", "exaone4", "mellum"}))
      return {std::string(pre), {R::gpt2}, false};
    // llama.cpp also sets ignore_merges for these: a word that is itself a token is not split.
    if (is_any({"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}))
      return {std::string(pre), {R::llama3}, true};
    if (is_any({"dbrx", "smaug-bpe"})) return {std::string(pre), {R::llama3}, false};
    if (is_any({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}))
      return {std::string(pre), {R::qwen2}, false};
    if (is_any({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}))
      return {std::string(pre), {R::number, R::gpt2}, false};
    if (pre == "falcon")
      return {std::string(pre), {R::punct_run_tick, R::gpt2, R::ascii_digits3}, false};
    if (pre == "deepseek-coder")
      return {std::string(pre),
              {R::line_break, R::space_letters, R::space_punct, R::cjk_run, R::number},
              false};
    throw Error(ErrorKind::unsupported, "unknown pre-tokenizer '" + std::string(pre) + "'", {},
                "tokenizer.ggml.pre");
  }

  PreTokenizer(std::string name, std::vector<SplitRule> rules, bool ignore_merges)
      : name_(std::move(name)), rules_(std::move(rules)), ignore_merges_(ignore_merges) {}

  const std::string& name() const noexcept { return name_; }
  const std::vector<SplitRule>& rules() const noexcept { return rules_; }
  // True when a word that is itself a vocabulary token is emitted whole (llama.cpp's
  // ignore_merges, set for Llama 3).
  bool ignore_merges() const noexcept { return ignore_merges_; }

  // The words of `text`, in order, as UTF-8. Invalid bytes decode to U+FFFD first, one per
  // byte, exactly as llama.cpp does, so every word is valid UTF-8.
  std::vector<std::string> split(std::string_view text) const {
    const std::vector<char32_t> cps = unicode::decode_utf8(text);
    std::vector<unicode::CodepointFlags> flags(cps.size());
    for (std::size_t i = 0; i < cps.size(); ++i) flags[i] = unicode::flags_of(cps[i]);

    std::vector<std::size_t> pieces = {cps.size()};  // piece lengths in code points
    for (SplitRule rule : rules_) pieces = apply(rule, cps, flags, pieces);

    std::vector<std::string> words;
    words.reserve(pieces.size());
    std::size_t start = 0;
    for (std::size_t length : pieces) {
      if (length == 0) continue;
      words.push_back(unicode::encode_utf8(std::span(cps).subspan(start, length)));
      start += length;
    }
    return words;
  }

 private:
  // The code points of one piece, with the accessors llama.cpp's splitters use: outside the
  // piece a position has code point `none` and no flags at all (not even `undefined`).
  struct Piece {
    const std::vector<char32_t>& cps;
    const std::vector<unicode::CodepointFlags>& all_flags;
    std::size_t begin;
    std::size_t end;

    static constexpr char32_t none = 0xFFFFFFFF;
    char32_t cp(std::size_t pos) const { return pos < end ? cps[pos] : none; }
    unicode::CodepointFlags flags(std::size_t pos) const {
      return pos < end ? all_flags[pos] : unicode::CodepointFlags{};
    }
    bool letter(std::size_t pos) const { return flags(pos).is_letter(); }
    bool number(std::size_t pos) const { return flags(pos).is_number(); }
    bool space(std::size_t pos) const { return flags(pos).is_whitespace(); }
    bool punct(std::size_t pos) const { return flags(pos).is_punctuation(); }
    // [^\s\p{L}\p{N}] inside the piece.
    bool other(std::size_t pos) const {
      const auto f = flags(pos);
      return f.bits != 0 && !(f.is_whitespace() || f.is_letter() || f.is_number());
    }
  };

  static bool is_ascii_lower(char32_t c, char lower) {
    return c == static_cast<char32_t>(lower) || c == static_cast<char32_t>(lower - 'a' + 'A');
  }

  // Length of the contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
  static std::size_t contraction(const Piece& p, std::size_t pos, bool any_case) {
    if (p.cp(pos) != U'\'' || pos + 1 >= p.end) return 0;
    const auto is = [&](std::size_t at, char c) {
      return any_case ? is_ascii_lower(p.cp(at), c) : p.cp(at) == static_cast<char32_t>(c);
    };
    if (is(pos + 1, 's') || is(pos + 1, 't') || is(pos + 1, 'm') || is(pos + 1, 'd')) return 2;
    if (pos + 2 < p.end &&
        ((is(pos + 1, 'r') && is(pos + 2, 'e')) || (is(pos + 1, 'v') && is(pos + 2, 'e')) ||
         (is(pos + 1, 'l') && is(pos + 2, 'l'))))
      return 3;
    return 0;
  }

  // llama.cpp's unicode_regex_split_custom_gpt2: returns the end of the word starting at pos.
  static std::size_t gpt2_word_end(const Piece& p, std::size_t pos) {
    if (const std::size_t n = contraction(p, pos, false)) return pos + n;
    const bool lead_space = p.cp(pos) == U' ';
    const std::size_t body = pos + (lead_space ? 1 : 0);
    if (p.letter(body)) {  //  ?\p{L}+
      std::size_t end = body;
      while (p.letter(end)) ++end;
      return end;
    }
    if (p.number(body)) {  //  ?\p{N}+
      std::size_t end = body;
      while (p.number(end)) ++end;
      return end;
    }
    if (p.other(body)) {  //  ?[^\s\p{L}\p{N}]+
      std::size_t end = body;
      while (p.other(end)) ++end;
      return end;
    }
    std::size_t spaces = 0;
    while (p.space(pos + spaces)) ++spaces;
    // \s+(?!\S): leave the last space to lead the next word, unless the piece ends here.
    if (spaces > 1 && pos + spaces < p.end) return pos + spaces - 1;
    if (spaces > 0) return pos + spaces;  // \s+
    return pos + 1;                       // nothing matches: the code point alone
  }

  // llama.cpp's unicode_regex_split_custom_llama3, with digit groups of `max_digits` (3 for
  // Llama 3; 1 for Qwen2, whose regex llama.cpp runs through std::regex with the same result).
  // Emits the words starting at pos through `emit` and returns where it stopped.
  template <class Emit>
  static std::size_t llama3_word(const Piece& p, std::size_t pos, std::size_t max_digits,
                                 Emit&& emit) {
    const char32_t c = p.cp(pos);
    if (const std::size_t n = contraction(p, pos, true)) return emit(pos + n);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == U'\r' || c == U'\n' || p.number(pos)) && (p.letter(pos) || p.letter(pos + 1))) {
      std::size_t end = pos + 1;
      while (p.letter(end)) ++end;
      return emit(end);
    }
    // \p{N}{1,max_digits}, repeatedly
    if (p.number(pos)) {
      std::size_t end = pos;
      std::size_t group_start = pos;
      while (p.number(end)) {
        ++end;
        if (end - group_start >= max_digits) {
          emit(end);
          group_start = end;
        }
      }
      return emit(end);
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*   (a lone trailing ' ' also lands here, as in llama.cpp)
    const std::size_t body = pos + (c == U' ' ? 1 : 0);
    const auto f2 = p.flags(body);
    if (!(f2.is_whitespace() || f2.is_letter() || f2.is_number())) {
      std::size_t end = body;
      while (p.other(end)) ++end;
      while (p.cp(end) == U'\r' || p.cp(end) == U'\n') ++end;
      return emit(end);
    }
    std::size_t spaces = 0;
    std::size_t after_last_newline = 0;
    while (p.space(pos + spaces)) {
      const char32_t s = p.cp(pos + spaces);
      if (s == U'\r' || s == U'\n') after_last_newline = pos + spaces + 1;
      ++spaces;
    }
    if (after_last_newline > 0) return emit(after_last_newline);            // \s*[\r\n]+
    if (spaces > 1 && pos + spaces < p.end) return emit(pos + spaces - 1);  // \s+(?!\S)
    if (spaces > 0) return emit(pos + spaces);                              // \s+
    return emit(pos + 1);
  }

  // Length of a match of a simple rule starting exactly at pos, or 0.
  static std::size_t match_at(SplitRule rule, const Piece& p, std::size_t pos) {
    const auto run = [&](std::size_t from, auto&& in_class) {
      std::size_t end = from;
      while (end < p.end && in_class(end)) ++end;
      return end;
    };
    const auto punct_or = [&](std::u32string_view extra) {
      return [&p, extra](std::size_t at) {
        return p.punct(at) || extra.find(p.cp(at)) != std::u32string_view::npos;
      };
    };
    switch (rule) {
      case SplitRule::number: return p.number(pos) ? 1 : 0;
      case SplitRule::number_run:
        return run(pos, [&](std::size_t at) { return p.number(at); }) - pos;
      case SplitRule::ascii_digits3: {
        const auto digit = [&](std::size_t at) { return p.cp(at) >= U'0' && p.cp(at) <= U'9'; };
        return digit(pos) && digit(pos + 1) && digit(pos + 2) ? 3 : 0;
      }
      case SplitRule::punct_run: return run(pos, punct_or(U"$+<=>^~|")) - pos;
      case SplitRule::punct_run_tick: return run(pos, punct_or(U"$+<=>^~|`")) - pos;
      case SplitRule::line_break: return p.cp(pos) == U'\r' || p.cp(pos) == U'\n' ? 1 : 0;
      case SplitRule::space_letters:
      case SplitRule::space_punct: {
        // \s?X+: the optional space only counts when an X follows it (regex backtracking).
        const auto in_class = [&](std::size_t at) {
          return rule == SplitRule::space_letters ? p.letter(at) : p.punct(at);
        };
        const std::size_t body = p.space(pos) && in_class(pos + 1) ? pos + 1 : pos;
        const std::size_t end = run(body, in_class);
        return end > body ? end - pos : 0;
      }
      case SplitRule::cjk_run: {
        // llama.cpp matches this regex on code points in which non-ASCII whitespace (U+3000
        // lies inside the second range) was replaced by \v, so whitespace never matches.
        const auto cjk = [&](std::size_t at) {
          const char32_t c = p.cp(at);
          const bool in_range = (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) ||
                                (c >= 0xAC00 && c <= 0xD7FF);
          return in_range && !p.space(at);
        };
        return run(pos, cjk) - pos;
      }
      default: return 0;
    }
  }

  static std::vector<std::size_t> apply(SplitRule rule, const std::vector<char32_t>& cps,
                                        const std::vector<unicode::CodepointFlags>& flags,
                                        const std::vector<std::size_t>& pieces) {
    std::vector<std::size_t> out;
    out.reserve(pieces.size() * 2);
    std::size_t begin = 0;
    for (std::size_t length : pieces) {
      const Piece p{cps, flags, begin, begin + length};
      begin += length;
      std::size_t emitted = p.begin;
      const auto emit = [&](std::size_t end) -> std::size_t {
        if (end > emitted) out.push_back(end - emitted);
        emitted = end;
        return end;
      };
      if (rule == SplitRule::gpt2) {
        for (std::size_t pos = p.begin; pos < p.end;) pos = emit(gpt2_word_end(p, pos));
      } else if (rule == SplitRule::llama3 || rule == SplitRule::qwen2) {
        const std::size_t max_digits = rule == SplitRule::llama3 ? 3 : 1;
        for (std::size_t pos = p.begin; pos < p.end;) pos = llama3_word(p, pos, max_digits, emit);
      } else {
        // Successive leftmost matches, like std::regex_iterator; the text between matches
        // becomes a piece of its own.
        for (std::size_t pos = p.begin; pos < p.end;) {
          const std::size_t n = match_at(rule, p, pos);
          if (n == 0) {
            ++pos;
            continue;
          }
          emit(pos);
          pos = emit(pos + n);
        }
        emit(p.end);
      }
    }
    return out;
  }

  std::string name_;
  std::vector<SplitRule> rules_;
  bool ignore_merges_ = false;
};

}  // namespace hllm::tokenizer
