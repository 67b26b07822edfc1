#pragma once
// Compute: what a forward pass runs on, a kernel table (one ISA) and a thread pool. It turns a
// whole-tensor operation into per-thread calls of the table's kernels: matmuls split their
// output rows across threads (decode and prefill alike; each thread streams its own rows of the
// weights once), element-wise work splits its elements.

#include <cstddef>
#include <span>

#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/thread_pool.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"

namespace hllm {

class Compute {
 public:
  // ~2^17 multiply-adds take ~10-30 µs on one core: below that, one thread beats two.
  static constexpr std::size_t kMinParallelWork = std::size_t{1} << 17;

  // activation_scratch: room for the 8-bit activations of quantized-weight matmuls,
  // [n_tokens][cols/32] blocks for the largest call. Empty: quantized weights take the exact
  // reference path (float32 activations, dequantized rows), as SessionOptions::exact asks.
  Compute(const kernels::KernelTable& table, ThreadPool& pool,
          std::span<BlockQ8Act> activation_scratch = {})
      : table_(&table), pool_(&pool), activations_(activation_scratch) {}

  const kernels::KernelTable& kernels() const noexcept { return *table_; }
  ThreadPool& pool() const noexcept { return *pool_; }
  Isa isa() const noexcept { return table_->isa; }

  // y[t][r] = sum_c w[r][c] x[t][c].   x: [n_tokens][w.cols], y: [n_tokens][w.rows]
  // Quantized weights use 8-bit activations and integer dot products where a kernel exists and
  // activation scratch was given; otherwise float32 activations (matmul_exact).
  void matmul(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) const {
    const kernels::QuantMatmulFn qfn = table_->quant_matmul_for(w.type);
    if (qfn == nullptr || activations_.empty()) return matmul_exact(w, x, n_tokens, y);
    const std::size_t blocks = w.cols / 32;
    if (w.cols % 32 != 0 || n_tokens * blocks > activations_.size())
      throw Error(ErrorKind::internal, "activation scratch too small for a quantized matmul", {},
                  w.name);
    BlockQ8Act* xq = activations_.data();
    const kernels::QuantizeFn quantize = table_->quantize_activations;
    split(n_tokens, 1, n_tokens * w.cols, [&](std::size_t begin, std::size_t end) {
      for (std::size_t t = begin; t < end; ++t) quantize(x + t * w.cols, w.cols, xq + t * blocks);
    });
    // 16-row grains keep each thread's share a whole number of register tiles.
    split(w.rows, 16, w.rows * w.cols * n_tokens, [&](std::size_t begin, std::size_t end) {
      qfn(w.data, w.rows, w.cols, xq, n_tokens, y, begin, end);
    });
  }

  // The same with float32 activations for every weight type (quantized weights are dequantized
  // block by block): no activation rounding.
  void matmul_exact(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) const {
    kernels::MatmulFn fn = table_->matmul_for(w.type);
    if (fn == nullptr) fn = table_->dequant_matmul_for(w.type);
    if (fn == nullptr) return reference::matmul(w, x, n_tokens, y);
    split(w.rows, 16, w.rows * w.cols * n_tokens, [&](std::size_t begin, std::size_t end) {
      fn(w.data, w.rows, w.cols, x, n_tokens, y, begin, end);
    });
  }

  // Splits [0, n) across the pool's threads, or runs it on the caller alone when the whole job
  // is `work` < kMinParallelWork multiply-adds: waking a thread and meeting at the barrier costs
  // microseconds, more than a small model's matmul.
  template <class F>
  void split(std::size_t n, std::size_t grain, std::size_t work, F&& fn) const {
    if (work < kMinParallelWork || pool_->size() == 1) {
      if (n > 0) fn(std::size_t{0}, n);
      return;
    }
    pool_->parallel_for(n, grain, fn);
  }

  // out = silu(gate) * up, element-wise over n values.
  void silu_mul(const float* gate, const float* up, std::size_t n, float* out) const {
    split(n, 256, n * 16, [&](std::size_t begin, std::size_t end) {
      reference::silu_mul(gate + begin, up + begin, end - begin, out + begin);
    });
  }

 private:
  const kernels::KernelTable* table_;
  ThreadPool* pool_;
  std::span<BlockQ8Act> activations_;
};

}  // namespace hllm
