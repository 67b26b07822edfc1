#pragma once
// A weight matrix as the model sees it: an element type, a pointer to its bytes (in the mapped
// file or in an owning buffer elsewhere), and its shape. Rows are output features, columns input
// features, row-major: GGUF's ne[0] is the column count. The type is a runtime value because
// real files mix types (a Q4_K_M file holds Q4_K and Q6_K tensors).

#include <cstddef>
#include <cstdint>
#include <string>

#include <type_traits>
#include <utility>

#include "hllm/core/error.hpp"
#include "hllm/core/half.hpp"
#include "hllm/core/layouts.hpp"

namespace hllm {

struct WeightTensor {
  DType type = DType::f32;
  const void* data = nullptr;
  std::size_t rows = 0;  // output features (1 for a vector such as a norm weight)
  std::size_t cols = 0;  // input features
  std::string name;      // for error messages: which tensor was wrong
  // > 0: the model reads it as views of this many rows each (row_range; latent attention's
  // per-head W_kb and W_vb), so a repacked layout must keep each view's rows whole.
  std::size_t view_rows = 0;

  // The rows a repacked layout must hold whole: a view's, or the tensor's.
  std::size_t layout_rows() const noexcept { return view_rows != 0 ? view_rows : rows; }

  bool empty() const noexcept { return data == nullptr; }

  std::size_t bytes() const {
    DTypeInfo info{};
    if (!dtype_info(type, info)) throw Error(ErrorKind::unsupported, "unknown type", {}, name);
    return rows * (cols / info.block_elements) * info.block_bytes;
  }

  // Rows [first, first + count) as a tensor of their own, a view with no copy (a part of a
  // fused file tensor: Phi-3's q|k|v). Throws internal past the tensor's rows.
  WeightTensor row_range(std::size_t first, std::size_t count, std::string part_name) const {
    DTypeInfo info{};
    if (!dtype_info(type, info)) throw Error(ErrorKind::unsupported, "unknown type", {}, name);
    if (first > rows || count > rows - first)
      throw Error(ErrorKind::internal, "row range past the tensor", {}, name);
    if (const LayoutSpec* layout = repacked_layout(type);
        layout != nullptr && (first % layout->group_rows != 0 || count % layout->group_rows != 0))
      throw Error(ErrorKind::internal, "row range splits a repacked layout's row group", {}, name);
    const std::size_t row_bytes = (cols / info.block_elements) * info.block_bytes;
    return {type, static_cast<const std::byte*>(data) + first * row_bytes, count, cols,
            std::move(part_name)};
  }

  // Typed access for plain floating-point tensors; a mismatch is a bug in the caller.
  template <class T>
  const T* as() const {
    if (type != dtype_of<T>())
      throw Error(ErrorKind::internal,
                  "tensor is " + dtype_name(type) + ", not " + dtype_name(dtype_of<T>()), {}, name);
    return static_cast<const T*>(data);
  }

  template <class T>
  static constexpr DType dtype_of();
};

template <class T>
constexpr DType WeightTensor::dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, f16>)
    return DType::f16;
  else if constexpr (std::is_same_v<T, bf16>)
    return DType::bf16;
  else
    static_assert(sizeof(T) == 0, "not a plain floating-point element type");
}
}  // namespace hllm
