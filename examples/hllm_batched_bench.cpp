// hllm-batched-bench: the throughput of N sequences decoded together, in the spirit of
// llama.cpp's llama-batched-bench.
//
//   hllm-batched-bench (-m FILE.gguf | --preset NAME --type TYPE) [-npp 128,512] [-ntg 128]
//                      [-npl 1,2,4,8,16,32] [-b 512] [-pps] [-t N] [--isa ISA]
//                      [--kv-type T] [-o md|json] [--log-disable]
//
// For every combination of prompt length (npp), generated tokens (ntg) and parallel sequences
// (npl) it runs, on one paged KV cache (nn/paged_kv_storage.hpp) through the batched forward
// pass (model/batch.hpp):
//   PP: the npl prompts of npp tokens, in batches of at most -b tokens across the sequences;
//   TG: ntg steps, each one batch of npl single tokens (each sequence's greedy next token).
// It reports the aggregate prompt and generation tokens/s over the npl sequences, the time per
// generation step, the time to each sequence's first token and the KV bytes the sequences hold
// (blocks in use × block bytes: they grow with the tokens held, not with npl × context). With
// -pps the sequences share one prompt, as llama-batched-bench's -pps copies one sequence's
// cache to the others: the first computes it and the others fork from it (KVBlockTable::fork:
// every block shared, the last one copied when a sequence first writes into it), so the prompt
// is computed and stored once and every sequence has its first token when the first does.
// The prompt's full blocks are published too; after the run npl - 1 new requests of it arrive
// together and take them from the prefix cache (JSON ttft_cached_s: their time to a first
// token).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench_model.hpp"
#include "common/cli.hpp"
#include "common/progress.hpp"
#include "common/synthetic.hpp"
#include "hllm/hllm.hpp"
#include "hllm/io/gguf_model.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_path, preset, type = "f32", output = "md";
  std::string npp = "128,512", ntg = "128", npl = "1,2,4,8,16,32";
  std::size_t batch = 512, threads = 0;
  bool shared_prompt = false, log_disable = false;
  std::optional<hllm::Isa> isa;
  hllm::KVType kv_type = hllm::KVType::f32;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "128,512" → {128, 512}; every entry a positive number.
std::vector<std::size_t> parse_list(const std::string& text, const char* flag,
                                    hllm::cli::Parser& cli) {
  std::vector<std::size_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t value = 0, used = 0;
    try {
      value = std::stoul(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value == 0 || value > 65536)
      cli.fail(std::string(flag) +
               " must be a comma-separated list of numbers from 1 to 65536, got '" + text + "'");
    values.push_back(value);
  }
  if (values.empty()) cli.fail(std::string(flag) + " is empty");
  return values;
}

std::int32_t argmax(std::span<const float> logits) {
  return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Result {
  std::size_t npp, ntg, npl, n_kv;
  double pp_s, tg_s, ttft_s;  // ttft: mean time to the first token of sequences 2..npl
  std::size_t kv_bytes;
  // -pps: the time to the first token of npl - 1 new requests of the same prompt arriving
  // together after the run, which take its published blocks (prefix caching).
  double ttft_cached_s = 0;
};

// One configuration: PP then TG, as the top of the file says.
Result run_config(hllm::BatchRunner<>& runner, const hllm::ModelConfig& c, const Options& o,
                  std::size_t npp, std::size_t ntg, std::size_t npl, std::mt19937& rng) {
  const std::size_t block = hllm::kDefaultBlockTokens;
  const std::size_t blocks = npl * ((npp + ntg + block - 1) / block + 1);
  hllm::AnyPagedKVStorage storage(o.kv_type, blocks, block, std::size_t(c.n_layers),
                                  std::size_t(c.n_kv_heads), std::size_t(c.resolved_head_dim()),
                                  c.kv_value_rows());
  hllm::KVBlockAllocator allocator(blocks, block);
  const auto copy = [&](hllm::BlockId from, hllm::BlockId to) { storage.copy_block(from, to); };
  std::uniform_int_distribution<std::int32_t> token(3, static_cast<std::int32_t>(c.vocab_size) - 1);
  std::vector<std::vector<std::int32_t>> prompts(npl, std::vector<std::int32_t>(npp));
  for (std::size_t s = 0; s < npl; ++s) {
    if (s > 0 && o.shared_prompt)
      prompts[s] = prompts[0];
    else
      for (std::int32_t& t : prompts[s]) t = token(rng);
  }
  std::vector<hllm::KVBlockTable> tables;
  tables.reserve(npl);
  for (std::size_t s = 0; s < npl; ++s) tables.emplace_back(block);
  std::vector<std::int32_t> next(npl);
  std::vector<double> first_token(npl, 0);

  const std::size_t budget = runner.max_tokens();
  const auto pp_start = Clock::now();
  std::vector<std::size_t> done(npl, 0);
  const auto prefill = [&](std::size_t first, std::size_t last) {
    while (true) {
      std::vector<hllm::BatchEntry> entries;
      std::vector<std::size_t> of;
      std::size_t left = budget;
      for (std::size_t s = first; s < last && left > 0; ++s) {
        if (done[s] == npp) continue;
        const std::size_t n = std::min(npp - done[s], left);
        if (!tables[s].prepare_append(allocator, n, copy))
          throw hllm::Error(hllm::ErrorKind::internal, "the benchmark's KV pool ran out");
        entries.push_back({&tables[s], std::span(prompts[s]).subspan(done[s], n)});
        of.push_back(s);
        left -= n;
      }
      if (entries.empty()) return;
      const auto logits = runner.forward(entries, storage, allocator);
      for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::size_t s = of[i];
        done[s] += entries[i].tokens.size();
        if (done[s] == npp) {
          next[s] = argmax(logits.subspan(i * c.vocab_size, std::size_t(c.vocab_size)));
          first_token[s] = seconds(pp_start, Clock::now());
        }
      }
    }
  };
  if (o.shared_prompt) {
    prefill(0, 1);
    tables[0].publish_full_blocks(allocator, prompts[0]);
    for (std::size_t s = 1; s < npl; ++s) {
      tables[s] = tables[0].fork(allocator);
      next[s] = next[0];
      first_token[s] = first_token[0];
    }
  } else {
    prefill(0, npl);
  }
  const double pp_s = seconds(pp_start, Clock::now());

  const auto tg_start = Clock::now();
  for (std::size_t step = 0; step < ntg; ++step) {
    std::vector<hllm::BatchEntry> entries;
    for (std::size_t s = 0; s < npl; ++s) {
      if (!tables[s].prepare_append(allocator, 1, copy))
        throw hllm::Error(hllm::ErrorKind::internal, "the benchmark's KV pool ran out");
      entries.push_back({&tables[s], std::span(&next[s], 1)});
    }
    const auto logits = runner.forward(entries, storage, allocator);
    for (std::size_t s = 0; s < npl; ++s)
      next[s] = argmax(logits.subspan(s * c.vocab_size, std::size_t(c.vocab_size)));
  }
  const double tg_s = seconds(tg_start, Clock::now());
  double ttft = 0;
  for (std::size_t s = 1; s < npl; ++s) ttft += first_token[s] / double(npl - 1);
  if (npl == 1) ttft = first_token[0];
  Result result{npp,  ntg,  npl,  npl * (npp + ntg),
                pp_s, tg_s, ttft, allocator.n_referenced() * storage.block_bytes()};
  if (o.shared_prompt && npl > 1) {
    // The forks give their blocks back; npl - 1 new requests of the prompt arrive together,
    // take its published blocks and compute the rest (the last token at least) in one pass.
    for (std::size_t s = 1; s < npl; ++s) tables[s].release_all(allocator);
    const auto cached_start = Clock::now();
    std::vector<hllm::BatchEntry> entries;
    std::size_t batch_tokens = 0;
    for (std::size_t s = 1; s < npl; ++s) {
      const std::size_t reused = tables[s].reuse_prefix(allocator, prompts[s]);
      if (!tables[s].prepare_append(allocator, npp - reused, copy))
        throw hllm::Error(hllm::ErrorKind::internal, "the benchmark's KV pool ran out");
      if (batch_tokens + npp - reused > budget) {
        (void)runner.forward(entries, storage, allocator);
        entries.clear();
        batch_tokens = 0;
      }
      entries.push_back({&tables[s], std::span(prompts[s]).subspan(reused)});
      batch_tokens += npp - reused;
    }
    (void)runner.forward(entries, storage, allocator);
    result.ttft_cached_s = seconds(cached_start, Clock::now());
  }
  for (hllm::KVBlockTable& table : tables) table.release_all(allocator);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  hllm::cli::Parser cli("hllm-batched-bench",
                        "Throughput of N sequences decoded together (the batched forward pass "
                        "over a paged KV cache), as llama.cpp's llama-batched-bench.");
  Options o;
  hllm::examples::model_source_options(cli, o.model_path, o.preset, o.type);
  cli.text("--npp", o.npp, "(also -npp) Prompt lengths, comma-separated")->type_name("LIST");
  cli.text("--ntg", o.ntg, "(also -ntg) Generated tokens, comma-separated")->type_name("LIST");
  cli.text("--npl", o.npl, "(also -npl) Parallel sequences, comma-separated")->type_name("LIST");
  cli.number_in<std::size_t>("-b,--batch-size", o.batch, 1, 65536, "a number of tokens",
                             "Tokens per forward pass while reading the prompts");
  cli.flag("--pps", o.shared_prompt,
           "(also -pps) The sequences share one prompt: computed once, its blocks shared "
           "(a fork, as llama-batched-bench copies the sequence)");
  cli.threads(o.threads);
  cli.isa(o.isa);
  cli.kv_type(o.kv_type);
  cli.choice("-o,--output", o.output, {"md", "json"}, "Output format");
  cli.flag("--log-disable", o.log_disable, "Print nothing on stderr but errors");
  cli.parse(argc, argv);
  if (o.model_path.empty() == o.preset.empty())
    cli.fail("give exactly one of -m FILE or --preset NAME");
  const auto npps = parse_list(o.npp, "-npp", cli), ntgs = parse_list(o.ntg, "-ntg", cli),
             npls = parse_list(o.npl, "-npl", cli);
  const hllm::DType type = hllm::examples::preset_type(cli, o.model_path, o.type);

  try {
    hllm::examples::BenchModel m = hllm::examples::load_bench_model(
        o.model_path, o.preset, type, o.isa.value_or(hllm::kernels::active().isa),
        hllm::Repack::automatic, !o.log_disable);
    const hllm::ModelConfig config = m.config;
    const std::string& model_name = m.name;
    const std::string& type_name = m.type_name;
    const hllm::Llama<> model(config, std::move(m.weights));
    const std::size_t max_npl = *std::max_element(npls.begin(), npls.end());
    hllm::BatchRunner<> runner(
        model, {.max_tokens = std::max(o.batch, max_npl), .threads = o.threads, .isa = o.isa});
    std::mt19937 rng(1);
    if (o.output == "md") {
      std::printf("model: %s, %s, %zu threads, isa %s, KV %s%s\n\n", model_name.c_str(),
                  type_name.c_str(), runner.threads(), hllm::to_string(runner.isa()),
                  hllm::to_string(o.kv_type), o.shared_prompt ? ", shared prompt" : "");
      std::printf(
          "| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | step ms | "
          "TTFT s | KV MiB |\n");
      std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (std::size_t npp : npps)
      for (std::size_t ntg : ntgs)
        for (std::size_t npl : npls) {
          if (!o.log_disable) std::fprintf(stderr, "pp %zu tg %zu npl %zu...\n", npp, ntg, npl);
          const Result r = run_config(runner, config, o, npp, ntg, npl, rng);
          const double pp_rate = r.pp_s > 0 ? double(npl * npp) / r.pp_s : 0;
          const double tg_rate = r.tg_s > 0 ? double(npl * ntg) / r.tg_s : 0;
          const double step_ms = ntg > 0 ? 1000.0 * r.tg_s / double(ntg) : 0;
          if (o.output == "json") {
            std::printf(
                "{\"model\": \"%s\", \"type\": \"%s\", \"npp\": %zu, \"ntg\": %zu, "
                "\"npl\": %zu, \"n_kv\": %zu, \"pp_s\": %.4f, \"pp_tokens_per_s\": %.2f, "
                "\"tg_s\": %.4f, \"tg_tokens_per_s\": %.2f, \"step_ms\": %.3f, "
                "\"ttft_s\": %.4f, \"ttft_cached_s\": %.4f, \"kv_bytes\": %zu, "
                "\"shared_prompt\": %s, \"threads\": %zu, \"isa\": \"%s\", \"kv_type\": \"%s\"}\n",
                model_name.c_str(), type_name.c_str(), npp, ntg, npl, r.n_kv, r.pp_s, pp_rate,
                r.tg_s, tg_rate, step_ms, r.ttft_s, r.ttft_cached_s, r.kv_bytes,
                o.shared_prompt ? "true" : "false", runner.threads(), hllm::to_string(runner.isa()),
                hllm::to_string(o.kv_type));
          } else {
            std::printf(
                "| %zu | %zu | %zu | %zu | %.3f | %.2f | %.3f | %.2f | %.2f | %.3f | %.1f |\n", npp,
                ntg, npl, r.n_kv, r.pp_s, pp_rate, r.tg_s, tg_rate, step_ms, r.ttft_s,
                double(r.kv_bytes) / (1024.0 * 1024.0));
            if (r.ttft_cached_s > 0 && !o.log_disable)
              std::fprintf(stderr,
                           "%zu requests arriving after the prompt was cached: first "
                           "tokens after %.3f s\n",
                           npl - 1, r.ttft_cached_s);
          }
          std::fflush(stdout);
        }
    return 0;
  } catch (const hllm::Error& e) {
    std::fprintf(stderr, "hllm-batched-bench: %s\n", e.what());
    return 1;
  }
}
