// What tests see of the row kernels (rows.cpp) beyond the public API: the cuda backend's
// geometry on any backend (blocks of many threads, rows in registers, run on the cpu
// backend's fibers), and the kernels generated, so that NVRTC can compile them without a GPU.
#pragma once

#include <vector>

#include "gridspan/api/kernel.hpp"

namespace gridspan::array {

struct RowTestHooks {
  bool gpu_geometry = false;         // plan every row kernel as for the cuda backend
  std::vector<KernelDef> generated;  // each row kernel compiled while installed
};
/// Installs `hooks` for every row kernel until it is called with null. Tests only.
void set_row_test_hooks(RowTestHooks* hooks);

/// Every 2-D matrix product (linalg.cpp) goes over tiles of C in `panels` panels of k
/// (SUMMA), as the library chooses for a B too large to copy to every device; 0: the
/// library's choice again. Tests only.
void set_summa_panels_for_tests(int panels);

}  // namespace gridspan::array
