// hllm-tokenize: tokenizes text with the tokenizer stored in a GGUF file, or turns ids back
// into text.
//
//   hllm-tokenize -m MODEL.gguf [-p TEXT | -f FILE | --stdin] [--no-bos] [--parse-special]
//   hllm-tokenize -m MODEL.gguf [-p IDS | -f FILE | --stdin] --detokenize [--special]
//
// Prints the ids on one line (or the text). Without -p or -f the input is standard input, as
// with --stdin or -f -. A file or stdin is read as raw bytes (no newline is added or removed),
// so any byte sequence, invalid UTF-8 included, can be tokenized.

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "hllm/core/error.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"

namespace {

// The text to tokenize: the file, or standard input for "-"; both bounded.
std::string read_input(const std::string& path) {
  return path == "-" ? hllm::io::read_stream(std::cin, "standard input")
                     : hllm::io::read_text_file(path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, text_path, text;
  hllm::VocabularyOptions vocabulary;
  bool no_bos = false, parse_special = false, detokenize = false, special = false;
  bool from_stdin = false;
  hllm::cli::Parser cli("hllm-tokenize",
                        "Tokenizes text with a GGUF file's tokenizer, or turns ids into text.");
  cli.path("-m,--model", model_path, "Model file whose tokenizer to use (required)")->required();
  auto* prompt = cli.text("-p,--prompt", text, "The text (or, with --detokenize, the ids)");
  auto* file = cli.path("-f,--file", text_path, "Read the text from a file (-: standard input)");
  cli.flag("--stdin", from_stdin, "Read the text from standard input (the default)");
  cli.flag("--no-bos", no_bos, "Do not add BOS in front");
  cli.flag("--parse-special", parse_special,
           "Turn the texts of control tokens (<s>, <|im_end|>, ...) into their ids");
  cli.flag("--detokenize", detokenize, "Turn whitespace-separated ids into text");
  cli.flag("--special", special, "With --detokenize: write control tokens' texts too");
  cli.pre_tokenizer(vocabulary);
  cli.parse(argc, argv);
  if (int(prompt->count() > 0) + int(file->count() > 0) + int(from_stdin) > 1)
    cli.fail("give one of -p TEXT, -f FILE and --stdin");
  const bool add_bos = !no_bos;
  if (prompt->count() == 0 && file->count() == 0) text_path = "-";
  try {
    const hllm::Tokenizer tokenizer(
        hllm::vocabulary_from_gguf(hllm::gguf::File::open(model_path), vocabulary));
    const std::string input = prompt->count() > 0 ? text : read_input(text_path);
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
        throw hllm::Error(hllm::ErrorKind::invalid_argument, "not a list of ids",
                          prompt->count() > 0 ? "-p" : text_path);
      std::cout << tokenizer.decode(ids, special);
    } else {
      // --no-bos turns off BOS only; EOS still follows the vocabulary's add_eos flag.
      std::vector<std::int32_t> ids = tokenizer.encode(input, {.parse_special = parse_special});
      if (!add_bos && tokenizer.vocabulary().add_bos && !ids.empty() &&
          ids.front() == tokenizer.bos())
        ids.erase(ids.begin());
      for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << '\n';
    }
  } catch (const std::exception& e) {
    std::cerr << "hllm-tokenize: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
