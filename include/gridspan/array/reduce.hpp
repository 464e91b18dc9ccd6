// Reductions: over every axis (a 0-d array that stays on the device, as Cumo keeps scalars)
// or over one axis, with keepdims. An elementwise expression reduced is computed inside the
// reduction's first kernel. Integers sum in 64 bits, 16-bit floats accumulate in float32 and
// round once (prod does not widen), min and max propagate NaN, mean divides in the
// accumulator's type.
//
//   auto alpha = gs::sum(r * r) / gs::sum(p * ap);   // 0-d arrays; no host wait
//   auto rows = gs::max(gs::abs(a - b), 1);          // per row
#pragma once

#include "gridspan/array/elementwise.hpp"

namespace gridspan {

namespace detail {
enum class RedOp : uint8_t { sum, prod, min, max, any, all, count_nonzero, mean };
/// `axis` for a reduction over every axis.
inline constexpr int kAllAxes = 1 << 20;
/// The reduction of `a`, of dtype `result`, launched now (asynchronously).
std::shared_ptr<ArrayHandle> reduce(RedOp op, DType result, const std::shared_ptr<ArrayHandle>& a,
                                    int axis, bool keepdims);
/// NumPy's sum and prod dtype: integers widen to 64 bits, floats keep theirs.
constexpr DType sum_dtype(DType t) {
  if (is_float(t)) return t;
  return is_unsigned(t) ? DType::u64 : DType::i64;
}
/// mean's: integers give float64.
constexpr DType mean_dtype(DType t) {
  return is_float(t) ? t : DType::f64;
}
template <RedOp Op, DType D, class T>
Array<type_of_dtype_t<D>> reduce_array(const Array<T>& a, int axis, bool keepdims) {
  if (!a.valid()) throw_null_array();
  return Array<type_of_dtype_t<D>>(reduce(Op, D, a.shared(), axis, keepdims));
}
}  // namespace detail

#define GRIDSPAN_REDUCTION(name, op, dtype_expr)                                            \
  template <class T>                                                                        \
  auto name(const Array<T>& a) {                                                            \
    return detail::reduce_array<detail::RedOp::op, dtype_expr>(a, detail::kAllAxes, false); \
  }                                                                                         \
  template <class T>                                                                        \
  auto name(const Array<T>& a, int axis, bool keepdims = false) {                           \
    return detail::reduce_array<detail::RedOp::op, dtype_expr>(a, axis, keepdims);          \
  }
GRIDSPAN_REDUCTION(sum, sum, detail::sum_dtype(dtype_v<T>))
GRIDSPAN_REDUCTION(prod, prod, detail::sum_dtype(dtype_v<T>))
GRIDSPAN_REDUCTION(min, min, dtype_v<T>)
GRIDSPAN_REDUCTION(max, max, dtype_v<T>)
GRIDSPAN_REDUCTION(mean, mean, detail::mean_dtype(dtype_v<T>))
GRIDSPAN_REDUCTION(any, any, DType::boolean)
GRIDSPAN_REDUCTION(count_nonzero, count_nonzero, DType::i64)
#undef GRIDSPAN_REDUCTION

namespace detail {
/// var (or std with `root`): the mean of squared deviations from the mean, divided by the
/// count less `ddof`, computed in float32 for 16-bit floats (so squares never overflow
/// there) and rounded once to `result`.
std::shared_ptr<ArrayHandle> variance(DType result, const std::shared_ptr<ArrayHandle>& a, int axis,
                                      int ddof, bool keepdims, bool root);
}  // namespace detail

/// Variance over every axis (0-d) or one axis; integers give float64.
template <class T>
auto var(const Array<T>& a, int axis = detail::kAllAxes, int ddof = 0, bool keepdims = false) {
  constexpr DType D = detail::mean_dtype(dtype_v<T>);
  return Array<type_of_dtype_t<D>>(detail::variance(D, a.shared(), axis, ddof, keepdims, false));
}
/// Standard deviation: the square root of var, taken before rounding to a 16-bit type (so
/// float16 [2000, -2000, 1000, -1000] has an infinite var and a finite std).
template <class T>
auto std(const Array<T>& a, int axis = detail::kAllAxes, int ddof = 0, bool keepdims = false) {
  constexpr DType D = detail::mean_dtype(dtype_v<T>);
  return Array<type_of_dtype_t<D>>(detail::variance(D, a.shared(), axis, ddof, keepdims, true));
}

namespace detail {
/// The index of the first largest (`max`) or smallest element, NaN counting as the
/// largest and the smallest (NumPy's rule): over every axis, the element's row-major number.
std::shared_ptr<ArrayHandle> arg_reduce(bool max, const std::shared_ptr<ArrayHandle>& a, int axis,
                                        bool keepdims);
}  // namespace detail

/// The row-major index of the first maximum (a 0-d int64 array; the first NaN if any).
template <class T>
Array<int64_t> argmax(const Array<T>& a) {
  return Array<int64_t>(detail::arg_reduce(true, a.shared(), detail::kAllAxes, false));
}
/// Along one axis: per position of the other axes, the index of the first maximum.
template <class T>
Array<int64_t> argmax(const Array<T>& a, int axis, bool keepdims = false) {
  return Array<int64_t>(detail::arg_reduce(true, a.shared(), axis, keepdims));
}
template <class T>
Array<int64_t> argmin(const Array<T>& a) {
  return Array<int64_t>(detail::arg_reduce(false, a.shared(), detail::kAllAxes, false));
}
template <class T>
Array<int64_t> argmin(const Array<T>& a, int axis, bool keepdims = false) {
  return Array<int64_t>(detail::arg_reduce(false, a.shared(), axis, keepdims));
}

template <class T>
auto AllTag::operator()(const Array<T>& a) const {
  return detail::reduce_array<detail::RedOp::all, DType::boolean>(a, detail::kAllAxes, false);
}
template <class T>
auto AllTag::operator()(const Array<T>& a, int axis, bool keepdims) const {
  return detail::reduce_array<detail::RedOp::all, DType::boolean>(a, axis, keepdims);
}

}  // namespace gridspan
