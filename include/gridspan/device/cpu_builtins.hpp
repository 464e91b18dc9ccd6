// The CUDA built-ins a kernel uses, for the cpu backend: dim3, threadIdx/blockDim/gridDim,
// the qualifiers, __shared__, __syncthreads, atomics, fast-math functions, the vector types
// (float4, make_int2, ...) and minimal __half/__nv_bfloat16. All threads of a block run on one OS
// thread (as loops, or as fibers when the kernel calls __syncthreads), so the per-thread built-ins
// are thread_local. Warp intrinsics are not provided; the compiler rejects kernels that use them.
#pragma once

#ifndef __CUDACC__

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "abi.h"
#include "cpu_atomic.hpp"

// ---- vector math ------------------------------------------------------------------------
// glibc's libmvec has SIMD versions of these (the kernel's .so links it); declared SIMD-callable
// here, a loop that calls them vectorises (glibc's own headers declare them only under
// -ffast-math, which would also break NaN and infinity handling).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    __GLIBC_PREREQ(2, 35)
#define GRIDSPAN_SIMD_MATH_1(name)                                                   \
  extern "C" __attribute__((__simd__("notinbranch"))) float name##f(float) noexcept; \
  extern "C" __attribute__((__simd__("notinbranch"))) double name(double) noexcept;
#define GRIDSPAN_SIMD_MATH_2(name)                                                          \
  extern "C" __attribute__((__simd__("notinbranch"))) float name##f(float, float) noexcept; \
  extern "C" __attribute__((__simd__("notinbranch"))) double name(double, double) noexcept;
GRIDSPAN_SIMD_MATH_1(exp)
GRIDSPAN_SIMD_MATH_1(expm1)
GRIDSPAN_SIMD_MATH_1(log)
GRIDSPAN_SIMD_MATH_1(log1p)
GRIDSPAN_SIMD_MATH_1(sin)
GRIDSPAN_SIMD_MATH_1(cos)
GRIDSPAN_SIMD_MATH_1(tan)
GRIDSPAN_SIMD_MATH_1(tanh)
GRIDSPAN_SIMD_MATH_1(asin)
GRIDSPAN_SIMD_MATH_1(acos)
GRIDSPAN_SIMD_MATH_1(atan)
GRIDSPAN_SIMD_MATH_1(sinh)
GRIDSPAN_SIMD_MATH_1(cosh)
GRIDSPAN_SIMD_MATH_1(erf)
GRIDSPAN_SIMD_MATH_2(pow)
GRIDSPAN_SIMD_MATH_2(atan2)
GRIDSPAN_SIMD_MATH_2(hypot)
#undef GRIDSPAN_SIMD_MATH_1
#undef GRIDSPAN_SIMD_MATH_2
#endif

// ---- qualifiers ----------------------------------------------------------------------
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __constant__
#define __launch_bounds__(...)
// One instance per OS thread = per running block (a block never migrates between threads;
// blocks that run one after another on a thread reuse it, like CUDA's uninitialised
// shared memory).
#define __shared__ static thread_local

// ---- index types ---------------------------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- vector types: CUDA's names, members, alignments and make_ functions ---------------
// (uint3 above is one of them.) Two members align to their size, three to one member, four
// to their size up to 16 bytes, as in CUDA's vector_types.h.
#define GRIDSPAN_VECTOR_1_2_4(T, name)                              \
  struct name##1 {                                                  \
    T x;                                                            \
  };                                                                \
  struct alignas(2 * sizeof(T) < 16 ? 2 * sizeof(T) : 16) name##2 { \
    T x, y;                                                         \
  };                                                                \
  struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) name##4 { \
    T x, y, z, w;                                                   \
  };                                                                \
  inline name##1 make_##name##1(T x) {                              \
    return name##1 {x};                                             \
  }                                                                 \
  inline name##2 make_##name##2(T x, T y) {                         \
    return name##2 {x, y};                                          \
  }                                                                 \
  inline name##4 make_##name##4(T x, T y, T z, T w) {               \
    return name##4 {x, y, z, w};                                    \
  }
#define GRIDSPAN_VECTOR(T, name)                 \
  GRIDSPAN_VECTOR_1_2_4(T, name)                 \
  struct name##3 {                               \
    T x, y, z;                                   \
  };                                             \
  inline name##3 make_##name##3(T x, T y, T z) { \
    return name##3 {x, y, z};                    \
  }
GRIDSPAN_VECTOR(signed char, char)
GRIDSPAN_VECTOR(unsigned char, uchar)
GRIDSPAN_VECTOR(short, short)
GRIDSPAN_VECTOR(unsigned short, ushort)
GRIDSPAN_VECTOR(int, int)
GRIDSPAN_VECTOR_1_2_4(unsigned int, uint)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) {
  return uint3{x, y, z};
}
GRIDSPAN_VECTOR(long, long)
GRIDSPAN_VECTOR(unsigned long, ulong)
GRIDSPAN_VECTOR(long long, longlong)
GRIDSPAN_VECTOR(unsigned long long, ulonglong)
GRIDSPAN_VECTOR(float, float)
GRIDSPAN_VECTOR(double, double)
#undef GRIDSPAN_VECTOR
#undef GRIDSPAN_VECTOR_1_2_4

static thread_local uint3 threadIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
static constexpr int warpSize = 32;

namespace gridspan::cpu_detail {
// Set by the wrapper around run_fibers; __syncthreads needs the library's barrier.
static thread_local const GsCpuRuntime* t_fiber_runtime = nullptr;

// Makes __syncthreads reach the fiber runner while a block runs as fibers.
struct FiberScope {
  explicit FiberScope(const GsCpuRuntime* rt) { t_fiber_runtime = rt; }
  ~FiberScope() { t_fiber_runtime = nullptr; }
  FiberScope(const FiberScope&) = delete;
  FiberScope& operator=(const FiberScope&) = delete;
};

inline uint3 thread_index(int32_t t) {
  const unsigned int u = static_cast<unsigned int>(t);
  return uint3{u % blockDim.x, (u / blockDim.x) % blockDim.y, u / (blockDim.x * blockDim.y)};
}

}  // namespace gridspan::cpu_detail

// ---- barriers and fences ---------------------------------------------------------------
// Inside the fiber runner: switch to the other threads of the block until all arrived.
// Outside it (a kernel the scan found no __syncthreads in runs as loops, which happens
// only for blocks of one thread here) there is nothing to wait for.
inline void __syncthreads() {
  if (const GsCpuRuntime* rt = gridspan::cpu_detail::t_fiber_runtime) {
    const uint3 saved = threadIdx;
    rt->barrier();
    threadIdx = saved;
  }
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_block() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_system() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// ---- atomics ---------------------------------------------------------------------------
// One template per operation, deducing T from the address only (as CUDA's overloads accept
// `atomicAdd(&f, 1)` for a float f). Integers use the native instructions, the rest CAS.
template <class T>
inline T atomicAdd(T* p, gridspan::cpu_detail::identity_t<T> v) {
  if constexpr (std::is_integral_v<T>)
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  else
    return gridspan::cpu_detail::atomic_update(p, [v](T a) { return T(a + v); });
}
template <class T>
inline T atomicSub(T* p, gridspan::cpu_detail::identity_t<T> v) {
  if constexpr (std::is_integral_v<T>)
    return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
  else
    return gridspan::cpu_detail::atomic_update(p, [v](T a) { return T(a - v); });
}
template <class T>
inline T atomicExch(T* p, gridspan::cpu_detail::identity_t<T> v) {
  return gridspan::cpu_detail::atomic_update(p, [v](T) { return v; });
}
template <class T>
inline T atomicMin(T* p, gridspan::cpu_detail::identity_t<T> v) {
  return gridspan::cpu_detail::atomic_update(p, [v](T a) { return v < a ? v : a; });
}
template <class T>
inline T atomicMax(T* p, gridspan::cpu_detail::identity_t<T> v) {
  return gridspan::cpu_detail::atomic_update(p, [v](T a) { return a < v ? v : a; });
}
template <class T>
inline T atomicAnd(T* p, gridspan::cpu_detail::identity_t<T> v) {
  static_assert(std::is_integral_v<T>, "atomicAnd needs an integer");
  return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T atomicOr(T* p, gridspan::cpu_detail::identity_t<T> v) {
  static_assert(std::is_integral_v<T>, "atomicOr needs an integer");
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T atomicXor(T* p, gridspan::cpu_detail::identity_t<T> v) {
  static_assert(std::is_integral_v<T>, "atomicXor needs an integer");
  return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T atomicCAS(T* p, gridspan::cpu_detail::identity_t<T> compare,
                   gridspan::cpu_detail::identity_t<T> value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value either way
}
inline unsigned int atomicInc(unsigned int* p, unsigned int limit) {
  return gridspan::cpu_detail::atomic_update(
      p, [limit](unsigned int a) { return a >= limit ? 0u : a + 1; });
}
inline unsigned int atomicDec(unsigned int* p, unsigned int limit) {
  return gridspan::cpu_detail::atomic_update(
      p, [limit](unsigned int a) { return (a == 0 || a > limit) ? limit : a - 1; });
}
#define GRIDSPAN_ATOMIC_SCOPED(name)  \
  template <class... A>               \
  inline auto name##_block(A... a) {  \
    return name(a...);                \
  }                                   \
  template <class... A>               \
  inline auto name##_system(A... a) { \
    return name(a...);                \
  }
GRIDSPAN_ATOMIC_SCOPED(atomicAdd)
GRIDSPAN_ATOMIC_SCOPED(atomicSub)
GRIDSPAN_ATOMIC_SCOPED(atomicExch)
GRIDSPAN_ATOMIC_SCOPED(atomicMin)
GRIDSPAN_ATOMIC_SCOPED(atomicMax)
GRIDSPAN_ATOMIC_SCOPED(atomicAnd)
GRIDSPAN_ATOMIC_SCOPED(atomicOr)
GRIDSPAN_ATOMIC_SCOPED(atomicXor)
GRIDSPAN_ATOMIC_SCOPED(atomicCAS)
#undef GRIDSPAN_ATOMIC_SCOPED

// ---- math ------------------------------------------------------------------------------
// <math.h> provides sqrtf, expf, fminf, fmaxf, fabsf ...; these are CUDA's extras.
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(a) < C(b) ? C(b) : C(a);
}
inline unsigned int umin(unsigned int a, unsigned int b) {
  return a < b ? a : b;
}
inline unsigned int umax(unsigned int a, unsigned int b) {
  return a < b ? b : a;
}
inline long long llmin(long long a, long long b) {
  return a < b ? a : b;
}
inline long long llmax(long long a, long long b) {
  return a < b ? b : a;
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) {
  return 1.0 / sqrt(x);
}
inline float rcbrtf(float x) {
  return 1.0f / cbrtf(x);
}
inline float fdividef(float a, float b) {
  return a / b;
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float __expf(float x) {
  return expf(x);
}
inline float __exp10f(float x) {
  return powf(10.0f, x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float __log2f(float x) {
  return log2f(x);
}
inline float __log10f(float x) {
  return log10f(x);
}
inline float __sinf(float x) {
  return sinf(x);
}
inline float __cosf(float x) {
  return cosf(x);
}
inline float __tanf(float x) {
  return tanf(x);
}
inline float __powf(float a, float b) {
  return powf(a, b);
}
inline void __sincosf(float x, float* s, float* c) {
  *s = sinf(x);
  *c = cosf(x);
}
inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline float __fsqrt_rn(float x) {
  return sqrtf(x);
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fmaf_rn(float a, float b, float c) {
  return fmaf(a, b, c);
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline float exp10f(float x) {
  return powf(10.0f, x);
}
namespace gridspan::cpu_detail {
// The bit reinterpretations below (__int_as_float ...) share this.
template <class To, class From>
inline To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit reinterpretation between different sizes");
  To to;
  memcpy(&to, &from, sizeof to);
  return to;
}
}  // namespace gridspan::cpu_detail
inline float __int_as_float(int x) {
  return ::gridspan::cpu_detail::bits_as<float>(x);
}
inline int __float_as_int(float f) {
  return ::gridspan::cpu_detail::bits_as<int>(f);
}
inline float __uint_as_float(unsigned int x) {
  return ::gridspan::cpu_detail::bits_as<float>(x);
}
inline unsigned int __float_as_uint(float f) {
  return ::gridspan::cpu_detail::bits_as<unsigned int>(f);
}
inline double __longlong_as_double(long long x) {
  return ::gridspan::cpu_detail::bits_as<double>(x);
}
inline long long __double_as_longlong(double d) {
  return ::gridspan::cpu_detail::bits_as<long long>(d);
}
inline int __popc(unsigned int x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x));
}
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline int __ffsll(long long x) {
  return __builtin_ffsll(x);
}
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
inline int __mul24(int a, int b) {
  return a * b;
}
inline unsigned int __umul24(unsigned int a, unsigned int b) {
  return a * b;
}
inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * b) >> 32);
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}

// ---- 16-bit floats: storage plus conversions; arithmetic goes through float -------------
namespace gridspan::cpu_detail {
inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u)  // inf or nan (keep nan quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero): scale and round to nearest even
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  uint32_t x;
  if (e == 0x1F) {
    x = sign | 0x7F800000u | (m << 13);
  } else if (e != 0) {
    x = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {  // subnormal: value m * 2^-24
    float f = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
}  // namespace gridspan::cpu_detail

#define GRIDSPAN_FLOAT16_TYPE(Name, encode, decode)                       \
  struct Name {                                                           \
    uint16_t bits;                                                        \
    Name() = default;                                                     \
    Name(float f) : bits(gridspan::cpu_detail::encode(f)) {}              \
    Name(double d) : Name(static_cast<float>(d)) {}                       \
    Name(int i) : Name(static_cast<float>(i)) {}                          \
    Name(long long i) : Name(static_cast<float>(i)) {}                    \
    Name(unsigned int i) : Name(static_cast<float>(i)) {}                 \
    operator float() const { return gridspan::cpu_detail::decode(bits); } \
    Name& operator+=(float v) { return *this = Name(float(*this) + v); }  \
    Name& operator-=(float v) { return *this = Name(float(*this) - v); }  \
    Name& operator*=(float v) { return *this = Name(float(*this) * v); }  \
    Name& operator/=(float v) { return *this = Name(float(*this) / v); }  \
    static Name from_bits(uint16_t b) {                                   \
      Name n;                                                             \
      n.bits = b;                                                         \
      return n;                                                           \
    }                                                                     \
  };
GRIDSPAN_FLOAT16_TYPE(__half, float_to_half_bits, half_bits_to_float)
GRIDSPAN_FLOAT16_TYPE(__nv_bfloat16, float_to_bf16_bits, bf16_bits_to_float)
#undef GRIDSPAN_FLOAT16_TYPE
using half = __half;

inline __half __float2half(float f) {
  return __half(f);
}
inline float __half2float(__half h) {
  return float(h);
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  return __nv_bfloat16(f);
}
inline __half __float2half_rn(float f) {
  return __half(f);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16(f);
}
inline float __bfloat162float(__nv_bfloat16 b) {
  return float(b);
}
inline __half __ushort_as_half(unsigned short b) {
  return __half::from_bits(b);
}
inline unsigned short __half_as_ushort(__half h) {
  return h.bits;
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) {
  return __nv_bfloat16::from_bits(b);
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) {
  return b.bits;
}

#endif  // !__CUDACC__
