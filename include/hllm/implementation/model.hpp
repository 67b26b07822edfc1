#pragma once
// Part of hllm's implementation (hllm/implementation.hpp): table_for, which kernels/dispatch.hpp
// declares, and the model code for the dynamic spec, which the headers declare extern. Compiled
// once per program.

#include <string>

#include "hllm/core/error.hpp"
#include "hllm/implementation/kernel_tables.hpp"
#include "hllm/model/llama.hpp"
#include "hllm/model/session.hpp"
#include "hllm/nn/kv_cache.hpp"
#include "hllm/simd/cpu_features.hpp"
#include "hllm/simd/isa.hpp"

namespace hllm::kernels {

// Declared in kernels/dispatch.hpp. Not inline: one definition per program, here.
const KernelTable& table_for(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(ErrorKind::unsupported,
                std::string("this CPU cannot run the ") + to_string(isa) + " kernels");
#if HLLM_X86
  switch (isa) {
    case Isa::avx512: return detail::avx512_table();
    case Isa::avx2: return detail::avx2_table();
    case Isa::avx_vnni: return detail::avx_vnni_table();
    default: break;
  }
#endif
  return detail::scalar_table();
}

}  // namespace hllm::kernels

namespace hllm {
template class KVCache<float>;
template class KVCache<f16>;
template class KVCache<bf16>;
template class KVCache<BlockQ8_0>;
template class KVCache<BlockQ4_0>;
template class KVCache<BlockFP8>;
template class Llama<DynamicSpec>;
template class Session<DynamicSpec>;
}  // namespace hllm
