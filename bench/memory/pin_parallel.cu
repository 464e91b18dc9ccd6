// How fast pinned host memory can be had when several threads take it at once, as the
// memory manager's pinning ahead does for an out-of-core device: 1 GiB in 64 MiB blocks,
// each block mapped (huge-page aligned, MADV_HUGEPAGE), populated (the kernel zeroes its
// pages) and registered with cuMemHostRegister. Figures in GB/s, over the whole GiB:
//   - populate alone, on T threads (each its own blocks);
//   - register alone (pages already populated), on P threads;
//   - both, on P threads each doing whole blocks;
//   - memset of pages already populated (the zeroing's share against the faults');
//   - one 1 GiB slab populated on 16 threads and registered by one call;
// and an empty kernel's launch while 8 threads pin (does registering stall other threads?).
//
//   nvcc -O2 -std=c++17 -o pin_parallel bench/memory/pin_parallel.cu -lcuda && ./pin_parallel
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"

namespace {

constexpr std::size_t kHuge = std::size_t(2) << 20;
constexpr std::size_t kBlock = std::size_t(64) << 20;
constexpr std::size_t kTotal = std::size_t(1) << 30;
constexpr int kBlocks = kTotal / kBlock;

long anon_huge_kib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long value = 0;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "AnonHugePages:") return value;
  return -1;
}

// A huge-page-aligned mapping of `bytes`, advised for huge pages, not yet touched.
void* map_aligned(std::size_t bytes) {
  void* raw =
      mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) std::exit(2);
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) munmap(raw, aligned - start);
  if (const std::size_t tail = start + kHuge - aligned)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void populate(void* p, std::size_t bytes) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
    for (std::size_t at = 0; at < bytes; at += 4096) static_cast<volatile char*>(p)[at] = 0;
  }
}

void reg(void* p, std::size_t bytes) {
  check(cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
        "cuMemHostRegister");
}

// Runs job(k) for k in [0, kBlocks) on `threads` threads, each taking the next block.
CUcontext g_ctx = nullptr;  // the primary context, current on every pinning thread

template <class Job>
double on_threads(int threads, Job job) {
  std::atomic<int> next{0};
  const double t0 = now_ms();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
      for (int k; (k = next.fetch_add(1)) < kBlocks;) job(k);
    });
  for (auto& t : pool) t.join();
  return now_ms() - t0;
}

double gbps(double ms) {
  return kTotal / ms / 1e6;
}

void release(std::vector<void*>& blocks, bool registered) {
  for (void*& p : blocks) {
    if (!p) continue;
    if (registered) check(cuMemHostUnregister(p), "cuMemHostUnregister");
    munmap(p, kBlock);
    p = nullptr;
  }
}

__global__ void nothing() {}

}  // namespace

int main() {
  cudaFree(nullptr);  // the primary context
  check(cuCtxGetCurrent(&g_ctx), "cuCtxGetCurrent");
  std::vector<void*> blocks(kBlocks, nullptr);
  std::printf("AnonHugePages before: %ld KiB\n", anon_huge_kib());

  std::printf("\n%-44s %8s %10s\n", "step (1 GiB in 64 MiB blocks)", "threads", "GB/s");
  for (int t : {1, 2, 4, 8, 16}) {
    for (auto& p : blocks) p = map_aligned(kBlock);
    const double ms = on_threads(t, [&](int k) { populate(blocks[k], kBlock); });
    if (t == 16) std::printf("AnonHugePages populated: %ld KiB\n", anon_huge_kib());
    std::printf("%-44s %8d %10.1f\n", "populate", t, gbps(ms));
    const double wms = on_threads(t, [&](int k) { std::memset(blocks[k], 1, kBlock); });
    std::printf("%-44s %8d %10.1f\n", "memset of the populated pages", t, gbps(wms));
    const double rms = on_threads(t, [&](int k) { reg(blocks[k], kBlock); });
    std::printf("%-44s %8d %10.1f\n", "register (populated)", t, gbps(rms));
    release(blocks, true);
  }
  for (int t : {1, 2, 4, 8, 16}) {
    const double ms = on_threads(t, [&](int k) {
      blocks[k] = map_aligned(kBlock);
      populate(blocks[k], kBlock);
      reg(blocks[k], kBlock);
    });
    std::printf("%-44s %8d %10.1f\n", "map + populate + register, whole blocks", t, gbps(ms));
    release(blocks, true);
  }
  {
    const double t0 = now_ms();
    void* slab = map_aligned(kTotal);
    std::vector<std::thread> pool;
    for (int t = 0; t < 16; ++t)
      pool.emplace_back([&, t] { populate(static_cast<char*>(slab) + t * kBlock, kBlock); });
    for (auto& t : pool) t.join();
    const double t1 = now_ms();
    reg(slab, kTotal);
    const double t2 = now_ms();
    std::printf("%-44s %8d %10.1f  (populate %.1f ms, register %.1f ms)\n",
                "one 1 GiB slab, populate then register", 16, gbps(t2 - t0), t1 - t0, t2 - t1);
    check(cuMemHostUnregister(slab), "cuMemHostUnregister");
    munmap(slab, kTotal);
  }

  // An empty kernel's launch while 8 threads pin blocks, against none pinning.
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto launches_us = [&] {
    const int n = 2000;
    const double t0 = now_ms();
    for (int i = 0; i < n; ++i) nothing<<<1, 32, 0, s>>>();
    cudaStreamSynchronize(s);
    return (now_ms() - t0) * 1000 / n;
  };
  launches_us();
  const double idle = launches_us();
  double beside = 0;
  std::thread pinning([&] {
    on_threads(8, [&](int k) {
      blocks[k] = map_aligned(kBlock);
      populate(blocks[k], kBlock);
      reg(blocks[k], kBlock);
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  beside = launches_us();
  pinning.join();
  release(blocks, true);
  std::printf("\nan empty kernel's launch [us]: %.2f alone, %.2f while 8 threads pin\n", idle,
              beside);
  return 0;
}
