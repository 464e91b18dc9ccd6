// The cpu backend's devices (memory, copies, executor threads) and its fiber runner.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu.hpp"
#include "backend/kernel_support.hpp"
#include "gridspan/core/error.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

using backend::cpu::CpuDevice;

TEST(CpuDevice, DescribesItselfAndAllocatesAlignedMemory) {
  CpuDevice d(3, 1 << 20, 1);
  EXPECT_EQ(d.index(), 3);
  EXPECT_EQ(d.name(), "cpu:3");
  EXPECT_EQ(d.memory_capacity(), std::size_t(1) << 20);
  EXPECT_TRUE(d.unified());
  for (std::size_t bytes : {0, 1, 63, 64, 1000, 1 << 16}) {
    void* p = d.allocate(bytes);
    void* h = d.allocate_host(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 64, 0u);
    d.deallocate(p, bytes);
    d.deallocate_host(h, bytes);
  }
}

TEST(CpuDevice, CopiesAreMemoryCopies) {
  CpuDevice d(0, 1 << 20, 1);
  auto g = rng(11);
  std::vector<int> src = random_vector<int>(1000, g), back(1000, poison<int>());
  void* p = d.allocate(4000);
  d.copy_from_host(p, src.data(), 4000);
  d.copy_to_host(back.data(), p, 4000);
  EXPECT_EQ(back, src);
  d.deallocate(p, 4000);
}

// Memory a cpu device lends is copied by another process's device straight from this
// process (cross-memory attach): a child, forked before the values change here, sees the
// new ones, region by region. In one process the copy is a plain one. A description that
// is not a cpu device's cannot be opened (LendingError: the bytes go the long way), and a
// box larger than what was lent is an error.
TEST(CpuDevice, AnotherProcessCopiesTheMemoryItLends) {
  auto g = rng(12);
  const Rect box(2, {0, 0, 0}, {40, 50, 1}), region(2, {5, 10, 0}, {30, 45, 1});
  const Rect out_box(2, {3, 8, 0}, {32, 47, 1});
  CpuDevice d(0, 1 << 20, 1);
  auto* chunk = static_cast<int*>(d.allocate(box.volume() * 4));
  std::vector<int> old = random_vector<int>(box.volume(), g);
  std::memcpy(chunk, old.data(), old.size() * 4);
  const std::vector<unsigned char> lent = d.lend(chunk, box.volume() * 4);
  ASSERT_FALSE(lent.empty());
  auto expect_region = [&](const std::vector<int>& out, const std::vector<int>& from) {
    int wrong = 0;
    for (int64_t i = out_box.lo[0]; i < out_box.hi[0]; ++i)
      for (int64_t j = out_box.lo[1]; j < out_box.hi[1]; ++j) {
        const int got = out[out_box.offset_of(Point{i, j, 0})];
        const bool inside = region.contains(Point{i, j, 0});
        wrong += got != (inside ? from[box.offset_of(Point{i, j, 0})] : poison<int>());
      }
    return wrong;
  };
  {  // one process
    std::vector<int> out(out_box.volume(), poison<int>());
    CpuDevice e(1, 1 << 20, 1);
    e.copy_lent(out.data(), out_box, lent, box, region, 4);
    EXPECT_EQ(expect_region(out, old), 0);
  }
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // its copy of `chunk` keeps the old values; the parent's are new
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    std::vector<int> now(old.size());
    for (std::size_t i = 0; i < old.size(); ++i) now[i] = old[i] * 3 + 7;
    std::vector<int> out(out_box.volume(), poison<int>());
    CpuDevice e(1, 1 << 20, 1);
    try {
      e.copy_lent(out.data(), out_box, lent, box, region, 4);
    } catch (const backend::LendingError&) {
      _exit(2);  // not allowed here (ptrace restrictions)
    } catch (...) {
      _exit(4);
    }
    _exit(expect_region(out, now) == 0 ? 0 : 1);
  }
  for (std::size_t i = 0; i < old.size(); ++i) chunk[i] = old[i] * 3 + 7;
  ASSERT_EQ(write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(go[0]);
  close(go[1]);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) {
    d.deallocate(chunk, box.volume() * 4);
    GTEST_SKIP() << "this machine does not let processes read each other's memory";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong values, 4: another error";
  std::vector<int> out(out_box.volume());
  std::vector<unsigned char> gpu_like = lent;
  gpu_like[2] = 'c';
  EXPECT_THROW(d.copy_lent(out.data(), out_box, gpu_like, box, region, 4), backend::LendingError);
  EXPECT_THROW(d.copy_lent(out.data(), out_box, lent, Rect(2, {0, 0, 0}, {41, 50, 1}), region, 4),
               NetError);
  d.deallocate(chunk, box.volume() * 4);
}

TEST(CpuDevice, SubmitRunsWorkOnExecutorThreadsAndPropagatesExceptions) {
  CpuDevice d(0, 1 << 20, 2);
  EXPECT_EQ(d.threads(), 2);
  std::promise<std::thread::id> ran;
  std::promise<std::exception_ptr> ok, failed;
  EXPECT_EQ(d.submit([&] { ran.set_value(std::this_thread::get_id()); },
                     [&](std::exception_ptr e) { ok.set_value(e); }, {}),
            0u);  // no tickets: its works run to their end
  d.submit([] { throw LaunchError("superblock 7 failed"); },
           [&](std::exception_ptr e) { failed.set_value(e); }, {});
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
  EXPECT_EQ(ok.get_future().get(), nullptr);
  std::exception_ptr e = failed.get_future().get();
  ASSERT_NE(e, nullptr);
  try {
    std::rethrow_exception(e);
  } catch (const LaunchError& err) {
    EXPECT_STREQ(err.what(), "superblock 7 failed");
  }
}

TEST(CpuDevice, WorkOrderedAfterOtherWorkIsAnInternalError) {
  CpuDevice d(0, 1 << 20, 1);
  EXPECT_THROW(d.submit([] {}, [](std::exception_ptr) {}, {1}), Error);
}

TEST(CpuDevice, DestructorRunsEverythingSubmittedFirst) {
  std::atomic<int> work{0}, done{0};
  {
    CpuDevice d(0, 1 << 20, 3);
    for (int i = 0; i < 200; ++i) {
      d.submit([&] { work.fetch_add(1); },
               [&](std::exception_ptr e) {
                 if (!e) done.fetch_add(1);
               },
               {});
    }
  }
  EXPECT_EQ(work.load(), 200);
  EXPECT_EQ(done.load(), 200);
}

TEST(CpuDevice, ParallelRunsEveryPieceOnceAndRethrowsAfterAllEnded) {
  CpuDevice d(0, 1 << 20, 3);
  const int pieces = 1000;
  std::vector<std::atomic<int>> runs(pieces);
  d.parallel(pieces, [&](int i) { runs[i].fetch_add(1); });
  for (int i = 0; i < pieces; ++i) ASSERT_EQ(runs[i].load(), 1) << "piece " << i;
  std::vector<std::atomic<int>> again(pieces);
  try {
    d.parallel(pieces, [&](int i) {
      again[i].fetch_add(1);
      if (i == 5 || i == 700) throw LaunchError(fmt::format("piece {} failed", i));
    });
    ADD_FAILURE() << "no exception";
  } catch (const LaunchError& e) {
    EXPECT_TRUE(std::string(e.what()) == "piece 5 failed" ||
                std::string(e.what()) == "piece 700 failed")
        << e.what();
  }
  for (int i = 0; i < pieces; ++i) ASSERT_EQ(again[i].load(), 1) << "piece " << i;
}

// With every executor thread busy, the caller runs all the pieces itself: no wait on work
// queued behind the busy ones.
TEST(CpuDevice, ParallelWhileEveryExecutorIsBusyRunsOnTheCaller) {
  CpuDevice d(0, 1 << 20, 2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> busy{0};
  for (int t = 0; t < 2; ++t)
    d.submit([&, released] { busy.fetch_add(1), released.wait(); }, nullptr, {});
  while (busy.load() < 2) std::this_thread::yield();
  std::vector<std::thread::id> ran(64);
  d.parallel(64, [&](int i) { ran[i] = std::this_thread::get_id(); });
  for (const auto& id : ran) EXPECT_EQ(id, std::this_thread::get_id());
  release.set_value();
}

TEST(CpuBackend, MakesTheConfiguredDevices) {
  Config c = backend_test_config();
  c.cpu_devices = 3;
  c.cpu_threads = 1;
  c.device_memory = std::size_t(64) << 20;
  auto b = backend::make_cpu_backend(c);
  EXPECT_EQ(b->name(), "cpu");
  auto devices = b->devices();
  ASSERT_EQ(devices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(devices[i]->index(), i);
    EXPECT_EQ(devices[i]->memory_capacity(), std::size_t(64) << 20);
  }
  c.device_memory = 0;
  c.cpu_devices = 2;
  auto b2 = backend::make_cpu_backend(c);
  EXPECT_GT(b2->devices()[0]->memory_capacity(), 0u);
}

// ---- the fiber runner -----------------------------------------------------------------

struct BarrierLog {
  int threads;
  std::vector<int> order;  // thread ids in the order they passed each point
};

void barrier_body(void* arg, int32_t t) {
  auto* log = static_cast<BarrierLog*>(arg);
  for (int phase = 0; phase < 3; ++phase) {
    log->order.push_back(phase * 1000 + t);
    backend::cpu::fiber_barrier();
  }
}

TEST(CpuFibers, EveryFiberReachesABarrierBeforeAnyPassesIt) {
  for (int threads : {1, 2, 7, 256, 3}) {  // the pool grows, then is reused smaller
    BarrierLog log{threads, {}};
    backend::cpu::run_fibers(threads, barrier_body, &log);
    ASSERT_EQ(log.order.size(), std::size_t(3 * threads));
    for (int phase = 0; phase < 3; ++phase)
      for (int t = 0; t < threads; ++t)
        EXPECT_EQ(log.order[phase * threads + t], phase * 1000 + t) << threads;
  }
}

void early_return_body(void* arg, int32_t t) {
  auto* count = static_cast<std::vector<int>*>(arg);
  if (t % 2) return;  // odd threads leave: they count as arrived
  for (int i = 0; i < 4; ++i) {
    ++(*count)[t];
    backend::cpu::fiber_barrier();
  }
}

TEST(CpuFibers, FibersThatReturnEarlyDoNotBlockTheOthers) {
  std::vector<int> count(10, 0);
  backend::cpu::run_fibers(10, early_return_body, &count);
  for (int t = 0; t < 10; ++t) EXPECT_EQ(count[t], t % 2 ? 0 : 4);
}

void throwing_body(void*, int32_t t) {
  backend::cpu::fiber_barrier();
  if (t == 3) throw std::runtime_error("thread 3 failed");
  backend::cpu::fiber_barrier();
}

TEST(CpuFibers, AnExceptionInAFiberReachesTheCallerAndTheRunnerStaysUsable) {
  EXPECT_THROW(backend::cpu::run_fibers(8, throwing_body, nullptr), std::runtime_error);
  BarrierLog log{5, {}};
  backend::cpu::run_fibers(5, barrier_body, &log);
  EXPECT_EQ(log.order.size(), 15u);
  backend::cpu::fiber_barrier();  // outside a fiber: a no-op
}

TEST(CpuFibers, RunConcurrentlyOnSeveralThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&good, i] {
      for (int rep = 0; rep < 20; ++rep) {
        BarrierLog log{16 + i, {}};
        backend::cpu::run_fibers(16 + i, barrier_body, &log);
        bool ok = log.order.size() == std::size_t(3 * (16 + i));
        for (int p = 0; ok && p < 3; ++p)
          for (int t = 0; t < 16 + i; ++t) ok = ok && log.order[p * (16 + i) + t] == p * 1000 + t;
        good += ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 80);
}

}  // namespace
}  // namespace gridspan::test
