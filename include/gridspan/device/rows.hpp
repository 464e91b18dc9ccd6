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
/// finite scale > 0 and |x| <= 127 scale; `inv` is 1 / scale. When the scale is normal
/// (`fast`), the product x * inv and the rounded quotient both lie within 127 * 2^-23 of
/// x / scale (two roundings of 2^-24 each; 127 * 2^-52 in double), 2.3e-5 apart at most, so
/// rounding the product to the nearest integer gives the quotient's answer except within
/// 2^-14 (6.1e-5; 2^-40 in double) of a half, where it divides instead: the answers of
/// dividing each element, bit for bit, without the division's many instructions.
template <class A>
GRIDSPAN_HD A near_half() {
  return sizeof(A) == 4 ? A(0.5 - 1.0 / 16384) : A(0.5 - 1.0 / 1099511627776.0);
}
/// 1.5 * 2^(the mantissa's bits): q + this, for |q| < 2^22, is q rounded to an integer k and
/// stored as this + k, so the low byte of its bits is k as an int8: the rounding and the
/// conversion in one addition (a GPU converts four times slower than it adds).
template <class A>
GRIDSPAN_HD A integer_shift() {
  return sizeof(A) == 4 ? A(12582912.0) : A(6755399441055744.0);
}
/// Sets `t` to x * inv + integer_shift() and says whether its integer is the quotient's
/// (when the scale is normal).
template <class A>
GRIDSPAN_HD bool product_rounds(A x, A inv, A& t) {
  const A q = x * inv;
  t = q + integer_shift<A>();
  return ew::abs(q - (t - integer_shift<A>())) < near_half<A>();
}
template <class A>
GRIDSPAN_HD signed char low_byte(A t) {
  return static_cast<signed char>(abs_bits(t) & 0xff);  // t > 0: its bits as they are
}
template <class A>
GRIDSPAN_HD signed char quantize(A x, A scale, A inv, bool fast) {
  A t;
  if (product_rounds(x, inv, t) && fast) return low_byte(t);
  return static_cast<signed char>(static_cast<int>(ew::round(x / scale)));
}
/// quantize over a thread's V neighbouring elements, x(i) the i-th: the products rounded,
/// and only where one of them lies near a half the V elements through quantize (one branch
/// for the vector, not one an element); zeros for a `zero` row (scale zero, infinite or
/// NaN). The products are formed again for the stores rather than kept, which keeps fewer
/// registers live.
template <int V, class X, class A>
GRIDSPAN_HD void quantize_group(const X& x, A scale, A inv, bool fast, bool zero,
                                signed char* out) {
  if (zero) {
    for (int i = 0; i < V; ++i) out[i] = 0;
    return;
  }
  bool rounds = fast;
  A t;
  for (int i = 0; i < V; ++i) rounds &= product_rounds(x(i), inv, t);
  if (rounds) {
    for (int i = 0; i < V; ++i) product_rounds(x(i), inv, t), out[i] = low_byte(t);
    return;
  }
  for (int i = 0; i < V; ++i) out[i] = quantize(x(i), scale, inv, fast);
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
