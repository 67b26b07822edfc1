// Context shift and sliding-window release in the paged KV cache (nn/kv_shift.hpp,
// KVBlockTable::release_before / prepare_rewrite):
//   - the re-rotation is right: with one layer, a cache's keys and values depend only on each
//     token and its position, so a shifted cache must give the logits of a fresh prefill of the
//     kept tokens at their new positions (an independent computation of the same thing);
//   - rows move exactly (values bit for bit; keys = RoPE's rotation of the old ones), blocks
//     shared with a sibling or the prefix cache are copied, not rewritten;
//   - released window blocks go back to the pool and the table refuses what needs them.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hllm/model/batch.hpp"
#include "hllm/nn/kv_rotation.hpp"
#include "hllm/nn/kv_shift.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::BatchEntry;
using hllm::ErrorKind;
using hllm::KVBlockAllocator;
using hllm::KVBlockTable;
using hllm::KVType;
using hllm::Logits;

hllm::ModelConfig shift_config(std::int64_t layers) {
  hllm::ModelConfig c;
  c.vocab_size = 300;
  c.dim = 128;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 256;
  c.context_length = 256;
  return c;
}

const hllm::Llama<>& one_layer_model() {
  static const hllm::ModelConfig c = shift_config(1);
  static std::vector<std::vector<std::byte>> bytes;
  static const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::f32, 5, bytes));
  return model;
}

// Head dim 64: quantized caches hold Hadamard-rotated rows, which the shift turns back first.
const hllm::Llama<>& one_layer_model_64() {
  static const hllm::ModelConfig c = [] {
    hllm::ModelConfig config = shift_config(1);
    config.n_heads = 2;
    return config;
  }();
  static std::vector<std::vector<std::byte>> bytes;
  static const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::f32, 6, bytes));
  return model;
}

template <class F>
void expect_kind(F&& f, ErrorKind kind, const std::string& message) {
  hllm::test::expect_error(std::forward<F>(f), kind, "", "", std::nullopt, message);
}

auto copy_into(hllm::AnyPagedKVStorage& storage) {
  return [&storage](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
}

// Prefills `tokens` into `table` in chunks of at most runner.max_tokens(); returns the last
// token's logits.   [vocab]
std::vector<float> prefill(hllm::BatchRunner<>& runner, KVBlockTable& table,
                           std::span<const std::int32_t> tokens, hllm::AnyPagedKVStorage& storage,
                           KVBlockAllocator& allocator) {
  std::span<const float> logits;
  for (std::size_t at = 0; at < tokens.size();) {
    const std::size_t n = std::min(runner.max_tokens(), tokens.size() - at);
    EXPECT_TRUE(table.prepare_append(allocator, n, copy_into(storage)));
    const BatchEntry entry{&table, tokens.subspan(at, n), Logits::last};
    logits = runner.forward(std::span(&entry, 1), storage, allocator);
    at += n;
  }
  return {logits.begin(), logits.end()};
}

// One layer: after dropping positions [n_keep, n_keep + n_discard), the next token's logits
// equal those of a fresh prefill of the kept tokens (rounding aside: the shifted keys went
// through one more rotation, and through the element type's rounding once more).
TEST(ContextShift, OneLayerShiftEqualsAFreshPrefillOfTheKeptTokens) {
  std::mt19937 rng(3);
  struct Case {
    const hllm::Llama<>* model;
    KVType type;
    float tolerance;  // of the largest logit difference, relative to the largest logit
  };
  for (const Case c :
       {Case{&one_layer_model(), KVType::f32, 1e-5f}, Case{&one_layer_model(), KVType::f16, 2e-3f},
        Case{&one_layer_model_64(), KVType::f32, 1e-5f},
        Case{&one_layer_model_64(), KVType::q8_0, 2e-2f}}) {
    const hllm::Llama<>& model = *c.model;
    const std::size_t head_dim = static_cast<std::size_t>(model.config().resolved_head_dim());
    hllm::BatchRunner<> runner(model, {.max_tokens = 64, .threads = 1});
    for (const auto& [length, n_keep, n_discard] :
         {std::tuple{50u, 5u, 20u}, std::tuple{64u, 0u, 32u}, std::tuple{33u, 16u, 8u},
          std::tuple{100u, 17u, 41u}}) {
      SCOPED_TRACE(testing::Message() << hllm::to_string(c.type) << " length " << length << " keep "
                                      << n_keep << " discard " << n_discard);
      const auto tokens = hllm::test::random_tokens(length + 1, rng, 300);
      hllm::AnyPagedKVStorage storage(c.type, 32, hllm::kDefaultBlockTokens, 1, 2, head_dim);
      KVBlockAllocator allocator(storage.n_blocks(), storage.block_tokens());
      KVBlockTable shifted;
      prefill(runner, shifted, std::span(tokens).first(length), storage, allocator);
      ASSERT_TRUE(
          hllm::shift_context(shifted, storage, allocator, model.rope(), n_keep, n_discard));
      EXPECT_EQ(shifted.length(), length - n_discard);
      const auto after =
          prefill(runner, shifted, std::span(tokens).subspan(length, 1), storage, allocator);

      std::vector<std::int32_t> kept(tokens.begin(), tokens.begin() + n_keep);
      kept.insert(kept.end(), tokens.begin() + n_keep + n_discard, tokens.end());
      KVBlockTable fresh;
      const auto reference = prefill(runner, fresh, kept, storage, allocator);
      float largest = 0, worst = 0;
      for (std::size_t i = 0; i < reference.size(); ++i) {
        largest = std::max(largest, std::abs(reference[i]));
        worst = std::max(worst, std::abs(reference[i] - after[i]));
      }
      EXPECT_LE(worst, c.tolerance * largest);
      shifted.release_all(allocator);
      fresh.release_all(allocator);
      EXPECT_EQ(allocator.n_referenced(), 0u);
    }
  }
}

// Writes recognisable rows (row value = position·1000 + layer·100 + head·10 + d/…) at every
// position of `table`, through the storage.
void fill_rows(KVBlockTable& table, hllm::PagedKVStorage<float>& storage, std::size_t length) {
  std::vector<float> k(2 * 32), v(2 * 32);
  for (std::size_t p = 0; p < length; ++p)
    for (std::size_t layer = 0; layer < storage.n_layers(); ++layer) {
      for (std::size_t i = 0; i < k.size(); ++i) {
        k[i] = static_cast<float>(p) + 0.01f * static_cast<float>(i);
        v[i] = -static_cast<float>(p * 100 + layer * 10) - 0.001f * static_cast<float>(i);
      }
      storage.store(table.block_for(p), table.slot_of(p), layer, k.data(), v.data());
    }
  table.advance(length);
}

// Values move bit for bit, keys are the old keys rotated by −n_discard positions (checked by
// rotating them back), kept positions are untouched, and the blocks past the end are released.
TEST(ContextShift, RowsMoveAndKeysRotateBack) {
  const hllm::Llama<>& model = one_layer_model();
  hllm::PagedKVStorage<float> storage(16, hllm::kDefaultBlockTokens, 2, 2, 32);
  KVBlockAllocator allocator(16, hllm::kDefaultBlockTokens);
  KVBlockTable table;
  const auto copy = [&](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
  const std::size_t length = 70, n_keep = 3, n_discard = 33;
  ASSERT_TRUE(table.prepare_append(allocator, length, copy));
  fill_rows(table, storage, length);
  std::vector<std::vector<float>> before;  // [position][layer][K,V][head][32]
  for (std::size_t p = 0; p < length; ++p) {
    std::vector<float> rows;
    for (std::size_t layer = 0; layer < 2; ++layer)
      for (std::size_t kv = 0; kv < 2; ++kv)
        for (std::size_t h = 0; h < 2; ++h) {
          const float* r = storage.row(table.block_for(p), table.slot_of(p), layer, kv, h);
          rows.insert(rows.end(), r, r + 32);
        }
    before.push_back(rows);
  }
  ASSERT_TRUE(hllm::shift_context(table, storage, allocator, model.rope(), n_keep, n_discard));
  ASSERT_EQ(table.length(), length - n_discard);
  EXPECT_EQ(table.n_held(), 3u);  // 37 positions
  EXPECT_EQ(allocator.n_referenced(), 3u);
  std::vector<float> cos(16), sin(16);
  model.rope().shift_angles(static_cast<std::int64_t>(n_discard), cos.data(), sin.data());
  for (std::size_t p = 0; p < table.length(); ++p) {
    const std::size_t old = p < n_keep ? p : p + n_discard;
    std::size_t i = 0;
    for (std::size_t layer = 0; layer < 2; ++layer)
      for (std::size_t kv = 0; kv < 2; ++kv)
        for (std::size_t h = 0; h < 2; ++h, i += 32) {
          std::vector<float> row(
              storage.row(table.block_for(p), table.slot_of(p), layer, kv, h),
              storage.row(table.block_for(p), table.slot_of(p), layer, kv, h) + 32);
          if (kv == 0 && p >= n_keep) model.rope().apply(row.data(), 1, cos.data(), sin.data());
          for (std::size_t d = 0; d < 32; ++d) {
            if (kv == 1 || p < n_keep)
              ASSERT_EQ(row[d], before[old][i + d]) << "position " << p << " layer " << layer;
            else
              ASSERT_NEAR(row[d], before[old][i + d], 1e-4f * (1 + std::abs(before[old][i + d])))
                  << "key at " << p << " layer " << layer << " head " << h << " dim " << d;
          }
        }
  }
  table.release_all(allocator);
}

// A pool whose values are its key rows (latent attention's, KVValues::keys) shifts its keys as
// a pool with value rows of their own does, bit for bit: the value move must not copy the old
// row back over the key just rotated.
TEST(ContextShift, KeyRowsReadAsValuesRotateOnce) {
  const hllm::Llama<>& model = one_layer_model();
  const std::size_t length = 70, n_keep = 3, n_discard = 33;
  std::vector<std::vector<float>> keys;  // per pool: every kept position's key rows
  for (hllm::KVValues values : {hllm::KVValues::separate, hllm::KVValues::keys}) {
    hllm::PagedKVStorage<float> storage(16, hllm::kDefaultBlockTokens, 2, 2, 32, values);
    KVBlockAllocator allocator(16, hllm::kDefaultBlockTokens);
    KVBlockTable table;
    const auto copy = [&](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
    ASSERT_TRUE(table.prepare_append(allocator, length, copy));
    fill_rows(table, storage, length);
    ASSERT_TRUE(hllm::shift_context(table, storage, allocator, model.rope(), n_keep, n_discard));
    std::vector<float> rows;
    for (std::size_t p = 0; p < table.length(); ++p)
      for (std::size_t layer = 0; layer < 2; ++layer)
        for (std::size_t h = 0; h < 2; ++h) {
          const float* r = storage.row(table.block_for(p), table.slot_of(p), layer, 0, h);
          rows.insert(rows.end(), r, r + 32);
        }
    keys.push_back(rows);
    table.release_all(allocator);
  }
  EXPECT_EQ(keys[1], keys[0]);
}

// A sibling (fork) and the prefix cache keep their rows: the shift copies the shared blocks it
// rewrites. With no block left for the copy, it returns false and no row has moved.
TEST(ContextShift, SharedBlocksAreCopiedNotRewritten) {
  const hllm::Llama<>& model = one_layer_model();
  hllm::PagedKVStorage<float> storage(6, hllm::kDefaultBlockTokens, 2, 2, 32);
  KVBlockAllocator allocator(6, hllm::kDefaultBlockTokens);
  const auto copy = [&](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
  KVBlockTable table;
  ASSERT_TRUE(table.prepare_append(allocator, 40, copy));
  fill_rows(table, storage, 40);
  KVBlockTable sibling = table.fork(allocator);
  std::vector<float> sibling_rows;
  for (std::size_t p = 0; p < 40; ++p) {
    const float* r = storage.row(sibling.block_for(p), sibling.slot_of(p), 1, 0, 1);
    sibling_rows.insert(sibling_rows.end(), r, r + 32);
  }
  ASSERT_TRUE(hllm::shift_context(table, storage, allocator, model.rope(), 4, 18));
  for (std::size_t p = 0; p < 40; ++p) {
    const float* r = storage.row(sibling.block_for(p), sibling.slot_of(p), 1, 0, 1);
    ASSERT_EQ(0, std::memcmp(r, sibling_rows.data() + p * 32, 32 * sizeof(float))) << p;
  }
  EXPECT_NE(table.blocks()[0], sibling.blocks()[0]);

  // Pool of 6: the sibling holds 3, table 2 (22 positions) and 1 is free; fork again so that
  // both blocks of `table` are shared, take the free block, and the shift cannot copy.
  KVBlockTable third = table.fork(allocator);
  KVBlockTable hog;
  ASSERT_TRUE(hog.reserve(allocator, 16));
  ASSERT_EQ(allocator.n_available(), 0u);
  const std::vector<hllm::BlockId> blocks(table.blocks().begin(), table.blocks().end());
  const float moved = *storage.row(table.block_for(10), table.slot_of(10), 0, 1, 0);
  EXPECT_FALSE(hllm::shift_context(table, storage, allocator, model.rope(), 4, 5));
  EXPECT_EQ(table.length(), 22u);
  EXPECT_TRUE(std::equal(blocks.begin(), blocks.end(), table.blocks().begin()));
  EXPECT_EQ(*storage.row(third.block_for(10), third.slot_of(10), 0, 1, 0), moved);
  for (KVBlockTable* t : {&table, &sibling, &third, &hog}) t->release_all(allocator);
  EXPECT_EQ(allocator.n_referenced(), 0u);
}

TEST(ContextShift, RefusesRangesPastTheSequence) {
  const hllm::Llama<>& model = one_layer_model();
  hllm::PagedKVStorage<float> storage(4, hllm::kDefaultBlockTokens, 1, 2, 32);
  KVBlockAllocator allocator(4, hllm::kDefaultBlockTokens);
  KVBlockTable table;
  ASSERT_TRUE(table.reserve(allocator, 20));
  table.advance(20);
  expect_kind([&] { hllm::shift_context(table, storage, allocator, model.rope(), 15, 6); },
              ErrorKind::invalid_argument, "dropping 6");
  expect_kind([&] { hllm::shift_context(table, storage, allocator, model.rope(), 21, 0); },
              ErrorKind::invalid_argument, "keeping 21");
  EXPECT_EQ(hllm::context_shift_discard(20, 4), 8u);
  EXPECT_EQ(hllm::context_shift_discard(20, 20), 0u);
  table.release_all(allocator);
}

// release_before gives back whole blocks before a position, once; the table then refuses what
// needs them (writing or reading there, forking, publishing), and release_all returns the rest.
TEST(SlidingWindow, ReleasedBlocksGoBackToThePool) {
  KVBlockAllocator allocator(8, 16);
  KVBlockTable table(16);
  ASSERT_TRUE(table.reserve(allocator, 80));
  table.advance(70);
  EXPECT_EQ(table.release_before(allocator, 15), 0u);  // block 0 still holds position 15
  EXPECT_EQ(table.release_before(allocator, 40), 2u);
  EXPECT_EQ(table.release_before(allocator, 40), 0u);
  EXPECT_EQ(table.n_released(), 2u);
  EXPECT_EQ(table.n_held(), 3u);
  EXPECT_EQ(allocator.n_referenced(), 3u);
  EXPECT_EQ(table.blocks()[0], hllm::kReleasedBlock);
  EXPECT_NO_THROW((void)table.block_for(32));
  expect_kind([&] { (void)table.block_for(31); }, ErrorKind::out_of_range, "released");
  expect_kind([&] { (void)table.fork(allocator); }, ErrorKind::invalid_argument, "cannot fork");
  std::vector<std::int32_t> tokens(70, 7);
  EXPECT_EQ(table.publish_full_blocks(allocator, tokens), 0u);
  EXPECT_EQ(allocator.n_cached(), 0u);
  table.truncate(allocator, 50);  // keeps blocks 2 and 3
  EXPECT_EQ(table.n_held(), 2u);
  EXPECT_EQ(allocator.n_referenced(), 2u);
  table.release_all(allocator);
  EXPECT_EQ(allocator.n_referenced(), 0u);
  EXPECT_EQ(table.n_released(), 0u);
  EXPECT_EQ(table.capacity(), 0u);
}

// --- the rotation of quantized caches -------------------------------------------------------

// hadamard_rotate is x ← H x with H Sylvester's Walsh–Hadamard matrix over √n, built here from
// its definition (H[i][j] = (−1)^popcount(i & j) / √n), block by block; H H = I.
TEST(KVRotation, IsTheOrthonormalWalshHadamardMatrix) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (const std::size_t block : {64u, 128u, 256u}) {
    std::vector<float> x(3 * block);
    for (float& v : x) v = normal(rng);
    std::vector<float> y = x;
    hllm::hadamard_rotate(y.data(), y.size(), block);
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t i = 0; i < block; ++i) {
        double expected = 0;
        for (std::size_t j = 0; j < block; ++j)
          expected += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[b * block + j];
        expected /= std::sqrt(static_cast<double>(block));
        ASSERT_NEAR(y[b * block + i], expected, 1e-4) << "block " << block << " row " << i;
      }
    hllm::hadamard_rotate(y.data(), y.size(), block);
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
  }
}

// Which caches rotate: the quantized types, head dims that are multiples of 64, keys in the
// largest power-of-two block from 64 dividing the head dim, values in 64s (llama.cpp's rule).
TEST(KVRotation, OnlyQuantizedCachesOfHeadDimsOf64Rotate) {
  EXPECT_FALSE(hllm::kv_rotation<float>(128).active());
  EXPECT_FALSE(hllm::kv_rotation<hllm::f16>(128).active());
  EXPECT_FALSE(hllm::kv_rotation<hllm::bf16>(64).active());
  EXPECT_FALSE(hllm::kv_rotation<hllm::BlockQ8_0>(32).active());
  EXPECT_FALSE(hllm::kv_rotation<hllm::BlockQ4_0>(96).active());
  for (const auto& [head_dim, key_block] :
       {std::pair{64u, 64u}, std::pair{128u, 128u}, std::pair{192u, 64u}, std::pair{256u, 256u}}) {
    const hllm::KVRotation r = hllm::kv_rotation<hllm::BlockQ4_0>(head_dim);
    EXPECT_EQ(r.key_block, key_block) << head_dim;
    EXPECT_EQ(r.value_block, 64u);
    EXPECT_TRUE(hllm::kv_rotation<hllm::BlockFP8>(head_dim).active());
    EXPECT_TRUE(hllm::kv_rotation<hllm::BlockQ8_0>(head_dim).active());
  }
}

// Why: a key with an outlier dimension loses its small dimensions to a Q4_0 block scale set by
// the outlier; rotated, the outlier's weight is spread over the block and q·k comes out closer.
TEST(KVRotation, RotatedOutlierKeysQuantizeBetter) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal;
  double plain_error = 0, rotated_error = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> q(64), k(64);
    for (float& v : q) v = normal(rng);
    for (float& v : k) v = normal(rng);
    k[static_cast<std::size_t>(trial) % 64] = 25.0f;  // one outlier dimension
    double exact = 0;
    for (std::size_t d = 0; d < 64; ++d) exact += double(q[d]) * k[d];
    const auto quantized_dot = [](const std::vector<float>& qv, const std::vector<float>& kv) {
      hllm::BlockQ4_0 row[2];
      hllm::store_kv_row(kv.data(), 64, row);
      double dot = 0;
      for (std::size_t d = 0; d < 64; ++d) dot += double(qv[d]) * hllm::kv_value(row, d);
      return dot;
    };
    plain_error += std::abs(quantized_dot(q, k) - exact);
    hllm::hadamard_rotate(q.data(), 64, 64);
    hllm::hadamard_rotate(k.data(), 64, 64);
    rotated_error += std::abs(quantized_dot(q, k) - exact);
  }
  EXPECT_LT(rotated_error, 0.6 * plain_error) << plain_error / 200 << " " << rotated_error / 200;
}

}  // namespace
