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
#include <vector>

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
                : MoeScratch()),
        mla_in(c.mla() ? capacity_tokens *
                             std::max(c.n_heads * std::max(c.mla_nope_dim, c.kv_lora_rank),
                                      c.q_lora_rank)
                       : 0),
        mla_out(c.mla() ? capacity_tokens * c.n_heads * std::max(c.kv_lora_rank, c.mla_v_dim) : 0),
        mla_products(c.mla() ? static_cast<std::size_t>(c.n_heads) : 0) {}
  // The widest FFN a token runs: the dense one (of a dense model or of an expert model's
  // leading dense layers), an expert or the shared expert.
  static std::size_t ffn_width(const ModelConfig& c) {
    if (c.n_experts == 0) return c.ffn_dim;
    return std::max({c.resolved_expert_ffn_dim(), c.shared_expert_ffn_dim,
                     c.n_dense_layers > 0 ? c.ffn_dim : 0});
  }
  static ExpertRouting expert_routing(const ModelConfig& c) {
    return {static_cast<std::size_t>(c.n_experts),
            static_cast<std::size_t>(c.n_experts_used),
            c.expert_weights_normalized,
            c.expert_weights_scale != 0.0f ? c.expert_weights_scale : 1.0f,
            c.expert_gating,
            static_cast<std::size_t>(c.n_expert_groups),
            static_cast<std::size_t>(c.n_expert_groups_used)};
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
  // Multi-head latent attention's per-head products (W_kb's, W_vb's); empty without it.
  AlignedBuffer<float> mla_in;   // [n_heads][T][nope or kv_lora], or q's [T][q_lora_rank]
  AlignedBuffer<float> mla_out;  // [n_heads][T][kv_lora or v]
  std::vector<Compute::ProductOf> mla_products;  // [n_heads]
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
        parallel_ffn_norm_(config.parallel_ffn_norm),
        activation_(config.ffn_activation),
        shared_expert_ungated_(config.shared_expert_ungated),
        routing_(config.has_experts(static_cast<std::int64_t>(layer_index))
                     ? BlockScratch::expert_routing(config)
                     : ExpertRouting{}),
        norm_(config.norm, config.rms_eps),
        attention_(
            {static_cast<std::size_t>(config.n_heads), static_cast<std::size_t>(config.n_kv_heads),
             static_cast<std::size_t>(config.resolved_head_dim()),
             static_cast<std::size_t>(config.window_of(static_cast<std::int64_t>(layer_index))),
             config.resolved_attention_scale(), config.attn_softcap}),
        mla_{static_cast<std::size_t>(config.kv_lora_rank),
             static_cast<std::size_t>(config.q_lora_rank),
             static_cast<std::size_t>(config.mla_nope_dim),
             static_cast<std::size_t>(config.mla_v_dim)} {
    if (config.mla())  // each head's W_kb and W_vb, as views of the layer's two tensors
      for (std::size_t h = 0; h < n_heads_(); ++h) {
        k_b_heads_.push_back(
            weights_.wk_b.row_range(h * mla_.latent, mla_.latent, weights_.wk_b.name));
        v_b_heads_.push_back(weights_.wv_b.row_range(h * mla_.v, mla_.v, weights_.wv_b.name));
      }
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
    const std::size_t dim = dim_();

    // A post-norm block's sublayers read the residual stream itself.
    const bool post_norm = layout_ == BlockLayout::post_norm;
    const float* sublayer_in = post_norm ? x : s.normed.data();  // [n_tokens][dim]
    if (!post_norm)
      norm_.forward(matrix_view<const float>(x, n_tokens, dim), weights_.attn_norm,
                    weights_.attn_norm_bias, matrix_view(s.normed.data(), n_tokens, dim),
                    compute.kernels());
    if (mla_.latent > 0)
      latent_attention(compute, sublayer_in, n_tokens, rope, cos, sin, chunk, s);
    else
      attention_sublayer(compute, sublayer_in, n_tokens, rope, cos, sin, chunk, s);
    const bool output_norms = layout_ == BlockLayout::sandwich || layout_ == BlockLayout::post_norm;
    if (output_norms)
      normalize_in_place(compute, s.projected.data(), n_tokens, dim, weights_.post_attn_norm);
    // The FFN's input norm of x into s.normed: of the block's input in a parallel block with
    // its own (Falcon-40B), before attention's output joins x; of x after it in pre-norm and
    // sandwich blocks. Other parallel blocks' FFN reads the norm attention read, still in
    // s.normed; a post-norm block's reads x itself.
    const auto norm_ffn_input = [&] {
      norm_.forward(matrix_view<const float>(x, n_tokens, dim), weights_.ffn_norm,
                    weights_.ffn_norm_bias, matrix_view(s.normed.data(), n_tokens, dim),
                    compute.kernels());
    };
    if (parallel_ffn_norm_) norm_ffn_input();
    add_into(x, s.projected.data(), n_tokens * dim);
    if (!post_norm && layout_ != BlockLayout::parallel) norm_ffn_input();
    if (routing_.n_experts > 0) {
      const bool shared = !weights_.shared_expert.gate.empty();
      const MoeWeights moe{
          &weights_.router, &weights_.experts, shared ? &weights_.shared_expert : nullptr,
          shared && !shared_expert_ungated_ ? weights_.shared_expert_gate.as<float>() : nullptr,
          weights_.expert_selection_bias.empty() ? nullptr
                                                 : weights_.expert_selection_bias.as<float>()};
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
  // Every token of the chunk attends: q, out: [n_tokens][q_width]. Threads split
  // the independent (token, KV head) pairs, the query heads sharing a KV head together so that
  // their keys and values are read once; where those pairs are fewer than the threads (decode
  // with few KV heads: latent attention's one, multi-query's), each group's heads are halved
  // until they are not. A head's arithmetic is the same whatever group it runs in (the tiled
  // kernel's heads are independent lanes, and which kernel runs depends on the ISA and the
  // head's width alone), so results do not depend on the thread count.
  template <class Chunk>
  void attend_chunk(const Compute& compute, const Chunk& chunk, std::size_t n_tokens,
                    const float* q, float* out, std::size_t q_width) const {
    const std::size_t n_heads = n_heads_(), n_kv = n_kv_heads_(), group = n_heads / n_kv;
    const std::size_t threads = compute.pool().size();
    std::size_t parts = 1;  // per KV head
    while (n_tokens * n_kv * parts < threads && group % (2 * parts) == 0) parts *= 2;
    const std::size_t heads = group / parts, units_per_token = n_kv * parts;
    // Work: about 2 · head_dim multiply-adds per visible key per head.
    const std::size_t attention_work =
        chunk.visible_keys() * n_heads * attention_.shape().head_dim * 2;
    compute.split(n_tokens * units_per_token, 1, attention_work,
                  [&](std::size_t begin, std::size_t end, std::size_t) {
                    for (std::size_t i = begin; i < end; ++i) {
                      const std::size_t t = i / units_per_token,
                                        first = (i % units_per_token) * heads;
                      chunk.attend(attention_, layer_, t, q + t * q_width, out + t * q_width,
                                   compute.kernels(), first, first + heads);
                    }
                  });
  }

  // Attention of every family but those with latent attention: in: [n_tokens][dim], the
  // sublayer's input; leaves Wo · heads in s.projected.
  template <class Chunk>
  void attention_sublayer(const Compute& compute, const float* in, std::size_t n_tokens,
                          const Rope& rope, const float* cos, const float* sin, Chunk& chunk,
                          BlockScratch& s) const {
    const std::size_t head_dim = rope.head_dim();
    const std::size_t q_width = n_heads_() * head_dim, kv_width = n_kv_heads_() * head_dim;
    const std::size_t half_rot = rope.rot_dims() / 2;
    if (chunk.value_rows() != KVValues::separate)
      throw Error(ErrorKind::invalid_argument,
                  "a KV cache whose values are its key rows serves latent attention only");
    const Compute::Product qkv[] = {
        {&weights_.wq, s.q.data()}, {&weights_.wk, s.k.data()}, {&weights_.wv, s.v.data()}};
    compute.matmul_fused(qkv, in, n_tokens);
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
      if (qk_norm_ == QkNorm::each_head) {  // every head with its own weight row
        normalize_heads_in_place(compute, q, n_heads_(), head_dim, weights_.q_norm);
        normalize_heads_in_place(compute, k, n_kv_heads_(), head_dim, weights_.k_norm);
      } else if (qk_norm_ != QkNorm::none) {  // one norm per head, or one over the projection
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
    // to its own, so causality inside the chunk comes for free.
    attend_chunk(compute, chunk, n_tokens, s.q.data(), s.attn.data(), q_width);
    if (rotation.active())  // the output of rotated values, turned back (H is its own inverse)
      hadamard_rotate(s.attn.data(), n_tokens * q_width, rotation.value_block);
    compute.matmul(weights_.wo, s.attn.data(), n_tokens, s.projected.data());
  }

  // Multi-head latent attention (ModelConfig::kv_lora_rank), absorbed: the cache holds one row
  // [RoPE(k_pe) | RMSNorm(latent)] per token (head_dim = rot + kv_lora, one KV head; the value
  // row is the same, read from the key row where the cache has KVValues::keys), head h's query is
  // [RoPE(q_pe_h) | W_kb_h · q_nope_h], and its output W_vb_h · (the latent part of its attention
  // output). in: [n_tokens][dim]; leaves Wo · heads in s.projected.
  template <class Chunk>
  void latent_attention(const Compute& compute, const float* in, std::size_t n_tokens,
                        const Rope& rope, const float* cos, const float* sin, Chunk& chunk,
                        BlockScratch& s) const {
    const std::size_t heads = n_heads_(), rot = rope.rot_dims(), half_rot = rot / 2;
    const std::size_t latent = mla_.latent, nope = mla_.nope, head_dim = rot + latent;
    const std::size_t q_head = nope + rot, q_width = heads * head_dim;
    // Projections of the input: q ([T][heads][q_nope | q_pe], in s.attn until attention writes
    // it) and the latent with its RoPE key ([T][latent | k_pe], in s.v).
    float* q_raw = s.attn.data();
    float* kv_raw = s.v.data();
    if (mla_.q_lora > 0) {
      float* q_a = s.mla_in.data();  // [T][q_lora]
      const Compute::Product first[] = {{&weights_.wq_a, q_a}, {&weights_.wkv_a, kv_raw}};
      compute.matmul_fused(first, in, n_tokens);
      normalize_in_place(compute, q_a, n_tokens, mla_.q_lora, weights_.q_a_norm);
      compute.matmul(weights_.wq_b, q_a, n_tokens, q_raw);
    } else {
      const Compute::Product first[] = {{&weights_.wq, q_raw}, {&weights_.wkv_a, kv_raw}};
      compute.matmul_fused(first, in, n_tokens);
    }
    // Absorb the queries: every head's W_kb_h · q_nope_h, its tokens' q_nope gathered, as one
    // job for all heads.
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = 0; t < n_tokens; ++t)
        std::copy_n(q_raw + (t * heads + h) * q_head, nope,
                    s.mla_in.data() + (h * n_tokens + t) * nope);
    for (std::size_t h = 0; h < heads; ++h)
      s.mla_products[h] = {&k_b_heads_[h], s.mla_in.data() + h * n_tokens * nope,
                           s.mla_out.data() + h * n_tokens * latent};
    compute.matmul_each(s.mla_products, n_tokens);
    const KVRotation rotation = chunk.rotation();
    const bool shared_rows = chunk.value_rows() == KVValues::keys;
    for (std::size_t t = 0; t < n_tokens; ++t) {
      float* q = s.q.data() + t * q_width;  // [heads][rot | latent]
      for (std::size_t h = 0; h < heads; ++h) {
        std::copy_n(q_raw + (t * heads + h) * q_head + nope, rot, q + h * head_dim);
        std::copy_n(s.mla_out.data() + (h * n_tokens + t) * latent, latent, q + h * head_dim + rot);
      }
      float* k = s.k.data() + t * head_dim;  // [rot | latent]
      const float* kv = kv_raw + t * (latent + rot);
      std::copy_n(kv + latent, rot, k);
      norm_.forward(matrix_view<const float>(kv, 1, latent), weights_.kv_a_norm, WeightTensor{},
                    matrix_view(k + rot, 1, latent), compute.kernels());
      rope.apply(q, heads, cos + t * half_rot, sin + t * half_rot, compute.kernels());
      rope.apply(k, 1, cos + t * half_rot, sin + t * half_rot, compute.kernels());
      // The value row is the key row (its RoPE part comes out of attention unused); a cache with
      // value rows of its own gets a copy, written over the token's projection row, read above.
      float* v = shared_rows ? k : kv_raw + t * head_dim;
      if (!shared_rows) std::copy_n(k, head_dim, v);
      if (rotation.active()) {
        hadamard_rotate(q, q_width, rotation.key_block);
        hadamard_rotate(k, head_dim, rotation.key_block);
        if (!shared_rows) hadamard_rotate(v, head_dim, rotation.value_block);
      }
      chunk.store(layer_, t, k, v);
    }
    attend_chunk(compute, chunk, n_tokens, s.q.data(), s.attn.data(), q_width);
    if (rotation.active())  // the output turned back as the value rows were turned
      hadamard_rotate(s.attn.data(), n_tokens * q_width,
                      shared_rows ? rotation.key_block : rotation.value_block);
    // Every head's W_vb_h · latent output, gathered per head, as one job; then Wo over the
    // heads' outputs [T][heads][v] (in s.q, free now).
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = 0; t < n_tokens; ++t)
        std::copy_n(s.attn.data() + t * q_width + h * head_dim + rot, latent,
                    s.mla_in.data() + (h * n_tokens + t) * latent);
    for (std::size_t h = 0; h < heads; ++h)
      s.mla_products[h] = {&v_b_heads_[h], s.mla_in.data() + h * n_tokens * latent,
                           s.mla_out.data() + h * n_tokens * mla_.v};
    compute.matmul_each(s.mla_products, n_tokens);
    float* heads_out = s.q.data();  // [T][heads][v]
    for (std::size_t t = 0; t < n_tokens; ++t)
      for (std::size_t h = 0; h < heads; ++h)
        std::copy_n(s.mla_out.data() + (h * n_tokens + t) * mla_.v, mla_.v,
                    heads_out + (t * heads + h) * mla_.v);
    compute.matmul(weights_.wo, heads_out, n_tokens, s.projected.data());
  }

  static void add_into(float* x, const float* y, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
  }
  // y: [rows][cols], each row RMS-normed with `weight` ([cols]) in place.
  void normalize_in_place(const Compute& compute, float* y, std::size_t rows, std::size_t cols,
                          const WeightTensor& weight) const {
    norm_.forward(matrix_view<const float>(y, rows, cols), weight, WeightTensor{},
                  matrix_view(y, rows, cols), compute.kernels());
  }

  // y: [heads][head_dim], head h normed with row h of `weight` ([heads][head_dim]) in place.
  void normalize_heads_in_place(const Compute& compute, float* y, std::size_t heads,
                                std::size_t head_dim, const WeightTensor& weight) const {
    for (std::size_t h = 0; h < heads; ++h)
      norm_.forward(matrix_view<const float>(y + h * head_dim, 1, head_dim),
                    weight.as<float>() + h * head_dim, nullptr,
                    matrix_view(y + h * head_dim, 1, head_dim), compute.kernels());
  }

  LayerWeights weights_;
  std::size_t layer_;
  [[no_unique_address]] Size<Spec::dim> dim_;
  [[no_unique_address]] Size<Spec::n_heads> n_heads_;
  [[no_unique_address]] Size<Spec::n_kv_heads> n_kv_heads_;
  bool qkv_bias_;
  QkNorm qk_norm_;
  BlockLayout layout_;
  bool parallel_ffn_norm_;  // a parallel block's FFN reads its own norm of x (Falcon-40B)
  GateActivation activation_;
  bool shared_expert_ungated_;
  ExpertRouting routing_;  // n_experts 0 in a dense layer
  Norm norm_;
  Attention attention_;
  // Multi-head latent attention's widths (all 0 without it) and each head's W_kb and W_vb.
  struct MlaShape {
    std::size_t latent, q_lora, nope, v;
  } mla_;
  std::vector<WeightTensor> k_b_heads_;  // [n_heads] views of wk_b: [kv_lora][nope]
  std::vector<WeightTensor> v_b_heads_;  // [n_heads] views of wv_b: [v][kv_lora]
};

}  // namespace hllm
