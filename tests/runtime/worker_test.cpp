// The worker scheduler on the cpu backend's devices: dependency order (also on tasks later
// in the same batch), bounded staging under tiny memory, and failure propagation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "backend/cpu/cpu.hpp"
#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"
#include "plan/split.hpp"
#include "runtime/pool.hpp"
#include "runtime/rig.hpp"
#include "runtime/worker.hpp"
#include "support/eventually.hpp"
#include "support/random.hpp"

namespace gridspan::runtime {
namespace {

using plan::ChunkRef;
using plan::Task;

// Chunks 1..links (chunk c on device c % devices) and a chain through them: `values` are
// written into chunk 1, copied from chunk to chunk, and read back from the last into `out`.
struct Chain {
  std::vector<Task> creates, chain;
};
Chain copy_chain(Rig& rig, int devices, int links, const std::vector<int>& values,
                 std::vector<int>& out) {
  const int n = static_cast<int>(values.size());
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
  std::memcpy(data->data(), values.data(), n * 4);
  Chain c;
  std::vector<plan::TaskId> created;
  for (int k = 1; k <= links; ++k) {
    c.creates.push_back(rig.task(k % devices, plan::CreateChunk{plan::ChunkId(k), n * 4u}));
    created.push_back(c.creates.back().id);
  }
  c.chain.push_back(
      rig.task(1 % devices, plan::HostWrite{ChunkRef{1, box}, box, data, box, 4}, created));
  for (int k = 2; k <= links; ++k)
    c.chain.push_back(rig.task(
        k % devices,
        plan::Copy{ChunkRef{plan::ChunkId(k - 1), box}, ChunkRef{plan::ChunkId(k), box}, box, 4},
        {c.chain.back().id}));
  c.chain.push_back(rig.task(
      links % devices, plan::ReadBack{ChunkRef{plan::ChunkId(links), box}, box, out.data(), box, 4},
      {c.chain.back().id}));
  return c;
}

// A chain c0 → c1 → ... of chunk copies, each chunk on alternating devices, submitted in
// reverse order within one batch: the data must arrive intact at the end.
TEST(Worker, DependencyOrderWithinOneBatch) {
  auto g = test::rng(31);
  Rig rig(2, 1 << 20, 1 << 20);
  const int n = 1000, links = 20;
  auto values = test::random_vector<int>(n, g);
  std::vector<int> out(n, test::poison<int>());
  auto [tasks, chain] = copy_chain(rig, 2, links, values, out);
  plan::TaskId last = chain.back().id;
  tasks.insert(tasks.end(), chain.rbegin(), chain.rend());  // successors before predecessors
  rig.worker->submit(std::move(tasks));
  rig.worker->wait(last);
  EXPECT_EQ(out, values);
  EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
}

// Many independent fills under a device limit that holds only a few chunks and a staging
// bound of one chunk: all complete, none fails, data is right.
TEST(Worker, BoundedStagingUnderTinyMemoryCompletes) {
  Rig rig(2, 64 << 10, 16 << 10);
  const int chunks = 64, n = 4096;  // 16 KiB each: 1 MiB in all
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  std::vector<Task> tasks;
  std::vector<std::vector<int>> outs(chunks, std::vector<int>(n, test::poison<int>()));
  std::vector<plan::TaskId> reads;
  for (int c = 0; c < chunks; ++c) {
    auto create = rig.task(c % 2, plan::CreateChunk{plan::ChunkId(c + 1), n * 4u});
    plan::Fill fill{ChunkRef{plan::ChunkId(c + 1), box}, box, 4, {}};
    int v = c * 7 + 1;
    std::memcpy(fill.value.data(), &v, 4);
    auto f = rig.task(c % 2, fill, {create.id});
    auto r = rig.task(
        c % 2, plan::ReadBack{ChunkRef{plan::ChunkId(c + 1), box}, box, outs[c].data(), box, 4},
        {f.id});
    reads.push_back(r.id);
    tasks.push_back(std::move(create));
    tasks.push_back(std::move(f));
    tasks.push_back(std::move(r));
  }
  rig.worker->submit(std::move(tasks));
  rig.worker->wait_all();
  for (int c = 0; c < chunks; ++c) ASSERT_EQ(outs[c], std::vector<int>(n, c * 7 + 1)) << c;
  EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
}

// An execute of `exe` with one block per element of the 1-D `box`.
plan::Execute execute_of(const plan::Executable& exe, const Rect& box) {
  plan::Execute ex;
  ex.executable = &exe;
  ex.blocks = box;
  ex.block = {1};
  ex.grid = {box.extent(0)};
  return ex;
}

// A failing task fails its successors without running them, reports its error to wait()
// and wait_all(), and still lets deletions run.
TEST(Worker, FailurePropagatesToSuccessorsAndWaiters) {
  Rig rig(1, 1 << 20, 1 << 20);
  Rect box(1, {0, 0, 0}, {10, 1, 1});
  std::vector<Task> tasks;
  tasks.push_back(rig.task(0, plan::CreateChunk{1, 40}));
  Throws throws;
  plan::Execute ex = execute_of(throws, box);
  tasks.push_back(rig.task(0, ex, {1}));
  std::vector<int> out(10, 99);
  tasks.push_back(rig.task(0, plan::ReadBack{ChunkRef{1, box}, box, out.data(), box, 4}, {2}));
  tasks.push_back(rig.task(0, plan::DeleteChunk{1}, {3}));
  tasks.push_back(rig.task(0, plan::Barrier{}, {4}));
  rig.worker->submit(std::move(tasks));
  EXPECT_THROW(rig.worker->wait_all(), AccessError);
  EXPECT_NO_THROW(rig.worker->wait_all());         // reported once
  EXPECT_THROW(rig.worker->wait(3), AccessError);  // each waiter of a failed task hears it
  EXPECT_THROW(rig.worker->wait(5), AccessError);
  EXPECT_EQ(out, std::vector<int>(10, 99));  // the read-back never ran
  EXPECT_FALSE(rig.memory->exists(1));       // the deletion did
}

// A cpu device made asynchronous, as a GPU is (the cpu backend's LaneDevice), that can slow
// works down and counts how many were unfinished at once.
class AsyncDevice final : public backend::cpu::LaneDevice {
 public:
  AsyncDevice(backend::Device& inner, bool discrete) : LaneDevice(inner, discrete) {}
  int max_unfinished() const { return max_unfinished_.load(); }
  void forget_unfinished() { max_unfinished_ = 0; }
  std::atomic<int> slow_first{0};        // milliseconds the first work takes
  std::atomic<int> slow_next{0};         // milliseconds the next work submitted takes
  std::atomic<int> jitter_us{0};         // each work takes up to this long more
  std::atomic<bool> unreachable{false};  // memory other workers lend is out of its reach
  std::atomic<int> waiting{0};           // host threads between begin_wait and end_wait
  std::atomic<int> waits{0};             // begin_wait calls
  std::atomic<int> flushes{0};           // flush calls
  std::atomic<int> queued_waits{0};      // wait_queued calls

  void begin_wait() override { ++waits, ++waiting; }
  void end_wait() override { --waiting; }
  void flush() override { ++flushes; }
  void wait_queued() override {
    ++queued_waits;
    LaneDevice::wait_queued();
  }

  // Runs before each copy from host memory into device memory (a chunk brought back).
  std::function<void()> before_copy_in;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    if (before_copy_in) before_copy_in();
    LaneDevice::copy_from_host(device, host, bytes);
  }

  void copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                 const Rect& src_rect, const Rect& region, std::size_t elem_size) override {
    if (unreachable) throw backend::LendingError("a test device that reaches no other's memory");
    LaneDevice::copy_lent(dst, dst_rect, lent, src_rect, region, elem_size);
  }

 protected:
  void submitted(Ticket t, std::size_t unfinished) override {
    max_unfinished_ = std::max(max_unfinished_.load(), int(unfinished));
    if (const int ms = slow_next.exchange(0)) slow_ticket_ = t, slow_ms_ = ms;
  }
  void before_run(Ticket t) override {
    if (t == 1 && slow_first > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_first.load()));
    if (t == slow_ticket_) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_.load()));
    if (jitter_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(t * 7919 % jitter_us));
  }

 private:
  std::atomic<int> max_unfinished_{0};  // written under the device's lock
  std::atomic<Ticket> slow_ticket_{0};
  std::atomic<int> slow_ms_{0};
};

// The cpu backend's devices behind AsyncDevice.
struct AsyncRig : Rig {
  AsyncRig(int devices, std::size_t device_bytes, bool discrete = false, std::size_t staging = 0,
           std::size_t capacity = 0)
      : Rig(
            devices, device_bytes, staging, "cpu",
            [discrete](backend::Device& d) { return std::make_unique<AsyncDevice>(d, discrete); },
            capacity) {}
  AsyncDevice& async(int i) { return static_cast<AsyncDevice&>(*wrappers.at(i)); }
};

// A chain of copies on one asynchronous device goes to the device at once, each copy
// ordered behind its predecessor there (not released by the host one at a time); copies
// alternating between two devices are not (they wait for the host), nor is a read-back
// into host memory; the data is right.
TEST(Worker, DependentTasksAreQueuedBehindTheirPredecessorsOnTheirDevice) {
  auto g = test::rng(32);
  for (int devices : {1, 2}) {
    AsyncRig rig(devices, 1 << 20);
    rig.async(0).slow_first = 30;
    const int n = 1000, links = 20;
    auto values = test::random_vector<int>(n, g);
    std::vector<int> out(n, test::poison<int>());
    auto [tasks, chain] = copy_chain(rig, devices, links, values, out);
    plan::TaskId last = chain.back().id;
    tasks.insert(tasks.end(), chain.begin(), chain.end());
    rig.worker->submit(std::move(tasks));
    rig.worker->wait(last);
    EXPECT_EQ(out, values) << devices << " device(s)";
    auto stats = rig.worker->stats();
    EXPECT_EQ(stats.tasks_failed, 0u);
    EXPECT_EQ(stats.tasks_submitted, uint64_t(links + 1));
    if (devices == 1) {
      EXPECT_EQ(stats.tasks_released_early, uint64_t(links - 1));  // the copies
      EXPECT_GT(rig.async(0).max_unfinished(), links / 2);
    } else {
      EXPECT_EQ(stats.tasks_released_early, 0u);
      for (int d = 0; d < 2; ++d) EXPECT_EQ(rig.async(d).max_unfinished(), 1);
    }
  }
}

// A host thread waiting for a task (wait) or for all (wait_all) tells each asynchronous
// device for as long as it waits (a GPU's lanes that poll then wait in the driver), and
// not when there is nothing to wait for. Every wait first has each device begin what it has
// not begun (flush: a GPU's launch thread's works), even one for finished work: a GPU
// learns that its host waits (it then queues the next work for an idle GPU itself).
TEST(Worker, AWaitingHostThreadTellsItsAsynchronousDevices) {
  auto g = test::rng(33);
  for (bool all : {false, true}) {
    AsyncRig rig(2, 1 << 20);
    rig.async(0).slow_first = 200;
    const int n = 1000;
    auto values = test::random_vector<int>(n, g);
    std::vector<int> out(n, test::poison<int>());
    auto [tasks, chain] = copy_chain(rig, 1, 4, values, out);
    const plan::TaskId last = chain.back().id;
    tasks.insert(tasks.end(), chain.begin(), chain.end());
    rig.worker->submit(std::move(tasks));
    std::atomic<bool> over{false}, seen{false};
    std::thread look([&] {
      while (!over && !seen) {
        seen = rig.async(0).waiting > 0 && rig.async(1).waiting > 0;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    all ? rig.worker->wait_all() : rig.worker->wait(last);
    over = true;
    look.join();
    EXPECT_TRUE(seen) << (all ? "wait_all" : "wait");
    EXPECT_EQ(out, values);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(rig.async(d).waiting, 0) << d;
      if (!all) EXPECT_GT(rig.async(d).flushes, 0) << d;
    }
    const int waits = rig.async(0).waits, flushes = rig.async(0).flushes;
    rig.worker->wait(last);  // done already: nothing to wait for
    rig.worker->wait_all();
    EXPECT_EQ(rig.async(0).waits, waits);
    EXPECT_EQ(rig.async(0).flushes, flushes + 2);
  }
}

// One asynchronous device whose first work (the chain's write) runs 30 ms, and the chunks
// and chain of `links` copies through it (copy_chain).
struct SlowChain {
  AsyncRig rig{1, 1 << 20};
  std::vector<int> values, out;
  std::vector<Task> tasks, chain;
  SlowChain(int links, std::mt19937_64& g)
      : values(test::random_vector<int>(1000, g)), out(1000, test::poison<int>()) {
    rig.async(0).slow_first = 30;
    auto [creates, copies] = copy_chain(rig, 1, links, values, out);
    tasks = std::move(creates);
    chain = std::move(copies);
  }
};

// wait_all waits on the devices themselves (wait_queued, a GPU's streams) while work is
// queued there, also when a host-side task is still to run behind it (here a deletion, as
// after a reduction), instead of sleeping until a completion thread wakes it; the data is
// right and the deletion ran.
TEST(Worker, WaitingForAllWaitsOnTheDevicesWhileHostTasksWaitBehindThem) {
  auto g = test::rng(35);
  SlowChain s(6, g);
  auto& [rig, values, out, tasks, chain] = s;
  Task read_back = std::move(chain.back());
  chain.pop_back();
  chain.push_back(rig.task(0, plan::DeleteChunk{plan::ChunkId(1)}, {chain.back().id}));
  tasks.insert(tasks.end(), chain.begin(), chain.end());
  rig.worker->submit(std::move(tasks));
  rig.worker->wait_all();
  EXPECT_GT(rig.async(0).queued_waits, 0);
  EXPECT_FALSE(rig.memory->exists(1));
  read_back.deps.clear();
  const plan::TaskId id = read_back.id;
  std::vector<Task> last;
  last.push_back(std::move(read_back));
  rig.worker->submit(std::move(last));
  rig.worker->wait(id);
  EXPECT_EQ(out, values);
  EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
}

// A host thread waiting for a task queued on an asynchronous device watches until it ends
// instead of sleeping (a GPU reports an end at once while a host thread waits), however long
// it runs; one waiting for a task that waits on the host (a read-back into the user's memory
// is queued once its input is there) sleeps. The data is right either way.
TEST(Worker, AWaitForATaskOnAnAsynchronousDeviceWatchesUntilItEnds) {
  auto g = test::rng(36);
  for (bool on_device : {false, true}) {
    const int links = 4;
    SlowChain s(links, g);
    auto& [rig, values, out, tasks, chain] = s;
    const plan::TaskId last_copy = chain[chain.size() - 2].id, read_back = chain.back().id;
    tasks.insert(tasks.end(), chain.begin(), chain.end());
    rig.worker->submit(std::move(tasks));
    if (on_device) {
      // The write and every copy queued on the device (the write runs 30 ms).
      test::eventually([&] { return rig.async(0).max_unfinished() >= links; });
      ASSERT_EQ(rig.async(0).max_unfinished(), links);
      rig.worker->wait(last_copy);
      EXPECT_EQ(rig.worker->stats().waits_slept, 0u);
    }
    rig.worker->wait(read_back);
    EXPECT_EQ(out, values) << on_device;
    if (!on_device) EXPECT_EQ(rig.worker->stats().waits_slept, 1u);
    EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
  }
}

// Tasks submitted one by one faster than they run: submit waits once `max` are unfinished
// until half of them have ended, so at most `max` are unfinished at once (0: no bound, and
// they pile up behind the slow first one). The data is right either way.
TEST(Worker, SubmitWaitsWhileTooManyTasksAreUnfinished) {
  auto g = test::rng(34);
  for (std::size_t max : {0, 8}) {
    AsyncRig rig(1, 1 << 20);
    rig.async(0).slow_first = 50;
    rig.worker->set_max_unfinished(max);
    const int n = 1000, links = 64;
    auto values = test::random_vector<int>(n, g);
    std::vector<int> out(n, test::poison<int>());
    auto [creates, chain] = copy_chain(rig, 1, links, values, out);
    for (Task& t : creates) rig.worker->submit({std::move(t)});
    for (Task& t : chain) rig.worker->submit({std::move(t)});
    rig.worker->wait_all();
    EXPECT_EQ(out, values) << max;
    const WorkerStats s = rig.worker->stats();
    if (max) {
      EXPECT_LE(s.most_unfinished, max);
      EXPECT_GE(s.submit_waits, 1u);
    } else {
      EXPECT_GT(s.most_unfinished, uint64_t(links / 2));
      EXPECT_EQ(s.submit_waits, 0u);
    }
  }
}

// Four chunks of `n` random ints written through a discrete asynchronous device that holds
// three: the values of chunk c are values[c - 1]; one chunk was spilled to the host.
std::vector<std::vector<int>> four_written(AsyncRig& rig, int n, std::mt19937_64& g) {
  const std::size_t bytes = n * 4;
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  std::vector<std::vector<int>> values;
  std::vector<plan::Task> setup;
  std::vector<plan::TaskId> writes;
  for (plan::ChunkId c = 1; c <= 4; ++c) {
    values.push_back(test::random_vector<int>(n, g));
    auto data = std::make_shared<std::vector<unsigned char>>(bytes);
    std::memcpy(data->data(), values.back().data(), bytes);
    setup.push_back(rig.task(0, plan::CreateChunk{c, bytes}));
    setup.push_back(
        rig.task(0, plan::HostWrite{ChunkRef{c, box}, box, data, box, 4}, {setup.back().id}));
    writes.push_back(setup.back().id);
  }
  rig.worker->submit(std::move(setup));
  for (plan::TaskId w : writes) rig.worker->wait(w);
  return values;
}

// By default (GRIDSPAN_STAGING_BYTES unset) a device may have half of its memory staged for
// its queued and running tasks. Here four resident chunks of 320 MiB (only their first
// 1000 ints written and read) on a device of five such blocks: two tasks that read one each
// fit half of it (a quarter, 400 MiB, held one at a time: out of core a task's copies in then
// took turns with its kernel), and two are on the device at once while the first is slow.
TEST(Worker, TheDefaultStagingBoundIsHalfOfTheDevicesMemory) {
  auto g = test::rng(37);
  const int n = 1000;
  const std::size_t bytes = std::size_t(320) << 20, block = detail::BlockPool::size_class(bytes);
  AsyncRig rig(1, 5 * block, /*discrete=*/false, Rig::kDefaultStaging, 5 * block);
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  std::vector<std::vector<int>> values, got(4, std::vector<int>(n, test::poison<int>()));
  std::vector<plan::Task> setup, reads;
  for (plan::ChunkId c = 1; c <= 4; ++c) {
    values.push_back(test::random_vector<int>(n, g));
    auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
    std::memcpy(data->data(), values.back().data(), data->size());
    setup.push_back(rig.task(0, plan::CreateChunk{c, bytes}));
    setup.push_back(
        rig.task(0, plan::HostWrite{ChunkRef{c, box}, box, data, box, 4}, {setup.back().id}));
  }
  const plan::TaskId written = setup.back().id;
  rig.worker->submit(std::move(setup));
  rig.worker->wait_all();
  ASSERT_TRUE(rig.worker->is_done(written));
  rig.async(0).forget_unfinished();
  rig.async(0).slow_next = 100;
  for (plan::ChunkId c = 1; c <= 4; ++c)
    reads.push_back(rig.task(0, plan::ReadBack{ChunkRef{c, box}, box, got[c - 1].data(), box, 4}));
  rig.worker->submit(std::move(reads));
  rig.worker->wait_all();
  EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
  EXPECT_EQ(got, values);
  EXPECT_EQ(rig.async(0).max_unfinished(), 2) << "tasks of " << block << " bytes at once";
}

// A copy queued behind a slow one on its device goes to the device at once when its chunks
// are resident; when one of them was spilled to the host, it waits for the slow copy to end
// instead (bringing the chunk in ahead would evict what the tasks queued before it need;
// out of core that made sweeps thrash). The data is right either way.
TEST(Worker, ATaskWhoseChunksAreNotResidentIsNotQueuedAhead) {
  auto g = test::rng(33);
  for (bool spilled : {false, true}) {
    const int n = 1000;
    const std::size_t bytes = n * 4;
    AsyncRig rig(1, 3 * detail::BlockPool::size_class(bytes), /*discrete=*/true);
    Rect box(1, {0, 0, 0}, {n, 1, 1});
    const auto values = four_written(rig, n, g);
    // Three of the four fit: one was spilled to the host. The second copy reads it, or one
    // that stayed.
    std::vector<plan::ChunkId> resident, away;
    for (plan::ChunkId c = 1; c <= 4; ++c)
      (rig.memory->state(c).on_device ? resident : away).push_back(c);
    ASSERT_EQ(resident.size(), 3u);
    const plan::ChunkId out = resident[0], other = resident[1];
    const plan::ChunkId source = spilled ? away[0] : resident[2];
    const auto before = rig.worker->stats();
    rig.async(0).slow_next = 200;
    std::vector<int> got(n, test::poison<int>());
    std::vector<plan::Task> tasks;
    tasks.push_back(rig.task(0, plan::Copy{ChunkRef{other, box}, ChunkRef{out, box}, box, 4}));
    tasks.push_back(rig.task(0, plan::Copy{ChunkRef{source, box}, ChunkRef{out, box}, box, 4},
                             {tasks.back().id}));
    tasks.push_back(rig.task(0, plan::ReadBack{ChunkRef{out, box}, box, got.data(), box, 4},
                             {tasks.back().id}));
    const plan::TaskId last = tasks.back().id;
    rig.worker->submit(std::move(tasks));
    rig.worker->wait(last);
    EXPECT_EQ(got, values[source - 1]) << "spilled " << spilled;
    const auto after = rig.worker->stats();
    EXPECT_EQ(after.tasks_failed, 0u);
    EXPECT_EQ(after.tasks_released_early - before.tasks_released_early, spilled ? 0u : 1u)
        << "spilled " << spilled;
  }
}

// Four chunks of 1000 ints through a discrete asynchronous device that holds three: which
// stayed resident and which one was spilled, and a hook run before the copy that brings a
// chunk back, which waits up to `patience` for task `behind` and says whether it was done.
struct OneSpilled {
  static constexpr int n = 1000;
  static inline const std::size_t block = detail::BlockPool::size_class(n * 4);
  AsyncRig rig;
  Rect box{1, {0, 0, 0}, {n, 1, 1}};
  std::vector<std::vector<int>> values;
  std::vector<plan::ChunkId> resident, away;
  std::atomic<bool> behind_done{false};

  // `staging`: the worker's staging bound (0: its default of 1 MiB, every task at once).
  explicit OneSpilled(std::mt19937_64& g, std::size_t staging = 0)
      : rig(1, 3 * block, /*discrete=*/true, staging), values(four_written(rig, n, g)) {
    for (plan::ChunkId c = 1; c <= 4; ++c)
      (rig.memory->state(c).on_device ? resident : away).push_back(c);
  }
  void watch(plan::TaskId behind, std::chrono::milliseconds patience) {
    rig.async(0).before_copy_in = [this, behind, patience] {
      const auto until = std::chrono::steady_clock::now() + patience;
      while (!rig.worker->is_done(behind) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      behind_done = rig.worker->is_done(behind);
    };
  }
  plan::Task read_back(plan::ChunkId c, std::vector<int>& into) {
    return rig.task(0, plan::ReadBack{ChunkRef{c, box}, box, into.data(), box, 4});
  }
  void run(std::vector<plan::Task> tasks) {
    std::vector<plan::TaskId> ids;
    for (const auto& t : tasks) ids.push_back(t.id);
    rig.worker->submit(std::move(tasks));
    for (plan::TaskId id : ids) rig.worker->wait(id);
    rig.async(0).before_copy_in = nullptr;
    EXPECT_EQ(rig.worker->stats().tasks_failed, 0u);
  }
};

// Out of core, a ready task whose staging copies a chunk back to the device lets the ready
// tasks after it that need no copy go first: the device computes while the copy runs. Here
// the copy waits for the read-back submitted after it; without the deferral it would wait
// in vain (the read-back would be queued only once the copy was done).
TEST(Worker, ATaskThatNeedsACopyLetsTheReadyTasksBehindItGoFirst) {
  auto g = test::rng(34);
  OneSpilled s(g);
  ASSERT_EQ(s.resident.size(), 3u);
  // First a read-back of the spilled chunk (it must come back), then one of a resident chunk.
  std::vector<int> got_away(s.n, test::poison<int>()), got_resident(s.n, test::poison<int>());
  std::vector<plan::Task> tasks;
  tasks.push_back(s.read_back(s.away[0], got_away));
  tasks.push_back(s.read_back(s.resident[2], got_resident));
  s.watch(tasks[1].id, std::chrono::seconds(2));
  s.run(std::move(tasks));
  EXPECT_TRUE(s.behind_done) << "the task behind waited for the other's copy";
  EXPECT_EQ(got_away, s.values[s.away[0] - 1]);
  EXPECT_EQ(got_resident, s.values[s.resident[2] - 1]);
}

// A ready task that shares a chunk with a deferred one stays behind it, though it needs no
// copy: independent tasks on one chunk are reductions or writes of disjoint parts, and
// the order of a reduction is its result. Here both read the resident chunk; the first
// also writes half of the spilled one (so that chunk must come back first).
TEST(Worker, ATaskSharingAChunkWithADeferredOneStaysBehindIt) {
  auto g = test::rng(35);
  OneSpilled s(g);
  ASSERT_EQ(s.resident.size(), 3u);
  const plan::ChunkId from = s.resident[2], to = s.away[0];
  Rect half(1, {0, 0, 0}, {s.n / 2, 1, 1});
  std::vector<int> got_from(s.n, test::poison<int>()), got_to(s.n, test::poison<int>());
  std::vector<plan::Task> tasks;
  tasks.push_back(s.rig.task(0, plan::Copy{ChunkRef{from, s.box}, ChunkRef{to, s.box}, half, 4}));
  tasks.push_back(s.read_back(from, got_from));
  tasks.push_back(s.read_back(to, got_to));
  tasks.back().deps = {tasks.front().id};
  s.watch(tasks[1].id, std::chrono::milliseconds(300));
  s.run(std::move(tasks));
  EXPECT_FALSE(s.behind_done) << "a task on the deferred one's chunk went ahead of it";
  std::vector<int> want = s.values[to - 1];
  std::copy_n(s.values[from - 1].begin(), s.n / 2, want.begin());
  EXPECT_EQ(got_to, want);
  EXPECT_EQ(got_from, s.values[from - 1]);
}

// Under a staging bound of one task, a task whose staging copies a chunk back goes to the
// device before a resident one that waited for the bound with it (here the resident one was
// submitted first): its copy runs while the other waits, not after the other has run. Here the
// copy in looks whether the resident task is done; without the reordering it would be.
TEST(Worker, OfTheTasksThatWaitedForTheStagingBoundOneThatCopiesGoesFirst) {
  auto g = test::rng(36);
  OneSpilled s(g, OneSpilled::block);
  ASSERT_EQ(s.resident.size(), 3u);
  std::vector<std::vector<int>> got(3, std::vector<int>(s.n, test::poison<int>()));
  std::vector<plan::Task> tasks;
  s.rig.async(0).slow_next = 50;  // the first task holds the bound while the others queue
  tasks.push_back(s.read_back(s.resident[0], got[0]));
  tasks.push_back(s.read_back(s.resident[1], got[1]));
  tasks.push_back(s.read_back(s.away[0], got[2]));
  s.watch(tasks[1].id, std::chrono::milliseconds(300));
  s.run(std::move(tasks));
  EXPECT_FALSE(s.behind_done) << "the resident task went first and the copy waited for it";
  EXPECT_EQ(got[0], s.values[s.resident[0] - 1]);
  EXPECT_EQ(got[1], s.values[s.resident[1] - 1]);
  EXPECT_EQ(got[2], s.values[s.away[0] - 1]);
}

// A Stencil3 that records how many superblocks each of its runs got.
class BatchRecording : public Stencil3 {
 public:
  using Stencil3::Stencil3;
  void run_batch(const plan::ExecFrame* frames, std::size_t n) const override {
    {
      std::lock_guard lock(mutex_);
      sizes_.push_back(n);
    }
    Stencil3::run_batch(frames, n);
  }
  std::vector<std::size_t> sizes() const {
    std::lock_guard lock(mutex_);
    return sizes_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::vector<std::size_t> sizes_;
};

// The superblocks of one launch that are ready together on an asynchronous device go to it
// as one submission, at most eight at a time (a GPU runs them as one kernel launch); the
// results are the host's. Each device batches its own; a copy between two kernels in the
// work list ends a batch.
TEST(Worker, KernelsOfOneLaunchGoToTheirDeviceTogether) {
  for (int devices : {1, 2}) {
    AsyncRig rig(devices, 1 << 20);
    const int n = 1000, superblock = 50, sweeps = 4;  // 20 superblocks per launch
    auto kernel = std::make_shared<BatchRecording>(n);
    StencilProblem p(devices, n, superblock, sweeps, 34 + devices, kernel);
    for (auto& plan : p.plans) rig.worker->submit(std::move(plan.tasks));
    rig.worker->wait_all();
    EXPECT_EQ(p.out, p.want) << devices << " device(s)";
    const auto sizes = kernel->sizes();  // the batches (a kernel alone runs on its own)
    std::size_t batched = 0;
    for (std::size_t s : sizes) {
      EXPECT_GE(s, 2u);
      EXPECT_LE(s, 8u);
      batched += s;
    }
    const auto stats = rig.worker->stats();
    EXPECT_EQ(stats.tasks_batched, batched);
    EXPECT_EQ(stats.tasks_failed, 0u);
    if (devices == 1) {  // no copies between the kernels: every one goes in a batch
      EXPECT_EQ(batched, std::size_t(sweeps * n / superblock));
      EXPECT_EQ(*std::max_element(sizes.begin(), sizes.end()), 8u);
    } else {
      EXPECT_GT(batched, 0u);
    }
  }
}

// GRIDSPAN_BATCH_BLOCKS: superblocks of more blocks than the bound, and every one when it
// is 0, go to their device one by one, with the same results; at 2 they are batched.
TEST(Worker, SuperblocksAboveTheBatchBoundGoAlone) {
  for (int64_t bound : {int64_t(0), int64_t(1), int64_t(2)}) {
    AsyncRig rig(1, 1 << 20);
    rig.worker->set_batch_blocks(bound);
    const int n = 1000, superblock = 50, sweeps = 3;  // superblocks of 2 blocks of 25
    auto kernel = std::make_shared<BatchRecording>(n);
    StencilProblem p(1, n, superblock, sweeps, 91, kernel);
    for (auto& plan : p.plans) rig.worker->submit(std::move(plan.tasks));
    rig.worker->wait_all();
    EXPECT_EQ(p.out, p.want) << "bound " << bound;
    const uint64_t batched = rig.worker->stats().tasks_batched;
    if (bound == 2) {
      EXPECT_EQ(batched, uint64_t(sweeps * n / superblock)) << "bound " << bound;
      continue;
    }
    EXPECT_TRUE(kernel->sizes().empty()) << "bound " << bound;
    EXPECT_EQ(batched, 0u) << "bound " << bound;
  }
}

// A kernel that fails in a batch fails every task of it, and what comes after them.
TEST(Worker, AFailedBatchFailsEachOfItsTasks) {
  AsyncRig rig(1, 1 << 20);
  Throws throws;
  std::vector<Task> tasks;
  std::vector<plan::TaskId> runs;
  auto scalars = std::make_shared<std::vector<unsigned char>>();
  for (int k = 0; k < 3; ++k) {
    Rect blocks(1, {k, 0, 0}, {k + 1, 1, 1});
    plan::Execute ex = execute_of(throws, blocks);
    ex.scalars = scalars;
    tasks.push_back(rig.task(0, ex));
    runs.push_back(tasks.back().id);
  }
  tasks.push_back(rig.task(0, plan::Barrier{}, runs));
  const plan::TaskId barrier = tasks.back().id;
  rig.worker->submit(std::move(tasks));
  EXPECT_THROW(rig.worker->wait(barrier), AccessError);
  for (plan::TaskId t : runs) EXPECT_THROW(rig.worker->wait(t), AccessError);
  const auto stats = rig.worker->stats();
  EXPECT_EQ(stats.tasks_batched, 3u);
  EXPECT_EQ(stats.tasks_failed, 4u);
}

// A task queued behind one that then fails is reported failed with that error once the
// failure is known, though it ran; everything after it fails too (the read-back into host
// memory, which waits for the host, never runs), and waiters hear it.
TEST(Worker, TasksQueuedBehindAFailureFailWithIt) {
  AsyncRig rig(1, 1 << 20);
  rig.async(0).slow_first = 20;
  Rect box(1, {0, 0, 0}, {10, 1, 1});
  std::vector<Task> tasks;
  tasks.push_back(rig.task(0, plan::CreateChunk{1, 40}));
  tasks.push_back(rig.task(0, plan::CreateChunk{2, 40}));
  Throws throws;
  plan::Execute ex = execute_of(throws, box);
  ex.arrays.resize(1);
  ex.arrays[0].chunk = ChunkRef{1, box};
  ex.arrays[0].region = box;
  ex.arrays[0].mode = annotation::Mode::write;
  ex.arrays[0].write = true;
  tasks.push_back(rig.task(0, ex, {1, 2}));                                                   // 3
  tasks.push_back(rig.task(0, plan::Copy{ChunkRef{1, box}, ChunkRef{2, box}, box, 4}, {3}));  // 4
  std::vector<int> out(10, 99);
  tasks.push_back(rig.task(0, plan::ReadBack{ChunkRef{2, box}, box, out.data(), box, 4}, {4}));
  tasks.push_back(rig.task(0, plan::DeleteChunk{1}, {4}));
  tasks.push_back(rig.task(0, plan::DeleteChunk{2}, {5}));
  rig.worker->submit(std::move(tasks));
  EXPECT_THROW(rig.worker->wait_all(), AccessError);
  EXPECT_THROW(rig.worker->wait(5), AccessError);
  EXPECT_THROW(rig.worker->wait(4), AccessError);
  auto stats = rig.worker->stats();
  EXPECT_EQ(stats.tasks_released_early, 1u);  // the copy went at once
  EXPECT_EQ(stats.tasks_failed, 5u);          // the execute, the copy, the read-back, the deletions
  EXPECT_EQ(out, std::vector<int>(10, 99));
  EXPECT_FALSE(rig.memory->exists(1));
  EXPECT_FALSE(rig.memory->exists(2));
}

// Random copies and fills of chunks on two asynchronous devices, with the planner's dependencies
// (read after write, write after read and write), submitted in batches while earlier ones
// run, devices taking varying times: every chunk ends as a sequential replay says.
TEST(Worker, RandomCopiesOnAsynchronousDevicesKeepTheirOrder) {
  auto g = test::rng(33);
  AsyncRig rig(2, 1 << 20);
  for (int d = 0; d < 2; ++d) rig.async(d).jitter_us = 300;
  const int n = 64, chunks = 6, copies = 600, batch = 40;
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  std::vector<std::vector<int>> value(chunks + 1);
  std::vector<plan::TaskId> writer(chunks + 1);
  std::vector<std::vector<plan::TaskId>> readers(chunks + 1);
  std::vector<Task> tasks;
  for (int c = 1; c <= chunks; ++c) {
    auto create = rig.task(c % 2, plan::CreateChunk{plan::ChunkId(c), n * 4u});
    value[c] = test::random_vector<int>(n, g);
    auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
    std::memcpy(data->data(), value[c].data(), n * 4);
    auto w = rig.task(c % 2, plan::HostWrite{ChunkRef{plan::ChunkId(c), box}, box, data, box, 4},
                      {create.id});
    writer[c] = w.id;
    tasks.push_back(std::move(create));
    tasks.push_back(std::move(w));
  }
  rig.worker->submit(std::move(tasks));
  tasks.clear();
  for (int i = 0; i < copies; ++i) {
    int src = 1 + int(g() % chunks), dst = 1 + int(g() % chunks);
    std::vector<plan::TaskId> deps = readers[dst];
    deps.push_back(writer[dst]);
    Task t;
    if (src == dst) {  // a fill with a value of its own, so that any reordering shows
      plan::Fill fill{ChunkRef{plan::ChunkId(dst), box}, box, 4, {}};
      const int v = int(g() % 1000000);
      std::memcpy(fill.value.data(), &v, 4);
      t = rig.task(dst % 2, fill, deps);
      value[dst].assign(n, v);
    } else {
      deps.push_back(writer[src]);
      t = rig.task(
          dst % 2,
          plan::Copy{ChunkRef{plan::ChunkId(src), box}, ChunkRef{plan::ChunkId(dst), box}, box, 4},
          deps);
      readers[src].push_back(t.id);
      value[dst] = value[src];
    }
    readers[dst].clear();
    writer[dst] = t.id;
    tasks.push_back(std::move(t));
    if (tasks.size() == batch) {
      rig.worker->submit(std::move(tasks));
      tasks.clear();
    }
  }
  std::vector<std::vector<int>> out(chunks + 1, std::vector<int>(n, test::poison<int>()));
  for (int c = 1; c <= chunks; ++c)
    tasks.push_back(
        rig.task(c % 2, plan::ReadBack{ChunkRef{plan::ChunkId(c), box}, box, out[c].data(), box, 4},
                 {writer[c]}));
  rig.worker->submit(std::move(tasks));
  rig.worker->wait_all();
  for (int c = 1; c <= chunks; ++c) EXPECT_EQ(out[c], value[c]) << "chunk " << c;
  auto stats = rig.worker->stats();
  EXPECT_EQ(stats.tasks_failed, 0u);
  EXPECT_GT(stats.tasks_released_early, 0u);
  std::printf("%llu of %llu tasks queued behind running dependencies\n",
              (unsigned long long)stats.tasks_released_early,
              (unsigned long long)stats.tasks_submitted);
}

// Transfer hooks of the test's own, which await everything, hold a task after its next
// `holds` runs and record what ran and finished.
struct Hooks : TransferHooks {
  mutable std::mutex mutex;
  std::vector<plan::TaskId> ran, finished_ok, finished_failed;
  int holds = 0;
  bool awaits(const Task&, std::exception_ptr&) override { return true; }
  bool held_after_run(const Task&) override { return true; }
  void run(const Task& t) override {
    std::lock_guard lock(mutex);
    ran.push_back(t.id);
  }
  bool after_run(const Task&, std::exception_ptr&) override {
    std::lock_guard lock(mutex);
    return holds > 0 ? (--holds, false) : true;
  }
  void finished(const Task& t, const std::exception_ptr& e) override {
    std::lock_guard lock(mutex);
    (e ? finished_failed : finished_ok).push_back(t.id);
  }
  void short_of_memory() override {}
  int rank() const override { return 3; }
  std::size_t runs() const {
    std::lock_guard lock(mutex);
    return ran.size();
  }
  bool ran_times(std::size_t n) const {  // waits up to 10 s for the n-th run
    for (int i = 0; i < 10000 && runs() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return runs() == n;
  }
};

// The worker's one way in for what comes from elsewhere: a task the hooks say awaits
// something runs once satisfied (again after unsatisfy), fails without running when
// satisfied with an error (its successors with it), and, held after it ran, runs again or
// ends when resumed; its own failure names the hooks' rank and the task.
TEST(Worker, TransferHooksDecideWhatATaskAwaitsAndWhenItEnds) {
  Hooks hooks;
  Rig rig(1, 1 << 20, 1 << 20, "cpu");
  rig.worker->connect(&hooks);
  Rect box(1, {0, 0, 0}, {10, 1, 1});
  auto recv = [&](plan::TransferId transfer) {
    return rig.task(0, plan::Recv{ChunkRef{1, box}, box, 4, 1, transfer}, {1});
  };
  rig.worker->submit({rig.task(0, plan::CreateChunk{1, 40})});
  rig.worker->wait(1);
  hooks.holds = 1;
  rig.worker->submit({recv(7), rig.task(0, plan::Barrier{}, {2})});
  EXPECT_TRUE(rig.worker->unsatisfy(2));  // it waits for two satisfies now
  rig.worker->satisfy(2, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(hooks.runs(), 0u);
  rig.worker->satisfy(2, nullptr);
  ASSERT_TRUE(hooks.ran_times(1));
  EXPECT_FALSE(rig.worker->unsatisfy(2));  // it has run, and is held
  EXPECT_FALSE(rig.worker->is_done(2));
  rig.worker->resume(2, nullptr, true);
  rig.worker->wait(3);
  EXPECT_EQ(hooks.runs(), 2u);
  EXPECT_FALSE(rig.worker->unsatisfy(2));  // done
  rig.worker->submit({recv(8), rig.task(0, plan::Barrier{}, {4})});
  rig.worker->satisfy(4, std::make_exception_ptr(NetError("rank 1 is gone")));
  try {
    rig.worker->wait(5);
    ADD_FAILURE() << "no error";
  } catch (const NetError& e) {
    EXPECT_STREQ(e.what(), "rank 1 is gone");
  }
  EXPECT_EQ(hooks.runs(), 2u);
  hooks.holds = 1;
  rig.worker->submit({recv(9)});
  rig.worker->satisfy(6, nullptr);
  ASSERT_TRUE(hooks.ran_times(3));
  rig.worker->resume(6, std::make_exception_ptr(NetError("no reply")), false);
  try {
    rig.worker->wait(6);
    ADD_FAILURE() << "no error";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3, task 6 (recv on device 0)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no reply"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(rig.worker->wait_all());
  EXPECT_EQ(hooks.finished_ok, std::vector<plan::TaskId>{2});
  EXPECT_EQ(hooks.finished_failed, (std::vector<plan::TaskId>{4, 6}));
  EXPECT_THROW(rig.worker->resume(6, nullptr, true), Error);  // not held: an internal error
}

// Two workers of one process standing in for two ranks: what one's Send reads, the other's
// Recv (or RecvHost) gets.
// With `lend`, Sends to a Recv lend their memory (as between ranks of one node), and the
// receiver copies from it. The replies and recalls, which a worker sends with its lock
// held, are delivered by a thread of the link's own (as a transport's would be).
struct Link : DataLink {
  Rig** ranks;
  int me;
  std::atomic<int>* transfers = nullptr;
  bool lend = false;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  bool stop = false;
  std::thread post;
  Link(Rig** r, int m, std::atomic<int>* count = nullptr, bool lends = false)
      : ranks(r), me(m), transfers(count), lend(lends), post([this] { deliver(); }) {}
  ~Link() override {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_all();
    post.join();
  }
  void deliver() {
    std::unique_lock lock(mutex);
    while (true) {
      wake.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      auto f = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      f();
      lock.lock();
    }
  }
  void later(std::function<void()> f) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(f));
    }
    wake.notify_all();
  }
  void send(int rank, plan::TransferId transfer, Bytes data) override {
    if (transfers) ++*transfers;
    ranks[rank]->transfers->deliver(transfer, std::move(data));
  }
  void fail(int rank, plan::TransferId transfer, const std::exception_ptr& error) override {
    ranks[rank]->transfers->deliver_failure(transfer, error);
  }
  int rank() const override { return me; }
  bool may_lend(int, std::size_t) const override { return lend; }
  void send_lent(int rank, plan::TransferId transfer, const Rect& rect,
                 std::vector<unsigned char> lent) override {
    if (transfers) ++*transfers;
    ranks[rank]->transfers->deliver_lent(transfer, me, rect, std::move(lent));
  }
  void lent_done(int rank, plan::TransferId transfer, LentReply reply) override {
    later([=, this] { ranks[rank]->transfers->lent_done(transfer, reply); });
  }
  void recall_lent(int rank, plan::TransferId transfer) override {
    later([=, this] { ranks[rank]->transfers->recall_lent(transfer); });
  }
};

// A chunk goes from rank 0 to rank 1 (its Recv submitted before and after the data come),
// part of it comes back into host memory on rank 0; a transfer of the wrong size is an
// error, and so is a Send where nothing connects the worker to other processes.
TEST(Worker, SendsAndReceivesMoveChunksBetweenWorkers) {
  auto g = test::rng(34);
  Rig a(1, 1 << 20, 1 << 20, "cpu"), b(1, 1 << 20, 1 << 20, "cpu");
  Rig* ranks[] = {&a, &b};
  Link link_a(ranks, 0), link_b(ranks, 1);
  a.transfers->connect(&link_a);
  b.transfers->connect(&link_b);
  const int n = 500;
  Rect box(1, {0, 0, 0}, {n, 1, 1}), part(1, {100, 0, 0}, {300, 1, 1});
  auto values = test::random_vector<int>(n, g);
  auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
  std::memcpy(data->data(), values.data(), n * 4);
  // Rank 1 first: its Recv waits for data not sent yet.
  std::vector<int> out(n, test::poison<int>());
  b.next = 100;
  b.worker->submit({b.task(0, plan::CreateChunk{1, n * 4u}),
                    b.task(0, plan::Recv{ChunkRef{1, box}, box, 4, 0, 7}, {101}),
                    b.task(0, plan::ReadBack{ChunkRef{1, box}, box, out.data(), box, 4}, {102}),
                    b.task(0, plan::Send{ChunkRef{1, box}, part, 4, 0, 8}, {102})});
  a.worker->submit({a.task(0, plan::CreateChunk{1, n * 4u}),
                    a.task(0, plan::HostWrite{ChunkRef{1, box}, box, data, box, 4}, {1}),
                    a.task(0, plan::Send{ChunkRef{1, box}, box, 4, 1, 7}, {2})});
  b.worker->wait_all();
  EXPECT_EQ(out, values);
  // Back on rank 0, after its data came: into host memory, as a 200-element box.
  std::vector<int> back(200, test::poison<int>());
  a.worker->submit({a.task(0, plan::RecvHost{back.data(), part, part, 4, 1, 8})});
  a.worker->wait_all();
  EXPECT_EQ(back, std::vector<int>(values.begin() + 100, values.begin() + 300));
  // 800 bytes for a 400-byte region.
  b.transfers->deliver(9, std::vector<unsigned char>(800, 1));
  b.worker->submit(
      {b.task(0, plan::Recv{ChunkRef{1, box}, Rect(1, {0, 0, 0}, {100, 1, 1}), 4, 0, 9})});
  try {
    b.worker->wait_all();
    ADD_FAILURE() << "no error";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("received 800 bytes for a region of 400"),
              std::string::npos)
        << e.what();
  }
  Rig lone(1, 1 << 20, 1 << 20, "cpu");
  lone.worker->submit({lone.task(0, plan::CreateChunk{1, 40}),
                       lone.task(0,
                                 plan::Send{ChunkRef{1, Rect(1, {0, 0, 0}, {10, 1, 1})},
                                            Rect(1, {0, 0, 0}, {10, 1, 1}), 4, 1, 3},
                                 {1})});
  EXPECT_THROW(lone.worker->wait_all(), NetError);
}

// Plans for four devices split over two workers of one process (two devices each, standing
// in for two ranks): halos cross between the workers as transfers, the read-back of the
// second worker's chunks comes through the first's host receives, and three sweeps of a
// stencil give what the host computes; with superblocks that straddle chunks (and ranks)
// too, whose temporaries are assembled and scattered through transfers.
// Returns the bytes the memory managers copied out of device memory.
// `lend`: the workers lend memory to each other; `unreachable`: lent memory is out of the
// receiving devices' reach (the bytes come after all).
struct SplitRun {
  int jitter_us = 0;
  std::size_t device_bytes = 1 << 20;
  bool discrete = false;
  bool lend = false;
  bool unreachable = false;
};
template <class R = Rig>
std::size_t split_stencil_run(int64_t superblock, int expected_transfers, SplitRun how = {},
                              TransferStats* stats = nullptr) {
  auto make = [&]() -> std::unique_ptr<R> {
    if constexpr (std::is_same_v<R, AsyncRig>) {
      auto r = std::make_unique<AsyncRig>(2, how.device_bytes, how.discrete);
      for (int d = 0; d < 2; ++d) {
        r->async(d).jitter_us = how.jitter_us;
        r->async(d).unreachable = how.unreachable;
      }
      return r;
    } else {
      return std::make_unique<Rig>(2, 1 << 20, 1 << 20, "cpu");
    }
  };
  auto a = make(), b = make();
  Rig* ranks[] = {a.get(), b.get()};
  std::atomic<int> transfers{0};
  Link link_a(ranks, 0, &transfers, how.lend), link_b(ranks, 1, &transfers, how.lend);
  a->transfers->connect(&link_a);
  b->transfers->connect(&link_b);
  StencilProblem problem(4, 1000, superblock, 3, 35);
  plan::PlanSplitter splitter(plan::Placement::by_rank({2, 2}));
  for (const plan::Plan& p : problem.plans) {
    auto parts = splitter.split(p.tasks);
    for (int r = 0; r < 2; ++r) ranks[r]->worker->submit(std::move(parts[r]));
  }
  a->worker->wait_all();
  b->worker->wait_all();
  EXPECT_EQ(problem.out, problem.want);
  EXPECT_EQ(a->worker->stats().tasks_failed + b->worker->stats().tasks_failed, 0u);
  if (expected_transfers)
    EXPECT_EQ(transfers.load(), expected_transfers);
  else
    EXPECT_GT(transfers.load(), 3 * 2 + 2);
  std::size_t copied = 0;
  for (Rig* r : ranks) {
    for (const MemoryStats& st : r->memory->stats()) copied += st.copied_out_bytes;
    if (stats) {
      const TransferStats t = r->transfers->stats();
      stats->lent += t.lent;
      stats->not_copied += t.not_copied;
    }
  }
  return copied;
}

TEST(Worker, PlansSplitOverTwoWorkersComputeWhatOneWould) {
  // Aligned: per sweep one halo element each way between devices 1 and 2, and two chunks
  // read back.
  split_stencil_run(250, 3 * 2 + 2);
  split_stencil_run(125, 0);  // superblocks run on other devices than their chunks
}

// The same on asynchronous devices (as GPUs are: transfers and the tasks behind them run on
// lanes and report later), with random delays, many times.
TEST(Worker, PlansSplitOverAsynchronousWorkersComputeWhatOneWould) {
  for (int i = 0; i < 30; ++i) {
    split_stencil_run<AsyncRig>(250, 3 * 2 + 2, {.jitter_us = 1 + 37 * i % 300});
    split_stencil_run<AsyncRig>(125, 0, {.jitter_us = 1 + 53 * i % 300});
    if (HasFailure()) break;
  }
}

// And with device memory apart from host memory (as on a GPU) that holds a few chunks
// only: chunks are copied out and back while transfers and kernels run.
TEST(Worker, PlansSplitOverDiscreteAsynchronousWorkersComputeWhatOneWould) {
  std::size_t copied = 0;
  for (int i = 0; i < 30; ++i) {
    copied += split_stencil_run<AsyncRig>(
        250, 3 * 2 + 2, {.jitter_us = 1 + 37 * i % 300, .device_bytes = 2560, .discrete = true});
    copied += split_stencil_run<AsyncRig>(
        125, 0, {.jitter_us = 1 + 53 * i % 300, .device_bytes = 2560, .discrete = true});
    if (HasFailure()) break;
  }
  EXPECT_GT(copied, 0u);  // chunks did leave device memory
  std::printf("%zu bytes copied out of device memory\n", copied);
}

// Workers that lend memory to each other (ranks of one node): each halo is copied by the
// receiving device from the sender's chunk, the Send ending only once it has, while later
// sweeps wait to overwrite that chunk; with random delays, on asynchronous devices with
// device memory of their own too. Where the lent memory is out of reach, the bytes come
// after all. Either way, what one worker would compute.
TEST(Worker, PlansSplitOverWorkersThatLendMemoryComputeWhatOneWould) {
  TransferStats aligned, sync, async, tight, unreached;
  split_stencil_run(250, 3 * 2 + 2, {.lend = true}, &aligned);
  split_stencil_run(125, 0, {.lend = true}, &sync);
  for (int i = 0; i < 20 && !HasFailure(); ++i) {
    split_stencil_run<AsyncRig>(250, 3 * 2 + 2, {.jitter_us = 1 + 37 * i % 300, .lend = true},
                                &async);
    split_stencil_run<AsyncRig>(
        125, 0,
        {.jitter_us = 1 + 53 * i % 300, .device_bytes = 2560, .discrete = true, .lend = true},
        &tight);
    // Each halo is lent, found out of reach, and sent.
    split_stencil_run<AsyncRig>(250, 3 * 2 * 2 + 2,
                                {.jitter_us = 1 + 29 * i % 300, .lend = true, .unreachable = true},
                                &unreached);
  }
  // Halos between the workers are lent (read-backs into the driver's memory are not).
  EXPECT_EQ(aligned.lent, 3u * 2);
  EXPECT_GT(sync.lent, 3u * 2);
  EXPECT_EQ(async.lent, 20u * 3 * 2);
  EXPECT_EQ(async.not_copied, 0u);
  // Short of device memory, workers decline and recall lent memory rather than wait for
  // each other's; some is still lent.
  EXPECT_GT(tight.lent, 0u);
  EXPECT_GT(tight.not_copied, 0u);
  EXPECT_EQ(unreached.lent, 0u);
  EXPECT_EQ(unreached.not_copied, 20u * 3 * 2);
  std::printf(
      "lent: %llu (cpu), %llu (asynchronous), %llu of %llu (short of memory); out of reach and "
      "sent: %llu\n",
      (unsigned long long)(aligned.lent + sync.lent), (unsigned long long)async.lent,
      (unsigned long long)tight.lent, (unsigned long long)(tight.lent + tight.not_copied),
      (unsigned long long)unreached.not_copied);
}

// A Recv that fails (its dependency did) with lent memory in hand, submitted before and
// after the memory comes: the lending Sends end all the same (no rank waits for a reply
// that would never come), and the failure is the receiver's.
TEST(Worker, ARecvThatFailsReleasesTheMemoryLentToIt) {
  auto g = test::rng(35);
  Rig a(1, 1 << 20, 1 << 20, "cpu"), b(1, 1 << 20, 1 << 20, "cpu");
  Rig* ranks[] = {&a, &b};
  Link link_a(ranks, 0, nullptr, true), link_b(ranks, 1, nullptr, true);
  a.transfers->connect(&link_a);
  b.transfers->connect(&link_b);
  const int n = 100;
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  auto values = test::random_vector<int>(n, g);
  auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
  std::memcpy(data->data(), values.data(), n * 4);
  Throws throws;
  b.next = 100;
  // Transfer 7's Recv is there first; transfer 8's comes later (its memory may be first).
  b.worker->submit({b.task(0, plan::CreateChunk{1, n * 4u}),
                    b.task(0, execute_of(throws, box), {101}),
                    b.task(0, plan::Recv{ChunkRef{1, box}, box, 4, 0, 7}, {102})});
  a.worker->submit({a.task(0, plan::CreateChunk{1, n * 4u}),
                    a.task(0, plan::HostWrite{ChunkRef{1, box}, box, data, box, 4}, {1}),
                    a.task(0, plan::Send{ChunkRef{1, box}, box, 4, 1, 7, true}, {2}),
                    a.task(0, plan::Send{ChunkRef{1, box}, box, 4, 1, 8, true}, {2})});
  b.worker->submit({b.task(0, plan::Recv{ChunkRef{1, box}, box, 4, 0, 8}, {102})});
  EXPECT_NO_THROW(a.worker->wait_all());  // both Sends ended
  EXPECT_THROW(b.worker->wait_all(), AccessError);
  EXPECT_EQ(a.transfers->stats().lent, 2u);
  EXPECT_EQ(a.worker->stats().tasks_failed, 0u);
}

}  // namespace
}  // namespace gridspan::runtime
