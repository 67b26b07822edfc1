#pragma once
// The layout registry: every in-memory weight layout a load can repack a file's matrix into,
// declared once, in RepackedLayouts below, with the file type it comes from, its unit (what one
// 8- or 16-row group's column of blocks becomes), and from those its rows per group, the
// columns it needs, its packer and its read-back. The rest derives from the list:
//   - dtype_info, dtype_name and file_type_of for the repacked types;
//   - which layouts a weight's shape allows, in the list's order of preference, and the packing
//     (model/repack.hpp, which asks the kernel table which layouts its kernels prefer);
//   - the kernel tables' entries (hllm/implementation/kernel_tables.hpp: one per layout, by kind);
//   - the reference read-back (kernels/reference.hpp), which every kernel is tested against.
// A new layout is its unit struct (core/quant_blocks.hpp, core/float_panels.hpp,
// core/bf16_panels.hpp), its kernels, its DType enumerator, and one line below.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/float_panels.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"

namespace hllm {

// What a layout's units are, which decides the kernels that read it.
enum class LayoutKind {
  quant_groups8,   // Interleaved8<Block>: 8 rows block by block (decode_group8)
  quant_panels16,  // Interleaved16<Block>: 16-row integer-dot panels (decode_group16, the packed
                   // GEMM)
  float_panels16,  // F32/F16 16-row panels (float_x16_tile, the FP32 GEMM)
  bf16_pairs16,    // BF16 16-row column-pair panels (the vdpbf16ps GEMM, bf16_x16_group_tile)
};

namespace detail {

// What a unit type says of its layout: the kind, the file's block (or element) type, the rows
// of a group, and the file blocks of one row a unit holds.
template <class Unit>
struct UnitTraits;
template <class B>
struct UnitTraits<Interleaved8<B>> {
  static constexpr LayoutKind kind = LayoutKind::quant_groups8;
  using Block = B;
  static constexpr std::size_t rows = 8, blocks = 1;
};
template <class B>
struct UnitTraits<Interleaved16<B>> {
  static constexpr LayoutKind kind = LayoutKind::quant_panels16;
  using Block = B;
  static constexpr std::size_t rows = 16, blocks = Interleaved16<B>::kColumns;
};
template <class T>
struct UnitTraits<FloatPanelColumn<T>> {
  static constexpr LayoutKind kind = LayoutKind::float_panels16;
  using Block = T;
  static constexpr std::size_t rows = kFloatPanelRows, blocks = 1;
};
template <>
struct UnitTraits<Bf16PanelPair> {
  static constexpr LayoutKind kind = LayoutKind::bf16_pairs16;
  using Block = bf16;
  static constexpr std::size_t rows = kBf16PanelRows, blocks = 2;
};

template <std::size_t N>
struct LayoutName {
  char text[N]{};
  constexpr LayoutName(const char (&s)[N]) {  // NOLINT: implicit, for Layout<"NAME", ...>
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
};

}  // namespace detail

// One repacked layout: `kType`, made from matrices of `kSource` (rows a multiple of group_rows,
// columns of unit_columns), whose groups are columns of `Unit`s.
template <detail::LayoutName kName, DType kType, DType kSource, class Unit_>
struct Layout {
  using Unit = Unit_;
  using Traits = detail::UnitTraits<Unit>;
  using Block = typename Traits::Block;  // the file's block (element) type
  static constexpr const char* name = kName.text;
  static constexpr DType type = kType, source = kSource;
  static constexpr LayoutKind kind = Traits::kind;
  static constexpr std::size_t group_rows = Traits::rows;
  // The file's elements per block, and the columns one unit covers.
  static constexpr std::size_t source_elements = file_dtype_info(kSource).block_elements;
  static constexpr std::size_t unit_columns = Traits::blocks * source_elements;
  // As DTypeInfo: per row's file block (a BF16 pair per column pair), the bytes it takes here.
  static constexpr std::size_t block_elements = unit_columns / Traits::blocks;
  static constexpr std::size_t block_bytes = sizeof(Unit) / group_rows / Traits::blocks;
  static_assert(sizeof(Block) == file_dtype_info(kSource).block_bytes, "the source's block");
  static_assert(sizeof(Unit) % group_rows == 0 &&
                    block_bytes * group_rows * Traits::blocks == sizeof(Unit),
                "a unit is whole blocks of each of its rows");

  static constexpr bool fits(std::size_t rows, std::size_t cols) noexcept {
    return rows % group_rows == 0 && cols % unit_columns == 0;
  }
  // w: [rows][cols] in the file's layout → out: [rows/group_rows][cols/unit_columns] units.
  static void pack(const void* w, std::size_t rows, std::size_t cols, void* out) {
    const auto* blocks = static_cast<const Block*>(w);
    if constexpr (kind == LayoutKind::quant_groups8)
      interleave_rows8(blocks, rows, cols / source_elements, static_cast<Unit*>(out));
    else if constexpr (kind == LayoutKind::quant_panels16)
      interleave_rows16(blocks, rows, cols / source_elements, static_cast<Unit*>(out));
    else if constexpr (kind == LayoutKind::float_panels16)
      interleave_float_rows16(blocks, rows, cols, static_cast<Block*>(out));
    else
      interleave_bf16_rows16(blocks, rows, cols, static_cast<std::uint32_t*>(out));
  }
  // Row r of packed (a [rows][cols] matrix in this layout) in the file's layout.
  //   out: [cols / source_elements] blocks (elements)
  static void read_row(const void* packed, std::size_t /*rows*/, std::size_t cols, std::size_t r,
                       void* out) {
    auto* row = static_cast<Block*>(out);
    if constexpr (kind == LayoutKind::quant_groups8 || kind == LayoutKind::quant_panels16) {
      const std::size_t blocks = cols / source_elements;
      for (std::size_t b = 0; b < blocks; ++b)
        row[b] = block_at(static_cast<const Unit*>(packed), blocks, r, b);
    } else if constexpr (kind == LayoutKind::float_panels16) {
      for (std::size_t c = 0; c < cols; ++c)
        row[c] = static_cast<const Block*>(packed)[float_x16_index(cols, r, c)];
    } else {
      for (std::size_t c = 0; c < cols; ++c)
        row[c] = static_cast<const bf16*>(packed)[bf16_x16_index(cols, r, c)];
    }
  }
};

template <class... L>
struct LayoutList {};

// Every repacked layout, in order of preference: a weight whose shape fits several takes the
// first its kernels prefer (the 16-row panels before the 8-row groups).
using RepackedLayouts =
    LayoutList<Layout<"Q4_0_X16", DType::q4_0_x16, DType::q4_0, BlockQ4_0x16>,
               Layout<"Q4_1_X16", DType::q4_1_x16, DType::q4_1, BlockQ4_1x16>,
               Layout<"Q8_0_X16", DType::q8_0_x16, DType::q8_0, BlockQ8_0x16>,
               Layout<"Q4_K_X16", DType::q4_k_x16, DType::q4_k, BlockQ4_Kx16>,
               Layout<"Q5_K_X16", DType::q5_k_x16, DType::q5_k, BlockQ5_Kx16>,
               Layout<"Q6_K_X16", DType::q6_k_x16, DType::q6_k, BlockQ6_Kx16>,
               Layout<"Q4_0_X8", DType::q4_0_x8, DType::q4_0, BlockQ4_0x8>,
               Layout<"Q8_0_X8", DType::q8_0_x8, DType::q8_0, BlockQ8_0x8>,
               Layout<"Q4_K_X8", DType::q4_k_x8, DType::q4_k, BlockQ4_Kx8>,
               Layout<"Q6_K_X8", DType::q6_k_x8, DType::q6_k, BlockQ6_Kx8>,
               Layout<"F32_X16", DType::f32_x16, DType::f32, FloatPanelColumn<float>>,
               Layout<"F16_X16", DType::f16_x16, DType::f16, FloatPanelColumn<f16>>,
               Layout<"BF16_X16", DType::bf16_x16, DType::bf16, Bf16PanelPair>>;

// Calls f.template operator()<L>() for every layout L of the list, in order.
template <class F, class... L>
constexpr void for_each_layout(LayoutList<L...>, F&& f) {
  (f.template operator()<L>(), ...);
}
template <class F>
constexpr void for_each_repacked_layout(F&& f) {
  for_each_layout(RepackedLayouts{}, f);
}

// A layout's entry for code that knows its type at run time only.
struct LayoutSpec {
  DType type, source;
  const char* name;
  LayoutKind kind;
  std::size_t group_rows, unit_columns, block_elements, block_bytes;
  void (*pack)(const void* w, std::size_t rows, std::size_t cols, void* out);
  void (*read_row)(const void* packed, std::size_t rows, std::size_t cols, std::size_t r,
                   void* out);

  constexpr bool fits(std::size_t rows, std::size_t cols) const noexcept {
    return rows % group_rows == 0 && cols % unit_columns == 0;
  }
};

namespace detail {
template <class... L>
constexpr std::array<LayoutSpec, sizeof...(L)> layout_specs(LayoutList<L...>) {
  return {LayoutSpec{L::type, L::source, L::name, L::kind, L::group_rows, L::unit_columns,
                     L::block_elements, L::block_bytes, &L::pack, &L::read_row}...};
}
}  // namespace detail

inline constexpr auto kRepackedLayouts = detail::layout_specs(RepackedLayouts{});

// The registry's entry of a repacked type; nullptr for a file type.
constexpr const LayoutSpec* repacked_layout(DType type) noexcept {
  for (const LayoutSpec& spec : kRepackedLayouts)
    if (spec.type == type) return &spec;
  return nullptr;
}

// The size and name of a block of any type, file type or repacked layout; false for a number
// that is neither.
constexpr bool dtype_info(DType type, DTypeInfo& info) noexcept {
  if (file_dtype_info(type, info)) return true;
  const LayoutSpec* spec = repacked_layout(type);
  if (spec == nullptr) return false;
  info = {spec->name, spec->block_elements, spec->block_bytes, false};
  return true;
}

inline std::string dtype_name(DType type) {
  DTypeInfo info{};
  if (dtype_info(type, info)) return info.name;
  return "type#" + std::to_string(static_cast<std::uint32_t>(type));
}

// The file type a weight came from: the source type of a repacked layout, else the type itself.
constexpr DType file_type_of(DType type) noexcept {
  const LayoutSpec* spec = repacked_layout(type);
  return spec != nullptr ? spec->source : type;
}

// Whether a quantized type keeps at most 6 bits per weight, so its own rounding is at least as
// coarse as that of 8-bit activations: a product with such weights may take 8-bit activations
// without moving the result by more than the weights already do. Llama::forward decides the
// output projection's path with it (and repack_weights which output to repack).
constexpr bool is_at_most_6_bit(DType type) noexcept {
  switch (file_type_of(type)) {
    case DType::q4_0:
    case DType::q4_1:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k: return true;
    default: return false;
  }
}

}  // namespace hllm
