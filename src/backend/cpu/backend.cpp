// make_cpu_backend: `config.cpu_devices` virtual devices, each with its memory budget and
// executor threads, sharing one kernel compiler.
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "backend/cpu/cpu.hpp"
#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::backend {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Config& config)
      : compiler_(cpu::CompilerOptions{config.cxx, config.cache_dir}) {
    if (config.cpu_devices < 1) {
      throw ConfigError(fmt::format("cpu_devices is {}; give at least 1 (GRIDSPAN_CPU_DEVICES)",
                                    config.cpu_devices));
    }
    std::size_t capacity = config.device_memory;
    if (capacity == 0) {
      const auto pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      const std::size_t physical =
          pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : std::size_t(4) << 30;
      // Ranks of one node share it: each gets its share.
      const std::size_t ranks = static_cast<std::size_t>(std::max(1, config.node_ranks));
      capacity = physical / 4 / static_cast<std::size_t>(config.cpu_devices) / ranks;
    }
    int threads = config.cpu_threads;
    if (threads <= 0) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      threads = std::max(1, cores / std::max(1, config.node_ranks) / config.cpu_devices);
    }
    for (int d = 0; d < config.cpu_devices; ++d) {
      auto device = std::make_unique<cpu::CpuDevice>(d, capacity, threads);
      if (config.cpu_async)
        devices_.push_back(std::make_unique<cpu::LaneDevice>(std::move(device), true));
      else
        devices_.push_back(std::move(device));
      devices_.back()->set_owner(this);
    }
    logging::info("cpu backend: {} devices{}, {} executor threads and {} each", config.cpu_devices,
                  config.cpu_async ? " behaving as GPUs (GRIDSPAN_CPU_ASYNC)" : "", threads,
                  format_bytes(capacity));
  }

  std::string name() const override { return "cpu"; }

  std::vector<Device*> devices() override {
    std::vector<Device*> out;
    for (auto& d : devices_) out.push_back(d.get());
    return out;
  }

  std::shared_ptr<CompiledKernel> compile(const KernelSource& kernel) override {
    return compiler_.compile(kernel);
  }

 private:
  cpu::CpuCompiler compiler_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Config& config) {
  return std::make_unique<CpuBackend>(config);
}

}  // namespace gridspan::backend
