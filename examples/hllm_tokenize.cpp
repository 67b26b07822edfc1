// hllm-tokenize: tokenizes a text file with the tokenizer stored in a GGUF file, or turns ids
// back into text.
//
//   hllm-tokenize -m MODEL.gguf -f TEXT [--no-bos] [--parse-special]   prints ids on one line
//   hllm-tokenize -m MODEL.gguf -f IDS --detokenize [--special]        prints the text
//
// The text file is read as raw bytes (no newline is added or removed), so any byte sequence,
// invalid UTF-8 included, can be tokenized.

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace {

void usage() {
  std::cerr << "usage: hllm-tokenize -m MODEL.gguf -f FILE|- [--no-bos] [--parse-special]\n"
               "                     [--pre-tokenizer NAME]\n"
               "       hllm-tokenize -m MODEL.gguf -f FILE|- --detokenize [--special]\n";
}

// The text to tokenize: the file, or standard input for "-"; both bounded.
std::string read_input(const std::string& path) {
  return path == "-" ? hllm::io::read_stream(std::cin, "standard input")
                     : hllm::io::read_text_file(path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, text_path;
  hllm::VocabularyOptions vocabulary;
  bool add_bos = true, parse_special = false, detokenize = false, special = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "-m" || arg == "-f") && i + 1 < argc) {
      (arg == "-m" ? model_path : text_path) = argv[++i];
    } else if (arg == "--pre-tokenizer" && i + 1 < argc) {
      vocabulary.pretokenizer_fallback = argv[++i];
    } else if (arg == "--no-bos") {
      add_bos = false;
    } else if (arg == "--parse-special") {
      parse_special = true;
    } else if (arg == "--detokenize") {
      detokenize = true;
    } else if (arg == "--special") {
      special = true;
    } else {
      usage();
      return 2;
    }
  }
  if (model_path.empty() || text_path.empty()) {
    std::cerr << "hllm-tokenize: -m and -f need a file path (-f - reads standard input)\n";
    usage();
    return 2;
  }
  try {
    const hllm::Tokenizer tokenizer(
        hllm::vocabulary_from_gguf(hllm::gguf::File::open(model_path), vocabulary));
    const std::string input = read_input(text_path);
    if (detokenize) {
      std::vector<std::int32_t> ids;
      std::istringstream in(input);
      long long id = 0;
      while (in >> id) {
        if (id < INT32_MIN || id > INT32_MAX)
          throw hllm::Error(hllm::ErrorKind::out_of_range, "token id " + std::to_string(id));
        ids.push_back(static_cast<std::int32_t>(id));
      }
      if (!in.eof())
        throw hllm::Error(hllm::ErrorKind::invalid_argument, "not a list of ids", text_path);
      std::cout << tokenizer.decode(ids, special);
    } else {
      // --no-bos turns off BOS only; EOS still follows the vocabulary's add_eos flag.
      std::vector<std::int32_t> ids = tokenizer.encode(input, true, parse_special);
      if (!add_bos && tokenizer.vocabulary().add_bos && !ids.empty() &&
          ids.front() == tokenizer.bos())
        ids.erase(ids.begin());
      for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << '\n';
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
  return 0;
}
