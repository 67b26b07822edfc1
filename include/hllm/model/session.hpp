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
#include "hllm/model/forward_context.hpp"
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
  // The KV cache's element type; unset: the model's Spec::kv_type (f32 for Llama<>). f16 and
  // bf16 take half of f32's memory, q8_0 and fp8 27% (34 bytes per 32 values), q4_0 14% (18
  // bytes per 32 values); the block types need head_dim to be a multiple of 32.
  std::optional<KVType> kv_type;
};

// Which logits prefill returns.
enum class Logits { last, all };

// Longest context a session may request: 2^24 tokens, far past any model and small enough that
// cache sizes cannot overflow.
inline constexpr std::size_t kMaxContext = std::size_t{1} << 24;

// The context a sequence gets for a request of `context` tokens: 0 is kDefaultContext or the
// model's length, whichever is smaller; any other value as is. Throws invalid_argument past
// kMaxContext.
inline std::size_t resolved_context(std::size_t context, const ModelConfig& config) {
  const std::size_t resolved =
      context ? context
              : std::min(kDefaultContext, static_cast<std::size_t>(config.context_length));
  if (resolved > kMaxContext)
    throw Error(ErrorKind::invalid_argument, "context of " + std::to_string(resolved) +
                                                 " tokens exceeds the maximum of " +
                                                 std::to_string(kMaxContext));
  return resolved;
}

template <class Spec = DynamicSpec>
class Session {
 public:
  explicit Session(const Llama<Spec>& model, SessionOptions options = {})
      : model_(model),
        cache_(options.kv_type.value_or(kv_type_of<typename Spec::kv_type>()),
               static_cast<std::size_t>(model.config().n_layers),
               static_cast<std::size_t>(model.config().n_kv_heads),
               static_cast<std::size_t>(model.config().resolved_head_dim()),
               resolved_context(options.context, model.config()), model.config().kv_value_rows()),
        logits_(model.vocab_size()),
        forward_(model.config(), model.rope().rot_dims(),
                 checked_forward_tokens(options.max_batch, "max_batch"), options.threads,
                 options.isa, options.exact, token_panel_needs(model.weights())) {}

  const Llama<Spec>& model() const noexcept { return model_; }
  // Tokens evaluated so far: the position the next token will take.
  std::size_t position() const noexcept { return cache_.length(); }
  std::size_t context() const noexcept { return cache_.capacity(); }
  const AnyKVCache& kv_cache() const noexcept { return cache_; }
  KVType kv_type() const noexcept { return cache_.type(); }
  std::size_t threads() const noexcept { return forward_.threads(); }
  Isa isa() const noexcept { return forward_.isa(); }

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
  const Llama<Spec>& model_;
  AnyKVCache cache_;
  AlignedBuffer<float> logits_;    // [vocab]
  std::vector<float> all_logits_;  // [n_tokens][vocab], only for Logits::all
  ForwardContext forward_;         // chunks of up to max_batch tokens
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
    const std::size_t n = std::min(forward_.max_tokens(), tokens.size() - done);
    float* out = all ? all_logits_.data() + done * vocab : logits_.data();
    cache_.visit([&](auto& cache) {
      model_.forward(forward_.compute(), tokens.subspan(done, n), position(), cache,
                     forward_.scratch(), out, all);
    });
    done += n;
  }
  if (all) return all_logits_;
  return logits_.span();
}

// The dynamic spec's sessions are compiled once per program, by hllm/implementation.hpp (its part
// model.hpp): prefill is defined out of the class, so this declaration
// keeps every other file from instantiating it and, through it, the model code for each of the
// six cache types.
extern template class Session<DynamicSpec>;

}  // namespace hllm
