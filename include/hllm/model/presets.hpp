#pragma once
// Presets: the real dimensions of well-known checkpoints, as a runtime ModelConfig (config())
// and as a ModelSpec type that fixes them (Llama<presets::TinyLlama_1_1B<>>).

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "hllm/model/config.hpp"
#include "hllm/model/spec.hpp"

namespace hllm::presets {

namespace detail {
inline ModelConfig make(const char* name, std::int64_t vocab, std::int64_t dim, std::int64_t layers,
                        std::int64_t heads, std::int64_t kv_heads, std::int64_t ffn,
                        std::int64_t context, float theta) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.ffn_dim = ffn;
  c.context_length = context;
  c.rope.theta = theta;
  return c;
}
}  // namespace detail

template <class W = AnyWeight, class KV = float>
struct TinyLlama_1_1B : ModelSpec<W, KV, 2048, 22, 32, 4, 64, 5632, 32000> {
  static ModelConfig config() {
    return detail::make("tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0f);
  }
};

template <class W = AnyWeight, class KV = float>
struct Llama2_7B : ModelSpec<W, KV, 4096, 32, 32, 32, 128, 11008, 32000> {
  static ModelConfig config() {
    return detail::make("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f);
  }
};

template <class W = AnyWeight, class KV = float>
struct Llama3_8B : ModelSpec<W, KV, 4096, 32, 32, 8, 128, 14336, 128256> {
  static ModelConfig config() {
    return detail::make("llama-3-8b", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0f);
  }
};

template <class W = AnyWeight, class KV = float>
struct Llama3_2_1B : ModelSpec<W, KV, 2048, 16, 32, 8, 64, 8192, 128256> {
  static ModelConfig config() {
    ModelConfig c = detail::make("llama-3.2-1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0f);
    c.tied_embeddings = true;
    c.rope.scaling = {.type = RopeScalingType::llama3,
                      .factor = 32.0f,
                      .original_context = 8192,
                      .low_freq_factor = 1.0f,
                      .high_freq_factor = 4.0f};
    return c;
  }
};

template <class W = AnyWeight, class KV = float>
struct Mistral_7B : ModelSpec<W, KV, 4096, 32, 32, 8, 128, 14336, 32000> {
  static ModelConfig config() {
    ModelConfig c = detail::make("mistral-7b", 32000, 4096, 32, 32, 8, 14336, 32768, 10000.0f);
    c.sliding_window = 4096;
    return c;
  }
};

// Qwen2.5-0.5B: q/k/v biases, tied embeddings, half-split RoPE rows as its GGUF files hold them.
template <class W = AnyWeight, class KV = float>
struct Qwen2_5_0_5B : ModelSpec<W, KV, 896, 24, 14, 2, 64, 4864, 151936> {
  static ModelConfig config() {
    ModelConfig c = detail::make("qwen2.5-0.5b", 151936, 896, 24, 14, 2, 4864, 32768, 1e6f);
    c.architecture = "qwen2";
    c.rms_eps = 1e-6f;
    c.tied_embeddings = true;
    c.qkv_bias = true;
    c.rope.layout = RopeLayout::neox;
    return c;
  }
};

// Qwen3-0.6B: QK-norm, head_dim 128 wider than dim / heads (64), tied embeddings.
template <class W = AnyWeight, class KV = float>
struct Qwen3_0_6B : ModelSpec<W, KV, 1024, 28, 16, 8, 128, 3072, 151936> {
  static ModelConfig config() {
    ModelConfig c = detail::make("qwen3-0.6b", 151936, 1024, 28, 16, 8, 3072, 40960, 1e6f);
    c.architecture = "qwen3";
    c.head_dim = 128;
    c.rms_eps = 1e-6f;
    c.tied_embeddings = true;
    c.qk_norm = QkNorm::per_head;
    c.rope.layout = RopeLayout::neox;
    return c;
  }
};

// Phi-3-mini-4k: Llama's arithmetic (its q|k|v and gate|up fusion is a file layout only), MHA,
// a 32064-token vocabulary; the file's sliding window is left off, as llama.cpp leaves it.
template <class W = AnyWeight, class KV = float>
struct Phi3_Mini : ModelSpec<W, KV, 3072, 32, 32, 32, 96, 8192, 32064> {
  static ModelConfig config() {
    ModelConfig c = detail::make("phi-3-mini", 32064, 3072, 32, 32, 32, 8192, 4096, 10000.0f);
    c.architecture = "phi3";
    c.rope.layout = RopeLayout::neox;
    return c;
  }
};

// Gemma 2 2B: sandwich norms, GeGLU, the embedding times sqrt(dim), soft-capped scores (50) and
// logits (30), a 4096 window on the even layers, head_dim 256 (q_dim 2048 < dim 2304), tied
// embeddings over a 256000-token vocabulary.
template <class W = AnyWeight, class KV = float>
struct Gemma2_2B : ModelSpec<W, KV, 2304, 26, 8, 4, 256, 9216, 256000> {
  static ModelConfig config() {
    ModelConfig c = detail::make("gemma-2-2b", 256000, 2304, 26, 8, 4, 9216, 8192, 10000.0f);
    c.architecture = "gemma2";
    c.head_dim = 256;
    c.rms_eps = 1e-6f;
    c.tied_embeddings = true;
    c.rope.layout = RopeLayout::neox;
    c.layout = BlockLayout::sandwich;
    c.ffn_activation = GateActivation::gelu_tanh;
    c.scale_embeddings = true;
    c.attn_softcap = 50.0f;
    c.final_softcap = 30.0f;
    c.sliding_window = 4096;
    c.sliding_window_pattern = 2;
    return c;
  }
};

// Mixtral-style experts at TinyLlama's width (issue #20's mixtral-mini): 8 experts of 5632,
// 2 used per token, renormalized; a llama file.
template <class W = AnyWeight, class KV = float>
struct Mixtral_Mini : ModelSpec<W, KV, 2048, 22, 32, 4, 64, 5632, 32000> {
  static ModelConfig config() {
    ModelConfig c = TinyLlama_1_1B<>::config();
    c.name = "mixtral-mini";
    c.n_experts = 8;
    c.n_experts_used = 2;
    c.expert_weights_normalized = true;
    return c;
  }
};

// Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 used (not renormalized), a shared expert of 5632,
// q/k/v biases, MHA.
template <class W = AnyWeight, class KV = float>
struct Qwen1_5_MoE_A2_7B : ModelSpec<W, KV, 2048, 24, 16, 16, 128, 5632, 151936> {
  static ModelConfig config() {
    ModelConfig c = detail::make("qwen1.5-moe-a2.7b", 151936, 2048, 24, 16, 16, 5632, 8192, 1e6f);
    c.architecture = "qwen2moe";
    c.rms_eps = 1e-6f;
    c.qkv_bias = true;
    c.rope.layout = RopeLayout::neox;
    c.n_experts = 60;
    c.n_experts_used = 4;
    c.expert_ffn_dim = 1408;
    c.shared_expert_ffn_dim = 5632;
    return c;
  }
};

// OLMoE-1B-7B: 64 experts of 1024, 8 used (not renormalized), QK-norm over the whole q and k
// projections, MHA, untied embeddings.
template <class W = AnyWeight, class KV = float>
struct Olmoe_1B_7B : ModelSpec<W, KV, 2048, 16, 16, 16, 128, 1024, 50304> {
  static ModelConfig config() {
    ModelConfig c = detail::make("olmoe-1b-7b", 50304, 2048, 16, 16, 16, 1024, 4096, 10000.0f);
    c.architecture = "olmoe";
    c.qk_norm = QkNorm::whole;
    c.rope.layout = RopeLayout::neox;
    c.n_experts = 64;
    c.n_experts_used = 8;
    return c;
  }
};

// DeepSeek-V2-Lite: multi-head latent attention (a latent of 512 and a RoPE key of 64 cached per
// token for 16 heads of 128 + 64), YaRN 40× past 4096 positions with its mscale on the scores,
// one dense layer of 10944, then 64 experts of 1408, 6 used (not renormalized), and two ungated
// shared experts.
template <class W = AnyWeight, class KV = float>
struct DeepSeek_V2_Lite : ModelSpec<W, KV, 2048, 27, 16, 1, 576, 10944, 102400> {
  static ModelConfig config() {
    ModelConfig c =
        detail::make("deepseek-v2-lite", 102400, 2048, 27, 16, 1, 10944, 163840, 10000.0f);
    c.architecture = "deepseek2";
    c.rms_eps = 1e-6f;
    c.kv_lora_rank = 512;
    c.mla_nope_dim = 128;
    c.mla_v_dim = 128;
    c.rope.rot_dims = 64;
    c.head_dim = c.kv_lora_rank + c.rope.rot_dims;
    c.rope.scaling = {.type = RopeScalingType::yarn,
                      .factor = 40.0f,
                      .original_context = 4096,
                      .attention_factor = 1.0f};
    const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;  // mscale_all_dim 0.707
    c.attention_scale = static_cast<float>(mscale * mscale / std::sqrt(192.0));
    c.n_experts = 64;
    c.n_experts_used = 6;
    c.expert_ffn_dim = 1408;
    c.shared_expert_ffn_dim = 2 * 1408;
    c.shared_expert_ungated = true;
    c.n_dense_layers = 1;
    return c;
  }
};

// The same shape with every block variant off: the plain Llama twin of a config, which tells
// what the variants cost (hllm-bench --plain).
inline ModelConfig without_variants(ModelConfig c) {
  c.architecture = "llama";
  c.qkv_bias = false;
  c.qk_norm = QkNorm::none;
  c.layout = BlockLayout::pre_norm;
  c.norm = NormKind::rms;
  c.norm_bias = false;
  c.gated_ffn = true;
  c.ffn_activation = GateActivation::silu;
  c.scale_embeddings = false;
  c.logit_scale = 0.0f;
  c.attention_scale = 0.0f;
  c.attn_softcap = 0.0f;
  c.final_softcap = 0.0f;
  c.sliding_window = 0;
  c.sliding_window_pattern = 0;
  c.n_experts = c.n_experts_used = c.expert_ffn_dim = c.shared_expert_ffn_dim = 0;  // dense FFN
  c.expert_weights_normalized = false;
  c.shared_expert_ungated = false;
  c.expert_weights_scale = 0.0f;
  c.n_dense_layers = 0;
  c.window_rope_theta = 0.0f;
  if (c.mla()) {  // latent attention's plain twin: multi-head attention of dim / n_heads
    c.kv_lora_rank = c.q_lora_rank = c.mla_nope_dim = c.mla_v_dim = 0;
    c.n_kv_heads = c.n_heads;
    c.head_dim = 0;
    c.rope.rot_dims = 0;
  }
  c.rope.layout = RopeLayout::interleaved;
  return c;
}

// Runtime lookup by name (as the benchmark's --preset flag spells them).
inline std::vector<std::string> names() {
  return {"tinyllama-1.1b",    "llama-2-7b",  "llama-3-8b",      "llama-3.2-1b", "mistral-7b",
          "qwen2.5-0.5b",      "qwen3-0.6b",  "phi-3-mini",      "gemma-2-2b",   "mixtral-mini",
          "qwen1.5-moe-a2.7b", "olmoe-1b-7b", "deepseek-v2-lite"};
}

inline ModelConfig by_name(std::string_view name) {
  if (name == "tinyllama-1.1b") return TinyLlama_1_1B<>::config();
  if (name == "llama-2-7b") return Llama2_7B<>::config();
  if (name == "llama-3-8b") return Llama3_8B<>::config();
  if (name == "llama-3.2-1b") return Llama3_2_1B<>::config();
  if (name == "mistral-7b") return Mistral_7B<>::config();
  if (name == "qwen2.5-0.5b") return Qwen2_5_0_5B<>::config();
  if (name == "qwen3-0.6b") return Qwen3_0_6B<>::config();
  if (name == "phi-3-mini") return Phi3_Mini<>::config();
  if (name == "gemma-2-2b") return Gemma2_2B<>::config();
  if (name == "mixtral-mini") return Mixtral_Mini<>::config();
  if (name == "qwen1.5-moe-a2.7b") return Qwen1_5_MoE_A2_7B<>::config();
  if (name == "olmoe-1b-7b") return Olmoe_1B_7B<>::config();
  if (name == "deepseek-v2-lite") return DeepSeek_V2_Lite<>::config();
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorKind::invalid_argument,
              "unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace hllm::presets
