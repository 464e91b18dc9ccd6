// This process's devices as a Runner (see local.hpp).
#include "runtime/local.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/log.hpp"

namespace gridspan::runtime {

LocalRunner::LocalRunner(const Config& config)
    : config_(config), backend_(backend::make_backend(config_)), devices_(backend_->devices()) {
  memory_ = std::make_unique<MemoryManager>(devices_, memory_limits(config_));
  worker_ =
      std::make_unique<Worker>(devices_, *memory_, config_.staging_bytes, config_.stream_order);
  worker_->check_transfers(config_.check_transfers);
  if (!config_.trace_file.empty()) worker_->enable_trace();
}

LocalRunner::~LocalRunner() {
  try {
    worker_->wait_all();
  } catch (const std::exception& e) {
    if (!quiet_end_) log::warn("an error was not reported before the context ended: {}", e.what());
  }
  if (!config_.trace_file.empty()) write_trace();
  worker_.reset();
  memory_.reset();
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
    info.device_memory.push_back(stats[d].total_bytes);
  }
  info.host_memory = stats[devices_.size()].total_bytes;
  return info;
}

// Chrome / Perfetto trace JSON: one complete event per task, a track per device.
void LocalRunner::write_trace() noexcept {
  try {
    nlohmann::json events = nlohmann::json::array();
    for (std::size_t d = 0; d < devices_.size(); ++d)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 0},
                        {"tid", d},
                        {"args", {{"name", devices_[d]->name()}}}});
    for (const auto& e : worker_->take_trace())
      events.push_back({{"name", e.name},
                        {"cat", e.kind},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", e.device},
                        {"ts", e.start_us},
                        {"dur", e.end_us - e.start_us},
                        {"args", {{"task", e.task}, {"bytes", e.bytes}}}});
    std::ofstream out(config_.trace_file);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
    if (!out)
      log::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", config_.trace_file,
                std::strerror(errno));
  } catch (const std::exception& e) {
    log::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", config_.trace_file, e.what());
  }
}

}  // namespace gridspan::runtime
