#pragma once
// TokenIndex: token text -> id, the lookup every tokenizer does in its inner loop.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "hllm/core/error.hpp"
#include "hllm/tokenizer/vocabulary.hpp"

namespace hllm::tokenizer {

// Transparent hashing lets find() take a string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

class TokenIndex {
 public:
  // Empty token texts are renamed "[EMPTY_<id>]" and duplicate texts rejected, as llama.cpp
  // does: an empty text would match everywhere and a duplicate makes text -> id ambiguous.
  explicit TokenIndex(const Vocabulary& vocab) {
    ids_.reserve(vocab.size());
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const auto id = static_cast<std::int32_t>(i);
      std::string text =
          vocab.tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : vocab.tokens[i];
      const auto [it, inserted] = ids_.emplace(std::move(text), id);
      if (!inserted)
        throw Error(ErrorKind::format,
                    "duplicate token text '" + it->first + "' at ids " +
                        std::to_string(it->second) + " and " + std::to_string(id),
                    {}, "tokens");
    }
  }

  // The id whose text is exactly `text`, or -1.
  std::int32_t find(std::string_view text) const {
    const auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> ids_;
};

}  // namespace hllm::tokenizer
