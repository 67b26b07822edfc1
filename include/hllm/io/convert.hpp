#pragma once
// Model conversion: re-encodes every weight of a model as another element type (f32, f16, bf16,
// q8_0, q4_0) and, where the model's RoPE layout is not the one its architecture's GGUF files
// use (a Hugging Face Llama checkpoint is half-split, GGUF `llama` interleaved), permutes the q/k
// rows (and q/k biases) into the file's layout, exactly as llama.cpp's convert_hf_to_gguf.py
// does. The result owns its bytes and can be written with save_gguf_model. Vectors (norms,
// biases) stay f32. `progress` (io/progress.hpp) hears of each tensor
// converted, as stage "quantizing" for a block type (q8_0, q4_0) and "converting" otherwise.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/io/progress.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/architecture.hpp"
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
  const Architecture* arch = find_architecture(config.architecture);
  if (arch == nullptr)
    throw Error(ErrorKind::unsupported, "architecture '" + config.architecture +
                                            "' has no GGUF form (" + supported_architectures() +
                                            ")");
  if (config.rope.layout != arch->gguf_rope && arch->gguf_rope != RopeLayout::interleaved)
    throw Error(ErrorKind::unsupported, "GGUF " + config.architecture +
                                            " files rotate half-split pairs; this model's q/k "
                                            "rows are interleaved");
  const bool permute = config.rope.layout != arch->gguf_rope;
  if (permute && config.mla())  // (its q rows hold each head's RoPE part after the rest)
    throw Error(ErrorKind::unsupported,
                "latent attention's q/k rows cannot be permuted to another RoPE layout");
  out.config.rope.layout = arch->gguf_rope;
  const std::size_t head_dim = static_cast<std::size_t>(config.resolved_head_dim());
  const std::size_t rot_dims =
      config.rope.rot_dims != 0 ? static_cast<std::size_t>(config.rope.rot_dims) : head_dim;

  const auto specs = model_tensor_specs(config);
  DTypeInfo info{};
  const char* stage =
      dtype_info(type, info) && info.block_elements > 1 ? "quantizing" : "converting";
  auto storage = std::make_shared<std::vector<std::vector<std::byte>>>();
  std::vector<WeightTensor> converted;
  auto convert = [&](const WeightTensor& t, const TensorSpec& spec) {
    std::vector<float> values(t.rows * t.cols);  // [rows][cols]
    const bool rotary = permute && (spec.name.find(".attn_q.") != std::string::npos ||
                                    spec.name.find(".attn_k.") != std::string::npos);
    if (rotary && spec.role == TensorRole::bias) {  // [1][n_heads·head_dim]: permute elements
      const float* bias = t.as<float>();
      for (std::size_t i = 0; i < t.cols; ++i)
        values[i] = bias[detail::neox_source_row(i, head_dim, rot_dims)];
    } else {
      for (std::size_t r = 0; r < t.rows; ++r) {
        const std::size_t source = rotary ? detail::neox_source_row(r, head_dim, rot_dims) : r;
        reference::dequantize_row(t, source, values.data() + r * t.cols);
      }
    }
    const DType stored = kept_in_f32(spec) ? DType::f32 : type;
    if (DTypeInfo stored_info{};
        dtype_info(stored, stored_info) && t.cols % stored_info.block_elements != 0)
      throw Error(ErrorKind::unsupported,
                  "rows of " + std::to_string(t.cols) + " values do not split into " +
                      dtype_name(stored) + " blocks of " +
                      std::to_string(stored_info.block_elements),
                  {}, spec.name);
    storage->push_back(quant::quantize(stored, values));
    converted.push_back({stored, storage->back().data(), t.rows, t.cols, spec.name});
    detail::report_progress(progress, stage, converted.size(), specs.size(), spec.name);
  };
  const auto tensors = model_tensors(config, weights);
  for (std::size_t i = 0; i < specs.size(); ++i) convert(*tensors[i], specs[i]);
  std::size_t next = 0;
  out.weights =
      assemble_weights(out.config, [&](const TensorSpec&) { return converted.at(next++); });
  out.weights.storage = storage;
  return out;
}

}  // namespace hllm
