#pragma once
// What forward passes of up to max_tokens tokens run on: the activation scratch, the 8-bit
// activations of quantized-weight matmuls, a thread pool and the kernels (Compute), all
// allocated once. A Session (one sequence) and a BatchRunner (a batch of sequences) each own
// one.

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/thread_pool.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/llama.hpp"

namespace hllm {

// The most input features any matmul of the model has: dim (Q, K, V, gate, up, output), q_dim
// (the attention output), ffn_dim or an expert's (down). Sizes the kernels' scratch and the
// 8-bit activations.
inline std::size_t widest_matmul_input(const ModelConfig& c) {
  return static_cast<std::size_t>(
      std::max({c.dim, c.q_dim(), c.ffn_dim, c.n_experts > 0 ? c.resolved_expert_ffn_dim() : 0,
                c.shared_expert_ffn_dim}));
}

// The 8-bit activation blocks a forward pass of max_tokens tokens needs: [max_tokens][widest
// input / 32 + 1] (a block to spare for the quantizer), and at least a decoded token's chosen
// experts' down inputs at once (MixtureOfExperts: [n_used][expert_ffn / 32]) and latent
// attention's heads' inputs at once ([n_heads][T][nope or kv_lora] / 32).
inline std::size_t activation_blocks(const ModelConfig& c, std::size_t max_tokens) {
  const std::size_t experts =
      c.n_experts > 0
          ? static_cast<std::size_t>(c.n_experts_used * c.resolved_expert_ffn_dim()) / 32
          : 0;
  // Latent attention's per-head products: every head's [T][nope] or [T][kv_lora] input at once.
  const std::size_t latent_heads =
      c.mla()
          ? max_tokens *
                static_cast<std::size_t>(c.n_heads * std::max(c.mla_nope_dim, c.kv_lora_rank)) / 32
          : 0;
  return std::max({max_tokens * (widest_matmul_input(c) + 32) / 32, experts, latent_heads});
}

// Whether any projection of the model (or its output) is in one of `types`: BF16 panels and
// F32/F16 panels are read by GEMMs that take token panels packed once per operation
// (ComputeLimits::bf16_token_panels, float_token_panels).
inline bool has_projection_of(const ModelWeights& weights, std::initializer_list<DType> types) {
  const auto of = [&](const WeightTensor& w) {
    return std::find(types.begin(), types.end(), w.type) != types.end();
  };
  if (of(weights.output)) return true;
  for (const LayerWeights& layer : weights.layers)
    for (const WeightTensor* w : layer.projections())
      if (of(*w)) return true;
  return false;
}
// The token panels a model's GEMMs read (ComputeLimits' flags): BF16, then F32/F16 panels.
struct TokenPanelNeeds {
  bool bf16 = false, floats = false;
};
inline TokenPanelNeeds token_panel_needs(const ModelWeights& weights) {
  return {has_projection_of(weights, {DType::bf16_x16}),
          has_projection_of(weights, {DType::f32_x16, DType::f16_x16})};
}

// Throws invalid_argument, naming `what`, unless 1 <= n <= 65536: the tokens of one forward
// pass, which size every activation buffer.
inline std::size_t checked_forward_tokens(std::size_t n, const char* what) {
  if (n == 0 || n > 65536)
    throw Error(ErrorKind::invalid_argument,
                std::string(what) + " must be in [1, 65536], got " + std::to_string(n));
  return n;
}

class ForwardContext {
 public:
  // max_tokens: checked by the caller (checked_forward_tokens). threads 0: the physical core
  // count; isa unset: HLLM_ISA, else the best this CPU has; exact: float32 activations for
  // quantized weights too (no 8-bit scratch). The pool steps aside for other processes' busy
  // cores (CoreSharing::leave_busy_cores; HLLM_FIXED_THREADS=1 turns that off). panels: the
  // model's panel types (token_panel_needs), for whose GEMMs room for packed tokens is kept.
  ForwardContext(const ModelConfig& config, std::size_t rot_dims, std::size_t max_tokens,
                 std::size_t threads, std::optional<Isa> isa, bool exact,
                 TokenPanelNeeds panels = {})
      : max_tokens_(max_tokens),
        scratch_(config, max_tokens, rot_dims / 2),
        activations_(exact ? 0 : activation_blocks(config, max_tokens)),
        pool_(threads ? threads : default_thread_count(), CoreSharing::leave_busy_cores),
        compute_(isa ? kernels::table_for(*isa) : kernels::active(), pool_, activations_.span(),
                 {widest_matmul_input(config), max_tokens, panels.bf16, panels.floats}) {}

  std::size_t max_tokens() const noexcept { return max_tokens_; }
  std::size_t threads() const noexcept { return pool_.size(); }
  Isa isa() const noexcept { return compute_.isa(); }
  const Compute& compute() const noexcept { return compute_; }
  ForwardScratch& scratch() noexcept { return scratch_; }

 private:
  std::size_t max_tokens_;
  ForwardScratch scratch_;
  AlignedBuffer<BlockQ8Act> activations_;  // activation_blocks(config, max_tokens)
  ThreadPool pool_;
  Compute compute_;
};

}  // namespace hllm
