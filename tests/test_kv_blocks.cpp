// The paged KV cache's pieces: the block allocator (states, refcounts, LRU eviction, publication
// and exact prefix matching), the per-sequence block tables (reserve, fork, truncate,
// copy-on-write, prefix reuse) and the block storage (layout, element types, sizing). The
// randomized test drives all of them together against a model computed from the live tables.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hllm/kernels/dispatch.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/nn/paged_kv_storage.hpp"
#include "test_util.hpp"

namespace {

using hllm::BlockId;
using hllm::BlockState;
using hllm::ErrorKind;
using hllm::KVBlockAllocator;
using hllm::KVBlockTable;
using hllm::PublishResult;

std::vector<std::int32_t> token_range(std::size_t n, std::int32_t first) {
  std::vector<std::int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

template <class F>
void expect_kind(F&& f, ErrorKind kind, const std::string& message = {}) {
  hllm::test::expect_error(std::forward<F>(f), kind, "", "", std::nullopt, message);
}

auto no_copy = [](BlockId, BlockId) { FAIL() << "no block copy expected"; };

// --- the allocator ---------------------------------------------------------------------------

TEST(KVBlockAllocator, HandsOutEveryBlockOnceThenNothing) {
  KVBlockAllocator pool(5, 4);
  EXPECT_EQ(pool.n_free(), 5u);
  std::vector<BlockId> ids;
  while (const auto id = pool.allocate()) ids.push_back(*id);
  EXPECT_EQ(ids, (std::vector<BlockId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(pool.n_referenced(), 5u);
  EXPECT_EQ(pool.n_available(), 0u);
  pool.check_invariants();
  pool.release(3);
  EXPECT_EQ(pool.state(3), BlockState::free);
  EXPECT_EQ(pool.allocate(), std::optional<BlockId>(3));
  pool.check_invariants();
}

TEST(KVBlockAllocator, MisuseIsAnErrorThatChangesNothing) {
  KVBlockAllocator pool(3, 4);
  const BlockId a = *pool.allocate();
  expect_kind([&] { pool.release(7); }, ErrorKind::out_of_range, "the pool has 3 blocks");
  expect_kind([&] { pool.retain(3); }, ErrorKind::out_of_range);
  expect_kind([&] { (void)pool.refcount(99); }, ErrorKind::out_of_range);
  expect_kind([&] { pool.retain(1); }, ErrorKind::invalid_argument, "which nobody holds");
  pool.release(a);
  expect_kind([&] { pool.release(a); }, ErrorKind::invalid_argument, "which nobody holds");
  const auto tokens = token_range(4, 0);
  expect_kind([&] { pool.publish(a, 1, std::nullopt, tokens); }, ErrorKind::invalid_argument);
  const BlockId b = *pool.allocate();
  expect_kind([&] { pool.publish(b, 1, std::nullopt, token_range(3, 0)); },
              ErrorKind::invalid_argument, "blocks hold 4");
  expect_kind([&] { pool.publish(b, 1, b, tokens); }, ErrorKind::invalid_argument, "own parent");
  expect_kind([&] { (void)pool.find(1, 9, tokens); }, ErrorKind::out_of_range);
  EXPECT_EQ(pool.n_referenced(), 1u);
  EXPECT_EQ(pool.n_free(), 2u);
  EXPECT_FALSE(pool.is_published(b));
  pool.check_invariants();
  expect_kind([] { KVBlockAllocator(0, 16); }, ErrorKind::invalid_argument);
  expect_kind([] { KVBlockAllocator(4, 0); }, ErrorKind::invalid_argument);
}

// Released published blocks are evicted oldest release first, only once the free list is
// empty, and never while referenced; a published block is found after its release until it is
// evicted, and not after.
TEST(KVBlockAllocator, EvictsCachedBlocksOldestFirstAndNeverAReferencedOne) {
  KVBlockAllocator pool(5, 2);
  std::vector<BlockId> b;
  for (int i = 0; i < 4; ++i) b.push_back(*pool.allocate());
  auto tokens = [](int i) { return token_range(2, 10 * i); };
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(pool.publish(b[i], 100 + i, std::nullopt, tokens(i)), PublishResult::published);
  for (const int i : {1, 3, 0}) pool.release(b[i]);  // LRU, oldest first: b1, b3, b0
  EXPECT_EQ(pool.n_cached(), 3u);
  EXPECT_EQ(pool.n_free(), 1u);
  pool.check_invariants();
  // A cached block is found again (and leaves the LRU: found and released, it is the newest).
  ASSERT_EQ(pool.find(101, std::nullopt, tokens(1)), std::optional<BlockId>(b[1]));
  EXPECT_EQ(pool.state(b[1]), BlockState::referenced);
  pool.release(b[1]);  // LRU: b3, b0, b1
  // The free block goes first, then the cached ones, oldest first.
  EXPECT_EQ(pool.allocate(), std::optional<BlockId>(4));
  EXPECT_EQ(pool.allocate(), std::optional<BlockId>(b[3]));
  EXPECT_FALSE(pool.find(103, std::nullopt, tokens(3)));  // evicted: not found any more
  EXPECT_EQ(pool.allocate(), std::optional<BlockId>(b[0]));
  EXPECT_EQ(pool.allocate(), std::optional<BlockId>(b[1]));
  // Only b2 is left, and it is referenced: nothing to hand out, and b2 keeps its publication.
  EXPECT_FALSE(pool.allocate());
  EXPECT_EQ(pool.refcount(b[2]), 1u);
  EXPECT_EQ(pool.find(102, std::nullopt, tokens(2)), std::optional<BlockId>(b[2]));
  EXPECT_EQ(pool.refcount(b[2]), 2u);
  pool.check_invariants();
}

TEST(KVBlockAllocator, PublishReportsDuplicatesAndCollisions) {
  KVBlockAllocator pool(4, 4);
  const BlockId x = *pool.allocate(), y = *pool.allocate(), z = *pool.allocate();
  const auto t = token_range(4, 0), u = token_range(4, 50);
  EXPECT_EQ(pool.publish(x, 7, std::nullopt, t), PublishResult::published);
  EXPECT_EQ(pool.publish(x, 7, std::nullopt, t), PublishResult::published);  // idempotent
  expect_kind([&] { pool.publish(x, 8, std::nullopt, t); }, ErrorKind::invalid_argument,
              "already published");
  EXPECT_EQ(pool.publish(y, 7, std::nullopt, t), PublishResult::duplicate);
  EXPECT_FALSE(pool.is_published(y));
  // The same hash over other tokens, or after another parent, is a collision: the first block
  // stays, and find() matches contents, not the hash.
  EXPECT_EQ(pool.publish(z, 7, std::nullopt, u), PublishResult::collision);
  EXPECT_EQ(pool.publish(z, 7, x, t), PublishResult::collision);
  EXPECT_FALSE(pool.find(7, std::nullopt, u));
  EXPECT_FALSE(pool.find(7, y, t));
  EXPECT_EQ(pool.find(7, std::nullopt, t), std::optional<BlockId>(x));
  pool.check_invariants();
}

// A child published after one generation of its parent never matches after the parent was
// evicted and refilled, and the next publication of that prefix replaces it.
TEST(KVBlockAllocator, AChildOfAnEvictedParentIsNeverFound) {
  KVBlockAllocator pool(3, 2);
  const BlockId p = *pool.allocate(), c = *pool.allocate();
  const auto tp = token_range(2, 0), tc = token_range(2, 2);
  const std::uint64_t hp = hllm::block_hash(hllm::kRootBlockHash, tp);
  const std::uint64_t hc = hllm::block_hash(hp, tc);
  ASSERT_EQ(pool.publish(p, hp, std::nullopt, tp), PublishResult::published);
  ASSERT_EQ(pool.publish(c, hc, p, tc), PublishResult::published);
  pool.release(p);  // LRU: p, c
  pool.release(c);
  const BlockId f = *pool.allocate();                     // the free block
  ASSERT_EQ(pool.allocate(), std::optional<BlockId>(p));  // p evicted and refilled
  EXPECT_EQ(pool.state(c), BlockState::cached);
  ASSERT_EQ(pool.publish(p, hp, std::nullopt, tp), PublishResult::published);
  EXPECT_FALSE(pool.find(hc, p, tc));  // c was computed after p's previous contents
  ASSERT_EQ(pool.publish(f, hc, p, tc), PublishResult::published);  // replaces the stale c
  EXPECT_EQ(pool.state(c), BlockState::free);
  EXPECT_EQ(pool.find(hc, p, tc), std::optional<BlockId>(f));
  pool.check_invariants();
}

TEST(KVBlockAllocator, ChainedHashesDependOnTheParent) {
  const auto a = token_range(16, 0), b = token_range(16, 100);
  const std::uint64_t ha = hllm::block_hash(hllm::kRootBlockHash, a);
  const std::uint64_t hb = hllm::block_hash(hllm::kRootBlockHash, b);
  EXPECT_NE(ha, hb);
  EXPECT_NE(hllm::block_hash(ha, b), hllm::block_hash(hb, b));
  EXPECT_NE(hllm::block_hash(ha, b), hb);
  auto a5 = a;
  a5[5] = 999;
  EXPECT_NE(hllm::block_hash(hllm::kRootBlockHash, a5), ha);
  // Fixed on every machine and run (no seed), so hashes can be logged and compared.
  static_assert(hllm::block_hash(1, std::span<const std::int32_t>{}) ==
                hllm::block_hash(1, std::span<const std::int32_t>{}));
}

// --- block tables ----------------------------------------------------------------------------

TEST(KVBlockTable, ReserveIsAllOrNothing) {
  KVBlockAllocator pool(4, 4);
  KVBlockTable a(4), b(4);
  ASSERT_TRUE(a.reserve(pool, 10));
  EXPECT_EQ(a.blocks().size(), 3u);
  EXPECT_EQ(a.capacity(), 12u);
  EXPECT_TRUE(a.reserve(pool, 12));  // already room
  EXPECT_FALSE(b.reserve(pool, 8));  // needs 2, 1 left
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(pool.n_free(), 1u);
  ASSERT_TRUE(b.reserve(pool, 3));
  EXPECT_EQ(pool.n_free(), 0u);
  a.advance(12);
  expect_kind([&] { a.advance(1); }, ErrorKind::capacity);
  EXPECT_EQ(a.block_for(9), a.blocks()[2]);
  EXPECT_EQ(a.slot_of(9), 1u);
  expect_kind([&] { (void)a.block_for(12); }, ErrorKind::out_of_range);
  a.truncate(pool, 5);  // keeps 2 blocks
  EXPECT_EQ(a.blocks().size(), 2u);
  EXPECT_EQ(pool.n_free(), 1u);
  expect_kind([&] { a.truncate(pool, 6); }, ErrorKind::out_of_range);
  a.release_all(pool);
  b.release_all(pool);
  EXPECT_EQ(pool.n_free(), 4u);
  KVBlockAllocator other(4, 8);
  expect_kind([&] { (void)a.reserve(other, 1); }, ErrorKind::invalid_argument, "8-token blocks");
  pool.check_invariants();
}

TEST(KVBlockTable, ForkSharesEveryBlockAndMovesNeverLoseAReference) {
  KVBlockAllocator pool(8, 4);
  KVBlockTable a(4);
  ASSERT_TRUE(a.reserve(pool, 9));
  a.advance(9);
  KVBlockTable b = a.fork(pool);
  EXPECT_EQ(std::vector<BlockId>(b.blocks().begin(), b.blocks().end()),
            std::vector<BlockId>(a.blocks().begin(), a.blocks().end()));
  EXPECT_EQ(b.length(), 9u);
  for (const BlockId id : a.blocks()) EXPECT_EQ(pool.refcount(id), 2u);
  KVBlockTable c(std::move(b));
  EXPECT_TRUE(b.blocks().empty());
  KVBlockTable d = a.fork(pool);
  expect_kind([&] { c = std::move(d); }, ErrorKind::invalid_argument, "release_all first");
  EXPECT_EQ(d.blocks().size(), 3u);  // the refused move left both as they were
  d.release_all(pool);
  a.release_all(pool);
  for (const BlockId id : c.blocks()) EXPECT_EQ(pool.refcount(id), 1u);
  a = std::move(c);
  a.release_all(pool);
  EXPECT_EQ(pool.n_free(), 8u);
  pool.check_invariants();
}

// Two prompts sharing 40 tokens share exactly their first 2 blocks of 16; a prompt differing in
// token 5 shares none; the same tokens after another first block share none either.
TEST(KVBlockTable, PromptsShareTheirCommonFullBlocks) {
  KVBlockAllocator pool(16, 16);
  const auto prompt = token_range(48, 1000);
  KVBlockTable first;
  EXPECT_EQ(first.reuse_prefix(pool, prompt), 0u);
  ASSERT_TRUE(first.reserve(pool, prompt.size()));
  first.advance(prompt.size());
  EXPECT_EQ(first.publish_full_blocks(pool, prompt), 3u);

  auto second_prompt = prompt;
  for (std::size_t i = 40; i < 48; ++i) second_prompt[i] = static_cast<std::int32_t>(i);
  KVBlockTable second;
  EXPECT_EQ(second.reuse_prefix(pool, second_prompt), 32u);
  ASSERT_EQ(second.blocks().size(), 2u);
  EXPECT_EQ(second.blocks()[0], first.blocks()[0]);
  EXPECT_EQ(second.blocks()[1], first.blocks()[1]);
  EXPECT_EQ(pool.refcount(first.blocks()[1]), 2u);
  EXPECT_EQ(pool.refcount(first.blocks()[2]), 1u);

  auto token5 = prompt;
  token5[5] = 1;
  KVBlockTable third;
  EXPECT_EQ(third.reuse_prefix(pool, token5), 0u);
  EXPECT_TRUE(third.blocks().empty());

  auto other_parent = prompt;  // block 1 and 2 as the prompt's, after another block 0
  for (std::size_t i = 0; i < 16; ++i) other_parent[i] = static_cast<std::int32_t>(7 + i);
  KVBlockTable fourth;
  EXPECT_EQ(fourth.reuse_prefix(pool, other_parent), 0u);

  // Released, the blocks stay reusable: a new prompt of 40 shared tokens takes 2 of them.
  first.release_all(pool);
  second.release_all(pool);
  EXPECT_EQ(pool.n_cached(), 3u);
  KVBlockTable fifth;
  EXPECT_EQ(fifth.reuse_prefix(pool, std::span(prompt).first(40)), 32u);
  EXPECT_EQ(pool.n_cached(), 1u);
  fifth.release_all(pool);
  pool.check_invariants();
}

// A prompt cached whole covers all but its last token; writing that token copies the last
// block, so the cached one keeps its contents.
TEST(KVBlockTable, AFullyCachedPromptRecomputesOnlyItsLastToken) {
  KVBlockAllocator pool(8, 4);
  const auto prompt = token_range(8, 0);
  KVBlockTable a(4);
  ASSERT_TRUE(a.reserve(pool, 8));
  a.advance(8);
  a.publish_full_blocks(pool, prompt);
  const BlockId last = a.blocks()[1];
  a.release_all(pool);
  KVBlockTable b(4);
  EXPECT_EQ(b.reuse_prefix(pool, prompt), 7u);
  EXPECT_EQ(b.blocks()[1], last);
  int copies = 0;
  ASSERT_TRUE(b.prepare_write(pool, 7, [&](BlockId from, BlockId to) {
    EXPECT_EQ(from, last);
    EXPECT_NE(to, last);
    ++copies;
  }));
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(pool.state(last), BlockState::cached);
  EXPECT_EQ(b.n_published(), 1u);
  b.advance(1);
  EXPECT_EQ(b.publish_full_blocks(pool, prompt), 2u);  // the copy duplicates `last`: swapped
  EXPECT_EQ(b.blocks()[1], last);
  b.release_all(pool);
  pool.check_invariants();
}

// Two sequences that prefilled the same prompt at once keep one copy of its blocks.
TEST(KVBlockTable, DuplicatePublicationsKeepOneCopy) {
  KVBlockAllocator pool(8, 4);
  const auto prompt = token_range(9, 0);
  KVBlockTable a(4), b(4);
  for (KVBlockTable* t : {&a, &b}) {
    ASSERT_EQ(t->reuse_prefix(pool, prompt), 0u);
    ASSERT_TRUE(t->reserve(pool, 9));
    t->advance(9);
  }
  EXPECT_EQ(pool.n_free(), 2u);
  EXPECT_EQ(a.publish_full_blocks(pool, prompt), 2u);
  EXPECT_EQ(b.publish_full_blocks(pool, prompt), 2u);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);  // the partial block stays each one's own
  EXPECT_EQ(pool.n_free(), 4u);
  a.release_all(pool);
  b.release_all(pool);
  pool.check_invariants();
}

// A fork shares a block whose publication names, as its parent, a duplicate its sibling swapped
// in; once that duplicate is gone, the fork publishes the same chain after its own equal parent,
// and a later prompt finds it (found by the randomized test below).
TEST(KVBlockTable, AForkKeepsPublishingAfterItsSiblingSwappedADuplicate) {
  KVBlockAllocator pool(8, 2);
  const auto prompt = token_range(4, 0);
  KVBlockTable a(2), x(2);
  for (KVBlockTable* t : {&a, &x}) ASSERT_EQ(t->reuse_prefix(pool, prompt), 0u);
  ASSERT_TRUE(a.reserve(pool, 2));  // a: the first block only
  a.advance(2);
  ASSERT_TRUE(x.reserve(pool, 4));  // x: both, computed beside a's
  x.advance(4);
  const BlockId a0 = a.blocks()[0], p = x.blocks()[0], e = x.blocks()[1];
  a.publish_full_blocks(pool, prompt);
  KVBlockTable s = x.fork(pool);
  EXPECT_EQ(x.publish_full_blocks(pool, prompt), 2u);  // x takes a0 for p, publishes e after a0
  EXPECT_EQ(x.blocks()[0], a0);
  a.release_all(pool);
  x.release_all(pool);
  std::vector<BlockId> pinned;  // evicts a0 (the only cached block)
  while (pool.n_available() > 0) pinned.push_back(*pool.allocate());
  EXPECT_EQ(pool.state(a0), BlockState::referenced);
  EXPECT_EQ(s.publish_full_blocks(pool, prompt), 2u);  // p fresh, then e re-parented to p
  EXPECT_TRUE(pool.is_published(p));
  EXPECT_TRUE(pool.is_published(e));
  for (const BlockId id : pinned) pool.release(id);
  KVBlockTable later(2);
  auto longer = prompt;
  longer.push_back(9);
  EXPECT_EQ(later.reuse_prefix(pool, longer), 4u);
  EXPECT_EQ(later.blocks()[1], e);
  for (KVBlockTable* t : {&s, &later}) t->release_all(pool);
  pool.check_invariants();
}

// --- copy-on-write with the storage ----------------------------------------------------------

template <class KV>
std::vector<unsigned char> block_bytes_of(const hllm::PagedKVStorage<KV>& s, BlockId block) {
  const auto* begin = reinterpret_cast<const unsigned char*>(s.keys(block, 0, 0));
  return {begin, begin + s.block_bytes()};
}

template <class KV>
void expect_copy_on_write_leaves_the_sibling_untouched() {
  constexpr std::size_t kLayers = 2, kHeads = 2, kHeadDim = 32, kTokens = 4;
  hllm::PagedKVStorage<KV> storage(6, kTokens, kLayers, kHeads, kHeadDim);
  KVBlockAllocator pool(6, kTokens);
  auto row = [](std::size_t position, std::size_t layer, int which) {
    return hllm::test::random_vector(
        kHeads * kHeadDim, static_cast<std::uint32_t>(100 * position + 10 * layer + which));
  };
  auto copy = [&](BlockId from, BlockId to) { storage.copy_block(from, to); };
  auto write = [&](KVBlockTable& t, std::size_t position, std::uint32_t salt) {
    ASSERT_TRUE(t.prepare_write(pool, position, copy));
    for (std::size_t layer = 0; layer < kLayers; ++layer)
      storage.store(t.block_for(position), t.slot_of(position), layer,
                    row(position + salt, layer, 0).data(), row(position + salt, layer, 1).data());
  };
  KVBlockTable a(kTokens);
  ASSERT_TRUE(a.reserve(pool, 6));
  for (std::size_t p = 0; p < 6; ++p) write(a, p, 0);
  a.advance(6);
  KVBlockTable b = a.fork(pool);
  std::vector<std::vector<unsigned char>> before;
  for (const BlockId id : a.blocks()) before.push_back(block_bytes_of(storage, id));

  ASSERT_TRUE(b.reserve(pool, 7));
  write(b, 6, 1000);  // into the shared block 1: b gets a copy
  b.advance(1);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  ASSERT_NE(b.blocks()[1], a.blocks()[1]);
  for (std::size_t i = 0; i < a.blocks().size(); ++i)
    EXPECT_EQ(block_bytes_of(storage, a.blocks()[i]), before[i]) << "block " << i;
  // b's copy: a's rows of positions 4 and 5, bit for bit, then its own row of position 6.
  const std::size_t row_bytes = hllm::kv_row_elements<KV>(kHeadDim) * sizeof(KV);
  for (std::size_t layer = 0; layer < kLayers; ++layer)
    for (std::size_t h = 0; h < kHeads; ++h)
      for (int which : {0, 1}) {
        const KV* mine = which == 0 ? storage.keys(b.blocks()[1], layer, h)
                                    : storage.values(b.blocks()[1], layer, h);
        const KV* theirs = which == 0 ? storage.keys(a.blocks()[1], layer, h)
                                      : storage.values(a.blocks()[1], layer, h);
        EXPECT_EQ(std::memcmp(mine, theirs, 2 * row_bytes), 0);
        std::vector<KV> expected(hllm::kv_row_elements<KV>(kHeadDim));
        hllm::store_kv_row(row(1006, layer, which).data() + h * kHeadDim, kHeadDim,
                           expected.data());
        EXPECT_EQ(std::memcmp(hllm::kv_row(mine, 2, kHeadDim), expected.data(), row_bytes), 0);
      }
  // a's block 1 is its own now: a writes there in place.
  const BlockId a1 = a.blocks()[1];
  ASSERT_TRUE(a.reserve(pool, 7));
  ASSERT_TRUE(a.prepare_write(pool, 6, no_copy));
  EXPECT_EQ(a.blocks()[1], a1);
  a.release_all(pool);
  b.release_all(pool);
  pool.check_invariants();
}

TEST(PagedKVStorage, CopyOnWriteLeavesTheSiblingUntouched) {
  expect_copy_on_write_leaves_the_sibling_untouched<float>();
  expect_copy_on_write_leaves_the_sibling_untouched<hllm::f16>();
  expect_copy_on_write_leaves_the_sibling_untouched<hllm::bf16>();
  expect_copy_on_write_leaves_the_sibling_untouched<hllm::BlockQ8_0>();
  expect_copy_on_write_leaves_the_sibling_untouched<hllm::BlockQ4_0>();
  expect_copy_on_write_leaves_the_sibling_untouched<hllm::BlockFP8>();
}

TEST(KVBlockTable, ACopyTheFullPoolCannotMakeChangesNothing) {
  KVBlockAllocator pool(2, 4);
  KVBlockTable a(4);
  ASSERT_TRUE(a.reserve(pool, 2));
  a.advance(2);
  KVBlockTable b = a.fork(pool);
  KVBlockTable c(4);
  ASSERT_TRUE(c.reserve(pool, 1));  // the last block
  const BlockId shared = a.blocks()[0];
  EXPECT_FALSE(b.prepare_write(pool, 2, no_copy));
  EXPECT_EQ(b.blocks()[0], shared);
  EXPECT_EQ(pool.refcount(shared), 2u);
  expect_kind([&] { (void)b.prepare_write(pool, 1, no_copy); }, ErrorKind::invalid_argument,
              "committed");
  expect_kind([&] { (void)b.prepare_write(pool, 4, no_copy); }, ErrorKind::out_of_range);
  for (KVBlockTable* t : {&a, &b, &c}) t->release_all(pool);
  pool.check_invariants();
}

// --- the storage -----------------------------------------------------------------------------

template <class KV>
void expect_rows_read_back() {
  constexpr std::size_t kBlocks = 3, kTokens = 4, kLayers = 2, kHeads = 3, kHeadDim = 64;
  hllm::PagedKVStorage<KV> s(kBlocks, kTokens, kLayers, kHeads, kHeadDim);
  const std::size_t row_elements = hllm::kv_row_elements<KV>(kHeadDim);
  EXPECT_EQ(s.block_bytes(), kLayers * 2 * kHeads * kTokens * row_elements * sizeof(KV));
  EXPECT_EQ(s.bytes(), kBlocks * s.block_bytes());
  auto input = [](std::size_t block, std::size_t slot, std::size_t layer, int which) {
    return hllm::test::random_vector(
        kHeads * kHeadDim,
        static_cast<std::uint32_t>(1000 * block + 100 * slot + 10 * layer + which));
  };
  for (std::size_t block = 0; block < kBlocks; ++block)
    for (std::size_t slot = 0; slot < kTokens; ++slot)
      for (std::size_t layer = 0; layer < kLayers; ++layer)
        s.store(static_cast<BlockId>(block), slot, layer, input(block, slot, layer, 0).data(),
                input(block, slot, layer, 1).data());
  std::vector<KV> expected(row_elements);
  for (std::size_t block = 0; block < kBlocks; ++block)
    for (std::size_t slot = 0; slot < kTokens; ++slot)
      for (std::size_t layer = 0; layer < kLayers; ++layer)
        for (std::size_t h = 0; h < kHeads; ++h)
          for (int which : {0, 1}) {
            const std::vector<float> x = input(block, slot, layer, which);
            hllm::store_kv_row(x.data() + h * kHeadDim, kHeadDim, expected.data());
            const BlockId id = static_cast<BlockId>(block);
            const KV* row = hllm::kv_row(which == 0 ? s.keys(id, layer, h) : s.values(id, layer, h),
                                         slot, kHeadDim);
            for (std::size_t d = 0; d < kHeadDim; ++d)
              ASSERT_EQ(hllm::kv_value(row, d), hllm::kv_value(expected.data(), d))
                  << "block " << block << " slot " << slot << " layer " << layer << " head " << h;
          }
  // One head's keys of a block are contiguous rows, then that head's neighbour's.
  EXPECT_EQ(s.keys(1, 0, 1), s.keys(1, 0, 0) + kTokens * row_elements);
  EXPECT_EQ(s.values(1, 0, 0), s.keys(1, 0, 0) + kHeads * kTokens * row_elements);
  EXPECT_EQ(s.keys(1, 1, 0), s.keys(1, 0, 0) + 2 * kHeads * kTokens * row_elements);
  const std::vector<float> kv(kHeads * kHeadDim, 1.0f);
  expect_kind([&] { s.store(3, 0, 0, kv.data(), kv.data()); }, ErrorKind::out_of_range);
  expect_kind([&] { s.store(0, 4, 0, kv.data(), kv.data()); }, ErrorKind::out_of_range);
  expect_kind([&] { s.store(0, 0, 2, kv.data(), kv.data()); }, ErrorKind::out_of_range);
  expect_kind([&] { s.copy_block(0, 3); }, ErrorKind::out_of_range);
}

// The storage's rows() is what the paged attention kernel reads: a sequence stored through a
// block table (its blocks interleaved with another sequence's) attends exactly as the same
// sequence in a contiguous KVCache, on every ISA, from any first position (a sliding window).
template <class KV>
void expect_paged_attention_equals_kv_cache(hllm::Isa isa) {
  constexpr std::size_t kLayers = 2, kHeads = 2, kHeadDim = 64, kTokens = 37, kGroup = 2;
  hllm::KVBlockAllocator pool(8);
  hllm::PagedKVStorage<KV> storage(8, 16, kLayers, kHeads, kHeadDim);
  hllm::KVCache<KV> cache(kLayers, kHeads, kHeadDim, 64);
  KVBlockTable table, other;
  for (std::size_t n = 16; n < kTokens + 16; n += 16) {
    ASSERT_TRUE(other.reserve(pool, n));
    ASSERT_TRUE(table.reserve(pool, std::min(n, kTokens)));
  }
  for (std::size_t p = 0; p < kTokens; ++p)
    for (std::size_t layer = 0; layer < kLayers; ++layer) {
      const auto k = hllm::test::random_vector(kHeads * kHeadDim, static_cast<std::uint32_t>(p));
      const auto v =
          hllm::test::random_vector(kHeads * kHeadDim, static_cast<std::uint32_t>(p + 99));
      cache.store(layer, p, k.data(), v.data());
      storage.store(table.block_for(p), table.slot_of(p), layer, k.data(), v.data());
    }
  const auto& kernels = hllm::kernels::table_for(isa);
  const auto q = hllm::test::random_vector(kGroup * kHeadDim, 7);
  for (std::size_t first : {0u, 3u, 16u, 36u})
    for (std::size_t layer = 0; layer < kLayers; ++layer)
      for (std::size_t h = 0; h < kHeads; ++h) {
        std::vector<float> expected(kGroup * kHeadDim), actual(kGroup * kHeadDim);
        kernels.attend_group_for<KV>()(q.data(), cache.keys(layer, h, first),
                                       cache.values(layer, h, first), kTokens - first, kHeadDim,
                                       kGroup, 0.125f, expected.data());
        kernels.attend_group_paged_for<KV>()(
            q.data(), storage.rows(table.blocks(), layer, 0, h, first),
            storage.rows(table.blocks(), layer, 1, h, first), kTokens - first, kHeadDim, kGroup,
            0.125f, actual.data());
        ASSERT_EQ(actual, expected)
            << hllm::to_string(isa) << " first " << first << " layer " << layer << " head " << h;
      }
  table.release_all(pool);
  other.release_all(pool);
  hllm::PagedKVStorage<KV> odd(2, 12, kLayers, kHeads, kHeadDim);
  expect_kind([&] { (void)odd.rows(table.blocks(), 0, 0, 0, 0); }, ErrorKind::unsupported);
  expect_kind([&] { (void)storage.rows(table.blocks(), 2, 0, 0, 0); }, ErrorKind::out_of_range);
}

TEST(PagedKVStorage, PagedAttentionEqualsTheContiguousCacheBitForBit) {
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    expect_paged_attention_equals_kv_cache<float>(isa);
    expect_paged_attention_equals_kv_cache<hllm::f16>(isa);
    expect_paged_attention_equals_kv_cache<hllm::bf16>(isa);
    expect_paged_attention_equals_kv_cache<hllm::BlockQ8_0>(isa);
    expect_paged_attention_equals_kv_cache<hllm::BlockQ4_0>(isa);
    expect_paged_attention_equals_kv_cache<hllm::BlockFP8>(isa);
  }
}

TEST(PagedKVStorage, RowsReadBackForEveryElementType) {
  expect_rows_read_back<float>();
  expect_rows_read_back<hllm::f16>();
  expect_rows_read_back<hllm::bf16>();
  expect_rows_read_back<hllm::BlockQ8_0>();
  expect_rows_read_back<hllm::BlockQ4_0>();
  expect_rows_read_back<hllm::BlockFP8>();
}

TEST(PagedKVStorage, SizesFromABudgetAndRefusesBadShapes) {
  using S = hllm::PagedKVStorage<hllm::f16>;
  // TinyLlama: 22 layers, 4 KV heads of 64: a 16-token f16 block is 352 KiB.
  const std::size_t block = S::block_bytes(16, 22, 4, 64);
  EXPECT_EQ(block, 16u * 22 * 2 * 4 * 64 * 2);
  EXPECT_EQ(S::blocks_for_bytes(10 * block + block / 2, 16, 22, 4, 64), 10u);
  expect_kind([&] { (void)S::blocks_for_bytes(block - 1, 16, 22, 4, 64); }, ErrorKind::capacity,
              "holds no block");
  EXPECT_EQ(S::blocks_for_tokens(4096, 16), 256u);
  EXPECT_EQ(S::blocks_for_tokens(40, 16), 3u);
  expect_kind([] { (void)S::blocks_for_tokens(0, 16); }, ErrorKind::invalid_argument);
  EXPECT_EQ(hllm::PagedKVStorage<hllm::BlockQ8_0>::block_bytes(16, 22, 4, 64),
            16u * 22 * 2 * 4 * 2 * 34);
  expect_kind([] { hllm::PagedKVStorage<hllm::BlockQ8_0>(4, 16, 1, 1, 48); },
              ErrorKind::unsupported, "multiple of 32");
  EXPECT_EQ(hllm::PagedKVStorage<hllm::BlockQ4_0>::block_bytes(16, 22, 4, 64),
            16u * 22 * 2 * 4 * 2 * 18);
  expect_kind([] { hllm::PagedKVStorage<hllm::BlockQ4_0>(4, 16, 1, 1, 48); },
              ErrorKind::unsupported, "a q4_0 KV cache needs head_dim to be a multiple of 32");
  EXPECT_EQ(hllm::PagedKVStorage<hllm::BlockFP8>::block_bytes(16, 22, 4, 64),
            16u * 22 * 2 * 4 * 2 * 34);
  expect_kind([] { hllm::PagedKVStorage<hllm::BlockFP8>(4, 16, 1, 1, 48); }, ErrorKind::unsupported,
              "a fp8 KV cache needs head_dim to be a multiple of 32");
  expect_kind([] { S(4, 16, 0, 1, 64); }, ErrorKind::invalid_argument);
  expect_kind([] { S(0, 16, 1, 1, 64); }, ErrorKind::invalid_argument);
  const std::size_t huge = std::size_t{1} << 20;
  expect_kind([&] { S(4, huge, huge, huge, 64); }, ErrorKind::capacity, "overflows");
  expect_kind([&] { S(std::size_t{1} << 31, 1024, 256, 256, 128); }, ErrorKind::capacity,
              "overflows");
}

TEST(AnyPagedKVStorage, ChoosesTheElementTypeAtRunTime) {
  for (const hllm::KVType type : hllm::kKVTypes) {
    hllm::AnyPagedKVStorage s(type, 3, 16, 2, 2, 64);
    EXPECT_EQ(s.type(), type);
    EXPECT_EQ(s.block_bytes(), hllm::AnyPagedKVStorage::block_bytes(type, 16, 2, 2, 64));
    EXPECT_EQ(s.bytes(), 3 * s.block_bytes());
    EXPECT_EQ(hllm::AnyPagedKVStorage::blocks_for_bytes(type, s.bytes(), 16, 2, 2, 64), 3u);
    const auto k = hllm::test::random_vector(2 * 64, 1), v = hllm::test::random_vector(2 * 64, 2);
    s.store(2, 5, 1, k.data(), v.data());
    s.copy_block(2, 0);
    s.visit([&](const auto& typed) {
      const auto* copied = hllm::kv_row(typed.values(0, 1, 1), 5, 64);
      const auto* original = hllm::kv_row(typed.values(2, 1, 1), 5, 64);
      for (std::size_t d = 0; d < 64; ++d)
        EXPECT_EQ(hllm::kv_value(copied, d), hllm::kv_value(original, d));
    });
  }
  const hllm::AnyPagedKVStorage q8(hllm::KVType::q8_0, 1, 16, 1, 1, 32);
  EXPECT_NO_THROW((void)q8.get<hllm::BlockQ8_0>());
  expect_kind([&] { (void)q8.get<float>(); }, ErrorKind::invalid_argument, "holds q8_0");
  expect_kind([] { hllm::AnyPagedKVStorage(hllm::KVType::q8_0, 1, 16, 1, 1, 40); },
              ErrorKind::unsupported);
  const hllm::AnyPagedKVStorage q4(hllm::KVType::q4_0, 1, 16, 1, 1, 32);
  EXPECT_NO_THROW((void)q4.get<hllm::BlockQ4_0>());
  EXPECT_EQ(q4.block_bytes(), 2u * 16 * 18);
  expect_kind([&] { (void)q4.get<hllm::BlockQ8_0>(); }, ErrorKind::invalid_argument,
              "holds q4_0, not q8_0");
  const hllm::AnyPagedKVStorage fp8(hllm::KVType::fp8, 1, 16, 1, 1, 32);
  EXPECT_NO_THROW((void)fp8.get<hllm::BlockFP8>());
  EXPECT_EQ(fp8.block_bytes(), 2u * 16 * 34);
  expect_kind([&] { (void)fp8.get<hllm::BlockQ8_0>(); }, ErrorKind::invalid_argument,
              "holds fp8, not q8_0");
}

// --- randomized: everything together against a model -----------------------------------------

// The stand-in for a position's keys and values: a hash of the whole prefix up to it, as real
// keys and values depend on every earlier token. A block holding the right token in the wrong
// context shows up.
std::uint64_t extend(std::uint64_t prefix, std::int32_t token) {
  std::uint64_t x = (prefix ^ static_cast<std::uint32_t>(token)) * 0x9e3779b97f4a7c15ULL;
  return x ^ (x >> 29);
}

struct RandomRun {
  struct Sequence {
    KVBlockTable table;
    std::vector<std::int32_t> tokens;  // the committed ones, [table.length()]
    std::size_t family;
  };

  RandomRun(std::uint32_t seed, std::size_t n_blocks, std::size_t block_tokens)
      : rng(seed),
        pool(n_blocks, block_tokens),
        bt(block_tokens),
        contents(n_blocks * block_tokens, 0) {
    std::uniform_int_distribution<std::int32_t> vocab(0, 40);
    for (auto& base : bases) {
      base.resize(96);
      for (auto& t : base) t = vocab(rng);
    }
  }

  std::size_t pick(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }

  // Writes the stand-in values of `tokens` from position `from` into the table's blocks, each
  // write prepared; stops at the first prepare_write that finds no block. Returns how many
  // were written.
  std::size_t write(Sequence& s, std::span<const std::int32_t> tokens, std::size_t from) {
    std::uint64_t prefix = 0;
    for (std::size_t p = 0; p < from; ++p) prefix = extend(prefix, tokens[p]);
    for (std::size_t p = from; p < tokens.size(); ++p) {
      if (!s.table.prepare_write(pool, p, copy_block)) return p - from;
      prefix = extend(prefix, tokens[p]);
      contents[s.table.block_for(p) * bt + s.table.slot_of(p)] = prefix;
    }
    return tokens.size() - from;
  }

  // reserve(), counting failures and evictions (the cached blocks it took), and checking that a
  // failure changes nothing.
  bool reserve(Sequence& s, std::size_t n_tokens) {
    const std::size_t free = pool.n_free(), cached = pool.n_cached();
    const std::size_t blocks = s.table.blocks().size();
    if (!s.table.reserve(pool, n_tokens)) {
      ++failed_reserves;
      EXPECT_EQ(pool.n_free(), free);
      EXPECT_EQ(pool.n_cached(), cached);
      EXPECT_EQ(s.table.blocks().size(), blocks);
      return false;
    }
    evictions += cached - pool.n_cached();
    return true;
  }

  // publish_full_blocks, counting the blocks it swapped for a duplicate.
  void publish(Sequence& s) {
    const std::vector<BlockId> before(s.table.blocks().begin(), s.table.blocks().end());
    s.table.publish_full_blocks(pool, s.tokens);
    for (std::size_t i = 0; i < before.size(); ++i) swaps += before[i] != s.table.blocks()[i];
  }

  void new_sequence() {
    Sequence s{KVBlockTable(bt), {}, pick(bases.size())};
    std::vector<std::int32_t> prompt(bases[s.family].begin(),
                                     bases[s.family].begin() + 1 + pick(bases[s.family].size()));
    if (chance(0.25)) prompt[pick(prompt.size())] = 41;
    const std::size_t covered = s.table.reuse_prefix(pool, prompt);
    if (covered > 0) ++reuse_hits;
    if (!reserve(s, prompt.size())) {
      s.table.release_all(pool);
      return;
    }
    const std::size_t written = write(s, prompt, covered);
    s.table.advance(written);
    s.tokens.assign(prompt.begin(), prompt.begin() + covered + written);
    if (chance(0.7)) publish(s);
    sequences.push_back(std::move(s));
  }

  void append() {
    Sequence& s = sequences[pick(sequences.size())];
    const std::size_t n = 1 + pick(12);
    std::vector<std::int32_t> tokens = s.tokens;
    const auto& base = bases[s.family];
    for (std::size_t i = 0; i < n; ++i)
      tokens.push_back(tokens.size() < base.size() && chance(0.8)
                           ? base[tokens.size()]
                           : static_cast<std::int32_t>(pick(42)));
    if (!reserve(s, tokens.size())) return;
    const std::size_t written = write(s, tokens, s.tokens.size());
    s.table.advance(written);
    tokens.resize(s.tokens.size() + written);
    s.tokens = std::move(tokens);
    if (chance(0.5)) publish(s);
  }

  void fork() {
    const Sequence& s = sequences[pick(sequences.size())];
    sequences.push_back({s.table.fork(pool), s.tokens, s.family});
  }

  void truncate() {
    Sequence& s = sequences[pick(sequences.size())];
    const std::size_t length = pick(s.tokens.size() + 1);
    s.table.truncate(pool, length);
    s.tokens.resize(length);
  }

  void finish() {
    const std::size_t i = pick(sequences.size());
    sequences[i].table.release_all(pool);
    sequences.erase(sequences.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // A reference held outside any table (as a scheduler may pin a block): allocated, or a
  // retain of a referenced one; released later.
  void hold_or_drop() {
    if (!loose.empty() && chance(0.5)) {
      const std::size_t i = pick(loose.size());
      pool.release(loose[i]);
      loose.erase(loose.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    if (chance(0.5) && !sequences.empty() && !sequences[0].table.blocks().empty()) {
      const BlockId id = sequences[0].table.blocks()[0];
      pool.retain(id);
      loose.push_back(id);
      return;
    }
    const std::vector<std::size_t> counts = model_refcounts();
    if (const auto id = pool.allocate()) {
      EXPECT_EQ(counts[*id], 0u) << "allocate handed out referenced block " << *id;
      loose.push_back(*id);
    }
  }

  std::vector<std::size_t> model_refcounts() const {
    std::vector<std::size_t> counts(pool.n_blocks(), 0);
    for (const Sequence& s : sequences)
      for (const BlockId id : s.table.blocks()) ++counts[id];
    for (const BlockId id : loose) ++counts[id];
    return counts;
  }

  // The allocator's invariants, its refcounts against the tables', and every sequence's
  // committed positions holding its own prefix's values.
  void check() const {
    pool.check_invariants();
    const std::vector<std::size_t> counts = model_refcounts();
    std::size_t referenced = 0;
    for (std::size_t id = 0; id < counts.size(); ++id) {
      const BlockId block = static_cast<BlockId>(id);
      ASSERT_EQ(pool.refcount(block), counts[id]) << "block " << id;
      ASSERT_EQ(pool.state(block) == BlockState::referenced, counts[id] > 0) << "block " << id;
      referenced += counts[id] > 0;
    }
    ASSERT_EQ(pool.n_referenced(), referenced);
    for (const Sequence& s : sequences) {
      ASSERT_EQ(s.table.length(), s.tokens.size());
      std::uint64_t prefix = 0;
      for (std::size_t p = 0; p < s.tokens.size(); ++p) {
        prefix = extend(prefix, s.tokens[p]);
        ASSERT_EQ(contents[s.table.block_for(p) * bt + s.table.slot_of(p)], prefix)
            << "position " << p << " of a sequence of " << s.tokens.size();
      }
    }
  }

  std::mt19937 rng;
  KVBlockAllocator pool;
  std::size_t bt;
  std::vector<std::uint64_t> contents;  // [n_blocks][block_tokens] stand-in keys and values
  std::array<std::vector<std::int32_t>, 3> bases;
  std::vector<Sequence> sequences;
  std::vector<BlockId> loose;
  std::size_t copies = 0, reuse_hits = 0, failed_reserves = 0, evictions = 0, swaps = 0;
  std::function<void(BlockId, BlockId)> copy_block = [this](BlockId from, BlockId to) {
    ++copies;
    std::copy_n(contents.begin() + from * bt, bt, contents.begin() + to * bt);
  };
};

TEST(KVBlocks, RandomOperationsKeepEveryInvariant) {
  struct Case {
    std::uint32_t seed;
    std::size_t n_blocks, block_tokens;
  };
  for (const Case c :
       {Case{1, 24, 4}, Case{2, 48, 4}, Case{3, 12, 16}, Case{4, 64, 1}, Case{5, 20, 8}}) {
    SCOPED_TRACE("seed " + std::to_string(c.seed));
    RandomRun run(c.seed, c.n_blocks, c.block_tokens);
    for (int op = 0; op < 3000; ++op) {
      const std::size_t kind =
          run.sequences.empty() ? 0 : run.pick(run.sequences.size() > 10 ? 8 : 7);
      try {
        switch (kind) {
          case 0: run.new_sequence(); break;
          case 1:
          case 2: run.append(); break;
          case 3: run.fork(); break;
          case 4: run.truncate(); break;
          case 5: run.hold_or_drop(); break;
          default: run.finish(); break;
        }
      } catch (const hllm::Error& e) {
        FAIL() << "operation " << op << " (kind " << kind << "): " << e.what();
      }
      run.check();
      if (::testing::Test::HasFatalFailure()) FAIL() << "after operation " << op;
    }
    while (!run.sequences.empty()) run.finish();
    for (const BlockId id : run.loose) run.pool.release(id);
    run.loose.clear();
    run.check();
    EXPECT_EQ(run.pool.n_referenced(), 0u);
    // The run went through every path it is meant to test.
    EXPECT_GT(run.copies, 20u);
    EXPECT_GT(run.reuse_hits, 20u);
    EXPECT_GT(run.failed_reserves, 0u);
    EXPECT_GT(run.evictions, 0u);
    EXPECT_GT(run.swaps, 0u);
    std::printf(
        "seed %u: %zu copies, %zu prefix hits, %zu duplicates swapped, %zu failed reserves, "
        "%zu evictions\n",
        c.seed, run.copies, run.reuse_hits, run.swaps, run.failed_reserves, run.evictions);
  }
}

}  // namespace
