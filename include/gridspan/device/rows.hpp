// What the array library's row kernels (softmax, layer_norm, rms_norm, quantize_symmetric)
// call: one block per row, whose threads combine their partial sums or maxima into the
// row's, which every thread then has. The order is fixed (a warp's shuffles, then the warps
// in turn), so a row answers the same run to run. On the cpu backend a block is usually one
// thread, which has the row's total already. Compiles as CUDA and as plain C++.
#pragma once

#include "elementwise.hpp"
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

/// |x|'s bits as an unsigned integer: ordered as |x| is, NaN above infinity, so that their
/// maximum is max|x| with NaN kept (one integer maximum an element); from_bits undoes it.
GRIDSPAN_HD unsigned abs_bits(float x) {
#ifdef __CUDACC__
  return __float_as_uint(x) & 0x7fffffffu;
#else
  unsigned u;
  memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffu;
#endif
}
GRIDSPAN_HD unsigned long long abs_bits(double x) {
#ifdef __CUDACC__
  return static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7fffffffffffffffull;
#else
  unsigned long long u;
  memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffffffffffull;
#endif
}
GRIDSPAN_HD float from_bits(unsigned u) {
#ifdef __CUDACC__
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}
GRIDSPAN_HD double from_bits(unsigned long long u) {
#ifdef __CUDACC__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// The smallest normal number.
GRIDSPAN_HD float normal_min(float) {
  return 1.17549435082228750797e-38f;
}
GRIDSPAN_HD double normal_min(double) {
  return 2.22507385850720138309e-308;
}

/// quantize_symmetric's element: x / scale rounded half away from zero, as an int8, for a
/// finite scale > 0 and |x| <= 127 scale; `inv` is 1 / scale. The product x * inv is within
/// 2e-5 of the quotient (float; 5e-14 in double) when the scale is normal (`fast`), so
/// rounding the product to the nearest integer gives the quotient's answer except near a
/// half, where it divides instead: the answers of dividing each element, bit for bit,
/// without the division's many instructions.
template <class A>
GRIDSPAN_HD A near_half() {
  return sizeof(A) == 4 ? A(0.5 - 1.0 / 4096) : A(0.5 - 1.0 / 1099511627776.0);
}
template <class A>
GRIDSPAN_HD signed char quantize(A x, A scale, A inv, bool fast) {
  const A q = x * inv, r = ew::rint(q);
  const A k = fast && ew::abs(q - r) < near_half<A>() ? r : ew::round(x / scale);
  return static_cast<signed char>(static_cast<int>(k));
}
/// quantize over a thread's V neighbouring elements: the products rounded, and only where
/// one of them lies near a half the V elements through quantize (one branch for the
/// vector, not one an element); zeros for a `zero` row (scale zero, infinite or NaN).
template <int V, class A>
GRIDSPAN_HD void quantize_group(const A* x, A scale, A inv, bool fast, bool zero,
                                signed char* out) {
  if (zero) {
    for (int i = 0; i < V; ++i) out[i] = 0;
    return;
  }
  A k[V];
  bool divide = !fast;
  for (int i = 0; i < V; ++i) {
    const A q = x[i] * inv;
    k[i] = ew::rint(q);
    divide |= !(ew::abs(q - k[i]) < near_half<A>());
  }
  if (divide) {
    for (int i = 0; i < V; ++i) out[i] = quantize(x[i], scale, inv, fast);
    return;
  }
  for (int i = 0; i < V; ++i) out[i] = static_cast<signed char>(static_cast<int>(k[i]));
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
