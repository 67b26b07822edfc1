#pragma once
// Non-owning tensor views with extents and strides, in the spirit of std::mdspan (which GCC 12
// lacks). An extent is either a compile-time number or `hllm::dynamic`; a fixed extent costs no
// storage and folds into constants, a dynamic one is one integer. Strides are always runtime so
// a view can describe a slice (a head inside a token, a row inside a cache) without copying.

#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <type_traits>

#include "hllm/core/error.hpp"

namespace hllm {

inline constexpr std::size_t dynamic = std::numeric_limits<std::size_t>::max();

template <std::size_t... Static>
class Extents {
 public:
  static constexpr std::size_t kRank = sizeof...(Static);
  static constexpr std::size_t kDynamicCount = ((Static == dynamic ? 1 : 0) + ... + 0);

  constexpr Extents() requires(kDynamicCount == 0) = default;
  // Takes exactly the dynamic extents, in order.
  template <class... Sizes>
  requires(sizeof...(Sizes) == kDynamicCount && kDynamicCount > 0 &&
           (std::is_integral_v<Sizes> && ...)) constexpr explicit Extents(Sizes... sizes)
      : dynamic_{static_cast<std::size_t>(sizes)...} {}

  static constexpr std::size_t rank() noexcept { return kRank; }
  static constexpr std::size_t static_extent(std::size_t i) noexcept { return kStatic[i]; }
  constexpr std::size_t extent(std::size_t i) const noexcept {
    return kStatic[i] == dynamic ? dynamic_[dynamic_index(i)] : kStatic[i];
  }
  constexpr std::size_t size() const noexcept {
    std::size_t n = 1;
    for (std::size_t i = 0; i < kRank; ++i) n *= extent(i);
    return n;
  }

 private:
  static constexpr std::array<std::size_t, kRank> kStatic{Static...};
  static constexpr std::size_t dynamic_index(std::size_t i) noexcept {
    std::size_t k = 0;
    for (std::size_t j = 0; j < i; ++j) k += kStatic[j] == dynamic ? 1 : 0;
    return k;
  }
  [[no_unique_address]] std::array<std::size_t, kDynamicCount> dynamic_{};
};

template <class T, class Ext>
class TensorView {
 public:
  using element_type = T;
  using extents_type = Ext;
  static constexpr std::size_t kRank = Ext::kRank;

  constexpr TensorView() = default;
  // Row-major (C order) strides.
  constexpr TensorView(T* data, Ext extents) : data_(data), extents_(extents) {
    std::size_t stride = 1;
    for (std::size_t i = kRank; i-- > 0;) {
      strides_[i] = stride;
      stride *= extents_.extent(i);
    }
  }
  constexpr TensorView(T* data, Ext extents, std::array<std::size_t, kRank> strides)
      : data_(data), extents_(extents), strides_(strides) {}
  // A view of const T from a view of T.
  template <class U>
  requires(std::is_same_v<const U, T> &&
           !std::is_same_v<U, T>) constexpr TensorView(const TensorView<U, Ext>& other)
      : data_(other.data()), extents_(other.extents()), strides_(other.strides()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr const Ext& extents() const noexcept { return extents_; }
  constexpr std::size_t extent(std::size_t i) const noexcept { return extents_.extent(i); }
  constexpr std::size_t stride(std::size_t i) const noexcept { return strides_[i]; }
  constexpr const std::array<std::size_t, kRank>& strides() const noexcept { return strides_; }
  constexpr std::size_t size() const noexcept { return extents_.size(); }
  constexpr bool is_contiguous() const noexcept {
    std::size_t expected = 1;
    for (std::size_t i = kRank; i-- > 0;) {
      if (extents_.extent(i) != 1 && strides_[i] != expected) return false;
      expected *= extents_.extent(i);
    }
    return true;
  }

  template <class... Index>
  requires(sizeof...(Index) == kRank) constexpr T& operator()(Index... index) const noexcept {
    const std::array<std::size_t, kRank> idx{static_cast<std::size_t>(index)...};
    std::size_t offset = 0;
    for (std::size_t i = 0; i < kRank; ++i) offset += idx[i] * strides_[i];
    return data_[offset];
  }

  // The innermost dimension of row `r` of a rank-2 view, as a span (requires unit inner stride).
  constexpr std::span<T> row(std::size_t r) const noexcept requires(kRank == 2) {
    return {data_ + r * strides_[0], extents_.extent(1)};
  }

 private:
  T* data_ = nullptr;
  [[no_unique_address]] Ext extents_{};
  std::array<std::size_t, kRank> strides_{};
};

template <class T>
using VectorView = TensorView<T, Extents<dynamic>>;
template <class T>
using MatrixView = TensorView<T, Extents<dynamic, dynamic>>;
template <class T>
using Tensor3View = TensorView<T, Extents<dynamic, dynamic, dynamic>>;

template <class T>
constexpr MatrixView<T> matrix_view(T* data, std::size_t rows, std::size_t cols) {
  return MatrixView<T>(data, Extents<dynamic, dynamic>(rows, cols));
}

// A compile-time size when a config fixes it, else one runtime integer: `Size<N>{n}()` folds
// to the constant N (after checking n == N at construction) and costs no storage.
template <std::size_t N>
struct Size {
  constexpr explicit Size(std::size_t n) {
    if (n != N)
      throw Error(ErrorKind::invalid_argument, "dimension " + std::to_string(n) +
                                                   " does not match the fixed extent " +
                                                   std::to_string(N) + " of this model type");
  }
  constexpr std::size_t operator()() const noexcept { return N; }
};
template <>
struct Size<dynamic> {
  constexpr explicit Size(std::size_t n) : value(n) {}
  constexpr std::size_t operator()() const noexcept { return value; }
  std::size_t value;
};

}  // namespace hllm
