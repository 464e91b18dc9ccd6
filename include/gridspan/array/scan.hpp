// Cumulative sums and products, NumPy's cumsum and cumprod: along one axis (the result has
// the input's shape; a negative axis counts from the end) or over the array flattened in
// row-major order (a 1-D result). bool and integers accumulate in 64 bits (uint64 for
// unsigned), floats keep their dtype; float16 and bfloat16 cumsum accumulates in float32 and
// rounds each element once, cumprod rounds every product. An elementwise expression is
// computed inside the scan's kernels; each device scans the chunks it holds, in a fixed order.
//
//   auto running = gs::cumsum(a * b);   // 1-D, a.size() elements
//   auto rows = gs::cumprod(m, -1);     // along each row
#pragma once

#include "gridspan/array/reduce.hpp"

namespace gridspan {

namespace detail {
enum class ScanOp : uint8_t { sum, prod };
/// The scan of `a` along `axis` (kAllAxes: flattened), of dtype `result`, launched now
/// (asynchronously). Throws gs::Error when the axis is out of range.
std::shared_ptr<ArrayHandle> scan(ScanOp op, DType result, const std::shared_ptr<ArrayHandle>& a,
                                  int axis);
template <ScanOp Op, class T>
auto scan_array(const Array<T>& a, int axis) {
  if (!a.valid()) throw_null_array();
  constexpr DType D = sum_dtype(dtype_v<T>);
  return Array<type_of_dtype_t<D>>(scan(Op, D, a.shared(), axis));
}
}  // namespace detail

/// The running sum of the flattened array (1-D), or along `axis`.
template <class T>
auto cumsum(const Array<T>& a) {
  return detail::scan_array<detail::ScanOp::sum>(a, detail::kAllAxes);
}
template <class T>
auto cumsum(const Array<T>& a, int axis) {
  return detail::scan_array<detail::ScanOp::sum>(a, axis);
}
/// The running product of the flattened array (1-D), or along `axis`.
template <class T>
auto cumprod(const Array<T>& a) {
  return detail::scan_array<detail::ScanOp::prod>(a, detail::kAllAxes);
}
template <class T>
auto cumprod(const Array<T>& a, int axis) {
  return detail::scan_array<detail::ScanOp::prod>(a, axis);
}

}  // namespace gridspan
