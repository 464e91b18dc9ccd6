// Kernels and native functions as Execute tasks run them (see executable.hpp).
#include "runtime/executable.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "annotation/annotation.hpp"
#include "annotation/signature.hpp"
#include "backend/jit.hpp"
#include "core/scratch.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::runtime {

namespace {

// The dtype of the chunk a parameter's view maps: a reduce or atomic parameter's partial is
// float32 for a sum or product of a 16-bit array (plan::partial_dtype), and its view tells
// by the element size.
DType mapped_dtype(const ParamInfo& param, const plan::ExecArg& arg) {
  const bool partial = arg.mode == annotation::Mode::reduce || arg.mode == annotation::Mode::atomic;
  return partial ? plan::partial_dtype(arg.op, param.dtype) : param.dtype;
}

// The ABI view of one superblock's arguments: `arrays[p]` and `scalars[p]` for each
// parameter (both of params.size()).
void frame_arguments(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame,
                     GsArrayArg* arrays, const void** scalars) {
  const plan::Execute& ex = frame.exec;
  for (std::size_t p = 0; p < params.size(); ++p) {
    GsArrayArg& a = arrays[p];
    std::memset(&a, 0, sizeof a);
    scalars[p] = nullptr;
    if (!params[p].is_array) {
      scalars[p] = ex.scalars->data() + (*ex.scalar_offsets)[p];
      continue;
    }
    const plan::ExecArg& arg = ex.arrays[p];
    a.data = frame.data[p];
    a.rank = params[p].rank;
    a.mode = static_cast<int32_t>(arg.mode);
    a.op = static_cast<int32_t>(arg.op);
    a.elem_size = static_cast<int32_t>(dtype_size(mapped_dtype(params[p], arg)));
    for (int ax = 0; ax < 3; ++ax) {
      a.lo[ax] = arg.chunk.rect.lo[ax];
      a.extent[ax] = arg.chunk.rect.hi[ax] - arg.chunk.rect.lo[ax];
      a.region_lo[ax] = arg.region.lo[ax];
      a.region_hi[ax] = arg.region.hi[ax];
    }
    if (!a.data) {  // untouched in this superblock: an empty view
      for (int ax = 0; ax < 3; ++ax) a.extent[ax] = 0, a.region_hi[ax] = a.region_lo[ax];
    }
  }
}

// The ABI arguments of one superblock: on the stack for up to 16 parameters.
struct FrameArguments {
  GsArrayArg arrays_small[16];
  const void* scalars_small[16];
  std::vector<GsArrayArg> arrays_heap;
  std::vector<const void*> scalars_heap;
  GsArrayArg* arrays = arrays_small;
  const void** scalars = scalars_small;

  FrameArguments(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame) {
    if (params.size() > 16) {
      arrays_heap.resize(params.size());
      scalars_heap.resize(params.size());
      arrays = arrays_heap.data();
      scalars = scalars_heap.data();
    }
    frame_arguments(params, frame, arrays, scalars);
  }
};

std::string index_text(int rank, const Point& idx) {
  std::string s;
  for (int ax = 0; ax < rank; ++ax) s += fmt::format("{}{}", ax ? ", " : "", idx[ax]);
  return s;
}

// The element `k` (row-major) of box `r`.
Point element_of(const Rect& r, std::size_t k) {
  Point idx = r.lo;
  int64_t rest = static_cast<int64_t>(k);
  for (int ax = r.rank - 1; ax >= 0; --ax) {
    idx[ax] = r.lo[ax] + rest % r.extent(ax);
    rest /= r.extent(ax);
  }
  return idx;
}

// The bytes of parameter p's declared region, read from its chunk (queued on the device:
// synchronize before using them).
void region_bytes(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame, std::size_t p,
                  std::vector<unsigned char>& out) {
  const plan::ExecArg& arg = frame.exec.arrays[p];
  const std::size_t elem = dtype_size(params[p].dtype);
  out.resize(static_cast<std::size_t>(arg.region.volume()) * elem);
  frame.dev->download(out.data(), arg.region, frame.data[p], arg.chunk.rect, arg.region, elem);
}

// Checked mode: the bytes of every read-only array's region before the kernel ran, so that
// a write through a `read` rule shows (and is undone).
class ReadOnlyGuard {
 public:
  ReadOnlyGuard(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame)
      : params_(params), frame_(frame), before_(params.size()) {
    for (std::size_t p = 0; p < params_.size(); ++p)
      if (params_[p].is_array && frame_.data[p] && ex().arrays[p].mode == annotation::Mode::read)
        region_bytes(p, before_[p]);
  }
  // Throws AccessError for the first element written through a read rule, after putting
  // every such element back.
  void check(const std::string& kernel) {
    std::vector<std::vector<unsigned char>> after(params_.size());
    for (std::size_t p = 0; p < params_.size(); ++p)
      if (!before_[p].empty()) region_bytes(p, after[p]);
    frame_.dev->synchronize();
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (before_[p].empty() || after[p] == before_[p]) continue;
      if (auto first = restore(p, after[p])) {
        frame_.dev->synchronize();
        const Rect& r = ex().arrays[p].region;
        throw AccessError(fmt::format(
            "kernel `{}` wrote `{}[{}]`, but the annotation declares `{}` read-only (read {}) "
            "in the superblock of blocks {}; declare it `write` or `readwrite`, or do not "
            "write it",
            kernel, params_[p].name, index_text(params_[p].rank, *first), params_[p].name, r.str(),
            ex().blocks.str()));
      }
    }
  }

 private:
  const plan::Execute& ex() const { return frame_.exec; }
  void region_bytes(std::size_t p, std::vector<unsigned char>& out) const {
    runtime::region_bytes(params_, frame_, p, out);
  }
  // The same array may be passed twice, once to be written: its writes through the other
  // parameter are legitimate (same chunk, inside that parameter's declared region).
  bool written_elsewhere(std::size_t p, const Point& idx) const {
    for (std::size_t q = 0; q < params_.size(); ++q)
      if (q != p && params_[q].is_array && ex().arrays[q].write &&
          ex().arrays[q].chunk.id == ex().arrays[p].chunk.id && ex().arrays[q].region.contains(idx))
        return true;
    return false;
  }
  // Puts back every element of parameter p written through its read rule; the first one.
  std::optional<Point> restore(std::size_t p, const std::vector<unsigned char>& after) {
    const std::size_t elem = dtype_size(params_[p].dtype);
    const Rect& r = ex().arrays[p].region;
    std::optional<Point> first;
    for (std::size_t k = 0; k * elem < after.size(); ++k) {
      if (std::memcmp(&after[k * elem], &before_[p][k * elem], elem) == 0) continue;
      Point idx = element_of(r, k);
      if (written_elsewhere(p, idx)) continue;
      Point hi = idx;
      for (int ax = 0; ax < r.rank; ++ax) ++hi[ax];
      Rect one(r.rank, idx, hi);
      frame_.dev->upload(frame_.data[p], ex().arrays[p].chunk.rect, &before_[p][k * elem], one, one,
                         elem);
      if (!first) first = idx;
    }
    return first;
  }

  const std::vector<ParamInfo>& params_;
  const plan::ExecFrame& frame_;
  std::vector<std::vector<unsigned char>> before_;
};

// Checked mode: every `overwrite` region is poisoned before the kernel runs, and an element
// still holding the poison afterwards was not written. A region whose chunk another
// parameter also touches there is left alone (its values are that parameter's to read).
// A one- or two-byte element meets the poison often (an int8 result is -91 one time in
// 256): a kernel that only reads and overwrites is then run again over a second poison,
// and only an element holding both was not written.
class OverwriteGuard {
 public:
  OverwriteGuard(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame)
      : params_(params), frame_(frame) {
    poison(kPoison);
  }
  // Throws AccessError for the first element of an overwrite region left unwritten;
  // `run_again` runs the kernel once more.
  void check(const std::string& kernel, const std::function<void()>& run_again) const {
    auto unwritten = holding(kPoison, {});
    if (!unwritten.empty() && rerunnable()) {
      poison(kSecondPoison);
      run_again();
      unwritten = holding(kSecondPoison, unwritten);
    }
    if (unwritten.empty()) return;
    const auto [p, k] = unwritten.front();
    const plan::ExecArg& arg = ex().arrays[p];
    throw AccessError(fmt::format(
        "kernel `{}` left `{}[{}]` unwritten, but the annotation declares `{}` overwritten "
        "(overwrite {}) in the superblock of blocks {} (or it wrote exactly checked mode's "
        "poison value there); write every element of the region, or declare it `write`",
        kernel, params_[p].name, index_text(params_[p].rank, element_of(arg.region, k)),
        params_[p].name, arg.region.str(), ex().blocks.str()));
  }

 private:
  static constexpr unsigned char kPoison[16] = {0xa5, 0x5a, 0xc3, 0x7f, 0xa5, 0x5a, 0xc3, 0x7f,
                                                0xa5, 0x5a, 0xc3, 0x7f, 0xa5, 0x5a, 0xc3, 0x7f};
  static constexpr unsigned char kSecondPoison[16] = {0x5a, 0xa5, 0x3c, 0x7e, 0x5a, 0xa5,
                                                      0x3c, 0x7e, 0x5a, 0xa5, 0x3c, 0x7e,
                                                      0x5a, 0xa5, 0x3c, 0x7e};
  const plan::Execute& ex() const { return frame_.exec; }
  bool checked(std::size_t p) const {
    if (!params_[p].is_array || !frame_.data[p]) return false;
    const plan::ExecArg& arg = ex().arrays[p];
    if (arg.mode != annotation::Mode::overwrite || arg.region.empty()) return false;
    for (std::size_t q = 0; q < params_.size(); ++q)
      if (q != p && params_[q].is_array && ex().arrays[q].chunk.id == arg.chunk.id &&
          ex().arrays[q].region.overlaps(arg.region))
        return false;
    return true;
  }
  // Running the kernel again gives the same answers: it reads and overwrites only.
  bool rerunnable() const {
    for (std::size_t p = 0; p < params_.size(); ++p)
      if (params_[p].is_array && frame_.data[p] && ex().arrays[p].mode != annotation::Mode::read &&
          ex().arrays[p].mode != annotation::Mode::overwrite)
        return false;
    return true;
  }
  void poison(const unsigned char* pattern) const {
    for (std::size_t p = 0; p < params_.size(); ++p)
      if (checked(p))
        frame_.dev->fill(frame_.data[p], ex().arrays[p].chunk.rect, ex().arrays[p].region, pattern,
                         dtype_size(params_[p].dtype));
  }
  // The parameters and element numbers (in their regions) of the elements holding
  // `pattern`, in order; only those among `among` unless that is empty.
  using Elements = std::vector<std::pair<std::size_t, std::size_t>>;
  Elements holding(const unsigned char* pattern, const Elements& among) const {
    Elements found;
    for (std::size_t p = 0; p < params_.size(); ++p) {
      if (!checked(p)) continue;
      const std::size_t elem = dtype_size(params_[p].dtype);
      std::vector<unsigned char> after;
      region_bytes(params_, frame_, p, after);
      frame_.dev->synchronize();
      for (std::size_t k = 0; k * elem < after.size(); ++k)
        if (std::memcmp(&after[k * elem], pattern, elem) == 0 &&
            (among.empty() || std::binary_search(among.begin(), among.end(), std::pair{p, k})))
          found.emplace_back(p, k);
    }
    return found;
  }

  const std::vector<ParamInfo>& params_;
  const plan::ExecFrame& frame_;
};

}  // namespace

// --- kernels ----------------------------------------------------------------------------

std::shared_ptr<const KernelExecutable> KernelExecutable::compile(backend::Backend& backend,
                                                                  backend::KernelSource src) {
  if (src.params.empty()) src.params = annotation::parse_signature(src.source, src.name);
  auto compiled = backend.compile(src);
  return std::make_shared<KernelExecutable>(std::move(src), std::move(compiled));
}

KernelExecutable::KernelExecutable(backend::KernelSource src,
                                   std::shared_ptr<backend::CompiledKernel> kernel)
    : src_(std::move(src)), kernel_(std::move(kernel)) {
  backend::jit::Hasher h;
  h.add(src_.name);
  h.add(src_.source);
  for (const auto& [name, value] : src_.defines) h.add(fmt::format("{}={}", name, value));
  h.add(fmt::format("{} {} {}", src_.checked, src_.max_threads, src_.min_blocks));
  history_key_ = src_.name + "-" + h.hex();
}

namespace {
// The ABI description of one superblock, over its arguments.
GsLaunch launch_of(const plan::Execute& ex, const FrameArguments& args, std::size_t params) {
  GsLaunch launch;
  std::memset(&launch, 0, sizeof launch);
  for (int ax = 0; ax < 3; ++ax) {
    launch.block_lo[ax] = ex.blocks.lo[ax];
    launch.block_hi[ax] = ex.blocks.hi[ax];
    launch.block_dim[ax] = static_cast<uint32_t>(ex.block.get(ax));
    launch.grid_dim[ax] = static_cast<uint32_t>(ex.grid.get(ax));
  }
  launch.num_params = static_cast<int32_t>(params);
  launch.arrays = args.arrays;
  launch.scalars = args.scalars;
  return launch;
}
}  // namespace

void KernelExecutable::run(const plan::ExecFrame& frame) const {
  FrameArguments args(src_.params, frame);
  GsLaunch launch = launch_of(frame.exec, args, src_.params.size());
  if (src_.checked)
    run_checked(frame, launch);
  else
    kernel_->run(launch, *frame.dev);
}

// Checked mode guards each superblock on its own: one after another.
void KernelExecutable::run_batch(const plan::ExecFrame* frames, std::size_t n) const {
  if (src_.checked || n == 1) return Executable::run_batch(frames, n);
  // Kept by the thread between batches. The arguments point into themselves: reserved
  // first, so that none moves.
  Scratch<std::vector<FrameArguments>> args;
  Scratch<std::vector<GsLaunch>> launches;
  args->reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    args->emplace_back(src_.params, frames[k]);
    launches->push_back(launch_of(frames[k].exec, args->back(), src_.params.size()));
  }
  kernel_->run_batch(launches->data(), n, *frames[0].dev);
}

void KernelExecutable::run_checked(const plan::ExecFrame& frame, GsLaunch& launch) const {
  // The check state must be addressable by the kernel: pinned, mapped host memory.
  backend::Device& dev = *frame.dev;
  struct CheckMemory {
    backend::Device& dev;
    GsCheckState* p = static_cast<GsCheckState*>(dev.allocate_host(sizeof(GsCheckState)));
    ~CheckMemory() { dev.deallocate_host(p, sizeof(GsCheckState)); }
  } check_memory{dev};
  GsCheckState& check = *check_memory.p;
  std::memset(&check, 0, sizeof check);
  launch.check = &check;
  ReadOnlyGuard guard(src_.params, frame);
  OverwriteGuard overwritten(src_.params, frame);
  kernel_->run(launch, dev);
  dev.synchronize();
  if (check.violated) {
    const plan::Execute& ex = frame.exec;
    const std::size_t p = static_cast<std::size_t>(check.param);
    const Point idx{check.index[0], check.index[1], check.index[2]};
    if (check.kind == GS_CHECK_RAW_PARTIAL)
      throw AccessError(fmt::format(
          "kernel `{}` accessed `{}[{}]` directly, but `{}` is a {} {} array whose partial "
          "adds up in float32 (rounded once, at the end): contribute with `{}.reduce(..., "
          "value)` instead of reading, writing or CUDA atomics on its elements",
          src_.name, src_.params[p].name, index_text(src_.params[p].rank, idx), src_.params[p].name,
          dtype_name(src_.params[p].dtype), annotation::mode_name(ex.arrays[p].mode),
          src_.params[p].name));
    throw AccessError(fmt::format(
        "kernel `{}` accessed `{}[{}]` outside its declared access region {} ({}) in the "
        "superblock of blocks {}; fix the annotation or guard the access in the kernel",
        src_.name, src_.params[p].name, index_text(src_.params[p].rank, idx),
        ex.arrays[p].region.str(), annotation::mode_name(ex.arrays[p].mode), ex.blocks.str()));
  }
  guard.check(src_.name);
  overwritten.check(src_.name, [&] {
    kernel_->run(launch, dev);
    dev.synchronize();
  });
}

// --- native functions -------------------------------------------------------------------

NativeExecutable::NativeExecutable(std::string name, std::vector<ParamInfo> params, NativeBody body)
    : name_(std::move(name)), params_(std::move(params)), body_(std::move(body)) {}

namespace {
thread_local NativeScope t_native;  // what an inline launch runs in
}  // namespace

const std::string* native_running() {
  return t_native.native ? &t_native.native->name() : nullptr;
}
NativeScope native_scope() {
  return t_native;
}

// What the function throws reaches the program naming the function, its superblock and
// device, with the exception's own text (a gs::Error keeps its kind; anything else is one).
void NativeExecutable::run(const plan::ExecFrame& frame) const {
  FrameArguments args(params_, frame);
  struct Running {  // also when the body throws
    NativeScope outer = t_native;
    Running(const NativeExecutable* native, const plan::ExecFrame& frame) {
      static std::atomic<uint64_t> runs{0};
      t_native = {native, &frame, runs.fetch_add(1, std::memory_order_relaxed) + 1};
    }
    ~Running() { t_native = outer; }
  };
  try {
    Running running(this, frame);
    body_(frame, args.arrays, args.scalars);
  } catch (...) {
    rethrow_failed(frame);
  }
}

void NativeExecutable::rethrow_failed(const plan::ExecFrame& frame) const {
  std::rethrow_exception(
      error_in(std::current_exception(),
               fmt::format("native function `{}` failed on {} in the superblock of blocks {}",
                           name_, frame.dev->name(), frame.exec.blocks.str())));
}

namespace {

// Registrations may come from other files' static initialisation: made on first use.
struct Natives {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const NativeExecutable>> by_name;
};
Natives& natives() {
  static Natives* n = new Natives;  // never destroyed: natives may be looked up at exit
  return *n;
}

}  // namespace

void register_native(std::shared_ptr<const NativeExecutable> native) {
  std::lock_guard lock(natives().mutex);
  const std::string name = native->name();
  natives().by_name[name] = std::move(native);
}

std::shared_ptr<const NativeExecutable> find_native(const std::string& name) {
  std::lock_guard lock(natives().mutex);
  auto it = natives().by_name.find(name);
  return it == natives().by_name.end() ? nullptr : it->second;
}

}  // namespace gridspan::runtime
