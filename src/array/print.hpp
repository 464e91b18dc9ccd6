// Text of an array the way NumPy's str() prints it (array2string's default options), for
// printing gridspan arrays from host memory. Sits in the array layer; needs only core types.
#pragma once

#include <string>

#include "gridspan/core/dtype.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::array {

/// NumPy's str() of an array: `values` holds shape.volume() elements of `dtype`, row-major
/// (float16 and bfloat16 as their 16-bit patterns). Rank 0 to 3.
///
///   double v[6] = {0, 1, 2, 3, 4, 5};
///   format_array(v, DType::f64, Dim{2, 3});  // "[[0. 1. 2.]\n [3. 4. 5.]]"
std::string format_array(const void* values, DType dtype, const Dim& shape);

}  // namespace gridspan::array
