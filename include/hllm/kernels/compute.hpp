#pragma once
// Compute: what a forward pass runs on, a kernel table (one ISA) and a thread pool. It turns a
// whole-tensor operation into per-thread calls of the table's kernels: matmuls split their
// output rows across threads (decode and prefill alike; each thread streams its own rows of the
// weights once), element-wise work splits its elements.

#include <cstddef>

#include "hllm/core/thread_pool.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"

namespace hllm {

class Compute {
 public:
  Compute(const kernels::KernelTable& table, ThreadPool& pool) : table_(&table), pool_(&pool) {}

  const kernels::KernelTable& kernels() const noexcept { return *table_; }
  ThreadPool& pool() const noexcept { return *pool_; }
  Isa isa() const noexcept { return table_->isa; }

  // y[t][r] = sum_c w[r][c] x[t][c].   x: [n_tokens][w.cols], y: [n_tokens][w.rows]
  void matmul(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) const {
    if (const kernels::MatmulFn fn = table_->matmul_for(w.type)) {
      // 16-row grains keep each thread's share a whole number of register tiles.
      pool_->parallel_for(w.rows, 16, [&](std::size_t begin, std::size_t end) {
        fn(w.data, w.rows, w.cols, x, n_tokens, y, begin, end);
      });
    } else {
      reference::matmul(w, x, n_tokens, y);  // types without an optimized kernel yet
    }
  }

  // out = silu(gate) * up, element-wise over n values.
  void silu_mul(const float* gate, const float* up, std::size_t n, float* out) const {
    pool_->parallel_for(n, 256, [&](std::size_t begin, std::size_t end) {
      reference::silu_mul(gate + begin, up + begin, end - begin, out + begin);
    });
  }

 private:
  const kernels::KernelTable* table_;
  ThreadPool* pool_;
};

}  // namespace hllm
