#pragma once
// Load-time repacking of a model's Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K projection weights into
// 16-row panels (Interleaved16, DType::*_x16), in shapes the panels do not fit into 8-row
// interleaved groups (Interleaved8, DType::*_x8; Q4_0, Q8_0, Q4_K and Q6_K), and of BF16 ones into
// 16-row column-pair panels (DType::bf16_x16, core/bf16_panels.hpp). Decode reads each weight once
// per token, and with the file's layout a kernel either streams one row at a time (and redoes the
// activation and scale work per row) or reads 8 rows' streams at once (which halves the read
// bandwidth); the interleaved layout gives one sequential stream per 8 (16) rows. The BF16 panels
// are also the prefill GEMM's own, which then packs no weights. The token embedding (read a row at
// a time) is never interleaved, and the output projection only where it runs on the
// 8-bit-activation kernels (at most 6-bit weights, e.g. the Q6_K output of Q4_0 and Q4_K_M files;
// Llama::forward) or is BF16 (the panels' float-activation kernel is its exact path); an output on
// the exact path and the projections of other types may be moved as they are into the same
// huge-page buffer (RepackPlan::move_all).

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/float_panels.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/weights.hpp"

namespace hllm {

// The repacked type of a weight, or its own type when it has none: Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K
// into 16-row panels where rows are a multiple of 16 (and Q4_0/Q4_1/Q8_0 blocks per row even),
// else Q4_0/Q8_0/Q4_K/Q6_K into 8-row groups where rows are a multiple of 8 and the columns of
// the block size; BF16 where rows are a multiple of 16 and the columns even.
inline DType interleaved_type(const WeightTensor& w) noexcept {
  if (w.type == DType::bf16)
    return w.rows % kBf16PanelRows == 0 && w.cols % 2 == 0 ? DType::bf16_x16 : w.type;
  if (w.type == DType::f32 || w.type == DType::f16)
    return w.rows % kFloatPanelRows != 0 ? w.type
           : w.type == DType::f32        ? DType::f32_x16
                                         : DType::f16_x16;
  if (w.rows % 8 != 0 || w.cols % 32 != 0) return w.type;
  const bool panels = w.rows % 16 == 0 && w.cols % 64 == 0;
  switch (w.type) {
    case DType::q4_0: return panels ? DType::q4_0_x16 : DType::q4_0_x8;
    case DType::q4_1: return panels ? DType::q4_1_x16 : w.type;
    case DType::q8_0: return panels ? DType::q8_0_x16 : DType::q8_0_x8;
    case DType::q4_k: return w.rows % 16 == 0 ? DType::q4_k_x16 : DType::q4_k_x8;
    case DType::q5_k: return w.rows % 16 == 0 ? DType::q5_k_x16 : w.type;
    case DType::q6_k: return w.rows % 16 == 0 ? DType::q6_k_x16 : DType::q6_k_x8;
    default: return w.type;
  }
}

namespace detail {

// w's blocks of Block (`block_values` weights each) into out as Group<Block> units.
template <template <class> class Group, class Block>
inline void interleave_as(const WeightTensor& w, std::size_t block_values, void* out) {
  const auto* blocks = static_cast<const Block*>(w.data);
  auto* groups = static_cast<Group<Block>*>(out);
  if constexpr (Group<Block>::kRows == 8)
    interleave_rows8(blocks, w.rows, w.cols / block_values, groups);
  else
    interleave_rows16(blocks, w.rows, w.cols / block_values, groups);
}

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
// takes a (two-level, in a VM) TLB walk per page (figures in docs/performance.md). Not
// zero-filled by us: pages become resident as they are written, tensor by tensor, while the
// sources are released.
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

// Whether a type is one of the 8-row groups (Interleaved8).
constexpr bool is_groups8(DType type) noexcept {
  return type == DType::q4_0_x8 || type == DType::q8_0_x8 || type == DType::q4_k_x8 ||
         type == DType::q6_k_x8;
}

// Writes w repacked as `to` into out (that type's bytes(), any alignment) and returns `to`:
// interleaved_type(w), or the 8-row groups where that is one of the 16-row panels (the shapes
// allow both).
inline DType repack_tensor(const WeightTensor& w, DType to, void* out) {
  const DType best = interleaved_type(w);
  // Or the 8-row groups of w's type where its panels fit too.
  const bool allowed =
      to == best || (is_groups8(to) && best != w.type && file_type_of(best) == file_type_of(to));
  if (!allowed || to == w.type)
    throw Error(ErrorKind::internal,
                dtype_name(w.type) + " has no repacked layout " + dtype_name(to), {}, w.name);
  switch (to) {
    case DType::q4_0_x8: detail::interleave_as<Interleaved8, BlockQ4_0>(w, 32, out); break;
    case DType::q8_0_x8: detail::interleave_as<Interleaved8, BlockQ8_0>(w, 32, out); break;
    case DType::q4_k_x8: detail::interleave_as<Interleaved8, BlockQ4_K>(w, kQK_K, out); break;
    case DType::q6_k_x8: detail::interleave_as<Interleaved8, BlockQ6_K>(w, kQK_K, out); break;
    case DType::q4_0_x16: detail::interleave_as<Interleaved16, BlockQ4_0>(w, 32, out); break;
    case DType::q4_1_x16: detail::interleave_as<Interleaved16, BlockQ4_1>(w, 32, out); break;
    case DType::q8_0_x16: detail::interleave_as<Interleaved16, BlockQ8_0>(w, 32, out); break;
    case DType::q4_k_x16: detail::interleave_as<Interleaved16, BlockQ4_K>(w, kQK_K, out); break;
    case DType::q5_k_x16: detail::interleave_as<Interleaved16, BlockQ5_K>(w, kQK_K, out); break;
    case DType::q6_k_x16: detail::interleave_as<Interleaved16, BlockQ6_K>(w, kQK_K, out); break;
    case DType::f32_x16:
      interleave_float_rows16(static_cast<const float*>(w.data), w.rows, w.cols,
                              static_cast<float*>(out));
      break;
    case DType::f16_x16:
      interleave_float_rows16(static_cast<const f16*>(w.data), w.rows, w.cols,
                              static_cast<f16*>(out));
      break;
    default:  // bf16_x16
      interleave_bf16_rows16(static_cast<const bf16*>(w.data), w.rows, w.cols,
                             static_cast<std::uint32_t*>(out));
  }
  return to;
}
// The same into interleaved_type(w); w's type must have one.
inline DType repack_tensor(const WeightTensor& w, void* out) {
  return repack_tensor(w, interleaved_type(w), out);
}

// Whether this kernel gives anonymous memory transparent huge pages on request (Linux: "always"
// or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled).
inline bool huge_pages_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

// What repack_weights does to the projection weights (the blocks' attention and feed-forward
// matrices and an untied output matrix; never the embedding).
struct RepackPlan {
  bool interleave = false;    // quantized matrices: interleaved_type (output: see above)
  bool move_all = false;      // every other projection is copied over as it is, for the huge pages
  bool bf16_panels = false;   // BF16 matrices become BF16_X16 (the output too)
  bool float_panels = false;  // F32 and F16 matrices become F32_X16 and F16_X16 (the output too)
  // With `interleave`: shapes the 16-row panels do not fit take the 8-row groups (where the
  // kernels run them directly, AVX-512 VNNI), else keep the file's layout.
  bool groups8 = true;
};

// Moves the projection weights that `plan` names into one new huge-page buffer (which
// weights.repacked_storage then owns) and points the views at it. An output projection of Q8_0,
// F32 or F16 keeps its layout: it runs on the exact, dequantizing path (Llama::forward), which
// reads rows one at a time. release_source: the source bytes are this process's private file
// mapping, whose pages are dropped tensor by tensor (see detail::release_mapped_pages), so the peak
// resident size grows by about one tensor, not by the total. progress: stage "repacking", once per
// tensor moved; the views change only after the last one, so a throw (the callback's, to cancel)
// leaves `weights` as they were.
inline void repack_weights(ModelWeights& weights, RepackPlan plan, bool release_source,
                           const ProgressCallback& progress = {}) {
  struct Target {
    WeightTensor* w;
    DType to;
  };
  std::vector<Target> targets;
  const auto consider = [&](WeightTensor& w, bool may_interleave) {
    const bool wanted = w.type == DType::bf16                          ? plan.bf16_panels
                        : w.type == DType::f32 || w.type == DType::f16 ? plan.float_panels
                                                                       : plan.interleave;
    DType to = wanted && may_interleave ? interleaved_type(w) : w.type;
    if (is_groups8(to) && !plan.groups8) to = w.type;
    if (!w.empty() && (to != w.type || plan.move_all)) targets.push_back({&w, to});
  };
  for (LayerWeights& layer : weights.layers)
    for (WeightTensor* w : layer.projections()) consider(*w, true);
  const DType output = weights.output.type;
  consider(weights.output, is_at_most_6_bit(output) || output == DType::bf16 ||
                               output == DType::f32 || output == DType::f16);
  if (targets.empty()) return;

  // Bytes of a target in its new type (a repacked Q4_K is 148/144 of the file's).
  const auto new_bytes = [](const Target& t) {
    return (WeightTensor{t.to, nullptr, t.w->rows, t.w->cols, {}}.bytes() + 63) / 64 * 64;
  };
  std::size_t total = 0;
  for (const Target& t : targets) total += new_bytes(t);
  std::shared_ptr<std::byte> storage = detail::allocate_huge_pages(total);
  std::byte* buffer = storage.get();

  std::size_t offset = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    const std::size_t bytes = t.w->bytes();
    if (t.to != t.w->type)
      repack_tensor(*t.w, buffer + offset);
    else
      std::memcpy(buffer + offset, t.w->data, bytes);
    if (release_source) detail::release_mapped_pages(t.w->data, bytes);
    offset += new_bytes(t);
    detail::report_progress(progress, "repacking", i + 1, targets.size(), t.w->name);
  }
  offset = 0;
  for (const Target& t : targets) {
    t.w->type = t.to;
    t.w->data = buffer + offset;
    offset += new_bytes(t);
  }
  weights.repacked_storage = std::move(storage);
}

// What a Repack mode does for a session running `table`. automatic: put the quantized types into
// the 16-row panels where its kernels prefer them (every vector ISA) and into the 8-row groups
// where they run those directly (AVX-512 VNNI), put BF16 into panels where its GEMM reads them in
// place (AVX512-BF16; elsewhere the file layout's packed FP32 GEMM is faster for prefill), F32
// and F16 into their panels on every vector ISA, and move the rest where the kernel grants huge
// pages; always: all of it; never: nothing.
inline RepackPlan repack_plan(Repack mode, const kernels::KernelTable& table) {
  switch (mode) {
    case Repack::automatic:
      return {table.prefers_panels, huge_pages_available(), table.matmul_bf16_x16_dot != nullptr,
              table.isa != Isa::scalar, table.prefers_groups8};
    case Repack::always: return {true, true, true, true};
    case Repack::never: break;
  }
  return {};
}

// Applies options.repack (see Repack). release_source: the weights are views into this
// process's own file mapping; borrowed memory is repacked only when asked (always): copying it
// would double it.
inline void repack_weights(ModelWeights& weights, const LoadOptions& options, bool release_source) {
  if (options.repack == Repack::automatic && !release_source) return;
  repack_weights(weights, repack_plan(options.repack, kernels::active()), release_source,
                 options.progress);
}

}  // namespace hllm
