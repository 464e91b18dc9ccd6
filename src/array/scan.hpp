// What tests see of scans (scan.cpp) beyond the public API: the cuda backend's geometry on
// any backend, so its block-scanned segments (shared memory and barriers) run on the cpu
// backend's fibers too, and the kernels generated, so their source can be compiled for CUDA
// without a GPU.
#pragma once

#include <vector>

#include "gridspan/api/kernel.hpp"

namespace gridspan::array {

struct ScanTestHooks {
  bool gpu_geometry = false;         // plan every scan as for the cuda backend
  int64_t block_line = 0;            // with it, the shortest line scanned by blocks (0: usual)
  std::vector<KernelDef> generated;  // each scan kernel compiled while installed
};
/// Installs `hooks` for every scan until it is called with null. Tests only, one at a time.
void set_scan_test_hooks(ScanTestHooks* hooks);

}  // namespace gridspan::array
