#pragma once
// GGUF v2/v3 reader. The whole header (metadata and tensor index) is validated when the file is
// opened, with overflow-safe arithmetic against the bytes actually present, so nothing read
// from the file is ever used as a size or an offset before it has been checked. Metadata values
// are indexed, not decoded: getters decode on demand, so a 128k-entry vocabulary costs one
// walk over its string lengths at open. Every failure is an hllm::Error naming the file, the
// key or tensor (or "header.*"), and the byte offset of the offending value.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/io/gguf_types.hpp"
#include "hllm/io/mapped_format.hpp"

namespace hllm::gguf {

// Quotes and escapes a string for one-line display in messages; cuts it after `max_shown`
// bytes.
inline std::string quote(std::string_view s, std::size_t max_shown = 80) {
  std::string text = "\"";
  for (std::size_t i = 0; i < s.size() && i < max_shown; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      text += '\\';
      text += static_cast<char>(ch);
    } else if (ch == '\n') {
      text += "\\n";
    } else if (ch < 0x20 || ch == 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", ch);
      text += buffer;
    } else {
      text += static_cast<char>(ch);
    }
  }
  text += '"';
  if (s.size() > max_shown) text += "... (" + std::to_string(s.size()) + " bytes)";
  return text;
}

class File : public io::MappedFormat<File> {
  friend class io::MappedFormat<File>;

 public:
  std::uint32_t version() const noexcept { return version_; }
  std::size_t alignment() const noexcept { return alignment_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; }

  bool has(std::string_view key) const { return index_.find(key) != index_.end(); }
  ValueType type_of(std::string_view key) const { return entry(key).type; }
  // Element type of an array value; throws if `key` is missing or not an array.
  ValueType array_type(std::string_view key) const { return array_entry(key).elem_type; }
  // The value of `key` exactly as the file encodes it, type tag first (GGUF's layout, validated
  // at open): copying it keeps every type, f64 arrays and bool arrays included, bit for bit.
  std::span<const std::byte> encoded_value(std::string_view key) const {
    const Entry& e = entry(key);
    const std::uint64_t tag = e.value_offset - 4;
    return file_->bytes().subspan(static_cast<std::size_t>(tag),
                                  static_cast<std::size_t>(e.end - tag));
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> result;
    result.reserve(entries_.size());
    for (const Entry& e : entries_) result.push_back(e.key);
    return result;
  }

  std::string get_string(std::string_view key) const {
    const Entry& e = entry(key);
    if (e.type != ValueType::string) wrong_type(e, "a string");
    return std::string(chars(e.payload, e.count));
  }
  std::int64_t get_int(std::string_view key) const {
    const Entry& e = entry(key);
    if (!is_integer(e.type)) wrong_type(e, "an integer");
    return integer_at(e.type, e.payload, e);
  }
  double get_float(std::string_view key) const {
    const Entry& e = entry(key);
    if (e.type != ValueType::f32 && e.type != ValueType::f64) wrong_type(e, "a float (f32 or f64)");
    return float_at(e.type, e.payload);
  }
  bool get_bool(std::string_view key) const {
    const Entry& e = entry(key);
    if (e.type != ValueType::boolean) wrong_type(e, "a bool");
    return at(e.payload) != std::byte{0};
  }
  std::vector<std::string> get_string_array(std::string_view key) const {
    const Entry& e = array_entry(key);
    if (e.elem_type != ValueType::string) wrong_type(e, "an array of strings");
    std::vector<std::string> result;
    result.reserve(static_cast<std::size_t>(e.count));
    std::uint64_t pos = e.payload;
    for (std::uint64_t i = 0; i < e.count; ++i) {  // lengths were validated at open
      const std::uint64_t length = detail::load_u64(file_->data() + pos);
      result.emplace_back(chars(pos + 8, length));
      pos += 8 + length;
    }
    return result;
  }
  std::vector<float> get_float_array(std::string_view key) const {
    const Entry& e = array_entry(key);
    if (e.elem_type != ValueType::f32 && e.elem_type != ValueType::f64)
      wrong_type(e, "an array of floats (f32 or f64)");
    const std::size_t step = fixed_size(e.elem_type);
    std::vector<float> result(static_cast<std::size_t>(e.count));
    for (std::size_t i = 0; i < result.size(); ++i)
      result[i] = static_cast<float>(float_at(e.elem_type, e.payload + i * step));
    return result;
  }
  std::vector<std::int64_t> get_int_array(std::string_view key) const {
    const Entry& e = array_entry(key);
    if (!is_integer(e.elem_type)) wrong_type(e, "an array of integers");
    const std::size_t step = fixed_size(e.elem_type);
    std::vector<std::int64_t> result(static_cast<std::size_t>(e.count));
    for (std::size_t i = 0; i < result.size(); ++i)
      result[i] = integer_at(e.elem_type, e.payload + i * step, e);
    return result;
  }
  std::size_t array_size(std::string_view key) const {
    return static_cast<std::size_t>(array_entry(key).count);
  }

  std::string get_string_or(std::string_view key, std::string fallback) const {
    return has(key) ? get_string(key) : std::move(fallback);
  }
  std::int64_t get_int_or(std::string_view key, std::int64_t fallback) const {
    return has(key) ? get_int(key) : fallback;
  }
  double get_float_or(std::string_view key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
  }
  bool get_bool_or(std::string_view key, bool fallback) const {
    return has(key) ? get_bool(key) : fallback;
  }

  // A one-line rendering of a value for people (hllm-info): strings quoted and escaped (long
  // ones cut), arrays show their first max_array_items items and their length.
  std::string value_to_string(std::string_view key, std::size_t max_array_items = 8) const {
    const Entry& e = entry(key);
    if (e.type == ValueType::string) return quote(chars(e.payload, e.count));
    if (e.type != ValueType::array) return scalar_to_string(e.type, e.payload, e);
    std::string text = "[";
    std::uint64_t pos = e.payload;
    const std::uint64_t shown = std::min<std::uint64_t>(e.count, max_array_items);
    for (std::uint64_t i = 0; i < shown; ++i) {
      if (i > 0) text += ", ";
      if (e.elem_type == ValueType::string) {
        const std::uint64_t length = detail::load_u64(file_->data() + pos);
        text += quote(chars(pos + 8, length));
        pos += 8 + length;
      } else {
        text += scalar_to_string(e.elem_type, pos, e);
        pos += fixed_size(e.elem_type);
      }
    }
    if (shown < e.count) text += ", ...";
    text += "] (" + std::to_string(e.count) + " x " + to_string(e.elem_type) + ")";
    return text;
  }

  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const noexcept {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }

 private:
  // One metadata value, located but not decoded.
  struct Entry {
    std::string key;
    ValueType type;
    ValueType elem_type;         // arrays only
    std::uint64_t count;         // string: byte length; array: element count
    std::uint64_t value_offset;  // where the value begins (after its type tag): error reports
    std::uint64_t payload;       // scalar bytes, string bytes, or the first array element
    std::uint64_t end = 0;       // one past the value's last byte
  };

  // A bounds-checked cursor over the file: every read first proves the bytes exist.
  struct Cursor {
    const std::byte* base;
    std::uint64_t size;
    std::uint64_t pos;
    const std::string& path;

    std::uint64_t remaining() const noexcept { return size - pos; }
    void need(std::uint64_t n, const std::string& field) const {
      if (n > remaining())
        throw Error(ErrorKind::format,
                    "truncated: " + std::to_string(n) + " bytes needed at offset " +
                        std::to_string(pos) + " but the file ends at " + std::to_string(size),
                    path, field, pos);
    }
    std::uint32_t u32(const std::string& field) {
      need(4, field);
      const std::uint32_t v = detail::load_u32(base + pos);
      pos += 4;
      return v;
    }
    std::uint64_t u64(const std::string& field) {
      need(8, field);
      const std::uint64_t v = detail::load_u64(base + pos);
      pos += 8;
      return v;
    }
    // A GGUF string: u64 length + bytes. Returns the view; the length is checked against what
    // is left of the file before anything is done with it.
    std::string_view string(const std::string& field) {
      const std::uint64_t at_length = pos;
      const std::uint64_t length = u64(field);
      if (length > remaining())
        throw Error(ErrorKind::format,
                    "string length " + std::to_string(length) + " exceeds the " +
                        std::to_string(remaining()) + " bytes left in the file",
                    path, field, at_length);
      const std::string_view s(reinterpret_cast<const char*>(base + pos),
                               static_cast<std::size_t>(length));
      pos += length;
      return s;
    }
  };

  explicit File(std::shared_ptr<const io::MappedFile> file) : MappedFormat(std::move(file)) {
    parse();
  }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message, const std::string& field,
                         std::optional<std::uint64_t> offset) const {
    throw Error(kind, message, path(), field, offset);
  }

  void parse() {
    Cursor c{file_->data(), file_->size(), 0, path()};
    c.need(4, "header.magic");
    if (detail::load_u32(c.base) != kMagic)
      fail(ErrorKind::format, "not a GGUF file: the magic is not \"GGUF\"", "header.magic", 0);
    c.pos = 4;
    version_ = c.u32("header.version");
    if (version_ != 2 && version_ != 3) {
      const std::uint32_t swapped = (version_ >> 24) | ((version_ >> 8) & 0xff00u) |
                                    ((version_ << 8) & 0xff0000u) | (version_ << 24);
      if (swapped >= 1 && swapped <= 3)
        fail(ErrorKind::unsupported, "big-endian GGUF files are not supported", "header.version",
             4);
      if (version_ == 1)
        fail(ErrorKind::unsupported,
             "GGUF version 1 (32-bit counts, pre-2023) is not supported; re-convert the model",
             "header.version", 4);
      fail(version_ == 0 ? ErrorKind::format : ErrorKind::unsupported,
           "GGUF version " + std::to_string(version_) + " is not supported (only 2 and 3)",
           "header.version", 4);
    }
    const std::uint64_t tensor_count = c.u64("header.tensor_count");
    const std::uint64_t kv_count = c.u64("header.kv_count");
    // The smallest possible entries bound the counts by the bytes that remain: a key/value is
    // at least 8 (key length) + 4 (type) + 1 (u8) bytes, a tensor info at least 8 (name length)
    // + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
    if (tensor_count > c.remaining() / 32)
      fail(ErrorKind::format,
           "tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
               std::to_string(c.remaining()) + " bytes left in the file",
           "header.tensor_count", 8);
    if (kv_count > c.remaining() / 13)
      fail(ErrorKind::format,
           "metadata count " + std::to_string(kv_count) + " cannot fit in the " +
               std::to_string(c.remaining()) + " bytes left in the file",
           "header.kv_count", 16);

    entries_.reserve(static_cast<std::size_t>(kv_count));
    for (std::uint64_t i = 0; i < kv_count; ++i) parse_kv(c, i);
    parse_alignment();

    tensors_.reserve(static_cast<std::size_t>(tensor_count));
    std::vector<std::uint64_t> offset_positions;  // [tensor_count] where each offset field sits
    for (std::uint64_t i = 0; i < tensor_count; ++i) offset_positions.push_back(parse_tensor(c, i));

    // The data section starts at the next multiple of the alignment.
    const std::uint64_t padding = (alignment_ - c.pos % alignment_) % alignment_;
    data_offset_ = c.pos + padding;
    if (!tensors_.empty() && data_offset_ > c.size)
      fail(ErrorKind::format,
           "truncated: the tensor data section would start at " + std::to_string(data_offset_) +
               ", past the end of the file",
           "header.data", c.pos);
    const std::uint64_t data_size = data_offset_ <= c.size ? c.size - data_offset_ : 0;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      TensorInfo& t = tensors_[i];
      if (t.offset > data_size || t.size_bytes > data_size - t.offset)
        fail(ErrorKind::format,
             "tensor data [" + std::to_string(t.offset) + ", +" + std::to_string(t.size_bytes) +
                 ") extends past the end of the file (data section holds " +
                 std::to_string(data_size) + " bytes; truncated file?)",
             t.name, offset_positions[i]);
      t.data = file_->data() + data_offset_ + t.offset;
    }
    check_layout(data_size, offset_positions);
  }

  // Every GGUF writer (llama.cpp's, gguf-py, ours) lays the tensors' data out back to back in
  // index order, each padded to the alignment, and llama.cpp's reader refuses any other layout.
  // Holding files to it catches a tensor whose type or shape was edited without its data: its
  // size no longer leads to the next tensor's offset, or (the last one) to the end of the file.
  void check_layout(std::uint64_t data_size, const std::vector<std::uint64_t>& offset_positions) {
    std::uint64_t expected = 0;  // where the next tensor's data must begin
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.offset != expected)
        fail(ErrorKind::format,
             "tensor data at offset " + std::to_string(t.offset) + ", expected " +
                 std::to_string(expected) +
                 (i == 0 ? std::string(" (the first tensor starts the data section)")
                         : " (where tensor '" + tensors_[i - 1].name + "' of " +
                               std::to_string(tensors_[i - 1].size_bytes) +
                               " bytes ends, padded to the alignment " +
                               std::to_string(alignment_) + ")") +
                 ": tensors must follow each other in index order; a retyped or resized tensor?",
             t.name, offset_positions[i]);
      // No overflow: t.offset + t.size_bytes <= data_size was checked above.
      expected = t.offset + t.size_bytes + (alignment_ - t.size_bytes % alignment_) % alignment_;
    }
    if (!tensors_.empty() && data_size > expected)
      fail(ErrorKind::format,
           std::to_string(data_size - expected) + " bytes follow the last tensor's data (" +
               std::to_string(tensors_.back().size_bytes) +
               " bytes and its padding): the tensor index does not describe the whole file; a "
               "retyped or resized tensor?",
           tensors_.back().name, offset_positions.back());
  }

  void parse_kv(Cursor& c, std::uint64_t i) {
    const std::string slot = "kv[" + std::to_string(i) + "]";
    const std::uint64_t key_offset = c.pos;
    const std::string key(c.string(slot + ".key"));
    if (index_.find(key) != index_.end())
      fail(ErrorKind::format, "duplicate metadata key", key, key_offset);
    const std::uint64_t type_offset = c.pos;
    const std::uint32_t raw_type = c.u32(key);
    if (raw_type > 12)
      fail(ErrorKind::format, "unknown metadata value type " + std::to_string(raw_type), key,
           type_offset);
    Entry e{key, static_cast<ValueType>(raw_type), ValueType::u8, 0, c.pos, c.pos};
    if (e.type == ValueType::string) {
      const std::string_view s = c.string(key);
      e.count = s.size();
      e.payload = c.pos - s.size();
    } else if (e.type == ValueType::array) {
      const std::uint32_t raw_elem = c.u32(key);
      if (raw_elem == static_cast<std::uint32_t>(ValueType::array))
        fail(ErrorKind::unsupported, "nested arrays are not supported", key, e.value_offset);
      if (raw_elem > 12)
        fail(ErrorKind::format, "unknown array element type " + std::to_string(raw_elem), key,
             e.value_offset);
      e.elem_type = static_cast<ValueType>(raw_elem);
      const std::uint64_t count_offset = c.pos;
      e.count = c.u64(key);
      e.payload = c.pos;
      const std::size_t element = fixed_size(e.elem_type);
      // Strings take at least their 8-byte length each.
      const std::size_t smallest = element != 0 ? element : 8;
      if (e.count > c.remaining() / smallest)
        fail(ErrorKind::format,
             "array of " + std::to_string(e.count) + " " + to_string(e.elem_type) +
                 " values cannot fit in the " + std::to_string(c.remaining()) +
                 " bytes left in the file",
             key, count_offset);
      if (element != 0) {
        if (e.elem_type == ValueType::boolean) check_bools(c.pos, e.count, key);
        c.pos += e.count * element;
      } else {
        for (std::uint64_t j = 0; j < e.count; ++j) c.string(key);
      }
    } else {
      c.need(fixed_size(e.type), key);
      if (e.type == ValueType::boolean) check_bools(c.pos, 1, key);
      c.pos += fixed_size(e.type);
    }
    e.end = c.pos;
    index_.emplace(key, entries_.size());
    entries_.push_back(std::move(e));
  }

  void check_bools(std::uint64_t pos, std::uint64_t count, const std::string& key) const {
    for (std::uint64_t j = 0; j < count; ++j)
      if (at(pos + j) > std::byte{1})
        fail(ErrorKind::format,
             "bool value " + std::to_string(static_cast<unsigned>(at(pos + j))) +
                 " is neither 0 nor 1",
             key, pos + j);
  }

  void parse_alignment() {
    alignment_ = kDefaultAlignment;
    const auto it = index_.find(std::string_view(kAlignmentKey));
    if (it == index_.end()) return;
    const Entry& e = entries_[it->second];
    if (!is_integer(e.type)) wrong_type(e, "an integer");
    const std::int64_t value = integer_at(e.type, e.payload, e);
    // 2^30 bounds it far above any real alignment (llama.cpp writes 32) and keeps padding
    // arithmetic far from overflow.
    if (value <= 0 || value > (std::int64_t{1} << 30) ||
        !std::has_single_bit(static_cast<std::uint64_t>(value)))
      fail(ErrorKind::format,
           "alignment " + std::to_string(value) + " is not a power of two in [1, 2^30]",
           kAlignmentKey, e.value_offset);
    alignment_ = static_cast<std::size_t>(value);
  }

  // Parses one tensor info; returns the file offset of its data-offset field (for errors).
  std::uint64_t parse_tensor(Cursor& c, std::uint64_t i) {
    const std::uint64_t name_offset = c.pos;
    const std::string name(c.string("tensor[" + std::to_string(i) + "].name"));
    if (tensor_index_.find(name) != tensor_index_.end())
      fail(ErrorKind::format, "duplicate tensor name", name, name_offset);
    const std::uint64_t dims_offset = c.pos;
    const std::uint32_t n_dims = c.u32(name);
    if (n_dims < 1 || n_dims > 4)
      fail(ErrorKind::format, "n_dims " + std::to_string(n_dims) + " is not in [1, 4]", name,
           dims_offset);
    std::vector<std::uint64_t> dims(n_dims);
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t at_dim = c.pos;
      dims[d] = c.u64(name);
      if (dims[d] == 0)
        fail(ErrorKind::format, "dimension " + std::to_string(d) + " is 0", name, at_dim);
      constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      if (dims[d] > kMax / elements)
        fail(ErrorKind::format, "the element count (product of the dimensions) overflows", name,
             at_dim);
      elements *= dims[d];
    }
    const std::uint64_t type_offset = c.pos;
    const std::uint32_t raw_type = c.u32(name);
    DTypeInfo info{};
    if (!dtype_info(static_cast<DType>(raw_type), info) || !info.in_files)
      fail(ErrorKind::unsupported,
           "tensor type id " + std::to_string(raw_type) + " is not supported", name, type_offset);
    if (dims[0] % info.block_elements != 0)
      fail(ErrorKind::format,
           "first dimension " + std::to_string(dims[0]) + " is not a multiple of the " + info.name +
               " block size " + std::to_string(info.block_elements),
           name, dims_offset + 4);
    const std::uint64_t blocks = elements / info.block_elements;
    if (blocks > std::numeric_limits<std::uint64_t>::max() / info.block_bytes)
      fail(ErrorKind::format, "tensor byte size overflows", name, dims_offset);
    const std::uint64_t offset_position = c.pos;
    const std::uint64_t offset = c.u64(name);
    if (offset % alignment_ != 0)
      fail(ErrorKind::format,
           "data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
               std::to_string(alignment_),
           name, offset_position);
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(TensorInfo{name, static_cast<DType>(raw_type), std::move(dims), offset,
                                  blocks * info.block_bytes, nullptr});
    return offset_position;
  }

  const Entry& entry(std::string_view key) const {
    const auto it = index_.find(key);
    if (it == index_.end())
      fail(ErrorKind::format, "missing metadata key", std::string(key), std::nullopt);
    return entries_[it->second];
  }
  const Entry& array_entry(std::string_view key) const {
    const Entry& e = entry(key);
    if (e.type != ValueType::array) wrong_type(e, "an array");
    return e;
  }
  [[noreturn]] void wrong_type(const Entry& e, const char* expected) const {
    std::string actual = to_string(e.type);
    if (e.type == ValueType::array) actual += std::string(" of ") + to_string(e.elem_type);
    fail(ErrorKind::format, std::string("value is ") + actual + ", expected " + expected, e.key,
         e.value_offset);
  }

  std::byte at(std::uint64_t pos) const noexcept { return file_->data()[pos]; }
  std::string_view chars(std::uint64_t pos, std::uint64_t length) const noexcept {
    return {reinterpret_cast<const char*>(file_->data() + pos), static_cast<std::size_t>(length)};
  }

  std::int64_t integer_at(ValueType type, std::uint64_t pos, const Entry& e) const {
    const std::byte* p = file_->data() + pos;
    switch (type) {
      case ValueType::u8: return detail::load_le(p, 1);
      case ValueType::i8: return static_cast<std::int8_t>(detail::load_le(p, 1));
      case ValueType::u16: return detail::load_u16(p);
      case ValueType::i16: return static_cast<std::int16_t>(detail::load_u16(p));
      case ValueType::u32: return detail::load_u32(p);
      case ValueType::i32: return static_cast<std::int32_t>(detail::load_u32(p));
      case ValueType::i64: return static_cast<std::int64_t>(detail::load_u64(p));
      case ValueType::u64: {
        const std::uint64_t v = detail::load_u64(p);
        if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          fail(ErrorKind::format, "u64 value " + std::to_string(v) + " exceeds the int64 range",
               e.key, pos);
        return static_cast<std::int64_t>(v);
      }
      default: wrong_type(e, "an integer");
    }
  }
  double float_at(ValueType type, std::uint64_t pos) const {
    const std::byte* p = file_->data() + pos;
    if (type == ValueType::f32) return std::bit_cast<float>(detail::load_u32(p));
    return std::bit_cast<double>(detail::load_u64(p));
  }

  std::string scalar_to_string(ValueType type, std::uint64_t pos, const Entry& e) const {
    char buffer[64];
    switch (type) {
      case ValueType::f32:
        std::snprintf(buffer, sizeof buffer, "%.9g", float_at(type, pos));
        return buffer;
      case ValueType::f64:
        std::snprintf(buffer, sizeof buffer, "%.17g", float_at(type, pos));
        return buffer;
      case ValueType::boolean: return at(pos) != std::byte{0} ? "true" : "false";
      case ValueType::u64: return std::to_string(detail::load_u64(file_->data() + pos));
      default: return std::to_string(integer_at(type, pos, e));
    }
  }

  std::uint32_t version_ = 0;
  std::size_t alignment_ = kDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::vector<Entry> entries_;  // in file order
  std::map<std::string, std::size_t, std::less<>> index_;
  std::vector<TensorInfo> tensors_;  // in file order
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

// The token array (tokenizer.ggml.tokens) against the vocabulary size the rest of the file
// states (<arch>.vocab_size, token_embd.weight's rows): exactly one token per row, as llama.cpp
// requires. More tokens would produce ids the model cannot take, fewer leave rows no text can
// reach (a truncated array); converters pad the token list when they pad the embedding. Checked
// by the model loader and by vocabulary_from_gguf, so a tokenizer-only use of a file is held to
// it too.
inline void check_token_count(const File& f) {
  constexpr const char* kTokens = "tokenizer.ggml.tokens";
  if (!f.has(kTokens)) return;
  const std::size_t n = f.array_size(kTokens);
  const std::string tokens = "the tokenizer has " + std::to_string(n) + " tokens";
  if (const TensorInfo* embd = f.find_tensor("token_embd.weight");
      embd != nullptr && embd->dims.size() >= 2 && embd->dims[1] != n)
    throw Error(ErrorKind::format,
                tokens + " but the model's vocabulary (token_embd.weight rows) has " +
                    std::to_string(embd->dims[1]),
                f.path(), kTokens);
  const std::string arch = f.get_string_or("general.architecture", "");
  const std::string size_key = arch + ".vocab_size";
  if (!arch.empty() && f.has(size_key) && f.type_of(size_key) != ValueType::string &&
      f.get_int(size_key) != static_cast<std::int64_t>(n))
    throw Error(ErrorKind::format,
                tokens + " but " + size_key + " is " + std::to_string(f.get_int(size_key)),
                f.path(), kTokens);
}

}  // namespace hllm::gguf
