// Matrix products on BLAS, per chunk: cuBLAS on GPUs, the CPU BLAS (OpenBLAS) on cpu devices,
// both loaded at run time. The rows of C follow the rows of A over the devices; B is read
// whole by each (copied once to every device that needs it). A transposed operand (a view)
// goes to BLAS with its transpose flag set, not copied. float16 and bfloat16 run on tensor
// cores accumulating in float32 and are stored back as 16-bit; float32 does not use TF32
// unless GRIDSPAN_ALLOW_TF32 is on.
//
//   auto c = gs::matmul(a, b);                 // (M, K) x (K, N)
//   auto d = gs::gemm(a, b, 0.5, 1.0, c);      // 0.5 a b + 1.0 c, a new array
#pragma once

#include "gridspan/array/elementwise.hpp"

namespace gridspan {

namespace detail {
/// alpha a b + beta c (c null: beta ignored), 2-D operands of one floating dtype.
std::shared_ptr<ArrayHandle> gemm(const std::shared_ptr<ArrayHandle>& a,
                                  const std::shared_ptr<ArrayHandle>& b, double alpha, double beta,
                                  const std::shared_ptr<ArrayHandle>& c);
/// NumPy's matmul of 1-D and 2-D operands (a 1-D a is a row, a 1-D b a column, and the
/// axis they add is dropped from the result). `what` names the call in errors.
std::shared_ptr<ArrayHandle> matmul(const std::shared_ptr<ArrayHandle>& a,
                                    const std::shared_ptr<ArrayHandle>& b, const char* what);
/// NumPy's inner: a sum over the last axes of both (a b^T for matrices).
std::shared_ptr<ArrayHandle> inner(const std::shared_ptr<ArrayHandle>& a,
                                   const std::shared_ptr<ArrayHandle>& b);
}  // namespace detail

/// NumPy's matmul: 2-D a (M, K) by b (K, N) gives (M, N); a 1-D a is a row and a 1-D b a
/// column, whose axis the result drops (two vectors give a 0-d array). The promoted dtype.
template <class A, class B>
auto matmul(const Array<A>& a, const Array<B>& b) {
  using R = type_of_dtype_t<promote(dtype_v<A>, dtype_v<B>)>;
  return Array<R>(detail::matmul(a.shared(), b.shared(), "matmul"));
}
/// NumPy's dot for operands of at most 2 axes: the same as matmul.
template <class A, class B>
auto dot(const Array<A>& a, const Array<B>& b) {
  using R = type_of_dtype_t<promote(dtype_v<A>, dtype_v<B>)>;
  return Array<R>(detail::matmul(a.shared(), b.shared(), "dot"));
}
/// NumPy's inner: the sum over both last axes (a b^T for matrices, b's transpose by flag).
template <class A, class B>
auto inner(const Array<A>& a, const Array<B>& b) {
  using R = type_of_dtype_t<promote(dtype_v<A>, dtype_v<B>)>;
  return Array<R>(detail::inner(a.shared(), b.shared()));
}

/// alpha a b (Cumo's gemm): the product scaled before it is stored, so that a 16-bit product
/// whose true value passes the type's range can still be kept.
template <class T>
Array<T> gemm(const Array<T>& a, const Array<T>& b, double alpha) {
  return Array<T>(detail::gemm(a.shared(), b.shared(), alpha, 0.0, nullptr));
}
/// alpha a b + beta c, into a new array (c is not written).
template <class T>
Array<T> gemm(const Array<T>& a, const Array<T>& b, double alpha, double beta, const Array<T>& c) {
  return Array<T>(detail::gemm(a.shared(), b.shared(), alpha, beta, c.shared()));
}

}  // namespace gridspan
