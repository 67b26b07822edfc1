#pragma once
// BF16 weights repacked at load time into 16-row pair panels (DType::bf16_x16). A matrix of R
// rows (a multiple of 16) and C columns (even) is R/16 groups; group g holds rows 16g..16g+15
// as C/2 column pairs of 16 dwords each, dword r of pair k = (w[16g + r][2k] in the low half,
// w[16g + r][2k + 1] in the high half). Same bytes as the file's layout.
//
// Why: it is the panel layout of the AVX512-BF16 prefill GEMM (gemm_bf16-inl.hpp), which
// otherwise transposes every weight panel once per 512-token chunk, and it gives decode one
// sequential stream per 16 rows whose 16 outputs accumulate in the lanes of one register, with
// no horizontal sums.
//   w: [rows][cols] bf16 → out: [rows/16][cols/2][16] dwords

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hllm/core/half.hpp"

namespace hllm {

inline constexpr std::size_t kBf16PanelRows = 16;

// One column pair of a group: the unit of the layout registry (core/layouts.hpp).
struct Bf16PanelPair {
  std::uint32_t rows[kBf16PanelRows];
};

// Dwords of one 16-row group: cols/2 pairs × 16 rows.
constexpr std::size_t bf16_x16_group_dwords(std::size_t cols) noexcept {
  return cols / 2 * kBf16PanelRows;
}

// Index, in bf16 elements, of w[r][c] in the repacked layout.
constexpr std::size_t bf16_x16_index(std::size_t cols, std::size_t r, std::size_t c) noexcept {
  return 2 * ((r / kBf16PanelRows) * bf16_x16_group_dwords(cols) + (c / 2) * kBf16PanelRows +
              r % kBf16PanelRows) +
         c % 2;
}

// Repacks w (rows a multiple of 16, cols even) into out, 16 pairs of 16 rows at a time so the
// writes of one step fill whole cache lines.
inline void interleave_bf16_rows16(const bf16* w, std::size_t rows, std::size_t cols,
                                   std::uint32_t* out) {
  const std::size_t pairs = cols / 2;
  for (std::size_t g = 0; g < rows / kBf16PanelRows; ++g) {
    std::uint32_t* group = out + g * bf16_x16_group_dwords(cols);
    for (std::size_t k0 = 0; k0 < pairs; k0 += 16)
      for (std::size_t r = 0; r < kBf16PanelRows; ++r) {
        const bf16* row = w + (g * kBf16PanelRows + r) * cols;
        for (std::size_t k = k0; k < pairs && k < k0 + 16; ++k)
          std::memcpy(group + k * kBf16PanelRows + r, row + 2 * k, sizeof(std::uint32_t));
      }
  }
}

// The inverse for one group: its 16 rows in the file's layout.   out: [16][cols]
inline void deinterleave_bf16_group(const std::uint32_t* group, std::size_t cols, bf16* out) {
  for (std::size_t r = 0; r < kBf16PanelRows; ++r)
    for (std::size_t k = 0; k < cols / 2; ++k)
      std::memcpy(static_cast<void*>(out + r * cols + 2 * k), group + k * kBf16PanelRows + r,
                  sizeof(std::uint32_t));
}

}  // namespace hllm
