// The array library's type rules: NumPy's promotion for the standard dtypes, Cumo's for the
// 16-bit floats, and NumPy 2's weak scalars (a C++ scalar's kind can promote an array, its
// width does not). Written once as constexpr functions on DType, used by the operators'
// return types at compile time and by kernels from strings at run time.
//
//   static_assert(gs::promote(gs::DType::i32, gs::DType::f32) == gs::DType::f64);
#pragma once

#include <cstdint>

#include "gridspan/core/dtype.hpp"

namespace gridspan {

/// The kind of a C++ scalar mixed with an array.
enum class ScalarKind : uint8_t { boolean, integer, floating };

namespace detail {
constexpr int dtype_bytes(DType t) {
  return static_cast<int>(dtype_size(t));
}
constexpr bool is_unsigned(DType t) {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}
constexpr bool is_signed_int(DType t) {
  return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64;
}
constexpr bool is_float(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}
constexpr bool is_16bit_float(DType t) {
  return t == DType::f16 || t == DType::bf16;
}
constexpr DType signed_of_bytes(int bytes) {
  return bytes == 1 ? DType::i8 : bytes == 2 ? DType::i16 : bytes == 4 ? DType::i32 : DType::i64;
}
constexpr DType unsigned_of_bytes(int bytes) {
  return bytes == 1 ? DType::u8 : bytes == 2 ? DType::u16 : bytes == 4 ? DType::u32 : DType::u64;
}
// Integers of both signs: the signed type wide enough for both, float64 past 64 bits.
constexpr DType promote_mixed_sign(DType s, DType u) {
  if (dtype_bytes(u) < dtype_bytes(s)) return s;
  return dtype_bytes(u) == 8 ? DType::f64 : signed_of_bytes(2 * dtype_bytes(u));
}
constexpr DType promote_int_float(DType i, DType f) {
  if (is_16bit_float(f) || f == DType::f64) return f;  // Cumo: 16-bit floats stay 16-bit
  return dtype_bytes(i) <= 2 ? DType::f32 : DType::f64;
}
constexpr DType promote_floats(DType a, DType b) {
  if (is_16bit_float(a) && is_16bit_float(b)) return DType::f32;  // float16 with bfloat16
  return dtype_bytes(a) >= dtype_bytes(b) ? a : b;
}
}  // namespace detail

/// The dtype two arrays promote to (NumPy's table; float16 and bfloat16 stay 16-bit with
/// integers, and float16 with bfloat16 gives float32).
constexpr DType promote(DType a, DType b) {
  using namespace detail;
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  if (is_float(a) && is_float(b)) return promote_floats(a, b);
  if (is_float(a)) return promote_int_float(b, a);
  if (is_float(b)) return promote_int_float(a, b);
  if (is_unsigned(a) == is_unsigned(b)) return dtype_bytes(a) >= dtype_bytes(b) ? a : b;
  return is_unsigned(a) ? promote_mixed_sign(b, a) : promote_mixed_sign(a, b);
}

/// The dtype an array of `a` and a scalar of kind `k` promote to: a float scalar makes an
/// integer array float64, an integer scalar makes a bool array int64; otherwise the array's.
constexpr DType promote_scalar(DType a, ScalarKind k) {
  if (k == ScalarKind::floating && !detail::is_float(a)) return DType::f64;
  if (k == ScalarKind::integer && a == DType::boolean) return DType::i64;
  return a;
}

/// The floating dtype a math function (sqrt, exp, ...) answers for `a`: floats keep theirs,
/// integers take the smallest float that holds them (NumPy: int8 -> float16, int16 ->
/// float32, wider -> float64).
constexpr DType float_result(DType a) {
  if (detail::is_float(a)) return a;
  const int bytes = detail::dtype_bytes(a);
  return bytes == 1 ? DType::f16 : bytes == 2 ? DType::f32 : DType::f64;
}

/// True division's dtype: integers divide as float64.
constexpr DType divide_result(DType a, DType b) {
  const DType p = promote(a, b);
  return detail::is_float(p) ? p : DType::f64;
}

/// The kind of a C++ scalar type.
template <class S>
constexpr ScalarKind scalar_kind() {
  if constexpr (std::is_same_v<S, bool>)
    return ScalarKind::boolean;
  else if constexpr (std::is_integral_v<S>)
    return ScalarKind::integer;
  else
    return ScalarKind::floating;
}

/// The C++ type of a dtype (int64 is int64_t).
template <DType D>
struct type_of_dtype;
#define GRIDSPAN_TYPE_OF(D, T)     \
  template <>                      \
  struct type_of_dtype<DType::D> { \
    using type = T;                \
  };
GRIDSPAN_TYPE_OF(i8, int8_t)
GRIDSPAN_TYPE_OF(i16, int16_t)
GRIDSPAN_TYPE_OF(i32, int32_t)
GRIDSPAN_TYPE_OF(i64, int64_t)
GRIDSPAN_TYPE_OF(u8, uint8_t)
GRIDSPAN_TYPE_OF(u16, uint16_t)
GRIDSPAN_TYPE_OF(u32, uint32_t)
GRIDSPAN_TYPE_OF(u64, uint64_t)
GRIDSPAN_TYPE_OF(f16, float16)
GRIDSPAN_TYPE_OF(bf16, bfloat16)
GRIDSPAN_TYPE_OF(f32, float)
GRIDSPAN_TYPE_OF(f64, double)
GRIDSPAN_TYPE_OF(boolean, bool)
#undef GRIDSPAN_TYPE_OF
template <DType D>
using type_of_dtype_t = typename type_of_dtype<D>::type;

}  // namespace gridspan
