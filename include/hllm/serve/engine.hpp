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
// Beyond the tokens:
//   - parallel sampling: submit_parallel() computes one prompt once and forks the sequence into
//     n that share its blocks (copy-on-write), each sampled with its own seed;
//   - text: with a tokenizer (EngineOptions::tokenizer) the generated tokens are decoded as
//     they come, to Completion::text and the on_text stream, and stop strings end a request;
//   - context shift (EngineOptions::context_shift): a sequence that fills its context keeps its
//     first n_keep tokens, drops half of the rest and goes on (nn/kv_shift.hpp), as llama.cpp;
//   - sliding windows: the blocks of a sliding-window model's sequence that no later token can
//     see are freed as it goes, so its memory is bounded by the window, not its length;
//   - saved prefixes: save_prefix() writes a prompt prefix's KV blocks to a file (io/
//     kv_state_file.hpp) and load_prefix() puts them back into the prefix cache, so a long
//     system prompt is computed once per deployment rather than once per engine.
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
#include "hllm/generate/stop_strings.hpp"
#include "hllm/io/kv_state_file.hpp"
#include "hllm/model/batch.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/kv_shift.hpp"
#include "hllm/nn/paged_kv_storage.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"

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
  // Decodes generated tokens (Completion::text, Request::on_text, stop strings); must outlive
  // the engine. Unset: requests get tokens only.
  const Tokenizer* tokenizer = nullptr;
  // A sequence that fills its context drops half of its tokens after Request::n_keep and goes
  // on, instead of ending with context_full. Not for sliding-window models.
  bool context_shift = false;
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
  std::size_t context_shifts = 0;
  // The generated text (with EngineOptions::tokenizer), ending before a stop string.
  std::string text;
};

struct Request {
  std::vector<std::int32_t> prompt;
  SamplerParams sampler;
  // max_tokens (-1: until a stop token or the context's end), stop_tokens, eos.
  GenerateOptions generate;
  // Texts that end the request when the generated text contains one (reason stop_string); the
  // text before it is the completion's. Needs EngineOptions::tokenizer.
  std::vector<std::string> stop_strings;
  // With EngineOptions::context_shift: the prompt tokens a context shift keeps (a system prompt).
  std::size_t n_keep = 0;
  // Each generated token as it comes; returning false cancels the request (reason cancelled).
  std::function<bool(RequestId, std::int32_t)> on_token;
  // The generated text as it becomes final (needs EngineOptions::tokenizer): always whole UTF-8
  // characters, and a tail that could begin a stop string is held back until it cannot.
  // Returning false cancels the request.
  std::function<bool(RequestId, std::string_view)> on_text;
  // The request's end, whatever the reason.
  std::function<void(const Completion&)> on_done;
};

struct EngineStats {
  std::size_t waiting = 0, running = 0;
  std::size_t kv_blocks = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  std::size_t kv_block_bytes = 0;
  std::size_t steps = 0, preemptions = 0, cached_tokens = 0, context_shifts = 0;
  std::size_t tokens_computed = 0;     // run through the model, prompts and decodes
  std::size_t kv_blocks_released = 0;  // given back outside sliding windows
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
                 static_cast<std::size_t>(model.config().resolved_head_dim()),
                 model.config().kv_value_rows()),
        allocator_(storage_.n_blocks(), options.block_tokens),
        runner_(model, {.max_tokens = options.max_step_tokens,
                        .threads = options.threads,
                        .isa = options.isa,
                        .exact = options.exact}) {
    storage_.visit([](const auto& s) { s.check_paged_attention(); });
    if (options.max_sequences == 0)
      throw Error(ErrorKind::invalid_argument, "EngineOptions.max_sequences must be positive");
    if (options.context_shift && window() > 0)
      throw Error(ErrorKind::unsupported,
                  "EngineOptions.context_shift with a sliding-window model (window " +
                      std::to_string(window()) + "): its released blocks cannot be shifted");
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
  // prompt, an invalid token or sampler parameter, stop strings or on_text without a tokenizer,
  // an n_keep past the prompt, or (capacity) a request that could never fit: its prompt and
  // token limit past the context (without context shift) or the whole pool.
  RequestId submit(Request request) { return submit_parallel(std::move(request), 1).front(); }

  // Queues n requests with one prompt, for parallel sampling: the prompt is computed once, then
  // the sequence forks into n sharing its blocks (a block is copied only when one of them
  // writes into it), and request i samples with seed request.sampler.seed + i. Returns their
  // ids in that order; each gets its own callbacks' calls and Completion. The checks of submit().
  std::vector<RequestId> submit_parallel(Request request, std::size_t n) {
    if (n == 0) throw Error(ErrorKind::invalid_argument, "submit_parallel of 0 requests");
    check_request(request);
    std::vector<std::unique_ptr<Sequence>> group;
    group.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      Request copy = i + 1 < n ? request : std::move(request);
      copy.sampler.seed += i;
      group.push_back(std::make_unique<Sequence>(std::move(copy), options_));
    }
    std::vector<RequestId> ids;
    std::lock_guard lock(mutex_);
    for (auto& sequence : group) {
      sequence->id = next_id_++;
      ids.push_back(sequence->id);
    }
    std::unique_ptr<Sequence> first = std::move(group.front());
    for (std::size_t i = 1; i < n; ++i) first->forks.push_back(std::move(group[i]));
    submitted_.push_back(std::move(first));
    wake_.notify_all();
    return ids;
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

  // Computes the KV of `tokens` (a prompt prefix, e.g. a system prompt) in blocks of the pool,
  // writes them with the tokens to `path` (io/kv_state_file.hpp's format, replacing the file
  // only once it is whole) and leaves the full blocks in the prefix cache. Runs between steps.
  // Throws for invalid tokens, (capacity) a prefix past the context or the blocks free now, and
  // (io) a file that cannot be written.
  void save_prefix(std::span<const std::int32_t> tokens, const std::string& path) {
    std::lock_guard stepping(step_mutex_);
    if (tokens.empty()) throw Error(ErrorKind::invalid_argument, "save_prefix of no tokens");
    model_.check_tokens(tokens);
    KVBlockTable table(options_.block_tokens);
    try {
      if (tokens.size() > sequence_limit() || !table.reserve(allocator_, tokens.size()))
        throw Error(ErrorKind::capacity,
                    "save_prefix of " + std::to_string(tokens.size()) +
                        " tokens: the engine holds " + std::to_string(sequence_limit()) +
                        " tokens per sequence and " +
                        std::to_string(allocator_.n_available() * options_.block_tokens) +
                        " in free blocks now");
      const auto copy = [this](BlockId from, BlockId to) { copy_block(from, to); };
      for (std::size_t at = 0; at < tokens.size();) {
        const std::size_t n = std::min(runner_.max_tokens(), tokens.size() - at);
        if (!table.prepare_append(allocator_, n, copy))
          throw Error(ErrorKind::internal, "save_prefix's reserved blocks ran short");
        const BatchEntry entry{&table, tokens.subspan(at, n), Logits::last};
        stats_.tokens_computed += n;
        (void)runner_.forward(std::span(&entry, 1), storage_, allocator_);
        at += n;
      }
      save_kv_state(path, tokens, table, storage_, state_identity());
      if (options_.prefix_caching) table.publish_full_blocks(allocator_, tokens);
    } catch (...) {
      table.release_all(allocator_);
      throw;
    }
    table.release_all(allocator_);
  }

  // Reads a file save_prefix() wrote (by this model, with this KV type and block size) and puts
  // its full blocks into the prefix cache: later prompts starting with its tokens take them by
  // reference (Completion::cached_tokens) instead of computing them. Cached blocks are evicted,
  // oldest first, when the pool needs room, like any others. Returns the tokens. Throws, with
  // the pool unchanged, for a file that is corrupt, cut short or from another model or cache
  // (hllm::Error naming the file, the field and the offset), or (capacity) too few free blocks.
  std::vector<std::int32_t> load_prefix(const std::string& path) {
    std::lock_guard stepping(step_mutex_);
    if (!options_.prefix_caching)
      throw Error(ErrorKind::invalid_argument, "load_prefix needs EngineOptions.prefix_caching");
    const KVStateFile state = KVStateFile::open(path, storage_, state_identity(), sequence_limit());
    KVBlockTable table(options_.block_tokens);
    if (!table.reserve(allocator_, state.n_tokens()))
      throw Error(ErrorKind::capacity, path + ": its " + std::to_string(state.n_tokens()) +
                                           " tokens need more KV blocks than are free now");
    try {
      state.restore(table, storage_, allocator_);
      table.publish_full_blocks(allocator_, state.tokens());
    } catch (...) {
      table.release_all(allocator_);
      throw;
    }
    table.release_all(allocator_);
    return {state.tokens().begin(), state.tokens().end()};
  }

  EngineStats stats() const {
    std::lock_guard stepping(step_mutex_);
    EngineStats s = stats_;
    const auto with_forks = [](const auto& queue) {
      std::size_t n = 0;
      for (const auto& sequence : queue) n += 1 + sequence->forks.size();
      return n;
    };
    {
      std::lock_guard lock(mutex_);
      s.waiting = with_forks(waiting_) + with_forks(submitted_);
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
    Sequence(Request r, const EngineOptions& options)
        : request(std::move(r)),
          sampler(request.sampler),
          table(options.block_tokens),
          stops(request.stop_strings) {
      tokens = request.prompt;
      completion.prompt_tokens = request.prompt.size();
      if (options.tokenizer) {
        // Decoded as the prompt's continuation: a first piece's leading space is kept.
        decoder.emplace(*options.tokenizer);
        for (const std::int32_t token : request.prompt) (void)decoder->push(token);
      }
    }
    RequestId id = 0;
    Request request;
    Sampler sampler;
    KVBlockTable table;
    std::vector<std::int32_t> tokens;  // the tokens its cache holds or will: the prompt, then
                                       // what it generated (less what context shifts dropped)
    Completion completion;
    bool admitted_once = false;
    std::optional<StreamingDecoder> decoder;  // with a tokenizer
    StopStringMatcher stops;
    // submit_parallel's other requests, waiting for this one's prompt to fork from it.
    std::vector<std::unique_ptr<Sequence>> forks;
  };

  // What a state file must have been written by: this model's shape (io/kv_state_file.hpp).
  KVStateIdentity state_identity() const { return kv_state_identity(model_.config()); }

  std::size_t window() const noexcept {
    return static_cast<std::size_t>(model_.config().sliding_window);
  }

  void check_request(const Request& request) const {
    if (request.prompt.empty())
      throw Error(ErrorKind::invalid_argument, "a request's prompt is empty");
    model_.check_tokens(request.prompt);
    validate_sampler_params(request.sampler);
    check_generate_options(request.generate, "a request");
    if ((!request.stop_strings.empty() || request.on_text) && options_.tokenizer == nullptr)
      throw Error(ErrorKind::invalid_argument,
                  "a request with stop strings or on_text needs EngineOptions.tokenizer");
    (void)StopStringMatcher(request.stop_strings);  // refuses an empty stop string
    const std::size_t limit = sequence_limit();
    if (request.n_keep > request.prompt.size() ||
        (options_.context_shift && request.n_keep + 3 > limit))
      throw Error(ErrorKind::invalid_argument,
                  "a request's n_keep of " + std::to_string(request.n_keep) +
                      " is past its prompt of " + std::to_string(request.prompt.size()) +
                      " tokens or leaves a context shift nothing to drop");
    const std::size_t generated =
        request.generate.max_tokens < 0 ? 0 : static_cast<std::size_t>(request.generate.max_tokens);
    const bool past_context = !options_.context_shift && request.prompt.size() + generated > limit;
    if (past_context || request.prompt.size() >= limit)
      throw Error(ErrorKind::capacity,
                  "a request of " + std::to_string(request.prompt.size()) + " prompt tokens and " +
                      std::to_string(generated) + " to generate can never fit: the engine holds " +
                      std::to_string(context_) + " tokens per sequence and its KV pool " +
                      std::to_string(kv_capacity_tokens()));
  }
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
                                                 heads, head_dim, c.kv_value_rows());
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
    for (RequestId id : cancelled) cancel_now(id);
  }

  void cancel_now(RequestId id) {
    for (auto* queue : {&running_, &waiting_}) {
      for (auto it = queue->begin(); it != queue->end(); ++it) {
        Sequence& s = **it;
        auto& forks = s.forks;
        const auto fork =
            std::find_if(forks.begin(), forks.end(), [&](const auto& f) { return f->id == id; });
        if (fork != forks.end()) {  // waiting for a prompt it never computed
          std::unique_ptr<Sequence> f = std::move(*fork);
          forks.erase(fork);
          finish(std::move(f), StopReason::cancelled);
          return;
        }
        if (s.id != id) continue;
        std::unique_ptr<Sequence> cancelled = std::move(*it);
        if (cancelled->forks.empty()) {
          queue->erase(it);
        } else {  // its first fork takes over the prompt's computation
          std::unique_ptr<Sequence> heir = std::move(cancelled->forks.front());
          cancelled->forks.erase(cancelled->forks.begin());
          heir->forks = std::move(cancelled->forks);
          heir->table = std::move(cancelled->table);
          heir->admitted_once = cancelled->admitted_once;
          heir->completion.cached_tokens = cancelled->completion.cached_tokens;
          heir->completion.preemptions = cancelled->completion.preemptions;
          *it = std::move(heir);
        }
        finish(std::move(cancelled), StopReason::cancelled);
        return;
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
      stats_.tokens_computed += e.n_tokens;
      entries.push_back(
          {&s.table, std::span(s.tokens).subspan(s.table.length(), e.n_tokens), Logits::last});
    }
    const std::span<const float> logits = runner_.forward(entries, storage_, allocator_);
    const std::size_t vocab = model_.vocab_size();
    std::vector<std::pair<Sequence*, StopReason>> done;
    std::vector<std::unique_ptr<Sequence>> forked;
    for (std::size_t i = 0; i < scheduled.size(); ++i) {
      Sequence& s = *scheduled[i].sequence;
      if (options_.prefix_caching) s.table.publish_full_blocks(allocator_, s.tokens);
      release_outside_window(s);
      if (s.table.length() < s.tokens.size()) continue;  // a prefill chunk short of the end
      const std::span<const float> row = logits.subspan(i * vocab, vocab);
      // The prompt is computed: submit_parallel's siblings fork from it and sample the same
      // logits, each with its own sampler.
      for (std::unique_ptr<Sequence>& f : std::exchange(s.forks, {})) {
        Sequence& fork = *f;
        fork.completion.cached_tokens = s.completion.cached_tokens;
        fork.admitted_once = true;
        if (s.table.n_released() > 0) {  // its window dropped the prompt's start: recompute it
          waiting_.push_front(std::move(f));
          continue;
        }
        fork.table = s.table.fork(allocator_);
        forked.push_back(std::move(f));
        if (const std::optional<StopReason> reason = sample(fork, row))
          done.emplace_back(&fork, *reason);
      }
      if (const std::optional<StopReason> reason = sample(s, row)) done.emplace_back(&s, *reason);
    }
    for (auto& f : forked) running_.push_back(std::move(f));
    for (const auto& [sequence, reason] : done) {
      // The binding goes into the lambda by value: clang before 16 cannot capture a binding.
      const auto it =
          std::find_if(running_.begin(), running_.end(),
                       [finished = sequence](const auto& s) { return s.get() == finished; });
      std::unique_ptr<Sequence> s = std::move(*it);
      running_.erase(it);
      finish(std::move(s), reason);
    }
  }

  // Frees s's blocks that its next token's window no longer reaches (sliding-window models).
  void release_outside_window(Sequence& s) {
    const std::size_t w = window(), next = s.table.length();
    if (w == 0 || next + 1 <= w) return;
    stats_.kv_blocks_released += s.table.release_before(allocator_, next + 1 - w);
  }

  // Samples s's next token from `logits` and applies the stop rules (as generate() does, and
  // stop strings); returns why s ends, if it does.
  std::optional<StopReason> sample(Sequence& s, std::span<const float> logits) {
    const GenerateOptions& g = s.request.generate;
    if (g.max_tokens == 0) return StopReason::max_tokens;
    const std::int32_t token = s.sampler.sample(logits, s.tokens);
    if (const std::optional<StopReason> stop = stop_before(token, g)) return stop;
    s.tokens.push_back(token);
    s.completion.tokens.push_back(token);
    if (s.request.on_token && !s.request.on_token(s.id, token)) return StopReason::cancelled;
    if (s.decoder) {
      const StopStringMatcher::Step step = s.stops.push(s.decoder->push(token));
      if (!emit_text(s, step.text)) return StopReason::cancelled;
      if (step.stop) return StopReason::stop_string;
    }
    if (g.max_tokens > 0 && s.completion.tokens.size() == static_cast<std::size_t>(g.max_tokens))
      return StopReason::max_tokens;
    if (s.tokens.size() >= sequence_limit()) {
      if (!options_.context_shift) return StopReason::context_full;
      shift(s);
    }
    return std::nullopt;
  }

  bool emit_text(Sequence& s, const std::string& text) {
    if (text.empty()) return true;
    s.completion.text += text;
    return !s.request.on_text || s.request.on_text(s.id, text);
  }

  // The context shift of a full sequence: its cache (all but the token just sampled) keeps
  // n_keep tokens and drops half of the rest, the later keys re-rotated in place; if copying a
  // shared block finds the pool empty, the tokens after n_keep are recomputed instead.
  void shift(Sequence& s) {
    const std::size_t n_keep = s.request.n_keep;
    const std::size_t n_discard = context_shift_discard(s.table.length(), n_keep);
    if (!shift_context(s.table, storage_, allocator_, model_.rope(), n_keep, n_discard))
      s.table.truncate(allocator_, n_keep);
    const auto first = s.tokens.begin() + static_cast<std::ptrdiff_t>(n_keep);
    s.tokens.erase(first, first + static_cast<std::ptrdiff_t>(n_discard));
    ++s.completion.context_shifts;
    ++stats_.context_shifts;
  }

  void finish(std::unique_ptr<Sequence> s, StopReason reason) {
    s->table.release_all(allocator_);
    if (s->decoder && reason != StopReason::stop_string) {
      // The text held back: an unfinished character, a tail that began no stop string.
      StopStringMatcher::Step step = s->stops.push(s->decoder->flush());
      if (step.stop)
        reason = StopReason::stop_string;
      else
        step.text += s->stops.finish();
      (void)emit_text(*s, step.text);  // the stream ends here whatever on_text answers
    }
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
