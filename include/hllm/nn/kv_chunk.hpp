#pragma once
// Where the tokens of one forward chunk keep their keys and values: the decoder block's one
// interface to a cache, so a single block body serves both a sequence in its own contiguous
// KVCache (ContiguousKVChunk) and a batch of tokens of several sequences in a paged pool
// (PagedKVChunk). A chunk view provides, for the chunk's token t:
//   position(t)       the position it takes in its sequence;
//   store(layer, t, k, v)
//                     writes its keys and values, k, v: [n_kv_heads][head_dim] (may throw);
//   value_rows()      whether values have rows of their own or are the key rows (KVValues);
//   attend(attention, layer, t, q, out, kernels, head_begin, head_end)
//                     its attention over its own sequence's keys at positions <= position(t)
//                     for query heads [head_begin, head_end), q, out: [n_heads][head_dim]
//                     (noexcept: it runs on pool threads);
//   visible_keys()    the keys all the chunk's tokens attend to together (sizes the thread split);
//   rotation()        how its element type rotates rows before storing them (nn/kv_rotation.hpp).
// Causality comes from the order of the block: every token of a chunk is stored before any of
// them attends, and each attends only up to its own position.

#include <cstddef>
#include <span>

#include "hllm/kernels/dispatch.hpp"
#include "hllm/nn/attention.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/nn/kv_rotation.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm {

// n_tokens consecutive tokens of one sequence at positions start.. of a contiguous cache.
template <class KV>
class ContiguousKVChunk {
 public:
  ContiguousKVChunk(KVCache<KV>& cache, std::size_t start, std::size_t n_tokens)
      : cache_(cache), start_(start), n_tokens_(n_tokens) {}

  std::size_t position(std::size_t t) const noexcept { return start_ + t; }
  void store(std::size_t layer, std::size_t t, const float* k, const float* v) {
    cache_.store(layer, start_ + t, k, v);
  }
  void attend(const Attention& attention, std::size_t layer, std::size_t t, const float* q,
              float* out, const kernels::KernelTable& kernels, std::size_t head_begin,
              std::size_t head_end) const noexcept {
    attention.forward_unchecked(q, start_ + t, cache_, layer, out, kernels, head_begin, head_end);
  }
  std::size_t visible_keys() const noexcept {
    return n_tokens_ * start_ + n_tokens_ * (n_tokens_ + 1) / 2;
  }
  KVRotation rotation() const noexcept { return kv_rotation<KV>(cache_.head_dim()); }
  KVValues value_rows() const noexcept { return cache_.value_rows(); }

 private:
  KVCache<KV>& cache_;
  std::size_t start_, n_tokens_;
};

// One token of a batch in a paged cache: its sequence's block table and its position there.
struct PagedToken {
  const KVBlockTable* table;
  std::size_t position;
};

// Tokens of any sequences in one paged pool, each at its own position (model/batch.hpp lays a
// batch out this way). The tables must hold room for every position and own the blocks written
// (KVBlockTable::prepare_append); the storage must pass check_paged_attention().
template <class KV>
class PagedKVChunk {
 public:
  PagedKVChunk(PagedKVStorage<KV>& storage, std::span<const PagedToken> tokens)
      : storage_(storage), tokens_(tokens) {}

  std::size_t position(std::size_t t) const noexcept { return tokens_[t].position; }
  void store(std::size_t layer, std::size_t t, const float* k, const float* v) {
    const PagedToken& token = tokens_[t];
    storage_.store(token.table->block_for(token.position), token.table->slot_of(token.position),
                   layer, k, v);
  }
  void attend(const Attention& attention, std::size_t layer, std::size_t t, const float* q,
              float* out, const kernels::KernelTable& kernels, std::size_t head_begin,
              std::size_t head_end) const noexcept {
    const PagedToken& token = tokens_[t];
    attention.forward_paged_unchecked(q, token.position, storage_, token.table->blocks(), layer,
                                      out, kernels, head_begin, head_end);
  }
  std::size_t visible_keys() const noexcept {
    std::size_t keys = 0;
    for (const PagedToken& token : tokens_) keys += token.position + 1;
    return keys;
  }
  KVRotation rotation() const noexcept { return kv_rotation<KV>(storage_.head_dim()); }
  KVValues value_rows() const noexcept { return storage_.value_rows(); }

 private:
  PagedKVStorage<KV>& storage_;
  std::span<const PagedToken> tokens_;
};

}  // namespace hllm
