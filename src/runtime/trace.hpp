// GRIDSPAN_TRACE: an Observer that keeps every event, and the writer of the Chrome /
// Perfetto trace JSON. Under mpirun each rank records its own and sends them to the driver's
// rank at the session's end; the file holds every rank (one process id per rank, one track
// per device, and one for moves between host and disk).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "gridspan/core/info.hpp"
#include "net/wire.hpp"
#include "runtime/observer.hpp"

namespace gridspan::runtime {

class TraceRecorder final : public Observer {
 public:
  void task_ran(TraceEvent event) override { add(std::move(event)); }
  void chunk_moved(TraceEvent event) override { add(std::move(event)); }
  /// Every event so far; the recorder is empty afterwards.
  std::vector<TraceEvent> take();

 private:
  void add(TraceEvent event);
  std::mutex mutex_;
  std::vector<TraceEvent> events_;
};

/// One rank's part of a trace: its devices (for the tracks' names) and events.
struct RankTrace {
  RankInfo rank;
  std::vector<TraceEvent> events;
};

void write_trace_events(net::Writer& w, const std::vector<TraceEvent>& events);
std::vector<TraceEvent> read_trace_events(net::Reader& r);

/// Throws ConfigError when `path` cannot be written (checked when a run starts, not after it).
void check_trace_path(const std::string& path);
/// Writes every rank's events to `path` as trace JSON, times from the earliest event; warns
/// (does not throw) when it cannot.
void write_trace_file(const std::string& path, const std::vector<RankTrace>& ranks) noexcept;

}  // namespace gridspan::runtime
