// Peak resident memory of loading and running a TinyLlama-1.1B-shaped Q4_0 model, against what
// the file and the requested context justify: file size + KV cache bytes + 10%.
//
//   peak_rss [--context N] [--keep] [DIR]    writes DIR/hllm_peak_rss.gguf (random weights; DIR
//                                            defaults to the temp directory), runs the check in
//                                            a fresh process, deletes the file (unless --keep)
//   peak_rss --load FILE [--context N]       the check itself: load, prefill, decode, measure
//
// The loading process is started with fork + exec, so nothing of the writer (whose memory does
// not count) is in it; its VmHWM (/proc/self/status) covers everything from exec on. The writer
// adds each tensor as a lazily filled GGUF tensor, so it holds one tensor at a time. Exit
// status: 0 within the limit, 1 over it, 2 on an error, 77 (skipped) under a sanitizer.

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/io/gguf_model.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/presets.hpp"
#include "hllm/model/session.hpp"
#include "sanitizer.hpp"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A field of /proc/self/status in bytes ("VmHWM", "RssFile", ...); 0 if absent.
std::uint64_t status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(status, line);)
    if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size())) * 1024;
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Random Q4_0 blocks whose values have the standard deviation `std_dev`: uniform nibbles
// (d * (q - 8) has a standard deviation of about 4.6 d) under one scale per tensor.
void fill_q4_0(std::span<std::byte> out, float std_dev, std::uint64_t& state) {
  const hllm::f16 d = hllm::f16::from_float(std_dev / 4.6f);
  hllm::BlockQ4_0 block{};
  block.d = d;
  for (std::size_t at = 0; at + sizeof block <= out.size(); at += sizeof block) {
    for (std::size_t i = 0; i < sizeof block.qs; i += 8) {
      state ^= state >> 12, state ^= state << 25, state ^= state >> 27;  // xorshift64*
      const std::uint64_t r = state * 0x2545F4914F6CDD1Dull;
      std::memcpy(block.qs + i, &r, 8);
    }
    std::memcpy(out.data() + at, &block, sizeof block);
  }
}

// Writes the model tensor by tensor: metadata from the config, then each tensor as a lazily
// filled one (norms F32 near 1, matrices Q4_0 with a 1/sqrt(fan_in) spread).
void write_model(const std::string& path, const hllm::ModelConfig& config) {
  hllm::gguf::Writer out;
  hllm::set_gguf_model_metadata(out, config);
  auto state = std::make_shared<std::uint64_t>(0x9E3779B97F4A7C15ull);
  for (const hllm::TensorSpec& s : hllm::model_tensor_specs(config)) {
    if (s.is_vector()) {
      out.add_tensor(s.name, hllm::DType::f32, {s.cols}, s.cols * 4, [](std::span<std::byte> b) {
        const float one = 1.0f;
        for (std::size_t i = 0; i < b.size(); i += 4) std::memcpy(b.data() + i, &one, 4);
      });
      continue;
    }
    const bool embedding = s.name == "token_embd.weight";
    const float std_dev = embedding ? 1.0f : 1.0f / std::sqrt(static_cast<float>(s.cols));
    out.add_tensor(s.name, hllm::DType::q4_0, {s.cols, s.rows},
                   s.rows * s.cols / 32 * sizeof(hllm::BlockQ4_0),
                   [state, std_dev](std::span<std::byte> b) { fill_q4_0(b, std_dev, *state); });
  }
  out.write(path);
}

// The check, in the fresh process.
int load_and_measure(const std::string& path, std::size_t context) {
  const auto start = std::chrono::steady_clock::now();
  const hllm::GgufModel m = hllm::load_gguf_model(path);
  const hllm::Llama<> model(m.config, m.weights);
  hllm::Session<> session(model, {.context = context});
  const double load_seconds = seconds_since(start);
  const std::uint64_t after_load = status_bytes("VmRSS");

  const std::vector<std::int32_t> prompt = {1, 450, 4996, 17354, 1701, 432, 17204, 975};
  const auto run_start = std::chrono::steady_clock::now();
  auto logits = session.prefill(prompt);
  std::int32_t token = 0;
  for (int step = 0; step < 8; ++step) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = i;
    token = static_cast<std::int32_t>(best);
    logits = session.decode(token);
  }
  const double run_seconds = seconds_since(run_start);

  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path);
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t kv_bytes = session.kv_cache().bytes();
  const auto limit = static_cast<std::uint64_t>(1.1 * static_cast<double>(file_bytes + kv_bytes));
  const std::uint64_t peak = status_bytes("VmHWM");
  std::printf("model: %s, %" PRId64 " layers, dim %" PRId64 ", Q4_0, context %zu, %zu threads\n",
              m.config.name.c_str(), m.config.n_layers, m.config.dim, session.context(),
              session.threads());
  std::printf("load %.2f s; prefill %zu + decode 8 tokens %.2f s (last token %d)\n", load_seconds,
              prompt.size(), run_seconds, token);
  std::printf("file      %9.1f MiB\n", static_cast<double>(file_bytes) / kMiB);
  std::printf("KV cache  %9.1f MiB\n", static_cast<double>(kv_bytes) / kMiB);
  std::printf("limit     %9.1f MiB (file + KV cache + 10%%)\n", static_cast<double>(limit) / kMiB);
  std::printf("VmRSS after load %7.1f MiB\n", static_cast<double>(after_load) / kMiB);
  std::printf(
      "VmHWM (peak)     %7.1f MiB = %.1f%% of the limit (at the end: RssFile %.1f MiB "
      "mapped weights, RssAnon %.1f MiB heap)\n",
      static_cast<double>(peak) / kMiB,
      100.0 * static_cast<double>(peak) / static_cast<double>(limit),
      static_cast<double>(status_bytes("RssFile")) / kMiB,
      static_cast<double>(status_bytes("RssAnon")) / kMiB);
  if (peak == 0) throw std::runtime_error("no VmHWM in /proc/self/status");
  if (peak > limit) {
    std::printf("FAIL: peak resident memory exceeds file + KV cache + 10%%\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#if HLLM_TEST_SANITIZED
  std::printf("skipped: a sanitizer's shadow memory makes resident memory meaningless\n");
  return 77;
#endif
  std::string load_path, dir = std::filesystem::temp_directory_path().string();
  std::size_t context = 256;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--load" && i + 1 < argc)
      load_path = argv[++i];
    else if (arg == "--context" && i + 1 < argc)
      context = std::stoul(argv[++i]);
    else if (arg == "--keep")
      keep = true;
    else if (!arg.starts_with("-"))
      dir = arg;
    else {
      std::fprintf(stderr, "usage: peak_rss [--context N] [--keep] [DIR] | --load FILE\n");
      return 2;
    }
  }
  try {
    if (!load_path.empty()) return load_and_measure(load_path, context);

    const std::string path =
        (std::filesystem::path(dir) / ("hllm_peak_rss_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    const auto start = std::chrono::steady_clock::now();
    write_model(path, hllm::presets::TinyLlama_1_1B<>::config());
    std::printf("wrote %s in %.1f s\n", path.c_str(), seconds_since(start));
    std::fflush(stdout);

    const std::string context_text = std::to_string(context);
    const pid_t child = ::fork();
    if (child == 0) {
      const char* args[] = {"/proc/self/exe",     "--load", path.c_str(), "--context",
                            context_text.c_str(), nullptr};
      ::execv("/proc/self/exe", const_cast<char* const*>(args));
      std::perror("peak_rss: exec");
      std::_Exit(2);
    }
    int status = 0;
    const bool waited = child > 0 && ::waitpid(child, &status, 0) == child;
    if (!keep) std::filesystem::remove(path);
    if (!waited) throw std::runtime_error("cannot start the loading process");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peak_rss: %s\n", e.what());
    return 2;
  }
}
