#pragma once
// The kernel bodies, compiled once per ISA. The *-inl.hpp files (no include guards) are included
// once per ISA, each time inside namespace hllm::kernels::<isa> and a target region
// (simd/target.hpp), so every ISA gets its own symbols and the linker never merges two ISAs'
// versions: kernels/isa_scalar.hpp (scalar), isa_avx2.hpp (avx2, avx_vnni) and isa_avx512.hpp
// (avx512, avx512_vnni, avx512_bf16), one header per group that the implementation compiles in a
// translation unit of its own (hllm/implementation/). Standard headers come first
// (kernels/isa_headers.hpp), never inside a target region.
//
// Everything here is inline: the implementation includes these headers to fill the kernel
// tables (once per program), and tests or benchmarks that call one ISA's kernel directly
// (hllm::kernels::avx512::matmul_q8_0) may include this header, or one ISA's, in any
// translation unit. The rest of the library reaches the kernels only through the table
// (kernels/dispatch.hpp), so it never includes them: each includer compiles the kernels it
// uses.

#include "hllm/kernels/isa_avx2.hpp"
#include "hllm/kernels/isa_avx512.hpp"
#include "hllm/kernels/isa_scalar.hpp"
