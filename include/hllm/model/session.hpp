#pragma once
// A Session is one sequence being evaluated: it owns the KV cache and every activation buffer,
// and borrows the model's read-only weights. Sessions never share mutable state, so several can
// run on one model from different threads. The model must outlive its sessions.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/thread_pool.hpp"
#include "hllm/kernels/compute.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/nn/any_kv_cache.hpp"

namespace hllm {

// The context a session gets unless it asks: llama.cpp's default, or less if the model's own
// context length is shorter. A model's full length (8192 tokens for SmolLM2) costs 377 MB of f32
// cache per session, more than the 94 MB model itself.
inline constexpr std::size_t kDefaultContext = 4096;

struct SessionOptions {
  // KV cache capacity in tokens; 0: kDefaultContext or the model's context length, whichever is
  // smaller. Any other value is taken as is (past the model's length RoPE extrapolates).
  std::size_t context = 0;
  std::size_t max_batch = 64;  // tokens per forward chunk during prefill
  std::size_t threads = 0;     // worker threads (caller included); 0: the physical core count
  std::optional<Isa> isa;      // kernels to run; unset: HLLM_ISA, else the best this CPU has
  // Keep activations in float32 for quantized weights too (the exact reference path, dequantizing
  // each weight row; slow). Off: activations are quantized to 8 bits for integer dot products,
  // as llama.cpp does.
  bool exact = false;
  // The KV cache's element type; unset: the model's Spec::kv_type (f32 for Llama<>). q8_0 takes
  // 27% of f32's memory; f16 and bf16 half.
  std::optional<KVType> kv_type;
};

// Which logits prefill returns.
enum class Logits { last, all };

// The most input features any matmul of the model has: dim (Q, K, V, gate, up, output), q_dim
// (the attention output), ffn_dim (down). Sizes the kernels' scratch and the 8-bit activations.
inline std::size_t widest_matmul_input(const ModelConfig& c) {
  return static_cast<std::size_t>(std::max({c.dim, c.q_dim(), c.ffn_dim}));
}

// Longest context a session may request: 2^24 tokens, far past any model and small enough that
// cache sizes cannot overflow.
inline constexpr std::size_t kMaxContext = std::size_t{1} << 24;

template <class Spec = DynamicSpec>
class Session {
 public:
  explicit Session(const Llama<Spec>& model, SessionOptions options = {})
      : model_(model),
        max_batch_(checked_batch(options.max_batch)),
        cache_(options.kv_type.value_or(kv_type_of<typename Spec::kv_type>()),
               static_cast<std::size_t>(model.config().n_layers),
               static_cast<std::size_t>(model.config().n_kv_heads),
               static_cast<std::size_t>(model.config().resolved_head_dim()),
               checked_context(options.context, model.config())),
        scratch_(model.config(), max_batch_, model.rope().rot_dims() / 2),
        logits_(model.vocab_size()),
        activations_(options.exact ? 0 : max_batch_ * widest_input(model.config()) / 32),
        pool_(options.threads ? options.threads : default_thread_count()),
        compute_(options.isa ? kernels::table_for(*options.isa) : kernels::active(), pool_,
                 activations_.span(), {widest_matmul_input(model.config()), max_batch_}) {}

  const Llama<Spec>& model() const noexcept { return model_; }
  // Tokens evaluated so far: the position the next token will take.
  std::size_t position() const noexcept { return cache_.length(); }
  std::size_t context() const noexcept { return cache_.capacity(); }
  const AnyKVCache& kv_cache() const noexcept { return cache_; }
  KVType kv_type() const noexcept { return cache_.type(); }
  std::size_t threads() const noexcept { return pool_.size(); }
  Isa isa() const noexcept { return compute_.isa(); }

  // Evaluates `tokens` after those already in the cache. Returns the last token's logits
  // ([vocab]) or, with Logits::all, every token's ([n_tokens][vocab]). The span stays valid
  // until the next call. Nothing changes if the tokens are invalid or do not fit.
  std::span<const float> prefill(std::span<const std::int32_t> tokens, Logits which = Logits::last);

  // Evaluates one token; returns its logits ([vocab]).
  std::span<const float> decode(std::int32_t token) { return prefill(std::span(&token, 1)); }

  // Forgets the whole sequence (the buffers are kept).
  void reset() noexcept { cache_.clear(); }
  // Keeps only the first `length` tokens, e.g. to regenerate from an earlier point.
  void rewind(std::size_t length) { cache_.truncate(length); }

 private:
  static std::size_t checked_batch(std::size_t max_batch) {
    if (max_batch == 0 || max_batch > 65536)
      throw Error(ErrorKind::invalid_argument,
                  "max_batch must be in [1, 65536], got " + std::to_string(max_batch));
    return max_batch;
  }
  // The same with a block to spare (for the 8-bit activation scratch).
  static std::size_t widest_input(const ModelConfig& c) { return widest_matmul_input(c) + 32; }
  static std::size_t checked_context(std::size_t context, const ModelConfig& config) {
    const std::size_t resolved =
        context ? context
                : std::min(kDefaultContext, static_cast<std::size_t>(config.context_length));
    if (resolved > kMaxContext)
      throw Error(ErrorKind::invalid_argument, "context of " + std::to_string(resolved) +
                                                   " tokens exceeds the maximum of " +
                                                   std::to_string(kMaxContext));
    return resolved;
  }

  const Llama<Spec>& model_;
  std::size_t max_batch_;
  AnyKVCache cache_;
  ForwardScratch scratch_;
  AlignedBuffer<float> logits_;            // [vocab]
  std::vector<float> all_logits_;          // [n_tokens][vocab], only for Logits::all
  AlignedBuffer<BlockQ8Act> activations_;  // [max_batch][widest input / 32]
  ThreadPool pool_;
  Compute compute_;
};

template <class Spec>
std::span<const float> Session<Spec>::prefill(std::span<const std::int32_t> tokens, Logits which) {
  if (tokens.empty()) throw Error(ErrorKind::invalid_argument, "prefill of zero tokens");
  model_.check_tokens(tokens);
  if (position() > context() || tokens.size() > context() - position())
    throw Error(ErrorKind::capacity, std::to_string(tokens.size()) + " tokens at position " +
                                         std::to_string(position()) + " exceed the context of " +
                                         std::to_string(context()) + " tokens");
  const std::size_t vocab = model_.vocab_size();
  const bool all = which == Logits::all;
  if (all) all_logits_.resize(tokens.size() * vocab);
  for (std::size_t done = 0; done < tokens.size();) {
    const std::size_t n = std::min(max_batch_, tokens.size() - done);
    float* out = all ? all_logits_.data() + done * vocab : logits_.data();
    cache_.visit([&](auto& cache) {
      model_.forward(compute_, tokens.subspan(done, n), position(), cache, scratch_, out, all);
    });
    done += n;
  }
  if (all) return all_logits_;
  return logits_.span();
}

// The dynamic spec's sessions are compiled once per program, in the translation unit that
// includes hllm/implementation.hpp: prefill is defined out of the class, so this declaration
// keeps every other file from instantiating it and, through it, the model code for each of the
// four cache types.
extern template class Session<DynamicSpec>;

}  // namespace hllm
