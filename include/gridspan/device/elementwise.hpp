// Element-wise math with NumPy's semantics, for the kernels the array library generates:
// gridspan::ew::exp(x), ew::remainder(a, b), ew::maximum(a, b) ... Overloads for float and
// double (16-bit floats are converted to float by the caller) and, where NumPy defines the
// operation, for every integer type and bool. Both operands of a binary function have one
// type: the caller promotes (ew::pow(int, long) does not compile).
//
// Compiles under NVRTC (no standard headers: CUDA's built-in math functions only), nvcc and
// the cpu backend's g++ (<math.h>). The float functions call the C library's (or CUDA's)
// function of the same name, so their accuracy is that library's: on the cpu backend the
// results are glibc's; under CUDA see the CUDA Math API's ulp bounds.
//
// Where a kernel cannot do what NumPy does:
//  - Integer pow with a negative exponent raises ValueError in NumPy; here it is the
//    truncated 1 / a^b: 1 for a == 1, +-1 for a == -1 (by the exponent's parity), 0 else
//    (also for a == 0).
//  - Integer remainder / floor_divide by 0 give 0 (as NumPy does, without its warning);
//    floor_divide(MIN, -1) wraps to MIN (as NumPy does, without its warning). Neither traps.
//  - rsqrt is not a NumPy function (1 / np.sqrt): CUDA's rsqrtf / rsqrt on the GPU (2 and 1
//    ulp), the correctly rounded 1 / sqrt on the cpu backend.
//  - round rounds halfway cases away from zero (C's round). np.round / np.around round them
//    to even: that is rint here.
#pragma once
// Guarded too: kernels include it as <gridspan/device/elementwise.hpp> and rows.hpp as
// "elementwise.hpp", which NVRTC holds as two headers.
#ifndef GRIDSPAN_DEVICE_ELEMENTWISE_HPP
#define GRIDSPAN_DEVICE_ELEMENTWISE_HPP

#include "abi.h"
#include "views.hpp"

#ifndef __CUDACC__
#include <math.h>
#endif

namespace gridspan {
namespace ew {
namespace detail {

using ::gridspan::detail::enable_if_t;
using ::gridspan::detail::is_integer;
using ::gridspan::detail::is_same;
using ::gridspan::detail::is_signed;

template <class T>
struct is_int {  // an integer type other than bool
  static constexpr bool value = is_integer<T>::value && !is_same<T, bool>::value;
};

// The unsigned type of a size, and the one integer arithmetic runs in: at least unsigned
// int, so that no operand is promoted to (signed, overflowing) int.
template <int Size>
struct uint_of;
template <>
struct uint_of<1> {
  using type = unsigned char;
};
template <>
struct uint_of<2> {
  using type = unsigned short;
};
template <>
struct uint_of<4> {
  using type = unsigned int;
};
template <>
struct uint_of<8> {
  using type = unsigned long long;
};
template <class T>
using wide_uint = typename uint_of<(sizeof(T) < 4 ? 4 : (int)sizeof(T))>::type;

constexpr float kMaxFloat = 3.40282346638528859811704183484516925e+38f;
constexpr double kMaxDouble = 1.79769313486231570814527423731704357e+308;

}  // namespace detail

// ---- unary floating point -------------------------------------------------------------
#define GRIDSPAN_EW_UNARY(name, ffun, dfun) \
  GRIDSPAN_HD float name(float x) {         \
    return ::ffun(x);                       \
  }                                         \
  GRIDSPAN_HD double name(double x) {       \
    return ::dfun(x);                       \
  }
GRIDSPAN_EW_UNARY(exp, expf, exp)
GRIDSPAN_EW_UNARY(log, logf, log)
GRIDSPAN_EW_UNARY(log1p, log1pf, log1p)
GRIDSPAN_EW_UNARY(expm1, expm1f, expm1)
GRIDSPAN_EW_UNARY(sqrt, sqrtf, sqrt)
GRIDSPAN_EW_UNARY(sin, sinf, sin)
GRIDSPAN_EW_UNARY(cos, cosf, cos)
GRIDSPAN_EW_UNARY(tan, tanf, tan)
GRIDSPAN_EW_UNARY(tanh, tanhf, tanh)
GRIDSPAN_EW_UNARY(arcsin, asinf, asin)
GRIDSPAN_EW_UNARY(arccos, acosf, acos)
GRIDSPAN_EW_UNARY(arctan, atanf, atan)
GRIDSPAN_EW_UNARY(sinh, sinhf, sinh)
GRIDSPAN_EW_UNARY(cosh, coshf, cosh)
GRIDSPAN_EW_UNARY(erf, erff, erf)
GRIDSPAN_EW_UNARY(floor, floorf, floor)
GRIDSPAN_EW_UNARY(ceil, ceilf, ceil)
GRIDSPAN_EW_UNARY(rint, rintf, rint)     // halfway cases to even (np.rint, np.round)
GRIDSPAN_EW_UNARY(round, roundf, round)  // halfway cases away from zero (C's round)
#undef GRIDSPAN_EW_UNARY

/// 1 / sqrt(x): CUDA's rsqrtf / rsqrt on the GPU, the correctly rounded quotient on the cpu.
GRIDSPAN_HD float rsqrt(float x) {
#ifdef __CUDA_ARCH__
  return ::rsqrtf(x);
#else
  return 1.0f / ::sqrtf(x);
#endif
}
GRIDSPAN_HD double rsqrt(double x) {
#ifdef __CUDA_ARCH__
  return ::rsqrt(x);
#else
  return 1.0 / ::sqrt(x);
#endif
}

// ---- activations (Cumo's fused operations; 16-bit floats arrive as float) ---------------
/// 0.5 x (1 + erf(x / sqrt(2))): PyTorch's gelu (approximate='none').
GRIDSPAN_HD float gelu(float x) {
  return 0.5f * x * (1.0f + ::erff(x * 0.707106781186547524f));
}
GRIDSPAN_HD double gelu(double x) {
  return 0.5 * x * (1.0 + ::erf(x * 0.707106781186547524));
}
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): PyTorch's approximate='tanh' (GPT-2).
GRIDSPAN_HD float gelu_tanh(float x) {
  const float inner = 0.797884560802865355f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + ::tanhf(inner));
}
GRIDSPAN_HD double gelu_tanh(double x) {
  const double inner = 0.797884560802865355 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + ::tanh(inner));
}
/// x / (1 + exp(-x)): one division, not x * sigmoid(x) (which rounds once more); -inf
/// answers NaN and a large negative x a signed zero, as torch's silu.
GRIDSPAN_HD float silu(float x) {
  return x / (1.0f + ::expf(-x));
}
GRIDSPAN_HD double silu(double x) {
  return x / (1.0 + ::exp(-x));
}
/// 1 / (1 + exp(-x)) with the exponent's argument kept negative: exp(x) / (1 + exp(x)) for
/// a negative x, which holds values down to the type's smallest subnormal where the plain
/// quotient answers 0 once exp(-x) overflows; a non-negative x takes the plain quotient.
/// Written without a branch (a warp of mixed signs runs one exponential and one division):
/// e = exp(-|x|) is exp(-x) for a non-negative x and exp(x) for a negative one.
GRIDSPAN_HD float sigmoid(float x) {
  const float e = ::expf(-::fabsf(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
GRIDSPAN_HD double sigmoid(double x) {
  const double e = ::exp(-::fabs(x));
  return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
/// log(1 + exp(x)), the sum taken before the logarithm (not log1p(exp(x))), with exp in
/// single precision whatever the type, and x itself where that exp overflows.
GRIDSPAN_HD float softplus(float x) {
  const float e = ::expf(x);
  return e > detail::kMaxFloat ? x : ::logf(1.0f + e);
}
GRIDSPAN_HD double softplus(double x) {
  const float e = ::expf(static_cast<float>(x));
  return e > detail::kMaxFloat ? x : ::log(1.0 + static_cast<double>(e));
}

// ---- classification: floats by value, integers and bool are always finite -------------
GRIDSPAN_HD bool isnan(float x) {
  return x != x;
}
GRIDSPAN_HD bool isnan(double x) {
  return x != x;
}
GRIDSPAN_HD bool isinf(float x) {
  return ::fabsf(x) > detail::kMaxFloat;
}
GRIDSPAN_HD bool isinf(double x) {
  return ::fabs(x) > detail::kMaxDouble;
}
GRIDSPAN_HD bool isfinite(float x) {
  return ::fabsf(x) <= detail::kMaxFloat;
}
GRIDSPAN_HD bool isfinite(double x) {
  return ::fabs(x) <= detail::kMaxDouble;
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD bool isnan(T) {
  return false;
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD bool isinf(T) {
  return false;
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD bool isfinite(T) {
  return true;
}

// ---- abs, sign ----------------------------------------------------------------------------
GRIDSPAN_HD float abs(float x) {
  return ::fabsf(x);
}
GRIDSPAN_HD double abs(double x) {
  return ::fabs(x);
}
/// Wraps like NumPy: abs(INT8_MIN) == INT8_MIN.
template <class T, detail::enable_if_t<detail::is_int<T>::value> = 0>
GRIDSPAN_HD T abs(T x) {
  if constexpr (detail::is_signed<T>::value) {
    using W = detail::wide_uint<T>;
    return x < 0 ? T(W(0) - W(x)) : x;
  } else {
    return x;
  }
}
GRIDSPAN_HD bool abs(bool x) {
  return x;
}

/// -1, 0 or +1 (+0 for either zero); NaN for NaN.
GRIDSPAN_HD float sign(float x) {
  return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == 0.0f ? 0.0f : x;
}
GRIDSPAN_HD double sign(double x) {
  return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x == 0.0 ? 0.0 : x;
}
template <class T, detail::enable_if_t<detail::is_int<T>::value> = 0>
GRIDSPAN_HD T sign(T x) {
  if constexpr (detail::is_signed<T>::value)
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
  else
    return x != T(0) ? T(1) : T(0);
}
/// NumPy has no bool loop (it promotes to int8); the values are the same.
GRIDSPAN_HD bool sign(bool x) {
  return x;
}

// ---- pow, atan2, hypot ----------------------------------------------------------------------
GRIDSPAN_HD float pow(float a, float b) {
  return ::powf(a, b);
}
GRIDSPAN_HD double pow(double a, double b) {
  return ::pow(a, b);
}
/// a^b wrapping around like NumPy's. A negative exponent (NumPy raises) gives the truncated
/// 1 / a^|b|: 1 for a == 1, +-1 for a == -1, 0 for any other base.
template <class T, detail::enable_if_t<detail::is_int<T>::value> = 0>
GRIDSPAN_HD T pow(T a, T b) {
  using W = detail::wide_uint<T>;
  if constexpr (detail::is_signed<T>::value) {
    if (b < 0) {
      if (a == T(1)) return T(1);
      if (a == T(-1)) return (W(b) & 1u) ? T(-1) : T(1);
      return T(0);
    }
  }
  W base = W(a), result = 1;
  for (W e = W(b); e != 0; e >>= 1) {
    if (e & 1u) result *= base;
    base *= base;
  }
  return T(result);
}

GRIDSPAN_HD float atan2(float y, float x) {
  return ::atan2f(y, x);
}
GRIDSPAN_HD double atan2(double y, double x) {
  return ::atan2(y, x);
}
GRIDSPAN_HD float hypot(float a, float b) {
  return ::hypotf(a, b);
}
GRIDSPAN_HD double hypot(double a, double b) {
  return ::hypot(a, b);
}

// ---- maximum, minimum, clip ------------------------------------------------------------
// NaN in either operand gives NaN. As NumPy (x86) does, equal operands (+0 and -0) give b.
GRIDSPAN_HD float maximum(float a, float b) {
  return (a != a || a > b) ? a : b;
}
GRIDSPAN_HD double maximum(double a, double b) {
  return (a != a || a > b) ? a : b;
}
GRIDSPAN_HD float minimum(float a, float b) {
  return (a != a || a < b) ? a : b;
}
GRIDSPAN_HD double minimum(double a, double b) {
  return (a != a || a < b) ? a : b;
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD T maximum(T a, T b) {
  return a > b ? a : b;
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD T minimum(T a, T b) {
  return a < b ? a : b;
}

/// minimum(maximum(x, lo), hi): hi where lo > hi; NaN where any of the three is NaN.
GRIDSPAN_HD float clip(float x, float lo, float hi) {
  return minimum(maximum(x, lo), hi);
}
GRIDSPAN_HD double clip(double x, double lo, double hi) {
  return minimum(maximum(x, lo), hi);
}
template <class T, detail::enable_if_t<detail::is_integer<T>::value> = 0>
GRIDSPAN_HD T clip(T x, T lo, T hi) {
  return minimum(maximum(x, lo), hi);
}

// ---- remainder (%), floor_divide (//) ----------------------------------------------------
// Floats: NumPy's npy_divmod. The remainder has the divisor's sign (a zero one too); b == 0
// gives NaN for %, a / b for //.
#define GRIDSPAN_EW_DIVMOD(T, sfx)                                           \
  GRIDSPAN_HD T remainder(T a, T b) {                                        \
    T mod = ::fmod##sfx(a, b);                                               \
    if (b == T(0)) return mod;                                               \
    if (mod != T(0)) {                                                       \
      if ((b < T(0)) != (mod < T(0))) mod += b;                              \
    } else {                                                                 \
      mod = ::copysign##sfx(T(0), b);                                        \
    }                                                                        \
    return mod;                                                              \
  }                                                                          \
  GRIDSPAN_HD T floor_divide(T a, T b) {                                     \
    if (b == T(0)) return a / b;                                             \
    const T mod = ::fmod##sfx(a, b);                                         \
    T div = (a - mod) / b;                                                   \
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);              \
    if (div == T(0)) return ::copysign##sfx(T(0), a / b);                    \
    T floordiv = ::floor##sfx(div); /* snap to the nearest integral value */ \
    if (div - floordiv > T(0.5)) floordiv += T(1);                           \
    return floordiv;                                                         \
  }
GRIDSPAN_EW_DIVMOD(float, f)
GRIDSPAN_EW_DIVMOD(double, )
#undef GRIDSPAN_EW_DIVMOD

/// Python's %: the result has the divisor's sign. b == 0 gives 0, and MIN % -1 gives 0
/// without the trap x86's division raises.
template <class T, detail::enable_if_t<detail::is_int<T>::value> = 0>
GRIDSPAN_HD T remainder(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (detail::is_signed<T>::value) {
    if (b == T(-1)) return T(0);
    const T r = T(a % b);
    return (r != 0 && (r < 0) != (b < 0)) ? T(r + b) : r;
  } else {
    return T(a % b);
  }
}

/// Python's //: the quotient rounded toward -inf. b == 0 gives 0, and MIN // -1 wraps to
/// MIN without the trap x86's division raises.
template <class T, detail::enable_if_t<detail::is_int<T>::value> = 0>
GRIDSPAN_HD T floor_divide(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (detail::is_signed<T>::value) {
    using W = detail::wide_uint<T>;
    if (b == T(-1)) return T(W(0) - W(a));
    const T q = T(a / b);
    return (T(a % b) != 0 && (a < 0) != (b < 0)) ? T(q - 1) : q;
  } else {
    return T(a / b);
  }
}

}  // namespace ew
}  // namespace gridspan

#endif  // GRIDSPAN_DEVICE_ELEMENTWISE_HPP
