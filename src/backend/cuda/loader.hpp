// The CUDA driver API and NVRTC, loaded at run time with dlopen: one binary runs on machines
// with and without a GPU. Only src/backend/cuda/ includes this (it needs cuda.h).
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <string>

namespace gridspan::backend::cuda {

// Every driver entry point gridspan calls. cuda.h maps some names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2); the loader resolves the symbol the header names.
#define GRIDSPAN_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                               \
  X(cuDriverGetVersion)                   \
  X(cuGetErrorName)                       \
  X(cuGetErrorString)                     \
  X(cuDeviceGetCount)                     \
  X(cuDeviceGet)                          \
  X(cuDeviceGetName)                      \
  X(cuDeviceTotalMem)                     \
  X(cuDeviceGetAttribute)                 \
  X(cuDeviceCanAccessPeer)                \
  X(cuDevicePrimaryCtxRetain)             \
  X(cuDevicePrimaryCtxRelease)            \
  X(cuCtxSetCurrent)                      \
  X(cuCtxGetCurrent)                      \
  X(cuCtxEnablePeerAccess)                \
  X(cuMemGetInfo)                         \
  X(cuMemAlloc)                           \
  X(cuMemFree)                            \
  X(cuMemHostAlloc)                       \
  X(cuMemFreeHost)                        \
  X(cuMemHostRegister)                    \
  X(cuMemHostUnregister)                  \
  X(cuMemcpyAsync)                        \
  X(cuMemcpyHtoDAsync)                    \
  X(cuMemcpyDtoHAsync)                    \
  X(cuMemcpy2DAsync)                      \
  X(cuMemcpy3DAsync)                      \
  X(cuMemsetD8Async)                      \
  X(cuPointerGetAttribute)                \
  X(cuMemGetAddressRange)                 \
  X(cuIpcGetMemHandle)                    \
  X(cuIpcOpenMemHandle)                   \
  X(cuIpcCloseMemHandle)                  \
  X(cuStreamCreate)                       \
  X(cuStreamDestroy)                      \
  X(cuStreamSynchronize)                  \
  X(cuEventCreate)                        \
  X(cuEventDestroy)                       \
  X(cuEventRecord)                        \
  X(cuEventSynchronize)                   \
  X(cuEventQuery)                         \
  X(cuEventElapsedTime)                   \
  X(cuStreamWaitEvent)                    \
  X(cuModuleLoadData)                     \
  X(cuModuleUnload)                       \
  X(cuModuleGetFunction)                  \
  X(cuFuncGetAttribute)                   \
  X(cuLaunchKernel)

#define GRIDSPAN_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)                   \
  X(nvrtcGetErrorString)            \
  X(nvrtcCreateProgram)             \
  X(nvrtcDestroyProgram)            \
  X(nvrtcCompileProgram)            \
  X(nvrtcGetProgramLogSize)         \
  X(nvrtcGetProgramLog)             \
  X(nvrtcGetCUBINSize)              \
  X(nvrtcGetCUBIN)

struct DriverApi {
#define GRIDSPAN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  GRIDSPAN_CUDA_DRIVER_FUNCTIONS(GRIDSPAN_DECLARE)
};

struct NvrtcApi {
  GRIDSPAN_NVRTC_FUNCTIONS(GRIDSPAN_DECLARE)
#undef GRIDSPAN_DECLARE
};

/// The driver, loaded and initialised once per process; null with `why` filled when there
/// is no driver, no GPU, or the driver is too old for this build.
const DriverApi* driver(std::string& why);
/// NVRTC, loaded once per process; null with `why` filled when it cannot be found.
const NvrtcApi* nvrtc(std::string& why);

/// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".
std::string describe(CUresult r);

/// One driver call's result and where it was made, the one funnel for CUDA errors (Realm's
/// CHECK_CU): `GRIDSPAN_CU(api_.cuStreamCreate(&s, 0))` records the call as written, its
/// file and line; `check(where)` throws a DeviceError naming them, the device and CUDA's
/// error name and text unless the call succeeded.
///   GRIDSPAN_CHECK_CU(api_.cuMemAlloc(&p, bytes), name_);
struct CuCall {
  CUresult result;
  const char* text;  // the call as written
  const char* file;
  int line;
  bool ok() const { return result == CUDA_SUCCESS; }
  /// "cuMemAlloc(&p, bytes) failed on cuda:0 (...): CUDA_ERROR_...: ... (backend/cuda/x.cpp:12)"
  std::string message(const std::string& where) const;
  void check(const std::string& where) const;
};

}  // namespace gridspan::backend::cuda

#define GRIDSPAN_CU(call) (::gridspan::backend::cuda::CuCall{(call), #call, __FILE__, __LINE__})
// Stringized here, not through GRIDSPAN_CU: an argument passed on is macro-expanded first
// (cuda.h maps cuMemAlloc to cuMemAlloc_v2), and the message should show the call as written.
#define GRIDSPAN_CHECK_CU(call, where) \
  (::gridspan::backend::cuda::CuCall{(call), #call, __FILE__, __LINE__}.check(where))

namespace gridspan::backend::cuda {}  // namespace gridspan::backend::cuda
