#pragma once
// vocabulary_from_gguf: fills a Vocabulary from a GGUF file's tokenizer.ggml.* metadata, with
// llama.cpp's defaults for whatever is absent. The only place the tokenizer layer touches GGUF.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/tokenizer/pretokenizer.hpp"
#include "hllm/tokenizer/unicode.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm {

// llama.cpp's special ids and flags for a SentencePiece ("llama") vocabulary: <unk> 0, <s> 1,
// </s> 2, BOS added, a space prefixed.
inline void set_llama_spm_defaults(Vocabulary& v) {
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = true;
}

struct VocabularyOptions {
  // The pre-tokenizer to use when the file names one hllm does not know ("default",
  // "llama-bpe", ...). Empty (the default): such a file is refused, since splitting its text
  // with the wrong rules would silently change every token.
  std::string pretokenizer_fallback;
};

namespace detail {

// The checks of what a vocabulary's parts mean, beyond their syntax: the model's own tokens are
// there, types are real types, merges join real tokens. A file that fails one would tokenize
// into garbage (or nothing) without an error anywhere else.
inline void check_vocabulary_content(const Vocabulary& v, const gguf::File& file) {
  const auto fail = [&](const std::string& key, const std::string& message) {
    throw Error(ErrorKind::format, message, file.path(), "tokenizer.ggml." + key);
  };
  std::unordered_set<std::string_view> tokens;
  tokens.reserve(v.tokens.size());
  for (const std::string& t : v.tokens) tokens.insert(t);

  // Only control and unused tokens may have no text: any other empty token would decode to
  // nothing and could never be produced by encoding.
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType type = v.type_of(i);
    if (v.tokens[i].empty() && type != TokenType::control && type != TokenType::unused)
      fail("tokens", "token " + std::to_string(i) +
                         " is empty (only control and unused tokens "
                         "may be)");
  }

  if (v.model == "llama") {
    // SentencePiece with byte fallback: every byte that no piece covers becomes <0xXX>.
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (tokens.find(name) == tokens.end())
        fail("model", std::string("a SentencePiece ('llama') vocabulary needs the 256 byte "
                                  "tokens <0x00>..<0xFF>; this one has no ") +
                          name + " (a byte-level BPE vocabulary is model 'gpt2')");
    }
  } else if (v.model == "gpt2") {
    // Byte-level BPE: the stand-in characters of the bytes of ordinary text (tab, line feed,
    // carriage return, printable ASCII) are tokens of their own, or the vocabulary is not a
    // byte-level one (a SentencePiece vocabulary has no "\u0120" for the space). Other bytes may
    // be absent: real vocabularies drop rare ones (SmolLM2's lacks 0x04, 0x06, 0x13, 0x14, 0x16,
    // 0x1D, 0xF1 and 0xF2; GPT-NeoX's the bytes UTF-8 never holds), and encoding drops a byte
    // with no token, as llama.cpp does.
    const unicode::ByteMapping& bytes = unicode::ByteMapping::instance();
    for (int b = 0; b < 0x7F; ++b) {
      if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') continue;
      const std::string& text = bytes.text_of(static_cast<unsigned char>(b));
      if (tokens.find(text) == tokens.end())
        fail("model",
             "a byte-level BPE ('gpt2') vocabulary needs a token for each byte of "
             "ordinary text (tab, newlines, printable ASCII); this one has none for byte " +
                 std::to_string(b) + " " + gguf::quote(text) +
                 " (a SentencePiece vocabulary is model 'llama')");
    }
    for (std::size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& merge = v.merges[i];
      const std::size_t space = merge.find(' ', 1);
      const std::string where = "merge " + std::to_string(i) + " " + gguf::quote(merge);
      if (space == std::string::npos || space + 1 >= merge.size() ||
          merge.find(' ', space + 1) != std::string::npos)
        fail("merges", where + " is not two tokens separated by one space");
      for (std::string_view part :
           {std::string_view(merge).substr(0, space), std::string_view(merge).substr(space + 1)})
        if (tokens.find(part) == tokens.end())
          fail("merges", where + ": " + gguf::quote(part) + " is not a token");
    }
  }
}

}  // namespace detail

// Reads tokenizer.ggml.* and checks it for consistency: the checks of Vocabulary::validate, the
// content checks above, the size against the model's, and a pre-tokenizer hllm knows.
inline Vocabulary vocabulary_from_gguf(const gguf::File& file,
                                       const VocabularyOptions& options = {}) {
  const auto fail = [&](const std::string& key, const std::string& message) {
    throw Error(ErrorKind::format, message, file.path(), key);
  };
  const std::string prefix = "tokenizer.ggml.";
  const auto key = [&](std::string_view name) { return prefix + std::string(name); };

  Vocabulary v;
  if (!file.has(key("model"))) fail(key("model"), "the file has no tokenizer");
  v.model = file.get_string(key("model"));
  v.pre = file.get_string_or(key("pre"), "");
  if (!file.has(key("tokens"))) fail(key("tokens"), "the file has no token list");
  v.tokens = file.get_string_array(key("tokens"));

  if (file.has(key("scores"))) {
    // llama.cpp accepts integer scores as well as floats.
    const gguf::ValueType type = file.array_type(key("scores"));
    if (type == gguf::ValueType::f32 || type == gguf::ValueType::f64) {
      v.scores = file.get_float_array(key("scores"));
    } else {
      for (std::int64_t s : file.get_int_array(key("scores")))
        v.scores.push_back(static_cast<float>(s));
    }
    // llama.cpp tolerates longer arrays and reads one entry per token; so do we.
    if (v.scores.size() < v.tokens.size()) fail(key("scores"), "fewer scores than tokens");
    v.scores.resize(v.tokens.size());
  }
  if (file.has(key("token_type"))) {
    const std::vector<std::int64_t> types = file.get_int_array(key("token_type"));
    if (types.size() < v.tokens.size()) fail(key("token_type"), "fewer token types than tokens");
    v.token_types.reserve(v.tokens.size());
    for (std::size_t i = 0; i < v.tokens.size(); ++i) {
      // llama.cpp's llama_token_type, normal (1) to byte (6); converters never write 0, and any
      // other value would make the token unreachable or invisible.
      const std::int64_t t = types[i];
      if (t < 1 || t > 6)
        fail(key("token_type"), "token " + std::to_string(i) + " " + gguf::quote(v.tokens[i]) +
                                    " has type " + std::to_string(t) +
                                    ", outside 1 (normal) to 6 (byte)");
      v.token_types.push_back(static_cast<std::int32_t>(t));
    }
  }
  if (file.has(key("merges"))) v.merges = file.get_string_array(key("merges"));
  // What the parts mean, before the model's defaults: a vocabulary of the other model's kind is
  // named as such, not as the first part it lacks.
  detail::check_vocabulary_content(v, file);

  // llama.cpp's defaults per model (llama_vocab::impl::load).
  const bool is_bpe = v.model == "gpt2";
  if (v.model == "llama") {
    set_llama_spm_defaults(v);
  } else if (is_bpe) {
    if (v.merges.empty()) fail(key("merges"), "a byte-level BPE vocabulary needs merges");
    v.bos_id = 11;
    v.eos_id = 11;
    v.add_space_prefix = false;
    const std::string& p = v.pre;
    v.add_bos = p == "llama3" || p == "llama-v3" || p == "llama-bpe" || p == "falcon3" ||
                p == "pixtral" || p == "tekken" || p == "chameleon";
    v.add_eos = false;
  } else {
    throw Error(ErrorKind::unsupported, "tokenizer model '" + v.model + "'", file.path(),
                key("model"));
  }
  // A default id that the vocabulary is too small for is dropped, as llama.cpp drops it.
  const auto token_count = static_cast<std::int64_t>(v.tokens.size());
  for (std::int32_t* id : {&v.bos_id, &v.eos_id, &v.unk_id, &v.pad_id})
    if (*id >= token_count) *id = -1;

  // Ids stored in the file must name a token.
  const auto read_id = [&](std::string_view name, std::int32_t& id) {
    if (!file.has(key(name))) return;
    const std::int64_t value = file.get_int(key(name));
    if (value < 0 || value >= token_count)
      fail(key(name), "token id " + std::to_string(value) + " is outside the vocabulary of " +
                          std::to_string(token_count) + " tokens");
    id = static_cast<std::int32_t>(value);
  };
  read_id("bos_token_id", v.bos_id);
  read_id("eos_token_id", v.eos_id);
  read_id("unknown_token_id", v.unk_id);
  read_id("padding_token_id", v.pad_id);
  v.add_bos = file.get_bool_or(key("add_bos_token"), v.add_bos);
  v.add_eos = file.get_bool_or(key("add_eos_token"), v.add_eos);
  v.add_space_prefix = file.get_bool_or(key("add_space_prefix"), v.add_space_prefix);

  try {
    v.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::format, e.message(), file.path(), key(e.field()));
  }
  gguf::check_token_count(file);
  if (is_bpe) {
    // llama.cpp reads a missing key as "default" (files older than the key); an empty or unknown
    // name is refused, unless the caller names a fallback.
    if (file.has(key("pre")) && v.pre.empty()) {
      if (options.pretokenizer_fallback.empty())
        fail(key("pre"), "the pre-tokenizer name is empty; name a fallback to use this file");
      v.pre = options.pretokenizer_fallback;
    }
    try {
      (void)tokenizer::PreTokenizer::from_name(v.pre);
    } catch (const Error&) {
      if (options.pretokenizer_fallback.empty())
        throw Error(ErrorKind::unsupported,
                    "unknown pre-tokenizer '" + v.pre +
                        "': its splitting rules are not known to hllm; name a fallback "
                        "pre-tokenizer (e.g. --pre-tokenizer default) to use this file anyway",
                    file.path(), key("pre"));
      v.pre = options.pretokenizer_fallback;
      (void)tokenizer::PreTokenizer::from_name(v.pre);  // the fallback must be known itself
    }
  }
  return v;
}

// The inverse: writes a vocabulary as tokenizer.ggml.* keys, the way llama.cpp's converters do,
// so vocabulary_from_gguf (and llama.cpp) read back the same vocabulary.
inline void write_vocabulary(gguf::Writer& out, const Vocabulary& v) {
  v.validate();
  out.set("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) out.set("tokenizer.ggml.pre", v.pre);
  out.set("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) out.set("tokenizer.ggml.scores", v.scores);
  if (!v.token_types.empty()) out.set("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) out.set("tokenizer.ggml.merges", v.merges);
  const auto id = [&](const char* key, std::int32_t value) {
    if (value >= 0) out.set(key, static_cast<std::uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.unknown_token_id", v.unk_id);
  id("tokenizer.ggml.padding_token_id", v.pad_id);
  out.set("tokenizer.ggml.add_bos_token", v.add_bos);
  out.set("tokenizer.ggml.add_eos_token", v.add_eos);
  if (v.model == "llama") out.set("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

}  // namespace hllm
