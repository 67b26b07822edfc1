#pragma once
// ModelConfig: every dimension and option of a Llama-family model, as runtime values (a GGUF
// file fills one in), plus validation that names what is wrong. The block variants of other
// families (biases, QK-norm, ...) are runtime fields too: a block pays for a variant only when
// its config turns it on.

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/kernels/activation.hpp"
#include "hllm/nn/expert_routing.hpp"
#include "hllm/nn/norm.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

// Where a decoder block's norms sit. N is the block's norm; Attn and FFN its sublayers.
enum class BlockLayout : std::uint8_t {
  pre_norm,   // h = x + Attn(N(x)), out = h + FFN(N(h)) (Llama)
  sandwich,   // h = x + N(Attn(N(x))), out = h + N(FFN(N(h))) (Gemma 2)
  post_norm,  // h = x + N(Attn(x)), out = h + N(FFN(h)) (OLMo 2)
  parallel,   // out = x + Attn(N(x)) + FFN(N(x)), one norm (Command-R, Falcon-7B); or
              // x + Attn(N1(x)) + FFN(N2(x)) with ModelConfig::parallel_ffn_norm (Falcon-40B)
};

// The model's norm (ModelConfig::norm) of the queries and keys before RoPE.
enum class QkNorm : std::uint8_t {
  none,
  per_head,  // over each head's head_dim values, one weight [head_dim] shared by the heads (Qwen3)
  whole,     // over all of q ([q_dim] weight) and all of k ([kv_dim]) (OLMoE, OLMo 2)
  // Over each head's head_dim values, each head with its own weight: [n_heads][head_dim] for q,
  // [n_kv_heads][head_dim] for k (Command R+'s LayerNorm).
  each_head,
};

inline const char* block_layout_name(BlockLayout l) noexcept {
  switch (l) {
    case BlockLayout::pre_norm: return "pre-norm";
    case BlockLayout::sandwich: return "sandwich norms";
    case BlockLayout::post_norm: return "post-norm";
    case BlockLayout::parallel: return "parallel";
  }
  return "?";
}

struct ModelConfig {
  std::string name = "llama";          // general.name: what the model calls itself
  std::string architecture = "llama";  // the GGUF architecture files of it declare
                                       // (model/architecture.hpp)
  std::int64_t vocab_size = 0;
  std::int64_t dim = 0;  // embedding / residual width
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;      // = n_heads: MHA; divides n_heads: GQA; 1: MQA
  std::int64_t head_dim = 0;        // 0: dim / n_heads
  std::int64_t ffn_dim = 0;         // hidden width of the gated FFN
  std::int64_t context_length = 0;  // the longest sequence the model was trained for
  float rms_eps = 1e-5f;            // the epsilon of every norm, RMSNorm's or LayerNorm's
  NormKind norm = NormKind::rms;
  bool norm_bias = false;  // LayerNorms add a bias (Falcon); RMSNorm never does
  RopeConfig rope;
  std::int64_t sliding_window = 0;  // 0: none (Mistral 7B v0.1: 4096)
  // Which layers the window applies to: 0: every layer; n: layer l when l % n < n - 1, the
  // last of every n layers attending globally (Gemma 2: 2, the even layers; Gemma 3: 6).
  std::int64_t sliding_window_pattern = 0;
  // > 0: the windowed layers rotate with this RoPE base, unscaled, and the others with `rope`
  // (Gemma 3: 10000 locally, 1e6 and linear scaling globally); 0: every layer uses `rope`.
  float window_rope_theta = 0.0f;
  bool tied_embeddings = false;  // output projection = token embedding
  bool qkv_bias = false;         // q, k and v projections add a bias (Qwen2)
  QkNorm qk_norm = QkNorm::none;
  BlockLayout layout = BlockLayout::pre_norm;
  // A parallel block's FFN reads a norm of its own of the block's input (Falcon-40B's ln_mlp)
  // rather than the attention's.
  bool parallel_ffn_norm = false;
  GateActivation ffn_activation = GateActivation::silu;  // SwiGLU, or GeGLU (Gemma)
  // false: a plain MLP, down(act(up(x))) with the exact GELU (Falcon), no gate projection
  bool gated_ffn = true;
  bool scale_embeddings = false;  // token embeddings times sqrt(dim) (Gemma)
  float attention_scale = 0.0f;   // score = q·k · attention_scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;      // score → cap·tanh(score/cap) (Gemma 2: 50); 0: none
  float final_softcap = 0.0f;     // the same on the logits (Gemma 2: 30); 0: none
  float logit_scale = 0.0f;       // logits times this (Command-R: 0.0625); 0: none
  // Mixture of experts (Mixtral, Qwen2-MoE): n_experts > 0 replaces the layers' FFN by
  // n_experts gated FFNs of expert_ffn_dim, of which a router (softmax over the experts' logits)
  // picks the n_experts_used best per token; the output is their sum weighted by those
  // probabilities, renormalized to sum 1 where expert_weights_normalized (Mixtral).
  std::int64_t n_experts = 0;
  std::int64_t n_experts_used = 0;
  std::int64_t expert_ffn_dim = 0;  // 0: ffn_dim
  bool expert_weights_normalized = false;
  // A shared expert of this width beside them, run for every token, its output times
  // sigmoid(w · x) (Qwen2-MoE), or as it is where ungated (DeepSeek's shared experts, one FFN
  // of n_shared · expert width); 0: none.
  std::int64_t shared_expert_ffn_dim = 0;
  bool shared_expert_ungated = false;
  // The chosen experts' weights times this, after any renormalization (DeepSeek's
  // routed_scaling_factor); 0: 1.
  float expert_weights_scale = 0.0f;
  // The first n layers of an expert model keep a dense FFN of ffn_dim (DeepSeek's
  // first_k_dense_replace); the experts replace it from layer n on.
  std::int64_t n_dense_layers = 0;
  // How the router scores the experts (nn/expert_routing.hpp): the softmax over its logits,
  // or each logit's sigmoid (DeepSeek-V3).
  ExpertGating expert_gating = ExpertGating::softmax;
  // Group-limited routing (DeepSeek-V3's n_group, topk_group): the experts in n_expert_groups
  // groups, a token choosing among those of its n_expert_groups_used best groups; 0: none.
  std::int64_t n_expert_groups = 0;
  std::int64_t n_expert_groups_used = 0;
  // Each expert layer adds a bias of its own to the scores for choosing, not for weighing
  // (DeepSeek-V3's e_score_correction_bias, GGUF exp_probs_b).
  bool expert_selection_bias = false;
  // Multi-head latent attention (DeepSeek-V2/V3), on where kv_lora_rank > 0. A token's keys and
  // values all come from one latent of kv_lora_rank values (RMS-normed) and one RoPE key of
  // rope.rot_dims values that every head shares, and the KV cache holds only those: one KV head
  // (n_kv_heads = 1) of head_dim = rot_dims + kv_lora_rank values, [rotated key | latent], its
  // value row the same. Queries are absorbed into the latent space, head h's being
  // [RoPE(q_pe_h) | W_kb_h · q_nope_h], so the cache is never expanded; a head's output is
  // W_vb_h · (the latent part of its attention output).
  std::int64_t kv_lora_rank = 0;
  std::int64_t q_lora_rank = 0;   // > 0: q = W_qb · RMSNorm(W_qa · x) (V2, V3); 0: W_q · x
  std::int64_t mla_nope_dim = 0;  // each head's query and key part without RoPE (128)
  std::int64_t mla_v_dim = 0;     // each head's value width (128)

  bool mla() const { return kv_lora_rank > 0; }
  // A cache for this model reads each value from its key row with latent attention (the value
  // is the key row's latent part), else keeps value rows of its own.
  KVValues kv_value_rows() const { return mla() ? KVValues::keys : KVValues::separate; }
  // Multi-head latent attention's per-head query width before absorption: [q_nope | q_pe].
  std::int64_t mla_q_head_dim() const { return mla_nope_dim + rope.rot_dims; }
  std::int64_t resolved_head_dim() const {
    return head_dim != 0 ? head_dim : (n_heads > 0 ? dim / n_heads : 0);
  }
  std::int64_t q_dim() const { return n_heads * resolved_head_dim(); }
  std::int64_t kv_dim() const { return n_kv_heads * resolved_head_dim(); }
  // The sliding window of layer `layer`: 0 where it attends to the whole context.
  std::int64_t window_of(std::int64_t layer) const {
    const std::int64_t n = sliding_window_pattern;
    return n == 0 || layer % n < n - 1 ? sliding_window : 0;
  }
  // Whether layer `layer` rotates with window_rope() rather than `rope`.
  bool uses_window_rope(std::int64_t layer) const {
    return window_rope_theta > 0.0f && window_of(layer) > 0;
  }
  // The RoPE of the windowed layers: `rope`'s layout and rotated dimensions, its own base.
  RopeConfig window_rope() const {
    RopeConfig r;
    r.layout = rope.layout;
    r.rot_dims = rope.rot_dims;
    r.theta = window_rope_theta;
    return r;
  }
  // Whether layer `layer` runs the experts rather than the dense FFN.
  bool has_experts(std::int64_t layer) const { return n_experts > 0 && layer >= n_dense_layers; }
  std::int64_t resolved_expert_ffn_dim() const {
    return expert_ffn_dim != 0 ? expert_ffn_dim : ffn_dim;
  }
  // The score scale: 1/sqrt of the width a query and key meet in (multi-head latent
  // attention's before absorption) unless the config gives one.
  float resolved_attention_scale() const {
    const std::int64_t width = mla() ? mla_q_head_dim() : resolved_head_dim();
    return attention_scale != 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(width));
  }

  // Throws hllm::Error(invalid_argument) naming the first inconsistent field.
  void validate() const {
    auto positive = [&](std::int64_t value, const char* field) {
      // 1<<24 bounds every dimension well above any real model but far below size_t
      // overflow of products such as vocab × dim.
      if (value <= 0 || value > (std::int64_t{1} << 24))
        throw Error(ErrorKind::invalid_argument,
                    "model config: " + std::string(field) + " = " + std::to_string(value) +
                        " (must be in [1, 16777216])",
                    {}, field);
    };
    positive(vocab_size, "vocab_size");
    positive(dim, "dim");
    positive(n_layers, "n_layers");
    positive(n_heads, "n_heads");
    positive(n_kv_heads, "n_kv_heads");
    positive(ffn_dim, "ffn_dim");
    positive(context_length, "context_length");
    if (head_dim < 0) positive(head_dim, "head_dim");
    if (head_dim == 0 && dim % n_heads != 0)
      throw Error(ErrorKind::invalid_argument,
                  "model config: dim (" + std::to_string(dim) + ") is not divisible by n_heads (" +
                      std::to_string(n_heads) + ")",
                  {}, "dim");
    if (n_heads % n_kv_heads != 0)
      throw Error(ErrorKind::invalid_argument,
                  "model config: n_heads (" + std::to_string(n_heads) +
                      ") is not divisible by n_kv_heads (" + std::to_string(n_kv_heads) + ")",
                  {}, "n_kv_heads");
    if (!(rms_eps > 0.0f))
      throw Error(ErrorKind::invalid_argument, "model config: rms_eps must be positive", {},
                  "rms_eps");
    if (sliding_window < 0)
      throw Error(ErrorKind::invalid_argument, "model config: sliding_window must be >= 0", {},
                  "sliding_window");
    if (sliding_window_pattern < 0)
      throw Error(ErrorKind::invalid_argument, "model config: sliding_window_pattern must be >= 0",
                  {}, "sliding_window_pattern");
    if (window_rope_theta != 0.0f &&
        (!(window_rope_theta > 0.0f) || !std::isfinite(window_rope_theta) || sliding_window == 0))
      throw Error(ErrorKind::invalid_argument,
                  "model config: window_rope_theta = " + std::to_string(window_rope_theta) +
                      " (must be positive, and only with a sliding window)",
                  {}, "window_rope_theta");
    if (n_experts != 0) {
      positive(n_experts, "n_experts");
      positive(n_experts_used, "n_experts_used");
      if (n_experts_used > n_experts)
        throw Error(ErrorKind::invalid_argument,
                    "model config: n_experts_used (" + std::to_string(n_experts_used) +
                        ") exceeds n_experts (" + std::to_string(n_experts) + ")",
                    {}, "n_experts_used");
      if (expert_ffn_dim != 0) positive(expert_ffn_dim, "expert_ffn_dim");
      if (shared_expert_ffn_dim != 0) positive(shared_expert_ffn_dim, "shared_expert_ffn_dim");
      if (n_dense_layers < 0 || n_dense_layers > n_layers)
        throw Error(ErrorKind::invalid_argument,
                    "model config: n_dense_layers = " + std::to_string(n_dense_layers) +
                        " (must be in [0, n_layers])",
                    {}, "n_dense_layers");
      if (shared_expert_ungated && shared_expert_ffn_dim == 0)
        throw Error(ErrorKind::invalid_argument,
                    "model config: an ungated shared expert of width 0", {},
                    "shared_expert_ffn_dim");
      if (n_expert_groups != 0 || n_expert_groups_used != 0) validate_expert_groups();
    } else if (n_experts_used != 0 || shared_expert_ffn_dim != 0 || n_dense_layers != 0 ||
               expert_weights_scale != 0.0f || expert_gating != ExpertGating::softmax ||
               n_expert_groups != 0 || n_expert_groups_used != 0 || expert_selection_bias) {
      throw Error(ErrorKind::invalid_argument,
                  "model config: experts used, shared, scaled, grouped, biased, gated by "
                  "sigmoid or after dense layers without n_experts",
                  {}, "n_experts");
    }
    if (kv_lora_rank != 0 || q_lora_rank != 0 || mla_nope_dim != 0 || mla_v_dim != 0)
      validate_mla(positive);
    for (auto [value, field] : {std::pair{attention_scale, "attention_scale"},
                                {attn_softcap, "attn_softcap"},
                                {final_softcap, "final_softcap"},
                                {logit_scale, "logit_scale"},
                                {expert_weights_scale, "expert_weights_scale"}})
      if (!(value >= 0.0f) || !std::isfinite(value))
        throw Error(ErrorKind::invalid_argument,
                    "model config: " + std::string(field) + " = " + std::to_string(value) +
                        " (must be finite and >= 0; 0: the default)",
                    {}, field);
    if (parallel_ffn_norm && layout != BlockLayout::parallel)
      throw Error(ErrorKind::invalid_argument,
                  "model config: a second input norm belongs to a parallel block", {},
                  "parallel_ffn_norm");
    if (norm_bias && norm != NormKind::layer)
      throw Error(ErrorKind::invalid_argument, "model config: an RMSNorm has no bias", {},
                  "norm_bias");
    // LayerNorm families norm the sublayers' inputs only, and q and k only per head with each
    // head's own weights (Command R+).
    if (norm == NormKind::layer &&
        ((qk_norm != QkNorm::none && qk_norm != QkNorm::each_head) ||
         (layout != BlockLayout::pre_norm && layout != BlockLayout::parallel)))
      throw Error(ErrorKind::invalid_argument,
                  "model config: LayerNorm with a QK-norm shared by heads or norms on the "
                  "sublayers' outputs",
                  {}, "norm");
    // The gated FFN's kernels are SiLU·up and the tanh GeGLU; a plain MLP's is the exact GELU.
    if (gated_ffn == (ffn_activation == GateActivation::gelu))
      throw Error(ErrorKind::invalid_argument,
                  std::string("model config: ") + (gated_ffn ? "a gated" : "a plain") +
                      " FFN with activation " + std::string(gate_activation_name(ffn_activation)),
                  {}, "ffn_activation");
    if (!gated_ffn && n_experts != 0)
      throw Error(ErrorKind::invalid_argument, "model config: experts are gated FFNs", {},
                  "gated_ffn");
    Rope(rope, resolved_head_dim());  // validates rot_dims, theta and scaling
    if (window_rope_theta > 0.0f) Rope(window_rope(), resolved_head_dim());
  }

 private:
  // Group-limited routing: groups of at least two experts (a group's score is its two best),
  // holding n_experts_used experts or more among the groups a token keeps.
  void validate_expert_groups() const {
    const auto fail = [&](const std::string& what) {
      throw Error(ErrorKind::invalid_argument,
                  "model config: " + std::to_string(n_experts) + " experts in " +
                      std::to_string(n_expert_groups) + " groups, " +
                      std::to_string(n_expert_groups_used) + " used: " + what,
                  {}, "n_expert_groups");
    };
    if (n_expert_groups < 1 || n_experts % n_expert_groups != 0 || n_experts / n_expert_groups < 2)
      fail("the groups must split the experts evenly, two or more to a group");
    if (n_expert_groups_used < 1 || n_expert_groups_used > n_expert_groups)
      fail("a token must keep between 1 and n_expert_groups groups");
    if (n_expert_groups_used * (n_experts / n_expert_groups) < n_experts_used)
      fail("the groups kept hold fewer than n_experts_used experts");
  }

  // Multi-head latent attention's dimensions, and the variants it does not combine with.
  template <class Positive>
  void validate_mla(const Positive& positive) const {
    const auto fail = [](const std::string& what, const char* field) {
      throw Error(ErrorKind::invalid_argument, "model config: multi-head latent attention " + what,
                  {}, field);
    };
    positive(kv_lora_rank, "kv_lora_rank");
    positive(mla_nope_dim, "mla_nope_dim");
    positive(mla_v_dim, "mla_v_dim");
    if (q_lora_rank != 0) positive(q_lora_rank, "q_lora_rank");
    if (rope.rot_dims <= 0 || rope.rot_dims % 2 != 0)
      fail("needs an even RoPE width rope.rot_dims (qk_rope_head_dim)", "rope.rot_dims");
    if (n_kv_heads != 1 || head_dim != rope.rot_dims + kv_lora_rank)
      fail("caches one KV head of rot_dims + kv_lora_rank values (n_kv_heads " +
               std::to_string(n_kv_heads) + ", head_dim " + std::to_string(head_dim) + ")",
           "head_dim");
    if (qkv_bias || qk_norm != QkNorm::none || layout != BlockLayout::pre_norm ||
        norm != NormKind::rms)
      fail("with biases, QK-norm, LayerNorm or norms off the sublayers' inputs", "kv_lora_rank");
  }
};

}  // namespace hllm
