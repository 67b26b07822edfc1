#pragma once
// Command-line parsing shared by the example programs: flags in llama.cpp's spelling, each
// value validated with a message that names the flag; a bad command line exits with status 2
// after printing the usage text, never with an exception trace.

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/generate/sampler.hpp"
#include "hllm/simd/isa.hpp"

namespace hllm::cli {

// The KV cache element types the programs offer (--kv-type): a model's KV type is a template
// parameter (ModelSpec), so a program picks one instantiation at run time with with_kv_type.
enum class KvType { f32, f16, bf16, q8_0 };

inline const char* to_string(KvType t) {
  switch (t) {
    case KvType::f16: return "f16";
    case KvType::bf16: return "bf16";
    case KvType::q8_0: return "q8_0";
    default: return "f32";
  }
}

// Calls f.template operator()<KV>() with KV the cache element type named by t.
template <class F>
decltype(auto) with_kv_type(KvType t, F&& f) {
  switch (t) {
    case KvType::f16: return f.template operator()<f16>();
    case KvType::bf16: return f.template operator()<bf16>();
    case KvType::q8_0: return f.template operator()<BlockQ8_0>();
    default: return f.template operator()<float>();
  }
}

class Args {
 public:
  Args(int argc, char** argv, std::string program, std::string usage)
      : argc_(argc), argv_(argv), program_(std::move(program)), usage_(std::move(usage)) {}

  // Advances to the next flag; false at the end.
  bool next() {
    if (++index_ >= argc_) return false;
    flag_ = argv_[index_];
    if (flag_ == "-h" || flag_ == "--help") {
      std::printf("%s", usage_.c_str());
      std::exit(0);
    }
    return true;
  }
  const std::string& flag() const { return flag_; }
  bool is(const char* a, const char* b = nullptr) const {
    return flag_ == a || (b != nullptr && flag_ == b);
  }

  // The flag's value (the next argument).
  std::string value() {
    if (index_ + 1 >= argc_) fail("flag " + flag_ + " needs a value");
    return argv_[++index_];
  }

  // The flag's value as a file path: the empty string is refused here, so that `-m ""` is an
  // error instead of meaning "no model given".
  std::string path() {
    std::string v = value();
    if (v.empty()) fail("flag " + flag_ + " needs a file path, got the empty string");
    return v;
  }

  // The flag's value as a number in [lo, hi].
  template <class T>
  T number(T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) {
    const std::string text = value();
    char* end = nullptr;
    errno = 0;
    T result{};
    bool ok = !text.empty();
    if constexpr (std::is_floating_point_v<T>) {
      const double v = std::strtod(text.c_str(), &end);
      result = static_cast<T>(v);
    } else if constexpr (std::is_signed_v<T>) {
      const long long v = std::strtoll(text.c_str(), &end, 10);
      ok = ok && v >= static_cast<long long>(std::numeric_limits<T>::lowest()) &&
           v <= static_cast<long long>(std::numeric_limits<T>::max());
      result = static_cast<T>(v);
    } else {
      ok = ok && text[0] != '-';
      const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      ok = ok && v <= static_cast<unsigned long long>(std::numeric_limits<T>::max());
      result = static_cast<T>(v);
    }
    ok = ok && errno == 0 && end != nullptr && *end == '\0';
    if (!ok) fail("flag " + flag_ + " expects a number, got '" + text + "'");
    if (!(result >= lo && result <= hi))
      fail("flag " + flag_ + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got " + text);
    return result;
  }

  // The flag's value as an ISA name (scalar, avx2, avx512).
  Isa isa() {
    try {
      return parse_isa(value());
    } catch (const Error& e) {
      fail(e.message());
    }
  }

  // The flag's value as a KV cache element type (f32, f16, bf16, q8_0).
  KvType kv_type() {
    const std::string v = value();
    for (KvType t : {KvType::f32, KvType::f16, KvType::bf16, KvType::q8_0})
      if (v == to_string(t)) return t;
    fail("flag " + flag_ + " must be f32, f16, bf16 or q8_0, got '" + v + "'");
  }

  // Consumes the sampling flags shared by the generating programs (--temp, --top-k, --top-p,
  // --min-p, --repeat-penalty, --seed); false if the current flag is not one of them.
  bool sampling(SamplerParams& p) {
    if (is("--temp"))
      p.temperature = number<float>();
    else if (is("--top-k"))
      p.top_k = number<int>(0);
    else if (is("--top-p"))
      p.top_p = number<float>();
    else if (is("--min-p"))
      p.min_p = number<float>();
    else if (is("--repeat-penalty"))
      p.repeat_penalty = number<float>();
    else if (is("--seed"))
      p.seed = number<std::uint64_t>();
    else
      return false;
    return true;
  }

  // Exits with the usage text unless the sampling parameters are valid.
  void check_sampling(const SamplerParams& p) const {
    try {
      validate_sampler_params(p);
    } catch (const Error& e) {
      fail(e.message());
    }
  }

  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), message.c_str(), usage_.c_str());
    std::exit(2);
  }
  [[noreturn]] void unknown() const { fail("unknown flag '" + flag_ + "'"); }

 private:
  int argc_;
  char** argv_;
  std::string program_, usage_;
  int index_ = 0;
  std::string flag_;
};

}  // namespace hllm::cli
