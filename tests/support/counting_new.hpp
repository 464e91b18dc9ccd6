// Replaces the global operator new with one that counts: include it in exactly one source
// file of a test binary (it defines the replacement). `allocations()` counts every thread's;
// `AllocationCount` counts the calling thread's between its construction and `count()`.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace gridspan::test {

inline std::atomic<long> g_all_allocations{0};
inline thread_local long t_allocations = 0;

inline long allocations() {
  return g_all_allocations.load(std::memory_order_relaxed);
}

class AllocationCount {
 public:
  AllocationCount() : start_(t_allocations) {}
  long count() const { return t_allocations - start_; }

 private:
  long start_;
};

}  // namespace gridspan::test

void* operator new(std::size_t n) {
  gridspan::test::g_all_allocations.fetch_add(1, std::memory_order_relaxed);
  ++gridspan::test::t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
