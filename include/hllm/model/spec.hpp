#pragma once
// ModelSpec: the compile-time half of a model type. It chooses the element types (weights,
// activations, and the KV cache type sessions get unless SessionOptions::kv_type picks another)
// and may fix dimensions; everything else stays runtime in ModelConfig.
// Fixed dimensions fold into constants in the model code and are checked against the runtime
// config at construction, so a preset type refuses a file of another shape with a clear error.
// Presets for well-known checkpoints are in model/presets.hpp.

#include <cstddef>
#include <string>
#include <type_traits>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/tensor.hpp"
#include "hllm/model/config.hpp"

namespace hllm {

// Weight element type chosen per tensor at run time (a GGUF file may mix types).
struct AnyWeight {};

template <class Weight = AnyWeight, class KV = float, std::size_t Dim = dynamic,
          std::size_t NLayers = dynamic, std::size_t NHeads = dynamic,
          std::size_t NKVHeads = dynamic, std::size_t HeadDim = dynamic,
          std::size_t FfnDim = dynamic, std::size_t Vocab = dynamic>
struct ModelSpec {
  static_assert(std::is_same_v<Weight, AnyWeight> || std::is_same_v<Weight, float> ||
                    std::is_same_v<Weight, f16> || std::is_same_v<Weight, bf16>,
                "weight type must be AnyWeight, float, f16 or bf16");
  static_assert(is_kv_element_v<KV>,
                "KV cache type must be float, f16, bf16, BlockQ8_0, BlockQ4_0 or BlockFP8");
  using weight_type = Weight;
  using kv_type = KV;
  using activation_type = float;  // activations are float32 between kernels
  static constexpr std::size_t dim = Dim;
  static constexpr std::size_t n_layers = NLayers;
  static constexpr std::size_t n_heads = NHeads;
  static constexpr std::size_t n_kv_heads = NKVHeads;
  static constexpr std::size_t head_dim = HeadDim;
  static constexpr std::size_t ffn_dim = FfnDim;
  static constexpr std::size_t vocab_size = Vocab;

  // Throws if a fixed dimension disagrees with the runtime config.
  static void check(const ModelConfig& config) {
    auto same = [&](std::size_t fixed, std::int64_t actual, const char* field) {
      if (fixed != dynamic && static_cast<std::int64_t>(fixed) != actual)
        throw Error(ErrorKind::invalid_argument,
                    "model has " + std::string(field) + " = " + std::to_string(actual) +
                        " but this model type fixes it to " + std::to_string(fixed),
                    {}, field);
    };
    same(dim, config.dim, "dim");
    same(n_layers, config.n_layers, "n_layers");
    same(n_heads, config.n_heads, "n_heads");
    same(n_kv_heads, config.n_kv_heads, "n_kv_heads");
    same(head_dim, config.resolved_head_dim(), "head_dim");
    same(ffn_dim, config.ffn_dim, "ffn_dim");
    same(vocab_size, config.vocab_size, "vocab_size");
  }
};

// All dimensions runtime, weight types per tensor: what a file of unknown shape loads into.
using DynamicSpec = ModelSpec<>;

}  // namespace hllm
