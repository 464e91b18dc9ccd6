// gs::Context: a gridspan session. It owns the devices, creates arrays and compiles kernels.
//
//   return gs::run(argc, argv, [](gs::Context& ctx) {
//     auto a = ctx.zeros<float>({n}, gs::dist::rows(1 << 20));
//   });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gridspan/api/array.hpp"
#include "gridspan/api/kernel.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/info.hpp"

namespace gridspan {

/// What a Context has done so far (Context::stats).
struct Stats {
  uint64_t launches = 0;          // kernel launches, one per launch however many superblocks
  uint64_t tasks = 0;             // tasks planned (kernels, copies, creations, reductions ...)
  uint64_t kernels_compiled = 0;  // kernels compiled for this context (not found in its cache)
  uint64_t bytes_moved = 0;       // bytes copied between devices, ranks and the host
};

class Context;
namespace detail {
/// The driver behind a Context (for the array library's free functions).
const std::shared_ptr<runtime::Driver>& context_driver(const Context& ctx);
/// Compiles a kernel for `driver`'s context and counts it in its stats.
Kernel compile_kernel(const std::shared_ptr<runtime::Driver>& driver, const KernelDef& def);
Kernel compile_native(const std::shared_ptr<runtime::Driver>& driver, const NativeDef& def);
/// The distribution an array gets when none is given: dist::automatic() as the Context
/// chooses it (rows over the devices, as many as its measured per-task overhead makes worth
/// it, of whole blocks of the array library's kernels: 256 threads, the last axis fastest).
DataDistribution default_distribution(const std::shared_ptr<runtime::Driver>& driver, DType dtype,
                                      const Dim& shape);
}  // namespace detail

class Context {
 public:
  /// Opens the devices `config` names (by default the environment's: GPUs when there are,
  /// else GRIDSPAN_CPU_DEVICES virtual cpu devices). Under mpirun, rank 0's Context spans
  /// every rank; on another rank it throws, since those ranks serve rank 0: start the
  /// program with gs::run or gs::run_program, which do that on every rank.
  explicit Context(const Config& config = Config::from_env());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// Compiles a kernel (cached on disk); throws CompileError / AnnotationError.
  Kernel compile(const KernelDef& def);
  Kernel compile(const NativeDef& def);

  template <class T>
  Array<T> empty(Dim shape, const DataDistribution& dist) {
    return Array<T>(detail::array_create(driver_, dtype_v<T>, shape, dist, nullptr));
  }
  template <class T>
  Array<T> zeros(Dim shape, const DataDistribution& dist) {
    return full<T>(shape, T(0), dist);
  }
  template <class T>
  Array<T> ones(Dim shape, const DataDistribution& dist) {
    return full<T>(shape, T(1), dist);
  }
  template <class T>
  Array<T> full(Dim shape, T value, const DataDistribution& dist) {
    return Array<T>(detail::array_create(driver_, dtype_v<T>, shape, dist, &value));
  }
  template <class T>
  Array<T> from_vector(const std::vector<T>& values, Dim shape, const DataDistribution& dist) {
    if (static_cast<int64_t>(values.size()) != shape.volume())
      throw Error(fmt::format("from_vector: got {} values for shape {} ({} elements)",
                              values.size(), shape.str(), shape.volume()));
    Array<T> a = empty<T>(shape, dist);
    a.copy_from(values);
    return a;
  }
  /// The same with the distribution the library picks (rows over every device).
  template <class T>
  Array<T> from_vector(const std::vector<T>& values, Dim shape) {
    return from_vector<T>(values, shape, detail::default_distribution(driver_, dtype_v<T>, shape));
  }
  /// A 0-d array holding `value`.
  template <class T>
  Array<T> scalar(T value) {
    return full<T>(Dim{}, value, dist::centralized(0));
  }

  /// Waits for every task; throws the first error not yet reported.
  void synchronize();
  /// Launches, tasks, compiled kernels and bytes moved so far.
  Stats stats() const;
  /// All devices of all workers.
  int device_count() const;
  /// The backend the devices belong to: "cuda" or "cpu".
  std::string backend_name() const;
  /// Per memory space (each device, host, disk): used, total and spilled bytes.
  std::vector<MemoryStats> memory_stats() const;
  /// What each kernel's tasks took, from the sample gridspan times (the first runs of a
  /// kernel, then one in 16): per size class, the mean threads, time and bytes of a task.
  std::vector<KernelCost> kernel_costs() const;
  /// The memory pools' free blocks (freed arrays' memory, kept for reuse, and the small
  /// results the array library keeps to hand out again) go back to the devices and the
  /// host, on every rank; what live arrays hold stays (CuPy's MemoryPool.free_all_blocks).
  /// Waits for the work submitted so far first (a freed array's memory reaches its pool when
  /// the tasks using it have run). memory_stats' total_bytes then equals used_bytes.
  void free_all_blocks();
  const Config& config() const;
  /// Every rank of the run with its host, devices and memory (one outside mpirun).
  std::vector<RankInfo> ranks() const;
  /// Keep the most recent plan for Kernel::last_plan_dot().
  void keep_plans(bool on);

 private:
  friend const std::shared_ptr<runtime::Driver>& detail::context_driver(const Context& ctx);
  std::shared_ptr<runtime::Driver> driver_;
};

/// Runs `app` on a new Context; returns the exit code: 0, or 1 after printing a gs::Error.
/// Under mpirun, rank 0 runs `app` over every rank's devices while the other ranks serve it,
/// and every rank returns rank 0's exit code; a rank that fails or stops answering ends
/// every rank.
int run(int argc, char** argv, std::function<void(Context&)> app);
int run(Config config, std::function<void(Context&)> app);

/// Runs `program` (which makes its own Contexts, any number of them) and returns its exit
/// code. Under mpirun, rank 0 runs it while the other ranks serve its Contexts, and every
/// rank returns rank 0's code: `int main() { return gs::run_program([] { ...; return 0; }); }`
int run_program(std::function<int()> program);
/// The processes of this run: the ranks under mpirun (unless GRIDSPAN_MPI is off), else 1.
int process_count();

/// Makes a native function known to every process of a run. Under mpirun only rank 0 runs
/// the user's code, so the other ranks find native functions by name: register each one
/// before gs::run (or at static initialisation) in every process. Returns true, for
/// `static const bool registered = gs::register_native(def);`.
bool register_native(const NativeDef& def);

}  // namespace gridspan
