#pragma once
// Quantized block layouts, bit-for-bit those of GGUF / ggml (ggml-common.h). A row of a
// quantized tensor is cols / block_elements consecutive blocks; blocks in a file are only 2-byte
// aligned, so code that reads them from raw bytes copies each block out (memcpy) first.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hllm/core/dtype.hpp"
#include "hllm/core/half.hpp"

namespace hllm {

inline constexpr std::size_t kQK8_0 = 32;
inline constexpr std::size_t kQK4_0 = 32;
inline constexpr std::size_t kQK4_1 = 32;
inline constexpr std::size_t kQK_K = 256;  // k-quant super-block

// value[i] = d * qs[i]
struct BlockQ8_0 {
  f16 d;
  std::int8_t qs[kQK8_0];
};

// x: [32] → y, round to nearest with the scale mapping the largest magnitude to ±127, exactly
// as ggml's quantize_row_q8_0_ref (the GGUF writer's and the Q8_0 KV cache's quantizer).
inline void quantize_block_q8_0(const float* x, BlockQ8_0& y) {
  float amax = 0.0f;
  for (std::size_t j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y.d = f16::from_float(d);
  for (std::size_t j = 0; j < kQK8_0; ++j)
    y.qs[j] = static_cast<std::int8_t>(std::round(x[j] * id));
}

// value[i] = d * (nibble_i - 8); byte j holds element j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
  f16 d;
  std::uint8_t qs[kQK4_0 / 2];
};

// x: [32] → y, exactly as ggml's quantize_row_q4_0_ref (the GGUF writer's and the Q4_0 KV
// cache's quantizer): the scale maps the value of largest magnitude to -8, so the full 16-level
// range is used on the side where that value lies, and each value rounds to nearest.
inline void quantize_block_q4_0(const float* x, BlockQ4_0& y) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t j = 0; j < kQK4_0; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y.d = f16::from_float(d);
  for (std::size_t j = 0; j < kQK4_0 / 2; ++j) {
    // Truncation of (v + 8.5) is round-to-nearest for the non-negative v + 8 (ggml's trick).
    const int q0 = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 8.5f)));
    const int q1 =
        std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j + kQK4_0 / 2] * id + 8.5f)));
    y.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
  }
}

// The 4-bit code (0..15) of value j of a Q4_0 block: the low nibble of qs[j] for j < 16, the
// high nibble of qs[j - 16] after.
constexpr unsigned q4_0_code(const BlockQ4_0& block, std::size_t j) noexcept {
  return j < kQK4_0 / 2 ? block.qs[j] & 0x0fu
                        : static_cast<unsigned>(block.qs[j - kQK4_0 / 2] >> 4);
}

// value[i] = d * nibble_i + m, nibbles arranged as in Q4_0.
struct BlockQ4_1 {
  f16 d;
  f16 m;
  std::uint8_t qs[kQK4_1 / 2];
};

// 8 sub-blocks of 32: value = d * scale_j * nibble - dmin * min_j, with 6-bit scale_j and min_j
// packed into `scales` (see get_scale_min_k4 in the reference kernels). Each 32-byte group of
// qs holds sub-block 2g in its low nibbles and sub-block 2g+1 in its high nibbles.
struct BlockQ4_K {
  f16 d;
  f16 dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQK_K / 2];
};

// Q4_K with a fifth bit: value = d * scale_j * (nibble + 16·h) - dmin * min_j, where h is bit j
// of qh[l] for value l of sub-block j (same scales and nibble layout as Q4_K).
struct BlockQ5_K {
  f16 d;
  f16 dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};

// 16 sub-blocks of 16: value = d * scales[j] * (q - 32), q a 6-bit value whose low 4 bits are
// in ql and high 2 bits in qh.
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];
  std::uint8_t qh[kQK_K / 4];
  std::int8_t scales[kQK_K / 16];
  f16 d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "block structs must match the GGUF byte layouts (and DTypeInfo)");

// The 6-bit scale and min of Q4_K sub-block j (0..7) from the 12 packed bytes: sub-blocks 0..3
// use the low 6 bits of bytes j and j+4; 4..7 combine a nibble of byte j+4 with the top two bits
// of bytes j-4 (scale) and j (min).
inline void q4_k_scale_min(std::size_t j, const std::uint8_t* q, std::uint8_t& scale,
                           std::uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The inverse: 8 scales and 8 mins (each < 64) into the 12 packed bytes. Every one of the 96
// bits is used, so unpacking and packing again gives back any 12 bytes exactly.
inline void q4_k_pack_scales_mins(const std::uint8_t* scales, const std::uint8_t* mins,
                                  std::uint8_t* q) {
  for (std::size_t j = 0; j < 4; ++j) {
    q[j] = static_cast<std::uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<std::uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<std::uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

// Q4_0 or Q8_0 repacked at load time (DType::q4_0_x8, q8_0_x8): block b of 8 consecutive rows
// side by side, their 8 scales first, then their 8 quant arrays, each exactly as in the file's
// block. A matrix of R rows (R a multiple of 8) and B blocks per row is R/8 groups of B of these,
// group g holding rows 8g..8g+7; the byte size is the source's. Why: a decode kernel then reads
// one sequential stream per 8 rows instead of 8 streams, loads each activation block once for 8
// rows, and gets 8 scales with one load.
template <class Block>
struct Interleaved8 {
  static constexpr std::size_t kRows = 8;
  using Quants = decltype(Block::qs);
  f16 d[kRows];
  Quants qs[kRows];
};
using BlockQ4_0x8 = Interleaved8<BlockQ4_0>;
using BlockQ8_0x8 = Interleaved8<BlockQ8_0>;
static_assert(sizeof(BlockQ4_0x8) == 8 * sizeof(BlockQ4_0) &&
                  sizeof(BlockQ8_0x8) == 8 * sizeof(BlockQ8_0),
              "repacking keeps a tensor's byte size");

// Q4_K repacked (DType::q4_k_x8): super-block s of 8 rows, with the 6-bit scales and minimums
// unpacked to bytes ([sub-block][row], so one 8-byte load brings a sub-block's 8 rows) and the
// nibbles regrouped so that each 32-byte run serves one pair of sub-blocks of one row (sub-block
// 2p in the low nibbles, 2p + 1 in the high ones, as in the file) and two rows' runs are
// adjacent: one zmm load. 1184 bytes for 8 rows, 148 per row's super-block (the file's 144 plus
// the unpacked scales, minus their packed bytes).
template <>
struct Interleaved8<BlockQ4_K> {
  static constexpr std::size_t kRows = 8;
  f16 d[kRows];
  f16 dmin[kRows];
  std::uint8_t scales[8][kRows];  // [sub-block][row]
  std::uint8_t mins[8][kRows];    // [sub-block][row]
  std::uint8_t qs[4][kRows][32];  // [sub-block pair][row]: the row's qs[32p .. 32p + 32)
};
using BlockQ4_Kx8 = Interleaved8<BlockQ4_K>;
static_assert(sizeof(BlockQ4_Kx8) == 8 * 148, "DTypeInfo of q4_k_x8");

// Q6_K repacked (DType::q6_k_x8): super-block s of 8 rows. Each half h of the super-block (128
// values) is three 32-byte runs per row in the file: ql[64h ..], ql[64h + 32 ..] and
// qh[32h ..], which together give its four 32-value slices (reference::q6_k_slice_layout); here
// each run of 8 rows is contiguous, two rows to a zmm load, a half's three runs follow each
// other (the decode kernel reads the group front to back), and a slice's 16-value scales are
// [half][row]. Same 1680 bytes as 8 rows' super-blocks in the file.
template <>
struct Interleaved8<BlockQ6_K> {
  static constexpr std::size_t kRows = 8;
  f16 d[kRows];
  std::int8_t scales[8][2][kRows];  // [slice][16-value half][row]
  // [half h][run: ql[64h ..], ql[64h + 32 ..], qh[32h ..]][row]
  std::uint8_t runs[2][3][kRows][32];
};
using BlockQ6_Kx8 = Interleaved8<BlockQ6_K>;
static_assert(sizeof(BlockQ6_Kx8) == 8 * sizeof(BlockQ6_K), "DTypeInfo of q6_k_x8");

// Block b of row r of a weight matrix with `blocks` blocks per row, in either layout.
template <class Block>
inline const Block& block_at(const Block* w, std::size_t blocks, std::size_t r, std::size_t b) {
  return w[r * blocks + b];
}
template <class Block>
inline Block block_at(const Interleaved8<Block>* w, std::size_t blocks, std::size_t r,
                      std::size_t b) {
  const Interleaved8<Block>& group = w[(r / 8) * blocks + b];
  Block out;
  out.d = group.d[r % 8];
  std::memcpy(out.qs, group.qs[r % 8], sizeof(out.qs));
  return out;
}

inline BlockQ4_K block_at(const BlockQ4_Kx8* w, std::size_t supers, std::size_t r, std::size_t s) {
  const BlockQ4_Kx8& group = w[(r / 8) * supers + s];
  const std::size_t i = r % 8;
  BlockQ4_K out;
  out.d = group.d[i];
  out.dmin = group.dmin[i];
  std::uint8_t scales[8], mins[8];
  for (std::size_t j = 0; j < 8; ++j) scales[j] = group.scales[j][i], mins[j] = group.mins[j][i];
  q4_k_pack_scales_mins(scales, mins, out.scales);
  for (std::size_t p = 0; p < 4; ++p) std::memcpy(out.qs + 32 * p, group.qs[p][i], 32);
  return out;
}

// Run k (0..5) of a Q6_K block, in the order of BlockQ6_Kx8::runs: half k / 3, then ql[64h ..],
// ql[64h + 32 ..] or qh[32h ..].
template <class B>  // BlockQ6_K or const BlockQ6_K
inline auto* q6_k_run(B& block, std::size_t k) {
  const std::size_t h = k / 3, run = k % 3;
  return run < 2 ? block.ql + 64 * h + 32 * run : block.qh + 32 * h;
}

inline BlockQ6_K block_at(const BlockQ6_Kx8* w, std::size_t supers, std::size_t r, std::size_t s) {
  const BlockQ6_Kx8& group = w[(r / 8) * supers + s];
  const std::size_t i = r % 8;
  BlockQ6_K out;
  out.d = group.d[i];
  for (std::size_t j = 0; j < 8; ++j)
    for (std::size_t half = 0; half < 2; ++half)
      out.scales[2 * j + half] = group.scales[j][half][i];
  for (std::size_t k = 0; k < 6; ++k)
    std::memcpy(q6_k_run(out, k), group.runs[k / 3][k % 3][i], 32);
  return out;
}

// Puts src, a block of row i (0..7) of a group, into its places in `group` (block_at's inverse).
template <class Block>
inline void place_in_group(const Block& src, std::size_t i, Interleaved8<Block>& group) {
  group.d[i] = src.d;
  std::memcpy(group.qs[i], src.qs, sizeof(src.qs));
}
inline void place_in_group(const BlockQ4_K& src, std::size_t i, BlockQ4_Kx8& group) {
  group.d[i] = src.d;
  group.dmin[i] = src.dmin;
  for (std::size_t j = 0; j < 8; ++j)
    q4_k_scale_min(j, src.scales, group.scales[j][i], group.mins[j][i]);
  for (std::size_t p = 0; p < 4; ++p) std::memcpy(group.qs[p][i], src.qs + 32 * p, 32);
}
inline void place_in_group(const BlockQ6_K& src, std::size_t i, BlockQ6_Kx8& group) {
  group.d[i] = src.d;
  for (std::size_t k = 0; k < 16; ++k) group.scales[k / 2][k % 2][i] = src.scales[k];
  for (std::size_t k = 0; k < 6; ++k)
    std::memcpy(group.runs[k / 3][k % 3][i], q6_k_run(src, k), 32);
}

// Repacks rows [0, rows) of w (rows a multiple of 8, `units` blocks per row; K-quants:
// super-blocks) into out: [rows/8][units] groups.
template <class Block>
inline void interleave_rows8(const Block* w, std::size_t rows, std::size_t units,
                             Interleaved8<Block>* out) {
  for (std::size_t g = 0; g < rows / 8; ++g)
    for (std::size_t u = 0; u < units; ++u)
      for (std::size_t i = 0; i < 8; ++i)
        place_in_group(w[(8 * g + i) * units + u], i, out[g * units + u]);
}

// Q4_0 or Q8_0 repacked for the panel kernels (DType::q4_0_x16, q8_0_x16): 16 rows by two block
// columns, their 2×16 scales first (one 64-byte line), then per block column the quants as
// vpdpbusd's weight operand: qs[h][k] holds, for each row r (the 16 int32 lanes), the 4 bytes
// qs[4k..4k+3] of row r's block. Q8_0 bytes are stored as unsigned q + 128 (what the VNNI
// kernels multiply, the offset coming back out through the activations' sum; others flip them
// back with one XOR); Q4_0 bytes as in
// the file (low nibble weight 4k+i, high nibble weight 4k+i+16). Why: one zmm register then
// holds 16 rows' products, so a decode kernel needs no per-row lane sums, no scale permutes and
// no offset terms, and the prefill GEMM's panels are plain loads instead of gathers. A matrix of
// R rows and B blocks per row is R/16 groups of B/2 of these (R a multiple of 16, B even); the
// byte size is the source's, and each one starts on a cache line (1088 and 576 bytes).
template <class Block>
struct Interleaved16 {
  // kColumns blocks of the file per row and unit, kValues weights.
  static constexpr std::size_t kRows = 16, kColumns = 2, kValues = 64;
  static constexpr std::size_t kWords = sizeof(Block::qs) / 4;
  f16 d[kColumns][kRows];
  std::uint8_t qs[kColumns][kWords][kRows][4];
};
using BlockQ4_0x16 = Interleaved16<BlockQ4_0>;
using BlockQ8_0x16 = Interleaved16<BlockQ8_0>;
static_assert(sizeof(BlockQ4_0x16) == 32 * sizeof(BlockQ4_0) && sizeof(BlockQ4_0x16) % 64 == 0 &&
                  sizeof(BlockQ8_0x16) == 32 * sizeof(BlockQ8_0) && sizeof(BlockQ8_0x16) % 64 == 0,
              "repacking keeps a tensor's byte size, and every unit starts a cache line");

// Q4_1 in 16-row panels (DType::q4_1_x16): Q4_0's unit with the 2×16 minimums m on the line
// after the scales (a decode reads the unit front to back). 640 bytes, the file's 20 per block.
template <>
struct Interleaved16<BlockQ4_1> {
  static constexpr std::size_t kRows = 16, kColumns = 2, kValues = 64;
  static constexpr std::size_t kWords = sizeof(BlockQ4_1::qs) / 4;
  f16 d[kColumns][kRows];
  f16 m[kColumns][kRows];
  std::uint8_t qs[kColumns][kWords][kRows][4];
};
using BlockQ4_1x16 = Interleaved16<BlockQ4_1>;
static_assert(sizeof(BlockQ4_1x16) == 32 * sizeof(BlockQ4_1) && sizeof(BlockQ4_1x16) % 64 == 0,
              "repacking keeps a tensor's byte size, and every unit starts a cache line");

// Q4_K in 16-row panels (DType::q4_k_x16): one super-block column of 16 rows. Their scales d and
// minimum scales dmin on one line; then per pair p of sub-blocks, one line with the pair's 6-bit
// scales and minimums unpacked to bytes ([sub-block][row]: one 16-byte load each) and the
// quants as vpdpbusd operands: qs[k] holds, for each row r, the bytes qs[32p + 4k .. 32p + 4k +
// 3] of row r's block, whose low nibbles are sub-block 2p's values 4k..4k+3 and high nibbles
// sub-block 2p + 1's. A decode reads the unit front to back (with all scales in one block at the
// front, the stream would jump back to them at every pair). 2368 bytes (37 lines) per unit, 148
// per row's super-block, as Q4_K_X8.
template <>
struct Interleaved16<BlockQ4_K> {
  static constexpr std::size_t kRows = 16, kColumns = 1, kValues = kQK_K;
  struct Pair {
    std::uint8_t scales[2][kRows], mins[2][kRows];
    std::uint8_t qs[8][kRows][4];
  };
  f16 d[kRows], dmin[kRows];
  Pair pairs[4];
};
using BlockQ4_Kx16 = Interleaved16<BlockQ4_K>;
static_assert(sizeof(BlockQ4_Kx16) == 16 * 148 && sizeof(BlockQ4_Kx16) % 64 == 0,
              "DTypeInfo of q4_k_x16; every unit starts a cache line");

// Q5_K in 16-row panels (DType::q5_k_x16): one super-block column of 16 rows. Their scales d and
// minimum scales dmin on one line; then per pair p of sub-blocks, one line with the pair's scales
// and minimums (as Q4_K's) and each sub-block's 5-bit values in five planes: planes[h][i] holds,
// for each row r, 4 bytes whose bits 0-4 are sub-block 2p + h's values 4i..4i+3 of row r, and
// whose bits 5-7, over the five planes, hold the values of groups 5..7 (q5_k_plane_bytes). Why:
// a group of 0..4 is one AND, 5..7 a few shifts and ANDs, 23 instructions for a sub-block's 8
// groups where the file's nibbles and separate fifth bits took 36 (a shift, two ANDs and an OR
// on top of each nibble's unpacking), most of an AVX2 decode's work. 2880 bytes (45 lines) per
// unit, 180 per row's super-block (the file's 176 with its scales unpacked to bytes).
template <>
struct Interleaved16<BlockQ5_K> {
  static constexpr std::size_t kRows = 16, kColumns = 1, kValues = kQK_K;
  struct Pair {
    std::uint8_t scales[2][kRows], mins[2][kRows];
    std::uint8_t planes[2][5][kRows][4];
  };
  f16 d[kRows], dmin[kRows];
  Pair pairs[4];
};
using BlockQ5_Kx16 = Interleaved16<BlockQ5_K>;
static_assert(sizeof(BlockQ5_Kx16) == 16 * 180 && sizeof(BlockQ5_Kx16) % 64 == 0,
              "DTypeInfo of q5_k_x16; every unit starts a cache line");

// Q6_K in 16-row panels (DType::q6_k_x16): one super-block column of 16 rows. Their scales d on
// the first line; then per half h of the super-block (values 128h..128h+127: four 32-value slices
// i = 0..3), the 16-value sub-blocks' int8 scales ([sub-block][row]: one 16-byte load each) and
// the 6-bit values as vpdpbusd operands, three registers per group k of four values: register j
// (0..2) holds, for each row r, slice j's values 4k..4k+3 in bits 0-5 of its 4 bytes and two
// bits of slice 3's same values in bits 6-7 (bits 2j, 2j+1; q6_k_panel_words). Why: slices 0..2
// are one AND each, slice 3 a few shifts and selects (as 4·q, in place), where the file's split
// into nibbles and bit pairs costs a shift, two ANDs and an OR per slice. A decode reads the unit
// front to back. 3392 bytes (53 lines) per unit, 212 per row's super-block (the file's 210 plus
// padding to whole lines).
template <>
struct Interleaved16<BlockQ6_K> {
  static constexpr std::size_t kRows = 16, kColumns = 1, kValues = kQK_K;
  struct Half {
    std::int8_t scales[8][kRows];     // [16-value sub-block of the half][row]
    std::uint8_t qs[8][3][kRows][4];  // [group k][register j][row][byte]
  };
  f16 d[kRows];
  std::uint8_t padding[32];  // keeps each half on whole lines
  Half halves[2];
};
using BlockQ6_Kx16 = Interleaved16<BlockQ6_K>;
static_assert(sizeof(BlockQ6_Kx16) == 16 * 212 && sizeof(BlockQ6_Kx16) % 64 == 0,
              "DTypeInfo of q6_k_x16; every unit starts a cache line");

// The 6-bit values (0..63; a weight is d·scale·(q − 32)) of the four slices of half h of a Q6_K
// block at places 4k..4k+3 (k = 0..7), one place per byte of q[i]: slice i's value l is element
// 128h + 32i + l, its low 4 bits the low (i < 2) or high nibble of ql[64h + 32(i & 1) + l], its
// high 2 bits bits 2i, 2i + 1 of qh[32h + l] (as reference::q6_k_slice_layout). Word: a 32-bit
// word of four places, or a vector of such words (one per row of a panel): the shifts never
// carry a bit that the masks keep across a byte.
inline constexpr std::uint32_t kEachByte4 = 0x0f0f0f0f, kEachByte2 = 0x03030303;
// file = {ql[64h + 4k ..], ql[64h + 32 + 4k ..], qh[32h + 4k ..]} → q, and back.
template <class Word>
inline void q6_k_values_from_file(const Word (&file)[3], Word (&q)[4]) {
  const Word lo = file[0], hi = file[1], top = file[2];
  q[0] = (lo & kEachByte4) | (top & kEachByte2) << 4;
  q[1] = (hi & kEachByte4) | (top >> 2 & kEachByte2) << 4;
  q[2] = (lo >> 4 & kEachByte4) | (top >> 4 & kEachByte2) << 4;
  q[3] = (hi >> 4 & kEachByte4) | (top >> 6 & kEachByte2) << 4;
}
template <class Word>
inline void q6_k_file_from_values(const Word (&q)[4], Word (&file)[3]) {
  file[0] = (q[0] & kEachByte4) | (q[2] & kEachByte4) << 4;
  file[1] = (q[1] & kEachByte4) | (q[3] & kEachByte4) << 4;
  file[2] = (q[0] >> 4 & kEachByte2) | (q[1] >> 4 & kEachByte2) << 2 |
            (q[2] >> 4 & kEachByte2) << 4 | (q[3] >> 4 & kEachByte2) << 6;
}

// BlockQ6_Kx16's three register words for the values q[0..3] of slices 0..3: word j holds q[j]
// in bits 0-5 of each byte and bits 2j, 2j + 1 of q[3] in bits 6-7; and the inverse.
template <class Word>
inline void q6_k_panel_words(const Word (&q)[4], Word (&w)[3]) {
  for (std::size_t j = 0; j < 3; ++j) w[j] = q[j] | (q[3] >> (2 * j) & kEachByte2) << 6;
}
template <class Word>
inline void q6_k_panel_values(const Word (&w)[3], Word (&q)[4]) {
  for (std::size_t j = 0; j < 3; ++j) q[j] = w[j] & 0x3f3f3f3fu;
  q[3] = (w[0] >> 6 & kEachByte2) | (w[1] >> 6 & kEachByte2) << 2 | (w[2] >> 6 & kEachByte2) << 4;
}

// Where the file words of half h, places 4k..4k+3, live in a Q6_K block.
template <class B>  // BlockQ6_K or const BlockQ6_K
inline auto* q6_k_file_word(B& block, std::size_t h, std::size_t k, std::size_t i) {
  return i < 2 ? block.ql + 64 * h + 32 * i + 4 * k : block.qh + 32 * h + 4 * k;
}

// The byte Interleaved16 stores for a quant byte of the file: Q8_0's int8 plus 128 (as u8),
// Q4_0's (Q4_1's) nibble pair unchanged; and back.
template <class Block>
constexpr std::uint8_t interleaved16_byte(std::uint8_t file_byte) noexcept {
  return std::is_same_v<Block, BlockQ8_0> ? static_cast<std::uint8_t>(file_byte ^ 0x80) : file_byte;
}

// The unit holding block b of row r (`blocks` per row) of an Interleaved16 matrix.
template <class Block>
constexpr std::size_t unit_index(std::size_t blocks, std::size_t r, std::size_t b) noexcept {
  constexpr std::size_t kColumns = Interleaved16<Block>::kColumns;
  return (r / 16) * (blocks / kColumns) + b / kColumns;
}

// Block b of row r (`blocks` per row) of an Interleaved16 matrix, in the file's layout; and its
// inverse, which puts src (block b of row r) into its places. (Q4_K: the overloads below.)
template <class Block>
inline Block block_at(const Interleaved16<Block>* w, std::size_t blocks, std::size_t r,
                      std::size_t b) {
  const Interleaved16<Block>& unit = w[unit_index<Block>(blocks, r, b)];
  Block out;
  out.d = unit.d[b % 2][r % 16];
  if constexpr (std::is_same_v<Block, BlockQ4_1>) out.m = unit.m[b % 2][r % 16];
  auto* qs = reinterpret_cast<std::uint8_t*>(out.qs);
  for (std::size_t k = 0; k < Interleaved16<Block>::kWords; ++k)
    for (std::size_t i = 0; i < 4; ++i)
      qs[4 * k + i] = interleaved16_byte<Block>(unit.qs[b % 2][k][r % 16][i]);
  return out;
}
template <class Block>
inline void place_in_group(const Block& src, std::size_t r, std::size_t b,
                           Interleaved16<Block>& unit) {
  unit.d[b % 2][r % 16] = src.d;
  if constexpr (std::is_same_v<Block, BlockQ4_1>) unit.m[b % 2][r % 16] = src.m;
  const auto* qs = reinterpret_cast<const std::uint8_t*>(src.qs);
  for (std::size_t k = 0; k < Interleaved16<Block>::kWords; ++k)
    for (std::size_t i = 0; i < 4; ++i)
      unit.qs[b % 2][k][r % 16][i] = interleaved16_byte<Block>(qs[4 * k + i]);
}

// A Q5_K panel's five plane bytes at one row and byte position b from v[g], the sub-block's
// value 4g + b (5 bits, g = 0..7), and back: groups 0..4 in bits 0-4, the 15 bits of groups
// 5..7 (v5 | v6 << 5 | v7 << 10) three at a time in bits 5-7.
inline void q5_k_plane_bytes(const std::uint8_t (&v)[8], std::uint8_t (&planes)[5]) {
  const unsigned top = v[5] | v[6] << 5 | v[7] << 10;
  for (std::size_t i = 0; i < 5; ++i)
    planes[i] = static_cast<std::uint8_t>(v[i] | ((top >> (3 * i)) & 7) << 5);
}
inline void q5_k_plane_values(const std::uint8_t (&planes)[5], std::uint8_t (&v)[8]) {
  unsigned top = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    v[i] = planes[i] & 31;
    top |= static_cast<unsigned>(planes[i] >> 5) << (3 * i);
  }
  v[5] = top & 31, v[6] = (top >> 5) & 31, v[7] = static_cast<std::uint8_t>(top >> 10);
}

// Row i's quants of a Q4_K unit (the file's bytes) or a Q5_K unit (its planes), from and back
// into the file block.
inline void place_quants(const BlockQ4_K& src, std::size_t i, BlockQ4_Kx16& unit) {
  for (std::size_t p = 0; p < 4; ++p)
    for (std::size_t k = 0; k < 8; ++k)
      std::memcpy(unit.pairs[p].qs[k][i], src.qs + 32 * p + 4 * k, 4);
}
inline void quants_at(const BlockQ4_Kx16& unit, std::size_t i, BlockQ4_K& out) {
  for (std::size_t p = 0; p < 4; ++p)
    for (std::size_t k = 0; k < 8; ++k)
      std::memcpy(out.qs + 32 * p + 4 * k, unit.pairs[p].qs[k][i], 4);
}
// Sub-block j's value l of a Q5_K block: the low (j even) or high nibble of qs[32·(j/2) + l],
// bit j of qh[l] as bit 4.
inline std::uint8_t q5_k_value(const BlockQ5_K& b, std::size_t j, std::size_t l) {
  return static_cast<std::uint8_t>(((b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) |
                                   ((b.qh[l] >> j) & 1) << 4);
}
inline void place_quants(const BlockQ5_K& src, std::size_t i, BlockQ5_Kx16& unit) {
  for (std::size_t j = 0; j < 8; ++j)
    for (std::size_t b = 0; b < 4; ++b) {
      std::uint8_t v[8], planes[5];
      for (std::size_t g = 0; g < 8; ++g) v[g] = q5_k_value(src, j, 4 * g + b);
      q5_k_plane_bytes(v, planes);
      for (std::size_t k = 0; k < 5; ++k) unit.pairs[j / 2].planes[j % 2][k][i][b] = planes[k];
    }
}
inline void quants_at(const BlockQ5_Kx16& unit, std::size_t i, BlockQ5_K& out) {
  std::memset(out.qs, 0, sizeof out.qs);
  std::memset(out.qh, 0, sizeof out.qh);
  for (std::size_t j = 0; j < 8; ++j)
    for (std::size_t b = 0; b < 4; ++b) {
      std::uint8_t v[8], planes[5];
      for (std::size_t k = 0; k < 5; ++k) planes[k] = unit.pairs[j / 2].planes[j % 2][k][i][b];
      q5_k_plane_values(planes, v);
      for (std::size_t g = 0; g < 8; ++g) {
        const std::size_t l = 4 * g + b;
        out.qs[32 * (j / 2) + l] |= static_cast<std::uint8_t>((v[g] & 15) << (4 * (j % 2)));
        out.qh[l] |= static_cast<std::uint8_t>((v[g] >> 4) << j);
      }
    }
}

// Q4_K and Q5_K panels: row i of a unit back into a file block (d, dmin, the 6-bit scales and
// minimums packed again, the quants), and the inverse.
template <class Block>
inline Block block_at_with_minimums(const Interleaved16<Block>& unit, std::size_t i) {
  Block out;
  out.d = unit.d[i];
  out.dmin = unit.dmin[i];
  std::uint8_t scales[8], mins[8];
  for (std::size_t j = 0; j < 8; ++j)
    scales[j] = unit.pairs[j / 2].scales[j % 2][i], mins[j] = unit.pairs[j / 2].mins[j % 2][i];
  q4_k_pack_scales_mins(scales, mins, out.scales);
  quants_at(unit, i, out);
  return out;
}
template <class Block>
inline void place_with_minimums(const Block& src, std::size_t i, Interleaved16<Block>& unit) {
  unit.d[i] = src.d;
  unit.dmin[i] = src.dmin;
  for (std::size_t j = 0; j < 8; ++j)
    q4_k_scale_min(j, src.scales, unit.pairs[j / 2].scales[j % 2][i],
                   unit.pairs[j / 2].mins[j % 2][i]);
  place_quants(src, i, unit);
}
inline BlockQ4_K block_at(const BlockQ4_Kx16* w, std::size_t supers, std::size_t r, std::size_t s) {
  return block_at_with_minimums(w[unit_index<BlockQ4_K>(supers, r, s)], r % 16);
}
inline void place_in_group(const BlockQ4_K& src, std::size_t r, std::size_t, BlockQ4_Kx16& unit) {
  place_with_minimums(src, r % 16, unit);
}
inline BlockQ5_K block_at(const BlockQ5_Kx16* w, std::size_t supers, std::size_t r, std::size_t s) {
  return block_at_with_minimums(w[unit_index<BlockQ5_K>(supers, r, s)], r % 16);
}
inline void place_in_group(const BlockQ5_K& src, std::size_t r, std::size_t, BlockQ5_Kx16& unit) {
  place_with_minimums(src, r % 16, unit);
}

inline BlockQ6_K block_at(const BlockQ6_Kx16* w, std::size_t supers, std::size_t r, std::size_t s) {
  const BlockQ6_Kx16& unit = w[unit_index<BlockQ6_K>(supers, r, s)];
  const std::size_t row = r % 16;
  BlockQ6_K out;
  out.d = unit.d[row];
  for (std::size_t h = 0; h < 2; ++h) {
    const BlockQ6_Kx16::Half& half = unit.halves[h];
    for (std::size_t j = 0; j < 8; ++j) out.scales[8 * h + j] = half.scales[j][row];
    for (std::size_t k = 0; k < 8; ++k) {
      std::uint32_t words[3], q[4], file[3];
      for (std::size_t j = 0; j < 3; ++j) std::memcpy(&words[j], half.qs[k][j][row], 4);
      q6_k_panel_values(words, q);
      q6_k_file_from_values(q, file);
      for (std::size_t i = 0; i < 3; ++i) std::memcpy(q6_k_file_word(out, h, k, i), &file[i], 4);
    }
  }
  return out;
}
inline void place_in_group(const BlockQ6_K& src, std::size_t r, std::size_t, BlockQ6_Kx16& unit) {
  const std::size_t row = r % 16;
  unit.d[row] = src.d;
  std::memset(unit.padding, 0, sizeof unit.padding);
  for (std::size_t h = 0; h < 2; ++h) {
    BlockQ6_Kx16::Half& half = unit.halves[h];
    for (std::size_t j = 0; j < 8; ++j) half.scales[j][row] = src.scales[8 * h + j];
    for (std::size_t k = 0; k < 8; ++k) {
      std::uint32_t file[3], q[4], words[3];
      for (std::size_t i = 0; i < 3; ++i) std::memcpy(&file[i], q6_k_file_word(src, h, k, i), 4);
      q6_k_values_from_file(file, q);
      q6_k_panel_words(q, words);
      for (std::size_t j = 0; j < 3; ++j) std::memcpy(half.qs[k][j][row], &words[j], 4);
    }
  }
}

// Repacks w: [rows][blocks] (rows a multiple of 16, blocks a multiple of kColumns; K-quants:
// super-blocks) into out: [rows/16][blocks/kColumns].
template <class Block>
inline void interleave_rows16(const Block* w, std::size_t rows, std::size_t blocks,
                              Interleaved16<Block>* out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t b = 0; b < blocks; ++b)
      place_in_group(w[r * blocks + b], r, b, out[unit_index<Block>(blocks, r, b)]);
}

// Activations quantized on the fly for the integer dot products of quantized weights: 32 values
// x[i] ≈ d * qs[i], with d = max|x| / 127 and qs rounded to nearest (ties to even), plus
// sum = Σ qs[i] for the weight formats whose values carry an offset or a minimum. (Not a file
// format: d stays float32, unlike ggml's f16, because nothing is saved.)
//
// bias = −128·sum, and for Q6_K, whose scales and offsets cover 16 values, bias_lo =
// −128·Σ qs[0..15] and bias_hi = −128·Σ qs[16..31], are the starting values of the panel kernels'
// integer dot products (gemm_panels-inl.hpp), whose unsigned weight operands carry an offset of
// 128 with VNNI: Σ (u − 128)·q = −128·Σq + Σ u·q (and a power of two dividing 128 without it);
// d_sum = d·sum weighs a Q4_K/Q5_K slice's minimum there. They are stored so the hot loop reads
// each with a plain broadcast load instead of a multiply and a move from a general register per
// block and token.
// neg_half_sums packs −Σ of each 16-value half as two int16 for Q6_K's emulated dot, whose offset
// term is one vpmaddwd of them with the two scales (gemm_panels-inl.hpp, kScaledRuns).
struct BlockQ8Act {
  float d;
  std::int32_t sum;
  std::int32_t bias;
  std::int32_t bias_lo;
  std::int32_t bias_hi;
  float d_sum;
  std::uint32_t neg_half_sums;  // int16 pair: −Σ qs[0..15] (low bits), −Σ qs[16..31] (high bits)
  std::int8_t qs[32];

  // Sets the sums and what is derived from them (d must be set first).
  void set_sums(std::int32_t all, std::int32_t first_half) noexcept {
    sum = all;
    bias = -128 * all;
    bias_lo = -128 * first_half;
    bias_hi = bias - bias_lo;
    d_sum = d * static_cast<float>(all);
    // |sums| ≤ 16·127: each fits an int16.
    neg_half_sums = static_cast<std::uint16_t>(-first_half) |
                    static_cast<std::uint32_t>(static_cast<std::uint16_t>(first_half - all)) << 16;
  }
};
static_assert(sizeof(BlockQ8Act) == 60);

}  // namespace hllm
