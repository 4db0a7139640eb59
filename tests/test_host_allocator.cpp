// The CPU allocator's cache of freed large blocks (kernels/host_allocator.h): its size
// classes, reuse, the cap, and small requests passing by. That values do not depend on it is
// what every bitwise test of the trainers shows, since each run installs it.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kernels/host_allocator.h"

namespace parity {
namespace {

using kernels::host_cache_class_bytes;
using kernels::host_cache_stats;
using kernels::install_host_allocator;

TEST(HostAllocator, SizeClassesRoundUpToAnEighthOfTheOctave) {
  // Worked by hand: the step is 2^(floor(log2 n) - 3).
  EXPECT_EQ(host_cache_class_bytes(16384), 16384u);      // 2^14, step 2^11: already a multiple
  EXPECT_EQ(host_cache_class_bytes(16385), 18432u);      // 9 steps of 2048
  EXPECT_EQ(host_cache_class_bytes(20000), 20480u);      // 10 steps of 2048
  EXPECT_EQ(host_cache_class_bytes(98400), 106496u);     // 2^16 <= n: 13 steps of 8192
  EXPECT_EQ(host_cache_class_bytes(100000), 106496u);    // the same class
  EXPECT_EQ(host_cache_class_bytes(3145729), 3407872u);  // 3 MiB + 1: 13 steps of 2^18
  EXPECT_EQ(host_cache_class_bytes((size_t{1} << 30) - 1), size_t{1} << 30);
  // Never smaller than the request, never more than an eighth above it.
  for (size_t n = kernels::kHostCacheMinBytes; n < (size_t{1} << 24); n = n * 9 / 8 + 7) {
    const size_t c = host_cache_class_bytes(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, n / 8) << n;
  }
}

TEST(HostAllocator, AFreedBlockServesTheNextRequestOfItsClass) {
  install_host_allocator();
  auto a = at::empty({25000}, at::kFloat);  // 100000 bytes
  const void* block = a.data_ptr();
  a.reset();
  const auto before = host_cache_stats();
  auto b = at::empty({24600}, at::kFloat);  // 98400 bytes: the same class
  const auto after = host_cache_stats();
  EXPECT_EQ(b.data_ptr(), block);
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes - 106496);
}

TEST(HostAllocator, ABlockFreedPastTheCapGoesBackToTheSystem) {
  install_host_allocator();
  auto a = at::empty({25000}, at::kFloat);
  install_host_allocator(/*cap=*/0);
  const auto before = host_cache_stats();
  a.reset();
  const auto after = host_cache_stats();
  install_host_allocator();  // the default cap again, for the tests after this one
  EXPECT_EQ(after.returned, before.returned + 1);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
}

TEST(HostAllocator, SmallRequestsPassBy) {
  install_host_allocator();
  const auto before = host_cache_stats();
  { auto s = at::empty({1000}, at::kFloat); }  // 4000 bytes, under the 16 KiB floor
  const auto after = host_cache_stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
}

// ATen's own buffers come through raw_allocate / raw_deallocate, which frees every block with
// the one raw deleter, small or large.
TEST(HostAllocator, RawBlocksOfEverySizeGoBackThroughTheRawDeleter) {
  install_host_allocator();
  auto* alloc = c10::GetCPUAllocator();
  for (size_t n : {size_t{0}, size_t{64}, size_t{4000}, kernels::kHostCacheMinBytes, size_t{100000}}) {
    void* p = alloc->raw_allocate(n);
    if (n > 0) static_cast<char*>(p)[n - 1] = 1;
    alloc->raw_deallocate(p);
  }
  void* again = alloc->raw_allocate(100000);
  EXPECT_NE(again, nullptr);
  alloc->raw_deallocate(again);
}

TEST(HostAllocator, ThreadsShareItSafely) {
  install_host_allocator();
  const auto before = host_cache_stats();
  constexpr int kThreads = 2, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kRounds; ++i) {
        auto x = at::empty({8192 + 1024 * ((i + t) % 8)}, at::kFloat);
        x.fill_(static_cast<float>(t));
        ASSERT_EQ(x[0].item<float>(), static_cast<float>(t));
      }
    });
  for (auto& th : threads) th.join();
  const auto after = host_cache_stats();
  EXPECT_EQ((after.hits + after.misses) - (before.hits + before.misses), kThreads * kRounds);
}

}  // namespace
}  // namespace parity
