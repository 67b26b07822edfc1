#pragma once
// MappedFile: the bytes of a file, mapped read-only (POSIX mmap, MAP_PRIVATE), or a borrowed
// in-memory span behind the same interface so parsers can be tested and fuzzed without files.
// Move-only: the mapping is released exactly once, by whichever object owns it last.

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "hllm/core/error.hpp"
#include "hllm/io/input_file.hpp"

namespace hllm::io {

class MappedFile {
 public:
  MappedFile() = default;

  // Maps the whole file. Throws what InputFile::open throws (an empty path, a file that cannot
  // be opened, anything but a regular file: never blocking on a FIFO), io if it cannot be
  // mapped, and format if it is empty (no format we read has zero bytes, and mmap of length 0
  // is an error anyway).
  static MappedFile open(const std::string& path) {
    const InputFile input = InputFile::open(path);
    if (input.size() == 0) throw Error(ErrorKind::format, "file is empty (0 bytes)", path, {}, 0);
    const auto size = static_cast<std::size_t>(input.size());
    // The mapping keeps its own reference to the file once `input` closes its descriptor.
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, input.fd(), 0);
    if (map == MAP_FAILED) fail_errno("cannot map file", path);
    MappedFile file;
    file.map_ = map;
    file.data_ = static_cast<const std::byte*>(map);
    file.size_ = size;
    file.path_ = path;
    return file;
  }

  // Borrows `bytes` (no copy): the caller keeps them alive for the lifetime of this object.
  static MappedFile from_memory(std::span<const std::byte> bytes, std::string name) {
    MappedFile file;
    file.data_ = bytes.data();
    file.size_ = bytes.size();
    file.path_ = std::move(name);
    return file;
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept { swap(other); }
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      MappedFile(std::move(other)).swap(*this);  // releases our old mapping via the temporary
    }
    return *this;
  }
  ~MappedFile() {
    if (map_ != nullptr) ::munmap(map_, size_);
  }

  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::string& path() const noexcept { return path_; }
  bool is_mapped() const noexcept { return map_ != nullptr; }

 private:
  [[noreturn]] static void fail_errno(const std::string& what, const std::string& path) {
    throw Error(ErrorKind::io, what + ": " + std::strerror(errno), path);
  }

  void swap(MappedFile& other) noexcept {
    std::swap(map_, other.map_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(path_, other.path_);
  }

  void* map_ = nullptr;  // non-null only when we own an mmap region of size_ bytes
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace hllm::io
