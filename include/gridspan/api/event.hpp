// gs::Event: completion of an asynchronous launch.
#pragma once

#include <cstdint>
#include <memory>

namespace gridspan {

namespace runtime {
class Driver;
}

class Event {
 public:
  Event() = default;
  Event(std::shared_ptr<runtime::Driver> driver, uint64_t task)
      : driver_(std::move(driver)), task_(task) {}
  /// Blocks until the launch has finished; throws the error that made it fail.
  void wait();
  /// True once the launch has finished (successfully or not).
  bool ready() const;

 private:
  std::shared_ptr<runtime::Driver> driver_;
  uint64_t task_ = 0;
};

}  // namespace gridspan
