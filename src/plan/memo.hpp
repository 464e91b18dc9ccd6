// Memoized launches (Legion's trace memoization, for one launch at a time): a launch repeated
// with the same kernel, geometry, superblocks, arrays and integer scalars has the same tasks
// as the first time, apart from their ids, their temporaries' chunk ids, its scalar values
// and their dependencies on earlier work. The first plan is kept as a skeleton with the
// dependency queries it asked in order; a repeat copies the tasks with new ids and asks the
// queries again, so its plan is the one planning afresh would make.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "gridspan/distribution/distribution.hpp"
#include "plan/records.hpp"
#include "plan/task.hpp"

namespace gridspan::plan {

struct ArrayMeta;
struct LaunchSpec;

/// One query or record of a chunk region's dependency records, in planning order.
struct RecordOp {
  enum Kind : uint8_t { read_deps, write_deps, record_read, record_write };
  Kind kind;
  ChunkId chunk;
  Rect region;
  TaskId task;  // whose dependencies the query adds to, or who is recorded
};

/// What identifies a launch's plan, apart from history (the dependency records).
struct LaunchKey {
  const Executable* executable = nullptr;
  const annotation::Annotation* annotation = nullptr;
  Dim threads, block;
  std::vector<Superblock> superblocks;
  std::vector<std::pair<const ArrayMeta*, uint64_t>> arrays;  // the id: addresses are reused
  std::vector<int64_t> int_scalars;
  uint32_t clock = 0;
  explicit LaunchKey(const LaunchSpec& spec);
  /// Whether `spec` is this launch (compared in place: nothing is copied).
  bool matches(const LaunchSpec& spec) const;
};

/// A recorded launch plan: its tasks (ids in (first - 1, first + size), dependencies on
/// each other only), the temporaries it made (chunk ids in (chunk_base, chunk_end]) and
/// the record operations that gave it its dependencies on earlier work.
struct Skeleton {
  LaunchKey key;
  std::vector<Task> tasks;
  std::vector<RecordOp> ops;
  TaskId first = 0, done = 0;
  ChunkId chunk_base = 0, chunk_end = 0;
};

class LaunchMemo {
 public:
  /// Kept skeletons, the most recently used first; at most this many.
  static constexpr std::size_t kCapacity = 16;

  /// The skeleton of a launch like `spec`, or null.
  const Skeleton* find(const LaunchSpec& spec);
  /// Keeps the plan of a launch as a skeleton. `plan_first` and `chunk_base`: the task and
  /// chunk counters before it was planned; `chunk_end` after.
  void keep(const LaunchSpec& spec, const Plan& plan, std::vector<RecordOp> ops, TaskId plan_first,
            ChunkId chunk_base, ChunkId chunk_end);
  /// The plan of a repeat: tasks with ids after `last_task`, temporaries after `last_chunk`
  /// (both advanced), `spec`'s scalars, and dependencies from `records`. Its tasks are
  /// copied over those of `reuse` (any tasks), whose vectors keep their memory.
  static Plan instantiate(const Skeleton& s, const LaunchSpec& spec, RegionRecords& records,
                          TaskId& last_task, ChunkId& last_chunk, std::vector<Task> reuse = {});
  uint64_t hits() const { return hits_; }
  std::size_t size() const { return kept_.size(); }

 private:
  std::deque<Skeleton> kept_;
  uint64_t hits_ = 0;
};

}  // namespace gridspan::plan
