// Hugging Face safetensors and llama2.c checkpoints: each loads into the same Llama<> and
// reproduces the logits of its reference implementation (tools/gen_format_fixtures.py); the
// neox layout on HF weights equals llama.cpp's permuted-interleaved GGUF conversion; and every
// kind of corrupt file fails with an error naming the file, the field and the offset.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_file.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/hf_model.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/io/llama2c.hpp"
#include "hllm/io/safetensors.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = hllm::safetensors;
using hllm::DType;
using hllm::Error;
using hllm::ErrorKind;

const std::string kDir = HLLM_GOLDEN_DIR "/formats";

std::vector<std::int32_t> golden_tokens(const hllm::test::GoldenFile& g) {
  std::vector<std::int32_t> tokens;
  for (float t : g["tokens"]) tokens.push_back(static_cast<std::int32_t>(t));
  return tokens;
}

// Every token's logits ([n_tokens][vocab]) from one prefill.
// These tests check what the loaders build, so they run the exact path: float32 activations
// throughout. (The fast path rounds activations, to 8 bits for integer weights and to bf16 for
// bf16 weights on AVX512-BF16 CPUs; its accuracy is checked against llama.cpp's on the shared
// fixtures, FixtureLogits.FastPathIsAsCloseAsLlamaCpp.)
std::vector<float> logits_of(const hllm::ModelConfig& c, const hllm::ModelWeights& w,
                             const std::vector<std::int32_t>& tokens) {
  const hllm::Llama<> model(c, w);
  hllm::Session<> session(model, {.threads = 1, .exact = true});
  const auto all = session.prefill(tokens, hllm::Logits::all);
  return {all.begin(), all.end()};
}

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void write_bytes(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

using hllm::test::expect_error;

// A fresh temporary directory per test (test_util.hpp).
struct TempDir : hllm::test::TempDir {
  TempDir() : hllm::test::TempDir("hllm_formats_") {}
};

// All values of a weight as float32.   [rows][cols]
std::vector<float> values_of(const hllm::WeightTensor& w) {
  std::vector<float> out(w.rows * w.cols);
  for (std::size_t r = 0; r < w.rows; ++r)
    hllm::reference::dequantize_row(w, r, out.data() + r * w.cols);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hugging Face safetensors

TEST(HfModel, SingleFileMatchesTransformers) {
  const hllm::HfModel m = hllm::load_hf_model(kDir + "/hf");
  EXPECT_EQ(m.config.vocab_size, 128);
  EXPECT_EQ(m.config.dim, 64);
  EXPECT_EQ(m.config.n_kv_heads, 2);
  EXPECT_EQ(m.config.ffn_dim, 96);
  EXPECT_EQ(m.config.rope.layout, hllm::RopeLayout::neox);
  EXPECT_FALSE(m.config.tied_embeddings);
  EXPECT_EQ(m.weights.layers[0].wq.type, DType::f32);
  // Used in place: the views point into the mapping.
  const auto bytes = m.checkpoint->files().front()->bytes();
  const auto* p = static_cast<const std::byte*>(m.weights.layers[1].wk.data);
  EXPECT_TRUE(p >= bytes.data() && p < bytes.data() + bytes.size());

  const hllm::test::GoldenFile g("formats/hf/logits.bin");
  EXPECT_TRUE(hllm::test::all_close(logits_of(m.config, m.weights, golden_tokens(g)), g["logits"]));
}

TEST(HfModel, ShardedEqualsSingleFile) {
  const hllm::HfModel single = hllm::load_hf_model(kDir + "/hf");
  const hllm::HfModel sharded = hllm::load_hf_model(kDir + "/hf-sharded");
  EXPECT_GE(sharded.checkpoint->files().size(), 2u);
  const auto a = hllm::model_tensors(single.config, single.weights);
  const auto b = hllm::model_tensors(sharded.config, sharded.weights);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->bytes(), b[i]->bytes()) << a[i]->name;
    EXPECT_EQ(std::memcmp(a[i]->data, b[i]->data, a[i]->bytes()), 0) << a[i]->name;
  }
  const hllm::test::GoldenFile g("formats/hf-sharded/logits.bin");
  const auto tokens = golden_tokens(g);
  EXPECT_EQ(logits_of(single.config, single.weights, tokens),
            logits_of(sharded.config, sharded.weights, tokens));
  // The index file itself, and one shard alone (which lacks most tensors), also open.
  EXPECT_NO_THROW(st::Checkpoint::open(kDir + "/hf-sharded/model.safetensors.index.json"));
  expect_error([&] { hllm::load_hf_model(kDir + "/hf-sharded/model-00001-of-00003.safetensors"); },
               ErrorKind::format, "model.layers.0.input_layernorm.weight",
               kDir + "/hf-sharded/model-00001-of-00003.safetensors");
}

// bf16 storage, norms included (converted to f32 at load), with tied embeddings.
TEST(HfModel, Bf16TiedMatchesTransformers) {
  const hllm::HfModel m = hllm::load_hf_model(kDir + "/hf-bf16/model.safetensors");
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.weights.layers[0].wq.type, DType::bf16);
  EXPECT_EQ(m.weights.layers[0].attn_norm.type, DType::f32);
  EXPECT_EQ(m.checkpoint->find("model.norm.weight")->tensor->type, DType::bf16);
  const hllm::test::GoldenFile g("formats/hf-bf16/logits.bin");
  EXPECT_TRUE(hllm::test::all_close(logits_of(m.config, m.weights, golden_tokens(g)), g["logits"]));
}

// llama.cpp's convert_hf_to_gguf.py permute(w, n_head): view the rows of each head as
// [2][head_dim/2], transpose to [head_dim/2][2]. Row h*hd + 2i + j takes row h*hd + j*hd/2 + i.
std::vector<float> permute_rows(const std::vector<float>& w, std::size_t rows, std::size_t cols,
                                std::size_t n_head) {
  const std::size_t hd = rows / n_head, half = hd / 2;
  std::vector<float> out(w.size());
  for (std::size_t h = 0; h < n_head; ++h)
    for (std::size_t i = 0; i < half; ++i)
      for (std::size_t j = 0; j < 2; ++j)
        std::memcpy(&out[(h * hd + 2 * i + j) * cols], &w[(h * hd + j * half + i) * cols],
                    cols * sizeof(float));
  return out;
}

// The layout choice, proved: HF weights in place with the neox rotation give the same logits as
// the same weights permuted as llama.cpp converts them, written to GGUF by our writer, and
// loaded back with the interleaved rotation. Without the permutation they differ.
TEST(HfModel, NeoxInPlaceEqualsPermutedInterleavedGguf) {
  const hllm::HfModel hf = hllm::load_hf_model(kDir + "/hf");
  const hllm::test::GoldenFile g("formats/hf/logits.bin");
  const auto tokens = golden_tokens(g);
  const auto neox = logits_of(hf.config, hf.weights, tokens);

  const auto source = hllm::model_tensors(hf.config, hf.weights);
  std::map<std::string, const hllm::WeightTensor*> by_name;
  for (const auto* t : source) by_name[t->name] = t;
  hllm::ModelConfig c = hf.config;
  c.rope.layout = hllm::RopeLayout::interleaved;
  auto convert = [&](bool permute) {
    return hllm::build_weights(
        c, DType::f32, [&](const hllm::TensorSpec& s, std::span<float> values) {
          std::vector<float> v = values_of(*by_name.at(s.name));
          const bool q = s.name.ends_with("attn_q.weight");
          const bool k = s.name.ends_with("attn_k.weight");
          if (permute && (q || k))
            v = permute_rows(v, s.rows, s.cols,
                             static_cast<std::size_t>(q ? c.n_heads : c.n_kv_heads));
          std::copy(v.begin(), v.end(), values.begin());
        });
  };
  TempDir tmp;
  hllm::save_gguf_model(tmp / "permuted.gguf", c, convert(true));
  const hllm::GgufModel gguf = hllm::load_gguf_model(tmp / "permuted.gguf");
  EXPECT_EQ(gguf.config.rope.layout, hllm::RopeLayout::interleaved);
  const auto interleaved = logits_of(gguf.config, gguf.weights, tokens);
  EXPECT_TRUE(hllm::test::all_close(interleaved, neox, 1e-5f));
  EXPECT_TRUE(hllm::test::all_close(neox, g["logits"]));

  // Control: the same weights unpermuted under the interleaved rotation are wrong.
  const auto wrong = logits_of(c, convert(false), tokens);
  EXPECT_GT(hllm::test::max_abs_diff(wrong, neox), 1e-2f * hllm::test::max_abs(neox));
}

TEST(HfModel, ConfigErrorsNameTheKey) {
  const std::string text = hllm::io::read_text_file(kDir + "/hf/config.json");
  const nlohmann::json good = nlohmann::json::parse(text);
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    return j;
  };
  auto config = [](const nlohmann::json& j) { return hllm::hf_model_config(j, "config.json"); };
  EXPECT_NO_THROW(config(good));
  expect_error([&] { config(with("architectures", {"GPT2LMHeadModel"})); }, ErrorKind::unsupported,
               "architectures", "config.json");
  expect_error(
      [&] {
        config(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}));
      },
      ErrorKind::unsupported, "rope_scaling.rope_type", "config.json");
  expect_error([&] { config(with("hidden_size", "64")); }, ErrorKind::format, "hidden_size",
               "config.json");
  expect_error([&] { config(with("num_key_value_heads", 3)); }, ErrorKind::format, "n_kv_heads",
               "config.json");
  nlohmann::json missing = good;
  missing.erase("vocab_size");
  expect_error([&] { config(missing); }, ErrorKind::format, "vocab_size", "config.json");

  const auto yarn =
      config(with("rope_scaling",
                  {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}}));
  EXPECT_EQ(yarn.rope.scaling.type, hllm::RopeScalingType::yarn);
  EXPECT_EQ(yarn.rope.scaling.original_context, 32);
  const auto llama3 = config(with("rope_scaling", {{"rope_type", "llama3"},
                                                   {"factor", 8.0},
                                                   {"low_freq_factor", 1.0},
                                                   {"high_freq_factor", 4.0},
                                                   {"original_max_position_embeddings", 64}}));
  EXPECT_EQ(llama3.rope.scaling.type, hllm::RopeScalingType::llama3);
  nlohmann::json mistral = with("architectures", {"MistralForCausalLM"});
  mistral["sliding_window"] = 16;
  EXPECT_EQ(config(mistral).sliding_window, 16);
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(config(mistral).sliding_window, 0);
  EXPECT_EQ(config(with("num_key_value_heads", nullptr)).n_kv_heads, 4);
}

// ---------------------------------------------------------------------------------------------
// Corrupt safetensors

// A safetensors file: u64 header length (or `length`), the header, `data_bytes` zero bytes.
std::vector<std::byte> safetensors_bytes(const std::string& header, std::size_t data_bytes,
                                         std::optional<std::uint64_t> length = {}) {
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  const std::uint64_t n = length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

const std::string kBad = "bad.safetensors";

void expect_st_error(const std::string& header, std::size_t data_bytes, ErrorKind kind,
                     const std::string& field, std::optional<std::uint64_t> offset = {},
                     std::optional<std::uint64_t> length = {}) {
  SCOPED_TRACE(header);
  const auto bytes = safetensors_bytes(header, data_bytes, length);
  expect_error([&] { st::File::from_memory(bytes, kBad); }, kind, field, kBad, offset);
}

TEST(SafetensorsCorrupt, GoodFileParses) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
  const auto bytes = safetensors_bytes(h, 32);
  const st::File f = st::File::from_memory(bytes, kBad);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const st::TensorInfo* b = f.find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::bf16);
  EXPECT_EQ(b->file_offset, 8 + h.size() + 24);
  EXPECT_EQ(b->data, bytes.data() + b->file_offset);
}

TEST(SafetensorsCorrupt, HeaderLength) {
  const std::vector<std::byte> tiny(5);
  expect_error([&] { st::File::from_memory(tiny, kBad); }, ErrorKind::format, "header_length", kBad,
               0);
  expect_st_error("{}", 0, ErrorKind::format, "header_length", 0, 1000);               // past EOF
  expect_st_error("{}", 0, ErrorKind::format, "header_length", 0, 1ull << 40);         // huge
  expect_st_error("{}", 0, ErrorKind::format, "header_length", 0, ~std::uint64_t{0});  // max
}

TEST(SafetensorsCorrupt, InvalidJson) {
  expect_st_error(R"({"a": )", 0, ErrorKind::format, "header");
  expect_st_error(R"([1, 2])", 0, ErrorKind::format, "header", 8);
  expect_st_error(R"({"a": 1})", 0, ErrorKind::format, "a");
  expect_st_error(R"({"__metadata__": {"k": 1}})", 0, ErrorKind::format, "__metadata__.k");
  // Found by fuzz_safetensors: a number beyond double's range is nlohmann's out_of_range, not a
  // parse_error, and escaped as a foreign exception.
  expect_st_error(R"({"a": 7e777777})", 0, ErrorKind::format, "header", 8);
}

TEST(SafetensorsCorrupt, MissingFields) {
  expect_st_error(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8, ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8, ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[2]}})", 8, ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, ErrorKind::format,
                  "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})", 8,
                  ErrorKind::format, "t");
}

TEST(SafetensorsCorrupt, OffsetsAndSizes) {
  const std::string h1 = R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_st_error(h1, 8, ErrorKind::format, "t", 8 + h1.size());  // outside the data
  const std::string h2 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})";
  expect_st_error(h2, 8, ErrorKind::format, "t");  // begin > end
  const std::string h3 = R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  expect_st_error(h3, 8, ErrorKind::format, "t", 8 + h3.size());  // wrong size for the shape
  const std::string h4 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_st_error(h4, 12, ErrorKind::format, "b", 8 + h4.size() + 4);  // overlapping
  // Shapes whose element count overflows 64 bits.
  expect_st_error(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                  8, ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8,
                  ErrorKind::format, "t");
}

// The data section holds the tensors back to back and nothing else: a hole, or bytes after the
// last tensor, mean a header edited without its data (a retyped or reshaped tensor).
TEST(SafetensorsCorrupt, DataSectionHoldsTheTensorsBackToBack) {
  const std::string gap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_st_error(gap, 20, ErrorKind::format, "b", 8 + gap.size() + 12);
  const std::string late = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_st_error(late, 12, ErrorKind::format, "a", 8 + late.size() + 4);
  const std::string tail = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_st_error(tail, 12, ErrorKind::format, "a", 8 + tail.size() + 8);
  // F32 retyped to F16 with its offsets kept: the data no longer spans the shape's bytes.
  const std::string retyped = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  expect_st_error(retyped, 8, ErrorKind::format, "a", 8 + retyped.size() + 4);
  EXPECT_NO_THROW(st::File::from_memory(safetensors_bytes(tail, 8), kBad));
}

TEST(SafetensorsCorrupt, ShapesAndTypes) {
  expect_st_error(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8,
                  ErrorKind::unsupported, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", 8,
                  ErrorKind::unsupported, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4,
                  ErrorKind::unsupported, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[0,2],"data_offsets":[0,0]}})", 0,
                  ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
                  ErrorKind::format, "t");
  expect_st_error(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8,
                  ErrorKind::format, "t");
}

TEST(SafetensorsCorrupt, DuplicateNames) {
  expect_st_error(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  16, ErrorKind::format, "t");
  // Inside an entry too: two dtypes would be read differently by different parsers.
  expect_st_error(R"({"t":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8,
                  ErrorKind::format, "dtype");
}

// A copy of the sharded fixture whose index the test edits.
struct ShardedCopy {
  TempDir tmp;
  nlohmann::json index;
  ShardedCopy() {
    for (const auto& e : fs::directory_iterator(kDir + "/hf-sharded"))
      fs::copy_file(e.path(), tmp.path / e.path().filename());
    index =
        nlohmann::json::parse(hllm::io::read_text_file(tmp.path / "model.safetensors.index.json"));
  }
  std::string write_index() {
    write_bytes(tmp / "model.safetensors.index.json", index.dump());
    return tmp / "model.safetensors.index.json";
  }
};

TEST(SafetensorsCorrupt, ShardIndex) {
  {
    ShardedCopy c;
    c.index["weight_map"]["model.norm.weight"] = "missing.safetensors";
    const std::string index = c.write_index();
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::io, "",
                 c.tmp / "missing.safetensors");
  }
  {
    ShardedCopy c;  // a tensor the shard holds but the index does not list
    const std::string shard = c.index["weight_map"]["model.norm.weight"];
    c.index["weight_map"].erase("model.norm.weight");
    const std::string index = c.write_index();
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::format, "model.norm.weight",
                 c.tmp / shard);
  }
  {
    ShardedCopy c;  // a tensor listed but absent
    c.index["weight_map"]["model.extra.weight"] = c.index["weight_map"]["model.norm.weight"];
    const std::string index = c.write_index();
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::format, "model.extra.weight",
                 index);
  }
  {
    ShardedCopy c;
    c.index["weight_map"]["model.norm.weight"] = "../model.safetensors";
    const std::string index = c.write_index();
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::format,
                 "weight_map.model.norm.weight", index);
  }
  {
    ShardedCopy c;
    const std::string index = c.tmp / "model.safetensors.index.json";
    write_bytes(index, R"({"weight_map": {"a": "x", "a": "y"}})");
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::format, "a", index);
    write_bytes(index, R"({"metadata": {}})");
    expect_error([&] { st::Checkpoint::open(index); }, ErrorKind::format, "weight_map", index);
  }
  {
    // The same tensor in two files.
    const std::string h = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const auto bytes = safetensors_bytes(h, 8);
    auto a = std::make_shared<const st::File>(st::File::from_memory(bytes, "a.safetensors"));
    auto b = std::make_shared<const st::File>(st::File::from_memory(bytes, "b.safetensors"));
    expect_error(
        [&] {
          st::Checkpoint::from_files({a, b});
        },
        ErrorKind::format, "t", "b.safetensors");
  }
}

TEST(HfModel, MissingOrMisshapenTensors) {
  const hllm::HfModel hf = hllm::load_hf_model(kDir + "/hf");
  hllm::ModelConfig c = hf.config;
  c.ffn_dim = 80;  // the checkpoint's MLP is 96 wide
  expect_error([&] { hllm::load_hf_model(c, hf.checkpoint); }, ErrorKind::format,
               "model.layers.0.mlp.gate_proj.weight", kDir + "/hf/model.safetensors");
  // A checkpoint without lm_head for an untied config.
  const std::string h = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const auto bytes = safetensors_bytes(h, 8);
  auto only = std::make_shared<const st::Checkpoint>(st::Checkpoint::from_files(
      {std::make_shared<const st::File>(st::File::from_memory(bytes, "x.safetensors"))}));
  expect_error([&] { hllm::load_hf_model(hf.config, only); }, ErrorKind::format,
               "model.embed_tokens.weight", "x.safetensors");
}

// config.json that says fewer layers than the checkpoint holds: the first tensor of a layer past
// num_hidden_layers is named (the extra layers used to be silently ignored).
TEST(HfModel, LayersBeyondTheConfigAreRefused) {
  const hllm::HfModel hf = hllm::load_hf_model(kDir + "/hf");
  hllm::ModelConfig c = hf.config;
  ASSERT_GE(c.n_layers, 2);
  c.n_layers -= 1;
  try {
    hllm::load_hf_model(c, hf.checkpoint);
    ADD_FAILURE() << "a checkpoint with more layers than config.json loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format) << e.what();
    EXPECT_EQ(e.field().rfind("model.layers." + std::to_string(c.n_layers) + ".", 0), 0u)
        << e.what();
    EXPECT_NE(e.message().find("num_hidden_layers is " + std::to_string(c.n_layers)),
              std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// llama2.c

class Llama2cGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(Llama2cGolden, MatchesTextbookForward) {
  const std::string name = GetParam();
  const hllm::Llama2cModel m = hllm::load_llama2c_model(kDir + "/" + name + ".bin");
  EXPECT_EQ(m.version, name == "llama2c-v0" ? 0 : 1);
  EXPECT_EQ(m.config.dim, 32);
  EXPECT_EQ(m.config.ffn_dim, 64);
  EXPECT_EQ(m.config.n_layers, 2);
  EXPECT_EQ(m.config.n_heads, 4);
  EXPECT_EQ(m.config.n_kv_heads, 2);
  EXPECT_EQ(m.config.vocab_size, 96);
  EXPECT_EQ(m.config.context_length, 32);
  EXPECT_EQ(m.config.rope.layout, hllm::RopeLayout::interleaved);
  EXPECT_EQ(m.config.tied_embeddings, name == "llama2c-v1");
  const hllm::test::GoldenFile g("formats/" + name + ".logits.bin");
  const auto tokens = golden_tokens(g);
  EXPECT_TRUE(hllm::test::all_close(logits_of(m.config, m.weights, tokens), g["logits"]));
  // Token by token through the KV cache, too.
  const hllm::Llama<> model(m.config, m.weights);
  hllm::Session<> s(model, {.threads = 1});
  std::vector<float> decoded;
  for (std::int32_t t : tokens) {
    const auto l = s.decode(t);
    decoded.insert(decoded.end(), l.begin(), l.end());
  }
  EXPECT_TRUE(hllm::test::all_close(decoded, g["logits"]));
}

INSTANTIATE_TEST_SUITE_P(Versions, Llama2cGolden, ::testing::Values("llama2c-v0", "llama2c-v1"));

std::vector<std::byte> with_i32(std::vector<std::byte> bytes, std::size_t offset,
                                std::int32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
  return bytes;
}

void expect_l2c_error(const std::vector<std::byte>& bytes, ErrorKind kind, const std::string& field,
                      std::optional<std::uint64_t> offset = {}) {
  const std::string name = "bad.bin";
  expect_error(
      [&] {
        hllm::llama2c::load_model(std::make_shared<const hllm::io::MappedFile>(
            hllm::io::MappedFile::from_memory(bytes, name)));
      },
      kind, field, name, offset);
}

TEST(Llama2cCorrupt, Header) {
  const auto v0 = read_bytes(kDir + "/llama2c-v0.bin");
  const auto v1 = read_bytes(kDir + "/llama2c-v1.bin");
  expect_l2c_error(std::vector<std::byte>(v0.begin(), v0.begin() + 20), ErrorKind::format, "header",
                   0);
  expect_l2c_error(with_i32(v0, 0, 1 << 30), ErrorKind::format, "dim", 0);  // absurd
  expect_l2c_error(with_i32(v0, 8, -2), ErrorKind::format, "n_layers", 8);  // negative
  expect_l2c_error(with_i32(v0, 24, 0), ErrorKind::format, "seq_len", 24);  // zero
  expect_l2c_error(with_i32(v0, 20, INT32_MIN), ErrorKind::format, "vocab_size", 20);
  expect_l2c_error(with_i32(v0, 12, 5), ErrorKind::format, "n_heads", 12);     // 5 ∤ 32
  expect_l2c_error(with_i32(v0, 16, 3), ErrorKind::format, "n_kv_heads", 16);  // 3 ∤ 4
  expect_l2c_error(with_i32(v0, 12, 32), ErrorKind::format, "n_heads", 12);    // odd head size
  // v1: a wrong magic reads as a legacy header with an absurd dim; versions other than 1.
  expect_l2c_error(with_i32(v1, 0, 0x12345678), ErrorKind::format, "dim", 0);
  expect_l2c_error(with_i32(v1, 4, 7), ErrorKind::format, "version", 4);
  expect_l2c_error(with_i32(v1, 4, 2), ErrorKind::unsupported, "version", 4);
  expect_l2c_error(std::vector<std::byte>(v1.begin(), v1.begin() + 100), ErrorKind::format,
                   "header", 0);
  auto flag = v1;
  flag[36] = std::byte{7};
  expect_l2c_error(flag, ErrorKind::format, "shared_classifier", 36);
  expect_l2c_error(with_i32(v1, 8 + 4 * 4, -1), ErrorKind::format, "n_kv_heads", 24);
}

TEST(Llama2cCorrupt, SizesAgainstTheFile) {
  const auto v0 = read_bytes(kDir + "/llama2c-v0.bin");
  const auto v1 = read_bytes(kDir + "/llama2c-v1.bin");
  // Truncated inside the embedding, and inside the final classifier.
  expect_l2c_error(std::vector<std::byte>(v0.begin(), v0.begin() + 1000), ErrorKind::format,
                   "token_embedding_table", 28);
  expect_l2c_error(std::vector<std::byte>(v0.begin(), v0.end() - 4), ErrorKind::format, "wcls");
  expect_l2c_error(std::vector<std::byte>(v1.begin(), v1.end() - 4), ErrorKind::format, "w3");
  // Trailing bytes: e.g. a legacy file whose vocab_size sign says "shared" but holds wcls.
  expect_l2c_error(with_i32(v0, 20, 96), ErrorKind::format, "file_size");
  auto longer = v1;
  longer.resize(v1.size() + 4);
  expect_l2c_error(longer, ErrorKind::format, "file_size", v1.size());
  // Dimensions whose products overflow: n_layers × dim × dim past 2^62 bytes.
  auto huge = with_i32(with_i32(with_i32(v0, 0, 1 << 24), 12, 1 << 16), 8, 1 << 24);
  huge = with_i32(huge, 16, 1 << 16);
  expect_l2c_error(huge, ErrorKind::format, "wq");
  // Sizes that do not overflow but exceed the file.
  expect_l2c_error(with_i32(v0, 4, 1 << 24), ErrorKind::format, "w1");
}

// NaN/Inf in a llama2.c checkpoint: accepted by default, found with LoadOptions::check_finite,
// named as llama2.c names its arrays ("wq[1]": layer 1's slice of wq) with the byte offset.
TEST(Llama2cCorrupt, CheckFiniteNamesTheArrayLayerAndOffset) {
  auto v0 = read_bytes(kDir + "/llama2c-v0.bin");
  // Legacy layout: 28-byte header, token_embedding_table [96][32], rms_att_weight [2][32], wq
  // [2][32][32]: wq[1] starts 28 + 4 * (96*32 + 2*32 + 32*32) bytes in.
  const std::uint64_t wq1 = 28 + 4 * (96 * 32 + 2 * 32 + 32 * 32);
  const std::uint64_t at = wq1 + 4 * (32 + 5);  // row 1, column 5
  const std::uint32_t nan_bits = 0x7fc00000u;
  std::memcpy(v0.data() + at, &nan_bits, 4);
  const auto load = [&](const hllm::LoadOptions& options) {
    return hllm::llama2c::load_model(std::make_shared<const hllm::io::MappedFile>(
                                         hllm::io::MappedFile::from_memory(v0, "nan.bin")),
                                     options);
  };
  EXPECT_NO_THROW(load({}));
  expect_error([&] { load({.check_finite = true}); }, ErrorKind::format, "wq[1]", "nan.bin", at,
               "element 37 (row 1, column 5) of this F32 tensor is NaN");
}

// The same for safetensors: the shard file, the Hugging Face tensor name, the byte offset.
TEST(HfModel, CheckFiniteNamesTheShardTensorAndOffset) {
  TempDir tmp;
  fs::copy_file(kDir + "/hf/config.json", tmp / "config.json");
  auto bytes = read_bytes(kDir + "/hf/model.safetensors");
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  std::uint64_t at = 0;
  {
    const st::File f = st::File::from_memory(bytes, "probe");
    const st::TensorInfo* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr);
    const std::uint64_t element_bytes = t->type == DType::f32 ? 4 : 2;
    at = t->file_offset + 3 * element_bytes;  // element 3
    const std::uint32_t inf_bits = t->type == DType::f32    ? 0xff800000u
                                   : t->type == DType::bf16 ? 0xff80u
                                                            : 0xfc00u;
    std::memcpy(bytes.data() + at, &inf_bits, element_bytes);
  }
  {
    std::ofstream out(tmp / "model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_NO_THROW(hllm::load_hf_model(tmp.path.string()));
  expect_error([&] { hllm::load_hf_model(tmp.path.string(), {.check_finite = true}); },
               ErrorKind::format, name, tmp / "model.safetensors", at,
               "element 3 (row 0, column 3)");
  expect_error([&] { hllm::load_hf_model(tmp.path.string(), {.check_finite = true}); },
               ErrorKind::format, name, tmp / "model.safetensors", at, "is -Inf");
}

// ---------------------------------------------------------------------------------------------
// tokenizer.bin

TEST(Llama2cTokenizer, LoadsAndEncodes) {
  const hllm::Vocabulary v = hllm::llama2c::load_vocabulary(kDir + "/tokenizer.bin");
  ASSERT_EQ(v.size(), 3u + 256u + 10u + 8u);
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.type_of(0), hllm::TokenType::unknown);
  EXPECT_EQ(v.type_of(1), hllm::TokenType::control);
  EXPECT_EQ(v.type_of(3 + 0x41), hllm::TokenType::byte);
  EXPECT_EQ(v.tokens[263], "\xE2\x96\x81hello");  // ' ' written back as '▁'
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);

  const hllm::Tokenizer tok(v);
  EXPECT_EQ(tok.encode("hello world"), (std::vector<std::int32_t>{1, 263, 268}));
  // 'i' and '!' are not pieces: byte fallback.
  EXPECT_EQ(tok.encode("hi!"), (std::vector<std::int32_t>{1, 259, 3 + 'i', 3 + '!'}));
  const std::vector<std::int32_t> ids{1, 263, 268};
  EXPECT_EQ(tok.decode(ids), "hello world");

  // With the checkpoint's vocabulary size: exactly that many tokens, else an error.
  EXPECT_EQ(hllm::llama2c::load_vocabulary(kDir + "/tokenizer.bin", 277).size(), 277u);
  expect_error([&] { hllm::llama2c::load_vocabulary(kDir + "/tokenizer.bin", 100); },
               ErrorKind::format, "file_size", kDir + "/tokenizer.bin");
  expect_error([&] { hllm::llama2c::load_vocabulary(kDir + "/tokenizer.bin", 300); },
               ErrorKind::format, "token[277]", kDir + "/tokenizer.bin");
}

TEST(Llama2cTokenizer, Corrupt) {
  const auto good = read_bytes(kDir + "/tokenizer.bin");
  const std::string name = "bad-tokenizer.bin";
  auto load = [&](const std::vector<std::byte>& bytes) {
    return hllm::llama2c::load_vocabulary(hllm::io::MappedFile::from_memory(bytes, name));
  };
  EXPECT_EQ(load(good).size(), 277u);
  expect_error([&] { load(std::vector<std::byte>(good.begin(), good.begin() + 2)); },
               ErrorKind::format, "max_token_length", name, 0);
  expect_error([&] { load(with_i32(good, 0, -1)); }, ErrorKind::format, "max_token_length", name,
               0);
  // Token 0 ("<unk>", 5 bytes) claims 1000 bytes: more than max_token_length.
  expect_error([&] { load(with_i32(good, 8, 1000)); }, ErrorKind::format, "token[0]", name, 8);
  // Cut inside the last token's bytes.
  expect_error([&] { load(std::vector<std::byte>(good.begin(), good.end() - 1)); },
               ErrorKind::format, "token[276]", name);
  // A NaN score.
  expect_error([&] { load(with_i32(good, 4, 0x7fc00000)); }, ErrorKind::format, "token[0]", name,
               4);
}

// ---------------------------------------------------------------------------------------------
// Inputs that are not regular files, or never end

// Runs `f` on another thread and fails the test (ending the process, since a blocked thread
// cannot be joined) if it takes longer than 10 s: these checks are about never blocking.
template <class F>
void within_seconds(F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked for 10 s";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  done.get();
}

TEST(Inputs, NonRegularFilesAreRefusedAtOnce) {
  TempDir tmp;
  const std::string fifo = (tmp.path / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string dir = tmp.path.string();
  const auto refused = [](auto&& open, const std::string& path, const std::string& what) {
    within_seconds([&] {
      expect_error([&] { open(path); }, ErrorKind::io, {}, path, std::nullopt,
                   "is " + what + ", not a regular");
    });
  };
  for (const auto& [path, what] :
       {std::pair{fifo, std::string("a FIFO (named pipe)")},
        std::pair{dir, std::string("a directory")},
        std::pair{std::string("/dev/zero"), std::string("a character device")}}) {
    SCOPED_TRACE(path);
    refused([](const std::string& p) { hllm::gguf::File::open(p); }, path, what);
    refused([](const std::string& p) { hllm::load_gguf_model(p); }, path, what);
    refused([](const std::string& p) { st::File::open(p); }, path, what);
    refused([](const std::string& p) { hllm::load_llama2c_model(p); }, path, what);
    refused([](const std::string& p) { hllm::io::read_text_file(p); }, path, what);
  }
  // A directory given to the Hugging Face loader must hold config.json; a FIFO named
  // config.json is refused like any other.
  ASSERT_EQ(::mkfifo((tmp.path / "config.json").string().c_str(), 0600), 0);
  within_seconds([&] {
    expect_error([&] { hllm::load_hf_model(dir); }, ErrorKind::io, {},
                 (tmp.path / "config.json").string(), std::nullopt, "is a FIFO");
  });
}

TEST(Inputs, TheEmptyPathIsNotAPath) {
  for (const auto& open : std::vector<std::function<void()>>{
           [] { hllm::gguf::File::open(""); }, [] { hllm::io::read_text_file(""); },
           [] { hllm::load_llama2c_model(""); }, [] { st::File::open(""); }})
    expect_error(open, ErrorKind::invalid_argument, {}, {}, std::nullopt,
                 "the empty string is not a path");
}

// A stream that never ends: every read yields more zero bytes.
class EndlessZeros : public std::streambuf {
 protected:
  int_type underflow() override {
    setg(buffer_, buffer_, buffer_ + sizeof buffer_);
    return 0;
  }

 private:
  char buffer_[4096] = {};
};

TEST(Inputs, EndlessStreamsStopAtTheirLimit) {
  EndlessZeros zeros;
  std::istream in(&zeros);
  std::string line;
  within_seconds([&] {
    expect_error([&] { hllm::io::read_line(in, line, "stdin", 1 << 16); }, ErrorKind::capacity, {},
                 "stdin", std::nullopt, "longer than the limit of 65536 bytes");
  });
  EXPECT_LE(line.size(), std::size_t{1} << 16);
  within_seconds([&] {
    expect_error([&] { hllm::io::read_stream(in, "stdin", std::size_t{1} << 20); },
                 ErrorKind::capacity, {}, "stdin", std::nullopt, "longer than the limit of 1 MiB");
  });
  // Within the limits, lines and streams read as std::getline and rdbuf would.
  std::istringstream text("first\nsecond line\n\nlast");
  std::vector<std::string> lines;
  while (hllm::io::read_line(text, line, "text")) lines.push_back(line);
  EXPECT_EQ(lines, (std::vector<std::string>{"first", "second line", "", "last"}));
  std::istringstream whole("abc\ndef");
  EXPECT_EQ(hllm::io::read_stream(whole, "text"), "abc\ndef");
}

TEST(Inputs, TextFilesAreReadWholeUpToTheirLimit) {
  TempDir tmp;
  const std::string path = (tmp.path / "text.txt").string();
  write_bytes(path, "In the beginning");
  EXPECT_EQ(hllm::io::read_text_file(path), "In the beginning");
  expect_error([&] { hllm::io::read_text_file(path, "text file", 8); }, ErrorKind::capacity, {},
               path, std::nullopt, "more than the limit of 8 bytes");
  expect_error([&] { hllm::io::read_text_file((tmp.path / "missing").string()); }, ErrorKind::io,
               {}, (tmp.path / "missing").string(), std::nullopt, "cannot open text file");
}

}  // namespace
