// Message bodies: a byte buffer that is either an adopted std::vector (small messages, the
// wire format's writer) or a block of the process's host buffer pool (transfers: large,
// uninitialised, reused rather than allocated, zeroed and faulted in anew each time, and
// pinned once a GPU backend provides pinned memory, so that a device copies them by DMA and
// the copy does not wait for the host). Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gridspan {

/// Where the pool's blocks come from. `allocate` returns null when it cannot.
struct HostMemory {
  void* (*allocate)(std::size_t bytes) = nullptr;
  void (*release)(void* p, std::size_t bytes) = nullptr;
  const char* name = "malloc";
};

/// From now on the pool takes new blocks from `memory` (a GPU backend's pinned memory);
/// cached blocks of the earlier kind are given back. `memory` must stay valid (a static).
void use_host_memory(const HostMemory* memory);
/// What the pool holds: blocks in use and cached (for tests and `gridspan info`).
struct PoolStats {
  std::size_t in_use_bytes = 0, cached_bytes = 0;
  uint64_t allocations = 0, reuses = 0;
  const char* memory = "malloc";
};
PoolStats pool_stats();

class Bytes {
 public:
  Bytes() = default;
  /// Adopts a vector's bytes (implicit: message bodies are often built as vectors).
  Bytes(std::vector<unsigned char>&& v) noexcept;  // NOLINT(google-explicit-constructor)
  /// `size` bytes, uninitialised, with room to append `spare` more without moving: a pool
  /// block when large, else a vector.
  static Bytes uninitialized(std::size_t size, std::size_t spare = 0);
  /// The same, always a pool block (pinned when the pool's memory is), however small.
  static Bytes pooled(std::size_t size, std::size_t spare = 0);
  ~Bytes();
  Bytes(Bytes&& o) noexcept;
  Bytes& operator=(Bytes&& o) noexcept;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  unsigned char* data() { return block_ ? block_ : vec_.data(); }
  const unsigned char* data() const { return block_ ? block_ : vec_.data(); }
  std::size_t size() const { return block_ ? size_ : vec_.size(); }
  bool empty() const { return size() == 0; }
  const unsigned char* begin() const { return data(); }
  const unsigned char* end() const { return data() + size(); }
  /// Appends bytes (moving to a larger buffer only when there is no room).
  void append(const void* p, std::size_t n);
  /// Drops bytes from the end.
  void shrink(std::size_t n);
  /// True when the bytes live in pinned (page-locked) memory.
  bool pinned() const;

  friend bool operator==(const Bytes& a, const std::vector<unsigned char>& b);

 private:
  std::vector<unsigned char> vec_;
  unsigned char* block_ = nullptr;  // a pool block of capacity_ bytes, or null
  std::size_t size_ = 0, capacity_ = 0;
  const HostMemory* memory_ = nullptr;  // where the block came from
};

}  // namespace gridspan
