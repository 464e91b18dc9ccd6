// The planner: turns one launch (or an array's creation, host write, read-back, deletion)
// into tasks with dependencies. Launch k+1 is planned while launch k runs: the planner
// tracks, per chunk and region, which tasks last wrote and read it (RAW, WAR, WAW), so the
// task graph grows incrementally and disjoint writers of one chunk run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "annotation/annotation.hpp"
#include "gridspan/distribution/distribution.hpp"
#include "plan/memo.hpp"
#include "plan/read_cache.hpp"
#include "plan/records.hpp"
#include "plan/task.hpp"

namespace gridspan::plan {

struct ChunkMeta {
  ChunkId id = 0;
  Rect region;
  Rect owned;
  int device = 0;
};

/// The driver's record of one distributed array.
struct ArrayMeta {
  uint64_t id = 0;
  DType dtype = DType::f32;
  std::size_t elem_size = 4;
  Dim shape;
  std::vector<ChunkMeta> chunks;
  bool owned_partition = true;   // owned boxes are disjoint and cover the array
  bool automatic = false;        // cut by dist::automatic (without a halo): may be re-cut
  std::string describe() const;  // "array 3 float32 {100, 20}"
};

/// Everything the planner needs to know about one launch.
struct LaunchSpec {
  std::shared_ptr<const Executable> executable;
  const annotation::Annotation* annotation = nullptr;
  const std::vector<ParamInfo>* params = nullptr;
  Dim threads, block;
  std::vector<Superblock> superblocks;
  std::vector<const ArrayMeta*> arrays;  // per parameter; null for scalars
  std::vector<int64_t> int_scalars;      // per parameter; integer scalar values (else 0)
  std::shared_ptr<const std::vector<unsigned char>> scalars;
  std::shared_ptr<const std::vector<uint32_t>> scalar_offsets;  // per parameter
  /// The launch clock its tasks tick as they end (runtime::LaunchClocks), or 0: set with
  /// the superblocks by automatic work while it tries finer cuts.
  uint32_t clock = 0;

  /// As new, keeping its vectors' memory (core/scratch.hpp borrows specs so).
  void clear() {
    executable.reset();
    annotation = nullptr;
    params = nullptr;
    threads = block = Dim();
    superblocks.clear();
    arrays.clear();
    int_scalars.clear();
    scalars.reset();
    scalar_offsets.reset();
    clock = 0;
  }
};

class Planner {
 public:
  /// `devices`: devices of the worker; `is_done(task)` lets the planner forget finished tasks.
  Planner(int devices, std::function<bool(TaskId)> is_done);

  /// The rank (process) of each device, for a run of several: reductions then combine each
  /// rank's partials on that rank and go across ranks as a tree of copies and reductions,
  /// so no task reads a chunk of another rank (PlanSplitter turns the copies into
  /// transfers); and every plan ends in a Barrier (the driver hears of barriers only).
  /// Empty (the default): every device in one process.
  void set_ranks(std::vector<int> rank_of_device);
  /// Finished tasks' records are pruned through `filter` (it removes the finished ones from
  /// a list of tasks, all at once) instead of `is_done` one task at a time.
  void set_done_filter(RegionRecords::DoneFilter filter) {
    records_.set_done_filter(std::move(filter));
  }

  /// Chunk ids for a new array's chunks (fills `meta.chunks[k].id`).
  void assign_chunk_ids(ArrayMeta& meta);
  /// Creates the chunks of an array; with `fill` (elem_size bytes), sets every element.
  Plan create_array(const ArrayMeta& meta, const unsigned char* fill);
  /// Writes a whole array from host data (row-major, meta.shape) into every chunk.
  /// (Its own bytes, or a pinned buffer's kept alive until every chunk is written.)
  Plan write_array(const ArrayMeta& meta, HostBytes data);
  /// Reads a whole array into `dst` (row-major, meta.shape); wait for `done`.
  Plan read_array(const ArrayMeta& meta, void* dst);
  /// Frees an array's chunks once every task that touches them has finished.
  Plan delete_array(const ArrayMeta& meta);
  /// Plans one launch. Throws LaunchError for bad geometry or access regions.
  Plan launch(const LaunchSpec& spec);
  std::size_t tracked_records() const;

  /// Read-only copies of other devices' data that a launch assembles (GEMM's B on every
  /// device) are kept for later launches, at most `bytes_per_device[d]` bytes of them on
  /// device d (least recently used go first), until their array is written or deleted.
  /// Default: none kept.
  void set_read_cache(std::vector<std::size_t> bytes_per_device);
  /// How many such copies are kept now.
  std::size_t cached_reads() const { return read_cache_.size(); }

  /// A launch repeated with the same kernel, geometry, superblocks, arrays and integer
  /// scalars reuses the first one's plan (memo.hpp). On by default.
  void set_memoize(bool on) { memoize_ = on; }
  /// Launches planned from a kept skeleton so far.
  uint64_t memo_hits() const { return memo_.hits(); }
  /// Tasks whose memory the next repeated launch may reuse (what a runner gave back once it
  /// had taken a plan's tasks): copied over, their vectors keep their memory.
  void reuse_tasks(std::vector<Task>&& tasks) {
    if (tasks.capacity() > spare_tasks_.capacity()) spare_tasks_ = std::move(tasks);
  }

 private:
  class Launch;  // one launch's passes (launch.cpp)
  ChunkId next_chunk() { return ++last_chunk_; }
  Plan finish(std::vector<Task> tasks);

  int devices_;
  std::function<bool(TaskId)> is_done_;
  std::vector<int> rank_of_device_;  // empty: one rank
  TaskId last_task_ = 0;
  ChunkId last_chunk_ = 0;
  RegionRecords records_;
  std::vector<std::vector<annotation::Access>> accesses_;  // per superblock, reused
  ReadCache read_cache_;
  bool memoize_ = true;
  LaunchMemo memo_;
  std::vector<Task> spare_tasks_;  // reuse_tasks
};

}  // namespace gridspan::plan
