#pragma once
// The software prefetch of a decode's weight stream, the same on every ISA (a prefetch changes
// no result): the integer panel decodes (kernels/matmul_interleaved-inl.hpp), the F32/F16 panel
// decode (kernels/matmul_float-inl.hpp) and the vdpbf16ps decode (kernels/gemm_bf16-inl.hpp)
// call it as they read each unit or line, the integer panel GEMM (kernels/gemm_panels-inl.hpp)
// once per K-chunk for the next one.

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hllm::kernels {

// Asks for the lines `distance` past `bytes` bytes at `unit` into L2 (prefetcht2): a
// decode reads its panels front to back, and on Intel's cores the hardware prefetcher alone kept
// the Q4_0, Q4_1 and Q8_0 panel decodes 10-20% below what they read with this, and asking for
// the lines in L1 (prefetcht0, 2 KiB ahead) 2-15% below. With it the F16 panels' decode ran 4-28%
// faster and the vdpbf16ps decode 24-42% on an Emerald Rapids Xeon; Q6_K's decode asks too (5-30%
// faster there), Q4_K's and Q5_K's with AVX-512 only (docs/performance.md, "Layouts and kernels"
// and "Decodes that did not ask for their stream"). The address may lie past the matrix (the next
// group's panels follow it; a prefetch never faults), so it is formed as an integer.
inline constexpr std::size_t kStreamPrefetchBytes = 3072;
// How far ahead a pass over the panels for `tokens` tokens asks (decode_group16_tokens): 2 KiB
// per token, at least the one-token distance. A pass of 8 tokens with AVX-512 ran 1.1-1.7×
// faster from DRAM asking 16 KiB ahead instead of 3 on a Zen 5 (Q4_0, Q4_1, Q8_0); 2 tokens asking
// 16 KiB ahead were slower than with 3 KiB in the batched decode, and one token's decode of a whole
// model no faster with a longer distance (docs/performance.md, small batches).
inline constexpr std::size_t stream_prefetch_bytes(std::size_t tokens) {
  return std::max(kStreamPrefetchBytes, 2048 * tokens);
}
// The prefetch's locality: kIntoL2 (prefetcht2, the stream's), or kIntoL1 (prefetcht0) for a pass
// whose arithmetic per line is long enough to hide the L2 latency ahead of it (Q6_K's decode of
// more than 4 tokens asks for the next unit's half so).
inline constexpr int kIntoL2 = 1, kIntoL1 = 3;
template <int kLocality = kIntoL2>
inline void prefetch_stream_ahead(const void* unit, std::size_t bytes,
                                  std::size_t distance = kStreamPrefetchBytes) {
  const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(unit) + distance;
  for (std::size_t line = 0; line < bytes; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + line), 0, kLocality);
}

}  // namespace hllm::kernels
