// The memory manager against a fake device (plain malloc, with a capacity it enforces),
// discrete (copies between spaces) or unified (moves by accounting): round trips through
// host and disk, LRU order, all-or-nothing staging, out-of-memory and spill-file errors,
// exact statistics, and a concurrent stress run.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/regions.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/memory.hpp"
#include "runtime/pool.hpp"
#include "runtime/spill.hpp"
#include "support/eventually.hpp"
#include "support/random.hpp"

namespace gridspan::runtime {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t KiB = 1024;

// A device whose memory is malloc'd and limited to `capacity` bytes, counting what it
// hands out so tests see leaks and over-allocation. Discrete by default (the memory manager
// copies between its spaces, as for a GPU); `unified` makes it move blocks instead (as for
// the cpu backend), so a block may leave through the other space's deallocation.
class FakeDevice : public backend::Device {
 public:
  FakeDevice(int index, std::size_t capacity, bool unified = false)
      : index_(index), capacity_(capacity), unified_(unified) {}
  ~FakeDevice() override {
    if (unified_) {
      EXPECT_EQ(device_bytes_.load() + host_bytes_.load(), 0u) << name() << " leaked memory";
      return;
    }
    EXPECT_EQ(device_bytes_.load(), 0u) << name() << " leaked device memory";
    EXPECT_EQ(host_bytes_.load(), 0u) << name() << " leaked host memory";
  }
  int index() const override { return index_; }
  std::string name() const override { return "fake:" + std::to_string(index_); }
  std::size_t memory_capacity() const override { return capacity_; }
  bool unified() const override { return unified_; }
  bool asynchronous() const override { return false; }
  void copy(void* dst, const Rect& dr, const void* src, const Rect& sr, const Rect& region,
            std::size_t elem) override {
    backend::copy_region(dst, dr, src, sr, region, elem);
  }
  void fill(void* dst, const Rect& dr, const Rect& region, const void* value,
            std::size_t elem) override {
    backend::fill_region(dst, dr, region, value, elem);
  }
  void combine(void* dst, const Rect& dr, const void* src, const Rect& sr, annotation::ReduceOp op,
               DType dtype) override {
    backend::combine_region(dst, dr, src, sr, op, dtype);
  }
  void narrow(void* dst, const Rect& dr, const void* src, const Rect& sr, const Rect& region,
              DType dtype) override {
    backend::narrow_region(dst, dr, src, sr, region, dtype);
  }
  void upload(void* dst, const Rect& dr, const void* host, const Rect& hr, const Rect& region,
              std::size_t elem) override {
    backend::copy_region(dst, dr, host, hr, region, elem);
  }
  void download(void* host, const Rect& hr, const void* src, const Rect& sr, const Rect& region,
                std::size_t elem) override {
    backend::copy_region(host, hr, src, sr, region, elem);
  }
  void synchronize() override {}
  void* stream() const override { return nullptr; }
  void* allocate(std::size_t bytes) override {
    if (device_bytes_ + bytes > capacity_) {
      throw OutOfMemoryError(name(), bytes, device_bytes_, capacity_, "fake device is full");
    }
    device_bytes_ += bytes;
    return std::malloc(bytes);
  }
  void deallocate(void* p, std::size_t bytes) override {
    device_bytes_ -= bytes;
    std::free(p);
  }
  void* allocate_host(std::size_t bytes) override {
    ++host_allocations;
    host_bytes_ += bytes;
    return std::malloc(bytes);
  }
  void deallocate_host(void* p, std::size_t bytes) override {
    host_bytes_ -= bytes;
    std::free(p);
  }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    ++copies_to_host;
    std::memcpy(host, device, bytes);
  }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    ++copies_from_host;
    std::memcpy(device, host, bytes);
  }
  Ticket submit(std::function<void()> work, std::function<void(std::exception_ptr)> done,
                const std::vector<Ticket>&) override {
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    done(error);
    return 0;
  }

  std::size_t device_bytes() const { return device_bytes_; }
  std::size_t host_bytes() const { return host_bytes_; }
  std::atomic<int> copies_to_host{0};
  std::atomic<int> copies_from_host{0};
  std::atomic<int> host_allocations{0};

 private:
  int index_;
  std::size_t capacity_;
  bool unified_;
  std::atomic<std::size_t> device_bytes_{0};
  std::atomic<std::size_t> host_bytes_{0};
};

// A private folder under /tmp, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "gridspan-memory-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::vector<unsigned char> random_bytes(std::size_t n, std::mt19937_64& g) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(g() % 255 + 1);  // never zero
  return v;
}

// Stages `chunk` for writing, fills it with `content` and unstages it.
void write_chunk(MemoryManager& mm, ChunkId chunk, const std::vector<unsigned char>& content) {
  ASSERT_TRUE(mm.try_stage({{chunk, true}}));
  ASSERT_EQ(mm.bytes(chunk), content.size());
  std::memcpy(mm.data(chunk), content.data(), content.size());
  mm.unstage({{chunk, true}});
}

// Stages `chunk` for reading and compares it with `expected`.
void expect_chunk(MemoryManager& mm, ChunkId chunk, const std::vector<unsigned char>& expected) {
  ASSERT_TRUE(mm.try_stage({{chunk, false}}));
  const auto* p = static_cast<const unsigned char*>(mm.data(chunk));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) mismatches += p[i] != expected[i];
  EXPECT_EQ(mismatches, 0u) << "chunk " << chunk << " came back with wrong bytes";
  mm.unstage({{chunk, false}});
}

const MemoryStats& space(const std::vector<MemoryStats>& stats, const std::string& name) {
  for (const auto& s : stats) {
    if (s.name == name) return s;
  }
  throw std::runtime_error("no space " + name);
}

MemoryLimits small_limits(const std::string& dir) {
  MemoryLimits limits;
  limits.device_bytes = 64 * KiB;
  limits.host_bytes = 128 * KiB;
  limits.spill_dir = dir;
  limits.write_behind = false;  // evictions write back; write-behind has tests of its own
  return limits;
}

// What most tests here start from: one 64 KiB device and the small limits.
struct SmallRig {
  TempDir dir;
  FakeDevice dev{0, 64 * KiB};
  MemoryManager mm{{&dev}, small_limits(dir.str())};
};

TEST(BlockPool, SizeClasses) {
  using detail::BlockPool;
  EXPECT_EQ(BlockPool::size_class(0), 512u);
  EXPECT_EQ(BlockPool::size_class(1), 512u);
  EXPECT_EQ(BlockPool::size_class(512), 512u);
  EXPECT_EQ(BlockPool::size_class(513), 1024u);
  EXPECT_EQ(BlockPool::size_class(16 * KiB), 16 * KiB);
  EXPECT_EQ(BlockPool::size_class(1024 * KiB), 1024 * KiB);
  EXPECT_EQ(BlockPool::size_class(1024 * KiB + 1), 1152 * KiB);  // 1 MiB + 1/8 MiB
  EXPECT_EQ(BlockPool::size_class(3 * 1024 * KiB + 5), 3 * 1024 * KiB + 256 * KiB);
  std::mt19937_64 g = test::rng(1);
  for (int i = 0; i < 1000; ++i) {
    std::size_t n = g() % (std::size_t(1) << 34) + 1;
    std::size_t c = BlockPool::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, std::max<std::size_t>(511, n / 8)) << n;
    EXPECT_EQ(BlockPool::size_class(c), c) << n;
  }
}

TEST(BlockPool, CachesFreedBlocksAndReleasesThem) {
  int allocations = 0, releases = 0;
  std::size_t released_bytes = 0;
  {
    detail::BlockPool pool(
        [&](std::size_t n) {
          ++allocations;
          return std::malloc(n);
        },
        [&](void* p, std::size_t n) {
          ++releases;
          released_bytes += n;
          std::free(p);
        });
    void* a = pool.allocate(1000);
    EXPECT_EQ(pool.in_use_bytes(), 1024u);
    pool.free(a, 1000);
    EXPECT_EQ(pool.cached_bytes(), 1024u);
    EXPECT_TRUE(pool.has_cached(700));
    EXPECT_FALSE(pool.has_cached(2000));
    void* b = pool.allocate(700);  // same class: the cached block
    EXPECT_EQ(b, a);
    EXPECT_EQ(allocations, 1);
    void* c = pool.allocate(4096);
    pool.free(b, 700);
    pool.free(c, 4096);
    EXPECT_EQ(pool.held_bytes(), 5120u);
    EXPECT_EQ(pool.release_cached(1), 4096u);  // the largest first
    EXPECT_EQ(pool.cached_bytes(), 1024u);
    EXPECT_EQ(releases, 1);
  }
  EXPECT_EQ(releases, 2);  // the destructor released the rest
  EXPECT_EQ(released_bytes, 5120u);
}

TEST(BlockPool, WithoutCachingAFreedBlockGoesBackAtOnce) {
  std::size_t held = 0;
  detail::BlockPool pool(
      [&](std::size_t n) {
        held += n;
        return std::malloc(n);
      },
      [&](void* p, std::size_t n) {
        held -= n;
        std::free(p);
      },
      /*caching=*/false);
  void* a = pool.allocate(3000);
  EXPECT_EQ(held, 3072u);
  pool.free(a, 3000);
  EXPECT_EQ(held, 0u);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  EXPECT_EQ(pool.in_use_bytes(), 0u);
  EXPECT_FALSE(pool.has_cached(3000));
}

TEST(MemoryManager, FreshChunkNeedsNoCopies) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  mm.create(7, 10000, 0);
  EXPECT_TRUE(mm.exists(7));
  EXPECT_EQ(mm.bytes(7), 10000u);
  EXPECT_EQ(mm.state(7).on_device, false);
  ASSERT_TRUE(mm.try_stage({{7, true}}));
  EXPECT_NE(mm.data(7), nullptr);
  EXPECT_EQ(mm.state(7).pins, 1);
  EXPECT_EQ(mm.pinned_bytes(0), 10240u);
  EXPECT_EQ(dev.copies_from_host + dev.copies_to_host, 0);
  mm.unstage({{7, true}});
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
  EXPECT_THROW(mm.data(7), Error);  // not staged
  mm.destroy(7);
  EXPECT_FALSE(mm.exists(7));
}

// A staging hands each use its chunk's memory (what data() answers), on every path: the
// full one (fresh memory here), resident at once, and sized and staged in one lock. A chunk
// named twice gets it in both uses; a staging over its budget leaves the uses as they were.
TEST(MemoryManager, StagingGivesEachUseItsChunksMemory) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  mm.create(1, 4000, 0);
  mm.create(2, 6000, 0);
  std::vector<ChunkUse> uses{{1, true}, {2, false}, {1, false}};
  ASSERT_TRUE(mm.try_stage(uses));
  EXPECT_NE(uses[0].data, nullptr);
  EXPECT_EQ(uses[0].data, mm.data(1));
  EXPECT_EQ(uses[1].data, mm.data(2));
  EXPECT_EQ(uses[2].data, mm.data(1));
  mm.unstage(uses);
  std::vector<ChunkUse> again{{2, true}};
  ASSERT_TRUE(mm.try_stage_resident(again));
  EXPECT_EQ(again[0].data, mm.data(2));
  mm.unstage(again);
  std::vector<ChunkUse> sized{{1, false}, {2, false}};
  std::size_t bytes = 0;
  EXPECT_FALSE(mm.size_and_stage_resident(sized, 9999, bytes));  // over the budget
  EXPECT_EQ(bytes, 10000u);
  EXPECT_EQ(sized[0].data, nullptr);
  EXPECT_EQ(sized[1].data, nullptr);
  ASSERT_TRUE(mm.size_and_stage_resident(sized, 10000, bytes));
  EXPECT_EQ(sized[0].data, mm.data(1));
  EXPECT_EQ(sized[1].data, mm.data(2));
  mm.unstage(sized);
}

TEST(MemoryManager, QuickStagingOnlyForResidentChunks) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  mm.create(1, 4000, 0);
  mm.create(2, 4000, 0);
  EXPECT_FALSE(mm.try_stage_resident({{1, false}}));  // fresh: memory must be taken first
  EXPECT_EQ(mm.state(1).pins, 0);
  ASSERT_TRUE(mm.try_stage({{1, true}}));
  auto* p = static_cast<int*>(mm.data(1));
  p[0] = 1234;
  mm.unstage({{1, true}});
  ASSERT_TRUE(mm.try_stage_resident({{1, false}}));  // resident now: staged at once
  EXPECT_EQ(static_cast<int*>(mm.data(1))[0], 1234);
  EXPECT_EQ(mm.state(1).pins, 1);
  EXPECT_EQ(mm.pinned_bytes(0), 4096u);
  // All or nothing: one chunk not resident, nothing is pinned.
  EXPECT_FALSE(mm.try_stage_resident({{1, false}, {2, false}}));
  EXPECT_EQ(mm.state(1).pins, 1);
  EXPECT_EQ(mm.state(2).pins, 0);
  mm.unstage({{1, false}});
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
  EXPECT_EQ(dev.copies_from_host + dev.copies_to_host, 0);
}

TEST(MemoryManager, DataSurvivesRoundTripsThroughHostAndDisk) {
  TempDir dir;
  FakeDevice dev0(0, 64 * KiB), dev1(1, 64 * KiB);
  MemoryManager mm({&dev0, &dev1}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(2);
  // 40 chunks of 8..16 KiB (most not multiples of 512) over two devices: more than
  // devices (2 x 64 KiB) and host (128 KiB) hold together, so some go to disk.
  std::map<ChunkId, std::vector<unsigned char>> expected;
  for (ChunkId id = 0; id < 40; ++id) {
    std::size_t bytes = 8 * KiB + g() % (8 * KiB + 1);
    mm.create(id, bytes, static_cast<int>(id % 2));
    expected[id] = random_bytes(bytes, g);
    write_chunk(mm, id, expected[id]);
  }
  auto stats = mm.stats();
  EXPECT_GT(space(stats, "disk").used_bytes, 0u) << "the test should reach the disk";
  EXPECT_GT(space(stats, "host").spilled_bytes, 0u);
  for (int round = 0; round < 4; ++round) {
    std::vector<ChunkId> order(expected.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), g);
    for (ChunkId id : order) {
      expect_chunk(mm, id, expected[id]);
      if (g() % 3 == 0) {
        expected[id] = random_bytes(expected[id].size(), g);
        write_chunk(mm, id, expected[id]);
      }
    }
  }
  stats = mm.stats();
  for (int d = 0; d < 2; ++d) EXPECT_LE(stats[d].used_bytes, 64 * KiB);
  EXPECT_LE(space(stats, "host").used_bytes, 128 * KiB);
  EXPECT_LE(dev0.device_bytes(), 64 * KiB);
  EXPECT_LE(dev0.host_bytes() + dev1.host_bytes(), 128 * KiB);
}

TEST(MemoryManager, EvictsLeastRecentlyUsedFirst) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  for (ChunkId id = 0; id < 6; ++id) mm.create(id, 16 * KiB, 0);
  for (ChunkId id = 0; id < 4; ++id) {
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  // Use 0 again: 1 is now the least recently used.
  ASSERT_TRUE(mm.try_stage({{0, false}}));
  mm.unstage({{0, false}});
  ASSERT_TRUE(mm.try_stage({{4, true}}));
  mm.unstage({{4, true}});
  EXPECT_FALSE(mm.state(1).on_device);
  EXPECT_TRUE(mm.state(1).on_host);
  for (ChunkId id : {0, 2, 3, 4}) EXPECT_TRUE(mm.state(id).on_device) << id;
  // Next: 2 goes.
  ASSERT_TRUE(mm.try_stage({{5, true}}));
  mm.unstage({{5, true}});
  EXPECT_FALSE(mm.state(2).on_device);
  for (ChunkId id : {0, 3, 4, 5}) EXPECT_TRUE(mm.state(id).on_device) << id;
}

// With uses announced, the device keeps what queued tasks need soonest: a chunk no task
// needs goes first (least recently used first), then the one needed last; announcements
// made before a chunk exists count, and retired ones no longer do.
TEST(MemoryManager, EvictsByTheQueuedTasksNextUses) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  for (ChunkId id = 0; id < 4; ++id) mm.create(id, 16 * KiB, 0);
  mm.announce(99, {{2, false}});  // ignored: no device has held half of its limit yet
  for (ChunkId id = 0; id < 4; ++id) {
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  mm.announce(10, {{2, false}});
  mm.announce(11, {{0, false}, {9, true}});  // chunk 9 does not exist yet
  mm.announce(12, {{3, false}});
  mm.announce(13, {{1, false}});
  mm.create(9, 16 * KiB, 0);
  // Full. Task 11 needs 9: every resident chunk is needed, 1 last (task 13).
  ASSERT_TRUE(mm.try_stage({{9, true}}));
  EXPECT_FALSE(mm.state(1).on_device);
  for (ChunkId id : {0, 2, 3}) EXPECT_TRUE(mm.state(id).on_device) << id;
  mm.unstage({{9, true}});
  mm.retire(11, {{0, false}, {9, true}});
  // 0 and 9 are needed by no queued task now: 0, used longer ago, goes before 9, while 3
  // (task 12) and 2 (task 10) stay although 2 is the least recently used chunk.
  mm.create(20, 16 * KiB, 0);
  ASSERT_TRUE(mm.try_stage({{20, true}}));
  mm.unstage({{20, true}});
  EXPECT_FALSE(mm.state(0).on_device);
  for (ChunkId id : {2, 3, 9, 20}) EXPECT_TRUE(mm.state(id).on_device) << id;
  mm.retire(10, {{2, false}});
  mm.retire(12, {{3, false}});
  mm.retire(13, {{1, false}});
  // Nothing announced any more: plain LRU again (2 is the least recently used).
  ASSERT_TRUE(mm.try_stage({{0, false}}));
  mm.unstage({{0, false}});
  EXPECT_FALSE(mm.state(2).on_device);
  mm.retire(99, {{5, false}});  // unknown task and chunk: nothing to take back
}

// The unified model (the cpu backend's): a chunk changes space by accounting alone, keeping
// its address and bytes, through device -> host -> disk and back; nothing is copied between
// device and host, and the statistics still follow the spaces' limits.
TEST(MemoryManager, UnifiedDevicesMoveChunksBetweenSpacesWithoutCopying) {
  TempDir dir;
  auto g = test::rng(77);
  FakeDevice dev(0, 1024 * KiB, /*unified=*/true);  // the manager enforces 32 KiB
  MemoryManager mm({&dev}, MemoryLimits{32 * KiB, 32 * KiB, dir.str()});
  std::map<ChunkId, std::vector<unsigned char>> expected;
  for (ChunkId id = 1; id <= 6; ++id) {
    mm.create(id, 16 * KiB, 0);
    expected[id] = random_bytes(16 * KiB, g);
    write_chunk(mm, id, expected[id]);
  }
  // Chunks 1-2 went to disk, 3-4 sit in the host space, 5-6 on the device.
  auto stats = mm.stats();
  EXPECT_EQ(space(stats, "fake:0").used_bytes, 32 * KiB);
  EXPECT_EQ(space(stats, "host").used_bytes, 32 * KiB);
  EXPECT_TRUE(mm.state(3).on_host);
  ASSERT_TRUE(mm.try_stage({{3, false}}));
  const void* address = mm.data(3);
  mm.unstage({{3, false}});
  EXPECT_FALSE(mm.state(3).on_host);  // moved, not copied: one copy only
  // Out to the host space and back: the same block, the same address.
  for (ChunkId id : {5, 6}) expect_chunk(mm, id, expected[id]);
  EXPECT_TRUE(mm.state(3).on_host);
  EXPECT_FALSE(mm.state(3).on_device);
  ASSERT_TRUE(mm.try_stage({{3, false}}));
  EXPECT_EQ(mm.data(3), address);
  mm.unstage({{3, false}});
  for (int round = 0; round < 3; ++round)
    for (ChunkId id = 1; id <= 6; ++id) expect_chunk(mm, id, expected[id]);
  EXPECT_EQ(dev.copies_to_host.load(), 0);
  EXPECT_EQ(dev.copies_from_host.load(), 0);
  EXPECT_EQ(mm.stats()[0].copied_out_bytes, 0u);
  EXPECT_GT(mm.stats()[0].spilled_bytes, 0u);
  EXPECT_GT(space(mm.stats(), "host").copied_out_bytes, 0u);  // host -> disk still writes
  for (ChunkId id = 1; id <= 6; ++id) mm.destroy(id);
}

// The copy counters count bytes that moved between spaces, not evictions of clean copies.
TEST(MemoryManager, CopyCountersCountBytesMovedBetweenSpaces) {
  TempDir dir;
  FakeDevice dev(0, 16 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 128 * KiB, dir.str()});
  mm.create(1, 16 * KiB, 0);
  mm.create(2, 16 * KiB, 0);
  ASSERT_TRUE(mm.try_stage({{1, true}}));
  mm.unstage({{1, true}});
  ASSERT_TRUE(mm.try_stage({{2, true}}));  // 1 is copied out
  mm.unstage({{2, true}});
  ASSERT_TRUE(mm.try_stage({{1, false}}));  // 2 copied out, 1 copied back in
  mm.unstage({{1, false}});
  ASSERT_TRUE(mm.try_stage({{2, false}}));  // 1 is clean: dropped, not copied; 2 comes back
  mm.unstage({{2, false}});
  auto stats = mm.stats();
  EXPECT_EQ(stats[0].copied_out_bytes, 2 * 16 * KiB);
  EXPECT_EQ(stats[0].copied_in_bytes, 2 * 16 * KiB);
  EXPECT_EQ(stats[0].spilled_bytes, 3 * 16 * KiB);
  EXPECT_EQ(dev.copies_to_host.load(), 2);
  EXPECT_EQ(dev.copies_from_host.load(), 2);
}

// A task that writes a chunk whole (`discard`) gets device memory for it without its old
// contents: from the host or from disk, nothing is copied in, and the stale copies go.
TEST(MemoryManager, AChunkWrittenWholeIsNotBroughtBack) {
  TempDir dir;
  FakeDevice dev(0, 16 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, dir.str()});
  for (ChunkId id = 1; id <= 3; ++id) {
    mm.create(id, 16 * KiB, 0);
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  // 3 on the device, 2 on the host, 1 on disk.
  ASSERT_TRUE(mm.state(1).on_disk && mm.state(2).on_host && mm.state(3).on_device);
  const auto before = mm.stats();
  const int copies_in = dev.copies_from_host.load();
  ASSERT_TRUE(mm.try_stage({{1, true, true}}));  // from disk, written whole
  mm.unstage({{1, true, true}});
  ASSERT_TRUE(mm.try_stage({{2, true, true}}));  // from the host, written whole
  mm.unstage({{2, true, true}});
  auto after = mm.stats();
  EXPECT_EQ(after[0].copied_in_bytes, before[0].copied_in_bytes);
  EXPECT_EQ(after[1].copied_in_bytes, before[1].copied_in_bytes);  // no disk read either
  EXPECT_EQ(dev.copies_from_host.load(), copies_in);
  EXPECT_FALSE(mm.state(1).on_disk);
  EXPECT_TRUE(mm.state(2).on_device);
  // Written in part, a chunk comes back with its contents.
  ASSERT_TRUE(mm.try_stage({{1, true}}));
  mm.unstage({{1, true}});
  EXPECT_GT(dev.copies_from_host.load(), copies_in);
}

// A task that overwrites part of a chunk (its own rows inside halo rows) has only the rest
// brought back: the parts before and after the part it overwrites keep their contents, that
// part is not copied (here it keeps the poison of the chunk whose device block it reuses),
// and the bytes copied in are the rest's. A second use of the chunk in the task brings all
// of it.
TEST(MemoryManager, APartOverwrittenIsNotBroughtBack) {
  TempDir dir;
  FakeDevice dev(0, 16 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 64 * KiB, dir.str()});
  std::mt19937_64 g = test::rng(12);
  const std::vector<unsigned char> content = random_bytes(16 * KiB, g);
  const int64_t volume = 4 * KiB;  // four-byte elements
  const int64_t lo = 256, hi = volume - 256;
  for (bool twice : {false, true}) {
    SCOPED_TRACE(twice ? "used twice" : "used once");
    mm.create(1, 16 * KiB, 0), mm.create(2, 16 * KiB, 0);
    write_chunk(mm, 1, content);
    write_chunk(mm, 2, std::vector<unsigned char>(16 * KiB, 0xa5));  // 1 goes to the host
    ASSERT_TRUE(mm.state(1).on_host && !mm.state(1).on_device);
    const auto before = mm.stats()[0].copied_in_bytes;
    std::vector<ChunkUse> uses{{1, true, false, lo, hi, volume}};
    if (twice) uses.push_back({1, false});
    ASSERT_TRUE(mm.try_stage(uses));
    const auto* p = static_cast<const unsigned char*>(mm.data(1));
    std::size_t kept = 0, poisoned = 0;
    for (std::size_t i = 0; i < content.size(); ++i) {
      const bool fresh = i >= std::size_t(lo) * 4 && i < std::size_t(hi) * 4 && !twice;
      (fresh ? poisoned : kept) += fresh ? p[i] == 0xa5 : p[i] == content[i];
    }
    EXPECT_EQ(kept, twice ? content.size() : std::size_t(lo + volume - hi) * 4);
    EXPECT_EQ(poisoned, twice ? 0u : std::size_t(hi - lo) * 4);
    EXPECT_EQ(mm.stats()[0].copied_in_bytes - before, twice ? content.size() : kept);
    mm.unstage(uses);
    mm.destroy(1), mm.destroy(2);
  }
}

TEST(MemoryManager, HostSpillsLeastRecentlyUsedToDisk) {
  TempDir dir;
  FakeDevice dev(0, 16 * KiB);
  MemoryLimits limits{16 * KiB, 32 * KiB, dir.str()};
  MemoryManager mm({&dev}, limits);
  for (ChunkId id = 0; id < 4; ++id) {
    mm.create(id, 16 * KiB, 0);
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  // 0, 1 and 2 were pushed to the host in that order; host holds two, so 0 went to disk.
  EXPECT_TRUE(mm.state(0).on_disk);
  EXPECT_FALSE(mm.state(0).on_host);
  EXPECT_TRUE(mm.state(1).on_host);
  EXPECT_TRUE(mm.state(2).on_host);
  EXPECT_TRUE(mm.state(3).on_device);
  EXPECT_FALSE(mm.spill_file(0).empty());
  EXPECT_TRUE(fs::exists(mm.spill_file(0)));
  // In this run's folder of its own, under GRIDSPAN_SPILL_DIR.
  const fs::path run = fs::path(mm.spill_file(0)).parent_path();
  EXPECT_EQ(run.parent_path(), dir.path());
  EXPECT_EQ(run.filename().string().rfind(detail::SpillStore::run_prefix(), 0), 0u) << run;
  EXPECT_EQ(mm.spill_file(1), "");
}

// A run killed before it could remove its spill files (kill -9) leaves its folder; the next
// run removes it, and leaves alone the folders of live runs and everything else there.
TEST(SpillStore, ARunRemovesTheFoldersOfRunsThatAreGone) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) {  // a run that spills a chunk and is killed
    detail::SpillStore store(dir.str());
    const int data[4] = {1, 2, 3, 4};
    store.write(7, data, sizeof data);
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path());
  ASSERT_EQ(left.size(), 1u) << "the killed run left no folder";
  const fs::path live = dir.path() / (detail::SpillStore::run_prefix() + "live");
  const fs::path other = dir.path() / "results-of-someone-else";
  fs::create_directories(live);
  fs::create_directories(other);
  {
    detail::SpillStore next(dir.str());
    EXPECT_FALSE(fs::exists(left[0])) << "the dead run's folder is still there";
    EXPECT_TRUE(fs::exists(live));
    EXPECT_TRUE(fs::exists(other));
    const int data[2] = {5, 6};
    next.write(1, data, sizeof data);
    EXPECT_TRUE(fs::exists(next.path(1)));
  }
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}), 2)
      << "the run's own folder is gone at its end";
}

// A task whose chunks fill the host must still be able to push the device's chunks out
// through that host: its own host copies go to disk and come back.
TEST(MemoryManager, TaskSourcesInAFullHostGoThroughDisk) {
  TempDir dir;
  FakeDevice dev(0, 32 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{32 * KiB, 32 * KiB, dir.str()});
  std::mt19937_64 g = test::rng(5);
  std::vector<std::vector<unsigned char>> content;
  for (ChunkId id = 0; id < 4; ++id) {
    mm.create(id, 16 * KiB, 0);
    content.push_back(random_bytes(16 * KiB, g));
    write_chunk(mm, id, content[id]);
  }
  // Device: 2 3; host: 0 1, each the only copy.
  ASSERT_TRUE(mm.state(0).on_host && mm.state(1).on_host);
  ASSERT_TRUE(mm.try_stage({{0, false}, {1, false}}));
  for (ChunkId id : {0, 1}) {
    EXPECT_EQ(std::memcmp(mm.data(id), content[id].data(), 16 * KiB), 0) << id;
  }
  mm.unstage({{0, false}, {1, false}});
  for (ChunkId id : {2, 3}) {
    EXPECT_FALSE(mm.state(id).on_device);
    expect_chunk(mm, id, content[id]);
  }
  EXPECT_GT(mm.stats()[2].peak_bytes, 0u);
}

TEST(MemoryManager, StagingIsAllOrNothing) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  for (ChunkId id = 0; id < 5; ++id) mm.create(id, 16 * KiB, 0);
  std::vector<ChunkUse> a{{0, true}, {1, false}, {2, true}};
  std::vector<ChunkUse> b{{3, true}, {4, false}};
  ASSERT_TRUE(mm.try_stage(a));
  EXPECT_EQ(mm.pinned_bytes(0), 48 * KiB);
  EXPECT_FALSE(mm.try_stage(b));  // 48 KiB pinned + 32 KiB > 64 KiB
  EXPECT_EQ(mm.pinned_bytes(0), 48 * KiB);
  for (ChunkId id : {3, 4}) {
    EXPECT_EQ(mm.state(id).pins, 0);
    EXPECT_FALSE(mm.state(id).on_device);
  }
  EXPECT_EQ(mm.stats()[0].used_bytes, 48 * KiB);  // nothing was brought in or evicted
  EXPECT_EQ(mm.stats()[0].spilled_bytes, 0u);
  mm.unstage(a);
  ASSERT_TRUE(mm.try_stage(b));
  EXPECT_EQ(mm.pinned_bytes(0), 32 * KiB);
  // A chunk named twice by one task is pinned once.
  ASSERT_TRUE(mm.try_stage({{3, false}, {3, true}}));
  EXPECT_EQ(mm.state(3).pins, 2);
  mm.unstage({{3, false}, {3, true}});
  mm.unstage(b);
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
  EXPECT_THROW(mm.unstage(b), Error);  // not staged any more
}

TEST(MemoryManager, OneTaskTooLargeIsOutOfMemory) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  std::vector<ChunkUse> task;
  for (ChunkId id = 0; id < 5; ++id) {
    mm.create(id, 16 * KiB, 0);
    task.push_back({id, false});
  }
  ASSERT_TRUE(mm.try_stage({{0, true}}));
  mm.unstage({{0, true}});
  try {
    mm.try_stage(task);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.space(), "fake:0");
    EXPECT_EQ(e.requested(), 80 * KiB);
    EXPECT_EQ(e.in_use(), 16 * KiB);
    EXPECT_EQ(e.limit(), 64 * KiB);
    std::string what = e.what();
    EXPECT_NE(what.find("fake:0"), std::string::npos) << what;
    EXPECT_NE(what.find("80.00 KiB"), std::string::npos) << what;
    EXPECT_NE(what.find("16.00 KiB"), std::string::npos) << what;
    EXPECT_NE(what.find("64.00 KiB"), std::string::npos) << what;
    EXPECT_NE(what.find("GRIDSPAN_DEVICE_MEMORY"), std::string::npos) << what;
  }
  for (ChunkId id = 0; id < 5; ++id) EXPECT_EQ(mm.state(id).pins, 0);
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
}

TEST(MemoryManager, HostTooSmallForOneChunkIsOutOfMemory) {
  TempDir dir;
  FakeDevice dev(0, 32 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{32 * KiB, 8 * KiB, dir.str()});
  for (ChunkId id = 0; id < 3; ++id) mm.create(id, 16 * KiB, 0);
  write_chunk(mm, 0, std::vector<unsigned char>(16 * KiB, 1));
  write_chunk(mm, 1, std::vector<unsigned char>(16 * KiB, 2));
  try {
    mm.try_stage({{2, true}});
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.space(), "host");
    EXPECT_EQ(e.requested(), 16 * KiB);
    EXPECT_EQ(e.limit(), 8 * KiB);
    EXPECT_NE(std::string(e.what()).find("GRIDSPAN_HOST_MEMORY"), std::string::npos);
  }
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
  expect_chunk(mm, 0, std::vector<unsigned char>(16 * KiB, 1));
}

// Fills chunk 0, then pushes it through the host to disk with chunks 1 and 2.
void spill_chunk_zero(MemoryManager& mm, const std::vector<unsigned char>& content) {
  for (ChunkId id = 0; id < 3; ++id) mm.create(id, content.size(), 0);
  write_chunk(mm, 0, content);
  write_chunk(mm, 1, content);
  write_chunk(mm, 2, content);
  ASSERT_TRUE(mm.state(0).on_disk);
  ASSERT_FALSE(mm.state(0).on_host);
}

void flip_byte(const std::string& file, std::size_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(MemoryManager, CorruptSpillFileIsAnError) {
  std::mt19937_64 g = test::rng(3);
  auto content = random_bytes(16 * KiB, g);
  struct Damage {
    const char* what;
    std::function<void(const std::string&)> apply;
    const char* expect;
  };
  std::vector<Damage> damages{
      {"payload byte", [&](const std::string& f) { flip_byte(f, 40 + g() % (16 * KiB)); },
       "checksum mismatch"},
      {"header byte", [&](const std::string& f) { flip_byte(f, g() % 32); }, "corrupt"},
      {"truncated", [&](const std::string& f) { fs::resize_file(f, 40 + 8 * KiB); },
       "ends after 8192 of 16384 payload bytes"},
      {"extra bytes", [&](const std::string& f) { fs::resize_file(f, 40 + 16 * KiB + 3); },
       "longer"},
      {"missing", [&](const std::string& f) { fs::remove(f); }, "cannot be opened"},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    TempDir dir;
    FakeDevice dev(0, 16 * KiB);
    MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, dir.str()});
    spill_chunk_zero(mm, content);
    std::string file = mm.spill_file(0);
    damage.apply(file);
    try {
      mm.try_stage({{0, false}});
      FAIL() << "expected IoError";
    } catch (const IoError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(damage.expect), std::string::npos) << what;
      EXPECT_NE(what.find(file), std::string::npos) << what;
      EXPECT_NE(what.find("chunk 0"), std::string::npos) << what;
      EXPECT_NE(what.find("lost"), std::string::npos) << what;
      EXPECT_NE(what.find("GRIDSPAN_SPILL_DIR"), std::string::npos) << what;
    }
    EXPECT_EQ(mm.state(0).pins, 0);
    EXPECT_FALSE(mm.state(0).on_device);
    // The other chunks are unharmed, and the lost chunk can be destroyed.
    expect_chunk(mm, 1, content);
    mm.destroy(0);
  }
}

TEST(MemoryManager, UnwritableSpillDirIsAnErrorAtConstruction) {
  TempDir dir;
  std::string file = (dir.path() / "a-file").string();
  std::ofstream(file) << "x";
  FakeDevice dev(0, 16 * KiB);
  for (const std::string& bad : {file + "/spill", file}) {
    try {
      MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, bad});
      FAIL() << "expected IoError for " << bad;
    } catch (const IoError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("GRIDSPAN_SPILL_DIR '" + bad + "' cannot be written"), std::string::npos)
          << what;
      EXPECT_NE(what.find("writable folder"), std::string::npos) << what;
    }
  }
}

TEST(MemoryManager, FailedSpillWriteIsAnErrorAndLosesNothing) {
  TempDir dir;
  fs::path spill = dir.path() / "spill";
  FakeDevice dev(0, 16 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, spill.string()});
  std::vector<unsigned char> content(16 * KiB, 7);
  for (ChunkId id = 0; id < 3; ++id) mm.create(id, 16 * KiB, 0);
  write_chunk(mm, 0, content);
  write_chunk(mm, 1, content);  // device: 1, host: 0
  fs::remove_all(spill);        // the disk goes away under the manager
  try {
    mm.try_stage({{2, true}});  // 1 → host needs 0 → disk
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    std::string what = e.what();
    // This run's folder under the spill folder cannot be made: the message names both.
    EXPECT_NE(what.find("cannot create this run's spill folder under '" + spill.string() + "'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(std::strerror(ENOENT)), std::string::npos) << what;
  }
  EXPECT_EQ(mm.state(2).pins, 0);
  EXPECT_TRUE(mm.state(0).on_host);
  EXPECT_FALSE(mm.state(0).on_disk);
  EXPECT_TRUE(mm.state(1).on_device);
  fs::create_directories(spill);  // the disk is back: everything still works
  ASSERT_TRUE(mm.try_stage({{2, true}}));
  mm.unstage({{2, true}});
  expect_chunk(mm, 0, content);
  expect_chunk(mm, 1, content);
}

TEST(MemoryManager, SpillDirIsCreatedAndCleanedUp) {
  TempDir dir;
  fs::path nested = dir.path() / "a" / "b";
  FakeDevice dev(0, 16 * KiB);
  {
    MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, nested.string()});
    EXPECT_TRUE(fs::is_directory(nested));
    EXPECT_TRUE(fs::is_empty(nested));  // the probe file is gone
    spill_chunk_zero(mm, std::vector<unsigned char>(16 * KiB, 9));
    const fs::path run = fs::path(mm.spill_file(0)).parent_path();
    EXPECT_EQ(run.parent_path(), nested);
    EXPECT_FALSE(fs::is_empty(run));
    mm.destroy(0);  // its file goes with it
    EXPECT_TRUE(fs::is_empty(run));
  }
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_TRUE(fs::is_empty(nested));  // the run's folder went with the run
}

TEST(MemoryManager, DefaultSpillDirIsPrivateAndRemoved) {
  TempDir tmp;
  const char* old = std::getenv("TMPDIR");
  std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.str().c_str(), 1);
  FakeDevice dev(0, 16 * KiB);
  {
    MemoryManager mm({&dev}, MemoryLimits{16 * KiB, 16 * KiB, ""});
    EXPECT_TRUE(fs::is_empty(tmp.path())) << "created before the first spill";
    spill_chunk_zero(mm, std::vector<unsigned char>(16 * KiB, 9));
    fs::path file = mm.spill_file(0);
    EXPECT_EQ(file.parent_path().parent_path(), tmp.path());
    EXPECT_EQ(file.parent_path().filename().string().rfind("gridspan-spill-", 0), 0u);
    EXPECT_TRUE(fs::exists(file));
  }
  EXPECT_TRUE(fs::is_empty(tmp.path()));
  if (old) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

// A scripted sequence with every number checked: one device of four 16 KiB chunks, a host
// of two.
TEST(MemoryManager, StatsAreExactAfterAScriptedSequence) {
  TempDir dir;
  FakeDevice dev(0, 64 * KiB);
  // Without pinning ahead or write-behind, whose blocks and copies would come at times of
  // their threads' choosing.
  MemoryManager mm({&dev}, MemoryLimits{64 * KiB, 32 * KiB, dir.str(), false, true, false});
  constexpr std::size_t C = 16 * KiB;
  for (ChunkId id = 0; id < 6; ++id) mm.create(id, C, 0);
  auto stage = [&](ChunkId id, bool write) {
    ASSERT_TRUE(mm.try_stage({{id, write}}));
    mm.unstage({{id, write}});
  };
  auto expect = [&](std::size_t dev_used, std::size_t dev_spilled, std::size_t host_used,
                    std::size_t host_spilled, std::size_t disk_used) {
    auto s = mm.stats();
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].name, "fake:0");
    EXPECT_EQ(s[0].used_bytes, dev_used);
    EXPECT_EQ(s[0].limit_bytes, 64 * KiB);
    EXPECT_EQ(s[0].total_bytes, s[0].used_bytes + s[0].cached_bytes);
    EXPECT_EQ(s[0].spilled_bytes, dev_spilled);
    EXPECT_EQ(s[0].peak_bytes, 64 * KiB);
    EXPECT_EQ(s[1].name, "host");
    EXPECT_EQ(s[1].used_bytes, host_used);
    EXPECT_EQ(s[1].limit_bytes, 32 * KiB);
    EXPECT_EQ(s[1].total_bytes, s[1].used_bytes + s[1].cached_bytes);
    EXPECT_EQ(s[1].spilled_bytes, host_spilled);
    EXPECT_EQ(s[2].name, "disk");
    EXPECT_EQ(s[2].used_bytes, disk_used);
    EXPECT_EQ(s[2].limit_bytes, 0u);
    EXPECT_EQ(s[2].total_bytes, disk_used);
    EXPECT_EQ(s[2].spilled_bytes, 0u);
  };
  for (ChunkId id = 0; id < 4; ++id) stage(id, true);  // device: 0 1 2 3
  stage(4, true);                                      // 0 → host
  expect(4 * C, C, C, 0, 0);
  stage(0, false);  // 1 → host; 0 back, its host copy kept
  expect(4 * C, 2 * C, 2 * C, 0, 0);
  EXPECT_TRUE(mm.state(0).on_host);
  stage(2, false);  // resident: nothing moves.  Device LRU: 3 4 0 2
  stage(1, false);  // 3 → host, which drops 0's redundant copy; 1 back.  LRU: 4 0 2 1
  expect(4 * C, 3 * C, 2 * C, C, 0);
  EXPECT_FALSE(mm.state(0).on_host);
  EXPECT_TRUE(mm.state(1).on_host);
  stage(1, true);  // a write: 1's host copy is stale and goes
  expect(4 * C, 3 * C, C, C, 0);
  EXPECT_FALSE(mm.state(1).on_host);
  EXPECT_EQ(mm.stats()[1].cached_bytes, C);
  stage(5, true);  // 4 → host (reusing the cached block).  LRU: 0 2 1 5
  expect(4 * C, 4 * C, 2 * C, C, 0);
  EXPECT_EQ(mm.stats()[1].cached_bytes, 0u);
  stage(3, false);  // 0 → host, which spills 4 (its only copy) to disk; 3 back.  LRU: 2 1 5 3
  expect(4 * C, 5 * C, 2 * C, 2 * C, C);
  EXPECT_TRUE(mm.state(4).on_disk);
  stage(4, false);  // 2 → host after dropping 3's redundant copy; 4 comes from disk through
                    // the host, which spills 0 to disk for room.  Disk keeps 4's file.
  expect(4 * C, 6 * C, 2 * C, 4 * C, 2 * C);
  ChunkState s4 = mm.state(4);
  EXPECT_TRUE(s4.on_device && s4.on_host && s4.on_disk);
  EXPECT_TRUE(mm.state(0).on_disk && !mm.state(0).on_host);
  EXPECT_EQ(mm.stats()[1].peak_bytes, 2 * C);
  EXPECT_EQ(mm.stats()[2].peak_bytes, 2 * C);

  // Writing 4 drops its host copy and its file as soon as it is staged.
  ASSERT_TRUE(mm.try_stage({{4, true}}));
  expect(4 * C, 6 * C, C, 4 * C, C);
  s4 = mm.state(4);
  EXPECT_TRUE(s4.on_device && !s4.on_host && !s4.on_disk && s4.pins == 1);
  EXPECT_THROW(mm.destroy(4), Error);
  mm.unstage({{4, true}});
  mm.destroy(4);
  expect(3 * C, 6 * C, C, 4 * C, C);
  EXPECT_EQ(mm.stats()[0].cached_bytes, C);
  EXPECT_EQ(dev.device_bytes(), 4 * C);  // used plus cached
}

// Device blocks of destroyed chunks and host blocks of dropped copies wait in the pools;
// free_cached_blocks gives all of them back, and the chunks still held keep their data.
TEST(MemoryManager, FreeCachedBlocksGivesEveryFreeBlockBack) {
  TempDir dir;
  FakeDevice dev(0, 64 * KiB);
  // Without pinning ahead or write-behind: the pools hold only what the script frees.
  MemoryManager mm({&dev}, MemoryLimits{32 * KiB, 0, dir.str(), false, true, false});
  constexpr std::size_t C = 16 * KiB;
  for (ChunkId id = 0; id < 3; ++id) {  // the third evicts the first to the host
    mm.create(id, C, 0);
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    std::memset(mm.data(id), int(id + 1), C);
    mm.unstage({{id, true}});
  }
  mm.destroy(0);  // its host copy's block is cached
  mm.destroy(1);  // its device block is cached
  auto s = mm.stats();
  EXPECT_EQ(s[0].cached_bytes, C);
  EXPECT_EQ(s[1].cached_bytes, C);
  EXPECT_EQ(s[0].total_bytes, 2 * C);
  EXPECT_EQ(s[1].total_bytes, C);
  EXPECT_EQ(mm.free_cached_blocks(), 2 * C);
  s = mm.stats();
  EXPECT_EQ(s[0].cached_bytes + s[1].cached_bytes, 0u);
  EXPECT_EQ(s[0].total_bytes, s[0].used_bytes);
  EXPECT_EQ(s[0].used_bytes, C);
  EXPECT_EQ(dev.device_bytes(), C);
  EXPECT_EQ(dev.host_bytes(), 0u);
  ASSERT_TRUE(mm.try_stage({{2, false}}));
  const auto* p = static_cast<const unsigned char*>(mm.data(2));
  EXPECT_EQ(std::count(p, p + C, 3), std::ptrdiff_t(C));
  mm.unstage({{2, false}});
  EXPECT_EQ(mm.free_cached_blocks(), 0u);
}

// GRIDSPAN_MEMORY_POOL=0: nothing is cached, on the device or the host.
TEST(MemoryManager, WithoutThePoolFreedMemoryGoesBackAtOnce) {
  TempDir dir;
  FakeDevice dev(0, 64 * KiB);
  MemoryLimits limits{32 * KiB, 0, dir.str()};
  limits.pool = false;
  limits.write_behind = false;  // its host block would be a second allocation
  MemoryManager mm({&dev}, limits);
  constexpr std::size_t C = 16 * KiB;
  for (ChunkId id = 0; id < 3; ++id) {
    mm.create(id, C, 0);
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  EXPECT_TRUE(mm.state(0).on_host);
  mm.destroy(0);
  mm.destroy(1);
  auto s = mm.stats();
  EXPECT_EQ(s[0].cached_bytes + s[1].cached_bytes, 0u);
  EXPECT_EQ(s[0].total_bytes, C);
  EXPECT_EQ(dev.device_bytes(), C);
  EXPECT_EQ(dev.host_bytes(), 0u);
  EXPECT_EQ(dev.host_allocations, 1) << "nothing pinned ahead without the pool";
}

TEST(MemoryManager, MisuseIsAnError) {
  SmallRig rig;
  auto& [dir, dev, mm] = rig;
  mm.create(1, 100, 0);
  EXPECT_THROW(mm.create(1, 100, 0), Error);
  EXPECT_THROW(mm.create(2, 100, 1), Error);
  EXPECT_THROW(mm.try_stage({{5, false}}), Error);
  EXPECT_THROW(mm.unstage({{1, false}}), Error);
  EXPECT_THROW(mm.destroy(5), Error);
  EXPECT_THROW(mm.pinned_bytes(3), Error);
  EXPECT_THROW(mm.data(1), Error);
}

TEST(MemoryManager, DeviceCapacityIsTheDefaultLimitAndCacheIsReleasedFirst) {
  TempDir dir;
  FakeDevice dev(0, 32 * KiB);
  MemoryManager mm({&dev}, MemoryLimits{0, 0, dir.str()});
  EXPECT_EQ(mm.stats()[0].limit_bytes, 32 * KiB);
  EXPECT_EQ(mm.stats()[1].limit_bytes, 0u);  // unbounded
  // 8 KiB blocks fill the device, are freed to the cache, then a 16 KiB chunk needs the
  // cached blocks given back (the fake device refuses to go over its capacity).
  for (ChunkId id = 0; id < 4; ++id) {
    mm.create(id, 8 * KiB, 0);
    ASSERT_TRUE(mm.try_stage({{id, true}}));
    mm.unstage({{id, true}});
  }
  mm.destroy(0);
  mm.destroy(1);
  EXPECT_EQ(mm.stats()[0].cached_bytes, 16 * KiB);
  mm.create(10, 16 * KiB, 0);
  ASSERT_TRUE(mm.try_stage({{10, true}}));
  mm.unstage({{10, true}});
  EXPECT_EQ(mm.stats()[0].spilled_bytes, 0u) << "released the cache instead of evicting";
  EXPECT_EQ(mm.stats()[0].cached_bytes, 0u);
  EXPECT_EQ(mm.stats()[0].used_bytes, 32 * KiB);
}

// A fake device whose copies to the device, once armed, stop until the test opens the gate.
class GatedDevice : public FakeDevice {
 public:
  using FakeDevice::FakeDevice;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    if (armed_.exchange(false)) {
      std::unique_lock lock(mutex_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
    }
    FakeDevice::copy_from_host(device, host, bytes);
  }
  void arm() { armed_ = true; }
  bool wait_entered(std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return entered_; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false;
  bool open_ = false;
};

// Six chunks of 16 KiB written through a 64 KiB device: 2..5 resident (written there, so
// their only copy), 0 and 1 on the host.
std::vector<std::vector<unsigned char>> six_written(MemoryManager& mm, std::mt19937_64& g) {
  std::vector<std::vector<unsigned char>> content;
  for (ChunkId id = 0; id < 6; ++id) {
    mm.create(id, 16 * KiB, 0);
    content.push_back(random_bytes(16 * KiB, g));
    write_chunk(mm, id, content[id]);
  }
  return content;
}

// A bring-back stuck in its copy holds up nobody else: another task's unstage, other
// stagings and the statistics complete while it waits.
TEST(MemoryManager, SlowCopyDoesNotHoldUpOtherThreads) {
  TempDir dir;
  GatedDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(6);
  const auto content = six_written(mm, g);
  ASSERT_FALSE(mm.state(0).on_device);  // device: 2 3 4 5; host: 0 1
  ASSERT_TRUE(mm.try_stage({{5, true}}));
  dev.arm();
  std::atomic<bool> staged{false};
  std::thread slow([&] { staged = mm.try_stage({{0, false}}); });  // evicts 2, copies 0 in
  bool entered = dev.wait_entered(std::chrono::seconds(30));
  EXPECT_TRUE(entered) << "the bring-back of chunk 0 never started its copy";
  // With the copy stuck, everything else goes on (a lock held over the copy would hang
  // here, so it runs on a thread and the test gives up after 30 s).
  std::promise<void> others_done;
  std::thread other([&] {
    mm.unstage({{5, true}});
    EXPECT_TRUE(mm.try_stage({{3, false}}));  // resident: no copy
    EXPECT_EQ(std::memcmp(mm.data(3), content[3].data(), 16 * KiB), 0);
    mm.unstage({{3, false}});
    EXPECT_EQ(mm.state(0).pins, 1);  // being staged
    EXPECT_EQ(mm.stats()[0].used_bytes, 64 * KiB);
    others_done.set_value();
  });
  auto status = others_done.get_future().wait_for(std::chrono::seconds(30));
  EXPECT_EQ(status, std::future_status::ready) << "unstage waited for another task's copy";
  EXPECT_FALSE(staged.load()) << "the slow staging finished before the gate opened";
  dev.open();
  slow.join();
  other.join();
  ASSERT_TRUE(staged.load());
  EXPECT_EQ(std::memcmp(mm.data(0), content[0].data(), 16 * KiB), 0);
  mm.unstage({{0, false}});
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
}

// Destroying a chunk that another thread is moving waits for the move instead of freeing
// memory under it (and then refuses: a task being staged uses the chunk).
TEST(MemoryManager, DestroyWaitsForAChunkInTransit) {
  TempDir dir;
  GatedDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::vector<unsigned char> content(16 * KiB, 3);
  for (ChunkId id = 0; id < 5; ++id) {
    mm.create(id, 16 * KiB, 0);
    write_chunk(mm, id, content);
  }
  ASSERT_TRUE(mm.state(0).on_host && !mm.state(0).on_device);
  dev.arm();
  std::atomic<bool> staged{false}, refused{false};
  std::thread slow([&] { staged = mm.try_stage({{0, false}}); });
  ASSERT_TRUE(dev.wait_entered(std::chrono::seconds(30)));
  std::thread destroyer([&] {
    try {
      mm.destroy(0);
    } catch (const Error&) {
      refused = true;
    }
  });
  dev.open();
  slow.join();
  destroyer.join();
  ASSERT_TRUE(staged.load());
  EXPECT_TRUE(refused.load());
  expect_chunk(mm, 0, content);
  mm.unstage({{0, false}});
  mm.destroy(0);
  EXPECT_FALSE(mm.exists(0));
}

// A device whose copies to the host wait (up to 5 s) for a copy from the host to begin,
// and fail when told to.
class CrossingDevice : public FakeDevice {
 public:
  using FakeDevice::FakeDevice;
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    if (fail_copy_out) throw Error("deliberate failure of a copy to the host");
    if (wait_for_copy_in) {
      std::unique_lock lock(mutex_);
      crossed = cv_.wait_for(lock, std::chrono::seconds(5), [&] { return copying_in_; });
    }
    FakeDevice::copy_to_host(host, device, bytes);
  }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    {
      std::lock_guard lock(mutex_);
      copying_in_ = true;
    }
    cv_.notify_all();
    FakeDevice::copy_from_host(device, host, bytes);
  }
  void expect_copies_in(bool wait) {
    std::lock_guard lock(mutex_);
    copying_in_ = false;
    wait_for_copy_in = wait;
  }
  std::atomic<bool> wait_for_copy_in{false}, fail_copy_out{false}, crossed{false};

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool copying_in_ = false;
};

// A device copy evicted for a staging goes to the host while the staging brings its other
// chunks in: the write-back runs on a thread of its own and the room it will give back
// counts as free. Here the write-back waits for the copy in, which could not begin before
// it if it ran on the staging thread.
TEST(MemoryManager, AVictimIsWrittenBackWhileTheNextChunkComesIn) {
  TempDir dir;
  CrossingDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(7);
  auto content = six_written(mm, g);
  expect_chunk(mm, 0, content[0]);  // device: 3 4 5 0 (0 also on the host); host: 1 2
  mm.announce(50, {{3, false}, {4, false}, {5, false}});
  dev.expect_copies_in(true);
  // Room for 1 and 2: 0 is dropped (the host has it), one of 3..5 written back.
  ASSERT_TRUE(mm.try_stage({{1, false}, {2, false}}));
  dev.expect_copies_in(false);
  EXPECT_TRUE(dev.crossed) << "the write-back ran before the copy in began";
  EXPECT_EQ(std::memcmp(mm.data(1), content[1].data(), 16 * KiB), 0);
  EXPECT_EQ(std::memcmp(mm.data(2), content[2].data(), 16 * KiB), 0);
  mm.unstage({{1, false}, {2, false}});
  mm.retire(50, {{3, false}, {4, false}, {5, false}});
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
}

// A write-back that fails is the error of the staging that evicted it; the chunk keeps its
// device copy, and a later staging goes through.
TEST(MemoryManager, AFailedWriteBackIsTheStagingsErrorAndLosesNothing) {
  TempDir dir;
  CrossingDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(8);
  auto content = six_written(mm, g);
  dev.fail_copy_out = true;
  try {
    mm.try_stage({{0, false}});
    ADD_FAILURE() << "the staging succeeded though its victim could not be written back";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deliberate failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(mm.pinned_bytes(0), 0u);
  EXPECT_TRUE(mm.state(2).on_device);
  dev.fail_copy_out = false;
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
}

// Waits up to 10 s for the host pool to cache `bytes` (blocks pinned ahead).
bool host_caches(const MemoryManager& mm, std::size_t bytes) {
  return test::eventually([&] { return space(mm.stats(), "host").cached_bytes == bytes; });
}

// Once a device evicts, a thread pins a host block ahead for each of its resident chunks
// that has no host copy, so that a first write-back finds its block waiting; with
// pin_ahead off the write-back allocates it.
TEST(MemoryManager, HostBlocksArePinnedAheadForADeviceThatEvicts) {
  for (bool ahead : {true, false}) {
    SCOPED_TRACE(ahead ? "pinning ahead" : "not pinning ahead");
    TempDir dir;
    FakeDevice dev(0, 64 * KiB);
    MemoryLimits limits = small_limits(dir.str());
    limits.pin_ahead = ahead;
    MemoryManager mm({&dev}, limits);
    std::mt19937_64 g = test::rng(9);
    auto content = six_written(mm, g);  // 0 and 1 written back: the device is out of core
    EXPECT_EQ(host_caches(mm, ahead ? 4 * 16 * KiB : 0), true)
        << "chunks 2..5 are resident without a host copy";
    const int before = dev.host_allocations;
    mm.announce(60, {{2, false}, {3, false}});
    ASSERT_TRUE(mm.try_stage({{0, false}, {1, false}}));  // 4 and 5 written back
    EXPECT_EQ(dev.host_allocations - before, ahead ? 0 : 2);
    mm.unstage({{0, false}, {1, false}});
    mm.retire(60, {{2, false}, {3, false}});
    for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
    EXPECT_LE(dev.host_bytes(), 128 * KiB) << "the host limit";
  }
}

// The name of the calling thread (gridspan names its own: name_this_thread).
std::string this_thread_name() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

// A device that watches which thread allocates its host blocks: it counts those the
// write-back thread allocates itself, and refuses those of the thread named `refuse`.
class HostBlocksDevice : public FakeDevice {
 public:
  using FakeDevice::FakeDevice;
  void* allocate_host(std::size_t bytes) override {
    const std::string name = this_thread_name();
    if (name == "gs-write-back") ++by_writer;
    if (name == refuse) {
      ++refused;
      throw OutOfMemoryError("pinned host memory", bytes, 0, 0, "deliberately refused");
    }
    return FakeDevice::allocate_host(bytes);
  }
  std::string refuse;  // empty: none
  std::atomic<int> by_writer{0}, refused{0};
};

// Once the chunks created on a device outgrow its memory, host blocks are pinned ahead for
// its resident chunks before its first eviction, and the first write-backs find them
// waiting. Here six chunks of 16 KiB are created on a 64 KiB device and four written: none
// evicted, four blocks pinned; writing the other two evicts two into those blocks.
TEST(MemoryManager, HostBlocksArePinnedAheadOnceADevicesChunksOutgrowIt) {
  TempDir dir;
  HostBlocksDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(11);
  std::vector<std::vector<unsigned char>> content;
  for (ChunkId id = 0; id < 6; ++id) {
    mm.create(id, 16 * KiB, 0);
    content.push_back(random_bytes(16 * KiB, g));
  }
  for (ChunkId id = 0; id < 4; ++id) write_chunk(mm, id, content[id]);
  EXPECT_TRUE(mm.state(0).on_device) << "nothing was evicted yet";
  EXPECT_TRUE(host_caches(mm, 4 * 16 * KiB)) << "no block was pinned ahead before an eviction";
  for (ChunkId id = 4; id < 6; ++id) write_chunk(mm, id, content[id]);
  EXPECT_FALSE(mm.state(0).on_device);
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
  EXPECT_EQ(dev.by_writer, 0) << "a write-back allocated its own host block";
}

// Pinning ahead that fails stops for good and loses nothing: the write-backs allocate
// their blocks themselves.
TEST(MemoryManager, PinningAheadThatFailsStopsAndLosesNothing) {
  TempDir dir;
  HostBlocksDevice dev(0, 64 * KiB);
  dev.refuse = "gs-host-pin";  // the thread that pins ahead
  MemoryManager mm({&dev}, small_limits(dir.str()));
  std::mt19937_64 g = test::rng(10);
  auto content = six_written(mm, g);
  test::eventually([&] { return dev.refused > 0; });
  EXPECT_EQ(dev.refused, 1);
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
  EXPECT_EQ(dev.refused, 1) << "pinning ahead went on after a failure";
  EXPECT_EQ(space(mm.stats(), "host").cached_bytes, 0u);
}

// small_limits with write-behind on: once the device evicts, the chunks it would evict next
// that have no host copy are copied to the host while they stay resident.
MemoryLimits behind_limits(const std::string& dir) {
  MemoryLimits limits = small_limits(dir);
  limits.write_behind = true;
  return limits;
}

// With write-behind, the unneeded chunks first in the eviction order get host copies while
// resident, up to two tasks' blocks (here 2 chunks: the tasks stage one 16 KiB chunk each),
// and evicting one for the next staging copies nothing out. Without it they have no host copy
// and the eviction writes one back.
TEST(MemoryManager, WriteBehindCopiesTheNextVictimsOutAheadAndTheirEvictionIsFree) {
  for (bool behind : {true, false}) {
    SCOPED_TRACE(behind ? "write-behind" : "no write-behind");
    TempDir dir;
    FakeDevice dev(0, 64 * KiB);
    MemoryManager mm({&dev}, behind ? behind_limits(dir.str()) : small_limits(dir.str()));
    std::mt19937_64 g = test::rng(11);
    auto content = six_written(mm, g);  // 0, 1 evicted: device 2 3 4 5, least recent first
    if (behind) {
      EXPECT_TRUE(test::eventually([&] { return mm.state(3).on_host; }));
    }
    for (ChunkId id = 2; id < 6; ++id) {
      EXPECT_TRUE(mm.state(id).on_device) << id;
      EXPECT_EQ(mm.state(id).on_host, behind && id < 4) << id;
    }
    const int out = dev.copies_to_host;
    ASSERT_TRUE(mm.try_stage({{0, false}}));  // evicts 2
    EXPECT_FALSE(mm.state(2).on_device);
    EXPECT_EQ(dev.copies_to_host - out, behind ? 0 : 1);
    mm.unstage({{0, false}});
    for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
  }
}

// A chunk written after its write-behind loses that host copy: evicted later, its new
// contents are written back and come back, never the stale copy.
TEST(MemoryManager, AChunkWrittenAfterItsWriteBehindIsWrittenBackAnew) {
  TempDir dir;
  FakeDevice dev(0, 64 * KiB);
  MemoryManager mm({&dev}, behind_limits(dir.str()));
  std::mt19937_64 g = test::rng(12);
  auto content = six_written(mm, g);
  ASSERT_TRUE(test::eventually([&] { return mm.state(2).on_host && mm.state(3).on_host; }));
  content[2] = random_bytes(16 * KiB, g);
  write_chunk(mm, 2, content[2]);  // now the most recently used: 3 4 5 2
  for (ChunkId id : {0, 1, 3, 4}) expect_chunk(mm, id, content[id]);  // 2 goes on the way
  EXPECT_FALSE(mm.state(2).on_device);
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
}

// Write-behind takes only room the host space has: with the host full of the chunks already
// evicted, nothing is written behind (and nothing of the host is evicted for it).
TEST(MemoryManager, WriteBehindWaitsForRoomInTheHostSpace) {
  TempDir dir;
  FakeDevice dev(0, 64 * KiB);
  MemoryLimits limits = behind_limits(dir.str());
  limits.host_bytes = 32 * KiB;  // 0 and 1
  MemoryManager mm({&dev}, limits);
  std::mt19937_64 g = test::rng(13);
  auto content = six_written(mm, g);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a write-behind would be done
  for (ChunkId id = 0; id < 6; ++id) {
    EXPECT_EQ(mm.state(id).on_host, id < 2) << id;
    EXPECT_FALSE(mm.state(id).on_disk) << id;
  }
  for (ChunkId id = 0; id < 6; ++id) expect_chunk(mm, id, content[id]);
}

// Several threads stage random sets of chunks (with random writes) under small limits and
// check every chunk's content against its last written checksum.
TEST(MemoryManager, ConcurrentStagingKeepsDataIntact) {
  TempDir dir;
  FakeDevice dev0(0, 48 * KiB), dev1(1, 48 * KiB);
  // 80 to 128 KiB of chunks per device of 48 KiB, and a host of 24 KiB: whatever the
  // interleaving and the seed, evictions overflow the host to disk. (Chunks of 2 to 16 KiB
  // fitted both devices for one seed in a few hundred, and nothing spilled.)
  MemoryManager mm({&dev0, &dev1}, MemoryLimits{48 * KiB, 24 * KiB, dir.str()});
  constexpr int kChunks = 16, kThreads = 4, kTasksPerThread = 300;
  std::mt19937_64 setup = test::rng(4);
  auto hash = [](const unsigned char* p, std::size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  };
  std::vector<uint64_t> checksum(kChunks);
  std::vector<std::mutex> chunk_locks(kChunks);  // the scheduler's per-chunk ordering
  for (int id = 0; id < kChunks; ++id) {
    std::size_t bytes = (10 + setup() % 7) * 1024;  // 10..16 KiB: three fit a device
    mm.create(id, bytes, id % 2);
    auto content = random_bytes(bytes, setup);
    checksum[id] = hash(content.data(), bytes);
    write_chunk(mm, id, content);
  }
  std::atomic<int> bad{0}, timeouts{0}, retries{0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto worker = [&](int t) {
    std::mt19937_64 g = test::rng(100 + t);
    for (int task = 0; task < kTasksPerThread; ++task) {
      std::vector<int> ids(kChunks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), g);
      ids.resize(1 + g() % 3);
      std::sort(ids.begin(), ids.end());  // lock in one order
      std::vector<ChunkUse> uses;
      for (int id : ids) uses.push_back({static_cast<ChunkId>(id), g() % 2 == 0});
      for (int id : ids) chunk_locks[id].lock();
      bool staged = false;
      while (!(staged = mm.try_stage(uses))) {
        ++retries;
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::yield();
      }
      if (staged) {
        for (const ChunkUse& use : uses) {
          auto* p = static_cast<unsigned char*>(mm.data(use.chunk));
          std::size_t n = mm.bytes(use.chunk);
          if (hash(p, n) != checksum[use.chunk]) ++bad;
          if (use.write) {
            for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(g() % 255 + 1);
            checksum[use.chunk] = hash(p, n);
          }
        }
        for (int d = 0; d < 2; ++d) {
          if (mm.pinned_bytes(d) > 48 * KiB) ++bad;
        }
        mm.unstage(uses);
      } else {
        ++timeouts;
      }
      for (int id : ids) chunk_locks[id].unlock();
      if (!staged) return;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(timeouts.load(), 0) << "staging made no progress for 60 s";
  auto stats = mm.stats();
  EXPECT_GT(space(stats, "host").spilled_bytes, 0u) << "the limits should force spills";
  EXPECT_EQ(mm.pinned_bytes(0) + mm.pinned_bytes(1), 0u);
  std::printf("stress: %d retries of try_stage; spilled device %zu, host %zu bytes\n",
              retries.load(), stats[0].spilled_bytes + stats[1].spilled_bytes,
              space(stats, "host").spilled_bytes);
}

}  // namespace
}  // namespace gridspan::runtime
