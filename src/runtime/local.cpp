// This process's devices as a Runner (see local.hpp).
#include "runtime/local.hpp"

#include <unistd.h>

#include "core/log.hpp"

namespace gridspan::runtime {

LocalRunner::LocalRunner(const Config& config, bool whole_run)
    : config_(config), whole_run_(whole_run) {
  if (!config_.trace_file.empty()) {
    if (whole_run_) check_trace_path(config_.trace_file);
    trace_ = std::make_unique<TraceRecorder>();
  }
  backend_ = backend::make_backend(config_);
  devices_ = backend_->devices();
  memory_ = std::make_unique<MemoryManager>(devices_, memory_limits(config_));
  memory_->observe(trace_.get());
  worker_ =
      std::make_unique<Worker>(devices_, *memory_, config_.staging_bytes, config_.stream_order);
  transfers_ = std::make_unique<Transfers>(*worker_, devices_, *memory_);
  transfers_->check_transfers(config_.check_transfers);
  worker_->observe(trace_.get());
  worker_->set_batch_blocks(config_.batch_blocks);
  worker_->measure(&costs_);
  worker_->set_max_unfinished(static_cast<std::size_t>(config_.max_tasks));
}

LocalRunner::~LocalRunner() {
  try {
    worker_->wait_all();
  } catch (const std::exception& e) {
    if (whole_run_)
      logging::warn("an error was not reported before the context ended: {}", e.what());
  }
  const WorkerStats s = worker_->stats();
  logging::debug(
      "worker: {} tasks run, {} failed; {} queued on GPUs, {} of them released early, {} "
      "batched; {} staging retries; at most {} unfinished, {} waits for them; {} waits for a "
      "task slept",
      s.tasks_run, s.tasks_failed, s.tasks_submitted, s.tasks_released_early, s.tasks_batched,
      s.stage_retries, s.most_unfinished, s.submit_waits, s.waits_slept);
  const bool write = trace_ && whole_run_;
  const RankInfo self = write ? describe(0) : RankInfo{};
  worker_.reset();
  transfers_.reset();
  memory_.reset();
  if (write) write_trace_file(config_.trace_file, {RankTrace{self, trace_->take()}});
}

void LocalRunner::add_executable(std::shared_ptr<const plan::Executable> executable) {
  executables_.push_back(std::move(executable));
}

RankInfo LocalRunner::describe(int rank) const {
  RankInfo info;
  info.rank = rank;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  info.host = host;
  info.backend = backend_->name();
  const auto stats = memory_->stats();
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    info.devices.push_back(devices_[d]->name());
    info.device_memory.push_back(stats[d].limit_bytes);
  }
  info.host_memory = stats[devices_.size()].limit_bytes;
  return info;
}

std::vector<TraceEvent> LocalRunner::take_trace() {
  return trace_ ? trace_->take() : std::vector<TraceEvent>{};
}

}  // namespace gridspan::runtime
