#pragma once
// One pre-norm Llama decoder block:
//   h   = x + Wo · Attention(RoPE(Wq·n), RoPE(Wk·n), Wv·n),   n = RMSNorm(x)
//   out = h + SwiGLU(RMSNorm(h))
// with the variants other families add, each a runtime field of ModelConfig: biases on the
// q/k/v projections (Qwen2: Wq·n + bq, ...); QK-norm (Qwen3: RoPE(RMSNorm_head(Wq·n)), the
// norm over each head's head_dim values, one weight vector shared by the heads; OLMoE: one norm
// over the whole projection); the norms' placement (BlockLayout: Gemma 2's sandwich,
// h = x + RMSNorm(Wo · Attention(...)), out = h + RMSNorm(FFN(RMSNorm(h))); OLMo 2's post-norm,
// the same without the input norms); GeGLU for SwiGLU; the attention's score scale and soft-cap,
// and a sliding window on some layers; a mixture of experts for the FFN (nn/moe.hpp: Mixtral,
// Qwen2-MoE, Qwen3-MoE, OLMoE).
// The block owns no activations: the session's scratch holds them, so one block (and one model)
// serves any number of sequences at once.

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/tensor.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/spec.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/nn/attention.hpp"
#include "hllm/nn/gated_ffn.hpp"
#include "hllm/nn/kv_rotation.hpp"
#include "hllm/nn/moe.hpp"
#include "hllm/nn/norm.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

// Activations of one forward chunk of up to max_tokens tokens, allocated once per session.
struct BlockScratch {
  BlockScratch(const ModelConfig& c, std::size_t capacity_tokens)
      : max_tokens(capacity_tokens),
        normed(capacity_tokens * c.dim),
        q(capacity_tokens * c.q_dim()),
        k(capacity_tokens * c.kv_dim()),
        v(capacity_tokens * c.kv_dim()),
        attn(capacity_tokens * c.q_dim()),
        projected(capacity_tokens * c.dim),
        gate(capacity_tokens * ffn_width(c)),
        up(capacity_tokens * ffn_width(c)),
        moe(c.n_experts > 0
                ? MoeScratch(capacity_tokens, c.dim, c.resolved_expert_ffn_dim(), expert_routing(c))
                : MoeScratch()) {}
  // The widest FFN a token runs: the dense one, an expert or the shared expert.
  static std::size_t ffn_width(const ModelConfig& c) {
    if (c.n_experts == 0) return c.ffn_dim;
    return std::max(c.resolved_expert_ffn_dim(), c.shared_expert_ffn_dim);
  }
  static ExpertRouting expert_routing(const ModelConfig& c) {
    return {static_cast<std::size_t>(c.n_experts), static_cast<std::size_t>(c.n_experts_used),
            c.expert_weights_normalized};
  }
  std::size_t max_tokens;
  AlignedBuffer<float> normed;     // [T][dim]
  AlignedBuffer<float> q;          // [T][n_heads][head_dim]
  AlignedBuffer<float> k;          // [T][n_kv_heads][head_dim]
  AlignedBuffer<float> v;          // [T][n_kv_heads][head_dim]
  AlignedBuffer<float> attn;       // [T][n_heads][head_dim]
  AlignedBuffer<float> projected;  // [T][dim]
  AlignedBuffer<float> gate;       // [T][ffn_width]
  AlignedBuffer<float> up;         // [T][ffn_width]
  MoeScratch moe;                  // routing and gathered rows; empty for a dense model
};

template <class Spec = DynamicSpec>
class LlamaBlock {
 public:
  LlamaBlock(const ModelConfig& config, const LayerWeights& weights, std::size_t layer_index)
      : weights_(weights),
        layer_(layer_index),
        dim_(static_cast<std::size_t>(config.dim)),
        n_heads_(static_cast<std::size_t>(config.n_heads)),
        n_kv_heads_(static_cast<std::size_t>(config.n_kv_heads)),
        qkv_bias_(config.qkv_bias),
        qk_norm_(config.qk_norm),
        layout_(config.layout),
        activation_(config.ffn_activation),
        routing_(BlockScratch::expert_routing(config)),
        norm_(config.norm, config.rms_eps),
        attention_(
            {static_cast<std::size_t>(config.n_heads), static_cast<std::size_t>(config.n_kv_heads),
             static_cast<std::size_t>(config.resolved_head_dim()),
             static_cast<std::size_t>(config.window_of(static_cast<std::int64_t>(layer_index))),
             config.resolved_attention_scale(), config.attn_softcap}) {
    if constexpr (!std::is_same_v<typename Spec::weight_type, AnyWeight>) {
      constexpr DType want = WeightTensor::dtype_of<typename Spec::weight_type>();
      for (const WeightTensor* t : weights.projections())
        if (t->type != want)
          throw Error(ErrorKind::unsupported,
                      "tensor is " + dtype_name(t->type) + " but this model type holds " +
                          dtype_name(want) + " weights",
                      {}, t->name);
    }
  }

  std::size_t layer_index() const noexcept { return layer_; }
  const Attention& attention() const noexcept { return attention_; }

  // x: [n_tokens][dim], the residual stream, updated in place. `chunk` (nn/kv_chunk.hpp) says
  // where each token sits and where its keys and values go: one sequence's contiguous cache, of
  // any element type, or a batch of sequences in a paged pool. cos, sin: [n_tokens][rot_dims/2]
  // for the tokens' positions.
  template <class Chunk>
  void forward(const Compute& compute, float* x, std::size_t n_tokens, const Rope& rope,
               const float* cos, const float* sin, Chunk& chunk, BlockScratch& s) const {
    const std::size_t dim = dim_(), head_dim = rope.head_dim();
    const std::size_t q_width = n_heads_() * head_dim, kv_width = n_kv_heads_() * head_dim;
    const std::size_t half_rot = rope.rot_dims() / 2;

    // A post-norm block's sublayers read the residual stream itself.
    const bool post_norm = layout_ == BlockLayout::post_norm;
    const float* sublayer_in = post_norm ? x : s.normed.data();  // [n_tokens][dim]
    if (!post_norm)
      norm_.forward(matrix_view<const float>(x, n_tokens, dim), weights_.attn_norm,
                    weights_.attn_norm_bias, matrix_view(s.normed.data(), n_tokens, dim),
                    compute.kernels());
    const Compute::Product qkv[] = {
        {&weights_.wq, s.q.data()}, {&weights_.wk, s.k.data()}, {&weights_.wv, s.v.data()}};
    compute.matmul_fused(qkv, sublayer_in, n_tokens);
    // A quantized cache stores rotated rows (nn/kv_rotation.hpp); queries turn with the keys.
    const KVRotation rotation = chunk.rotation();
    for (std::size_t t = 0; t < n_tokens; ++t) {
      float* q = s.q.data() + t * q_width;
      float* k = s.k.data() + t * kv_width;
      float* v = s.v.data() + t * kv_width;
      if (qkv_bias_) {
        add_into(q, weights_.bq.as<float>(), q_width);
        add_into(k, weights_.bk.as<float>(), kv_width);
        add_into(v, weights_.bv.as<float>(), kv_width);
      }
      if (qk_norm_ != QkNorm::none) {  // one norm per head, or one over the whole projection
        const std::size_t q_rows = qk_norm_ == QkNorm::whole ? 1 : n_heads_();
        const std::size_t k_rows = qk_norm_ == QkNorm::whole ? 1 : n_kv_heads_();
        normalize_in_place(compute, q, q_rows, q_width / q_rows, weights_.q_norm);
        normalize_in_place(compute, k, k_rows, kv_width / k_rows, weights_.k_norm);
      }
      rope.apply(q, n_heads_(), cos + t * half_rot, sin + t * half_rot, compute.kernels());
      rope.apply(k, n_kv_heads_(), cos + t * half_rot, sin + t * half_rot, compute.kernels());
      if (rotation.active()) {
        hadamard_rotate(q, q_width, rotation.key_block);
        hadamard_rotate(k, kv_width, rotation.key_block);
        hadamard_rotate(v, kv_width, rotation.value_block);
      }
      chunk.store(layer_, t, k, v);
    }
    // Every token of the chunk is stored before any attends, and each attends to positions up
    // to its own, so causality inside the chunk comes for free. Threads split the independent
    // (token, KV head) pairs: the query heads sharing a KV head stay together, so their keys and
    // values are read once.
    const std::size_t n_heads = n_heads_(), n_kv = n_kv_heads_(), group = n_heads / n_kv;
    // Work: about 2 · head_dim multiply-adds per visible key per head.
    const std::size_t attention_work = chunk.visible_keys() * n_heads * head_dim * 2;
    compute.split(n_tokens * n_kv, 1, attention_work,
                  [&](std::size_t begin, std::size_t end, std::size_t) {
                    for (std::size_t i = begin; i < end; ++i) {
                      const std::size_t t = i / n_kv, g = i % n_kv;
                      chunk.attend(attention_, layer_, t, s.q.data() + t * q_width,
                                   s.attn.data() + t * q_width, compute.kernels(), g * group,
                                   (g + 1) * group);
                    }
                  });
    if (rotation.active())  // the output of rotated values, turned back (H is its own inverse)
      hadamard_rotate(s.attn.data(), n_tokens * q_width, rotation.value_block);
    compute.matmul(weights_.wo, s.attn.data(), n_tokens, s.projected.data());
    const bool output_norms = layout_ == BlockLayout::sandwich || layout_ == BlockLayout::post_norm;
    if (output_norms)
      normalize_in_place(compute, s.projected.data(), n_tokens, dim, weights_.post_attn_norm);
    add_into(x, s.projected.data(), n_tokens * dim);

    // A parallel block's FFN reads the norm attention read, still in s.normed (x before
    // attention's output joined it).
    if (!post_norm && layout_ != BlockLayout::parallel)
      norm_.forward(matrix_view<const float>(x, n_tokens, dim), weights_.ffn_norm,
                    weights_.ffn_norm_bias, matrix_view(s.normed.data(), n_tokens, dim),
                    compute.kernels());
    if (routing_.n_experts > 0) {
      const bool shared = !weights_.shared_expert.gate.empty();
      const MoeWeights moe{&weights_.router, &weights_.experts,
                           shared ? &weights_.shared_expert : nullptr,
                           shared ? weights_.shared_expert_gate.as<float>() : nullptr};
      MixtureOfExperts::forward(compute, moe, routing_, activation_, sublayer_in, n_tokens, dim,
                                s.projected.data(), s.moe, s.gate.data(), s.up.data());
    } else {
      GatedFeedForward::forward(compute, weights_.ffn, activation_, sublayer_in, n_tokens,
                                s.projected.data(), s.gate.data(), s.up.data());
    }
    if (output_norms)
      normalize_in_place(compute, s.projected.data(), n_tokens, dim, weights_.post_ffn_norm);
    add_into(x, s.projected.data(), n_tokens * dim);
  }

 private:
  static void add_into(float* x, const float* y, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
  }
  // y: [rows][cols], each row RMS-normed with `weight` ([cols]) in place.
  void normalize_in_place(const Compute& compute, float* y, std::size_t rows, std::size_t cols,
                          const WeightTensor& weight) const {
    norm_.forward(matrix_view<const float>(y, rows, cols), weight, WeightTensor{},
                  matrix_view(y, rows, cols), compute.kernels());
  }

  LayerWeights weights_;
  std::size_t layer_;
  [[no_unique_address]] Size<Spec::dim> dim_;
  [[no_unique_address]] Size<Spec::n_heads> n_heads_;
  [[no_unique_address]] Size<Spec::n_kv_heads> n_kv_heads_;
  bool qkv_bias_;
  QkNorm qk_norm_;
  BlockLayout layout_;
  GateActivation activation_;
  ExpertRouting routing_;
  Norm norm_;
  Attention attention_;
};

}  // namespace hllm
