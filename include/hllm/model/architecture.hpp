#pragma once
// The model families hllm reads, declared once: the name their GGUF files give in
// general.architecture (and the prefix of their metadata keys), the Hugging Face classes of
// their checkpoints, how their GGUF files store the q/k rows for RoPE, and which block
// variants (ModelConfig's runtime fields) the family has. Loaders and writers ask this table;
// the blocks only see the variant fields.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "hllm/kernels/activation.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/config.hpp"

namespace hllm {

// Whether a family's layers carry an optional part.
enum class Presence {
  never,
  optional,  // as the file says: llama.cpp loads the tensors when present
  always,
};

struct Architecture {
  const char* gguf;               // general.architecture, and the metadata key prefix
  std::array<const char*, 3> hf;  // config.json "architectures" names (nullptr: none)
  RopeLayout gguf_rope;           // rows of q/k in GGUF files (llama.cpp's rope type)
  // Rows of q/k in Hugging Face checkpoints: half-split (rotate_half) in most classes,
  // interleaved pairs in Cohere's.
  RopeLayout hf_rope = RopeLayout::neox;
  Presence qkv_bias = Presence::never;  // biases on the q, k and v projections
  QkNorm qk_norm = QkNorm::none;        // RMSNorm of q and k before RoPE
  // The QK-norm a file may add: GGUF files holding attn_q_norm, config.json saying use_qk_norm
  // (Command R+'s, in command-r files).
  QkNorm optional_qk_norm = QkNorm::none;
  // Whether the family's files can hold a model with this QK-norm.
  constexpr bool holds_qk_norm(QkNorm n) const noexcept {
    return n == qk_norm || (optional_qk_norm != QkNorm::none && n == optional_qk_norm);
  }
  bool fused_projections = false;   // files hold q|k|v and gate|up as one matrix each
  bool gguf_sliding_window = true;  // attention.sliding_window of its GGUF files is honoured
  BlockLayout layout = BlockLayout::pre_norm;
  // LayerNorm families read the epsilon from attention.layer_norm_epsilon (GGUF) and
  // layer_norm_eps (config.json) rather than the RMS keys.
  NormKind norm = NormKind::rms;
  bool norm_bias = false;  // its LayerNorms add a bias (Falcon)
  // Its parallel blocks may hold a second input norm, the FFN's (Falcon-40B's: GGUF files
  // holding attn_norm_2, config.json's new_decoder_architecture): ModelConfig::parallel_ffn_norm.
  bool optional_parallel_ffn_norm = false;
  bool gated_ffn = true;  // false: a plain MLP with the exact GELU (Falcon)
  // > 0: the family scales its logits by the files' logit_scale, this when a config.json has
  // none (Cohere's class default; GGUF files without the key get none, as in llama.cpp).
  float default_logit_scale = 0.0f;
  // Gemma's variants: GeGLU, the embedding scaled by sqrt(dim), soft-capped attention scores
  // and logits (as the files' metadata says), windows on some layers only.
  GateActivation activation = GateActivation::silu;
  bool scale_embeddings = false;
  // GGUF attn_logit_ and final_logit_softcapping are read, these when a file has none; 0:
  // the family has no soft-capping, unless it is optional: then a file's final cap (and a
  // config.json's two caps) apply, none when absent (Gemma 3, as llama.cpp's gemma3 graph).
  float default_attn_softcap = 0.0f;
  float default_final_softcap = 0.0f;
  bool optional_softcaps = false;
  std::int64_t default_window = 0;  // sliding window when a GGUF file names none
  std::int64_t window_pattern = 0;  // ModelConfig::sliding_window_pattern of the family
  // > 0: the windowed layers rotate with their own RoPE base (ModelConfig::window_rope_theta),
  // this one where a file names none (GGUF rope.freq_base_swa, config.json
  // rope_local_base_freq): Gemma 3's 10000, llama.cpp's default.
  float window_rope_theta = 0.0f;
  float hf_norm_offset = 0.0f;  // HF norms scale by offset + w (Gemma: 1); GGUF holds the sum
  // The output projection is the embedding in every GGUF file of the family (llama.cpp reads
  // token_embd for it).
  bool tied = false;
  bool hf_tied = false;  // config.json's tie_word_embeddings defaults to true
  // Mixture of experts: the chosen experts' weights renormalized (ModelConfig's field), and
  // Mixtral's Hugging Face names (block_sparse_moe.experts.E.w1/w3/w2) rather than Qwen's
  // (mlp.experts.E.gate_proj/up_proj/down_proj).
  bool expert_weights_normalized = false;
  bool hf_mixtral_experts = false;
  bool shared_expert = false;  // MoE layers also have a sigmoid-gated shared expert
  // Files give the experts' width as expert_feed_forward_length; else feed_forward_length is it.
  bool expert_ffn_key = false;
  // llama.cpp scales the scores of files of this many layers (Gemma 2 27B: 46) by
  // 1/sqrt(dim / n_heads) rather than 1/sqrt(head_dim); 0: never.
  std::int64_t gguf_width_scaled_layers = 0;
  // Hugging Face names where the family's differ from Llama's: the layers' prefix, the
  // embedding, the final norm (".weight", ".bias" appended), renames of tensors inside a layer
  // (Llama's name, the family's) and of config.json keys (Llama's key, the family's).
  const char* hf_layers = "model.layers.";
  const char* hf_embedding = "model.embed_tokens.weight";
  const char* hf_final_norm = "model.norm";
  std::array<std::array<const char*, 2>, 4> hf_tensor_renames{};
  std::array<std::array<const char*, 2>, 3> hf_key_renames{};
  // config.json's alibi, multi_query, new_decoder_architecture, parallel_attn and bias flags
  // are checked as FalconConfig has them, and multi_query means one KV head.
  bool hf_falcon_flags = false;
  // DeepSeek-V2's multi-head latent attention and experts (ungated shared experts, leading
  // dense layers, scaled weights), read by their own keys in GGUF files and config.json.
  bool latent_attention = false;
  // The class (one of `hf`) of the family's multimodal checkpoints, whose config.json nests the
  // text model's keys in text_config and whose tensors carry a "language_model." prefix, the
  // vision tower's beside them (left unread): Gemma3ForConditionalGeneration.
  const char* hf_multimodal = nullptr;
  // The text config class's defaults (key, JSON value) for keys a config.json leaves out, as
  // transformers fills them in (the multimodal checkpoints' text_config omits most).
  std::array<std::array<const char*, 2>, 16> hf_config_defaults{};

  // The family's name of Llama's layer tensor `name` (self_attn.o_proj.weight, ...).
  const char* hf_tensor(const char* name) const {
    for (const auto& [llama, ours] : hf_tensor_renames)
      if (llama != nullptr && std::string_view(llama) == name) return ours;
    return name;
  }
  // The family's config.json key for Llama's `key`.
  const char* hf_key(const char* key) const {
    for (const auto& [llama, ours] : hf_key_renames)
      if (llama != nullptr && std::string_view(llama) == key) return ours;
    return key;
  }
};

// llama: llama.cpp's converter permutes q/k into interleaved pairs and loads attention biases
// when a file has them. qwen2 and qwen3 keep Hugging Face's half-split (NEOX) rows; Qwen2
// always has q/k/v biases, Qwen3 never, with per-head QK-norm instead. phi3 keeps the
// half-split rows and stores attn_qkv (llama.cpp also takes separate q/k/v) and ffn_up as
// gate|up; llama.cpp ignores its files' sliding window (converters wrote wrong ones), and so
// does hllm with those files, while a Hugging Face Phi-3 checkpoint keeps its window. gemma2:
// half-split rows, a 4096 window on the even layers, tied embeddings, and what llama.cpp's
// gemma2 graph does (llama-model's load_arch_hparams and build_arch_graph). Experts: llama
// files hold Mixtral's (renormalized, as llama.cpp's llama graph has it), qwen2moe files
// Qwen2-MoE's (not renormalized, with a sigmoid-gated shared expert), qwen3moe files Qwen3's
// QK-normed attention with renormalized experts and no shared one (llama.cpp's qwen3moe graph
// renormalizes whatever the file says). olmoe: QK-norm over the whole q and k projections,
// experts not renormalized (llama.cpp's olmoe graph). olmo2: post-norm blocks (a norm on each
// sublayer's output, none on its input) with OLMoE's QK-norm; its files' array-valued window
// pattern (OLMo 3's) is refused by the reader. command-r: parallel blocks (attention and FFN
// both read one LayerNorm of the residual, without bias), interleaved RoPE rows in Hugging
// Face's Cohere checkpoints as in GGUF (llama.cpp's converter permutes nothing), tied
// embeddings, logits scaled by logit_scale (llama.cpp's command-r graph), and in Command R+'s
// files a LayerNorm of q and k per head with each head's own weights. falcon: parallel blocks
// on one LayerNorm with a bias (Falcon-40B's on two: attn_norm_2 for attention, attn_norm for
// the FFN; Hugging Face's ln_attn, ln_mlp), q|k|v fused with one KV head (Falcon-7B) or several
// (grouped per KV head in Falcon-40B's Hugging Face checkpoints), a plain MLP
// with PyTorch's exact GELU (llama.cpp's falcon graph has GELU's tanh approximation, a small
// difference: docs/formats.md; hllm follows the Hugging Face model), Hugging Face's names
// under transformer.h.N.; output.weight where the file has it (llama.cpp's falcon graph falls
// back on the embedding), while config.json ties them unless it says otherwise (FalconConfig
// keeps PretrainedConfig's default). gemma3 (the text model): Gemma 2's sandwich norms, GeGLU
// and scaled embedding with Qwen3's per-head QK-norm, a window on five layers of every six
// whose RoPE has its own base (rope.freq_base_swa, 10000 where absent; rope.freq_base and the
// scaling are the global layers'), no attention soft-cap, a final one only where the file
// says, output.weight where the file has it (llama.cpp's gemma3 graph); from Hugging Face
// also the multimodal checkpoints' text model, with Gemma3TextConfig's defaults
// (configuration_gemma3.py) for the keys their text_config omits. deepseek2 (DeepSeek-V2,
// V2-Lite and V3): multi-head latent attention (ModelConfig::kv_lora_rank; interleaved RoPE rows
// in Hugging Face's checkpoints and in GGUF), YaRN whose mscale scales the scores, experts
// routed by softmax (V2) or by sigmoid with selection biases and expert groups (V3), not
// renormalized unless the file says, ungated shared experts, leading dense layers and a weight
// scale (llama.cpp's deepseek2 reader and graph, with the split attn_k_b / attn_v_b its
// converter writes).
inline constexpr Architecture kArchitectures[] = {
    {.gguf = "llama",
     .hf = {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"},
     .gguf_rope = RopeLayout::interleaved,
     .qkv_bias = Presence::optional,
     .expert_weights_normalized = true,
     .hf_mixtral_experts = true},
    {.gguf = "qwen2",
     .hf = {"Qwen2ForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qkv_bias = Presence::always},
    {.gguf = "qwen3",
     .hf = {"Qwen3ForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qk_norm = QkNorm::per_head},
    {.gguf = "qwen2moe",
     .hf = {"Qwen2MoeForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qkv_bias = Presence::always,
     .shared_expert = true,
     .expert_ffn_key = true},
    {.gguf = "qwen3moe",
     .hf = {"Qwen3MoeForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qk_norm = QkNorm::per_head,
     .expert_weights_normalized = true,
     .expert_ffn_key = true},
    {.gguf = "olmoe",
     .hf = {"OlmoeForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qk_norm = QkNorm::whole},
    {.gguf = "olmo2",
     .hf = {"Olmo2ForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .qk_norm = QkNorm::whole,
     .layout = BlockLayout::post_norm},
    {.gguf = "phi3",
     .hf = {"Phi3ForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .fused_projections = true,
     .gguf_sliding_window = false},
    {.gguf = "command-r",
     .hf = {"CohereForCausalLM", nullptr},
     .gguf_rope = RopeLayout::interleaved,
     .hf_rope = RopeLayout::interleaved,
     .optional_qk_norm = QkNorm::each_head,
     .layout = BlockLayout::parallel,
     .norm = NormKind::layer,
     .default_logit_scale = 0.0625f,
     .tied = true,
     .hf_tied = true,
     .hf_key_renames = {{{"rms_norm_eps", "layer_norm_eps"}}}},
    {.gguf = "falcon",
     .hf = {"FalconForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .fused_projections = true,
     .layout = BlockLayout::parallel,
     .norm = NormKind::layer,
     .norm_bias = true,
     .optional_parallel_ffn_norm = true,
     .gated_ffn = false,
     .activation = GateActivation::gelu,
     .hf_tied = true,
     .hf_layers = "transformer.h.",
     .hf_embedding = "transformer.word_embeddings.weight",
     .hf_final_norm = "transformer.ln_f",
     .hf_tensor_renames = {{{"self_attn.qkv_proj.weight", "self_attention.query_key_value.weight"},
                            {"self_attn.o_proj.weight", "self_attention.dense.weight"},
                            {"mlp.up_proj.weight", "mlp.dense_h_to_4h.weight"},
                            {"mlp.down_proj.weight", "mlp.dense_4h_to_h.weight"}}},
     .hf_key_renames = {{{"rms_norm_eps", "layer_norm_epsilon"},
                         {"num_key_value_heads", "num_kv_heads"},
                         {"intermediate_size", "ffn_hidden_size"}}},
     .hf_falcon_flags = true},
    {.gguf = "gemma2",
     .hf = {"Gemma2ForCausalLM", nullptr},
     .gguf_rope = RopeLayout::neox,
     .layout = BlockLayout::sandwich,
     .activation = GateActivation::gelu_tanh,
     .scale_embeddings = true,
     .default_attn_softcap = 50.0f,
     .default_final_softcap = 30.0f,
     .default_window = 4096,
     .window_pattern = 2,
     .hf_norm_offset = 1.0f,
     .tied = true,
     .hf_tied = true,
     .gguf_width_scaled_layers = 46},
    {.gguf = "gemma3",
     .hf = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
     .gguf_rope = RopeLayout::neox,
     .qk_norm = QkNorm::per_head,
     .layout = BlockLayout::sandwich,
     .activation = GateActivation::gelu_tanh,
     .scale_embeddings = true,
     .optional_softcaps = true,
     .window_pattern = 6,
     .window_rope_theta = 10000.0f,
     .hf_norm_offset = 1.0f,
     .hf_tied = true,
     .gguf_width_scaled_layers = 62,
     .hf_multimodal = "Gemma3ForConditionalGeneration",
     .hf_config_defaults = {{{"vocab_size", "262208"},
                             {"hidden_size", "2304"},
                             {"intermediate_size", "9216"},
                             {"num_hidden_layers", "26"},
                             {"num_attention_heads", "8"},
                             {"num_key_value_heads", "4"},
                             {"head_dim", "256"},
                             {"hidden_activation", "\"gelu_pytorch_tanh\""},
                             {"max_position_embeddings", "131072"},
                             {"rms_norm_eps", "1e-6"},
                             {"rope_theta", "1000000.0"},
                             {"query_pre_attn_scalar", "256"},
                             {"sliding_window", "4096"},
                             {"rope_local_base_freq", "10000.0"},
                             {"sliding_window_pattern", "6"}}}},
    {.gguf = "deepseek2",
     .hf = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"},
     .gguf_rope = RopeLayout::interleaved,
     .hf_rope = RopeLayout::interleaved,
     .expert_ffn_key = true,
     .hf_tensor_renames =
         {{{"mlp.shared_expert.gate_proj.weight", "mlp.shared_experts.gate_proj.weight"},
           {"mlp.shared_expert.up_proj.weight", "mlp.shared_experts.up_proj.weight"},
           {"mlp.shared_expert.down_proj.weight", "mlp.shared_experts.down_proj.weight"}}},
     .latent_attention = true},
};

// The family whose GGUF name is `gguf`, or nullptr.
inline const Architecture* find_architecture(std::string_view gguf) noexcept {
  for (const Architecture& a : kArchitectures)
    if (gguf == a.gguf) return &a;
  return nullptr;
}

// The family of a Hugging Face class name (LlamaForCausalLM, ...), or nullptr.
inline const Architecture* find_hf_architecture(std::string_view hf_class) noexcept {
  for (const Architecture& a : kArchitectures)
    for (const char* name : a.hf)
      if (name != nullptr && hf_class == name) return &a;
  return nullptr;
}

// "llama, qwen2, qwen3" (gguf names) or the Hugging Face classes, for error messages.
inline std::string supported_architectures(bool hf_names = false) {
  std::string out;
  for (const Architecture& a : kArchitectures) {
    if (!hf_names) {
      out += (out.empty() ? "" : ", ") + std::string(a.gguf);
      continue;
    }
    for (const char* name : a.hf)
      if (name != nullptr) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

}  // namespace hllm
