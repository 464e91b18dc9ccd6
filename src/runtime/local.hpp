// This process's devices as a Runner: its backend, memory manager, worker and the
// worker's transfers to other processes. A run of one
// process is one LocalRunner; under mpirun every rank has one (rank 0's inside the Cluster,
// the others' serving the driver's session).
#pragma once

#include <memory>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"
#include "runtime/memory.hpp"
#include "runtime/runner.hpp"
#include "runtime/trace.hpp"
#include "runtime/transfers.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

class LocalRunner final : public Runner {
 public:
  /// Opens the backend `config` asks for, with its memory limits and staging bound, and
  /// records a trace when it names a file. `whole_run`: this process is the run; otherwise
  /// it is one part of a run over several processes, whose errors are reported with their
  /// barriers and whose trace the driver's rank writes.
  explicit LocalRunner(const Config& config, bool whole_run = true);
  ~LocalRunner() override;  // waits for every task; a whole run writes its trace
  LocalRunner(const LocalRunner&) = delete;
  LocalRunner& operator=(const LocalRunner&) = delete;

  backend::Backend& backend() override { return *backend_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  std::vector<int> rank_of_device() const override { return {}; }
  std::vector<RankInfo> ranks() const override { return {describe(0)}; }
  void add_executable(std::shared_ptr<const plan::Executable> executable) override;
  void submit(plan::Plan plan) override {
    worker_->submit(std::move(plan.tasks));
    spare_ = std::move(plan.tasks);  // the worker's finished tasks, swapped for the new ones
  }
  std::vector<plan::Task> spare_tasks() override { return std::move(spare_); }
  void wait(plan::TaskId task) override { worker_->wait(task); }
  bool is_done(plan::TaskId task) const override { return worker_->is_done(task); }
  void drop_finished(std::vector<plan::TaskId>& tasks) const override {
    worker_->drop_finished(tasks);
  }
  void wait_all() override { worker_->wait_all(); }
  bool failed() const override { return false; }
  std::vector<MemoryStats> memory_stats() override { return memory_->stats(); }
  void free_all_blocks() override { memory_->free_cached_blocks(); }
  WorkerStats worker_stats() const override { return worker_->stats(); }
  CostModel& costs() override { return costs_; }
  Observer* observer() const override { return trace_.get(); }

  /// This process as rank `rank` of a run: host, backend, devices and memory.
  RankInfo describe(int rank) const;
  Worker& worker() { return *worker_; }
  Transfers& transfers() { return *transfers_; }
  MemoryManager& memory() { return *memory_; }
  /// The trace recorded so far (empty when not tracing).
  std::vector<TraceEvent> take_trace();

 private:
  Config config_;
  bool whole_run_;
  std::unique_ptr<TraceRecorder> trace_;  // when tracing; outlives the worker and memory
  std::unique_ptr<backend::Backend> backend_;
  std::vector<backend::Device*> devices_;
  std::unique_ptr<MemoryManager> memory_;
  CostModel costs_;  // outlives the worker, which records into it
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Transfers> transfers_;  // the worker's transfer tasks; outlives the worker
  std::vector<std::shared_ptr<const plan::Executable>> executables_;
  std::vector<plan::Task> spare_;  // spare_tasks
};

}  // namespace gridspan::runtime
