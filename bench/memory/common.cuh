// What the stand-alone memory measurements share: a millisecond clock and a driver call's
// check (each program is built alone with nvcc, see its first lines).
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  cuGetErrorString(r, &text);
  std::fprintf(stderr, "%s failed: %s\n", what, text ? text : "?");
  std::exit(1);
}

}  // namespace
