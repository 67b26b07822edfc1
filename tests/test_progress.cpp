// Progress of long work (io/progress.hpp): convert_model and the slow parts of load_gguf_model
// (the finite check, the repack) report once per tensor, counting up to the total, on the calling
// thread; a callback that throws cancels and leaves the weights as they were. And the programs'
// printer (examples/common/progress.hpp): plain lines away from a terminal, one redrawn line on it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/progress.hpp"
#include "hllm/io/convert.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/io/progress.hpp"
#include "hllm/model/repack.hpp"
#include "hllm/model/weights.hpp"

namespace {

const std::string kModel = HLLM_MODELS_DIR "/kjv-llama.gguf";

// Every report, with the thread it came on.
struct Recorder {
  struct Call {
    std::string stage, item;
    std::size_t done, total;
    std::thread::id thread;
  };
  std::vector<Call> calls;
  hllm::ProgressCallback callback() {
    return [this](const hllm::Progress& p) {
      calls.push_back(
          {std::string(p.stage), std::string(p.item), p.done, p.total, std::this_thread::get_id()});
    };
  }
  std::vector<Call> of(const std::string& stage) const {
    std::vector<Call> out;
    for (const Call& c : calls)
      if (c.stage == stage) out.push_back(c);
    return out;
  }
};

// The calls count 1, 2, ..., total, name `names` in order (when given), all on this thread.
void expect_counts_up(const std::vector<Recorder::Call>& calls, std::size_t total,
                      const std::vector<std::string>& names = {}) {
  ASSERT_EQ(calls.size(), total);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].done, i + 1);
    EXPECT_EQ(calls[i].total, total);
    EXPECT_EQ(calls[i].thread, std::this_thread::get_id()) << "report from another thread";
    if (!names.empty()) {
      EXPECT_EQ(calls[i].item, names[i]);
    }
  }
}

std::vector<std::string> spec_names(const hllm::ModelConfig& c) {
  std::vector<std::string> names;
  for (const hllm::TensorSpec& s : hllm::model_tensor_specs(c)) names.push_back(s.name);
  return names;
}

std::size_t projections(const hllm::ModelConfig& c) {
  return 7 * static_cast<std::size_t>(c.n_layers) + (c.tied_embeddings ? 0 : 1);
}

// The bundled model converted to Q8_0, written to a temporary file (removed at the end).
class Q8File {
 public:
  // Named after the test and the process: CTest runs the tests of this file in parallel.
  Q8File()
      : path_(std::filesystem::temp_directory_path() /
              ("hllm-test-progress-" +
               std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
               std::to_string(::getpid()) + ".gguf")) {
    const hllm::GgufModel f16 = hllm::load_gguf_model(kModel, {.repack = hllm::Repack::never});
    const hllm::ConvertedModel q8 = hllm::convert_model(f16.config, f16.weights, hllm::DType::q8_0);
    hllm::save_gguf_model(path_.string(), q8.config, q8.weights);
  }
  ~Q8File() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(Progress, ConvertReportsEveryTensorOnce) {
  const hllm::GgufModel m = hllm::load_gguf_model(kModel, {.repack = hllm::Repack::never});
  const std::vector<std::string> names = spec_names(m.config);
  for (const auto& [type, stage] :
       {std::pair{hllm::DType::q8_0, "quantizing"}, std::pair{hllm::DType::q4_0, "quantizing"},
        std::pair{hllm::DType::f32, "converting"}}) {
    SCOPED_TRACE(hllm::dtype_name(type));
    Recorder r;
    hllm::convert_model(m.config, m.weights, type, r.callback());
    EXPECT_EQ(r.of(stage).size(), r.calls.size());  // one stage
    expect_counts_up(r.of(stage), hllm::model_tensor_count(m.config), names);
  }
}

TEST(Progress, ConvertWithoutCallbackIsTheSame) {
  const hllm::GgufModel m = hllm::load_gguf_model(kModel, {.repack = hllm::Repack::never});
  Recorder r;
  const hllm::ConvertedModel a = hllm::convert_model(m.config, m.weights, hllm::DType::q4_0);
  const hllm::ConvertedModel b =
      hllm::convert_model(m.config, m.weights, hllm::DType::q4_0, r.callback());
  const hllm::WeightTensor &x = a.weights.layers[2].ffn.up, &y = b.weights.layers[2].ffn.up;
  ASSERT_EQ(x.bytes(), y.bytes());
  EXPECT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0);
}

TEST(Progress, LoadWithRepackReportsEveryMovedTensor) {
  const Q8File file;
  Recorder r;
  const hllm::GgufModel m = hllm::load_gguf_model(
      file.path(),
      {.check_finite = true, .repack = hllm::Repack::always, .progress = r.callback()});
  // The finite check first, every tensor in the file's order; then the repack, every projection.
  expect_counts_up(r.of("checking"), hllm::model_tensor_count(m.config), spec_names(m.config));
  const std::vector<Recorder::Call> repacked = r.of("repacking");
  expect_counts_up(repacked, projections(m.config));
  EXPECT_EQ(r.calls.size(), r.of("checking").size() + repacked.size());
  EXPECT_EQ(r.calls.back().stage, "repacking");
  EXPECT_EQ(repacked.front().item, "blk.0.attn_q.weight");
  EXPECT_EQ(repacked.back().item,
            m.config.tied_embeddings ? "blk.5.ffn_down.weight" : "output.weight");
  EXPECT_NE(m.weights.layers[0].wq.type, hllm::DType::q8_0);  // it did repack
}

TEST(Progress, BorrowedMemoryRepackReports) {
  const Q8File file;
  std::vector<std::byte> bytes(std::filesystem::file_size(file.path()));
  std::FILE* f = std::fopen(file.path().c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  const auto parsed =
      std::make_shared<const hllm::gguf::File>(hllm::gguf::File::from_memory(bytes, "q8_0"));
  Recorder automatic, always;
  // Lent memory is left in place by the automatic mode: nothing slow, nothing reported.
  hllm::load_gguf_model(parsed, {.progress = automatic.callback()});
  EXPECT_TRUE(automatic.calls.empty());
  const hllm::GgufModel m = hllm::load_gguf_model(
      parsed, {.repack = hllm::Repack::always, .progress = always.callback()});
  expect_counts_up(always.of("repacking"), projections(m.config));
}

TEST(Progress, FastLoadReportsNothing) {
  Recorder r;
  hllm::load_gguf_model(kModel, {.repack = hllm::Repack::never, .progress = r.callback()});
  EXPECT_TRUE(r.calls.empty());
}

TEST(Progress, ThrowingCallbackCancelsRepackAndKeepsTheWeights) {
  const Q8File file;
  hllm::GgufModel m = hllm::load_gguf_model(file.path(), {.repack = hllm::Repack::never});
  const hllm::WeightTensor before = m.weights.layers[0].wq;
  std::size_t calls = 0;
  const auto cancel = [&](const hllm::Progress&) {
    if (++calls == 3) throw std::runtime_error("cancelled");
  };
  EXPECT_THROW(
      hllm::repack_weights(m.weights, hllm::RepackPlan::all(true), m.file->is_mapped(), cancel),
      std::runtime_error);
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(m.weights.layers[0].wq.type, before.type);
  EXPECT_EQ(m.weights.layers[0].wq.data, before.data);
  EXPECT_EQ(m.weights.repacked_storage, nullptr);
  // The source pages given back to the kernel fault in again from the file.
  const hllm::GgufModel again = hllm::load_gguf_model(file.path(), {.repack = hllm::Repack::never});
  EXPECT_EQ(std::memcmp(before.data, again.weights.layers[0].wq.data, before.bytes()), 0);
}

// ------------------------------------------------------------------------------------------
// The programs' printer.

std::string printed(hllm::examples::ProgressPrinter::Options options,
                    const std::function<void(hllm::examples::ProgressPrinter&)>& use) {
  std::FILE* out = std::tmpfile();
  {
    hllm::examples::ProgressPrinter printer(options, out);
    use(printer);
  }
  std::string text(static_cast<std::size_t>(std::ftell(out)), '\0');
  std::rewind(out);
  const std::size_t n = std::fread(text.data(), 1, text.size(), out);
  std::fclose(out);
  text.resize(n);
  return text;
}

void report(hllm::examples::ProgressPrinter& p, const char* stage, std::size_t total) {
  for (std::size_t i = 1; i <= total; ++i) {
    const std::string name = "blk." + std::to_string(i) + ".w";
    p.update({stage, i, total, name});
  }
}

using Lines = hllm::examples::ProgressPrinter::Lines;

TEST(ProgressPrinter, PlainLinesAwayFromATerminal) {
  const std::string text =
      printed({.terminal = false}, [](auto& p) { report(p, "quantizing", 12); });
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 12);
  EXPECT_TRUE(text.starts_with("quantizing  1/12 blk.1.w\nquantizing  2/12 blk.2.w\n"));
  EXPECT_NE(text.find("\nquantizing 12/12 blk.12.w\n"), std::string::npos);
}

TEST(ProgressPrinter, TenthsAwayFromATerminal) {
  const std::string text = printed({.lines = Lines::tenths, .terminal = false}, [](auto& p) {
    report(p, "repacking", 201);
    report(p, "checking", 3);
  });
  // 201 reports: the first, one per tenth crossed, the last.
  std::size_t repacking = 0, pos = 0;
  while ((pos = text.find("repacking", pos)) != std::string::npos) ++repacking, ++pos;
  EXPECT_EQ(repacking, 11u);
  EXPECT_NE(text.find("repacking 201/201 blk.201.w\nchecking 1/3"), std::string::npos);
  EXPECT_NE(text.find("checking 3/3 blk.3.w\n"), std::string::npos);
}

TEST(ProgressPrinter, OneRedrawnLineOnATerminal) {
  const std::string text = printed({.terminal = true}, [](auto& p) {
    report(p, "quantizing", 5);
    p.update({"repacking", 1, 2, "a.very.long.tensor.name.weight"});
    p.update({"repacking", 2, 2, "b"});
  });
  // The first report is drawn at once, the last always; each stage ends with one newline, and a
  // shorter line covers the longer one before it.
  EXPECT_TRUE(text.starts_with("\rquantizing 1/5 blk.1.w\r"));
  EXPECT_NE(text.find("\rquantizing 5/5 blk.5.w\n"), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_NE(text.find("\rrepacking 2/2 b" + std::string(44 - 15, ' ') + "\n"), std::string::npos);
}

TEST(ProgressPrinter, StatusAndDisabledAndDelay) {
  EXPECT_EQ(printed({.terminal = false}, [](auto& p) { p.status("[1/2] pp8 f16 t=2: run 1/1"); }),
            "[1/2] pp8 f16 t=2: run 1/1\n");
  EXPECT_EQ(printed({.terminal = true},
                    [](auto& p) {
                      p.status("[1/2] pp8: warm-up");
                      p.status("[2/2] tg4: run 1/1");
                    }),
            "\r[1/2] pp8: warm-up\r[2/2] tg4: run 1/1\n");
  EXPECT_EQ(printed({.enabled = false, .terminal = false},
                    [](auto& p) {
                      report(p, "quantizing", 4);
                      p.status("x");
                    }),
            "");
  // A stage faster than the delay shows nothing at all.
  EXPECT_EQ(printed({.delay_s = 60, .terminal = true}, [](auto& p) { report(p, "repacking", 50); }),
            "");
  // An unset callback when disabled: the library then skips the reports.
  EXPECT_FALSE(hllm::examples::progress_callback({.enabled = false}));
  EXPECT_TRUE(hllm::examples::load_progress(true));
}

}  // namespace
