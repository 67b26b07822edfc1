// The batched forward pass (model/batch.hpp): random mixes of sequences, prefill chunks and
// decodes in one call, each sequence's logits bit for bit a lone Session's; every weight type
// and layout, ISA, KV element type and thread count; prefix blocks taken from the pool give the
// logits of computing them; and the refusals of malformed batches.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "batch_entry.hpp"
#include "hllm/model/batch.hpp"
#include "hllm/model/repack.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::BatchEntry;
using hllm::ErrorKind;
using hllm::KVBlockAllocator;
using hllm::KVBlockTable;
using hllm::KVType;
using hllm::Logits;
using hllm::test::run_entry;

hllm::ModelConfig batch_config() { return hllm::test::two_layer_gqa_config(); }

std::vector<std::int32_t> random_tokens(std::size_t n, std::mt19937& rng) {
  return hllm::test::random_tokens(n, rng, 300);
}

// Every position's logits of `tokens` from a fresh Session: the reference.   [n][vocab]
std::vector<float> session_logits(const hllm::Llama<>& model, std::span<const std::int32_t> tokens,
                                  hllm::Isa isa, KVType kv, std::size_t threads) {
  hllm::Session<> session(model, {.context = 256, .threads = threads, .isa = isa, .kv_type = kv});
  const auto logits = session.prefill(tokens, Logits::all);
  return {logits.begin(), logits.end()};
}

// One sequence of a random schedule: its whole token stream, the positions evaluated so far
// and its block table.
struct Sequence {
  std::vector<std::int32_t> tokens;
  std::size_t prompt = 0;  // tokens [0, prompt) are prefilled in chunks, the rest one at a time
  KVBlockTable table{hllm::kDefaultBlockTokens};
  std::vector<float> reference;  // [tokens][vocab]
};

// Runs `sequences` to the end in random steps: each step takes a random subset of the unfinished
// ones, in random order, each with a prefill chunk of random length (1 to 17 tokens, so chunks
// end inside, at and across 16-token blocks) or its next decode token, all in one call, and
// checks every logits row returned against the sequence's reference bit for bit.
void run_random_schedule(hllm::BatchRunner<>& runner, std::vector<Sequence>& sequences,
                         hllm::AnyPagedKVStorage& storage, KVBlockAllocator& allocator,
                         std::mt19937& rng) {
  const std::size_t vocab = runner.model().vocab_size();
  const auto copy = [&](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
  for (std::size_t step = 0;; ++step) {
    std::vector<Sequence*> active;
    for (Sequence& s : sequences)
      if (s.table.length() < s.tokens.size()) active.push_back(&s);
    if (active.empty()) break;
    std::shuffle(active.begin(), active.end(), rng);
    active.resize(std::uniform_int_distribution<std::size_t>(1, active.size())(rng));
    std::vector<BatchEntry> entries;
    std::size_t budget = runner.max_tokens();
    for (Sequence* s : active) {
      const std::size_t at = s->table.length();
      std::size_t n = 1;
      if (at < s->prompt)
        n = std::min(s->prompt - at, std::uniform_int_distribution<std::size_t>(1, 17)(rng));
      if (n > budget) break;
      budget -= n;
      ASSERT_TRUE(s->table.prepare_append(allocator, n, copy));
      const Logits which = rng() % 3 == 0 ? Logits::all : Logits::last;
      entries.push_back({&s->table, std::span(s->tokens).subspan(at, n), which});
    }
    std::vector<std::size_t> starts;
    for (const BatchEntry& e : entries) starts.push_back(e.table->length());
    const auto logits = runner.forward(entries, storage, allocator);
    std::size_t row = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const BatchEntry& e = entries[i];
      const Sequence& s = *std::find_if(sequences.begin(), sequences.end(),
                                        [&](const Sequence& q) { return &q.table == e.table; });
      ASSERT_EQ(e.table->length(), starts[i] + e.tokens.size());
      const std::size_t first = e.logits == Logits::all ? 0 : e.tokens.size() - 1;
      for (std::size_t j = first; j < e.tokens.size(); ++j, ++row) {
        const std::size_t position = starts[i] + j;
        ASSERT_EQ(0, std::memcmp(logits.data() + row * vocab, s.reference.data() + position * vocab,
                                 vocab * sizeof(float)))
            << "step " << step << ", entry " << i << " of " << entries.size() << ", position "
            << position << " (entry from " << starts[i] << ", " << e.tokens.size() << " tokens)";
      }
    }
    ASSERT_EQ(row * vocab, logits.size());
    allocator.check_invariants();
  }
}

struct Model {
  std::vector<std::vector<std::byte>> bytes;
  hllm::Llama<> llama;
};

// Every weight type the writers produce, in the file's layout and repacked (quantized panels and
// groups, BF16 panels), on every ISA this CPU has, every KV element type, one and two threads:
// 1 to 16 sequences, prompts of 1 to 40 tokens and up to 6 decoded ones, in random batches.
TEST(BatchedForward, EachSequenceGetsItsSessionLogitsInAnyBatch) {
  const hllm::ModelConfig c = batch_config();
  std::mt19937 rng(2024);
  // Every weight type and layout runs on every ISA; the cache type and thread count rotate with
  // them (each ISA meets every cache type and both thread counts over the ten weight cases)
  // rather than multiplying the cases, which made this the slowest test under the sanitizers.
  std::size_t weight_case = 0;
  for (hllm::DType type : {hllm::DType::f32, hllm::DType::f16, hllm::DType::bf16, hllm::DType::q8_0,
                           hllm::DType::q4_0}) {
    for (bool repacked : {false, true}) {
      std::vector<std::vector<std::byte>> bytes;
      hllm::ModelWeights weights = hllm::test::typed_weights(c, type, 31, repacked, bytes);
      const hllm::Llama<> model(c, std::move(weights));
      const std::vector<hllm::Isa> isas = hllm::test::supported_isas();
      for (std::size_t i = 0; i < isas.size(); ++i) {
        const hllm::Isa isa = isas[i];
        const KVType kv = hllm::kKVTypes[(weight_case + i) % std::size(hllm::kKVTypes)];
        const std::size_t threads = 1 + (weight_case + i) % 2;
        SCOPED_TRACE(hllm::dtype_name(model.weights().layers[0].wq.type) + " " +
                     hllm::to_string(isa) + " kv " + hllm::to_string(kv) + " threads " +
                     std::to_string(threads));
        hllm::BatchRunner<> runner(model, {.max_tokens = 48, .threads = threads, .isa = isa});
        std::vector<Sequence> sequences(std::uniform_int_distribution<std::size_t>(1, 16)(rng));
        for (Sequence& s : sequences) {
          s.prompt = std::uniform_int_distribution<std::size_t>(1, 40)(rng);
          s.tokens = random_tokens(s.prompt + rng() % 7, rng);
          s.reference = session_logits(model, s.tokens, isa, kv, threads);
        }
        const std::size_t blocks = 16 * 4;
        KVBlockAllocator allocator(blocks, hllm::kDefaultBlockTokens);
        hllm::AnyPagedKVStorage storage(kv, blocks, hllm::kDefaultBlockTokens, 2, 2, 32);
        run_random_schedule(runner, sequences, storage, allocator, rng);
        if (HasFatalFailure()) return;
        for (Sequence& s : sequences) s.table.release_all(allocator);
        EXPECT_EQ(allocator.n_referenced(), 0u);
      }
      ++weight_case;
    }
  }
}

// Head dim 64: the quantized caches store Hadamard-rotated rows (nn/kv_rotation.hpp), and the
// paged and contiguous paths rotate alike, so each sequence still gets its Session's bits.
TEST(BatchedForward, RotatedQuantizedCachesGiveTheSessionLogits) {
  hllm::ModelConfig c = batch_config();
  c.n_heads = 4;  // 256 / 4 = 64 dims per head
  std::vector<std::vector<std::byte>> bytes;
  const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::q8_0, 37, bytes));
  std::mt19937 rng(64);
  for (hllm::Isa isa : hllm::test::supported_isas())
    for (KVType kv : hllm::kKVTypes) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + " kv " + hllm::to_string(kv));
      hllm::BatchRunner<> runner(model, {.max_tokens = 48, .threads = 2, .isa = isa});
      std::vector<Sequence> sequences(std::uniform_int_distribution<std::size_t>(2, 8)(rng));
      for (Sequence& s : sequences) {
        s.prompt = std::uniform_int_distribution<std::size_t>(1, 40)(rng);
        s.tokens = random_tokens(s.prompt + rng() % 7, rng);
        s.reference = session_logits(model, s.tokens, isa, kv, 2);
      }
      KVBlockAllocator allocator(40, hllm::kDefaultBlockTokens);
      hllm::AnyPagedKVStorage storage(kv, 40, hllm::kDefaultBlockTokens, 2, 2, 64);
      run_random_schedule(runner, sequences, storage, allocator, rng);
      if (HasFatalFailure()) return;
      for (Sequence& s : sequences) s.table.release_all(allocator);
    }
}

// A sequence whose prompt starts with published blocks takes them by reference and prefills
// only the rest: its logits are the bits of computing everything, and the prefix's keys and
// values are stored once. A fork shares every block; each sibling's first write copies the
// shared block (copy-on-write), and neither sibling's logits change the other's.
TEST(BatchedForward, PrefixReuseAndForksGiveTheComputedLogits) {
  const hllm::ModelConfig c = batch_config();
  std::vector<std::vector<std::byte>> bytes;
  const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::q8_0, 41, bytes));
  const std::size_t vocab = model.vocab_size();
  std::mt19937 rng(5);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::BatchRunner<> runner(model, {.max_tokens = 64, .threads = 2, .isa = isa});
    KVBlockAllocator allocator(32, hllm::kDefaultBlockTokens);
    hllm::AnyPagedKVStorage storage(KVType::f16, 32, hllm::kDefaultBlockTokens, 2, 2, 32);
    // 40 shared tokens (two full blocks and half a third), then each prompt's own.
    const auto shared = random_tokens(40, rng);
    auto first_prompt = shared, second_prompt = shared;
    for (std::int32_t t : random_tokens(9, rng)) first_prompt.push_back(t);
    for (std::int32_t t : random_tokens(5, rng)) second_prompt.push_back(t);
    const auto second_reference = session_logits(model, second_prompt, isa, KVType::f16, 2);

    KVBlockTable first(hllm::kDefaultBlockTokens), second(hllm::kDefaultBlockTokens);
    run_entry(runner, first, first_prompt, storage, allocator);
    EXPECT_EQ(first.publish_full_blocks(allocator, first_prompt), 3u);
    const std::size_t referenced = allocator.n_referenced();
    const std::size_t reused = second.reuse_prefix(allocator, second_prompt);
    ASSERT_EQ(reused, 32u);  // two full shared blocks; the third differs after 40 tokens
    const auto rest = std::span(second_prompt).subspan(reused);
    const auto logits = run_entry(runner, second, rest, storage, allocator);
    EXPECT_EQ(0, std::memcmp(logits.data(), second_reference.data() + reused * vocab,
                             logits.size() * sizeof(float)));
    // The shared prefix is stored once: the second sequence added only the block of its own
    // positions 32..44.
    EXPECT_EQ(allocator.n_referenced(), referenced + 1);
    allocator.check_invariants();

    // Fork the first sequence and let each sibling decode its own token.
    KVBlockTable sibling = first.fork(allocator);
    const std::int32_t own[2] = {7, 123};
    std::vector<std::vector<float>> branch_logits;
    for (std::size_t b = 0; b < 2; ++b) {
      KVBlockTable& table = b == 0 ? first : sibling;
      branch_logits.push_back(run_entry(runner, table, std::span(&own[b], 1), storage, allocator));
    }
    for (std::size_t b = 0; b < 2; ++b) {
      auto tokens = first_prompt;
      tokens.push_back(own[b]);
      const auto reference = session_logits(model, tokens, isa, KVType::f16, 2);
      EXPECT_EQ(0,
                std::memcmp(branch_logits[b].data(), reference.data() + first_prompt.size() * vocab,
                            vocab * sizeof(float)))
          << "branch " << b;
    }
    EXPECT_NE(first.blocks().back(), sibling.blocks().back());  // the shared last block was copied
    for (KVBlockTable* t : {&first, &second, &sibling}) t->release_all(allocator);
    EXPECT_EQ(allocator.n_referenced(), 0u);
    allocator.check_invariants();
  }
}

// A malformed batch is refused before anything runs: no table advances.
TEST(BatchedForward, RefusesMalformedBatchesAndChangesNothing) {
  const hllm::ModelConfig c = batch_config();
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 3));
  hllm::BatchRunner<> runner(model, {.max_tokens = 8, .threads = 1});
  KVBlockAllocator allocator(8, hllm::kDefaultBlockTokens);
  hllm::AnyPagedKVStorage storage(KVType::f32, 8, hllm::kDefaultBlockTokens, 2, 2, 32);
  const auto no_copy = [](hllm::BlockId, hllm::BlockId) {};
  KVBlockTable a(hllm::kDefaultBlockTokens), b(hllm::kDefaultBlockTokens);
  ASSERT_TRUE(a.prepare_append(allocator, 4, no_copy));
  const std::int32_t tokens[4] = {1, 2, 3, 4}, bad[1] = {300};
  const auto refused = [&](std::vector<BatchEntry> entries, ErrorKind kind, const char* message) {
    hllm::test::expect_error([&] { runner.forward(entries, storage, allocator); }, kind, "", "",
                             std::nullopt, message);
    EXPECT_EQ(a.length(), 0u);
    EXPECT_EQ(b.length(), 0u);
  };
  using hllm::ErrorKind;
  refused({}, ErrorKind::invalid_argument, "no entries");
  refused({{&a, tokens}, {&a, tokens}}, ErrorKind::invalid_argument, "one entry per sequence");
  refused({{&a, bad}}, ErrorKind::out_of_range, "outside the vocabulary");
  refused({{&b, tokens}}, ErrorKind::invalid_argument, "lacks room");
  ASSERT_TRUE(b.prepare_append(allocator, 4, no_copy));
  const std::int32_t many[5] = {1, 2, 3, 4, 5};
  refused({{&a, tokens}, {&b, many}}, ErrorKind::capacity, "max_tokens");
  // A block shared with a fork may not be written before prepare_append copies it.
  KVBlockTable fork = a.fork(allocator);
  refused({{&a, tokens}}, ErrorKind::invalid_argument, "shares a block");
  fork.release_all(allocator);
  hllm::AnyPagedKVStorage other(KVType::f32, 8, hllm::kDefaultBlockTokens, 2, 2, 64);
  hllm::test::expect_error(
      [&] {
        runner.forward(std::vector<BatchEntry>{{&a, tokens}}, other, allocator);
      },
      ErrorKind::invalid_argument, "", "", std::nullopt, "does not fit");
  EXPECT_NO_THROW(
      runner.forward(std::vector<BatchEntry>{{&a, tokens}, {&b, tokens}}, storage, allocator));
  EXPECT_EQ(a.length(), 4u);
  EXPECT_EQ(b.length(), 4u);
}

}  // namespace
