#pragma once
// What every ISA's kernel bodies use: the standard headers and hllm's own, included before any
// target region (simd/target.hpp), never inside one. kernels/isa_scalar.hpp, isa_avx2.hpp and
// isa_avx512.hpp include this first.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "hllm/core/aligned_buffer.hpp"
#include "hllm/core/bf16_panels.hpp"
#include "hllm/core/dtype.hpp"
#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/quant_blocks.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"
#include "hllm/kernels/scratch.hpp"
#include "hllm/kernels/stream_prefetch.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/intrinsics.hpp"
#include "hllm/simd/isa.hpp"
#include "hllm/simd/target.hpp"
