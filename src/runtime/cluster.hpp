// The driver's side of a session over several processes, as a Runner: every plan is split
// over the ranks (PlanSplitter), rank 0's part goes to the driver's own LocalRunner and the
// others' parts to their ranks; a plan is complete when every part of its final barrier
// has reported, and the driver waits for plans, not tasks. Kernels are compiled on every
// rank as they are compiled here. A rank that cannot go on or stops answering fails the run:
// every wait throws from then on, and the process ends every rank (Process::finish).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/device.hpp"
#include "plan/split.hpp"
#include "runtime/local.hpp"
#include "runtime/memory.hpp"
#include "runtime/process.hpp"
#include "runtime/runner.hpp"
#include "runtime/service.hpp"
#include "runtime/trace.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

class Cluster final : public Runner {
 public:
  /// Opens rank 0's own devices and a session on every other rank with `config`, and waits
  /// for each rank's hello.
  Cluster(Process& process, const Config& config);
  ~Cluster() override;  // waits for every plan, then closes the session on every rank
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  backend::Backend& backend() override { return local_->backend(); }
  int device_count() const override { return static_cast<int>(placement().rank.size()); }
  std::vector<int> rank_of_device() const override { return placement().rank; }
  /// Every rank's devices and memory, rank by rank.
  std::vector<RankInfo> ranks() const override { return ranks_; }

  /// Makes `e` known on every rank: a kernel compiled there from its source, or the native
  /// function registered there under its name.
  void add_executable(std::shared_ptr<const plan::Executable> e) override;
  /// Splits a plan (it ends in its barrier `done`) over the ranks and hands out the parts.
  /// Called under the driver's lock (one plan at a time).
  void submit(plan::Plan plan) override;
  /// Blocks until the plan ending in `done` is complete; throws its error.
  void wait(plan::TaskId done) override;
  /// True once the plan holding `task` is complete on every rank.
  bool is_done(plan::TaskId task) const override;
  /// Blocks until every plan is complete; throws the first error not yet reported.
  void wait_all() override;
  /// A rank was lost or could not go on: every wait throws.
  bool failed() const override;
  /// Every rank's figures: each device in the run's order, then host and disk summed.
  std::vector<MemoryStats> memory_stats() override { return gather_stats(false); }
  void free_all_blocks() override { gather_stats(true); }
  WorkerStats worker_stats() const override { return local_->worker_stats(); }
  CostModel& costs() override { return local_->costs(); }
  Observer* observer() const override { return local_->observer(); }

 private:
  // Every rank's memory figures, after their pools gave their free blocks back if asked.
  std::vector<MemoryStats> gather_stats(bool free_blocks);
  struct PlanState {
    plan::TaskId first = 0;
    int parts_left = 0;
    std::vector<std::exception_ptr> errors;  // the parts' that failed
    std::exception_ptr error;                // the plan's, once complete
    bool complete = false;
  };
  void on_report(const BarrierReport& r);
  void on_error(const RankError& e);
  bool on_message(net::Message& m);
  void fail(std::exception_ptr error);
  // Waits (holding `lock`) until `ready` or the run failed; true when ready.
  template <class Ready>
  bool wait_for(std::unique_lock<std::mutex>& lock, Ready ready);

  const plan::Placement& placement() const { return splitter_.placement(); }
  void write_trace() noexcept;

  Process& process_;
  net::Transport& transport_;
  std::unique_ptr<LocalRunner> local_;  // rank 0's own devices
  plan::PlanSplitter splitter_;         // used under the driver's lock only
  plan::TaskId forgotten_through_ = 0;
  std::unordered_map<const plan::Executable*, net::ExecutableId> ids_;
  std::vector<RankInfo> ranks_;

  mutable std::mutex mutex_;
  std::mutex stats_call_mutex_;  // memory_stats calls, one at a time
  std::condition_variable changed_;
  std::map<plan::TaskId, PlanState> plans_;  // by barrier; dropped once all before are complete
  plan::TaskId complete_through_ = 0;        // every plan up to this barrier is complete
  struct FailedPlan {
    plan::TaskId first;
    std::exception_ptr error;
  };
  std::map<plan::TaskId, FailedPlan> failed_plans_;  // by barrier
  // Plans that failed on their own (a task of theirs failed, not only one before them) and
  // whose failure has not reached the program yet: a failure reaches it once.
  std::set<plan::TaskId> unreported_;
  // The failed plan a task belongs to (its barrier), or none.
  std::optional<plan::TaskId> failed_plan_of(plan::TaskId task) const;
  // The program has heard of the failure of the plan ending in `barrier`: it, and the plan
  // its error came from, are not reported again.
  void reported(plan::TaskId barrier, const std::exception_ptr& error);
  std::exception_ptr failure_;     // the run's: a rank lost or unable to go on
  bool failure_reported_ = false;  // wait_all() threw it once
  std::map<int, RankInfo> hellos_;
  int closed_ = 0;
  std::map<int, std::vector<MemoryStats>> stats_;
  std::string trace_file_;                         // GRIDSPAN_TRACE, when tracing
  std::map<int, std::vector<TraceEvent>> traces_;  // the other ranks', by rank
  std::unique_ptr<WorkerService> service_;
};

}  // namespace gridspan::runtime
