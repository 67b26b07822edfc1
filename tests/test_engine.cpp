// The continuous-batching engine (serve/engine.hpp): every request's tokens are the tokens a lone
// Session and generate() give it, with greedy and seeded sampling, however the requests are
// batched, chunked, prefix-cached or preempted; cancellation frees every block; a request that
// can never fit is refused; and submission, cancellation and stepping on several threads.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hllm/generate/generate.hpp"
#include "hllm/serve/engine.hpp"
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

}  // namespace
