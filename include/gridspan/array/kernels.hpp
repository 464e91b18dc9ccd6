// Kernels from strings, with CuPy's and Cumo's semantics: the parameters are declared as
// "T x, float32 y, raw T z" (a NumPy dtype name, or a placeholder such as T resolved from
// the arguments' dtypes: the outputs' first, then the inputs'; one that only a scalar
// reaches is int64 or float64), the operation is C++ over those names, run once per element
// of the broadcast inputs. `raw` parameters are whole arrays indexed by element number (`i`
// is the element's, `_ind.size()` the count). Inputs are const. A kernel compiles once per
// set of dtypes; 16-bit floats are seen as float inside and rounded once when stored.
//
//   gs::ElementwiseKernel sq("T x, T y", "T z", "z = (x - y) * (x - y)", "squared_diff");
//   gs::Array<float> z = sq(x, y);   // z allocated; sq(x, y, z) writes a given z
//   gs::ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
//   gs::Array<float> n = l2(x);      // every axis: 0-d; l2(x, 1) per row; l2(x, 1, true)
#pragma once

#include <string>
#include <vector>

#include "gridspan/array/elementwise.hpp"

namespace gridspan {

namespace detail {
struct KernelSpec;
/// One argument of a string kernel's call: an array or a scalar (`integral` when a C++
/// integer that may be a reduction's axis, `boolean` when a bool that may be keepdims).
struct KernelArg {
  EwArg arg;
  bool integral = false;
  bool boolean = false;
};
template <class A>
KernelArg kernel_arg(const A& a) {
  KernelArg k;
  k.arg = ew_arg(a);
  if constexpr (!is_array<A>::value) {
    k.boolean = std::is_same_v<A, bool>;
    k.integral = std::is_integral_v<A> && !k.boolean;
  }
  return k;
}
}  // namespace detail

/// What a string kernel answers: its outputs, converted to the Array<T> of their dtype
/// (another T is a gs::Error).
class KernelOutputs {
 public:
  explicit KernelOutputs(std::vector<std::shared_ptr<detail::ArrayHandle>> outs)
      : outs_(std::move(outs)) {}
  std::size_t size() const { return outs_.size(); }
  DType dtype(std::size_t i) const;
  /// Output `i` as an Array<T>.
  template <class T>
  Array<T> get(std::size_t i) const {
    check(i, dtype_v<T>);
    return Array<T>(outs_[i]);
  }
  /// The only output.
  template <class T>
  operator Array<T>() const {
    check(0, dtype_v<T>, true);
    return Array<T>(outs_[0]);
  }

 private:
  void check(std::size_t i, DType want, bool only = false) const;
  std::vector<std::shared_ptr<detail::ArrayHandle>> outs_;
};

class ElementwiseKernel {
 public:
  /// Parses the parameters (a gs::Error says what is wrong); compiles at the first call.
  ElementwiseKernel(const std::string& in_params, const std::string& out_params,
                    const std::string& operation, const std::string& name = "kernel",
                    const std::string& preamble = "");
  /// The inputs, then optionally every output (else allocated with the broadcast shape).
  template <class... A>
  KernelOutputs operator()(const A&... args) const {
    return call({detail::kernel_arg(args)...});
  }
  KernelOutputs call(const std::vector<detail::KernelArg>& args) const;

 private:
  std::shared_ptr<const detail::KernelSpec> spec_;
};

class ReductionKernel {
 public:
  /// `map_expr` over the inputs gives each element's value, `reduce_expr` combines two (a
  /// and b), `post_map_expr` sets the output from the result (a), `identity` starts it. The
  /// values are combined in the output's dtype.
  ReductionKernel(const std::string& in_params, const std::string& out_params,
                  const std::string& map_expr, const std::string& reduce_expr,
                  const std::string& post_map_expr, const std::string& identity,
                  const std::string& name = "reduce_kernel", const std::string& preamble = "");
  /// The inputs, then optionally an axis (an integer, negative from the end; none: every
  /// axis, a 0-d result) and keepdims (a bool), as gs::sum.
  template <class... A>
  KernelOutputs operator()(const A&... args) const {
    return call({detail::kernel_arg(args)...});
  }
  KernelOutputs call(const std::vector<detail::KernelArg>& args) const;

 private:
  std::shared_ptr<const detail::KernelSpec> spec_;
};

}  // namespace gridspan
