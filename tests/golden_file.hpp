#pragma once
// Reader for the golden files that tools/gen_goldens.py writes: magic "HLLMGLD1", u32 entry
// count, then per entry u32 name length, name, u32 rank, rank × u64 dims, float32 data.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace hllm::test {

struct GoldenArray {
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
  std::size_t dim(std::size_t i) const { return static_cast<std::size_t>(shape.at(i)); }
};

class GoldenFile {
 public:
  explicit GoldenFile(const std::string& name) : path_(std::string(HLLM_GOLDEN_DIR) + "/" + name) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open golden file " + path_);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t pos = 0;
    auto take = [&](void* dst, std::size_t n) {
      if (n > bytes.size() - pos) throw std::runtime_error("truncated golden file " + path_);
      std::memcpy(dst, bytes.data() + pos, n);
      pos += n;
    };
    char magic[8];
    take(magic, 8);
    if (std::memcmp(magic, "HLLMGLD1", 8) != 0) throw std::runtime_error("bad magic in " + path_);
    std::uint32_t count = 0;
    take(&count, 4);
    for (std::uint32_t e = 0; e < count; ++e) {
      std::uint32_t name_length = 0, rank = 0;
      take(&name_length, 4);
      std::string key(name_length, '\0');
      take(key.data(), name_length);
      take(&rank, 4);
      GoldenArray array;
      array.shape.resize(rank);
      std::size_t elements = 1;
      for (auto& d : array.shape) {
        take(&d, 8);
        elements *= static_cast<std::size_t>(d);
      }
      array.values.resize(elements);
      take(array.values.data(), elements * 4);
      arrays_.emplace(std::move(key), std::move(array));
    }
  }

  const GoldenArray& array(const std::string& key) const {
    auto it = arrays_.find(key);
    if (it == arrays_.end()) throw std::runtime_error("no entry '" + key + "' in " + path_);
    return it->second;
  }
  const std::vector<float>& operator[](const std::string& key) const { return array(key).values; }
  float scalar(const std::string& key) const { return array(key).values.at(0); }
  std::int64_t integer(const std::string& key) const {
    return static_cast<std::int64_t>(array(key).values.at(0));
  }
  bool has(const std::string& key) const { return arrays_.count(key) != 0; }

 private:
  std::string path_;
  std::map<std::string, GoldenArray> arrays_;
};

}  // namespace hllm::test
