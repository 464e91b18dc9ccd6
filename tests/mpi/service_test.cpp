// Workers served over MPI, run by ctest under `mpirun -np 2` and `-np 3`: rank 0 plans a
// stencil for two cpu devices per rank, splits the plans over the ranks and sends each its
// part; halos and read-backs travel between processes; the result equals the host's. Then
// with the kernel failing on the other ranks: every barrier part reports the failure.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "plan/split.hpp"
#include "runtime/rig.hpp"
#include "runtime/service.hpp"

#include "mpi/mpi_main.hpp"
#include "support/random.hpp"

namespace gridspan::runtime {
namespace {

test::TestTransport& world() {
  static test::TestTransport t(net::make_mpi_transport());
  return t;
}

constexpr int kN = 1200;

// One rank's part of a run: its worker served over MPI. Rank 0 also drives: it plans,
// splits, submits and waits for the reports of the last barrier. A run ends as a session
// does (Cluster): rank 0 waits for every rank to say its service has stopped (tag::closed)
// before the next run sends anything. Else the next run's messages of a rank that has begun
// it could reach a rank whose service of this run has not taken its shutdown yet (MPI
// orders one sender's messages only), which would take them for this run's.
void run_stencil(const plan::Executable& remote_kernel, bool expect_failure) {
  net::Transport& t = world();
  Rig rig(2, 1 << 20, 1 << 20, "cpu");
  std::mutex mutex;
  std::condition_variable reported;
  std::map<plan::TaskId, std::vector<BarrierReport>> reports;
  int closed = 0;
  WorkerService service(
      t, *rig.worker, *rig.transfers,
      [&](net::ExecutableId id) { return id == 1 ? &remote_kernel : nullptr; },
      [&](const BarrierReport& b) {
        std::lock_guard lock(mutex);
        reports[b.barrier].push_back(b);
        reported.notify_all();
      });
  if (t.rank() != 0) {
    service.serve_until_shutdown();
    t.send(0, tag::closed, {});  // its dispatcher takes no more messages
    return;
  }
  service.on_message([&](net::Message& m) {
    if (m.tag != tag::closed) return false;
    std::lock_guard lock(mutex);
    ++closed;
    reported.notify_all();
    return true;
  });
  StencilProblem problem(2 * t.size(), kN, kN / (4 * t.size()), 3, 38);
  plan::PlanSplitter splitter(plan::Placement::by_rank(std::vector<int>(t.size(), 2)));
  for (const plan::Plan& p : problem.plans) {
    auto parts = splitter.split(p.tasks);
    rig.worker->submit(std::move(parts[0]));
    for (int r = 1; r < t.size(); ++r)
      WorkerService::send_tasks(t, r, parts[r], [](const plan::Executable*) { return 1; });
  }
  // Every plan's barrier, so that no report is still on its way when the next run starts.
  const plan::TaskId last = problem.plans.back().done;
  EXPECT_EQ(splitter.barrier_ranks(last).size(), std::size_t(t.size()));
  {
    std::unique_lock lock(mutex);
    for (const plan::Plan& p : problem.plans) {
      const std::size_t parts = splitter.barrier_ranks(p.done).size();
      EXPECT_TRUE(reported.wait_for(lock, std::chrono::seconds(60),
                                    [&] { return reports[p.done].size() == parts; }))
          << "barrier " << p.done << ": its parts did not all report within 60 s";
    }
    for (const BarrierReport& b : reports[last]) {
      EXPECT_EQ(b.failed(), expect_failure) << "rank " << b.rank << ": " << b.message();
      if (expect_failure) EXPECT_NE(b.message().find("deliberate failure"), std::string::npos);
    }
  }
  if (!expect_failure) EXPECT_EQ(problem.out, problem.want);
  for (int r = 1; r < t.size(); ++r) WorkerService::send_shutdown(t, r);
  std::unique_lock lock(mutex);
  EXPECT_TRUE(
      reported.wait_for(lock, std::chrono::seconds(60), [&] { return closed == t.size() - 1; }))
      << closed << " of " << t.size() - 1 << " ranks stopped serving within 60 s";
}

TEST(MpiService, RanksComputeWhatOneWould) {
  Stencil3 kernel(kN);
  run_stencil(kernel, false);
}

TEST(MpiService, FailuresOnOtherRanksReachEveryBarrierPart) {
  Throws throws;
  Stencil3 kernel(kN);
  run_stencil(world().rank() == 0 ? static_cast<const plan::Executable&>(kernel) : throws,
              world().size() > 1);
}

// Rank 1 hears the driver's shutdown late, after what rank 2 sends meanwhile: the next
// run's transfers from rank 2 must still reach rank 1's next service (a hang when the
// service of the run before took them).
TEST(MpiService, ARunTakesNoMessageOfTheNext) {
  Stencil3 kernel(kN);
  world().hold_back(tag::shutdown, std::chrono::milliseconds(world().rank() == 1 ? 300 : 0));
  run_stencil(kernel, false);
  run_stencil(kernel, false);
  world().hold_back(tag::shutdown, std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace gridspan::runtime

int main(int argc, char** argv) {
  return gridspan::test::mpi_test_main(argc, argv, gridspan::runtime::world());
}
