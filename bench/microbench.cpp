// Google Benchmark microbenchmarks of every building block on the portable (scalar reference)
// path, at TinyLlama-1.1B shapes. These are the baseline that the optimized kernels must beat.
// Counters: bytes_per_second (memory-bound ops, e.g. matvec) and FLOP/s (compute-bound ops).
//
//   ./build/release/bench/hllm-microbench --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hllm/hllm.hpp"
#include "hllm/simd/intrinsics.hpp"

namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

template <class T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = hllm::from_float<T>(v[i]);
  return out;
}

// The counters of every matmul benchmark: FLOP/s (2·rows·cols·n per call) and, where
// weight_bytes is given, the weights' bytes per second.
void set_matmul_counters(benchmark::State& state, std::size_t weight_bytes, std::size_t rows,
                         std::size_t cols, std::size_t n) {
  const double iterations = static_cast<double>(state.iterations());
  if (weight_bytes > 0)
    state.SetBytesProcessed(static_cast<std::int64_t>(iterations * double(weight_bytes)));
  state.counters["FLOP/s"] =
      benchmark::Counter(iterations * 2.0 * double(rows * cols * n), benchmark::Counter::kIsRate);
}

// y[n][rows] = x[n][cols] · W^T for W [rows][cols] of element type T, single-threaded, on the
// kernels of one ISA (Args: isa (0 scalar reference loop, 1 avx2, 2 avx512, 3 avx_vnni), rows,
// cols, n_tokens). Batch 1 is a matvec and reports weight GB/s; every run reports FLOP/s
// (2·rows·cols·n per call). "reference" is kernels/reference.hpp's plain loop, the baseline.
// The Args of the matmul benchmarks: isa, rows, cols, n_tokens. False (and the benchmark
// skipped) if this CPU cannot run the ISA.
struct MatmulShape {
  hllm::Isa isa;
  std::size_t rows, cols, n;
};
bool matmul_shape(benchmark::State& state, MatmulShape& shape) {
  shape = {static_cast<hllm::Isa>(state.range(0)), static_cast<std::size_t>(state.range(1)),
           static_cast<std::size_t>(state.range(2)), static_cast<std::size_t>(state.range(3))};
  if (hllm::cpu_supports(shape.isa)) return true;
  state.SkipWithError("ISA not supported by this CPU");
  return false;
}

template <class T>
void BM_Matmul(benchmark::State& state) {
  MatmulShape shape;
  if (!matmul_shape(state, shape)) return;
  const auto [isa, rows, cols, n] = shape;
  const auto w = convert<T>(random_floats(rows * cols, 1));
  const auto x = random_floats(n * cols, 2);
  std::vector<float> y(n * rows);
  const auto fn = hllm::kernels::table_for(isa).matmul_for(hllm::WeightTensor::dtype_of<T>());
  hllm::AlignedBuffer<std::byte> scratch(hllm::kernels::matmul_scratch_bytes(cols, n));
  for (auto _ : state) {
    if (isa == hllm::Isa::scalar)
      hllm::reference::matmul(w.data(), rows, cols, x.data(), n, y.data());
    else
      fn(w.data(), rows, cols, x.data(), n, y.data(), 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(isa == hllm::Isa::scalar ? "reference" : hllm::to_string(isa));
  set_matmul_counters(state, rows * cols * sizeof(T), rows, cols, n);
}
// Real shapes: q/o projection, gate/up, down, the output head; batch 1 (decode) and 64.
void matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {0, 1, 2}) {
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}})
      b->Args({isa, rows, cols, 1});
    if (isa != 0)
      for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}})
        b->Args({isa, rows, cols, 512});
  }
  b->ArgNames({"isa", "rows", "cols", "n"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Matmul<float>)->Apply(matmul_shapes);
BENCHMARK(BM_Matmul<hllm::f16>)->Apply(matmul_shapes);
BENCHMARK(BM_Matmul<hllm::bf16>)->Apply(matmul_shapes);

// F32 and F16 weights in the 16-row panels a load repacks them into (DType::f32_x16, f16_x16),
// and BF16 in its 16-row pair panels (bf16_x16) on their float-activation kernel: decode, a
// small batch and prefill.
template <class T>
void BM_MatmulFloatPanels(benchmark::State& state) {
  MatmulShape shape;
  if (!matmul_shape(state, shape)) return;
  const auto [isa, rows, cols, n] = shape;
  const auto w = convert<T>(random_floats(rows * cols, 1));
  const hllm::WeightTensor file{hllm::WeightTensor::dtype_of<T>(), w.data(), rows, cols, "w"};
  hllm::AlignedBuffer<std::byte> panels(file.bytes());
  const hllm::DType type = hllm::repack_tensor(file, panels.data());
  const auto x = random_floats(n * cols, 2);
  std::vector<float> y(n * rows);
  const auto fn = hllm::kernels::table_for(isa).matmul_for(type);
  hllm::AlignedBuffer<std::byte> scratch(hllm::kernels::matmul_scratch_bytes(cols, n));
  for (auto _ : state) {
    fn(panels.data(), rows, cols, x.data(), n, y.data(), 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(hllm::to_string(isa));
  set_matmul_counters(state, rows * cols * sizeof(T), rows, cols, n);
}
void float_panel_shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}})
      for (int n : {1, 8, 512}) b->Args({isa, rows, cols, n});
  b->ArgNames({"isa", "rows", "cols", "n"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_MatmulFloatPanels<float>)->Apply(float_panel_shapes);
BENCHMARK(BM_MatmulFloatPanels<hllm::f16>)->Apply(float_panel_shapes);
BENCHMARK(BM_MatmulFloatPanels<hllm::bf16>)->Apply(float_panel_shapes);

// BF16 weights repacked into 16-row pair panels (DType::bf16_x16, as a loaded model holds them
// on AVX-512 CPUs) on the fast path: the GEMM above without its weight packing (n = 512) and
// the panels' dot tile (n = 1), both on bf16 activations; exact = 1: the float-activation
// kernel (the exact path; the one-token figure the previous commit measured for decode).
// Counters as BM_Matmul.
void BM_MatmulBf16Panels(benchmark::State& state) {
  const auto& table = hllm::kernels::active();
  const auto rows = static_cast<std::size_t>(state.range(0)),
             cols = static_cast<std::size_t>(state.range(1)),
             n = static_cast<std::size_t>(state.range(2));
  const auto fn =
      state.range(3) != 0 ? table.matmul_for(hllm::DType::bf16_x16) : table.matmul_bf16_x16_dot;
  if (fn == nullptr) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  const auto w = convert<hllm::bf16>(random_floats(rows * cols, 1));
  std::vector<std::byte> panels(rows * cols * sizeof(hllm::bf16));
  hllm::repack_tensor({hllm::DType::bf16, w.data(), rows, cols, "w"}, panels.data());
  const auto x = random_floats(n * cols, 2);
  std::vector<float> y(n * rows);
  hllm::AlignedBuffer<std::byte> scratch(hllm::kernels::matmul_scratch_bytes(cols, n));
  for (auto _ : state) {
    fn(panels.data(), rows, cols, x.data(), n, y.data(), 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_matmul_counters(state, panels.size(), rows, cols, n);
}
void bf16_panel_shapes(benchmark::internal::Benchmark* b) {
  for (int exact : {0, 1})
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}})
      b->Args({rows, cols, 1, exact});
  for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}})
    b->Args({rows, cols, 512, 0});
  b->ArgNames({"rows", "cols", "n", "exact"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_MatmulBf16Panels)->Apply(bf16_panel_shapes);

// The same for quantized weights through the integer kernels (8-bit activations, quantized
// once outside the timed loop; BM_QuantizeActivations times that step). Args: isa (1 avx2,
// 2 avx512 with VNNI where the CPU has it, 3 avx_vnni), rows, cols, n_tokens. Counters as
// BM_Matmul: weight bytes per second (the file's bytes, scales included) and FLOP/s. Q4_K or Q6_K
// super-blocks of random bytes (every bit pattern is a valid block) with small scales.
std::vector<std::byte> random_k_quant(hllm::DType type, std::size_t n) {
  const std::size_t block_bytes = type == hllm::DType::q4_k   ? sizeof(hllm::BlockQ4_K)
                                  : type == hllm::DType::q5_k ? sizeof(hllm::BlockQ5_K)
                                                              : sizeof(hllm::BlockQ6_K);
  std::vector<std::byte> bytes(n / hllm::kQK_K * block_bytes);
  std::mt19937 rng(1);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  const hllm::f16 d = hllm::from_float<hllm::f16>(1.0f / 64);
  for (std::size_t i = 0; i < n / hllm::kQK_K; ++i) {
    if (type == hllm::DType::q4_k)
      reinterpret_cast<hllm::BlockQ4_K*>(bytes.data())[i].d =
          reinterpret_cast<hllm::BlockQ4_K*>(bytes.data())[i].dmin = d;
    else if (type == hllm::DType::q5_k)
      reinterpret_cast<hllm::BlockQ5_K*>(bytes.data())[i].d =
          reinterpret_cast<hllm::BlockQ5_K*>(bytes.data())[i].dmin = d;
    else
      reinterpret_cast<hllm::BlockQ6_K*>(bytes.data())[i].d = d;
  }
  return bytes;
}

// Q4_1 blocks of random nibbles with d = 1/8 and m = −1 (values in [−1, 0.875]).
std::vector<std::byte> random_q4_1(std::size_t n) {
  std::vector<hllm::BlockQ4_1> blocks(n / hllm::kQK4_1);
  std::mt19937 rng(1);
  for (auto& b : blocks) {
    b.d = hllm::from_float<hllm::f16>(1.0f / 8);
    b.m = hllm::from_float<hllm::f16>(-1.0f);
    for (auto& q : b.qs) q = static_cast<std::uint8_t>(rng());
  }
  std::vector<std::byte> bytes(blocks.size() * sizeof(hllm::BlockQ4_1));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

// rows × cols random weights of a quantized type; the repacked types as the file type's bytes,
// repacked as a loader would (and, as a loader places them, 64-byte aligned: the file's layout
// has no alignment to keep).
hllm::AlignedBuffer<std::byte> random_quant_weights(hllm::DType type, std::size_t rows,
                                                    std::size_t cols) {
  const hllm::DType file_type = hllm::file_type_of(type);
  const auto file_layout = file_type == hllm::DType::q4_k || file_type == hllm::DType::q5_k ||
                                   file_type == hllm::DType::q6_k
                               ? random_k_quant(file_type, rows * cols)
                           : file_type == hllm::DType::q4_1
                               ? random_q4_1(rows * cols)
                               : hllm::quant::quantize(file_type, random_floats(rows * cols, 1));
  hllm::AlignedBuffer<std::byte> w(hllm::WeightTensor{type, nullptr, rows, cols, "w"}.bytes());
  if (type != file_type)
    hllm::repack_tensor({file_type, file_layout.data(), rows, cols, "w"}, type, w.data());
  else
    std::memcpy(w.data(), file_layout.data(), w.size());
  return w;
}

template <hllm::DType kType>
void BM_QuantMatmul(benchmark::State& state) {
  MatmulShape shape;
  if (!matmul_shape(state, shape)) return;
  const auto [isa, rows, cols, n] = shape;
  const auto& table = hllm::kernels::table_for(isa);
  const auto w = random_quant_weights(kType, rows, cols);
  const auto x = random_floats(n * cols, 2);
  std::vector<hllm::BlockQ8Act> xq(n * cols / 32);
  for (std::size_t t = 0; t < n; ++t)
    table.quantize_activations(x.data() + t * cols, cols, xq.data() + t * cols / 32);
  std::vector<float> y(n * rows);
  const auto fn = table.quant_matmul_for(kType);
  hllm::AlignedBuffer<std::byte> scratch(hllm::kernels::matmul_scratch_bytes(cols, n));
  for (auto _ : state) {
    fn(w.data(), rows, cols, xq.data(), n, y.data(), 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(hllm::to_string(isa)) +
                 (isa == hllm::Isa::avx512 && hllm::cpu_features().avx512_vnni ? "+vnni" : ""));
  set_matmul_counters(state, w.size(), rows, cols, n);
}
void quant_matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 3, 2}) {
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}})
      b->Args({isa, rows, cols, 1});
    for (auto [rows, cols] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}})
      b->Args({isa, rows, cols, 512});
  }
  b->ArgNames({"isa", "rows", "cols", "n"})->Unit(benchmark::kMillisecond);
}
// Small batches (the batched decode of several sequences): one 5632 × 2048 matrix at 1 to 32
// tokens, and the 32000 × 2048 output projection, which streams from DRAM, at 1 and 8. Each
// weight is read once per call, so the time per call should grow far slower than the tokens
// (issue target: 8 tokens within 1.5× one; docs/performance.md gives the arithmetic bound).
void small_batch_shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 3, 2}) {
    for (int n : {1, 2, 4, 8, 16, 32}) b->Args({isa, 5632, 2048, n});
    for (int n : {1, 2, 4, 8}) b->Args({isa, 32000, 2048, n});
  }
  b->ArgNames({"isa", "rows", "cols", "n"})->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_QuantMatmul<hllm::DType::q8_0>)
    ->Name("BM_SmallBatch<q8_0>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_0>)
    ->Name("BM_SmallBatch<q4_0>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_k>)
    ->Name("BM_SmallBatch<q4_k>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q6_k>)
    ->Name("BM_SmallBatch<q6_k>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q8_0_x16>)
    ->Name("BM_SmallBatch<q8_0_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_0_x16>)
    ->Name("BM_SmallBatch<q4_0_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_1_x16>)
    ->Name("BM_SmallBatch<q4_1_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_k_x16>)
    ->Name("BM_SmallBatch<q4_k_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q5_k_x16>)
    ->Name("BM_SmallBatch<q5_k_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q6_k_x16>)
    ->Name("BM_SmallBatch<q6_k_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_MatmulFloatPanels<hllm::f16>)
    ->Name("BM_SmallBatch<f16_x16>")
    ->Apply(small_batch_shapes);
BENCHMARK(BM_Matmul<hllm::f16>)->Name("BM_SmallBatch<f16>")->Apply(small_batch_shapes);

BENCHMARK(BM_QuantMatmul<hllm::DType::q8_0>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_0>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q8_0_x8>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_0_x8>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q8_0_x16>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_0_x16>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_1>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_1_x16>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_k>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q5_k>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_k_x8>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q4_k_x16>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q5_k_x16>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q6_k>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q6_k_x8>)->Apply(quant_matmul_shapes);
BENCHMARK(BM_QuantMatmul<hllm::DType::q6_k_x16>)->Apply(quant_matmul_shapes);

// The exact path for quantized weights (float32 activations, no activation rounding): what a
// Q8_0 output projection and exact sessions run on. Decode shapes only; the file layouts, and
// Q6_K repacked (an exact session on a model whose Q6_K output was repacked for the 8-bit path).
// Counters as above.
template <hllm::DType kType>
void BM_ExactQuantMatmul(benchmark::State& state) {
  MatmulShape shape;
  if (!matmul_shape(state, shape)) return;
  const auto [isa, rows, cols, n] = shape;
  const auto w = random_quant_weights(kType, rows, cols);
  const auto x = random_floats(n * cols, 2);
  std::vector<float> y(n * rows);
  const auto fn = hllm::kernels::table_for(isa).dequant_matmul_for(kType);
  hllm::AlignedBuffer<std::byte> scratch(hllm::kernels::matmul_scratch_bytes(cols, n));
  for (auto _ : state) {
    fn(w.data(), rows, cols, x.data(), n, y.data(), 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(hllm::to_string(isa));
  set_matmul_counters(state, w.size(), rows, cols, n);
}
void exact_quant_matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (auto [rows, cols] : {std::pair{5632, 2048}, {32000, 2048}}) b->Args({isa, rows, cols, 1});
  b->ArgNames({"isa", "rows", "cols", "n"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ExactQuantMatmul<hllm::DType::q8_0>)->Apply(exact_quant_matmul_shapes);
BENCHMARK(BM_ExactQuantMatmul<hllm::DType::q6_k>)->Apply(exact_quant_matmul_shapes);
BENCHMARK(BM_ExactQuantMatmul<hllm::DType::q6_k_x8>)->Apply(exact_quant_matmul_shapes);
BENCHMARK(BM_ExactQuantMatmul<hllm::DType::q6_k_x16>)->Apply(exact_quant_matmul_shapes);

// 8-bit activation quantization of one 2048-wide token (the per-matmul step before the
// integer kernels); reports the float bytes read per second.
void BM_QuantizeActivations(benchmark::State& state) {
  const std::size_t cols = 2048;
  const auto x = random_floats(cols, 1);
  std::vector<hllm::BlockQ8Act> xq(cols / 32);
  const auto& table = hllm::kernels::active();
  for (auto _ : state) {
    table.quantize_activations(x.data(), cols, xq.data());
    benchmark::DoNotOptimize(xq.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * cols * sizeof(float)));
}
BENCHMARK(BM_QuantizeActivations);

// RMSNorm of one 2048-wide token: reads x and weight, writes out.
void BM_RMSNorm(benchmark::State& state) {
  const std::size_t dim = static_cast<std::size_t>(state.range(0));
  const auto x = random_floats(dim, 1), w = random_floats(dim, 2);
  std::vector<float> out(dim);
  for (auto _ : state) {
    hllm::reference::rms_norm(x.data(), w.data(), dim, 1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * dim * sizeof(float)));
}
BENCHMARK(BM_RMSNorm)->Arg(2048);

// RoPE on one token's 32 query heads of 64 dims, including the per-position sin/cos.
void BM_Rope(benchmark::State& state) {
  const hllm::Rope rope(hllm::RopeConfig{}, 64);
  auto x = random_floats(32 * 64, 1);
  std::int64_t position = 0;
  for (auto _ : state) {
    rope.apply(x.data(), 32, position++ & 2047);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * 2 * x.size() * sizeof(float)));
}
BENCHMARK(BM_Rope);

// SiLU(gate)·up over the 5632-wide FFN hidden layer.
void BM_SiluMul(benchmark::State& state) {
  const std::size_t n = 5632;
  const auto g = random_floats(n, 1), u = random_floats(n, 2);
  std::vector<float> out(n);
  for (auto _ : state) {
    hllm::reference::silu_mul(g.data(), u.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * n * sizeof(float)));
}
BENCHMARK(BM_SiluMul);

// One decode step of attention: `heads` query heads over `context` cached positions of
// `kv_heads` KV heads of 64, with the cache in KV elements: TinyLlama's 32 over 4, SmolLM2-135M's
// 9 over 3 (a group of 3, the tile padded to 4). Reports the cache bytes read per second (each
// KV head's keys and values once: the grouped kernel reads them once for the group's heads).
template <class KV>
void BM_Attention(benchmark::State& state) {
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  const std::size_t heads = static_cast<std::size_t>(state.range(1));
  const std::size_t kv_heads = static_cast<std::size_t>(state.range(2)), head_dim = 64;
  hllm::KVCache<KV> cache(1, kv_heads, head_dim, context);
  for (std::size_t p = 0; p < context; ++p) {
    const auto k = random_floats(kv_heads * head_dim, 3 + 2 * static_cast<unsigned>(p));
    const auto v = random_floats(kv_heads * head_dim, 4 + 2 * static_cast<unsigned>(p));
    cache.store(0, p, k.data(), v.data());
  }
  const hllm::Attention attention({heads, kv_heads, head_dim, 0});
  const auto q = random_floats(heads * head_dim, 4);
  std::vector<float> out(heads * head_dim);
  for (auto _ : state) {
    attention.forward(q.data(), context - 1, cache, 0, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * cache.bytes()));
}
void attention_shapes(benchmark::internal::Benchmark* b) {
  for (auto [heads, kv_heads] : {std::pair{32, 4}, {9, 3}})
    for (int context : {8, 64, 128, 512, 2048}) b->Args({context, heads, kv_heads});
  b->ArgNames({"context", "heads", "kv_heads"})->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Attention<float>)->Apply(attention_shapes);
BENCHMARK(BM_Attention<hllm::f16>)->Apply(attention_shapes);
BENCHMARK(BM_Attention<hllm::BlockQ8_0>)->Apply(attention_shapes);

// The same step through a paged cache: the context in 16-token blocks of a pool shared with a
// second sequence (so a sequence's blocks are not adjacent), read through its block table by
// the paged kernels: the same arithmetic as BM_Attention on rows found through the table.
template <class KV>
void BM_AttentionPaged(benchmark::State& state) {
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  const std::size_t heads = 32, kv_heads = 4, head_dim = 64, group = heads / kv_heads;
  const std::size_t n_blocks = 2 * (context + 15) / 16;
  hllm::KVBlockAllocator pool(n_blocks);
  hllm::PagedKVStorage<KV> storage(n_blocks, 16, 1, kv_heads, head_dim);
  hllm::KVBlockTable table, other;
  for (std::size_t n = 16; n < context + 16; n += 16)
    if (!other.reserve(pool, n) || !table.reserve(pool, std::min(n, context))) std::abort();
  for (std::size_t p = 0; p < context; ++p) {
    const auto k = random_floats(kv_heads * head_dim, 3 + 2 * static_cast<unsigned>(p));
    const auto v = random_floats(kv_heads * head_dim, 4 + 2 * static_cast<unsigned>(p));
    storage.store(table.block_for(p), table.slot_of(p), 0, k.data(), v.data());
  }
  const auto& kernels = hllm::kernels::active();
  const auto attend = kernels.attend_group_paged_for<KV>();
  std::vector<hllm::kernels::KVBlockRows> keys, values;  // per KV head
  for (std::size_t h = 0; h < kv_heads; ++h) {
    keys.push_back(storage.rows(table.blocks(), 0, 0, h, 0));
    values.push_back(storage.rows(table.blocks(), 0, 1, h, 0));
  }
  const auto q = random_floats(heads * head_dim, 4);
  std::vector<float> out(heads * head_dim);
  const float scale = 0.125f;
  for (auto _ : state) {
    for (std::size_t h = 0; h < kv_heads; ++h)
      attend(q.data() + h * group * head_dim, keys[h], values[h], context, head_dim, group, scale,
             out.data() + h * group * head_dim);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * kv_heads * context *
                                                    hllm::kv_row_elements<KV>(head_dim) *
                                                    sizeof(KV)));
  table.release_all(pool);
  other.release_all(pool);
}
BENCHMARK(BM_AttentionPaged<float>)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionPaged<hllm::f16>)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionPaged<hllm::BlockQ8_0>)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);

// One decoded token's latent attention (DeepSeek-V2's MLA, absorbed): `group` query heads over
// `context` cached rows of one KV head 576 values wide (512 latent + 64 RoPE), f16 cache, one
// thread: what each of two threads does for DeepSeek-V2-Lite's 16 heads. Reports multiply-adds
// per second (a score and a value pass over every row for every head).
void BM_LatentAttention(benchmark::State& state) {
  const std::size_t context = static_cast<std::size_t>(state.range(0));
  const std::size_t group = static_cast<std::size_t>(state.range(1)), head_dim = 576;
  hllm::KVCache<hllm::f16> cache(1, 1, head_dim, context);
  for (std::size_t p = 0; p < context; ++p) {
    const auto k = random_floats(head_dim, 3 + static_cast<unsigned>(p));
    cache.store(0, p, k.data(), k.data());
  }
  const auto attend = hllm::kernels::active().attend_group_for<hllm::f16>();
  const auto q = random_floats(group * head_dim, 4);
  std::vector<float> out(group * head_dim);
  for (auto _ : state) {
    attend(q.data(), cache.keys(0, 0), cache.values(0, 0), context, head_dim, group, 0.07f,
           out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FMA/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 2 * group * context * head_dim),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LatentAttention)->Args({4096, 8})->Args({4096, 16})->Unit(benchmark::kMicrosecond);

// Which instructions compete with vpdpbusd for its execution pipes: 24 vpdpbusd on 24
// independent accumulators per iteration, alone (mix 0) or beside 8 instructions of one kind
// that a quantized kernel issues next to its dots (mix 1 vmulps, 2 vfmadd231ps, 3 vcvtdq2ps,
// 4 vpandd, 5 vpbroadcastd from memory, 6 vpternlogd). An iteration that takes longer than the
// dots alone means that kind shares their pipes: the bound the small-batch decodes' float
// epilogue sets (docs/performance.md, "What the pipes allow"). Compare dots/s across mixes of
// one run. AVX-512 VNNI only; the registers are named (inline assembly) so the loop is nothing
// but the instructions measured.
#if HLLM_X86
// clang-format off
#define HLLM_DOT(r) "vpdpbusd %[s], %[u], %%zmm" #r "\n\t"
#define HLLM_DOTS4(a, b, c, d) HLLM_DOT(a) HLLM_DOT(b) HLLM_DOT(c) HLLM_DOT(d)
#define HLLM_DOTS24 HLLM_DOTS4(0, 1, 2, 3) HLLM_DOTS4(4, 5, 6, 7) HLLM_DOTS4(8, 9, 10, 11) \
  HLLM_DOTS4(12, 13, 14, 15) HLLM_DOTS4(16, 17, 18, 19) HLLM_DOTS4(20, 21, 22, 23)
// clang-format on
// Eight instructions of one kind on registers 24-27 (two each: their latency is hidden), their
// sources the loop's operands.
#define HLLM_EIGHT(op) op(24) op(25) op(26) op(27) op(24) op(25) op(26) op(27)
#define HLLM_MUL(r) "vmulps %[b], %[a], %%zmm" #r "\n\t"
#define HLLM_FMA(r) "vfmadd231ps %[b], %[a], %%zmm" #r "\n\t"
#define HLLM_CVT(r) "vcvtdq2ps %[u], %%zmm" #r "\n\t"
#define HLLM_AND(r) "vpandd %[s], %[u], %%zmm" #r "\n\t"
// The multiply-adds' accumulators start each iteration at zero (a zeroing idiom, no pipe), so no
// value is left over from outside the loop.
#define HLLM_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define HLLM_BCST(r) "vpbroadcastd (%[group]), %%zmm" #r "\n\t"
#define HLLM_TERN(r) "vpternlogd $0xd8, %[s], %[u], %%zmm" #r "\n\t"
#define HLLM_MIX_LOOP(extra)                                                                       \
  for (std::size_t i = 0; i < iterations; ++i) {                                                   \
    __asm__ volatile(                                                                              \
        HLLM_DOTS24 extra::[group] "r"(&group), [u] "v"(u), [s] "v"(s), [a] "v"(a), [b] "v"(b)     \
        : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",        \
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", \
          "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27");        \
  }
__attribute__((target("avx512f,avx512vnni"), noinline)) void dot_mix_loop(int mix,
                                                                          std::size_t iterations) {
  alignas(64) static const std::int32_t group = 0x01020304;
  // Defined inputs (normal floats: a denormal or NaN operand may take a slower path on some
  // cores), in the four registers the loop does not overwrite.
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  switch (mix) {
    case 0: HLLM_MIX_LOOP(""); break;
    case 1: HLLM_MIX_LOOP(HLLM_EIGHT(HLLM_MUL)); break;
    case 2:
      HLLM_MIX_LOOP(HLLM_ZERO(24) HLLM_ZERO(25) HLLM_ZERO(26) HLLM_ZERO(27) HLLM_EIGHT(HLLM_FMA));
      break;
    case 3: HLLM_MIX_LOOP(HLLM_EIGHT(HLLM_CVT)); break;
    case 4: HLLM_MIX_LOOP(HLLM_EIGHT(HLLM_AND)); break;
    case 5: HLLM_MIX_LOOP(HLLM_EIGHT(HLLM_BCST)); break;
    default: HLLM_MIX_LOOP(HLLM_EIGHT(HLLM_TERN)); break;
  }
}
#undef HLLM_MIX_LOOP
#undef HLLM_TERN
#undef HLLM_BCST
#undef HLLM_ZERO
#undef HLLM_AND
#undef HLLM_CVT
#undef HLLM_FMA
#undef HLLM_MUL
#undef HLLM_EIGHT
#undef HLLM_DOTS24
#undef HLLM_DOTS4
#undef HLLM_DOT

void BM_DotIssue(benchmark::State& state) {
  const auto& cpu = hllm::cpu_features();
  if (!cpu.avx512f || !cpu.avx512_vnni) {
    state.SkipWithError("needs AVX-512 VNNI");
    return;
  }
  constexpr std::size_t kIterations = 1 << 16;
  for (auto _ : state) dot_mix_loop(static_cast<int>(state.range(0)), kIterations);
  state.counters["dots/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kIterations * 24), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DotIssue)->ArgName("mix")->DenseRange(0, 6)->Unit(benchmark::kMicrosecond);
#endif

// One decode step of a small whole model (dim 512, 4 layers): the composition overhead.
void BM_ModelDecode(benchmark::State& state) {
  hllm::ModelConfig c;
  c.vocab_size = 4096;
  c.dim = 512;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.ffn_dim = 1408;
  c.context_length = 1024;
  const hllm::Llama<> model(c, hllm::random_weights(c, hllm::DType::f32, 1));
  hllm::Session<> session(model);
  std::int32_t token = 1;
  for (auto _ : state) {
    if (session.position() == session.context()) session.reset();
    benchmark::DoNotOptimize(session.decode(token).data());
    token = (token * 7 + 3) % 4096;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ModelDecode)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
