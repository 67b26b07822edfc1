#pragma once
// Synthetic models for the example programs and benchmarks: the shape of a preset (or "tiny"),
// random weights of a chosen type, built tensor by tensor so a 1.1B-parameter model never
// exists in float32 all at once. Weights are uniform with the standard deviation a trained
// model's have (1/sqrt(fan_in) for projections), from a fast xorshift generator: statistics
// matter here, not the distribution's shape, and mt19937 + normal would take half a minute.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/model/presets.hpp"
#include "hllm/model/weights.hpp"

namespace hllm::examples {

inline ModelConfig synthetic_config(const std::string& name) {
  if (name != "tiny") return presets::by_name(name);
  ModelConfig c;
  c.name = "tiny";
  c.vocab_size = 512;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_dim = 768;
  c.context_length = 512;
  return c;
}

inline ModelWeights synthetic_weights(const ModelConfig& config, DType type, std::uint64_t seed) {
  config.validate();
  const auto specs = llama_tensor_specs(config);
  std::vector<std::vector<std::byte>> storage;
  std::vector<WeightTensor> tensors;
  std::vector<float> values;
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (const TensorSpec& s : specs) {
    values.resize(s.rows * s.cols);
    const bool embedding = s.name == "token_embd.weight";
    const float std_dev = s.is_norm ? 0.1f : (embedding ? 1.0f : 1.0f / std::sqrt(float(s.cols)));
    const float half_width = std_dev * std::sqrt(3.0f);  // uniform [-a, a] has std a/sqrt(3)
    for (float& v : values) {
      state ^= state >> 12, state ^= state << 25, state ^= state >> 27;  // xorshift64*
      const float unit = static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40) * 0x1.0p-24f;
      v = (s.is_norm ? 1.0f : 0.0f) + (2.0f * unit - 1.0f) * half_width;
    }
    const DType stored = s.is_norm ? DType::f32 : type;
    storage.push_back(quant::quantize(stored, values));
    tensors.push_back({stored, storage.back().data(), s.rows, s.cols, s.name});
  }
  std::size_t index = 0;
  ModelWeights w = assemble_weights(config, [&](const TensorSpec&) { return tensors.at(index++); });
  w.storage = std::make_shared<std::vector<std::vector<std::byte>>>(std::move(storage));
  return w;
}

}  // namespace hllm::examples
