// Waiting in tests for what another thread does.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace gridspan::test {

// Whether `done` holds within 10 s (what a background thread does, looked at each ms).
inline bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 10000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

}  // namespace gridspan::test
