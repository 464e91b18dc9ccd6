// Leveled logging to stderr (GRIDSPAN_LOG).
#pragma once

#include <string>

#include <fmt/format.h>

#include "gridspan/core/config.hpp"

namespace gridspan::logging {

void set_level(LogLevel level);
/// Names the process in every line ("rank 1": "gridspan[rank 1] warn: ..."); under mpirun
/// gridspan sets it to the rank.
void set_prefix(const std::string& prefix);
LogLevel level();
void write(LogLevel level, const std::string& message);

template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() >= LogLevel::warn) write(LogLevel::warn, fmt::format(f, std::forward<A>(a)...));
}
/// A warning said once per process: the same message again is dropped.
void warn_once(const std::string& message);
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (level() >= LogLevel::info) write(LogLevel::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (level() >= LogLevel::debug) write(LogLevel::debug, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace gridspan::logging
