// The small interface every backend implements (cpu now, cuda later): devices with their
// own memory, a way to run work on them, and a kernel compiler. Nothing above backend/
// includes a backend's own header; it asks `make_backend` for these.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gridspan/annotation/signature.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/device/abi.h"

namespace gridspan::backend {

class Device {
 public:
  virtual ~Device() = default;
  virtual int index() const = 0;         // index among this worker's devices
  virtual std::string name() const = 0;  // "cpu:0", "cuda:1 (NVIDIA H200)"
  virtual std::size_t memory_capacity() const = 0;
  /// True when device memory is addressable from the host (the cpu backend): copies are
  /// then plain memory copies and a kernel may read host memory.
  virtual bool unified() const = 0;
  /// Raw device memory; throws OutOfMemoryError when the device has none left.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
  /// Host memory suited for transfers to and from this device (pinned on cuda).
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* p, std::size_t bytes) = 0;
  /// Blocking copies between host memory and this device's memory.
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, std::size_t bytes) = 0;
  /// Runs `work` on one of the device's executors; `done` is called afterwards with the
  /// exception it threw (or null), on an executor thread.
  virtual void submit(std::function<void()> work, std::function<void(std::exception_ptr)> done) = 0;
};

/// What the compiler needs of a kernel.
struct KernelSource {
  std::string name;    // function name, for messages
  std::string source;  // the user's source
  std::string file;    // the source's file name for messages; empty = "<name>.cu"
  std::vector<annotation::ParamInfo> params;
  std::map<std::string, long long> defines;
  bool checked = false;  // build the checked-mode variant
};

/// A compiled wrapper kernel, ready to run superblocks.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  /// Runs every block of the superblock on the calling executor thread. In checked mode
  /// a violation is reported through `launch.check`; the caller turns it into an error.
  virtual void run(const GsLaunch& launch) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual std::vector<Device*> devices() = 0;
  /// Compiles (or loads from the cache) a kernel. Throws CompileError with the compiler's
  /// messages, line numbers referring to the user's source.
  virtual std::shared_ptr<CompiledKernel> compile(const KernelSource& kernel) = 0;
};

/// The cpu backend: `config.cpu_devices` virtual devices.
std::unique_ptr<Backend> make_cpu_backend(const Config& config);

}  // namespace gridspan::backend
