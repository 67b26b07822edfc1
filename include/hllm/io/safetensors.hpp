#pragma once
// Hugging Face safetensors reader: u64 little-endian header length N, N bytes of JSON (tensor
// name -> {dtype, shape, data_offsets}, plus an optional "__metadata__" of strings), then the
// data section. The whole header is validated when the file is opened: sizes against the
// bytes present, shapes against the byte ranges, ranges against each other (no overlaps), with
// overflow-safe arithmetic, so a tensor view can never reach outside the mapping. Data is used
// in place (no copy). Sharded checkpoints (model.safetensors.index.json) load through
// Checkpoint, which checks that every tensor is found exactly once.
//
// Every failure is an hllm::Error naming the file, the tensor (or "header_length", "header",
// "weight_map"...) and, where one exists, the byte offset in the file.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/io/mapped_format.hpp"

namespace hllm::safetensors {

// Far above any real header (a 70B checkpoint's is ~100 KB) and small enough to parse in memory.
inline constexpr std::uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

struct TensorInfo {
  std::string name;
  DType type = DType::f32;
  std::string dtype_name;            // as written in the file ("F32", "BF16", ...)
  std::vector<std::uint64_t> shape;  // outermost first, as PyTorch: [rows, cols] for a matrix
  std::uint64_t begin = 0, end = 0;  // data_offsets: [begin, end) within the data section
  std::uint64_t file_offset = 0;     // where the data starts in the file: error reports
  const std::byte* data = nullptr;   // begin's address in the mapping (may be unaligned)
  std::uint64_t size_bytes() const noexcept { return end - begin; }
  std::uint64_t elements() const noexcept {  // validated not to overflow at open
    std::uint64_t n = 1;
    for (std::uint64_t d : shape) n *= d;
    return n;
  }
};

namespace detail {

inline std::uint64_t load_u64_le(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// Parses JSON, refusing duplicate keys in any object: nlohmann keeps the last of two equal keys
// silently, which would let a file show one tensor to us and another to a different reader.
// Errors name `path` and `field`; offsets are file offsets (`base` is where the text starts).
inline nlohmann::json parse_json_strict(std::string_view text, const std::string& path,
                                        const std::string& field, std::uint64_t base) {
  std::vector<std::set<std::string>> open_objects;
  const nlohmann::json::parser_callback_t check_keys = [&](int /*depth*/,
                                                           nlohmann::json::parse_event_t event,
                                                           nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second)
        throw Error(ErrorKind::format, "duplicate key '" + key + "' in a JSON object", path, key);
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), check_keys);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::format, std::string("invalid JSON: ") + e.what(), path, field,
                base + (e.byte > 0 ? e.byte - 1 : 0));
  } catch (const nlohmann::json::exception& e) {
    // Not only syntax: a number too large for a double ("7e777777") is out_of_range (found by
    // fuzz_safetensors; it escaped as a non-hllm exception).
    throw Error(ErrorKind::format, std::string("invalid JSON: ") + e.what(), path, field, base);
  }
}

inline bool dtype_from_name(const std::string& name, DType& type, std::uint64_t& element_bytes) {
  if (name == "F32") {
    type = DType::f32;
    element_bytes = 4;
  } else if (name == "F16") {
    type = DType::f16;
    element_bytes = 2;
  } else if (name == "BF16") {
    type = DType::bf16;
    element_bytes = 2;
  } else {
    return false;
  }
  return true;
}

}  // namespace detail

class File : public io::MappedFormat<File> {
  friend class io::MappedFormat<File>;

 public:
  std::uint64_t data_offset() const noexcept { return data_offset_; }
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  const TensorInfo* find_tensor(std::string_view name) const noexcept {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

 private:
  explicit File(std::shared_ptr<const io::MappedFile> file) : MappedFormat(std::move(file)) {
    parse();
  }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message, const std::string& field,
                         std::optional<std::uint64_t> offset = {}) const {
    throw Error(kind, message, path(), field, offset);
  }

  void parse() {
    if constexpr (std::endian::native != std::endian::little)
      fail(ErrorKind::unsupported, "safetensors data is little-endian; this host is not", {});
    const std::uint64_t size = file_->size();
    if (size < 8)
      fail(ErrorKind::format,
           "truncated: " + std::to_string(size) + " bytes, fewer than the 8-byte header length",
           "header_length", 0);
    const std::uint64_t n = detail::load_u64_le(file_->data());
    if (n > kMaxHeaderBytes)
      fail(ErrorKind::format,
           "header length " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kMaxHeaderBytes) + " bytes",
           "header_length", 0);
    if (n > size - 8)
      fail(ErrorKind::format,
           "header length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(size) + " bytes)",
           "header_length", 0);
    if (n < 2) fail(ErrorKind::format, "header too short to hold a JSON object", "header", 8);
    data_offset_ = 8 + n;
    const std::uint64_t data_size = size - data_offset_;
    const std::string_view text(reinterpret_cast<const char*>(file_->data() + 8),
                                static_cast<std::size_t>(n));
    const nlohmann::json header = detail::parse_json_strict(text, path(), "header", 8);
    if (!header.is_object()) fail(ErrorKind::format, "header is not a JSON object", "header", 8);

    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object())
          fail(ErrorKind::format, "__metadata__ must be an object of strings", name, 8);
        for (const auto& [key, value] : entry.items()) {
          if (!value.is_string())
            fail(ErrorKind::format, "__metadata__ value is not a string", "__metadata__." + key, 8);
          metadata_[key] = value.get<std::string>();
        }
        continue;
      }
      tensors_.push_back(parse_tensor(name, entry, data_size));
    }
    check_layout(data_size);
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }

  TensorInfo parse_tensor(const std::string& name, const nlohmann::json& entry,
                          std::uint64_t data_size) const {
    if (!entry.is_object()) fail(ErrorKind::format, "tensor entry is not a JSON object", name, 8);
    TensorInfo t;
    t.name = name;
    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string())
      fail(ErrorKind::format, "missing or non-string 'dtype'", name, 8);
    t.dtype_name = dtype->get<std::string>();
    std::uint64_t element_bytes = 0;
    if (!detail::dtype_from_name(t.dtype_name, t.type, element_bytes))
      fail(ErrorKind::unsupported,
           "dtype '" + t.dtype_name + "' is not supported (F32, F16 and BF16 are)", name);

    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array())
      fail(ErrorKind::format, "missing or non-array 'shape'", name, 8);
    if (shape->empty() || shape->size() > 4)
      fail(ErrorKind::unsupported,
           "tensors of rank " + std::to_string(shape->size()) + " are not supported (1 to 4)",
           name);
    std::uint64_t elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() == 0)
        fail(ErrorKind::format, "shape entries must be integers >= 1, got " + d.dump(), name, 8);
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (elements > std::numeric_limits<std::uint64_t>::max() / dim)
        fail(ErrorKind::format, "the element count (product of the shape) overflows", name, 8);
      elements *= dim;
      t.shape.push_back(dim);
    }
    if (elements > std::numeric_limits<std::uint64_t>::max() / element_bytes)
      fail(ErrorKind::format, "the tensor's byte size overflows", name, 8);

    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
      fail(ErrorKind::format, "'data_offsets' must be an array of two non-negative integers", name,
           8);
    t.begin = (*offsets)[0].get<std::uint64_t>();
    t.end = (*offsets)[1].get<std::uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      fail(ErrorKind::format,
           "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
               ") lie outside the data section of " + std::to_string(data_size) + " bytes",
           name, t.begin <= data_size ? data_offset_ + t.begin : data_offset_);
    t.file_offset = data_offset_ + t.begin;
    if (t.end - t.begin != elements * element_bytes)
      fail(ErrorKind::format,
           "data_offsets span " + std::to_string(t.end - t.begin) + " bytes but the shape and " +
               t.dtype_name + " need " + std::to_string(elements * element_bytes),
           name, t.file_offset);
    t.data = file_->data() + t.file_offset;
    return t;
  }

  // The data section is the tensors' bytes back to back, in offset order, with no gap, no
  // overlap and nothing after the last one, as the format requires (and its reference reader
  // checks): a tensor whose dtype or shape was edited without its data shows up here.
  void check_layout(std::uint64_t data_size) const {
    std::vector<const TensorInfo*> sorted;
    for (const TensorInfo& t : tensors_) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t expected = 0;
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      const TensorInfo& t = *sorted[i];
      if (t.begin < expected)
        fail(ErrorKind::format, "data overlaps that of tensor '" + sorted[i - 1]->name + "'",
             t.name, t.file_offset);
      if (t.begin > expected)
        fail(ErrorKind::format,
             "data begins at " + std::to_string(t.begin) + " but " +
                 (i == 0 ? std::string("the data section starts at 0")
                         : "tensor '" + sorted[i - 1]->name + "' ends at " +
                               std::to_string(expected)) +
                 ": the data section must hold the tensors back to back",
             t.name, t.file_offset);
      expected = t.end;
    }
    if (expected != data_size)
      fail(ErrorKind::format,
           "the tensors' data ends at " + std::to_string(expected) +
               " but the data section holds " + std::to_string(data_size) +
               " bytes: bytes that no tensor describes",
           sorted.empty() ? "header" : sorted.back()->name, data_offset_ + expected);
  }

  std::uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint: one .safetensors file, or the shards an index names. Each
// tensor is found exactly once, in the file the index says.
class Checkpoint {
 public:
  struct Entry {
    const File* file;
    const TensorInfo* tensor;
  };

  // `path`: a .safetensors file, a *.safetensors.index.json, or a directory holding
  // model.safetensors.index.json or model.safetensors.
  static Checkpoint open(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      const fs::path dir(path);
      if (fs::exists(dir / "model.safetensors.index.json", ec))
        return open_index((dir / "model.safetensors.index.json").string());
      if (fs::exists(dir / "model.safetensors", ec))
        return open_single((dir / "model.safetensors").string());
      throw Error(ErrorKind::io,
                  "directory holds neither model.safetensors.index.json nor model.safetensors",
                  path);
    }
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return open_index(path);
    return open_single(path);
  }

  static Checkpoint open_single(const std::string& path) {
    Checkpoint c;
    c.add_file(std::make_shared<const File>(File::open(path)), nullptr);
    return c;
  }

  // weight_map: {tensor name: shard file name, relative to the index's directory}.
  static Checkpoint open_index(const std::string& index_path) {
    namespace fs = std::filesystem;
    const std::string text = io::read_text_file(index_path, "safetensors index");
    const nlohmann::json index = detail::parse_json_strict(text, index_path, "index", 0);
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
      throw Error(ErrorKind::format, "the index has no 'weight_map' object", index_path,
                  "weight_map");
    std::map<std::string, std::string> expected;  // tensor -> shard
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : index.at("weight_map").items()) {
      if (!shard.is_string())
        throw Error(ErrorKind::format, "shard name is not a string", index_path,
                    "weight_map." + tensor);
      const std::string name = shard.get<std::string>();
      // A shard lives beside the index: refuse paths that would leave its directory.
      const fs::path rel(name);
      bool escapes = name.empty() || rel.is_absolute();
      for (const auto& part : rel) escapes = escapes || part == "..";
      if (escapes)
        throw Error(ErrorKind::format, "shard '" + name + "' is not a file beside the index",
                    index_path, "weight_map." + tensor);
      expected.emplace(tensor, name);
      shards.insert(name);
    }
    if (expected.empty())
      throw Error(ErrorKind::format, "the weight_map is empty", index_path, "weight_map");
    const fs::path dir = fs::path(index_path).parent_path();
    Checkpoint c;
    for (const std::string& shard : shards)
      c.add_file(std::make_shared<const File>(File::open((dir / shard).string())), &expected);
    for (const auto& [tensor, shard] : expected)
      if (c.entries_.find(tensor) == c.entries_.end())
        throw Error(ErrorKind::format,
                    "the index places this tensor in '" + shard + "', which does not contain it",
                    index_path, tensor);
    return c;
  }

  // Wraps already parsed files (tests, memory-backed data); each tensor must be in one only.
  static Checkpoint from_files(std::vector<std::shared_ptr<const File>> files) {
    Checkpoint c;
    for (auto& f : files) c.add_file(std::move(f), nullptr);
    return c;
  }

  const std::vector<std::shared_ptr<const File>>& files() const noexcept { return files_; }
  std::size_t size() const noexcept { return entries_.size(); }
  const Entry* find(std::string_view name) const noexcept {
    const auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    for (const auto& [name, entry] : entries_) result.push_back(name);
    return result;
  }

 private:
  void add_file(std::shared_ptr<const File> file,
                const std::map<std::string, std::string>* expected) {
    const std::string shard = std::filesystem::path(file->path()).filename().string();
    for (const TensorInfo& t : file->tensors()) {
      if (expected != nullptr) {
        const auto it = expected->find(t.name);
        if (it == expected->end() || it->second != shard)
          throw Error(ErrorKind::format,
                      it == expected->end()
                          ? "tensor is not in the index's weight_map"
                          : "the index places this tensor in '" + it->second + "', not here",
                      file->path(), t.name, t.file_offset);
      }
      if (!entries_.emplace(t.name, Entry{file.get(), &t}).second)
        throw Error(ErrorKind::format, "tensor appears in more than one shard", file->path(),
                    t.name, t.file_offset);
    }
    files_.push_back(std::move(file));
  }

  std::vector<std::shared_ptr<const File>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace hllm::safetensors
