// GGUF I/O: the llama.cpp-quantized fixtures load and reproduce their exact logits on the
// reference path, block layouts dequantize bit-for-bit, the writer round-trips, and every kind
// of corrupt file fails with an error naming the field and the byte offset.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hllm/core/quant_blocks.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/io/mapped_file.hpp"
#include "hllm/io/quantize.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/finite_check.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/session.hpp"
#include "sanitizer.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using hllm::DType;
using hllm::Error;
using hllm::ErrorKind;
namespace gguf = hllm::gguf;

const std::string kFixtures = HLLM_SHARED_DIR "/fixtures";
const std::vector<std::string> kFixtureTypes = {"f32",  "f16",    "bf16", "q8_0",
                                                "q4_0", "q4_k_m", "q6_k"};

#define SKIP_WITHOUT_FIXTURES()                                              \
  if (!fs::exists(kFixtures + "/fx-gqa-f32.gguf"))                           \
  GTEST_SKIP() << "cross-implementation fixtures not found in " << kFixtures \
               << " (they live in ../shared beside the clone; CI always has them)"

std::string fixture(const std::string& type) { return kFixtures + "/fx-gqa-" + type + ".gguf"; }

std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

std::vector<std::int32_t> fixture_tokens() {
  std::ifstream in(kFixtures + "/fx-gqa.tokens.txt");
  std::vector<std::int32_t> tokens;
  for (std::int32_t t; in >> t;) tokens.push_back(t);
  return tokens;
}

// All of a tensor's values as float32.   [rows][cols]
std::vector<float> dequantize_all(const hllm::WeightTensor& w) {
  std::vector<float> out(w.rows * w.cols);
  for (std::size_t r = 0; r < w.rows; ++r)
    hllm::reference::dequantize_row(w, r, out.data() + r * w.cols);
  return out;
}

hllm::WeightTensor weight_of(const gguf::TensorInfo& t) {
  std::size_t rows = 1;
  for (std::size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  return {t.type, t.data, rows, static_cast<std::size_t>(t.dims[0]), t.name};
}

// Expected error: kind, field and (when given) offset, in "bad.gguf" unless told otherwise.
template <class F>
void expect_error(F&& f, ErrorKind kind, const std::string& field,
                  std::optional<std::uint64_t> offset, const std::string& file = "bad.gguf") {
  hllm::test::expect_error(std::forward<F>(f), kind, field, file, offset);
}

// ---------------------------------------------------------------------------------------------
// Fixtures

TEST(GgufFixtures, EveryFileLoadsWithTheDocumentedTypes) {
  SKIP_WITHOUT_FIXTURES();
  for (const std::string& type : kFixtureTypes) {
    SCOPED_TRACE(type);
    const gguf::File f = gguf::File::open(fixture(type));
    EXPECT_TRUE(f.version() == 2 || f.version() == 3);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.embedding_length"), 256);
    EXPECT_EQ(f.get_int("llama.block_count"), 4);
    EXPECT_EQ(f.get_int("llama.attention.head_count"), 4);
    EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(f.get_int("llama.feed_forward_length"), 768);
    EXPECT_EQ(f.get_int("llama.context_length"), 512);
    EXPECT_EQ(f.array_size("tokenizer.ggml.tokens"), 512u);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 512u);
    EXPECT_EQ(f.tensors().size(), 3u + 4u * 9u);  // embedding, output norm, output + 9 per layer

    std::set<DType> matrix_types;
    for (const auto& t : f.tensors()) {
      if (t.dims.size() == 1) {
        EXPECT_EQ(t.type, DType::f32) << t.name;  // norms stay f32
      } else {
        matrix_types.insert(t.type);
      }
    }
    const std::map<std::string, std::set<DType>> expected = {{"f32", {DType::f32}},
                                                             {"f16", {DType::f16}},
                                                             {"bf16", {DType::bf16}},
                                                             {"q8_0", {DType::q8_0}},
                                                             {"q4_0", {DType::q4_0, DType::q6_k}},
                                                             {"q4_k_m", {DType::q4_k, DType::q6_k}},
                                                             {"q6_k", {DType::q6_k}}};
    EXPECT_EQ(matrix_types, expected.at(type));
    if (type == "q4_0") {
      EXPECT_EQ(f.find_tensor("output.weight")->type, DType::q6_k);
    }

    // Without load-time repacking: every weight a view into the mapping.
    const hllm::GgufModel m = hllm::load_gguf_model(fixture(type), {.repack = hllm::Repack::never});
    EXPECT_EQ(m.config.vocab_size, 512);
    EXPECT_EQ(m.config.dim, 256);
    EXPECT_EQ(m.config.n_kv_heads, 2);
    EXPECT_FALSE(m.config.tied_embeddings);
    EXPECT_EQ(m.config.rope.layout, hllm::RopeLayout::interleaved);
    EXPECT_FLOAT_EQ(m.config.rope.theta, 10000.0f);
    EXPECT_FLOAT_EQ(m.config.rms_eps, 1e-5f);
    // Views into the mapping, not copies.
    const auto bytes = m.file->bytes();
    const auto* p = static_cast<const std::byte*>(m.weights.layers[0].wq.data);
    EXPECT_TRUE(p >= bytes.data() && p < bytes.data() + bytes.size());
  }
}

TEST(GgufFixtures, DequantizedWeightsAreCloseToTheF32Originals) {
  SKIP_WITHOUT_FIXTURES();
  const gguf::File reference = gguf::File::open(fixture("f32"));
  // Bound on rms(dequantized - f32) / rms(f32), per type: far above what each format gives on
  // Gaussian weights, far below what a layout mistake gives (~1).
  const std::map<std::string, double> tolerance = {{"f16", 1e-3},    {"bf16", 5e-3},
                                                   {"q8_0", 1e-2},   {"q4_0", 0.15},
                                                   {"q4_k_m", 0.15}, {"q6_k", 0.05}};
  for (const auto& [type, bound] : tolerance) {
    SCOPED_TRACE(type);
    const gguf::File f = gguf::File::open(fixture(type));
    for (const auto& t : f.tensors()) {
      const auto* ref = reference.find_tensor(t.name);
      ASSERT_NE(ref, nullptr) << t.name;
      ASSERT_EQ(ref->dims, t.dims) << t.name;
      const auto expected = dequantize_all(weight_of(*ref));
      const auto actual = dequantize_all(weight_of(t));
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        err += (actual[i] - expected[i]) * double(actual[i] - expected[i]);
        norm += expected[i] * double(expected[i]);
      }
      EXPECT_LT(std::sqrt(err / norm), bound) << t.name;
    }
  }
  // Q8_0 in detail: every value within (a little over) half a quantization step of f32.
  const gguf::File q8 = gguf::File::open(fixture("q8_0"));
  for (const auto& t : q8.tensors()) {
    if (t.type != DType::q8_0) continue;
    const auto expected = dequantize_all(weight_of(*reference.find_tensor(t.name)));
    const auto actual = dequantize_all(weight_of(t));
    for (std::size_t b = 0; b < expected.size() / 32; ++b) {
      hllm::BlockQ8_0 block;
      std::memcpy(&block, t.data + b * sizeof block, sizeof block);
      const float step = std::fabs(block.d.to_float());
      for (std::size_t i = b * 32; i < b * 32 + 32; ++i)
        ASSERT_LE(std::fabs(actual[i] - expected[i]), 0.6f * step + 1e-7f) << t.name << " " << i;
    }
  }
}

class FixtureLogits : public ::testing::TestWithParam<std::string> {};

// The float32 reference path on the exactly dequantized weights lands within 1e-3 of the
// float64 evaluation, for every type, by one prefill and by 64 decodes.
TEST_P(FixtureLogits, ReferencePathMatchesExactLogits) {
  SKIP_WITHOUT_FIXTURES();
  const std::string type = GetParam();
  hllm::GgufModel m = hllm::load_gguf_model(fixture(type));
  const hllm::Llama<> model(m.config, m.weights);
  const auto tokens = fixture_tokens();
  ASSERT_EQ(tokens.size(), 64u);
  const auto exact = read_f32_file(kFixtures + "/fx-gqa-" + type + ".exact-logits.f32");
  ASSERT_EQ(exact.size(), 64u * 512u);

  hllm::Session<> prefill(model, {.exact = true});
  const auto all = prefill.prefill(tokens, hllm::Logits::all);
  EXPECT_LE(hllm::test::max_abs_diff(all, exact), 1e-3f);

  hllm::Session<> decode(model, {.exact = true});
  std::vector<float> decoded;
  for (std::int32_t t : tokens) {
    const auto logits = decode.decode(t);
    decoded.insert(decoded.end(), logits.begin(), logits.end());
  }
  EXPECT_LE(hllm::test::max_abs_diff(decoded, exact), 1e-3f);
}

// The fast path (8-bit activations for quantized weights) on every ISA: its rms error against
// the exact logits is no larger than llama.cpp's own for that file (fixtures/README.md), by
// prefill and by decode.
TEST_P(FixtureLogits, FastPathIsAsCloseAsLlamaCpp) {
  SKIP_WITHOUT_FIXTURES();
  const std::string type = GetParam();
  hllm::GgufModel m = hllm::load_gguf_model(fixture(type));
  // Loaded as users load it (Repack::automatic): on VNNI CPUs an output matrix of at most 6 bits
  // (the Q6_K output of the Q4_0, Q4_K_M and Q6_K fixtures) is interleaved, so the fast path
  // below runs it on the interleaved 8-bit kernels; on AVX512-BF16 CPUs a BF16 one (the BF16
  // fixture's), on AVX-512 CPUs an F32 or F16 one, goes into 16-row panels, which its exact path
  // reads.
  const hllm::WeightTensor& output = m.weights.output;
  const hllm::DType output_file_type = hllm::file_type_of(output.type);
  const hllm::RepackPlan plan = hllm::repack_plan(hllm::Repack::automatic, hllm::kernels::active());
  const bool output_may_repack = hllm::is_at_most_6_bit(output_file_type) ||
                                 output_file_type == DType::bf16 ||
                                 output_file_type == DType::f32 || output_file_type == DType::f16;
  EXPECT_EQ(output.type, output_may_repack
                             ? hllm::repack_target(
                                   {output_file_type, nullptr, output.rows, output.cols, {}}, plan)
                             : output_file_type);
  const hllm::Llama<> model(m.config, m.weights);
  const auto tokens = fixture_tokens();
  const auto exact = read_f32_file(kFixtures + "/fx-gqa-" + type + ".exact-logits.f32");
  const auto llamacpp = read_f32_file(kFixtures + "/fx-gqa-" + type + ".llamacpp-logits.f32");
  auto rms_error = [&](std::span<const float> logits) {
    double sum = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) sum += std::pow(double(logits[i]) - exact[i], 2);
    return std::sqrt(sum / double(exact.size()));
  };
  const double llamacpp_error = rms_error(llamacpp);
  for (hllm::Isa isa : hllm::test::supported_isas()) {
    SCOPED_TRACE(hllm::to_string(isa));
    hllm::Session<> prefill(model, {.isa = isa});
    const auto all = prefill.prefill(tokens, hllm::Logits::all);
    EXPECT_LE(rms_error(all), llamacpp_error) << "prefill";
    hllm::Session<> decode(model, {.isa = isa});
    std::vector<float> decoded;
    for (std::int32_t t : tokens) {
      const auto logits = decode.decode(t);
      decoded.insert(decoded.end(), logits.begin(), logits.end());
    }
    EXPECT_LE(rms_error(decoded), llamacpp_error) << "decode";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FixtureLogits, ::testing::ValuesIn(kFixtureTypes));

// ggml's quantize_row_q4_1_ref: per 32 values, d = (max − min)/15, m = min, nibbles rounded.
// values: [n], n a multiple of 32 → the blocks' bytes.
std::vector<std::byte> quantize_q4_1(const std::vector<float>& values) {
  std::vector<hllm::BlockQ4_1> blocks(values.size() / 32);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const float* x = values.data() + 32 * i;
    const float min = *std::min_element(x, x + 32), max = *std::max_element(x, x + 32);
    const float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[i].d = hllm::f16::from_float(d);
    blocks[i].m = hllm::f16::from_float(min);
    for (std::size_t j = 0; j < 16; ++j) {
      const auto code = [&](float v) {
        return std::min(15, static_cast<int>(static_cast<std::int8_t>((v - min) * id + 0.5f)));
      };
      blocks[i].qs[j] = static_cast<std::uint8_t>(code(x[j]) | code(x[j + 16]) << 4);
    }
  }
  std::vector<std::byte> bytes(blocks.size() * sizeof(hllm::BlockQ4_1));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

// Q4_1 has no fixture (llama-quantize still writes it, but the fixtures predate its integer
// path): the Q4_0 fixture with its projections replaced by the F32 fixture's quantized to Q4_1,
// its Q4_0 embedding and Q6_K output kept. The fast path (8-bit activations, matmul_q4_1) on
// every ISA, by prefill and by decode, on the file's layout and in 16-row panels (q4_1_x16),
// must be as close to this model's exact logits (the float32 reference path, which
// ReferencePathMatchesExactLogits holds within 1e-3 of float64 for every fixture type) as
// llama.cpp is on the Q4_0 fixture: the bound the Q4_0 fast path is held to.
TEST(FixtureLogitsQ4_1, FastPathIsAsCloseAsLlamaCppIsOnQ4_0) {
  SKIP_WITHOUT_FIXTURES();
  const hllm::GgufModel f32 =
      hllm::load_gguf_model(fixture("f32"), {.repack = hllm::Repack::never});
  const hllm::GgufModel q4_0 =
      hllm::load_gguf_model(fixture("q4_0"), {.repack = hllm::Repack::never});
  hllm::ModelWeights weights = q4_0.weights;
  std::vector<std::vector<std::byte>> bytes;
  for (std::size_t l = 0; l < weights.layers.size(); ++l) {
    hllm::LayerWeights& layer = weights.layers[l];
    const hllm::LayerWeights& source = f32.weights.layers[l];
    for (auto [w, from] : {std::pair{&layer.wq, &source.wq},
                           {&layer.wk, &source.wk},
                           {&layer.wv, &source.wv},
                           {&layer.wo, &source.wo},
                           {&layer.ffn.gate, &source.ffn.gate},
                           {&layer.ffn.up, &source.ffn.up},
                           {&layer.ffn.down, &source.ffn.down}}) {
      bytes.push_back(quantize_q4_1(dequantize_all(*from)));
      *w = {DType::q4_1, bytes.back().data(), from->rows, from->cols, from->name};
    }
  }
  const auto tokens = fixture_tokens();
  const auto rms = [](std::span<const float> a, std::span<const float> b) {
    double sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) sum += std::pow(double(a[i]) - b[i], 2);
    return std::sqrt(sum / double(a.size()));
  };
  const double bound = rms(read_f32_file(kFixtures + "/fx-gqa-q4_0.llamacpp-logits.f32"),
                           read_f32_file(kFixtures + "/fx-gqa-q4_0.exact-logits.f32"));
  const hllm::Llama<> plain(q4_0.config, weights);
  hllm::Session<> reference(plain, {.exact = true});
  const auto exact_span = reference.prefill(tokens, hllm::Logits::all);
  const std::vector<float> exact(exact_span.begin(), exact_span.end());
  ASSERT_EQ(exact.size(), 64u * 512u);

  hllm::ModelWeights repacked = weights;
  hllm::repack_weights(repacked,
                       hllm::RepackPlan::of_kinds(
                           {hllm::LayoutKind::quant_panels16, hllm::LayoutKind::quant_groups8}),
                       false);
  EXPECT_EQ(repacked.layers[0].wq.type, DType::q4_1_x16);
  EXPECT_EQ(repacked.layers[0].ffn.down.type, DType::q4_1_x16);
  const hllm::Llama<> panels(q4_0.config, repacked);
  for (const hllm::Llama<>* model : {&plain, &panels})
    for (hllm::Isa isa : hllm::test::supported_isas()) {
      SCOPED_TRACE(std::string(hllm::to_string(isa)) + (model == &panels ? " Q4_1_X16" : " Q4_1"));
      hllm::Session<> prefill(*model, {.isa = isa});
      const auto all = prefill.prefill(tokens, hllm::Logits::all);
      EXPECT_LE(rms(all, exact), bound) << "prefill";
      hllm::Session<> decode(*model, {.isa = isa});
      std::vector<float> decoded;
      for (std::int32_t t : tokens) {
        const auto logits = decode.decode(t);
        decoded.insert(decoded.end(), logits.begin(), logits.end());
      }
      EXPECT_LE(rms(decoded, exact), bound) << "decode";
    }
}

// ---------------------------------------------------------------------------------------------
// Block layouts, from hand-made bytes

TEST(QuantBlocks, Q8_0) {
  hllm::BlockQ8_0 b{};
  b.d = hllm::f16::from_float(0.5f);
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<std::int8_t>(i * 8 - 128);
  float out[32];
  hllm::reference::dequantize_block(b, out);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * float(i * 8 - 128)) << i;
}

TEST(QuantBlocks, Q4_0LowNibblesFirst) {
  hllm::BlockQ4_0 b{};
  b.d = hllm::f16::from_float(2.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  float out[32];
  hllm::reference::dequantize_block(b, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * float(j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * float(7 - j)) << j;
  }
}

TEST(QuantBlocks, Q4_1) {
  hllm::BlockQ4_1 b{};
  b.d = hllm::f16::from_float(0.25f);
  b.m = hllm::f16::from_float(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(((j + 3) % 16) | (j << 4));
  float out[32];
  hllm::reference::dequantize_block(b, out);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * float((j + 3) % 16) - 1.0f) << j;
    EXPECT_EQ(out[j + 16], 0.25f * float(j) - 1.0f) << j;
  }
}

TEST(QuantBlocks, Q4_KScalesAndMinsPackedIn6Bits) {
  // Eight 6-bit scales and mins, with high bits set so the packing of sub-blocks 4..7 matters.
  const std::uint8_t sc[8] = {1, 2, 63, 40, 17, 33, 50, 63};
  const std::uint8_t mn[8] = {5, 0, 20, 63, 48, 1, 31, 62};
  hllm::BlockQ4_K b{};
  b.d = hllm::f16::from_float(0.5f);
  b.dmin = hllm::f16::from_float(0.125f);
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<std::uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<std::uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<std::uint8_t>(i * 37 + 11);
  float out[256];
  hllm::reference::dequantize_block(b, out);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32;  // sub-block: pairs share 32 bytes, low nibbles then high
    const std::uint8_t byte = b.qs[(sub / 2) * 32 + e % 32];
    const int q = sub % 2 == 0 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(out[e], 0.5f * float(sc[sub]) * float(q) - 0.125f * float(mn[sub])) << e;
  }
}

TEST(QuantBlocks, Q6_K) {
  hllm::BlockQ6_K b{};
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<std::uint8_t>(i * 73 + 5);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<std::uint8_t>(i * 151 + 3);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<std::int8_t>(i * 19 - 128);
  b.d = hllm::f16::from_float(0.0625f);
  float out[256];
  hllm::reference::dequantize_block(b, out);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const std::uint8_t lo_byte = b.ql[half * 64 + l + (quarter % 2) * 32];
    const int lo = quarter < 2 ? (lo_byte & 15) : (lo_byte >> 4);
    const int hi = (b.qh[half * 32 + l] >> (2 * quarter)) & 3;
    const int scale = b.scales[half * 8 + l / 16 + 2 * quarter];
    EXPECT_EQ(out[e], 0.0625f * float(scale) * float((lo | (hi << 4)) - 32)) << e;
  }
}

TEST(Quantize, Q8_0AndQ4_0RoundTripWithinHalfAStep) {
  const auto x = hllm::test::random_vector(256, 7);
  std::vector<hllm::BlockQ8_0> q8(8);
  hllm::quant::quantize_row_q8_0(x.data(), x.size(), q8.data());
  std::vector<hllm::BlockQ4_0> q4(8);
  hllm::quant::quantize_row_q4_0(x.data(), x.size(), q4.data());
  for (std::size_t b = 0; b < 8; ++b) {
    float y8[32], y4[32];
    hllm::reference::dequantize_block(q8[b], y8);
    hllm::reference::dequantize_block(q4[b], y4);
    for (std::size_t i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(y8[i] - x[b * 32 + i]), 0.51f * std::fabs(q8[b].d.to_float()) + 1e-6f);
      // The side opposite the largest magnitude reaches only 7 steps: up to a full step off there.
      EXPECT_LE(std::fabs(y4[i] - x[b * 32 + i]), 1.01f * std::fabs(q4[b].d.to_float()) + 1e-6f);
    }
  }
  EXPECT_THROW(hllm::quant::quantize_row_q8_0(x.data(), 31, q8.data()), Error);
}

// ---------------------------------------------------------------------------------------------
// Writer round trip

hllm::ModelConfig tiny_config() {
  hllm::ModelConfig c;
  c.name = "tiny";
  c.vocab_size = 97;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 96;
  c.context_length = 128;
  c.rope.theta = 50000.0f;
  return c;
}

void add_test_metadata(gguf::Writer& w) {
  w.set("test.u8", std::uint8_t{200});
  w.set("test.i8", std::int8_t{-100});
  w.set("test.u16", std::uint16_t{60000});
  w.set("test.i16", std::int16_t{-30000});
  w.set("test.u32", std::uint32_t{4000000000u});
  w.set("test.i32", std::int32_t{-2000000000});
  w.set("test.u64", std::uint64_t{1} << 60);
  w.set("test.i64", std::int64_t{-(std::int64_t{1} << 50)});
  w.set("test.f32", 1.5f);
  w.set("test.f64", 0.1);
  w.set("test.bool", true);
  w.set("test.string", "héllo\n\"world\"");
  w.set("test.strings", std::vector<std::string>{"<unk>", "<s>", "</s>", "", "▁a"});
  w.set("test.floats", std::vector<float>{0.0f, -1.0f, 2.5f});
  w.set("test.f64s", std::vector<double>{1e300, -2.0});
  w.set("test.i32s", std::vector<std::int32_t>{1, -2, 3});
  w.set("test.u8s", std::vector<std::uint8_t>{0, 255});
  w.set("test.u64s", std::vector<std::uint64_t>{0, 1ull << 62});
  w.set("test.bools", std::vector<bool>{true, false});
  w.set("test.empty", std::vector<std::string>{});
}

TEST(GgufWriter, RoundTripsMetadataTensorsAndLogits) {
  const hllm::ModelConfig config = tiny_config();
  const hllm::ModelWeights weights = hllm::random_weights(config, DType::f16, 42);
  gguf::Writer writer = hllm::gguf_model_writer(config, weights);
  add_test_metadata(writer);
  const std::vector<std::byte> bytes = writer.to_bytes();

  const gguf::File f = gguf::File::from_memory(bytes, "memory.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.get_int("test.u8"), 200);
  EXPECT_EQ(f.get_int("test.i8"), -100);
  EXPECT_EQ(f.get_int("test.u16"), 60000);
  EXPECT_EQ(f.get_int("test.i16"), -30000);
  EXPECT_EQ(f.get_int("test.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("test.i32"), -2000000000);
  EXPECT_EQ(f.get_int("test.u64"), std::int64_t{1} << 60);
  EXPECT_EQ(f.get_int("test.i64"), -(std::int64_t{1} << 50));
  EXPECT_EQ(f.get_float("test.f32"), 1.5);
  EXPECT_EQ(f.get_float("test.f64"), 0.1);
  EXPECT_TRUE(f.get_bool("test.bool"));
  EXPECT_EQ(f.get_string("test.string"), "héllo\n\"world\"");
  EXPECT_EQ(f.get_string_array("test.strings"),
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "", "▁a"}));
  EXPECT_EQ(f.get_float_array("test.floats"), (std::vector<float>{0.0f, -1.0f, 2.5f}));
  EXPECT_EQ(f.get_float_array("test.f64s"), (std::vector<float>{INFINITY, -2.0f}));
  EXPECT_EQ(f.get_int_array("test.i32s"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_int_array("test.u8s"), (std::vector<std::int64_t>{0, 255}));
  EXPECT_EQ(f.get_int_array("test.u64s"), (std::vector<std::int64_t>{0, std::int64_t{1} << 62}));
  EXPECT_EQ(f.array_size("test.bools"), 2u);
  EXPECT_EQ(f.array_type("test.bools"), gguf::ValueType::boolean);
  EXPECT_EQ(f.array_size("test.empty"), 0u);
  EXPECT_EQ(f.type_of("test.u16"), gguf::ValueType::u16);
  EXPECT_EQ(f.get_int_or("absent", 7), 7);
  EXPECT_EQ(f.get_string_or("absent", "x"), "x");
  EXPECT_EQ(f.get_float_or("absent", 2.0), 2.0);
  EXPECT_TRUE(f.get_bool_or("absent", true));
  EXPECT_EQ(f.get_string_or("general.name", "x"), "tiny");
  EXPECT_EQ(f.value_to_string("test.string"), "\"h\xc3\xa9llo\\n\\\"world\\\"\"");
  EXPECT_EQ(f.value_to_string("test.i32s", 2), "[1, -2, ...] (3 x i32)");
  EXPECT_EQ(f.value_to_string("test.bool"), "true");
  EXPECT_EQ(f.value_to_string("test.u64"), std::to_string(std::uint64_t{1} << 60));
  const auto keys = f.keys();
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(keys.front(), "general.architecture");
  EXPECT_EQ(keys.back(), "test.empty");

  // Tensors: byte-identical to the weights they were written from.
  const auto specs = hllm::model_tensor_specs(config);
  ASSERT_EQ(f.tensors().size(), specs.size());
  const hllm::GgufModel loaded = hllm::load_gguf_model(std::make_shared<const gguf::File>(f));
  const auto same = [](const hllm::WeightTensor& a, const hllm::WeightTensor& b) {
    return a.type == b.type && a.rows == b.rows && a.cols == b.cols &&
           std::memcmp(a.data, b.data, a.bytes()) == 0;
  };
  EXPECT_TRUE(same(loaded.weights.token_embedding, weights.token_embedding));
  EXPECT_TRUE(same(loaded.weights.output, weights.output));
  EXPECT_TRUE(same(loaded.weights.output_norm, weights.output_norm));
  for (std::size_t l = 0; l < weights.layers.size(); ++l) {
    EXPECT_TRUE(same(loaded.weights.layers[l].wq, weights.layers[l].wq));
    EXPECT_TRUE(same(loaded.weights.layers[l].ffn.down, weights.layers[l].ffn.down));
    EXPECT_TRUE(same(loaded.weights.layers[l].attn_norm, weights.layers[l].attn_norm));
  }
  EXPECT_EQ(loaded.config.vocab_size, config.vocab_size);
  EXPECT_EQ(loaded.config.n_kv_heads, config.n_kv_heads);
  EXPECT_EQ(loaded.config.rope.theta, config.rope.theta);
  EXPECT_EQ(loaded.config.name, "tiny");

  // Same logits, bit for bit: same weights, same code.
  const hllm::Llama<> original(config, weights);
  const hllm::Llama<> reloaded(loaded.config, loaded.weights);
  std::vector<std::int32_t> tokens{1, 5, 9, 96, 0, 42};
  hllm::Session<> a(original), b(reloaded);
  const auto la = a.prefill(tokens, hllm::Logits::all);
  const std::vector<float> first(la.begin(), la.end());
  const auto lb = b.prefill(tokens, hllm::Logits::all);
  EXPECT_EQ(first, std::vector<float>(lb.begin(), lb.end()));

  // write() produces exactly to_bytes(), and the file maps back.
  const std::string path = (fs::temp_directory_path() / "hllm_test_gguf_roundtrip.gguf").string();
  hllm::save_gguf_model(path, config, weights, add_test_metadata);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(written.size(), bytes.size());
  EXPECT_EQ(std::memcmp(written.data(), bytes.data(), bytes.size()), 0);
  const hllm::GgufModel mapped = hllm::load_gguf_model(path, {.repack = hllm::Repack::never});
  EXPECT_EQ(mapped.file->path(), path);
  EXPECT_TRUE(same(mapped.weights.layers[1].wv, weights.layers[1].wv));
  fs::remove(path);
}

TEST(GgufWriter, QuantizedTiedModelWithRopeFreqsLoadsAndRuns) {
  hllm::ModelConfig config = tiny_config();
  config.tied_embeddings = true;
  config.rope.freq_factors.assign(8, 1.0f);
  config.rope.freq_factors[7] = 4.0f;
  config.rope.scaling = {
      .type = hllm::RopeScalingType::yarn, .factor = 4.0f, .original_context = 32};
  const hllm::ModelWeights f32 = hllm::random_weights(config, DType::f32, 3);
  // Quantize every matrix to Q8_0 (norms stay f32) through the writer.
  gguf::Writer probe = hllm::gguf_model_writer(config, f32);
  const auto probe_bytes = probe.to_bytes();
  const gguf::File source = gguf::File::from_memory(probe_bytes, "probe");
  gguf::Writer w;
  for (const auto& key : source.keys())
    if (source.type_of(key) == gguf::ValueType::string)
      w.set(key, source.get_string(key));
    else if (source.type_of(key) == gguf::ValueType::f32)
      w.set(key, float(source.get_float(key)));
    else
      w.set(key, static_cast<std::uint32_t>(source.get_int(key)));
  for (const auto& t : source.tensors()) {
    const std::span<const float> values(reinterpret_cast<const float*>(t.data), t.size_bytes / 4);
    const DType type = t.dims.size() == 1 ? DType::f32 : DType::q8_0;
    w.add_tensor(t.name, type, t.dims, hllm::quant::quantize(type, values));
  }
  const auto bytes = w.to_bytes();
  const hllm::GgufModel m = hllm::load_gguf_model(
      std::make_shared<const gguf::File>(gguf::File::from_memory(bytes, "q")));
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.config.rope.freq_factors, config.rope.freq_factors);
  EXPECT_EQ(m.config.rope.scaling.type, hllm::RopeScalingType::yarn);
  EXPECT_EQ(m.config.rope.scaling.original_context, 32);
  EXPECT_EQ(m.weights.token_embedding.type, DType::q8_0);
  const hllm::Llama<> quantized(m.config, m.weights), exact(config, f32);
  const std::vector<std::int32_t> tokens{3, 1, 4, 1, 5, 9, 2, 6};
  hllm::Session<> a(quantized), b(exact);
  const auto la = a.prefill(tokens, hllm::Logits::all);
  const std::vector<float> q(la.begin(), la.end());
  const auto lb = b.prefill(tokens, hllm::Logits::all);
  // Q8_0 weights move logits by a few percent of their scale, not more.
  EXPECT_TRUE(hllm::test::all_close(q, lb, 0.1f));
}

// ---------------------------------------------------------------------------------------------
// Corrupt files

// A small valid file and the byte offsets of its fields, found by construction.
struct Sample {
  std::vector<std::byte> bytes;
  std::uint64_t find(std::string_view text) const {
    const auto* p = reinterpret_cast<const char*>(bytes.data());
    const std::string_view all(p, bytes.size());
    const std::size_t at = all.find(text);
    EXPECT_NE(at, std::string_view::npos) << text;
    return at;
  }
  // Offset of the u64 length that precedes `text` (a key or tensor name).
  std::uint64_t string_at(std::string_view text) const { return find(text) - 8; }
  std::uint64_t after(std::string_view text) const { return find(text) + text.size(); }
  void put_u32(std::uint64_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = std::byte((v >> (8 * i)) & 0xff);
  }
  void put_u64(std::uint64_t at, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes[at + i] = std::byte((v >> (8 * i)) & 0xff);
  }
  gguf::File parse(std::size_t length = SIZE_MAX) const {
    return gguf::File::from_memory(std::span(bytes).first(std::min(length, bytes.size())),
                                   "bad.gguf");
  }
};

// Keys: general.architecture (string), general.alignment (u32), dup.a / dup.b (u32),
// test.flag (bool), test.ints (i32 array), test.words (string array, last).
// Tensors: t.a (Q8_0 [32, 2]: 68 bytes) at 0, t.b (F32 [32, 2]: 256 bytes) at 96, ending the file.
Sample make_sample() {
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set_alignment(32);
  w.set("dup.a", std::uint32_t{1});
  w.set("dup.b", std::uint32_t{2});
  w.set("test.flag", false);
  w.set("test.ints", std::vector<std::int32_t>{1, 2, 3});
  w.set("test.words", std::vector<std::string>{"alpha", "beta", "gamma"});
  const auto values = hllm::test::random_vector(64, 1);
  w.add_tensor("t.a", DType::q8_0, {32, 2}, hllm::quant::quantize(DType::q8_0, values));
  w.add_tensor("t.b", DType::f32, {32, 2}, hllm::quant::quantize(DType::f32, values));
  return {w.to_bytes()};
}

// Tensor info layout after the name: n_dims u32, dims u64[n], type u32, offset u64.
struct TensorFields {
  std::uint64_t n_dims, dim0, dim1, type, offset;
};
TensorFields fields_of(const Sample& s, std::string_view name) {
  const std::uint64_t n = s.after(name);
  return {n, n + 4, n + 12, n + 20, n + 24};
}

TEST(GgufCorrupt, SampleIsValid) {
  const Sample s = make_sample();
  const gguf::File f = s.parse();
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find_tensor("t.b")->offset, 96u);
  EXPECT_EQ(f.data_offset() + 96 + 256, s.bytes.size());
  EXPECT_EQ(f.get_string_array("test.words"), (std::vector<std::string>{"alpha", "beta", "gamma"}));
}

TEST(GgufCorrupt, TruncationAnywhereIsAFormatError) {
  const Sample s = make_sample();
  for (std::size_t length = 0; length < s.bytes.size(); ++length) {
    try {
      s.parse(length);
      ADD_FAILURE() << "truncation to " << length << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::format) << length << ": " << e.what();
      EXPECT_EQ(e.file(), "bad.gguf");
      EXPECT_FALSE(e.field().empty()) << length;
      ASSERT_TRUE(e.offset().has_value()) << length;
      EXPECT_LE(*e.offset(), length) << e.what();
    }
  }
}

TEST(GgufCorrupt, TruncationAtSectionBoundariesNamesTheField) {
  const Sample s = make_sample();
  const auto bad = [&](std::size_t length) { return [&s, length] { s.parse(length); }; };
  expect_error(bad(0), ErrorKind::format, "header.magic", 0);
  expect_error(bad(3), ErrorKind::format, "header.magic", 0);
  expect_error(bad(6), ErrorKind::format, "header.version", 4);
  expect_error(bad(12), ErrorKind::format, "header.tensor_count", 8);
  expect_error(bad(20), ErrorKind::format, "header.kv_count", 16);
  // Inside the last key/value (the count checks pass: enough bytes remain).
  const std::uint64_t words = s.after("test.words");
  expect_error(bad(words + 2), ErrorKind::format, "test.words", words);       // inside its type
  expect_error(bad(words + 10), ErrorKind::format, "test.words", words + 8);  // inside its count
  const std::uint64_t gamma = s.string_at("gamma");
  expect_error(bad(gamma + 9), ErrorKind::format, "test.words", gamma);  // its length does not fit
  // Inside the tensor infos.
  const TensorFields b = fields_of(s, "t.b");
  expect_error(bad(s.string_at("t.b") + 3), ErrorKind::format, "tensor[1].name",
               s.string_at("t.b"));
  expect_error(bad(b.dim1 + 1), ErrorKind::format, "t.b", b.dim1);
  expect_error(bad(b.offset + 7), ErrorKind::format, "t.b", b.offset);
  // In the padding before the data, and inside the data.
  expect_error(bad(b.offset + 9), ErrorKind::format, "header.data", b.offset + 8);
  expect_error(bad(s.bytes.size() - 1), ErrorKind::format, "t.b", b.offset);
  const gguf::File f = s.parse();
  expect_error(bad(f.data_offset() + 50), ErrorKind::format, "t.a", fields_of(s, "t.a").offset);
}

TEST(GgufCorrupt, HeaderFields) {
  {
    Sample s = make_sample();
    s.bytes[0] = std::byte{'X'};
    expect_error([&] { s.parse(); }, ErrorKind::format, "header.magic", 0);
  }
  for (std::uint32_t version : {1u, 99u, 0x03000000u}) {
    Sample s = make_sample();
    s.put_u32(4, version);
    expect_error([&] { s.parse(); }, ErrorKind::unsupported, "header.version", 4);
  }
  {
    Sample s = make_sample();
    s.put_u32(4, 2);  // v2 has the v3 layout
    EXPECT_EQ(s.parse().version(), 2u);
  }
  {
    Sample s = make_sample();
    s.put_u64(8, std::uint64_t{1} << 40);
    expect_error([&] { s.parse(); }, ErrorKind::format, "header.tensor_count", 8);
  }
  {
    Sample s = make_sample();
    s.put_u64(16, ~std::uint64_t{0});
    expect_error([&] { s.parse(); }, ErrorKind::format, "header.kv_count", 16);
  }
}

TEST(GgufCorrupt, MetadataValues) {
  {  // huge key length
    Sample s = make_sample();
    s.put_u64(24, std::uint64_t{1} << 60);
    expect_error([&] { s.parse(); }, ErrorKind::format, "kv[0].key", 24);
  }
  {  // huge string value length
    Sample s = make_sample();
    const std::uint64_t at = s.after("general.architecture") + 4;
    s.put_u64(at, ~std::uint64_t{0} - 3);
    expect_error([&] { s.parse(); }, ErrorKind::format, "general.architecture", at);
  }
  {  // array count whose byte size overflows
    Sample s = make_sample();
    const std::uint64_t at = s.after("test.ints") + 8;
    s.put_u64(at, std::uint64_t{1} << 62);
    expect_error([&] { s.parse(); }, ErrorKind::format, "test.ints", at);
  }
  {  // string array count
    Sample s = make_sample();
    const std::uint64_t at = s.after("test.words") + 8;
    s.put_u64(at, ~std::uint64_t{0});
    expect_error([&] { s.parse(); }, ErrorKind::format, "test.words", at);
  }
  {  // unknown value type
    Sample s = make_sample();
    const std::uint64_t at = s.after("dup.b");
    s.put_u32(at, 13);
    expect_error([&] { s.parse(); }, ErrorKind::format, "dup.b", at);
  }
  {  // nested array
    Sample s = make_sample();
    const std::uint64_t at = s.after("test.ints") + 4;
    s.put_u32(at, 9);
    expect_error([&] { s.parse(); }, ErrorKind::unsupported, "test.ints", at);
  }
  {  // bool that is neither 0 nor 1
    Sample s = make_sample();
    const std::uint64_t at = s.after("test.flag") + 4;
    s.bytes[at] = std::byte{2};
    expect_error([&] { s.parse(); }, ErrorKind::format, "test.flag", at);
  }
  {  // duplicate key: dup.b becomes dup.a
    Sample s = make_sample();
    const std::uint64_t at = s.string_at("dup.b");
    s.bytes[s.find("dup.b") + 4] = std::byte{'a'};
    expect_error([&] { s.parse(); }, ErrorKind::format, "dup.a", at);
  }
  for (std::uint32_t alignment : {0u, 48u, 1u << 31}) {  // bad alignment
    Sample s = make_sample();
    const std::uint64_t at = s.after("general.alignment") + 4;
    s.put_u32(at, alignment);
    expect_error([&] { s.parse(); }, ErrorKind::format, "general.alignment", at);
  }
}

TEST(GgufCorrupt, TensorInfos) {
  const auto patch32 = [](std::uint64_t TensorFields::*field, std::string_view name,
                          std::uint32_t value, ErrorKind kind) {
    Sample s = make_sample();
    const std::uint64_t at = fields_of(s, name).*field;
    s.put_u32(at, value);
    expect_error([&] { s.parse(); }, kind, std::string(name), at);
  };
  const auto patch64 = [](std::uint64_t TensorFields::*field, std::string_view name,
                          std::uint64_t value, std::optional<std::uint64_t> expected_at = {}) {
    Sample s = make_sample();
    const std::uint64_t at = fields_of(s, name).*field;
    s.put_u64(at, value);
    expect_error([&] { s.parse(); }, ErrorKind::format, std::string(name),
                 expected_at.value_or(at));
  };
  patch32(&TensorFields::n_dims, "t.a", 0, ErrorKind::format);
  patch32(&TensorFields::n_dims, "t.a", 5, ErrorKind::format);
  patch32(&TensorFields::type, "t.b", 99, ErrorKind::unsupported);
  patch64(&TensorFields::dim1, "t.b", 0);  // dimension 0
  patch64(&TensorFields::dim0, "t.a", 16,
          fields_of(make_sample(), "t.a").dim0);  // not whole blocks
  {                                               // dims whose product overflows
    Sample s = make_sample();
    const TensorFields b = fields_of(s, "t.b");
    s.put_u64(b.dim0, std::uint64_t{1} << 32);
    s.put_u64(b.dim1, std::uint64_t{1} << 32);
    expect_error([&] { s.parse(); }, ErrorKind::format, "t.b", b.dim1);
  }
  patch64(&TensorFields::offset, "t.b", std::uint64_t{1} << 20);  // past the end
  patch64(&TensorFields::offset, "t.b", ~std::uint64_t{0} - 31);  // past the end, near overflow
  patch64(&TensorFields::offset, "t.b", 4);                       // misaligned
  patch64(&TensorFields::offset, "t.b", 32);                      // overlaps t.a [0, 68)
  {  // duplicate tensor name: t.b becomes t.a
    Sample s = make_sample();
    const std::uint64_t at = s.string_at("t.b");
    s.bytes[s.find("t.b") + 2] = std::byte{'a'};
    expect_error([&] { s.parse(); }, ErrorKind::format, "t.a", at);
  }
}

TEST(GgufCorrupt, GettersNameKeyAndValueOffset) {
  const Sample s = make_sample();
  const gguf::File f = s.parse();
  expect_error([&] { f.get_int("absent.key"); }, ErrorKind::format, "absent.key", std::nullopt);
  const std::uint64_t value_at = s.after("general.architecture") + 4;
  expect_error([&] { f.get_int("general.architecture"); }, ErrorKind::format,
               "general.architecture", value_at);
  expect_error([&] { f.get_float_or("general.architecture", 1.0); }, ErrorKind::format,
               "general.architecture", value_at);
  expect_error([&] { f.get_string_array("test.ints"); }, ErrorKind::format, "test.ints",
               s.after("test.ints") + 4);
  expect_error([&] { f.array_size("dup.a"); }, ErrorKind::format, "dup.a", s.after("dup.a") + 4);
  EXPECT_EQ(f.get_int_array("test.ints"), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(GgufModelLoad, MissingTensorsKeysAndWrongArchitecture) {
  const hllm::ModelConfig config = tiny_config();
  const hllm::ModelWeights weights = hllm::random_weights(config, DType::f32, 1);
  const auto load = [](const gguf::Writer& w) {
    const auto bytes = w.to_bytes();
    return hllm::load_gguf_model(
        std::make_shared<const gguf::File>(gguf::File::from_memory(bytes, "bad.gguf")));
  };
  {
    gguf::Writer w = hllm::gguf_model_writer(config, weights);
    w.set("general.architecture", "mamba");
    expect_error([&] { load(w); }, ErrorKind::unsupported, "general.architecture", std::nullopt);
  }
  {
    gguf::Writer w = hllm::gguf_model_writer(config, weights);
    w.set("llama.block_count", std::uint32_t{3});  // a layer whose tensors are missing
    expect_error([&] { load(w); }, ErrorKind::format, "blk.2.attn_norm.weight", std::nullopt);
  }
  {
    // Found by fuzz_gguf: a block_count of millions made the loader build millions of
    // tensor names and layer slots before looking for any tensor (out of memory). Tensors are
    // now looked up one at a time, so this fails at the first missing one without allocating.
    gguf::Writer w = hllm::gguf_model_writer(config, weights);
    w.set("llama.block_count", std::uint32_t{16'000'000});
    expect_error([&] { load(w); }, ErrorKind::format, "blk.2.attn_norm.weight", std::nullopt);
  }
  {
    gguf::Writer w = hllm::gguf_model_writer(config, weights);
    w.set("llama.feed_forward_length", std::uint32_t{128});  // shapes disagree
    expect_error([&] { load(w); }, ErrorKind::format, "blk.0.ffn_gate.weight", std::nullopt);
  }
  {
    gguf::Writer w = hllm::gguf_model_writer(config, weights);
    w.set("llama.embedding_length", "sixty-four");  // wrong type
    expect_error([&] { load(w); }, ErrorKind::format, "llama.embedding_length", std::nullopt);
  }
}

TEST(MappedFile, Errors) {
  expect_error([] { hllm::io::MappedFile::open("/nonexistent/model.gguf"); }, ErrorKind::io, "",
               std::nullopt, "/nonexistent/model.gguf");
  const std::string empty = (fs::temp_directory_path() / "hllm_test_gguf_empty.gguf").string();
  { std::ofstream touch(empty); }
  expect_error([&] { gguf::File::open(empty); }, ErrorKind::format, "", 0, empty);
  fs::remove(empty);
  const std::string dir = fs::temp_directory_path().string();
  expect_error([&] { gguf::File::open(dir); }, ErrorKind::io, "", std::nullopt, dir);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The rest of the bad-input catalogue: vocabularies, required keys, huge claims, NaN/Inf, and
// resource limits.

namespace {

// Here hllm::test::expect_error: (f, kind, field, file, offset, message fragment).

// The tiny model as GGUF bytes; `edit` changes the writer before the bytes are made.
std::vector<std::byte> tiny_model_bytes(DType type = DType::f32,
                                        const std::function<void(gguf::Writer&)>& edit = {}) {
  const hllm::ModelConfig config = tiny_config();
  const hllm::ModelWeights f32 = hllm::random_weights(config, DType::f32, 5);
  const hllm::ConvertedModel m = hllm::convert_model(config, f32, type);
  gguf::Writer w = hllm::gguf_model_writer(m.config, m.weights);
  if (edit) edit(w);
  return w.to_bytes();
}

hllm::GgufModel load_bytes(const std::vector<std::byte>& bytes,
                           const hllm::LoadOptions& options = {}) {
  return hllm::load_gguf_model(
      std::make_shared<const gguf::File>(gguf::File::from_memory(bytes, "bad.gguf")), options);
}

// Overwrites every occurrence of `from` with `to` (same length) in the bytes: renames a key.
void replace_text(std::vector<std::byte>& bytes, std::string_view from, std::string_view to) {
  ASSERT_EQ(from.size(), to.size());
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::size_t at = all.find(from);
  ASSERT_NE(at, std::string_view::npos) << from;
  std::memcpy(bytes.data() + at, to.data(), to.size());
}

std::uint64_t find_text(const std::vector<std::byte>& bytes, std::string_view text) {
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::size_t at = all.find(text);
  EXPECT_NE(at, std::string_view::npos) << text;
  return at;
}

TEST(GgufCorrupt, HugeTensorClaimIsRefusedAgainstTheFileSize) {
  // t.b claims [2^20, 2^20] F32: 2^40 elements, 4 TiB, in a file of a few hundred bytes. The
  // parser compares the claim with the bytes present before anything is allocated or read.
  Sample s = make_sample();
  const TensorFields b = fields_of(s, "t.b");
  s.put_u64(b.dim0, std::uint64_t{1} << 20);
  s.put_u64(b.dim1, std::uint64_t{1} << 20);
  hllm::test::expect_error([&] { s.parse(); }, ErrorKind::format, "t.b", "bad.gguf", b.offset,
                           "extends past the end of the file");
  // More than 4 dimensions, and an unknown type, with their messages.
  Sample five = make_sample();
  five.put_u32(fields_of(five, "t.a").n_dims, 5);
  hllm::test::expect_error([&] { five.parse(); }, ErrorKind::format, "t.a", "bad.gguf",
                           fields_of(five, "t.a").n_dims, "n_dims 5 is not in [1, 4]");
  Sample unknown = make_sample();
  unknown.put_u32(fields_of(unknown, "t.b").type, 99);
  hllm::test::expect_error([&] { unknown.parse(); }, ErrorKind::unsupported, "t.b", "bad.gguf",
                           fields_of(unknown, "t.b").type, "tensor type id 99 is not supported");
  // The repacked in-memory layouts have type numbers too, but are never a file's.
  Sample internal = make_sample();
  internal.put_u32(fields_of(internal, "t.b").type, static_cast<std::uint32_t>(DType::q4_0_x8));
  hllm::test::expect_error([&] { internal.parse(); }, ErrorKind::unsupported, "t.b", "bad.gguf",
                           fields_of(internal, "t.b").type,
                           "tensor type id 65538 is not supported");
}

// Load-time repacking (LoadOptions::repack): the blocks' Q4_0/Q8_0 projections become 16-row
// panels or 8-row interleaved groups (whichever their shape allows) and BF16 ones 16-row panels,
// every other projection is moved as it is into the new buffer (the output too, unless it is of at
// most 6 bits or BF16 and has whole groups: its 97 rows here have not; the fixture tests run
// interleaved Q6_K and BF16 outputs), the embedding stays. Every ISA runs the repacked model: the
// quantized exact path bit for bit like the file's layout (same dequantized blocks, same order),
// the integer path and every BF16 path within the float summation bound of the kernel tests
// (another order of float additions; BF16's tests show its GEMM bit-identical on whole groups);
// moved F16 weights give identical results on every path.
TEST(GgufModelLoad, RepackedWeightsGiveTheFileLayoutsLogitsOnEveryIsa) {
  for (DType type : {DType::q4_0, DType::q8_0, DType::bf16, DType::f16}) {
    const auto bytes = tiny_model_bytes(type);
    const hllm::GgufModel plain = load_bytes(bytes, {.repack = hllm::Repack::never});
    const hllm::GgufModel packed = load_bytes(bytes, {.repack = hllm::Repack::always});
    // Borrowed memory is never copied unless asked.
    const hllm::GgufModel automatic = load_bytes(bytes);
    EXPECT_EQ(automatic.weights.layers[1].wq.data, plain.weights.layers[1].wq.data);
    const auto in_source = [&](const hllm::WeightTensor& w) {
      const auto* p = static_cast<const std::byte*>(w.data);
      return p >= bytes.data() && p < bytes.data() + bytes.size();
    };
    const auto& pl = plain.weights.layers;
    const auto& pk = packed.weights.layers;
    for (auto [from, w] : {std::pair{&pl[1].wq, &pk[1].wq},
                           {&pl[1].wk, &pk[1].wk},
                           {&pl[0].ffn.down, &pk[0].ffn.down}}) {
      EXPECT_EQ(w->type, hllm::interleaved_type(*from)) << w->name;
      EXPECT_FALSE(in_source(*w)) << w->name;
    }
    // The tiny model has both shapes: Q4_0/Q8_0 16-row panels (wq: 64 × 64) and 8-row groups
    // (ffn_down: 3 blocks per row).
    if (type == DType::q4_0 || type == DType::q8_0) {
      EXPECT_EQ(pk[1].wq.type, type == DType::q4_0 ? DType::q4_0_x16 : DType::q8_0_x16);
      EXPECT_EQ(pk[0].ffn.down.type, type == DType::q4_0 ? DType::q4_0_x8 : DType::q8_0_x8);
    }
    EXPECT_EQ(packed.weights.output.type,
              hllm::is_at_most_6_bit(type) ? hllm::interleaved_type(plain.weights.output) : type);
    EXPECT_FALSE(in_source(packed.weights.output));
    EXPECT_EQ(packed.weights.token_embedding.type, type);
    EXPECT_TRUE(in_source(packed.weights.token_embedding));
    // Quantized types' exact paths dequantize either layout's blocks in the same order.
    const bool same_bits_exact = type == DType::q4_0 || type == DType::q8_0;
    const hllm::Llama<> a(plain.config, plain.weights), b(packed.config, packed.weights);
    const std::vector<std::int32_t> tokens{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    for (hllm::Isa isa : hllm::test::supported_isas())
      for (bool exact : {false, true}) {
        hllm::Session<> sa(a, {.isa = isa, .exact = exact}), sb(b, {.isa = isa, .exact = exact});
        const auto la = sa.prefill(tokens, hllm::Logits::all);
        const std::vector<float> from_file(la.begin(), la.end());
        const auto lb = sb.prefill(tokens, hllm::Logits::all);
        const std::vector<float> from_repacked(lb.begin(), lb.end());
        // BF16 panels on the fast path with AVX512-BF16 round the activations to bf16 (8
        // significant bits, relative error up to 2^-9 per activation) where the file layout
        // keeps them float. Each of the two layers' seven products rounds its input once; the
        // allowance is 2^-7 of the logits' scale, four times one rounding's 2^-9 (measured
        // here: 0.0107 of 3.41, 2^-8.3).
        const bool rounded = type == DType::bf16 && !exact &&
                             hllm::kernels::table_for(isa).preferred_bf16_dot() != nullptr;
        if (exact && same_bits_exact)
          EXPECT_EQ(from_file, from_repacked) << hllm::to_string(isa);
        else
          EXPECT_TRUE(hllm::test::all_close(from_file, from_repacked,
                                            rounded ? std::ldexp(1.0f, -7) : 1e-4f))
              << hllm::to_string(isa) << " " << hllm::dtype_name(type);
        // Decode (one token): the repacked decode kernel.
        const auto da = sa.decode(7), db = sb.decode(7);
        EXPECT_TRUE(hllm::test::all_close(std::vector<float>(da.begin(), da.end()),
                                          std::vector<float>(db.begin(), db.end()),
                                          rounded ? std::ldexp(1.0f, -7) : 1e-4f))
            << hllm::to_string(isa) << " decode";
      }
  }
}

TEST(GgufModelLoad, VocabularyThatDisagreesWithTheEmbedding) {
  EXPECT_NO_THROW(load_bytes(tiny_model_bytes()));
  // llama.vocab_size says 98; token_embd.weight has 97 rows.
  hllm::test::expect_error(
      [] {
        load_bytes(tiny_model_bytes(
            DType::f32, [](gguf::Writer& w) { w.set("llama.vocab_size", std::uint32_t{98}); }));
      },
      ErrorKind::format, "llama.vocab_size", "bad.gguf", std::nullopt,
      "llama.vocab_size is 98 but token_embd.weight has 97 rows");
  // A tokenizer with more tokens than the embedding has rows.
  const auto tokens = [](std::size_t n) {
    return [n](gguf::Writer& w) {
      std::vector<std::string> t(n);
      for (std::size_t i = 0; i < n; ++i) t[i] = std::to_string(i);
      w.set("tokenizer.ggml.tokens", t);
    };
  };
  hllm::test::expect_error([&] { load_bytes(tiny_model_bytes(DType::f32, tokens(98))); },
                           ErrorKind::format, "tokenizer.ggml.tokens", "bad.gguf", std::nullopt,
                           "the tokenizer has 98 tokens but the model's vocabulary");
  EXPECT_NO_THROW(load_bytes(tiny_model_bytes(DType::f32, tokens(97))));
  // Fewer tokens than rows: a truncated token array (llama.cpp refuses it too; converters pad
  // the token list when they pad the embedding).
  hllm::test::expect_error([&] { load_bytes(tiny_model_bytes(DType::f32, tokens(90))); },
                           ErrorKind::format, "tokenizer.ggml.tokens", "bad.gguf", std::nullopt,
                           "the tokenizer has 90 tokens but the model's vocabulary");
  // An absurd vocabulary size is refused by the config check, before any tensor is looked at.
  hllm::test::expect_error(
      [] {
        load_bytes(tiny_model_bytes(DType::f32, [](gguf::Writer& w) {
          w.set("llama.vocab_size", std::uint32_t{1} << 31);
        }));
      },
      ErrorKind::format, "llama.vocab_size", "bad.gguf", std::nullopt,
      "vocab_size = 2147483648 (must be in [1, 16777216])");
  // A tokenizer claiming 2^31 entries in a small file fails at open, at the count's offset.
  auto bytes = tiny_model_bytes(DType::f32, tokens(4));
  const std::uint64_t count_at = find_text(bytes, "tokenizer.ggml.tokens") + 21 + 8;
  for (int i = 0; i < 8; ++i)
    bytes[count_at + i] = std::byte(((std::uint64_t{1} << 31) >> (8 * i)) & 0xff);
  hllm::test::expect_error([&] { load_bytes(bytes); }, ErrorKind::format, "tokenizer.ggml.tokens",
                           "bad.gguf", count_at, "array of 2147483648 string values cannot fit");
}

TEST(GgufModelLoad, MissingRequiredKeysAreNamed) {
  for (const char* key : {"general.architecture", "llama.embedding_length", "llama.block_count",
                          "llama.feed_forward_length", "llama.attention.head_count",
                          "llama.context_length", "llama.attention.layer_norm_rms_epsilon"}) {
    SCOPED_TRACE(key);
    auto bytes = tiny_model_bytes();
    std::string renamed(key);
    renamed[0] = 'X';  // the key is then absent under its real name
    replace_text(bytes, key, renamed);
    hllm::test::expect_error([&] { load_bytes(bytes); }, ErrorKind::format, key, "bad.gguf",
                             std::nullopt, "missing metadata key");
  }
}

// NaN/Inf in weights: accepted by default (the check reads the whole file), found with the
// element and its byte offset when LoadOptions::check_finite is on.
TEST(GgufModelLoad, CheckFiniteFindsNonFiniteWeightsInEveryPlainType) {
  struct Case {
    DType type;
    std::uint32_t bits;  // the poison, in the type's own width
    const char* what;
  };
  for (const Case& c : {Case{DType::f32, 0x7fc00000u, "is NaN"}, Case{DType::f16, 0x7c00u, "+Inf"},
                        Case{DType::bf16, 0xff80u, "-Inf"}}) {
    SCOPED_TRACE(hllm::dtype_name(c.type));
    auto bytes = tiny_model_bytes(c.type);
    const std::size_t element_bytes = c.type == DType::f32 ? 4 : 2;
    const gguf::File probe = gguf::File::from_memory(bytes, "bad.gguf");
    const gguf::TensorInfo* t = probe.find_tensor("blk.1.attn_v.weight");
    ASSERT_NE(t, nullptr);
    const std::uint64_t element = 64 + 37;  // row 1, column 37 of [32][64]
    const std::uint64_t at = probe.data_offset() + t->offset + element * element_bytes;
    std::memcpy(bytes.data() + at, &c.bits, element_bytes);  // little-endian low bytes
    EXPECT_NO_THROW(load_bytes(bytes));
    hllm::test::expect_error([&] { load_bytes(bytes, {.check_finite = true}); }, ErrorKind::format,
                             "blk.1.attn_v.weight", "bad.gguf", at,
                             "element 101 (row 1, column 37)");
    hllm::test::expect_error([&] { load_bytes(bytes, {.check_finite = true}); }, ErrorKind::format,
                             "blk.1.attn_v.weight", "bad.gguf", at, c.what);
  }
  // A norm weight (always F32) is checked too.
  auto bytes = tiny_model_bytes(DType::q8_0);
  const gguf::File probe = gguf::File::from_memory(bytes, "bad.gguf");
  const std::uint64_t at = probe.data_offset() + probe.find_tensor("output_norm.weight")->offset;
  const float inf = INFINITY;
  std::memcpy(bytes.data() + at, &inf, 4);
  hllm::test::expect_error([&] { load_bytes(bytes, {.check_finite = true}); }, ErrorKind::format,
                           "output_norm.weight", "bad.gguf", at,
                           "element 0 (row 0, column 0) of this F32");
}

TEST(GgufModelLoad, CheckFiniteFindsABadQuantizedBlockScale) {
  auto bytes = tiny_model_bytes(DType::q8_0);
  const gguf::File probe = gguf::File::from_memory(bytes, "bad.gguf");
  const gguf::TensorInfo* t = probe.find_tensor("blk.0.ffn_down.weight");  // [64][96]: 3 blocks
  ASSERT_NE(t, nullptr);
  // Block 4 (row 1, columns 32..63): its f16 scale becomes NaN, so all its values are NaN.
  const std::uint64_t at = probe.data_offset() + t->offset + 4 * 34;
  const std::uint16_t nan_bits = 0x7e00;
  std::memcpy(bytes.data() + at, &nan_bits, 2);
  EXPECT_NO_THROW(load_bytes(bytes));
  hllm::test::expect_error([&] { load_bytes(bytes, {.check_finite = true}); }, ErrorKind::format,
                           "blk.0.ffn_down.weight", "bad.gguf", at,
                           "element 128 (row 1, column 32) of this Q8_0 tensor is NaN");
  EXPECT_NO_THROW(load_bytes(tiny_model_bytes(DType::q4_0), {.check_finite = true}));
}

// Every block type, on hand-made blocks: a non-finite scale (or min) spoils its block.
TEST(FiniteCheck, EveryQuantizedType) {
  struct Layout {
    DType type;
    std::size_t block_bytes, block_elements;
    std::size_t d_at;                   // the f16 scale
    std::optional<std::size_t> min_at;  // the f16 min (Q4_1) or dmin (Q4_K)
    std::size_t poison_at;
    std::uint16_t poison;
  };
  const Layout layouts[] = {
      {DType::q8_0, 34, 32, 0, {}, 0, 0x7e00},       // NaN scale
      {DType::q4_0, 18, 32, 0, {}, 0, 0x7c00},       // +Inf scale
      {DType::q4_1, 20, 32, 0, 2, 2, 0xfc00},        // -Inf min
      {DType::q4_k, 144, 256, 0, 2, 2, 0x7e00},      // NaN dmin
      {DType::q6_k, 210, 256, 208, {}, 208, 0x7c00}  // +Inf d, after ql, qh and the scales
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(hllm::dtype_name(l.type));
    std::vector<std::byte> data(3 * l.block_bytes, std::byte{0x11});
    for (std::size_t b = 0; b < 3; ++b) {  // finite scales 1.0 (and mins 0.5) everywhere ...
      const std::uint16_t one = 0x3c00, half = 0x3800;
      std::memcpy(data.data() + b * l.block_bytes + l.d_at, &one, 2);
      if (l.min_at) std::memcpy(data.data() + b * l.block_bytes + *l.min_at, &half, 2);
    }
    const hllm::WeightTensor w{l.type, data.data(), 1, 3 * l.block_elements, "w"};
    EXPECT_EQ(hllm::first_non_finite(w), std::nullopt);
    EXPECT_NO_THROW(hllm::check_finite(w, "f.gguf", "w", 1000));
    // ... then block 2's becomes non-finite: its first element is the first bad one.
    std::memcpy(data.data() + 2 * l.block_bytes + l.poison_at, &l.poison, 2);
    EXPECT_EQ(hllm::first_non_finite(w), 2 * l.block_elements);
    hllm::test::expect_error([&] { hllm::check_finite(w, "f.gguf", "w", 1000); }, ErrorKind::format,
                             "w", "f.gguf", 1000 + 2 * l.block_bytes,
                             "element " + std::to_string(2 * l.block_elements) + " (row 0");
  }
}

// Resource limits: hostile files and absurd requests fail with a typed error before any
// allocation they would need. The proof runs in a child process whose address space is capped
// 1 GiB above what it already uses, so an attempt to allocate what the file claims would fail
// as std::bad_alloc (or worse) instead of passing unnoticed on a machine with memory to spare.
std::uint64_t vm_size_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

// Runs each case; exits with 0 if every one threw the expected hllm::Error, else with the
// number of the first that did not (100 + n for a foreign exception such as std::bad_alloc).
[[noreturn, maybe_unused]] void run_capped(  // unused when sanitized
    const std::vector<std::pair<std::function<void()>, ErrorKind>>& cases) {
  const rlimit cap{vm_size_bytes() + (std::uint64_t{1} << 30), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &cap) != 0) std::_Exit(99);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    try {
      cases[i].first();
      std::fprintf(stderr, "case %zu: no error\n", i);
      std::_Exit(static_cast<int>(1 + i));
    } catch (const Error& e) {
      if (e.kind() != cases[i].second) {
        std::fprintf(stderr, "case %zu: %s\n", i, e.what());
        std::_Exit(static_cast<int>(1 + i));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "case %zu: foreign exception: %s\n", i, e.what());
      std::_Exit(static_cast<int>(100 + i));
    }
  }
  std::_Exit(0);
}

TEST(ResourceLimits, HostileClaimsFailBeforeAllocatingUnderACappedAddressSpace) {
#if HLLM_TEST_SANITIZED
  GTEST_SKIP() << "sanitizers reserve terabytes of shadow memory; RLIMIT_AS cannot be capped";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Sample huge_tensor = make_sample();
  huge_tensor.put_u64(fields_of(huge_tensor, "t.b").dim0, std::uint64_t{1} << 20);
  huge_tensor.put_u64(fields_of(huge_tensor, "t.b").dim1, std::uint64_t{1} << 20);
  auto huge_vocab = tiny_model_bytes(DType::f32, [](gguf::Writer& w) {
    w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  });
  const std::uint64_t count_at = find_text(huge_vocab, "tokenizer.ggml.tokens") + 21 + 8;
  huge_vocab[count_at + 3] = std::byte{0x80};  // 2^31 entries
  const auto big_vocab_size = tiny_model_bytes(
      DType::f32, [](gguf::Writer& w) { w.set("llama.vocab_size", std::uint32_t{1} << 31); });
  const auto many_layers = tiny_model_bytes(
      DType::f32, [](gguf::Writer& w) { w.set("llama.block_count", std::uint32_t{16'000'000}); });
  // A valid file whose trained context is 2^24 tokens: a session of that context (asked for:
  // the default is 4096) needs an 8 GiB KV cache, which does not fit under the cap:
  // Error(capacity), not std::bad_alloc.
  const auto long_context = tiny_model_bytes(
      DType::f32, [](gguf::Writer& w) { w.set("llama.context_length", std::uint32_t{1} << 24); });
  EXPECT_EXIT(
      run_capped({
          {[&] { huge_tensor.parse(); }, ErrorKind::format},
          {[&] { load_bytes(huge_vocab); }, ErrorKind::format},
          {[&] { load_bytes(big_vocab_size); }, ErrorKind::format},
          {[&] { load_bytes(many_layers); }, ErrorKind::format},
          {[&] {
             const hllm::GgufModel m = load_bytes(long_context);
             const hllm::Llama<> model(m.config, m.weights);
             hllm::Session<> session(model, {.context = std::size_t{1} << 24, .threads = 1});
           },
           ErrorKind::capacity},
          {[&] {
             const hllm::GgufModel m = load_bytes(long_context);
             const hllm::Llama<> model(m.config, m.weights);
             hllm::Session<> session(model, {.context = std::size_t{1} << 40, .threads = 1});
           },
           ErrorKind::invalid_argument},
      }),
      ::testing::ExitedWithCode(0), "");
#endif
}

}  // namespace
