#pragma once
// hllm::Error: the one exception type the library throws. It carries a kind (so callers can
// branch on it) and, for errors found in files, the file, the field and the byte offset, so a
// user can see exactly what was wrong without a debugger.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace hllm {

enum class ErrorKind {
  invalid_argument,  // a caller passed something impossible (bad dimension, bad flag value)
  out_of_range,      // an index or token id outside its valid range
  capacity,          // a fixed-size resource (KV cache, context) would overflow
  io,                // the operating system failed us (open, map, read)
  format,            // a file is malformed: truncated, inconsistent, wrong magic
  unsupported,       // well-formed input that this version does not handle
  internal,          // a broken invariant inside hllm: a bug
};

inline const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::out_of_range: return "out of range";
    case ErrorKind::capacity: return "capacity exceeded";
    case ErrorKind::io: return "I/O error";
    case ErrorKind::format: return "format error";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::internal: return "internal error";
  }
  return "error";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string file = {}, std::string field = {},
        std::optional<std::uint64_t> offset = {})
      : std::runtime_error(compose(kind, message, file, field, offset)),
        kind_(kind),
        message_(message),
        file_(std::move(file)),
        field_(std::move(field)),
        offset_(offset) {}

  ErrorKind kind() const noexcept { return kind_; }
  // The bare message, without the kind/file/field/offset prefix that what() carries.
  const std::string& message() const noexcept { return message_; }
  const std::string& file() const noexcept { return file_; }
  const std::string& field() const noexcept { return field_; }
  std::optional<std::uint64_t> offset() const noexcept { return offset_; }

 private:
  static std::string compose(ErrorKind kind, const std::string& message, const std::string& file,
                             const std::string& field, std::optional<std::uint64_t> offset) {
    std::string text = "hllm: ";
    text += to_string(kind);
    if (!file.empty()) text += ": " + file;
    if (!field.empty()) text += ": field '" + field + "'";
    if (offset) text += " at byte offset " + std::to_string(*offset);
    text += ": " + message;
    return text;
  }

  ErrorKind kind_;
  std::string message_;
  std::string file_;
  std::string field_;
  std::optional<std::uint64_t> offset_;
};

// Throws invalid_argument naming `what` unless `condition` holds. Used for argument checks
// whose message is cheap to build; hot loops never call it.
inline void require(bool condition, const std::string& what,
                    ErrorKind kind = ErrorKind::invalid_argument) {
  if (!condition) throw Error(kind, what);
}

}  // namespace hllm
