// Kernels: gs::KernelDef (CUDA-style source + annotations) and gs::NativeDef (a C++
// function, StarPU's codelet) both compile to a gs::Kernel, launched over a grid:
//
//   auto k = ctx.compile(gs::KernelDef::from_file("stencil.cu", "stencil")
//                            .annotate("global i => write out[i], read in[i-1:i+1]"));
//   gs::Event e = k.launch({n}, {256}, gs::work::tiles({1 << 20}), n, out, in);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gridspan/api/array.hpp"
#include "gridspan/api/event.hpp"
#include "gridspan/core/param.hpp"
#include "gridspan/device/abi.h"
#include "gridspan/device/views.hpp"
#include "gridspan/distribution/distribution.hpp"

namespace gridspan {

/// A CUDA-style kernel: a `__device__` function whose first parameter is `dim3 blockIdx`.
class KernelDef {
 public:
  static KernelDef from_source(std::string source, std::string function);
  /// Reads the source from a file; throws gs::Error if it cannot be read.
  static KernelDef from_file(std::string path, std::string function);
  /// Adds access rules (may be called more than once).
  KernelDef& annotate(std::string annotation);
  /// A macro in the source and a constant in annotations.
  KernelDef& define(std::string name, long long value);
  /// Checks every access against the declared regions (also GRIDSPAN_CHECK=1).
  KernelDef& checked(bool on = true);
  /// CUDA's `__launch_bounds__(max_threads, min_blocks)` on the kernel's GPU entries: blocks
  /// of at most `max_threads` threads (1 to 1024), compiled to use few enough registers for
  /// `min_blocks` of them on a multiprocessor (0: no such bound). A launch with a larger
  /// block is a LaunchError on every backend.
  KernelDef& launch_bounds(int max_threads, int min_blocks = 0);

  const std::string& source() const { return source_; }
  const std::string& function() const { return function_; }
  const std::string& file() const { return file_; }
  const std::vector<std::string>& annotations() const { return annotations_; }
  const std::map<std::string, long long>& defines() const { return defines_; }
  bool is_checked() const { return checked_; }
  int max_threads() const { return max_threads_; }  // 0: not bounded
  int min_blocks() const { return min_blocks_; }

 private:
  std::string source_, function_, file_;
  std::vector<std::string> annotations_;
  std::map<std::string, long long> defines_;
  bool checked_ = false;
  int max_threads_ = 0, min_blocks_ = 0;
};

class Kernel;
namespace detail {
template <class V>
struct view_traits;
}  // namespace detail

/// What a native function is told about the superblock it runs.
struct NativeContext {
  int device = 0;   // the device (index over all devices)
  Rect blocks;      // the superblock, in blocks
  Dim block, grid;  // block size; blocks of the whole launch
  NativeContext() = default;
  NativeContext(int device, const Rect& blocks, const Dim& block, const Dim& grid, void* stream)
      : device(device), blocks(blocks), block(block), grid(grid), stream_(stream) {}
  /// On the cuda backend the views point to GPU memory and this is the CUstream to queue
  /// GPU work on (the function must not wait for it); null on the cpu backend, where the
  /// views are host memory and the function does the work itself. The inline launches of
  /// the tasks of one device that run as one batch are queued together after their bodies
  /// ran; a task that takes its stream has its own queued in order from then on, so work it
  /// queues itself keeps its place among them.
  void* stream() const;
  /// The superblock's threads, clipped to the launch's thread domain.
  Rect threads(const Dim& domain) const;
  /// `def` compiled for this task's device, to launch inline over the task's views: once
  /// per process and backend (kept by its source, rules and macros), so the same code works
  /// on every rank under mpirun, where the program's own gs::Kernels exist only on rank 0.
  /// Throws gs::Error outside a task, CompileError or AnnotationError as Context::compile.
  Kernel kernel(const KernelDef& def) const;
  /// The array `view` belongs to, as a gs::Array of its whole shape for the array library
  /// inside this task: elementwise expressions over such arrays and scalars run inline,
  /// computed where they are assigned into one of them (`out.assign(expr)`, `out += x`):
  /// on this task's device and stream, for the elements the task writes of it, reading
  /// only what the task holds (else a gs::Error says what). Nothing else of the library
  /// runs inside a task; an array of the task is not read on the host, and goes with it.
  template <class V>
  Array<typename detail::view_traits<V>::value_type> array(const V& view) const {
    using T = typename detail::view_traits<V>::value_type;
    return Array<T>(detail::task_array(view.data(), dtype_v<T>, detail::view_traits<V>::read_only));
  }

 private:
  void* stream_ = nullptr;
};

namespace detail {
template <class V>
struct view_traits {
  static constexpr bool is_view = false;
  using value_type = void;
};
template <class T>
struct view_traits<Scalar<T>> {
  static constexpr bool is_view = true;
  static constexpr int rank = 0;
  static constexpr bool read_only = std::is_const_v<T>;
  static constexpr const char* kind = "Scalar";
  using value_type = std::remove_cv_t<T>;
};
template <class T>
struct view_traits<Vector<T>> {
  static constexpr bool is_view = true;
  static constexpr int rank = 1;
  static constexpr bool read_only = std::is_const_v<T>;
  static constexpr const char* kind = "Vector";
  using value_type = std::remove_cv_t<T>;
};
template <class T>
struct view_traits<Matrix<T>> {
  static constexpr bool is_view = true;
  static constexpr int rank = 2;
  static constexpr bool read_only = std::is_const_v<T>;
  static constexpr const char* kind = "Matrix";
  using value_type = std::remove_cv_t<T>;
};
template <class T>
struct view_traits<Tensor<T>> {
  static constexpr bool is_view = true;
  static constexpr int rank = 3;
  static constexpr bool read_only = std::is_const_v<T>;
  static constexpr const char* kind = "Tensor";
  using value_type = std::remove_cv_t<T>;
};

/// Calls a native function for one superblock (built by NativeDef).
using NativeInvoker =
    std::function<void(const NativeContext&, const GsArrayArg* arrays, const void* const* scalars)>;

template <class F>
struct native_signature : native_signature<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct native_signature<R (C::*)(const NativeContext&, A...) const> {
  using args = std::tuple<std::decay_t<A>...>;
  using declared = std::tuple<std::remove_reference_t<A>...>;  // const kept: read-only views
};
template <class C, class R, class... A>
struct native_signature<R (C::*)(const NativeContext&, A...)> {
  using args = std::tuple<std::decay_t<A>...>;
  using declared = std::tuple<std::remove_reference_t<A>...>;  // const kept: read-only views
};
template <class R, class... A>
struct native_signature<R (*)(const NativeContext&, A...)> {
  using args = std::tuple<std::decay_t<A>...>;
  using declared = std::tuple<std::remove_reference_t<A>...>;  // const kept: read-only views
};

// A parameter as declared: a view of const elements (`gs::Vector<const float>`) is
// read-only, so an annotation that writes it is an error at compile, as for a kernel.
template <class Declared>
ParamInfo native_param(const std::string& name) {
  using A = std::remove_const_t<Declared>;
  ParamInfo p;
  p.name = name;
  if constexpr (view_traits<A>::is_view) {
    p.is_array = true;
    p.rank = view_traits<A>::rank;
    p.dtype = dtype_v<typename view_traits<A>::value_type>;
    p.is_const = std::is_const_v<Declared> || view_traits<A>::read_only;
    p.type_text = fmt::format("{}gridspan::{}<{}>", p.is_const ? "const " : "",
                              view_traits<A>::kind, dtype_name(p.dtype));
  } else {
    static_assert(std::is_arithmetic_v<A>,
                  "native function parameters are gridspan views or arithmetic scalars");
    p.dtype = dtype_v<A>;
    p.type_text = dtype_name(p.dtype);
  }
  return p;
}

template <class A>
A native_arg(const GsArrayArg* arrays, const void* const* scalars, std::size_t i) {
  if constexpr (view_traits<A>::is_view)
    return A::from_arg(arrays[i], static_cast<int32_t>(i), nullptr);
  else
    return *static_cast<const A*>(scalars[i]);
}
}  // namespace detail

/// A C++ function launched like a kernel: `fn(const gs::NativeContext&, params...)` is
/// called once per superblock with that superblock's chunk views.
class NativeDef {
 public:
  template <class F>
  static NativeDef from_function(std::string name, F fn, std::vector<std::string> param_names) {
    using Args = typename detail::native_signature<F>::args;
    using Declared = typename detail::native_signature<F>::declared;
    NativeDef def;
    def.name_ = std::move(name);
    if (param_names.size() != std::tuple_size_v<Args>)
      throw Error(fmt::format("NativeDef `{}`: {} parameter names for a function of {} parameters",
                              def.name_, param_names.size(), std::tuple_size_v<Args>));
    def.params_ =
        make_params<Declared>(param_names, std::make_index_sequence<std::tuple_size_v<Args>>{});
    def.invoke_ = [fn](const NativeContext& ctx, const GsArrayArg* arrays,
                       const void* const* scalars) {
      call<Args>(fn, ctx, arrays, scalars, std::make_index_sequence<std::tuple_size_v<Args>>{});
    };
    return def;
  }
  NativeDef& annotate(std::string annotation) {
    annotations_.push_back(std::move(annotation));
    return *this;
  }
  NativeDef& define(std::string name, long long value) {
    defines_[std::move(name)] = value;
    return *this;
  }

  const std::string& name() const { return name_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<std::string>& annotations() const { return annotations_; }
  const std::map<std::string, long long>& defines() const { return defines_; }
  const detail::NativeInvoker& invoker() const { return invoke_; }

 private:
  template <class Args, std::size_t... I>
  static std::vector<ParamInfo> make_params(const std::vector<std::string>& names,
                                            std::index_sequence<I...>) {
    return {detail::native_param<std::tuple_element_t<I, Args>>(names[I])...};
  }
  template <class Args, class F, std::size_t... I>
  static void call(const F& fn, const NativeContext& ctx, const GsArrayArg* arrays,
                   const void* const* scalars, std::index_sequence<I...>) {
    fn(ctx, detail::native_arg<std::tuple_element_t<I, Args>>(arrays, scalars, I)...);
  }

  std::string name_;
  std::vector<ParamInfo> params_;
  std::vector<std::string> annotations_;
  std::map<std::string, long long> defines_;
  detail::NativeInvoker invoke_;
};

namespace detail {
/// One launch argument: an array handle or a scalar value with its C++ type.
struct LaunchArg {
  const ArrayHandle* array = nullptr;
  bool is_view = false;        // a native function's view (an inline launch)
  const void* view = nullptr;  // its data()
  int rank = 0;                // its rank
  bool read_only = false;      // its elements are const
  DType dtype = DType::i32;
  bool is_float = false;
  long double value = 0;  // exact for every integer up to 64 bits and every double
  uint64_t bits = 0;      // the integer's bits
};
template <class A>
LaunchArg make_arg(const A& a) {
  LaunchArg arg;
  using T = std::decay_t<A>;
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    arg.dtype = dtype_v<T>;
    arg.is_float = true;
    arg.value = static_cast<float>(a);
  } else if constexpr (std::is_arithmetic_v<T>) {
    arg.dtype = dtype_v<T>;
    arg.is_float = std::is_floating_point_v<T>;
    arg.value = static_cast<long double>(a);
    if constexpr (std::is_integral_v<T>) arg.bits = static_cast<uint64_t>(a);
  } else if constexpr (view_traits<T>::is_view) {
    arg.is_view = true;
    arg.view = a.data();
    arg.rank = view_traits<T>::rank;
    arg.read_only = view_traits<T>::read_only;
    arg.dtype = dtype_v<typename view_traits<T>::value_type>;
  } else {
    arg.array = &a.handle();
    arg.dtype = a.dtype();
  }
  return arg;
}
struct KernelState;
}  // namespace detail

/// A compiled kernel or native function, ready to launch.
class Kernel {
 public:
  Kernel() = default;
  explicit Kernel(std::shared_ptr<detail::KernelState> state) : state_(std::move(state)) {}

  /// Launches over `threads` (CUDA grid = ceil(threads / block) per axis), cut into
  /// superblocks by `work`. Asynchronous: returns at once. Throws LaunchError when the
  /// arguments do not fit the kernel's parameters.
  ///
  /// Inside a native function's task, pass the task's views instead of arrays: the launch
  /// runs inline, at once, on the task's device (queued on its stream on a GPU), as one
  /// superblock of the blocks whose threads lie in the task's own threads (its superblock's
  /// blocks times its block size), so that code that launches over whole arrays from the
  /// program does this task's part inside it. `work` is not used. Every access must lie in
  /// what the task holds: a gs::Error names what does not.
  template <class... A>
  Event launch(Dim threads, Dim block, const WorkDistribution& work, A&&... args) const {
    std::vector<detail::LaunchArg> packed{detail::make_arg(args)...};
    return launch_packed(threads, block, work, packed);
  }
  Event launch_packed(const Dim& threads, const Dim& block, const WorkDistribution& work,
                      const std::vector<detail::LaunchArg>& args) const;
  const std::string& name() const;
  const std::vector<ParamInfo>& params() const;
  /// The plan of the most recent launch as Graphviz (needs Context::keep_plans(true)).
  std::string last_plan_dot() const;

 private:
  runtime::Driver* driver_ptr() const;
  std::shared_ptr<detail::KernelState> state_;
};

}  // namespace gridspan
