#pragma once
// Hugging Face checkpoints of the families of model/architecture.hpp (Llama, Mistral, Mixtral,
// Qwen2, Qwen3, their MoE forms, Phi-3, Gemma 2, OLMoE, OLMo 2, Command-R, Falcon): config.json +
// safetensors (one file or shards). load_hf_model() reads the config into a ModelConfig and maps
// the HF tensor names onto the model's tensors, using the mapped data in place.
//
// RoPE layout: HF's attention (every family here but Cohere) rotates the pairs (i, i +
// head_dim/2) of each head ("rotate_half"), so its q/k weights are used as they are with
// RopeLayout::neox. (llama.cpp's converter instead permutes the q/k rows so that the interleaved
// (2i, 2i+1) rotation gives the same result; tests/test_formats.cpp proves the two agree.)
// Cohere's rotates (2i, 2i+1) itself: RopeLayout::interleaved. No permutation, no copy.
//
// Norm weights and biases must be f32 for the model; a checkpoint that stores them in f16/bf16
// has just those small vectors converted into an owned buffer, as do Gemma's norms, stored as w
// for a norm that scales by 1 + w (the model holds 1 + w, as GGUF files do). Tensors whose data is
// not aligned for its element type (legal in safetensors, unusual in practice) are copied to
// aligned memory too, so typed reads never see a misaligned pointer.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/latent_split.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/io/safetensors.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/architecture.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/finite_check.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

struct HfModel {
  std::shared_ptr<const safetensors::Checkpoint> checkpoint;  // also held by weights.storage
  ModelConfig config;
  ModelWeights weights;
};

namespace detail {

// A config.json value, type-checked; every failure names config.json and the key.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  std::int64_t integer(const char* key) const {
    if (!j_.contains(key)) fail(ErrorKind::format, "missing required key", key);
    return integer_of(j_.at(key), key);
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  double number(const char* key) const {
    if (!j_.contains(key)) fail(ErrorKind::format, "missing required key", key);
    return number_of(j_.at(key), key);
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(ErrorKind::format, "expected true or false", key);
    return j_.at(key).get<bool>();
  }

  std::int64_t integer_of(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number_integer())
      fail(ErrorKind::format, "expected an integer, got " + v.dump(), key);
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(ErrorKind::format, "integer out of range: " + v.dump(), key);
    return v.get<std::int64_t>();
  }
  double number_of(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number()) fail(ErrorKind::format, "expected a number, got " + v.dump(), key);
    return v.get<double>();
  }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message, const std::string& key) const {
    throw Error(kind, message, path_, key);
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

inline void hf_rope_scaling(const nlohmann::json& s, const HfConfigReader& r, ModelConfig& c) {
  if (!s.is_object()) r.fail(ErrorKind::format, "expected an object or null", "rope_scaling");
  std::string type;
  for (const char* key : {"rope_type", "type"}) {  // "type" is the pre-4.45 spelling
    if (s.contains(key)) {
      if (!s.at(key).is_string())
        r.fail(ErrorKind::format, "expected a string", std::string("rope_scaling.") + key);
      type = s.at(key).get<std::string>();
      break;
    }
  }
  auto number = [&](const char* key, double fallback, bool required) {
    const std::string field = std::string("rope_scaling.") + key;
    if (!s.contains(key) || s.at(key).is_null()) {
      if (required) r.fail(ErrorKind::format, "missing required key", field);
      return fallback;
    }
    return r.number_of(s.at(key), field);
  };
  RopeScaling& out = c.rope.scaling;
  if (type == "default" || type.empty()) {
    out.type = RopeScalingType::none;
    return;
  }
  if (type == "linear") {
    out.type = RopeScalingType::linear;
    out.factor = static_cast<float>(number("factor", 1.0, true));
  } else if (type == "yarn") {
    out.type = RopeScalingType::yarn;
    out.factor = static_cast<float>(number("factor", 1.0, true));
    out.original_context = static_cast<std::int64_t>(
        number("original_max_position_embeddings", static_cast<double>(c.context_length), false));
    out.beta_fast = static_cast<float>(number("beta_fast", 32.0, false));
    out.beta_slow = static_cast<float>(number("beta_slow", 1.0, false));
    out.attention_factor = static_cast<float>(number("attention_factor", 0.0, false));
  } else if (type == "llama3") {
    out.type = RopeScalingType::llama3;
    out.factor = static_cast<float>(number("factor", 1.0, true));
    out.original_context =
        static_cast<std::int64_t>(number("original_max_position_embeddings", 0.0, true));
    out.low_freq_factor = static_cast<float>(number("low_freq_factor", 1.0, true));
    out.high_freq_factor = static_cast<float>(number("high_freq_factor", 4.0, true));
  } else {
    // "dynamic" rescales with the sequence length at run time, which a fixed table cannot do.
    r.fail(ErrorKind::unsupported, "RoPE scaling type '" + type + "' is not supported",
           "rope_scaling.rope_type");
  }
}

}  // namespace detail

namespace detail {

// FalconConfig's switches, as FalconForCausalLM reads them (models/falcon/modeling_falcon.py,
// 4.46.3): rotary, parallel attention and MLP, no biases on the projections, q|k|v fused in one
// of two forms. Falcon-7B's (multi_query): one KV head, rows [q heads | k | v]. The new decoder's
// (new_decoder_architecture: Falcon-40B, Falcon2-11B): num_kv_heads groups, each its query
// heads, its k and its v (read regrouped: load_hf_model), and two input norms, ln_attn and
// ln_mlp, unless num_ln_in_parallel_attn is 1 (FalconDecoderLayer makes it 2 where null). The
// others are refused by key, as are combinations FalconDecoderLayer builds but cannot run (the
// new decoder without parallel_attn, two norms without the new decoder).
inline void hf_falcon_flags(const HfConfigReader& r, ModelConfig& c) {
  const auto refuse_if = [&](const char* key, bool fallback, bool refused, const char* what) {
    if (r.boolean_or(key, fallback) == refused)
      r.fail(ErrorKind::unsupported, std::string(what) + " is not supported", key);
  };
  refuse_if("alibi", false, true, "ALiBi (Falcon-RW)");
  refuse_if("parallel_attn", true, false, "sequential attention and MLP (parallel_attn false)");
  refuse_if("bias", false, true, "projection biases");
  refuse_if("apply_residual_connection_post_layernorm", false, true,
            "a residual from the normed input");
  const bool new_decoder = r.boolean_or("new_decoder_architecture", false);
  const std::int64_t input_norms = r.integer_or("num_ln_in_parallel_attn", new_decoder ? 2 : 1);
  if (input_norms != 1 && (input_norms != 2 || !new_decoder))
    r.fail(ErrorKind::unsupported,
           std::to_string(input_norms) + " input norms per block" +
               (new_decoder ? "" : " outside the new decoder (new_decoder_architecture false)"),
           "num_ln_in_parallel_attn");
  c.parallel_ffn_norm = input_norms == 2;
  if (new_decoder) return;  // n_kv_heads is num_kv_heads (default: num_attention_heads)
  refuse_if("multi_query", true, false, "q|k|v interleaved per head (multi_query false)");
  c.n_kv_heads = 1;  // multi_query
}

// DeepseekV2Config's keys (DeepSeek-V2's configuration_deepseek.py): latent attention's ranks
// and widths, YaRN's mscale (its softmax_scale: the scores times mscale(mscale_all_dim)², the
// cos and sin times mscale(mscale) / mscale(mscale_all_dim)), and the experts (n_routed_experts,
// ungated shared ones, leading dense layers, routed_scaling_factor), and DeepseekV3Config's
// routing (sigmoid scores, noaux_tc's selection bias and expert groups). What the modeling code
// does beyond llama.cpp's deepseek2 graph is refused by key: another scoring function, V2's
// group-limited greedy routing, experts on some layers only.
inline void hf_deepseek2(const nlohmann::json& j, const HfConfigReader& r, ModelConfig& c) {
  c.kv_lora_rank = r.integer("kv_lora_rank");
  c.q_lora_rank = r.integer_or("q_lora_rank", 0);
  c.rope.rot_dims = r.integer("qk_rope_head_dim");
  c.mla_nope_dim = r.integer("qk_nope_head_dim");
  c.mla_v_dim = r.integer("v_head_dim");
  c.n_kv_heads = 1;  // the cache's one row per token (num_key_value_heads is the query heads')
  c.head_dim = c.kv_lora_rank + c.rope.rot_dims;
  if (r.has("rope_scaling")) {
    const nlohmann::json& s = j.at("rope_scaling");
    const auto mscale = [&](const char* key) {
      const double m = s.contains(key) && !s.at(key).is_null()
                           ? r.number_of(s.at(key), std::string("rope_scaling.") + key)
                           : 1.0;
      const double factor = c.rope.scaling.factor;
      return factor > 1.0 ? 0.1 * m * std::log(factor) + 1.0 : 1.0;
    };
    if (c.rope.scaling.type == RopeScalingType::yarn) {
      const double all_dims = mscale("mscale_all_dim");
      c.rope.scaling.attention_factor = static_cast<float>(mscale("mscale") / all_dims);
      if (all_dims != 1.0)
        c.attention_scale = static_cast<float>(all_dims * all_dims /
                                               std::sqrt(static_cast<double>(c.mla_q_head_dim())));
    }
  }
  if (!r.has("n_routed_experts")) return;  // a dense model (every layer's FFN of intermediate_size)
  const auto refuse_unless = [&](const char* key, const char* fallback,
                                 std::initializer_list<const char*> allowed, const char* what) {
    const std::string value = j.contains(key) && j.at(key).is_string()
                                  ? j.at(key).get<std::string>()
                                  : std::string(fallback);
    for (const char* a : allowed)
      if (value == a) return;
    r.fail(ErrorKind::unsupported, std::string(what) + " '" + value + "' is not supported", key);
  };
  // DeepSeek-V3's noaux_tc: sigmoid scores, a selection bias (e_score_correction_bias) and
  // groups scored by their two best biased scores, as llama.cpp scores every file's groups.
  // V2's group_limited_greedy scores a group by its best alone, which llama.cpp's graph does not.
  refuse_unless("scoring_func", "softmax", {"softmax", "sigmoid"}, "expert scoring");
  refuse_unless("topk_method", "greedy", {"greedy", "noaux_tc"}, "expert selection");
  c.expert_gating = j.value("scoring_func", "softmax") == "sigmoid" ? ExpertGating::sigmoid
                                                                    : ExpertGating::softmax;
  const bool noaux_tc = j.value("topk_method", "greedy") == "noaux_tc";
  c.expert_selection_bias = noaux_tc;
  if (const std::int64_t groups = r.integer_or("n_group", 1); noaux_tc && groups > 1) {
    c.n_expert_groups = groups;
    c.n_expert_groups_used = r.integer("topk_group");
  }
  if (r.integer_or("moe_layer_freq", 1) != 1)
    r.fail(ErrorKind::unsupported, "dense layers between expert layers are not supported",
           "moe_layer_freq");
  c.n_experts = r.integer("n_routed_experts");
  c.n_experts_used = r.integer("num_experts_per_tok");
  c.expert_ffn_dim = r.integer("moe_intermediate_size");
  c.expert_weights_normalized = r.boolean_or("norm_topk_prob", false);
  const double scale = r.number_or("routed_scaling_factor", 1.0);
  c.expert_weights_scale = scale == 1.0 ? 0.0f : static_cast<float>(scale);
  const std::int64_t shared = r.integer_or("n_shared_experts", 0);
  c.shared_expert_ffn_dim = shared * c.expert_ffn_dim;
  c.shared_expert_ungated = shared > 0;
  c.n_dense_layers = r.integer_or("first_k_dense_replace", 0);
}

// Which layers have the window, for families that window some layers only: layer_types where
// config.json has it (newer transformers: "sliding_attention" or "full_attention" per layer),
// else sliding_window_pattern (Gemma 3's classes before it), else the family's pattern. Layer
// types that repeat no such pattern are refused.
inline void hf_window_pattern(const nlohmann::json& j, const HfConfigReader& r, ModelConfig& c) {
  if (r.has("sliding_window_pattern"))
    c.sliding_window_pattern = r.integer("sliding_window_pattern");
  if (!j.contains("layer_types") || j.at("layer_types").is_null()) return;
  const nlohmann::json& types = j.at("layer_types");
  if (!types.is_array() || types.size() != static_cast<std::size_t>(c.n_layers))
    r.fail(ErrorKind::format, "expected an array of one entry per layer", "layer_types");
  std::vector<bool> windowed;  // [n_layers]
  for (const nlohmann::json& t : types) {
    if (t != "sliding_attention" && t != "full_attention")
      r.fail(ErrorKind::format,
             "layer type " + t.dump() + " (expected sliding_attention or full_attention)",
             "layer_types");
    windowed.push_back(t == "sliding_attention");
  }
  // The first global layer ends the pattern's period; none: every layer windowed (pattern 0).
  const auto first_global = std::find(windowed.begin(), windowed.end(), false);
  c.sliding_window_pattern =
      first_global == windowed.end() ? 0 : (first_global - windowed.begin()) + 1;
  const auto n = static_cast<std::size_t>(c.sliding_window_pattern);
  for (std::size_t l = 0; l < windowed.size(); ++l)
    if ((n == 0 || l % n < n - 1) != windowed[l])  // ModelConfig::window_of's rule
      r.fail(ErrorKind::unsupported,
             "windowed layers that repeat no pattern of n - 1 windowed and one global layer",
             "layer_types");
}

// The family of a config.json, and whether its class is the family's multimodal one.
struct HfClass {
  const Architecture* arch;
  bool multimodal;
};

inline HfClass hf_class(const nlohmann::json& j, const std::string& path) {
  const HfConfigReader r(j, path);
  if (!j.is_object()) r.fail(ErrorKind::format, "config.json is not a JSON object", {});
  if (!j.contains("architectures") || !j.at("architectures").is_array())
    r.fail(ErrorKind::format, "missing 'architectures' array", "architectures");
  std::string archs;
  for (const auto& a : j.at("architectures")) {
    if (!a.is_string()) r.fail(ErrorKind::format, "expected strings", "architectures");
    const std::string name = a.get<std::string>();
    archs += (archs.empty() ? "" : ", ") + name;
    if (const Architecture* arch = find_hf_architecture(name))
      return {arch, arch->hf_multimodal != nullptr && name == arch->hf_multimodal};
  }
  r.fail(ErrorKind::unsupported,
         "architecture [" + archs + "] is not supported (" + supported_architectures(true) + ")",
         "architectures");
}

// The text model's config: config.json itself, or a multimodal class's text_config; in either,
// the family's class defaults for the keys it leaves out.
inline nlohmann::json hf_text_config(const nlohmann::json& j, const std::string& path,
                                     const HfClass& cls) {
  nlohmann::json text = j;
  if (cls.multimodal) {
    if (!j.contains("text_config") || !j.at("text_config").is_object())
      HfConfigReader(j, path).fail(ErrorKind::format, "missing the text model's object",
                                   "text_config");
    text = j.at("text_config");
  }
  for (const auto& [key, value] : cls.arch->hf_config_defaults)
    if (key != nullptr && !text.contains(key)) text[key] = nlohmann::json::parse(value);
  return text;
}

// How a checkpoint's tensors are named beyond the family's names: a multimodal class's prefix
// on the text model's, and the multi-token prediction layers that follow the decoder's
// (DeepSeek-V3's num_nextn_predict_layers), which inference leaves unread.
struct HfCheckpointLayout {
  std::string prefix;
  std::int64_t prediction_layers = 0;
};

inline HfCheckpointLayout hf_checkpoint_layout(const nlohmann::json& j, const std::string& path) {
  const HfClass cls = hf_class(j, path);
  return {cls.multimodal ? "language_model." : "",
          HfConfigReader(j, path).integer_or("num_nextn_predict_layers", 0)};
}

}  // namespace detail

// A ModelConfig from a parsed config.json (`path` names it in errors); of a multimodal
// checkpoint (Gemma3ForConditionalGeneration), its text model's.
inline ModelConfig hf_model_config(const nlohmann::json& config_json, const std::string& path) {
  const detail::HfClass cls = detail::hf_class(config_json, path);
  const Architecture* arch = cls.arch;
  const nlohmann::json j = detail::hf_text_config(config_json, path, cls);
  const detail::HfConfigReader r(j, path);
  // SiLU families name their activation hidden_act; Gemma's classes read hidden_activation
  // (GELU's tanh approximation, which transformers also calls gelu_new).
  if (arch->hf_falcon_flags) {  // FalconConfig's activation (nn.GELU() when "gelu")
    if (j.contains("activation") && j.at("activation") != "gelu")
      r.fail(ErrorKind::unsupported, "activation " + j.at("activation").dump() + " (only gelu)",
             "activation");
  } else if (arch->activation == GateActivation::silu) {
    if (j.contains("hidden_act") && j.at("hidden_act") != "silu")
      r.fail(ErrorKind::unsupported, "activation " + j.at("hidden_act").dump() + " (only silu)",
             "hidden_act");
  } else if (j.contains("hidden_activation") && j.at("hidden_activation") != "gelu_pytorch_tanh" &&
             j.at("hidden_activation") != "gelu_new") {
    r.fail(ErrorKind::unsupported,
           "activation " + j.at("hidden_activation").dump() + " (only gelu_pytorch_tanh)",
           "hidden_activation");
  }
  // Llama's and Qwen3's attention_bias puts a bias on the output projection too, which no
  // block here has; Qwen2's q/k/v biases are not a config key but part of the class.
  if (r.boolean_or("attention_bias", false))
    r.fail(ErrorKind::unsupported, "attention biases with an output bias are not supported",
           "attention_bias");
  // OLMo's clip_qkv clamps q, k and v to [-c, c] (llama.cpp's olmoe graph ignores it).
  if (r.has("clip_qkv"))
    r.fail(ErrorKind::unsupported, "clamping q, k and v (clip_qkv) is not supported", "clip_qkv");
  if (r.boolean_or("mlp_bias", false))
    r.fail(ErrorKind::unsupported, "MLP biases are not supported", "mlp_bias");
  // Qwen2/Qwen3 carry a sliding_window that applies only when use_sliding_window is true (and
  // then to layers past max_window_layers); llama.cpp ignores it, and so does a false flag.
  const bool window_flagged = r.has("use_sliding_window");
  if (r.boolean_or("use_sliding_window", false))
    r.fail(ErrorKind::unsupported, "per-layer sliding windows are not supported",
           "use_sliding_window");

  ModelConfig c;
  c.architecture = arch->gguf;
  c.qkv_bias = arch->qkv_bias == Presence::always;
  c.qk_norm = arch->qk_norm;
  // Cohere's use_qk_norm (Command R+): a LayerNorm per head with each head's own weights.
  if (r.boolean_or("use_qk_norm", false)) {
    if (arch->optional_qk_norm == QkNorm::none)
      r.fail(ErrorKind::unsupported, "QK-norm (use_qk_norm) in this family", "use_qk_norm");
    c.qk_norm = arch->optional_qk_norm;
  }
  c.layout = arch->layout;
  c.ffn_activation = arch->activation;
  c.scale_embeddings = arch->scale_embeddings;
  c.sliding_window_pattern = arch->window_pattern;
  // Soft-caps: the class default when absent, none when null.
  const auto softcap = [&](const char* key, float fallback) {
    if (fallback == 0.0f && !arch->optional_softcaps) return 0.0f;
    if (j.contains(key) && j.at(key).is_null()) return 0.0f;
    return static_cast<float>(r.number_or(key, fallback));
  };
  c.attn_softcap = softcap("attn_logit_softcapping", arch->default_attn_softcap);
  c.final_softcap = softcap("final_logit_softcapping", arch->default_final_softcap);
  if (r.has("query_pre_attn_scalar")) {  // Gemma: scores scale by its inverse square root
    const double scalar = r.number("query_pre_attn_scalar");
    if (!(scalar > 0.0)) r.fail(ErrorKind::format, "must be positive", "query_pre_attn_scalar");
    c.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
  }
  if (j.contains("model_type") && j.at("model_type").is_string())
    c.name = j.at("model_type").get<std::string>();
  c.dim = r.integer("hidden_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer_or(arch->hf_key("num_key_value_heads"), c.n_heads);
  // FalconConfig's defaults, which Falcon-7B's config.json relies on: 4·hidden_size, 2048.
  c.ffn_dim = arch->hf_falcon_flags ? r.integer_or(arch->hf_key("intermediate_size"), 4 * c.dim)
                                    : r.integer(arch->hf_key("intermediate_size"));
  c.vocab_size = r.integer("vocab_size");
  c.context_length = arch->hf_falcon_flags ? r.integer_or("max_position_embeddings", 2048)
                                           : r.integer("max_position_embeddings");
  if (arch->hf_falcon_flags) detail::hf_falcon_flags(r, c);
  c.norm = arch->norm;
  c.norm_bias = arch->norm_bias;
  c.gated_ffn = arch->gated_ffn;
  c.rms_eps = static_cast<float>(r.number(arch->hf_key("rms_norm_eps")));
  if (arch->default_logit_scale > 0.0f)
    c.logit_scale = static_cast<float>(r.number_or("logit_scale", arch->default_logit_scale));
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", arch->hf_tied);
  if (r.has("head_dim")) {
    c.head_dim = r.integer("head_dim");
    if (c.n_heads > 0 && c.head_dim * c.n_heads == c.dim) c.head_dim = 0;  // the default
  }
  c.sliding_window = window_flagged ? 0 : r.integer_or("sliding_window", 0);  // Mistral; null: none
  if (arch->window_pattern > 0) detail::hf_window_pattern(j, r, c);
  if (arch->window_rope_theta > 0.0f && c.sliding_window > 0) {  // Gemma 3's local RoPE
    const double theta = r.number_or("rope_local_base_freq", arch->window_rope_theta);
    if (!(theta > 0.0) || !std::isfinite(theta))
      r.fail(ErrorKind::format, "must be positive", "rope_local_base_freq");
    c.window_rope_theta = static_cast<float>(theta);
  }

  // Experts: Mixtral's num_local_experts (intermediate_size is an expert's width), Qwen2-MoE's
  // num_experts with moe_intermediate_size and shared_expert_intermediate_size.
  if (r.has("num_local_experts") || r.has("num_experts")) {
    c.n_experts =
        r.has("num_local_experts") ? r.integer("num_local_experts") : r.integer("num_experts");
    c.n_experts_used = r.integer("num_experts_per_tok");
    c.expert_weights_normalized = r.boolean_or("norm_topk_prob", arch->expert_weights_normalized);
    if (r.has("moe_intermediate_size")) c.expert_ffn_dim = r.integer("moe_intermediate_size");
    if (arch->shared_expert) c.shared_expert_ffn_dim = r.integer("shared_expert_intermediate_size");
    if (r.integer_or("decoder_sparse_step", 1) != 1)
      r.fail(ErrorKind::unsupported, "dense layers between expert layers are not supported",
             "decoder_sparse_step");
    if (j.contains("mlp_only_layers") && !j.at("mlp_only_layers").empty())
      r.fail(ErrorKind::unsupported, "dense layers between expert layers are not supported",
             "mlp_only_layers");
  }
  // HF's rotate_half pairs (i, i + head_dim/2): the neox layout, weights as stored; Cohere's
  // pairs (2i, 2i + 1).
  c.rope.layout = arch->hf_rope;
  c.rope.theta = static_cast<float>(r.number_or("rope_theta", 10000.0));
  if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor") != 1.0)
    r.fail(ErrorKind::unsupported, "partial rotary embeddings are not supported",
           "partial_rotary_factor");
  if (r.has("rope_scaling")) detail::hf_rope_scaling(j.at("rope_scaling"), r, c);
  if (arch->latent_attention) detail::hf_deepseek2(j, r, c);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::format, "inconsistent config: " + e.message(), path, e.field());
  }
  return c;
}

namespace detail {

// The Hugging Face name of a model tensor (a GGUF-named TensorSpec), derived per tensor so that
// nothing is built per layer before the tensors are looked up.
inline std::string hf_tensor_name(const Architecture& arch, const LayerTensorLists& layers,
                                  const TensorSpec& spec) {
  if (spec.name == "token_embd.weight") return arch.hf_embedding;
  if (spec.name == "output_norm.weight") return std::string(arch.hf_final_norm) + ".weight";
  if (spec.name == "output_norm.bias") return std::string(arch.hf_final_norm) + ".bias";
  if (spec.name == "output.weight") return "lm_head.weight";
  // blk.<layer>.<gguf name>
  const std::size_t layer_end = spec.name.find('.', 4);
  const std::string_view layer = std::string_view(spec.name).substr(4, layer_end - 4);
  const std::string_view name = std::string_view(spec.name).substr(layer_end + 1);
  std::size_t index = 0;
  for (const char d : layer) index = index * 10 + static_cast<std::size_t>(d - '0');
  for (const LayerTensor& t : layers.of(index))
    if (name == t.gguf)
      return arch.hf_layers + std::string(layer) + "." + arch.hf_tensor(t.hf.c_str());
  throw Error(ErrorKind::internal, "no Hugging Face name for tensor " + spec.name);
}

// Owned copies (converted norms, realigned tensors) and the checkpoint they came from.
struct HfStorage {
  std::shared_ptr<const safetensors::Checkpoint> checkpoint;
  std::vector<AlignedBuffer<std::byte>> owned;
};

// norm_offset: what the family's norms add to their stored weight (Gemma: 1), added here.
inline WeightTensor hf_weight(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                              const TensorSpec& spec, HfStorage& storage,
                              const LoadOptions& options, float norm_offset) {
  const safetensors::Checkpoint::Entry* e = ckpt.find(hf_name);
  if (e == nullptr)
    throw Error(ErrorKind::format, "missing tensor (needed for " + spec.name + ")",
                ckpt.files().empty() ? std::string() : ckpt.files().front()->path(), hf_name);
  const safetensors::TensorInfo& t = *e->tensor;
  // Vectors are 1-D [n]; matrices 2-D [rows, cols] (PyTorch's [out_features, in_features]).
  // (A vector may also be [1, n]: Qwen2-MoE's shared_expert_gate is a Linear(dim, 1); vectors
  // per head, Command R+'s QK-norm, are [heads, n].)
  const bool single_vector = spec.is_vector() && spec.rows == 1;
  const bool shape_ok =
      single_vector ? ((t.shape.size() == 1 && t.shape[0] == spec.cols) ||
                       (t.shape.size() == 2 && t.shape[0] == 1 && t.shape[1] == spec.cols))
                    : (t.shape.size() == 2 && t.shape[0] == spec.rows && t.shape[1] == spec.cols);
  if (!shape_ok) {
    std::string shape;
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      shape += (d ? ", " : "") + std::to_string(t.shape[d]);
    const std::string want = single_vector
                                 ? std::to_string(spec.cols)
                                 : std::to_string(spec.rows) + ", " + std::to_string(spec.cols);
    throw Error(ErrorKind::format,
                "shape [" + shape + "] disagrees with config.json, which implies [" + want + "]",
                e->file->path(), hf_name, t.file_offset);
  }
  if (options.check_finite)  // on the file's bytes, before any conversion
    check_finite(WeightTensor{t.type, t.data, spec.rows, spec.cols, hf_name}, e->file->path(),
                 hf_name, t.file_offset);
  const std::size_t n = static_cast<std::size_t>(t.elements());
  const std::size_t element = t.type == DType::f32 ? 4 : 2;
  const bool aligned = reinterpret_cast<std::uintptr_t>(t.data) % element == 0;
  const float offset = spec.role == TensorRole::norm ? norm_offset : 0.0f;
  if (spec.is_vector() && (t.type != DType::f32 || offset != 0.0f)) {
    AlignedBuffer<std::byte> buf(n * 4);  // [dim] f32
    for (std::size_t i = 0; i < n; ++i) {
      float v = 0.0f;
      if (t.type == DType::f32) {
        std::memcpy(&v, t.data + 4 * i, 4);
      } else {
        std::uint16_t bits = 0;
        std::memcpy(&bits, t.data + 2 * i, 2);
        v = t.type == DType::f16 ? f16::from_bits(bits).to_float()
                                 : bf16::from_bits(bits).to_float();
      }
      v += offset;
      std::memcpy(buf.data() + 4 * i, &v, 4);
    }
    storage.owned.push_back(std::move(buf));
    return WeightTensor{DType::f32, storage.owned.back().data(), spec.rows, spec.cols, spec.name};
  }
  if (!aligned) {
    AlignedBuffer<std::byte> buf(n * element);
    std::memcpy(buf.data(), t.data, n * element);
    storage.owned.push_back(std::move(buf));
    return WeightTensor{t.type, storage.owned.back().data(), spec.rows, spec.cols, spec.name};
  }
  return WeightTensor{t.type, t.data, spec.rows, spec.cols, spec.name};
}

// Latent attention's W_kb or W_vb of layer prefix `layer` (model.layers.N.), split from
// Hugging Face's kv_b_proj (io/latent_split.hpp); returns kv_b_proj's name for `used`.
inline std::string hf_latent_part(const safetensors::Checkpoint& ckpt, const ModelConfig& c,
                                  const std::string& layer, const TensorSpec& spec,
                                  HfStorage& storage, const LoadOptions& options,
                                  WeightTensor& out) {
  std::string name = layer + "self_attn.kv_b_proj.weight";
  const WeightTensor kv_b =
      hf_weight(ckpt, name, latent_kv_b_spec(c, name), storage, options, 0.0f);
  out = split_latent_kv_b(kv_b, c, spec, storage.owned);
  return name;
}

// Every tensor of a decoder layer must be one the model reads: a layer past num_hidden_layers,
// or a layer tensor of another architecture (a bias, an extra norm), means config.json does not
// describe the checkpoint. The exceptions: the `extra_layers` layers right after the decoder's,
// which DeepSeek-V3 keeps for multi-token prediction (num_nextn_predict_layers) and inference
// does not read (llama.cpp's converter drops them); tensors outside the layers, such as a rotary
// inverse-frequency buffer, which carry nothing we would get wrong by not reading them.
inline void check_no_unused_layer_tensors(const safetensors::Checkpoint& ckpt,
                                          std::string_view layers_prefix, const ModelConfig& config,
                                          const std::set<std::string, std::less<>>& used,
                                          std::int64_t extra_layers) {
  const std::string_view kPrefix = layers_prefix;
  for (const std::string& name : ckpt.names()) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0 || used.count(name) != 0) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    const safetensors::Checkpoint::Entry& e = *ckpt.find(name);
    std::int64_t layer = 0;
    for (std::size_t i = kPrefix.size();
         i < name.size() && name[i] >= '0' && name[i] <= '9' && layer < (1 << 30); ++i)
      layer = layer * 10 + (name[i] - '0');
    if (layer >= config.n_layers && layer < config.n_layers + extra_layers) continue;
    throw Error(ErrorKind::format,
                layer >= config.n_layers
                    ? "tensor of layer " + std::to_string(layer) + " but config.json's " +
                          "num_hidden_layers is " + std::to_string(config.n_layers)
                    : "layer tensor that a " + config.architecture +
                          " decoder layer of this config does not have",
                e.file->path(), name, e.tensor->file_offset);
  }
}

// Falcon's new decoder (Falcon-40B) fuses q|k|v by KV group: [n_kv][group + 2][head_dim] rows,
// each group's query heads, then its key head and its value head (FalconAttention._split_heads).
// The checkpoint row of row `row` in the q | k | v order the model (and llama.cpp's converter,
// which regroups the same way) holds. With one group (Falcon-7B's multi-query) the two agree.
inline std::size_t falcon_grouped_qkv_row(const ModelConfig& c, std::size_t row) {
  const auto head_dim = static_cast<std::size_t>(c.resolved_head_dim());
  const auto heads = static_cast<std::size_t>(c.n_heads);
  const auto kv = static_cast<std::size_t>(c.n_kv_heads);
  const std::size_t group = heads / kv, head = row / head_dim;
  std::size_t kv_head = head / group, slot = head % group;  // a query head
  if (head >= heads + kv) {
    kv_head = head - heads - kv, slot = group + 1;  // a value head
  } else if (head >= heads) {
    kv_head = head - heads, slot = group;  // a key head
  }
  return (kv_head * (group + 2) + slot) * head_dim + row % head_dim;
}

// Rows [first, first + count) of the q | k | v order out of Falcon's grouped `whole` ([q + 2·kv]
// [dim], the checkpoint's type), copied into a buffer of their own: the parts' rows are not
// contiguous in the checkpoint, so unlike Falcon-7B's they cannot be views of it.
inline WeightTensor falcon_grouped_qkv_part(const ModelConfig& c, const WeightTensor& whole,
                                            std::size_t first, std::size_t count,
                                            const std::string& name, HfStorage& storage) {
  const std::size_t row_bytes = whole.bytes() / whole.rows;
  AlignedBuffer<std::byte> buf(count * row_bytes);  // [count][dim], the checkpoint's type
  const auto* rows = static_cast<const std::byte*>(whole.data);
  for (std::size_t r = 0; r < count; ++r)
    std::memcpy(buf.data() + r * row_bytes, rows + falcon_grouped_qkv_row(c, first + r) * row_bytes,
                row_bytes);
  storage.owned.push_back(std::move(buf));
  return WeightTensor{whole.type, storage.owned.back().data(), count, whole.cols, name};
}

}  // namespace detail

// Builds a model from a config and an opened checkpoint, whose names `layout` qualifies (a
// multimodal checkpoint's prefix, prediction layers left unread).
inline HfModel load_hf_model(const ModelConfig& config,
                             std::shared_ptr<const safetensors::Checkpoint> checkpoint,
                             const LoadOptions& options = {},
                             const detail::HfCheckpointLayout& layout = {}) {
  HfModel m;
  m.config = config;
  auto storage = std::make_shared<detail::HfStorage>();
  storage->checkpoint = checkpoint;
  // (Views into owned buffers survive the vector growing: a moved AlignedBuffer keeps its
  // allocation.)
  std::set<std::string, std::less<>> used;
  const LayerTensorLists layers(config);
  const Architecture* arch = find_architecture(config.architecture);
  if (arch == nullptr)
    throw Error(ErrorKind::unsupported, "architecture '" + config.architecture +
                                            "' has no Hugging Face form (" +
                                            supported_architectures() + ")");
  const float norm_offset = arch->hf_norm_offset;
  m.weights = assemble_weights(config, [&](const TensorSpec& spec) {
    if (const std::optional<FusedPart> part = fused_part(config, spec);
        part && part->hf != nullptr) {  // Phi-3's qkv_proj, Falcon's query_key_value
      const std::string layer = spec.name.substr(4, spec.name.find('.', 4) - 4);
      std::string name = layout.prefix + arch->hf_layers + layer + "." + arch->hf_tensor(part->hf);
      const TensorSpec whole_spec{part->gguf, part->file_rows, spec.cols, spec.role};
      const WeightTensor whole =
          detail::hf_weight(*checkpoint, name, whole_spec, *storage, options, 0.0f);
      const bool grouped = arch->hf_falcon_flags && config.n_kv_heads > 1 &&
                           part->hf == std::string_view("self_attn.qkv_proj.weight");
      WeightTensor w = grouped ? detail::falcon_grouped_qkv_part(config, whole, part->first_row,
                                                                 spec.rows, spec.name, *storage)
                               : whole.row_range(part->first_row, spec.rows, spec.name);
      used.insert(std::move(name));
      return w;
    }
    if (arch->latent_attention &&
        (spec.name.ends_with(".attn_k_b.weight") || spec.name.ends_with(".attn_v_b.weight"))) {
      const std::string layer =
          layout.prefix + arch->hf_layers + spec.name.substr(4, spec.name.find('.', 4) - 4) + ".";
      WeightTensor w;
      used.insert(detail::hf_latent_part(*checkpoint, config, layer, spec, *storage, options, w));
      return w;
    }
    std::string name = layout.prefix + detail::hf_tensor_name(*arch, layers, spec);
    WeightTensor w = detail::hf_weight(*checkpoint, name, spec, *storage, options, norm_offset);
    used.insert(std::move(name));
    return w;
  });
  detail::check_no_unused_layer_tensors(*checkpoint, layout.prefix + arch->hf_layers, config, used,
                                        layout.prediction_layers);
  validate_weights(m.config, m.weights);
  m.weights.storage = storage;
  m.checkpoint = std::move(checkpoint);
  return m;
}

// `dir_or_file`: a directory with config.json and model.safetensors (or shards and
// model.safetensors.index.json), or one of those weight files with config.json beside it.
inline HfModel load_hf_model(const std::string& dir_or_file, const LoadOptions& options = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(dir_or_file, ec) ? fs::path(dir_or_file)
                                                         : fs::path(dir_or_file).parent_path();
  const std::string config_path = (dir / "config.json").string();
  const std::string text = io::read_text_file(config_path, "config.json");
  const nlohmann::json j = safetensors::detail::parse_json_strict(text, config_path, {}, 0);
  const ModelConfig config = hf_model_config(j, config_path);
  return load_hf_model(
      config,
      std::make_shared<const safetensors::Checkpoint>(safetensors::Checkpoint::open(dir_or_file)),
      options, detail::hf_checkpoint_layout(j, config_path));
}

}  // namespace hllm
