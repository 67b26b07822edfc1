#pragma once
// Model conversion: re-encodes every weight of a model as another element type (f32, f16, bf16,
// q8_0, q4_0) and, for checkpoints in the half-split (neox) RoPE layout, permutes the q/k rows
// into the interleaved layout that GGUF `llama` files use, exactly as llama.cpp's
// convert_hf_to_gguf.py does. The result owns its bytes and can be written with
// save_gguf_model. Norm weights stay f32. `progress` (io/progress.hpp) hears of each tensor
// converted, as stage "quantizing" for a block type (q8_0, q4_0) and "converting" otherwise.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/progress.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/weights.hpp"

namespace hllm {

struct ConvertedModel {
  ModelConfig config;
  ModelWeights weights;
};

namespace detail {

// Row r of the interleaved layout from the neox layout, within each head of head_dim rows:
// interleaved pair (2i, 2i+1) is neox pair (i, i + half). rows: [n_heads · head_dim].
inline std::size_t neox_source_row(std::size_t r, std::size_t head_dim, std::size_t rot_dims) {
  const std::size_t head = r / head_dim, d = r % head_dim;
  if (d >= rot_dims) return r;  // dimensions past the rotary part are not rotated
  const std::size_t half = rot_dims / 2;
  return head * head_dim + (d % 2) * half + d / 2;
}

}  // namespace detail

inline ConvertedModel convert_model(const ModelConfig& config, const ModelWeights& weights,
                                    DType type, const ProgressCallback& progress = {}) {
  config.validate();
  validate_weights(config, weights);
  ConvertedModel out{config, {}};
  const bool permute = config.rope.layout == RopeLayout::neox;
  out.config.rope.layout = RopeLayout::interleaved;
  const std::size_t head_dim = static_cast<std::size_t>(config.resolved_head_dim());
  const std::size_t rot_dims =
      config.rope.rot_dims != 0 ? static_cast<std::size_t>(config.rope.rot_dims) : head_dim;

  const auto specs = llama_tensor_specs(config);
  DTypeInfo info{};
  const char* stage =
      dtype_info(type, info) && info.block_elements > 1 ? "quantizing" : "converting";
  auto storage = std::make_shared<std::vector<std::vector<std::byte>>>();
  std::vector<WeightTensor> converted;
  auto convert = [&](const WeightTensor& t, const TensorSpec& spec) {
    std::vector<float> values(t.rows * t.cols);  // [rows][cols]
    const bool rotary = permute && (spec.name.find(".attn_q.") != std::string::npos ||
                                    spec.name.find(".attn_k.") != std::string::npos);
    for (std::size_t r = 0; r < t.rows; ++r) {
      const std::size_t source = rotary ? detail::neox_source_row(r, head_dim, rot_dims) : r;
      reference::dequantize_row(t, source, values.data() + r * t.cols);
    }
    const DType stored = spec.is_norm ? DType::f32 : type;
    storage->push_back(quant::quantize(stored, values));
    converted.push_back({stored, storage->back().data(), t.rows, t.cols, spec.name});
    detail::report_progress(progress, stage, converted.size(), specs.size(), spec.name);
  };
  std::size_t index = 0;
  convert(weights.token_embedding, specs[index++]);
  for (const auto& l : weights.layers)
    for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm,
                                  &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      convert(*t, specs[index++]);
  convert(weights.output_norm, specs[index++]);
  if (!config.tied_embeddings) convert(weights.output, specs[index++]);
  std::size_t next = 0;
  out.weights =
      assemble_weights(out.config, [&](const TensorSpec&) { return converted.at(next++); });
  out.weights.storage = storage;
  return out;
}

}  // namespace hllm
