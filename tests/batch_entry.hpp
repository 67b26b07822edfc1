#pragma once
// One sequence's tokens through a BatchRunner, for the tests of the paged cache around it.

#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "hllm/model/batch.hpp"

namespace hllm::test {

// Runs `tokens` after the table's committed positions through the runner in one entry (after
// prepare_append) and returns every position's logits.   [tokens][vocab]
inline std::vector<float> run_entry(BatchRunner<>& runner, KVBlockTable& table,
                                    std::span<const std::int32_t> tokens,
                                    AnyPagedKVStorage& storage, KVBlockAllocator& allocator) {
  const auto copy = [&](BlockId from, BlockId to) { storage.copy_block(from, to); };
  EXPECT_TRUE(table.prepare_append(allocator, tokens.size(), copy));
  const BatchEntry entry{&table, tokens, Logits::all};
  const auto logits = runner.forward(std::span(&entry, 1), storage, allocator);
  return {logits.begin(), logits.end()};
}

}  // namespace hllm::test
