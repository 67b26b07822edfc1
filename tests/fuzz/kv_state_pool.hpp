#pragma once
// The model identity and pools fuzz_kv_state reads state files against, shared with the seed
// writer (write_kv_state_seeds.cpp) so the seeds are valid files for them: one layer, one KV
// head of 32 dims, 16-token blocks, 8 blocks, a vocabulary of 300.

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "hllm/core/kv_element.hpp"
#include "hllm/io/kv_state_file.hpp"
#include "hllm/model/config.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm::fuzz {

inline ModelConfig kv_state_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.dim = 64;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 128;
  c.context_length = 128;
  return c;
}

inline constexpr std::size_t kKVStateBlocks = 8, kKVStateBlockTokens = 16;

inline AnyPagedKVStorage kv_state_pool(KVType type) {
  return AnyPagedKVStorage(type, kKVStateBlocks, kKVStateBlockTokens, 1, 1, 32);
}

// An input's first byte: bits 1.. pick the pool's element type (kKVTypes), bit 0 asks the
// harness to recompute both checksums, so mutations reach the field checks behind them.
inline KVType kv_state_type(std::uint8_t selector) {
  return kKVTypes[(selector >> 1) % std::size(kKVTypes)];
}

}  // namespace hllm::fuzz
