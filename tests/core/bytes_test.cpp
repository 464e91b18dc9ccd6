// Message bodies and the host buffer pool: sizes, appends within and beyond the room asked
// for, reuse of freed blocks, and a change of the memory blocks come from.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/bytes.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

std::atomic<int> g_counted_allocations{0}, g_counted_releases{0};
void* counted_allocate(std::size_t n) {
  ++g_counted_allocations;
  return std::malloc(n);
}
void counted_release(void* p, std::size_t) {
  ++g_counted_releases;
  std::free(p);
}
const HostMemory kCounted{counted_allocate, counted_release, "counted"};

std::vector<unsigned char> random_bytes(std::size_t n, std::mt19937_64& g) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(g());
  return v;
}

TEST(Bytes, SmallBodiesAreVectorsAndLargeOnesPoolBlocks) {
  auto g = test::rng(61);
  auto v = random_bytes(100, g);
  Bytes small{std::vector<unsigned char>(v)};
  EXPECT_TRUE(small == v);
  EXPECT_FALSE(small.pinned());
  Bytes moved = std::move(small);
  EXPECT_TRUE(moved == v);
  EXPECT_TRUE(small.empty());  // NOLINT(bugprone-use-after-move): moved from is empty

  const std::size_t n = (1 << 20) + 3;
  const auto before = pool_stats();
  Bytes big = Bytes::uninitialized(n, 8);
  ASSERT_EQ(big.size(), n);
  auto content = random_bytes(n, g);
  std::memcpy(big.data(), content.data(), n);
  const unsigned char* where = big.data();
  const unsigned char tail[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  big.append(tail, 8);  // within the room asked for: not moved
  EXPECT_EQ(big.data(), where);
  content.insert(content.end(), tail, tail + 8);
  EXPECT_TRUE(big == content);
  big.shrink(8);
  content.resize(n);
  EXPECT_TRUE(big == content);
  // Beyond the room: moved to a larger block, bytes kept.
  auto more = random_bytes(3 << 20, g);
  big.append(more.data(), more.size());
  content.insert(content.end(), more.begin(), more.end());
  EXPECT_TRUE(big == content);
  EXPECT_GE(pool_stats().in_use_bytes, before.in_use_bytes + content.size());
}

TEST(Bytes, FreedBlocksAreReusedAndAChangeOfMemoryGivesThemBack) {
  const std::size_t n = 5 << 20;
  const unsigned char* first;
  {
    Bytes a = Bytes::uninitialized(n);
    first = a.data();
  }
  const auto before = pool_stats();
  {
    Bytes b = Bytes::uninitialized(n - 1000);  // same size class: the cached block again
    EXPECT_EQ(b.data(), first);
  }
  EXPECT_EQ(pool_stats().reuses, before.reuses + 1);
  EXPECT_GT(pool_stats().cached_bytes, 0u);

  use_host_memory(&kCounted);  // what a GPU backend does with pinned memory
  EXPECT_EQ(pool_stats().cached_bytes, 0u);
  EXPECT_STREQ(pool_stats().memory, "counted");
  {
    Bytes c = Bytes::uninitialized(n);
    EXPECT_TRUE(c.pinned());  // from the memory given, not malloc
    EXPECT_EQ(g_counted_allocations.load(), 1);
    std::memset(c.data(), 7, n);
  }
  {
    Bytes d = Bytes::uninitialized(n);  // reused, not allocated again
    EXPECT_EQ(g_counted_allocations.load(), 1);
    EXPECT_EQ(d.data()[n - 1], 7);
  }
  use_host_memory(nullptr);  // back to malloc: the cached block is given back
  EXPECT_EQ(g_counted_releases.load(), 1);
  EXPECT_STREQ(pool_stats().memory, "malloc");
}

}  // namespace
}  // namespace gridspan
