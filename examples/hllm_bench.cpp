// hllm-bench: end-to-end prompt-processing and generation speed, in the spirit of llama-bench.
//
//   hllm-bench (-m FILE.gguf | --preset NAME --type TYPE) [-p 512] [-n 128] [-r 3] [-t N]
//              [--isa scalar|avx2|avx512] [-o md|json]
//
// In the same run it measures this machine's read bandwidth and FP32 FMA peak, and reports each
// generation figure as a fraction of the bandwidth roofline (every weight byte is read once per
// token) and each prompt figure as a fraction of the FLOP/s peak.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/synthetic.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/gguf_model.hpp"

#if HLLM_X86
#include <immintrin.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: hllm-bench (-m FILE.gguf | --preset NAME --type f32|f16|bf16|q8_0|q4_0)\n"
    "                  [-p PROMPT_TOKENS=512] [-n GEN_TOKENS=128] [-r REPS=3] [-t THREADS]\n"
    "                  [--isa scalar|avx2|avx512] [-o md|json]\n"
    "  presets: tinyllama-1.1b, llama-2-7b, llama-3-8b, llama-3.2-1b, mistral-7b, tiny\n";

struct Options {
  std::string model_path, preset, type = "f32", output = "md";
  std::size_t prompt_tokens = 512, gen_tokens = 128, reps = 3, threads = 0;
  std::optional<hllm::Isa> isa;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sums n 64-bit words with the widest loads the CPU has: a scalar loop leaves part of the
// memory bandwidth unused on one core, and the roofline must be the machine's, not the loop's.
#if HLLM_X86
__attribute__((target("avx2"))) std::uint64_t sum_words_avx2(const std::uint64_t* p,
                                                             std::size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  std::uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += p[i];
  return sum;
}
#endif

std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
#if HLLM_X86
  if (hllm::cpu_supports(hllm::Isa::avx2)) return sum_words_avx2(p, n);
#endif
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

// Best-of-5 read bandwidth over a 1 GiB buffer, all threads reading their own slice.
double measure_read_bandwidth(hllm::ThreadPool& pool) {
  const std::size_t n = (std::size_t{1} << 30) / sizeof(std::uint64_t);
  hllm::AlignedBuffer<std::uint64_t> buffer(n);
  for (std::size_t i = 0; i < n; i += 512) buffer[i] = i;  // touch every page
  double best = 0;
  std::vector<std::uint64_t> sink(pool.size());
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    // Slices are multiples of 4096 words, so each starts 32-byte aligned.
    pool.parallel_for(n, 4096, [&](std::size_t begin, std::size_t end) {
      sink[begin * pool.size() / n] = sum_words(buffer.data() + begin, end - begin);
    });
    best = std::max(best, double(n * sizeof(std::uint64_t)) / seconds(start, Clock::now()));
  }
  return best;
}

#if HLLM_X86
// Independent FMA chains, enough to cover the FMA latency × issue width of current cores.
__attribute__((target("avx512f"))) double fma_loop_avx512(std::size_t iterations) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i)
    for (auto& a : acc) a = _mm512_fmadd_ps(a, m, c);
  float sum = 0;
  for (auto& a : acc) sum += _mm512_cvtss_f32(a);
  return sum;
}
__attribute__((target("avx2,fma"))) double fma_loop_avx2(std::size_t iterations) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (std::size_t i = 0; i < iterations; ++i)
    for (auto& a : acc) a = _mm256_fmadd_ps(a, m, c);
  float sum = 0;
  for (auto& a : acc) sum += _mm256_cvtss_f32(a);
  return sum;
}
#endif

// FP32 FLOP/s peak of the ISA in use, all threads, best of 3.
double measure_fp32_peak(hllm::ThreadPool& pool, hllm::Isa isa) {
#if HLLM_X86
  if (isa == hllm::Isa::scalar) return 0;
  const std::size_t iterations = 20'000'000;
  const double lanes = isa == hllm::Isa::avx512 ? 16 : 8;
  double best = 0;
  std::vector<double> sink(pool.size());
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = Clock::now();
    pool.run([&](std::size_t index, std::size_t) {
      sink[index] =
          isa == hllm::Isa::avx512 ? fma_loop_avx512(iterations) : fma_loop_avx2(iterations);
    });
    const double flops = double(pool.size()) * double(iterations) * 12 * lanes * 2;
    best = std::max(best, flops / seconds(start, Clock::now()));
  }
  return best;
#else
  (void)pool;
  (void)isa;
  return 0;
#endif
}

struct Measurement {
  std::string test;
  double mean = 0, stddev = 0;  // tokens/s
  double roofline_fraction = 0;
};

Measurement summarize(std::string test, const std::vector<double>& rates) {
  Measurement m{std::move(test)};
  m.mean = std::accumulate(rates.begin(), rates.end(), 0.0) / double(rates.size());
  double var = 0;
  for (double r : rates) var += (r - m.mean) * (r - m.mean);
  m.stddev = rates.size() > 1 ? std::sqrt(var / double(rates.size() - 1)) : 0.0;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  hllm::cli::Args args(argc, argv, "hllm-bench", kUsage);
  while (args.next()) {
    if (args.is("-m", "--model"))
      o.model_path = args.value();
    else if (args.is("--preset"))
      o.preset = args.value();
    else if (args.is("--type"))
      o.type = args.value();
    else if (args.is("-p", "--n-prompt"))
      o.prompt_tokens = args.number<std::size_t>(0, 65536);
    else if (args.is("-n", "--n-gen"))
      o.gen_tokens = args.number<std::size_t>(0, 65536);
    else if (args.is("-r", "--repetitions"))
      o.reps = args.number<std::size_t>(1, 1000);
    else if (args.is("-t", "--threads"))
      o.threads = args.number<std::size_t>(1, hllm::kMaxThreads);
    else if (args.is("--isa")) {
      o.isa = args.isa();
    } else if (args.is("-o", "--output")) {
      o.output = args.value();
      if (o.output != "md" && o.output != "json") args.fail("-o must be md or json");
    } else
      args.unknown();
  }
  if (o.model_path.empty() == o.preset.empty())
    args.fail("give exactly one of -m FILE or --preset NAME");

  try {
    // The model: a GGUF file mapped in place, or a synthetic one of a preset's shape.
    hllm::ModelConfig config;
    hllm::ModelWeights weights;
    std::string model_name, type_name;
    if (!o.model_path.empty()) {
      hllm::GgufModel loaded = hllm::load_gguf_model(o.model_path);
      config = loaded.config;
      weights = std::move(loaded.weights);
      model_name = o.model_path;
      type_name = hllm::dtype_name(weights.layers.at(0).wq.type);
    } else {
      hllm::DType type = hllm::DType::f32;
      try {
        type = hllm::parse_dtype(o.type);
      } catch (const hllm::Error& e) {
        args.fail(e.message());
      }
      config = hllm::examples::synthetic_config(o.preset);
      weights = hllm::examples::synthetic_weights(config, type, 1);
      model_name = o.preset + " (synthetic)";
      type_name = hllm::dtype_name(type);
    }
    const hllm::Llama<> model(config, std::move(weights));
    const std::size_t context = std::max<std::size_t>(o.prompt_tokens + o.gen_tokens + 1, 16);
    hllm::Session<> session(model, {.context = context,
                                    .max_batch = std::max<std::size_t>(o.prompt_tokens, 1),
                                    .threads = o.threads,
                                    .isa = o.isa});

    // Bytes read and FLOPs done per token by the weights (the embedding reads one row).
    double weight_bytes = 0, weight_params = 0;
    const hllm::ModelWeights& w = model.weights();
    auto count = [&](const hllm::WeightTensor& t) {
      weight_bytes += double(t.bytes());
      weight_params += double(t.rows) * double(t.cols);
    };
    for (const auto& layer : w.layers)
      for (const hllm::WeightTensor* t : {&layer.wq, &layer.wk, &layer.wv, &layer.wo,
                                          &layer.ffn.gate, &layer.ffn.up, &layer.ffn.down})
        count(*t);
    count(model.output_weight());
    const double kv_bytes_per_position =
        2.0 * double(config.n_layers * config.kv_dim()) * sizeof(float);

    hllm::ThreadPool probe_pool(session.threads());
    const double bandwidth = measure_read_bandwidth(probe_pool);
    const double peak = measure_fp32_peak(probe_pool, session.isa());

    std::vector<Measurement> results;
    std::vector<std::int32_t> prompt(o.prompt_tokens);
    for (std::size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % std::size_t(config.vocab_size));
    if (o.prompt_tokens > 0) {
      session.prefill(prompt);  // warm-up: page in the weights
      std::vector<double> rates;
      for (std::size_t r = 0; r < o.reps; ++r) {
        session.reset();
        const auto start = Clock::now();
        session.prefill(prompt);
        rates.push_back(double(o.prompt_tokens) / seconds(start, Clock::now()));
      }
      Measurement m = summarize("pp" + std::to_string(o.prompt_tokens), rates);
      // Attention adds 4·n_heads·head_dim FLOPs per visible key; keys average p/2.
      const double attn_flops =
          4.0 * double(config.n_layers * config.q_dim()) * double(o.prompt_tokens) / 2.0;
      m.roofline_fraction = peak > 0 ? m.mean * (2.0 * weight_params + attn_flops) / peak : 0;
      results.push_back(m);
    }
    if (o.gen_tokens > 0) {
      std::vector<double> rates;
      for (std::size_t r = 0; r < o.reps + 1; ++r) {  // the first pass is a warm-up
        session.reset();
        std::int32_t token = 1;
        const auto start = Clock::now();
        for (std::size_t i = 0; i < o.gen_tokens; ++i) {
          session.decode(token);
          token = static_cast<std::int32_t>((token * 31 + 7) % config.vocab_size);
        }
        if (r > 0) rates.push_back(double(o.gen_tokens) / seconds(start, Clock::now()));
      }
      Measurement m = summarize("tg" + std::to_string(o.gen_tokens), rates);
      const double bytes_per_token =
          weight_bytes + kv_bytes_per_position * double(o.gen_tokens) / 2.0;
      m.roofline_fraction = m.mean / (bandwidth / bytes_per_token);
      results.push_back(m);
    }

    if (o.output == "json") {
      std::printf("[\n");
      for (std::size_t i = 0; i < results.size(); ++i) {
        const Measurement& m = results[i];
        std::printf(
            "  {\"model\": \"%s\", \"test\": \"%s\", \"type\": \"%s\", \"threads\": %zu, "
            "\"isa\": \"%s\", \"tokens_per_s\": %.3f, \"stddev\": %.3f, \"bandwidth_gbs\": %.2f, "
            "\"peak_gflops\": %.1f, \"roofline_fraction\": %.4f}%s\n",
            model_name.c_str(), m.test.c_str(), type_name.c_str(), session.threads(),
            hllm::to_string(session.isa()), m.mean, m.stddev, bandwidth / 1e9, peak / 1e9,
            m.roofline_fraction, i + 1 < results.size() ? "," : "");
      }
      std::printf("]\n");
    } else {
      std::printf("read bandwidth %.1f GB/s, FP32 FMA peak %.0f GFLOP/s (%zu threads, %s)\n\n",
                  bandwidth / 1e9, peak / 1e9, session.threads(), hllm::to_string(session.isa()));
      std::printf("| model | type | weights | threads | test | t/s | of roofline |\n");
      std::printf("|---|---|---|---|---|---|---|\n");
      for (const Measurement& m : results)
        std::printf("| %s | %s | %.2f GiB | %zu | %s | %.2f ± %.2f | %.1f%% %s |\n",
                    model_name.c_str(), type_name.c_str(), weight_bytes / double(1u << 30),
                    session.threads(), m.test.c_str(), m.mean, m.stddev,
                    100.0 * m.roofline_fraction, m.test[0] == 't' ? "(bandwidth)" : "(FP32 peak)");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-bench: %s\n", e.what());
    return 1;
  }
}
