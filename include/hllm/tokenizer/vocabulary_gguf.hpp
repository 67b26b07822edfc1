#pragma once
// vocabulary_from_gguf: fills a Vocabulary from a GGUF file's tokenizer.ggml.* metadata, with
// llama.cpp's defaults for whatever is absent. The only place the tokenizer layer touches GGUF.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
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

inline Vocabulary vocabulary_from_gguf(const gguf::File& file) {
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
      // Values outside 0..6 mean "undefined" to llama.cpp; keep that meaning.
      const std::int64_t t = types[i];
      v.token_types.push_back(t >= 0 && t <= 6 ? static_cast<std::int32_t>(t) : 0);
    }
  }
  if (file.has(key("merges"))) v.merges = file.get_string_array(key("merges"));

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

  v.validate();
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
