// What the array library's generated kernels call besides the math (elementwise.hpp):
// 16-bit floats computed in float and rounded once per operation, integer arithmetic that
// wraps as NumPy's does (never C++'s undefined overflow), and conversions between dtypes
// that answer the same on every backend (a float out of an integer's range saturates,
// NaN gives 0). Compiles as CUDA and as plain C++ (the cpu backend).
#pragma once

#include "views.hpp"

namespace gridspan {
namespace fused {

// ---- 16-bit floats: loaded as float, rounded to their type after every operation --------
GRIDSPAN_HD float load(__half h) {
  return __half2float(h);
}
GRIDSPAN_HD float load(__nv_bfloat16 h) {
  return __bfloat162float(h);
}
template <class T>
GRIDSPAN_HD T load(T v) {
  return v;
}
/// A float rounded to float16 (to nearest even), as a float.
GRIDSPAN_HD float round_f16(float v) {
  return __half2float(__float2half_rn(v));
}
/// A float rounded to bfloat16 (to nearest even), as a float.
GRIDSPAN_HD float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
GRIDSPAN_HD void store(__half& out, float v) {
  out = __float2half_rn(v);
}
GRIDSPAN_HD void store(__nv_bfloat16& out, float v) {
  out = __float2bfloat16_rn(v);
}
template <class T, class V>
GRIDSPAN_HD void store(T& out, V v) {
  out = static_cast<T>(v);
}

// ---- vectors: V neighbouring elements in one load or store -------------------------------
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
/// The V elements of T at p (aligned to V of them) in one load.
template <int V, class T>
GRIDSPAN_HD Pack<T, V> read_pack(const T* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Pack<T, V>*>(p);
#else
  Pack<T, V> pack;
  memcpy(&pack, p, sizeof pack);
  return pack;
#endif
}
/// The V elements of T at p (aligned to V of them) into r, loaded as above.
template <int V, class A, class T>
GRIDSPAN_HD void load_vector(const T* p, A* r) {
  const Pack<T, V> pack = read_pack<V>(p);
  for (int i = 0; i < V; ++i) r[i] = static_cast<A>(load(pack.v[i]));
}
/// The same into registers of T itself: the elements as they are (a 16-bit float stays
/// 16 bits, two to a register).
template <int V, class T>
GRIDSPAN_HD void load_vector(const T* p, T* r) {
  const Pack<T, V> pack = read_pack<V>(p);
  for (int i = 0; i < V; ++i) r[i] = pack.v[i];
}
/// r[0..V) stored as above into the V elements of T at p (aligned to V of them).
template <int V, class T, class A>
GRIDSPAN_HD void store_vector(T* p, const A* r) {
  Pack<T, V> pack;
  for (int i = 0; i < V; ++i) store(pack.v[i], r[i]);
#ifdef __CUDA_ARCH__
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
#else
  memcpy(p, &pack, sizeof pack);
#endif
}

// ---- integers ------------------------------------------------------------------------------
template <class T>
struct unsigned_of {
  using type = T;
};
#define GRIDSPAN_UNSIGNED_OF(S, U) \
  template <>                      \
  struct unsigned_of<S> {          \
    using type = U;                \
  };
GRIDSPAN_UNSIGNED_OF(signed char, unsigned char)
GRIDSPAN_UNSIGNED_OF(short, unsigned short)
GRIDSPAN_UNSIGNED_OF(int, unsigned int)
GRIDSPAN_UNSIGNED_OF(long, unsigned long)
GRIDSPAN_UNSIGNED_OF(long long, unsigned long long)
#undef GRIDSPAN_UNSIGNED_OF

/// a + b, a - b, a * b, -a wrapping around (two's complement) for integers.
template <class T>
GRIDSPAN_HD T add(T a, T b) {
  if constexpr (detail::is_integer<T>::value && !detail::is_same<T, bool>::value) {
    using U = typename unsigned_of<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}
template <class T>
GRIDSPAN_HD T sub(T a, T b) {
  if constexpr (detail::is_integer<T>::value) {
    using U = typename unsigned_of<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <class T>
GRIDSPAN_HD T mul(T a, T b) {
  if constexpr (detail::is_integer<T>::value && !detail::is_same<T, bool>::value) {
    using U = typename unsigned_of<T>::type;
    // unsigned short * unsigned short promotes to int and may overflow it: widen first.
    using W = decltype(U() * 1u);
    return static_cast<T>(
        static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return static_cast<T>(a * b);
  }
}
template <class T>
GRIDSPAN_HD T neg(T a) {
  if constexpr (detail::is_integer<T>::value) {
    using U = typename unsigned_of<T>::type;
    return static_cast<T>(static_cast<U>(0u - static_cast<U>(a)));
  } else {
    return -a;
  }
}

// ---- identities of min and max ------------------------------------------------------------
template <class T>
GRIDSPAN_HD T highest() {
  if constexpr (detail::is_integer<T>::value) {
    if constexpr (detail::is_same<T, bool>::value) return true;
    using U = typename unsigned_of<T>::type;
    return static_cast<T>(static_cast<U>(~U(0)) >> (detail::is_signed<T>::value ? 1 : 0));
  } else {
    const unsigned long long bits = sizeof(T) == 4 ? 0x7F800000ull : 0x7FF0000000000000ull;  // +inf
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
  }
}
template <class T>
GRIDSPAN_HD T lowest() {
  if constexpr (detail::is_integer<T>::value) {
    if constexpr (detail::is_same<T, bool>::value) return false;
    if constexpr (!detail::is_signed<T>::value)
      return T(0);
    else
      return static_cast<T>(-highest<T>() - 1);
  } else {
    return -highest<T>();
  }
}

/// The identity of a GsReduceOp for T: x op identity == x.
template <class T>
GRIDSPAN_HD T identity(int32_t op) {
  switch (op) {
    case GS_MUL:
      return T(1);
    case GS_MIN:
      return highest<T>();
    case GS_MAX:
      return lowest<T>();
    case GS_AND:
      return T(~0ull);
    default:  // GS_ADD, GS_OR
      return T(0);
  }
}

// ---- conversions --------------------------------------------------------------------------
template <class T>
struct limits;
#define GRIDSPAN_LIMITS(T, LO, HI)                        \
  template <>                                             \
  struct limits<T> {                                      \
    static constexpr double lo = static_cast<double>(LO); \
    static constexpr double hi = static_cast<double>(HI); \
  };
GRIDSPAN_LIMITS(signed char, -128, 127)
GRIDSPAN_LIMITS(short, -32768, 32767)
GRIDSPAN_LIMITS(int, -2147483647 - 1, 2147483647)
GRIDSPAN_LIMITS(long, -9223372036854775807LL - 1, 9223372036854775807LL)
GRIDSPAN_LIMITS(long long, -9223372036854775807LL - 1, 9223372036854775807LL)
GRIDSPAN_LIMITS(unsigned char, 0, 255)
GRIDSPAN_LIMITS(unsigned short, 0, 65535)
GRIDSPAN_LIMITS(unsigned int, 0, 4294967295u)
GRIDSPAN_LIMITS(unsigned long, 0, 18446744073709551615ull)
GRIDSPAN_LIMITS(unsigned long long, 0, 18446744073709551615ull)
#undef GRIDSPAN_LIMITS

/// `v` as a T: a float into an integer type rounds toward zero and saturates at the type's
/// range (NaN gives 0); anything into bool is "not zero".
template <class T, class V>
GRIDSPAN_HD T convert(V v) {
  if constexpr (detail::is_same<T, bool>::value) {
    return v != V(0);
  } else if constexpr (detail::is_integer<T>::value && !detail::is_integer<V>::value) {
    const double d = static_cast<double>(v);
    if (!(d == d)) return T(0);
    if (d <= limits<T>::lo) return static_cast<T>(limits<T>::lo);
    if (d >= limits<T>::hi) {
      // hi of a 64-bit type is not a double: the largest value itself.
      return highest<T>();
    }
    return static_cast<T>(d);
  } else {
    return static_cast<T>(v);
  }
}

// ---- string kernels (ElementwiseKernel) ------------------------------------------------

/// CuPy's `_ind`: the number of elements the kernel runs over, as `_ind.size()`.
struct Index {
  int64_t n;
  GRIDSPAN_HD int64_t size() const { return n; }
};

/// A raw parameter: the whole array `V` (a view of rank R), indexed by an element's
/// row-major number, as CuPy's raw arrays are.
template <class V, int R>
struct Raw {
  V* v;
  int64_t n1, n2, n;
  GRIDSPAN_HD decltype(auto) operator[](int64_t f) const {
    if constexpr (R == 1) {
      return (*v)(f);
    } else if constexpr (R == 2) {
      return (*v)(f / n1, f % n1);
    } else {
      return (*v)(f / (n1 * n2), (f / n2) % n1, f % n2);
    }
  }
  GRIDSPAN_HD int64_t size() const { return n; }
};

#ifdef __CUDACC__
// One contribution a warp into a one-element partial: the warp's threads combine their
// values (those with `in` false have none) by the partial's operator, and its first thread
// adds the result, so that a whole reduction inside a task does one atomic a warp, not one
// a thread. Every thread of the block must call it. The warp's threads are those of
// consecutive linear indices (x fastest); a block of threads not a multiple of 32 (a
// region of a few elements) contributes thread by thread instead.
template <class View, class T>
__device__ void warp_contribute(const View& out, T v, bool in) {
  if ((blockDim.x * blockDim.y * blockDim.z) % 32u != 0) {
    if (in) out.reduce(v);
    return;
  }
  const unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
  int has = in ? 1 : 0;
  for (unsigned s = 16; s > 0; s >>= 1) {
    const T other = __shfl_down_sync(0xffffffffu, v, s);
    const int other_has = __shfl_down_sync(0xffffffffu, has, s);
    if (lane + s < 32u && other_has) {
      v = has ? gridspan::detail::combine(out.op_, v, other) : other;
      has = 1;
    }
  }
  if (lane == 0 && has) out.reduce(v);
}
#endif

}  // namespace fused
}  // namespace gridspan
