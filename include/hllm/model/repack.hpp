#pragma once
// Load-time repacking of a model's Q4_0 and Q8_0 projection weights into 8-row interleaved
// groups (Interleaved8, DType::q4_0_x8 / q8_0_x8). Decode reads each weight once per token, and
// with the file's layout a kernel either streams one row at a time (and redoes the activation
// and scale work per row) or reads 8 rows' streams at once (which measured at half the read
// bandwidth here); the interleaved layout gives one sequential stream per 8 rows. Neither the
// token embedding (read a row at a time) nor the output projection (which runs on the exact,
// dequantizing path: Llama::forward) is repacked.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/weights.hpp"

namespace hllm {

// The repacked type of a weight, or its own type when it has none (or rows are not a multiple
// of 8, or the columns not of the block size).
inline DType interleaved_type(const WeightTensor& w) noexcept {
  if (w.rows % 8 != 0 || w.cols % 32 != 0) return w.type;
  switch (w.type) {
    case DType::q4_0: return DType::q4_0_x8;
    case DType::q8_0: return DType::q8_0_x8;
    default: return w.type;
  }
}

namespace detail {

// Hands the whole pages inside [data, data + bytes) back to the kernel. Only for a private
// read-only file mapping: a page read again later faults back in from the file.
inline void release_mapped_pages(const void* data, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = (begin + bytes) / page * page;
  if (first < last)
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // advisory only
}

// `bytes` of fresh anonymous memory, 2 MiB aligned, asking for transparent huge pages: a
// decode stream over 4 KiB pages restarts the hardware prefetcher at every page boundary and
// takes a TLB miss per page, which held one core to about 18 GB/s here. Not zero-filled by us:
// pages become resident as they are written, tensor by tensor, while the sources are released.
inline std::shared_ptr<std::byte> allocate_huge_pages(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-allocate by one huge page so the region can start on a 2 MiB boundary.
  void* raw =
      ::mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw Error(ErrorKind::capacity,
                "cannot allocate " + std::to_string(bytes) + " bytes for repacked weights");
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) ::munmap(raw, aligned - start);  // trim the unaligned head and tail
  if (const std::uintptr_t end = aligned + size, raw_end = start + size + kHuge; raw_end > end)
    ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  auto* region = reinterpret_cast<std::byte*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(region, size, MADV_HUGEPAGE);  // advisory: without it, ordinary pages
#endif
  return std::shared_ptr<std::byte>(region, [size](std::byte* p) { ::munmap(p, size); });
}

}  // namespace detail

// Writes w repacked into out (w.bytes() bytes, any alignment) and returns the repacked type;
// w's type must have one (interleaved_type(w) != w.type).
inline DType repack_tensor(const WeightTensor& w, void* out) {
  const DType repacked = interleaved_type(w);
  if (repacked == DType::q4_0_x8)
    interleave_rows8(static_cast<const BlockQ4_0*>(w.data), w.rows, w.cols / 32,
                     static_cast<BlockQ4_0x8*>(out));
  else if (repacked == DType::q8_0_x8)
    interleave_rows8(static_cast<const BlockQ8_0*>(w.data), w.rows, w.cols / 32,
                     static_cast<BlockQ8_0x8*>(out));
  else
    throw Error(ErrorKind::internal, dtype_name(w.type) + " has no repacked layout", {}, w.name);
  return repacked;
}

// Repacks every Q4_0/Q8_0 projection weight of the blocks (attention, feed-forward) into one new
// buffer, which weights.repacked_storage then owns, and points the views
// at it. release_source: the source bytes are this process's private file mapping, whose pages
// are dropped tensor by tensor (see detail::release_mapped_pages), so the peak resident size
// grows by about one tensor, not by the repacked total.
inline void repack_weights(ModelWeights& weights, bool release_source) {
  std::vector<WeightTensor*> targets;
  for (LayerWeights& layer : weights.layers)
    for (WeightTensor* w : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.ffn.gate,
                            &layer.ffn.up, &layer.ffn.down})
      targets.push_back(w);
  std::erase_if(targets, [](const WeightTensor* w) { return interleaved_type(*w) == w->type; });
  if (targets.empty()) return;

  std::size_t total = 0;
  for (const WeightTensor* w : targets) total += (w->bytes() + 63) / 64 * 64;
  std::shared_ptr<std::byte> storage = detail::allocate_huge_pages(total);
  std::byte* buffer = storage.get();

  std::size_t offset = 0;
  for (WeightTensor* w : targets) {
    const std::size_t bytes = w->bytes();
    void* out = buffer + offset;
    const DType repacked = repack_tensor(*w, out);
    if (release_source) detail::release_mapped_pages(w->data, bytes);
    w->type = repacked;
    w->data = out;
    offset += (bytes + 63) / 64 * 64;
  }
  weights.repacked_storage = std::move(storage);
}

// Applies options.repack: automatic repacks when this process's kernels prefer it.
inline void repack_weights(ModelWeights& weights, const LoadOptions& options, bool release_source) {
  const bool repack = options.repack == Repack::always || (options.repack == Repack::automatic &&
                                                           kernels::active().prefers_interleaved);
  if (repack) repack_weights(weights, release_source);
}

}  // namespace hllm
