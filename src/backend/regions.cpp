// Box copies, fills, reductions and float32-to-16-bit roundings over row-major boxes of
// host-addressable memory: the cpu backend's region operations, and the host side of every
// backend.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "backend/regions.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/half.hpp"

namespace gridspan::backend {

namespace {

template <class T, class Op>
void combine_typed(T* dst, const Rect& dr, const T* src, const Rect& sr, const Rect& region,
                   Op op) {
  for_each_run(dr, sr, region, [&](int64_t d, int64_t s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[d + i] = op(dst[d + i], src[s + i]);
  });
}

template <class T>
void combine_op(T* dst, const Rect& dr, const T* src, const Rect& sr, const Rect& region,
                annotation::ReduceOp op) {
  using annotation::ReduceOp;
  switch (op) {
    case ReduceOp::add:
      return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return T(a + b); });
    case ReduceOp::mul:
      return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return T(a * b); });
    case ReduceOp::min:
      return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return b < a ? b : a; });
    case ReduceOp::max:
      return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return a < b ? b : a; });
    case ReduceOp::bit_and:
      if constexpr (std::is_integral_v<T>)
        return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return T(a & b); });
      break;
    case ReduceOp::bit_or:
      if constexpr (std::is_integral_v<T>)
        return combine_typed(dst, dr, src, sr, region, [](T a, T b) { return T(a | b); });
      break;
  }
  throw Error("internal error: bitwise reduction on a floating-point array");
}

// Rounds at every combine: the runtime's partials of 16-bit sums and products are float32
// (plan::partial_dtype, rounded once by narrow_region), so it comes here for min and max.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void combine_16(uint16_t* dst, const Rect& dr, const uint16_t* src, const Rect& sr,
                const Rect& region, annotation::ReduceOp op) {
  using annotation::ReduceOp;
  for_each_run(dr, sr, region, [&](int64_t d, int64_t s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      float a = ToF(dst[d + i]), b = ToF(src[s + i]), r = a;
      switch (op) {
        case ReduceOp::add:
          r = a + b;
          break;
        case ReduceOp::mul:
          r = a * b;
          break;
        case ReduceOp::min:
          r = b < a ? b : a;
          break;
        case ReduceOp::max:
          r = a < b ? b : a;
          break;
        default:
          throw Error("internal error: bitwise reduction on a floating-point array");
      }
      dst[d + i] = FromF(r);
    }
  });
}

}  // namespace

void copy_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                 const Rect& region, std::size_t elem_size) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  for_each_run(dst_rect, src_rect, region, [&](int64_t doff, int64_t soff, int64_t n) {
    std::memcpy(d + doff * elem_size, s + soff * elem_size, n * elem_size);
  });
}

void fill_region(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
                 std::size_t elem_size) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* v = static_cast<const unsigned char*>(value);
  const bool one_byte = std::all_of(v, v + elem_size, [&](unsigned char b) { return b == v[0]; });
  for_each_run(dst_rect, dst_rect, region, [&](int64_t off, int64_t, int64_t n) {
    unsigned char* p = d + off * elem_size;
    const std::size_t total = std::size_t(n) * elem_size;
    if (one_byte || total == 0) {
      std::memset(p, v[0], total);
      return;
    }
    // One element, then copies of what is filled so far: twice as much at each step.
    std::memcpy(p, v, elem_size);
    for (std::size_t done = elem_size; done < total;) {
      const std::size_t more = std::min(done, total - done);
      std::memcpy(p + done, p, more);
      done += more;
    }
  });
}

void combine_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                    annotation::ReduceOp op, DType dtype) {
  Rect region = dst_rect.intersect(src_rect);
#define GS_COMBINE(T)                                                                             \
  return combine_op(static_cast<T*>(dst), dst_rect, static_cast<const T*>(src), src_rect, region, \
                    op)
  switch (dtype) {
    case DType::i8:
      GS_COMBINE(int8_t);
    case DType::i16:
      GS_COMBINE(int16_t);
    case DType::i32:
      GS_COMBINE(int32_t);
    case DType::i64:
      GS_COMBINE(int64_t);
    case DType::u8:
      GS_COMBINE(uint8_t);
    case DType::boolean:
      GS_COMBINE(uint8_t);
    case DType::u16:
      GS_COMBINE(uint16_t);
    case DType::u32:
      GS_COMBINE(uint32_t);
    case DType::u64:
      GS_COMBINE(uint64_t);
    case DType::f32:
      GS_COMBINE(float);
    case DType::f64:
      GS_COMBINE(double);
    case DType::f16:
      return combine_16<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), dst_rect,
                                                      static_cast<const uint16_t*>(src), src_rect,
                                                      region, op);
    case DType::bf16:
      return combine_16<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), dst_rect,
                                                      static_cast<const uint16_t*>(src), src_rect,
                                                      region, op);
  }
#undef GS_COMBINE
}

void narrow_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                   const Rect& region, DType dtype) {
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw Error(fmt::format("internal error: narrowing float32 to {}", dtype_name(dtype)));
  auto* d = static_cast<uint16_t*>(dst);
  auto* s = static_cast<const float*>(src);
  uint16_t (*round)(float) = dtype == DType::f16 ? float_to_half : float_to_bf16;
  for_each_run(dst_rect, src_rect, region, [&](int64_t doff, int64_t soff, int64_t n) {
    for (int64_t i = 0; i < n; ++i) d[doff + i] = round(s[soff + i]);
  });
}

}  // namespace gridspan::backend
