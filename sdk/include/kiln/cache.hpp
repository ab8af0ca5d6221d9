/**
 * @file cache.hpp
 * @brief C++ wrapper for cache-policy plugins (block accounting for one cache kind).
 *        Included by kiln/plugin.hpp.
 */
#pragma once

#include <kiln/kiln_plugin.h>
#include <kiln/plugin.hpp>

#include <cstdint>
#include <vector>

namespace kiln {

struct CacheOptions {
  uint32_t block_tokens = 16;
  uint64_t n_blocks = 0;
};

/** Base class of cache plugins. reserve() throws kiln::Error(KILN_ERR_OUT_OF_MEMORY, ...) when full. */
class Cache {
 public:
  virtual ~Cache() = default;
  virtual void reserve(uint64_t seq, uint32_t n_tokens) = 0;
  virtual void release(uint64_t seq) = 0;
  virtual std::vector<uint32_t> block_table(uint64_t seq) const = 0;
  virtual uint64_t free_blocks() const = 0;
};

namespace detail {
template <class T>
struct CacheAdapter {
  static void* create(const kiln_cache_options* o, kiln_error* err) noexcept {
    T* obj = nullptr;
    guarded(err, [&] { obj = new T(CacheOptions{o ? o->block_tokens : 16u, o ? o->n_blocks : 0u}); });
    return obj;
  }
  static void destroy(void* self) noexcept { delete static_cast<T*>(self); }
  static kiln_status reserve(void* self, uint64_t seq, uint32_t n, kiln_error* err) noexcept {
    return guarded(err, [&] { static_cast<T*>(self)->reserve(seq, n); });
  }
  static void release(void* self, uint64_t seq) noexcept {
    try {
      static_cast<T*>(self)->release(seq);
    } catch (...) {
    }
  }
  static uint32_t block_table(void* self, uint64_t seq, uint32_t* out, uint32_t cap) noexcept {
    try {
      std::vector<uint32_t> t = static_cast<T*>(self)->block_table(seq);
      for (uint32_t i = 0; i < cap && i < t.size(); ++i) out[i] = t[i];
      return static_cast<uint32_t>(t.size());
    } catch (...) {
      return 0;
    }
  }
  static uint64_t free_blocks(void* self) noexcept { return static_cast<T*>(self)->free_blocks(); }
  static const kiln_cache_vtable* vtable() {
    static const kiln_cache_vtable vt = {sizeof(kiln_cache_vtable), 0, &create, &destroy, &reserve,
                                         &release, &block_table, &free_blocks, {}};
    return &vt;
  }
};
}  // namespace detail

template <class T>
kiln_component cache(const char* name, const char* description = "") {
  static_assert(std::is_base_of_v<Cache, T>, "T must derive from kiln::Cache");
  return detail::component(KILN_COMPONENT_CACHE, name, description, detail::CacheAdapter<T>::vtable());
}

}  // namespace kiln
