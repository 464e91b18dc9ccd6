// Host cost of enqueueing a launch, apart from the GPU's time: a burst of launches well
// below the queue's depth, timed before the synchronize; the same with 4 launches per step
// on 2 streams; and a graph of those 4 launched as one.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>

#include "plain_kernel.cuh"
using C = std::chrono::steady_clock;
double us(C::time_point a, C::time_point b, int n) {
  return std::chrono::duration<double>(b - a).count() / n * 1e6;
}
int main() {
  int n = 65536;
  float *x, *y;
  cudaMalloc(&x, 4 * n * 4);
  cudaMalloc(&y, 4 * n * 4);
  cudaStream_t s[2];
  for (auto& t : s) cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking);
  Hdr h{};
  Arg ax[4], ay[4];
  for (int c = 0; c < 4; ++c) {
    ax[c] = {x + c * n};
    ay[c] = {y + c * n};
  }
  for (int i = 0; i < 100; ++i) k<<<256, 256, 0, s[0]>>>(h, n, ay[0], ax[0]);
  cudaDeviceSynchronize();
  for (int burst : {200, 20000}) {
    auto t0 = C::now();
    for (int i = 0; i < burst; ++i) k<<<256, 256, 0, s[0]>>>(h, n, ay[0], ax[0]);
    auto t1 = C::now();
    cudaDeviceSynchronize();
    auto t2 = C::now();
    std::printf("1 launch/step, %5d steps: enqueue %.2f us/step, all %.2f us/step\n", burst,
                us(t0, t1, burst), us(t0, t2, burst));
    t0 = C::now();
    for (int i = 0; i < burst; ++i)
      for (int c = 0; c < 4; ++c) k<<<64, 256, 0, s[c % 2]>>>(h, n / 4, ay[c], ax[c]);
    t1 = C::now();
    cudaDeviceSynchronize();
    t2 = C::now();
    std::printf("4 launches/step on 2 streams: enqueue %.2f us/step, all %.2f us/step\n",
                us(t0, t1, burst), us(t0, t2, burst));
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s[0], cudaStreamCaptureModeGlobal);
  for (int c = 0; c < 4; ++c) k<<<64, 256, 0, s[0]>>>(h, n / 4, ay[c], ax[c]);
  cudaStreamEndCapture(s[0], &g);
  cudaGraphInstantiate(&ge, g, 0);
  for (int burst : {200, 20000}) {
    auto t0 = C::now();
    for (int i = 0; i < burst; ++i) cudaGraphLaunch(ge, s[0]);
    auto t1 = C::now();
    cudaDeviceSynchronize();
    auto t2 = C::now();
    std::printf("graph of 4, %5d steps: enqueue %.2f us/step, all %.2f us/step\n", burst,
                us(t0, t1, burst), us(t0, t2, burst));
  }
}
