// A stray access in an unchecked cpu kernel is a segmentation fault that ends the process.
// Before it does, the fault report says which kernel and superblock were running on the
// faulting thread and that GRIDSPAN_CHECK=1 finds the access; then the fault goes on to the
// handler that was there before (the default one: the process dies of the signal as ever).
#pragma once

#include <cstdint>

#include "gridspan/device/abi.h"

namespace gridspan::backend::cpu {

/// Marks the calling thread as running `kernel`'s superblock `launch` on `device` while it
/// lives (scopes nest: a superblock spread over threads marks each piece's thread).
class RunningKernel {
 public:
  RunningKernel(const char* kernel, int device, const GsLaunch& launch) noexcept;
  ~RunningKernel();
  RunningKernel(const RunningKernel&) = delete;
  RunningKernel& operator=(const RunningKernel&) = delete;

  const char* kernel;
  int device;
  int64_t lo[3], hi[3];

 private:
  const RunningKernel* outer_;
};

/// Installs the report for SIGSEGV and SIGBUS, once per process.
void install_fault_report();

}  // namespace gridspan::backend::cpu
