// Splitting plans over processes: the planner numbers devices across every rank of a run;
// each rank's worker gets the tasks of its own devices, renumbered to its local devices.
// Data that cross ranks travel as transfers: a Copy between ranks becomes a Send on the
// source's rank and a Recv with the same task id on the target's, a read-back of a chunk
// another rank holds becomes a Send there and a RecvHost on the driver's rank, and a
// Barrier has a part (same id) on every rank its dependencies run on. Every dependency then
// names a task on the same rank; anything else is an internal error.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "plan/task.hpp"

namespace gridspan::plan {

/// Where the run's devices are: device d (the planner's numbering) is device `local[d]` of
/// rank `rank[d]`.
struct Placement {
  std::vector<int> rank;
  std::vector<int> local;
  int ranks = 1;
  int driver = 0;  // the rank whose host memory read-backs fill
  /// Devices numbered rank by rank: counts[r] devices on rank r.
  static Placement by_rank(const std::vector<int>& counts, int driver = 0);
};

class PlanSplitter {
 public:
  explicit PlanSplitter(Placement placement) : placement_(std::move(placement)) {}
  const Placement& placement() const { return placement_; }

  /// The tasks of one plan per rank (`out[r]`, in the plan's order). Dependencies may name
  /// tasks of earlier plans: the splitter remembers the ranks of tasks until forget().
  std::vector<std::vector<Task>> split(std::vector<Task> tasks);
  /// Tasks with ids up to `last` are finished: their ranks are no longer needed, except
  /// for those `keep` names (later tasks still depend on them: failed ones, whose error
  /// their rank's worker passes on to whatever depends on them).
  void forget(TaskId last, const std::function<bool(TaskId)>& keep = {});
  /// The ranks of a Barrier's parts, once split (empty when unknown).
  const std::vector<int>& barrier_ranks(TaskId barrier) const;

 private:
  int rank_of_device(const Task& t) const;
  Placement placement_;
  // The ranks each task of a not yet forgotten plan has a part on.
  std::unordered_map<TaskId, std::vector<int>> ranks_of_;
  std::unordered_map<ChunkId, int> chunk_device_;  // every chunk created and not deleted
};

}  // namespace gridspan::plan
