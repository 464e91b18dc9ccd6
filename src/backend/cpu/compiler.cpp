// The cpu backend's JIT: wraps the user's kernel in a generated entry point that runs every
// block of a superblock, compiles it with the host C++ compiler into a shared library, and
// loads it. Compiled kernels are cached on disk (keyed by source, options, compiler and
// device headers; safe across processes) and in memory.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "backend/cpu/cpu.hpp"
#include "backend/cpu/fault.hpp"
#include "backend/cpu/pieces.hpp"
#include "backend/jit.hpp"
#include "core/log.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"

extern char** environ;

namespace gridspan::detail {
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_files();
}

namespace gridspan::backend::cpu {
namespace {

using namespace jit;

std::atomic<long> g_compiler_invocations{0};

// ---- scanning the user's source ----------------------------------------------------------

// CUDA features the cpu backend does not provide yet; a kernel using one is rejected with
// a message that says so (instead of an "undeclared identifier" from the compiler).
const std::set<std::string_view>& warp_intrinsics() {
  static const std::set<std::string_view> names = {"__shfl_sync",
                                                   "__shfl_up_sync",
                                                   "__shfl_down_sync",
                                                   "__shfl_xor_sync",
                                                   "__shfl",
                                                   "__shfl_up",
                                                   "__shfl_down",
                                                   "__shfl_xor",
                                                   "__ballot_sync",
                                                   "__ballot",
                                                   "__any_sync",
                                                   "__all_sync",
                                                   "__any",
                                                   "__all",
                                                   "__uni_sync",
                                                   "__match_any_sync",
                                                   "__match_all_sync",
                                                   "__activemask",
                                                   "__syncwarp",
                                                   "__reduce_add_sync",
                                                   "__reduce_min_sync",
                                                   "__reduce_max_sync",
                                                   "__reduce_and_sync",
                                                   "__reduce_or_sync",
                                                   "__reduce_xor_sync",
                                                   "__lanemask_lt",
                                                   "__lanemask_le",
                                                   "__lanemask_eq",
                                                   "__lanemask_gt",
                                                   "__lanemask_ge",
                                                   "cooperative_groups",
                                                   "__syncthreads_count",
                                                   "__syncthreads_and",
                                                   "__syncthreads_or"};
  return names;
}

void reject_unsupported(const KernelSource& k, const std::string& file) {
  const auto ids = identifiers(k.source);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& id = ids[i];
    if (warp_intrinsics().count(id.text)) {
      throw CompileError(fmt::format(
          "{}:{}: kernel `{}` uses `{}`: warp-level intrinsics (shuffles, votes, __syncwarp, "
          "cooperative groups, __syncthreads_count/and/or) are not supported by the cpu "
          "backend yet. Rewrite that part with __shared__ memory and __syncthreads(), which "
          "work on every backend.",
          file, id.line, k.name, id.text));
    }
    if (id.text == "extern" && i + 1 < ids.size() && ids[i + 1].text == "__shared__") {
      throw CompileError(fmt::format(
          "{}:{}: kernel `{}` declares `extern __shared__` (dynamic shared memory), which "
          "gridspan launches do not size; declare the __shared__ array with a constant size "
          "(a define works: .define(\"TILE\", 256)).",
          file, id.line, k.name));
    }
  }
}

// ---- the generated wrapper ---------------------------------------------------------------

// ---- small utilities -------------------------------------------------------------------

std::vector<std::string> split_words(const std::string& command) {
  std::vector<std::string> words;
  std::istringstream in(command);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv[0] found on PATH (no shell), collecting its output.
ProcessResult run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw CompileError(
        fmt::format("cannot create a pipe to run `{}`: {}", args[0], std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw CompileError(fmt::format(
        "cannot run the C++ compiler `{}` for the cpu backend: {}. Install a C++17 compiler "
        "(g++ or clang++) or name one with GRIDSPAN_CXX (Config::cxx).",
        args[0], std::strerror(rc)));
  }
  ProcessResult result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n > 0)
      result.output.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// ---- a loaded kernel -------------------------------------------------------------------

class CpuKernel final : public CompiledKernel {
 public:
  CpuKernel(void* handle, GsCpuEntry entry, std::string name)
      : handle_(handle), entry_(entry), name_(std::move(name)) {
    install_fault_report();
  }
  // RTLD_NODELETE keeps the code mapped after dlclose: threads that ran the kernel still
  // hold its thread_local storage (__shared__, checked-mode scratch), which LeakSanitizer
  // and late thread exits would otherwise reach through a stale DTV entry.
  ~CpuKernel() override { dlclose(handle_); }
  // A superblock's blocks are spread over the cpu device's threads in tiles (PieceGrid),
  // except where it must run on one thread: a reduce partial (combined without atomics,
  // see views.hpp) or the checked mode's report; and where it is too small for the
  // hand-off (a few microseconds) to pay.
  static constexpr int64_t kMinThreadsToSpread = 1024;
  void run(const GsLaunch& launch, Device& device) const override {
    auto* cpu = dynamic_cast<CpuDevice*>(&device);
    int64_t blocks = 1, threads = 1;
    for (int ax = 0; ax < 3; ++ax) {
      blocks *= launch.block_hi[ax] - launch.block_lo[ax];
      threads *= (launch.block_hi[ax] - launch.block_lo[ax]) * int64_t(launch.block_dim[ax]);
    }
    bool whole =
        !cpu || cpu->threads() < 2 || blocks < 2 || threads < kMinThreadsToSpread || launch.check;
    for (int32_t p = 0; p < launch.num_params && !whole; ++p)
      whole = launch.arrays[p].data && launch.arrays[p].mode == GS_REDUCE;
    const int index = device.index();
    if (whole) {
      RunningKernel running(name_.c_str(), index, launch);
      entry_(&launch, runtime_);
      return;
    }
    const PieceGrid grid(launch.block_lo, launch.block_hi, launch.block_dim,
                         PieceGrid::wanted(threads, cpu->threads()));
    cpu->parallel(int(grid.pieces()), [&](int i) {
      GsLaunch part = launch;
      grid.cut(i, part);
      RunningKernel running(name_.c_str(), index, part);
      entry_(&part, runtime_);
    });
  }

 private:
  void* handle_;
  GsCpuEntry entry_;
  std::string name_;  // for the fault report
  const GsCpuRuntime* runtime_ = fiber_runtime();
};

// Loads a compiled kernel; null (with the reason in `error`) when the file is unusable.
std::shared_ptr<CompiledKernel> load(const std::string& path, const std::string& name,
                                     std::string& error) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* e = dlerror();
    error = e ? e : "dlopen failed";
    return nullptr;
  }
  auto entry = reinterpret_cast<GsCpuEntry>(dlsym(handle, GRIDSPAN_CPU_ENTRY_NAME));
  if (!entry) {
    error = fmt::format("{} has no {}", path, GRIDSPAN_CPU_ENTRY_NAME);
    dlclose(handle);
    return nullptr;
  }
  return std::make_shared<CpuKernel>(handle, entry, name);
}

// The CPU's feature flags (/proc/cpuinfo's first "flags" line; empty where there is none):
// kernels compiled for one CPU are not loaded from a cache folder shared with another.
std::string cpu_features() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) return line;
  return "";
}

// What every compile of one compiler command shares: its identity and the header folder.
struct Toolchain {
  std::vector<std::string> command;
  std::string identity;  // `--version` output
  std::string include_dir;
  std::string headers_hash;
};

}  // namespace

namespace detail {
long compiler_invocations() {
  return g_compiler_invocations.load();
}
}  // namespace detail

bool uses_barrier(const std::string& source) {
  return uses_identifier(source, "__syncthreads");
}

std::string generate_wrapper(const KernelSource& k) {
  const bool fibers = uses_barrier(k.source);
  std::string s;
  s +=
      fmt::format("// Generated by gridspan for kernel `{}` (cpu backend); do not edit.\n", k.name);
  s += "#include <gridspan/device/kernel.hpp>\n";
  for (const auto& [name, value] : k.defines) {
    const bool fits_int = value >= -2147483647LL && value <= 2147483647LL;
    s += fmt::format("#define {} {}{}\n", name, value, fits_int ? "" : "LL");
  }
  s += fmt::format("#line 1 \"{}\"\n", file_name(k));
  s += k.source;
  if (s.back() != '\n') s += '\n';
  s += fmt::format("#line 1 \"{}.gridspan-wrapper\"\n", k.name);
  s += "namespace {\n";
  s += "struct GsArgs {\n";
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    s += fmt::format("  {} p{};  // {}\n", p.is_array ? view_type(p) : dtype_cpp_name(p.dtype), i,
                     p.name);
  }
  s += "  dim3 block;\n};\n";
  s += "inline __attribute__((always_inline)) void gs_call(GsArgs& a) {\n";
  s += fmt::format("  {}(a.block", k.name);
  for (std::size_t i = 0; i < k.params.size(); ++i) s += fmt::format(", a.p{}", i);
  s += ");\n}\n";
  if (fibers) {
    s += "void gs_fiber_body(void* arg, int32_t t) {\n"
         "  threadIdx = ::gridspan::cpu_detail::thread_index(t);\n"
         "  gs_call(*static_cast<GsArgs*>(arg));\n"
         "}\n";
  }
  s += "}  // namespace\n";
  s += "extern \"C\" __attribute__((visibility(\"default\"))) void " GRIDSPAN_CPU_ENTRY_NAME
       "(const GsLaunch* gs_launch, const GsCpuRuntime* gs_runtime) {\n";
  s += "  (void)gs_runtime;\n  GsArgs gs_a;\n";
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    if (p.is_array) {
      s += fmt::format(
          "  gs_a.p{0} = {1}::from_arg(gs_launch->arrays[{0}], {0}, gs_launch->check);\n", i,
          view_type(p));
    } else {
      s += fmt::format("  gs_a.p{0} = *static_cast<const {1}*>(gs_launch->scalars[{0}]);\n", i,
                       dtype_cpp_name(p.dtype));
    }
  }
  s +=
      "  const unsigned int gs_bx = gs_launch->block_dim[0], gs_by = gs_launch->block_dim[1],"
      " gs_bz = gs_launch->block_dim[2];\n"
      "  blockDim = dim3(gs_bx, gs_by, gs_bz);\n"
      "  gridDim = dim3(gs_launch->grid_dim[0], gs_launch->grid_dim[1], gs_launch->grid_dim[2]);\n";
  if (fibers) s += "  ::gridspan::cpu_detail::FiberScope gs_scope(gs_runtime);\n";
  s += "  for (int64_t gs_z = gs_launch->block_lo[2]; gs_z < gs_launch->block_hi[2]; ++gs_z)\n"
       "    for (int64_t gs_y = gs_launch->block_lo[1]; gs_y < gs_launch->block_hi[1]; ++gs_y)\n"
       "      for (int64_t gs_x = gs_launch->block_lo[0]; gs_x < gs_launch->block_hi[0]; ++gs_x) "
       "{\n"
       "        gs_a.block = dim3(unsigned(gs_x), unsigned(gs_y), unsigned(gs_z));\n";
  if (fibers) {
    s += "        gs_runtime->run_fibers(int32_t(gs_bx * gs_by * gs_bz), gs_fiber_body, &gs_a);\n";
  } else {
    s += "        for (unsigned int gs_tz = 0; gs_tz < gs_bz; ++gs_tz) {\n"
         "          threadIdx.z = gs_tz;\n"
         "          for (unsigned int gs_ty = 0; gs_ty < gs_by; ++gs_ty) {\n"
         "            threadIdx.y = gs_ty;\n"
         "            for (unsigned int gs_tx = 0; gs_tx < gs_bx; ++gs_tx) {\n"
         "              threadIdx.x = gs_tx;\n"
         "              gs_call(gs_a);\n"
         "            }\n"
         "          }\n"
         "        }\n";
  }
  s += "      }\n}\n";
  return s;
}

CpuCompiler::CpuCompiler(CompilerOptions options) : options_(std::move(options)) {}

CpuCompiler::~CpuCompiler() = default;

const std::string& CpuCompiler::cache_dir() {
  std::lock_guard lock(mutex_);
  if (cache_dir_.empty()) {
    cache_dir_ = resolve_cache_root(options_.cache_dir) + "/cpu";
    if (!make_dirs(cache_dir_)) {
      throw CompileError(
          fmt::format("cannot create the kernel cache folder {}: {}; set "
                      "GRIDSPAN_CACHE_DIR to a writable folder",
                      cache_dir_, std::strerror(errno)));
    }
  }
  return cache_dir_;
}

namespace {

// The toolchain for `command` in `cache_dir`, set up once per process and command.
const Toolchain& toolchain(const std::string& command_text, const std::string& cache_dir) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<Toolchain>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[{command_text, cache_dir}];
  if (slot) return *slot;
  auto t = std::make_unique<Toolchain>();
  t->command = split_words(command_text.empty() ? "c++" : command_text);
  auto version_args = t->command;
  version_args.push_back("--version");
  const ProcessResult version = run_process(version_args);
  if (version.exit_code != 0) {
    throw CompileError(fmt::format(
        "the C++ compiler `{}` does not work (`--version` exited with {}): {}Name a working "
        "C++17 compiler with GRIDSPAN_CXX (Config::cxx).",
        join(t->command), version.exit_code, version.output));
  }
  t->identity = version.output + cpu_features();  // -march=native code runs on this CPU only
  Hasher h;
  for (const auto& [path, content] : gridspan::detail::embedded_files()) {
    h.add(path);
    h.add(content);
  }
  t->headers_hash = h.hex();
  t->include_dir = cache_dir + "/include-" + t->headers_hash.substr(0, 16);
  for (const auto& [path, content] : gridspan::detail::embedded_files()) {
    const std::string target = t->include_dir + "/gridspan/device/" + std::string(path);
    if (file_exists(target)) continue;
    if (!make_dirs(target.substr(0, target.rfind('/')))) {
      throw CompileError(
          fmt::format("cannot create {}: {}; set GRIDSPAN_CACHE_DIR to a writable folder", target,
                      std::strerror(errno)));
    }
    write_file_atomically(target, content);
  }
  slot = std::move(t);
  return *slot;
}

}  // namespace

std::shared_ptr<CompiledKernel> CpuCompiler::compile(const KernelSource& k) {
  const std::string file = file_name(k);
  reject_unsupported(k, file);
  const std::string wrapper = generate_wrapper(k);
  const std::string dir = cache_dir();
  const Toolchain& tc = toolchain(options_.cxx, dir);

  // -O3 vectorises loops (the array library's kernels run lines of elements per thread);
  // libmvec gives them vector math (see cpu_builtins.hpp), linked only where called.
  // -march=native: this CPU's vector width (the cache key holds its features); no fused
  // multiply-adds the source does not ask for, as in the host reference.
  std::vector<std::string> flags = {
      "-std=c++17", "-O3",     "-march=native",   "-ffp-contract=off",
      "-fPIC",      "-shared", "-fno-math-errno", "-fvisibility=hidden",
      "-w",         "-pipe"};
  if (k.checked) flags.push_back("-DGRIDSPAN_CHECKED=1");
  Hasher h;
  h.add(wrapper);
  h.add(join(flags));
  h.add(join(tc.command));
  h.add(tc.identity);
  h.add(tc.headers_hash);
  h.add(std::to_string(GRIDSPAN_ABI_VERSION));
  const std::string key = h.hex();

  {
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(key); it != loaded_.end()) return it->second;
  }

  std::string stem = k.name.substr(0, 40);
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  const std::string base = dir + "/" + stem + "-" + key;
  const std::string so_path = base + ".so";
  std::string error;
  std::shared_ptr<CompiledKernel> kernel;
  if (file_exists(so_path)) {
    kernel = load(so_path, k.name, error);
    if (!kernel) logging::warn("cached kernel {} is unusable ({}); recompiling", so_path, error);
  }
  if (!kernel) {
    const std::string source_path = base + ".cpp";
    write_file_atomically(source_path, wrapper);
    const std::string tmp_so = base + unique_suffix() + ".so";
    std::vector<std::string> args = tc.command;
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"-I", tc.include_dir, source_path, "-o", tmp_so});
#if defined(__x86_64__) && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
    args.insert(args.end(), {"-Wl,--as-needed", "-lmvec"});  // after the code that calls it
#endif
    logging::debug("compiling kernel `{}`: {}", k.name, join(args));
    ++g_compiler_invocations;
    const ProcessResult result = run_process(args);
    if (result.exit_code != 0) {
      std::remove(tmp_so.c_str());
      const std::string wrapper_file = k.name + ".gridspan-wrapper";
      const std::string messages = user_messages(result.output, file, wrapper_file);
      std::string advice;
      if (wrapper_error_first(result.output, file, wrapper_file)) {
        advice = signature_advice(k);
      } else {
        advice = fmt::format("Fix the kernel source at the lines above (numbered as in {}).", file);
      }
      throw CompileError(fmt::format(
          "kernel `{}` does not compile for the cpu backend:\n{}{} Compiler: `{}`; generated "
          "wrapper: {}",
          k.name, messages, advice, join(tc.command), source_path));
    }
    if (std::rename(tmp_so.c_str(), so_path.c_str()) != 0) {
      std::remove(tmp_so.c_str());
      throw CompileError(
          fmt::format("cannot write {}: {}; set GRIDSPAN_CACHE_DIR to a writable folder", so_path,
                      std::strerror(errno)));
    }
    kernel = load(so_path, k.name, error);
    if (!kernel) {
      throw CompileError(
          fmt::format("kernel `{}` compiled but cannot be loaded: {}", k.name, error));
    }
  }
  std::lock_guard lock(mutex_);
  auto [it, inserted] = loaded_.emplace(key, kernel);
  return it->second;
}

}  // namespace gridspan::backend::cpu
