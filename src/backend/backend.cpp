// make_backend: the backend GRIDSPAN_BACKEND names, or the best one present ("auto").
#include <atomic>

#include <fmt/format.h>

#include "backend/device.hpp"
#include "core/log.hpp"
#include "gridspan/core/error.hpp"

#if GRIDSPAN_HAVE_CUDA
#include "backend/cuda/cuda.hpp"
#endif

namespace gridspan::backend {

void Device::copy_lent(void*, const Rect&, const std::vector<unsigned char>&, const Rect&,
                       const Rect&, std::size_t) {
  throw LendingError(fmt::format("{} cannot reach the memory of another process", name()));
}

std::unique_ptr<Backend> make_backend(const Config& config) {
  if (config.backend == "cpu") return make_cpu_backend(config);
  if (config.backend != "auto" && config.backend != "cuda")
    throw ConfigError(fmt::format("backend '{}' is not one of auto, cuda, cpu (GRIDSPAN_BACKEND)",
                                  config.backend));
#if GRIDSPAN_HAVE_CUDA
  std::string why;
  if (auto b = cuda::make_cuda_backend(config, why)) return b;
  if (config.backend == "cuda")
    throw ConfigError(fmt::format(
        "the cuda backend was asked for (GRIDSPAN_BACKEND=cuda) but cannot run: {}", why));
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) logging::warn("no GPU to run on ({}); using the cpu backend", why);
#else
  if (config.backend == "cuda")
    throw ConfigError(
        "the cuda backend was asked for (GRIDSPAN_BACKEND=cuda) but this gridspan was built "
        "without it: the CUDA toolkit was not found at build time or GRIDSPAN_ENABLE_CUDA=OFF. "
        "Rebuild with the toolkit installed, or set GRIDSPAN_BACKEND=cpu");
#endif
  return make_cpu_backend(config);
}

}  // namespace gridspan::backend
