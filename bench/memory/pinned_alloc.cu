// What pinned host memory costs to take on this machine, as gridspan's memory manager takes
// it for a chunk's host copy (cuMemHostAlloc, portable and mapped), by block size, alone
// and while a kernel runs; and the same bytes pinned after malloc (cuMemHostRegister).
// Out of core, a write-back that needs a new host block waits for this.
//
//   nvcc -O2 -std=c++17 -o pinned_alloc bench/memory/pinned_alloc.cu -lcuda && ./pinned_alloc
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common.cuh"

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Milliseconds per allocation of `bytes`, over `n` allocations held at once, then freed.
double host_alloc_ms(std::size_t bytes, int n) {
  std::vector<void*> blocks(n);
  const double t0 = now_ms();
  for (auto& p : blocks)
    check(cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
          "cuMemHostAlloc");
  const double t = (now_ms() - t0) / n;
  for (void* p : blocks) check(cuMemFreeHost(p), "cuMemFreeHost");
  return t;
}

double host_register_ms(std::size_t bytes, int n) {
  std::vector<void*> blocks(n);
  for (auto& p : blocks) {
    p = std::aligned_alloc(4096, bytes);
    std::memset(p, 1, bytes);  // touched, as a host copy would be
  }
  const double t0 = now_ms();
  for (void* p : blocks)
    check(cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "cuMemHostRegister");
  const double t = (now_ms() - t0) / n;
  for (void* p : blocks) {
    check(cuMemHostUnregister(p), "cuMemHostUnregister");
    std::free(p);
  }
  return t;
}

// Milliseconds per block of `bytes` from mmap with MAP_POPULATE (the kernel zeroes the
// pages), optionally asking for huge pages first, then cuMemHostRegister: everything it
// takes to get pinned memory that way.
double mmap_register_ms(std::size_t bytes, int n, bool huge) {
  std::vector<void*> blocks(n);
  const double t0 = now_ms();
  for (auto& p : blocks) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::exit(1);
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    madvise(p, bytes, MADV_POPULATE_WRITE);
    check(cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "cuMemHostRegister");
  }
  const double t = (now_ms() - t0) / n;
  for (void* p : blocks) {
    check(cuMemHostUnregister(p), "cuMemHostUnregister");
    munmap(p, bytes);
  }
  return t;
}

__global__ void nothing() {}

// Microseconds per launch of an empty kernel on `s` (20000 of them), while another thread
// takes and frees pinned blocks of 64 MiB (`alloc` 1: cuMemHostAlloc, 2: mmap + register)
// or does nothing (0): whether pinning holds up the driver calls of other threads.
double launch_us_beside(cudaStream_t s, int alloc) {
  bool stop = false;
  std::thread other([&] {
    cudaFree(nullptr);
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
      if (alloc == 1) host_alloc_ms(64 << 20, 1);
      if (alloc == 2) mmap_register_ms(64 << 20, 1, false);
      if (alloc == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int n = 20000;
  const double t0 = now_ms();
  for (int i = 0; i < n; ++i) nothing<<<1, 32, 0, s>>>();
  cudaStreamSynchronize(s);
  const double t = (now_ms() - t0) * 1000 / n;
  __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
  other.join();
  return t;
}

}  // namespace

int main() {
  cudaFree(nullptr);  // the primary context
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  host_alloc_ms(1 << 20, 2);  // warm-up
  std::printf("%10s %22s %26s %22s %26s\n", "block", "cuMemHostAlloc [ms]",
              "... while a kernel runs", "cuMemHostRegister [ms]", "... while a kernel runs");
  for (std::size_t mib : {1, 16, 64, 256}) {
    const std::size_t bytes = mib << 20;
    const int n = mib >= 256 ? 2 : 4;
    const double alone = host_alloc_ms(bytes, n);
    spin<<<1, 1, 0, s>>>(static_cast<long long>(khz) * 1000);  // about a second
    const double busy = host_alloc_ms(bytes, n);
    cudaStreamSynchronize(s);
    const double reg = host_register_ms(bytes, n);
    spin<<<1, 1, 0, s>>>(static_cast<long long>(khz) * 1000);
    const double reg_busy = host_register_ms(bytes, n);
    cudaStreamSynchronize(s);
    std::printf("%7zu MiB %22.2f %26.2f %22.2f %26.2f\n", mib, alone, busy, reg, reg_busy);
  }
  std::printf("\n%10s %30s %30s\n", "block", "mmap populate + register [ms]",
              "... with MADV_HUGEPAGE [ms]");
  for (std::size_t mib : {1, 16, 64, 256}) {
    const std::size_t bytes = mib << 20;
    const int n = mib >= 256 ? 2 : 4;
    std::printf("%7zu MiB %30.2f %30.2f\n", mib, mmap_register_ms(bytes, n, false),
                mmap_register_ms(bytes, n, true));
  }
  std::printf("\nan empty kernel's launch [us], another thread idle: %.2f, taking 64 MiB "
              "blocks with cuMemHostAlloc: %.2f, with mmap + register: %.2f\n",
              launch_us_beside(s, 0), launch_us_beside(s, 1), launch_us_beside(s, 2));
  return 0;
}
