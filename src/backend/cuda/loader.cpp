// dlopen of libcuda.so.1 and libnvrtc, once per process.
#include "backend/cuda/loader.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

#define GRIDSPAN_STR2(x) #x
#define GRIDSPAN_STR(x) GRIDSPAN_STR2(x)  // expands cuda.h's renames first

namespace gridspan::backend::cuda {
namespace {

void* open_first(const std::vector<std::string>& names, std::string& tried) {
  for (const auto& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", n, e ? e : "not found");
  }
  return nullptr;
}

struct DriverState {
  DriverApi api;
  std::string why;
  bool ok = false;
};

DriverState load_driver() {
  DriverState s;
  std::string tried;
  void* lib = open_first({"libcuda.so.1", "libcuda.so"}, tried);
  if (!lib) {
    s.why = fmt::format("the CUDA driver library could not be loaded: {}", tried);
    return s;
  }
  std::string missing;
#define GRIDSPAN_LOAD(fn)                                                        \
  s.api.fn = reinterpret_cast<decltype(s.api.fn)>(dlsym(lib, GRIDSPAN_STR(fn))); \
  if (!s.api.fn) missing += std::string(missing.empty() ? "" : ", ") + GRIDSPAN_STR(fn);
  GRIDSPAN_CUDA_DRIVER_FUNCTIONS(GRIDSPAN_LOAD)
  if (!missing.empty()) {
    s.why = fmt::format(
        "the CUDA driver is too old for this build (it lacks {}); update the driver", missing);
    return s;
  }
  int version = 0;
  s.api.cuDriverGetVersion(&version);
  if (version < CUDA_VERSION) {
    s.why = fmt::format(
        "the CUDA driver supports CUDA {}.{}, this build needs {}.{}; update the driver",
        version / 1000, version % 1000 / 10, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return s;
  }
  CUresult r = s.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    s.api.cuGetErrorName(r, &name);
    s.why = fmt::format("cuInit failed: {}", name ? name : "unknown error");
    return s;
  }
  int count = 0;
  s.api.cuDeviceGetCount(&count);
  if (count == 0) {
    s.why = "the CUDA driver sees no GPU";
    return s;
  }
  s.ok = true;
  return s;
}

struct NvrtcState {
  NvrtcApi api;
  std::string why;
  bool ok = false;
};

NvrtcState load_nvrtc() {
  NvrtcState s;
  std::string tried;
  std::vector<std::string> names = {
      fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000),
      "libnvrtc.so",
#ifdef GRIDSPAN_CUDA_LIBDIR
      fmt::format("{}/libnvrtc.so.{}", GRIDSPAN_CUDA_LIBDIR, CUDA_VERSION / 1000),
#endif
  };
  void* lib = open_first(names, tried);
  if (!lib) {
    s.why = fmt::format("NVRTC could not be loaded: {}; install the CUDA toolkit's NVRTC", tried);
    return s;
  }
  std::string missing;
  GRIDSPAN_NVRTC_FUNCTIONS(GRIDSPAN_LOAD)
#undef GRIDSPAN_LOAD
  if (!missing.empty()) {
    s.why = fmt::format("the NVRTC found lacks {}", missing);
    return s;
  }
  s.ok = true;
  return s;
}

}  // namespace

const DriverApi* driver(std::string& why) {
  static const DriverState state = load_driver();
  why = state.why;
  return state.ok ? &state.api : nullptr;
}

const NvrtcApi* nvrtc(std::string& why) {
  static const NvrtcState state = load_nvrtc();
  why = state.why;
  return state.ok ? &state.api : nullptr;
}

std::string describe(CUresult r) {
  std::string why;
  const DriverApi* api = driver(why);
  const char* name = nullptr;
  const char* text = nullptr;
  if (api) {
    api->cuGetErrorName(r, &name);
    api->cuGetErrorString(r, &text);
  }
  return fmt::format("{}: {}", name ? name : fmt::format("CUDA error {}", int(r)),
                     text ? text : "no description");
}

std::string CuCall::message(const std::string& where) const {
  std::string call = text;
  for (const char* prefix : {"api_.", "api.", "api->", "api_->"})
    if (call.rfind(prefix, 0) == 0) call = call.substr(std::strlen(prefix));
  std::string at = file;
  if (const auto src = at.rfind("/src/"); src != std::string::npos) at = at.substr(src + 5);
  return fmt::format("{} failed on {}: {} ({}:{})", call, where, describe(result), at, line);
}

void CuCall::check(const std::string& where) const {
  if (!ok()) throw DeviceError(message(where));
}

}  // namespace gridspan::backend::cuda
