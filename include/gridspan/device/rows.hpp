// What the array library's row kernels (softmax, layer_norm, rms_norm, quantize_symmetric)
// call: one block per row, whose threads combine their partial sums or maxima into the
// row's, which every thread then has. The order is fixed (a warp's shuffles, then the warps
// in turn), so a row answers the same run to run. On the cpu backend a block is usually one
// thread, which has the row's total already. Compiles as CUDA and as plain C++.
#pragma once

#include "views.hpp"

namespace gridspan {
namespace rows {

struct Sum {
  template <class T>
  GRIDSPAN_HD T operator()(T a, T b) const {
    return a + b;
  }
};
/// The larger, NaN if either is (NumPy's max).
struct Max {
  template <class T>
  GRIDSPAN_HD T operator()(T a, T b) const {
    return a != a ? a : (b > a || b != b ? b : a);
  }
};

GRIDSPAN_HD float infinity(float) {
#ifdef __CUDACC__
  return __int_as_float(0x7f800000);
#else
  return __builtin_inff();
#endif
}
GRIDSPAN_HD double infinity(double) {
#ifdef __CUDACC__
  return __longlong_as_double(0x7ff0000000000000LL);
#else
  return __builtin_inf();
#endif
}

#ifdef __CUDACC__
/// `v` combined over the block (blockDim.x a multiple of 32, at most 1024), for every
/// thread. Every thread of the block calls it, the same number of times.
template <class T, class Op>
__device__ T block_all(T v, Op op) {
  __shared__ T warps[32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = (blockDim.x + 31) / 32;
  __syncthreads();  // the slots' last readers are done
  if (lane == 0) warps[w] = v;
  __syncthreads();
  v = warps[0];
  for (unsigned k = 1; k < nw; ++k) v = op(v, warps[k]);
  return v;
}
#else
/// A one-thread block has its total; a wider one (the GPU's geometry, run on fibers: the
/// kernel then calls __syncthreads itself) combines its threads' in thread order.
template <class T, class Op>
T block_all(T v, Op op) {
  if (blockDim.x == 1) return v;
  __shared__ T slots[1024];
  __syncthreads();
  slots[threadIdx.x] = v;
  __syncthreads();
  v = slots[0];
  for (unsigned k = 1; k < blockDim.x; ++k) v = op(v, slots[k]);
  return v;
}
#endif

}  // namespace rows
}  // namespace gridspan
