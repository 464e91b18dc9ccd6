// Dependency tracking between plans: per chunk, the regions tasks last wrote and read. A
// reader depends on the writers it overlaps (RAW); a writer on every record it overlaps
// (WAR, WAW) and supersedes the records it covers, so disjoint writers of one chunk never
// wait for each other. Records of finished tasks are pruned once a chunk has 32, and then
// when it has twice what the last pruning left: while the tasks still run (a long chain
// queued on a GPU), asking after each of them at every record would cost a launch more
// the more are queued.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "gridspan/core/geometry.hpp"
#include "plan/task.hpp"

namespace gridspan::plan {

class RegionRecords {
 public:
  /// Removes the finished tasks from a list: what says which records may be forgotten.
  using DoneFilter = std::function<void(std::vector<TaskId>&)>;
  /// `is_done(task)`, asked of one task at a time (null: nothing is forgotten).
  explicit RegionRecords(std::function<bool(TaskId)> is_done);
  /// Asked of all of a chunk's tasks at once instead (the worker answers under one lock).
  void set_done_filter(DoneFilter f) { done_filter_ = std::move(f); }

  /// Appends the tasks a reader of `region` of chunk `c` waits for.
  void read_deps(ChunkId c, const Rect& region, std::vector<TaskId>& deps) const;
  /// Appends the tasks a writer of `region` of chunk `c` waits for.
  void write_deps(ChunkId c, const Rect& region, std::vector<TaskId>& deps) const;
  /// Task `t` reads or writes `region` of chunk `c` from now on.
  void record(ChunkId c, const Rect& region, TaskId t, bool write);
  /// The chunk is gone.
  void forget(ChunkId c) { records_.erase(c); }
  /// Records kept, over every chunk.
  std::size_t size() const;

 private:
  struct Record {
    Rect region;
    TaskId task;
  };
  using Records = std::vector<Record>;
  static void erase_covered(Records& records, const Rect& by);
  static void overlapping(const Records& records, const Rect& r, std::vector<TaskId>& deps);
  struct Chunk;
  void erase_done(Chunk& chunk) const;
  // Writers and readers apart: a reader looks at the writers only, and a chunk read by
  // every launch of a chain has many readers and one writer.
  struct Chunk {
    std::vector<Record> writes, reads;
    std::size_t prune_at = 32;
    std::size_t size() const { return writes.size() + reads.size(); }
  };
  void prune(Chunk& chunk) const;

  DoneFilter done_filter_;
  std::unordered_map<ChunkId, Chunk> records_;
};

}  // namespace gridspan::plan
