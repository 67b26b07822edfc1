// Tests for hllm/tokenizer: llama.cpp's tokenizer test vectors (SentencePiece and byte-level
// BPE), round trips, the streaming decoder, special tokens, Unicode categories and every named
// pre-tokenizer.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/generate/chat_template.hpp"
#include "hllm/io/gguf_reader.hpp"
#include "hllm/io/gguf_writer.hpp"
#include "hllm/tokenizer/pretokenizer.hpp"
#include "hllm/tokenizer/streaming_decoder.hpp"
#include "hllm/tokenizer/tokenizer.hpp"
#include "hllm/tokenizer/unicode.hpp"
#include "hllm/tokenizer/vocabulary_gguf.hpp"
#include "test_util.hpp"

namespace {

const std::string kTokenizerDir = HLLM_SHARED_DIR "/tokenizers";

#define SKIP_WITHOUT_SHARED()                                               \
  if (!std::filesystem::exists(kTokenizerDir))                              \
  GTEST_SKIP() << kTokenizerDir                                             \
               << " is absent (it ships beside the clone in CI); skipping " \
                  "the llama.cpp tokenizer vectors"

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<std::int32_t>> ids;
};

// The .inp file holds strings separated by "\n__ggml_vocab_test__\n" (the last one followed by
// it too); the .out file one line of ids per string.
Vectors load_vectors(const std::string& gguf_path) {
  Vectors v;
  const std::string separator = "\n__ggml_vocab_test__\n";
  const std::string inp = read_all(gguf_path + ".inp");
  std::size_t from = 0;
  for (std::size_t at; (at = inp.find(separator, from)) != std::string::npos;) {
    v.inputs.push_back(inp.substr(from, at - from));
    from = at + separator.size();
  }
  if (from < inp.size()) v.inputs.push_back(inp.substr(from));
  std::istringstream out(read_all(gguf_path + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ids(line);
    v.ids.emplace_back();
    for (std::int32_t id; ids >> id;) v.ids.back().push_back(id);
  }
  return v;
}

hllm::Tokenizer load_tokenizer(const std::string& name) {
  return hllm::Tokenizer(
      hllm::vocabulary_from_gguf(hllm::gguf::File::open(kTokenizerDir + "/" + name)));
}

std::string join(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// Every line of llama.cpp's vectors, both ways. Returns how many strings matched.
void check_vectors(const std::string& name) {
  const hllm::Tokenizer tokenizer = load_tokenizer(name);
  const Vectors v = load_vectors(kTokenizerDir + "/" + name);
  ASSERT_EQ(v.inputs.size(), v.ids.size()) << name;
  ASSERT_GT(v.inputs.size(), 30u);
  int passed = 0;
  for (std::size_t i = 0; i < v.inputs.size(); ++i) {
    const auto ids = tokenizer.encode(v.inputs[i], {.add_special = false});
    EXPECT_EQ(join(ids), join(v.ids[i])) << name << " string " << i << ": '" << v.inputs[i] << "'";
    EXPECT_EQ(tokenizer.decode(v.ids[i]), v.inputs[i]) << name << " string " << i;
    passed += join(ids) == join(v.ids[i]);
  }
  std::cout << name << ": " << passed << "/" << v.inputs.size() << " vectors reproduced\n";
}

TEST(TokenizerVectors, LlamaSentencePiece) {
  SKIP_WITHOUT_SHARED();
  check_vectors("ggml-vocab-llama-spm.gguf");
}

TEST(TokenizerVectors, MptByteLevelBpe) {
  SKIP_WITHOUT_SHARED();
  check_vectors("ggml-vocab-mpt.gguf");
}

TEST(Tokenizer, SpecialTokensAndFlags) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(spm.bos(), 1);
  EXPECT_EQ(spm.eos(), 2);
  EXPECT_EQ(spm.vocab_size(), 32000u);
  EXPECT_TRUE(spm.is_control(1));
  EXPECT_FALSE(spm.is_control(15043));
  // add_special puts BOS in front (the vocabulary says add_bos and not add_eos).
  const auto with_bos = spm.encode("Hello", {});
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);
  EXPECT_EQ(std::vector<std::int32_t>(with_bos.begin() + 1, with_bos.end()),
            spm.encode("Hello", {.add_special = false}));
  // parse_special: "<s>" becomes BOS and the text after it gets the SentencePiece space again.
  const auto parsed = spm.encode("<s>Hello</s>", {.add_special = false, .parse_special = true});
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], 1);
  EXPECT_EQ(parsed[1], spm.encode("Hello", {.add_special = false})[0]);
  EXPECT_EQ(parsed[2], 2);
  // Without parse_special the same text is ordinary text.
  const auto plain = spm.encode("<s>Hello</s>", {.add_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_GT(plain.size(), 3u);
  // The positional form of the same calls still works and agrees; {} is EncodeOptions{} (BOS).
  EXPECT_EQ(spm.encode("<s>Hello</s>", false, true), parsed);
  EXPECT_EQ(spm.encode("Hello", true), with_bos);
  EXPECT_EQ(spm.encode("Hello"), with_bos);
  // Control tokens decode to nothing unless asked.
  EXPECT_EQ(spm.decode(parsed), "Hello");
  EXPECT_EQ(spm.token_to_piece(1, true), "<s>");
  EXPECT_EQ(spm.token_to_piece(1), "");
  // Byte tokens decode to their byte.
  EXPECT_EQ(spm.token_to_piece(3 + 0x41), "A");

  const hllm::Tokenizer bpe = load_tokenizer("ggml-vocab-mpt.gguf");
  EXPECT_EQ(bpe.encode("<|endoftext|>", {.parse_special = true}), std::vector<std::int32_t>{0});
  EXPECT_EQ(bpe.decode(std::vector<std::int32_t>{0}, true), "<|endoftext|>");
  EXPECT_EQ(bpe.decode(std::vector<std::int32_t>{0}), "");
}

TEST(Tokenizer, OutOfRangeIdsThrow) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  for (std::int32_t bad : {-1, 32000, 1 << 30}) {
    try {
      (void)spm.decode(std::vector<std::int32_t>{bad});
      ADD_FAILURE() << "no exception for " << bad;
    } catch (const hllm::Error& e) {
      EXPECT_EQ(e.kind(), hllm::ErrorKind::out_of_range);
    }
    EXPECT_THROW((void)spm.token_to_piece(bad), hllm::Error);
    EXPECT_THROW((void)spm.is_control(bad), hllm::Error);
  }
}

TEST(Tokenizer, InvalidUtf8NeverCrashes) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  const hllm::Tokenizer bpe = load_tokenizer("ggml-vocab-mpt.gguf");
  const std::string inputs[] = {"\xff",         "a\x80z",   "\xe2\x96",
                                "\xf0\x9f\x98", "ok \xc3(", std::string("\0\x01 x", 4)};
  for (const std::string& s : inputs) {
    // SentencePiece keeps the raw bytes (byte fallback), so it round-trips exactly.
    EXPECT_EQ(spm.decode(spm.encode(s, {.add_special = false})), s);
    // Byte-level BPE turns each invalid byte into U+FFFD first, as llama.cpp does.
    EXPECT_NO_THROW((void)bpe.decode(bpe.encode(s, {.add_special = false})));
  }
  EXPECT_EQ(bpe.decode(bpe.encode("a\x80z", {.add_special = false})), "a\xEF\xBF\xBDz");
  // Random bytes: nothing throws, and the streaming decoder only ever emits valid UTF-8.
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(static_cast<std::size_t>(rng() % 24), '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    for (const hllm::Tokenizer* t : {&spm, &bpe}) {
      const auto ids = t->encode(bytes, true, true);
      hllm::StreamingDecoder stream(*t);
      std::string text;
      for (std::int32_t id : ids) text += stream.push(id);
      text += stream.flush();
      for (std::size_t offset = 0; offset < text.size();) {
        const int length = hllm::unicode::valid_char_length(text, offset);
        ASSERT_GT(length, 0);
        offset += static_cast<std::size_t>(length);
      }
    }
  }
}

// The invalid-UTF-8 policy, exactly (docs/reliability.md, "Invalid UTF-8"): encoding never rejects
// bytes. SentencePiece keeps every byte that is not part of a valid piece as its byte-fallback
// token <0xXX>, so decode() returns the input bytes unchanged; byte-level BPE replaces each byte
// that does not start a valid sequence with U+FFFD first (one per byte, llama.cpp's
// unicode_cpts_from_utf8), so it encodes exactly like the repaired text. decode() returns the
// bytes the tokens stand for; StreamingDecoder always emits valid UTF-8 (U+FFFD per bad byte).
bool valid_utf8(const std::string& text) {
  for (std::size_t offset = 0; offset < text.size();) {
    const int length = hllm::unicode::valid_char_length(text, offset);
    if (length <= 0) return false;
    offset += static_cast<std::size_t>(length);
  }
  return true;
}

std::string streamed(const hllm::Tokenizer& t, const std::vector<std::int32_t>& ids) {
  hllm::StreamingDecoder stream(t);
  std::string text;
  for (std::int32_t id : ids) text += stream.push(id);
  return text + stream.flush();
}

TEST(Tokenizer, InvalidUtf8PolicyIsExact) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  const hllm::Tokenizer bpe = load_tokenizer("ggml-vocab-mpt.gguf");
  const std::string fffd = "\xEF\xBF\xBD";
  for (int b : {0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFE, 0xFF}) {
    const std::string text = std::string("a") + static_cast<char>(b) + "z";
    SCOPED_TRACE(b);
    const auto ids = spm.encode(text, {.add_special = false});
    EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + b), ids.end());  // <0xXX> is id 3 + XX
    EXPECT_EQ(spm.decode(ids), text);
    EXPECT_EQ(streamed(spm, ids), "a" + fffd + "z");
    EXPECT_EQ(bpe.encode(text, {.add_special = false}),
              bpe.encode("a" + fffd + "z", {.add_special = false}));
  }
  // A truncated 3-byte sequence is two bad bytes: two U+FFFD in BPE, two byte tokens in SPM.
  EXPECT_EQ(bpe.encode("x\xE2\x96y", {.add_special = false}),
            bpe.encode("x" + fffd + fffd + "y", {.add_special = false}));
  EXPECT_EQ(spm.decode(spm.encode("x\xE2\x96y", {.add_special = false})), "x\xE2\x96y");
}

// The same policy through a chat template: message text is copied into the prompt verbatim, so
// invalid bytes cannot break the template's markers, and they reach the tokenizer as above.
TEST(Tokenizer, InvalidUtf8InChatMessages) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  const hllm::Tokenizer bpe = load_tokenizer("ggml-vocab-mpt.gguf");
  const std::vector<hllm::ChatMessage> messages = {
      {"system", "caf\xC3"}, {"user", "\xFF bad \xE2\x96"}, {"assistant", "\x80"}};
  const std::string prompt = hllm::render_chat(hllm::ChatFormat::zephyr, messages, true);
  const auto ids = spm.encode(prompt, {.parse_special = true});
  // Each message still ends with its </s> (EOS, id 2), parsed as the special token.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 3);
  for (int b : {0xC3, 0xFF, 0xE2, 0x96, 0x80})
    EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + b), ids.end()) << b;
  const std::string text = streamed(spm, ids);
  EXPECT_TRUE(valid_utf8(text));
  EXPECT_NE(text.find("caf\xEF\xBF\xBD"), std::string::npos) << text;
  // Byte-level BPE: the ChatML prompt encodes exactly as its repaired twin.
  const std::string chatml = hllm::render_chat(hllm::ChatFormat::chatml, messages, true);
  std::string repaired;
  for (char32_t cp : hllm::unicode::decode_utf8(chatml)) hllm::unicode::append_utf8(repaired, cp);
  EXPECT_EQ(bpe.encode(chatml, {.add_special = false, .parse_special = true}),
            bpe.encode(repaired, {.add_special = false, .parse_special = true}));
  EXPECT_TRUE(
      valid_utf8(streamed(bpe, bpe.encode(chatml, {.add_special = false, .parse_special = true}))));
}

// Feeds ids one at a time and checks that no partial UTF-8 character ever comes out and that
// the pieces add up to decode().
void check_streaming(const hllm::Tokenizer& tokenizer, const std::string& text) {
  const auto ids = tokenizer.encode(text, {.add_special = false});
  hllm::StreamingDecoder stream(tokenizer);
  std::string joined;
  for (std::int32_t id : ids) {
    const std::string piece = stream.push(id);
    std::size_t offset = 0;
    while (offset < piece.size()) {
      const int length = hllm::unicode::valid_char_length(piece, offset);
      ASSERT_GT(length, 0) << "partial or invalid UTF-8 emitted for '" << text << "'";
      offset += static_cast<std::size_t>(length);
    }
    joined += piece;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, tokenizer.decode(ids));
  EXPECT_EQ(joined, text);
}

TEST(StreamingDecoder, HoldsBackPartialCharacters) {
  SKIP_WITHOUT_SHARED();
  const hllm::Tokenizer spm = load_tokenizer("ggml-vocab-llama-spm.gguf");
  const hllm::Tokenizer bpe = load_tokenizer("ggml-vocab-mpt.gguf");
  for (const char* text :
       {"🦙 llamas 😶‍🌫️ and ខលចេញ", "Führer 我想在apple工作", "a\tb\n\n c"}) {
    check_streaming(spm, text);
    check_streaming(bpe, text);
  }
  // The emoji is four byte-fallback tokens (<0xF0> <0x9F> <0xA6> <0x99>) after "▁": the first
  // three must be held back, the fourth releases the whole character.
  const auto ids = spm.encode("🦙", {.add_special = false});
  ASSERT_EQ(ids.size(), 5u);
  hllm::StreamingDecoder stream(spm);
  EXPECT_EQ(stream.push(ids[0]), "");  // the SentencePiece leading space is dropped
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(stream.push(ids[i]), "");
    EXPECT_EQ(stream.pending().size(), i);
  }
  EXPECT_EQ(stream.push(ids[4]), "🦙");
  EXPECT_EQ(stream.flush(), "");
  // flush() turns a character that never completes into one U+FFFD.
  hllm::StreamingDecoder cut(spm);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(cut.push(ids[i]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  // A byte that can never start a character is replaced at once.
  hllm::StreamingDecoder bad(spm);
  EXPECT_EQ(bad.push(3 + 0xFF), "\xEF\xBF\xBD");
}

TEST(Vocabulary, ValidationNamesTheField) {
  hllm::Vocabulary v;
  v.model = "llama";
  v.tokens = {"<unk>", "a", "b"};
  v.bos_id = 0;
  v.scores = {0.0f, 1.0f};
  try {
    v.validate();
    ADD_FAILURE() << "no exception";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.field(), "scores");
  }
  v.scores.clear();
  v.eos_id = 7;
  try {
    v.validate();
    ADD_FAILURE() << "no exception";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.field(), "eos_id");
  }
  v.eos_id = -1;
  v.model = "bert";
  try {
    hllm::Tokenizer t(v);
    ADD_FAILURE() << "no exception";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("bert"), std::string::npos);
  }
}

// A toy SentencePiece vocabulary: merges pick the highest score, ties go left, unknown
// characters fall back to bytes.
TEST(SpmTokenizer, ToyVocabularyMergesByScore) {
  hllm::Vocabulary v;
  v.model = "llama";
  v.tokens = {"<unk>",
              "<s>",
              "</s>",
              "<0x41>",
              "\xE2\x96\x81",
              "a",
              "b",
              "c",
              "ab",
              "bc",
              "abc",
              "\xE2\x96\x81"
              "ab"};
  v.scores = {0, 0, 0, 0, -1, -1, -1, -1, -2, -1.5f, -3, -0.5f};
  v.token_types = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1};
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  const hllm::Tokenizer t(v);
  // "▁abc": pairs ▁a (absent), ab (-2), bc (-1.5) -> bc first; then a+bc "abc" (-3) -> ▁ abc.
  EXPECT_EQ(t.encode("abc", {.add_special = false}), (std::vector<std::int32_t>{4, 10}));
  // "▁ab": ab merges, then ▁+ab = "▁ab".
  EXPECT_EQ(t.encode("ab", {.add_special = false}), (std::vector<std::int32_t>{11}));
  // 'A' is not a token: byte fallback <0x41>.
  EXPECT_EQ(t.encode("A", {.add_special = false}), (std::vector<std::int32_t>{4, 3}));
  EXPECT_EQ(t.decode(std::vector<std::int32_t>{4, 3}), "A");
  // 'Z' has no byte token either: the unknown token.
  EXPECT_EQ(t.encode("Z", {.add_special = false}), (std::vector<std::int32_t>{4, 0}));
}

TEST(Unicode, Categories) {
  using hllm::unicode::flags_of;
  EXPECT_TRUE(flags_of(U'a').is_letter());
  EXPECT_TRUE(flags_of(U'Ж').is_letter());
  EXPECT_TRUE(flags_of(U'我').is_letter());
  EXPECT_TRUE(flags_of(0x1780).is_letter());  // KHMER LETTER KA
  EXPECT_TRUE(flags_of(U'7').is_number());
  EXPECT_TRUE(flags_of(U'٣').is_number());  // ARABIC-INDIC DIGIT THREE
  EXPECT_TRUE(flags_of(U'½').is_number());  // No
  EXPECT_TRUE(flags_of(U'Ⅻ').is_number());  // Nl
  EXPECT_TRUE(flags_of(U'!').is_punctuation());
  EXPECT_TRUE(flags_of(U'«').is_punctuation());
  EXPECT_TRUE(flags_of(U'$').is_symbol());
  EXPECT_TRUE(flags_of(0x1F999).is_symbol());  // 🦙
  EXPECT_TRUE(flags_of(0x0301).is_mark());     // COMBINING ACUTE ACCENT
  for (char32_t ws :
       std::initializer_list<char32_t>{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
                                       0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000})
    EXPECT_TRUE(flags_of(ws).is_whitespace()) << std::hex << static_cast<unsigned>(ws);
  for (char32_t not_ws : {U'\x1C', U'\x1F', U'\x200B', U'\x180E', U'a'})
    EXPECT_FALSE(flags_of(not_ws).is_whitespace()) << std::hex << static_cast<unsigned>(not_ws);
  EXPECT_EQ(flags_of(0x0378).bits, hllm::unicode::undefined);  // unassigned
  EXPECT_EQ(flags_of(0x110000).bits, hllm::unicode::undefined);
  // Invalid bytes decode to one U+FFFD each, as in llama.cpp.
  EXPECT_EQ(hllm::unicode::decode_utf8("a\xE2\x96z"),
            (std::vector<char32_t>{U'a', 0xFFFD, 0xFFFD, U'z'}));
  // GPT-2's byte alphabet: space is 'Ġ' (U+0120), printable ASCII maps to itself.
  const auto& bytes = hllm::unicode::ByteMapping::instance();
  EXPECT_EQ(bytes.text_of(' '), "\xC4\xA0");
  EXPECT_EQ(bytes.text_of('a'), "a");
  for (int b = 0; b < 256; ++b) {
    const auto cps = hllm::unicode::decode_utf8(bytes.text_of(static_cast<unsigned char>(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(bytes.byte_of(cps[0]), b);
  }
}

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  return hllm::tokenizer::PreTokenizer::from_name(pre).split(text);
}
using Words = std::vector<std::string>;

// Expected splits are derived by hand from each regex (see pretokenizer.hpp for the regexes).
TEST(PreTokenizer, Gpt2AndMpt) {
  for (const char* pre : {"gpt-2", "mpt"}) {
    // 's is a contraction; " world" keeps its space; "  " before "x": \s+(?!\S) leaves one
    // space for " x"; digits run together; "!!" is one [^\s\p{L}\p{N}]+ run; trailing spaces
    // at the end go whole.
    EXPECT_EQ(split(pre, "it's world  x 12345!! "),
              (Words{"it", "'s", " world", " ", " x", " 12345", "!!", " "}));
    EXPECT_EQ(split(pre, "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  }
}

TEST(PreTokenizer, Llama3) {
  // (?i:'s...) is case-insensitive; [^\r\n\p{L}\p{N}]?\p{L}+ lets punctuation lead a word;
  // \p{N}{1,3} cuts digits in threes; \s*[\r\n]+ takes spaces plus the newlines.
  EXPECT_EQ(split("llama-bpe", "I'M (ok) 1234567 \n\nhi"),
            (Words{"I", "'M", " (", "ok", ")", " ", "123", "456", "7", " \n\n", "hi"}));
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*': punctuation swallows the newline after it.
  EXPECT_EQ(split("llama-bpe", "x!!\ny"), (Words{"x", "!!\n", "y"}));
  EXPECT_TRUE(hllm::tokenizer::PreTokenizer::from_name("llama-bpe").ignore_merges());
}

TEST(PreTokenizer, Qwen2) {
  // Like Llama 3 but every digit alone.
  EXPECT_EQ(split("qwen2", "ab 123"), (Words{"ab", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, StarcoderAndSmollm) {
  for (const char* pre : {"starcoder", "smollm"}) {
    // \p{N} first isolates each digit, then the GPT-2 regex runs on the rest: " " before "1"
    // is a piece of its own because the digit was already cut out.
    EXPECT_EQ(split(pre, "x 12 y"), (Words{"x", " ", "1", "2", " y"}));
  }
}

TEST(PreTokenizer, Falcon) {
  // [\p{P}\$\+<=>\^~\|`]+ first ("+=" and "`" runs), then GPT-2 (" 12345" is one word),
  // then [0-9]{3} inside each word: "123" matches, and the text around it (" " and "45")
  // becomes pieces of its own.
  EXPECT_EQ(split("falcon", "a+=b `x` 12345"),
            (Words{"a", "+=", "b", " ", "`", "x", "`", " ", "123", "45"}));
  EXPECT_EQ(split("falcon", "12345"), (Words{"123", "45"}));
}

TEST(PreTokenizer, Default) {
  // Punctuation runs first, then GPT-2 (" 12345"), then \p{N}+ ("12345" matched, " " left
  // over), then [0-9]{3} ("123", "45").
  EXPECT_EQ(split("default", "hi, 12345"), (Words{"hi", ",", " ", "123", "45"}));
  EXPECT_EQ(split("", "hi, 12345"), split("default", "hi, 12345"));
  EXPECT_EQ(split("default", "12345"), (Words{"123", "45"}));
}

TEST(PreTokenizer, DeepseekCoder) {
  // [\r\n], then \s?\p{L}+, then \s?\p{P}+, then CJK runs, then single digits.
  EXPECT_EQ(split("deepseek-coder", "ab cd\n12, 我们"),
            (Words{"ab", " cd", "\n", "1", "2", ",", " ", "我们"}));
}

TEST(PreTokenizer, UnknownNameIsUnsupported) {
  try {
    (void)hllm::tokenizer::PreTokenizer::from_name("no-such-pre");
    ADD_FAILURE() << "no exception";
  } catch (const hllm::Error& e) {
    EXPECT_EQ(e.kind(), hllm::ErrorKind::unsupported);
  }
}

}  // namespace

namespace {

// A byte-level BPE vocabulary as a GGUF file: the stand-ins of every byte but those in
// `missing`, "Ġa", and the merge that makes it.
hllm::gguf::File byte_level_vocabulary(const std::vector<int>& missing) {
  const auto& bytes = hllm::unicode::ByteMapping::instance();
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    if (std::find(missing.begin(), missing.end(), b) == missing.end())
      tokens.push_back(bytes.text_of(static_cast<unsigned char>(b)));
  tokens.push_back(bytes.text_of(' ') + "a");
  hllm::gguf::Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "default");
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.merges", std::vector<std::string>{bytes.text_of(' ') + " a"});
  static std::vector<std::vector<std::byte>> keep;  // the File borrows its bytes
  keep.push_back(w.to_bytes());
  return hllm::gguf::File::from_memory(keep.back(), "vocab.gguf");
}

}  // namespace

// Real byte-level vocabularies lack rare bytes (SmolLM2-135M's has no token for 0x04, 0x06,
// 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2): such a vocabulary loads, and encoding drops a byte with
// no token, as llama.cpp does. One without the bytes of ordinary text is no byte-level
// vocabulary and is refused.
TEST(ByteLevelVocabulary, RareBytesMayBeMissingOrdinaryOnesMayNot) {
  const hllm::Tokenizer smollm_like(
      hllm::vocabulary_from_gguf(byte_level_vocabulary({0x04, 0x06, 0x13, 0xF1, 0xF2, 0xFF})));
  const std::vector<std::int32_t> ids = smollm_like.encode("b\x04 a", {.add_special = false});
  ASSERT_EQ(ids.size(), 2u);  // "b", "Ġa": the 0x04 has no token
  EXPECT_EQ(smollm_like.decode(ids), "b a");
  for (const int ordinary : {' ', '\n', 'a', '~'})
    hllm::test::expect_error(
        [&] { (void)hllm::vocabulary_from_gguf(byte_level_vocabulary({ordinary})); },
        hllm::ErrorKind::format, "tokenizer.ggml.model", "vocab.gguf", std::nullopt,
        "none for byte " + std::to_string(ordinary));
}
