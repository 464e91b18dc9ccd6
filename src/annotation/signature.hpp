// Reads a kernel's parameters from its own `__device__` signature: the first parameter is
// `dim3 blockIdx`, then scalars (integer and floating types) and array views
// (`gridspan::Scalar/Vector/Matrix/Tensor<T>`, `const` = read-only).
#pragma once

#include <string>
#include <vector>

#include "gridspan/core/dtype.hpp"
#include "gridspan/core/param.hpp"

namespace gridspan::annotation {

/// Finds `function` in `source` and returns its parameters after `dim3 blockIdx`.
/// Throws CompileError (quoting the signature) when the function is missing, its first
/// parameter is not `dim3`, or a parameter's type is not one gridspan can pass.
std::vector<ParamInfo> parse_signature(const std::string& source, const std::string& function);

}  // namespace gridspan::annotation
