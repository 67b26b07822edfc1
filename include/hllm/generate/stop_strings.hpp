#pragma once
// Stop strings over streamed text: generation ends when the generated text contains one of the
// strings, and the text up to it is all the caller sees (the string itself is not part of the
// output, as llama-server and the OpenAI API do). While streaming, a tail that could still grow
// into a stop string is held back, so a caller never receives text it must later retract.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"

namespace hllm {

class StopStringMatcher {
 public:
  // Throws invalid_argument for an empty string (it would match before any text).
  explicit StopStringMatcher(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {
    for (const std::string& s : stops_) {
      if (s.empty()) throw Error(ErrorKind::invalid_argument, "a stop string is empty");
      longest_ = std::max(longest_, s.size());
    }
  }

  bool empty() const noexcept { return stops_.empty(); }

  // What push() makes of a new piece of text.
  struct Step {
    std::string text;   // safe to emit now: it cannot be part of a stop string
    bool stop = false;  // a stop string was found; `text` ends just before it
  };

  // Adds a piece of generated text. After a stop, further pieces are ignored.
  Step push(std::string_view piece) {
    Step step;
    if (stopped_) return step;
    // A match may begin in the held-back tail, so search from there (never before it: emitted
    // text was checked to hold no complete match and no prefix of one).
    held_.append(piece);
    std::optional<std::size_t> first;
    for (const std::string& s : stops_) {
      const std::size_t at = held_.find(s);
      if (at != std::string::npos && (!first || at < *first)) first = at;
    }
    if (first) {
      step.text = held_.substr(0, *first);
      step.stop = stopped_ = true;
      held_.clear();
      return step;
    }
    const std::size_t keep = partial_match_length();
    step.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return step;
  }

  // Ends the stream without a stop: the held-back tail, which no stop string followed.
  std::string finish() {
    std::string tail;
    tail.swap(held_);
    return tail;
  }

  bool stopped() const noexcept { return stopped_; }

 private:
  // The longest suffix of held_ that is a proper prefix of some stop string.
  std::size_t partial_match_length() const {
    const std::size_t most = std::min(held_.size(), longest_ - 1);
    for (std::size_t n = most; n > 0; --n) {
      const std::string_view tail = std::string_view(held_).substr(held_.size() - n);
      for (const std::string& s : stops_)
        if (s.size() > n && std::string_view(s).substr(0, n) == tail) return n;
    }
    return 0;
  }

  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::string held_;  // text not emitted yet: a tail that may begin a stop string
  bool stopped_ = false;
};

}  // namespace hllm
