#pragma once
// Random model weights of one weight type, for the model-level tests that run every type.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hllm/io/quantize.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/weights.hpp"

namespace hllm::test {

// The batch tests' model: two layers, GQA (8 query heads on 2 KV heads of 32 dims: the block
// caches need multiples of 32), wide enough that matmuls and attention split across two threads,
// a vocabulary of 300.
inline ModelConfig two_layer_gqa_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.dim = 256;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_dim = 512;
  c.context_length = 256;
  return c;
}

// random_weights(c, f32, seed) with every projection and the output converted to `type` (any
// type quant::quantize writes); bytes keeps the converted tensors alive.
inline ModelWeights typed_weights(const ModelConfig& c, DType type, std::uint64_t seed,
                                  std::vector<std::vector<std::byte>>& bytes) {
  ModelWeights w = random_weights(c, DType::f32, seed);
  const auto convert = [&](WeightTensor& t) {
    const float* values = t.as<float>();
    bytes.push_back(quant::quantize(type, {values, t.rows * t.cols}));
    t = {type, bytes.back().data(), t.rows, t.cols, t.name};
  };
  for (LayerWeights& l : w.layers)
    for (WeightTensor* t : l.projections()) convert(*t);
  convert(w.output);
  return w;
}

// typed_weights, kept in the file's layout or (repacked) moved into every panel layout some ISA
// loads them into: 16-row quantized panels, 8-row groups, BF16 pair panels.
inline ModelWeights typed_weights(const ModelConfig& c, DType type, std::uint64_t seed,
                                  bool repacked, std::vector<std::vector<std::byte>>& bytes) {
  ModelWeights w = typed_weights(c, type, seed, bytes);
  if (repacked)
    repack_weights(w,
                   RepackPlan::of_kinds({LayoutKind::quant_panels16, LayoutKind::quant_groups8,
                                         LayoutKind::bf16_pairs16}),
                   false);
  return w;
}

}  // namespace hllm::test
