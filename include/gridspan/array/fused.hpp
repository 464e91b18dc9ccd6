// Cumo's fused row operations: each normalises along the last axis in one kernel (one block
// per row on a GPU, rows kept whole on one device), accumulating in float32 whatever the
// dtype (float64 for double). Written out of the operators they take nine, six, five and
// six launches.
//
//   auto y = gs::layer_norm(x, gamma, beta);   // (x - mean) / sqrt(var + eps) * gamma + beta
//   auto z = gs::rms_norm(x, gamma);           // x / sqrt(mean(x * x) + eps) * gamma
//   auto p = gs::softmax(scores);              // exp(x - max) / sum(exp(x - max))
//   auto [xq, scale] = gs::quantize_symmetric(x);  // int8 rows and max|x| / 127 per row
//
// The variance and the mean square divide by the row length (not one less). gamma and beta
// must be 1-D, as long as the last axis and of x's dtype. An elementwise expression handed
// in is computed inside the kernel, and a view is read where it lies. (The activations,
// gelu, gelu_tanh, silu, sigmoid and softplus, are elementwise: elementwise.hpp.)
#pragma once

#include <utility>

#include "gridspan/array/elementwise.hpp"

namespace gridspan {

namespace detail {
enum class RowOp : uint8_t { softmax, layer_norm, rms_norm };
/// One launch of `op` over the rows of `x`; gamma and beta may be null where `op` takes none.
std::shared_ptr<ArrayHandle> row_op(RowOp op, const std::shared_ptr<ArrayHandle>& x,
                                    const std::shared_ptr<ArrayHandle>& gamma,
                                    const std::shared_ptr<ArrayHandle>& beta, double eps);
/// quantize_symmetric's int8 array and its scales, in one launch.
std::pair<std::shared_ptr<ArrayHandle>, std::shared_ptr<ArrayHandle>> quantize_symmetric(
    const std::shared_ptr<ArrayHandle>& x);
/// The dtype quantize_symmetric's scales have: float32 for 16-bit floats, x's own otherwise.
constexpr DType quantize_scale_dtype(DType x) {
  return is_16bit_float(x) ? DType::f32 : x;
}
template <class T>
std::shared_ptr<ArrayHandle> shared_of(const Array<T>& a) {
  if (!a.valid()) throw_null_array();
  return a.shared();
}
}  // namespace detail

/// exp(x - max) / sum(exp(x - max)) along the last axis: a row masked with -inf answers
/// zeros where masked; a row that is all -inf answers NaN, as the written-out form.
template <class T>
Array<T> softmax(const Array<T>& x) {
  return Array<T>(detail::row_op(detail::RowOp::softmax, detail::shared_of(x), nullptr, nullptr, 0));
}

/// (x - mean) / sqrt(var + eps) * gamma + beta along the last axis.
template <class T, class G, class B>
Array<T> layer_norm(const Array<T>& x, const Array<G>& gamma, const Array<B>& beta,
                    double eps = 1e-5) {
  return Array<T>(detail::row_op(detail::RowOp::layer_norm, detail::shared_of(x),
                                 detail::shared_of(gamma), detail::shared_of(beta), eps));
}

/// x / sqrt(mean(x * x) + eps) * gamma along the last axis (layer_norm without centring).
template <class T, class G>
Array<T> rms_norm(const Array<T>& x, const Array<G>& gamma, double eps = 1e-5) {
  return Array<T>(detail::row_op(detail::RowOp::rms_norm, detail::shared_of(x),
                                 detail::shared_of(gamma), nullptr, eps));
}

/// Per row scale = max|x| / 127 (x's shape without its last axis) and xq = round(x / scale)
/// as int8, ties away from zero: xq * scale[..., newaxis] is what the row stood for. A row
/// of zeros answers a zero scale and zeros; a row holding inf or NaN answers that in its
/// scale and zeros in the row. An integer x is a gs::Error.
template <class T>
auto quantize_symmetric(const Array<T>& x) {
  using S = type_of_dtype_t<detail::quantize_scale_dtype(dtype_v<T>)>;
  auto [q, s] = detail::quantize_symmetric(detail::shared_of(x));
  return std::pair<Array<int8_t>, Array<S>>(Array<int8_t>(q), Array<S>(s));
}

}  // namespace gridspan
