// Kept read-only copies (see read_cache.hpp).
#include "plan/read_cache.hpp"

#include <algorithm>

namespace gridspan::plan {

void ReadCache::set_limits(std::vector<std::size_t> bytes_per_device) {
  limit_ = std::move(bytes_per_device);
  bytes_.assign(limit_.size(), 0);
}

std::optional<ReadCache::Copy> ReadCache::take(uint64_t array, int device, const Rect& region) {
  auto it = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) {
    return k.copy.array == array && k.copy.device == device && k.copy.region == region;
  });
  if (it == kept_.end()) return std::nullopt;
  Copy copy = std::move(it->copy);
  bytes_[device] -= copy.bytes;
  kept_.erase(it);
  return copy;
}

void ReadCache::let_go(const Copy& c, TaskBuilder& b) {
  b.add(c.device, DeleteChunk{c.ref.id}, c.readers);
  bytes_[c.device] -= c.bytes;
}

bool ReadCache::keep(Copy copy, TaskBuilder& b) {
  const int d = copy.device;
  if (limit_.empty() || copy.bytes > limit_[d]) return false;
  while (bytes_[d] + copy.bytes > limit_[d]) {
    auto lru = kept_.end();
    for (auto k = kept_.begin(); k != kept_.end(); ++k)
      if (k->copy.device == d && (lru == kept_.end() || k->used < lru->used)) lru = k;
    let_go(lru->copy, b);
    kept_.erase(lru);
  }
  bytes_[d] += copy.bytes;
  kept_.push_back(Kept{std::move(copy), ++clock_});
  return true;
}

void ReadCache::drop(uint64_t array, TaskBuilder& b) {
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (it->copy.array != array) {
      ++it;
      continue;
    }
    let_go(it->copy, b);
    it = kept_.erase(it);
  }
}

}  // namespace gridspan::plan
