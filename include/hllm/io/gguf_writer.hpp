#pragma once
// GGUF v3 writer, laid out as llama.cpp lays files out: header, metadata, tensor infos, zero
// padding to the alignment, then each tensor's data starting at an aligned offset (and padded
// to the alignment after it). Metadata keeps insertion order; setting a key again replaces its
// value in place.

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/io/gguf_types.hpp"

namespace hllm::gguf {

class Writer {
 public:
  void set(std::string_view key, std::uint8_t v) { scalar(key, ValueType::u8, v, 1); }
  void set(std::string_view key, std::int8_t v) {
    scalar(key, ValueType::i8, static_cast<std::uint8_t>(v), 1);
  }
  void set(std::string_view key, std::uint16_t v) { scalar(key, ValueType::u16, v, 2); }
  void set(std::string_view key, std::int16_t v) {
    scalar(key, ValueType::i16, static_cast<std::uint16_t>(v), 2);
  }
  void set(std::string_view key, std::uint32_t v) { scalar(key, ValueType::u32, v, 4); }
  void set(std::string_view key, std::int32_t v) {
    scalar(key, ValueType::i32, static_cast<std::uint32_t>(v), 4);
  }
  void set(std::string_view key, std::uint64_t v) { scalar(key, ValueType::u64, v, 8); }
  void set(std::string_view key, std::int64_t v) {
    scalar(key, ValueType::i64, static_cast<std::uint64_t>(v), 8);
  }
  void set(std::string_view key, float v) {
    scalar(key, ValueType::f32, std::bit_cast<std::uint32_t>(v), 4);
  }
  void set(std::string_view key, double v) {
    scalar(key, ValueType::f64, std::bit_cast<std::uint64_t>(v), 8);
  }
  void set(std::string_view key, bool v) { scalar(key, ValueType::boolean, v ? 1u : 0u, 1); }
  void set(std::string_view key, std::string_view v) {
    std::vector<std::byte> out;
    detail::store_le(out, static_cast<std::uint32_t>(ValueType::string), 4);
    put_string(out, v);
    put(key, std::move(out));
  }
  void set(std::string_view key, const std::string& v) { set(key, std::string_view(v)); }
  void set(std::string_view key, const char* v) { set(key, std::string_view(v)); }

  void set(std::string_view key, const std::vector<std::string>& values) {
    std::vector<std::byte> out = array_header(ValueType::string, values.size());
    for (const std::string& v : values) put_string(out, v);
    put(key, std::move(out));
  }
  void set(std::string_view key, const std::vector<float>& v) { array(key, ValueType::f32, v); }
  void set(std::string_view key, const std::vector<double>& v) { array(key, ValueType::f64, v); }
  void set(std::string_view key, const std::vector<std::uint8_t>& v) {
    array(key, ValueType::u8, v);
  }
  void set(std::string_view key, const std::vector<std::int8_t>& v) {
    array(key, ValueType::i8, v);
  }
  void set(std::string_view key, const std::vector<std::uint16_t>& v) {
    array(key, ValueType::u16, v);
  }
  void set(std::string_view key, const std::vector<std::int16_t>& v) {
    array(key, ValueType::i16, v);
  }
  void set(std::string_view key, const std::vector<std::uint32_t>& v) {
    array(key, ValueType::u32, v);
  }
  void set(std::string_view key, const std::vector<std::int32_t>& v) {
    array(key, ValueType::i32, v);
  }
  void set(std::string_view key, const std::vector<std::uint64_t>& v) {
    array(key, ValueType::u64, v);
  }
  void set(std::string_view key, const std::vector<std::int64_t>& v) {
    array(key, ValueType::i64, v);
  }
  void set(std::string_view key, const std::vector<bool>& values) {
    std::vector<std::byte> out = array_header(ValueType::boolean, values.size());
    for (bool b : values) out.push_back(std::byte{b ? std::uint8_t{1} : std::uint8_t{0}});
    put(key, std::move(out));
  }

  // Sets `key` to a value already in GGUF's encoding, type tag first (gguf::File::encoded_value):
  // how metadata is copied from one file to another without decoding it.
  void set_encoded(std::string_view key, std::span<const std::byte> value) {
    if (value.size() < 4)
      throw Error(ErrorKind::invalid_argument, "an encoded value starts with its type tag", {},
                  std::string(key));
    put(key, std::vector<std::byte>(value.begin(), value.end()));
  }
  // Whether `key` has been set.
  bool has(std::string_view key) const {
    for (const Kv& kv : kvs_)
      if (kv.key == key) return true;
    return false;
  }

  // Drops key `key` (an editor of a file's metadata); whether it was set.
  bool remove(std::string_view key) {
    return std::erase_if(kvs_, [&](const Kv& kv) { return kv.key == key; }) != 0;
  }

  // Sets general.alignment (a power of two) used to place the tensor data.
  void set_alignment(std::size_t alignment) {
    if (alignment == 0 || alignment > (std::size_t{1} << 30) || !std::has_single_bit(alignment))
      throw Error(
          ErrorKind::invalid_argument,
          "GGUF alignment must be a power of two in [1, 2^30], got " + std::to_string(alignment));
    alignment_ = alignment;
    set(kAlignmentKey, static_cast<std::uint32_t>(alignment));
  }

  // Adds a tensor whose bytes (already in `type`'s GGUF layout) the caller keeps alive until
  // write()/to_bytes() has run: no copy, so converting a large model costs no extra memory.
  // dims in GGUF order (dims[0] = columns).
  void add_tensor(std::string_view name, DType type, std::vector<std::uint64_t> dims,
                  std::span<const std::byte> data) {
    check_tensor(name, type, dims, data.size());
    tensors_.push_back({std::string(name), type, std::move(dims), data, {}});
  }
  // The same, but the writer takes ownership of the bytes.
  void add_tensor(std::string_view name, DType type, std::vector<std::uint64_t> dims,
                  std::vector<std::byte>&& data) {
    check_tensor(name, type, dims, data.size());
    tensors_.push_back({std::string(name), type, std::move(dims), {}, std::move(data)});
  }
  // A tensor of `size` bytes that `fill` writes into a buffer when the file is written, one
  // tensor at a time: writing a large model then holds one tensor's data, never all of it.
  // `fill` may be called more than once (once per write()/to_bytes()).
  void add_tensor(std::string_view name, DType type, std::vector<std::uint64_t> dims,
                  std::size_t size, std::function<void(std::span<std::byte>)> fill) {
    check_tensor(name, type, dims, size);
    if (!fill) throw Error(ErrorKind::invalid_argument, "no fill function", {}, std::string(name));
    tensors_.push_back({std::string(name), type, std::move(dims), {}, {}, size, std::move(fill)});
  }

  // Drops tensor `name`; whether it was added.
  bool remove_tensor(std::string_view name) {
    return std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; }) != 0;
  }

  std::vector<std::byte> to_bytes() const {
    std::vector<std::byte> out;
    emit([&](const std::byte* p, std::size_t n) { out.insert(out.end(), p, p + n); });
    return out;
  }

  void write(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr)
      throw Error(ErrorKind::io, std::string("cannot create file: ") + std::strerror(errno), path);
    bool ok = true;
    emit([&](const std::byte* p, std::size_t n) {
      if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) ok = false;
    });
    const int saved = errno;
    if (std::fclose(f) != 0 || !ok) {
      throw Error(ErrorKind::io,
                  std::string("cannot write file: ") + std::strerror(ok ? errno : saved), path);
    }
  }

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<std::uint64_t> dims;
    std::span<const std::byte> view;  // borrowed bytes, or
    std::vector<std::byte> owned;     // owned ones (then view is empty), or
    std::size_t lazy_size = 0;        // bytes that `fill` writes at emit time
    std::function<void(std::span<std::byte>)> fill;
    std::size_t size() const noexcept {
      return fill ? lazy_size : (owned.empty() ? view.size() : owned.size());
    }
    std::span<const std::byte> bytes() const noexcept {
      return owned.empty() ? view : std::span<const std::byte>(owned);
    }
  };
  struct Kv {
    std::string key;
    std::vector<std::byte> value;  // type tag + value, as written
  };

  void check_tensor(std::string_view name, DType type, const std::vector<std::uint64_t>& dims,
                    std::size_t bytes) const {
    const std::string n(name);
    DTypeInfo info{};
    if (!dtype_info(type, info))
      throw Error(ErrorKind::unsupported, "unknown tensor type " + dtype_name(type), {}, n);
    if (!info.in_files)
      throw Error(
          ErrorKind::unsupported,
          dtype_name(type) + " is an in-memory layout (load-time repacking), not a file type", {},
          n);
    if (dims.empty() || dims.size() > 4)
      throw Error(ErrorKind::invalid_argument, "a tensor has 1 to 4 dimensions", {}, n);
    std::uint64_t elements = 1;
    for (std::uint64_t d : dims) {
      if (d == 0 || d > (std::uint64_t{1} << 40) / elements)
        throw Error(ErrorKind::invalid_argument, "bad dimension " + std::to_string(d), {}, n);
      elements *= d;
    }
    if (dims[0] % info.block_elements != 0)
      throw Error(ErrorKind::invalid_argument,
                  "first dimension is not a multiple of the block size", {}, n);
    if (elements / info.block_elements * info.block_bytes != bytes)
      throw Error(ErrorKind::invalid_argument,
                  std::to_string(bytes) + " bytes of data for a tensor that needs " +
                      std::to_string(elements / info.block_elements * info.block_bytes),
                  {}, n);
    for (const Tensor& t : tensors_)
      if (t.name == name) throw Error(ErrorKind::invalid_argument, "duplicate tensor name", {}, n);
  }

  static void put_string(std::vector<std::byte>& out, std::string_view s) {
    detail::store_le(out, s.size(), 8);
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
  }
  static std::vector<std::byte> array_header(ValueType elem, std::size_t count) {
    std::vector<std::byte> out;
    detail::store_le(out, static_cast<std::uint32_t>(ValueType::array), 4);
    detail::store_le(out, static_cast<std::uint32_t>(elem), 4);
    detail::store_le(out, count, 8);
    return out;
  }
  void scalar(std::string_view key, ValueType type, std::uint64_t bits, std::size_t size) {
    std::vector<std::byte> out;
    detail::store_le(out, static_cast<std::uint32_t>(type), 4);
    detail::store_le(out, bits, size);
    put(key, std::move(out));
  }
  template <class T>
  void array(std::string_view key, ValueType elem, const std::vector<T>& values) {
    std::vector<std::byte> out = array_header(elem, values.size());
    for (T v : values) {
      std::uint64_t bits;
      if constexpr (std::is_same_v<T, float>)
        bits = std::bit_cast<std::uint32_t>(v);
      else if constexpr (std::is_same_v<T, double>)
        bits = std::bit_cast<std::uint64_t>(v);
      else
        bits = static_cast<std::uint64_t>(v);  // two's complement: low bytes are the value
      detail::store_le(out, bits, sizeof(T));
    }
    put(key, std::move(out));
  }
  void put(std::string_view key, std::vector<std::byte> value) {
    for (Kv& kv : kvs_)
      if (kv.key == key) {
        kv.value = std::move(value);
        return;
      }
    kvs_.push_back({std::string(key), std::move(value)});
  }

  template <class Sink>
  void emit(Sink&& sink) const {
    std::vector<std::byte> head;
    detail::store_le(head, kMagic, 4);
    detail::store_le(head, kVersion, 4);
    detail::store_le(head, tensors_.size(), 8);
    detail::store_le(head, kvs_.size(), 8);
    for (const Kv& kv : kvs_) {
      put_string(head, kv.key);
      head.insert(head.end(), kv.value.begin(), kv.value.end());
    }
    std::uint64_t offset = 0;  // relative to the data section
    for (const Tensor& t : tensors_) {
      put_string(head, t.name);
      detail::store_le(head, t.dims.size(), 4);
      for (std::uint64_t d : t.dims) detail::store_le(head, d, 8);
      detail::store_le(head, static_cast<std::uint32_t>(t.type), 4);
      detail::store_le(head, offset, 8);
      offset += padded(t.size());
    }
    head.resize(padded(head.size()), std::byte{0});
    sink(head.data(), head.size());
    const std::vector<std::byte> zeros(alignment_, std::byte{0});
    std::vector<std::byte> lazy;
    for (const Tensor& t : tensors_) {
      std::span<const std::byte> data = t.bytes();
      if (t.fill) {
        lazy.assign(t.lazy_size, std::byte{0});
        t.fill(lazy);
        data = lazy;
      }
      sink(data.data(), data.size());
      sink(zeros.data(), padded(data.size()) - data.size());
    }
  }
  std::uint64_t padded(std::uint64_t n) const {
    return (n + alignment_ - 1) / alignment_ * alignment_;
  }

  std::size_t alignment_ = kDefaultAlignment;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace hllm::gguf
