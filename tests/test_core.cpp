// core/: errors, aligned buffers, f16/bf16/FP8 E4M3 conversion, tensor views.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/fp8.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/tensor.hpp"
#include "sanitizer.hpp"

namespace {

using hllm::bf16;
using hllm::f16;

float bits_to_float(std::uint32_t b) { return std::bit_cast<float>(b); }

TEST(Error, CarriesKindFileFieldOffset) {
  const hllm::Error e(hllm::ErrorKind::format, "bad magic", "model.gguf", "magic", 0);
  EXPECT_EQ(e.kind(), hllm::ErrorKind::format);
  EXPECT_EQ(e.file(), "model.gguf");
  EXPECT_EQ(e.field(), "magic");
  ASSERT_TRUE(e.offset().has_value());
  EXPECT_EQ(*e.offset(), 0u);
  EXPECT_STREQ(e.what(),
               "hllm: format error: model.gguf: field 'magic' at byte offset 0: bad magic");
  const std::runtime_error& base = e;  // derives from std::runtime_error
  EXPECT_NE(std::string(base.what()).find("bad magic"), std::string::npos);
}

TEST(AlignedBuffer, IsAlignedZeroedAndCopies) {
  for (std::size_t n : {1u, 3u, 17u, 1000u}) {
    hllm::AlignedBuffer<float> b(n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
    for (float v : b) EXPECT_EQ(v, 0.0f);
    b[n - 1] = 5.0f;
    hllm::AlignedBuffer<float> copy = b;
    EXPECT_EQ(copy[n - 1], 5.0f);
    hllm::AlignedBuffer<float> moved = std::move(copy);
    EXPECT_EQ(moved.size(), n);
    EXPECT_EQ(copy.size(), 0u);
  }
  EXPECT_TRUE(hllm::AlignedBuffer<float>().empty());
}

TEST(AlignedBuffer, RefusesOverflowingSize) {
  EXPECT_THROW(hllm::AlignedBuffer<double>(std::numeric_limits<std::size_t>::max() / 4),
               hllm::Error);
}

// A size that does not overflow but cannot be allocated (2^50 floats: 4 PiB, past any x86-64
// address space) is Error(capacity), not std::bad_alloc.
TEST(AlignedBuffer, FailedAllocationIsACapacityError) {
#if HLLM_TEST_SANITIZED
  GTEST_SKIP() << "a sanitizer's allocator aborts on a 4 PiB request instead of failing it";
#else
  try {
    hllm::AlignedBuffer<float> huge(std::size_t{1} << 50);
    ADD_FAILURE() << "a 4 PiB allocation succeeded";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::capacity);
    EXPECT_NE(e.message().find("cannot allocate 4503599627370496 bytes"), std::string::npos)
        << e.what();
  }
#endif
}

// --- f16 -----------------------------------------------------------------------------------

TEST(F16, ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, -65504.0f, 6.103515625e-05f /* min normal */,
                  5.960464477539063e-08f /* min subnormal */, 1024.0f, 0.333251953125f})
    EXPECT_EQ(f16::from_float(v).to_float(), v) << v;
}

TEST(F16, SpecialValues) {
  EXPECT_EQ(f16::from_float(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(f16::from_float(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_EQ(f16::from_float(-0.0f).bits, 0x8000);
  const f16 nan = f16::from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan.bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan.bits & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(nan.to_float()));
  // A signalling NaN whose payload lives only in low bits must not become infinity.
  EXPECT_TRUE(std::isnan(f16::from_float(bits_to_float(0x7f800001u)).to_float()));
  EXPECT_TRUE(std::isinf(f16::from_bits(0x7c00).to_float()));
}

TEST(F16, OverflowRoundsToInfinityAtHalfUlpPastMax) {
  EXPECT_EQ(f16::from_float(65519.99f).bits, 0x7bff);  // below the midpoint: max finite
  EXPECT_EQ(f16::from_float(65520.0f).bits, 0x7c00);   // the tie rounds to even = infinity
  EXPECT_EQ(f16::from_float(1e10f).bits, 0x7c00);
}

TEST(F16, TiesRoundToEven) {
  // 1 + 2^-11 is exactly between 1 (even mantissa) and 1 + 2^-10: rounds down to 1.
  EXPECT_EQ(f16::from_float(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3·2^-11 is between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
  EXPECT_EQ(f16::from_float(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  // Slightly above a tie rounds up.
  EXPECT_EQ(f16::from_float(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)).bits, 0x3c01);
}

TEST(F16, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(f16::from_float(tiny).bits, 0x0001);
  EXPECT_EQ(f16::from_float(3 * tiny).bits, 0x0003);
  EXPECT_EQ(f16::from_float(tiny / 2).bits, 0x0000);      // tie to even: 0
  EXPECT_EQ(f16::from_float(3 * tiny / 2).bits, 0x0002);  // tie to even: 2
  EXPECT_EQ(f16::from_float(std::nextafter(tiny / 2, 1.0f)).bits, 0x0001);
  EXPECT_EQ(f16::from_float(-tiny).bits, 0x8001);
  EXPECT_EQ(f16::from_bits(0x03ff).to_float(), 1023 * tiny);  // largest subnormal
  // Rounding the largest subnormal up carries into the smallest normal.
  EXPECT_EQ(f16::from_float(1023.5f * tiny).bits, 0x0400);
}

// Exhaustive: every f16 value converts to float and back to itself; and for random floats the
// result is the nearest f16 (checked by comparing with both neighbours).
TEST(F16, ExhaustiveRoundTripAndNearest) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h = f16::from_bits(static_cast<std::uint16_t>(b));
    const float v = h.to_float();
    if (std::isnan(v)) continue;
    EXPECT_EQ(f16::from_float(v).bits, h.bits) << std::hex << b;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = dist(rng) * (i % 3 == 0 ? 1e-4f : 1.0f);
    const f16 h = f16::from_float(v);
    const float r = h.to_float();
    if (std::isinf(r)) {
      EXPECT_GE(std::fabs(v), 65520.0f);
      continue;
    }
    const float up = f16::from_bits(static_cast<std::uint16_t>(h.bits + 1)).to_float();
    const float down =
        (h.bits & 0x7fff) ? f16::from_bits(static_cast<std::uint16_t>(h.bits - 1)).to_float() : r;
    EXPECT_LE(std::fabs(r - v), std::fabs(up - v)) << v;
    EXPECT_LE(std::fabs(r - v), std::fabs(down - v)) << v;
  }
}

// --- bf16 ----------------------------------------------------------------------------------

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(bf16::from_float(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16::from_float(bits_to_float(0x3f808000u)).bits, 0x3f80);  // tie, even below
  EXPECT_EQ(bf16::from_float(bits_to_float(0x3f818000u)).bits, 0x3f82);  // tie, even above
  EXPECT_EQ(bf16::from_float(bits_to_float(0x3f808001u)).bits, 0x3f81);  // above the tie
  EXPECT_EQ(bf16::from_float(bits_to_float(0x3f807fffu)).bits, 0x3f80);  // below the tie
}

TEST(BF16, SpecialValuesAndSubnormals) {
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(bf16::from_float(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()).bits, 0x7f80);  // overflows
  EXPECT_TRUE(std::isnan(bf16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
  EXPECT_TRUE(std::isnan(bf16::from_float(bits_to_float(0x7f800001u)).to_float()));
  EXPECT_EQ(bf16::from_float(bits_to_float(0x00010000u)).bits, 0x0001);  // float subnormal
  EXPECT_EQ(bf16::from_float(bits_to_float(0x00018000u)).bits, 0x0002);  // subnormal tie
  EXPECT_EQ(bf16::from_float(-0.0f).bits, 0x8000);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const bf16 h = bf16::from_bits(static_cast<std::uint16_t>(b));
    if (!std::isnan(h.to_float())) {
      EXPECT_EQ(bf16::from_float(h.to_float()).bits, h.bits);
    }
  }
}

// --- FP8 E4M3 ------------------------------------------------------------------------------

// Byte b's value from the E4M3 definition alone (sign, exponent e with bias 7, mantissa m):
// (1 + m/8)·2^(e − 7) for e > 0, (m/8)·2^-6 for e = 0. S.1111.111 is E4M3FN's NaN; the codec
// reads it as ±480 (what its bits give as a normal number: it never writes it).
float e4m3_definition(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float magnitude = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                                 : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (b & 0x80) ? -magnitude : magnitude;
}
bool is_e4m3_nan_code(unsigned b) { return (b & 0x7f) == 0x7f; }

TEST(FP8, EveryCodeDecodesToItsDefinedValue) {
  for (unsigned b = 0; b < 256; ++b) {
    const float v = hllm::e4m3_to_float(static_cast<std::uint8_t>(b));
    EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << std::hex << b;
    EXPECT_EQ(v, e4m3_definition(static_cast<std::uint8_t>(b))) << std::hex << b;
  }
  // Landmarks: 1, the largest finite value, the smallest normal and subnormal.
  EXPECT_EQ(hllm::e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(hllm::e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(hllm::e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(hllm::e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(hllm::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(hllm::e4m3_to_float(0x7f), 480.0f);  // the NaN code, never written
}

TEST(FP8, EveryFiniteCodeRoundTrips) {
  for (unsigned b = 0; b < 256; ++b) {
    if (is_e4m3_nan_code(b)) continue;
    const auto code = static_cast<std::uint8_t>(b);
    EXPECT_EQ(hllm::e4m3_from_float(hllm::e4m3_to_float(code)), code) << std::hex << b;
  }
}

// Between two neighbouring codes, the midpoint goes to the one with an even mantissa and
// anything off it to the nearer one, on both signs, subnormals and the normal boundary included.
TEST(FP8, RoundsToNearestTiesToEven) {
  for (unsigned b = 0; b < 0x7e; ++b) {
    for (const unsigned sign : {0x00u, 0x80u}) {
      const auto lo = static_cast<std::uint8_t>(sign | b), hi = static_cast<std::uint8_t>(lo + 1);
      const float a = e4m3_definition(lo), c = e4m3_definition(hi);
      const float mid = (a + c) / 2;  // exact: a and c have at most 4 significant bits
      const std::uint8_t even = (b & 1) ? hi : lo;
      EXPECT_EQ(hllm::e4m3_from_float(mid), even) << std::hex << unsigned{lo};
      EXPECT_EQ(hllm::e4m3_from_float(std::nextafter(mid, a)), lo) << std::hex << unsigned{lo};
      EXPECT_EQ(hllm::e4m3_from_float(std::nextafter(mid, c)), hi) << std::hex << unsigned{lo};
    }
  }
  // Half the smallest subnormal is a tie with 0 (even); below it everything is a signed 0.
  EXPECT_EQ(hllm::e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(hllm::e4m3_from_float(-std::ldexp(1.0f, -10)), 0x80);
  EXPECT_EQ(hllm::e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(hllm::e4m3_from_float(bits_to_float(0x00000001u)), 0x00);  // a float subnormal
  EXPECT_EQ(hllm::e4m3_from_float(-0.0f), 0x80);
  // Random values: the result is at least as near as both neighbouring codes.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-447.0f, 447.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = dist(rng) * (i % 3 == 0 ? 1e-3f : 1.0f);
    const std::uint8_t q = hllm::e4m3_from_float(v);
    const float r = e4m3_definition(q);
    if ((q & 0x7f) < 0x7e) {
      EXPECT_LE(std::fabs(r - v), std::fabs(e4m3_definition(q + 1) - v)) << v;
    }
    if ((q & 0x7f) > 0) {
      EXPECT_LE(std::fabs(r - v), std::fabs(e4m3_definition(q - 1) - v)) << v;
    }
  }
}

TEST(FP8, SaturatesAt448AndWritesNoNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float v : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, inf}) {
    EXPECT_EQ(hllm::e4m3_from_float(v), 0x7e) << v;
    EXPECT_EQ(hllm::e4m3_from_float(-v), 0xfe) << v;
  }
  EXPECT_EQ(hllm::e4m3_from_float(std::nextafter(448.0f, 0.0f)), 0x7e);
  EXPECT_EQ(hllm::e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x00);
  EXPECT_EQ(hllm::e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x00);
  // No float at all becomes a NaN code: a sweep over every 2^12-th bit pattern.
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4096)
    ASSERT_FALSE(
        is_e4m3_nan_code(hllm::e4m3_from_float(bits_to_float(static_cast<std::uint32_t>(bits)))))
        << std::hex << bits;
}

// --- tensor views --------------------------------------------------------------------------

TEST(TensorView, FixedExtentsCostNoStorage) {
  using Fixed = hllm::Extents<4, 8>;
  using Mixed = hllm::Extents<hllm::dynamic, 8>;
  static_assert(sizeof(Fixed) == 1 || std::is_empty_v<Fixed>);
  static_assert(sizeof(Mixed) == sizeof(std::size_t));
  static_assert(Fixed::static_extent(1) == 8);
  EXPECT_EQ(Mixed(3).extent(0), 3u);
  EXPECT_EQ(Mixed(3).extent(1), 8u);
  EXPECT_EQ(Mixed(3).size(), 24u);
}

TEST(TensorView, RowMajorIndexingAndStridedSlices) {
  std::vector<float> data(2 * 3 * 4);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  hllm::Tensor3View<float> t(data.data(),
                             hllm::Extents<hllm::dynamic, hllm::dynamic, hllm::dynamic>(2, 3, 4));
  EXPECT_EQ(t(1, 2, 3), 23.0f);
  EXPECT_EQ(t.stride(0), 12u);
  EXPECT_TRUE(t.is_contiguous());
  // Column 1 of every row of a 6×4 matrix, as a strided [6][1] view.
  hllm::MatrixView<float> column(data.data() + 1, hllm::Extents<hllm::dynamic, hllm::dynamic>(6, 1),
                                 {4, 1});
  EXPECT_EQ(column(5, 0), 21.0f);
  hllm::MatrixView<const float> m = hllm::matrix_view<float>(data.data(), 6, 4);
  EXPECT_EQ(m.row(2)[1], 9.0f);
  hllm::TensorView<float, hllm::Extents<2, hllm::dynamic>> fixed(
      data.data(), hllm::Extents<2, hllm::dynamic>(12));
  EXPECT_EQ(fixed(1, 0), 12.0f);
}

TEST(Size, FixedSizeChecksTheRuntimeValue) {
  EXPECT_EQ(hllm::Size<8>(8)(), 8u);
  EXPECT_THROW(hllm::Size<8>(7), hllm::Error);
  EXPECT_EQ(hllm::Size<hllm::dynamic>(7)(), 7u);
}

}  // namespace
