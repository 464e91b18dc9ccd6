// What launching generated kernels takes, shared by elementwise and reduction programs: the
// kernel cache, the block and superblocks of a launch along an array's chunks, and the
// arguments in the order the generated source declares them.
#pragma once

#include <functional>
#include <string>

#include "array/expr.hpp"
#include "plan/planner.hpp"

namespace gridspan::backend {
class Backend;
}

namespace gridspan::detail {
/// Compiles a kernel with `backend` for launches inside native tasks (no context's).
Kernel compile_in_task(backend::Backend& backend, const KernelDef& def);
}  // namespace gridspan::detail

namespace gridspan::array {

/// The kernel `make(name)` defines, compiled once per `key` in this context.
const Kernel& cached_kernel(const std::shared_ptr<runtime::Driver>& driver, std::string key,
                            const std::function<KernelDef(const std::string&)>& make);
/// The native function `make()` defines, compiled once per `key` in this context.
const Kernel& cached_native(const std::shared_ptr<runtime::Driver>& driver, const std::string& key,
                            const std::function<NativeDef()>& make);
int64_t pow2_at_least(int64_t n);
/// `d` without axis `axis`; `d` with axis `axis` of extent `e`.
Dim without(const Dim& d, int axis);
Dim with_extent(Dim d, int axis, int64_t e);
/// Per array axis, the gcd of the chunk boundaries inside the array (0: none).
std::array<int64_t, kMaxRank> chunk_grain(const plan::ArrayMeta& meta);
/// 256 threads (`elements`), the fastest axis first, each axis a power of two dividing its
/// grain.
std::array<int64_t, kMaxRank> choose_block(const Dim& shape,
                                           const std::array<int64_t, kMaxRank>& grain,
                                           int64_t elements = 256);
/// Thread-space Dims (x fastest) of an array-axis triple.
Dim thread_dim(const Dim& shape, const std::array<int64_t, kMaxRank>& per_axis);
/// A looped launch over `shape` (rank >= 1): one thread a line of `line` elements of the
/// last axis (a divisor of `block`'s), the same grid of blocks as one thread an element.
/// Its threads and its block's, array axes.
std::pair<std::array<int64_t, kMaxRank>, std::array<int64_t, kMaxRank>> line_threads(
    const Dim& shape, const std::array<int64_t, kMaxRank>& block, int64_t line);
/// One superblock per chunk's owned box (in blocks of `block`, x fastest), on its device.
std::vector<Superblock> chunk_superblocks(const plan::ArrayMeta& meta,
                                          const std::array<int64_t, kMaxRank>& block);
/// The leaf of `p` its input of shape `shape` mostly lies in: a plain array of that shape
/// read element for element, whose chunks say where the work goes (null: none).
inline const Leaf* guide_leaf(const Program& p, const Dim& shape) {
  for (const Leaf& l : p.leaves) {
    if (l.general || l.linear || l.rank != shape.rank() || l.storage->meta->shape != shape)
      continue;
    bool identity = true;
    for (int b = 0; b < l.rank; ++b) identity = identity && (l.follows[b] == b || shape[b] == 1);
    if (identity) return &l;
  }
  return nullptr;
}

/// Launches `kernel` with one thread per element of `shape` (x along the last axis), in
/// blocks of 256: its superblocks follow the chunks of `along` (a plain array of that shape,
/// which the blocks never straddle), else slices of the slowest axis per device.
/// (launch_program's Programs run a line of a block's width per thread instead, or on a GPU
/// `unrolled` elements a thread in blocks of 1024 where such a block is a warp wide.)
void launch_elements(const std::shared_ptr<runtime::Driver>& driver, const Kernel& kernel,
                     const Dim& shape, const ArrayHandle* along,
                     const std::vector<detail::LaunchArg>& args);
/// Tests: the cpu backend runs the GPU's unrolled elementwise kernels too (their blocks,
/// their mapping), and every kernel the library generates is kept for NVRTC. Null: none.
struct ElementwiseTestHooks {
  bool unroll_on_cpu = false;
  std::vector<KernelDef> generated;
};
void set_elementwise_test_hooks(ElementwiseTestHooks* hooks);

// The launch's arguments, in the order Program::source declares the parameters.
class Arguments {
 public:
  void shape(const Dim& s) {
    for (int k = 0; k < s.rank(); ++k) integer(s[k]);
  }
  void array(const std::shared_ptr<detail::ArrayStorage>& storage, DType dtype) {
    if (storage->task_data) {  // a task's array: its view, for an inline launch
      detail::LaunchArg a;
      a.is_view = true;
      a.view = storage->task_data;
      a.rank = storage->meta->shape.rank();
      a.dtype = dtype;
      args_.push_back(a);
      return;
    }
    auto& h = *handles_.emplace_back(std::make_unique<ArrayHandle>());
    h.driver = storage->driver;
    h.storage = storage;
    h.dtype = dtype;
    h.shape = storage->meta->shape;
    detail::LaunchArg a;
    a.array = &h;
    a.dtype = dtype;
    args_.push_back(a);
  }
  void view(const Leaf& l) {
    array(l.storage, l.dtype);
    if (l.linear) {
      const Dim& m = l.storage->meta->shape;
      integer(l.view.offset);
      for (int k = 0; k < l.vrank; ++k)
        if (l.vfollows[k] >= 0) integer(l.view.strides[k]);
      for (int b = 1; b < l.rank; ++b) integer(m[b]);
      if (l.rank == 3) integer(m[1] * m[2]);
      return;
    }
    if (!l.general) return;
    for (int b = 0; b < l.rank; ++b) {
      integer(l.view.start[b]);
      if (l.follows[b] >= 0) integer(l.view.step[b]);
    }
  }
  void integer(int64_t v) {
    detail::LaunchArg a;
    a.dtype = DType::i64;
    a.value = v;
    a.bits = static_cast<uint64_t>(v);
    args_.push_back(a);
  }
  /// A float64 parameter (eps, alpha, a count).
  void real(double v) {
    detail::LaunchArg a;
    a.dtype = DType::f64;
    a.is_float = true;
    a.value = v;
    args_.push_back(a);
  }
  void scalar(const Scalar& s) {
    detail::LaunchArg a;
    a.dtype = detail::is_16bit_float(s.dtype) ? DType::f32 : s.dtype;
    a.is_float = detail::is_float(s.dtype);
    a.value = s.value;
    a.bits = s.bits;
    args_.push_back(a);
  }
  const std::vector<detail::LaunchArg>& list() const { return args_; }
  /// Appends the arguments to `out` (the handles stay with this object).
  void list_into(std::vector<detail::LaunchArg>& out) const {
    out.insert(out.end(), args_.begin(), args_.end());
  }

 private:
  std::vector<std::unique_ptr<ArrayHandle>> handles_;
  std::vector<detail::LaunchArg> args_;
};

}  // namespace gridspan::array
