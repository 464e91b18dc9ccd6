// The worker scheduler on the cpu backend's devices: dependency order (also on tasks later
// in the same batch), bounded staging under tiny memory, and failure propagation.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "gridspan/core/error.hpp"
#include "gridspan/plan/planner.hpp"
#include "gridspan/runtime/worker.hpp"
#include "support/random.hpp"

namespace gridspan::runtime {
namespace {

using plan::ChunkRef;
using plan::Task;

struct Rig {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<MemoryManager> memory;
  std::unique_ptr<Worker> worker;
  plan::TaskId next = 0;

  Rig(int devices, std::size_t device_bytes, std::size_t staging) {
    // The backend GRIDSPAN_BACKEND names (scripts/gpu-check.sh runs these on GPUs too).
    Config c = Config::from_env();
    c.cpu_devices = devices;
    c.gpus = devices;
    c.cpu_threads = 2;
    c.log_level = LogLevel::error;
    backend = backend::make_backend(c);
    memory = std::make_unique<MemoryManager>(backend->devices(), MemoryLimits{device_bytes, 0, ""});
    worker = std::make_unique<Worker>(backend->devices(), *memory, staging);
  }
  ~Rig() { worker.reset(); }
  Task task(int device, plan::Payload p, std::vector<plan::TaskId> deps = {}) {
    Task t;
    t.id = ++next;
    t.device = device;
    t.payload = std::move(p);
    t.deps = std::move(deps);
    return t;
  }
};

// A chain c0 → c1 → ... of chunk copies, each chunk on alternating devices, submitted in
// reverse order within one batch: the data must arrive intact at the end.
TEST(Worker, DependencyOrderWithinOneBatch) {
  auto g = test::rng(31);
  Rig rig(2, 1 << 20, 1 << 20);
  const int n = 1000, links = 20;
  Rect box(1, {0, 0, 0}, {n, 1, 1});
  auto values = test::random_vector<int>(n, g);
  auto data = std::make_shared<std::vector<unsigned char>>(n * 4);
  std::memcpy(data->data(), values.data(), n * 4);
  std::vector<Task> tasks;
  for (int c = 1; c <= links; ++c)
    tasks.push_back(rig.task(c % 2, plan::CreateChunk{plan::ChunkId(c), n * 4u}));
  std::vector<plan::TaskId> created;
  for (auto& t : tasks) created.push_back(t.id);
  std::vector<Task> chain;
  chain.push_back(rig.task(1, plan::HostWrite{ChunkRef{1, box}, box, data, box, 4}, created));
  for (int c = 2; c <= links; ++c)
    chain.push_back(rig.task(
        c % 2,
        plan::Copy{ChunkRef{plan::ChunkId(c - 1), box}, ChunkRef{plan::ChunkId(c), box}, box, 4},
        {chain.back().id}));
  std::vector<int> out(n, test::poison<int>());
  chain.push_back(
      rig.task(0, plan::ReadBack{ChunkRef{plan::ChunkId(links), box}, box, out.data(), box, 4},
               {chain.back().id}));
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

class Throws : public plan::Executable {
 public:
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame&) const override { throw AccessError("deliberate failure"); }
  std::string name_ = "throws";
};

// A failing task fails its successors without running them, reports its error to wait()
// and wait_all(), and still lets deletions run.
TEST(Worker, FailurePropagatesToSuccessorsAndWaiters) {
  Rig rig(1, 1 << 20, 1 << 20);
  Rect box(1, {0, 0, 0}, {10, 1, 1});
  std::vector<Task> tasks;
  tasks.push_back(rig.task(0, plan::CreateChunk{1, 40}));
  plan::Execute ex;
  Throws throws;
  ex.executable = &throws;
  ex.blocks = box;
  ex.block = {1};
  ex.grid = {10};
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

}  // namespace
}  // namespace gridspan::runtime
