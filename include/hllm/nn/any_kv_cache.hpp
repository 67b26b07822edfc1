#pragma once
// A KV cache whose element type is chosen at run time: one of the six KVCache<KV>
// instantiations, held in a variant. A Session owns one, so a single loaded model can serve an
// f32 session beside a Q8_0 one; the model code stays templated on the element type and visit()
// picks the instantiation once per forward pass, not per row.

#include <cstddef>
#include <string>
#include <utility>
#include <variant>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/nn/kv_cache.hpp"

namespace hllm {

class AnyKVCache {
 public:
  using Variant = std::variant<KVCache<float>, KVCache<f16>, KVCache<bf16>, KVCache<BlockQ8_0>,
                               KVCache<BlockQ4_0>, KVCache<BlockFP8>>;

  // The same checks and errors as KVCache's constructor.
  AnyKVCache(KVType type, std::size_t n_layers, std::size_t n_kv_heads, std::size_t head_dim,
             std::size_t capacity, KVValues values = KVValues::separate)
      : cache_(make(type, n_layers, n_kv_heads, head_dim, capacity, values)) {}

  // f(KVCache<KV>&) for the element type this cache holds.
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), cache_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), cache_);
  }

  KVType type() const noexcept {
    return visit([](const auto& c) { return kv_type_of<element_of<decltype(c)>>(); });
  }
  std::size_t n_layers() const noexcept {
    return visit([](const auto& c) { return c.n_layers(); });
  }
  std::size_t n_kv_heads() const noexcept {
    return visit([](const auto& c) { return c.n_kv_heads(); });
  }
  std::size_t head_dim() const noexcept {
    return visit([](const auto& c) { return c.head_dim(); });
  }
  std::size_t capacity() const noexcept {
    return visit([](const auto& c) { return c.capacity(); });
  }
  // Positions [0, length) hold committed tokens.
  std::size_t length() const noexcept {
    return visit([](const auto& c) { return c.length(); });
  }
  std::size_t bytes() const noexcept {
    return visit([](const auto& c) { return c.bytes(); });
  }
  KVValues value_rows() const noexcept {
    return visit([](const auto& c) { return c.value_rows(); });
  }

  void truncate(std::size_t length) {
    visit([&](auto& c) { c.truncate(length); });
  }
  void clear() noexcept {
    visit([](auto& c) { c.clear(); });
  }

  // The typed cache; throws invalid_argument if this one holds another element type.
  template <class KV>
  const KVCache<KV>& get() const {
    if (const auto* typed = std::get_if<KVCache<KV>>(&cache_)) return *typed;
    throw Error(ErrorKind::invalid_argument, std::string("the KV cache holds ") +
                                                 to_string(type()) + ", not " +
                                                 to_string(kv_type_of<KV>()));
  }

 private:
  template <class Cache>
  using element_of = typename std::remove_cvref_t<Cache>::element_type;

  static Variant make(KVType type, std::size_t n_layers, std::size_t n_kv_heads,
                      std::size_t head_dim, std::size_t capacity, KVValues values) {
    return with_kv_element(type, [&]<class KV>() {
      return Variant(std::in_place_type<KVCache<KV>>, n_layers, n_kv_heads, head_dim, capacity,
                     values);
    });
  }

  Variant cache_;
};

}  // namespace hllm
