#pragma once
// F32 and F16 weights repacked at load time into 16-row panels (DType::f32_x16, f16_x16). A
// matrix of R rows (a multiple of 16) and C columns is R/16 groups; group g holds rows
// 16g..16g+15 as C columns of 16 values, value r of column c = w[16g + r][c]. Same bytes as the
// file's layout.
//
// Why: it is the weight panel of the AVX-512 prefill GEMM (kernels/matmul_float-inl.hpp), which
// otherwise transposes every weight panel once per 512-token chunk, and it lets decode sum each
// of 16 rows in one lane, column after column, exactly as the GEMM does: the only order both
// can afford, so a token's outputs are the same bits alone or in a batch (batch invariance).
//   w: [rows][cols] → out: [rows/16][cols][16]

#include <cstddef>

namespace hllm {

inline constexpr std::size_t kFloatPanelRows = 16;

// One column of a group: the unit of the layout registry (core/layouts.hpp).   T: float or f16
template <class T>
struct FloatPanelColumn {
  T rows[kFloatPanelRows];
};

// Elements of one 16-row group.
constexpr std::size_t float_x16_group_elements(std::size_t cols) noexcept {
  return cols * kFloatPanelRows;
}

// Index of w[r][c] in the repacked layout.
constexpr std::size_t float_x16_index(std::size_t cols, std::size_t r, std::size_t c) noexcept {
  return (r / kFloatPanelRows) * float_x16_group_elements(cols) + c * kFloatPanelRows +
         r % kFloatPanelRows;
}

// Repacks w (rows a multiple of 16) into out, 16 columns of 16 rows at a time so the writes of
// one step fill whole cache lines.   T: float or f16
template <class T>
inline void interleave_float_rows16(const T* w, std::size_t rows, std::size_t cols, T* out) {
  for (std::size_t g = 0; g < rows / kFloatPanelRows; ++g) {
    T* group = out + g * float_x16_group_elements(cols);
    for (std::size_t c0 = 0; c0 < cols; c0 += 16)
      for (std::size_t r = 0; r < kFloatPanelRows; ++r) {
        const T* row = w + (g * kFloatPanelRows + r) * cols;
        for (std::size_t c = c0; c < cols && c < c0 + 16; ++c)
          group[c * kFloatPanelRows + r] = row[c];
      }
  }
}

}  // namespace hllm
