#pragma once
// A persistent pool of worker threads for the hot loop: threads are created once, a job is
// published by bumping a generation counter, workers spin briefly (a job usually follows within
// microseconds during a forward pass) and then sleep on the counter, and the caller takes part
// in every job as thread 0. A job is a fixed set of chunks that the threads claim one at a time,
// so a thread slowed by another process on its core holds back no more than the chunk it is
// running: each thread owns a lane of consecutive chunks, claimed front to back, and a thread
// whose lane is empty takes chunks from the back of another's. Publishing a job allocates
// nothing and takes no lock. A pool may step aside for other processes (CoreSharing): while
// more tasks are runnable on the machine than it has CPUs, it runs its jobs on fewer threads,
// so none of its threads has to share a core with a busy process.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
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

#if defined(__linux__)
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
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

// The tasks runnable on the machine right now, the reader's thread included (Linux: the
// numerator of /proc/loadavg's fourth field); nullopt where that cannot be read. Reads into a
// stack buffer: no allocation.
inline std::optional<std::size_t> runnable_tasks() {
#if defined(__linux__)
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[128];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  // "0.52 0.58 0.59 3/412 12345": skip three fields, read the number before '/'.
  const char* c = text;
  for (int field = 0; field < 3; ++field) {
    while (*c != '\0' && *c != ' ') ++c;
    while (*c == ' ') ++c;
  }
  if (*c < '0' || *c > '9') return std::nullopt;
  std::size_t runnable = 0;
  for (; *c >= '0' && *c <= '9'; ++c) runnable = runnable * 10 + static_cast<std::size_t>(*c - '0');
  return *c == '/' ? std::optional<std::size_t>(runnable) : std::nullopt;
#else
  return std::nullopt;
#endif
}

// The CPUs this process may run on, if they are all the machine's (a runnable-task count is
// the machine's, so it says nothing about a process confined to some of its CPUs); else 0.
inline std::size_t whole_machine_cpus() {
#if defined(__linux__)
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int count = CPU_COUNT(&allowed);
  return online > 0 && count == online ? static_cast<std::size_t>(count) : 0;
#else
  return 0;
#endif
}

// Whether a pool's jobs always take all its threads, or step aside for other processes: while
// more tasks are runnable than the machine has CPUs, a job takes as many threads as the CPUs
// the other processes leave (at least the caller), so no chunk waits for a thread that the
// scheduler has taken off a core it shares with another process. The chunks are the same either
// way, so no result changes. Off where the process may not use every CPU, or with
// HLLM_FIXED_THREADS=1 in the environment.
enum class CoreSharing { use_all, leave_busy_cores };

class ThreadPool {
 public:
  // The most chunks one job may have (the claim word holds chunk indices in 16 bits).
  static constexpr std::size_t kMaxChunks = 0xffff;

  // How the pool counts the machine's runnable tasks (tests substitute their own).
  using RunnableTasksFn = std::optional<std::size_t> (*)();

  explicit ThreadPool(std::size_t n_threads = default_thread_count(),
                      CoreSharing sharing = CoreSharing::use_all,
                      RunnableTasksFn count_runnable = runnable_tasks)
      : n_threads_(n_threads),
        count_runnable_(count_runnable),
        taking_part_(static_cast<std::uint32_t>(n_threads)) {
    if (n_threads == 0 || n_threads > kMaxThreads)
      throw Error(ErrorKind::invalid_argument, "thread count must be in [1, " +
                                                   std::to_string(kMaxThreads) + "], got " +
                                                   std::to_string(n_threads));
    const char* fixed = std::getenv("HLLM_FIXED_THREADS");
    if (sharing == CoreSharing::leave_busy_cores && n_threads > 1 &&
        !(fixed != nullptr && std::string(fixed) == "1"))
      machine_cpus_ = whole_machine_cpus();
    lanes_ = std::make_unique<Lane[]>(n_threads);
    workers_.reserve(n_threads - 1);
    for (std::size_t i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    taking_part_.store(static_cast<std::uint32_t>(n_threads_), std::memory_order_release);
    taking_part_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::size_t size() const noexcept { return n_threads_; }
  // The threads the next job is spread over: size(), or fewer while the pool steps aside
  // for other processes (CoreSharing::leave_busy_cores).
  std::size_t active_threads() const noexcept {
    return taking_part_.load(std::memory_order_relaxed);
  }

  // Calls fn(chunk, thread) once for every chunk in [0, n_chunks) and returns when all calls
  // have returned. The threads (the caller is thread 0 and takes part) claim chunks until none
  // remain, so a thread that runs slowly, e.g. on a core another process shares, simply claims
  // fewer; `thread` is the index in [0, size()) of the thread running the call (for per-thread
  // scratch). Thread i first runs the consecutive chunks of its lane, [n_chunks·i/size(),
  // n_chunks·(i+1)/size()), in order, so where chunks are consecutive stretches of memory (a
  // matmul's rows) each thread reads one stream, which the hardware prefetcher follows, instead
  // of jumping over the others' chunks; then it takes the last unclaimed chunk of another lane.
  // Which thread runs a chunk varies from call to call, so fn's result must depend on the chunk
  // only. fn must not throw (kernels do not); jobs must not be published from two threads at
  // once (a pool belongs to one session).
  template <class F>
  void for_chunks(std::size_t n_chunks, F&& fn) {
    if (n_chunks > kMaxChunks)
      throw Error(ErrorKind::invalid_argument, std::to_string(n_chunks) + " chunks in one job");
    if (machine_cpus_ != 0) step_aside_for_busy_cores();
    const std::size_t active = active_threads();
    if (active == 1 || n_chunks <= 1) {
      for (std::size_t i = 0; i < n_chunks; ++i) fn(i, std::size_t{0});
      return;
    }
    using Fn = std::remove_reference_t<F>;
    job_context_ = const_cast<void*>(static_cast<const void*>(&fn));
    job_ = [](void* context, std::size_t chunk, std::size_t thread) {
      (*static_cast<Fn*>(context))(chunk, thread);
    };
    n_chunks_ = n_chunks;
    done_.store(0, std::memory_order_relaxed);
    const std::uint32_t job = generation_.load(std::memory_order_relaxed) + 1;
    // Each lane store publishes job_, job_context_, n_chunks_ and done_ to every thread whose
    // claim reads it; the generation publishes all of them to the workers it wakes.
    for (std::size_t i = 0; i < n_threads_; ++i)
      lanes_[i].word.store(i < active
                               ? lane_word(job, n_chunks * i / active, n_chunks * (i + 1) / active)
                               : lane_word(job, 0, 0),
                           std::memory_order_release);
    generation_.store(job, std::memory_order_release);
    generation_.notify_all();
    run_chunks(job, 0);
    // Wait for the chunks other threads hold (not for the threads: one that woke late, or not
    // yet, finds nothing to claim and never touches this job). Spin first, since they usually
    // finish within microseconds of us, then sleep: a thread waiting on a futex frees its core,
    // so the scheduler can move a preempted chunk-holder there, and the last chunk's thread
    // wakes us. (No sched_yield: beside a busy process it hands the core away for a whole time
    // slice.)
    for (std::size_t spin = 0;; ++spin) {
      const std::uint32_t finished = done_.load(std::memory_order_acquire);
      if (finished == n_chunks) break;
      if (spin < kWaitSpins)
        HLLM_CPU_RELAX();
      else
        done_.wait(finished, std::memory_order_acquire);
    }
  }

  // Calls fn(index, n_threads) for index = 0 .. n_threads - 1, each once, spread over the pool's
  // threads, and returns when all calls have returned.
  template <class F>
  void run(F&& fn) {
    for_chunks(n_threads_, [&](std::size_t chunk, std::size_t) { fn(chunk, n_threads_); });
  }

  // The chunks [0, n) is cut into for parallel_for: as many as `chunks` (at least 1), each a
  // whole number of `grain`s except perhaps the last, and no chunk empty. They depend on n, grain
  // and chunks only, never on the thread count.   chunk i: [chunk_begin(i), chunk_begin(i + 1))
  struct Chunking {
    std::size_t n, grain, blocks, chunks;
    Chunking(std::size_t n_, std::size_t grain_, std::size_t max_chunks)
        : n(n_),
          grain(grain_ == 0 ? 1 : grain_),
          blocks((n_ + grain - 1) / grain),
          chunks(std::clamp<std::size_t>(max_chunks, 1, std::max<std::size_t>(blocks, 1))) {}
    std::size_t begin(std::size_t i) const noexcept {
      return std::min(n, blocks * i / chunks * grain);
    }
  };

  // Splits [0, n) into the chunks of Chunking(n, grain, max_chunks) and calls fn(begin, end,
  // thread) (or fn(begin, end)) for each, dynamically spread over the threads (for_chunks).
  template <class F>
  void parallel_for(std::size_t n, std::size_t grain, std::size_t max_chunks, F&& fn) {
    if (n == 0) return;
    const Chunking c(n, grain, max_chunks);
    for_chunks(c.chunks, [&](std::size_t i, std::size_t thread) {
      const std::size_t begin = c.begin(i), end = c.begin(i + 1);
      if constexpr (std::is_invocable_v<F&, std::size_t, std::size_t, std::size_t>)
        fn(begin, end, thread);
      else
        fn(begin, end);
    });
  }
  // The same with as many chunks as threads (each thread's share of a memory stream, say).
  template <class F>
  void parallel_for(std::size_t n, std::size_t grain, F&& fn) {
    parallel_for(n, grain, n_threads_, fn);
  }

 private:
  // A pause is ~10-40 ns: 2^13 of them (~0.1 ms) outlast the last chunk of a job on an idle
  // machine, whose other threads finish within one chunk (microseconds) of the caller, and
  // 2^14 the gap between two ops of one forward pass, so neither sleeps between ops; a futex
  // wake-up would cost tens of microseconds per op. Beside a busy process a wait that long
  // ends in a sleep, which frees the core.
  static constexpr std::size_t kWaitSpins = std::size_t{1} << 13;
  static constexpr std::size_t kIdleSpins = std::size_t{1} << 14;

  // CoreSharing::leave_busy_cores: the runnable tasks are counted every kLoadInterval (a read of
  // /proc/loadavg, some microseconds); the pool takes fewer threads after kBusySamples counts in
  // a row found other processes' tasks on its cores (a kernel thread's blip is one count), and
  // all of them again at the first count that finds the cores free.
  static constexpr auto kLoadInterval = std::chrono::milliseconds(10);
  static constexpr std::size_t kBusySamples = 3;
  void step_aside_for_busy_cores() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_count_) return;
    next_count_ = now + kLoadInterval;
    const std::optional<std::size_t> runnable = count_runnable_();
    if (!runnable) return;
    // Ours: the caller and every worker not asleep (spinning between jobs counts, as it would
    // run a job's chunks).
    const std::size_t asleep = asleep_.load(std::memory_order_relaxed);
    const std::size_t ours = n_threads_ - std::min(asleep, n_threads_ - 1);
    const std::size_t others = *runnable > ours ? *runnable - ours : 0;
    const std::size_t free_cpus = machine_cpus_ > others ? machine_cpus_ - others : 1;
    const std::size_t wanted = std::clamp<std::size_t>(free_cpus, 1, n_threads_);
    const std::size_t active = active_threads();
    if (wanted >= active) {
      busy_counts_ = 0;
      if (wanted > active) {
        taking_part_.store(static_cast<std::uint32_t>(wanted), std::memory_order_release);
        taking_part_.notify_all();
      }
    } else if (++busy_counts_ >= kBusySamples) {
      busy_counts_ = 0;
      taking_part_.store(static_cast<std::uint32_t>(wanted), std::memory_order_release);
    }
  }

  // A lane's word: the job's generation (high 32 bits) and the lane's unclaimed chunks [front,
  // back), so one compare-exchange both checks that a job is still current and claims from it.
  struct alignas(64) Lane {
    std::atomic<std::uint64_t> word{0};
  };
  static constexpr std::uint64_t lane_word(std::uint64_t job, std::size_t front,
                                           std::size_t back) noexcept {
    return (job << 32) | (std::uint64_t{front} << 16) | std::uint64_t{back};
  }

  // Claims a chunk of job `job` from lane `lane`: its first unclaimed one (the owner) or its
  // last (another thread). False if the lane has none left or holds another job.
  static bool claim(Lane& lane, std::uint64_t job, bool owner, std::size_t& chunk) {
    std::uint64_t word = lane.word.load(std::memory_order_acquire);
    for (;;) {
      const std::size_t front = (word >> 16) & 0xffff, back = word & 0xffff;
      if ((word >> 32) != (job & 0xffffffff) || front >= back) return false;
      const std::uint64_t claimed = owner ? word + (std::uint64_t{1} << 16) : word - 1;
      if (lane.word.compare_exchange_weak(word, claimed, std::memory_order_acquire,
                                          std::memory_order_acquire)) {
        chunk = owner ? front : back - 1;
        return true;
      }
    }
  }

  // Claims and runs chunks of job `job` until none remain (or a later job replaced it): the
  // thread's own lane first, then the other lanes from the back, nearest lane first. The
  // chunks it ran are counted in done_ once, at the end: a shared counter bumped for every
  // chunk would move its cache line between the cores at every chunk.
  void run_chunks(std::uint64_t job, std::size_t thread) {
    std::size_t ran = 0, n_chunks = 0;
    void (*fn)(void*, std::size_t, std::size_t) = nullptr;
    void* context = nullptr;
    for (;;) {
      std::size_t chunk = 0;
      bool claimed = claim(lanes_[thread], job, true, chunk);
      for (std::size_t k = 1; !claimed && k < n_threads_; ++k)
        claimed = claim(lanes_[(thread + k) % n_threads_], job, false, chunk);
      if (!claimed) break;
      // A chunk is ours: until it is counted the caller keeps the job (and fn) alive, and
      // publishes no other.
      if (ran == 0) {
        n_chunks = n_chunks_;
        fn = job_;
        context = job_context_;
      }
      fn(context, chunk, thread);
      ++ran;
    }
    if (ran > 0 &&
        done_.fetch_add(static_cast<std::uint32_t>(ran), std::memory_order_acq_rel) + ran ==
            n_chunks)
      done_.notify_one();
  }

  void work(std::size_t index) {
    std::uint32_t seen = 0;
    for (;;) {
      // Left out of the jobs while the pool steps aside: sleep until it takes this thread again.
      for (std::uint32_t part = taking_part_.load(std::memory_order_acquire); part <= index;
           part = taking_part_.load(std::memory_order_acquire)) {
        asleep_.fetch_add(1, std::memory_order_relaxed);
        taking_part_.wait(part, std::memory_order_acquire);
        asleep_.fetch_sub(1, std::memory_order_relaxed);
      }
      std::uint32_t current = generation_.load(std::memory_order_acquire);
      for (std::size_t spin = 0; current == seen && spin < kIdleSpins; ++spin) {
        HLLM_CPU_RELAX();
        current = generation_.load(std::memory_order_acquire);
      }
      while (current == seen) {
        asleep_.fetch_add(1, std::memory_order_relaxed);
        generation_.wait(seen, std::memory_order_acquire);
        asleep_.fetch_sub(1, std::memory_order_relaxed);
        current = generation_.load(std::memory_order_acquire);
      }
      seen = current;
      if (stop_.load(std::memory_order_relaxed)) return;
      // Woken by a job of a pool that has since stepped aside: back to sleep.
      if (index >= taking_part_.load(std::memory_order_acquire)) continue;
      run_chunks(current, index);
    }
  }

  std::size_t n_threads_;
  RunnableTasksFn count_runnable_;
  std::size_t machine_cpus_ = 0;  // leave_busy_cores: the machine's CPUs; 0: use all threads
  std::chrono::steady_clock::time_point next_count_{};
  std::size_t busy_counts_ = 0;  // counts in a row that wanted fewer threads than take part
  std::vector<std::thread> workers_;
  // The atomics threads wait on are 32-bit, so a wait is a futex on their own address:
  // libstdc++ waits on wider ones through proxies shared by all of a process's atomics, where one
  // pool's notifications woke another pool's sleeping workers (thousands of times a second).
  // The threads jobs are spread over (workers below it take part); only the caller changes it.
  alignas(64) std::atomic<std::uint32_t> taking_part_;
  std::atomic<std::size_t> asleep_{0};                    // workers waiting on a futex
  alignas(64) std::atomic<std::uint32_t> generation_{0};  // the latest job's number (wraps)
  std::unique_ptr<Lane[]> lanes_;                   // [n_threads_]: each thread's chunks of the job
  alignas(64) std::atomic<std::uint32_t> done_{0};  // chunks of the latest job finished
  std::atomic<bool> stop_{false};
  void (*job_)(void*, std::size_t, std::size_t) = nullptr;
  void* job_context_ = nullptr;
  std::size_t n_chunks_ = 0;  // of the latest job
};

}  // namespace hllm
