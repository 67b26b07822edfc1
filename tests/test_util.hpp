#pragma once
// Comparison helpers shared by the tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/simd/isa.hpp"

namespace hllm::test {

// A fresh temporary directory named after the running test (prefix + suite + name), removed at
// the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "hllm_") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           (prefix + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // Files and directories in it.
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(path),
                                                  std::filesystem::directory_iterator{}));
  }
};

inline float max_abs(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The tolerance rule used against the PyTorch goldens: every element within
// `relative` × max|expected| (the scale of the result), so the rule means the same for
// activations of size 1 and logits of size 50. Float32 evaluation of these small shapes lands
// near 1e-6 relative; 1e-4 leaves room for summation order while catching any real mistake
// (a wrong formula is off by O(1) relative).
inline ::testing::AssertionResult all_close(std::span<const float> actual,
                                            std::span<const float> expected,
                                            float relative = 1e-4f) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected " << expected.size();
  const float scale = std::max(max_abs(expected), 1e-30f);
  const float tolerance = relative * scale;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << actual[i] << " vs expected " << expected[i]
             << " (tolerance " << tolerance << " = " << relative << " x scale " << scale
             << "; max abs diff " << max_abs_diff(actual, expected) << ")";
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// n token ids drawn uniformly from [0, vocab).
inline std::vector<std::int32_t> random_tokens(std::size_t n, std::mt19937& rng,
                                               std::int32_t vocab) {
  std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
  std::vector<std::int32_t> tokens(n);
  for (auto& t : tokens) t = token(rng);
  return tokens;
}

// Expects f() to throw hllm::Error of this kind naming this field and file (and, when given,
// this byte offset, and a message containing `message`): the error catalogues assert the
// specific error, not just "throws".
template <class F>
void expect_error(F&& f, ErrorKind kind, const std::string& field, const std::string& file,
                  std::optional<std::uint64_t> offset = {}, const std::string& message = {}) {
  try {
    f();
    ADD_FAILURE() << "no error thrown (expected field '" << field << "')";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_EQ(e.file(), file) << e.what();
    if (offset) {
      EXPECT_EQ(e.offset(), offset) << e.what();
    }
    EXPECT_NE(e.message().find(message), std::string::npos)
        << "message lacks '" << message << "': " << e.what();
  }
}

// Every ISA this CPU can run: kernels are tested on each, forced one by one.
// The hllm::Error that f() throws; a test failure (and an internal error returned) if none.
template <class F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no hllm::Error thrown";
  return Error(ErrorKind::internal, "none");
}

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kIsasBestFirst)
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

}  // namespace hllm::test
