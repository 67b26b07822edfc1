#pragma once
// The weights of a Llama model as views (WeightTensor) into memory owned elsewhere: a mapped
// file, or the single buffer that build_weights() fills. `storage` keeps that memory alive for
// as long as any model uses the views. Tensor names follow GGUF (`blk.N.attn_q.weight`).

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/model/architecture.hpp"
#include "hllm/model/config.hpp"
#include "hllm/nn/gated_ffn.hpp"

namespace hllm {

struct LayerWeights {
  WeightTensor attn_norm;       // [1][dim], f32; empty in a post-norm block
  WeightTensor attn_norm_bias;  // [1][dim], f32; a LayerNorm's, with config.norm_bias
  WeightTensor wq;              // [n_heads*head_dim][dim]
  WeightTensor wk;              // [n_kv_heads*head_dim][dim]
  WeightTensor wv;              // [n_kv_heads*head_dim][dim]
  WeightTensor bq;              // [1][n_heads*head_dim], f32; empty unless config.qkv_bias
  WeightTensor bk;              // [1][n_kv_heads*head_dim], f32; empty unless config.qkv_bias
  WeightTensor bv;              // [1][n_kv_heads*head_dim], f32; empty unless config.qkv_bias
  // [1][head_dim] (QkNorm::per_head), [1][q_dim] (whole) or [n_heads][head_dim] (each_head), f32
  WeightTensor q_norm;
  WeightTensor k_norm;  // as q_norm with n_kv_heads, kv_dim; both empty without QK-norm
  WeightTensor wo;      // [dim][n_heads*head_dim]; [dim][n_heads*mla_v_dim] with MLA
  // Multi-head latent attention (config.mla()) in place of wk, wv and, with q_lora_rank, wq
  // (without it wq is [n_heads*q_head][dim]); q_head = mla_nope_dim + rot_dims, each head's
  // rows [q_nope | q_pe]:
  WeightTensor wq_a;            // [q_lora_rank][dim]
  WeightTensor q_a_norm;        // [1][q_lora_rank], f32
  WeightTensor wq_b;            // [n_heads*q_head][q_lora_rank]
  WeightTensor wkv_a;           // [kv_lora_rank + rot_dims][dim]: [latent | k_pe]
  WeightTensor kv_a_norm;       // [1][kv_lora_rank], f32
  WeightTensor wk_b;            // [n_heads*kv_lora_rank][mla_nope_dim]: head h's W_kb, transposed
  WeightTensor wv_b;            // [n_heads*mla_v_dim][kv_lora_rank]: head h's W_vb
  WeightTensor post_attn_norm;  // [1][dim], f32; with sandwich and post-norm layouts
  WeightTensor ffn_norm;        // [1][dim], f32; empty in a post-norm or parallel block
                                // but Falcon-40B's (parallel_ffn_norm)
  WeightTensor ffn_norm_bias;   // [1][dim], f32; with config.norm_bias and an ffn_norm
  FeedForwardWeights ffn;       // gate, up: [ffn_dim][dim]; down: [dim][ffn_dim]; empty in
                                // a mixture-of-experts layer; no gate in a plain MLP
  WeightTensor post_ffn_norm;   // [1][dim], f32; with sandwich and post-norm layouts
  // Mixture of experts (config.n_experts > 0), in place of ffn:
  WeightTensor router;                      // [n_experts][dim] (ffn_gate_inp)
  WeightTensor expert_selection_bias;       // [1][n_experts], f32; config.expert_selection_bias
  std::vector<FeedForwardWeights> experts;  // n_experts of gate, up: [expert_ffn][dim];
                                            // down: [dim][expert_ffn]
  FeedForwardWeights shared_expert;  // [shared_ffn][dim] ...; empty unless shared_expert_ffn_dim
  WeightTensor shared_expert_gate;   // [1][dim], f32: its output times sigmoid(gate · x)

  // The projection matrices, the tensors kernels read in the weight type of the model (and
  // load-time repacking reorders): attention's (four, or latent attention's), then the FFN's
  // three (a plain MLP's two)
  // or every expert's and the shared expert's. (The router is not among them: files keep it
  // F32.)
  std::vector<WeightTensor*> projections() {
    std::vector<WeightTensor*> p;
    for (WeightTensor* t : {&wq, &wk, &wv, &wo, &wq_a, &wq_b, &wkv_a, &wk_b, &wv_b})
      if (!t->empty()) p.push_back(t);
    for (FeedForwardWeights* f : feed_forwards()) {
      if (!f->gate.empty()) p.push_back(&f->gate);
      if (!f->up.empty()) p.insert(p.end(), {&f->up, &f->down});
    }
    return p;
  }
  std::vector<const WeightTensor*> projections() const {
    const auto p = const_cast<LayerWeights*>(this)->projections();
    return {p.begin(), p.end()};
  }

 private:
  std::vector<FeedForwardWeights*> feed_forwards() {
    std::vector<FeedForwardWeights*> f{&ffn};
    for (FeedForwardWeights& e : experts) f.push_back(&e);
    f.push_back(&shared_expert);
    return f;
  }
};

struct ModelWeights {
  WeightTensor token_embedding;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  WeightTensor output_norm;             // [1][dim], f32
  WeightTensor output_norm_bias;        // [1][dim], f32; with config.norm_bias
  WeightTensor output;                  // [vocab][dim]; empty when tied to the embedding
  std::shared_ptr<const void> storage;  // owner of the bytes the views point into
  // Owner of the load-time repacked weights (model/repack.hpp), if any.
  std::shared_ptr<const void> repacked_storage;
};

// What a tensor is to the model: a matrix (stored in any weight type) or a vector (a norm's
// weight, a bias, or a gate's weights that a dot product with x turns into one factor: 1-D in
// files, always float32 in memory).
enum class TensorRole { matrix, norm, bias, gate };

inline const char* role_name(TensorRole r) noexcept {
  switch (r) {
    case TensorRole::matrix: return "matrix";
    case TensorRole::norm: return "norm";
    case TensorRole::bias: return "bias";
    case TensorRole::gate: return "gate vector";
  }
  return "tensor";
}

// A tensor a model has, with its GGUF name and shape [rows][cols] (a vector: [1][n]).
struct TensorSpec {
  std::string name;
  std::size_t rows, cols;
  TensorRole role = TensorRole::matrix;
  std::size_t stacked = 0;  // > 0: a file tensor of that many matrices of rows / stacked rows
                            // (GGUF's 3-D expert tensors)
  bool is_vector() const noexcept { return role != TensorRole::matrix; }
  // Its GGUF dims, fastest first: a vector 1-D [cols] as llama.cpp writes them, a matrix
  // [cols, rows], a stacked one [cols, rows / stacked, stacked].
  std::vector<std::uint64_t> gguf_dims() const {
    if (is_vector() && rows == 1) return {cols};
    if (stacked > 0) return {cols, rows / stacked, stacked};
    return {cols, rows};
  }
};

// Whether a quantized file keeps this tensor in F32: vectors, and routers, which llama-quantize
// never quantizes either (a rounded router picks other experts).
inline bool kept_in_f32(const TensorSpec& s) {
  return s.is_vector() || s.name.ends_with(".ffn_gate_inp.weight");
}

// One tensor of a decoder layer, declared once: its GGUF name inside the layer
// (blk.N.<gguf>), its Hugging Face name inside the layer (model.layers.N.<hf>), its role and
// shape, and where it lives in LayerWeights. Every loader, writer and converter walks this list.
struct LayerTensor {
  std::string gguf;
  std::string hf;
  TensorRole role;
  std::size_t rows, cols;
  WeightTensor& (*in)(LayerWeights&, std::size_t expert);
  std::size_t expert = 0;   // which of LayerWeights::experts, for an expert's tensor
  std::size_t stacked = 0;  // > 0: GGUF files hold it 3-D, that many matrices (TensorSpec's)
  WeightTensor& at(LayerWeights& l) const { return in(l, expert); }
  const WeightTensor& of(const LayerWeights& l) const { return at(const_cast<LayerWeights&>(l)); }
};

// A mixture-of-experts layer's tensors in place of the FFN's three: the router, each expert's
// gate, up and down under their per-expert GGUF names (blk.N.ffn_gate.E.weight, as older files
// hold them; newer ones stack the experts: fused_part), and the shared expert with its gate.
inline void add_expert_tensors(const ModelConfig& c, std::vector<LayerTensor>& t) {
  using R = TensorRole;
  using L = LayerWeights;
  const Architecture* arch = find_architecture(c.architecture);
  const bool mixtral = arch != nullptr && arch->hf_mixtral_experts;
  const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
  const auto dim = static_cast<std::size_t>(c.dim),
             eff = static_cast<std::size_t>(c.resolved_expert_ffn_dim()),
             sff = static_cast<std::size_t>(c.shared_expert_ffn_dim);
  t.push_back({"ffn_gate_inp.weight", moe + "gate.weight", R::matrix,
               static_cast<std::size_t>(c.n_experts), dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.router; }});
  if (c.expert_selection_bias)  // llama.cpp's converter: e_score_correction.bias, exp_probs_b
    t.push_back({"exp_probs_b.bias", moe + "gate.e_score_correction_bias", R::bias, 1,
                 static_cast<std::size_t>(c.n_experts),
                 [](L& l, std::size_t) -> WeightTensor& { return l.expert_selection_bias; }});
  for (std::size_t e = 0; e < static_cast<std::size_t>(c.n_experts); ++e) {
    const std::string n = std::to_string(e), hf = moe + "experts." + n + ".";
    t.push_back({"ffn_gate." + n + ".weight", hf + (mixtral ? "w1" : "gate_proj") + ".weight",
                 R::matrix, eff, dim,
                 [](L& l, std::size_t x) -> WeightTensor& { return l.experts[x].gate; }, e});
    t.push_back({"ffn_up." + n + ".weight", hf + (mixtral ? "w3" : "up_proj") + ".weight",
                 R::matrix, eff, dim,
                 [](L& l, std::size_t x) -> WeightTensor& { return l.experts[x].up; }, e});
    t.push_back({"ffn_down." + n + ".weight", hf + (mixtral ? "w2" : "down_proj") + ".weight",
                 R::matrix, dim, eff,
                 [](L& l, std::size_t x) -> WeightTensor& { return l.experts[x].down; }, e});
  }
  if (sff == 0) return;
  if (!c.shared_expert_ungated)
    t.push_back({"ffn_gate_inp_shexp.weight", moe + "shared_expert_gate.weight", R::gate, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.shared_expert_gate; }});
  t.push_back({"ffn_gate_shexp.weight", moe + "shared_expert.gate_proj.weight", R::matrix, sff, dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.shared_expert.gate; }});
  t.push_back({"ffn_up_shexp.weight", moe + "shared_expert.up_proj.weight", R::matrix, sff, dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.shared_expert.up; }});
  t.push_back({"ffn_down_shexp.weight", moe + "shared_expert.down_proj.weight", R::matrix, dim, sff,
               [](L& l, std::size_t) -> WeightTensor& { return l.shared_expert.down; }});
}

// Multi-head latent attention's tensors (ModelConfig::kv_lora_rank), under llama.cpp's deepseek2
// names: W_kb and W_vb are held per head, 3-D ([n_heads][kv_lora_rank][nope] and
// [n_heads][v][kv_lora_rank]), as llama.cpp's converter splits Hugging Face's kv_b_proj.
inline void add_mla_tensors(const ModelConfig& c, std::vector<LayerTensor>& t) {
  using R = TensorRole;
  using L = LayerWeights;
  const auto dim = static_cast<std::size_t>(c.dim), heads = static_cast<std::size_t>(c.n_heads),
             q_head = static_cast<std::size_t>(c.mla_q_head_dim()),
             q_lora = static_cast<std::size_t>(c.q_lora_rank),
             latent = static_cast<std::size_t>(c.kv_lora_rank),
             rot = static_cast<std::size_t>(c.rope.rot_dims),
             nope = static_cast<std::size_t>(c.mla_nope_dim),
             v = static_cast<std::size_t>(c.mla_v_dim);
  if (q_lora == 0) {
    t.push_back({"attn_q.weight", "self_attn.q_proj.weight", R::matrix, heads * q_head, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.wq; }});
  } else {
    t.push_back({"attn_q_a.weight", "self_attn.q_a_proj.weight", R::matrix, q_lora, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.wq_a; }});
    t.push_back({"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", R::norm, 1, q_lora,
                 [](L& l, std::size_t) -> WeightTensor& { return l.q_a_norm; }});
    t.push_back({"attn_q_b.weight", "self_attn.q_b_proj.weight", R::matrix, heads * q_head, q_lora,
                 [](L& l, std::size_t) -> WeightTensor& { return l.wq_b; }});
  }
  t.push_back({"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", R::matrix,
               latent + rot, dim, [](L& l, std::size_t) -> WeightTensor& { return l.wkv_a; }});
  t.push_back({"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", R::norm, 1, latent,
               [](L& l, std::size_t) -> WeightTensor& { return l.kv_a_norm; }});
  // Both parts of Hugging Face's kv_b_proj ([n_heads][nope + v][kv_lora_rank]).
  t.push_back({"attn_k_b.weight", "self_attn.kv_b_proj.weight", R::matrix, heads * latent, nope,
               [](L& l, std::size_t) -> WeightTensor& { return l.wk_b; }, 0, heads});
  t.push_back({"attn_v_b.weight", "self_attn.kv_b_proj.weight", R::matrix, heads * v, latent,
               [](L& l, std::size_t) -> WeightTensor& { return l.wv_b; }, 0, heads});
  t.push_back({"attn_output.weight", "self_attn.o_proj.weight", R::matrix, dim, heads * v,
               [](L& l, std::size_t) -> WeightTensor& { return l.wo; }});
}

// Attention's tensors (q, k, v with their biases and norms, and the output) in every family but
// those with latent attention.
inline void add_attention_tensors(const ModelConfig& c, std::vector<LayerTensor>& t) {
  using R = TensorRole;
  using L = LayerWeights;
  const auto dim = static_cast<std::size_t>(c.dim), q = static_cast<std::size_t>(c.q_dim()),
             kv = static_cast<std::size_t>(c.kv_dim()),
             head = static_cast<std::size_t>(c.resolved_head_dim());
  t.push_back({"attn_q.weight", "self_attn.q_proj.weight", R::matrix, q, dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.wq; }});
  t.push_back({"attn_k.weight", "self_attn.k_proj.weight", R::matrix, kv, dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.wk; }});
  t.push_back({"attn_v.weight", "self_attn.v_proj.weight", R::matrix, kv, dim,
               [](L& l, std::size_t) -> WeightTensor& { return l.wv; }});
  if (c.qkv_bias) {
    t.push_back({"attn_q.bias", "self_attn.q_proj.bias", R::bias, 1, q,
                 [](L& l, std::size_t) -> WeightTensor& { return l.bq; }});
    t.push_back({"attn_k.bias", "self_attn.k_proj.bias", R::bias, 1, kv,
                 [](L& l, std::size_t) -> WeightTensor& { return l.bk; }});
    t.push_back({"attn_v.bias", "self_attn.v_proj.bias", R::bias, 1, kv,
                 [](L& l, std::size_t) -> WeightTensor& { return l.bv; }});
  }
  if (c.qk_norm != QkNorm::none) {
    const bool whole = c.qk_norm == QkNorm::whole, each = c.qk_norm == QkNorm::each_head;
    const std::size_t q_rows = each ? static_cast<std::size_t>(c.n_heads) : 1;
    const std::size_t k_rows = each ? static_cast<std::size_t>(c.n_kv_heads) : 1;
    t.push_back({"attn_q_norm.weight", "self_attn.q_norm.weight", R::norm, q_rows, whole ? q : head,
                 [](L& l, std::size_t) -> WeightTensor& { return l.q_norm; }});
    t.push_back({"attn_k_norm.weight", "self_attn.k_norm.weight", R::norm, k_rows,
                 whole ? kv : head, [](L& l, std::size_t) -> WeightTensor& { return l.k_norm; }});
  }
  t.push_back({"attn_output.weight", "self_attn.o_proj.weight", R::matrix, dim, q,
               [](L& l, std::size_t) -> WeightTensor& { return l.wo; }});
}

// The tensors of one decoder layer of this config, in the order files hold them; `experts`: of
// a layer whose FFN is the mixture of experts (ModelConfig::has_experts).
inline std::vector<LayerTensor> layer_tensors(const ModelConfig& c, bool experts) {
  using R = TensorRole;
  using L = LayerWeights;
  const auto dim = static_cast<std::size_t>(c.dim), ffn = static_cast<std::size_t>(c.ffn_dim);
  const bool post_norm = c.layout == BlockLayout::post_norm;
  const bool output_norms = post_norm || c.layout == BlockLayout::sandwich;
  std::vector<LayerTensor> t;
  // The input norms' names (GGUF, Hugging Face). Falcon-40B's two: llama.cpp's files call the
  // attention's attn_norm_2 and the FFN's attn_norm, Hugging Face's ln_attn and ln_mlp.
  const bool two_input_norms = c.parallel_ffn_norm;
  const std::string attn_norm = two_input_norms ? "attn_norm_2" : "attn_norm";
  const std::string attn_norm_hf = two_input_norms ? "ln_attn" : "input_layernorm";
  const std::string ffn_norm = two_input_norms ? "attn_norm" : "ffn_norm";
  const std::string ffn_norm_hf = two_input_norms ? "ln_mlp" : "post_attention_layernorm";
  if (!post_norm)
    t.push_back({attn_norm + ".weight", attn_norm_hf + ".weight", R::norm, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.attn_norm; }});
  if (c.norm_bias)  // (LayerNorm blocks are pre-norm or parallel: ModelConfig::validate)
    t.push_back({attn_norm + ".bias", attn_norm_hf + ".bias", R::bias, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.attn_norm_bias; }});
  if (c.mla()) {
    add_mla_tensors(c, t);
  } else {
    add_attention_tensors(c, t);
  }
  // Hugging Face calls the FFN's norm post_attention_layernorm, except with norms on the
  // sublayers' outputs (Gemma 2, OLMo 2), where that is the norm after attention and the FFN's
  // (Gemma's; OLMo 2 has none) is pre_feedforward_.
  if (output_norms) {
    t.push_back({"post_attention_norm.weight", "post_attention_layernorm.weight", R::norm, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.post_attn_norm; }});
    if (!post_norm)
      t.push_back({"ffn_norm.weight", "pre_feedforward_layernorm.weight", R::norm, 1, dim,
                   [](L& l, std::size_t) -> WeightTensor& { return l.ffn_norm; }});
  } else if (c.layout != BlockLayout::parallel || two_input_norms) {
    // (Other parallel blocks share the input norm.)
    t.push_back({ffn_norm + ".weight", ffn_norm_hf + ".weight", R::norm, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.ffn_norm; }});
    if (c.norm_bias)
      t.push_back({ffn_norm + ".bias", ffn_norm_hf + ".bias", R::bias, 1, dim,
                   [](L& l, std::size_t) -> WeightTensor& { return l.ffn_norm_bias; }});
  }
  if (experts) {
    add_expert_tensors(c, t);
  } else {
    if (c.gated_ffn)
      t.push_back({"ffn_gate.weight", "mlp.gate_proj.weight", R::matrix, ffn, dim,
                   [](L& l, std::size_t) -> WeightTensor& { return l.ffn.gate; }});
    t.push_back({"ffn_up.weight", "mlp.up_proj.weight", R::matrix, ffn, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.ffn.up; }});
    t.push_back({"ffn_down.weight", "mlp.down_proj.weight", R::matrix, dim, ffn,
                 [](L& l, std::size_t) -> WeightTensor& { return l.ffn.down; }});
  }
  if (output_norms)
    t.push_back({"post_ffw_norm.weight", "post_feedforward_layernorm.weight", R::norm, 1, dim,
                 [](L& l, std::size_t) -> WeightTensor& { return l.post_ffn_norm; }});
  return t;
}

// The spec of a layer's tensor: blk.<layer>.<gguf name>.
inline TensorSpec layer_tensor_spec(const LayerTensor& t, std::size_t layer) {
  return {"blk." + std::to_string(layer) + "." + t.gguf, t.rows, t.cols, t.role, t.stacked};
}

// The tensor lists of a config's layers, built once (an expert model's lists hold hundreds of
// entries): its leading dense layers' (ModelConfig::n_dense_layers) and the others'.
struct LayerTensorLists {
  explicit LayerTensorLists(const ModelConfig& c)
      : n_layers(static_cast<std::size_t>(c.n_layers)),
        n_dense(c.n_experts > 0 ? static_cast<std::size_t>(
                                      std::clamp<std::int64_t>(c.n_dense_layers, 0, c.n_layers))
                                : 0),
        dense(n_dense > 0 ? layer_tensors(c, false) : std::vector<LayerTensor>{}),
        rest(layer_tensors(c, c.n_experts > 0)) {}
  std::size_t n_layers, n_dense;
  std::vector<LayerTensor> dense, rest;

  const std::vector<LayerTensor>& of(std::size_t layer) const {
    return layer < n_dense ? dense : rest;
  }
  // How many tensors the layers hold together.
  std::size_t count() const { return n_dense * dense.size() + (n_layers - n_dense) * rest.size(); }
  // The index-th of them in file order: its layer, and which tensor of that layer.
  std::pair<std::size_t, const LayerTensor*> at(std::size_t index) const {
    const std::size_t in_dense = n_dense * dense.size();
    if (index < in_dense) return {index / dense.size(), &dense[index % dense.size()]};
    index -= in_dense;
    return {n_dense + index / rest.size(), &rest[index % rest.size()]};
  }
};

namespace detail {

// model_tensor_count and model_tensor_spec for the layers' lists, which callers that need many
// specs build once.
inline std::size_t model_tensor_count(const ModelConfig& c, const LayerTensorLists& layers) {
  return 1 + layers.count() + 1 + (c.norm_bias ? 1 : 0) + (c.tied_embeddings ? 0 : 1);
}
inline TensorSpec model_tensor_spec(const ModelConfig& c, const LayerTensorLists& layers,
                                    std::size_t index) {
  const auto dim = static_cast<std::size_t>(c.dim), vocab = static_cast<std::size_t>(c.vocab_size);
  const std::size_t layers_total = layers.count();
  if (index == 0) return {"token_embd.weight", vocab, dim};
  const std::size_t output = layers_total + 2 + (c.norm_bias ? 1 : 0);
  if (index == layers_total + 1) return {"output_norm.weight", 1, dim, TensorRole::norm};
  if (index == layers_total + 2 && c.norm_bias)
    return {"output_norm.bias", 1, dim, TensorRole::bias};
  if (index == output && !c.tied_embeddings) return {"output.weight", vocab, dim};
  if (index > layers_total)
    throw Error(ErrorKind::internal, "tensor index " + std::to_string(index) + " past the model");
  const auto [layer, tensor] = layers.at(index - 1);
  return layer_tensor_spec(*tensor, layer);
}

}  // namespace detail

// How many tensors a model of this config has: embedding, the layers', final norm, output.
inline std::size_t model_tensor_count(const ModelConfig& c) {
  return detail::model_tensor_count(c, LayerTensorLists(c));
}

// The index-th tensor of model_tensor_specs(), computed on its own: loaders look tensors up one
// at a time, so a corrupt layer count of millions fails at the first missing tensor instead of
// first building millions of names (2 GB for a block_count of 16 million).
inline TensorSpec model_tensor_spec(const ModelConfig& c, std::size_t index) {
  return detail::model_tensor_spec(c, LayerTensorLists(c), index);
}

// Every tensor a model has, with GGUF names and shapes [rows][cols], in file order. (For
// models whose weights exist; loaders use model_tensor_spec one at a time.)
inline std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  const LayerTensorLists layers(c);
  const std::size_t count = detail::model_tensor_count(c, layers);
  std::vector<TensorSpec> specs;
  for (std::size_t i = 0; i < count; ++i) specs.push_back(detail::model_tensor_spec(c, layers, i));
  return specs;
}

// The model's tensors in model_tensor_specs() order.
inline std::vector<const WeightTensor*> model_tensors(const ModelConfig& c, const ModelWeights& w) {
  const LayerTensorLists layers(c);
  std::vector<const WeightTensor*> tensors{&w.token_embedding};
  for (std::size_t l = 0; l < w.layers.size(); ++l)
    for (const LayerTensor& t : layers.of(l)) tensors.push_back(&t.of(w.layers[l]));
  tensors.push_back(&w.output_norm);
  if (c.norm_bias) tensors.push_back(&w.output_norm_bias);
  if (!c.tied_embeddings) tensors.push_back(&w.output);
  return tensors;
}

// Where a model tensor sits in the files of a family that fuses projections (Phi-3: q|k|v as
// attn_qkv, gate|up as ffn_up): rows [first_row, first_row + spec.rows) of the file tensor of
// file_rows rows. In memory the parts stay separate views (WeightTensor::row_range), so the
// kernels, repacking and conversion see the same tensors as for any family.
struct FusedPart {
  std::string gguf;  // the file tensor's full GGUF name, blk.N.attn_qkv.weight
  const char* hf;    // its Hugging Face name inside the layer; nullptr: HF holds the parts apart
  std::size_t first_row, file_rows;
  std::size_t stacked = 0;  // > 0: the file tensor is [stacked][file_rows / stacked][cols]

  // The file tensor's GGUF dims (innermost first) for parts of `cols` columns.
  std::vector<std::uint64_t> file_dims(std::size_t cols) const {
    if (stacked > 0) return {cols, file_rows / stacked, stacked};
    return {cols, file_rows};
  }
};

// The fused file tensor that holds `spec`, or nothing when the family stores it on its own.
inline std::optional<FusedPart> fused_part(const ModelConfig& c, const TensorSpec& spec) {
  const Architecture* arch = find_architecture(c.architecture);
  if (arch == nullptr || spec.name.rfind("blk.", 0) != 0) return {};
  const std::size_t dot = spec.name.find('.', 4);
  const std::string layer = spec.name.substr(0, dot + 1);  // blk.N.
  const std::string_view part = std::string_view(spec.name).substr(dot + 1);
  if (c.n_experts > 0) {  // ffn_gate.E.weight: matrix E of ffn_gate_exps, [n_experts][rows][cols]
    for (const char* kind : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
      const std::string_view prefix = kind;
      // (A leading dense layer's ffn_gate.weight, DeepSeek's, has no expert number.)
      if (!part.starts_with(prefix) || !part.ends_with(".weight") ||
          part.size() <= prefix.size() + 7)
        continue;
      const std::string_view digits = part.substr(prefix.size(), part.size() - prefix.size() - 7);
      std::size_t e = 0;
      for (const char d : digits) e = e * 10 + static_cast<std::size_t>(d - '0');
      const auto n = static_cast<std::size_t>(c.n_experts);
      return FusedPart{layer + std::string(prefix.substr(0, prefix.size() - 1)) + "_exps.weight",
                       nullptr, e * spec.rows, n * spec.rows, n};
    }
  }
  if (!arch->fused_projections) return {};
  const auto q = static_cast<std::size_t>(c.q_dim()), kv = static_cast<std::size_t>(c.kv_dim()),
             ffn = static_cast<std::size_t>(c.ffn_dim);
  const std::string qkv = layer + "attn_qkv.weight", gate_up = layer + "ffn_up.weight";
  if (part == "attn_q.weight") return FusedPart{qkv, "self_attn.qkv_proj.weight", 0, q + 2 * kv};
  if (part == "attn_k.weight") return FusedPart{qkv, "self_attn.qkv_proj.weight", q, q + 2 * kv};
  if (part == "attn_v.weight")
    return FusedPart{qkv, "self_attn.qkv_proj.weight", q + kv, q + 2 * kv};
  if (!c.gated_ffn) return {};  // a plain MLP's up is a tensor of its own (Falcon)
  if (part == "ffn_gate.weight") return FusedPart{gate_up, "mlp.gate_up_proj.weight", 0, 2 * ffn};
  if (part == "ffn_up.weight") return FusedPart{gate_up, "mlp.gate_up_proj.weight", ffn, 2 * ffn};
  return {};
}

// The parts of each fused file tensor among `specs` (model_tensor_specs(c)): their indices in
// spec order, which is the order they follow each other in the file tensor. Writers fill a
// fused tensor from these.
inline std::map<std::string, std::vector<std::size_t>> fused_members(
    const ModelConfig& c, const std::vector<TensorSpec>& specs) {
  std::map<std::string, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (const std::optional<FusedPart> part = fused_part(c, specs[i]))
      members[part->gguf].push_back(i);
  return members;
}

// Assigns the tensors, found by name through `lookup`, to their places in a ModelWeights.
inline ModelWeights assemble_weights(const ModelConfig& c,
                                     const std::function<WeightTensor(const TensorSpec&)>& lookup) {
  ModelWeights w;
  const LayerTensorLists layers(c);
  w.token_embedding = lookup(detail::model_tensor_spec(c, layers, 0));
  // Layers are appended as their tensors are found (not sized up front), so a corrupt layer
  // count costs nothing before the first missing tensor stops it.
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& weights = w.layers.emplace_back();
    if (c.has_experts(l)) weights.experts.resize(static_cast<std::size_t>(c.n_experts));
    for (const LayerTensor& t : layers.of(static_cast<std::size_t>(l))) {
      WeightTensor& tensor = t.at(weights);
      tensor = lookup(layer_tensor_spec(t, static_cast<std::size_t>(l)));
      if (t.stacked > 0) tensor.view_rows = t.rows / t.stacked;  // read one matrix at a time
    }
  }
  const std::size_t after_layers = 1 + layers.count();
  w.output_norm = lookup(detail::model_tensor_spec(c, layers, after_layers));
  if (c.norm_bias)
    w.output_norm_bias = lookup(detail::model_tensor_spec(c, layers, after_layers + 1));
  if (!c.tied_embeddings)
    w.output =
        lookup(detail::model_tensor_spec(c, layers, after_layers + 1 + (c.norm_bias ? 1 : 0)));
  return w;
}

// Builds weights in one owning buffer: `fill(spec, values)` writes each tensor's float values
// ([rows][cols]), which are then stored as `type` (vectors stay f32).
inline ModelWeights build_weights(
    const ModelConfig& config, DType type,
    const std::function<void(const TensorSpec&, std::span<float>)>& fill) {
  config.validate();
  if (type != DType::f32 && type != DType::f16 && type != DType::bf16)
    throw Error(ErrorKind::unsupported,
                "build_weights stores f32, f16 or bf16, not " + dtype_name(type));
  const auto specs = model_tensor_specs(config);
  const std::size_t element_bytes = type == DType::f32 ? 4 : 2;
  auto bytes_of = [&](const TensorSpec& s) {
    const std::size_t raw = s.rows * s.cols * (s.is_vector() ? 4 : element_bytes);
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
    const DType stored = s.is_vector() ? DType::f32 : type;
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
// 1 + N(0, 0.1²), biases N(0, 0.1²), projections N(0, 1/fan_in), embedding N(0, 1), so
// activations stay O(1).
inline ModelWeights random_weights(const ModelConfig& config, DType type, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return build_weights(config, type, [&](const TensorSpec& s, std::span<float> values) {
    const bool embedding = s.name == "token_embd.weight";
    const float std_dev =
        s.is_vector() ? 0.1f : (embedding ? 1.0f : 1.0f / std::sqrt(float(s.cols)));
    const float mean = s.role == TensorRole::norm ? 1.0f : 0.0f;
    for (float& v : values) v = mean + std_dev * normal(rng);
  });
}

// Checks every tensor against the shape the config implies; names the first that disagrees.
inline void validate_weights(const ModelConfig& config, const ModelWeights& weights) {
  if (weights.layers.size() != static_cast<std::size_t>(config.n_layers))
    throw Error(ErrorKind::format, "model has " + std::to_string(weights.layers.size()) +
                                       " layers of weights, config says " +
                                       std::to_string(config.n_layers));
  const auto specs = model_tensor_specs(config);
  const auto tensors = model_tensors(config, weights);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const WeightTensor& t = *tensors[i];
    if (t.empty()) throw Error(ErrorKind::format, "missing tensor", {}, s.name);
    if (t.rows != s.rows || t.cols != s.cols)
      throw Error(ErrorKind::format,
                  "shape [" + std::to_string(t.rows) + "][" + std::to_string(t.cols) +
                      "] disagrees with the config, which implies [" + std::to_string(s.rows) +
                      "][" + std::to_string(s.cols) + "]",
                  {}, s.name);
    if (s.is_vector() && t.type != DType::f32)
      throw Error(
          ErrorKind::unsupported,
          std::string(role_name(s.role)) + " weights must be F32, got " + dtype_name(t.type), {},
          s.name);
  }
}

}  // namespace hllm
