#pragma once
// Load-time repacking of a model's projection weights into the layouts of the registry
// (core/layouts.hpp): the quantized types into 16-row panels, or in shapes the panels do not fit
// into 8-row interleaved groups; F32 and F16 into 16-row panels; BF16 into 16-row column-pair
// panels. Decode reads each weight once per token, and with the file's layout a kernel either
// streams one row at a time (and redoes the activation and scale work per row) or reads 8 rows'
// streams at once (which halves the read bandwidth); the repacked layouts give one sequential
// stream per 8 (16) rows, and the panels are also the prefill GEMMs' own, which then pack no
// weights. Which layouts a load uses is the kernel table's choice (LayoutKernels::preferred: the
// layouts its kernels run faster than the file's), asked in one place, repack_plan. The token
// embedding (read a row at a time) is never repacked, and the output projection only where it
// runs on the 8-bit-activation kernels (at most 6-bit weights, e.g. the Q6_K output of Q4_0 and
// Q4_K_M files; Llama::forward) or is a float type (the panels' float-activation kernels are its
// exact path); an output on the exact path and the projections of other types may be moved as
// they are into the same huge-page buffer (RepackPlan::move_all).

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/layouts.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/load_options.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/model/weights.hpp"

namespace hllm {

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

// Which layouts a load repacks weights into (repack_plan), and whether it moves the others.
struct RepackPlan {
  std::array<bool, kRepackedLayouts.size()> layouts{};  // layouts[i]: kRepackedLayouts[i]
  bool move_all = false;  // every other projection is copied over as it is, for the huge pages
  // F16 matrices rounded to BF16 into the BF16 pair panels (LoadOptions::f16_as_bf16).
  bool f16_as_bf16 = false;

  // Every layout of the given kinds.
  static RepackPlan of_kinds(std::initializer_list<LayoutKind> kinds, bool move_all = false) {
    RepackPlan plan;
    plan.move_all = move_all;
    for (std::size_t i = 0; i < kRepackedLayouts.size(); ++i)
      for (LayoutKind kind : kinds)
        plan.layouts[i] = plan.layouts[i] || kRepackedLayouts[i].kind == kind;
    return plan;
  }
  static RepackPlan all(bool move_all = false) {
    return of_kinds({LayoutKind::quant_panels16, LayoutKind::quant_groups8,
                     LayoutKind::float_panels16, LayoutKind::bf16_pairs16},
                    move_all);
  }
};

// The layout w goes into under `plan`: the first of the registry's layouts made from w's type
// that w's shape (each of its views, where it is read in views) fits and the plan takes, else
// w's own type; with f16_as_bf16, F16 weights that the BF16 pair panels fit go there.
inline DType repack_target(const WeightTensor& w, const RepackPlan& plan) noexcept {
  if (plan.f16_as_bf16 && w.type == DType::f16 &&
      repacked_layout(DType::bf16_x16)->fits(w.layout_rows(), w.cols))
    return DType::bf16_x16;
  for (std::size_t i = 0; i < kRepackedLayouts.size(); ++i) {
    const LayoutSpec& spec = kRepackedLayouts[i];
    if (plan.layouts[i] && spec.source == w.type && spec.fits(w.layout_rows(), w.cols))
      return spec.type;
  }
  return w.type;
}

// The layout w's shape allows that comes first in the registry, or w's own type if none does.
inline DType interleaved_type(const WeightTensor& w) noexcept {
  return repack_target(w, RepackPlan::all());
}

// Whether a type is one of the 8-row groups (Interleaved8).
constexpr bool is_groups8(DType type) noexcept {
  const LayoutSpec* spec = repacked_layout(type);
  return spec != nullptr && spec->kind == LayoutKind::quant_groups8;
}

// Writes w repacked as `to`, a layout made from w's type that w's shape fits, into out (that
// type's bytes(), any alignment) and returns `to`.
inline DType repack_tensor(const WeightTensor& w, DType to, void* out) {
  const LayoutSpec* spec = repacked_layout(to);
  if (spec == nullptr || spec->source != w.type || !spec->fits(w.rows, w.cols))
    throw Error(ErrorKind::internal,
                dtype_name(w.type) + " [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                    "] has no repacked layout " + dtype_name(to),
                {}, w.name);
  spec->pack(w.data, w.rows, w.cols, out);
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
  const auto consider = [&](WeightTensor& w, bool may_repack) {
    const DType to = may_repack ? repack_target(w, plan) : w.type;
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
    if (t.w->type == DType::f16 && t.to == DType::bf16_x16) {
      std::vector<bf16> rounded(t.w->rows * t.w->cols);  // [rows][cols]
      const f16* source = t.w->as<f16>();
      for (std::size_t e = 0; e < rounded.size(); ++e)
        rounded[e] = bf16::from_float(to_float(source[e]));
      repack_tensor({DType::bf16, rounded.data(), t.w->rows, t.w->cols, t.w->name}, t.to,
                    buffer + offset);
    } else if (t.to != t.w->type) {
      repack_tensor(*t.w, buffer + offset);
    } else
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

// What a Repack mode does for a session running `table`. automatic: every layout the table's
// kernels prefer (LayoutKernels::preferred), and the rest moved where the kernel grants huge
// pages; always: every layout, everything moved; never: nothing. f16_as_bf16
// (LoadOptions::f16_as_bf16) applies where the table has the BF16 dot (AVX512-BF16).
inline RepackPlan repack_plan(Repack mode, const kernels::KernelTable& table,
                              bool f16_as_bf16 = false) {
  RepackPlan plan;
  switch (mode) {
    case Repack::automatic:
      for (std::size_t i = 0; i < kRepackedLayouts.size(); ++i)
        plan.layouts[i] = table.kernels_for(kRepackedLayouts[i].type).preferred;
      plan.move_all = huge_pages_available();
      break;
    case Repack::always: plan = RepackPlan::all(true); break;
    case Repack::never: return plan;
  }
  plan.f16_as_bf16 = f16_as_bf16 && table.preferred_bf16_dot() != nullptr;
  return plan;
}

// Applies options.repack (see Repack). release_source: the weights are views into this
// process's own file mapping; borrowed memory is repacked only when asked (always): copying it
// would double it.
inline void repack_weights(ModelWeights& weights, const LoadOptions& options, bool release_source) {
  if (options.repack == Repack::automatic && !release_source) return;
  repack_weights(weights, repack_plan(options.repack, kernels::active(), options.f16_as_bf16),
                 release_source, options.progress);
}

}  // namespace hllm
