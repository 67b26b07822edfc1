// BF16 weights repacked into 16-row pair panels (DType::bf16_x16, core/bf16_panels.hpp) against
// float32 activations: the exact path of such weights, and their decode. Written once and
// compiled per ISA after matmul_float-inl.hpp (see isa_kernels.hpp). No include guard, by design.
//
// On the vector ISAs a whole group is read as it lies: a 64-byte line holds one column pair of 16
// rows (one zmm, two ymm), the even column's bf16 values become floats by a 16-bit shift and the
// odd column's by a mask, and FMAs with broadcast activations accumulate 16 rows' outputs in
// the lanes. The scalar twin, and rows of a range that starts or ends inside a group, copy the
// group's rows back to the file's layout and run the row-major tiles.

#if HLLM_ISA_LEVEL >= 1
// y[j][0..16) = group · x[j] for kTokens tokens, float32 activations: the 16 rows in the lanes of
// kParts registers (one zmm, two ymm), each row's even and odd columns in two chains. With one
// register per 16 rows the column pairs alternate between two sets of such chains (four per
// token), so one token's FMAs overlap; two registers overlap already.
//   group: [cols/2][16] dwords, x: [kTokens][cols], y: [kTokens] rows y_stride apart
template <std::size_t kTokens>
inline void bf16_x16_group_tile(const std::uint32_t* group, std::size_t cols, const float* x,
                                float* y, std::size_t y_stride) {
  using V = VecF32;
  constexpr std::size_t kParts = kBf16PanelRows / V::lanes, kSets = 2 / kParts;
  typename V::Reg acc[kTokens][kParts][kSets][2];  // [token][part][set][even, odd]
  _Pragma("GCC unroll 4") for (auto& token : acc) for (auto& part : token) for (auto& set : part)
      set[0] = set[1] = V::zero();
  const auto step = [&](std::size_t k, std::size_t set) {
    _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kParts; ++part) {
      typename V::Reg even, odd;
      V::load_bf16_pairs(group + k * kBf16PanelRows + part * V::lanes, even, odd);
      _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j) {
        auto& a = acc[j][part][set];
        a[0] = V::fma(even, V::set1(x[j * cols + 2 * k]), a[0]);
        a[1] = V::fma(odd, V::set1(x[j * cols + 2 * k + 1]), a[1]);
      }
    }
  };
  const std::size_t pairs = cols / 2;
  std::size_t k = 0;
  if constexpr (kSets == 2)
    for (; k + 2 <= pairs; k += 2) step(k, 0), step(k + 1, 1);
  for (; k < pairs; ++k) step(k, 0);
  _Pragma("GCC unroll 4") for (std::size_t j = 0; j < kTokens; ++j)
      _Pragma("GCC unroll 2") for (std::size_t part = 0; part < kParts; ++part) {
    const auto& a = acc[j][part];
    typename V::Reg sum = V::add(a[0][0], a[0][1]);
    if constexpr (kSets == 2) sum = V::add(sum, V::add(a[1][0], a[1][1]));
    V::store(y + j * y_stride + part * V::lanes, sum);
  }
}

// Every token against one whole group, up to 4 tokens per weight load with one register per 16
// rows, 2 with two (whose accumulators then fill half the 16 registers).
//   y: [n_tokens][rows] from the group's first row
inline void bf16_x16_group(const std::uint32_t* group, std::size_t rows, std::size_t cols,
                           const float* x, std::size_t n_tokens, float* y) {
  for_token_tiles<VecF32::lanes == kBf16PanelRows ? 4 : 2>(
      n_tokens, [&](auto k_tokens, std::size_t t) {
        bf16_x16_group_tile<k_tokens()>(group, cols, x + t * cols, y + t * rows, rows);
      });
}
#endif

// w: bf16_x16 panels of a [rows][cols] matrix, x: [n_tokens][cols], y: [n_tokens][rows]; rows
// [row_begin, row_end), any range. scratch holds one group in the file's layout, [16][cols].
inline void matmul_bf16_x16(const void* weights, std::size_t rows, std::size_t cols, const float* x,
                            std::size_t n_tokens, float* y, std::size_t row_begin,
                            std::size_t row_end, void* scratch) {
  const auto* panels = static_cast<const std::uint32_t*>(weights);
  const std::size_t group_dwords = bf16_x16_group_dwords(cols);
  bf16* const group_rows = static_cast<bf16*>(scratch);
  for (std::size_t g = row_begin / kBf16PanelRows; g * kBf16PanelRows < row_end; ++g) {
    const std::size_t first = g * kBf16PanelRows;
    const std::size_t lo = std::max(row_begin, first),
                      hi = std::min(row_end, first + kBf16PanelRows);
#if HLLM_ISA_LEVEL >= 1
    if (lo == first && hi == first + kBf16PanelRows) {
      bf16_x16_group(panels + g * group_dwords, rows, cols, x, n_tokens, y + first);
      continue;
    }
#endif
    deinterleave_bf16_group(panels + g * group_dwords, cols, group_rows);
    matmul_row_tiles(group_rows + (lo - first) * cols, rows, cols, x, n_tokens, y, lo, hi);
  }
}
