// gs::ParamInfo: one parameter of a kernel or native function, as gridspan reads it from
// the kernel's own signature (or from a NativeDef's function type).
//
//   for (const gs::ParamInfo& p : kernel.params()) fmt::print("{} {}\n", p.type_text, p.name);
#pragma once

#include <string>

#include "gridspan/core/dtype.hpp"

namespace gridspan {

struct ParamInfo {
  std::string name;
  bool is_array = false;  // a view; otherwise a scalar passed by value
  int rank = 0;           // 0 Scalar, 1 Vector, 2 Matrix, 3 Tensor (arrays only)
  bool is_const = false;  // read-only view
  DType dtype = DType::f32;
  std::string type_text;  // as written, for messages and generated code
};

}  // namespace gridspan
