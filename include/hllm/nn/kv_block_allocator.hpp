#pragma once
// The bookkeeping of a paged KV cache's block pool: which of n_blocks fixed-size blocks are free,
// which are referenced (and by how many block tables), and which hold a full, published block of
// tokens that a later sequence with the same prefix can take instead of recomputing it. Indices
// only: the memory lives in PagedKVStorage (nn/paged_kv_storage.hpp), the per-sequence lists of
// blocks in KVBlockTable (nn/kv_block_table.hpp). Single-threaded: the engine's scheduler owns
// the allocator and calls it between forward passes, never from the kernels.
//
// Every block is in exactly one state:
//   free        refcount 0, not published, on the free list;
//   cached      refcount 0, published (findable by its hash), on the LRU list: its contents are
//               kept until the pool needs the block, then it is evicted, oldest release first;
//   referenced  refcount > 0 (held by that many block tables), published or not.
// allocate() takes the free list first and evicts the least recently released cached block only
// when the free list is empty, so a prefix stays reusable as long as memory allows.
//
// Prefix identity (as vLLM's automatic prefix caching): a full block is named by
// block_hash(parent's hash, its tokens), chained from kRootBlockHash, so a hash stands for the
// whole prefix up to the block's end. The hash is only an index, never trusted: publish() stores
// the block's tokens and its parent (block id and generation), and find() matches only a block
// with the same tokens after the very parent block the caller holds. A block's generation
// changes whenever its contents may change (allocate, unpublish), so a child recorded after one
// generation of its parent never matches after another. By induction from the root, a block
// find() returns holds exactly the keys and values of the caller's prefix, whatever the hash
// does; a 64-bit collision (odds about n² / 2^65 among n live prefixes, 3e-8 for a million
// blocks) or one crafted by an adversary costs a missed reuse, never wrong attention. That is why
// a fast non-cryptographic mix is enough here, where vLLM, which trusts its hash, moved to
// SHA-256. The cost is block_tokens int32 per block, 64 bytes beside a block's kilobytes to
// megabytes of keys and values.
//
// Misuse (an id out of range, releasing an unreferenced block, retaining a free one) throws
// hllm::Error and changes nothing; check_invariants() verifies the whole state for tests.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hllm/core/error.hpp"

namespace hllm {

using BlockId = std::uint32_t;

// Tokens per block by default (vLLM's default): all layers and KV heads of 16 positions.
inline constexpr std::size_t kDefaultBlockTokens = 16;

// The parent hash of a sequence's first block.
inline constexpr std::uint64_t kRootBlockHash = 0x6a09e667f3bcc908ULL;

namespace detail {
// splitmix64's finalizer: a bijection of 64-bit words whose every output bit depends on every
// input bit.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
}  // namespace detail

// The chained hash of a block holding `tokens` after a prefix whose last block hashes to
// `parent_hash` (kRootBlockHash for a sequence's first block): equal for equal prefixes, on every
// machine and run (no per-process seed), so hashes can be logged and compared. Each token goes
// through a bijective mix, so two blocks after the same parent that differ in one token never
// share a hash; different prefixes collide with probability about 2^-64 per pair, which
// KVBlockAllocator::find makes harmless (see the top of this file).
constexpr std::uint64_t block_hash(std::uint64_t parent_hash,
                                   std::span<const std::int32_t> tokens) noexcept {
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  std::uint64_t h = detail::mix64(parent_hash ^ (kGolden * (tokens.size() + 1)));
  for (const std::int32_t t : tokens)
    h = detail::mix64(h + kGolden + static_cast<std::uint32_t>(t));
  return h;
}

enum class BlockState { free, cached, referenced };

// What publish() did.
enum class PublishResult {
  published,  // the block is now findable by its hash (or already was, with the same contents)
  duplicate,  // another block already holds the same tokens after the same parent: that one
              // stays published, find() returns it, this one is left as it was
  collision,  // another block holds a different prefix under this hash: it stays published and
              // this one is not (a missed reuse, nothing worse)
};

class KVBlockAllocator {
 public:
  // Ids run from 0 to n_blocks - 1; the largest BlockId marks "none" inside.
  static constexpr std::size_t kMaxBlocks = std::numeric_limits<BlockId>::max() - 1;

  explicit KVBlockAllocator(std::size_t n_blocks, std::size_t block_tokens = kDefaultBlockTokens)
      : n_blocks_(n_blocks), block_tokens_(block_tokens) {
    if (n_blocks == 0 || n_blocks > kMaxBlocks)
      throw Error(ErrorKind::invalid_argument, "a KV block pool needs from 1 to " +
                                                   std::to_string(kMaxBlocks) + " blocks, got " +
                                                   std::to_string(n_blocks));
    if (block_tokens == 0 || block_tokens > std::numeric_limits<std::size_t>::max() / n_blocks)
      throw Error(ErrorKind::invalid_argument,
                  "KV blocks of " + std::to_string(block_tokens) + " tokens: not a usable size");
    blocks_.resize(n_blocks);
    tokens_.resize(n_blocks * block_tokens);  // [n_blocks][block_tokens] of published blocks
    free_.reserve(n_blocks);
    // The stack pops the lowest id first, so a fresh pool hands out 0, 1, 2, ...
    for (std::size_t i = n_blocks; i-- > 0;) free_.push_back(static_cast<BlockId>(i));
  }

  std::size_t n_blocks() const noexcept { return n_blocks_; }
  std::size_t block_tokens() const noexcept { return block_tokens_; }
  std::size_t n_free() const noexcept { return free_.size(); }
  std::size_t n_cached() const noexcept { return n_cached_; }
  std::size_t n_referenced() const noexcept { return n_blocks_ - free_.size() - n_cached_; }
  // Blocks allocate() can hand out now: free ones, then cached ones by eviction.
  std::size_t n_available() const noexcept { return free_.size() + n_cached_; }

  BlockState state(BlockId id) const {
    const Block& b = at(id, "state");
    if (b.refcount > 0) return BlockState::referenced;
    return b.published ? BlockState::cached : BlockState::free;
  }
  std::uint32_t refcount(BlockId id) const { return at(id, "refcount").refcount; }
  bool is_published(BlockId id) const { return at(id, "is_published").published; }

  // A block with refcount 1: a free one (the most recently freed), else the least recently
  // released cached one, evicted (unpublished: its hash no longer finds it). Nothing when every
  // block is referenced.
  std::optional<BlockId> allocate() {
    BlockId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else if (lru_head_ != kNone) {
      id = lru_head_;
      lru_remove(id);
      drop_from_index(id);
    } else {
      return std::nullopt;
    }
    Block& b = blocks_[id];
    b.refcount = 1;
    ++b.generation;
    return id;
  }

  // One more reference to a referenced block (a forked table sharing it).
  void retain(BlockId id) {
    Block& b = at(id, "retain");
    if (b.refcount == 0)
      throw Error(ErrorKind::invalid_argument,
                  "retain of KV block " + std::to_string(id) +
                      ", which nobody holds (allocate it, or find it by its hash)");
    if (b.refcount == std::numeric_limits<std::uint32_t>::max())
      throw Error(ErrorKind::capacity, "KV block " + std::to_string(id) + " has too many holders");
    ++b.refcount;
  }

  // One reference less; at 0 the block becomes cached if published (newest on the LRU), else
  // free.
  void release(BlockId id) {
    Block& b = at(id, "release");
    if (b.refcount == 0)
      throw Error(ErrorKind::invalid_argument,
                  "release of KV block " + std::to_string(id) + ", which nobody holds");
    if (--b.refcount > 0) return;
    if (b.published)
      lru_push_newest(id);
    else
      free_.push_back(id);
  }

  // Makes the full, referenced block `id`, holding `tokens` ([block_tokens] token ids) after the
  // block `parent` (none for a sequence's first block), findable under `hash`
  // (block_hash(parent's hash, tokens)). Its contents must not change while it is published:
  // call unpublish() before writing into it (KVBlockTable::prepare_write does).
  PublishResult publish(BlockId id, std::uint64_t hash, std::optional<BlockId> parent,
                        std::span<const std::int32_t> tokens) {
    Block& b = at(id, "publish");
    check_tokens(tokens, "publish");
    const BlockId parent_id = parent ? *parent : kNone;
    const std::uint64_t parent_generation = parent ? at(*parent, "publish").generation : 0;
    if (parent && *parent == id)
      throw Error(ErrorKind::invalid_argument,
                  "KV block " + std::to_string(id) + " cannot be its own parent");
    if (b.refcount == 0)
      throw Error(ErrorKind::invalid_argument,
                  "publish of KV block " + std::to_string(id) + ", which nobody holds");
    if (b.published) {
      if (b.hash == hash && holds(b, id, parent_id, parent_generation, tokens))
        return PublishResult::published;
      if (b.hash == hash && is_stale(b) && same_tokens(id, tokens)) {
        // Published after a parent that has changed since (a fork's sibling swapped it for a
        // duplicate, now gone): the caller's parent, holding the same prefix, is recorded. The
        // contents are unchanged, so the generation stays and the children still match.
        b.parent = parent_id;
        b.parent_generation = parent_generation;
        return PublishResult::published;
      }
      throw Error(ErrorKind::invalid_argument,
                  "KV block " + std::to_string(id) +
                      " is already published with other contents (unpublish it before writing)");
    }
    if (const auto it = index_.find(hash); it != index_.end()) {
      const BlockId other = it->second;
      if (!is_stale(blocks_[other])) {
        return holds(blocks_[other], other, parent_id, parent_generation, tokens)
                   ? PublishResult::duplicate
                   : PublishResult::collision;
      }
      // Its parent has changed since: no walk from the root can reach it any more.
      unpublish_unchecked(other);
    }
    index_.emplace(hash, id);
    b.published = true;
    b.hash = hash;
    b.parent = parent_id;
    b.parent_generation = parent_generation;
    std::copy(tokens.begin(), tokens.end(), tokens_.begin() + token_offset(id));
    return PublishResult::published;
  }

  // The published block holding `tokens` after the block `parent` (none: a sequence's first
  // block) under `hash`, retained (taken off the LRU if it was cached); nothing if there is none
  // or the block under this hash holds another prefix.
  std::optional<BlockId> find(std::uint64_t hash, std::optional<BlockId> parent,
                              std::span<const std::int32_t> tokens) {
    check_tokens(tokens, "find");
    const BlockId parent_id = parent ? *parent : kNone;
    const std::uint64_t parent_generation = parent ? at(*parent, "find").generation : 0;
    const auto it = index_.find(hash);
    if (it == index_.end()) return std::nullopt;
    const BlockId id = it->second;
    Block& b = blocks_[id];
    if (!holds(b, id, parent_id, parent_generation, tokens)) return std::nullopt;
    if (b.refcount == std::numeric_limits<std::uint32_t>::max())
      throw Error(ErrorKind::capacity, "KV block " + std::to_string(id) + " has too many holders");
    if (b.refcount++ == 0) lru_remove(id);
    return id;
  }

  // Makes a referenced block unfindable before its contents change (a no-op if it was not
  // published). Blocks published after it no longer match it as their parent.
  void unpublish(BlockId id) {
    const Block& b = at(id, "unpublish");
    if (b.refcount == 0)
      throw Error(ErrorKind::invalid_argument,
                  "unpublish of KV block " + std::to_string(id) + ", which nobody holds");
    if (b.published) unpublish_unchecked(id);
  }

  // Throws Error(internal) naming the first broken invariant: every block is in exactly one of
  // the three states, the free list and the LRU list hold exactly the free and the cached blocks
  // (each once, the LRU's links consistent both ways), the hash index holds exactly the
  // published blocks under their hashes, and the counters agree.
  void check_invariants() const {
    std::vector<std::uint8_t> on_free(n_blocks_, 0), on_lru(n_blocks_, 0);
    for (const BlockId id : free_) {
      if (id >= n_blocks_) fail("the free list holds id " + std::to_string(id));
      if (on_free[id]++) fail("block " + std::to_string(id) + " is on the free list twice");
    }
    std::size_t lru_length = 0;
    BlockId previous = kNone;
    for (BlockId id = lru_head_; id != kNone; id = blocks_[id].lru_next) {
      if (id >= n_blocks_) fail("the LRU list holds id " + std::to_string(id));
      if (on_lru[id]++) fail("block " + std::to_string(id) + " is on the LRU list twice");
      if (blocks_[id].lru_prev != previous)
        fail("block " + std::to_string(id) + "'s LRU back link is wrong");
      previous = id;
      ++lru_length;
    }
    if (previous != lru_tail_) fail("the LRU list's tail is not its last block");
    if (lru_length != n_cached_)
      fail("the LRU list holds " + std::to_string(lru_length) + " blocks, the counter says " +
           std::to_string(n_cached_));
    std::size_t published = 0;
    for (std::size_t i = 0; i < n_blocks_; ++i) {
      const Block& b = blocks_[i];
      const std::string name = "block " + std::to_string(i);
      if (b.published) {
        ++published;
        const auto it = index_.find(b.hash);
        if (it == index_.end() || it->second != i)
          fail(name + " is published but its hash does not find it");
      }
      if (b.refcount > 0) {
        if (on_free[i] || on_lru[i])
          fail(name + " is referenced (" + std::to_string(b.refcount) + ") but on the " +
               (on_free[i] ? "free" : "LRU") + " list");
      } else if (b.published) {
        if (!on_lru[i] || on_free[i]) fail(name + " is cached but not on the LRU list alone");
      } else if (!on_free[i] || on_lru[i]) {
        fail(name + " is unreferenced and unpublished but not on the free list alone");
      }
    }
    if (published != index_.size())
      fail("the hash index holds " + std::to_string(index_.size()) + " blocks, " +
           std::to_string(published) + " are published");
  }

 private:
  static constexpr BlockId kNone = std::numeric_limits<BlockId>::max();

  struct Block {
    std::uint32_t refcount = 0;
    bool published = false;
    // Changes whenever the contents may change, so (id, generation) names one set of contents.
    std::uint64_t generation = 0;
    // Of a published block: its hash, and the parent (kNone for a first block) and that
    // parent's generation at publication.
    std::uint64_t hash = 0;
    BlockId parent = kNone;
    std::uint64_t parent_generation = 0;
    // The LRU list's links, oldest to newest, of a cached block.
    BlockId lru_prev = kNone, lru_next = kNone;
  };

  [[noreturn]] static void fail(const std::string& what) {
    throw Error(ErrorKind::internal, "KV block allocator: " + what);
  }

  const Block& at(BlockId id, const char* operation) const {
    if (id >= n_blocks_)
      throw Error(ErrorKind::out_of_range, std::string(operation) + " of KV block " +
                                               std::to_string(id) + ": the pool has " +
                                               std::to_string(n_blocks_) + " blocks");
    return blocks_[id];
  }
  Block& at(BlockId id, const char* operation) {
    return const_cast<Block&>(static_cast<const KVBlockAllocator&>(*this).at(id, operation));
  }

  void check_tokens(std::span<const std::int32_t> tokens, const char* operation) const {
    if (tokens.size() != block_tokens_)
      throw Error(ErrorKind::invalid_argument,
                  std::string(operation) + " of a KV block of " + std::to_string(tokens.size()) +
                      " tokens: blocks hold " + std::to_string(block_tokens_));
  }

  std::size_t token_offset(BlockId id) const noexcept { return std::size_t{id} * block_tokens_; }

  // Whether published block b (id `id`) holds `tokens` after that parent generation.
  bool holds(const Block& b, BlockId id, BlockId parent, std::uint64_t parent_generation,
             std::span<const std::int32_t> tokens) const noexcept {
    if (b.parent != parent || (parent != kNone && b.parent_generation != parent_generation))
      return false;
    return same_tokens(id, tokens);
  }
  bool same_tokens(BlockId id, std::span<const std::int32_t> tokens) const noexcept {
    return std::equal(tokens.begin(), tokens.end(), tokens_.begin() + token_offset(id));
  }

  bool is_stale(const Block& b) const noexcept {
    return b.parent != kNone && blocks_[b.parent].generation != b.parent_generation;
  }

  // Removes a published block from the index; a cached one becomes free.
  void unpublish_unchecked(BlockId id) {
    Block& b = blocks_[id];
    drop_from_index(id);
    ++b.generation;
    if (b.refcount == 0) {
      lru_remove(id);
      free_.push_back(id);
    }
  }
  void drop_from_index(BlockId id) {
    Block& b = blocks_[id];
    index_.erase(b.hash);
    b.published = false;
    b.parent = kNone;
  }

  void lru_push_newest(BlockId id) noexcept {
    Block& b = blocks_[id];
    b.lru_prev = lru_tail_;
    b.lru_next = kNone;
    if (lru_tail_ != kNone)
      blocks_[lru_tail_].lru_next = id;
    else
      lru_head_ = id;
    lru_tail_ = id;
    ++n_cached_;
  }
  void lru_remove(BlockId id) noexcept {
    Block& b = blocks_[id];
    if (b.lru_prev != kNone)
      blocks_[b.lru_prev].lru_next = b.lru_next;
    else
      lru_head_ = b.lru_next;
    if (b.lru_next != kNone)
      blocks_[b.lru_next].lru_prev = b.lru_prev;
    else
      lru_tail_ = b.lru_prev;
    b.lru_prev = b.lru_next = kNone;
    --n_cached_;
  }

  std::size_t n_blocks_, block_tokens_;
  std::vector<Block> blocks_;         // [n_blocks]
  std::vector<std::int32_t> tokens_;  // [n_blocks][block_tokens]: a published block's tokens
  std::vector<BlockId> free_;         // a stack of the free blocks
  BlockId lru_head_ = kNone;          // the oldest cached block: evicted first
  BlockId lru_tail_ = kNone;          // the newest
  std::size_t n_cached_ = 0;
  std::unordered_map<std::uint64_t, BlockId> index_;  // hash -> its published block
};

}  // namespace hllm
