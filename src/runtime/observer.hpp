// Watching the runtime without owning it (Taskflow's ObserverInterface): the worker reports
// every task it runs and the memory manager every move of a chunk between spaces, to an
// observer outside both (trace.hpp's TraceRecorder writes them as a Chrome trace). Reports
// come from the threads doing the work: an observer must be quick and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gridspan::runtime {

/// Microseconds on the clock every report uses (the system clock, so that the reports of
/// several processes line up).
double observer_now_us();

/// One span of work: a task's run on its device, or a chunk's move between spaces.
struct TraceEvent {
  std::string name;  // the kernel's name or the task's kind; for moves "chunk 12"
  std::string kind;  // the task's kind ("Execute", "Copy", ...) or "spill", "reload", "evict"
  int track = 0;     // the device; a rank's device count for moves between host and disk
  double start_us = 0, end_us = 0;
  uint64_t id = 0;        // the task, or the chunk moved
  std::size_t bytes = 0;  // bytes the task's chunks hold, or bytes moved
};

class Observer {
 public:
  virtual ~Observer() = default;
  /// A task ran (on an asynchronous device: was queued) on `event.track`.
  virtual void task_ran(TraceEvent event) = 0;
  /// A chunk's copy moved: spilled (device to host, host to disk), reloaded (disk to host,
  /// host to device), or evicted (dropped where another copy is valid).
  virtual void chunk_moved(TraceEvent event) = 0;
};

}  // namespace gridspan::runtime
