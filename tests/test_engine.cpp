// The continuous-batching engine (serve/engine.hpp): every request's tokens are the tokens a lone
// Session and generate() give it, with greedy and seeded sampling, however the requests are
// batched, chunked, prefix-cached or preempted; cancellation frees every block; a request that
// can never fit is refused; and submission, cancellation and stepping on several threads.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hllm/generate/generate.hpp"
#include "hllm/generate/stop_strings.hpp"
#include "hllm/serve/engine.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

using hllm::Completion;
using hllm::Engine;
using hllm::ErrorKind;
using hllm::Request;
using hllm::StopReason;

hllm::ModelConfig engine_config() {
  hllm::ModelConfig c;
  c.vocab_size = 300;
  c.dim = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 256;
  c.context_length = 512;
  return c;
}

const hllm::Llama<>& engine_model() {
  static const hllm::ModelConfig c = engine_config();
  static std::vector<std::vector<std::byte>> bytes;
  static const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::q8_0, 17, bytes));
  return model;
}

std::vector<std::int32_t> random_tokens(std::size_t n, std::mt19937& rng) {
  return hllm::test::random_tokens(n, rng, 300);
}

// A request of `prompt` with greedy (seed 0) or seeded sampling at temperature 0.9.
Request make_request(std::vector<std::int32_t> prompt, std::uint64_t seed, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampler.temperature = seed == 0 ? 0.0f : 0.9f;
  r.sampler.seed = seed;
  r.generate.max_tokens = max_tokens;
  r.generate.stop_tokens = {299};
  return r;
}

// What a lone Session and generate() give the request: the reference.
hllm::GenerateResult alone(const Request& r, hllm::KVType kv) {
  hllm::Session<> session(engine_model(), {.context = 512, .threads = 1, .kv_type = kv});
  hllm::Sampler sampler(r.sampler);
  return hllm::generate(session, r.prompt, sampler, r.generate);
}

// Submits every request, runs the engine until idle, returns the completions by request index.
std::vector<Completion> run_all(Engine<>& engine, const std::vector<Request>& requests) {
  std::vector<Completion> done(requests.size());
  std::map<hllm::RequestId, std::size_t> index;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Request r = requests[i];
    r.on_done = [&done, &index](const Completion& c) { done[index.at(c.id)] = c; };
    index[engine.submit(std::move(r))] = i;
  }
  engine.run_until_idle();
  return done;
}

std::vector<Request> some_requests(std::size_t n, std::uint32_t seed, std::size_t shared_prefix) {
  std::mt19937 rng(seed);
  const auto prefix = random_tokens(shared_prefix, rng);
  std::vector<Request> requests;
  for (std::size_t i = 0; i < n; ++i) {
    auto prompt = prefix;
    for (std::int32_t t : random_tokens(1 + rng() % 40, rng)) prompt.push_back(t);
    requests.push_back(make_request(prompt, i % 2 ? 100 + i : 0, static_cast<int>(4 + rng() % 12)));
  }
  return requests;
}

void expect_alone(const std::vector<Request>& requests, const std::vector<Completion>& done,
                  hllm::KVType kv) {
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const hllm::GenerateResult reference = alone(requests[i], kv);
    EXPECT_EQ(done[i].tokens, reference.tokens) << "request " << i;
    EXPECT_EQ(done[i].reason, reference.reason) << "request " << i;
    EXPECT_EQ(done[i].prompt_tokens, requests[i].prompt.size());
  }
}

// Twelve requests (greedy and seeded) in batches of up to 8, chunked prefill (32 tokens per
// step), with and without a 40-token shared prefix: each gets its lone generation's tokens.
TEST(Engine, EveryRequestGetsItsLoneGenerationsTokens) {
  for (std::size_t prefix : {0u, 40u}) {
    SCOPED_TRACE("shared prefix " + std::to_string(prefix));
    Engine<> engine(engine_model(), {.kv_type = hllm::KVType::f16,
                                     .kv_tokens = 4096,
                                     .max_step_tokens = 32,
                                     .max_sequences = 8,
                                     .threads = 2});
    const auto requests = some_requests(12, 7, prefix);
    const auto done = run_all(engine, requests);
    expect_alone(requests, done, hllm::KVType::f16);
    const hllm::EngineStats stats = engine.stats();
    EXPECT_EQ(stats.running + stats.waiting, 0u);
    EXPECT_EQ(stats.kv_blocks_used, 0u);
    EXPECT_EQ(stats.preemptions, 0u);
    // Later prompts take the published blocks of the shared prefix (two of its 16-token blocks
    // each, once the first request has computed them).
    if (prefix > 0) {
      EXPECT_GE(stats.cached_tokens, 32u);
    } else {
      EXPECT_EQ(stats.cached_tokens, 0u);
    }
  }
}

// A pool too small for every sequence at once: sequences are preempted (blocks freed, recomputed
// later) instead of anything failing, and every request still gets its lone generation's
// tokens, greedy and seeded.
TEST(Engine, PreemptionAndRecomputeGiveTheSameTokens) {
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    Engine<> engine(engine_model(), {.kv_tokens = 6 * 16,
                                     .max_step_tokens = 64,
                                     .max_sequences = 8,
                                     .prefix_caching = caching,
                                     .threads = 1});
    const auto requests = some_requests(8, 11, 0);
    const auto done = run_all(engine, requests);
    expect_alone(requests, done, hllm::KVType::f32);
    EXPECT_GT(engine.stats().preemptions, 0u);
    std::size_t preempted = 0;
    for (const Completion& c : done) preempted += c.preemptions;
    EXPECT_EQ(preempted, engine.stats().preemptions);
    EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
  }
}

// Cancelling, from outside or by returning false from on_token, ends the request at once and
// frees its blocks; the others finish as if alone.
TEST(Engine, CancellationFreesEveryBlock) {
  Engine<> engine(engine_model(), {.kv_tokens = 2048, .max_step_tokens = 16, .threads = 1});
  auto requests = some_requests(4, 3, 0);
  for (Request& r : requests) r.generate.max_tokens = 30;
  std::vector<Completion> done(requests.size());
  std::vector<hllm::RequestId> ids;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Request r = requests[i];
    r.on_done = [&done, i](const Completion& c) { done[i] = c; };
    if (i == 1) r.on_token = [](hllm::RequestId, std::int32_t) { return false; };
    ids.push_back(engine.submit(std::move(r)));
  }
  for (int s = 0; s < 4; ++s) engine.step();
  engine.cancel(ids[0]);
  engine.cancel(ids[3]);
  engine.cancel(12345);  // unknown: ignored
  engine.run_until_idle();
  EXPECT_EQ(done[0].reason, StopReason::cancelled);
  EXPECT_EQ(done[1].reason, StopReason::cancelled);
  EXPECT_EQ(done[1].tokens.size(), 1u);
  EXPECT_EQ(done[3].reason, StopReason::cancelled);
  EXPECT_EQ(done[2].tokens, alone(requests[2], hllm::KVType::f32).tokens);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
}

TEST(Engine, RefusesRequestsThatCanNeverFit) {
  Engine<> engine(engine_model(), {.kv_tokens = 64, .context = 128, .threads = 1});
  std::mt19937 rng(1);
  const auto expect_refused = [&](Request r, ErrorKind kind, const char* message) {
    hllm::test::expect_error([&] { engine.submit(std::move(r)); }, kind, "", "", std::nullopt,
                             message);
  };
  expect_refused(make_request(random_tokens(60, rng), 0, 10), ErrorKind::capacity,
                 "can never fit");  // past the pool's 64 tokens
  expect_refused(make_request({}, 0, 10), ErrorKind::invalid_argument, "prompt is empty");
  expect_refused(make_request({1, 300}, 0, 10), ErrorKind::out_of_range, "outside the vocabulary");
  Request bad_sampler = make_request({1, 2}, 0, 10);
  bad_sampler.sampler.top_p = 0.0f;
  expect_refused(bad_sampler, ErrorKind::invalid_argument, "top_p");
  EXPECT_EQ(engine.stats().waiting, 0u);
  Request bad_limit = make_request({1, 2}, 0, -2);
  expect_refused(bad_limit, ErrorKind::invalid_argument, "max_tokens must be >= 0");
  // Options that cannot run: no sequence at a time, no tokens per step, a pool of no block.
  hllm::test::expect_error([] { Engine<> e(engine_model(), {.max_sequences = 0}); },
                           ErrorKind::invalid_argument, "", "", std::nullopt, "max_sequences");
  hllm::test::expect_error([] { Engine<> e(engine_model(), {.max_step_tokens = 0}); },
                           ErrorKind::invalid_argument, "", "", std::nullopt, "max_tokens");
  hllm::test::expect_error([] { Engine<> e(engine_model(), {.kv_bytes = 100}); },
                           ErrorKind::capacity, "", "", std::nullopt, "holds no block");
  // Unlimited generation stops at the pool's end rather than preempting itself forever.
  Completion c;
  Request unlimited = make_request(random_tokens(10, rng), 0, -1);
  unlimited.generate.stop_tokens.clear();
  unlimited.on_done = [&](const Completion& done) { c = done; };
  engine.submit(unlimited);
  engine.run_until_idle();
  EXPECT_EQ(c.reason, StopReason::context_full);
  EXPECT_EQ(c.prompt_tokens + c.tokens.size(), 64u);
}

// The server shape: the engine steps on its own thread while four threads submit requests and
// cancel some of them. Every request ends exactly once; the uncancelled ones with their lone
// tokens; no block stays referenced. (TSan runs this in CI.)
TEST(Engine, ConcurrentSubmitAndCancelWhileRunning) {
  Engine<> engine(engine_model(), {.kv_tokens = 1024, .max_step_tokens = 32, .threads = 2});
  engine.start();
  const auto requests = some_requests(16, 21, 16);
  std::mutex mutex;
  std::map<std::size_t, Completion> done;
  std::atomic<int> ended{0};
  std::vector<std::thread> clients;
  for (std::size_t c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (std::size_t i = c; i < requests.size(); i += 4) {
        Request r = requests[i];
        r.on_done = [&, i](const Completion& completion) {
          std::lock_guard lock(mutex);
          EXPECT_TRUE(done.emplace(i, completion).second) << "request " << i << " ended twice";
          ++ended;
        };
        const hllm::RequestId id = engine.submit(std::move(r));
        if (i % 5 == 0) engine.cancel(id);
      }
    });
  for (auto& t : clients) t.join();
  while (ended.load() < static_cast<int>(requests.size())) std::this_thread::yield();
  engine.stop();
  ASSERT_EQ(done.size(), requests.size());
  for (const auto& [i, completion] : done) {
    if (completion.reason == StopReason::cancelled) continue;
    EXPECT_EQ(completion.tokens, alone(requests[i], hllm::KVType::f32).tokens) << "request " << i;
  }
  EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
}

// --- stop strings and text ------------------------------------------------------------------

// Pieces arriving one at a time: a tail that may begin a stop string is held back, released when
// it cannot, and the text ends just before the first stop string however it is split.
TEST(StopStringMatcher, HoldsBackPartialMatchesAndCutsBeforeTheStop) {
  hllm::StopStringMatcher m({"lo Wor", "xyz"});
  auto step = m.push("Hel");
  EXPECT_EQ(step.text, "He");  // "l" may begin "lo Wor"
  EXPECT_FALSE(step.stop);
  step = m.push("lo W");
  EXPECT_EQ(step.text, "l");
  step = m.push("orld");
  EXPECT_EQ(step.text, "");
  EXPECT_TRUE(step.stop);
  EXPECT_TRUE(m.push("more").text.empty());  // ignored after the stop

  hllm::StopStringMatcher n({"ab", "b!"});
  EXPECT_EQ(n.push("xa").text, "x");
  step = n.push("b");  // "ab" at 1 beats "b!" which never completes
  EXPECT_EQ(step.text, "");
  EXPECT_TRUE(step.stop);

  hllm::StopStringMatcher tail({"END"});
  EXPECT_EQ(tail.push("the EN").text, "the ");
  EXPECT_EQ(tail.finish(), "EN");  // no stop came: the held text is the caller's after all
  EXPECT_TRUE(hllm::StopStringMatcher().push("any").text == "any");
  hllm::test::expect_error([] { hllm::StopStringMatcher({""}); }, ErrorKind::invalid_argument, "",
                           "", std::nullopt, "empty");
}

// A SentencePiece vocabulary for the engine model's 300 ids: control tokens 0-2, then pieces of
// one or two letters, some starting a word.
const hllm::Tokenizer& engine_tokenizer() {
  static const hllm::Tokenizer tokenizer = [] {
    hllm::Vocabulary v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {2, 3, 3};
    for (int k = 0; v.tokens.size() < 300; ++k) {
      std::string piece = k % 7 == 0 ? "\u2581" : "";
      piece += static_cast<char>('a' + k % 26);
      if (k >= 26) piece += static_cast<char>('a' + (k / 26) % 26);
      v.tokens.push_back(piece);
      v.token_types.push_back(1);
    }
    v.unk_id = 0;
    v.bos_id = 1;
    v.eos_id = 2;
    return hllm::Tokenizer(std::move(v));
  }();
  return tokenizer;
}

// The generated text is the decoded tokens; a stop string found in it (here one spanning
// tokens, taken from the unstopped text) ends the request with the text before it, after the
// tokens that completed it; on_text streams exactly the final text.
TEST(Engine, StopStringsEndTheTextBeforeThem) {
  const hllm::Tokenizer& tokenizer = engine_tokenizer();
  std::mt19937 rng(8);
  Request base = make_request(random_tokens(12, rng), 0, 40);
  base.generate.stop_tokens.clear();
  const auto run = [&](std::vector<std::string> stops) {
    Engine<> engine(engine_model(), {.kv_tokens = 512, .threads = 1, .tokenizer = &tokenizer});
    Request r = base;
    r.stop_strings = std::move(stops);
    std::string streamed;
    r.on_text = [&](hllm::RequestId, std::string_view text) {
      streamed += text;
      return true;
    };
    const Completion c = run_all(engine, {r})[0];
    EXPECT_EQ(streamed, c.text);
    return c;
  };
  const Completion plain = run({});
  ASSERT_EQ(plain.tokens.size(), 40u);
  EXPECT_EQ(plain.tokens, alone(base, hllm::KVType::f32).tokens);
  hllm::StreamingDecoder decoder(tokenizer);  // the generated text continues the prompt's
  for (std::int32_t t : base.prompt) (void)decoder.push(t);
  std::vector<std::size_t> ends;  // text length after each token
  std::string text;
  for (std::int32_t t : plain.tokens) ends.push_back((text += decoder.push(t)).size());
  EXPECT_EQ(plain.text, text);
  ASSERT_GT(text.size(), 30u);

  const std::string stop = text.substr(text.size() / 2, 4);
  const std::size_t at = text.find(stop);
  const Completion stopped = run({"zzzzzz", stop});
  EXPECT_EQ(stopped.reason, StopReason::stop_string);
  EXPECT_EQ(stopped.text, text.substr(0, at));
  const std::size_t completing =
      std::find_if(ends.begin(), ends.end(), [&](std::size_t e) { return e >= at + stop.size(); }) -
      ends.begin() + 1;
  EXPECT_EQ(stopped.tokens,
            std::vector<std::int32_t>(plain.tokens.begin(), plain.tokens.begin() + completing));
  // Without a tokenizer, stop strings and on_text are refused.
  Engine<> bare(engine_model(), {.kv_tokens = 256, .threads = 1});
  Request r = base;
  r.stop_strings = {"a"};
  hllm::test::expect_error([&] { bare.submit(r); }, ErrorKind::invalid_argument, "", "",
                           std::nullopt, "tokenizer");
}

// --- parallel sampling ----------------------------------------------------------------------

// submit_parallel computes the prompt once: each of the four gets the tokens a lone generation
// with its seed gives, and the engine computes 3 prompts fewer than four separate requests
// without prefix caching.
TEST(Engine, ParallelRequestsComputeTheirPromptOnce) {
  std::mt19937 rng(4);
  const Request base = make_request(random_tokens(45, rng), 7, 20);
  const auto computed = [&](bool parallel) {
    Engine<> engine(
        engine_model(),
        {.kv_tokens = 1024, .max_step_tokens = 32, .prefix_caching = false, .threads = 1});
    std::vector<Completion> done(4);
    std::vector<hllm::RequestId> ids;
    Request r = base;
    r.on_done = [&](const Completion& c) { done[c.id - 1] = c; };
    if (parallel) {
      ids = engine.submit_parallel(r, 4);
    } else {
      for (std::uint64_t i = 0; i < 4; ++i) {
        Request one = r;
        one.sampler.seed += i;
        ids.push_back(engine.submit(one));
      }
    }
    EXPECT_EQ(ids, (std::vector<hllm::RequestId>{1, 2, 3, 4}));
    engine.run_until_idle();
    for (std::uint64_t i = 0; i < 4; ++i) {
      Request alone_request = base;
      alone_request.sampler.seed += i;
      EXPECT_EQ(done[i].tokens, alone(alone_request, hllm::KVType::f32).tokens) << "sample " << i;
    }
    EXPECT_NE(done[0].tokens, done[1].tokens);
    EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
    return engine.stats().tokens_computed;
  };
  EXPECT_EQ(computed(false) - computed(true), 3 * base.prompt.size());
}

// Cancelling parallel requests while their prompt is computed: a waiting sibling ends at once;
// the one computing the prompt hands it to the next, which finishes as if alone.
TEST(Engine, CancellingParallelRequestsBeforeTheirPrompt) {
  std::mt19937 rng(5);
  const Request base = make_request(random_tokens(60, rng), 9, 12);
  Engine<> engine(engine_model(), {.kv_tokens = 1024, .max_step_tokens = 16, .threads = 1});
  std::map<hllm::RequestId, Completion> done;
  Request r = base;
  r.on_done = [&](const Completion& c) { done[c.id] = c; };
  const auto ids = engine.submit_parallel(r, 3);
  engine.step();  // 16 of the 60 prompt tokens
  engine.cancel(ids[0]);
  engine.cancel(ids[2]);
  engine.run_until_idle();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[ids[0]].reason, StopReason::cancelled);
  EXPECT_EQ(done[ids[2]].reason, StopReason::cancelled);
  EXPECT_TRUE(done[ids[2]].tokens.empty());
  Request second = base;
  second.sampler.seed += 1;
  EXPECT_EQ(done[ids[1]].tokens, alone(second, hllm::KVType::f32).tokens);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
  EXPECT_EQ(engine.stats().waiting, 0u);
}

// --- context shift --------------------------------------------------------------------------

// With context shift a request generates past its context: each time the cache fills, the
// tokens after n_keep lose their older half. Without it the same request is refused (it can
// never fit), and n_keep past the prompt is refused too.
TEST(Engine, ContextShiftGoesOnPastTheContext) {
  std::mt19937 rng(6);
  Request r = make_request(random_tokens(20, rng), 0, 150);
  r.generate.stop_tokens.clear();
  r.n_keep = 4;
  const auto run = [&]() {
    Engine<> engine(engine_model(),
                    {.kv_tokens = 256, .context = 64, .threads = 1, .context_shift = true});
    const Completion c = run_all(engine, {r})[0];
    EXPECT_EQ(engine.stats().context_shifts, c.context_shifts);
    EXPECT_EQ(engine.stats().kv_blocks_used, 0u);
    return c;
  };
  const Completion c = run();
  EXPECT_EQ(c.reason, StopReason::max_tokens);
  EXPECT_EQ(c.tokens.size(), 150u);
  // 63 cached positions keep 4 and drop 29 each time: shifts at 64 tokens, then every 29.
  EXPECT_EQ(c.context_shifts, 1 + (20 + 150 - 64) / 29);
  EXPECT_EQ(run().tokens, c.tokens);  // deterministic
  // Until the first shift the tokens are those of a lone generation.
  Request unshifted = r;
  unshifted.generate.max_tokens = 64 - 20;
  const auto reference = alone(unshifted, hllm::KVType::f32).tokens;
  EXPECT_TRUE(std::equal(reference.begin(), reference.end(), c.tokens.begin()));

  Engine<> plain(engine_model(), {.kv_tokens = 256, .context = 64, .threads = 1});
  hllm::test::expect_error([&] { plain.submit(r); }, ErrorKind::capacity, "", "", std::nullopt,
                           "can never fit");
  Engine<> shifting(engine_model(),
                    {.kv_tokens = 256, .context = 64, .threads = 1, .context_shift = true});
  Request greedy_keep = r;
  greedy_keep.n_keep = 21;
  hllm::test::expect_error([&] { shifting.submit(greedy_keep); }, ErrorKind::invalid_argument, "",
                           "", std::nullopt, "n_keep");
}

// --- sliding windows ------------------------------------------------------------------------

const hllm::Llama<>& windowed_model() {
  static const hllm::ModelConfig c = [] {
    hllm::ModelConfig config = engine_config();
    config.sliding_window = 32;
    return config;
  }();
  static std::vector<std::vector<std::byte>> bytes;
  static const hllm::Llama<> model(c, hllm::test::typed_weights(c, hllm::DType::q8_0, 17, bytes));
  return model;
}

// A sliding-window model's sequence holds the blocks its window reaches, not its length: 200
// tokens in 16-token blocks through a 32-token window never hold more than the window, the
// chunk being written and a partial block on each side. Its tokens are a lone Session's.
TEST(Engine, SlidingWindowMemoryIsBoundedByTheWindow) {
  std::mt19937 rng(2);
  Request r = make_request(random_tokens(100, rng), 0, 100);
  r.generate.stop_tokens.clear();
  Engine<> engine(windowed_model(),
                  {.kv_tokens = 512, .max_step_tokens = 32, .prefix_caching = false, .threads = 1});
  Completion c;
  r.on_done = [&](const Completion& done) { c = done; };
  engine.submit(r);
  std::size_t peak = 0;
  while (engine.step()) peak = std::max(peak, engine.stats().kv_blocks_used);
  EXPECT_EQ(c.tokens.size(), 100u);
  EXPECT_LE(peak, (32 + 32) / 16 + 2);
  EXPECT_GT(engine.stats().kv_blocks_released, 0u);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0u);

  hllm::Session<> session(windowed_model(), {.context = 512, .threads = 1});
  hllm::Sampler sampler(r.sampler);
  EXPECT_EQ(c.tokens, hllm::generate(session, r.prompt, sampler, r.generate).tokens);
  hllm::test::expect_error([] { Engine<> e(windowed_model(), {.context_shift = true}); },
                           ErrorKind::unsupported, "", "", std::nullopt, "sliding-window");
}

// --- saved prefixes -------------------------------------------------------------------------

// A system prompt computed and saved by one engine is loaded by another (a new process, say):
// a request starting with it takes its full blocks from the cache instead of computing them and
// still gets its lone generation's tokens. A corrupt file or one from another cache type is
// refused with the pool untouched.
TEST(Engine, SavedPrefixServesAnotherEngine) {
  const std::string path = testing::TempDir() + "hllm_engine_prefix.kv";
  std::mt19937 rng(10);
  const auto system = random_tokens(50, rng);
  Request r = make_request(system, 3, 12);
  for (std::int32_t t : random_tokens(9, rng)) r.prompt.push_back(t);
  {
    Engine<> first(engine_model(), {.kv_type = hllm::KVType::f16, .kv_tokens = 512, .threads = 1});
    first.save_prefix(system, path);
    EXPECT_EQ(first.stats().kv_blocks_used, 0u);
    EXPECT_EQ(first.stats().kv_blocks_cached, 3u);  // 48 of the 50 tokens in full blocks
  }
  Engine<> second(engine_model(), {.kv_type = hllm::KVType::f16, .kv_tokens = 512, .threads = 1});
  EXPECT_EQ(second.load_prefix(path), system);
  EXPECT_EQ(second.stats().kv_blocks_cached, 3u);
  const Completion c = run_all(second, {r})[0];
  EXPECT_EQ(c.cached_tokens, 48u);
  EXPECT_EQ(second.stats().tokens_computed, r.prompt.size() - 48 + c.tokens.size() - 1);
  EXPECT_EQ(c.tokens, alone(r, hllm::KVType::f16).tokens);

  Engine<> other_type(engine_model(), {.kv_type = hllm::KVType::f32, .kv_tokens = 512});
  hllm::test::expect_error([&] { other_type.load_prefix(path); }, ErrorKind::invalid_argument,
                           "header.kv_type", path, hllm::kv_state_format::kKVTypeAt, "f16");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  Engine<> third(engine_model(), {.kv_type = hllm::KVType::f16, .kv_tokens = 512, .threads = 1});
  try {
    third.load_prefix(path);
    ADD_FAILURE() << "a corrupt state file was loaded";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.file(), path) << e.what();
    EXPECT_TRUE(e.offset().has_value()) << e.what();
  }
  EXPECT_EQ(third.stats().kv_blocks_cached, 0u);
  EXPECT_EQ(third.stats().kv_blocks_used, 0u);
  std::remove(path.c_str());
}

}  // namespace
