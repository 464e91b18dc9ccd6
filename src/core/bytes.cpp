// Message bodies and the host buffer pool (bytes.hpp). The pool rounds blocks up to size
// classes (eight per power of two, so at most 12.5% is wasted), keeps freed blocks up to a
// bound, and gives the smallest cached block of a request's class or the next.
#include "core/bytes.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include <unistd.h>

namespace gridspan {

namespace {

constexpr std::size_t kPooledBytes = 64 << 10;  // smaller messages are plain vectors

void* malloc_allocate(std::size_t n) {
  return std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
}
void malloc_release(void* p, std::size_t) {
  std::free(p);
}
const HostMemory kMalloc{malloc_allocate, malloc_release, "malloc"};

std::size_t size_class(std::size_t n) {
  std::size_t pow = 1;
  while (pow < n) pow <<= 1;
  const std::size_t step = std::max<std::size_t>(pow / 8, 4096);
  return (n + step - 1) / step * step;
}

class Pool {
 public:
  Pool() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const std::size_t physical =
        pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : std::size_t(8) << 30;
    cache_limit_ = std::min<std::size_t>(physical / 16, std::size_t(8) << 30);
  }

  std::pair<unsigned char*, const HostMemory*> take(std::size_t capacity) {
    std::unique_lock lock(mutex_);
    auto it = cached_.lower_bound(capacity);
    if (it != cached_.end() && it->first <= capacity + capacity / 4) {
      unsigned char* p = it->second;
      cached_bytes_ -= it->first;
      cached_.erase(it);
      stats_.in_use_bytes += capacity;
      ++stats_.reuses;
      return {p, memory_};
    }
    const HostMemory* memory = memory_;
    lock.unlock();
    void* p = memory->allocate(capacity);
    if (!p && memory != &kMalloc) {  // no pinned memory left: ordinary memory still works
      memory = &kMalloc;
      p = kMalloc.allocate(capacity);
    }
    if (!p) throw std::bad_alloc();
    lock.lock();
    stats_.in_use_bytes += capacity;
    ++stats_.allocations;
    return {static_cast<unsigned char*>(p), memory};
  }

  void give(unsigned char* p, std::size_t capacity, const HostMemory* memory) {
    {
      std::lock_guard lock(mutex_);
      stats_.in_use_bytes -= capacity;
      if (memory == memory_ && cached_bytes_ + capacity <= cache_limit_) {
        cached_.emplace(capacity, p);
        cached_bytes_ += capacity;
        return;
      }
    }
    memory->release(p, capacity);
  }

  void use(const HostMemory* memory) {
    std::multimap<std::size_t, unsigned char*> old;
    const HostMemory* was;
    {
      std::lock_guard lock(mutex_);
      if (memory == memory_) return;
      was = memory_;
      memory_ = memory;
      old.swap(cached_);
      cached_bytes_ = 0;
    }
    for (auto& [capacity, p] : old) was->release(p, capacity);
  }

  PoolStats stats() {
    std::lock_guard lock(mutex_);
    PoolStats s = stats_;
    s.cached_bytes = cached_bytes_;
    s.memory = memory_->name;
    return s;
  }

 private:
  std::mutex mutex_;
  const HostMemory* memory_ = &kMalloc;
  std::multimap<std::size_t, unsigned char*> cached_;  // by capacity
  std::size_t cached_bytes_ = 0, cache_limit_ = 0;
  PoolStats stats_;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be released at exit
  return *p;
}

}  // namespace

void use_host_memory(const HostMemory* memory) {
  pool().use(memory ? memory : &kMalloc);
}

PoolStats pool_stats() {
  return pool().stats();
}

Bytes::Bytes(std::vector<unsigned char>&& v) noexcept : vec_(std::move(v)) {}

Bytes Bytes::uninitialized(std::size_t size, std::size_t spare) {
  if (size + spare >= kPooledBytes) return pooled(size, spare);
  Bytes b;
  b.vec_.reserve(size + spare);
  b.vec_.resize(size);
  return b;
}

Bytes Bytes::pooled(std::size_t size, std::size_t spare) {
  Bytes b;
  b.capacity_ = size_class(std::max<std::size_t>(size + spare, 1));
  auto [p, memory] = pool().take(b.capacity_);
  b.block_ = p;
  b.memory_ = memory;
  b.size_ = size;
  return b;
}

Bytes::~Bytes() {
  if (block_) pool().give(block_, capacity_, memory_);
}

Bytes::Bytes(Bytes&& o) noexcept
    : vec_(std::move(o.vec_)),
      block_(o.block_),
      size_(o.size_),
      capacity_(o.capacity_),
      memory_(o.memory_) {
  o.block_ = nullptr;
  o.size_ = o.capacity_ = 0;
}

Bytes& Bytes::operator=(Bytes&& o) noexcept {
  if (this != &o) {
    if (block_) pool().give(block_, capacity_, memory_);
    vec_ = std::move(o.vec_);
    block_ = o.block_;
    size_ = o.size_;
    capacity_ = o.capacity_;
    memory_ = o.memory_;
    o.block_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  return *this;
}

void Bytes::append(const void* p, std::size_t n) {
  if (!block_) {
    const auto* c = static_cast<const unsigned char*>(p);
    vec_.insert(vec_.end(), c, c + n);
    return;
  }
  if (size_ + n > capacity_) {
    Bytes bigger = uninitialized(size_, n);
    std::memcpy(bigger.data(), block_, size_);
    *this = std::move(bigger);
  }
  std::memcpy(block_ + size_, p, n);
  size_ += n;
}

void Bytes::shrink(std::size_t n) {
  if (block_)
    size_ -= std::min(n, size_);
  else
    vec_.resize(vec_.size() - std::min(n, vec_.size()));
}

bool Bytes::pinned() const {
  return block_ && memory_ != &kMalloc;
}

bool operator==(const Bytes& a, const std::vector<unsigned char>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace gridspan
