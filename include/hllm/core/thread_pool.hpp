#pragma once
// A persistent pool of worker threads for the hot loop: threads are created once, a job is
// published by bumping a generation counter, workers spin briefly (a job usually follows within
// microseconds during a forward pass) and then sleep on the counter, and the caller takes part
// in every job as thread 0. Publishing a job allocates nothing and takes no lock.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#define HLLM_CPU_RELAX() __builtin_ia32_pause()
#else
#define HLLM_CPU_RELAX() ((void)0)
#endif

#include "hllm/core/error.hpp"

namespace hllm {

// Physical cores (hardware_concurrency counts SMT siblings; on 2-way SMT hosts the second
// sibling adds little to memory-bound decode and hurts compute-bound prefill).
// Counted from Linux's topology files as distinct (package, core) pairs; elsewhere, or if they
// cannot be read, the logical CPU count.
inline std::size_t default_thread_count() {
  const unsigned logical = std::thread::hardware_concurrency();
  std::set<std::pair<int, int>> cores;
  for (unsigned cpu = 0; cpu < logical; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream package_file(dir + "physical_package_id"), core_file(dir + "core_id");
    int package = 0, core = 0;
    if (!(package_file >> package) || !(core_file >> core)) return logical == 0 ? 1 : logical;
    cores.emplace(package, core);
  }
  return cores.empty() ? (logical == 0 ? 1 : logical) : cores.size();
}

inline constexpr std::size_t kMaxThreads = 512;

class ThreadPool {
 public:
  explicit ThreadPool(std::size_t n_threads = default_thread_count()) : n_threads_(n_threads) {
    if (n_threads == 0 || n_threads > kMaxThreads)
      throw Error(ErrorKind::invalid_argument, "thread count must be in [1, " +
                                                   std::to_string(kMaxThreads) + "], got " +
                                                   std::to_string(n_threads));
    workers_.reserve(n_threads - 1);
    for (std::size_t i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::size_t size() const noexcept { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread of the pool (the caller is thread 0)
  // and returns when all calls have returned. fn must not throw (kernels do not); jobs must not
  // be published from two threads at once (a pool belongs to one session).
  template <class F>
  void run(F&& fn) {
    if (n_threads_ == 1) {
      fn(std::size_t{0}, std::size_t{1});
      return;
    }
    using Fn = std::remove_reference_t<F>;
    job_context_ = const_cast<void*>(static_cast<const void*>(&fn));
    job_ = [](void* context, std::size_t index, std::size_t count) {
      (*static_cast<Fn*>(context))(index, count);
    };
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    fn(std::size_t{0}, n_threads_);
    // Wait for the workers: spin first, they finish within microseconds of us.
    for (std::size_t spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpinIterations) {
        HLLM_CPU_RELAX();
      } else {
        const std::size_t left = pending_.load(std::memory_order_acquire);
        if (left != 0) pending_.wait(left, std::memory_order_acquire);
      }
    }
  }

  // Splits [0, n) into contiguous chunks, one per thread, each a multiple of `grain` except the
  // last; calls fn(begin, end) for each non-empty chunk.
  template <class F>
  void parallel_for(std::size_t n, std::size_t grain, F&& fn) {
    run([&](std::size_t index, std::size_t count) {
      const std::size_t blocks = (n + grain - 1) / grain;
      const std::size_t begin = std::min(n, blocks * index / count * grain);
      const std::size_t end = std::min(n, blocks * (index + 1) / count * grain);
      if (begin < end) fn(begin, end);
    });
  }

 private:
  // ~2^14 pause instructions is tens of microseconds: long enough to bridge the gap between
  // two ops of one forward pass, short enough not to burn a core between tokens.
  static constexpr std::size_t kSpinIterations = std::size_t{1} << 14;

  void work(std::size_t index) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t current = generation_.load(std::memory_order_acquire);
      for (std::size_t spin = 0; current == seen && spin < kSpinIterations; ++spin) {
        HLLM_CPU_RELAX();
        current = generation_.load(std::memory_order_acquire);
      }
      while (current == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        current = generation_.load(std::memory_order_acquire);
      }
      seen = current;
      if (stop_.load(std::memory_order_relaxed)) return;
      job_(job_context_, index, n_threads_);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  std::size_t n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stop_{false};
  void (*job_)(void*, std::size_t, std::size_t) = nullptr;
  void* job_context_ = nullptr;
};

}  // namespace hllm
