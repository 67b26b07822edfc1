#pragma once
// Writing a file so that no reader ever sees half of it: the bytes go to a temporary file beside
// the target (same directory, so the same file system), which commit() flushes to the disk and
// renames onto the target in one step. A crash, a full disk or an exception before commit()
// leaves the old file (or none) and no temporary: the destructor removes it. A target that
// exists and is not a regular file (a directory, a FIFO, /dev/null) is refused, never replaced.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "hllm/core/error.hpp"
#include "hllm/io/input_file.hpp"

namespace hllm::io {

class OutputFile {
 public:
  // Creates the temporary file for `path`. Throws Error(invalid_argument) for an empty path,
  // Error(io) naming the path if it exists and is not a regular file, or if the temporary cannot
  // be created (a missing directory, no permission).
  static OutputFile create(const std::string& path, const char* what = "file") {
    if (path.empty())
      throw Error(ErrorKind::invalid_argument,
                  std::string("the empty string is not a path (expected a ") + what + ")");
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw Error(ErrorKind::io,
                  std::string("is ") + file_kind(st.st_mode) + ", not a regular " + what, path);
    OutputFile f;
    f.path_ = path;
    // pid and a process-wide counter make the name unique among writers; O_EXCL makes sure.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100 && f.fd_ < 0; ++attempt) {
      f.temp_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      f.fd_ = ::open(f.temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (f.fd_ < 0 && errno != EEXIST) break;
    }
    if (f.fd_ < 0) {
      f.temp_.clear();  // nothing of ours to remove
      f.fail_errno(std::string("cannot create ") + what);
    }
    return f;
  }

  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  OutputFile(OutputFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        temp_(std::exchange(other.temp_, {})) {}
  OutputFile& operator=(OutputFile&&) = delete;
  // Without commit(): the temporary is closed and removed, the target left as it was.
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }

  const std::string& path() const noexcept { return path_; }

  // Appends `bytes`; Error(io) naming the target if the system refuses (a full disk).
  void write(std::span<const std::byte> bytes) {
    if (fd_ < 0) throw Error(ErrorKind::invalid_argument, "write after commit", path_);
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    while (n > 0) {
      const ssize_t done = ::write(fd_, p, n);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) fail_errno("cannot write file");
      p += done;
      n -= static_cast<std::size_t>(done);
    }
  }

  // Flushes the bytes to the disk and renames the temporary onto the target: from here on a
  // reader of `path` sees the whole new file.
  void commit() {
    if (fd_ < 0) throw Error(ErrorKind::invalid_argument, "commit after commit", path_);
    if (::fsync(fd_) != 0) fail_errno("cannot flush file");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail_errno("cannot close file");
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      fail_errno("cannot move the new file into place");
    temp_.clear();
  }

 private:
  OutputFile() = default;

  [[noreturn]] void fail_errno(const std::string& what) const {
    throw Error(ErrorKind::io, what + ": " + std::strerror(errno), path_);
  }

  int fd_ = -1;
  std::string path_;  // the target
  std::string temp_;  // the temporary beside it, while it exists
};

}  // namespace hllm::io
