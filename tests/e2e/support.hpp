// Shared helpers for end-to-end tests: contexts with chosen devices and memory limits.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan::test {

namespace gs = gridspan;

inline gs::Config config(int devices, std::size_t device_memory = 0, std::size_t host_memory = 0) {
  gs::Config c = gs::Config::from_env();
  use_devices(c, devices);
  c.cpu_threads = 1;
  if (device_memory) c.device_memory = device_memory;
  if (host_memory) c.host_memory = host_memory;
  // Quiet unless GRIDSPAN_LOG asks for more (a failing test run again with info).
  if (!std::getenv("GRIDSPAN_LOG")) c.log_level = LogLevel::error;
  return c;
}

/// The processes of the run: 1, or the ranks under mpirun (each has the devices a config
/// asks for).
inline int ranks() {
  return process_count();
}

/// Expects `fn` to throw E whose message contains every phrase.
template <class E, class F>
void expect_error(F&& fn, const std::vector<std::string>& phrases) {
  try {
    fn();
    ADD_FAILURE() << "expected an error";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : phrases)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in:\n" << msg;
  }
}

}  // namespace gridspan::test
