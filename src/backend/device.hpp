// The small interface every backend implements (cpu now, cuda later): devices with their
// own memory, a way to run work on them, and a kernel compiler. Nothing above backend/
// includes a backend's own header; it asks `make_backend` for these.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "annotation/annotation.hpp"
#include "annotation/signature.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/geometry.hpp"
#include "gridspan/device/abi.h"

namespace gridspan::backend {

/// Memory another process lent cannot be reached from this device (Device::copy_lent):
/// the data go the long way instead.
class LendingError : public NetError {
 public:
  using NetError::NetError;
};

class Backend;

class Device {
 public:
  virtual ~Device() = default;
  /// The backend that made this device: its compiler serves the array library's
  /// expressions inside a native function's task (array/task.cpp).
  Backend* owner() const { return owner_; }
  void set_owner(Backend* backend) { owner_ = backend; }
  virtual int index() const = 0;         // index among this worker's devices
  virtual std::string name() const = 0;  // "cpu:0", "cuda:1 (NVIDIA H200)"
  virtual std::size_t memory_capacity() const = 0;
  /// True when device memory is host memory (the cpu backend): allocate and allocate_host
  /// then come from one allocator, and the memory manager moves a chunk between the device
  /// and host spaces by accounting alone, without copying it (CHAI's unified model).
  virtual bool unified() const = 0;
  /// True when work submitted only queues operations (cuda streams): the device reports the
  /// end through `done`. False when work has finished when it returns (cpu executors).
  virtual bool asynchronous() const = 0;
  /// How many submitted works run at once (a cpu device: its executor threads; a GPU's
  /// works follow one another, each over the whole device).
  virtual int executors() const { return 1; }
  /// Raw device memory; throws OutOfMemoryError when the device has none left.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
  /// Host memory suited for transfers to and from this device (pinned on cuda, and mapped,
  /// so a kernel may address it).
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* p, std::size_t bytes) = 0;
  /// Blocking copies between host memory and this device's memory (the memory manager's
  /// moves between spaces); they may run while kernels do.
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, std::size_t bytes) = 0;
  /// Runs `work` for the device: on the cpu backend on one of its executors; on cuda `work`
  /// queues operations on one of the device's compute streams. `done` is called once they
  /// have finished, with the exception `work` threw or the device reported (or null).
  /// `after`: tickets of works submitted to this device before, whose operations must
  /// finish before this work's start (an asynchronous device orders them itself, e.g. by
  /// stream waits, without the host waiting; a finished one is skipped). Synchronous
  /// devices get none. Returns this work's ticket (0 on synchronous devices).
  using Ticket = uint64_t;
  virtual Ticket submit(std::function<void()> work, std::function<void(std::exception_ptr)> done,
                        const std::vector<Ticket>& after) = 0;
  /// Where a work goes: `to_host` and `from_host` are for copies between host and device
  /// that the host waits for (sends to other processes and read-backs; receives and host
  /// writes). A device with queues of their own for them (cuda: a stream per direction apart
  /// from the compute streams) keeps them from waiting behind kernels they do not depend
  /// on; the others run them as any work.
  enum class Queue { compute, to_host, from_host };
  virtual Ticket submit_on(Queue queue, std::function<void()> work,
                           std::function<void(std::exception_ptr)> done,
                           const std::vector<Ticket>& after) {
    (void)queue;
    return submit(std::move(work), std::move(done), after);
  }
  /// Outside submitted work, on an asynchronous device: returns once the operations queued
  /// so far have finished (their `done` may not have been called yet; failures are reported
  /// there, not here). A synchronous device's works end with their reports: the default waits
  /// for nothing.
  virtual void wait_queued() {}
  /// A synchronous device: whether submitted works wait for an executor. Its executor then
  /// queues the work it releases behind them instead of running it at once (see
  /// Worker::process). The default: none wait.
  virtual bool has_queued() const { return false; }
  /// For a host thread about to wait: works submitted here that the device has not begun
  /// yet (a GPU whose launch thread has not queued them) are begun on the calling thread,
  /// whose caches hold them, instead of being handed over; called at every host wait, even
  /// for finished work, so that the device learns that its host waits (a GPU then queues
  /// the next work for an idle GPU on the submitting thread). The default does nothing.
  virtual void flush() {}
  /// A host thread waits for work queued here from begin_wait to end_wait (calls nest, from
  /// any thread): an asynchronous device that looks for finished works only now and then
  /// (GRIDSPAN_COMPLETION_POLL_US) reports them at once meanwhile. The default does nothing.
  virtual void begin_wait() {}
  virtual void end_wait() {}

  // Region operations on row-major boxes (see regions.hpp), for use inside submitted work:
  // queued in order on the work's stream (cpu: done at once). Device pointers are this
  // device's memory, except `src` of copy and combine, which may be another device's.
  virtual void copy(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                    const Rect& region, std::size_t elem_size) = 0;
  virtual void fill(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
                    std::size_t elem_size) = 0;
  virtual void combine(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                       annotation::ReduceOp op, DType dtype) = 0;
  /// Rounds `region` of float32 `src` (this device's memory) into `dst`, of the 16-bit float
  /// `dtype`, to nearest even: the end of a 16-bit sum's float32 partials.
  virtual void narrow(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                      const Rect& region, DType dtype) = 0;
  /// Host memory to device memory and back; the host side may be pageable.
  virtual void upload(void* dst, const Rect& dst_rect, const void* host, const Rect& host_rect,
                      const Rect& region, std::size_t elem_size) = 0;
  virtual void download(void* host, const Rect& host_rect, const void* src, const Rect& src_rect,
                        const Rect& region, std::size_t elem_size) = 0;
  /// Inside submitted work: waits until what the work queued so far has finished, and throws
  /// what the device reported (a kernel fault).
  virtual void synchronize() = 0;
  /// Inside submitted work, on an asynchronous device: the device's time for what the work
  /// queues from this call to its end is passed to `report` (seconds) once the work has
  /// finished, before its `done`, unless it failed. At most once per work. False when the
  /// device cannot (a synchronous device's caller times the work itself).
  virtual bool time_work(std::function<void(double)> report) {
    (void)report;
    return false;
  }
  /// Inside submitted work: the stream it queues on (a CUstream), for native functions that
  /// launch their own GPU work; null on the cpu backend.
  virtual void* stream() const = 0;

  // Memory lent to another process of this node, so that a transfer between ranks is
  // one copy between devices instead of a trip through host memory and the network (the
  // cuda backend: CUDA IPC over NVLink or PCIe; the cpu backend: the kernel's cross-memory
  // attach). Devices that cannot lend keep these defaults.

  /// How another process of this node may reach `bytes` of this device's memory at `ptr`,
  /// as bytes for it to pass to its device's copy_lent; empty when it cannot.
  virtual std::vector<unsigned char> lend(const void* ptr, std::size_t bytes) {
    (void)ptr, (void)bytes;
    return {};
  }
  /// Inside submitted work: copies `region` of the box `src_rect` that starts where
  /// `lent` (another process's description of memory it lends) points into this device's memory.
  /// Throws LendingError when that memory cannot be reached from here (the caller sends the bytes
  /// instead); anything else is the copy's own failure. Every call is followed by one
  /// release_lent once the work has finished (failed or not).
  virtual void copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                         const Rect& src_rect, const Rect& region, std::size_t elem_size);
  /// The copy of `lent` has finished: what copy_lent opened for it may be closed.
  virtual void release_lent(const std::vector<unsigned char>& lent) { (void)lent; }

 private:
  Backend* owner_ = nullptr;
};

/// What the compiler needs of a kernel.
struct KernelSource {
  std::string name;    // function name, for messages
  std::string source;  // the user's source
  std::string file;    // the source's file name for messages; empty = "<name>.cu"
  std::vector<ParamInfo> params;
  std::map<std::string, long long> defines;
  bool checked = false;                 // build the checked-mode variant
  int max_threads = 0, min_blocks = 0;  // __launch_bounds__ on the GPU's entries (0: none)
};

/// A compiled wrapper kernel, ready to run superblocks.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  /// Runs every block of the superblock on `device`, inside work submitted to it (cpu: on
  /// the calling executor thread; cuda: queued on the work's stream). In checked mode a
  /// violation is reported through `launch.check`; the caller turns it into an error.
  virtual void run(const GsLaunch& launch, Device& device) const = 0;
  /// Runs several superblocks of one launch (the same block and grid, the same scalars),
  /// independent of each other: in one kernel launch where the backend can (cuda), else one
  /// after another. Not in checked mode.
  virtual void run_batch(const GsLaunch* launches, std::size_t n, Device& device) const {
    for (std::size_t k = 0; k < n; ++k) run(launches[k], device);
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual std::vector<Device*> devices() = 0;
  /// Compiles (or loads from the cache) a kernel. Throws CompileError with the compiler's
  /// messages, line numbers referring to the user's source.
  virtual std::shared_ptr<CompiledKernel> compile(const KernelSource& kernel) = 0;
  /// What a layer above keeps for this backend's life under `key`, made by `make` the first
  /// time (the array library's kernels compiled inside tasks, where no driver is at hand).
  std::shared_ptr<void> kept(const std::string& key,
                             const std::function<std::shared_ptr<void>()>& make) {
    std::lock_guard lock(kept_mutex_);
    auto& slot = kept_[key];
    if (!slot) slot = make();
    return slot;
  }

 private:
  std::mutex kept_mutex_;
  std::map<std::string, std::shared_ptr<void>> kept_;
};

/// The cpu backend: `config.cpu_devices` virtual devices.
std::unique_ptr<Backend> make_cpu_backend(const Config& config);
/// The backend `config.backend` names ("auto": cuda when a GPU and its driver are there,
/// else cpu, saying so once). Throws ConfigError for a backend that cannot be had.
std::unique_ptr<Backend> make_backend(const Config& config);

}  // namespace gridspan::backend
