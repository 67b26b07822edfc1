#pragma once
// The model families hllm reads, declared once: the name their GGUF files give in
// general.architecture (and the prefix of their metadata keys), the Hugging Face classes of
// their checkpoints, how their GGUF files store the q/k rows for RoPE, and which block
// variants (ModelConfig's runtime fields) the family has. Loaders and writers ask this table;
// the blocks only see the variant fields.

#include <array>
#include <string>
#include <string_view>

#include "hllm/kernels/reference.hpp"

namespace hllm {

// Whether a family's layers carry an optional part.
enum class Presence {
  never,
  optional,  // as the file says: llama.cpp loads the tensors when present
  always,
};

struct Architecture {
  const char* gguf;               // general.architecture, and the metadata key prefix
  std::array<const char*, 2> hf;  // config.json "architectures" names (nullptr: none)
  RopeLayout gguf_rope;           // rows of q/k in GGUF files (llama.cpp's rope type)
  Presence qkv_bias;              // biases on the q, k and v projections
  bool qk_norm;                   // RMSNorm over each q and k head before RoPE
  bool fused_projections;         // files hold q|k|v and gate|up as one matrix each
  bool gguf_sliding_window;       // attention.sliding_window of its GGUF files is honoured
};

// llama: llama.cpp's converter permutes q/k into interleaved pairs and loads attention biases
// when a file has them. qwen2 and qwen3 keep Hugging Face's half-split (NEOX) rows; Qwen2
// always has q/k/v biases, Qwen3 never, with per-head QK-norm instead. phi3 keeps the
// half-split rows and stores attn_qkv (llama.cpp also takes separate q/k/v) and ffn_up as
// gate|up; llama.cpp ignores its files' sliding window (converters wrote wrong ones), and so
// does hllm with those files, while a Hugging Face Phi-3 checkpoint keeps its window.
inline constexpr Architecture kArchitectures[] = {
    // gguf, hf, gguf_rope, qkv_bias, qk_norm, fused_projections, gguf_sliding_window
    {"llama",
     {"LlamaForCausalLM", "MistralForCausalLM"},
     RopeLayout::interleaved,
     Presence::optional,
     false,
     false,
     true},
    {"qwen2",
     {"Qwen2ForCausalLM", nullptr},
     RopeLayout::neox,
     Presence::always,
     false,
     false,
     true},
    {"qwen3", {"Qwen3ForCausalLM", nullptr}, RopeLayout::neox, Presence::never, true, false, true},
    {"phi3", {"Phi3ForCausalLM", nullptr}, RopeLayout::neox, Presence::never, false, true, false},
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
