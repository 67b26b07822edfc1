#pragma once
// The memory of a paged KV cache: n_blocks blocks of block_tokens positions, each holding the
// keys and values of those positions for every layer and KV head, in one AlignedBuffer. Which
// block belongs to which sequence is the business of KVBlockAllocator and KVBlockTable
// (nn/kv_block_allocator.hpp, nn/kv_block_table.hpp); this file only stores rows, copies blocks
// (copy-on-write) and sizes the pool from a memory budget.
//
// One block, [n_layers][2 (K, V)][n_kv_heads][block_tokens][row elements] (with KVValues::keys
// [n_layers][1][...]: values are read from the key rows, latent attention's): one head's
// block_tokens keys are contiguous rows (kv_row_elements<KV>(head_dim) elements each, see
// core/kv_element.hpp), so attention reads a block's 16 keys of a head with unit stride, as it
// reads KVCache's, and a whole block (a unit of sharing) is one contiguous range to copy. The
// element type is one of core/kv_element.hpp's (float, f16, bf16, BlockQ8_0, BlockQ4_0,
// BlockFP8); AnyPagedKVStorage chooses it at run time.
// Rows of positions a table has not committed hold whatever the block's previous owner left:
// attention reads only committed positions.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/nn/kv_block_allocator.hpp"

namespace hllm {

template <class KV = float>
class PagedKVStorage {
  static_assert(is_kv_element_v<KV>,
                "KV cache type must be float, f16, bf16, BlockQ8_0, BlockQ4_0 or BlockFP8");

 public:
  using element_type = KV;

  // Elements of one block, with the checks of the constructor: positive dimensions, head_dim a
  // multiple of 32 for Q8_0 (unsupported otherwise), and no overflow of the address space.
  static std::size_t block_elements(std::size_t block_tokens, std::size_t n_layers,
                                    std::size_t n_kv_heads, std::size_t head_dim,
                                    KVValues values = KVValues::separate) {
    if (block_tokens == 0 || n_layers == 0 || n_kv_heads == 0 || head_dim == 0)
      throw Error(ErrorKind::invalid_argument,
                  "paged KV cache dimensions must be positive (block tokens " +
                      std::to_string(block_tokens) + ", layers " + std::to_string(n_layers) +
                      ", kv heads " + std::to_string(n_kv_heads) + ", head dim " +
                      std::to_string(head_dim) + ")");
    check_kv_head_dim<KV>(head_dim);
    return checked_kv_elements<KV>(
        {n_layers, kv_row_parts(values), n_kv_heads, block_tokens, kv_row_elements<KV>(head_dim)},
        "the size of a KV block");
  }
  static std::size_t block_bytes(std::size_t block_tokens, std::size_t n_layers,
                                 std::size_t n_kv_heads, std::size_t head_dim,
                                 KVValues values = KVValues::separate) {
    return block_elements(block_tokens, n_layers, n_kv_heads, head_dim, values) * sizeof(KV);
  }
  // Blocks a budget of `bytes` holds; Error(capacity) when it does not hold one.
  static std::size_t blocks_for_bytes(std::size_t bytes, std::size_t block_tokens,
                                      std::size_t n_layers, std::size_t n_kv_heads,
                                      std::size_t head_dim, KVValues values = KVValues::separate) {
    const std::size_t per_block = block_bytes(block_tokens, n_layers, n_kv_heads, head_dim, values);
    const std::size_t blocks = std::min(bytes / per_block, KVBlockAllocator::kMaxBlocks);
    if (blocks == 0)
      throw Error(ErrorKind::capacity, "a KV cache budget of " + std::to_string(bytes) +
                                           " bytes holds no block of " + std::to_string(per_block) +
                                           " bytes");
    return blocks;
  }
  // Blocks for `tokens` positions (rounded up to whole blocks).
  static std::size_t blocks_for_tokens(std::size_t tokens, std::size_t block_tokens) {
    if (tokens == 0 || block_tokens == 0)
      throw Error(ErrorKind::invalid_argument,
                  "a paged KV cache of " + std::to_string(tokens) + " tokens in blocks of " +
                      std::to_string(block_tokens) + ": both must be positive");
    const std::size_t blocks = tokens / block_tokens + (tokens % block_tokens != 0);
    if (blocks > KVBlockAllocator::kMaxBlocks)
      throw Error(ErrorKind::capacity, "a paged KV cache of " + std::to_string(tokens) +
                                           " tokens needs more blocks than a pool can number");
    return blocks;
  }

  PagedKVStorage(std::size_t n_blocks, std::size_t block_tokens, std::size_t n_layers,
                 std::size_t n_kv_heads, std::size_t head_dim, KVValues values = KVValues::separate)
      : n_blocks_(n_blocks),
        block_tokens_(block_tokens),
        n_layers_(n_layers),
        n_kv_heads_(n_kv_heads),
        head_dim_(head_dim),
        value_rows_(values),
        block_elements_(block_elements(block_tokens, n_layers, n_kv_heads, head_dim, values)) {
    if (n_blocks == 0 || n_blocks > KVBlockAllocator::kMaxBlocks)
      throw Error(ErrorKind::invalid_argument, "a paged KV cache needs from 1 to " +
                                                   std::to_string(KVBlockAllocator::kMaxBlocks) +
                                                   " blocks, got " + std::to_string(n_blocks));
    const std::size_t elements =
        checked_kv_elements<KV>({n_blocks, block_elements_}, "the size of a KV block pool");
    try {
      data_ = AlignedBuffer<KV>(elements);  // [n_blocks][block_elements]
    } catch (const Error& e) {
      throw Error(ErrorKind::capacity,
                  "a KV block pool of " + std::to_string(n_blocks) + " blocks needs " +
                      std::to_string(elements * sizeof(KV)) + " bytes: " + e.message());
    }
  }

  std::size_t n_blocks() const noexcept { return n_blocks_; }
  std::size_t block_tokens() const noexcept { return block_tokens_; }
  std::size_t n_layers() const noexcept { return n_layers_; }
  std::size_t n_kv_heads() const noexcept { return n_kv_heads_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  KVValues value_rows() const noexcept { return value_rows_; }
  std::size_t block_bytes() const noexcept { return block_elements_ * sizeof(KV); }
  std::size_t bytes() const noexcept { return data_.size() * sizeof(KV); }

  // [block_tokens][head_dim] keys (values) of one KV head of one layer in one block (row j of
  // them: kv_row(keys(...), j, head_dim)). Unchecked, for the attention loop: the ids come from
  // a block table.
  const KV* keys(BlockId block, std::size_t layer, std::size_t kv_head) const noexcept {
    return data_.data() + offset(block, layer, 0, kv_head);
  }
  const KV* values(BlockId block, std::size_t layer, std::size_t kv_head) const noexcept {
    return data_.data() + offset(block, layer, 1, kv_head);
  }

  // Where attention finds one layer's keys (kv = 0) or values (kv = 1) of one KV head for the
  // positions first.. of a sequence whose blocks, in position order, are `blocks` (a block
  // table's; it must outlive the result): the paged attention kernels' view of this layout
  // (kernels::KVBlockRows). Throws unsupported unless block_tokens is a power of two.
  kernels::KVBlockRows rows(std::span<const BlockId> blocks, std::size_t layer, std::size_t kv,
                            std::size_t kv_head, std::size_t first) const {
    check_paged_attention();
    if (layer >= n_layers_ || kv > 1 || kv_head >= n_kv_heads_)
      throw Error(ErrorKind::out_of_range, "KV rows of layer " + std::to_string(layer) + ", head " +
                                               std::to_string(kv_head) + ": the pool has " +
                                               std::to_string(n_layers_) + " layers of " +
                                               std::to_string(n_kv_heads_) + " heads");
    return rows_unchecked(blocks, layer, kv, kv_head, first);
  }
  // The same without the checks, for the attention loop (which must not throw): the caller
  // checked the block size (check_paged_attention) and the layer and head beforehand.
  kernels::KVBlockRows rows_unchecked(std::span<const BlockId> blocks, std::size_t layer,
                                      std::size_t kv, std::size_t kv_head,
                                      std::size_t first) const noexcept {
    return {data_.data(),
            blocks.data(),
            block_elements_,
            offset(0, layer, kv, kv_head),
            block_tokens_,
            kv_row_elements<KV>(head_dim_),
            first};
  }

  // Throws unsupported unless the paged attention kernels can read this pool: they find a row's
  // block with a shift, so block_tokens must be a power of two.
  void check_paged_attention() const {
    if ((block_tokens_ & (block_tokens_ - 1)) != 0)
      throw Error(ErrorKind::unsupported, "paged attention needs a power-of-two block size, got " +
                                              std::to_string(block_tokens_) + " tokens");
  }

  // Writes the keys and values of one token, at `slot` of `block`, in `layer` (v unread with
  // KVValues::keys). k, v: [n_kv_heads][head_dim]
  void store(BlockId block, std::size_t slot, std::size_t layer, const float* k, const float* v) {
    check_block(block, "store into");
    if (slot >= block_tokens_ || layer >= n_layers_)
      throw Error(ErrorKind::out_of_range,
                  "KV store at slot " + std::to_string(slot) + " of layer " +
                      std::to_string(layer) + ": blocks hold " + std::to_string(block_tokens_) +
                      " slots of " + std::to_string(n_layers_) + " layers");
    const std::size_t row = slot * kv_row_elements<KV>(head_dim_);
    for (std::size_t h = 0; h < n_kv_heads_; ++h) {
      store_kv_row(k + h * head_dim_, head_dim_, data_.data() + offset(block, layer, 0, h) + row);
      if (value_rows_ == KVValues::separate)
        store_kv_row(v + h * head_dim_, head_dim_, data_.data() + offset(block, layer, 1, h) + row);
    }
  }

  // The row ([row elements]) of the keys (kv = 0) or values (kv = 1) of one KV head of one layer
  // at `slot` of `block`: for code that rewrites cached rows (nn/kv_shift.hpp).
  KV* row(BlockId block, std::size_t slot, std::size_t layer, std::size_t kv, std::size_t kv_head) {
    check_block(block, "row of");
    if (slot >= block_tokens_ || layer >= n_layers_ || kv > 1 || kv_head >= n_kv_heads_)
      throw Error(ErrorKind::out_of_range,
                  "KV row at slot " + std::to_string(slot) + " of layer " + std::to_string(layer) +
                      ", head " + std::to_string(kv_head) + ": blocks hold " +
                      std::to_string(block_tokens_) + " slots of " + std::to_string(n_layers_) +
                      " layers of " + std::to_string(n_kv_heads_) + " heads");
    return data_.data() + offset(block, layer, kv, kv_head) + slot * kv_row_elements<KV>(head_dim_);
  }

  // The bytes of one whole block ([block_bytes()]): what a block copy or a state file moves.
  // Throws out_of_range for an id outside the pool.
  std::span<std::byte> block_data(BlockId block) {
    check_block(block, "bytes of");
    return std::as_writable_bytes(
        std::span(data_.data() + std::size_t{block} * block_elements_, block_elements_));
  }
  std::span<const std::byte> block_data(BlockId block) const {
    check_block(block, "bytes of");
    return std::as_bytes(
        std::span(data_.data() + std::size_t{block} * block_elements_, block_elements_));
  }

  // Copies every row of block `from` to block `to` (copy-on-write; KVBlockTable::prepare_write's
  // callback).
  void copy_block(BlockId from, BlockId to) {
    if (from == to) return;
    const std::span<const std::byte> source = std::as_const(*this).block_data(from);
    std::memcpy(block_data(to).data(), source.data(), source.size());
  }

 private:
  // Elements before (block, layer, K or V, kv_head)'s first row (V's are K's with
  // KVValues::keys).
  std::size_t offset(BlockId block, std::size_t layer, std::size_t kv,
                     std::size_t kv_head) const noexcept {
    const std::size_t parts = kv_row_parts(value_rows_), part = parts == 2 ? kv : 0;
    return std::size_t{block} * block_elements_ + ((layer * parts + part) * n_kv_heads_ + kv_head) *
                                                      block_tokens_ *
                                                      kv_row_elements<KV>(head_dim_);
  }

  void check_block(BlockId block, const char* what) const {
    if (block >= n_blocks_)
      throw Error(ErrorKind::out_of_range, std::string("KV ") + what + " block " +
                                               std::to_string(block) + ": the pool has " +
                                               std::to_string(n_blocks_) + " blocks");
  }

  std::size_t n_blocks_, block_tokens_, n_layers_, n_kv_heads_, head_dim_;
  KVValues value_rows_;
  std::size_t block_elements_;  // n_layers × parts × n_kv_heads × block_tokens × row elements
  // [n_blocks][n_layers][parts: 2 (K, V), or 1 with KVValues::keys][n_kv_heads][block_tokens]
  // [row elements]
  AlignedBuffer<KV> data_;
};

// A PagedKVStorage whose element type is chosen at run time: one of the six instantiations in
// a variant, as AnyKVCache (nn/any_kv_cache.hpp) holds KVCache's. Model code visits it once per
// forward pass and stays typed inside.
class AnyPagedKVStorage {
 public:
  using Variant =
      std::variant<PagedKVStorage<float>, PagedKVStorage<f16>, PagedKVStorage<bf16>,
                   PagedKVStorage<BlockQ8_0>, PagedKVStorage<BlockQ4_0>, PagedKVStorage<BlockFP8>>;

  // The same checks and errors as PagedKVStorage's constructor.
  AnyPagedKVStorage(KVType type, std::size_t n_blocks, std::size_t block_tokens,
                    std::size_t n_layers, std::size_t n_kv_heads, std::size_t head_dim,
                    KVValues values = KVValues::separate)
      : storage_(with_kv_element(type, [&]<class KV>() {
          return Variant(std::in_place_type<PagedKVStorage<KV>>, n_blocks, block_tokens, n_layers,
                         n_kv_heads, head_dim, values);
        })) {}

  // PagedKVStorage<KV>::block_bytes and blocks_for_bytes for a type chosen at run time.
  static std::size_t block_bytes(KVType type, std::size_t block_tokens, std::size_t n_layers,
                                 std::size_t n_kv_heads, std::size_t head_dim,
                                 KVValues values = KVValues::separate) {
    return with_kv_element(type, [&]<class KV>() {
      return PagedKVStorage<KV>::block_bytes(block_tokens, n_layers, n_kv_heads, head_dim, values);
    });
  }
  static std::size_t blocks_for_bytes(KVType type, std::size_t bytes, std::size_t block_tokens,
                                      std::size_t n_layers, std::size_t n_kv_heads,
                                      std::size_t head_dim, KVValues values = KVValues::separate) {
    return with_kv_element(type, [&]<class KV>() {
      return PagedKVStorage<KV>::blocks_for_bytes(bytes, block_tokens, n_layers, n_kv_heads,
                                                  head_dim, values);
    });
  }

  // f(PagedKVStorage<KV>&) for the element type this storage holds.
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), storage_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), storage_);
  }

  KVType type() const noexcept {
    return visit([](const auto& s) { return kv_type_of<element_of<decltype(s)>>(); });
  }
  std::size_t n_blocks() const noexcept {
    return visit([](const auto& s) { return s.n_blocks(); });
  }
  std::size_t block_tokens() const noexcept {
    return visit([](const auto& s) { return s.block_tokens(); });
  }
  std::size_t n_layers() const noexcept {
    return visit([](const auto& s) { return s.n_layers(); });
  }
  std::size_t n_kv_heads() const noexcept {
    return visit([](const auto& s) { return s.n_kv_heads(); });
  }
  std::size_t head_dim() const noexcept {
    return visit([](const auto& s) { return s.head_dim(); });
  }
  KVValues value_rows() const noexcept {
    return visit([](const auto& s) { return s.value_rows(); });
  }
  std::size_t block_bytes() const noexcept {
    return visit([](const auto& s) { return s.block_bytes(); });
  }
  std::size_t bytes() const noexcept {
    return visit([](const auto& s) { return s.bytes(); });
  }

  // k, v: [n_kv_heads][head_dim]
  void store(BlockId block, std::size_t slot, std::size_t layer, const float* k, const float* v) {
    visit([&](auto& s) { s.store(block, slot, layer, k, v); });
  }
  void copy_block(BlockId from, BlockId to) {
    visit([&](auto& s) { s.copy_block(from, to); });
  }

  // The typed storage; throws invalid_argument if this one holds another element type.
  template <class KV>
  const PagedKVStorage<KV>& get() const {
    if (const auto* typed = std::get_if<PagedKVStorage<KV>>(&storage_)) return *typed;
    throw Error(ErrorKind::invalid_argument, std::string("the paged KV cache holds ") +
                                                 to_string(type()) + ", not " +
                                                 to_string(kv_type_of<KV>()));
  }
  template <class KV>
  PagedKVStorage<KV>& get() {
    return const_cast<PagedKVStorage<KV>&>(std::as_const(*this).get<KV>());
  }

 private:
  template <class Storage>
  using element_of = typename std::remove_cvref_t<Storage>::element_type;

  Variant storage_;
};

}  // namespace hllm
