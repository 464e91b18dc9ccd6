// Making arrays: zeros, ones, empty, full (the distribution optional: without one the
// library spreads rows over every device), and arange and linspace as lazy expressions of
// the element index, so they fuse with what uses them.
//
//   auto a = gs::zeros<float>(ctx, {1000, 3});
//   auto x = gs::linspace<double>(ctx, 0.0, 1.0, 101);
#pragma once

#include "gridspan/api/context.hpp"
#include "gridspan/array/elementwise.hpp"

namespace gridspan {

template <class T>
Array<T> full(Context& ctx, Dim shape, T value, const DataDistribution& dist) {
  return ctx.full<T>(shape, value, dist);
}
template <class T>
Array<T> full(Context& ctx, Dim shape, T value) {
  return full<T>(ctx, shape, value,
                 detail::default_distribution(detail::context_driver(ctx), dtype_v<T>, shape));
}
template <class T>
Array<T> zeros(Context& ctx, Dim shape, const DataDistribution& dist) {
  return full<T>(ctx, shape, T(0), dist);
}
template <class T>
Array<T> zeros(Context& ctx, Dim shape) {
  return full<T>(ctx, shape, T(0));
}
template <class T>
Array<T> ones(Context& ctx, Dim shape, const DataDistribution& dist) {
  return full<T>(ctx, shape, T(1), dist);
}
template <class T>
Array<T> ones(Context& ctx, Dim shape) {
  return full<T>(ctx, shape, T(1));
}
/// An array whose elements are not set (whatever its memory held).
template <class T>
Array<T> empty(Context& ctx, Dim shape, const DataDistribution& dist) {
  return ctx.empty<T>(shape, dist);
}
template <class T>
Array<T> empty(Context& ctx, Dim shape) {
  return ctx.empty<T>(shape,
                      detail::default_distribution(detail::context_driver(ctx), dtype_v<T>, shape));
}

namespace detail {
/// The pending 1-d array start + i * step for i in [0, n), of `dtype`; with `last`, element
/// n - 1 is `stop` exactly (linspace's endpoint).
std::shared_ptr<ArrayHandle> index_sequence(const std::shared_ptr<runtime::Driver>& driver,
                                            DType dtype, int64_t n, double start, double step,
                                            bool last, double stop);
int64_t arange_length(double start, double stop, double step);
}  // namespace detail

/// 0, 1, ..., n - 1.
template <class T>
Array<T> arange(Context& ctx, int64_t n) {
  return Array<T>(
      detail::index_sequence(detail::context_driver(ctx), dtype_v<T>, n, 0, 1, false, 0));
}
/// start, start + step, ... up to but excluding stop (NumPy's length ceil((stop - start) /
/// step)); step 0 is a gs::Error.
template <class T>
Array<T> arange(Context& ctx, double start, double stop, double step = 1) {
  const int64_t n = detail::arange_length(start, stop, step);
  return Array<T>(
      detail::index_sequence(detail::context_driver(ctx), dtype_v<T>, n, start, step, false, 0));
}
/// n values from a to b inclusive, evenly spaced (b exactly the last).
template <class T>
Array<T> linspace(Context& ctx, double a, double b, int64_t n) {
  const double step = n > 1 ? (b - a) / static_cast<double>(n - 1) : 0.0;
  return Array<T>(
      detail::index_sequence(detail::context_driver(ctx), dtype_v<T>, n, a, step, n > 0, b));
}

namespace detail {
std::shared_ptr<ArrayHandle> random_array(const std::shared_ptr<runtime::Driver>& driver,
                                          DType dtype, const Dim& shape, bool normal, uint64_t seed,
                                          double lo, double hi);
}  // namespace detail

namespace random {
/// Uniform numbers in [lo, hi) (it may round to hi). Element i (row-major) depends only on
/// (seed, i): the same on any devices and backends (Philox4x32-10, counter-based).
template <class T>
Array<T> uniform(Context& ctx, Dim shape, uint64_t seed, double lo = 0.0, double hi = 1.0) {
  static_assert(detail::is_float(dtype_v<T>), "random::uniform makes floating-point arrays");
  return Array<T>(
      detail::random_array(detail::context_driver(ctx), dtype_v<T>, shape, false, seed, lo, hi));
}
/// Standard normal numbers (Box-Muller on the same counter), element i depending only on
/// (seed, i).
template <class T>
Array<T> normal(Context& ctx, Dim shape, uint64_t seed) {
  static_assert(detail::is_float(dtype_v<T>), "random::normal makes floating-point arrays");
  return Array<T>(
      detail::random_array(detail::context_driver(ctx), dtype_v<T>, shape, true, seed, 0, 1));
}
}  // namespace random

}  // namespace gridspan
