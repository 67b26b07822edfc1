#pragma once
// Synthetic models for the example programs and benchmarks: the shape of a preset (or "tiny"),
// random weights of a chosen type, built tensor by tensor so a 1.1B-parameter model never
// exists in float32 all at once. Weights are uniform with the standard deviation a trained
// model's have (1/sqrt(fan_in) for projections), from a fast xorshift generator: statistics
// matter here, not the distribution's shape, and mt19937 + normal would take half a minute.
// Each tensor has a generator stream of its own (seed, tensor index), so a tensor can be made
// alone and in any order: save_synthetic_gguf writes a model one tensor at a time, with the
// same bytes synthetic_weights holds in memory.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/model/presets.hpp"
#include "hllm/model/weights.hpp"
#include "hllm/tokenizer/vocabulary.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace hllm::examples {

// plain: with every block variant off (presets::without_variants), the preset's Llama twin.
inline ModelConfig synthetic_config(const std::string& name, bool plain = false) {
  if (name != "tiny")
    return plain ? presets::without_variants(presets::by_name(name)) : presets::by_name(name);
  ModelConfig c;
  c.name = "tiny";
  c.vocab_size = 512;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_dim = 768;
  c.context_length = 512;
  return c;
}

// The type a tensor is stored as: vectors (norms, biases) and routers stay float32.
inline DType synthetic_dtype(const TensorSpec& s, DType type) {
  return kept_in_f32(s) ? DType::f32 : type;
}

// Tensor `index` of model_tensor_specs(), in its stored type's GGUF layout.
inline std::vector<std::byte> synthetic_tensor(const TensorSpec& s, std::size_t index, DType type,
                                               std::uint64_t seed) {
  std::vector<float> values(s.rows * s.cols);
  // splitmix64 of (seed, index) starts the tensor's stream; xorshift64* must not start at 0.
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + (index + 1) * 0xBF58476D1CE4E5B9ull;
  state = (state ^ (state >> 30)) * 0xBF58476D1CE4E5B9ull;
  state = (state ^ (state >> 27)) * 0x94D049BB133111EBull;
  state = (state ^ (state >> 31)) | 1;
  const bool embedding = s.name == "token_embd.weight";
  const float std_dev = s.is_vector() ? 0.1f : (embedding ? 1.0f : 1.0f / std::sqrt(float(s.cols)));
  const float mean = s.role == TensorRole::norm ? 1.0f : 0.0f;
  const float half_width = std_dev * std::sqrt(3.0f);  // uniform [-a, a] has std a/sqrt(3)
  for (float& v : values) {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;  // xorshift64*
    const float unit = static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40) * 0x1.0p-24f;
    v = mean + (2.0f * unit - 1.0f) * half_width;
  }
  return quant::quantize(synthetic_dtype(s, type), values);
}

inline ModelWeights synthetic_weights(const ModelConfig& config, DType type, std::uint64_t seed) {
  config.validate();
  const auto specs = model_tensor_specs(config);
  std::vector<std::vector<std::byte>> storage;
  std::vector<WeightTensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    storage.push_back(synthetic_tensor(s, i, type, seed));
    tensors.push_back({synthetic_dtype(s, type), storage.back().data(), s.rows, s.cols, s.name});
  }
  std::size_t index = 0;
  ModelWeights w = assemble_weights(config, [&](const TensorSpec&) { return tensors.at(index++); });
  w.storage = std::make_shared<std::vector<std::vector<std::byte>>>(std::move(storage));
  return w;
}

// A SentencePiece ("llama") vocabulary of `size` tokens laid out as Llama-2's is: <unk>, <s>,
// </s>, the 256 byte tokens <0x00>..<0xFF>, then distinct placeholder pieces ("▁a", "▁b", ...,
// "▁ba", ...) with falling scores. Enough for llama.cpp to load and run the model; the text it
// would produce means nothing.
inline Vocabulary synthetic_vocabulary(std::size_t size) {
  constexpr std::size_t kFixed = 3 + 256;
  if (size < kFixed)
    throw Error(ErrorKind::invalid_argument,
                "a synthetic SentencePiece vocabulary needs at least " + std::to_string(kFixed) +
                    " tokens, the model has " + std::to_string(size));
  Vocabulary v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {std::int32_t(TokenType::unknown), std::int32_t(TokenType::control),
                   std::int32_t(TokenType::control)};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    v.tokens.emplace_back(piece);
    v.token_types.push_back(std::int32_t(TokenType::byte));
  }
  v.scores.assign(kFixed, 0.0f);
  for (std::size_t i = 0; v.tokens.size() < size; ++i) {
    std::string letters;  // i in bijective base 26: a..z, aa..zz, ...
    for (std::size_t k = i + 1; k > 0; k = (k - 1) / 26)
      letters.insert(letters.begin(), char('a' + (k - 1) % 26));
    v.tokens.push_back("\xE2\x96\x81" + letters);  // U+2581, SentencePiece's space
    v.token_types.push_back(std::int32_t(TokenType::normal));
    v.scores.push_back(-static_cast<float>(i));
  }
  set_llama_spm_defaults(v);
  return v;
}

// llama.cpp's general.file_type (llama_ftype) for a model whose matrices are all `type`.
inline std::uint32_t llama_file_type(DType type) {
  switch (type) {
    case DType::f32: return 0;    // LLAMA_FTYPE_ALL_F32
    case DType::f16: return 1;    // LLAMA_FTYPE_MOSTLY_F16
    case DType::q4_0: return 2;   // LLAMA_FTYPE_MOSTLY_Q4_0
    case DType::q8_0: return 7;   // LLAMA_FTYPE_MOSTLY_Q8_0
    case DType::bf16: return 32;  // LLAMA_FTYPE_MOSTLY_BF16
    default: throw Error(ErrorKind::unsupported, "no llama.cpp file type for " + dtype_name(type));
  }
}

// GGUF llama has no key for Llama 3.1's RoPE scaling: llama.cpp's converter bakes it into a
// rope_freqs.weight tensor of per-frequency divisors, and so does this (hllm reads either).
inline ModelConfig gguf_rope_config(ModelConfig c) {
  const RopeScaling s = c.rope.scaling;
  if (s.type != RopeScalingType::llama3) return c;
  const std::int64_t rot = c.rope.rot_dims != 0 ? c.rope.rot_dims : c.resolved_head_dim();
  const double original = static_cast<double>(s.original_context);
  const double low_wavelen = original / s.low_freq_factor,
               high_wavelen = original / s.high_freq_factor;
  c.rope.freq_factors.assign(static_cast<std::size_t>(rot / 2), 1.0f);
  for (std::size_t i = 0; i < c.rope.freq_factors.size(); ++i) {
    const double freq = 1.0 / std::pow(double(c.rope.theta), 2.0 * double(i) / double(rot));
    const double wavelen = 2.0 * 3.14159265358979323846 / freq;
    float& divisor = c.rope.freq_factors[i];
    if (wavelen > low_wavelen) {
      divisor = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      divisor = static_cast<float>(1.0 / ((1.0 - smooth) / s.factor + smooth));
    }
  }
  c.rope.scaling = {};
  return c;
}

// Writes the synthetic model of (config, type, seed) as a GGUF file llama.cpp can load: llama.*
// metadata, the vocabulary (padded with placeholder tokens up to the model's vocabulary size,
// since llama.cpp sizes the embedding by the token list) and the tensors, each generated when
// the writer reaches it, so at most one tensor is in memory.
inline void save_synthetic_gguf(const std::string& path, const ModelConfig& config, DType type,
                                std::uint64_t seed, Vocabulary vocab) {
  config.validate();
  const auto vocab_size = static_cast<std::size_t>(config.vocab_size);
  if (vocab.size() > vocab_size)
    throw Error(ErrorKind::invalid_argument, "the vocabulary has " + std::to_string(vocab.size()) +
                                                 " tokens, more than the model's " +
                                                 std::to_string(vocab_size));
  for (std::size_t i = 0; vocab.size() < vocab_size; ++i) {
    vocab.tokens.push_back("<extra_" + std::to_string(i) + ">");
    if (!vocab.scores.empty()) vocab.scores.push_back(-1e9f);
    if (!vocab.token_types.empty()) vocab.token_types.push_back(std::int32_t(TokenType::unused));
  }

  if (const Architecture* arch = find_architecture(config.architecture);
      arch != nullptr && arch->fused_projections)
    throw Error(ErrorKind::unsupported,
                "synthetic " + config.architecture + " files (fused projections) are not written");
  gguf::Writer out;
  set_gguf_model_metadata(out, gguf_rope_config(config));
  out.set("general.file_type", llama_file_type(type));
  if (type == DType::q8_0 || type == DType::q4_0)
    out.set("general.quantization_version", std::uint32_t{2});
  write_vocabulary(out, vocab);
  const auto specs = model_tensor_specs(config);
  // Experts go into llama.cpp's stacked 3-D tensors (ffn_gate_exps: every expert's ffn_gate.E),
  // the only form its loader reads (fused projections are refused above).
  const auto stacks = fused_members(config, specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const DType stored = synthetic_dtype(s, type);
    const std::size_t bytes = WeightTensor{stored, nullptr, s.rows, s.cols, s.name}.bytes();
    if (const auto part = fused_part(config, s)) {
      if (part->first_row != 0) continue;  // written with the stack's first member
      const std::vector<std::size_t> members = stacks.at(part->gguf);
      out.add_tensor(
          part->gguf, stored, part->file_dims(s.cols), bytes * members.size(),
          [&specs, members, bytes, type, seed](std::span<std::byte> data) {
            for (std::size_t m = 0; m < members.size(); ++m) {
              const TensorSpec& member = specs[members[m]];
              const std::vector<std::byte> t = synthetic_tensor(member, members[m], type, seed);
              if (t.size() != bytes)
                throw Error(ErrorKind::internal, "synthetic tensor size mismatch", {}, member.name);
              std::memcpy(data.data() + m * bytes, t.data(), bytes);
            }
          });
      continue;
    }
    out.add_tensor(
        s.name, stored, s.gguf_dims(), bytes, [s, i, type, seed](std::span<std::byte> data) {
          const std::vector<std::byte> t = synthetic_tensor(s, i, type, seed);
          if (t.size() != data.size())
            throw Error(ErrorKind::internal, "synthetic tensor size mismatch", {}, s.name);
          std::memcpy(data.data(), t.data(), t.size());
        });
  }
  out.write(path);
}

}  // namespace hllm::examples
