// hllm-info FILE: what a GGUF file holds, like gguf-dump: version, alignment, every metadata
// key with its type and value (long arrays abbreviated), and the tensor table.

#include <cstdio>
#include <exception>
#include <string>

#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/gguf_reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: hllm-info FILE.gguf\n");
    return argc == 2 ? 0 : 1;
  }
  try {
    const hllm::gguf::File f = hllm::gguf::File::open(argv[1]);
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
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hllm-info: %s\n", e.what());
    return 1;
  }
}
