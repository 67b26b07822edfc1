// hllm-info FILE: what a GGUF file holds, like gguf-dump: version, alignment, every metadata
// key with its type and value (long arrays abbreviated), and the tensor table. With
// --check-finite it also reads every tensor and reports each one holding a NaN or an infinity
// (exit status 1 if any does).

#include <cstdio>
#include <exception>
#include <string>

#include "common/cli.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/weight_tensor.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/model/finite_check.hpp"

int main(int argc, char** argv) {
  std::string path;
  bool check_finite = false;
  hllm::cli::Parser cli("hllm-info", "What a GGUF file holds: metadata and tensors.");
  cli.app()
      .add_option("FILE", path, "The GGUF file")
      ->required()
      ->type_name("FILE.gguf")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v.empty())
              throw hllm::cli::UsageError("FILE needs a file path, got the empty string");
            return {};
          },
          ""));
  cli.flag("--check-finite", check_finite,
           "Read every tensor and report each one holding NaN or Inf (exit status 1 if any)");
  cli.parse(argc, argv);
  try {
    const hllm::gguf::File f = hllm::gguf::File::open(path);
    std::printf("file:      %s\n", f.path().c_str());
    std::printf("version:   %u\n", f.version());
    std::printf("alignment: %zu\n", f.alignment());
    std::printf("data at:   %llu\n", static_cast<unsigned long long>(f.data_offset()));
    const auto keys = f.keys();
    std::printf("\nmetadata (%zu keys):\n", keys.size());
    for (const std::string& key : keys) {
      std::string type = hllm::gguf::to_string(f.type_of(key));
      if (f.type_of(key) == hllm::gguf::ValueType::array)
        type += std::string("<") + hllm::gguf::to_string(f.array_type(key)) + ">";
      std::printf("  %-44s %-14s %s\n", key.c_str(), type.c_str(), f.value_to_string(key).c_str());
    }
    std::printf("\ntensors (%zu):\n", f.tensors().size());
    std::printf("  %-32s %-6s %-22s %12s %12s\n", "name", "type", "shape (ne0, ne1, ...)", "offset",
                "bytes");
    unsigned long long total = 0;
    for (const auto& t : f.tensors()) {
      std::string shape;
      for (std::size_t d = 0; d < t.dims.size(); ++d)
        shape += (d ? ", " : "") + std::to_string(t.dims[d]);
      std::printf("  %-32s %-6s %-22s %12llu %12llu\n", t.name.c_str(),
                  hllm::dtype_name(t.type).c_str(), ("[" + shape + "]").c_str(),
                  static_cast<unsigned long long>(t.offset),
                  static_cast<unsigned long long>(t.size_bytes));
      total += t.size_bytes;
    }
    std::printf("  total tensor bytes: %llu\n", total);
    if (!check_finite) return 0;
    std::size_t bad = 0;
    for (const auto& t : f.tensors()) {
      std::size_t rows = 1;
      for (std::size_t d = 1; d < t.dims.size(); ++d) rows *= static_cast<std::size_t>(t.dims[d]);
      try {
        hllm::check_finite({t.type, t.data, rows, static_cast<std::size_t>(t.dims[0]), t.name},
                           f.path(), t.name, f.data_offset() + t.offset);
      } catch (const hllm::Error& e) {
        std::printf("  %s\n", e.what());
        ++bad;
      }
    }
    std::printf("\nfinite check: %zu of %zu tensors hold NaN or Inf\n", bad, f.tensors().size());
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-info: %s\n", e.what());
    return 1;
  }
}
