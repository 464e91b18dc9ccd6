// Where a context's tasks run. The driver holds one Runner and never asks how many
// processes there are: LocalRunner (local.hpp) runs them on this process's devices, Cluster
// (cluster.hpp) splits every plan over the ranks of an mpirun. make_runner is the one place
// that picks.
#pragma once

#include <memory>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/info.hpp"
#include "plan/planner.hpp"
#include "runtime/cost.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

class Runner {
 public:
  virtual ~Runner() = default;  // waits for every task

  /// The backend this process compiles kernels with.
  virtual backend::Backend& backend() = 0;
  /// Every device of every rank, rank by rank.
  virtual int device_count() const = 0;
  /// The rank of each device, for a planner that plans across ranks; empty in one process.
  virtual std::vector<int> rank_of_device() const = 0;
  /// The ranks of this run and their devices (one, this process, outside mpirun).
  virtual std::vector<RankInfo> ranks() const = 0;

  /// Keeps an executable alive as long as the runner (tasks point to it without owning
  /// it) and makes it known wherever tasks run (a kernel compiled on every rank, a native
  /// function found by name there).
  virtual void add_executable(std::shared_ptr<const plan::Executable> executable) = 0;
  /// Submits a plan; `plan.done` is the task to wait for.
  virtual void submit(plan::Plan plan) = 0;
  /// Tasks it no longer needs, whose memory a planner may reuse (reuse_tasks); none here.
  virtual std::vector<plan::Task> spare_tasks() { return {}; }
  /// Blocks until `task` is finished; throws its error.
  virtual void wait(plan::TaskId task) = 0;
  virtual bool is_done(plan::TaskId task) const = 0;
  /// Removes the finished tasks from `tasks` (by default asking is_done of each).
  virtual void drop_finished(std::vector<plan::TaskId>& tasks) const {
    std::erase_if(tasks, [&](plan::TaskId t) { return is_done(t); });
  }
  /// Blocks until every task is finished; throws the first error not yet reported.
  virtual void wait_all() = 0;
  /// True once the run as a whole failed (a rank lost): what fails after that was said.
  virtual bool failed() const = 0;

  /// Per space: every device in the run's order, then host and disk (summed over ranks).
  virtual std::vector<MemoryStats> memory_stats() = 0;
  /// Every rank's pools give their free blocks back (Context::free_all_blocks).
  virtual void free_all_blocks() = 0;
  /// This process's worker's counts.
  virtual WorkerStats worker_stats() const = 0;
  /// What this process's kernels cost, measured (under mpirun: rank 0's devices, taken as
  /// like the other ranks').
  virtual CostModel& costs() = 0;
  /// Where this process's trace goes (null when not tracing).
  virtual Observer* observer() const = 0;
};

/// This process alone, or the driver's side of an mpirun (rank 0): what the environment
/// and `config` ask for. Sets the config's node figures under mpirun.
std::unique_ptr<Runner> make_runner(Config& config);

}  // namespace gridspan::runtime
