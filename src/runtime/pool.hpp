// A caching allocator for one memory space of the memory manager (CuPy's memory pool
// idea): blocks are rounded up to size classes, and freed blocks wait in per-class free
// lists for reuse instead of going back to the backend, because device memory and pinned
// host allocations are slow. The manager decides when cached blocks are given back.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <vector>

namespace gridspan::runtime::detail {

class BlockPool {
 public:
  using Allocate = std::function<void*(std::size_t)>;
  using Release = std::function<void(void*, std::size_t)>;

  /// `allocate` and `release` reach the backend (for example Device::allocate and
  /// Device::deallocate); they are called with size-class bytes only. Without `caching`
  /// a freed block goes back to the backend at once (GRIDSPAN_MEMORY_POOL=0).
  BlockPool(Allocate allocate, Release release, bool caching = true);
  /// Releases the cached blocks. Blocks still in use are the owner's to free first.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  /// The bytes a block for `bytes` really takes: multiples of 512 bytes up to 1 MiB, then
  /// eight classes per power of two (at most 12.5% more than asked).
  static std::size_t size_class(std::size_t bytes);

  /// True when a block of `bytes`' class waits in the cache (allocating it takes no new
  /// memory from the backend).
  bool has_cached(std::size_t bytes) const { return cached_blocks(bytes) > 0; }
  /// How many blocks of `bytes`' class wait in the cache.
  std::size_t cached_blocks(std::size_t bytes) const;
  /// A block of size_class(bytes) bytes, cached or new. The backend's exceptions pass.
  void* allocate(std::size_t bytes);
  /// Returns a block from `allocate(bytes)` to the cache.
  void free(void* block, std::size_t bytes);
  /// A block in use leaves this pool without being cached (another pool adopts it: the
  /// unified memory model moves blocks between spaces instead of copying them).
  void forget(std::size_t bytes) { in_use_bytes_ -= size_class(bytes); }
  /// A block in use from another pool of the same allocator joins this one.
  void adopt(std::size_t bytes) { in_use_bytes_ += size_class(bytes); }
  /// Gives cached blocks back to the backend, largest first, until at least `at_least`
  /// bytes are released or the cache is empty. Returns the bytes released.
  std::size_t release_cached(std::size_t at_least);

  std::size_t cached_bytes() const { return cached_bytes_; }
  std::size_t in_use_bytes() const { return in_use_bytes_; }
  /// What the pool holds from the backend: in use plus cached.
  std::size_t held_bytes() const { return cached_bytes_ + in_use_bytes_; }

 private:
  Allocate allocate_;
  Release release_;
  bool caching_ = true;
  std::map<std::size_t, std::vector<void*>> free_lists_;  // by size class
  std::size_t cached_bytes_ = 0;
  std::size_t in_use_bytes_ = 0;
};

}  // namespace gridspan::runtime::detail
