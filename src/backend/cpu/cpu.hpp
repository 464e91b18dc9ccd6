// The cpu backend's internals: virtual devices with a thread pool each, the host-compiler
// JIT for wrapper kernels, and the fiber runner that gives kernels __syncthreads. Only
// src/backend/ and the backend tests include this; everything else uses device.hpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/device/abi.h"

namespace gridspan::backend::cpu {

/// One virtual device: host memory under a budget (enforced by the memory manager above)
/// and its own pool of executor threads.
class CpuDevice final : public Device {
 public:
  CpuDevice(int index, std::size_t capacity, int threads);
  ~CpuDevice() override;  // runs what was submitted, then joins the threads

  int index() const override { return index_; }
  std::string name() const override;
  std::size_t memory_capacity() const override { return capacity_; }
  bool unified() const override { return true; }
  bool asynchronous() const override { return false; }
  int executors() const override { return threads(); }
  bool has_queued() const override { return queued_.load(std::memory_order_acquire) > 0; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* p, std::size_t bytes) override;
  void copy_to_host(void* host, const void* device, std::size_t bytes) override;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override;
  Ticket submit(std::function<void()> work, std::function<void(std::exception_ptr)> done,
                const std::vector<Ticket>& after) override;
  void copy(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
            const Rect& region, std::size_t elem_size) override;
  void fill(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
            std::size_t elem_size) override;
  void combine(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
               annotation::ReduceOp op, DType dtype) override;
  void narrow(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
              const Rect& region, DType dtype) override;
  void upload(void* dst, const Rect& dst_rect, const void* host, const Rect& host_rect,
              const Rect& region, std::size_t elem_size) override;
  void download(void* host, const Rect& host_rect, const void* src, const Rect& src_rect,
                const Rect& region, std::size_t elem_size) override;
  void synchronize() override {}
  void* stream() const override { return nullptr; }
  std::vector<unsigned char> lend(const void* ptr, std::size_t bytes) override;
  void copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                 const Rect& src_rect, const Rect& region, std::size_t elem_size) override;

  int threads() const { return static_cast<int>(threads_.size()); }
  /// Runs piece(0) .. piece(pieces - 1) on the calling thread and on whichever of this
  /// device's executor threads come free meanwhile (one launch's blocks over the device's
  /// cores); returns when every piece has ended, then rethrows the first exception.
  void parallel(int pieces, const std::function<void(int)>& piece);

 private:
  struct Task {
    std::function<void()> work;
    std::function<void(std::exception_ptr)> done;
  };
  /// Queues `copies` of the task and wakes sleeping executors (one for a single copy).
  void enqueue(Task task, int copies);
  void executor_loop();

  int index_;
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without the lock
  int sleepers_ = 0;                    // executor threads waiting on ready_
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

/// A device that behaves as a GPU does (GRIDSPAN_CPU_ASYNC wraps the cpu backend's in it),
/// to run without a GPU what only a GPU would: works go to lanes (two for compute, one per
/// direction for transfers, as the cuda backend's streams) and run there later, in order
/// per lane and after the works they are ordered behind (`after`); submit returns at once
/// and `done` is called from the lane. `discrete`: device memory apart from host memory
/// (the memory manager copies between them, as for a GPU); else the inner device's model.
/// Region operations are the inner device's. Tests derive from it to slow works down.
class LaneDevice : public Device {
 public:
  LaneDevice(Device& inner, bool discrete);
  LaneDevice(std::unique_ptr<Device> inner, bool discrete);
  ~LaneDevice() override;  // runs what was submitted, then joins the lanes

  int index() const override { return inner_.index(); }
  std::string name() const override { return inner_.name(); }
  std::size_t memory_capacity() const override { return inner_.memory_capacity(); }
  bool unified() const override { return !discrete_ && inner_.unified(); }
  bool asynchronous() const override { return true; }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p, std::size_t bytes) override { inner_.deallocate(p, bytes); }
  void* allocate_host(std::size_t bytes) override { return inner_.allocate_host(bytes); }
  void deallocate_host(void* p, std::size_t bytes) override { inner_.deallocate_host(p, bytes); }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    inner_.copy_to_host(host, device, bytes);
  }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    inner_.copy_from_host(device, host, bytes);
  }
  Ticket submit(std::function<void()> work, std::function<void(std::exception_ptr)> done,
                const std::vector<Ticket>& after) override {
    return submit_on(Queue::compute, std::move(work), std::move(done), after);
  }
  Ticket submit_on(Queue queue, std::function<void()> work,
                   std::function<void(std::exception_ptr)> done,
                   const std::vector<Ticket>& after) override;
  void copy(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
            const Rect& region, std::size_t elem_size) override {
    inner_.copy(dst, dst_rect, src, src_rect, region, elem_size);
  }
  void fill(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
            std::size_t elem_size) override {
    inner_.fill(dst, dst_rect, region, value, elem_size);
  }
  void combine(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
               annotation::ReduceOp op, DType dtype) override {
    inner_.combine(dst, dst_rect, src, src_rect, op, dtype);
  }
  void narrow(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
              const Rect& region, DType dtype) override {
    inner_.narrow(dst, dst_rect, src, src_rect, region, dtype);
  }
  void upload(void* dst, const Rect& dst_rect, const void* host, const Rect& host_rect,
              const Rect& region, std::size_t elem_size) override {
    inner_.upload(dst, dst_rect, host, host_rect, region, elem_size);
  }
  void download(void* host, const Rect& host_rect, const void* src, const Rect& src_rect,
                const Rect& region, std::size_t elem_size) override {
    inner_.download(host, host_rect, src, src_rect, region, elem_size);
  }
  void synchronize() override {}
  void wait_queued() override;
  void* stream() const override { return nullptr; }
  std::vector<unsigned char> lend(const void* ptr, std::size_t bytes) override {
    return inner_.lend(ptr, bytes);
  }
  void copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                 const Rect& src_rect, const Rect& region, std::size_t elem_size) override {
    inner_.copy_lent(dst, dst_rect, lent, src_rect, region, elem_size);
  }
  void release_lent(const std::vector<unsigned char>& lent) override { inner_.release_lent(lent); }

 protected:
  /// Called with each submitted work's ticket and the works unfinished then (its own too).
  virtual void submitted(Ticket, std::size_t /*unfinished*/) {}
  /// Called on the lane just before a work runs.
  virtual void before_run(Ticket) {}

 private:
  struct Work {
    Ticket ticket;
    std::function<void()> work;
    std::function<void(std::exception_ptr)> done;
    std::vector<Ticket> after;
  };
  struct Lane {
    std::deque<Work> queue;
    std::thread thread;
  };
  void start();
  void run(Lane& lane);
  bool finished(Ticket t) const { return t <= last_ && !unfinished_.count(t); }

  std::unique_ptr<Device> owned_;
  Device& inner_;
  const bool discrete_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<Ticket> unfinished_;
  Ticket last_ = 0;
  uint64_t next_compute_ = 0;
  bool stop_ = false;
  Lane lanes_[4];  // compute, compute, to host, from host
};

/// Where compiled kernels and the device headers they include are kept.
struct CompilerOptions {
  std::string cxx;        // compiler command (may hold words: "ccache g++"); empty = c++
  std::string cache_dir;  // empty = ~/.cache/gridspan, else a private folder under $TMPDIR
};

/// Compiles wrapper kernels with the host compiler into shared libraries, with a disk cache
/// (safe across processes) and an in-memory cache in front of it.
class CpuCompiler {
 public:
  explicit CpuCompiler(CompilerOptions options);
  ~CpuCompiler();
  std::shared_ptr<CompiledKernel> compile(const KernelSource& kernel);
  /// The folder holding compiled kernels (created on first use).
  const std::string& cache_dir();

 private:
  CompilerOptions options_;
  std::mutex mutex_;
  std::string cache_dir_;
  std::map<std::string, std::shared_ptr<CompiledKernel>> loaded_;
};

/// The wrapper translation unit for `kernel` (exposed for tests and for debugging).
std::string generate_wrapper(const KernelSource& kernel);
/// True when `source` calls __syncthreads (outside comments and literals).
bool uses_barrier(const std::string& source);

/// The library's fiber services for generated code (run_fibers, barrier).
const GsCpuRuntime* fiber_runtime();

/// Runs body(arg, t) for t in [0, count) as fibers on the calling thread (see abi.h).
void run_fibers(int32_t count, void (*body)(void* arg, int32_t thread), void* arg);
/// __syncthreads inside run_fibers; a no-op outside it.
void fiber_barrier();

namespace detail {
/// How many times this process has started the compiler for a kernel (not for
/// `--version`): tests use it to see cache hits.
long compiler_invocations();
}  // namespace detail

}  // namespace gridspan::backend::cpu
