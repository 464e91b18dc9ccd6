// GRIDSPAN_TRACE's recorder and writer (see trace.hpp).
#include "runtime/trace.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::runtime {

double observer_now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void TraceRecorder::add(TraceEvent event) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<TraceEvent> TraceRecorder::take() {
  std::lock_guard lock(mutex_);
  return std::move(events_);
}

void write_trace_events(net::Writer& w, const std::vector<TraceEvent>& events) {
  w.u32(static_cast<uint32_t>(events.size()));
  for (const TraceEvent& e : events) {
    w.str(e.name);
    w.str(e.kind);
    w.i64(e.track);
    w.u64(std::bit_cast<uint64_t>(e.start_us));
    w.u64(std::bit_cast<uint64_t>(e.end_us));
    w.u64(e.id);
    w.u64(e.bytes);
  }
}

std::vector<TraceEvent> read_trace_events(net::Reader& r) {
  std::vector<TraceEvent> events(r.count("trace events", 2 * 4 + 6 * 8));
  for (TraceEvent& e : events) {
    e.name = r.str("event name");
    e.kind = r.str("event kind");
    e.track = static_cast<int>(r.i64("event track"));
    e.start_us = std::bit_cast<double>(r.u64("event start"));
    e.end_us = std::bit_cast<double>(r.u64("event end"));
    e.id = r.u64("event id");
    e.bytes = r.u64("event bytes");
  }
  return events;
}

void check_trace_path(const std::string& path) {
  std::ofstream out(path);
  if (!out)
    throw ConfigError(fmt::format(
        "GRIDSPAN_TRACE='{}' cannot be written: {}; give a file in a folder you may write to", path,
        std::strerror(errno)));
}

namespace {

// Names a track of a rank: a process (pid) per rank, a thread (tid) per device.
nlohmann::json track_name(const char* what, int pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

void add_rank(nlohmann::json& events, const RankTrace& r, double origin) {
  const int pid = r.rank.rank;
  events.push_back(
      track_name("process_name", pid, 0, fmt::format("rank {} ({})", pid, r.rank.host)));
  for (std::size_t d = 0; d < r.rank.devices.size(); ++d)
    events.push_back(track_name("thread_name", pid, static_cast<int>(d), r.rank.devices[d]));
  const int memory = static_cast<int>(r.rank.devices.size());
  events.push_back(track_name("thread_name", pid, memory, "host and disk"));
  for (const TraceEvent& e : r.events)
    events.push_back({{"name", e.name},
                      {"cat", e.kind},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", e.track},
                      {"ts", e.start_us - origin},
                      {"dur", e.end_us - e.start_us},
                      {"args", {{"id", e.id}, {"bytes", e.bytes}}}});
}

}  // namespace

void write_trace_file(const std::string& path, const std::vector<RankTrace>& ranks) noexcept {
  try {
    double origin = std::numeric_limits<double>::max();
    for (const RankTrace& r : ranks)
      for (const TraceEvent& e : r.events) origin = std::min(origin, e.start_us);
    if (origin == std::numeric_limits<double>::max()) origin = 0;
    nlohmann::json events = nlohmann::json::array();
    for (const RankTrace& r : ranks) add_rank(events, r, origin);
    std::ofstream out(path);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
    if (!out)
      logging::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", path,
                    std::strerror(errno));
  } catch (const std::exception& e) {
    logging::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", path, e.what());
  }
}

}  // namespace gridspan::runtime
