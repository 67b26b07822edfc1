#pragma once
// Context shift in a paged KV cache, as llama.cpp does it when a sequence fills its context:
// keep the first n_keep positions, drop the n_discard after them, and move every later position
// down by n_discard. A moved key was rotated by RoPE at its old position; rotating it by
// −n_discard positions' angles makes it the key of its new position (rotations compose), so
// nothing is recomputed. Values move unchanged. Quantized keys are dequantized, rotated and
// quantized again, as llama.cpp's shift does for quantized caches; a cache that stores rows
// Hadamard-rotated (nn/kv_rotation.hpp) has each key turned back first and again after.
//
// The result is not what a fresh prefill of the kept tokens would give: the moved tokens' keys
// and values of layers past the first still carry what they saw of the dropped tokens. That is
// the trade llama.cpp makes: generation continues without recomputing the context.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/kv_rotation.hpp"
#include "hllm/nn/paged_kv_storage.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

// How many positions a shift drops from a sequence of `length` committed positions keeping
// n_keep: half of the rest (llama.cpp's n_discard = n_left / 2).
constexpr std::size_t context_shift_discard(std::size_t length, std::size_t n_keep) noexcept {
  return length > n_keep ? (length - n_keep) / 2 : 0;
}

// Drops positions [n_keep, n_keep + n_discard) of the sequence `table` describes and moves the
// later ones down; its length shrinks by n_discard and the blocks past the new end are released.
// Blocks it rewrites that are shared or published are copied first (copy-on-write), so other
// sequences and the prefix cache keep their contents. Returns false, with the rows unchanged,
// when such a copy finds the pool empty (the blocks made private by then stay so). Throws
// invalid_argument for a range past the table's length or a table with released blocks.
template <class KV>
bool shift_context(KVBlockTable& table, PagedKVStorage<KV>& storage, KVBlockAllocator& allocator,
                   const Rope& rope, std::size_t n_keep, std::size_t n_discard) {
  const std::size_t length = table.length();
  if (n_keep > length || n_discard > length - n_keep)
    throw Error(ErrorKind::invalid_argument, "a context shift keeping " + std::to_string(n_keep) +
                                                 " and dropping " + std::to_string(n_discard) +
                                                 " positions of a sequence of " +
                                                 std::to_string(length));
  if (table.n_released() > 0)
    throw Error(ErrorKind::invalid_argument,
                "a context shift of a sequence whose sliding window released blocks");
  if (rope.head_dim() != storage.head_dim())
    throw Error(ErrorKind::invalid_argument,
                "a context shift with RoPE of head dim " + std::to_string(rope.head_dim()) +
                    " over a KV cache of head dim " + std::to_string(storage.head_dim()));
  if (n_discard == 0) return true;
  const auto copy = [&](BlockId from, BlockId to) { storage.copy_block(from, to); };
  if (!table.prepare_rewrite(allocator, n_keep, copy)) return false;
  const std::size_t head_dim = storage.head_dim();
  const std::size_t row_elements = kv_row_elements<KV>(head_dim);
  std::vector<float> cos(rope.rot_dims() / 2), sin(rope.rot_dims() / 2);  // [rot_dims/2]
  rope.shift_angles(-static_cast<std::int64_t>(n_discard), cos.data(), sin.data());
  const KVRotation rotation = kv_rotation<KV>(head_dim);
  std::vector<float> key(head_dim);  // [head_dim] one key, dequantized
  // Ascending, so every source is read before a later move overwrites it (sources lie above
  // their destinations).
  for (std::size_t from = n_keep + n_discard; from < length; ++from) {
    const std::size_t to = from - n_discard;
    const BlockId from_block = table.block_for(from), to_block = table.block_for(to);
    const std::size_t from_slot = table.slot_of(from), to_slot = table.slot_of(to);
    for (std::size_t layer = 0; layer < storage.n_layers(); ++layer)
      for (std::size_t head = 0; head < storage.n_kv_heads(); ++head) {
        const KV* k = storage.row(from_block, from_slot, layer, 0, head);
        for (std::size_t d = 0; d < head_dim; ++d) key[d] = kv_value(k, d);
        if (rotation.active()) hadamard_rotate(key.data(), head_dim, rotation.key_block);
        rope.apply(key.data(), 1, cos.data(), sin.data());
        if (rotation.active()) hadamard_rotate(key.data(), head_dim, rotation.key_block);
        store_kv_row(key.data(), head_dim, storage.row(to_block, to_slot, layer, 0, head));
        if (storage.value_rows() == KVValues::separate)  // else the value is the key row
          std::memcpy(static_cast<void*>(storage.row(to_block, to_slot, layer, 1, head)),
                      static_cast<const void*>(storage.row(from_block, from_slot, layer, 1, head)),
                      row_elements * sizeof(KV));
      }
  }
  table.truncate(allocator, length - n_discard);
  return true;
}

// The same for a pool whose element type is chosen at run time.
inline bool shift_context(KVBlockTable& table, AnyPagedKVStorage& storage,
                          KVBlockAllocator& allocator, const Rope& rope, std::size_t n_keep,
                          std::size_t n_discard) {
  return storage.visit(
      [&](auto& typed) { return shift_context(table, typed, allocator, rope, n_keep, n_discard); });
}

}  // namespace hllm
