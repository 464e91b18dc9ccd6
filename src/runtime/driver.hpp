// The driver: keeps every array's metadata, turns API calls into plans and hands them to
// its Runner (this process's devices, or every rank's under mpirun). One mutex guards the
// planner, so arrays may be released from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gridspan/core/config.hpp"
#include "gridspan/core/info.hpp"
#include "gridspan/distribution/distribution.hpp"
#include "plan/planner.hpp"
#include "runtime/granularity.hpp"
#include "runtime/runner.hpp"

namespace gridspan::runtime {

/// What a layer above keeps per context (the array library's kernels and pending arrays).
class LibraryState {
 public:
  virtual ~LibraryState() = default;
  /// Launches the work of every pending array (before a synchronize).
  virtual void settle_pending() = 0;
  /// Offered an array whose last handle went (one the library made to reuse): true when
  /// it keeps the array for a later result of its shape instead of its release.
  virtual bool recycle(std::shared_ptr<plan::ArrayMeta>& meta) = 0;
  /// The arrays kept for reuse, given up (the caller releases them).
  virtual std::vector<std::shared_ptr<plan::ArrayMeta>> take_kept() = 0;
};

class Driver {
 public:
  explicit Driver(const Config& config);
  ~Driver();  // ends the run if end() has not

  /// The end of the run (the Context's): waits for every task, then lets the runner go (its
  /// devices, under mpirun the session on every rank). Arrays, kernels and events that
  /// outlive it throw a gs::Error saying so; releasing them is a no-op. Throws the first
  /// error not reported yet, after the end.
  void end();

  const Config& config() const { return config_; }
  int device_count() const { return live().device_count(); }
  std::string backend_name() const { return live().backend().name(); }
  backend::Backend& backend() { return live().backend(); }

  /// A new array; `fill` (elem_size bytes) sets every element, null leaves them unset.
  std::shared_ptr<plan::ArrayMeta> create_array(DType dtype, const Dim& shape,
                                                const DataDistribution& dist, const void* fill);
  /// Plans the deletion of an array's chunks (after every task using them).
  void release_array(const plan::ArrayMeta& meta) noexcept;
  plan::TaskId write_array(const plan::ArrayMeta& meta, std::vector<unsigned char> data);
  /// The same from bytes another owns (a pinned buffer's): they are read as the chunks are
  /// written, and kept alive until then.
  plan::TaskId write_array(const plan::ArrayMeta& meta, plan::HostBytes data);
  /// Reads a whole array into `dst`; waits for the tasks that produce it.
  void read_array(const plan::ArrayMeta& meta, void* dst);
  /// The same without waiting: `dst` is written once the returned task is done.
  plan::TaskId read_array_async(const plan::ArrayMeta& meta, void* dst);
  /// True once end() has let the run go (every task was finished then).
  bool ended() const;
  /// Plans and submits one launch; returns the task to wait for.
  plan::TaskId launch(const plan::LaunchSpec& spec);

  /// Keeps a kernel or native function alive as long as the driver (tasks point to it
  /// without owning it) and makes it known wherever tasks run.
  void add_executable(std::shared_ptr<const plan::Executable> executable);
  /// The ranks of this run and their devices (one, this process, outside mpirun).
  std::vector<RankInfo> ranks() const { return live().ranks(); }

  void wait(plan::TaskId task) {
    outside_tasks("waits for the devices");
    live().wait(task);
  }
  bool is_done(plan::TaskId task) const { return live().is_done(task); }
  void synchronize() {
    outside_tasks("waits for the devices");
    live().wait_all();
  }
  std::vector<MemoryStats> memory_stats() const { return live().memory_stats(); }
  void free_all_blocks() { live().free_all_blocks(); }
  WorkerStats worker_stats() const { return live().worker_stats(); }
  CostModel& costs() const { return live().costs(); }
  /// Chooses automatic distributions (made on first use).
  Granularity& granularity();
  /// Where the trace goes (null when not tracing).
  Observer* observer() const { return live().observer(); }
  /// What this context has done so far (Context::stats).
  struct Counters {
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> tasks{0};
    std::atomic<uint64_t> kernels_compiled{0};
    std::atomic<uint64_t> bytes_moved{0};  // planned copies: between devices, ranks, host
  };
  Counters& counters() { return counters_; }
  /// What a layer above keeps per context (the array library's kernels and settings); it
  /// is let go at end(), so what it holds may hold the driver.
  std::shared_ptr<LibraryState>& library_state() { return library_state_; }

  /// The most recent launch's plan as Graphviz (kept only when `keep_plans(true)`).
  void keep_plans(bool keep) { keep_plans_ = keep; }
  std::string last_plan_dot() const;

  /// Throws when the calling thread runs a native function's task: launching, making or
  /// reading arrays and waiting from there would wait for the task itself.
  void outside_tasks(const char* what) const;

 private:
  plan::TaskId submit(plan::Plan plan);
  // The runner and the planner while the run lasts; a gs::Error after end().
  Runner& live() const;
  plan::Planner& planner();

  Config config_;
  std::unique_ptr<Runner> runner_;  // null once the run has ended
  mutable std::mutex mutex_;
  std::unique_ptr<plan::Planner> planner_;
  uint64_t next_array_ = 0;
  bool keep_plans_ = false;
  std::string last_dot_;
  Counters counters_;
  std::shared_ptr<LibraryState> library_state_;
  std::once_flag granularity_once_;
  std::unique_ptr<Granularity> granularity_;
};

}  // namespace gridspan::runtime
