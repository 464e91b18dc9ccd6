// BLAS for the array library's native tasks, loaded at run time as the GPU driver is (so a
// build without either still runs): a CPU BLAS through its CBLAS interface (OpenBLAS, else
// the reference BLAS) for cpu devices, and cuBLAS for GPUs.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "gridspan/core/dtype.hpp"

namespace gridspan::array::blas {

/// Row-major C (m x n) = alpha op(A) op(B) + beta C, op(X) = X or its transpose; `lda` etc.
/// are row strides in elements. A, B and C have one dtype.
struct Gemm {
  DType dtype = DType::f32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
};

/// On the calling thread, with host memory: float32 and float64 by the CPU BLAS's sgemm and
/// dgemm (one thread each: the cpu devices are the parallelism); 16-bit floats through
/// float32 copies, rounded once. Throws gs::Error when no CBLAS library can be loaded.
void host_gemm(const Gemm& g);

/// cuBLAS handles by device index, for the contexts of one gridspan::Context's GPUs.
class CublasHandles {
 public:
  void* get(int device);  // made on first use, in the current context

 private:
  std::mutex mutex_;
  std::unordered_map<int, void*> handles_;
};

/// Queued on `stream` of the GPU whose context is current (`device`: its index), with GPU
/// memory: 16-bit floats on tensor cores accumulating in float32, float32 without TF32
/// unless `allow_tf32`. Throws gs::Error when cuBLAS cannot be loaded.
void gpu_gemm(const Gemm& g, CublasHandles& handles, int device, void* stream, bool allow_tf32);

}  // namespace gridspan::array::blas
