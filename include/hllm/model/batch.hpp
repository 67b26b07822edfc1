#pragma once
// The batched forward pass: one call evaluates several sequences of a paged KV cache at once,
// each entry a sequence's next tokens (a prefill chunk or a single decode token) at its own
// positions. Every projection runs as one matmul over all the batch's tokens, so each weight is
// read once per step whatever the number of sequences; RoPE, the cache writes and attention run
// per token at its own sequence's positions, through its block table.
//
// A sequence's logits do not depend on the batch it runs in: the matmul kernels are batch
// invariant (a token's outputs depend on its own activations only, never on how many tokens
// share the call or where it sits among them; tests/test_kernels.cpp checks every kernel), the
// norms and RoPE are per token, and attention reads the sequence's own rows in position order,
// as the contiguous cache's kernel does. So a sequence's logits are bit for bit the same alone
// or in any batch, in any order, with any thread count, and equal to a Session's.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/model/forward_context.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/kv_chunk.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm {

// One sequence's part of a batch: `tokens` go to positions table->length().. of the sequence
// whose block table is `table` (readied by KVBlockTable::prepare_append).
struct BatchEntry {
  KVBlockTable* table = nullptr;
  std::span<const std::int32_t> tokens;
  Logits logits = Logits::last;  // the last token's logits, or every token's
};

struct BatchOptions {
  std::size_t max_tokens = 256;  // tokens per call, summed over the entries
  std::size_t threads = 0;       // worker threads (caller included); 0: the physical core count
  std::optional<Isa> isa;        // kernels to run; unset: HLLM_ISA, else the best this CPU has
  bool exact = false;            // as SessionOptions::exact
};

// Runs batches of a model over paged caches: owns the thread pool and every activation buffer,
// sized once for options.max_tokens, and borrows the model (which must outlive it). One
// BatchRunner serves any number of pools and block tables, one call at a time.
template <class Spec = DynamicSpec>
class BatchRunner {
 public:
  explicit BatchRunner(const Llama<Spec>& model, BatchOptions options = {})
      : model_(model),
        forward_(model.config(), model.rope().rot_dims(),
                 checked_forward_tokens(options.max_tokens, "a batch's max_tokens"),
                 options.threads, options.isa, options.exact, token_panel_needs(model.weights())),
        tokens_(forward_.max_tokens()),
        placements_(forward_.max_tokens()),
        logits_(forward_.max_tokens() * model.vocab_size()) {}

  const Llama<Spec>& model() const noexcept { return model_; }
  std::size_t max_tokens() const noexcept { return forward_.max_tokens(); }
  std::size_t threads() const noexcept { return forward_.threads(); }
  Isa isa() const noexcept { return forward_.isa(); }

  // Evaluates every entry's tokens, stores their keys and values in `storage` through the
  // entries' tables and commits them (each table's length grows by its entry's tokens). Returns
  // the logits, entry after entry: one row ([vocab]) for Logits::last, one per token for
  // Logits::all; the span stays valid until the next call. The tables' blocks must come from
  // `allocator`, whose blocks `storage` holds. Throws, with nothing changed, on invalid tokens,
  // a table without room or writing into a block it shares, the same table twice, more than
  // max_tokens tokens, or a pool whose shape is not the model's.
  template <class KV>
  std::span<const float> forward(std::span<const BatchEntry> entries, PagedKVStorage<KV>& storage,
                                 const KVBlockAllocator& allocator) {
    const std::size_t n = lay_out(entries, storage, allocator);
    PagedKVChunk<KV> chunk(storage, std::span<const PagedToken>(placements_.data(), n));
    model_.forward_hidden(forward_.compute(), std::span<const std::int32_t>(tokens_.data(), n),
                          chunk, forward_.scratch());
    for (const BatchEntry& e : entries) e.table->advance(e.tokens.size());
    // The rows whose logits were asked for, moved to the front in order (each row moves to an
    // index at or below its own, so in place), then one output matmul over them.
    const std::size_t dim = static_cast<std::size_t>(model_.config().dim);
    float* hidden = forward_.scratch().residual.data();
    std::size_t rows = 0, t = 0;
    for (const BatchEntry& e : entries) {
      const std::size_t first = e.logits == Logits::all ? 0 : e.tokens.size() - 1;
      for (std::size_t j = first; j < e.tokens.size(); ++j, ++rows)
        if (rows != t + j) std::copy_n(hidden + (t + j) * dim, dim, hidden + rows * dim);
      t += e.tokens.size();
    }
    model_.logits_of_hidden(forward_.compute(), forward_.scratch(), 0, rows, logits_.data());
    return {logits_.data(), rows * model_.vocab_size()};
  }

  // The same for a pool whose element type is chosen at run time.
  std::span<const float> forward(std::span<const BatchEntry> entries, AnyPagedKVStorage& storage,
                                 const KVBlockAllocator& allocator) {
    return storage.visit([&](auto& typed) { return forward(entries, typed, allocator); });
  }

 private:
  // Checks the batch and lays its tokens out one entry after another in tokens_ and
  // placements_; returns their count.
  template <class KV>
  std::size_t lay_out(std::span<const BatchEntry> entries, const PagedKVStorage<KV>& storage,
                      const KVBlockAllocator& allocator) {
    const ModelConfig& c = model_.config();
    if (storage.n_layers() != static_cast<std::size_t>(c.n_layers) ||
        storage.n_kv_heads() != static_cast<std::size_t>(c.n_kv_heads) ||
        storage.head_dim() != static_cast<std::size_t>(c.resolved_head_dim()))
      throw Error(ErrorKind::invalid_argument,
                  "a paged KV cache of " + std::to_string(storage.n_layers()) + " layers × " +
                      std::to_string(storage.n_kv_heads()) + " heads × " +
                      std::to_string(storage.head_dim()) + " dims does not fit this model's " +
                      std::to_string(c.n_layers) + " × " + std::to_string(c.n_kv_heads) + " × " +
                      std::to_string(c.resolved_head_dim()));
    if (allocator.n_blocks() != storage.n_blocks() ||
        allocator.block_tokens() != storage.block_tokens())
      throw Error(ErrorKind::invalid_argument,
                  "the block allocator (" + std::to_string(allocator.n_blocks()) + " blocks of " +
                      std::to_string(allocator.block_tokens()) +
                      " tokens) does not describe the KV storage (" +
                      std::to_string(storage.n_blocks()) + " of " +
                      std::to_string(storage.block_tokens()) + ")");
    storage.check_paged_attention();
    if (entries.empty()) throw Error(ErrorKind::invalid_argument, "a batch of no entries");
    std::size_t n = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const BatchEntry& e = entries[i];
      const std::string which = "batch entry " + std::to_string(i);
      if (e.table == nullptr || e.tokens.empty())
        throw Error(ErrorKind::invalid_argument, which + " has no block table or no tokens");
      for (std::size_t j = 0; j < i; ++j)
        if (entries[j].table == e.table)
          throw Error(ErrorKind::invalid_argument, which + " continues the sequence of entry " +
                                                       std::to_string(j) +
                                                       ": one entry per sequence and step");
      if (e.tokens.size() > max_tokens() - n)
        throw Error(ErrorKind::capacity, "a batch of more than " + std::to_string(max_tokens()) +
                                             " tokens (the runner's max_tokens)");
      model_.check_tokens(e.tokens);
      if (e.table->block_tokens() != storage.block_tokens())
        throw Error(ErrorKind::invalid_argument, which + "'s block table has blocks of " +
                                                     std::to_string(e.table->block_tokens()) +
                                                     " tokens, the pool " +
                                                     std::to_string(storage.block_tokens()));
      if (!e.table->owns_append(allocator, e.tokens.size()))
        throw Error(ErrorKind::invalid_argument,
                    which + ": its block table lacks room for " + std::to_string(e.tokens.size()) +
                        " tokens at position " + std::to_string(e.table->length()) +
                        " or shares a block they fall in (KVBlockTable::prepare_append first)");
      for (std::size_t j = 0; j < e.tokens.size(); ++j, ++n) {
        tokens_[n] = e.tokens[j];
        placements_[n] = {e.table, e.table->length() + j};
      }
    }
    return n;
  }

  const Llama<Spec>& model_;
  ForwardContext forward_;
  std::vector<std::int32_t> tokens_;    // [max_tokens] the batch's tokens, entry by entry
  std::vector<PagedToken> placements_;  // [max_tokens] their sequences and positions
  AlignedBuffer<float> logits_;         // [max_tokens][vocab]
};

}  // namespace hllm
