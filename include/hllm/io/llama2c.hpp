#pragma once
// llama2.c checkpoints (Karpathy's run.c / export.py) and its tokenizer.bin.
//
// Two float32 layouts, both little-endian:
//  - legacy (export.py legacy_export, what run.c reads): 7 int32 (dim, hidden_dim, n_layers,
//    n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means the classifier is
//    not shared with the embedding), then token_embedding [vocab][dim], rms_att [L][dim],
//    wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim],
//    rms_ffn [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim],
//    rms_final [dim], freq_cis_real and freq_cis_imag [seq_len][head_size/2] (skipped: we
//    compute our own), then wcls [vocab][dim] when not shared.
//  - version 1 (export.py version1_export): u32 magic "ak42" (0x616b3432), int32 version = 1,
//    the same 7 int32 (vocab_size positive), u8 shared_classifier, zero padding to 256 bytes,
//    then rms_att [L][dim], rms_ffn [L][dim], rms_final [dim], token_embedding, wq, wk, wv, wo,
//    w1, w2, w3 (shapes as above), wcls if not shared. (Version 2 is int8-quantized: refused.)
//
// run.c rotates the pairs (i, i+1) of q and k as they are stored, so the weights are used in
// place with RopeLayout::interleaved and theta 10000; RMSNorm eps is 1e-5. w1 is the gate, w3
// the up projection, w2 the down projection. Every size is checked against the file with
// overflow-safe arithmetic before anything is read.

#include <bit>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/io/mapped_file.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/finite_check.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/nn/rope.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm {

struct Llama2cModel {
  std::shared_ptr<const io::MappedFile> file;  // also held by weights.storage
  int version = 0;                             // 0: legacy, 1: "ak42" version 1
  ModelConfig config;
  ModelWeights weights;
};

namespace llama2c {

inline constexpr std::uint32_t kMagic = 0x616b3432;  // "ak42" as a little-endian u32
inline constexpr std::uint64_t kV1HeaderBytes = 256;

namespace detail {

inline std::uint32_t load_u32_le(const std::byte* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
inline std::int32_t load_i32_le(const std::byte* p) noexcept {
  return std::bit_cast<std::int32_t>(load_u32_le(p));
}

// Products of validated dimensions; a product that would pass 2^62 is a format error.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& path,
                                 const std::string& field) {
  constexpr std::uint64_t limit = std::uint64_t{1} << 62;
  if (a != 0 && b > limit / a) throw Error(ErrorKind::format, "size overflows", path, field);
  return a * b;
}

struct Header {
  std::int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;
  std::uint64_t params_offset;  // where the 7 int32 start: error offsets
  std::uint64_t data_offset;    // where the first tensor starts
  int version;
};

inline Header read_header(const io::MappedFile& f) {
  const std::string& path = f.path();
  const std::byte* p = f.data();
  const std::uint64_t size = f.size();
  Header h{};
  if (size >= 8 && load_u32_le(p) == kMagic) {
    const std::int32_t version = load_i32_le(p + 4);
    if (version == 2)
      throw Error(ErrorKind::unsupported,
                  "version 2 (int8-quantized) checkpoints are not supported", path, "version", 4);
    if (version != 1)
      throw Error(ErrorKind::format, "unknown version " + std::to_string(version), path, "version",
                  4);
    if (size < kV1HeaderBytes)
      throw Error(
          ErrorKind::format,
          "truncated: the 256-byte header needs 256 bytes, the file has " + std::to_string(size),
          path, "header", 0);
    h.version = 1;
    h.params_offset = 8;
    h.data_offset = kV1HeaderBytes;
    const std::byte flag = p[8 + 7 * 4];
    if (flag != std::byte{0} && flag != std::byte{1})
      throw Error(ErrorKind::format, "shared_classifier must be 0 or 1", path, "shared_classifier",
                  8 + 7 * 4);
    h.shared_classifier = flag == std::byte{1};
  } else {
    if (size < 7 * 4)
      throw Error(
          ErrorKind::format,
          "truncated: the 28-byte header needs 28 bytes, the file has " + std::to_string(size),
          path, "header", 0);
    h.version = 0;
    h.params_offset = 0;
    h.data_offset = 7 * 4;
  }
  std::int32_t* fields[] = {&h.dim,        &h.hidden_dim, &h.n_layers, &h.n_heads,
                            &h.n_kv_heads, &h.vocab_size, &h.seq_len};
  for (int i = 0; i < 7; ++i) *fields[i] = load_i32_le(p + h.params_offset + 4 * i);
  if (h.version == 0) {
    h.shared_classifier = h.vocab_size > 0;
    if (h.vocab_size < 0 && h.vocab_size != std::numeric_limits<std::int32_t>::min())
      h.vocab_size = -h.vocab_size;
  }
  const char* names[] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                         "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    // 1<<24 bounds every dimension far above any real model, as ModelConfig does.
    if (*fields[i] <= 0 || *fields[i] > (1 << 24))
      throw Error(ErrorKind::format,
                  std::string(names[i]) + " = " + std::to_string(*fields[i]) +
                      " (must be in [1, 16777216])",
                  path, names[i], h.params_offset + 4 * static_cast<std::uint64_t>(i));
  }
  if (h.dim % h.n_heads != 0)
    throw Error(ErrorKind::format,
                "n_heads (" + std::to_string(h.n_heads) + ") does not divide dim (" +
                    std::to_string(h.dim) + ")",
                path, "n_heads", h.params_offset + 12);
  if (h.n_heads % h.n_kv_heads != 0)
    throw Error(ErrorKind::format,
                "n_kv_heads (" + std::to_string(h.n_kv_heads) + ") does not divide n_heads (" +
                    std::to_string(h.n_heads) + ")",
                path, "n_kv_heads", h.params_offset + 16);
  if ((h.dim / h.n_heads) % 2 != 0)
    throw Error(ErrorKind::format, "head size dim/n_heads must be even for RoPE", path, "n_heads",
                h.params_offset + 12);
  return h;
}

}  // namespace detail

// Parses a checkpoint already in memory (or mapped); `file` stays alive through the weights.
inline Llama2cModel load_model(std::shared_ptr<const io::MappedFile> file,
                               const LoadOptions& options = {}) {
  if constexpr (std::endian::native != std::endian::little)
    throw Error(ErrorKind::unsupported, "llama2.c checkpoints are little-endian; this host is not",
                file->path());
  const std::string& path = file->path();
  const detail::Header h = detail::read_header(*file);

  ModelConfig c;
  c.name = "llama2.c";
  c.vocab_size = h.vocab_size;
  c.dim = h.dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.ffn_dim = h.hidden_dim;
  c.context_length = h.seq_len;
  c.rms_eps = 1e-5f;
  c.rope.layout = RopeLayout::interleaved;  // run.c rotates (i, i+1) of q/k as stored
  c.rope.theta = 10000.0f;
  c.tied_embeddings = h.shared_classifier;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::format, "inconsistent header: " + e.message(), path, e.field(),
                h.params_offset);
  }

  const std::uint64_t dim = static_cast<std::uint64_t>(h.dim),
                      hidden = static_cast<std::uint64_t>(h.hidden_dim),
                      layers = static_cast<std::uint64_t>(h.n_layers),
                      vocab = static_cast<std::uint64_t>(h.vocab_size),
                      head = dim / static_cast<std::uint64_t>(h.n_heads),
                      kv = head * static_cast<std::uint64_t>(h.n_kv_heads),
                      seq = static_cast<std::uint64_t>(h.seq_len);

  // One region per llama2.c array: [count][rows][cols] float32, placed in file order.
  struct Region {
    const char* name;
    std::uint64_t count, rows, cols;
    std::uint64_t offset = 0;
  };
  std::vector<Region> regions;
  auto add = [&](const char* name, std::uint64_t count, std::uint64_t rows, std::uint64_t cols) {
    regions.push_back({name, count, rows, cols});
  };
  auto add_layers = [&] {
    add("wq", layers, dim, dim);
    add("wk", layers, kv, dim);
    add("wv", layers, kv, dim);
    add("wo", layers, dim, dim);
  };
  auto add_ffn = [&] {
    add("w1", layers, hidden, dim);
    add("w2", layers, dim, hidden);
    add("w3", layers, hidden, dim);
  };
  if (h.version == 0) {
    add("token_embedding_table", 1, vocab, dim);
    add("rms_att_weight", layers, 1, dim);
    add_layers();
    add("rms_ffn_weight", layers, 1, dim);
    add_ffn();
    add("rms_final_weight", 1, 1, dim);
    add("freq_cis_real", 1, seq, head / 2);
    add("freq_cis_imag", 1, seq, head / 2);
  } else {
    add("rms_att_weight", layers, 1, dim);
    add("rms_ffn_weight", layers, 1, dim);
    add("rms_final_weight", 1, 1, dim);
    add("token_embedding_table", 1, vocab, dim);
    add_layers();
    add_ffn();
  }
  if (!h.shared_classifier) add("wcls", 1, vocab, dim);

  // Sizes first (an overflow names its tensor), then placement against the file size.
  std::vector<std::uint64_t> region_bytes;
  for (const Region& r : regions)
    region_bytes.push_back(
        detail::checked_mul(detail::checked_mul(detail::checked_mul(r.count, r.rows, path, r.name),
                                                r.cols, path, r.name),
                            4, path, r.name));
  std::uint64_t offset = h.data_offset;
  const std::uint64_t size = file->size();
  std::map<std::string, const Region*> by_name;
  for (std::size_t ri = 0; ri < regions.size(); ++ri) {
    Region& r = regions[ri];
    const std::uint64_t bytes = region_bytes[ri];
    if (bytes > size - offset)  // offset <= size holds by induction
      throw Error(ErrorKind::format,
                  "truncated: tensor needs " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(offset) + " but the file ends at " + std::to_string(size),
                  path, r.name, offset);
    r.offset = offset;
    offset += bytes;
    by_name.emplace(r.name, &r);
  }
  if (offset != size)
    throw Error(ErrorKind::format,
                std::to_string(size - offset) +
                    " unexpected bytes after the last tensor "
                    "(wrong header, or a shared-classifier mix-up?)",
                path, "file_size", offset);
  if (reinterpret_cast<std::uintptr_t>(file->data()) % alignof(float) != 0)
    throw Error(ErrorKind::unsupported, "checkpoint data is not aligned in memory", path);

  // Slice `region` into its index'th [rows][cols] matrix.
  auto slice = [&](const char* region, std::uint64_t index, const TensorSpec& spec) {
    const Region& r = *by_name.at(region);
    const std::uint64_t at = r.offset + index * r.rows * r.cols * 4;
    WeightTensor w{DType::f32, file->data() + at, spec.rows, spec.cols, spec.name};
    if (options.check_finite)  // named as llama2.c names it: "wq[3]" is layer 3's wq
      check_finite(w, path, r.count > 1 ? region + ("[" + std::to_string(index) + "]") : region,
                   at);
    return w;
  };
  Llama2cModel m;
  m.version = h.version;
  m.config = c;
  const std::uint64_t per_layer = 9;
  std::uint64_t i = 0;
  m.weights = assemble_weights(c, [&](const TensorSpec& spec) {
    const std::uint64_t k = i++;
    if (k == 0) return slice("token_embedding_table", 0, spec);
    const std::uint64_t l = (k - 1) / per_layer;
    if (l < layers) {
      static constexpr const char* kOrder[] = {
          "rms_att_weight", "wq", "wk", "wv", "wo",
          "rms_ffn_weight", "w1", "w3", "w2"};  // gate, up, down
      return slice(kOrder[(k - 1) % per_layer], l, spec);
    }
    if (k == 1 + layers * per_layer) return slice("rms_final_weight", 0, spec);
    return slice("wcls", 0, spec);
  });
  m.weights.storage = file;
  m.file = std::move(file);
  return m;
}

// Maps `path` and builds a model whose weights point into the mapping.
inline Llama2cModel load_model(const std::string& path, const LoadOptions& options = {}) {
  return load_model(std::make_shared<const io::MappedFile>(io::MappedFile::open(path)), options);
}

// tokenizer.bin (llama2.c's tokenizer.py export): u32 max_token_length, then per token f32
// score, u32 length, bytes. Pieces were written with SentencePiece's '▁' as ' ' and BOS/EOS as
// "\n<s>\n" / "\n</s>\n"; both are undone so the result is the SentencePiece vocabulary again.
// `vocab_size` (the checkpoint's) is how many tokens to read; unset, read to the end.
inline Vocabulary load_vocabulary(const io::MappedFile& f,
                                  std::optional<std::size_t> vocab_size = {}) {
  const std::string& path = f.path();
  const std::byte* p = f.data();
  const std::uint64_t size = f.size();
  if (size < 4)
    throw Error(ErrorKind::format, "truncated: no max_token_length", path, "max_token_length", 0);
  const std::int32_t max_length = detail::load_i32_le(p);
  if (max_length < 0 || max_length > (1 << 20))
    throw Error(ErrorKind::format,
                "max_token_length " + std::to_string(max_length) + " outside [0, 1048576]", path,
                "max_token_length", 0);
  if (vocab_size && (*vocab_size == 0 || *vocab_size > (std::size_t{1} << 24)))
    throw Error(ErrorKind::invalid_argument,
                "vocab_size " + std::to_string(*vocab_size) + " outside [1, 16777216]", path);

  Vocabulary v;
  v.model = "llama";
  std::uint64_t pos = 4;
  while (vocab_size ? v.tokens.size() < *vocab_size : pos < size) {
    const std::string field = "token[" + std::to_string(v.tokens.size()) + "]";
    if (size - pos < 8)
      throw Error(ErrorKind::format, "truncated: a token needs 8 header bytes", path, field, pos);
    float score = 0.0f;
    std::memcpy(&score, p + pos, 4);
    const std::int32_t length = detail::load_i32_le(p + pos + 4);
    if (!std::isfinite(score))
      throw Error(ErrorKind::format, "score is not finite", path, field, pos);
    if (length < 0 || length > max_length)
      throw Error(ErrorKind::format,
                  "length " + std::to_string(length) +
                      " outside [0, max_token_length = " + std::to_string(max_length) + "]",
                  path, field, pos + 4);
    pos += 8;
    if (static_cast<std::uint64_t>(length) > size - pos)
      throw Error(ErrorKind::format, "truncated: token bytes run past the end of the file", path,
                  field, pos);
    std::string piece(reinterpret_cast<const char*>(p + pos), static_cast<std::size_t>(length));
    pos += static_cast<std::uint64_t>(length);
    const std::size_t id = v.tokens.size();
    std::int32_t type = static_cast<std::int32_t>(TokenType::normal);
    if (id == 1 && piece == "\n<s>\n") {
      piece = "<s>";
      type = static_cast<std::int32_t>(TokenType::control);
    } else if (id == 2 && piece == "\n</s>\n") {
      piece = "</s>";
      type = static_cast<std::int32_t>(TokenType::control);
    } else if (id == 0 && piece == "<unk>") {
      type = static_cast<std::int32_t>(TokenType::unknown);
    } else if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
               std::isxdigit(static_cast<unsigned char>(piece[3])) &&
               std::isxdigit(static_cast<unsigned char>(piece[4]))) {
      type = static_cast<std::int32_t>(TokenType::byte);
    } else {
      std::string escaped;  // ' ' back to U+2581 LOWER ONE EIGHTH BLOCK
      for (char ch : piece) escaped += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
      piece = std::move(escaped);
    }
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  }
  if (pos != size)
    throw Error(ErrorKind::format,
                std::to_string(size - pos) + " unexpected bytes after token " +
                    std::to_string(v.tokens.size() - 1),
                path, "file_size", pos);
  if (v.tokens.empty()) throw Error(ErrorKind::format, "no tokens", path, "tokens", 4);
  const bool specials = v.tokens.size() > 2 && v.type_of(1) == TokenType::control &&
                        v.type_of(2) == TokenType::control;
  v.unk_id = v.type_of(0) == TokenType::unknown ? 0 : -1;
  v.bos_id = specials ? 1 : -1;
  v.eos_id = specials ? 2 : -1;
  v.add_bos = specials;
  v.add_space_prefix = true;
  try {
    v.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::format, e.message(), path, e.field());
  }
  return v;
}

inline Vocabulary load_vocabulary(const std::string& path,
                                  std::optional<std::size_t> vocab_size = {}) {
  return load_vocabulary(io::MappedFile::open(path), vocab_size);
}

}  // namespace llama2c

// Loads a llama2.c checkpoint (legacy or version 1) from `path`.
inline Llama2cModel load_llama2c_model(const std::string& path, const LoadOptions& options = {}) {
  return llama2c::load_model(path, options);
}

}  // namespace hllm
