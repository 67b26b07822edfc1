#pragma once
// A model's logits of a whole prompt against a reference's: by one prefill, and by one decode
// per token, on every ISA this CPU has (gtest expectations, so every ISA reports).

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "test_util.hpp"

namespace hllm::test {

// expected: [tokens][vocab]; the tolerance is all_close's default, 1e-4 of its scale.
inline void expect_prefill_and_decode_logits(const Llama<>& model,
                                             const std::vector<std::int32_t>& tokens,
                                             std::span<const float> expected) {
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(to_string(isa));
    Session<> prefill(model, {.threads = 2, .isa = isa});
    EXPECT_TRUE(all_close(prefill.prefill(tokens, Logits::all), expected));
    Session<> decode(model, {.threads = 2, .isa = isa});
    std::vector<float> decoded;
    for (std::int32_t t : tokens) {
      const auto logits = decode.decode(t);
      decoded.insert(decoded.end(), logits.begin(), logits.end());
    }
    EXPECT_TRUE(all_close(decoded, expected));
  }
}

}  // namespace hllm::test
