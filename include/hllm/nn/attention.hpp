#pragma once
// Causal scaled dot-product attention of queries over a KV cache. MHA, GQA and MQA are one code
// path: query head h reads KV head h / (n_heads / n_kv_heads), so n_kv_heads = n_heads is MHA
// and n_kv_heads = 1 is MQA. Scores are consumed tile by tile with an online softmax, so no
// T×T score matrix is ever allocated.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "hllm/core/error.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm {

struct AttentionShape {
  std::size_t n_heads = 0;
  std::size_t n_kv_heads = 0;
  std::size_t head_dim = 0;
  std::size_t sliding_window = 0;  // 0: full causal; W: position p sees keys in (p - W, p]
  float scale = 0.0f;              // score = q·k · scale; 0: 1/sqrt(head_dim)
  float softcap = 0.0f;            // score → softcap · tanh(score / softcap); 0: none
};

class Attention {
 public:
  explicit Attention(const AttentionShape& shape)
      : shape_(shape),
        group_(shape.n_kv_heads ? shape.n_heads / shape.n_kv_heads : 0),
        scoring_(shape.scale != 0.0f ? shape.scale
                 : shape.head_dim    ? 1.0f / std::sqrt(static_cast<float>(shape.head_dim))
                                     : 0.0f,
                 shape.softcap) {
    if (shape.n_heads == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
      throw Error(ErrorKind::invalid_argument,
                  "attention: head counts and head_dim must be positive");
    if (shape.n_heads % shape.n_kv_heads != 0)
      throw Error(ErrorKind::invalid_argument, "attention: n_heads (" +
                                                   std::to_string(shape.n_heads) +
                                                   ") is not divisible by n_kv_heads (" +
                                                   std::to_string(shape.n_kv_heads) + ")");
  }

  const AttentionShape& shape() const noexcept { return shape_; }

  // First key position visible from a query at `position`.
  std::size_t first_visible(std::size_t position) const noexcept {
    const std::size_t w = shape_.sliding_window;
    return (w != 0 && position + 1 > w) ? position + 1 - w : 0;
  }

  // One query token at `position` whose keys/values (and all earlier ones) are in the cache,
  // for query heads [head_begin, head_end) (a caller may split heads across threads).
  // q, out: [n_heads][head_dim]
  template <class KV>
  void forward(const float* q, std::size_t position, const KVCache<KV>& cache, std::size_t layer,
               float* out, const kernels::KernelTable& kernels = kernels::active(),
               std::size_t head_begin = 0, std::size_t head_end = SIZE_MAX) const {
    if (position >= cache.capacity())
      throw Error(ErrorKind::out_of_range,
                  "attention: position " + std::to_string(position) + " is outside the KV cache");
    forward_unchecked(q, position, cache, layer, out, kernels, head_begin, head_end);
  }

  // The same without the position check, for callers that checked it before entering a
  // parallel region (where nothing may throw).
  template <class KV>
  void forward_unchecked(const float* q, std::size_t position, const KVCache<KV>& cache,
                         std::size_t layer, float* out, const kernels::KernelTable& kernels,
                         std::size_t head_begin, std::size_t head_end) const noexcept {
    const std::size_t first = first_visible(position);
    const kernels::AttendGroupFn attend = kernels.attend_group_for<KV>();
    for_head_groups(position, head_begin, head_end,
                    [&](std::size_t kv_head, std::size_t h, std::size_t heads, std::size_t n_keys) {
                      attend(q + h * shape_.head_dim, cache.keys(layer, kv_head, first),
                             cache.values(layer, kv_head, first), n_keys, shape_.head_dim, heads,
                             scoring_, out + h * shape_.head_dim);
                    });
  }

  // The same over a paged cache: the sequence's keys and values lie in `blocks` of `storage`
  // (its block table's, in position order; they hold every position up to `position`). The
  // caller checked storage.check_paged_attention() and the layer. The results are bit-identical
  // to forward_unchecked's over the same rows in a contiguous cache.
  template <class KV>
  void forward_paged_unchecked(const float* q, std::size_t position,
                               const PagedKVStorage<KV>& storage, std::span<const BlockId> blocks,
                               std::size_t layer, float* out, const kernels::KernelTable& kernels,
                               std::size_t head_begin, std::size_t head_end) const noexcept {
    const std::size_t first = first_visible(position);
    const kernels::AttendGroupPagedFn attend = kernels.attend_group_paged_for<KV>();
    for_head_groups(position, head_begin, head_end,
                    [&](std::size_t kv_head, std::size_t h, std::size_t heads, std::size_t n_keys) {
                      attend(q + h * shape_.head_dim,
                             storage.rows_unchecked(blocks, layer, 0, kv_head, first),
                             storage.rows_unchecked(blocks, layer, 1, kv_head, first), n_keys,
                             shape_.head_dim, heads, scoring_, out + h * shape_.head_dim);
                    });
  }

 private:
  // Calls f(kv_head, first query head, query heads, visible keys) for the runs of consecutive
  // query heads in [head_begin, head_end) that share a KV head: the kernels read their keys and
  // values once.
  template <class F>
  void for_head_groups(std::size_t position, std::size_t head_begin, std::size_t head_end,
                       F&& f) const noexcept {
    const std::size_t n_keys = position + 1 - first_visible(position);
    const std::size_t end = std::min(head_end, shape_.n_heads);
    for (std::size_t h = head_begin; h < end;) {
      const std::size_t kv_head = h / group_;
      const std::size_t heads = std::min(end, (kv_head + 1) * group_) - h;
      f(kv_head, h, heads, n_keys);
      h += heads;
    }
  }

  AttentionShape shape_;
  std::size_t group_;
  AttentionScoring scoring_;
};

}  // namespace hllm
