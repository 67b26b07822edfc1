// Files that parse but lie. Each case rewrites a real file (the bundled model, the shared
// fixtures, the shared vocab-only files) with one lie: a block count, a tokenizer model, token
// types, merges, a token count, an empty token, a pre-tokenizer, a retyped, resized or moved
// tensor, a missing or extra tensor, a vocabulary size. The file is written to disk and loaded the
// way programs load it; the load must fail with an hllm::Error of the right kind naming the file
// and exactly the key or tensor that lies. A sample also goes through hllm-generate, which must
// exit with status 1, print nothing on stdout and name the field on stderr. The unmodified files
// (and their rewritten copies) must load, so the test also fails if the checks refuse honest files.
// HLLM_LYING_VERBOSE=1 in the environment prints every refusal's message.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/tokenizer/unicode.hpp"
#include "hllm/tokenizer/vocabulary.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
namespace gguf = hllm::gguf;
using hllm::DType;
using hllm::ErrorKind;

const std::string kBundled = HLLM_MODELS_DIR "/kjv-llama.gguf";
const std::string kShared = HLLM_SHARED_DIR;
const std::vector<std::string> kFixtureTypes = {"f32",  "f16",    "bf16", "q8_0",
                                                "q4_0", "q4_k_m", "q6_k"};

#define SKIP_WITHOUT_SHARED()                                                                 \
  if (!fs::exists(kShared + "/fixtures/fx-gqa-f32.gguf") ||                                   \
      !fs::exists(kShared + "/tokenizers/ggml-vocab-mpt.gguf"))                               \
  GTEST_SKIP() << "the shared fixtures and vocab-only files are not in " << kShared           \
               << " (they live in ../shared beside the clone; CI always has them): the lies " \
                  "written from them are not checked"

// ---------------------------------------------------------------------------------------------
// Files on disk.

// A directory of its own under the temp directory, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hllm-lying-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---------------------------------------------------------------------------------------------
// The rewriter: a file re-emitted through gguf::Writer, every key copied with its own type and
// every tensor's bytes, with hooks to change keys and tensors on the way.

// One key copied with its own type, bit for bit (the library's way: encoded_value/set_encoded);
// general.alignment through set_alignment, since the writer places the data by it.
void copy_value(const gguf::File& src, const std::string& key, gguf::Writer& out) {
  if (key == gguf::kAlignmentKey)
    out.set_alignment(static_cast<std::size_t>(src.get_int(key)));
  else
    out.set_encoded(key, src.encoded_value(key));
}

struct Edits {
  std::function<bool(const std::string& key)> drop_key;  // keys not copied
  std::function<void(gguf::Writer&)> set_keys;  // after the copy: replaces in place or appends
  std::set<std::string> drop_tensors;
  std::function<void(gguf::Writer&)> add_tensors;  // appended after the copied ones
};

// Writes `src` with `edits` to `path`. The tensors' bytes are borrowed from `src`'s mapping.
void rewrite(const gguf::File& src, const Edits& edits, const std::string& path) {
  gguf::Writer out;
  for (const std::string& key : src.keys())
    if (!edits.drop_key || !edits.drop_key(key)) copy_value(src, key, out);
  if (edits.set_keys) edits.set_keys(out);
  for (const gguf::TensorInfo& t : src.tensors())
    if (edits.drop_tensors.count(t.name) == 0)
      out.add_tensor(t.name, t.type, t.dims, std::span(t.data, t.size_bytes));
  if (edits.add_tensors) edits.add_tensors(out);
  out.write(path);
}

// Where tensor `name`'s index entry sits in a file's bytes: after the name come n_dims (u32),
// the dims (u64 each), the type id (u32) and the data offset (u64). Edits the writer would never
// produce (a type id, dims or an offset changed without the data) are made there, in place.
struct IndexEntry {
  std::size_t n_dims_at = 0;
  std::uint32_t n_dims = 0;
  std::size_t dims_at() const { return n_dims_at + 4; }
  std::size_t type_at() const { return dims_at() + 8 * n_dims; }
  std::size_t offset_at() const { return type_at() + 4; }
};

std::uint64_t load_le(std::span<const std::byte> bytes, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(bytes[at + i]) << (8 * i);
  return v;
}
void store_le(std::span<std::byte> bytes, std::size_t at, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) bytes[at + i] = std::byte((v >> (8 * i)) & 0xff);
}

IndexEntry find_index_entry(std::span<const std::byte> bytes, std::uint64_t header_end,
                            const std::string& name) {
  std::vector<std::byte> needle(8);
  store_le(needle, 0, name.size(), 8);
  for (char c : name) needle.push_back(static_cast<std::byte>(c));
  const auto header = bytes.subspan(0, static_cast<std::size_t>(header_end));
  // The last match: the tensor index follows the metadata, whose strings might hold the name.
  const auto it = std::find_end(header.begin(), header.end(), needle.begin(), needle.end());
  if (it == header.end()) throw std::logic_error("tensor " + name + " not in the header");
  IndexEntry e;
  e.n_dims_at = static_cast<std::size_t>(it - header.begin()) + needle.size();
  e.n_dims = static_cast<std::uint32_t>(load_le(bytes, e.n_dims_at, 4));
  return e;
}

// ---------------------------------------------------------------------------------------------
// Sources and lies.

struct Source {
  std::string label;  // names the case files and failure messages
  std::string path;
  std::shared_ptr<const gguf::File> file;
  bool vocab_only = false;  // no tensors: only vocabulary_from_gguf reads it
};

Source open_source(std::string label, const std::string& path, bool vocab_only = false) {
  return {std::move(label), path, std::make_shared<const gguf::File>(gguf::File::open(path)),
          vocab_only};
}

struct Lie {
  std::string lie_class;  // cases are counted per class
  std::string what;       // the lie in words, for failure messages
  std::string field;      // the key or tensor the error must name
  ErrorKind kind = ErrorKind::format;
  std::string mention;  // what the error's what() must also contain (may be empty)
  bool vocab_only = false;
  std::function<void(const std::string& path)> write;
};

// Loads `path` as the programs do: hllm-generate, hllm-chat and hllm-perplexity load the model,
// then the vocabulary from the same file; a vocab-only file has only the vocabulary.
void load_like_a_program(const std::string& path, bool vocab_only,
                         const hllm::VocabularyOptions& options = {}) {
  if (vocab_only) {
    (void)hllm::vocabulary_from_gguf(gguf::File::open(path), options);
    return;
  }
  const hllm::GgufModel m = hllm::load_gguf_model(path);
  if (m.file->has("tokenizer.ggml.model")) (void)hllm::vocabulary_from_gguf(*m.file, options);
}

// The tensor (index) bytes of `type` and `dims`, assuming dims[0] is a whole number of blocks.
std::uint64_t tensor_bytes(DType type, const std::vector<std::uint64_t>& dims) {
  hllm::DTypeInfo info{};
  hllm::dtype_info(type, info);
  std::uint64_t elements = 1;
  for (std::uint64_t d : dims) elements *= d;
  return elements / info.block_elements * info.block_bytes;
}

// The tensor the reader (or loader) must name once tensor `i` claims `type` and `dims` without
// its data; empty when no check can see the change (the same padded size and shape).
std::string named_when_changed(const gguf::File& f, std::size_t i, DType type,
                               const std::vector<std::uint64_t>& dims) {
  const gguf::TensorInfo& t = f.tensors()[i];
  hllm::DTypeInfo info{};
  hllm::dtype_info(type, info);
  if (dims[0] % info.block_elements != 0) return t.name;  // refused as it is parsed
  const std::uint64_t size = tensor_bytes(type, dims);
  const std::uint64_t data_size = f.bytes().size() - f.data_offset();
  if (t.offset + size > data_size) return t.name;  // runs past the end of the file
  const auto padded = [&](std::uint64_t n) {
    return (n + f.alignment() - 1) / f.alignment() * f.alignment();
  };
  if (padded(size) == padded(t.size_bytes))
    return dims != t.dims ? t.name : std::string();  // then only the model's shape check sees it
  if (i + 1 == f.tensors().size()) return t.name;    // bytes follow the last tensor
  return f.tensors()[i + 1].name;                    // whose offset no longer follows
}

// `count` indices spread over [0, n), the first and last included.
std::vector<std::size_t> spread(std::size_t n, std::size_t count) {
  std::set<std::size_t> picked;
  for (std::size_t k = 0; k < count && n > 0; ++k)
    picked.insert(count == 1 ? 0 : k * (n - 1) / (count - 1));
  return {picked.begin(), picked.end()};
}

// The lies written from one source. `breadth` scales how many positions, values and tensors
// each class tries (the bundled model gets more, each fixture fewer: the fixtures together are
// many more cases, of larger files).
class LieMaker {
 public:
  LieMaker(const Source& source, std::vector<Lie>& out, std::size_t breadth)
      : src_(source), file_(*source.file), out_(out), breadth_(breadth) {
    if (file_.has(kTokens)) tokens_ = file_.get_string_array(kTokens);
    if (file_.has(kScores)) scores_ = file_.get_float_array(kScores);
    if (file_.has(kTypes)) types_ = file_.get_int_array(kTypes);
    if (file_.has(kMerges)) merges_ = file_.get_string_array(kMerges);
    model_ = file_.get_string_or(kModel, "");
    arch_ = file_.get_string_or("general.architecture", "");
  }

  // Every class that applies to the source.
  void all() {
    if (!src_.vocab_only) {
      block_count();
      retyped();
      resized();
      moved();
      missing_tensor();
      extra_tensor();
    }
    vocab_size();
    tokenizer();
  }
  // The classes of the tokenizer's metadata only.
  void tokenizer() {
    tokenizer_model();
    token_type();
    token_count();
    empty_token();
    if (model_ == "gpt2") {
      merges();
      pre();
    }
  }

 private:
  static constexpr const char* kModel = "tokenizer.ggml.model";
  static constexpr const char* kPre = "tokenizer.ggml.pre";
  static constexpr const char* kTokens = "tokenizer.ggml.tokens";
  static constexpr const char* kScores = "tokenizer.ggml.scores";
  static constexpr const char* kTypes = "tokenizer.ggml.token_type";
  static constexpr const char* kMerges = "tokenizer.ggml.merges";

  void add(std::string lie_class, std::string what, std::string field, ErrorKind kind,
           std::string mention, std::function<void(const std::string&)> write) {
    out_.push_back({std::move(lie_class), src_.label + ": " + what, std::move(field), kind,
                    std::move(mention), src_.vocab_only, std::move(write)});
  }
  // A lie made by rewriting the file through the writer.
  void add_edit(std::string lie_class, std::string what, std::string field, ErrorKind kind,
                std::string mention, Edits edits) {
    add(std::move(lie_class), std::move(what), std::move(field), kind, std::move(mention),
        [file = src_.file, edits = std::move(edits)](const std::string& path) {
          rewrite(*file, edits, path);
        });
  }
  void add_keys(std::string lie_class, std::string what, std::string field, ErrorKind kind,
                std::string mention, std::function<void(gguf::Writer&)> set_keys) {
    Edits e;
    e.set_keys = std::move(set_keys);
    add_edit(std::move(lie_class), std::move(what), std::move(field), kind, std::move(mention),
             std::move(e));
  }
  // A lie made by editing the tensor index's bytes in place.
  void add_patch(std::string lie_class, std::string what, std::string field, std::string mention,
                 std::function<void(std::span<std::byte>)> patch) {
    add(std::move(lie_class), std::move(what), std::move(field), ErrorKind::format,
        std::move(mention), [file = src_.file, patch = std::move(patch)](const std::string& path) {
          std::vector<std::byte> bytes(file->bytes().begin(), file->bytes().end());
          patch(bytes);
          write_file(path, bytes);
        });
  }

  std::int64_t block_count_value() const { return file_.get_int("llama.block_count"); }

  // A block count smaller than the layers the file holds names the first tensor of the first
  // layer past it; a larger one the first tensor of the first layer the file lacks.
  void block_count() {
    const std::int64_t layers = block_count_value();
    const auto& tensors = file_.tensors();
    std::vector<std::int64_t> smaller = {layers - 1, 1};
    if (breadth_ > 1) smaller.push_back(layers / 2);
    for (std::int64_t n : std::set<std::int64_t>(smaller.begin(), smaller.end())) {
      std::string first;  // the first tensor, in index order, of a layer >= n
      for (const gguf::TensorInfo& t : tensors)
        if (first.empty() && hllm::detail::gguf_layer_of(t.name) >= n) first = t.name;
      add_keys("block_count",
               "llama.block_count " + std::to_string(n) + " of " + std::to_string(layers) +
                   " layers held",
               first, ErrorKind::format, "llama.block_count is " + std::to_string(n),
               [n](gguf::Writer& w) { w.set("llama.block_count", std::uint32_t(n)); });
    }
    // Zero: refused by the config check, which names the key it read.
    add_keys("block_count", "llama.block_count 0", "llama.block_count", ErrorKind::format,
             "n_layers = 0", [](gguf::Writer& w) { w.set("llama.block_count", std::uint32_t{0}); });
    std::vector<std::int64_t> larger = {layers + 1, 2 * layers, std::int64_t{1} << 24};
    if (breadth_ > 1) larger.push_back(999);
    for (std::int64_t n : larger)
      add_keys("block_count",
               "llama.block_count " + std::to_string(n) + " of " + std::to_string(layers) +
                   " layers held",
               "blk." + std::to_string(layers) + ".attn_norm.weight", ErrorKind::format,
               "the file holds tensors of " + std::to_string(layers) + " layers",
               [n](gguf::Writer& w) { w.set("llama.block_count", std::uint32_t(n)); });
    // The same lie made the other way: the key kept, the last layer's tensors left out.
    Edits e;
    const std::string last = "blk." + std::to_string(layers - 1) + ".";
    for (const gguf::TensorInfo& t : tensors)
      if (t.name.rfind(last, 0) == 0) e.drop_tensors.insert(t.name);
    add_edit("block_count", "the last layer's tensors left out", last + "attn_norm.weight",
             ErrorKind::format,
             "the file holds tensors of " + std::to_string(layers - 1) + " layers", e);
  }

  // "gpt2" on a SentencePiece vocabulary, "llama" on a byte-level BPE one, an unknown model.
  void tokenizer_model() {
    if (model_ == "llama") {
      // Without merges: the model is what lies (its byte alphabet is checked before the
      // merges a byte-level BPE vocabulary needs).
      add_keys("tokenizer_model", "model 'gpt2' on a SentencePiece vocabulary", kModel,
               ErrorKind::format, "byte-level BPE", [](gguf::Writer& w) { w.set(kModel, "gpt2"); });
      // With merges of real tokens, the byte tokens are missing.
      std::vector<std::string> merges;
      for (std::size_t i = 300; i + 1 < tokens_.size() && merges.size() < 8; i += 2)
        if (tokens_[i].find(' ') == std::string::npos &&
            tokens_[i + 1].find(' ') == std::string::npos && !tokens_[i].empty() &&
            !tokens_[i + 1].empty())
          merges.push_back(tokens_[i] + " " + tokens_[i + 1]);
      add_keys("tokenizer_model", "model 'gpt2' (and merges) on a SentencePiece vocabulary", kModel,
               ErrorKind::format, "byte-level BPE", [merges](gguf::Writer& w) {
                 w.set(kModel, "gpt2");
                 w.set(kMerges, merges);
               });
    } else {
      add_keys("tokenizer_model", "model 'llama' on a byte-level BPE vocabulary", kModel,
               ErrorKind::format, "SentencePiece", [](gguf::Writer& w) { w.set(kModel, "llama"); });
    }
    for (const char* name : {"bert", ""})
      add_keys("tokenizer_model", std::string("model '") + name + "'", kModel,
               ErrorKind::unsupported, "tokenizer model",
               [name](gguf::Writer& w) { w.set(kModel, name); });
  }

  // A token's type outside 1 (normal) .. 6 (byte): 0, 7, -1, large, and 2^40 in an i64 array.
  void token_type() {
    if (types_.empty()) return;
    const std::size_t n = types_.size();
    const std::vector<std::size_t> positions = breadth_ > 1
                                                   ? std::vector<std::size_t>{0, 1, 3, n / 2, n - 1}
                                                   : std::vector<std::size_t>{0, n / 2, n - 1};
    std::vector<std::int64_t> values = {0, 7, -1, 1 << 20};
    if (breadth_ > 1)
      values.insert(values.end(), {std::numeric_limits<std::int32_t>::max(),
                                   std::numeric_limits<std::int32_t>::min()});
    for (std::size_t at : positions)
      for (std::int64_t value : values) {
        std::vector<std::int32_t> types(types_.begin(), types_.end());
        types[at] = static_cast<std::int32_t>(value);
        add_keys("token_type", "token " + std::to_string(at) + " of type " + std::to_string(value),
                 kTypes, ErrorKind::format, "has type " + std::to_string(value) + ",",
                 [types = std::move(types)](gguf::Writer& w) { w.set(kTypes, types); });
      }
    std::vector<std::int64_t> wide = types_;
    wide[n / 3] = std::int64_t{1} << 40;
    add_keys("token_type", "token " + std::to_string(n / 3) + " of type 2^40 (i64 array)", kTypes,
             ErrorKind::format, "has type " + std::to_string(std::int64_t{1} << 40) + ",",
             [wide = std::move(wide)](gguf::Writer& w) { w.set(kTypes, wide); });
  }

  // Whether the rest of the file states the vocabulary's size: a model by its embedding's rows,
  // a vocab-only file only by <arch>.vocab_size.
  bool vocabulary_size_is_stated() const {
    return !src_.vocab_only || file_.has(arch_ + ".vocab_size");
  }

  // Tokens, scores and types cut to `n` (or extended with fresh tokens), consistently.
  std::function<void(gguf::Writer&)> with_token_count(std::size_t n) const {
    std::vector<std::string> tokens = tokens_;
    std::vector<float> scores = scores_;
    std::vector<std::int32_t> types(types_.begin(), types_.end());
    const bool has_scores = !scores.empty(), has_types = !types.empty();
    tokens.resize(std::min(n, tokens.size()));
    for (std::size_t i = tokens.size(); i < n; ++i)
      tokens.push_back("<lie-" + std::to_string(i) + ">");
    if (has_scores) scores.resize(n, 0.0f);
    if (has_types) types.resize(n, 1);
    return [=](gguf::Writer& w) {
      w.set(kTokens, tokens);
      if (has_scores) w.set(kScores, scores);
      if (has_types) w.set(kTypes, types);
    };
  }

  // A token array shorter or longer than the vocabulary the file states elsewhere. (A vocab-only
  // file that states no size is given its true <arch>.vocab_size first.)
  void token_count() {
    const std::size_t n = tokens_.size();
    const std::string size_key = arch_ + ".vocab_size";
    const bool state_size = !vocabulary_size_is_stated();
    std::set<std::string> merge_parts;  // a token cut away must not be named by a merge
    for (const std::string& m : merges_) {
      const std::size_t space = m.find(' ', 1);
      merge_parts.insert(m.substr(0, space));
      if (space != std::string::npos) merge_parts.insert(m.substr(space + 1));
    }
    std::vector<std::size_t> counts = {n - 1, n + 1};
    if (breadth_ > 1) counts.insert(counts.end(), {n / 2, n + 64});
    for (std::size_t count : counts) {
      bool cuts_a_merge_part = false;
      for (std::size_t i = count; i < n; ++i)
        cuts_a_merge_part |= merge_parts.count(tokens_[i]) > 0;
      if (cuts_a_merge_part) continue;
      add_keys("token_count",
               std::to_string(count) + " tokens for a vocabulary of " + std::to_string(n), kTokens,
               ErrorKind::format, std::to_string(count) + " tokens",
               [set = with_token_count(count), state_size, size_key, n](gguf::Writer& w) {
                 set(w);
                 if (state_size) w.set(size_key, std::uint32_t(n));
               });
    }
    // The token array alone cut short (scores and types longer are tolerated, as in llama.cpp).
    std::vector<std::string> cut(tokens_.begin(), tokens_.end() - 1);
    if (merge_parts.count(tokens_.back()) == 0)
      add_keys("token_count", "the token array alone one short", kTokens, ErrorKind::format,
               std::to_string(n - 1) + " tokens",
               [cut = std::move(cut), state_size, size_key, n](gguf::Writer& w) {
                 w.set(kTokens, cut);
                 if (state_size) w.set(size_key, std::uint32_t(n));
               });
  }

  // An empty token that is neither control nor unused.
  void empty_token() {
    std::vector<std::size_t> positions;
    for (std::size_t at : spread(tokens_.size(), breadth_ > 1 ? 6 : 3)) positions.push_back(at);
    positions.push_back(3);  // a byte token in SentencePiece vocabularies
    for (std::size_t at : std::set<std::size_t>(positions.begin(), positions.end())) {
      const std::int64_t type = types_.empty() ? 1 : types_[at];
      if (type == 3 || type == 5) continue;  // control and unused tokens may be empty
      std::vector<std::string> tokens = tokens_;
      tokens[at].clear();
      add_keys("empty_token", "token " + std::to_string(at) + " empty", kTokens, ErrorKind::format,
               "token " + std::to_string(at) + " is empty",
               [tokens = std::move(tokens)](gguf::Writer& w) { w.set(kTokens, tokens); });
    }
  }

  // <arch>.vocab_size disagreeing with the token array (and the embedding).
  void vocab_size() {
    const std::string key = arch_ + ".vocab_size";
    const auto n = static_cast<std::int64_t>(tokens_.size());
    for (std::int64_t value : {n - 1, n + 1, 2 * n}) {
      const auto set = [key, value](gguf::Writer& w) { w.set(key, std::uint32_t(value)); };
      const std::string what =
          key + " " + std::to_string(value) + " for " + std::to_string(n) + " tokens";
      if (src_.vocab_only) {  // the token array and the key disagree: the tokens are named
        add_keys("vocab_size", what, kTokens, ErrorKind::format, key + " is", set);
      } else {
        // The key disagrees with both the embedding's rows and the token array: the key is named.
        add_keys("vocab_size", what, key, ErrorKind::format, std::to_string(value), set);
      }
    }
    if (!src_.vocab_only) {
      // Zero: refused by the config check, which names the key it read.
      add_keys("vocab_size", key + " 0", key, ErrorKind::format, "vocab_size = 0",
               [key](gguf::Writer& w) { w.set(key, std::uint32_t{0}); });
    }
  }

  // Merges that are not two tokens separated by one space, or that name tokens that do not
  // exist.
  void merges() {
    const std::size_t n = merges_.size();
    for (std::size_t at : spread(n, breadth_ > 1 ? 3 : 2)) {
      const std::string& m = merges_[at];
      const std::size_t space = m.find(' ', 1);
      const std::string left = m.substr(0, space), right = m.substr(space + 1);
      const std::vector<std::pair<std::string, std::string>> variants = {
          {left + right, "no space"},
          {left + "  " + right, "two spaces"},
          {left + " " + right + " ", "a trailing space"},
          {left + " " + right + " " + right, "three tokens"},
          {"", "empty"},
          {left, "one token"},
          {left + " zzqx-not-a-token", "an unknown right token"},
          {"zzqx-not-a-token " + right, "an unknown left token"},
      };
      for (const auto& [text, how] : variants) {
        std::vector<std::string> edited = merges_;
        edited[at] = text;
        add_keys("merges", "merge " + std::to_string(at) + " with " + how, kMerges,
                 ErrorKind::format, "merge " + std::to_string(at) + " ",
                 [edited = std::move(edited)](gguf::Writer& w) { w.set(kMerges, edited); });
      }
    }
  }

  // An empty or unknown tokenizer.ggml.pre on a byte-level BPE vocabulary.
  void pre() {
    add_keys("pre", "an empty pre-tokenizer", kPre, ErrorKind::format, "empty",
             [](gguf::Writer& w) { w.set(kPre, ""); });
    for (const char* name : {"zzqx-unknown", "gpt2", "Default", "llama-bpe2"})
      add_keys("pre", std::string("pre-tokenizer '") + name + "'", kPre, ErrorKind::unsupported,
               std::string("unknown pre-tokenizer '") + name + "'",
               [name](gguf::Writer& w) { w.set(kPre, name); });
  }

  // The tensors that retype, resize and move cases edit.
  std::vector<std::size_t> sampled_tensors() const {
    return spread(file_.tensors().size(), breadth_ > 1 ? 9 : 4);
  }

  // A tensor's type id changed to one of another size, without its data.
  void retyped() {
    static const std::vector<DType> kCandidates = {
        DType::f32, DType::f16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q4_k, DType::q6_k};
    const auto& tensors = file_.tensors();
    for (std::size_t i : sampled_tensors()) {
      const gguf::TensorInfo& t = tensors[i];
      const auto at = std::find(kCandidates.begin(), kCandidates.end(),
                                t.type == DType::bf16 ? DType::f16 : t.type) -
                      kCandidates.begin();
      std::size_t made = 0;
      for (std::size_t k = 1; k < kCandidates.size() && made < breadth_ + 1; ++k) {
        const DType type = kCandidates[(static_cast<std::size_t>(at) + 2 * k) % kCandidates.size()];
        if (type == t.type) continue;
        const std::string named = named_when_changed(file_, i, type, t.dims);
        if (named.empty()) continue;
        ++made;
        add_patch("retyped",
                  t.name + " retyped " + hllm::dtype_name(t.type) + " -> " + hllm::dtype_name(type),
                  named, "'" + t.name + "'",
                  [file = src_.file, name = t.name, type](std::span<std::byte> bytes) {
                    const IndexEntry e = find_index_entry(bytes, file->data_offset(), name);
                    store_le(bytes, e.type_at(), static_cast<std::uint32_t>(type), 4);
                  });
      }
    }
  }

  // A tensor's dims edited, without its data.
  void resized() {
    const auto& tensors = file_.tensors();
    for (std::size_t i : sampled_tensors()) {
      const gguf::TensorInfo& t = tensors[i];
      std::vector<std::vector<std::uint64_t>> variants;
      auto d = t.dims;
      d.back() += 1;
      variants.push_back(d);
      d = t.dims;
      if (d.back() > 1) {
        d.back() -= 1;
        variants.push_back(d);
      }
      d = t.dims;
      d[0] *= 2;
      variants.push_back(d);
      if (t.dims.size() == 2 && t.dims[0] != t.dims[1])
        variants.push_back({t.dims[1], t.dims[0]});  // transposed: same size, other shape
      if (breadth_ == 1) variants.resize(std::min<std::size_t>(variants.size(), 2));
      for (const auto& dims : variants) {
        const std::string named = named_when_changed(file_, i, t.type, dims);
        if (named.empty()) continue;
        std::string shape;
        for (std::uint64_t x : dims) {
          if (!shape.empty()) shape += ',';
          shape += std::to_string(x);
        }
        add_patch("resized", t.name + " resized to [" + shape + "]", named, "'" + t.name + "'",
                  [file = src_.file, name = t.name, dims](std::span<std::byte> bytes) {
                    const IndexEntry e = find_index_entry(bytes, file->data_offset(), name);
                    for (std::size_t k = 0; k < dims.size(); ++k)
                      store_le(bytes, e.dims_at() + 8 * k, dims[k], 8);
                  });
      }
    }
  }

  // A tensor's data offset shifted by the alignment: the data no longer back to back.
  void moved() {
    const auto& tensors = file_.tensors();
    const auto alignment = static_cast<std::int64_t>(file_.alignment());
    for (std::size_t i : sampled_tensors())
      for (std::int64_t shift : {alignment, -alignment}) {
        if (shift < 0 && tensors[i].offset == 0) continue;
        add_patch("moved", tensors[i].name + " offset shifted by " + std::to_string(shift),
                  tensors[i].name, tensors[i].name,
                  [file = src_.file, name = tensors[i].name, shift](std::span<std::byte> bytes) {
                    const IndexEntry e = find_index_entry(bytes, file->data_offset(), name);
                    store_le(bytes, e.offset_at(),
                             load_le(bytes, e.offset_at(), 8) + static_cast<std::uint64_t>(shift),
                             8);
                  });
      }
    // Two tensors of the same size with their offsets swapped: each is still whole and aligned,
    // but the data no longer follows the index order, so the first of them is named.
    for (std::size_t i : sampled_tensors())
      for (std::size_t j = i + 1; j < tensors.size(); ++j) {
        if (tensors[j].size_bytes != tensors[i].size_bytes) continue;
        add_patch("moved", tensors[i].name + " and " + tensors[j].name + " offsets swapped",
                  tensors[i].name, tensors[i].name,
                  [file = src_.file, a = tensors[i].name,
                   b = tensors[j].name](std::span<std::byte> bytes) {
                    const IndexEntry ea = find_index_entry(bytes, file->data_offset(), a);
                    const IndexEntry eb = find_index_entry(bytes, file->data_offset(), b);
                    const std::uint64_t offset_a = load_le(bytes, ea.offset_at(), 8);
                    store_le(bytes, ea.offset_at(), load_le(bytes, eb.offset_at(), 8), 8);
                    store_le(bytes, eb.offset_at(), offset_a, 8);
                  });
        break;
      }
  }

  // A tensor the model needs left out (output.weight excepted: without it the embedding is
  // tied, which is a valid model).
  void missing_tensor() {
    const auto& tensors = file_.tensors();
    const std::vector<std::size_t> picked =
        breadth_ > 1 ? spread(tensors.size(), tensors.size()) : spread(tensors.size(), 8);
    for (std::size_t i : picked) {
      if (tensors[i].name == "output.weight") continue;
      Edits e;
      e.drop_tensors.insert(tensors[i].name);
      add_edit("missing_tensor", tensors[i].name + " left out", tensors[i].name, ErrorKind::format,
               "missing tensor", e);
    }
  }

  // A tensor the model does not read: a layer beyond block_count, or an unknown one.
  void extra_tensor() {
    const std::int64_t layers = block_count_value();
    const gguf::TensorInfo* norm = file_.find_tensor("output_norm.weight");
    if (norm == nullptr) return;
    const std::vector<std::pair<std::string, std::string>> extras = {
        {"blk." + std::to_string(layers) + ".attn_norm.weight", "tensor of layer"},
        {"blk." + std::to_string(layers + 3) + ".ffn_down.weight", "tensor of layer"},
        // (A q bias is not extra: llama layers may have q/k/v biases, and a lone one leaves the
        // k bias missing, test_families' FamilyGguf.LoneLlamaBiasNamesTheMissingOne.)
        {"blk.0.attn_output.bias", "not part of a llama model"},
        {"blk.0.attn_q_norm.weight", "not part of a llama model"},
        {"output.bias", "not part of a llama model"},
        {"pos_embd.weight", "not part of a llama model"},
    };
    for (const auto& [name, message] : extras) {
      Edits e;
      e.add_tensors = [norm, tensor = name](gguf::Writer& w) {  // (clang < 16: no binding captures)
        w.add_tensor(tensor, norm->type, norm->dims, std::span(norm->data, norm->size_bytes));
      };
      add_edit("extra_tensor", name + " added", name, ErrorKind::format, message, e);
    }
  }

  const Source& src_;
  const gguf::File& file_;
  std::vector<Lie>& out_;
  std::size_t breadth_;
  std::vector<std::string> tokens_, merges_;
  std::vector<float> scores_;
  std::vector<std::int64_t> types_;
  std::string model_, arch_;
};

// The bundled model with a byte-level BPE vocabulary of its own size in place of its
// SentencePiece one: 256 byte tokens, an end-of-text token and merges of real tokens, so that the
// byte-level BPE lies (merges, pre-tokenizer, "llama" on it) can be made without ../shared.
void write_bundled_with_bpe(const gguf::File& bundled, const std::string& path) {
  hllm::Vocabulary v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  const std::size_t n = bundled.array_size("tokenizer.ggml.tokens");
  const hllm::unicode::ByteMapping& bytes = hllm::unicode::ByteMapping::instance();
  std::set<std::string> have;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(bytes.text_of(static_cast<unsigned char>(b)));
    have.insert(v.tokens.back());
  }
  v.tokens.push_back("<|endoftext|>");
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types.back() = 3;
  v.bos_id = v.eos_id = 256;
  v.add_bos = false;
  std::vector<std::string> letters;
  for (char c = 'a'; c <= 'z'; ++c) letters.push_back(bytes.text_of(static_cast<unsigned char>(c)));
  const auto merge = [&](const std::string& left, const std::string& right) {
    if (v.tokens.size() >= n || !have.insert(left + right).second) return;
    v.tokens.push_back(left + right);
    v.token_types.push_back(1);
    v.merges.push_back(left + " " + right);
  };
  for (const std::string& left : letters)
    for (const std::string& right : letters) merge(left, right);
  for (const std::string& right : letters) merge(bytes.text_of(' '), right);
  for (std::size_t i = 257; v.tokens.size() < n; ++i)
    for (const std::string& right : letters) merge(std::string(v.tokens[i]), right);
  Edits e;
  e.drop_key = [](const std::string& key) { return key.rfind("tokenizer.", 0) == 0; };
  e.set_keys = [&v](gguf::Writer& w) { hllm::write_vocabulary(w, v); };
  rewrite(bundled, e, path);
}

// Writes each lie, loads it and checks the refusal; counts the cases per class.
class LieChecker {
 public:
  explicit LieChecker(const fs::path& dir) : dir_(dir) {}

  void check(const Lie& lie) {
    const std::string path = (dir_ / ("lie-" + std::to_string(total_) + ".gguf")).string();
    ++total_;
    ++per_class_[lie.lie_class];
    lie.write(path);
    try {
      load_like_a_program(path, lie.vocab_only);
      ADD_FAILURE() << "accepted: " << lie.what;
    } catch (const hllm::Error& e) {
      if (std::getenv("HLLM_LYING_VERBOSE") != nullptr)  // every refusal, to read the messages
        std::printf("[%s] %s\n  -> %s\n", lie.lie_class.c_str(), lie.what.c_str(), e.what());
      EXPECT_EQ(e.kind(), lie.kind) << lie.what << "\n  " << e.what();
      EXPECT_EQ(e.file(), path) << lie.what << "\n  " << e.what();
      EXPECT_EQ(e.field(), lie.field) << lie.what << "\n  " << e.what();
      EXPECT_NE(std::string(e.what()).find(lie.mention), std::string::npos)
          << lie.what << ": the error does not mention '" << lie.mention << "'\n  " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << lie.what << ": not an hllm::Error: " << e.what();
    }
    fs::remove(path);
  }

  void report(const char* what, ::testing::Test& test) const {
    std::printf("%s: %zu lying files\n", what, total_);
    for (const auto& [lie_class, n] : per_class_) {
      std::printf("  %-16s %4zu\n", lie_class.c_str(), n);
      test.RecordProperty("cases_" + lie_class, static_cast<int>(n));
    }
    test.RecordProperty("cases", static_cast<int>(total_));
  }
  std::size_t total() const { return total_; }

 private:
  fs::path dir_;
  std::size_t total_ = 0;
  std::map<std::string, std::size_t> per_class_;
};

// The lies written from the bundled model and from its byte-level BPE variant (written into
// `dir`, returned in `sources` so that they outlive the lies).
std::vector<Lie> bundled_lies(const fs::path& dir, std::vector<std::unique_ptr<Source>>& sources) {
  sources.push_back(std::make_unique<Source>(open_source("kjv", kBundled)));
  const std::string bpe = (dir / "kjv-bpe.gguf").string();
  write_bundled_with_bpe(*sources.back()->file, bpe);
  sources.push_back(std::make_unique<Source>(open_source("kjv-bpe", bpe)));
  std::vector<Lie> lies;
  LieMaker(*sources[0], lies, 2).all();
  // Only the tokenizer's classes from the BPE variant: the rest of it is the bundled model.
  LieMaker(*sources[1], lies, 1).tokenizer();
  return lies;
}

void expect_loads(const std::string& path, bool vocab_only,
                  const hllm::VocabularyOptions& options = {}) {
  try {
    load_like_a_program(path, vocab_only, options);
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << " is refused: " << e.what();
  }
}

// Every source loads as it is and as the rewriter re-emits it unchanged: the refusals below are
// the lies', not the rewriter's.
void expect_source_loads(const Source& s, const fs::path& dir) {
  SCOPED_TRACE(s.label);
  expect_loads(s.path, s.vocab_only);
  const std::string copy = (dir / (s.label + "-copy.gguf")).string();
  rewrite(*s.file, {}, copy);
  expect_loads(copy, s.vocab_only);
  const gguf::File again = gguf::File::open(copy);
  EXPECT_EQ(again.keys(), s.file->keys());
  ASSERT_EQ(again.tensors().size(), s.file->tensors().size());
  for (std::size_t i = 0; i < again.tensors().size(); ++i) {
    EXPECT_EQ(again.tensors()[i].name, s.file->tensors()[i].name);
    EXPECT_EQ(again.tensors()[i].offset, s.file->tensors()[i].offset);
  }
  if (!s.vocab_only) {
    EXPECT_EQ(read_file(copy), read_file(s.path)) << "not a byte-exact copy";
  }
  fs::remove(copy);
}

TEST(LyingFiles, FromTheBundledModel) {
  TempDir dir;
  std::vector<std::unique_ptr<Source>> sources;
  const std::vector<Lie> lies = bundled_lies(dir.path, sources);
  for (const auto& s : sources) expect_source_loads(*s, dir.path);
  LieChecker checker(dir.path);
  for (const Lie& lie : lies) checker.check(lie);
  checker.report("bundled model", *this);
  EXPECT_GE(checker.total(), 150u);
}

// An empty or unknown pre-tokenizer loads when the caller names a fallback.
TEST(LyingFiles, PretokenizerFallbackLoads) {
  TempDir dir;
  const Source kjv = open_source("kjv", kBundled);
  const std::string bpe = (dir.path / "kjv-bpe.gguf").string();
  write_bundled_with_bpe(*kjv.file, bpe);
  std::vector<Source> sources = {open_source("kjv-bpe", bpe)};
  if (fs::exists(kShared + "/tokenizers/ggml-vocab-mpt.gguf"))
    sources.push_back(open_source("mpt", kShared + "/tokenizers/ggml-vocab-mpt.gguf", true));
  for (const Source& s : sources)
    for (const char* pre : {"", "zzqx-unknown"}) {
      SCOPED_TRACE(s.label + " with tokenizer.ggml.pre '" + pre + "'");
      const std::string path = (dir.path / "pre.gguf").string();
      Edits e;
      e.set_keys = [pre](gguf::Writer& w) { w.set("tokenizer.ggml.pre", pre); };
      rewrite(*s.file, e, path);
      expect_loads(path, s.vocab_only, hllm::VocabularyOptions{.pretokenizer_fallback = "default"});
      // ... and is refused without one (the case the lie catalogue counts).
      EXPECT_THROW(load_like_a_program(path, s.vocab_only), hllm::Error);
    }
}

TEST(LyingFiles, FromTheSharedFixturesAndVocabularies) {
  SKIP_WITHOUT_SHARED();
  TempDir dir;
  std::vector<Source> sources;
  for (const std::string& type : kFixtureTypes)
    sources.push_back(open_source("fx-" + type, kShared + "/fixtures/fx-gqa-" + type + ".gguf"));
  for (const char* vocab : {"llama-spm", "mpt"})
    sources.push_back(open_source(
        vocab, kShared + "/tokenizers/ggml-vocab-" + std::string(vocab) + ".gguf", true));
  std::vector<Lie> lies;
  for (const Source& s : sources) {
    expect_source_loads(s, dir.path);
    LieMaker(s, lies, 1).all();
  }
  LieChecker checker(dir.path);
  for (const Lie& lie : lies) checker.check(lie);
  checker.report("shared fixtures and vocabularies", *this);
  EXPECT_GE(checker.total(), 300u);
}

// ---------------------------------------------------------------------------------------------
// The programs: hllm-generate on a sample of the lying files.

#ifdef HLLM_GENERATE_PATH

struct ProgramRun {
  int exit_status = -1;  // -1: killed by a signal or timed out
  bool timed_out = false;
  std::string out, err;
};

// Runs `argv` with stdin from /dev/null and stdout and stderr to files of their own; kills it
// after `timeout` so that a hang fails the test instead of stalling it.
ProgramRun run_program(const std::vector<std::string>& argv, const fs::path& dir,
                       std::chrono::seconds timeout) {
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error("cannot run " + argv[0]);
  ProgramRun run;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      run.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!run.timed_out && WIFEXITED(status)) run.exit_status = WEXITSTATUS(status);
  run.out = read_file(out);
  run.err = read_file(err);
  return run;
}

#endif  // HLLM_GENERATE_PATH

TEST(LyingFiles, HllmGeneratePrintsNothingAndFails) {
#ifndef HLLM_GENERATE_PATH
  GTEST_SKIP() << "hllm-generate is not built (HLLM_BUILD_EXAMPLES=OFF): the programs' part of "
                  "the lying-files test is skipped";
#else
  const std::string program = HLLM_GENERATE_PATH;
  TempDir dir;
  const auto generate = [&](const std::string& model) {
    return run_program({program, "-m", model, "-n", "8", "-p", "In the beginning"}, dir.path,
                       std::chrono::seconds(20));
  };
  // The honest file generates: the harness can see output when there is some.
  const ProgramRun honest = generate(kBundled);
  EXPECT_EQ(honest.exit_status, 0) << honest.err;
  EXPECT_EQ(honest.out.rfind("In the beginning", 0), 0u) << honest.out;

  std::vector<std::unique_ptr<Source>> sources;
  const std::vector<Lie> lies = bundled_lies(dir.path, sources);
  // The first, a middle and the last lie of each class.
  std::map<std::string, std::vector<const Lie*>> by_class;
  for (const Lie& lie : lies) by_class[lie.lie_class].push_back(&lie);
  std::size_t runs = 0;
  for (const auto& [lie_class, members] : by_class)
    for (std::size_t at : spread(members.size(), 3)) {
      const Lie& lie = *members[at];
      const std::string path = (dir.path / ("lie-" + std::to_string(runs++) + ".gguf")).string();
      lie.write(path);
      const ProgramRun run = generate(path);
      EXPECT_FALSE(run.timed_out) << lie.what << ": hllm-generate ran past 20 s";
      EXPECT_EQ(run.exit_status, 1) << lie.what << "\n  stderr: " << run.err;
      EXPECT_EQ(run.out, "") << lie.what << ": hllm-generate printed to stdout";
      const auto names = [&](const std::string& field) {
        return !field.empty() && run.err.find("'" + field + "'") != std::string::npos;
      };
      EXPECT_TRUE(names(lie.field))
          << lie.what << ": stderr does not name '" << lie.field << "': " << run.err;
      fs::remove(path);
    }
  std::printf("hllm-generate: %zu lying files, each exit status 1 with nothing on stdout\n", runs);
  EXPECT_GE(runs, 30u);
  EXPECT_LE(runs, 40u);
#endif
}

}  // namespace
