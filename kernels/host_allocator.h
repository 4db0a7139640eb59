// The CPU tensor allocator the trainers install: c10's, with a cache of freed large blocks.
//
// A training step allocates and frees the same large tensors every micro-batch. malloc serves
// each from its bins (glibc's: a large request first sorts every chunk freed since the last one
// and merges the small ones): with several micro-batches' activations live, as in the
// in-process pipeline, that is a few percent of a step, and the heap fragments. The cache
// keeps freed blocks of 16 KiB and more by size class (8 classes per octave, so at most 1/8 of
// a block goes unused) and hands one back to the next request of its class.
//
// Bounded: it holds at most `cap` bytes of freed blocks; a block freed past that goes back to
// malloc. Smaller requests go to c10's default allocator. Memory is handed out uninitialised,
// as c10's is, so no value depends on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace parity::kernels {

constexpr size_t kHostCacheMinBytes = size_t{16} << 10;
// The most freed memory the cache keeps: what the CLI's allocator settings let glibc keep
// before it returns memory to the system where glibc serves malloc (cli/main.cpp).
constexpr size_t kHostCacheCapBytes = size_t{1} << 30;

// Makes the cache c10's CPU allocator; the first call installs it, every call sets the cap.
// Tensors allocated before keep their own deleters.
void install_host_allocator(size_t cap = kHostCacheCapBytes);

struct HostCacheStats {
  int64_t hits = 0;          // large requests served from the cache
  int64_t misses = 0;        // large requests passed to malloc
  int64_t returned = 0;      // freed blocks passed back to malloc (the cache was full)
  int64_t cached_bytes = 0;  // freed blocks held now
};
HostCacheStats host_cache_stats();

// The size class of a request of n >= kHostCacheMinBytes bytes: n rounded up to a multiple of
// 2^(floor(log2 n) - 3).
size_t host_cache_class_bytes(size_t n);

// The malloc this process runs: "jemalloc VERSION" where jemalloc serves malloc (the `parity`
// binary links it when the build found it, cli/CMakeLists.txt; or it was preloaded), else
// "glibc". Found at run time, by jemalloc's own control entry point.
std::string malloc_text();
bool malloc_is_jemalloc();

}  // namespace parity::kernels
