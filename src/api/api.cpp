// The public API on top of the driver: arrays, kernels, launches, events, run().
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "backend/jit.hpp"
#include "core/log.hpp"
#include "core/scratch.hpp"
#include "gridspan/api/context.hpp"
#include "gridspan/core/half.hpp"
#include "runtime/driver.hpp"
#include "runtime/executable.hpp"
#include "runtime/process.hpp"

namespace gridspan {

// --- arrays ---------------------------------------------------------------------------

namespace detail {

ArrayStorage::ArrayStorage(std::shared_ptr<runtime::Driver> d, std::shared_ptr<plan::ArrayMeta> m)
    : driver(std::move(d)), meta(std::move(m)) {}
ArrayStorage::~ArrayStorage() {
  if (!driver) return;  // a native task's array (array/task.cpp): the task's memory
  if (recyclable && !runtime::native_running()) {
    std::lock_guard lock(lazy_mutex());
    if (auto library = driver->library_state(); library && library->recycle(meta)) return;
  }
  driver->release_array(*meta);
}

std::recursive_mutex& lazy_mutex() {
  // Inside a native function's task the library would wait for this lock, which the
  // program's thread may hold while it waits for room in the worker running the task.
  if (const std::string* name = runtime::native_running())
    throw Error(fmt::format(
        "native function `{}` calls the array library inside its task on the program's arrays, "
        "or an operation that does not run inside a task (it could wait for the program, which "
        "waits for the task): inside a task, launch kernels over the task's views, or make "
        "arrays of them (NativeContext::array) and assign elementwise expressions into one: "
        "both run inline; do the rest before or after the native function's launch",
        *name));
  static std::recursive_mutex m;
  return m;
}

std::shared_ptr<ArrayHandle> array_create(const std::shared_ptr<runtime::Driver>& driver,
                                          DType dtype, const Dim& shape,
                                          const DataDistribution& dist, const void* fill) {
  auto h = std::make_shared<ArrayHandle>();
  h->driver = driver;
  h->storage =
      std::make_shared<ArrayStorage>(driver, driver->create_array(dtype, shape, dist, fill));
  h->dtype = dtype;
  h->shape = shape;
  return h;
}

void array_settle(ArrayHandle& h) {
  require_context_array(h, "a value on its own");
  std::lock_guard lock(lazy_mutex());
  if (!h.pending.load(std::memory_order_acquire)) return;
  std::shared_ptr<Producer> producer = std::move(h.producer);
  producer->produce(h);
  h.pending.store(false, std::memory_order_release);
  for (auto& weak : h.pending_dependents)
    if (auto reader = weak.lock(); reader && reader->pending.load(std::memory_order_acquire))
      h.storage->pending_readers.push_back(std::move(reader));
  h.pending_dependents.clear();
  h.dependents_kept = 0;
}

void settle_readers(ArrayStorage& storage) {
  std::lock_guard lock(lazy_mutex());
  std::vector<std::weak_ptr<ArrayHandle>> readers;
  readers.swap(storage.pending_readers);
  storage.readers_kept = 0;
  for (auto& weak : readers)
    if (auto reader = weak.lock()) array_settle(*reader);
}

namespace {
thread_local int t_no_sync = 0;
}  // namespace

void host_wait(const ArrayHandle& h, const char* what, const char* file, unsigned line) {
  require_context_array(h, what);
  if (t_no_sync > 0)
    throw Error(
        fmt::format("{} at {}:{} waits for the devices inside a gs::NoSyncGuard; keep the "
                    "value on the device (a 0-d array) or read it after the guard's scope",
                    what, file, line));
  const Config& config = h.driver->config();
  if (!config.show_sync_warning) return;
  const std::string place = fmt::format("{} at {}:{}", what, file, line);
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard lock(mutex);
    if (config.show_sync_warning_once && !said.insert(place).second) return;
  }
  logging::warn("the host waits for the devices: {} (GRIDSPAN_SHOW_SYNC_WARNING)", place);
}

namespace {
void require_whole(const ArrayHandle& h, const char* what) {
  require_context_array(h, what);
  if (h.is_view)
    throw Error(fmt::format(
        "{}: this array of shape {} is a view (a slice or transpose) of another; make a "
        "contiguous copy with .copy() first",
        what, h.shape.str()));
}
}  // namespace

void array_read(const ArrayHandle& h, void* dst, std::size_t bytes) {
  require_whole(h, "reading an array back");
  if (bytes != static_cast<std::size_t>(h.meta().shape.volume()) * h.meta().elem_size)
    throw Error("internal error: array_read size mismatch");
  h.driver->read_array(h.meta(), dst);
}

void array_write(const ArrayHandle& h, const void* src, std::size_t bytes) {
  require_whole(h, "copy_from");
  h.driver->outside_tasks("writes an array");  // before the library's lock (lazy_mutex)
  settle_readers(*h.storage);
  std::vector<unsigned char> data(bytes);
  if (bytes) std::memcpy(data.data(), src, bytes);
  h.driver->write_array(h.meta(), std::move(data));
}

std::vector<ChunkSpec> array_chunks(const ArrayHandle& h) {
  require_whole(h, "work::like");
  std::vector<ChunkSpec> out;
  for (auto& c : h.meta().chunks) out.push_back(ChunkSpec{c.region, c.owned, c.device});
  return out;
}

void throw_null_array() {
  throw Error(
      "this gs::Array is empty (default-constructed or moved from); create it with a "
      "Context first");
}

// --- kernels --------------------------------------------------------------------------

struct KernelState {
  std::shared_ptr<runtime::Driver> driver;
  std::string name;
  std::vector<ParamInfo> params;
  annotation::Annotation annotation;
  std::shared_ptr<const plan::Executable> executable;
  std::vector<bool> writes;    // per parameter: an array the annotation writes
  int64_t max_threads = 1024;  // a block's, CUDA's or the kernel's launch_bounds
  // Where each scalar parameter's value starts in a launch's packed values (8 bytes each,
  // in parameter order): the same for every launch of the kernel.
  std::shared_ptr<const std::vector<uint32_t>> scalar_offsets;
  // The last launch's packed scalar values: a launch with the same values shares them
  // (a chain of launches allocates none).
  std::mutex scalars_mutex;
  std::shared_ptr<const std::vector<unsigned char>> last_scalars;

  std::shared_ptr<const std::vector<unsigned char>> scalars_like(
      const std::vector<unsigned char>& packed) {
    std::lock_guard lock(scalars_mutex);
    if (!last_scalars || *last_scalars != packed)
      last_scalars = std::make_shared<const std::vector<unsigned char>>(packed);
    return last_scalars;
  }
};

// What a launch needs of the parameters: the scalars' offsets in the packed values, and
// which arrays are written.
void set_param_layout(KernelState& state) {
  state.writes.assign(state.params.size(), false);
  for (const annotation::Access& a : state.annotation.modes())
    state.writes[a.param] = a.mode != annotation::Mode::read;
  auto offsets = std::make_shared<std::vector<uint32_t>>(state.params.size(), 0);
  uint32_t at = 0;
  for (std::size_t i = 0; i < state.params.size(); ++i)
    if (!state.params[i].is_array) (*offsets)[i] = at, at += 8;
  state.scalar_offsets = std::move(offsets);
}

}  // namespace detail

NoSyncGuard::NoSyncGuard() {
  ++detail::t_no_sync;
}
NoSyncGuard::~NoSyncGuard() {
  --detail::t_no_sync;
}

void Event::wait() {
  if (driver_) driver_->wait(task_);
}
bool Event::ready() const {
  return !driver_ || driver_->is_done(task_);
}

KernelDef KernelDef::from_source(std::string source, std::string function) {
  KernelDef d;
  d.source_ = std::move(source);
  d.function_ = std::move(function);
  d.file_ = d.function_ + ".cu";
  return d;
}

KernelDef KernelDef::from_file(std::string path, std::string function) {
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("cannot read kernel source file '{}': {}; check the path", path,
                            std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  KernelDef d = from_source(ss.str(), std::move(function));
  d.file_ = path;
  return d;
}

KernelDef& KernelDef::annotate(std::string annotation) {
  annotations_.push_back(std::move(annotation));
  return *this;
}
KernelDef& KernelDef::define(std::string name, long long value) {
  defines_[std::move(name)] = value;
  return *this;
}
KernelDef& KernelDef::checked(bool on) {
  checked_ = on;
  return *this;
}

KernelDef& KernelDef::launch_bounds(int max_threads, int min_blocks) {
  if (max_threads < 1 || max_threads > 1024 || min_blocks < 0)
    throw Error(fmt::format(
        "kernel `{}`: launch_bounds({}, {}) needs 1 to 1024 threads and a block count of at "
        "least 0, as CUDA's __launch_bounds__",
        function_, max_threads, min_blocks));
  max_threads_ = max_threads;
  min_blocks_ = min_blocks;
  return *this;
}

Rect NativeContext::threads(const Dim& domain) const {
  Rect r = blocks;
  for (int a = 0; a < blocks.rank; ++a) {
    r.lo[a] = blocks.lo[a] * block.get(a);
    r.hi[a] = std::min<int64_t>(blocks.hi[a] * block.get(a), domain.get(a));
  }
  return r;
}

namespace detail {
Kernel compile_in_task(backend::Backend& backend, const KernelDef& def);
}  // namespace detail

namespace {
// A key for `def`: its source, function, rules, macros and bounds, each with its length.
std::string inline_key(const KernelDef& def) {
  backend::jit::Hasher hash;
  auto field = [&](std::string_view s) {
    hash.add(std::to_string(s.size()));
    hash.add(s);
  };
  field(def.source());
  field(def.function());
  field(def.file());
  for (const std::string& a : def.annotations()) field(a);
  for (const auto& [name, value] : def.defines()) field(fmt::format("{}={}", name, value));
  field(fmt::format("{} {} {}", def.is_checked(), def.max_threads(), def.min_blocks()));
  return "gridspan.inline." + hash.hex();
}
}  // namespace

void* NativeContext::stream() const {
  if (stream_) runtime::inline_stream_taken();
  return stream_;
}

Kernel NativeContext::kernel(const KernelDef& def) const {
  const runtime::NativeScope scope = runtime::native_scope();
  if (!scope.frame)
    throw Error(fmt::format(
        "NativeContext::kernel(`{}`) works only inside a native function's task; in the "
        "program, compile the KernelDef with Context::compile",
        def.function()));
  backend::Backend* backend = scope.frame->dev->owner();
  if (!backend) throw Error("internal error: a task's device without its backend");
  auto kept = backend->kept(inline_key(def), [&] {
    return std::make_shared<Kernel>(detail::compile_in_task(*backend, def));
  });
  return *std::static_pointer_cast<Kernel>(kept);
}

namespace {

annotation::Annotation parse_annotations(const std::string& name,
                                         const std::vector<std::string>& texts,
                                         const std::vector<ParamInfo>& params,
                                         const std::map<std::string, long long>& defines) {
  if (texts.empty())
    throw AnnotationError(
        fmt::format("kernel `{}` has no annotation; say which elements each thread touches, e.g. "
                    ".annotate(\"global i => write out[i], read in[i]\")",
                    name));
  annotation::Annotation all;
  for (const auto& t : texts) all.merge(annotation::Annotation::parse(t, params, defines));
  all.validate(params);
  return all;
}

// A native function as Execute tasks run it: the API's NativeContext around the views.
std::shared_ptr<const runtime::NativeExecutable> make_native(const NativeDef& def) {
  detail::NativeInvoker invoke = def.invoker();
  auto body = [invoke](const plan::ExecFrame& frame, const GsArrayArg* arrays,
                       const void* const* scalars) {
    const plan::Execute& ex = frame.exec;
    NativeContext ctx(frame.device, ex.blocks, ex.block, ex.grid, frame.dev->stream());
    invoke(ctx, arrays, scalars);
  };
  return std::make_shared<runtime::NativeExecutable>(def.name(), def.params(), std::move(body));
}

// Stores `arg` as parameter `p`'s type, or says why it cannot.
void pack_scalar(const std::string& kernel, const ParamInfo& p, int index,
                 const detail::LaunchArg& arg, std::vector<unsigned char>& blob) {
  std::size_t size = dtype_size(p.dtype);
  std::size_t at = (blob.size() + 7) / 8 * 8;
  blob.resize(at + std::max<std::size_t>(size, 8));
  unsigned char* out = blob.data() + at;
  auto mismatch = [&](const std::string& why) {
    return LaunchError(fmt::format("kernel `{}`: argument {} for parameter `{}` ({}) {}", kernel,
                                   index + 1, p.name, p.type_text, why));
  };
  if (arg.array || arg.is_view) throw mismatch("is an array; pass a scalar value");
  if (dtype_is_float(p.dtype)) {
    double v = static_cast<double>(arg.value);
    switch (p.dtype) {
      case DType::f32: {
        float f = static_cast<float>(v);
        std::memcpy(out, &f, 4);
        break;
      }
      case DType::f64:
        std::memcpy(out, &v, 8);
        break;
      case DType::f16: {
        uint16_t h = float_to_half(static_cast<float>(v));
        std::memcpy(out, &h, 2);
        break;
      }
      default: {
        uint16_t h = float_to_bf16(static_cast<float>(v));
        std::memcpy(out, &h, 2);
        break;
      }
    }
    return;
  }
  if (arg.is_float)
    throw mismatch(fmt::format("is a floating-point {}; pass an integer (convert explicitly)",
                               dtype_name(arg.dtype)));
  if (p.dtype == DType::boolean) {
    bool b = arg.value != 0;
    std::memcpy(out, &b, 1);
    return;
  }
  long double lo = 0, hi = 0;
  switch (p.dtype) {
    case DType::i8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case DType::i16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case DType::i32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    case DType::i64:
      lo = static_cast<long double>(INT64_MIN), hi = static_cast<long double>(INT64_MAX);
      break;
    case DType::u8:
      hi = UINT8_MAX;
      break;
    case DType::u16:
      hi = UINT16_MAX;
      break;
    case DType::u32:
      hi = UINT32_MAX;
      break;
    default:
      hi = static_cast<long double>(UINT64_MAX);
      break;
  }
  if (arg.value < lo || arg.value > hi)
    throw mismatch(
        fmt::format("gets the value {}, which does not fit", static_cast<long long>(arg.value)));
  uint64_t bits = arg.bits;
  std::memcpy(out, &bits, size);  // little-endian: the low bytes
}

}  // namespace

Context::Context(const Config& config) : driver_(std::make_shared<runtime::Driver>(config)) {}

Context::~Context() {
  try {
    driver_->end();  // arrays, kernels and events that outlive it say it has ended
  } catch (const std::exception& e) {
    logging::warn("an error was not reported before the context ended: {}", e.what());
  }
}

namespace detail {
const std::shared_ptr<runtime::Driver>& context_driver(const Context& ctx) {
  return ctx.driver_;
}
}  // namespace detail

namespace detail {
DataDistribution default_distribution(const std::shared_ptr<runtime::Driver>& driver, DType dtype,
                                      const Dim& shape) {
  return driver->granularity().distribution(dtype, shape);
}
}  // namespace detail

Kernel Context::compile(const KernelDef& def) {
  return detail::compile_kernel(driver_, def);
}

namespace {
// A kernel compiled by `backend` (with checks where `checked`), not yet any context's.
std::shared_ptr<detail::KernelState> kernel_state(backend::Backend& backend, const KernelDef& def,
                                                  bool checked) {
  auto state = std::make_shared<detail::KernelState>();
  state->name = def.function();
  state->params = annotation::parse_signature(def.source(), def.function());
  state->annotation =
      parse_annotations(def.function(), def.annotations(), state->params, def.defines());
  backend::KernelSource src;
  src.name = def.function();
  src.source = def.source();
  src.params = state->params;
  src.defines = def.defines();
  src.checked = checked;
  src.max_threads = def.max_threads();
  src.min_blocks = def.min_blocks();
  state->max_threads = def.max_threads() ? def.max_threads() : 1024;
  state->executable = runtime::KernelExecutable::compile(backend, std::move(src));
  detail::set_param_layout(*state);
  return state;
}
}  // namespace

Kernel detail::compile_kernel(const std::shared_ptr<runtime::Driver>& driver,
                              const KernelDef& def) {
  auto state = kernel_state(driver->backend(), def, def.is_checked() || driver->config().check);
  state->driver = driver;
  driver->add_executable(state->executable);
  ++driver->counters().kernels_compiled;
  return Kernel(state);
}

namespace detail {
// Declared by the array library (array/launch.hpp), which compiles inside native tasks.
Kernel compile_in_task(backend::Backend& backend, const KernelDef& def) {
  return Kernel(kernel_state(backend, def, def.is_checked()));
}
}  // namespace detail

Kernel Context::compile(const NativeDef& def) {
  return detail::compile_native(driver_, def);
}

Kernel detail::compile_native(const std::shared_ptr<runtime::Driver>& driver,
                              const NativeDef& def) {
  auto state = std::make_shared<detail::KernelState>();
  state->driver = driver;
  state->name = def.name();
  state->params = def.params();
  state->annotation =
      parse_annotations(def.name(), def.annotations(), state->params, def.defines());
  state->executable = make_native(def);
  driver->add_executable(state->executable);
  detail::set_param_layout(*state);
  return Kernel(state);
}

bool register_native(const NativeDef& def) {
  runtime::register_native(make_native(def));
  return true;
}

std::vector<RankInfo> Context::ranks() const {
  return driver_->ranks();
}

void Context::synchronize() {
  if (auto library = driver_->library_state()) library->settle_pending();
  driver_->synchronize();
}

Stats Context::stats() const {
  auto& c = driver_->counters();
  return Stats{c.launches.load(), c.tasks.load(), c.kernels_compiled.load(), c.bytes_moved.load()};
}
int Context::device_count() const {
  return driver_->device_count();
}

std::string Context::backend_name() const {
  return driver_->backend_name();
}
std::vector<MemoryStats> Context::memory_stats() const {
  return driver_->memory_stats();
}
std::vector<KernelCost> Context::kernel_costs() const {
  return driver_->costs().report();
}
void Context::free_all_blocks() {
  if (auto library = driver_->library_state()) {
    std::vector<std::shared_ptr<plan::ArrayMeta>> kept;
    {
      std::lock_guard lock(detail::lazy_mutex());
      kept = library->take_kept();
    }
    for (const auto& meta : kept) driver_->release_array(*meta);
  }
  synchronize();  // freed arrays' chunks reach the pools when their deletions have run
  driver_->free_all_blocks();
}
const Config& Context::config() const {
  return driver_->config();
}
void Context::keep_plans(bool on) {
  driver_->keep_plans(on);
}

namespace {
const detail::KernelState& state_of(const std::shared_ptr<detail::KernelState>& state) {
  if (!state) throw LaunchError("this gs::Kernel is empty; get one from Context::compile");
  return *state;
}

// One argument of a launch inside a native function's task: a view of the task's, or a
// scalar.
void check_inline_arg(const detail::KernelState& s, const std::string& native, std::size_t i,
                      const detail::LaunchArg& arg) {
  const ParamInfo& p = s.params[i];
  if (arg.array)
    throw LaunchError(fmt::format(
        "native function `{}` launches kernel `{}` over a gs::Array (argument `{}`) inside its "
        "task; a task cannot launch over arrays (it would wait for itself): pass the task's "
        "views, which runs the kernel inline on them, or launch it after this task",
        native, s.name, p.name));
  auto mismatch = [&](const std::string& why) {
    return LaunchError(
        fmt::format("kernel `{}` launched inside native function `{}`: argument {} "
                    "for parameter `{}` ({}) {}",
                    s.name, native, i + 1, p.name, p.type_text, why));
  };
  if (!arg.is_view)
    throw mismatch(
        fmt::format("must be one of the task's views, got a {} scalar", dtype_name(arg.dtype)));
  if (arg.dtype != p.dtype || arg.rank != p.rank)
    throw mismatch(fmt::format("is a view of rank {} of {}", arg.rank, dtype_name(arg.dtype)));
  if (arg.read_only && s.writes[i])
    throw mismatch("is a view of const elements, and the kernel writes it");
}

// Puts a copy of the argument's array cut by `cut` in its place, for every handle of it
// (views too); the old chunks go once the copy has read them. On the launching thread: an
// array being launched over from two threads at once is not guarded here.
void recut_argument(runtime::Granularity& granularity, const detail::LaunchArg& arg,
                    const DataDistribution& cut, plan::LaunchSpec& spec) {
  detail::ArrayStorage& storage = *arg.array->storage;
  const plan::ArrayMeta* old = storage.meta.get();
  std::shared_ptr<plan::ArrayMeta> fresh = granularity.recut(*old, cut);
  const std::shared_ptr<plan::ArrayMeta> gone = std::exchange(storage.meta, fresh);
  for (const plan::ArrayMeta*& a : spec.arrays)
    if (a == old) a = fresh.get();
  storage.driver->release_array(*gone);
}

// A launch inside a native function's task runs at once on its views (runtime::run_inline).
Event launch_inline(const detail::KernelState& s, const Dim& threads, const Dim& block,
                    const std::vector<detail::LaunchArg>& args) {
  const std::string* native = runtime::native_running();
  if (!native)
    throw LaunchError(fmt::format(
        "kernel `{}`: a launch takes views (gridspan::Vector, Matrix, ...) only inside a native "
        "function's task, where it runs on them inline; outside one, pass gs::Arrays",
        s.name));
  runtime::InlineLaunch launch;
  launch.executable = s.executable.get();
  launch.annotation = &s.annotation;
  launch.params = &s.params;
  launch.threads = threads;
  launch.block = block;
  launch.views.resize(s.params.size(), nullptr);
  launch.int_scalars.resize(s.params.size(), 0);
  auto blob = std::make_shared<std::vector<unsigned char>>();
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const ParamInfo& p = s.params[i];
    if (p.is_array) {
      check_inline_arg(s, *native, i, args[i]);
      launch.views[i] = args[i].view;
      continue;
    }
    pack_scalar(s.name, p, static_cast<int>(i), args[i], *blob);
    if (!dtype_is_float(p.dtype)) launch.int_scalars[i] = static_cast<int64_t>(args[i].value);
  }
  launch.scalars = std::move(blob);
  launch.scalar_offsets = s.scalar_offsets;
  runtime::run_inline(launch);
  return Event();
}
}  // namespace

const std::string& Kernel::name() const {
  return state_of(state_).name;
}
const std::vector<ParamInfo>& Kernel::params() const {
  return state_of(state_).params;
}
std::string Kernel::last_plan_dot() const {
  return state_of(state_).driver->last_plan_dot();
}

Event Kernel::launch_packed(const Dim& threads, const Dim& block, const WorkDistribution& work,
                            const std::vector<detail::LaunchArg>& args) const {
  const auto& params = state_of(state_).params;
  const std::string& name = state_->name;
  if (args.size() != params.size()) {
    std::string list;
    for (auto& p : params)
      list += fmt::format("{}{} {}", list.empty() ? "" : ", ", p.type_text, p.name);
    throw LaunchError(
        fmt::format("kernel `{}` takes {} arguments after the launch geometry ({}), "
                    "but the launch passes {}",
                    name, params.size(), list, args.size()));
  }
  if (threads.rank() < 1)
    throw LaunchError(fmt::format("kernel `{}`: the thread domain needs 1 to 3 axes, got {}", name,
                                  threads.str()));
  if (block.rank() != threads.rank())
    throw LaunchError(fmt::format("kernel `{}`: the block {} must have the rank of the threads {}",
                                  name, block.str(), threads.str()));
  for (int a = 0; a < block.rank(); ++a)
    if (block[a] <= 0)
      throw LaunchError(fmt::format("kernel `{}`: the block {} must be positive on every axis",
                                    name, block.str()));
  if (block.volume() > state_->max_threads)
    throw LaunchError(
        fmt::format("kernel `{}`: the block {} has {} threads; at most {} ({})", name, block.str(),
                    block.volume(), state_->max_threads,
                    state_->max_threads == 1024 ? "as in CUDA" : "its launch_bounds"));
  const bool has_view =
      std::any_of(args.begin(), args.end(), [](const auto& a) { return a.is_view; });
  if (has_view || runtime::native_running()) return launch_inline(*state_, threads, block, args);
  Scratch<plan::LaunchSpec> borrowed;  // its vectors keep their memory from launch to launch
  plan::LaunchSpec& spec = *borrowed;
  spec.executable = state_->executable;
  spec.annotation = &state_->annotation;
  spec.params = &params;
  spec.threads = threads;
  spec.block = block;
  spec.arrays.resize(params.size(), nullptr);
  spec.int_scalars.resize(params.size(), 0);
  Scratch<std::vector<unsigned char>> packed;
  std::vector<unsigned char>& blob = *packed;
  blob.clear();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    const auto& arg = args[i];
    if (p.is_array) {
      if (!arg.array)
        throw LaunchError(
            fmt::format("kernel `{}`: argument {} for parameter `{}` ({}) must be a "
                        "gs::Array, got a {} scalar",
                        name, i + 1, p.name, p.type_text, dtype_name(arg.dtype)));
      if (arg.array->driver.get() != driver_ptr())
        throw LaunchError(fmt::format("kernel `{}`: array argument `{}` belongs to another Context",
                                      name, p.name));
      if (arg.array->is_view)
        throw LaunchError(fmt::format(
            "kernel `{}`: argument `{}` is a view (a slice or transpose) of an array; a kernel "
            "takes whole arrays: pass view.copy(), or the base array and index it",
            name, p.name));
      if (state_->writes[i]) detail::settle_readers(*arg.array->storage);
      const plan::ArrayMeta& meta = arg.array->meta();
      if (meta.dtype != p.dtype)
        throw LaunchError(
            fmt::format("kernel `{}`: argument `{}` is an array of {}, but the "
                        "parameter is {} (of {})",
                        name, p.name, dtype_name(meta.dtype), p.type_text, dtype_name(p.dtype)));
      if (meta.shape.rank() != p.rank)
        throw LaunchError(
            fmt::format("kernel `{}`: argument `{}` has rank {} (shape {}), but the "
                        "parameter {} has rank {}",
                        name, p.name, meta.shape.rank(), meta.shape.str(), p.type_text, p.rank));
      spec.arrays[i] = &meta;
    } else {
      pack_scalar(name, p, static_cast<int>(i), arg, blob);  // at scalar_offsets[i]
      if (!dtype_is_float(p.dtype)) spec.int_scalars[i] = static_cast<int64_t>(arg.value);
    }
  }
  spec.scalars = state_->scalars_like(blob);
  spec.scalar_offsets = state_->scalar_offsets;
  if (work.is_automatic()) {
    runtime::Granularity& granularity = driver_ptr()->granularity();
    for (const auto& [p, cut] : granularity.recuts(spec))
      recut_argument(granularity, args[p], cut, spec);
    granularity.superblocks(spec);
    for (int p : granularity.replicas(spec))
      recut_argument(granularity, args[p], dist::replicated(), spec);
  } else
    work.superblocks(threads, block, driver_ptr()->device_count(), spec.superblocks);
  return Event(state_->driver, state_->driver->launch(spec));
}

runtime::Driver* Kernel::driver_ptr() const {
  return state_->driver.get();
}

// --- run --------------------------------------------------------------------------------

namespace {

// What it throws, run_program reports.
int run_app(const Config& config, const std::function<void(Context&)>& app) {
  Context ctx(config.with_env());
  app(ctx);
  ctx.synchronize();
  return 0;
}

}  // namespace

// What escapes the program is reported as gs::run reports it: exit code 1, on every rank.
int run_program(std::function<int()> program) {
  return runtime::Process::run_program([&] {
    try {
      return program();
    } catch (const Error& e) {
      std::fprintf(stderr, "gridspan error: %s\n", e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
    return 1;
  });
}

int process_count() {
  return runtime::Process::count();
}

int run(Config config, std::function<void(Context&)> app) {
  return run_program([&] { return run_app(config, app); });
}

int run(int argc, char** argv, std::function<void(Context&)> app) {
  (void)argc;  // configuration comes from GRIDSPAN_* variables; arguments are the app's
  (void)argv;
  try {
    return run(Config::from_env(), std::move(app));
  } catch (const Error& e) {  // a bad GRIDSPAN_* value
    std::fprintf(stderr, "gridspan error: %s\n", e.what());
    return 1;
  }
}

}  // namespace gridspan
