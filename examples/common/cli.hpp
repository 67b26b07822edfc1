#pragma once
// Command-line parsing shared by the example programs, on CLI11 (Debian libcli11-dev; only the
// examples need it, never the library). Flags follow llama.cpp's spelling where the meaning is
// the same; `--flag=value` and `--flag value` both work; every program has --help and --version.
//
// Every value is checked as it is parsed, with a message in the user's words that names the
// flag and what it expects ("-t must be a number of threads from 1 to 512, got '0'"). A bad
// command line prints "PROGRAM: MESSAGE" and a pointer to --help on stderr and exits with status
// 2; --help and --version print to stdout and exit 0. Nothing is loaded before that.

#include <CLI/CLI.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/core/thread_pool.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/simd/isa.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"
#include "hllm/version.hpp"

namespace hllm::cli {

// -c as SessionOptions::context. Not given: 0, the library's default (hllm::kDefaultContext, or
// the model's length if that is shorter), as llama.cpp defaults to 4096. Given as 0: the model's
// own length, as llama.cpp's -c 0.
inline constexpr std::size_t kContextNotGiven = std::numeric_limits<std::size_t>::max();
inline std::size_t session_context(std::size_t flag, std::int64_t model_context) {
  if (flag == kContextNotGiven) return 0;
  return flag == 0 ? static_cast<std::size_t>(model_context) : flag;
}

// A bad value on the command line, with the whole message the user sees. The checks throw it
// from inside CLI11's parse so that the message is ours, not CLI11's "--option: ..." wrapping.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The text of `value` as a T, or nothing unless all of it is a number that fits (for floating
// point: a finite one).
template <class T>
std::optional<T> parse_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_floating_point_v<T>) {
    const double v = std::strtod(text.c_str(), &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(v)) return std::nullopt;
    return static_cast<T>(v);
  } else if constexpr (std::is_signed_v<T>) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v < static_cast<long long>(std::numeric_limits<T>::min()) ||
        v > static_cast<long long>(std::numeric_limits<T>::max()))
      return std::nullopt;
    return static_cast<T>(v);
  } else {
    if (text[0] == '-') return std::nullopt;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v > std::numeric_limits<T>::max()) return std::nullopt;
    return static_cast<T>(v);
  }
}

// llama.cpp's -e: \n, \t, \r, \\, \', \", \? and \xHH in a prompt become the characters they
// name; any other backslash stays as written.
inline std::string process_escapes(const std::string& in) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 == in.size()) {
      out += in[i];
      continue;
    }
    const char c = in[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '?': out += '?'; break;
      case 'x':
        if (i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
          out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
          i += 2;
          break;
        }
        [[fallthrough]];
      default: out += '\\'; out += c;
    }
  }
  return out;
}

// One program's command line: a CLI11 App with hllm's checks and messages.
class Parser {
 public:
  Parser(std::string program, std::string description)
      : program_(std::move(program)), app_(std::move(description), program_) {
    app_.set_help_flag("-h,--help", "Print this help and exit");
    app_.set_version_flag("--version", program_ + " (hllm) " + kVersionString,
                          "Print the version and exit");
    app_.get_formatter()->column_width(36);
  }

  CLI::App& app() { return app_; }
  const std::string& program() const { return program_; }

  // A flag that takes no value.
  CLI::Option* flag(const std::string& names, bool& target, const std::string& help) {
    return app_.add_flag(names, target, help);
  }

  // A value taken as written (any text, the empty string included).
  CLI::Option* text(const std::string& names, std::string& target, const std::string& help) {
    return app_.add_option(names, target, help)->type_name("TEXT");
  }

  // A file path: the empty string is refused, so that `-m ""` is an error instead of meaning
  // "no model given".
  CLI::Option* path(const std::string& names, std::string& target, const std::string& help) {
    const std::string name = first_name(names);
    return app_.add_option(names, target, help)
        ->type_name("FILE")
        ->check(check([name](const std::string& v) {
          if (v.empty()) throw UsageError(name + " needs a file path, got the empty string");
        }));
  }

  // A number for which ok(value) holds; `expected` says in words what that is, e.g. "a number
  // of threads from 1 to 512".
  template <class T>
  CLI::Option* number(const std::string& names, T& target, const std::string& expected,
                      std::function<bool(T)> ok, const std::string& help) {
    const std::string name = first_name(names);
    return app_.add_option(names, target, help)
        ->type_name(std::is_floating_point_v<T> ? "X" : "N")
        ->capture_default_str()
        ->check(check([name, expected, ok](const std::string& v) {
          const std::optional<T> n = parse_number<T>(v);
          if (!n || !ok(*n)) throw UsageError(name + " must be " + expected + ", got '" + v + "'");
        }));
  }

  // A whole number in [lo, hi]; `what` names it ("a number of threads").
  template <class T>
  CLI::Option* number_in(const std::string& names, T& target, T lo, T hi, const std::string& what,
                         const std::string& help) {
    return number<T>(
        names, target, what + " from " + std::to_string(lo) + " to " + std::to_string(hi),
        [lo, hi](T v) { return v >= lo && v <= hi; }, help);
  }

  // One of a few names; `values` is the list in the message, e.g. "md or json".
  CLI::Option* choice(const std::string& names, std::string& target,
                      std::vector<std::string> allowed, const std::string& help) {
    const std::string name = first_name(names);
    std::string list;
    for (std::size_t i = 0; i < allowed.size(); ++i)
      list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
    return app_.add_option(names, target, help)
        ->type_name(join(allowed, "|"))
        ->capture_default_str()
        ->check(check([name, list, allowed](const std::string& v) {
          for (const std::string& a : allowed)
            if (v == a) return;
          throw UsageError(name + " must be " + list + ", got '" + v + "'");
        }));
  }

  // -t/--threads; more threads than this machine has cores is allowed, with a warning.
  CLI::Option* threads(std::size_t& target) {
    return number_in<std::size_t>("-t,--threads", target, 1, kMaxThreads, "a number of threads",
                                  "Worker threads (default: the physical core count)")
        ->default_str("auto")
        ->each([this](const std::string& v) {
          const unsigned cores = std::thread::hardware_concurrency();
          const auto n = parse_number<std::size_t>(v);
          if (cores > 0 && n && *n > cores)
            warn("-t " + v + " is more threads than this machine's " + std::to_string(cores) +
                 " cores: they will take turns on them, which is slower");
        });
  }

  // -c/--ctx-size: the KV cache's capacity in tokens, in [lo, hi] (hi: hllm::kMaxContext; a
  // parameter so that this header does not need the model's). Left at kContextNotGiven unless
  // given: see session_context.
  CLI::Option* context(std::size_t& target, std::size_t lo, std::size_t hi,
                       const std::string& help) {
    return number_in<std::size_t>("-c,--ctx-size", target, lo, hi, "a number of tokens", help);
  }
  // The same with the programs' usual help and default.
  CLI::Option* context(std::size_t& target, std::size_t hi) {
    target = kContextNotGiven;
    return context(target, 0, hi,
                   "Context size in tokens (default: 4096, or the model's length if shorter; 0: "
                   "the model's length)")
        ->default_str("4096");
  }

  // --isa: the kernels to run.
  CLI::Option* isa(std::optional<Isa>& target) {
    return app_
        .add_option_function<std::string>(
            "--isa", [&target](const std::string& v) { target = parse_isa(v); },
            "Kernels to run (default: the best this CPU has, or HLLM_ISA)")
        ->type_name("scalar|avx2|avx_vnni|avx512")
        ->check(check([](const std::string& v) {
          try {
            parse_isa(v);
          } catch (const Error&) {
            throw UsageError("--isa must be scalar, avx2, avx_vnni or avx512, got '" + v + "'");
          }
        }));
  }

  // --kv-type: the KV cache's element type (SessionOptions::kv_type).
  CLI::Option* kv_type(KVType& target) {
    return app_
        .add_option_function<std::string>(
            "--kv-type",
            [&target](const std::string& v) {
              if (const auto type = kv_type_from_name(v)) target = *type;
            },
            "The KV cache's element type (default f32; f16 and bf16 take half the memory, q8_0 "
            "and fp8 (E4M3, a scale per 32 values) about a quarter, q4_0 about a seventh)")
        ->type_name("f32|f16|bf16|q8_0|q4_0|fp8")
        ->check(check([](const std::string& v) {
          if (!kv_type_from_name(v))
            throw UsageError("--kv-type must be " + kv_type_names() + ", got '" + v + "'");
        }));
  }

  // --pre-tokenizer NAME.
  CLI::Option* pre_tokenizer(VocabularyOptions& target) {
    return text("--pre-tokenizer", target.pretokenizer_fallback,
                "The pre-tokenizer for a file whose tokenizer.ggml.pre hllm does not know "
                "(refused otherwise), e.g. default, llama-bpe, qwen2")
        ->type_name("NAME");
  }

  // The sampling flags of the generating programs: --temp, --top-k, --top-p, --min-p,
  // --repeat-penalty, --repeat-last-n, -s/--seed. --repeat-last-n -1 means the whole context
  // (resolve with repeat_last_n()); --seed -1 a random seed (resolve with seed()).
  void sampling(SamplerParams& p) {
    number<float>(
        "--temp", p.temperature, "a number (0 or less: always the likeliest token)",
        [](float) { return true; }, "Temperature");
    number<int>(
        "--top-k", p.top_k, "a whole number, 0 or more (0: off)", [](int v) { return v >= 0; },
        "Keep the K likeliest tokens (0: off)");
    number<float>(
        "--top-p", p.top_p, "a probability above 0 and at most 1 (1: off)",
        [](float v) { return v > 0 && v <= 1; },
        "Keep the likeliest tokens up to this total probability (1: off)");
    number<float>(
        "--min-p", p.min_p, "a probability from 0 to 1 (0: off)",
        [](float v) { return v >= 0 && v <= 1; },
        "Drop tokens less likely than this times the likeliest (0: off)");
    number<float>(
        "--repeat-penalty", p.repeat_penalty, "a number above 0 (1: off)",
        [](float v) { return v > 0; }, "Penalty for repeated tokens (1: off)");
    repeat_last_n_ = p.repeat_last_n;
    number<int>(
        "--repeat-last-n", repeat_last_n_,
        "a number of tokens, 0 or more, or -1 for the whole context", [](int v) { return v >= -1; },
        "How many recent tokens the repeat penalty looks at (0: off, -1: the context)")
        ->default_str(std::to_string(p.repeat_last_n));
    app_.add_option_function<std::string>(
            "-s,--seed",
            [this](const std::string& v) {
              random_seed_ = v == "-1";
              if (!random_seed_) seed_ = *parse_number<std::uint64_t>(v);
            },
            "Random seed (-1: a random one, printed)")
        ->type_name("N")
        ->default_str(std::to_string(p.seed))
        ->check(check([](const std::string& v) {
          if (v != "-1" && !parse_number<std::uint64_t>(v))
            throw UsageError(
                "--seed must be a whole number from 0 to 18446744073709551615, or "
                "-1 for a random seed, got '" +
                v + "'");
        }));
    seed_ = p.seed;
  }

  // After parse(): the seed to use (drawn now for --seed -1) and whether it was drawn.
  std::uint64_t seed() {
    if (random_seed_) {
      seed_ = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
      random_seed_ = false;
      drawn_seed_ = true;
    }
    return seed_;
  }
  bool seed_was_drawn() const { return drawn_seed_; }
  // After parse(): --repeat-last-n, with -1 resolved to the context length.
  int repeat_last_n(std::size_t context) const {
    return repeat_last_n_ < 0 ? static_cast<int>(context) : repeat_last_n_;
  }

  // Parses the command line, or exits: 0 after --help or --version, 2 after a bad flag or value.
  // llama.cpp's multi-letter short flags (-cnv, -np, -npp, -ntg, -npl, -pps) are accepted as
  // their long forms.
  void parse(int argc, char** argv) {
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) {
      std::string a = argv[i];
      if (a == "-cnv") a = "--conversation";
      if (a == "-np") a = "--parallel";
      if (a == "-npp" || a == "-ntg" || a == "-npl" || a == "-pps") a = "-" + a;
      args.push_back(std::move(a));
    }
    try {
      app_.parse(args);
    } catch (const CLI::CallForHelp& e) {
      std::exit(app_.exit(e));
    } catch (const CLI::CallForAllHelp& e) {
      std::exit(app_.exit(e));
    } catch (const CLI::CallForVersion& e) {
      std::exit(app_.exit(e));
    } catch (const CLI::RequiredError& e) {
      // CLI11 checks the required flags before it reports unknown ones; a misspelt flag is the
      // likelier cause of both, so it is named first.
      const std::vector<std::string> extra = app_.remaining();
      fail(extra.empty() ? std::string(e.what())
                         : "The following argument was not expected: " + extra.front());
    } catch (const CLI::ArgumentMismatch& e) {
      // CLI11 says "--model: 1 required FILE missing"; a flag at the end without its value.
      const std::string what = e.what();
      const auto colon = what.find(": 1 required");
      fail(colon == std::string::npos ? what : what.substr(0, colon) + " needs a value");
    } catch (const CLI::ParseError& e) {
      fail(e.what());
    } catch (const UsageError& e) {
      fail(e.what());
    }
  }

  // Ends the program as a bad command line does.
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' to see the options.\n", program_.c_str(),
                 message.c_str(), program_.c_str());
    std::exit(2);
  }

  void warn(const std::string& message) const {
    std::fprintf(stderr, "%s: warning: %s\n", program_.c_str(), message.c_str());
  }

 private:
  // "-t,--threads" -> "-t": the name the messages use.
  static std::string first_name(const std::string& names) {
    return names.substr(0, names.find(','));
  }
  static std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
  }
  // A CLI11 validator around a check that throws UsageError.
  static CLI::Validator check(std::function<void(const std::string&)> f) {
    return CLI::Validator(
        [f = std::move(f)](std::string& v) {
          f(v);
          return std::string();
        },
        "");
  }

  std::string program_;
  CLI::App app_;
  int repeat_last_n_ = 64;
  bool random_seed_ = false, drawn_seed_ = false;
  std::uint64_t seed_ = 0;
};

}  // namespace hllm::cli
