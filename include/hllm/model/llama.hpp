#pragma once
// Llama<Spec>: token embedding (times sqrt(dim) where the config says: Gemma) → LlamaBlocks →
// final norm (RMSNorm, or LayerNorm: Command-R) → output projection (its own matrix or the
// embedding, tied) → logits, scaled (Command-R) and soft-capped (Gemma 2) where the config says.
// The model is immutable after construction and holds only read-only weights, so any number of
// Sessions (model/session.hpp), on any threads, can share it.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/llama_block.hpp"
#include "hllm/model/spec.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/nn/kv_chunk.hpp"
#include "hllm/nn/norm.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

// Per-sequence activations for a forward pass of up to max_tokens tokens.
struct ForwardScratch {
  ForwardScratch(const ModelConfig& c, std::size_t max_tokens, std::size_t half_rot)
      : block(c, max_tokens),
        residual(max_tokens * c.dim),
        cos(max_tokens * half_rot),
        sin(max_tokens * half_rot),
        window_cos(c.window_rope_theta > 0.0f ? max_tokens * half_rot : 0),
        window_sin(c.window_rope_theta > 0.0f ? max_tokens * half_rot : 0) {}
  BlockScratch block;
  AlignedBuffer<float> residual;    // [T][dim]
  AlignedBuffer<float> cos;         // [T][rot_dims/2]
  AlignedBuffer<float> sin;         // [T][rot_dims/2]
  AlignedBuffer<float> window_cos;  // [T][rot_dims/2] the windowed layers' (Gemma 3), else empty
  AlignedBuffer<float> window_sin;  // [T][rot_dims/2]
};

template <class Spec = DynamicSpec>
class Llama {
 public:
  using spec_type = Spec;
  // The KV cache element type of a session that does not choose one (SessionOptions::kv_type).
  using kv_type = typename Spec::kv_type;

  Llama(ModelConfig config, ModelWeights weights)
      : config_((config.validate(), Spec::check(config), std::move(config))),
        weights_((validate_weights(config_, weights), std::move(weights))),
        rope_(config_.rope, config_.resolved_head_dim()),
        window_rope_(config_.window_rope_theta > 0.0f ? config_.window_rope() : config_.rope,
                     config_.resolved_head_dim()),
        final_norm_(config_.norm, config_.rms_eps) {
    blocks_.reserve(weights_.layers.size());
    for (std::size_t l = 0; l < weights_.layers.size(); ++l)
      blocks_.emplace_back(config_, weights_.layers[l], l);
  }

  const ModelConfig& config() const noexcept { return config_; }
  const ModelWeights& weights() const noexcept { return weights_; }
  // The RoPE of the layers without a window (of every layer, unless the config gives the
  // windowed ones their own: ModelConfig::window_rope_theta).
  const Rope& rope() const noexcept { return rope_; }
  const std::vector<LlamaBlock<Spec>>& blocks() const noexcept { return blocks_; }
  std::size_t vocab_size() const noexcept { return static_cast<std::size_t>(config_.vocab_size); }
  const WeightTensor& output_weight() const noexcept {
    return config_.tied_embeddings ? weights_.token_embedding : weights_.output;
  }

  // Throws out_of_range unless every id is a valid token of this model's vocabulary.
  void check_tokens(std::span<const std::int32_t> tokens) const {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
        throw Error(ErrorKind::out_of_range, "token id " + std::to_string(tokens[i]) +
                                                 " at index " + std::to_string(i) +
                                                 " is outside the vocabulary [0, " +
                                                 std::to_string(config_.vocab_size) + ")");
  }

  // Runs tokens (at most scratch's max_tokens) at positions start.. through the model, storing
  // their keys/values in `cache`. logits: [n_tokens][vocab] if all_logits, else [vocab] for the
  // last token only. The cache may hold any element type.
  template <class KV>
  void forward(const Compute& compute, std::span<const std::int32_t> tokens, std::size_t start,
               KVCache<KV>& cache, ForwardScratch& scratch, float* logits, bool all_logits) const {
    const std::size_t n = tokens.size();
    cache.check_room(start, n);
    ContiguousKVChunk<KV> chunk(cache, start, n);
    forward_hidden(compute, tokens, chunk, scratch);
    cache.advance(n);
    const std::size_t first = all_logits ? 0 : n - 1;
    logits_of_hidden(compute, scratch, first, n - first, logits);
  }

  // The decoder part of a forward pass: embeds `tokens` (at most scratch's max_tokens), runs
  // them through every block, with `chunk` (nn/kv_chunk.hpp) placing each token in its sequence
  // and cache, and leaves the last block's output in scratch.residual: [n_tokens][dim]. The
  // caller commits the positions (advance) once this returns.
  template <class Chunk>
  void forward_hidden(const Compute& compute, std::span<const std::int32_t> tokens, Chunk& chunk,
                      ForwardScratch& scratch) const {
    const std::size_t n = tokens.size(), dim = static_cast<std::size_t>(config_.dim);
    const std::size_t half_rot = rope_.rot_dims() / 2;
    if (n == 0 || n > scratch.block.max_tokens)
      throw Error(ErrorKind::internal, "forward chunk of " + std::to_string(n) + " tokens");
    check_tokens(tokens);
    float* x = scratch.residual.data();
    const float embedding_scale = std::sqrt(static_cast<float>(dim));
    for (std::size_t t = 0; t < n; ++t) {
      reference::dequantize_row(weights_.token_embedding, static_cast<std::size_t>(tokens[t]),
                                x + t * dim);
      if (config_.scale_embeddings)
        for (std::size_t i = 0; i < dim; ++i) x[t * dim + i] *= embedding_scale;
      const auto position = static_cast<std::int64_t>(chunk.position(t));
      rope_.angles(position, scratch.cos.data() + t * half_rot, scratch.sin.data() + t * half_rot);
      if (config_.window_rope_theta > 0.0f)
        window_rope_.angles(position, scratch.window_cos.data() + t * half_rot,
                            scratch.window_sin.data() + t * half_rot);
    }
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      const bool local = config_.uses_window_rope(static_cast<std::int64_t>(l));
      blocks_[l].forward(compute, x, n, local ? window_rope_ : rope_,
                         (local ? scratch.window_cos : scratch.cos).data(),
                         (local ? scratch.window_sin : scratch.sin).data(), chunk, scratch.block);
    }
  }

  // The logits of rows [first, first + n_rows) of scratch.residual (forward_hidden's output):
  // logits: [n_rows][vocab].
  void logits_of_hidden(const Compute& compute, ForwardScratch& scratch, std::size_t first,
                        std::size_t n_rows, float* logits) const {
    const std::size_t dim = static_cast<std::size_t>(config_.dim);
    float* normed = scratch.block.normed.data();
    final_norm_.forward(
        matrix_view<const float>(scratch.residual.data() + first * dim, n_rows, dim),
        weights_.output_norm, weights_.output_norm_bias, matrix_view(normed, n_rows, dim),
        compute.kernels());
    // The logits are what users compare. An output matrix of at most 6-bit weights (Q6_K in
    // Q4_0/Q4_K_M/Q6_K files, as llama.cpp writes them) runs on the 8-bit-activation kernels,
    // like every other projection: its own rounding is coarser than the activations', so the
    // error against the exact logits stays below llama.cpp's (figures in docs/performance.md).
    // Q8_0 and float matrices keep float32 activations: there the 8-bit rounding would dominate
    // and take the error past llama.cpp's.
    if (is_at_most_6_bit(output_weight().type))
      compute.matmul(output_weight(), normed, n_rows, logits);
    else
      compute.matmul_exact(output_weight(), normed, n_rows, logits);
    if (config_.logit_scale > 0.0f)
      for (std::size_t i = 0; i < n_rows * vocab_size(); ++i) logits[i] *= config_.logit_scale;
    if (config_.final_softcap > 0.0f)
      compute.kernels().soft_cap(logits, n_rows * vocab_size(), config_.final_softcap);
  }

 private:
  ModelConfig config_;
  ModelWeights weights_;
  Rope rope_;
  Rope window_rope_;  // the windowed layers' where the config gives them their own, else rope_'s
  Norm final_norm_;
  std::vector<LlamaBlock<Spec>> blocks_;
};

// Compiled once per program, by hllm/implementation.hpp (its part model.hpp).
extern template class Llama<DynamicSpec>;

}  // namespace hllm
