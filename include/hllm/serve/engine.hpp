#pragma once
// The continuous-batching engine: requests (a token prompt, sampler parameters, stop tokens, a
// token limit) go in from any thread; step() runs one batched forward pass (model/batch.hpp) for
// every running sequence at once over one paged KV cache, samples each request with its own
// seeded sampler and streams its tokens to its callback.
//
// One step:
//   1. takes in new submissions and cancellations (a cancelled request's blocks are freed);
//   2. schedules, within a budget of max_step_tokens tokens: first every running sequence that
//      is decoding (one token each, so decodes keep flowing), then the running prefills, a chunk
//      each (chunked prefill), then waiting requests, oldest first, while the budget, the
//      sequence limit and the pool allow. An admitted prompt first takes the pool's published
//      blocks of its prefix by reference (prefix caching) and prefills only the rest;
//   3. when a running sequence's next tokens find the pool exhausted, the newest running
//      sequence not yet scheduled in this step is preempted: its blocks are freed and it waits,
//      first in line, to recompute its prompt and generated tokens later. Nothing fails for lack
//      of memory; a request that could never fit (prompt + token limit past the context or the
//      pool) is refused when submitted;
//   4. one forward pass over all scheduled tokens; each sequence whose tokens are all computed
//      samples its next token and applies the stop rules; finished requests free their blocks
//      (published full blocks stay cached for later prompts until the pool needs them).
// The matmuls are batch invariant, so a sequence's logits are the bits it would get alone, and
// a request's tokens do not depend on what else runs, nor on preemption and recomputation.
//
// Thread safety: submit() and cancel() from any thread; step() from one thread at a time (run()
// is such a thread). Callbacks run on the stepping thread, outside the engine's lock; they may
// call submit() and cancel() but not step().

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/generate/generate.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/model/batch.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm {

struct EngineOptions {
  // The KV cache: its element type, and its size as a memory budget in bytes or, if 0, in
  // tokens (0: four sequences of the full context).
  KVType kv_type = KVType::f32;
  std::size_t kv_bytes = 0;
  std::size_t kv_tokens = 0;
  std::size_t block_tokens = kDefaultBlockTokens;
  // Tokens per sequence at most; 0: kDefaultContext or the model's length, whichever is smaller.
  std::size_t context = 0;
  std::size_t max_step_tokens = 256;  // tokens per forward pass, over all sequences
  std::size_t max_sequences = 64;     // sequences running at once
  bool prefix_caching = true;         // reuse published blocks of equal prompt prefixes
  std::size_t threads = 0;            // worker threads; 0: the physical core count
  std::optional<Isa> isa;             // kernels; unset: HLLM_ISA, else the best this CPU has
  bool exact = false;                 // as SessionOptions::exact
};

using RequestId = std::uint64_t;

// What a request gets back when it ends.
struct Completion {
  RequestId id = 0;
  std::vector<std::int32_t> tokens;  // generated, excluding any stop token
  StopReason reason = StopReason::max_tokens;
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;  // prompt tokens taken from the prefix cache, not computed
  std::size_t preemptions = 0;    // times its blocks were freed and it recomputed them
};

struct Request {
  std::vector<std::int32_t> prompt;
  SamplerParams sampler;
  // max_tokens (-1: until a stop token or the context's end), stop_tokens, eos.
  GenerateOptions generate;
  // Each generated token as it comes; returning false cancels the request (reason cancelled).
  std::function<bool(RequestId, std::int32_t)> on_token;
  // The request's end, whatever the reason.
  std::function<void(const Completion&)> on_done;
};

struct EngineStats {
  std::size_t waiting = 0, running = 0;
  std::size_t kv_blocks = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  std::size_t kv_block_bytes = 0;
  std::size_t steps = 0, preemptions = 0, cached_tokens = 0;
};

template <class Spec = DynamicSpec>
class Engine {
 public:
  explicit Engine(const Llama<Spec>& model, EngineOptions options = {})
      : model_(model),
        options_(options),
        context_(resolved_context(options.context, model.config())),
        storage_(options.kv_type, pool_blocks(options, model.config(), context_),
                 options.block_tokens, static_cast<std::size_t>(model.config().n_layers),
                 static_cast<std::size_t>(model.config().n_kv_heads),
                 static_cast<std::size_t>(model.config().resolved_head_dim())),
        allocator_(storage_.n_blocks(), options.block_tokens),
        runner_(model, {.max_tokens = options.max_step_tokens,
                        .threads = options.threads,
                        .isa = options.isa,
                        .exact = options.exact}) {
    storage_.visit([](const auto& s) { s.check_paged_attention(); });
    if (options.max_sequences == 0)
      throw Error(ErrorKind::invalid_argument, "EngineOptions.max_sequences must be positive");
  }
  ~Engine() { stop(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Llama<Spec>& model() const noexcept { return model_; }
  std::size_t context() const noexcept { return context_; }
  // Tokens the pool holds.
  std::size_t kv_capacity_tokens() const noexcept {
    return storage_.n_blocks() * storage_.block_tokens();
  }
  // Tokens one sequence may hold: the context, or the whole pool if that is smaller.
  std::size_t sequence_limit() const noexcept { return std::min(context_, kv_capacity_tokens()); }

  // Queues a request; the next step may admit it. Throws, with nothing queued, for an empty
  // prompt, an invalid token or sampler parameter, or (capacity) a request that could never fit:
  // its prompt and token limit past the context or the whole pool.
  RequestId submit(Request request) {
    if (request.prompt.empty())
      throw Error(ErrorKind::invalid_argument, "a request's prompt is empty");
    model_.check_tokens(request.prompt);
    validate_sampler_params(request.sampler);
    check_generate_options(request.generate, "a request");
    const std::size_t limit = sequence_limit();
    const std::size_t generated =
        request.generate.max_tokens < 0 ? 0 : static_cast<std::size_t>(request.generate.max_tokens);
    if (request.prompt.size() + generated > limit || request.prompt.size() >= limit)
      throw Error(ErrorKind::capacity,
                  "a request of " + std::to_string(request.prompt.size()) + " prompt tokens and " +
                      std::to_string(generated) + " to generate can never fit: the engine holds " +
                      std::to_string(context_) + " tokens per sequence and its KV pool " +
                      std::to_string(kv_capacity_tokens()));
    auto sequence = std::make_unique<Sequence>(std::move(request), options_.block_tokens);
    std::lock_guard lock(mutex_);
    const RequestId id = next_id_++;
    sequence->id = id;
    submitted_.push_back(std::move(sequence));
    wake_.notify_all();
    return id;
  }

  // Ends a request at the next step (reason cancelled) and frees its blocks; unknown or finished
  // ids are ignored.
  void cancel(RequestId id) {
    std::lock_guard lock(mutex_);
    cancelled_.push_back(id);
    wake_.notify_all();
  }

  // One scheduling step and forward pass (see the top of this file). Returns false, having done
  // nothing, when no request is waiting or running.
  bool step() {
    std::lock_guard stepping(step_mutex_);
    take_submissions();
    if (waiting_.empty() && running_.empty()) return false;
    ++stats_.steps;
    std::vector<Scheduled> scheduled = schedule();
    if (!scheduled.empty()) forward(scheduled);
    return true;
  }

  // Steps until no request is waiting or running.
  void run_until_idle() {
    while (step()) {
    }
  }

  // Steps on a thread of its own until stop(): the server loop. It sleeps while idle.
  void start() {
    std::lock_guard lock(mutex_);
    if (worker_.joinable()) return;
    stopping_ = false;
    worker_ = std::thread([this] { serve(); });
  }
  // Stops the thread start() began (the requests stay queued).
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      wake_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  EngineStats stats() const {
    std::lock_guard stepping(step_mutex_);
    EngineStats s = stats_;
    {
      std::lock_guard lock(mutex_);
      s.waiting = waiting_.size() + submitted_.size();
    }
    s.running = running_.size();
    s.kv_blocks = allocator_.n_blocks();
    s.kv_blocks_used = allocator_.n_referenced();
    s.kv_blocks_cached = allocator_.n_cached();
    s.kv_block_bytes = storage_.block_bytes();
    return s;
  }

 private:
  struct Sequence {
    Sequence(Request r, std::size_t block_tokens)
        : request(std::move(r)), sampler(request.sampler), table(block_tokens) {
      tokens = request.prompt;
      completion.prompt_tokens = request.prompt.size();
    }
    RequestId id = 0;
    Request request;
    Sampler sampler;
    KVBlockTable table;
    std::vector<std::int32_t> tokens;  // prompt, then every generated token
    Completion completion;
    bool admitted_once = false;
  };
  // The loop of start()'s thread.
  void serve() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(
            lock, [&] { return stopping_ || !submitted_.empty() || !cancelled_.empty() || busy_; });
        if (stopping_) return;
      }
      const bool more = step() && has_work();
      std::lock_guard lock(mutex_);
      busy_ = more;
    }
  }

  bool has_work() const {
    std::lock_guard stepping(step_mutex_);
    return !waiting_.empty() || !running_.empty();
  }

  struct Scheduled {
    Sequence* sequence;
    std::size_t n_tokens;
  };

  static std::size_t pool_blocks(const EngineOptions& o, const ModelConfig& c,
                                 std::size_t context) {
    const auto layers = static_cast<std::size_t>(c.n_layers);
    const auto heads = static_cast<std::size_t>(c.n_kv_heads);
    const auto head_dim = static_cast<std::size_t>(c.resolved_head_dim());
    if (o.kv_bytes != 0)
      return AnyPagedKVStorage::blocks_for_bytes(o.kv_type, o.kv_bytes, o.block_tokens, layers,
                                                 heads, head_dim);
    return PagedKVStorage<float>::blocks_for_tokens(o.kv_tokens ? o.kv_tokens : 4 * context,
                                                    o.block_tokens);
  }
  // Moves new submissions to the waiting queue and ends cancelled requests.
  void take_submissions() {
    std::vector<std::unique_ptr<Sequence>> submitted;
    std::vector<RequestId> cancelled;
    {
      std::lock_guard lock(mutex_);
      submitted.swap(submitted_);
      cancelled.swap(cancelled_);
    }
    for (auto& s : submitted) waiting_.push_back(std::move(s));
    for (RequestId id : cancelled) {
      for (auto* queue : {&running_, &waiting_}) {
        const auto it =
            std::find_if(queue->begin(), queue->end(), [&](const auto& s) { return s->id == id; });
        if (it == queue->end()) continue;
        std::unique_ptr<Sequence> s = std::move(*it);
        queue->erase(it);
        finish(std::move(s), StopReason::cancelled);
        break;
      }
    }
  }

  void copy_block(BlockId from, BlockId to) { storage_.copy_block(from, to); }

  // Frees a running sequence's blocks and puts it first in line, to recompute later.
  void preempt(typename std::deque<std::unique_ptr<Sequence>>::iterator it) {
    std::unique_ptr<Sequence> s = std::move(*it);
    running_.erase(it);
    s->table.release_all(allocator_);
    ++s->completion.preemptions;
    ++stats_.preemptions;
    waiting_.push_front(std::move(s));
  }

  std::vector<Scheduled> schedule() {
    std::vector<Scheduled> scheduled;
    std::size_t budget = runner_.max_tokens();
    const auto copy = [this](BlockId from, BlockId to) { copy_block(from, to); };
    // Running sequences: decodes (one pending token) first, then prefill chunks; oldest first.
    for (const bool decoding : {true, false}) {
      for (std::size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence& s = *running_[i];
        const std::size_t pending = s.tokens.size() - s.table.length();
        if ((pending == 1) != decoding) {
          ++i;
          continue;
        }
        const std::size_t n = std::min(pending, budget);
        bool ready = s.table.prepare_append(allocator_, n, copy);
        // Out of blocks: preempt the newest running sequence not scheduled yet, else this one.
        while (!ready) {
          std::size_t victim = running_.size();
          while (victim-- > i + 1 && already(scheduled, *running_[victim])) {
          }
          if (victim <= i) break;
          preempt(running_.begin() + static_cast<std::ptrdiff_t>(victim));
          ready = s.table.prepare_append(allocator_, n, copy);
        }
        if (!ready) {
          preempt(running_.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        scheduled.push_back({&s, n});
        budget -= n;
        ++i;
      }
    }
    // Waiting requests, oldest (and preempted) first, while everything allows.
    while (!waiting_.empty() && budget > 0 && running_.size() < options_.max_sequences) {
      Sequence& s = *waiting_.front();
      std::size_t reused = 0;
      if (options_.prefix_caching) reused = s.table.reuse_prefix(allocator_, s.tokens);
      const std::size_t n = std::min(s.tokens.size() - reused, budget);
      if (!s.table.prepare_append(allocator_, n, copy)) {
        s.table.release_all(allocator_);
        break;  // the pool is full for now; running sequences will free blocks
      }
      if (!s.admitted_once) {
        s.completion.cached_tokens = reused;
        stats_.cached_tokens += reused;
        s.admitted_once = true;
      }
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      scheduled.push_back({running_.back().get(), n});
      budget -= n;
    }
    return scheduled;
  }

  static bool already(const std::vector<Scheduled>& scheduled, const Sequence& s) {
    return std::any_of(scheduled.begin(), scheduled.end(),
                       [&](const Scheduled& e) { return e.sequence == &s; });
  }

  void forward(const std::vector<Scheduled>& scheduled) {
    std::vector<BatchEntry> entries;
    entries.reserve(scheduled.size());
    for (const Scheduled& e : scheduled) {
      Sequence& s = *e.sequence;
      entries.push_back(
          {&s.table, std::span(s.tokens).subspan(s.table.length(), e.n_tokens), Logits::last});
    }
    const std::span<const float> logits = runner_.forward(entries, storage_, allocator_);
    const std::size_t vocab = model_.vocab_size();
    std::vector<std::pair<Sequence*, StopReason>> done;
    for (std::size_t i = 0; i < scheduled.size(); ++i) {
      Sequence& s = *scheduled[i].sequence;
      if (options_.prefix_caching) s.table.publish_full_blocks(allocator_, s.tokens);
      if (s.table.length() < s.tokens.size()) continue;  // a prefill chunk short of the end
      if (const std::optional<StopReason> reason = sample(s, logits.subspan(i * vocab, vocab)))
        done.emplace_back(&s, *reason);
    }
    for (const auto& [sequence, reason] : done) {
      const auto it = std::find_if(running_.begin(), running_.end(),
                                   [&](const auto& s) { return s.get() == sequence; });
      std::unique_ptr<Sequence> s = std::move(*it);
      running_.erase(it);
      finish(std::move(s), reason);
    }
  }

  // Samples s's next token from `logits` and applies the stop rules (as generate() does);
  // returns why s ends, if it does.
  std::optional<StopReason> sample(Sequence& s, std::span<const float> logits) {
    const GenerateOptions& g = s.request.generate;
    if (g.max_tokens == 0) return StopReason::max_tokens;
    const std::int32_t token = s.sampler.sample(logits, s.tokens);
    if (const std::optional<StopReason> stop = stop_before(token, g)) return stop;
    s.tokens.push_back(token);
    s.completion.tokens.push_back(token);
    if (s.request.on_token && !s.request.on_token(s.id, token)) return StopReason::cancelled;
    if (g.max_tokens > 0 && s.completion.tokens.size() == static_cast<std::size_t>(g.max_tokens))
      return StopReason::max_tokens;
    if (s.tokens.size() >= sequence_limit()) return StopReason::context_full;
    return std::nullopt;
  }

  void finish(std::unique_ptr<Sequence> s, StopReason reason) {
    s->table.release_all(allocator_);
    s->completion.id = s->id;
    s->completion.reason = reason;
    if (s->request.on_done) s->request.on_done(s->completion);
  }

  const Llama<Spec>& model_;
  EngineOptions options_;
  std::size_t context_;
  AnyPagedKVStorage storage_;
  KVBlockAllocator allocator_;
  BatchRunner<Spec> runner_;
  // The stepping thread's state (under step_mutex_).
  std::deque<std::unique_ptr<Sequence>> waiting_, running_;
  EngineStats stats_;
  mutable std::mutex step_mutex_;
  // Shared with submit() and cancel() (under mutex_).
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Sequence>> submitted_;
  std::vector<RequestId> cancelled_;
  RequestId next_id_ = 1;
  bool stopping_ = false, busy_ = false;
  std::thread worker_;
};

}  // namespace hllm
