// The driver: owns the backend, the worker and the planner of this process; keeps every
// array's metadata; turns API calls into plans and submits them. One mutex guards the
// planner, so arrays may be released from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/distribution/distribution.hpp"
#include "plan/planner.hpp"
#include "runtime/cluster.hpp"
#include "runtime/memory.hpp"
#include "runtime/process.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

/// A compiled kernel as the runtime runs it: builds the GsLaunch for one superblock, calls
/// the wrapper, and turns a checked-mode violation into an AccessError.
class KernelExecutable : public plan::Executable {
 public:
  KernelExecutable(std::string name, std::vector<ParamInfo> params,
                   std::shared_ptr<backend::CompiledKernel> kernel, bool checked);
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame& frame) const override;

 private:
  std::string name_;
  std::vector<ParamInfo> params_;
  std::shared_ptr<backend::CompiledKernel> kernel_;
  bool checked_;
};

/// The ABI view of one superblock's arguments: `arrays[p]` and `scalars[p]` for each
/// parameter (both of params.size()).
void frame_arguments(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame,
                     GsArrayArg* arrays, const void** scalars);

class Driver {
 public:
  explicit Driver(const Config& config);
  ~Driver();  // waits for every task

  const Config& config() const { return config_; }
  int device_count() const;
  std::string backend_name() const { return backend_->name(); }
  backend::Backend& backend() { return *backend_; }

  /// A new array; `fill` (elem_size bytes) sets every element, null leaves them unset.
  std::shared_ptr<plan::ArrayMeta> create_array(DType dtype, const Dim& shape,
                                                const DataDistribution& dist, const void* fill);
  /// Plans the deletion of an array's chunks (after every task using them).
  void release_array(const plan::ArrayMeta& meta) noexcept;
  plan::TaskId write_array(const plan::ArrayMeta& meta, std::vector<unsigned char> data);
  /// Reads a whole array into `dst`; waits for the tasks that produce it.
  void read_array(const plan::ArrayMeta& meta, void* dst);
  /// Plans and submits one launch; returns the task to wait for.
  plan::TaskId launch(const plan::LaunchSpec& spec);

  /// Keeps a compiled kernel alive as long as the driver (tasks point to it without owning
  /// it) and, in a run of several processes, compiles `src` on every rank.
  void add_kernel(std::shared_ptr<const plan::Executable> executable,
                  const backend::KernelSource& src);
  /// The same for a native function; in a run of several processes every rank must have it
  /// registered under `name`.
  void add_native(std::shared_ptr<const plan::Executable> executable, const std::string& name);
  /// The ranks of this run and their devices (one, this process, outside mpirun).
  std::vector<RankInfo> ranks() const;
  int rank_count() const;

  void wait(plan::TaskId task);
  bool is_done(plan::TaskId task) const;
  void synchronize();
  std::vector<MemoryStats> memory_stats() const;
  WorkerStats worker_stats() const;
  /// The most recent launch's plan as Graphviz (kept only when `keep_plans(true)`).
  void keep_plans(bool keep) { keep_plans_ = keep; }
  std::string last_plan_dot() const;

 private:
  plan::TaskId submit(plan::Plan plan);
  void write_trace() noexcept;

  Config config_;
  std::unique_ptr<backend::Backend> backend_;
  int devices_ = 0;  // of every rank
  std::unique_ptr<MemoryManager> memory_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Cluster> cluster_;  // in a run of several processes
  mutable std::mutex mutex_;
  std::unique_ptr<plan::Planner> planner_;
  uint64_t next_array_ = 0;
  bool keep_plans_ = false;
  std::vector<std::shared_ptr<const plan::Executable>> executables_;
  std::string last_dot_;
};

}  // namespace gridspan::runtime
