// The cuda backend's own kernels, compiled by NVRTC like user kernels: box fills, box copies
// (also from another GPU's memory over peer access), the reductions that combine chunks and
// the rounding of float32 partials to 16 bits. They follow the cpu backend's arithmetic
// exactly (regions.cpp).
#include <string>

#include "backend/cuda/cuda.hpp"

namespace gridspan::backend::cuda {

std::string builtins_source() {
  return R"gs(
#include "abi.h"

namespace {

struct alignas(16) Bytes16 {
  unsigned long long lo, hi;
};

// Calls f(dst_index, src_index) for every element of the box, grid-stride.
template <class F>
__device__ void for_box(const GsBox& b, F f) {
  const long long total = b.extent[0] * b.extent[1] * b.extent[2];
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long x = i % b.extent[2];
    const long long t = i / b.extent[2];
    const long long y = t % b.extent[1];
    const long long z = t / b.extent[1];
    f(b.dst_offset + z * b.dst_stride[0] + y * b.dst_stride[1] + x,
      b.src_offset + z * b.src_stride[0] + y * b.src_stride[1] + x);
  }
}

__device__ float f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ float bf16_to_f32(unsigned short b) {
  return __uint_as_float((unsigned int)b << 16);
}
__device__ unsigned short f32_to_bf16(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return (unsigned short)((x >> 16) | 0x40);
  x += 0x7FFFu + ((x >> 16) & 1);
  return (unsigned short)(x >> 16);
}

enum Op { ADD, MUL, MIN, MAX, AND, OR };

template <int O, class T>
__device__ T apply(T a, T b) {
  if constexpr (O == ADD) return T(a + b);
  if constexpr (O == MUL) return T(a * b);
  if constexpr (O == MIN) return b < a ? b : a;
  return a < b ? b : a;
}
template <int O, class T>
__device__ T apply_bits(T a, T b) {
  if constexpr (O == AND) return T(a & b);
  else if constexpr (O == OR) return T(a | b);
  else return apply<O>(a, b);
}

template <int O, class T>
__device__ void combine(T* dst, const T* src, const GsBox& b) {
  for_box(b, [&](long long d, long long s) { dst[d] = apply_bits<O>(dst[d], src[s]); });
}
template <int O, float (*ToF)(unsigned short), unsigned short (*FromF)(float)>
__device__ void combine16(unsigned short* dst, const unsigned short* src, const GsBox& b) {
  for_box(b, [&](long long d, long long s) { dst[d] = FromF(apply<O>(ToF(dst[d]), ToF(src[s]))); });
}

}  // namespace

#define GS_SIZED(N, T)                                                                  \
  extern "C" __global__ void gs_fill_##N(T* dst, GsBox b, T v) {                       \
    for_box(b, [&](long long d, long long) { dst[d] = v; });                           \
  }                                                                                    \
  extern "C" __global__ void gs_copy_##N(T* dst, const T* src, GsBox b) {              \
    for_box(b, [&](long long d, long long s) { dst[d] = src[s]; });                    \
  }
GS_SIZED(1, unsigned char)
GS_SIZED(2, unsigned short)
GS_SIZED(4, unsigned int)
GS_SIZED(8, unsigned long long)
GS_SIZED(16, Bytes16)

#define GS_COMBINE(TAG, T, OPTAG, O)                                                          \
  extern "C" __global__ void gs_combine_##TAG##_##OPTAG(T* dst, const T* src, GsBox b) {     \
    combine<O>(dst, src, b);                                                                  \
  }
#define GS_ARITH(TAG, T) \
  GS_COMBINE(TAG, T, add, ADD) GS_COMBINE(TAG, T, mul, MUL) GS_COMBINE(TAG, T, min, MIN) GS_COMBINE(TAG, T, max, MAX)
#define GS_INTEGER(TAG, T) GS_ARITH(TAG, T) GS_COMBINE(TAG, T, and, AND) GS_COMBINE(TAG, T, or, OR)
GS_INTEGER(int8, signed char)
GS_INTEGER(int16, short)
GS_INTEGER(int32, int)
GS_INTEGER(int64, long long)
GS_INTEGER(uint8, unsigned char)
GS_INTEGER(uint16, unsigned short)
GS_INTEGER(uint32, unsigned int)
GS_INTEGER(uint64, unsigned long long)
GS_ARITH(float32, float)
GS_ARITH(float64, double)

#define GS_COMBINE16(TAG, OPTAG, O, TOF, FROMF)                                                  \
  extern "C" __global__ void gs_combine_##TAG##_##OPTAG(unsigned short* dst,                    \
                                                        const unsigned short* src, GsBox b) {   \
    combine16<O, TOF, FROMF>(dst, src, b);                                                       \
  }
#define GS_HALF(TAG, TOF, FROMF)                                                          \
  GS_COMBINE16(TAG, add, ADD, TOF, FROMF) GS_COMBINE16(TAG, mul, MUL, TOF, FROMF)         \
  GS_COMBINE16(TAG, min, MIN, TOF, FROMF) GS_COMBINE16(TAG, max, MAX, TOF, FROMF)
GS_HALF(float16, f16_to_f32, f32_to_f16)
GS_HALF(bfloat16, bf16_to_f32, f32_to_bf16)

#define GS_NARROW(TAG, FROMF)                                                                     \
  extern "C" __global__ void gs_narrow_##TAG(unsigned short* dst, const float* src, GsBox b) {   \
    for_box(b, [&](long long d, long long s) { dst[d] = FROMF(src[s]); });                        \
  }
GS_NARROW(float16, f32_to_f16)
GS_NARROW(bfloat16, f32_to_bf16)
)gs";
}

}  // namespace gridspan::backend::cuda
