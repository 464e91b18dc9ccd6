// How much a kernel launch costs on this machine: a chain of launches of a one-line kernel
// on one stream, with and without an event recorded after each, and with a thread waiting
// on those events (as gridspan's completion threads do).
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "plain_kernel.cuh"
int main() {
  int n = 65536;
  float *x, *y;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&y, n * 4);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Hdr h{};
  Arg ax{x}, ay{y};
  const int L = 20000;
  auto t = [&](auto f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    cudaStreamSynchronize(s);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / L * 1e6;
  };
  for (int i = 0; i < 100; ++i) k<<<256, 256, 0, s>>>(h, n, ay, ax);
  cudaStreamSynchronize(s);
  std::printf("plain launches        %.2f us\n", t([&] {
                for (int i = 0; i < L; ++i) k<<<256, 256, 0, s>>>(h, n, ay, ax);
              }));
  std::vector<cudaEvent_t> ev(L);
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  std::printf("launch + event        %.2f us\n", t([&] {
                for (int i = 0; i < L; ++i) {
                  k<<<256, 256, 0, s>>>(h, n, ay, ax);
                  cudaEventRecord(ev[i], s);
                }
              }));
  std::mutex m;
  std::condition_variable cv;
  std::deque<int> q;
  bool stop = false;
  std::thread waiter([&] {
    while (true) {
      int i;
      {
        std::unique_lock l(m);
        cv.wait(l, [&] { return stop || !q.empty(); });
        if (q.empty()) return;
        i = q.front();
        q.pop_front();
      }
      cudaEventSynchronize(ev[i]);
    }
  });
  std::printf("launch + event + wait %.2f us\n", t([&] {
                for (int i = 0; i < L; ++i) {
                  k<<<256, 256, 0, s>>>(h, n, ay, ax);
                  cudaEventRecord(ev[i], s);
                  {
                    std::lock_guard l(m);
                    q.push_back(i);
                  }
                  cv.notify_one();
                }
              }));
  {
    std::lock_guard l(m);
    stop = true;
  }
  cv.notify_one();
  waiter.join();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < L / 4; ++i) {
    k<<<256, 256, 0, s>>>(h, n, ay, ax);
    cudaStreamSynchronize(s);
  }
  std::printf(
      "launch + synchronize  %.2f us\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (L / 4) * 1e6);
}
