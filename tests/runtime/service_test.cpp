// Workers served over transports (three ranks in one process): the driver's task batches
// travel encoded, transfers go between the ranks' services, every barrier part is reported
// to the driver's rank, a failure comes back with its rank and message, and shutdown ends
// serving.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "gridspan/plan/split.hpp"
#include "gridspan/runtime/service.hpp"
#include "runtime/rig.hpp"

namespace gridspan::runtime {
namespace {

// Three ranks of two cpu devices each, with their services; the driver is rank 0.
struct Cluster {
  static constexpr int kRanks = 3;
  std::vector<std::unique_ptr<net::Transport>> transports = net::make_local_transports(kRanks);
  std::vector<std::unique_ptr<Rig>> rigs;
  std::vector<std::unique_ptr<WorkerService>> services;
  plan::PlanSplitter splitter{plan::Placement::by_rank({2, 2, 2})};
  const plan::Executable* executable = nullptr;  // the driver's kernel
  const plan::Executable* remote = nullptr;      // what ranks 1 and 2 run for it
  std::mutex mutex;
  std::condition_variable reported;
  std::map<plan::TaskId, std::vector<BarrierReport>> reports;

  Cluster(const plan::Executable* exe, const plan::Executable* remote_exe)
      : executable(exe), remote(remote_exe) {
    for (int r = 0; r < kRanks; ++r) {
      rigs.push_back(std::make_unique<Rig>(2, 1 << 20, 1 << 20, "cpu"));
      services.push_back(std::make_unique<WorkerService>(
          *transports[r], *rigs[r]->worker,
          [this](net::ExecutableId id) { return id == 1 ? remote : nullptr; },
          [this](const BarrierReport& b) {
            std::lock_guard lock(mutex);
            reports[b.barrier].push_back(b);
            reported.notify_all();
          }));
    }
  }
  ~Cluster() {
    services.clear();
    rigs.clear();
  }
  // As the driver does: rank 0's part to its own worker, the others' through the transport.
  void submit(const plan::Plan& p) {
    auto parts = splitter.split(p.tasks);
    rigs[0]->worker->submit(std::move(parts[0]));
    for (int r = 1; r < kRanks; ++r)
      WorkerService::send_tasks(*transports[0], r, parts[r], [this](const plan::Executable* e) {
        EXPECT_EQ(e, executable);
        return net::ExecutableId(1);
      });
  }
  // Every part of a barrier reported (or 30 s passed): the reports.
  std::vector<BarrierReport> wait(plan::TaskId barrier) {
    const std::size_t parts = splitter.barrier_ranks(barrier).size();
    std::unique_lock lock(mutex);
    reported.wait_for(lock, std::chrono::seconds(30),
                      [&] { return reports[barrier].size() == parts; });
    return reports[barrier];
  }
};

TEST(WorkerService, ThreeRanksComputeWhatOneWould) {
  StencilProblem problem(6, 1200, 100, 4, 36);
  Cluster c(problem.executable.get(), problem.executable.get());
  for (const plan::Plan& p : problem.plans) c.submit(p);
  auto done = c.wait(problem.plans.back().done);
  ASSERT_EQ(done.size(), 3u);  // the read-back's barrier: every rank sends to the driver
  std::set<int> ranks;
  for (const BarrierReport& b : done) {
    EXPECT_FALSE(b.failed) << "rank " << b.rank << ": " << b.message;
    ranks.insert(b.rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(problem.out, problem.want);
  for (int r = 1; r < 3; ++r) WorkerService::send_shutdown(*c.transports[0], r);
  for (int r = 1; r < 3; ++r) c.services[r]->serve_until_shutdown();
}

// Ranks 1 and 2 fail their superblocks: their halo sends fail, so rank 0's receives fail
// too (instead of waiting forever), and every part of the read-back's barrier reports the
// failure, rank 0's naming the rank it came from.
TEST(WorkerService, AFailureOnAnotherRankReachesTheDriverWithItsRank) {
  Throws throws;
  StencilProblem problem(6, 1200, 200, 1, 37);
  Cluster c(problem.executable.get(), &throws);
  for (const plan::Plan& p : problem.plans) c.submit(p);
  auto done = c.wait(problem.plans.back().done);
  ASSERT_EQ(done.size(), 3u);
  for (const BarrierReport& b : done) {
    EXPECT_TRUE(b.failed) << "rank " << b.rank;
    EXPECT_NE(b.message.find("deliberate failure"), std::string::npos) << b.message;
    if (b.rank == 0)
      EXPECT_TRUE(b.message.find("rank 1: ") != std::string::npos ||
                  b.message.find("rank 2: ") != std::string::npos)
          << b.message;
  }
  // A message the protocol does not have stops the rank's service with an error.
  c.transports[0]->send(2, 999, {});
  EXPECT_THROW(c.services[2]->serve_until_shutdown(), NetError);
}

}  // namespace
}  // namespace gridspan::runtime
