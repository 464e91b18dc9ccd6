// Read-only copies of other devices' data that a launch assembles (GEMM's B on every device),
// kept for later launches: at most a byte budget of them per device, the least recently used
// going first, until their array is written or deleted. Going means a DeleteChunk after the
// copy's readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "gridspan/core/geometry.hpp"
#include "plan/builder.hpp"
#include "plan/task.hpp"

namespace gridspan::plan {

class ReadCache {
 public:
  struct Copy {
    uint64_t array;
    int device;
    Rect region;
    ChunkRef ref;
    std::vector<TaskId> ready;    // its creation and assembly: what a reader waits for
    std::vector<TaskId> readers;  // the executes that read it (unfinished ones)
    std::size_t bytes;
  };

  /// `bytes_per_device[d]` bytes of copies kept on device d (default: none kept).
  void set_limits(std::vector<std::size_t> bytes_per_device);
  /// The kept copy of `region` of `array` on `device`, taken out of the cache (the launch
  /// reading it keeps it again or lets it go), or none.
  std::optional<Copy> take(uint64_t array, int device, const Rect& region);
  /// Keeps `copy`, letting the least recently used of its device go to make room; false
  /// (nothing kept, nothing let go) when it is larger than the device's budget.
  bool keep(Copy copy, TaskBuilder& b);
  /// Every kept copy of `array` goes.
  void drop(uint64_t array, TaskBuilder& b);
  std::size_t size() const { return kept_.size(); }
  /// Whether a copy of `array` is kept.
  bool holds(uint64_t array) const {
    for (const Kept& k : kept_)
      if (k.copy.array == array) return true;
    return false;
  }

 private:
  struct Kept {
    Copy copy;
    uint64_t used;  // when a launch last read it
  };
  void let_go(const Copy& c, TaskBuilder& b);

  std::vector<Kept> kept_;
  std::vector<std::size_t> limit_, bytes_;  // per device
  uint64_t clock_ = 0;
};

}  // namespace gridspan::plan
