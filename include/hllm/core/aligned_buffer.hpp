#pragma once
// A 64-byte aligned, owning, fixed-size array. 64 bytes is one cache line and one AVX-512
// register, so vector loads from the start of any buffer never split a line.

#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "hllm/core/error.hpp"

namespace hllm {

inline constexpr std::size_t kBufferAlignment = 64;

template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "AlignedBuffer holds plain numeric data only");

 public:
  AlignedBuffer() = default;
  // Zero-initialised, so a freshly made buffer never exposes stale memory. A failed allocation
  // is an Error(capacity), like every other error of the library, not a std::bad_alloc.
  explicit AlignedBuffer(std::size_t count) : size_(count) {
    if (count == 0) return;
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) - kBufferAlignment)
      throw Error(ErrorKind::capacity, "AlignedBuffer: " + std::to_string(count) +
                                           " elements overflow the address space");
    const std::size_t bytes = round_up(count * sizeof(T));
    try {
      data_ = static_cast<T*>(::operator new (bytes, std::align_val_t{kBufferAlignment}));
    } catch (const std::bad_alloc&) {
      size_ = 0;
      throw Error(ErrorKind::capacity,
                  "AlignedBuffer: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  AlignedBuffer(const AlignedBuffer& other) : AlignedBuffer(other.size_) {
    if (size_) std::memcpy(static_cast<void*>(data_), other.data_, size_ * sizeof(T));
  }
  AlignedBuffer& operator=(const AlignedBuffer& other) {
    if (this != &other) *this = AlignedBuffer(other);
    return *this;
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  static std::size_t round_up(std::size_t bytes) {
    return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  void release() noexcept {
    if (data_) ::operator delete (static_cast<void*>(data_), std::align_val_t{kBufferAlignment});
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace hllm
