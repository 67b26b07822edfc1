// hllm-bench: end-to-end prompt-processing and generation speed, in the spirit of llama-bench.
//
//   hllm-bench (-m FILE.gguf | --preset NAME [--plain] --type TYPE) [-p 512] [-n 128] [-r 3] [-t N]
//              [--isa scalar|avx2|avx_vnni|avx512] [--repack auto|never|always]
//              [--kv-type f32|f16|bf16|q8_0|q4_0|fp8] [-o md|json] [--log-disable]
//   hllm-bench --preset NAME --type TYPE --save FILE.gguf [--vocab VOCAB.gguf]
//
// In the same run it measures this machine's read bandwidth and arithmetic peaks (FP32 FMA, and
// where the CPU has them the int8 VNNI and BF16 dot products), and reports each generation
// figure as a fraction of the bandwidth roofline (every weight byte is read once per token) and
// each prompt figure as a fraction of the peak its weight type runs on (Q8_0/Q4_0: int8 dot
// products; BF16: vdpbf16ps; the rest: FP32 FMA).
//
// --plain runs a preset's shape with its block variants (Qwen2's biases, Qwen3's QK-norm) off:
// against the preset itself, what the variants cost.
//
// --save writes the synthetic model (preset + type) as a GGUF file that llama.cpp and
// ik_llama.cpp load, with a synthetic SentencePiece vocabulary of the preset's size (or the
// tokenizer of VOCAB.gguf), and exits: the same weights then run in both programs.
//
// While it runs, stderr says which test of how many is running and which run of it
// ("[1/2] pp512 q4_0 t=2: run 2/3"; one line redrawn on a terminal, a line each elsewhere), so
// stdout holds only the results; --log-disable leaves stderr to errors.

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

#include "common/bench_model.hpp"
#include "common/cli.hpp"
#include "common/progress.hpp"
#include "common/synthetic.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/gguf_model.hpp"

#include <sys/mman.h>

#include "hllm/simd/intrinsics.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_path, preset, type = "f32", output = "md", save_path, vocab_path;
  std::size_t prompt_tokens = 512, gen_tokens = 128, reps = 3, threads = 0;
  std::size_t depth = 0;  // tokens in the cache before each generation test (llama-bench's -d)
  std::optional<hllm::Isa> isa;
  std::string repack = "auto";
  hllm::KVType kv_type = hllm::KVType::f32;
  bool log_disable = false;
  bool plain = false;
  bool f16_as_bf16 = false;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---------------------------------------------------------------------------------------------
// Read bandwidth.
//
// What a decode kernel can read is what the memory system gives, and one naive loop under-reads
// it in a VM (docs/performance.md, "Method", has the measurements):
// - Address translation. In a VM a TLB miss walks two page tables, and one stream over 4 KiB
//   pages stalls on a walk every 64 cache lines; several streams overlap the walks and 2 MiB
//   pages remove them. So the probe reads a buffer advised to use transparent huge pages (before
//   its first touch; the kernel may refuse, and the output says so) and an ordinary one with the
//   8-stream loop. Wider loads, more accumulators, other stream counts and software prefetch
//   gained nothing over these two.
// - A shared host's bandwidth moves from minute to minute, so a probe before the tests can land
//   in a slow spell: it runs before and after them.
// The roofline is the best of all: what the memory system gives, not what one loop gets.
#if HLLM_X86
constexpr std::size_t kStreams = 8;

// One stream: the thread's slice front to back.
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

// kStreams streams: the slice as kStreams sub-slices read in lockstep, one cache line of each
// per step (512-bit loads where the CPU has them), so that kStreams page walks can overlap.
__attribute__((target("avx512f"))) std::uint64_t sum_streams_avx512(const std::uint64_t* p,
                                                                    std::size_t n) {
  const std::size_t len = n / kStreams / 8 * 8;  // words per stream, whole cache lines
  __m512i acc[kStreams];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (std::size_t i = 0; i < len; i += 8)
    for (std::size_t s = 0; s < kStreams; ++s)
      acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512(p + s * len + i));
  __m512i total = acc[0];
  for (std::size_t s = 1; s < kStreams; ++s) total = _mm512_add_epi64(total, acc[s]);
  std::uint64_t sum = static_cast<std::uint64_t>(_mm512_reduce_add_epi64(total));
  for (std::size_t i = kStreams * len; i < n; ++i) sum += p[i];
  return sum;
}

__attribute__((target("avx2"))) std::uint64_t sum_streams_avx2(const std::uint64_t* p,
                                                               std::size_t n) {
  const std::size_t len = n / kStreams / 8 * 8;  // words per stream, whole cache lines
  __m256i acc[kStreams];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (std::size_t i = 0; i < len; i += 8)
    for (std::size_t s = 0; s < kStreams; ++s) {
      const std::uint64_t* q = p + s * len + i;
      acc[s] = _mm256_add_epi64(
          acc[s], _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(q)),
                                   _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 4))));
    }
  __m256i total = acc[0];
  for (std::size_t s = 1; s < kStreams; ++s) total = _mm256_add_epi64(total, acc[s]);
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  std::uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (std::size_t i = kStreams * len; i < n; ++i) sum += p[i];
  return sum;
}
#endif

std::uint64_t sum_words(const std::uint64_t* p, std::size_t n, bool streams) {
#if HLLM_X86
  if (streams && hllm::cpu_supports(hllm::Isa::avx512)) return sum_streams_avx512(p, n);
  if (streams && hllm::cpu_supports(hllm::Isa::avx2)) return sum_streams_avx2(p, n);
  if (hllm::cpu_supports(hllm::Isa::avx2)) return sum_words_avx2(p, n);
#endif
  (void)streams;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

// The process's AnonHugePages (bytes), from /proc/self/smaps_rollup; 0 where unknown.
std::size_t anon_huge_bytes() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return 0;
  char line[256];
  std::size_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

// An anonymous mapping for the probe; with `huge`, 2 MiB-aligned and advised to use transparent
// huge pages before its first touch (the advice only affects pages not yet faulted in).
class ProbeBuffer {
 public:
  ProbeBuffer(std::size_t bytes, bool huge) : size_(bytes + kHuge) {
    void* base = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
      throw hllm::Error(hllm::ErrorKind::capacity, "cannot map the bandwidth probe's buffer");
    base_ = base;
    auto address = reinterpret_cast<std::uintptr_t>(base);
    words_ = reinterpret_cast<std::uint64_t*>((address + kHuge - 1) / kHuge * kHuge);
#ifdef MADV_HUGEPAGE
    if (huge) ::madvise(words_, bytes, MADV_HUGEPAGE);  // advice: failure just means 4 KiB pages
#else
    (void)huge;
#endif
    const std::size_t before = anon_huge_bytes();
    for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); i += 512) words_[i] = i;
    huge_bytes_ = anon_huge_bytes() - std::min(before, anon_huge_bytes());
  }
  ~ProbeBuffer() { ::munmap(base_, size_); }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;

  const std::uint64_t* data() const noexcept { return words_; }
  std::size_t huge_bytes() const noexcept { return huge_bytes_; }

 private:
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t* words_ = nullptr;
  std::size_t huge_bytes_ = 0;
};

struct Bandwidth {
  double best = 0;    // bytes/s: the roofline
  double small = 0;   // bytes/s with 4 KiB pages (where decode's weights usually live)
  bool huge = false;  // whether the kernel gave the huge-page buffer 2 MiB pages

  void merge(const Bandwidth& o) {
    best = std::max(best, o.best);
    small = std::max(small, o.small);
    huge = huge || o.huge;
  }
};

// Best-of-5 read bandwidth over 1 GiB buffers (far beyond any cache), all threads reading their
// own slice: the 8-stream loop over a 4 KiB-page buffer, both loops over a huge-page one.
Bandwidth measure_read_bandwidth(hllm::ThreadPool& pool) {
  const std::size_t bytes = std::size_t{1} << 30, n = bytes / sizeof(std::uint64_t);
  std::vector<std::uint64_t> sink(pool.size());
  auto best_of = [&](const std::uint64_t* words, bool streams) {
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto start = Clock::now();
      // Slices are multiples of 4096 words, so each starts 64-byte aligned.
      pool.parallel_for(n, 4096, [&](std::size_t begin, std::size_t end) {
        sink[begin * pool.size() / n] = sum_words(words + begin, end - begin, streams);
      });
      best = std::max(best, double(bytes) / seconds(start, Clock::now()));
    }
    return best;
  };
  Bandwidth b;
  {
    const ProbeBuffer small(bytes, false);
    b.small = best_of(small.data(), true);
  }
  const ProbeBuffer huge(bytes, true);
  b.huge = huge.huge_bytes() >= bytes / 2;
  b.best = std::max({b.small, best_of(huge.data(), false), best_of(huge.data(), true)});
  return b;
}

// ---------------------------------------------------------------------------------------------
// Compute peaks: 12 independent accumulator chains per thread, enough to cover latency × issue
// width of current cores. The loop must be nothing but the instruction measured (plus the
// counter): the accumulators are 12 named variables, not an array (with an array GCC may keep
// some in memory), and the integer and BF16 steps are inline asm with the accumulator as an
// in-out operand, because GCC 12 copies every vpdpbusd accumulator to a scratch register and
// back in each iteration. (The earlier array-based FMA probe read 63-89 GFLOP/s on the 2-core
// development VM; this one reads 234, which is 2 cores × ~3.6 G zmm FMAs/s × 32.)
#define HLLM_BENCH_X12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
// The body every probe shares, given its DECL (one accumulator), STEP (one instruction on it)
// and SUM (its contribution to the returned sink value).
#define HLLM_BENCH_PROBE(iterations)               \
  HLLM_BENCH_X12(DECL)                             \
  for (std::size_t i = 0; i < (iterations); ++i) { \
    HLLM_BENCH_X12(STEP)                           \
  }                                                \
  return double(0 HLLM_BENCH_X12(SUM));

#if HLLM_X86
__attribute__((target("avx512f"), noinline)) double fma_loop_avx512(std::size_t iterations) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + i);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define SUM(i) +_mm512_cvtss_f32(a##i)
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"), noinline)) double fma_loop_avx2(std::size_t iterations) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + i);
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define SUM(i) +_mm256_cvtss_f32(a##i)
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

// vpdpbusd: 64 u8×s8 products summed into 16 int32 lanes, 128 ops per instruction.
__attribute__((target("avx512f,avx512vnni"), noinline)) double vnni_loop_avx512(
    std::size_t iterations) {
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
#define STEP(i) __asm__("vpdpbusd %2, %1, %0" : "+v"(a##i) : "v"(u), "v"(s));
#define SUM(i) +_mm_cvtsi128_si32(_mm512_castsi512_si128(a##i))
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

// AVX-VNNI's VEX-encoded vpdpbusd on ymm: 32 u8×s8 products summed into 8 int32 lanes, 64 ops
// per instruction ("x": a VEX instruction reaches only registers 0-15).
__attribute__((target("avx2,avxvnni"), noinline)) double vnni_loop_avx_vnni(
    std::size_t iterations) {
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
#define STEP(i) __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(a##i) : "x"(u), "x"(s));
#define SUM(i) +_mm256_cvtsi256_si32(a##i)
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

// Without VNNI the int8 dot product is vpmaddubsw (u8×s8 → pairs summed to int16), vpmaddwd by
// ones (→ int32) and vpaddd: three instructions per 32 (ymm) or 64 (zmm) products, 2 ops each.
// Each chain feeds its accumulator back as the u8 operand, so nothing is loop-invariant; asm
// again, as GCC moves each sum back into its accumulator with an extra instruction.
__attribute__((target("avx512f,avx512bw"), noinline)) double int8_loop_avx512(
    std::size_t iterations) {
  const __m512i s = _mm512_set1_epi8(-2), ones = _mm512_set1_epi16(1);
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
#define STEP(i)                                                                 \
  {                                                                             \
    __m512i t;                                                                  \
    __asm__("vpmaddubsw %2, %0, %1\n\tvpmaddwd %3, %1, %1\n\tvpaddd %1, %0, %0" \
            : "+v"(a##i), "=&v"(t)                                              \
            : "v"(s), "v"(ones));                                               \
  }
#define SUM(i) +_mm_cvtsi128_si32(_mm512_castsi512_si128(a##i))
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2"), noinline)) double int8_loop_avx2(std::size_t iterations) {
  const __m256i s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
#define STEP(i)                                                                 \
  {                                                                             \
    __m256i t;                                                                  \
    __asm__("vpmaddubsw %2, %0, %1\n\tvpmaddwd %3, %1, %1\n\tvpaddd %1, %0, %0" \
            : "+v"(a##i), "=&v"(t)                                              \
            : "v"(s), "v"(ones));                                               \
  }
#define SUM(i) +_mm256_cvtsi256_si32(a##i)
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}

// vdpbf16ps: 32 bf16 pairs multiplied and summed into 16 float lanes, 64 FLOPs per instruction.
__attribute__((target("avx512f,avx512bf16"), noinline)) double bf16_loop_avx512(
    std::size_t iterations) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + i);
#define STEP(i) __asm__("vdpbf16ps %1, %1, %0" : "+v"(a##i) : "v"(x));
#define SUM(i) +_mm512_cvtss_f32(a##i)
  HLLM_BENCH_PROBE(iterations)
#undef DECL
#undef STEP
#undef SUM
}
#endif

// Runs loop(iterations) on every thread of the pool at once, best of 3; returns operations/s.
template <class Loop>
double measure_peak(hllm::ThreadPool& pool, Loop loop, double ops_per_iteration) {
  const std::size_t iterations = 20'000'000;
  double best = 0;
  std::vector<double> sink(pool.size());
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = Clock::now();
    pool.run([&](std::size_t index, std::size_t) { sink[index] = loop(iterations); });
    const double ops = double(pool.size()) * double(iterations) * ops_per_iteration;
    best = std::max(best, ops / seconds(start, Clock::now()));
  }
  return best;
}

// This machine's arithmetic peaks (operations/s, all threads) for the ISA in use; 0 where the
// ISA or CPU lacks the instruction. An operation is a multiply or an add: an FMA or one
// multiply-accumulate of a dot product counts two.
struct Peaks {
  double fp32 = 0;  // vfmadd
  double int8 = 0;  // vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd + vpaddd
  const char* int8_kind = "int8";
  double bf16 = 0;  // vdpbf16ps
};

Peaks measure_peaks(hllm::ThreadPool& pool, hllm::Isa isa) {
  Peaks p;
#if HLLM_X86
  const hllm::CpuFeatures& cpu = hllm::cpu_features();
  if (isa == hllm::Isa::avx512) {
    p.fp32 = measure_peak(pool, fma_loop_avx512, 12 * 16 * 2);
    if (cpu.avx512_vnni) {
      p.int8 = measure_peak(pool, vnni_loop_avx512, 12 * 64 * 2);
      p.int8_kind = "VNNI";
    } else {
      p.int8 = measure_peak(pool, int8_loop_avx512, 12 * 64 * 2);
    }
    if (cpu.avx512_bf16) p.bf16 = measure_peak(pool, bf16_loop_avx512, 12 * 32 * 2);
  } else if (isa == hllm::Isa::avx2 || isa == hllm::Isa::avx_vnni) {
    p.fp32 = measure_peak(pool, fma_loop_avx2, 12 * 8 * 2);
    if (isa == hllm::Isa::avx_vnni && cpu.avx_vnni) {
      p.int8 = measure_peak(pool, vnni_loop_avx_vnni, 12 * 32 * 2);
      p.int8_kind = "AVX-VNNI";
    } else {
      p.int8 = measure_peak(pool, int8_loop_avx2, 12 * 32 * 2);
    }
  }
#else
  (void)pool;
  (void)isa;
#endif
  return p;
}

// The peak a matrix of this type runs against in prefill, as the kernel table decides: the
// types with an integer kernel (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K: 8-bit activations) on
// integer dot products, BF16 on vdpbf16ps where the CPU has it, every other type on FP32 FMAs
// (F16, F32).
struct Peak {
  double ops = 0;
  const char* kind = "FP32";
};

Peak peak_for(hllm::DType type, const Peaks& p, hllm::Isa isa) {
  const hllm::kernels::KernelTable& table = hllm::kernels::table_for(isa);
  if (table.quant_matmul_for(type) != nullptr && p.int8 > 0) return {p.int8, p.int8_kind};
  if (type == hllm::DType::bf16_x16 && table.preferred_bf16_dot() != nullptr && p.bf16 > 0)
    return {p.bf16, "BF16"};
  return {p.fp32, "FP32"};
}

bool weights_repacked(const hllm::ModelWeights& w) {
  return hllm::file_type_of(w.layers.at(0).wq.type) != w.layers.at(0).wq.type;
}

struct Measurement {
  std::string test;
  double mean = 0, stddev = 0;  // tokens/s
  double roofline_fraction = 0;
  double bytes_per_token = 0;  // decode: weights + the average KV cache read
};

Measurement summarize(std::string test, const std::vector<double>& rates) {
  Measurement m{std::move(test)};
  m.mean = std::accumulate(rates.begin(), rates.end(), 0.0) / double(rates.size());
  double var = 0;
  for (double r : rates) var += (r - m.mean) * (r - m.mean);
  m.stddev = rates.size() > 1 ? std::sqrt(var / double(rates.size() - 1)) : 0.0;
  return m;
}

// Runs the measurements and prints them.
void run_benchmark(const Options& o, const hllm::ModelConfig& config, hllm::ModelWeights weights,
                   const std::string& model_name, const std::string& type_name) {
  const hllm::Llama<> model(config, std::move(weights));
  const std::size_t context =
      std::max<std::size_t>(std::max(o.prompt_tokens, o.depth) + o.gen_tokens + 1, 16);
  const bool repacked = weights_repacked(model.weights());
  // A depth is prefilled in chunks of up to 512 tokens (llama-bench's micro-batch).
  const std::size_t max_batch =
      std::max({o.prompt_tokens, std::min<std::size_t>(o.depth, 512), std::size_t{1}});
  hllm::Session<> session(model, {.context = context,
                                  .max_batch = max_batch,
                                  .threads = o.threads,
                                  .isa = o.isa,
                                  .kv_type = o.kv_type});

  // Which test of how many runs, on stderr: "[1/2] pp512 q4_0 t=2: run 2/3".
  hllm::examples::ProgressPrinter progress({.enabled = !o.log_disable});
  const std::size_t tests = (o.prompt_tokens > 0 ? 1 : 0) + (o.gen_tokens > 0 ? 1 : 0);
  const auto show = [&](std::size_t test, const std::string& name, std::size_t run) {
    const std::string what =
        run == 0 ? "warm-up" : "run " + std::to_string(run) + "/" + std::to_string(o.reps);
    progress.status("[" + std::to_string(test) + "/" + std::to_string(tests) + "] " + name + " " +
                    type_name + " t=" + std::to_string(session.threads()) + ": " + what);
  };

  hllm::ThreadPool probe_pool(session.threads());
  progress.status("measuring read bandwidth and arithmetic peaks");
  Bandwidth bw = measure_read_bandwidth(probe_pool);  // again after the tests
  const Peaks peaks = measure_peaks(probe_pool, session.isa());
  const hllm::ModelWeights& w = model.weights();
  const Peak peak = peak_for(w.layers.at(0).wq.type, peaks, session.isa());

  // Per token: the bytes decode reads (every matrix once; the embedding reads one row) and the
  // ideal prefill time, each matrix's 2·rows·cols operations at the peak of its own type. Of a
  // mixture of experts a token reads and runs n_used of n_experts experts (the active
  // parameters; decode's roofline counts those), plus the router.
  const double expert_share =
      config.n_experts > 0 ? double(config.n_experts_used) / double(config.n_experts) : 1.0;
  double weight_bytes = 0, matmul_seconds = 0, all_bytes = 0;  // active per token; all of them
  const auto count = [&](const hllm::WeightTensor& t, double share) {
    weight_bytes += share * double(t.bytes());
    if (share > 0) all_bytes += double(t.bytes());
    const Peak p = peak_for(t.type, peaks, session.isa());
    matmul_seconds += p.ops > 0 ? share * 2.0 * double(t.rows) * double(t.cols) / p.ops : 0.0;
  };
  for (const auto& layer : w.layers) {
    for (const hllm::WeightTensor* t : layer.projections()) count(*t, 1.0);
    for (const hllm::FeedForwardWeights& e : layer.experts)
      for (const hllm::WeightTensor* t : {&e.gate, &e.up, &e.down})
        count(*t, expert_share - 1.0);  // the loop above counted them whole
    if (!layer.router.empty()) count(layer.router, 1.0);
  }
  const hllm::WeightTensor& output = model.output_weight();
  weight_bytes += double(output.bytes());
  all_bytes += double(output.bytes());
  const double output_flops = 2.0 * double(output.rows) * double(output.cols);
  const double kv_bytes_per_position =
      double(session.kv_cache().bytes()) / double(session.context());

  std::vector<Measurement> results;
  std::vector<std::int32_t> prompt(o.prompt_tokens);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % std::size_t(config.vocab_size));
  if (o.prompt_tokens > 0) {
    const std::string name = "pp" + std::to_string(o.prompt_tokens);
    show(1, name, 0);
    session.prefill(prompt);  // warm-up: page in the weights
    std::vector<double> rates;
    for (std::size_t r = 0; r < o.reps; ++r) {
      show(1, name, r + 1);
      session.reset();
      const auto start = Clock::now();
      session.prefill(prompt);
      rates.push_back(double(o.prompt_tokens) / seconds(start, Clock::now()));
    }
    Measurement m = summarize(name, rates);
    // Float32 work on the FP32 peak: attention, 4·n_heads·head_dim FLOPs per visible key (keys
    // average p/2), and the output projection, which runs for the last token only (the whole
    // prompt is one chunk) with float32 activations.
    const double p = double(o.prompt_tokens);
    const double attn_flops = 4.0 * double(config.n_layers * config.q_dim()) * p / 2.0;
    const double fp32_seconds = peaks.fp32 > 0 ? (attn_flops + output_flops / p) / peaks.fp32 : 0.0;
    m.roofline_fraction = peak.ops > 0 ? m.mean * (matmul_seconds + fp32_seconds) : 0.0;
    results.push_back(m);
  }
  if (o.gen_tokens > 0) {
    const std::string name = "tg" + std::to_string(o.gen_tokens) +
                             (o.depth > 0 ? " @ d" + std::to_string(o.depth) : std::string());
    // The depth's tokens are prefilled once, untimed; each pass rewinds the cache to them.
    session.reset();
    if (o.depth > 0) {
      progress.status("prefilling the depth of " + std::to_string(o.depth) + " tokens");
      std::vector<std::int32_t> context_tokens(o.depth);
      for (std::size_t i = 0; i < o.depth; ++i)
        context_tokens[i] =
            static_cast<std::int32_t>((i * 7919 + 13) % std::size_t(config.vocab_size));
      session.prefill(context_tokens);
    }
    std::vector<double> rates;
    for (std::size_t r = 0; r < o.reps + 1; ++r) {  // the first pass is a warm-up
      show(tests, name, r);
      session.rewind(o.depth);
      std::int32_t token = 1;
      const auto start = Clock::now();
      for (std::size_t i = 0; i < o.gen_tokens; ++i) {
        session.decode(token);
        token = static_cast<std::int32_t>((token * 31 + 7) % config.vocab_size);
      }
      if (r > 0) rates.push_back(double(o.gen_tokens) / seconds(start, Clock::now()));
    }
    Measurement m = summarize(name, rates);
    m.bytes_per_token =
        weight_bytes + kv_bytes_per_position * (double(o.depth) + double(o.gen_tokens) / 2.0);
    results.push_back(m);
  }

  // The second probe; the decode fractions are against the better of the two.
  progress.status("measuring read bandwidth again");
  bw.merge(measure_read_bandwidth(probe_pool));
  progress.finish();  // the results start on a line of their own
  const double bandwidth = bw.best;
  for (Measurement& m : results)
    if (m.test[0] == 't') m.roofline_fraction = m.mean * m.bytes_per_token / bandwidth;

  if (o.output == "json") {
    std::printf("[\n");
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Measurement& m = results[i];
      std::printf(
          "  {\"model\": \"%s\", \"test\": \"%s\", \"type\": \"%s\", \"repacked\": %s, "
          "\"kv_type\": \"%s\", \"threads\": %zu, "
          "\"isa\": \"%s\", \"tokens_per_s\": %.3f, \"stddev\": %.3f, \"bandwidth_gbs\": %.2f, "
          "\"bandwidth_4k_pages_gbs\": %.2f, \"huge_pages\": %s, "
          "\"fp32_peak_gflops\": %.1f, \"int8_peak_gops\": %.1f, \"bf16_peak_gflops\": %.1f, "
          "\"peak_gops\": %.1f, \"peak_kind\": \"%s\", \"roofline\": \"%s\", "
          "\"roofline_fraction\": %.4f}%s\n",
          model_name.c_str(), m.test.c_str(), type_name.c_str(), repacked ? "true" : "false",
          hllm::to_string(session.kv_type()), session.threads(), hllm::to_string(session.isa()),
          m.mean, m.stddev, bandwidth / 1e9, bw.small / 1e9, bw.huge ? "true" : "false",
          peaks.fp32 / 1e9, peaks.int8 / 1e9, peaks.bf16 / 1e9, peak.ops / 1e9, peak.kind,
          m.test[0] == 't' ? "bandwidth" : peak.kind, m.roofline_fraction,
          i + 1 < results.size() ? "," : "");
    }
    std::printf("]\n");
  } else {
    std::printf(
        "read bandwidth %.1f GB/s (%.1f GB/s with 4 KiB pages%s); peaks: FP32 FMA %.0f "
        "GFLOP/s",
        bandwidth / 1e9, bw.small / 1e9, bw.huge ? "" : "; no huge pages granted",
        peaks.fp32 / 1e9);
    if (peaks.int8 > 0) std::printf(", %s dot %.0f GOP/s", peaks.int8_kind, peaks.int8 / 1e9);
    if (peaks.bf16 > 0) std::printf(", BF16 %.0f GFLOP/s", peaks.bf16 / 1e9);
    std::printf(" (%zu threads, %s, %s KV cache)\n\n", session.threads(),
                hllm::to_string(session.isa()), hllm::to_string(session.kv_type()));
    std::printf("| model | type | weights | threads | test | t/s | of roofline |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    char weights_column[64];  // with experts: all of them, and what a token reads
    if (config.n_experts > 0)
      std::snprintf(weights_column, sizeof weights_column, "%.2f GiB, %.2f active",
                    all_bytes / double(1u << 30), weight_bytes / double(1u << 30));
    else
      std::snprintf(weights_column, sizeof weights_column, "%.2f GiB",
                    weight_bytes / double(1u << 30));
    for (const Measurement& m : results) {
      const std::string of =
          m.test[0] == 't' ? std::string("bandwidth") : std::string(peak.kind) + " peak";
      std::printf("| %s | %s | %s | %zu | %s | %.2f ± %.2f | %.1f%% of %s |\n", model_name.c_str(),
                  (type_name + (repacked ? " (repacked)" : "")).c_str(), weights_column,
                  session.threads(), m.test.c_str(), m.mean, m.stddev, 100.0 * m.roofline_fraction,
                  of.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  hllm::cli::Parser cli("hllm-bench",
                        "Prompt-processing and generation speed, in the spirit of llama-bench, "
                        "against this machine's measured bandwidth and arithmetic peaks.\n"
                        "  hllm-bench --preset NAME --type TYPE --save FILE.gguf writes the "
                        "synthetic model as GGUF (llama.cpp-loadable) and exits.");
  hllm::examples::model_source_options(cli, o.model_path, o.preset, o.type);
  cli.number_in<std::size_t>("-p,--n-prompt", o.prompt_tokens, 0, 65536, "a number of tokens",
                             "Prompt tokens per test");
  cli.number_in<std::size_t>("-n,--n-gen", o.gen_tokens, 0, 65536, "a number of tokens",
                             "Generated tokens per test");
  cli.number_in<std::size_t>("-d,--depth", o.depth, 0, 65536, "a number of tokens",
                             "Tokens in the KV cache before each generation test (prefilled "
                             "once, untimed; llama-bench's -d, ik_llama.cpp's -gp)");
  cli.number_in<std::size_t>("-r,--repetitions", o.reps, 1, 1000, "a number of repetitions",
                             "Repetitions of each test");
  cli.threads(o.threads);
  cli.isa(o.isa);
  cli.choice("--repack", o.repack, {"auto", "never", "always"},
             "Load-time repacking of the projections into 16-row panels (auto: the layouts the "
             "kernels of the ISA that runs prefer: the panels of every type on every vector ISA, "
             "and 8-row groups where the panels do not fit with AVX-512 VNNI)");
  cli.flag("--f16-as-bf16", o.f16_as_bf16,
           "Round F16 projections to BF16 while repacking, where the CPU runs vdpbf16ps faster "
           "than FP32 FMAs (AMD's AVX512-BF16; LoadOptions::f16_as_bf16: lossy, as "
           "ik_llama.cpp's -rtr; prefill runs vdpbf16ps)");
  cli.kv_type(o.kv_type);
  cli.choice("-o,--output", o.output, {"md", "json"}, "Output format");
  cli.flag("--log-disable", o.log_disable,
           "Print nothing on stderr but errors (no progress of the tests or the load)");
  cli.flag("--plain", o.plain,
           "With --preset: the same shape with every block variant (biases, QK-norm, Gemma's "
           "norms, caps and windows, experts) off, as llama: what the variants cost");
  cli.path("--save", o.save_path, "Write the synthetic model as GGUF and exit");
  cli.path("--vocab", o.vocab_path, "With --save: the tokenizer of this GGUF file");
  cli.parse(argc, argv);
  if (o.model_path.empty() == o.preset.empty())
    cli.fail("give exactly one of -m FILE or --preset NAME");
  if (!o.save_path.empty() && o.preset.empty()) cli.fail("--save needs --preset and --type");
  if (!o.vocab_path.empty() && o.save_path.empty()) cli.fail("--vocab only goes with --save");
  if (o.plain && o.preset.empty()) cli.fail("--plain needs --preset");
  const hllm::DType type = hllm::examples::preset_type(cli, o.model_path, o.type);

  try {
    if (!o.save_path.empty()) {
      const hllm::ModelConfig config = hllm::examples::synthetic_config(o.preset, o.plain);
      hllm::Vocabulary vocab =
          o.vocab_path.empty()
              ? hllm::examples::synthetic_vocabulary(std::size_t(config.vocab_size))
              : hllm::vocabulary_from_gguf(hllm::gguf::File::open(o.vocab_path));
      const auto start = Clock::now();
      hllm::examples::save_synthetic_gguf(o.save_path, config, type, 1, std::move(vocab));
      std::printf("wrote %s: %s (synthetic), %s, %s vocabulary, %.1f s\n", o.save_path.c_str(),
                  o.preset.c_str(), hllm::dtype_name(type).c_str(),
                  o.vocab_path.empty() ? "synthetic SentencePiece" : o.vocab_path.c_str(),
                  seconds(start, Clock::now()));
      return 0;
    }

    const hllm::Repack mode = o.repack == "always" ? hllm::Repack::always
                              : o.repack == "auto" ? hllm::Repack::automatic
                                                   : hllm::Repack::never;
    hllm::examples::BenchModel m = hllm::examples::load_bench_model(
        o.model_path, o.preset, type, o.isa.value_or(hllm::kernels::active().isa), mode,
        !o.log_disable, o.plain, o.f16_as_bf16);
    run_benchmark(o, m.config, std::move(m.weights), m.name, m.type_name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-bench: %s\n", e.what());
    return 1;
  }
}
