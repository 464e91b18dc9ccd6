// What pinned host memory costs to take on this machine, as gridspan's memory manager takes
// it for a chunk's host copy (cuMemHostAlloc, portable and mapped), by block size, alone
// and while a kernel runs; and the same bytes pinned after malloc (cuMemHostRegister).
// Out of core, a write-back that needs a new host block waits for this.
//
//   nvcc -O2 -std=c++17 -o pinned_alloc bench/memory/pinned_alloc.cu -lcuda && ./pinned_alloc
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  cuGetErrorString(r, &text);
  std::fprintf(stderr, "%s failed: %s\n", what, text ? text : "?");
  std::exit(1);
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

}  // namespace

int main() {
  cudaFree(nullptr);  // the primary context
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  host_alloc_ms(1 << 20, 2);  // warm-up
  std::printf("%10s %22s %26s %22s\n", "block", "cuMemHostAlloc [ms]", "... while a kernel runs",
              "cuMemHostRegister [ms]");
  for (std::size_t mib : {1, 16, 64, 256}) {
    const std::size_t bytes = mib << 20;
    const int n = mib >= 256 ? 2 : 4;
    const double alone = host_alloc_ms(bytes, n);
    spin<<<1, 1, 0, s>>>(static_cast<long long>(khz) * 1000);  // about a second
    const double busy = host_alloc_ms(bytes, n);
    cudaStreamSynchronize(s);
    const double reg = host_register_ms(bytes, n);
    std::printf("%7zu MiB %22.2f %26.2f %22.2f\n", mib, alone, busy, reg);
  }
  return 0;
}
