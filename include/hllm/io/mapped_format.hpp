#pragma once
// MappedFormat<Format>: how a parsed file format (gguf::File, safetensors::File) holds its bytes
// and is made. The MappedFile sits on the heap, shared by the Format's copies, so the data
// pointers of its tensors stay valid however the Format moves. Format derives from
// MappedFormat<Format>, befriends it, and parses in its constructor from the shared bytes.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "hllm/io/mapped_file.hpp"

namespace hllm::io {

template <class Format>
class MappedFormat {
 public:
  // Maps `path` and parses it.
  static Format open(const std::string& path) {
    return Format(std::make_shared<const MappedFile>(MappedFile::open(path)));
  }
  // Parses bytes owned by the caller, who keeps them alive as long as the Format (and any view
  // of its tensors) is used. `name` stands for the path in error messages.
  static Format from_memory(std::span<const std::byte> bytes, std::string name) {
    return Format(
        std::make_shared<const MappedFile>(MappedFile::from_memory(bytes, std::move(name))));
  }

  const std::string& path() const noexcept { return file_->path(); }
  std::span<const std::byte> bytes() const noexcept { return file_->bytes(); }
  // True when the bytes are this object's own read-only private mapping of a file (not memory
  // borrowed from the caller): pages may then be dropped and would fault back from the file.
  bool is_mapped() const noexcept { return file_->is_mapped(); }

 protected:
  explicit MappedFormat(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}

  std::shared_ptr<const MappedFile> file_;
};

}  // namespace hllm::io
