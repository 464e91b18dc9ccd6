// Splitting plans over ranks: every part lands on the rank of its device with a local device
// number, copies and read-backs between ranks become Send/Recv (RecvHost) pairs with one id,
// barriers get a part per rank, and every dependency names a task on the same rank.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "gridspan/core/error.hpp"
#include "plan/plan_support.hpp"
#include "plan/planner.hpp"
#include "plan/split.hpp"

namespace gridspan::plan {
namespace {

using test_support::Nothing;
using test_support::vec;

// Splits plans and checks each part against what came before on its rank.
struct Ranks {
  PlanSplitter splitter;
  std::vector<std::set<TaskId>> seen;
  std::vector<std::map<std::string, int>> kinds;
  explicit Ranks(Placement p) : splitter(p), seen(p.ranks), kinds(p.ranks) {}

  std::vector<std::vector<Task>> split(const Plan& plan) {
    auto parts = splitter.split(plan.tasks);
    EXPECT_EQ(parts.size(), seen.size());
    for (std::size_t r = 0; r < parts.size(); ++r) {
      for (const Task& t : parts[r]) seen[r].insert(t.id);  // a batch may name later tasks
      for (const Task& t : parts[r]) {
        ++kinds[r][t.kind()];
        for (TaskId d : t.deps)
          EXPECT_TRUE(seen[r].count(d)) << "task " << t.id << " (" << t.kind() << ") on rank " << r
                                        << " depends on task " << d << " of another rank";
        const int local = splitter.placement().ranks == 2 ? 2 : 1;
        EXPECT_GE(t.device, 0);
        EXPECT_LT(t.device, local);
      }
    }
    return parts;
  }
};

TEST(Split, StencilOverTwoRanksExchangesHalosAsTransfers) {
  const int devices = 4;
  Planner planner(devices, nullptr);
  Ranks ranks(Placement::by_rank({2, 2}));
  std::vector<ParamInfo> params{vec("out"), vec("in", true)};
  auto ann =
      annotation::Annotation::parse("global i => write out[i], read in[i-1:i+1]", params, {});
  auto make = [&](int n) {
    ArrayMeta m;
    m.shape = {n};
    for (auto& c : dist::stencil({n / 4}, {1}).chunks(m.shape, devices))
      m.chunks.push_back({0, c.region, c.owned, c.device});
    planner.assign_chunk_ids(m);
    ranks.split(planner.create_array(m, nullptr));
    return m;
  };
  ArrayMeta in = make(400), out = make(400);
  auto data = std::make_shared<const std::vector<unsigned char>>(400 * 4, 1);
  ranks.split(planner.write_array(in, data));
  LaunchSpec s;
  s.executable = std::make_shared<Nothing>();
  s.annotation = &ann;
  s.params = &params;
  s.threads = {400};
  s.block = {50};
  s.superblocks = work::tiles({100}).superblocks(s.threads, s.block, devices);
  s.arrays = {&out, &in};
  s.int_scalars.assign(2, 0);
  s.scalar_offsets = std::make_shared<std::vector<uint32_t>>(2, 0);
  s.scalars = std::make_shared<std::vector<unsigned char>>();
  Plan launch = planner.launch(s);
  auto parts = ranks.split(launch);
  // Halos: chunk 1 (device 1, rank 0) and chunk 2 (device 2, rank 1) exchange one element
  // each way: two transfers; the other four halo copies stay on their rank.
  std::map<TaskId, int> sends, recvs;
  for (int r = 0; r < 2; ++r)
    for (const Task& t : parts[r]) {
      if (auto* x = std::get_if<Send>(&t.payload)) {
        sends[t.id] = r;
        EXPECT_EQ(x->to, 1 - r);
        EXPECT_EQ(x->transfer, t.id);
        EXPECT_EQ(x->region.volume(), 1);
      }
      if (auto* x = std::get_if<Recv>(&t.payload)) {
        recvs[t.id] = r;
        EXPECT_EQ(x->from, 1 - r);
      }
    }
  EXPECT_EQ(sends.size(), 2u);
  ASSERT_EQ(recvs.size(), 2u);
  for (auto [id, r] : sends) EXPECT_EQ(recvs.at(id), 1 - r);
  EXPECT_EQ(ranks.kinds[0]["copy"] + ranks.kinds[1]["copy"], 4);
  EXPECT_EQ(ranks.kinds[0]["execute"], 2);
  EXPECT_EQ(ranks.kinds[1]["execute"], 2);
  // The launch's barrier has a part on both ranks.
  EXPECT_EQ(ranks.splitter.barrier_ranks(launch.done).size(), 2u);
  // Reading the array back: rank 1's chunks send to the driver's RecvHost.
  std::vector<float> host(400);
  auto read = ranks.split(planner.read_array(out, host.data()));
  int host_receives = 0, reads = 0;
  for (const Task& t : read[0]) {
    host_receives += std::holds_alternative<RecvHost>(t.payload);
    reads += std::holds_alternative<ReadBack>(t.payload);
  }
  EXPECT_EQ(reads, 2);          // rank 0's own chunks
  EXPECT_EQ(host_receives, 2);  // rank 1's
  for (const Task& t : read[1]) EXPECT_FALSE(std::holds_alternative<ReadBack>(t.payload));
  ranks.splitter.forget(launch.done);
  EXPECT_TRUE(ranks.splitter.barrier_ranks(launch.done).empty());
}

TEST(Split, ACrossRankDependencyWithoutATransferIsAnInternalError) {
  PlanSplitter splitter(Placement::by_rank({1, 1}));
  Task a, b;
  a.id = 1;
  a.device = 0;
  a.payload = CreateChunk{10, 40};
  b.id = 2;
  b.device = 1;  // rank 1
  b.deps = {1};
  b.payload = CreateChunk{11, 40};
  EXPECT_THROW(splitter.split({a, b}), Error);
  Task bad;
  bad.id = 3;
  bad.device = 7;
  bad.payload = DeleteChunk{10};
  EXPECT_THROW(splitter.split({bad}), Error);  // no device 7
}

// The receiving half of a scatter leads to no task of the plan's barrier: only the
// deletion of the temporary (on the sending rank) follows the copy. The barrier still has
// a part on the receiving rank that waits for it, so that a plan whose parts have all
// reported has nothing left running anywhere (the driver forgets its tasks then, and a
// later read of the chunk would not wait for the receive).
TEST(Split, EveryRankWithTasksOfAPlanHasABarrierPartThatWaitsForThemAll) {
  PlanSplitter splitter(Placement::by_rank({1, 1}));
  auto task = [](TaskId id, int device, Payload p, std::vector<TaskId> deps = {}) {
    Task t;
    t.id = id;
    t.device = device;
    t.payload = std::move(p);
    t.deps = std::move(deps);
    return t;
  };
  const Rect all(1, {0, 0, 0}, {10, 1, 1});
  // Chunk 1 on device 1 (rank 1); temporary 2 on device 0 (rank 0), scattered into chunk 1.
  splitter.split({task(1, 1, CreateChunk{1, 40}), task(2, 0, CreateChunk{2, 40})});
  auto parts = splitter.split({
      task(3, 1, Copy{ChunkRef{2, all}, ChunkRef{1, all}, all, 4}),  // scatter: rank 0 -> 1
      task(4, 0, DeleteChunk{2}, {3}),                               // after the copy
      task(5, 0, Barrier{}, {4}),                                    // the plan's only sink
  });
  const auto& ranks = splitter.barrier_ranks(5);
  ASSERT_EQ(std::set<int>(ranks.begin(), ranks.end()), (std::set<int>{0, 1}));
  ASSERT_EQ(parts[1].size(), 2u);
  EXPECT_TRUE(std::holds_alternative<Recv>(parts[1][0].payload));
  EXPECT_TRUE(std::holds_alternative<Barrier>(parts[1][1].payload));
  EXPECT_EQ(parts[1][1].deps, (std::vector<TaskId>{3}));  // waits for the receive
  const Task& zero = parts[0].back();
  ASSERT_TRUE(std::holds_alternative<Barrier>(zero.payload));
  EXPECT_EQ(zero.deps, (std::vector<TaskId>{4}));
}

TEST(Split, RanksForThePlannerMustMatchItsDevicesInRankOrder) {
  Planner planner(4, nullptr);
  EXPECT_THROW(planner.set_ranks({0, 0, 1}), Error);
  EXPECT_THROW(planner.set_ranks({0, 1, 0, 1}), Error);
  EXPECT_NO_THROW(planner.set_ranks({0, 0, 1, 1}));
  // Then every plan ends in a barrier, also one of a single task.
  ArrayMeta m;
  m.shape = {10};
  m.chunks.push_back({0, Rect::of_shape(m.shape), Rect::of_shape(m.shape), 3});
  planner.assign_chunk_ids(m);
  Plan p = planner.create_array(m, nullptr);
  ASSERT_EQ(p.tasks.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<Barrier>(p.tasks.back().payload));
  EXPECT_EQ(p.done, p.tasks.back().id);
}

}  // namespace
}  // namespace gridspan::plan
