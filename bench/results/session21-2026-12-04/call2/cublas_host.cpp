// Host time of one cublasGemmEx ((8192 x 768) x (768 x 3072), bfloat16, float32 accumulation)
// as the GPT-2 block's first product calls it, in several ways: the same stream every call;
// two streams in turn with cublasSetStream before each (gridspan's lanes); the same with
// cublasSetWorkspace after it (torch's way); and "cold": after a synchronize and a pause, as
// in a block called once at a time. Medians of 200 calls, microseconds.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#define CHECK(x) \
  do { \
    if (auto e_ = (x); e_ != 0) { std::printf("%s failed: %d\n", #x, int(e_)); std::exit(1); } \
  } while (0)

using Clock = std::chrono::steady_clock;

int main() {
  const int M = 8192, K = 768, N = 3072;
  void *a, *b, *c, *ws[2];
  CHECK(cudaMalloc(&a, size_t(M) * K * 2));
  CHECK(cudaMalloc(&b, size_t(K) * N * 2));
  CHECK(cudaMalloc(&c, size_t(M) * N * 2));
  CHECK(cudaMemset(a, 0x3c, size_t(M) * K * 2));
  CHECK(cudaMemset(b, 0x3b, size_t(K) * N * 2));
  const size_t wsize = 32u << 20;
  for (auto& w : ws) CHECK(cudaMalloc(&w, wsize));
  cudaStream_t s[2];
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  const float one = 1, zero = 0;
  auto gemm = [&] {
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b, CUDA_R_16BF, N, a,
                       CUDA_R_16BF, K, &zero, c, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT));
  };
  auto run = [&](const char* name, bool alternate, bool workspace, bool cold) {
    std::vector<double> us;
    for (int i = 0; i < 220; ++i) {
      if (cold || i % 50 == 0) {
        CHECK(cudaDeviceSynchronize());
        if (cold) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
      const int k = alternate ? i % 2 : 0;
      const auto t = Clock::now();
      CHECK(cublasSetStream(h, s[k]));
      if (workspace) CHECK(cublasSetWorkspace(h, ws[k], wsize));
      gemm();
      const double d = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
      if (i >= 20) us.push_back(d);
    }
    std::sort(us.begin(), us.end());
    std::printf("%-28s median %6.1f us  p10 %6.1f  p90 %6.1f\n", name, us[us.size() / 2],
                us[us.size() / 10], us[us.size() * 9 / 10]);
  };
  for (int round = 0; round < 2; ++round) {
    run("same stream", false, false, false);
    run("two streams", true, false, false);
    run("two streams + workspace", true, true, false);
    run("same stream + workspace", false, true, false);
    run("cold", false, false, true);
    run("cold + workspace", false, true, true);
    run("cold two streams", true, false, true);
    run("cold two streams + workspace", true, true, true);
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
