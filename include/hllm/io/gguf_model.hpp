#pragma once
// Models in GGUF files: load_gguf_model() reads the `<arch>.*` metadata of any architecture of
// model/architecture.hpp (llama, qwen2, gemma2, falcon, ...) into a ModelConfig and wraps the
// tensors as WeightTensors that point into the mapped file (no copies; the gguf::File stays alive
// through ModelWeights::storage). save_gguf_model() writes the inverse, in the layout llama.cpp
// reads.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/io/latent_split.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/io/progress.hpp"
#include "hllm/model/architecture.hpp"
#include "hllm/model/config.hpp"
#include "hllm/model/finite_check.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/nn/rope.hpp"

namespace hllm {

struct GgufModel {
  std::shared_ptr<const gguf::File> file;  // also held by weights.storage
  ModelConfig config;
  ModelWeights weights;
};

namespace detail {

// The number after "blk." in a layer tensor's name, or -1 for any other name.
inline std::int64_t gguf_layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  std::int64_t layer = 0;
  std::size_t i = kPrefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && layer < (1 << 30); ++i)
    layer = layer * 10 + (name[i] - '0');
  return i > kPrefix.size() && i < name.size() && name[i] == '.' ? layer : -1;
}

// How many layers the file's tensor names describe (one past the highest blk.N).
inline std::int64_t gguf_layers_present(const gguf::File& f) {
  std::int64_t layers = 0;
  for (const gguf::TensorInfo& t : f.tensors())
    layers = std::max(layers, gguf_layer_of(t.name) + 1);
  return layers;
}

// The GGUF key (without the architecture prefix) a ModelConfig field is read from, so that a
// validation error names what is in the file.
inline std::string gguf_key_of_config_field(const std::string& field) {
  static const std::pair<const char*, const char*> kKeys[] = {
      {"vocab_size", "vocab_size"},
      {"dim", "embedding_length"},
      {"n_layers", "block_count"},
      {"n_heads", "attention.head_count"},
      {"n_kv_heads", "attention.head_count_kv"},
      {"ffn_dim", "feed_forward_length"},
      {"context_length", "context_length"},
      {"head_dim", "attention.key_length"},
      {"rms_eps", "attention.layer_norm_rms_epsilon"},
      {"sliding_window", "attention.sliding_window"},
      {"sliding_window_pattern", "attention.sliding_window_pattern"},
      {"window_rope_theta", "rope.freq_base_swa"},
      {"rope.rot_dims", "rope.dimension_count"},
      {"kv_lora_rank", "attention.kv_lora_rank"},
      {"q_lora_rank", "attention.q_lora_rank"},
      {"mla_nope_dim", "attention.key_length_mla"},
      {"mla_v_dim", "attention.value_length_mla"},
      {"n_dense_layers", "leading_dense_block_count"},
      {"n_experts", "expert_count"},
      {"n_experts_used", "expert_used_count"},
      {"expert_ffn_dim", "expert_feed_forward_length"},
      {"shared_expert_ffn_dim", "expert_shared_feed_forward_length"}};
  for (const auto& [ours, key] : kKeys)
    if (field == ours) return key;
  return field;
}

// The GGUF key (without the architecture prefix) of the norms' epsilon.
inline const char* gguf_norm_eps_key(NormKind norm) noexcept {
  return norm == NormKind::rms ? "attention.layer_norm_rms_epsilon"
                               : "attention.layer_norm_epsilon";
}

// The family a file declares, or an error naming the ones hllm reads.
inline const Architecture& gguf_architecture(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  const Architecture* a = find_architecture(arch);
  if (a == nullptr)
    throw Error(ErrorKind::unsupported,
                "architecture '" + arch + "' is not supported (" + supported_architectures() + ")",
                f.path(), "general.architecture");
  return *a;
}

// Whether layer 0 holds tensor `suffix` (blk.0.<suffix>), for an optional part; required parts
// are checked as tensors when the weights are assembled.
inline bool gguf_layers_have(const gguf::File& f, Presence presence, const char* suffix) {
  if (presence != Presence::optional) return presence == Presence::always;
  return f.find_tensor(std::string("blk.0.") + suffix) != nullptr;
}

// The score scale llama.cpp gives a family's files: 1/sqrt(head_dim), except Gemma 2 27B's
// 1/sqrt(dim / n_heads), told by its layer count as llama.cpp tells it. 0: the default.
inline float gguf_attention_scale(const Architecture& arch, const ModelConfig& c) {
  if (arch.gguf_width_scaled_layers == 0 || c.n_layers != arch.gguf_width_scaled_layers ||
      c.resolved_head_dim() * c.n_heads == c.dim)
    return 0.0f;
  return 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
}

// YaRN's factor on the scores of DeepSeek-V2 (its softmax_scale's mscale, squared):
// 0.1 · mscale_all_dim · ln(factor) + 1, where mscale_all_dim = yarn_log_multiplier / 0.1 as
// llama.cpp's converter writes it.
inline double deepseek2_yarn_mscale(double log_multiplier, double factor) {
  return factor > 1.0 ? 1.0 + log_multiplier * std::log(factor) : 1.0;
}

// Whether a deepseek2 file is from before llama.cpp's converter split attn_kv_b into attn_k_b
// and attn_v_b (DeepSeek-V2 GGUF files of 2024).
inline bool gguf_unsplit_kv_b(const gguf::File& f) {
  return f.find_tensor("blk.0.attn_kv_b.weight") != nullptr &&
         f.find_tensor("blk.0.attn_k_b.weight") == nullptr;
}

// DeepSeek-V2's keys, as llama.cpp's deepseek2 reader takes them: latent attention's ranks and
// widths (attention.key_length is then the cache's rot + kv_lora_rank, value_length the
// latent's), the shared experts' count, leading dense layers and weight scale, and YaRN's
// score factor (the cos and sin unscaled). Files from before the converter split attn_kv_b
// have no *_mla keys: their key_length is the heads' nope + rot and value_length v (llama.cpp
// runs them unabsorbed; here W_kb and W_vb are split from attn_kv_b at load and they run as the
// others do).
inline void gguf_deepseek2(const gguf::File& f, const std::string& p, ModelConfig& c) {
  const bool unsplit = gguf_unsplit_kv_b(f);
  c.kv_lora_rank = f.get_int(p + "attention.kv_lora_rank");
  c.q_lora_rank = f.get_int_or(p + "attention.q_lora_rank", 0);
  c.rope.rot_dims = f.get_int(p + "rope.dimension_count");
  c.mla_nope_dim = f.get_int(p + (unsplit ? "attention.key_length" : "attention.key_length_mla")) -
                   c.rope.rot_dims;
  c.mla_v_dim = f.get_int(p + (unsplit ? "attention.value_length" : "attention.value_length_mla"));
  c.head_dim = c.kv_lora_rank + c.rope.rot_dims;  // the cache's row: [k_pe | latent]
  if (!unsplit)
    for (const auto& [name, want] : {std::pair{"attention.key_length", c.head_dim},
                                     {"attention.value_length", c.kv_lora_rank},
                                     {"attention.head_count_kv", std::int64_t{1}}})
      if (f.has(p + name) && f.get_int(p + name) != want)
        throw Error(ErrorKind::format,
                    "is " + std::to_string(f.get_int(p + name)) + " where latent attention has " +
                        std::to_string(want),
                    f.path(), p + name);
  c.n_kv_heads = 1;
  if (c.n_experts > 0) {
    c.n_dense_layers = f.get_int_or(p + "leading_dense_block_count", 0);
    const std::int64_t shared = f.get_int_or(p + "expert_shared_count", 0);
    c.shared_expert_ffn_dim = shared * c.resolved_expert_ffn_dim();
    c.shared_expert_ungated = shared > 0;
    const double scale = f.get_float_or(p + "expert_weights_scale", 1.0);
    c.expert_weights_scale = scale == 1.0 ? 0.0f : static_cast<float>(scale);
    // llama.cpp's gating: 1 softmax (also files without the key, V2's), 2 sigmoid (V3's).
    switch (f.get_int_or(p + "expert_gating_func", 1)) {
      case 0:
      case 1: c.expert_gating = ExpertGating::softmax; break;
      case 2: c.expert_gating = ExpertGating::sigmoid; break;
      default:
        throw Error(ErrorKind::unsupported,
                    "expert gating " + std::to_string(f.get_int(p + "expert_gating_func")) +
                        " (1 softmax and 2 sigmoid are supported)",
                    f.path(), p + "expert_gating_func");
    }
    // Groups: llama.cpp routes by groups where the file has more than one.
    if (const std::int64_t groups = f.get_int_or(p + "expert_group_count", 0); groups > 1) {
      c.n_expert_groups = groups;
      c.n_expert_groups_used = f.get_int(p + "expert_group_used_count");
    }
    c.expert_selection_bias =
        f.find_tensor("blk." + std::to_string(c.n_dense_layers) + ".exp_probs_b.bias") != nullptr;
  }
  if (c.rope.scaling.type == RopeScalingType::yarn) {
    c.rope.scaling.attention_factor =
        static_cast<float>(f.get_float_or(p + "rope.scaling.attn_factor", 1.0));
    const double mscale = deepseek2_yarn_mscale(
        f.get_float_or(p + "rope.scaling.yarn_log_multiplier", 0.0), c.rope.scaling.factor);
    if (mscale != 1.0)
      c.attention_scale = static_cast<float>(
          mscale * mscale / std::sqrt(static_cast<double>(c.mla_nope_dim + c.rope.rot_dims)));
  }
}

inline ModelConfig gguf_model_config(const gguf::File& f) {
  const Architecture& arch = gguf_architecture(f);
  const std::string prefix = std::string(arch.gguf) + ".";
  const auto key = [&](const char* name) { return prefix + name; };
  ModelConfig c;
  c.architecture = arch.gguf;
  c.name = f.get_string_or("general.name", arch.gguf);
  c.dim = f.get_int(key("embedding_length"));
  c.n_layers = f.get_int(key("block_count"));
  c.ffn_dim = f.get_int(key("feed_forward_length"));
  c.n_heads = f.get_int(key("attention.head_count"));
  c.n_kv_heads = f.get_int_or(key("attention.head_count_kv"), c.n_heads);
  c.context_length = f.get_int(key("context_length"));
  c.norm = arch.norm;
  c.norm_bias = arch.norm_bias;
  c.gated_ffn = arch.gated_ffn;
  // Falcon-40B's files hold the attention's input norm as attn_norm_2 beside the FFN's
  // attn_norm (llama.cpp's falcon graph takes the second norm where a layer has it; every layer
  // of a file has it or none, as its converter writes them); other families' files never do.
  if (f.find_tensor("blk.0.attn_norm_2.weight") != nullptr) {
    if (!arch.optional_parallel_ffn_norm)
      throw Error(ErrorKind::unsupported,
                  "a second input norm per block in " + std::string(arch.gguf) + " files", f.path(),
                  "blk.0.attn_norm_2.weight");
    c.parallel_ffn_norm = true;
  }
  c.rms_eps = static_cast<float>(f.get_float(key(gguf_norm_eps_key(arch.norm))));
  if (!arch.latent_attention && f.has(key("attention.key_length"))) {  // (deepseek2: below)
    c.head_dim = f.get_int(key("attention.key_length"));
    const std::int64_t value_length = f.get_int_or(key("attention.value_length"), c.head_dim);
    if (value_length != c.head_dim)
      throw Error(ErrorKind::unsupported, "key_length != value_length is not supported", f.path(),
                  key("attention.value_length"));
  }
  if (arch.gguf_sliding_window)
    c.sliding_window = f.get_int_or(key("attention.sliding_window"), arch.default_window);
  c.sliding_window_pattern = arch.window_pattern;
  if (f.has(key("attention.sliding_window_pattern"))) {
    if (f.type_of(key("attention.sliding_window_pattern")) == gguf::ValueType::array)
      throw Error(ErrorKind::unsupported, "a per-layer array of windowed layers is not supported",
                  f.path(), key("attention.sliding_window_pattern"));
    c.sliding_window_pattern = f.get_int(key("attention.sliding_window_pattern"));
  }
  // Experts: llama.cpp's keys; a missing expert width is ffn / n_used in qwen2moe files (as
  // llama.cpp reads them) and the FFN's in llama files (Mixtral's feed_forward_length).
  c.n_experts = f.get_int_or(key("expert_count"), 0);
  if (c.n_experts > 0) {
    c.n_experts_used = f.get_int(key("expert_used_count"));
    c.expert_weights_normalized = f.has(key("expert_weights_norm"))
                                      ? f.get_bool(key("expert_weights_norm"))
                                      : arch.expert_weights_normalized;
    if (f.has(key("expert_feed_forward_length")))
      c.expert_ffn_dim = f.get_int(key("expert_feed_forward_length"));
    else if (arch.shared_expert && c.n_experts_used > 0)
      c.expert_ffn_dim = f.get_int(key("feed_forward_length")) / c.n_experts_used;
    if (arch.shared_expert)
      c.shared_expert_ffn_dim = f.get_int_or(key("expert_shared_feed_forward_length"),
                                             f.get_int(key("feed_forward_length")));
  }
  c.layout = arch.layout;
  c.ffn_activation = arch.activation;
  c.scale_embeddings = arch.scale_embeddings;
  if (arch.default_attn_softcap > 0.0f)
    c.attn_softcap = static_cast<float>(
        f.get_float_or(key("attn_logit_softcapping"), arch.default_attn_softcap));
  if (arch.default_final_softcap > 0.0f || arch.optional_softcaps)
    c.final_softcap = static_cast<float>(
        f.get_float_or(key("final_logit_softcapping"), arch.default_final_softcap));
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (f.find_tensor(name) != nullptr)
      throw Error(ErrorKind::unsupported, "LongRoPE frequency factors are not supported", f.path(),
                  name);
  c.qkv_bias = gguf_layers_have(f, arch.qkv_bias, "attn_q.bias");
  c.qk_norm = arch.qk_norm;
  // command-r files of Command R+ carry a LayerNorm of q and k per head, each head with its own
  // weights (llama.cpp reads it in files of 64 layers and more, which all of Command R+'s are;
  // here wherever a file holds it). In other LayerNorm families' files the tensor is a stray
  // one, refused as such.
  if (arch.norm == NormKind::layer && arch.qk_norm == QkNorm::none &&
      f.find_tensor("blk.0.attn_q_norm.weight") != nullptr) {
    if (arch.optional_qk_norm == QkNorm::none)
      throw Error(ErrorKind::unsupported, "QK-norm in " + std::string(arch.gguf) + " files",
                  f.path(), "blk.0.attn_q_norm.weight");
    c.qk_norm = arch.optional_qk_norm;
  }
  if (arch.default_logit_scale > 0.0f)
    c.logit_scale = static_cast<float>(f.get_float_or(key("logit_scale"), 0.0));

  // Vocabulary: the explicit key, else the embedding's row count, else the tokenizer's size.
  if (f.has(key("vocab_size"))) {
    c.vocab_size = f.get_int(key("vocab_size"));
  } else if (const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
             embd != nullptr && embd->dims.size() >= 2) {
    c.vocab_size = static_cast<std::int64_t>(embd->dims[1]);
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<std::int64_t>(f.array_size("tokenizer.ggml.tokens"));
  } else {
    throw Error(ErrorKind::format, "cannot tell the vocabulary size", f.path(), key("vocab_size"));
  }

  // GGUF llama tensors are stored for the interleaved (2i, 2i+1) rotation (the converter
  // permutes Hugging Face's q/k weights so that this holds); qwen2/qwen3 keep the half-split rows.
  RopeConfig& rope = c.rope;
  rope.layout = arch.gguf_rope;
  rope.theta = static_cast<float>(f.get_float_or(key("rope.freq_base"), 10000.0));
  rope.rot_dims = f.get_int_or(key("rope.dimension_count"), 0);
  const std::string scaling = f.get_string_or(key("rope.scaling.type"),
                                              f.has(key("rope.scale_linear")) ? "linear" : "none");
  const double factor = f.has(key("rope.scaling.factor"))
                            ? f.get_float(key("rope.scaling.factor"))
                            : f.get_float_or(key("rope.scale_linear"), 1.0);
  if (scaling == "linear") {
    rope.scaling.type = RopeScalingType::linear;
  } else if (scaling == "yarn") {
    rope.scaling.type = RopeScalingType::yarn;
    rope.scaling.original_context = f.get_int(key("rope.scaling.original_context_length"));
    rope.scaling.attention_factor =
        static_cast<float>(f.get_float_or(key("rope.scaling.attn_factor"), 0.0));
    rope.scaling.beta_fast =
        static_cast<float>(f.get_float_or(key("rope.scaling.yarn_beta_fast"), 32.0));
    rope.scaling.beta_slow =
        static_cast<float>(f.get_float_or(key("rope.scaling.yarn_beta_slow"), 1.0));
  } else if (scaling != "none") {
    throw Error(ErrorKind::unsupported, "RoPE scaling type '" + scaling + "' is not supported",
                f.path(), key("rope.scaling.type"));
  }
  rope.scaling.factor = static_cast<float>(factor);
  if (rope.scaling.type == RopeScalingType::linear && factor == 1.0)
    rope.scaling.type = RopeScalingType::none;  // a factor of 1 is no scaling
  if (const gguf::TensorInfo* freqs = f.find_tensor("rope_freqs.weight")) {
    if (freqs->type != DType::f32 || freqs->dims.size() != 1)
      throw Error(ErrorKind::format, "rope_freqs must be a 1-D F32 tensor", f.path(),
                  "rope_freqs.weight");
    rope.freq_factors.resize(static_cast<std::size_t>(freqs->dims[0]));  // [rot_dims/2]
    std::memcpy(rope.freq_factors.data(), freqs->data, freqs->size_bytes);
  }
  if (arch.window_rope_theta > 0.0f && c.sliding_window > 0)
    c.window_rope_theta =
        static_cast<float>(f.get_float_or(key("rope.freq_base_swa"), arch.window_rope_theta));
  c.tied_embeddings = arch.tied || f.find_tensor("output.weight") == nullptr;
  if (arch.latent_attention) gguf_deepseek2(f, prefix, c);
  try {
    c.validate();
  } catch (const Error& e) {
    const std::string field = e.field() == "rms_eps" ? std::string(gguf_norm_eps_key(arch.norm))
                                                     : gguf_key_of_config_field(e.field());
    throw Error(ErrorKind::format, "inconsistent model metadata: " + e.message(), f.path(),
                prefix + field);
  }
  // The explicit vocabulary size against the embedding. The token array tells which of the two
  // lies: when it agrees with the key, the embedding's shape check names the tensor; otherwise
  // the key is named here.
  const auto agrees_with_tokens = [&](std::int64_t n) {
    return f.has("tokenizer.ggml.tokens") &&
           f.array_size("tokenizer.ggml.tokens") == static_cast<std::size_t>(n);
  };
  if (const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
      f.has(key("vocab_size")) && embd != nullptr && embd->dims.size() == 2 &&
      embd->dims[1] != static_cast<std::uint64_t>(c.vocab_size) &&
      !agrees_with_tokens(c.vocab_size))
    throw Error(ErrorKind::format,
                key("vocab_size") + " is " + std::to_string(c.vocab_size) +
                    " but token_embd.weight has " + std::to_string(embd->dims[1]) + " rows",
                f.path(), key("vocab_size"));
  if (c.attention_scale == 0.0f) c.attention_scale = gguf_attention_scale(arch, c);
  return c;
}

// The tensor called spec.name, checked against the shape the config implies (and, when asked,
// for NaN and infinities).
inline WeightTensor gguf_weight(const gguf::File& f, const TensorSpec& spec,
                                const LoadOptions& options) {
  const gguf::TensorInfo* t = f.find_tensor(spec.name);
  if (t == nullptr) {
    // A layer tensor past the layers the file holds: the block count is what lies.
    const std::int64_t layer = gguf_layer_of(spec.name), present = gguf_layers_present(f);
    std::string message = "missing tensor";
    if (layer >= present)
      message += ": " + f.get_string("general.architecture") + ".block_count is " +
                 std::to_string(f.get_int(f.get_string("general.architecture") + ".block_count")) +
                 " but the file holds tensors of " + std::to_string(present) + " layers";
    throw Error(ErrorKind::format, message, f.path(), spec.name);
  }
  // GGUF dims are [cols, rows, 1, ...]: ne0 is the innermost (contiguous) dimension.
  std::uint64_t rows = 1;
  for (std::size_t d = 1; d < t->dims.size(); ++d) rows *= t->dims[d];
  // (A vector may carry trailing dimensions of 1, as converters write [1, dim] Linear weights;
  // a vector per head, Command R+'s QK-norm, is 2-D.)
  if (spec.is_vector() && spec.rows == 1 && rows != 1)
    throw Error(ErrorKind::format,
                "a " + std::string(role_name(spec.role)) + " must be 1-D, the tensor has " +
                    std::to_string(t->dims.size()) + " dimensions",
                f.path(), spec.name);
  const bool stacking_ok = spec.stacked == 0 || (t->dims.size() == 3 && t->dims[2] == spec.stacked);
  if (t->dims[0] != spec.cols || rows != spec.rows || !stacking_ok) {
    std::string shape;
    for (std::size_t d = 0; d < t->dims.size(); ++d)
      shape += (d ? ", " : "") + std::to_string(t->dims[d]);
    const std::string want = spec.stacked == 0 ? std::to_string(spec.rows)
                                               : std::to_string(spec.rows / spec.stacked) + ", " +
                                                     std::to_string(spec.stacked);
    throw Error(ErrorKind::format,
                "shape [" + shape + "] (GGUF order) disagrees with the metadata, which implies [" +
                    std::to_string(spec.cols) + ", " + want + "]",
                f.path(), spec.name);
  }
  // Plain float tensors are read through typed pointers, so they must sit at an address
  // aligned for their element (always true in a mapped file with a sane alignment).
  DTypeInfo info{};
  dtype_info(t->type, info);
  if (info.block_elements == 1 && reinterpret_cast<std::uintptr_t>(t->data) % info.block_bytes != 0)
    throw Error(ErrorKind::unsupported, "tensor data is not aligned in memory", f.path(),
                spec.name);
  WeightTensor w{t->type, t->data, spec.rows, spec.cols, spec.name};
  if (options.check_finite) check_finite(w, f.path(), spec.name, f.data_offset() + t->offset);
  return w;
}

// A file's mapping and the tensors derived from it at load (an older deepseek2 file's W_kb and
// W_vb).
struct GgufStorage {
  std::shared_ptr<const gguf::File> file;
  std::vector<AlignedBuffer<std::byte>> owned;
};

// Every tensor of the file must be one the model reads, as llama.cpp demands: a tensor left over
// means the metadata lies about the model (a block_count smaller than the layers held) or the
// file is of another architecture.
inline void check_no_unused_tensors(const gguf::File& f, const ModelConfig& c,
                                    const std::set<std::string, std::less<>>& used) {
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (used.find(t.name) != used.end()) continue;
    const std::int64_t layer = gguf_layer_of(t.name);
    if (layer >= c.n_layers)
      throw Error(ErrorKind::format,
                  "tensor of layer " + std::to_string(layer) + " but " + c.architecture +
                      ".block_count is " + std::to_string(c.n_layers) + ": the file holds " +
                      std::to_string(gguf_layers_present(f)) + " layers",
                  f.path(), t.name);
    throw Error(ErrorKind::format,
                "tensor is not part of a " + c.architecture + " model (" +
                    std::to_string(c.n_layers) + " layers); is the file of another architecture?",
                f.path(), t.name);
  }
}

}  // namespace detail

// Builds a model from an already parsed file (e.g. gguf::File::from_memory).
inline GgufModel load_gguf_model(std::shared_ptr<const gguf::File> file,
                                 const LoadOptions& options = {}) {
  GgufModel m;
  m.config = detail::gguf_model_config(*file);
  // (rope_freqs.weight needs no option: RoPE always refuses non-finite factors.)
  std::set<std::string, std::less<>> used{"rope_freqs.weight"};  // read by gguf_model_config
  const std::size_t tensors = model_tensor_count(m.config);
  std::size_t checked = 0;
  // W_kb and W_vb split from an older deepseek2 file's attn_kv_b, owned beside the mapping.
  const bool unsplit_kv_b = m.config.mla() && detail::gguf_unsplit_kv_b(*file);
  auto storage = std::make_shared<detail::GgufStorage>();
  storage->file = file;
  m.weights = assemble_weights(m.config, [&](const TensorSpec& spec) {
    if (unsplit_kv_b &&
        (spec.name.ends_with(".attn_k_b.weight") || spec.name.ends_with(".attn_v_b.weight"))) {
      const std::string name = spec.name.substr(0, spec.name.find('.', 4)) + ".attn_kv_b.weight";
      const WeightTensor kv_b =
          detail::gguf_weight(*file, latent_kv_b_spec(m.config, name), options);
      used.insert(name);
      return split_latent_kv_b(kv_b, m.config, spec, storage->owned);
    }
    // A part of a fused tensor (phi3) is a view of its rows; llama.cpp also reads phi3 files
    // that hold q, k and v apart.
    // So are the experts of a layer stacked in one 3-D tensor; older files (and llama.cpp)
    // also hold them one tensor per expert.
    const std::optional<FusedPart> part = fused_part(m.config, spec);
    const bool apart = part && part->gguf != spec.name && file->find_tensor(spec.name) != nullptr;
    WeightTensor w;
    if (part && !apart) {
      const TensorSpec whole{part->gguf, part->file_rows, spec.cols, spec.role, part->stacked};
      w = detail::gguf_weight(*file, whole, options)
              .row_range(part->first_row, spec.rows, spec.name);
      used.insert(part->gguf);
    } else {
      w = detail::gguf_weight(*file, spec, options);
      used.insert(spec.name);
    }
    if (options.check_finite)  // the one slow part of this loop: it reads every byte
      detail::report_progress(options.progress, "checking", ++checked, tensors, spec.name);
    return w;
  });
  detail::check_no_unused_tensors(*file, m.config, used);
  gguf::check_token_count(*file);
  repack_weights(m.weights, options, file->is_mapped());
  if (storage->owned.empty())
    m.weights.storage = file;
  else
    m.weights.storage = storage;
  m.file = std::move(file);
  return m;
}

// Maps `path` and builds a model whose weights point into the mapping.
inline GgufModel load_gguf_model(const std::string& path, const LoadOptions& options = {}) {
  return load_gguf_model(std::make_shared<const gguf::File>(gguf::File::open(path)), options);
}

// Adds the config to `out` as `<arch>.*` metadata (plus the rope_freqs.weight tensor when the
// config has frequency factors): everything of a model file except its weights, which the
// caller adds in model_tensor_specs() order (gguf_model_writer does; a writer of a large
// synthetic model may add them as lazily filled tensors instead). Throws unsupported when the
// config has a variant its architecture's files cannot say (biases in a qwen3 file, ...).
inline void set_gguf_model_metadata(gguf::Writer& out, const ModelConfig& c) {
  c.validate();
  const Architecture* arch = find_architecture(c.architecture);
  if (arch == nullptr)
    throw Error(ErrorKind::unsupported, "architecture '" + c.architecture + "' has no GGUF form (" +
                                            supported_architectures() + ")");
  if (c.rope.layout != arch->gguf_rope)
    throw Error(ErrorKind::unsupported,
                "GGUF " + c.architecture + " models use the " +
                    (arch->gguf_rope == RopeLayout::interleaved ? "interleaved" : "half-split") +
                    " RoPE layout; convert_model permutes the q/k weights");
  if ((arch->qkv_bias == Presence::always && !c.qkv_bias) ||
      (arch->qkv_bias == Presence::never && c.qkv_bias) || !arch->holds_qk_norm(c.qk_norm))
    throw Error(ErrorKind::unsupported,
                "GGUF " + c.architecture + " models cannot hold this config's biases or QK-norm");
  // The variants a family's files do not record: llama.cpp takes them from the architecture.
  const auto refuse = [&](const std::string& what) {
    throw Error(ErrorKind::unsupported, "GGUF " + c.architecture + " models cannot hold " + what);
  };
  if (c.layout != arch->layout) refuse(std::string(block_layout_name(c.layout)) + " blocks");
  if (c.parallel_ffn_norm && !arch->optional_parallel_ffn_norm)
    refuse("a second input norm per parallel block");
  if (c.norm != arch->norm || c.norm_bias != arch->norm_bias)
    refuse(std::string(norm_kind_name(c.norm)) + (c.norm_bias ? " norms with" : " norms without") +
           " bias");
  if (c.gated_ffn != arch->gated_ffn) refuse(c.gated_ffn ? "a gated FFN" : "a plain MLP");
  if (c.logit_scale > 0.0f && arch->default_logit_scale == 0.0f) refuse("a logit scale");
  if (c.ffn_activation != arch->activation)
    refuse("the FFN activation " + std::string(gate_activation_name(c.ffn_activation)));
  if (c.scale_embeddings != arch->scale_embeddings) refuse("this config's embedding scaling");
  if (c.sliding_window > 0 && c.sliding_window_pattern != arch->window_pattern)
    refuse("sliding_window_pattern " + std::to_string(c.sliding_window_pattern));
  if (c.tied_embeddings != arch->tied && arch->tied) refuse("an untied output projection");
  if (c.n_experts > 0 && !arch->latent_attention &&  // (deepseek2 files say it)
      c.expert_weights_normalized != arch->expert_weights_normalized)
    refuse(std::string(c.expert_weights_normalized ? "renormalized" : "unnormalized") +
           " expert weights");
  if (c.n_experts > 0 && !arch->expert_ffn_key && c.resolved_expert_ffn_dim() != c.ffn_dim)
    refuse("experts narrower than feed_forward_length");
  if (c.mla() != arch->latent_attention)
    refuse(c.mla() ? "multi-head latent attention" : "attention other than latent attention");
  if (!arch->latent_attention &&
      (c.n_dense_layers > 0 || c.shared_expert_ungated || c.expert_weights_scale != 0.0f ||
       c.expert_gating != ExpertGating::softmax || c.n_expert_groups > 0 ||
       c.expert_selection_bias))
    refuse(
        "leading dense layers, ungated shared experts, scaled expert weights, sigmoid "
        "gating, expert groups or selection biases");
  if (c.n_expert_groups > 0 && c.n_expert_groups_used == c.n_expert_groups)
    refuse("every expert group used (llama.cpp's reader asserts fewer; write no groups)");
  if (arch->latent_attention && c.shared_expert_ffn_dim > 0 &&
      (!c.shared_expert_ungated || c.shared_expert_ffn_dim % c.resolved_expert_ffn_dim() != 0))
    refuse("a shared expert other than ungated experts of the experts' width");
  if (c.n_experts > 0 && !arch->latent_attention &&
      (c.shared_expert_ffn_dim > 0) != arch->shared_expert)
    refuse(c.shared_expert_ffn_dim > 0 ? "a shared expert" : "experts without a shared one");
  if ((arch->default_attn_softcap > 0.0f) != (c.attn_softcap > 0.0f) ||
      (!arch->optional_softcaps &&
       (arch->default_final_softcap > 0.0f) != (c.final_softcap > 0.0f)))
    refuse("this config's soft-capping (llama.cpp reads none, or its own default, from them)");
  if (c.window_rope_theta > 0.0f && arch->window_rope_theta == 0.0f)
    refuse("a RoPE base of the windowed layers of their own");
  if (arch->default_window > 0 && c.sliding_window == 0)
    refuse("a model without a sliding window (llama.cpp gives it " +
           std::to_string(arch->default_window) + ")");
  ModelConfig as_read = c;  // what a reader derives from the shape
  as_read.attention_scale = detail::gguf_attention_scale(*arch, c);
  // deepseek2 files say YaRN's score factor (yarn_log_multiplier); the scale must be that.
  double yarn_log_multiplier = 0.0;
  if (arch->latent_attention && c.rope.scaling.type == RopeScalingType::yarn &&
      c.rope.scaling.factor > 1.0f) {
    const double mscale = std::sqrt(static_cast<double>(c.resolved_attention_scale()) *
                                    std::sqrt(static_cast<double>(c.mla_q_head_dim())));
    yarn_log_multiplier = (mscale - 1.0) / std::log(static_cast<double>(c.rope.scaling.factor));
    as_read.attention_scale = c.resolved_attention_scale();
  }
  if (c.resolved_attention_scale() != as_read.resolved_attention_scale())
    refuse("attention scale " + std::to_string(c.resolved_attention_scale()) +
           " (llama.cpp derives it from the shape)");
  const std::string p = std::string(arch->gguf) + ".";
  const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  out.set("general.architecture", arch->gguf);
  out.set("general.name", c.name);
  out.set(p + "vocab_size", u32(c.vocab_size));
  out.set(p + "context_length", u32(c.context_length));
  out.set(p + "embedding_length", u32(c.dim));
  out.set(p + "block_count", u32(c.n_layers));
  out.set(p + "feed_forward_length", u32(c.ffn_dim));
  out.set(p + "attention.head_count", u32(c.n_heads));
  out.set(p + "attention.head_count_kv", u32(c.n_kv_heads));
  if (c.head_dim != 0 && c.head_dim * c.n_heads != c.dim) {
    out.set(p + "attention.key_length", u32(c.head_dim));
    out.set(p + "attention.value_length", u32(c.mla() ? c.kv_lora_rank : c.head_dim));
  }
  if (c.mla()) {  // llama.cpp's deepseek2 keys
    out.set(p + "attention.kv_lora_rank", u32(c.kv_lora_rank));
    if (c.q_lora_rank > 0) out.set(p + "attention.q_lora_rank", u32(c.q_lora_rank));
    out.set(p + "attention.key_length_mla", u32(c.mla_q_head_dim()));
    out.set(p + "attention.value_length_mla", u32(c.mla_v_dim));
  }
  out.set(p + detail::gguf_norm_eps_key(c.norm), c.rms_eps);
  if (c.logit_scale > 0.0f) out.set(p + "logit_scale", c.logit_scale);
  if (c.sliding_window > 0) out.set(p + "attention.sliding_window", u32(c.sliding_window));
  if (c.attn_softcap > 0.0f) out.set(p + "attn_logit_softcapping", c.attn_softcap);
  if (c.final_softcap > 0.0f) out.set(p + "final_logit_softcapping", c.final_softcap);
  if (c.n_experts > 0) {
    out.set(p + "expert_count", u32(c.n_experts));
    out.set(p + "expert_used_count", u32(c.n_experts_used));
    if (arch->expert_ffn_key)  // else llama.cpp takes feed_forward_length (checked above)
      out.set(p + "expert_feed_forward_length", u32(c.resolved_expert_ffn_dim()));
    if (arch->latent_attention) {
      out.set(p + "leading_dense_block_count", u32(c.n_dense_layers));
      out.set(p + "expert_shared_count",
              u32(c.shared_expert_ffn_dim / c.resolved_expert_ffn_dim()));
      // Always said, as the converter writes V2-Lite's 1.0: ik_llama.cpp requires the key.
      out.set(p + "expert_weights_scale",
              c.expert_weights_scale != 0.0f ? c.expert_weights_scale : 1.0f);
      if (c.expert_weights_normalized) out.set(p + "expert_weights_norm", true);
      if (c.expert_gating == ExpertGating::sigmoid) out.set(p + "expert_gating_func", u32(2));
      if (c.n_expert_groups > 0) {
        out.set(p + "expert_group_count", u32(c.n_expert_groups));
        out.set(p + "expert_group_used_count", u32(c.n_expert_groups_used));
      }
    } else if (c.shared_expert_ffn_dim > 0) {
      out.set(p + "expert_shared_feed_forward_length", u32(c.shared_expert_ffn_dim));
    }
  }
  out.set(p + "rope.freq_base", c.rope.theta);
  if (c.window_rope_theta > 0.0f) out.set(p + "rope.freq_base_swa", c.window_rope_theta);
  out.set(p + "rope.dimension_count",
          u32(c.rope.rot_dims != 0 ? c.rope.rot_dims : c.resolved_head_dim()));
  const RopeScaling& s = c.rope.scaling;
  switch (s.type) {
    case RopeScalingType::none: break;
    case RopeScalingType::linear:
      out.set(p + "rope.scaling.type", "linear");
      out.set(p + "rope.scaling.factor", s.factor);
      break;
    case RopeScalingType::yarn:
      out.set(p + "rope.scaling.type", "yarn");
      out.set(p + "rope.scaling.factor", s.factor);
      out.set(p + "rope.scaling.original_context_length", u32(s.original_context));
      if (s.attention_factor > 0.0f) out.set(p + "rope.scaling.attn_factor", s.attention_factor);
      out.set(p + "rope.scaling.yarn_beta_fast", s.beta_fast);
      out.set(p + "rope.scaling.yarn_beta_slow", s.beta_slow);
      if (yarn_log_multiplier != 0.0)
        out.set(p + "rope.scaling.yarn_log_multiplier", static_cast<float>(yarn_log_multiplier));
      break;
    default:
      throw Error(ErrorKind::unsupported, std::string("RoPE scaling '") + to_string(s.type) +
                                              "' has no GGUF encoding here");
  }
  if (!c.rope.freq_factors.empty()) {
    std::vector<std::byte> bytes(c.rope.freq_factors.size() * sizeof(float));  // [rot_dims/2] f32
    std::memcpy(bytes.data(), c.rope.freq_factors.data(), bytes.size());
    out.add_tensor("rope_freqs.weight", DType::f32, {c.rope.freq_factors.size()}, std::move(bytes));
  }
}

// general.file_type as llama.cpp numbers it (llama_ftype, "mostly T": the type of the
// projections), or -1 for a type it has no number for. K-quant files name a mix (Q4_K_M, ...);
// a file whose projections are all of one K-quant gets that mix's "M" number, as llama-quantize
// gives a Q4_K_M file whose attn_v and ffn_down are also Q4_K.
inline int gguf_file_type(DType projections) noexcept {
  switch (projections) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q4_0: return 2;
    case DType::q4_1: return 3;
    case DType::q8_0: return 7;
    case DType::q4_k: return 15;
    case DType::q5_k: return 17;
    case DType::q6_k: return 18;
    case DType::bf16: return 32;
    default: return -1;
  }
}

// Copies every metadata key of `from` that `to` does not hold yet, bit for bit (the chat
// template, licence, general.*, tokenizer keys a converter does not rewrite, ...), so that a
// conversion loses nothing it does not mean to change. general.alignment goes through
// set_alignment, since the writer places the data by it.
inline void copy_missing_metadata(const gguf::File& from, gguf::Writer& to) {
  for (const std::string& key : from.keys()) {
    if (to.has(key)) continue;
    if (key == gguf::kAlignmentKey)
      to.set_alignment(static_cast<std::size_t>(from.get_int(key)));
    else
      to.set_encoded(key, from.encoded_value(key));
  }
}

// A writer holding the config as `<arch>.*` metadata, general.file_type (and, for a quantized
// model, general.quantization_version 2, ggml's current block layouts) and every weight tensor
// (borrowed: the weights must stay alive until the writer has written). Add tokenizer keys
// before writing.
inline gguf::Writer gguf_model_writer(const ModelConfig& c, const ModelWeights& w) {
  c.validate();
  validate_weights(c, w);
  gguf::Writer out;
  set_gguf_model_metadata(out, c);
  const DType projections = w.layers.empty() ? w.token_embedding.type : w.layers[0].wq.type;
  if (const int file_type = gguf_file_type(projections); file_type >= 0)
    out.set("general.file_type", static_cast<std::uint32_t>(file_type));
  if (DTypeInfo info{}; dtype_info(projections, info) && info.block_elements > 1)
    out.set("general.quantization_version", std::uint32_t{2});
  const auto specs = model_tensor_specs(c);
  const auto tensors = model_tensors(c, w);
  const auto fused = fused_members(c, specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const WeightTensor& t = *tensors[i];
    if (const std::optional<FusedPart> part = fused_part(c, specs[i])) {
      // Written once, at the first part, as one tensor filled from the parts when the file is
      // written.
      if (part->first_row != 0) continue;
      std::vector<const WeightTensor*> parts;
      for (const std::size_t j : fused.at(part->gguf)) parts.push_back(tensors[j]);
      std::size_t bytes = 0;
      for (const WeightTensor* p : parts) {
        if (p->type != t.type)
          throw Error(ErrorKind::unsupported,
                      "the parts of " + part->gguf + " must share a weight type: " +
                          dtype_name(t.type) + " and " + dtype_name(p->type),
                      {}, p->name);
        bytes += p->bytes();
      }
      out.add_tensor(part->gguf, t.type, part->file_dims(t.cols), bytes,
                     [parts](std::span<std::byte> data) {
                       std::size_t offset = 0;
                       for (const WeightTensor* p : parts) {
                         std::memcpy(data.data() + offset, p->data, p->bytes());
                         offset += p->bytes();
                       }
                     });
      continue;
    }
    out.add_tensor(specs[i].name, t.type, specs[i].gguf_dims(),
                   std::span(static_cast<const std::byte*>(t.data), t.bytes()));
  }
  return out;
}

// Writes a GGUF v3 file; `add_metadata` may add keys (a tokenizer's) before it is written.
inline void save_gguf_model(const std::string& path, const ModelConfig& config,
                            const ModelWeights& weights,
                            const std::function<void(gguf::Writer&)>& add_metadata = {}) {
  gguf::Writer out = gguf_model_writer(config, weights);
  if (add_metadata) add_metadata(out);
  out.write(path);
}

}  // namespace hllm
