// Config parsing: sizes, flags and the GRIDSPAN_* environment.
#include "gridspan/core/config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan {

std::size_t parse_size(const std::string& text, const std::string& what) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  std::size_t pos = 0;
  while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.'))
    ++pos;
  std::string number = t.substr(0, pos), unit = t.substr(pos);
  std::string lower = unit;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  double scale = 0;
  if (lower.empty() || lower == "b")
    scale = 1;
  else if (lower == "k" || lower == "kib" || lower == "kb")
    scale = 1024.0;
  else if (lower == "m" || lower == "mib" || lower == "mb")
    scale = 1024.0 * 1024;
  else if (lower == "g" || lower == "gib" || lower == "gb")
    scale = 1024.0 * 1024 * 1024;
  else if (lower == "t" || lower == "tib" || lower == "tb")
    scale = 1024.0 * 1024 * 1024 * 1024;
  char* end = nullptr;
  double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || value < 0 || (end && *end) || std::isnan(value))
    throw ConfigError(fmt::format(
        "{}: '{}' is not a size; write a number of bytes with an optional unit, such as "
        "4096, 64KiB, 512MiB or 2GiB",
        what, text));
  return static_cast<std::size_t>(value * scale);
}

std::optional<bool> parse_flag(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), ::tolower);
  if (t == "1" || t == "on" || t == "yes" || t == "true") return true;
  if (t == "0" || t == "off" || t == "no" || t == "false") return false;
  return std::nullopt;
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

Config Config::from_env() {
  return Config{}.with_env();
}

Config Config::with_env() const {
  Config c = *this;
  if (const char* v = env("GRIDSPAN_LOG")) {
    std::string s = v;
    if (s == "error")
      c.log_level = LogLevel::error;
    else if (s == "warn")
      c.log_level = LogLevel::warn;
    else if (s == "info")
      c.log_level = LogLevel::info;
    else if (s == "debug")
      c.log_level = LogLevel::debug;
    else
      log::warn("GRIDSPAN_LOG='{}' is not one of error, warn, info, debug; keeping the default", s);
  }
  log::set_level(c.log_level);
  if (const char* v = env("GRIDSPAN_BACKEND")) {
    std::string b = v;
    for (char& ch : b) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (b != "auto" && b != "cpu" && b != "cuda")
      throw ConfigError(
          fmt::format("GRIDSPAN_BACKEND='{}' is not a backend; give auto, cuda or cpu", v));
    c.backend = b;
  }
  if (const char* v = env("GRIDSPAN_GPUS")) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > 1024)
      throw ConfigError(fmt::format(
          "GRIDSPAN_GPUS='{}' is not a GPU count; give a whole number (0 = every GPU)", v));
    c.gpus = static_cast<int>(n);
  }
  if (const char* v = env("GRIDSPAN_CPU_DEVICES")) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 1 || n > 1024)
      throw ConfigError(fmt::format(
          "GRIDSPAN_CPU_DEVICES='{}' is not a device count; give a whole number from 1 to 1024",
          v));
    c.cpu_devices = static_cast<int>(n);
  }
  if (const char* v = env("GRIDSPAN_CPU_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > 1024)
      throw ConfigError(fmt::format(
          "GRIDSPAN_CPU_THREADS='{}' is not a thread count; give a whole number from 0 to 1024",
          v));
    c.cpu_threads = static_cast<int>(n);
  }
  if (const char* v = env("GRIDSPAN_DEVICE_MEMORY"))
    c.device_memory = parse_size(v, "GRIDSPAN_DEVICE_MEMORY");
  if (const char* v = env("GRIDSPAN_HOST_MEMORY"))
    c.host_memory = parse_size(v, "GRIDSPAN_HOST_MEMORY");
  if (const char* v = env("GRIDSPAN_STAGING_BYTES"))
    c.staging_bytes = parse_size(v, "GRIDSPAN_STAGING_BYTES");
  if (const char* v = env("GRIDSPAN_SPILL_DIR")) c.spill_dir = v;
  if (const char* v = env("GRIDSPAN_CACHE_DIR")) c.cache_dir = v;
  if (const char* v = env("GRIDSPAN_CXX")) c.cxx = v;
  if (const char* v = env("GRIDSPAN_TRACE")) c.trace_file = v;
  if (const char* v = env("GRIDSPAN_STREAM_ORDER")) {
    if (auto f = parse_flag(v))
      c.stream_order = *f;
    else
      log::warn(
          "GRIDSPAN_STREAM_ORDER='{}' is not a flag (1/on/yes/true or 0/off/no/false); keeping {}",
          v, c.stream_order);
  }
  if (const char* v = env("GRIDSPAN_CPU_ASYNC")) {
    if (auto f = parse_flag(v))
      c.cpu_async = *f;
    else
      throw ConfigError(fmt::format("GRIDSPAN_CPU_ASYNC='{}' is not a flag; give on or off", v));
  }
  if (const char* v = env("GRIDSPAN_NET_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds > 0) || seconds > 1e6)
      throw ConfigError(
          fmt::format("GRIDSPAN_NET_TIMEOUT='{}' is not a time; give seconds, e.g. 60 or 2.5", v));
    c.net_timeout = seconds;
  }
  if (const char* v = env("GRIDSPAN_MPI")) {
    if (auto f = parse_flag(v))
      c.mpi = *f;
    else
      throw ConfigError(fmt::format(
          "GRIDSPAN_MPI='{}' is not a flag; give on (one run over every rank) or off", v));
  }
  if (const char* v = env("GRIDSPAN_SHARE_MEMORY")) {
    if (auto f = parse_flag(v))
      c.share_memory = *f;
    else
      throw ConfigError(fmt::format(
          "GRIDSPAN_SHARE_MEMORY='{}' is not a flag; give on (ranks of one node copy from each "
          "other's devices) or off (every transfer goes through MPI)",
          v));
  }
  if (const char* v = env("GRIDSPAN_SHARE_MIN")) c.share_min = parse_size(v, "GRIDSPAN_SHARE_MIN");
  if (const char* v = env("GRIDSPAN_CHECK")) {
    if (auto f = parse_flag(v))
      c.check = *f;
    else
      log::warn("GRIDSPAN_CHECK='{}' is not a flag (1/on/yes/true or 0/off/no/false); keeping {}",
                v, c.check);
  }
  return c;
}

}  // namespace gridspan
