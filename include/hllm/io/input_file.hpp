#pragma once
// Opening what a user names as an input, so that nothing outside hllm's control can hang or
// exhaust it: every path is opened with O_NONBLOCK (a FIFO with no writer would otherwise block
// open() forever) and must be a regular file (FIFOs, devices, sockets and directories are refused
// at once, by name of what they are); the empty string is not a path; and every text input is
// read with a stated size limit, so /dev/zero on standard input ends in an error, not in
// unbounded memory.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <string>
#include <utility>

#include "hllm/core/error.hpp"

namespace hllm::io {

// Text inputs (prompt files, perplexity corpora, token lists, config.json): 1 GiB. A larger
// text is almost certainly not what the user meant to pass, and reading it costs that much RAM.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{1} << 30;
// One line of interactive input (a chat message): 1 MiB.
inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;

// "1 GiB", "1 MiB", or a byte count: how limits appear in messages.
inline std::string describe_bytes(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// What a non-regular file is, in words, for the refusal message.
inline const char* file_kind(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// An open file descriptor of a regular file, closed by the destructor.
class InputFile {
 public:
  // Opens `path` for reading. Throws Error(invalid_argument) for an empty path, Error(io) naming
  // the path and the errno text if it cannot be opened, and Error(io) naming what it is if it is
  // not a regular file. Never blocks: O_NONBLOCK makes open() of a FIFO return at once, and the
  // flag is cleared again for the regular file that remains.
  static InputFile open(const std::string& path, const char* what = "file") {
    if (path.empty())
      throw Error(ErrorKind::invalid_argument,
                  std::string("the empty string is not a path (expected a ") + what + ")");
    InputFile f;
    f.path_ = path;
    f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f.fd_ < 0) f.fail_errno(std::string("cannot open ") + what);
    struct stat st {};
    if (::fstat(f.fd_, &st) != 0) f.fail_errno(std::string("cannot inspect ") + what);
    if (!S_ISREG(st.st_mode))
      throw Error(ErrorKind::io,
                  std::string("is ") + file_kind(st.st_mode) + ", not a regular " + what, path);
    const int flags = ::fcntl(f.fd_, F_GETFL);
    if (flags < 0 || ::fcntl(f.fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
      f.fail_errno(std::string("cannot prepare ") + what);
    f.size_ = static_cast<std::uint64_t>(st.st_size);
    return f;
  }

  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

  // The whole file as bytes, refused with Error(capacity) if it is larger than `max_bytes`.
  std::string read_all(std::size_t max_bytes = kMaxTextFileBytes) const {
    if (size_ > max_bytes)
      throw Error(ErrorKind::capacity,
                  "the file has " + std::to_string(size_) + " bytes, more than the limit of " +
                      describe_bytes(max_bytes) + " for a text input",
                  path_);
    std::string text(static_cast<std::size_t>(size_), '\0');
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::read(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_errno("cannot read file");
      if (n == 0) break;  // the file shrank since fstat: keep what is there
      done += static_cast<std::size_t>(n);
    }
    text.resize(done);
    return text;
  }

 private:
  InputFile() = default;

  [[noreturn]] void fail_errno(const std::string& what) const {
    throw Error(ErrorKind::io, what + ": " + std::strerror(errno), path_);
  }

  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string path_;
};

// A text file named by the user, whole: the checks of InputFile::open, then at most `max_bytes`.
inline std::string read_text_file(const std::string& path, const char* what = "text file",
                                  std::size_t max_bytes = kMaxTextFileBytes) {
  return InputFile::open(path, what).read_all(max_bytes);
}

// Everything on a stream (standard input), refused with Error(capacity) once it passes
// `max_bytes`: reads at most one 64 KiB buffer past the limit, whatever the stream holds.
inline std::string read_stream(std::istream& in, const std::string& name,
                               std::size_t max_bytes = kMaxTextFileBytes) {
  std::string text;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const auto n = static_cast<std::size_t>(in.gcount());
    if (text.size() + n > max_bytes)
      throw Error(ErrorKind::capacity,
                  "the input is longer than the limit of " + describe_bytes(max_bytes), name);
    text.append(buffer, n);
  }
  if (in.bad()) throw Error(ErrorKind::io, "cannot read the input", name);
  return text;
}

// std::getline with a bound: false at the end of the stream (nothing read), true with the line
// (without its '\n') otherwise. A line longer than `max_bytes` throws Error(capacity) after
// reading at most max_bytes + 1 bytes of it.
inline bool read_line(std::istream& in, std::string& line, const std::string& name,
                      std::size_t max_bytes = kMaxLineBytes) {
  line.clear();
  std::istream::sentry ok(in, /*noskipws=*/true);
  if (!ok) return false;
  std::streambuf* buffer = in.rdbuf();
  while (true) {
    const int c = buffer->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    if (line.size() == max_bytes)
      throw Error(ErrorKind::capacity,
                  "a line of input is longer than the limit of " + describe_bytes(max_bytes), name);
    line.push_back(static_cast<char>(c));
  }
}

}  // namespace hllm::io
