// What an Execute task runs for one superblock: a kernel compiled by a backend, or a
// native function. The driver's rank makes them from the API's definitions; the other ranks
// of an mpirun make the same from what the driver sends (a kernel's source, a native
// function's name, found in the one registry of native functions).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/param.hpp"
#include "gridspan/device/abi.h"
#include "plan/task.hpp"

namespace gridspan::annotation {
class Annotation;
}

namespace gridspan::runtime {

/// A compiled kernel: builds the GsLaunch for one superblock, calls the wrapper, and turns
/// a checked-mode violation into an AccessError.
class KernelExecutable : public plan::Executable {
 public:
  /// Compiles `src` (its parameters read from the kernel's own signature when it has none).
  static std::shared_ptr<const KernelExecutable> compile(backend::Backend& backend,
                                                         backend::KernelSource src);
  KernelExecutable(backend::KernelSource src, std::shared_ptr<backend::CompiledKernel> kernel);
  const std::string& name() const override { return src_.name; }
  std::string history_key() const override { return history_key_; }
  void run(const plan::ExecFrame& frame) const override;
  void run_batch(const plan::ExecFrame* frames, std::size_t n) const override;
  /// What another rank compiles to get the same kernel.
  const backend::KernelSource& source() const { return src_; }

 private:
  void run_checked(const plan::ExecFrame& frame, GsLaunch& launch) const;

  backend::KernelSource src_;
  std::shared_ptr<backend::CompiledKernel> kernel_;
  std::string history_key_;  // a digest of src_
};

/// A native function's body for one superblock: the frame, then one ABI view per parameter
/// (zeroed for scalars) and one pointer per scalar parameter (null for arrays).
using NativeBody = std::function<void(const plan::ExecFrame& frame, const GsArrayArg* arrays,
                                      const void* const* scalars)>;

class NativeExecutable : public plan::Executable {
 public:
  NativeExecutable(std::string name, std::vector<ParamInfo> params, NativeBody body);
  const std::string& name() const override { return name_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  void run(const plan::ExecFrame& frame) const override;
  /// Runs the bodies one after another; on an asynchronous device their inline launches
  /// are gathered and queued together afterwards (inline.cpp, InlineBatch).
  void run_batch(const plan::ExecFrame* frames, std::size_t n) const override;
  /// Rethrows the exception being handled, naming this function, `frame`'s device and
  /// superblock.
  [[noreturn]] void rethrow_failed(const plan::ExecFrame& frame) const;

 private:
  std::string name_;
  std::vector<ParamInfo> params_;
  NativeBody body_;
};

/// The name of the native function this thread is running (inside its task), or null.
const std::string* native_running();
/// The native function this thread is running and its superblock (both null outside one).
struct NativeScope {
  const NativeExecutable* native = nullptr;
  const plan::ExecFrame* frame = nullptr;
  uint64_t serial = 0;  // this run of a native function's, unique in the process (0: none)
};
NativeScope native_scope();

/// A launch inside a native function's task (the DAHL post's inlined call): it runs at
/// once, on the task's views, device and stream, instead of becoming tasks.
struct InlineLaunch {
  const plan::Executable* executable = nullptr;
  const annotation::Annotation* annotation = nullptr;
  const std::vector<ParamInfo>* params = nullptr;
  Dim threads, block;
  std::vector<const void*> views;  // per parameter: the view's data() (null for scalars)
  std::vector<int64_t> int_scalars;
  std::shared_ptr<const std::vector<unsigned char>> scalars;
  std::shared_ptr<const std::vector<uint32_t>> scalar_offsets;
};
/// Runs `launch` in the native function this thread runs, as one superblock: the blocks of
/// its grid whose first threads lie in the task's own threads. Throws gs::Error when a view
/// is not one of the task's or an access does not lie in what the task holds.
void run_inline(const InlineLaunch& launch);
/// The native function this thread runs takes its stream (to queue GPU work of its own):
/// its inline launches gathered so far in a batch are queued now, and later ones at once,
/// so that the stream keeps the body's order.
void inline_stream_taken();
/// Inline launches that ran together with others of their batch's tasks, in this process.
uint64_t inline_launches_together();
/// While one lives, inline launches on this thread run `blocks` of their grid instead of
/// the task's share (the array library's expressions inside a task: the blocks of the
/// elements the task writes, worked out by the library).
class InlineBlocks {
 public:
  explicit InlineBlocks(const Rect& blocks);
  ~InlineBlocks();
  InlineBlocks(const InlineBlocks&) = delete;
  InlineBlocks& operator=(const InlineBlocks&) = delete;

 private:
  const Rect* outer_;
  Rect blocks_;
};

/// Native functions by name, in every process: under mpirun only rank 0 runs the user's
/// code, so the other ranks find the function the driver names here. A later registration
/// under a name replaces the earlier one.
void register_native(std::shared_ptr<const NativeExecutable> native);
/// The function registered under `name`, or null.
std::shared_ptr<const NativeExecutable> find_native(const std::string& name);

}  // namespace gridspan::runtime
