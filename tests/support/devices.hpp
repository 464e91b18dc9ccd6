// Tests ask for the devices they need: the GPUs when the backend in use has that many, else
// as many virtual cpu devices (a test of how work spreads over devices needs them all), said
// once per test program. So the whole suite runs on a machine of one GPU too.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/device.hpp"
#include "core/log.hpp"
#include "gridspan/core/config.hpp"

namespace gridspan::test {

/// GPUs the cuda backend would use here (0 without a GPU, or when GRIDSPAN_BACKEND=cpu).
inline int gpus_present() {
  static const int n = [] {
    const char* b = std::getenv("GRIDSPAN_BACKEND");
    if (b && std::string(b) == "cpu") return 0;
    const LogLevel level = logging::level();
    logging::set_level(LogLevel::error);  // "no GPU" is no news here
    Config c;
    c.backend = "auto";
    int gpus = 0;
    try {
      auto backend = backend::make_backend(c);
      if (backend->name() == "cuda") gpus = static_cast<int>(backend->devices().size());
    } catch (const std::exception&) {
    }
    logging::set_level(level);
    return gpus;
  }();
  return n;
}

/// Sets `c` to `devices` devices: that many GPUs when there are, else cpu devices.
inline void use_devices(Config& c, int devices) {
  c.cpu_devices = devices;
  c.gpus = devices;
  if (c.backend == "cpu" || gpus_present() == 0 || gpus_present() >= devices) return;
  static bool said = false;
  if (!said)
    std::printf(
        "gridspan test: %d devices asked for, %d GPU(s) here: such tests run on cpu "
        "devices\n",
        devices, gpus_present());
  said = true;
  c.backend = "cpu";
}

/// `devices` devices as use_devices gives them, one cpu thread each, logging errors only.
inline Config quiet_config(int devices) {
  Config c;
  use_devices(c, devices);
  c.cpu_threads = 1;
  c.log_level = LogLevel::error;
  return c;
}

}  // namespace gridspan::test
