// Writes fuzz_kv_state's seed corpus (tools/make_fuzz_seeds.sh runs it): for every KV element
// type, a valid state file of 20 tokens (a full block and a partial one) for the pool of
// kv_state_pool.hpp, behind the selector byte that picks that type.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hllm/io/kv_state_file.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "kv_state_pool.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  for (std::size_t i = 0; i < sizeof(hllm::kKVTypes) / sizeof(hllm::kKVTypes[0]); ++i) {
    const hllm::KVType type = hllm::kKVTypes[i];
    hllm::AnyPagedKVStorage storage = hllm::fuzz::kv_state_pool(type);
    hllm::KVBlockAllocator allocator(storage.n_blocks(), storage.block_tokens());
    hllm::KVBlockTable table(storage.block_tokens());
    std::vector<std::int32_t> tokens;
    if (!table.reserve(allocator, 20)) return 1;
    std::vector<float> k(32), v(32);
    for (std::size_t p = 0; p < 20; ++p) {
      tokens.push_back(static_cast<std::int32_t>(3 + p * 7));
      for (std::size_t d = 0; d < 32; ++d) {
        k[d] = static_cast<float>(p) * 0.25f - static_cast<float>(d) * 0.125f;
        v[d] = static_cast<float>(d % 5) - static_cast<float>(p) * 0.5f;
      }
      storage.store(table.block_for(p), table.slot_of(p), 0, k.data(), v.data());
    }
    table.advance(20);
    const std::string path = dir + "/" + hllm::to_string(type) + ".kv";
    hllm::save_kv_state(path + ".tmp", tokens, table, storage,
                        hllm::kv_state_identity(hllm::fuzz::kv_state_config()));
    std::ifstream in(path + ".tmp", std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(path, std::ios::binary);
    out.put(static_cast<char>(i << 1));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::remove((path + ".tmp").c_str());
    table.release_all(allocator);
  }
  return 0;
}
