#include "kernels/host_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <dlfcn.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace parity::kernels {

size_t host_cache_class_bytes(size_t n) {
  const int top = 63 - __builtin_clzll(static_cast<unsigned long long>(n));
  const size_t step = size_t{1} << (top - 3);
  return (n + step - 1) / step * step;
}

namespace {

class HostCache final : public c10::Allocator {
 public:
  static HostCache& instance() {
    static HostCache* cache = new HostCache();  // never destroyed: tensors may outlive main
    return *cache;
  }

  c10::DataPtr allocate(size_t n) const override {
    if (n < kHostCacheMinBytes) {  // glibc's, freed straight back (or by release(), which
      void* p = c10::alloc_cpu(n);   // raw_deallocate calls for every block)
      return {p, p, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
    }
    const size_t bytes = host_cache_class_bytes(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& blocks = free_[bytes];
      if (!blocks.empty()) {
        p = blocks.back();
        blocks.pop_back();
        stats_.cached_bytes -= static_cast<int64_t>(bytes);
        ++stats_.hits;
      } else {
        ++stats_.misses;
      }
    }
    if (!p) {
      p = c10::alloc_cpu(bytes);  // throws on exhaustion, as c10's allocator does
      std::lock_guard<std::mutex> lock(mu_);
      class_of_[p] = bytes;
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void set_cap(size_t cap) {
    std::lock_guard<std::mutex> lock(mu_);
    cap_ = cap;
  }

  HostCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  HostCache() = default;

  static void release(void* p) { instance().take_back(p); }

  void take_back(void* p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = class_of_.find(p);
      if (it != class_of_.end()) {
        const size_t bytes = it->second;
        if (static_cast<size_t>(stats_.cached_bytes) + bytes <= cap_) {
          free_[bytes].push_back(p);
          stats_.cached_bytes += static_cast<int64_t>(bytes);
          return;
        }
        class_of_.erase(it);
        ++stats_.returned;
      }
    }
    c10::free_cpu(p);  // a small block, or a large one the cache has no room for
  }

  size_t cap_ = kHostCacheCapBytes;
  mutable std::mutex mu_;
  mutable std::unordered_map<size_t, std::vector<void*>> free_;  // class bytes -> freed blocks
  mutable std::unordered_map<void*, size_t> class_of_;           // every block out or held
  mutable HostCacheStats stats_;
};

}  // namespace

void install_host_allocator(size_t cap) {
  auto& cache = HostCache::instance();
  cache.set_cap(cap);
  static std::once_flag once;
  std::call_once(once, [&] { c10::SetCPUAllocator(&cache, /*priority=*/1); });
}

HostCacheStats host_cache_stats() { return HostCache::instance().stats(); }

namespace {

// jemalloc's mallctl, where jemalloc is in the process: int(name, old, old_len, new, new_len).
using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);

MallctlFn find_mallctl() {
  return reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
}

}  // namespace

bool malloc_is_jemalloc() { return find_mallctl() != nullptr; }

std::string malloc_text() {
  const MallctlFn mallctl = find_mallctl();
  if (!mallctl) return "glibc";
  const char* version = nullptr;
  size_t len = sizeof(version);
  if (mallctl("version", &version, &len, nullptr, 0) != 0 || !version) return "jemalloc";
  // "5.3.0-0-g54eaed1d8b56...": the release, without the build's git suffix.
  std::string v(version);
  const size_t dash = v.find('-');
  return "jemalloc " + v.substr(0, dash);
}

}  // namespace parity::kernels
