// stderr logging with a process-wide level.
#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

namespace gridspan::logging {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
std::mutex g_mutex;
std::string g_prefix;  // guarded by g_mutex
}  // namespace

void set_level(LogLevel l) {
  g_level = static_cast<int>(l);
}
LogLevel level() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

void set_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix.empty() ? prefix : "[" + prefix + "]";
}

void write(LogLevel l, const std::string& message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "gridspan%s %s: %s\n", g_prefix.c_str(), names[static_cast<int>(l)],
               message.c_str());
}

void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(message).second) return;
  }
  if (level() >= LogLevel::warn) write(LogLevel::warn, message);
}

}  // namespace gridspan::logging
