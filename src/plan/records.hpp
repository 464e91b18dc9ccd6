// Dependency tracking between plans: per chunk, the regions tasks last wrote and read. A
// reader depends on the writers it overlaps (RAW); a writer on every record it overlaps
// (WAR, WAW) and supersedes the records it covers, so disjoint writers of one chunk never
// wait for each other. Records of finished tasks are pruned once a chunk has 32.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "gridspan/core/geometry.hpp"
#include "plan/task.hpp"

namespace gridspan::plan {

class RegionRecords {
 public:
  /// `is_done(task)` says which records may be forgotten (null: none).
  explicit RegionRecords(std::function<bool(TaskId)> is_done) : is_done_(std::move(is_done)) {}

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
    bool write;
  };
  void prune(std::vector<Record>& records) const;

  std::function<bool(TaskId)> is_done_;
  std::unordered_map<ChunkId, std::vector<Record>> records_;
};

}  // namespace gridspan::plan
