#pragma once
// The weights of a Llama model as views (WeightTensor) into memory owned elsewhere: a mapped
// file, or the single buffer that build_weights() fills. `storage` keeps that memory alive for
// as long as any model uses the views. Tensor names follow GGUF (`blk.N.attn_q.weight`).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/model/config.hpp"
#include "hllm/nn/swiglu.hpp"

namespace hllm {

struct LayerWeights {
  WeightTensor attn_norm;  // [1][dim], f32
  WeightTensor wq;         // [n_heads*head_dim][dim]
  WeightTensor wk;         // [n_kv_heads*head_dim][dim]
  WeightTensor wv;         // [n_kv_heads*head_dim][dim]
  WeightTensor wo;         // [dim][n_heads*head_dim]
  WeightTensor ffn_norm;   // [1][dim], f32
  FeedForwardWeights ffn;  // gate, up: [ffn_dim][dim]; down: [dim][ffn_dim]
};

struct ModelWeights {
  WeightTensor token_embedding;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  WeightTensor output_norm;             // [1][dim], f32
  WeightTensor output;                  // [vocab][dim]; empty when tied to the embedding
  std::shared_ptr<const void> storage;  // owner of the bytes the views point into
  // Owner of the load-time repacked weights (model/repack.hpp), if any.
  std::shared_ptr<const void> repacked_storage;
};

// The tensors a Llama model has, with GGUF names and shapes [rows][cols].
struct TensorSpec {
  std::string name;
  std::size_t rows, cols;
  bool is_norm;  // norm weights are always stored as f32
};

// How many tensors a model of this config has: embedding, 9 per layer, final norm, output.
inline std::size_t llama_tensor_count(const ModelConfig& c) {
  return 1 + 9 * static_cast<std::size_t>(c.n_layers) + 1 + (c.tied_embeddings ? 0 : 1);
}

// The index-th tensor of llama_tensor_specs(), computed on its own: loaders look tensors up one
// at a time, so a corrupt layer count of millions fails at the first missing tensor instead of
// first building millions of names (2 GB for a block_count of 16 million).
inline TensorSpec llama_tensor_spec(const ModelConfig& c, std::size_t index) {
  const auto dim = static_cast<std::size_t>(c.dim), q = static_cast<std::size_t>(c.q_dim()),
             kv = static_cast<std::size_t>(c.kv_dim()), ffn = static_cast<std::size_t>(c.ffn_dim),
             vocab = static_cast<std::size_t>(c.vocab_size);
  const std::size_t layer_tensors = 9 * static_cast<std::size_t>(c.n_layers);
  if (index == 0) return {"token_embd.weight", vocab, dim, false};
  if (index == layer_tensors + 1) return {"output_norm.weight", 1, dim, true};
  if (index == layer_tensors + 2 && !c.tied_embeddings) return {"output.weight", vocab, dim, false};
  if (index > layer_tensors)
    throw Error(ErrorKind::internal, "tensor index " + std::to_string(index) + " past the model");
  const std::size_t layer = (index - 1) / 9;
  const std::string p = "blk." + std::to_string(layer) + ".";
  switch ((index - 1) % 9) {
    case 0: return {p + "attn_norm.weight", 1, dim, true};
    case 1: return {p + "attn_q.weight", q, dim, false};
    case 2: return {p + "attn_k.weight", kv, dim, false};
    case 3: return {p + "attn_v.weight", kv, dim, false};
    case 4: return {p + "attn_output.weight", dim, q, false};
    case 5: return {p + "ffn_norm.weight", 1, dim, true};
    case 6: return {p + "ffn_gate.weight", ffn, dim, false};
    case 7: return {p + "ffn_up.weight", ffn, dim, false};
    default: return {p + "ffn_down.weight", dim, ffn, false};
  }
}

// Every tensor a Llama model has, with GGUF names and shapes [rows][cols], in file order. (For
// models whose weights exist; loaders use llama_tensor_spec one at a time.)
inline std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  for (std::size_t i = 0; i < llama_tensor_count(c); ++i) specs.push_back(llama_tensor_spec(c, i));
  return specs;
}

// Assigns the tensors, found by name through `lookup`, to their places in a ModelWeights.
inline ModelWeights assemble_weights(const ModelConfig& c,
                                     const std::function<WeightTensor(const TensorSpec&)>& lookup) {
  ModelWeights w;
  auto next = [&, i = std::size_t{0}]() mutable { return lookup(llama_tensor_spec(c, i++)); };
  w.token_embedding = next();
  // Layers are appended as their tensors are found (not sized up front), so a corrupt layer
  // count costs nothing before the first missing tensor stops it.
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& layer = w.layers.emplace_back();
    layer.attn_norm = next();
    layer.wq = next();
    layer.wk = next();
    layer.wv = next();
    layer.wo = next();
    layer.ffn_norm = next();
    layer.ffn.gate = next();
    layer.ffn.up = next();
    layer.ffn.down = next();
  }
  w.output_norm = next();
  if (!c.tied_embeddings) w.output = next();
  return w;
}

// Builds weights in one owning buffer: `fill(spec, values)` writes each tensor's float values
// ([rows][cols]), which are then stored as `type` (norms stay f32).
inline ModelWeights build_weights(
    const ModelConfig& config, DType type,
    const std::function<void(const TensorSpec&, std::span<float>)>& fill) {
  config.validate();
  if (type != DType::f32 && type != DType::f16 && type != DType::bf16)
    throw Error(ErrorKind::unsupported,
                "build_weights stores f32, f16 or bf16, not " + dtype_name(type));
  const auto specs = llama_tensor_specs(config);
  const std::size_t element_bytes = type == DType::f32 ? 4 : 2;
  auto bytes_of = [&](const TensorSpec& s) {
    const std::size_t raw = s.rows * s.cols * (s.is_norm ? 4 : element_bytes);
    return (raw + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  };
  std::size_t total = 0;
  for (const auto& s : specs) total += bytes_of(s);
  auto buffer = std::make_shared<AlignedBuffer<std::byte>>(total);

  std::vector<float> values;
  std::size_t offset = 0;
  std::vector<WeightTensor> tensors;
  for (const auto& s : specs) {
    values.assign(s.rows * s.cols, 0.0f);
    fill(s, values);
    std::byte* dst = buffer->data() + offset;
    const DType stored = s.is_norm ? DType::f32 : type;
    for (std::size_t i = 0; i < values.size(); ++i) {
      switch (stored) {
        case DType::f32: std::memcpy(dst + 4 * i, &values[i], 4); break;
        case DType::f16: {
          const f16 h = f16::from_float(values[i]);
          std::memcpy(dst + 2 * i, &h, 2);
          break;
        }
        default: {
          const bf16 b = bf16::from_float(values[i]);
          std::memcpy(dst + 2 * i, &b, 2);
        }
      }
    }
    tensors.push_back({stored, dst, s.rows, s.cols, s.name});
    offset += bytes_of(s);
  }
  std::size_t index = 0;
  ModelWeights w = assemble_weights(config, [&](const TensorSpec&) { return tensors.at(index++); });
  w.storage = buffer;
  return w;
}

// Random weights for tests and synthetic benchmarks, scaled as a trained model's are: norms
// 1 + N(0, 0.1²), projections N(0, 1/fan_in), embedding N(0, 1), so activations stay O(1).
inline ModelWeights random_weights(const ModelConfig& config, DType type, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return build_weights(config, type, [&](const TensorSpec& s, std::span<float> values) {
    const bool embedding = s.name == "token_embd.weight";
    const float std_dev = s.is_norm ? 0.1f : (embedding ? 1.0f : 1.0f / std::sqrt(float(s.cols)));
    for (float& v : values) v = (s.is_norm ? 1.0f : 0.0f) + std_dev * normal(rng);
  });
}

// Checks every tensor against the shape the config implies; names the first that disagrees.
inline void validate_weights(const ModelConfig& config, const ModelWeights& weights) {
  if (weights.layers.size() != static_cast<std::size_t>(config.n_layers))
    throw Error(ErrorKind::format, "model has " + std::to_string(weights.layers.size()) +
                                       " layers of weights, config says " +
                                       std::to_string(config.n_layers));
  const auto specs = llama_tensor_specs(config);
  std::size_t index = 0;
  const ModelWeights& w = weights;
  auto check = [&](const WeightTensor& t) {
    const TensorSpec& s = specs.at(index++);
    if (t.empty()) throw Error(ErrorKind::format, "missing tensor", {}, s.name);
    if (t.rows != s.rows || t.cols != s.cols)
      throw Error(ErrorKind::format,
                  "shape [" + std::to_string(t.rows) + "][" + std::to_string(t.cols) +
                      "] disagrees with the config, which implies [" + std::to_string(s.rows) +
                      "][" + std::to_string(s.cols) + "]",
                  {}, s.name);
    if (s.is_norm && t.type != DType::f32)
      throw Error(ErrorKind::unsupported, "norm weights must be F32, got " + dtype_name(t.type), {},
                  s.name);
  };
  check(w.token_embedding);
  for (const auto& l : w.layers) {
    for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm,
                                  &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      check(*t);
  }
  check(w.output_norm);
  if (!config.tied_embeddings) check(w.output);
}

}  // namespace hllm
