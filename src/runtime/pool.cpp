// BlockPool: size classes and per-class free lists of cached blocks.
#include "runtime/pool.hpp"

#include <bit>
#include <limits>
#include <utility>

#include "gridspan/core/error.hpp"

namespace gridspan::runtime::detail {

namespace {
constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kLinearLimit = std::size_t(1) << 20;
constexpr std::size_t kClassesPerDoubling = 8;

std::size_t round_up(std::size_t bytes, std::size_t step) {
  if (bytes > std::numeric_limits<std::size_t>::max() - (step - 1)) {
    throw Error("a memory block of " + std::to_string(bytes) +
                " bytes is larger than any memory space can hold");
  }
  return (bytes + step - 1) / step * step;
}
}  // namespace

BlockPool::BlockPool(Allocate allocate, Release release, bool caching)
    : allocate_(std::move(allocate)), release_(std::move(release)), caching_(caching) {}

BlockPool::~BlockPool() {
  release_cached(std::numeric_limits<std::size_t>::max());
}

std::size_t BlockPool::size_class(std::size_t bytes) {
  if (bytes <= kLinearLimit) return bytes == 0 ? kMinBlock : round_up(bytes, kMinBlock);
  return round_up(bytes, std::bit_floor(bytes) / kClassesPerDoubling);
}

std::size_t BlockPool::cached_blocks(std::size_t bytes) const {
  auto it = free_lists_.find(size_class(bytes));
  return it == free_lists_.end() ? 0 : it->second.size();
}

void* BlockPool::allocate(std::size_t bytes) {
  std::size_t block_bytes = size_class(bytes);
  auto it = free_lists_.find(block_bytes);
  void* block = nullptr;
  if (it != free_lists_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_lists_.erase(it);
    cached_bytes_ -= block_bytes;
  } else {
    block = allocate_(block_bytes);
  }
  in_use_bytes_ += block_bytes;
  return block;
}

void BlockPool::free(void* block, std::size_t bytes) {
  std::size_t block_bytes = size_class(bytes);
  in_use_bytes_ -= block_bytes;
  if (!caching_) return release_(block, block_bytes);
  free_lists_[block_bytes].push_back(block);
  cached_bytes_ += block_bytes;
}

std::size_t BlockPool::release_cached(std::size_t at_least) {
  std::size_t released = 0;
  while (released < at_least && !free_lists_.empty()) {
    auto it = std::prev(free_lists_.end());
    std::size_t block_bytes = it->first;
    void* block = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_lists_.erase(it);
    cached_bytes_ -= block_bytes;
    released += block_bytes;
    release_(block, block_bytes);
  }
  return released;
}

}  // namespace gridspan::runtime::detail
