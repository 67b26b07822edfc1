#pragma once
// Compute: what a forward pass runs on, a kernel table (one ISA), a thread pool and the kernels'
// per-thread scratch. It turns a whole-tensor operation into calls of the table's kernels on
// chunks of the output: matmuls cut their output rows into chunks (decode and prefill alike;
// each chunk streams its own rows of the weights once), attention its (token, KV head) pairs,
// and the pool's threads claim the chunks one by one.
//
// The chunks depend on the problem only (rows, grain, work), never on the thread count or on
// which thread claims what, and each output element is computed inside one chunk in a fixed
// order: results are bit for bit the same for any thread count, and a thread slowed down by
// another process on its core just claims fewer chunks.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/thread_pool.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/kernels/activation.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/kernels/scratch.hpp"

namespace hllm {

// The largest matmul call a Compute's kernel scratch must serve: input features and tokens.
struct ComputeLimits {
  std::size_t max_cols = 8192, max_tokens = 64;
  // Room for a whole operation's activations as a prefill GEMM's token panels, packed once and
  // read by every row chunk: set them for a model with BF16 panels (DType::bf16_x16; the
  // vdpbf16ps GEMM's, kernels::kBf16TokenPanels) or F32/F16 panels (f32_x16, f16_x16; the FP32
  // GEMM's, kFloatTokenPanels). Unset, or where the table has no such GEMM, the GEMM packs the
  // tokens in each chunk.
  bool bf16_token_panels = false, float_token_panels = false;
};

class Compute {
 public:
  // ~2^17 multiply-adds take ~10-30 µs on one core: below that, one thread beats two, and the
  // job is one chunk on the calling thread.
  static constexpr std::size_t kMinParallelWork = std::size_t{1} << 17;
  // A parallel job is cut into at most kMaxChunks chunks of at least kMinChunkWork multiply-adds
  // (~2-8 µs): enough chunks that a thread running at half speed leaves the others at most one
  // chunk to wait for, few enough that claiming one (an atomic compare-exchange) costs nothing.
  static constexpr std::size_t kMaxChunks = 32;
  static constexpr std::size_t kMinChunkWork = std::size_t{1} << 15;
  // Matmul chunks start at multiples of 32 rows: whole two-panel tiles of the FP32 and BF16
  // GEMMs, whole 16-row panels and 8-row groups of the repacked types.
  static constexpr std::size_t kRowGrain = 32;
  // Batches below kStreamBelowTokens tokens stream the weights, and no kernel stages their
  // tokens per call (the BF16 GEMM, the first to, packs its token panel from 8 tokens), so
  // gate_up_activated alternates its two matrices every kStreamStepRows rows for them without
  // redoing any kernel's per-call work.
  static constexpr std::size_t kStreamBelowTokens = kernels::kBf16PackedMinTokens;
  static constexpr std::size_t kStreamStepRows = 2 * kRowGrain;

  using Limits = ComputeLimits;

  // activation_scratch: room for the 8-bit activations of quantized-weight matmuls,
  // [n_tokens][cols/32] blocks for the largest call. Empty: quantized weights take the exact
  // reference path (float32 activations, dequantized rows), as SessionOptions::exact asks.
  // limits: the widest matmul input and the most tokens of any call; the kernels' scratch,
  // matmul_scratch_bytes(limits) per thread, is allocated here, and a larger call throws
  // Error(internal).
  Compute(const kernels::KernelTable& table, ThreadPool& pool,
          std::span<BlockQ8Act> activation_scratch = {}, Limits limits = {})
      : table_(&table),
        pool_(&pool),
        activations_(activation_scratch),
        limits_(limits),
        scratch_stride_(kernels::matmul_scratch_bytes(limits.max_cols, limits.max_tokens)),
        scratch_(pool.size() * scratch_stride_),
        token_panels_(token_panel_room(table, !activation_scratch.empty(), limits)) {}

  const kernels::KernelTable& kernels() const noexcept { return *table_; }
  // Bytes this Compute holds for token panels packed once per operation (0: none; each GEMM
  // chunk packs its own).
  std::size_t token_panel_bytes() const noexcept { return token_panels_.size(); }
  // The 8-bit activation blocks this Compute holds (0: float32 activations throughout).
  std::size_t activation_blocks() const noexcept { return activations_.size(); }
  ThreadPool& pool() const noexcept { return *pool_; }
  Isa isa() const noexcept { return table_->isa; }

  // One product of a fused call: y = w · x, y: [n_tokens][w.rows].
  struct Product {
    const WeightTensor* w;
    float* y;
  };
  // One product with its own input: y = w · x, x: [n_tokens][w.cols], y: [n_tokens][w.rows];
  // xq is filled in by matmul_each (x quantized, where w's kernel takes 8-bit activations).
  struct ProductOf {
    const WeightTensor* w;
    const float* x;
    float* y;
    const BlockQ8Act* xq = nullptr;
  };

  // y[t][r] = sum_c w[r][c] x[t][c].   x: [n_tokens][w.cols], y: [n_tokens][w.rows]
  // Quantized weights use 8-bit activations and integer dot products where a kernel exists and
  // activation scratch was given; BF16 panels (DType::bf16_x16) use bf16 activations where the
  // CPU has AVX512-BF16 and scratch was given; otherwise float32 activations (matmul_exact).
  void matmul(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) const {
    const Product product{&w, y};
    matmul_fused({&product, 1}, x, n_tokens);
  }

  // Several products of the same input in one pass (Q, K and V): the input is quantized once and
  // the threads split all the products' rows together, one wake-up and one barrier for all.
  void matmul_fused(std::span<const Product> products, const float* x, std::size_t n_tokens) const {
    const BlockQ8Act* xq = prepare_activations(products, x, n_tokens);
    for (const Product& p : products) check_scratch(*p.w, n_tokens);
    const TokenPanels xb = prepare_token_panels(products, x, n_tokens);
    split_stacked(products, n_tokens,
                  [&](const Product& p, std::size_t begin, std::size_t end, std::size_t thread) {
                    rows_of(*p.w, x, xq, xb, n_tokens, p.y, begin, end, thread);
                  });
  }

  // Several products of different inputs in one pass (the chosen experts' down projections of
  // a decoded token): each input quantized on its own into the activation scratch, then the
  // threads split all the products' rows together, one wake-up and one barrier for all. Each
  // row is computed as matmul(*p.w, p.x, ...) would compute it. Throws Error(internal) when the
  // inputs' 8-bit blocks do not fit the activation scratch together.
  void matmul_each(std::span<ProductOf> products, std::size_t n_tokens) const {
    std::size_t used_blocks = 0;
    for (ProductOf& p : products) {
      check_scratch(*p.w, n_tokens);
      const Product one{p.w, p.y};
      p.xq = nullptr;
      if (!uses_int8(*p.w)) {
        prepare_activations({&one, 1}, p.x, n_tokens);  // checks that a float kernel exists
      } else {
        const std::size_t blocks = n_tokens * (p.w->cols / 32);
        if (p.w->cols % 32 != 0 || used_blocks + blocks > activations_.size())
          throw Error(ErrorKind::internal, "activation scratch too small for the products", {},
                      p.w->name);
        p.xq = quantize(p.x, p.w->cols, n_tokens, activations_.data() + used_blocks);
        used_blocks += blocks;
      }
    }
    split_stacked(std::span<const ProductOf>(products), n_tokens,
                  [&](const ProductOf& p, std::size_t begin, std::size_t end, std::size_t thread) {
                    rows_of(*p.w, p.x, p.xq, {}, n_tokens, p.y, begin, end, thread);
                  });
  }

  // The kernel of a gated FFN's activation: out = act(gate) ⊙ up.
  kernels::GateActivationFn gate_activation(GateActivation activation) const noexcept {
    return activation == GateActivation::silu ? table_->silu_mul : table_->gelu_mul;
  }

  // out = act(gate · x) ⊙ (up · x), the first half of a gated FFN, in one pass: x is quantized
  // once, each thread computes the same rows of both products and applies the activation to
  // them right away. gate_y, up_y, out: [n_tokens][gate.rows] (out may be gate_y).
  void gate_up_activated(const WeightTensor& gate, const WeightTensor& up,
                         GateActivation activation, const float* x, std::size_t n_tokens,
                         float* gate_y, float* up_y, float* out) const {
    if (up.rows != gate.rows || up.cols != gate.cols)
      throw Error(ErrorKind::internal, "gate and up projections differ in shape", {}, up.name);
    const Product products[] = {{&gate, gate_y}, {&up, up_y}};
    check_scratch(gate, n_tokens);
    const BlockQ8Act* xq = prepare_activations(products, x, n_tokens);
    const TokenPanels xb = prepare_token_panels(products, x, n_tokens);
    const std::size_t rows = gate.rows;
    const kernels::GateActivationFn act = gate_activation(activation);
    // Decode-sized batches stream the weights: a chunk alternates between gate and up every
    // kStreamStepRows rows, so the hardware prefetcher keeps both streams (one stretch of gate,
    // then one of up, restarted each stream at every chunk; docs/performance.md, "One stream
    // per thread"). Prefill keeps whole chunks, which its GEMM packs once.
    const std::size_t step = n_tokens < kStreamBelowTokens ? kStreamStepRows : rows;
    split(rows, kRowGrain, 2 * rows * gate.cols * n_tokens,
          [&](std::size_t begin, std::size_t end, std::size_t thread) {
            for (std::size_t b = begin; b < end; b += step) {
              const std::size_t e = std::min(end, b + step);
              rows_of(gate, x, xq, xb, n_tokens, gate_y, b, e, thread);
              rows_of(up, x, xq, xb, n_tokens, up_y, b, e, thread);
            }
            for (std::size_t t = 0; t < n_tokens; ++t)
              act(gate_y + t * rows + begin, up_y + t * rows + begin, end - begin,
                  out + t * rows + begin);
          });
  }

  // The same with float32 activations for every weight type (quantized weights are dequantized
  // block by block): no activation rounding.
  void matmul_exact(const WeightTensor& w, const float* x, std::size_t n_tokens, float* y) const {
    const kernels::MatmulFn fn = exact_kernel(w.type);
    if (fn == nullptr) return reference::matmul(w, x, n_tokens, y);
    check_scratch(w, n_tokens);
    split(w.rows, kRowGrain, w.rows * w.cols * n_tokens,
          [&](std::size_t begin, std::size_t end, std::size_t thread) {
            fn(w.data, w.rows, w.cols, x, n_tokens, y, begin, end, scratch_of(thread));
          });
  }

  // The number of chunks split() cuts a job of `work` multiply-adds into (before the cap at
  // one chunk per grain): one below kMinParallelWork, where waking a thread and meeting at the
  // barrier would cost more than the work, else work / kMinChunkWork up to kMaxChunks.
  static std::size_t chunks_for(std::size_t work) noexcept {
    if (work < kMinParallelWork) return 1;
    return std::min(kMaxChunks, work / kMinChunkWork);
  }

  // Cuts [0, n) into the chunks of ThreadPool::Chunking(n, grain, chunks_for(work)) and calls
  // fn(begin, end, thread) for each, claimed dynamically by the pool's threads (one chunk: on
  // the caller alone). thread indexes per-thread scratch (scratch_of).
  template <class F>
  void split(std::size_t n, std::size_t grain, std::size_t work, F&& fn) const {
    pool_->parallel_for(n, grain, chunks_for(work), fn);
  }

  // The kernels' scratch of pool thread `thread`: matmul_scratch_bytes(limits) bytes, 64-byte
  // aligned.
  void* scratch_of(std::size_t thread) const noexcept {
    return scratch_.data() + thread * scratch_stride_;
  }
  const Limits& limits() const noexcept { return limits_; }

 private:
  bool uses_int8(const WeightTensor& w) const noexcept {
    return !activations_.empty() && table_->quant_matmul_for(w.type) != nullptr;
  }

  // Quantizes x once for the products whose kernels take 8-bit activations; nullptr if none do.
  BlockQ8Act* prepare_activations(std::span<const Product> products, const float* x,
                                  std::size_t n_tokens) const {
    // Checked here, before any thread runs: kernels must not throw.
    const WeightTensor* quantized = nullptr;
    for (const Product& p : products) {
      if (uses_int8(*p.w))
        quantized = p.w;
      else if (exact_kernel(p.w->type) == nullptr)
        throw Error(ErrorKind::unsupported, "no matmul kernel for " + dtype_name(p.w->type), {},
                    p.w->name);
    }
    if (quantized == nullptr) return nullptr;
    const std::size_t cols = quantized->cols, blocks = cols / 32;
    if (cols % 32 != 0 || n_tokens * blocks > activations_.size())
      throw Error(ErrorKind::internal, "activation scratch too small for a quantized matmul", {},
                  quantized->name);
    for (const Product& p : products)
      if (p.w->cols != cols)
        throw Error(ErrorKind::internal, "fused products must share their input width", {},
                    p.w->name);
    return quantize(x, cols, n_tokens, activations_.data());
  }

  // Which GEMM's token panels a product of w over n_tokens tokens reads, packed once per
  // operation: the vdpbf16ps GEMM's (BF16 panels on the bf16-activation kernel), the FP32 GEMM's
  // (F32/F16 panels), or none (below the GEMMs' token counts, other types, or no room).
  enum class PanelKind { none, bf16, floats };
  struct TokenPanels {
    PanelKind kind = PanelKind::none;
    const void* data = nullptr;
    std::size_t cols = 0;  // of the packed x
  };
  static std::size_t token_panel_room(const kernels::KernelTable& table, bool quantized,
                                      const Limits& limits) {
    std::size_t bytes = 0;
    // BF16 panels read the vdpbf16ps GEMM's token panels where the session takes it, else the
    // FP32 GEMM's (their widened pairs).
    const bool bf16_dot = quantized && table.preferred_bf16_dot() != nullptr;
    if (limits.bf16_token_panels && bf16_dot && table.pack_bf16_tokens != nullptr)
      bytes = kernels::kBf16TokenPanels.bytes(limits.max_cols, limits.max_tokens);
    if ((limits.float_token_panels || (limits.bf16_token_panels && !bf16_dot)) &&
        table.pack_float_tokens != nullptr)
      bytes = std::max(bytes, kernels::kFloatTokenPanels.bytes(limits.max_cols, limits.max_tokens));
    return bytes;
  }
  PanelKind panel_kind(const WeightTensor& w, std::size_t n_tokens) const noexcept {
    if (token_panels_.empty()) return PanelKind::none;
    if (n_tokens >= kernels::kBf16PackedMinTokens && bf16_dot_kernel(w.type) != nullptr &&
        table_->pack_bf16_tokens != nullptr &&
        kernels::kBf16TokenPanels.bytes(w.cols, n_tokens) <= token_panels_.size())
      return PanelKind::bf16;
    if (n_tokens >= kernels::kFloatPackedMinTokens &&
        table_->kernels_for(w.type).packed != nullptr && table_->pack_float_tokens != nullptr &&
        kernels::kFloatTokenPanels.bytes(w.cols, n_tokens) <= token_panels_.size())
      return PanelKind::floats;
    return PanelKind::none;
  }

  // x as the token panels of the first product's GEMM that reads them (panel_kind), packed once
  // in parallel over 16-token groups, for every product of that kind; none otherwise (each
  // chunk packs its own, the same values).
  TokenPanels prepare_token_panels(std::span<const Product> products, const float* x,
                                   std::size_t n_tokens) const {
    for (const Product& p : products) {
      const PanelKind kind = panel_kind(*p.w, n_tokens);
      if (kind == PanelKind::none) continue;
      const std::size_t cols = p.w->cols;
      void* const packed = token_panels_.data();
      const kernels::TokenPackFn pack =
          kind == PanelKind::bf16 ? table_->pack_bf16_tokens : table_->pack_float_tokens;
      split((n_tokens + 15) / 16, 1, n_tokens * cols,
            [&](std::size_t begin, std::size_t end, std::size_t) {
              pack(x, cols, n_tokens, begin, end, packed);
            });
      return {kind, packed, cols};
    }
    return {};
  }

  // x: [n_tokens][cols] as 8-bit blocks into xq: [n_tokens][cols/32]; returns xq.
  BlockQ8Act* quantize(const float* x, std::size_t cols, std::size_t n_tokens,
                       BlockQ8Act* xq) const {
    const std::size_t blocks = cols / 32;
    const kernels::QuantizeFn fn = table_->quantize_activations;
    split(n_tokens, 1, n_tokens * cols, [&](std::size_t begin, std::size_t end, std::size_t) {
      for (std::size_t t = begin; t < end; ++t) fn(x + t * cols, cols, xq + t * blocks);
    });
    return xq;
  }

  // One job over the products' rows stacked one after another: rows(p, begin, end, thread) for
  // each product's part [begin, end) of a chunk.
  template <class P, class Rows>
  void split_stacked(std::span<const P> products, std::size_t n_tokens, Rows rows) const {
    std::size_t total_rows = 0, work = 0;
    for (const P& p : products) total_rows += p.w->rows, work += p.w->rows * p.w->cols;
    split(total_rows, kRowGrain, work * n_tokens,
          [&](std::size_t begin, std::size_t end, std::size_t thread) {
            std::size_t first = 0;
            for (const P& p : products) {
              const std::size_t lo = std::max(begin, first), hi = std::min(end, first + p.w->rows);
              if (lo < hi) rows(p, lo - first, hi - first, thread);
              first += p.w->rows;
            }
          });
  }

  // Checked before a job starts (kernels must not throw): the call fits the scratch.
  void check_scratch(const WeightTensor& w, std::size_t n_tokens) const {
    if (w.cols > limits_.max_cols || n_tokens > limits_.max_tokens)
      throw Error(ErrorKind::internal,
                  "matmul of " + std::to_string(w.cols) + " columns and " +
                      std::to_string(n_tokens) + " tokens exceeds the kernel scratch (" +
                      std::to_string(limits_.max_cols) + " columns, " +
                      std::to_string(limits_.max_tokens) + " tokens)",
                  {}, w.name);
  }

  // Rows [begin, end) of y = w · x on pool thread `thread`, with the kernel matmul() chose; xb:
  // x's token panels (prepare_token_panels), read where w's GEMM is of their kind.
  void rows_of(const WeightTensor& w, const float* x, const BlockQ8Act* xq, TokenPanels xb,
               std::size_t n_tokens, float* y, std::size_t begin, std::size_t end,
               std::size_t thread) const {
    void* const scratch = scratch_of(thread);
    if (uses_int8(w))
      return table_->quant_matmul_for(w.type)(w.data, w.rows, w.cols, xq, n_tokens, y, begin, end,
                                              scratch);
    if (xb.kind != PanelKind::none && w.cols == xb.cols && panel_kind(w, n_tokens) == xb.kind)
      return (xb.kind == PanelKind::bf16 ? table_->matmul_bf16_x16_packed
                                         : table_->kernels_for(w.type).packed)(
          w.data, w.rows, w.cols, x, xb.data, n_tokens, y, begin, end, scratch);
    kernels::MatmulFn fn = exact_kernel(w.type);
    if (const kernels::MatmulFn dot = bf16_dot_kernel(w.type); dot != nullptr) fn = dot;
    fn(w.data, w.rows, w.cols, x, n_tokens, y, begin, end, scratch);  // checked beforehand
  }

  // The bf16-activation kernel for BF16 panels where this table prefers one and the session is
  // not exact, else nullptr.
  kernels::MatmulFn bf16_dot_kernel(DType type) const noexcept {
    if (activations_.empty() || type != DType::bf16_x16) return nullptr;
    return table_->preferred_bf16_dot();
  }

  kernels::MatmulFn exact_kernel(DType type) const noexcept {
    kernels::MatmulFn fn = table_->matmul_for(type);
    return fn != nullptr ? fn : table_->dequant_matmul_for(type);
  }

  const kernels::KernelTable* table_;
  ThreadPool* pool_;
  std::span<BlockQ8Act> activations_;
  Limits limits_;
  std::size_t scratch_stride_;                // bytes per thread, a multiple of 64
  mutable AlignedBuffer<std::byte> scratch_;  // [pool threads][scratch_stride_]
  // token_panel_room(limits): the larger of the token panels the model's GEMMs read, or empty
  mutable AlignedBuffer<std::byte> token_panels_;
};

}  // namespace hllm
