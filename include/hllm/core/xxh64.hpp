#pragma once
// XXH64 (Yann Collet's xxHash, 64-bit), bit for bit the reference algorithm, in one call or
// streamed in pieces of any size: the checksum of the files hllm writes (io/kv_state_file.hpp),
// so `xxhsum -H64` (xxhash 0.8: `xxh64sum`) can check one outside hllm. Four independent lanes
// of 8-byte words run at several GB/s, where byte-serial FNV-1a manages about one: a saved KV
// state of hundreds of MiB costs a fraction of its read time. Not cryptographic: it detects
// corruption (a flipped bit, a cut or spliced file), not a forger who recomputes it.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace hllm {

class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0) noexcept
      : lanes_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed) {}

  // Adds `bytes` after everything added so far.
  void update(std::span<const std::byte> bytes) noexcept {
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    total_ += n;
    if (buffered_ > 0) {  // finish the stripe a previous call began
      const std::size_t take = n < kStripe - buffered_ ? n : kStripe - buffered_;
      if (take > 0) std::memcpy(buffer_ + buffered_, p, take);
      buffered_ += take;
      p += take;
      n -= take;
      if (buffered_ < kStripe) return;
      stripe(buffer_);
      buffered_ = 0;
    }
    for (; n >= kStripe; p += kStripe, n -= kStripe) stripe(p);
    if (n > 0) std::memcpy(buffer_, p, n);
    buffered_ = n;
  }

  // The hash of everything added so far (the state is unchanged: more may be added after).
  std::uint64_t digest() const noexcept {
    std::uint64_t h;
    if (total_ >= kStripe) {
      h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) +
          std::rotl(lanes_[3], 18);
      for (const std::uint64_t lane : lanes_) h = (h ^ round(0, lane)) * kP1 + kP4;
    } else {
      h = seed_ + kP5;
    }
    h += total_;
    const std::byte* p = buffer_;
    std::size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ round(0, load64(p)), 27) * kP1 + kP4;
    if (n >= 4) {
      h = std::rotl(h ^ load32(p) * kP1, 23) * kP2 + kP3;
      p += 4;
      n -= 4;
    }
    for (; n > 0; ++p, --n) h = std::rotl(h ^ std::to_integer<std::uint64_t>(*p) * kP5, 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ULL;
  static constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
  static constexpr std::uint64_t kP3 = 0x165667B19E3779F9ULL;
  static constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
  static constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ULL;
  static constexpr std::size_t kStripe = 32;  // four lanes of one 8-byte word

  // Little-endian loads, whatever the host (the reference reads little-endian words).
  static std::uint64_t load64(const std::byte* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    if constexpr (std::endian::native == std::endian::big) {
      std::uint64_t swapped = 0;
      for (int i = 0; i < 8; ++i) swapped = (swapped << 8) | ((v >> (8 * i)) & 0xff);
      v = swapped;
    }
    return v;
  }
  static std::uint64_t load32(const std::byte* p) noexcept {
    std::uint64_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
    return v;
  }
  static constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t input) noexcept {
    return std::rotl(acc + input * kP2, 31) * kP1;
  }
  void stripe(const std::byte* p) noexcept {
    for (int i = 0; i < 4; ++i) lanes_[i] = round(lanes_[i], load64(p + 8 * i));
  }

  std::uint64_t lanes_[4];
  std::uint64_t seed_;
  std::uint64_t total_ = 0;    // bytes added
  std::byte buffer_[kStripe];  // [buffered_] bytes of an unfinished stripe
  std::size_t buffered_ = 0;
};

// XXH64 of `bytes` in one call.
inline std::uint64_t xxh64(std::span<const std::byte> bytes, std::uint64_t seed = 0) noexcept {
  Xxh64 h(seed);
  h.update(bytes);
  return h.digest();
}

}  // namespace hllm
