// The parts of string kernels (gridspan/array/kernels.hpp) that reduce.cpp shares: a parsed
// parameter list, and a reduction whose map, combine and post steps are user code.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "array/expr.hpp"
#include "gridspan/array/kernels.hpp"

namespace gridspan::array {

/// One parameter: `[raw] TYPE NAME`, TYPE a dtype or a placeholder.
struct KParam {
  std::string name;
  bool raw = false;
  bool fixed = false;
  DType dtype = DType::f32;  // when fixed
  std::string placeholder;   // else
};

}  // namespace gridspan::array

namespace gridspan::detail {
struct KernelSpec {
  std::string name;
  std::vector<array::KParam> in, out;
  std::string operation, preamble;
  // ReductionKernel's
  std::string map_expr, reduce_expr, post_map_expr, identity;
};
}  // namespace gridspan::detail

namespace gridspan::array {

using detail::KernelSpec;

/// A reduction whose steps are code: `code` defines gs_identity(), gs_reduce(a, b) and
/// gs_post(a) over the accumulator's register type, and `map` is the call giving an
/// element's value from the first level's steps (e.g. "gs_map(v0, v1)").
struct CustomReduce {
  std::string code;
  std::string map;
  DType acc = DType::f32;
  DType out = DType::f32;
};

/// Reduces `p`'s expression (its leaves, scalars and steps; shape p.shape) over `axis`
/// (detail::kAllAxes: every axis) with `r`'s steps, into a new array of dtype r.out.
std::shared_ptr<ArrayHandle> reduce_custom(const std::shared_ptr<runtime::Driver>& driver,
                                           const CustomReduce& r, const Program& p, int axis,
                                           bool keepdims);

}  // namespace gridspan::array
