#pragma once
// Part of hllm's implementation (hllm/implementation.hpp): the scalar kernels and their table.
// Compiled once per program.

#include "hllm/implementation/kernel_tables.hpp"
#include "hllm/kernels/isa_scalar.hpp"

namespace hllm::kernels::detail {

const KernelTable& scalar_table() {
  static const KernelTable made = HLLM_ATTENTION(scalar, HLLM_KERNEL_TABLE(scalar, scalar));
  return made;
}

}  // namespace hllm::kernels::detail
