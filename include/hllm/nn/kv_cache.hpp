#pragma once
// The key/value cache of one sequence: for every layer and KV head, `capacity` rows of head_dim
// values, contiguous, so attention scans one head's keys with unit stride. With
// KVValues::keys there are no value rows: values() returns the key rows (latent attention). The
// element type is float, f16, bf16, BlockQ8_0, BlockQ4_0 or BlockFP8 (core/kv_element.hpp: a row of
// a block type is head_dim / 32 blocks). Storing at a position at or past the capacity is an
// hllm::Error, never a write out of bounds.

#include <cstddef>
#include <string>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"

namespace hllm {

template <class KV = float>
class KVCache {
  static_assert(is_kv_element_v<KV>,
                "KV cache type must be float, f16, bf16, BlockQ8_0, BlockQ4_0 or BlockFP8");

 public:
  using element_type = KV;

  KVCache(std::size_t n_layers, std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity,
          KVValues values = KVValues::separate)
      : n_layers_(n_layers),
        n_kv_heads_(n_kv_heads),
        head_dim_(head_dim),
        capacity_(capacity),
        value_rows_(values) {
    if (n_layers == 0 || n_kv_heads == 0 || head_dim == 0 || capacity == 0)
      throw Error(ErrorKind::invalid_argument,
                  "KV cache dimensions must be positive (layers " + std::to_string(n_layers) +
                      ", kv heads " + std::to_string(n_kv_heads) + ", head dim " +
                      std::to_string(head_dim) + ", capacity " + std::to_string(capacity) + ")");
    check_kv_head_dim<KV>(head_dim);
    const std::size_t elements =
        checked_kv_elements<KV>({n_layers, n_kv_heads, capacity, kv_row_elements<KV>(head_dim)},
                                "KV cache of " + std::to_string(capacity) + " tokens: its size");
    try {
      keys_ = AlignedBuffer<KV>(elements);
      if (values == KVValues::separate) values_ = AlignedBuffer<KV>(elements);
    } catch (const Error& e) {
      throw Error(ErrorKind::capacity,
                  "KV cache of " + std::to_string(capacity) + " tokens needs " +
                      std::to_string(kv_row_parts(values) * elements * sizeof(KV)) +
                      " bytes: " + e.message());
    }
  }

  std::size_t n_layers() const noexcept { return n_layers_; }
  std::size_t n_kv_heads() const noexcept { return n_kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  std::size_t capacity() const noexcept { return capacity_; }
  // Positions [0, length) hold committed tokens.
  std::size_t length() const noexcept { return length_; }
  std::size_t bytes() const noexcept { return (keys_.size() + values_.size()) * sizeof(KV); }
  KVValues value_rows() const noexcept { return value_rows_; }

  // Writes the keys and values of one token at `position` in `layer` (v unread with
  // KVValues::keys). k, v: [n_kv_heads][head_dim]
  void store(std::size_t layer, std::size_t position, const float* k, const float* v) {
    if (layer >= n_layers_)
      throw Error(ErrorKind::out_of_range, "KV cache layer " + std::to_string(layer) +
                                               " >= layer count " + std::to_string(n_layers_));
    check_room(position, 1);
    for (std::size_t h = 0; h < n_kv_heads_; ++h) {
      store_kv_row(k + h * head_dim_, head_dim_, keys_.data() + offset(layer, h, position));
      if (value_rows_ == KVValues::separate)
        store_kv_row(v + h * head_dim_, head_dim_, values_.data() + offset(layer, h, position));
    }
  }

  // [capacity - position][head_dim] keys (values) of one KV head of one layer, from `position`
  // on (row j of them: kv_row(keys(...), j, head_dim)).
  const KV* keys(std::size_t layer, std::size_t kv_head, std::size_t position = 0) const noexcept {
    return keys_.data() + offset(layer, kv_head, position);
  }
  const KV* values(std::size_t layer, std::size_t kv_head,
                   std::size_t position = 0) const noexcept {
    const KV* rows = value_rows_ == KVValues::separate ? values_.data() : keys_.data();
    return rows + offset(layer, kv_head, position);
  }

  // Throws unless `count` more tokens fit after `position`.
  void check_room(std::size_t position, std::size_t count) const {
    if (position > capacity_ || count > capacity_ - position)
      throw Error(ErrorKind::capacity, "KV cache full: " + std::to_string(count) +
                                           " token(s) at position " + std::to_string(position) +
                                           " exceed the capacity of " + std::to_string(capacity_) +
                                           " tokens");
  }
  // Marks `count` more positions as committed once every layer has stored them.
  void advance(std::size_t count) {
    check_room(length_, count);
    length_ += count;
  }
  // Forgets everything from position `length` on (e.g. to rewind a conversation).
  void truncate(std::size_t length) {
    if (length > length_)
      throw Error(ErrorKind::out_of_range, "cannot truncate a KV cache of " +
                                               std::to_string(length_) + " tokens to " +
                                               std::to_string(length));
    length_ = length;
  }
  void clear() noexcept { length_ = 0; }

 private:
  std::size_t offset(std::size_t layer, std::size_t kv_head, std::size_t position) const noexcept {
    return ((layer * n_kv_heads_ + kv_head) * capacity_ + position) *
           kv_row_elements<KV>(head_dim_);
  }

  std::size_t n_layers_, n_kv_heads_, head_dim_, capacity_;
  KVValues value_rows_;
  std::size_t length_ = 0;
  AlignedBuffer<KV> keys_;
  AlignedBuffer<KV> values_;  // empty with KVValues::keys
};

// Compiled once per program, by hllm/implementation.hpp (its part model.hpp): every session holds
// a cache of each type (nn/any_kv_cache.hpp), so every file that makes one would instantiate all
// six otherwise.
extern template class KVCache<float>;
extern template class KVCache<f16>;
extern template class KVCache<bf16>;
extern template class KVCache<BlockQ8_0>;
extern template class KVCache<BlockQ4_0>;
extern template class KVCache<BlockFP8>;

}  // namespace hllm
