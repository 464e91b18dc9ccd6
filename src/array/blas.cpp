// The CPU BLAS and cuBLAS, each opened once with dlopen and called through the few entry
// points gemm needs (their ABI's enumerator values are written out here: no header of
// either library is needed to build).
#include "array/blas.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "gridspan/core/half.hpp"

namespace gridspan::array::blas {

namespace {

// ---- the CPU BLAS (CBLAS) -----------------------------------------------------------------
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*,
                         int, double, double*, int);

struct Cblas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  std::string error;  // why none could be loaded
};

const Cblas& cblas() {
  static const Cblas lib = [] {
    Cblas c;
    const char* names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3", "libcblas.so.3"};
    for (const char* name : names) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      c.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      c.dgemm = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
      if (c.sgemm && c.dgemm) {
        // One thread per call: each cpu device calls it on its own executor thread.
        using SetThreads = void (*)(int);
        if (auto set = reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"))) set(1);
        return c;
      }
      dlclose(h);
    }
    c.error = fmt::format(
        "matrix products on cpu devices need a CBLAS library and none could be loaded (tried "
        "libopenblas.so.0, libblas.so.3, libcblas.so.3): install Debian's libopenblas0 "
        "(apt-get install libopenblas0)");
    return c;
  }();
  if (!lib.sgemm) throw Error(lib.error);
  return lib;
}

// A stored rows x cols matrix (row stride ld) of 16-bit floats as dense float32.
template <class H>
std::vector<float> widen(const void* p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  const H* h = static_cast<const H*>(p);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(h[i * ld + j]);
  return out;
}

// 16-bit A and B widened, C computed in float32 and rounded once.
template <class H>
void host_gemm_16(const Gemm& g) {
  const auto a = widen<H>(g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda);
  const auto b = widen<H>(g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb);
  std::vector<float> c = g.beta != 0 ? widen<H>(g.c, g.m, g.n, g.ldc)
                                     : std::vector<float>(static_cast<std::size_t>(g.m * g.n));
  const int lda = static_cast<int>(g.trans_a ? g.m : g.k),
            ldb = static_cast<int>(g.trans_b ? g.k : g.n);
  cblas().sgemm(kRowMajor, g.trans_a ? kTrans : kNoTrans, g.trans_b ? kTrans : kNoTrans,
                static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k),
                static_cast<float>(g.alpha), a.data(), lda, b.data(), ldb,
                static_cast<float>(g.beta), c.data(), static_cast<int>(g.n));
  H* out = static_cast<H*>(g.c);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) out[i * g.ldc + j] = H(c[i * g.n + j]);
}

// ---- cuBLAS ---------------------------------------------------------------------------------
constexpr int kOpN = 0, kOpT = 1;
constexpr int kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;
constexpr int kCompute32F = 68, kCompute32FFastTf32 = 77, kCompute64F = 70;
constexpr int kGemmDefault = -1;
using Handle = void*;
using CreateFn = int (*)(Handle*);
using SetStreamFn = int (*)(Handle, void*);
using GemmExFn = int (*)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);

struct Cublas {
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  GemmExFn gemm_ex = nullptr;
  std::string error;
};

const Cublas& cublas() {
  static const Cublas lib = [] {
    Cublas c;
    const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    for (const char* name : names) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      c.create = reinterpret_cast<CreateFn>(dlsym(h, "cublasCreate_v2"));
      c.set_stream = reinterpret_cast<SetStreamFn>(dlsym(h, "cublasSetStream_v2"));
      c.gemm_ex = reinterpret_cast<GemmExFn>(dlsym(h, "cublasGemmEx"));
      if (c.create && c.set_stream && c.gemm_ex) return c;
      dlclose(h);
    }
    c.error =
        "matrix products on GPUs need cuBLAS and it could not be loaded (tried "
        "libcublas.so.13, .12 and libcublas.so): put the CUDA toolkit's lib64 on the "
        "library path (LD_LIBRARY_PATH)";
    return c;
  }();
  if (!lib.gemm_ex) throw Error(lib.error);
  return lib;
}

int cuda_type(DType d) {
  switch (d) {
    case DType::f16:
      return kR16F;
    case DType::bf16:
      return kR16BF;
    case DType::f64:
      return kR64F;
    default:
      return kR32F;
  }
}

}  // namespace

// A handle per device, made in its context the first time; never destroyed: by the time its
// owner goes, the context the handle lives in may be gone (cuBLAS then leaks a few host bytes).
void* CublasHandles::get(int device) {
  std::lock_guard lock(mutex_);
  auto it = handles_.find(device);
  if (it != handles_.end()) return it->second;
  Handle h = nullptr;
  if (int s = cublas().create(&h); s != 0)
    throw Error(fmt::format("cuBLAS could not make a handle for GPU {} (status {})", device, s));
  return handles_.emplace(device, h).first->second;
}

void host_gemm(const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  const int ta = g.trans_a ? kTrans : kNoTrans, tb = g.trans_b ? kTrans : kNoTrans;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  switch (g.dtype) {
    case DType::f32:
      cblas().sgemm(kRowMajor, ta, tb, m, n, k, static_cast<float>(g.alpha),
                    static_cast<const float*>(g.a), static_cast<int>(g.lda),
                    static_cast<const float*>(g.b), static_cast<int>(g.ldb),
                    static_cast<float>(g.beta), static_cast<float*>(g.c), static_cast<int>(g.ldc));
      return;
    case DType::f64:
      cblas().dgemm(kRowMajor, ta, tb, m, n, k, g.alpha, static_cast<const double*>(g.a),
                    static_cast<int>(g.lda), static_cast<const double*>(g.b),
                    static_cast<int>(g.ldb), g.beta, static_cast<double*>(g.c),
                    static_cast<int>(g.ldc));
      return;
    case DType::f16:
      return host_gemm_16<float16>(g);
    case DType::bf16:
      return host_gemm_16<bfloat16>(g);
    default:
      throw Error(fmt::format("gemm of {}: BLAS multiplies floating-point matrices only",
                              dtype_name(g.dtype)));
  }
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first.
void gpu_gemm(const Gemm& g, CublasHandles& handles, int device, void* stream, bool allow_tf32) {
  if (g.m == 0 || g.n == 0) return;
  const Cublas& lib = cublas();
  Handle h = handles.get(device);
  lib.set_stream(h, stream);
  const bool wide = g.dtype == DType::f64;
  const double alpha64 = g.alpha, beta64 = g.beta;
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const void* alpha = wide ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = wide ? static_cast<const void*>(&beta64) : &beta32;
  const int compute = wide                                    ? kCompute64F
                      : (g.dtype == DType::f32 && allow_tf32) ? kCompute32FFastTf32
                                                              : kCompute32F;
  const int t = cuda_type(g.dtype);
  const int s = lib.gemm_ex(h, g.trans_b ? kOpT : kOpN, g.trans_a ? kOpT : kOpN,
                            static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k),
                            alpha, g.b, t, static_cast<int>(g.ldb), g.a, t, static_cast<int>(g.lda),
                            beta, g.c, t, static_cast<int>(g.ldc), compute, kGemmDefault);
  if (s != 0)
    throw Error(
        fmt::format("cuBLAS's gemm failed on GPU {} (status {}) for ({} x {}) x ({} x {}) "
                    "in {}",
                    device, s, g.m, g.k, g.k, g.n, dtype_name(g.dtype)));
}

}  // namespace gridspan::array::blas
