// The memory pool as Cumo's (used and total bytes, free_all_blocks, GRIDSPAN_MEMORY_POOL=0)
// and pinned transfers (gs::PinnedBuffer, Array::read_async and write_async): values, the
// order of a transfer against the array's next launch, and bad input. Run under mpirun too
// (mpi.array.np2/np3): the pools of every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

std::vector<float> random_floats(std::size_t n, uint64_t salt) {
  auto g = test::rng(salt);
  std::uniform_real_distribution<float> d(-10, 10);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void expect_pools_consistent(const std::vector<gs::MemoryStats>& stats) {
  for (const auto& s : stats) {
    if (s.name == "disk") {
      EXPECT_EQ(s.total_bytes, s.used_bytes);
      continue;
    }
    EXPECT_EQ(s.total_bytes, s.used_bytes + s.cached_bytes) << s.name;
  }
}
std::size_t cached(const std::vector<gs::MemoryStats>& stats) {
  std::size_t c = 0;
  for (const auto& s : stats) c += s.cached_bytes;
  return c;
}

// Freed arrays' memory waits in the pools (total = used + cached) until free_all_blocks
// gives it back; live arrays keep their values.
TEST(MemoryPool, FreeAllBlocksGivesFreedMemoryBack) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 1 << 16;
  const auto keep_values = random_floats(n, 1);
  auto keep = ctx.from_vector(keep_values, {n});
  {
    auto a = ctx.from_vector(random_floats(n, 2), {n});
    auto b = gs::exp(a) + keep;  // a result of the array library (kept for reuse when freed)
    b.to_vector();
  }
  ctx.synchronize();
  auto before = ctx.memory_stats();
  expect_pools_consistent(before);
  EXPECT_GE(cached(before), std::size_t(n) * sizeof(float)) << "the freed array's chunks";
  ctx.free_all_blocks();
  auto after = ctx.memory_stats();
  expect_pools_consistent(after);
  EXPECT_EQ(cached(after), 0u);
  std::size_t used = 0;
  for (std::size_t d = 0; d + 2 < after.size(); ++d) {
    EXPECT_EQ(after[d].total_bytes, after[d].used_bytes) << after[d].name;
    used += after[d].used_bytes;
  }
  EXPECT_GE(used, std::size_t(n) * sizeof(float)) << "the live array's chunks stay";
  EXPECT_EQ(keep.to_vector(), keep_values);
  auto again = gs::exp(keep);  // the pools fill again as arrays come and go
  EXPECT_NEAR(again.to_vector()[7], std::exp(keep_values[7]), 1e-3 * std::exp(keep_values[7]));
}

// GRIDSPAN_MEMORY_POOL=0: a freed array's memory goes back at once.
TEST(MemoryPool, OffGivesMemoryBackAtOnce) {
  gs::Config c = test::quiet_config(2);
  c.memory_pool = false;
  gs::Context ctx(c);
  const int64_t n = 1 << 16;
  std::size_t used_with_array = 0;
  {
    auto a = ctx.from_vector(random_floats(n, 3), {n});
    ctx.synchronize();
    for (const auto& s : ctx.memory_stats()) used_with_array += s.used_bytes;
  }
  ctx.synchronize();
  auto stats = ctx.memory_stats();
  expect_pools_consistent(stats);
  EXPECT_EQ(cached(stats), 0u);
  std::size_t used = 0;
  for (const auto& s : stats) used += s.used_bytes;
  EXPECT_GE(used_with_array - used, std::size_t(n) * sizeof(float)) << "given back";
  ::setenv("GRIDSPAN_MEMORY_POOL", "0", 1);
  EXPECT_FALSE(gs::Config::from_env().memory_pool);
  ::unsetenv("GRIDSPAN_MEMORY_POOL");
  EXPECT_TRUE(gs::Config::from_env().memory_pool);
}

// A read into a pinned buffer and a write from one, over arrays of several chunks (which
// span the ranks under mpirun), in every direction, against the host values.
TEST(PinnedTransfers, ReadAndWriteWholeArrays) {
  gs::Context ctx(test::quiet_config(3));
  std::printf("seed %llu\n", static_cast<unsigned long long>(test::base_seed()));
  const int64_t rows = 37, cols = 53;
  const auto values = random_floats(rows * cols, 4);
  auto a = ctx.from_vector(values, {rows, cols}, gs::dist::rows(8));
  gs::PinnedBuffer<float> buf(ctx, std::size_t(rows * cols));
  EXPECT_EQ(buf.size(), std::size_t(rows * cols));
  if (ctx.backend_name() == "cuda") EXPECT_TRUE(buf.page_locked());
  std::fill(buf.begin(), buf.end(), -777.0f);  // poison
  gs::Event e = a.read_async(buf);
  e.wait();
  EXPECT_TRUE(e.ready());
  EXPECT_EQ(buf.to_vector(), values);

  // The write lands before the array's next launch reads it; the buffer's accessors wait.
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = float(i % 1000) - 500.0f;
  auto b = ctx.full<float>({rows, cols}, -1.0f, gs::dist::rows(5));
  gs::Event w = b.write_async(buf);
  auto doubled = b * 2.0f;
  auto got = doubled.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 2 * (float(i % 1000) - 500.0f));
  w.wait();

  // A view is copied, then read; a read after a write of the same buffer waits for it.
  auto col = a.slice(gs::all, 3);
  gs::PinnedBuffer<float> cb(ctx, std::size_t(rows));
  col.read_async(cb);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(cb[std::size_t(r)], values[std::size_t(r * cols + 3)]);
  auto c = gs::zeros<float>(ctx, {rows, cols});
  c.write_async(buf);
  c.read_async(buf);
  EXPECT_EQ(buf[1234], float(1234 % 1000) - 500.0f);
}

// An array freed while a read into a buffer is in flight, and a buffer freed while a write
// from it is in flight: both transfers complete with the right values.
TEST(PinnedTransfers, WhatIsInFlightStaysAlive) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 1 << 15;
  const auto values = random_floats(n, 5);
  gs::PinnedBuffer<float> buf(ctx, std::size_t(n));
  {
    auto a = ctx.from_vector(values, {n});
    auto x = gs::sin(a) * 3.0f;
    x.read_async(buf);
  }  // x and a go while the read may still run
  const auto got = buf.to_vector();
  for (int64_t i = 0; i < n; i += 97)
    EXPECT_NEAR(got[std::size_t(i)], std::sin(values[std::size_t(i)]) * 3.0f, 1e-5);
  auto b = gs::empty<float>(ctx, {n});
  {
    gs::PinnedBuffer<float> src(ctx, std::size_t(n));
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = values[i] + 1.0f;
    b.write_async(src);
  }  // the buffer goes while the write may still run
  const auto back = b.to_vector();
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], values[i] + 1.0f);
}

// A native function that keeps its device busy for a second (known to every process).
gs::NativeDef busy_second() {
  auto def = gs::NativeDef::from_function("gs_test_busy_second",
                                          [](const gs::NativeContext&, gs::Vector<int>) {
                                            std::this_thread::sleep_for(std::chrono::seconds(1));
                                          },
                                          {"out"});
  return def.annotate("global i => write out[i]");
}
const bool busy_registered = gs::register_native(busy_second());

// Taking a pinned buffer (page-locked memory on a GPU) does not wait for the work in flight.
TEST(PinnedTransfers, TakingABufferDoesNotWaitForTheDevices) {
  ASSERT_TRUE(busy_registered);
  // A GPU with nothing in flight has its work queued by the launching thread, which for a
  // native function means running it there (GRIDSPAN_LAUNCH_IDLE_DIRECT): the launch itself
  // would then take the second. The launch thread runs it here, as it runs any work queued
  // behind other work.
  gs::Config config = test::quiet_config(1);
  config.launch_idle_direct = false;
  gs::Context ctx(config);
  auto out = gs::zeros<int>(ctx, {16});
  gs::Event busy = ctx.compile(busy_second()).launch({16}, {16}, gs::work::tiles({16}), out);
  gs::PinnedBuffer<float> buf(ctx, std::size_t(1) << 22);
  buf[0] = 1.0f;  // no transfer in flight: no wait either
  EXPECT_FALSE(busy.ready()) << "taking the buffer waited for the second-long task";
  busy.wait();
}

TEST(PinnedTransfers, BadInputIsAnError) {
  gs::Context ctx(test::quiet_config(2));
  auto a = gs::zeros<double>(ctx, {4, 5});
  gs::PinnedBuffer<double> small(ctx, 19), none;
  test::expect_error([&] { a.read_async(small); }, "holds 19 elements");
  test::expect_error([&] { a.write_async(small); }, "must hold exactly the array");
  test::expect_error([&] { a.read_async(none); }, "pinned buffer is empty");
  auto view = a.slice(gs::all, gs::range(0, 4));
  gs::PinnedBuffer<double> sixteen(ctx, 16);
  test::expect_error([&] { view.write_async(sixteen); }, "is a view");
  EXPECT_NO_THROW(view.read_async(sixteen).wait());
  EXPECT_EQ(sixteen.to_vector(), std::vector<double>(16, 0.0));
  EXPECT_EQ(none.size(), 0u);
  EXPECT_TRUE(none.event().ready());
}

}  // namespace
}  // namespace gridspan
