// libFuzzer target: KV state files (io/kv_state_file.hpp) opened against a small pool and, when
// they pass, restored into it. The first input byte picks the pool's element type and whether
// the harness reseals the header and file checksums first (kv_state_pool.hpp); the rest is the
// file. Without resealing nearly every mutation stops at a checksum; with it they reach every
// field's own check and the restore.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "hllm/core/xxh64.hpp"
#include "hllm/io/kv_state_file.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "kv_state_pool.hpp"

namespace {

void put_u64(std::byte* at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<std::byte> file(size - 1);
  if (!file.empty()) std::memcpy(file.data(), data + 1, file.size());
  namespace format = hllm::kv_state_format;
  if ((data[0] & 1) != 0 && file.size() >= format::kTokensAt + 8) {
    put_u64(file.data() + format::kHeaderChecksumAt,
            hllm::xxh64(std::span(file).first(format::kHeaderChecksumAt)));
    put_u64(file.data() + file.size() - 8, hllm::xxh64(std::span(file).first(file.size() - 8)));
  }
  hllm::AnyPagedKVStorage storage = hllm::fuzz::kv_state_pool(hllm::fuzz::kv_state_type(data[0]));
  hllm::KVBlockAllocator allocator(storage.n_blocks(), storage.block_tokens());
  try {
    const hllm::KVStateFile state = hllm::KVStateFile::from_memory(
        file, "fuzz.kv", storage, hllm::kv_state_identity(hllm::fuzz::kv_state_config()));
    hllm::KVBlockTable table(storage.block_tokens());
    if (table.reserve(allocator, state.n_tokens())) {
      state.restore(table, storage, allocator);
      (void)table.publish_full_blocks(allocator, state.tokens());
    }
    table.release_all(allocator);
  } catch (const hllm::Error&) {
  }
  allocator.check_invariants();
  return 0;
}
