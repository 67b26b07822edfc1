#pragma once
// One sequence's view of a paged KV cache: the ids of the pool blocks that hold its positions,
// in position order (position p lives in block blocks()[p / block_tokens] at slot
// p % block_tokens), and how many positions are committed. Every change of the blocks goes
// through the KVBlockAllocator passed in (nn/kv_block_allocator.hpp), which counts one reference
// per table holding a block; the storage (nn/paged_kv_storage.hpp) is touched only through the
// copy_block callback of prepare_write. A table is a plain value without a pointer to its
// allocator: its owner calls release_all before dropping it (a table dropped holding blocks
// leaks them, which the allocator's counters show). Copying is deleted, because a copy would
// hold blocks without references; fork() is the copy that retains them.
//
// Running out of blocks is an expected event for a scheduler (it preempts a sequence and tries
// again), so reserve() and prepare_write() return false and change nothing; misuse (a position
// outside the table, a table of another block size) throws hllm::Error.
//
// Writing: a block shared with another table (after fork() or reuse_prefix()) is never written;
// prepare_write() gives the table its own copy first (copy-on-write). A published block is not
// written either, since later sequences may find it: it is copied as well while a block is
// available, and else unpublished and written in place.
//
// Prefix reuse: reuse_prefix() takes a new sequence's leading blocks from the allocator's cache
// of published blocks; publish_full_blocks() publishes the blocks a prefill filled, so later
// sequences can take them.
//
// Sliding windows: release_before() gives back the leading blocks no later query can see; their
// places in blocks() hold kReleasedBlock, and attention, which reads only the window, never
// reads them. Such a table publishes no further blocks and cannot be forked.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/nn/kv_block_allocator.hpp"

namespace hllm {

// The id blocks() shows for a leading block that release_before() gave back.
inline constexpr BlockId kReleasedBlock = std::numeric_limits<BlockId>::max();

class KVBlockTable {
 public:
  explicit KVBlockTable(std::size_t block_tokens = kDefaultBlockTokens)
      : block_tokens_(block_tokens) {
    if (block_tokens == 0)
      throw Error(ErrorKind::invalid_argument, "KV blocks must hold at least one token");
  }
  KVBlockTable(const KVBlockTable&) = delete;
  KVBlockTable& operator=(const KVBlockTable&) = delete;
  // A moved-from table is empty.
  KVBlockTable(KVBlockTable&& other) noexcept
      : block_tokens_(other.block_tokens_),
        length_(std::exchange(other.length_, 0)),
        released_(std::exchange(other.released_, 0)),
        blocks_(std::exchange(other.blocks_, {})),
        hashes_(std::exchange(other.hashes_, {})) {}
  // Only onto an empty table (one released, or moved from), so no reference is lost.
  KVBlockTable& operator=(KVBlockTable&& other) {
    if (this == &other) return *this;
    if (!blocks_.empty())
      throw Error(ErrorKind::invalid_argument, "assigning to a KV block table that still holds " +
                                                   std::to_string(blocks_.size()) +
                                                   " blocks (release_all first)");
    block_tokens_ = other.block_tokens_;
    length_ = std::exchange(other.length_, 0);
    released_ = std::exchange(other.released_, 0);
    blocks_ = std::exchange(other.blocks_, {});
    hashes_ = std::exchange(other.hashes_, {});
    return *this;
  }

  std::size_t block_tokens() const noexcept { return block_tokens_; }
  // Positions [0, length) hold committed tokens.
  std::size_t length() const noexcept { return length_; }
  // Positions the held blocks have room for.
  std::size_t capacity() const noexcept { return blocks_.size() * block_tokens_; }
  // The held blocks in position order, the released ones as kReleasedBlock.
  // [ceil(capacity / block_tokens)]
  std::span<const BlockId> blocks() const noexcept { return blocks_; }
  // Leading blocks given back by release_before(): positions below
  // n_released() * block_tokens() are gone.
  std::size_t n_released() const noexcept { return released_; }
  // Blocks this table holds a reference to.
  std::size_t n_held() const noexcept { return blocks_.size() - released_; }
  // Leading blocks this table has published or found (publish_full_blocks resumes after them).
  std::size_t n_published() const noexcept { return hashes_.size(); }

  // The block holding `position` and the slot within it.
  BlockId block_for(std::size_t position) const {
    if (position >= capacity())
      throw Error(ErrorKind::out_of_range, "position " + std::to_string(position) +
                                               " is past the KV block table's capacity of " +
                                               std::to_string(capacity()) + " tokens");
    if (position / block_tokens_ < released_)
      throw Error(ErrorKind::out_of_range,
                  "position " + std::to_string(position) + " is in a KV block the table released");
    return blocks_[position / block_tokens_];
  }
  std::size_t slot_of(std::size_t position) const noexcept { return position % block_tokens_; }

  // Grows the table to room for `n_tokens` positions, allocating the blocks it lacks (evicting
  // cached blocks when the free list is short). All or nothing: false, and no change, when the
  // pool cannot supply them all.
  bool reserve(KVBlockAllocator& allocator, std::size_t n_tokens) {
    check(allocator);
    const std::size_t needed = n_tokens / block_tokens_ + (n_tokens % block_tokens_ != 0);
    if (needed <= blocks_.size()) return true;
    if (needed - blocks_.size() > allocator.n_available()) return false;
    blocks_.reserve(needed);
    while (blocks_.size() < needed) {
      const std::optional<BlockId> id = allocator.allocate();
      if (!id) throw Error(ErrorKind::internal, "the KV block pool ran short during reserve");
      blocks_.push_back(*id);
    }
    return true;
  }

  // Marks `count` more positions as committed once every layer has stored them.
  void advance(std::size_t count) {
    if (count > capacity() - length_)
      throw Error(ErrorKind::capacity, "KV block table full: " + std::to_string(count) +
                                           " token(s) after position " + std::to_string(length_) +
                                           " exceed its " + std::to_string(capacity()) +
                                           " reserved tokens");
    length_ += count;
  }

  // A sibling sequence sharing every block (and the committed length): each block gains a
  // reference, and the first of the two to write into a shared block copies it.
  KVBlockTable fork(KVBlockAllocator& allocator) const {
    check(allocator);
    if (released_ > 0)
      throw Error(ErrorKind::invalid_argument,
                  "cannot fork a KV block table that released blocks outside its window");
    KVBlockTable sibling(block_tokens_);
    sibling.blocks_ = blocks_;
    sibling.hashes_ = hashes_;
    sibling.length_ = length_;
    std::size_t retained = 0;
    try {
      for (; retained < blocks_.size(); ++retained) allocator.retain(blocks_[retained]);
    } catch (...) {
      while (retained-- > 0) allocator.release(blocks_[retained]);
      sibling.blocks_.clear();
      throw;
    }
    return sibling;
  }

  // Gives every block back (the last first, so the pool evicts a sequence's tail before the
  // prefix other prompts are likelier to share) and empties the table.
  void release_all(KVBlockAllocator& allocator) { truncate(allocator, 0); }

  // Forgets everything from position `length` on and releases the blocks past it.
  void truncate(KVBlockAllocator& allocator, std::size_t length) {
    check(allocator);
    if (length > length_)
      throw Error(ErrorKind::out_of_range, "cannot truncate a KV block table of " +
                                               std::to_string(length_) + " tokens to " +
                                               std::to_string(length));
    const std::size_t keep = length / block_tokens_ + (length % block_tokens_ != 0);
    while (blocks_.size() > keep) {
      if (blocks_.size() > released_) allocator.release(blocks_.back());
      blocks_.pop_back();
    }
    released_ = std::min(released_, blocks_.size());
    if (blocks_.empty()) released_ = 0;
    length_ = length;
    hashes_.resize(std::min(hashes_.size(), length / block_tokens_));
  }

  // Gives back every block wholly before `position` (a sliding window's first visible key):
  // they become kReleasedBlock in blocks(). Returns the blocks released by this call.
  std::size_t release_before(KVBlockAllocator& allocator, std::size_t position) {
    check(allocator);
    const std::size_t dead = std::min(position / block_tokens_, blocks_.size());
    const std::size_t before = released_;
    for (; released_ < dead; ++released_) {
      allocator.release(blocks_[released_]);
      blocks_[released_] = kReleasedBlock;
    }
    return released_ - before;
  }

  // Makes every block from the one holding `position` on this table's own and unpublished, as
  // prepare_write does, committed positions included: for rewriting rows in place (a context
  // shift moves them). False when a copy needs a block the pool lacks; the blocks made writable
  // by then stay so.
  template <class CopyBlock>
  requires std::invocable<CopyBlock&, BlockId, BlockId>
  bool prepare_rewrite(KVBlockAllocator& allocator, std::size_t position, CopyBlock&& copy_block) {
    check(allocator);
    if (position / block_tokens_ < released_)
      throw Error(ErrorKind::invalid_argument,
                  "position " + std::to_string(position) + " is in a released KV block");
    for (std::size_t index = position / block_tokens_; index < blocks_.size(); ++index)
      if (!own_block(allocator, index, copy_block)) return false;
    return true;
  }

  // Makes the block holding `position` (at or past length(), inside capacity()) this table's own
  // and writable: a block shared with another table is replaced by a copy, made by
  // copy_block(from, to) (the storage's PagedKVStorage::copy_block), the old one released; a
  // published block is copied too if a block is available, else unpublished. False, and no
  // change, when a shared block needs a copy and the pool has no block. Call it before writing
  // each block a step writes into.
  template <class CopyBlock>
  requires std::invocable<CopyBlock&, BlockId, BlockId>
  bool prepare_write(KVBlockAllocator& allocator, std::size_t position, CopyBlock&& copy_block) {
    check(allocator);
    if (position < length_)
      throw Error(ErrorKind::invalid_argument,
                  "position " + std::to_string(position) + " is committed (the table holds " +
                      std::to_string(length_) + " tokens): truncate before rewriting it");
    (void)block_for(position);  // inside the capacity, in a block still held
    return own_block(allocator, position / block_tokens_, copy_block);
  }

  // Readies the table for `n_tokens` more tokens after length(): reserves their blocks and makes
  // each block they fall in writable (prepare_write). False when the pool runs short; the
  // blocks reserved or copied by then stay with the table (release or truncate gives them back).
  template <class CopyBlock>
  requires std::invocable<CopyBlock&, BlockId, BlockId>
  bool prepare_append(KVBlockAllocator& allocator, std::size_t n_tokens, CopyBlock&& copy_block) {
    if (n_tokens == 0) return true;
    if (!reserve(allocator, length_ + n_tokens)) return false;
    const std::size_t last = length_ + n_tokens - 1;
    for (std::size_t index = length_ / block_tokens_; index <= last / block_tokens_; ++index)
      if (!prepare_write(allocator, std::max(length_, index * block_tokens_), copy_block))
        return false;
    return true;
  }

  // Whether this table may write positions [length(), length() + n_tokens): they have room and
  // every block they fall in is this table's alone and unpublished (prepare_append made it so).
  bool owns_append(const KVBlockAllocator& allocator, std::size_t n_tokens) const {
    if (n_tokens == 0) return true;
    if (n_tokens > capacity() - length_) return false;
    const std::size_t last = length_ + n_tokens - 1;
    for (std::size_t index = length_ / block_tokens_; index <= last / block_tokens_; ++index)
      if (allocator.refcount(blocks_[index]) != 1 || allocator.is_published(blocks_[index]))
        return false;
    return true;
  }

  // For an empty table: takes the longest run of leading full blocks of `tokens` (a prompt) that
  // the allocator has published, each retained. Returns the positions they cover, which become
  // committed: the caller prefills only tokens from there on. Never covers the last token,
  // whose logits the caller needs: when every block of the prompt is found, the length stops one
  // short and the write of that token copies the last block (prepare_write).
  std::size_t reuse_prefix(KVBlockAllocator& allocator, std::span<const std::int32_t> tokens) {
    check(allocator);
    if (!blocks_.empty())
      throw Error(ErrorKind::invalid_argument,
                  "reuse_prefix needs an empty KV block table; this one holds " +
                      std::to_string(blocks_.size()) + " blocks");
    const std::size_t full = tokens.size() / block_tokens_;
    blocks_.reserve(full);
    hashes_.reserve(full);
    std::uint64_t parent_hash = kRootBlockHash;
    std::optional<BlockId> parent;
    for (std::size_t i = 0; i < full; ++i) {
      const auto block = tokens.subspan(i * block_tokens_, block_tokens_);
      const std::uint64_t hash = block_hash(parent_hash, block);
      parent = allocator.find(hash, parent, block);
      if (!parent) break;
      blocks_.push_back(*parent);
      hashes_.push_back(hash);
      parent_hash = hash;
    }
    length_ = blocks_.empty() ? 0 : std::min(capacity(), tokens.size() - 1);
    return length_;
  }

  // Publishes the committed full blocks not yet published, so later prompts starting with
  // `tokens` (the tokens of positions [0, length()) at least) can reuse them. A block whose
  // prefix another block already holds (two sequences prefilled the same prompt at once) is
  // replaced by that one and its own released, so the pool keeps one copy. Stops at a hash
  // collision (a later call tries again). Returns n_published().
  std::size_t publish_full_blocks(KVBlockAllocator& allocator,
                                  std::span<const std::int32_t> tokens) {
    check(allocator);
    if (released_ > 0) return hashes_.size();
    if (tokens.size() < length_)
      throw Error(ErrorKind::invalid_argument,
                  "publish_full_blocks got " + std::to_string(tokens.size()) +
                      " tokens for a KV block table of " + std::to_string(length_));
    const std::size_t full = length_ / block_tokens_;
    hashes_.reserve(full);
    for (std::size_t i = hashes_.size(); i < full; ++i) {
      const auto block = tokens.subspan(i * block_tokens_, block_tokens_);
      const std::uint64_t hash = block_hash(i == 0 ? kRootBlockHash : hashes_[i - 1], block);
      std::optional<BlockId> parent;
      if (i > 0) parent = blocks_[i - 1];
      const PublishResult result = allocator.publish(blocks_[i], hash, parent, block);
      if (result == PublishResult::collision) break;
      if (result == PublishResult::duplicate) {
        const std::optional<BlockId> existing = allocator.find(hash, parent, block);
        if (!existing)
          throw Error(ErrorKind::internal, "a duplicate KV block was not found by its hash");
        allocator.release(blocks_[i]);
        blocks_[i] = *existing;
      }
      hashes_.push_back(hash);
    }
    return hashes_.size();
  }

 private:
  // prepare_write's work for block `index`: a shared block is replaced by a copy, a published one
  // copied while a block is available, else unpublished.
  template <class CopyBlock>
  bool own_block(KVBlockAllocator& allocator, std::size_t index, CopyBlock& copy_block) {
    const BlockId old = blocks_[index];
    const bool shared = allocator.refcount(old) > 1;
    if (shared || allocator.is_published(old)) {
      const std::optional<BlockId> copy =
          shared || allocator.n_available() > 0 ? allocator.allocate() : std::nullopt;
      if (copy) {
        try {
          copy_block(old, *copy);
        } catch (...) {
          allocator.release(*copy);
          throw;
        }
        allocator.release(old);
        blocks_[index] = *copy;
      } else if (shared) {
        return false;
      } else {
        allocator.unpublish(old);
      }
    }
    hashes_.resize(std::min(hashes_.size(), index));
    return true;
  }

  void check(const KVBlockAllocator& allocator) const {
    if (allocator.block_tokens() != block_tokens_)
      throw Error(ErrorKind::invalid_argument,
                  "a KV block table of " + std::to_string(block_tokens_) +
                      "-token blocks used with a pool of " +
                      std::to_string(allocator.block_tokens()) + "-token blocks");
  }

  std::size_t block_tokens_;
  std::size_t length_ = 0;
  std::size_t released_ = 0;           // leading blocks given back (release_before)
  std::vector<BlockId> blocks_;        // [ceil(capacity / block_tokens)] in position order
  std::vector<std::uint64_t> hashes_;  // [n_published] chained hashes of the leading blocks
};

}  // namespace hllm
