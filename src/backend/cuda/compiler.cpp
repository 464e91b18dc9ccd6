// The cuda backend's JIT: the user's kernel wrapped in a generated __global__ entry point
// that runs the blocks of a superblock, compiled by NVRTC to a cubin for the GPU's own
// architecture. Cubins are cached on disk (keyed by the wrapper, the options, NVRTC's
// version, the device headers and the architecture; safe across processes).
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "backend/cuda/cuda.hpp"
#include "backend/cuda/loader.hpp"
#include "backend/jit.hpp"
#include "core/log.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::detail {
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_files();
}

namespace gridspan::backend::cuda {
namespace {

std::atomic<long> g_nvrtc_invocations{0};

std::string headers_hash() {
  static const std::string hash = [] {
    jit::Hasher h;
    for (const auto& [path, content] : gridspan::detail::embedded_files()) {
      h.add(path);
      h.add(content);
    }
    return h.hex();
  }();
  return hash;
}

struct NvrtcResult {
  bool ok = false;
  std::string cubin;
  std::string log;
};

// One NVRTC run; the device headers are given in memory under the names kernels include.
NvrtcResult run_nvrtc(const NvrtcApi& api, const std::string& source, const std::string& name,
                      const std::vector<std::string>& options) {
  std::vector<std::string> header_names;
  std::vector<const char*> header_text, header_name;
  for (const auto& [path, content] : gridspan::detail::embedded_files()) {
    for (std::string n : {"gridspan/device/" + std::string(path), std::string(path)}) {
      header_names.push_back(n);
      header_text.push_back(content.data());
    }
  }
  for (const auto& n : header_names) header_name.push_back(n.c_str());
  NvrtcResult result;
  nvrtcProgram prog = nullptr;
  nvrtcResult r = api.nvrtcCreateProgram(&prog, source.c_str(), name.c_str(),
                                         static_cast<int>(header_text.size()), header_text.data(),
                                         header_name.data());
  if (r != NVRTC_SUCCESS)
    throw CompileError(fmt::format("NVRTC could not create a program for {}: {}", name,
                                   api.nvrtcGetErrorString(r)));
  struct Destroy {
    const NvrtcApi& api;
    nvrtcProgram& p;
    ~Destroy() { api.nvrtcDestroyProgram(&p); }
  } destroy{api, prog};
  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
  ++g_nvrtc_invocations;
  r = api.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  std::size_t log_size = 0;
  api.nvrtcGetProgramLogSize(prog, &log_size);
  result.log.resize(log_size);
  if (log_size) api.nvrtcGetProgramLog(prog, result.log.data());
  while (!result.log.empty() && (result.log.back() == '\0' || result.log.back() == '\n'))
    result.log.pop_back();
  if (r != NVRTC_SUCCESS) return result;
  std::size_t size = 0;
  if (api.nvrtcGetCUBINSize(prog, &size) != NVRTC_SUCCESS || size == 0) {
    result.log += "\nNVRTC produced no cubin (is the architecture one NVRTC knows?)";
    return result;
  }
  result.cubin.resize(size);
  api.nvrtcGetCUBIN(prog, result.cubin.data());
  result.ok = true;
  return result;
}

// The toolkit's headers (cuda_fp16.h and friends, which NVRTC does not carry): CUDA_HOME or
// CUDA_PATH when set, else where the toolkit was at build time, else /usr/local/cuda.
std::string toolkit_include() {
  static const std::string dir = [] {
    std::vector<std::string> candidates;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v)
        candidates.push_back(std::string(v) + "/include");
#ifdef GRIDSPAN_CUDA_INCLUDE_DIR
    candidates.push_back(GRIDSPAN_CUDA_INCLUDE_DIR);
#endif
    candidates.push_back("/usr/local/cuda/include");
    for (const auto& c : candidates)
      if (jit::file_exists(c + "/cuda_fp16.h")) return c;
    return std::string();
  }();
  if (dir.empty())
    throw CompileError(
        "cannot find the CUDA toolkit's headers (cuda_fp16.h) that GPU kernels include; set "
        "CUDA_HOME to the toolkit's folder");
  return dir;
}

const NvrtcApi& nvrtc_or_throw() {
  std::string why;
  const NvrtcApi* api = nvrtc(why);
  if (!api) throw CompileError(fmt::format("cannot compile kernels for the GPU: {}", why));
  return *api;
}

std::string nvrtc_identity(const NvrtcApi& api) {
  int major = 0, minor = 0;
  api.nvrtcVersion(&major, &minor);
  return fmt::format("nvrtc {}.{}", major, minor);
}

// A cubin from the cache folder, or compiled and stored there. `fail` turns a failed
// compilation's log into the error to throw.
template <class Fail>
std::string cached_cubin(const std::string& source, const std::string& program,
                         const std::string& stem, std::vector<std::string> options, int arch,
                         const std::string& cache_dir, Fail fail) {
  const NvrtcApi& api = nvrtc_or_throw();
  options.push_back(fmt::format("--gpu-architecture=sm_{}", arch));
  options.push_back("-I" + toolkit_include());
  jit::Hasher h;
  h.add(source);
  for (const auto& o : options) h.add(o);
  h.add(nvrtc_identity(api));
  h.add(headers_hash());
  h.add(std::to_string(GRIDSPAN_ABI_VERSION));
  const std::string dir = jit::resolve_cache_root(cache_dir) + "/cuda";
  if (!jit::make_dirs(dir))
    throw CompileError(
        fmt::format("cannot create the kernel cache folder {}; set "
                    "GRIDSPAN_CACHE_DIR to a writable folder",
                    dir));
  std::string safe = stem.substr(0, 40);
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  const std::string path = fmt::format("{}/{}-sm{}-{}.cubin", dir, safe, arch, h.hex());
  std::string cubin;
  if (jit::file_exists(path) && jit::read_file(path, cubin) && !cubin.empty()) return cubin;
  logging::debug("compiling `{}` for sm_{} with NVRTC", stem, arch);
  NvrtcResult r = run_nvrtc(api, source, program, options);
  if (!r.ok) fail(r.log);
  jit::write_file_atomically(path, r.cubin);
  return r.cubin;
}

std::string param_type(const ParamInfo& p) {
  return p.is_array ? "GsArrayArg" : dtype_cpp_name(p.dtype);
}

// gridDim is the whole launch's grid, not the superblock's: when the kernel reads it, it
// lives in shared memory, set by the entry point before the kernel runs.
std::string grid_prologue(bool grid, const std::string& header) {
  if (!grid) return {};
  return fmt::format(
      "  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)\n"
      "    ::gridspan::cuda_detail::grid_dim =\n"
      "        make_uint3({0}.grid_dim[0], {0}.grid_dim[1], {0}.grid_dim[2]);\n"
      "  __syncthreads();\n",
      header);
}

// An entry's first line, with the kernel's __launch_bounds__ where it has them.
std::string entry_head(const KernelSource& k, const char* name, const std::string& params) {
  const std::string bounds =
      k.max_threads == 0  ? ""
      : k.min_blocks == 0 ? fmt::format("__launch_bounds__({}) ", k.max_threads)
                          : fmt::format("__launch_bounds__({}, {}) ", k.max_threads, k.min_blocks);
  return fmt::format("extern \"C\" __global__ void {}{}({}) {{\n", bounds, name, params);
}

// The user's function called as block (gs_x, gs_y, gs_z) of the superblock gs_h.
std::string block_call(const std::string& name, const std::string& call) {
  return fmt::format(
      "{}(dim3(unsigned(gs_h.block_lo[0] + gs_x), unsigned(gs_h.block_lo[1] + gs_y), "
      "unsigned(gs_h.block_lo[2] + gs_z)){})",
      name, call);
}

// The parts entry (abi.h): the parts are stacked along the grid's z axis, so a block finds
// its part by comparing blockIdx.z with at most eight bounds, and its place in the part is
// its own blockIdx: no division, and all of it the same for every thread of the block.
// (Found by a loop over a linear block index with two 64-bit divisions, on every thread,
// it cost about 100 instructions per warp against HotSpot's body of 122, and HotSpot ran
// 70% slower as one launch of four parts than as four launches.) Blocks past a smaller
// part's extent return at once.
std::string parts_entry(const KernelSource& k, const std::string& prologue,
                        const std::string& call) {
  const int parts = parts_capacity(k.params);
  if (parts == 0) return {};
  // __grid_constant__: the table is read where the launch put it; indexing a by-value
  // parameter with a run-time index would copy all of it to every thread's local memory.
  std::string params = "const __grid_constant__ gs_parts gs_t, int gs_n", views;
  int arrays = 0;
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    if (p.is_array)
      views += fmt::format(
          "  const {1} gs_v{0} = {1}::from_arg(gs_t.p[gs_k].a[{2}], {0}, gs_h.check);\n", i,
          jit::view_type(p), arrays++);
    else
      params += fmt::format(", {} gs_p{}", param_type(p), i);
  }
  std::string s = fmt::format(
      "struct gs_part {{ GsCudaHeader h; GsArrayArg a[{0}]; }};\n"
      "struct gs_parts {{ long long first[{1} + 1]; gs_part p[{1}]; }};\n",
      arrays, parts);
  s += entry_head(k, GRIDSPAN_CUDA_PARTS_ENTRY_NAME, params);
  s += prologue;
  s += "  int gs_k = 0;\n"
       "  while (gs_k + 1 < gs_n && blockIdx.z >= gs_t.first[gs_k + 1]) ++gs_k;\n"
       "  const GsCudaHeader& gs_h = gs_t.p[gs_k].h;\n"
       "  if (blockIdx.x >= gs_h.blocks[0] || blockIdx.y >= gs_h.blocks[1]) return;\n"
       "  const long long gs_x = blockIdx.x, gs_y = blockIdx.y, "
       "gs_z = blockIdx.z - gs_t.first[gs_k];\n";
  s += views;
  s += "  " + block_call(k.name, call) + ";\n}\n";
  return s;
}

}  // namespace

int parts_capacity(const std::vector<ParamInfo>& params) {
  int arrays = 0, scalars = 0;
  for (const auto& p : params) (p.is_array ? arrays : scalars)++;
  return arrays == 0 ? 0 : GRIDSPAN_CUDA_PARTS(arrays, scalars);
}

namespace detail {
long nvrtc_invocations() {
  return g_nvrtc_invocations.load();
}
}  // namespace detail

std::string generate_wrapper(const KernelSource& k) {
  const bool grid = jit::uses_identifier(k.source, "gridDim");
  std::string s;
  s += fmt::format("// Generated by gridspan for kernel `{}` (cuda backend); do not edit.\n",
                   k.name);
  s += "#include <gridspan/device/kernel.hpp>\n";
  if (grid) {
    s += "namespace gridspan { namespace cuda_detail { __shared__ uint3 grid_dim; } }\n";
    s += "#define gridDim (::gridspan::cuda_detail::grid_dim)\n";
  }
  for (const auto& [name, value] : k.defines) {
    const bool fits_int = value >= -2147483647LL && value <= 2147483647LL;
    s += fmt::format("#define {} {}{}\n", name, value, fits_int ? "" : "LL");
  }
  s += fmt::format("#line 1 \"{}\"\n", jit::file_name(k));
  s += k.source;
  if (s.back() != '\n') s += '\n';
  s += fmt::format("#line 1 \"{}.gridspan-wrapper\"\n", k.name);
  if (grid) s += "#undef gridDim\n";
  std::string params = "GsCudaHeader gs_h", views, call;
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    params += fmt::format(", {} gs_p{}", param_type(p), i);
    if (p.is_array)
      views += fmt::format("  const {1} gs_v{0} = {1}::from_arg(gs_p{0}, {0}, gs_h.check);\n", i,
                           jit::view_type(p));
    call += fmt::format(", gs_{}{}", p.is_array ? "v" : "p", i);
  }
  const std::string prologue = grid_prologue(grid, "gs_h");
  // Entries of one block per superblock block: for any superblock, and for one at the
  // grid's origin, whose block indices need no offset (an add per axis is 3% of HotSpot's
  // instructions). Then the parts entry. (A superblock with more blocks than a grid may
  // have is launched in pieces, backend.cpp.)
  s += entry_head(k, GRIDSPAN_CUDA_ENTRY_NAME, params);
  s += prologue + views;
  s += fmt::format(
      "  {}(dim3(unsigned(gs_h.block_lo[0] + blockIdx.x), unsigned(gs_h.block_lo[1] + "
      "blockIdx.y), unsigned(gs_h.block_lo[2] + blockIdx.z)){});\n}}\n",
      k.name, call);
  s += entry_head(k, GRIDSPAN_CUDA_ORIGIN_ENTRY_NAME, params);
  s += prologue + views;
  s += fmt::format("  {}(dim3(blockIdx.x, blockIdx.y, blockIdx.z){});\n}}\n", k.name, call);
  return s + parts_entry(k, grid_prologue(grid, "gs_t.p[0].h"), call);
}

namespace {
std::vector<std::string> kernel_options() {
  return {"-std=c++17", "--device-as-default-execution-space", "-lineinfo"};
}
}  // namespace

std::string compile_program(const std::string& source, const std::string& name, int arch,
                            const std::string& cache_dir) {
  return cached_cubin(source, name + ".cu", name, kernel_options(), arch, cache_dir,
                      [&](const std::string& log) {
                        throw CompileError(fmt::format("`{}` does not compile:\n{}", name, log));
                      });
}

std::string compile_cubin(const KernelSource& k, int arch, const std::string& cache_dir) {
  const std::string wrapper = generate_wrapper(k);
  std::vector<std::string> options = kernel_options();
  if (k.checked) options.push_back("-DGRIDSPAN_CHECKED=1");
  const std::string file = jit::file_name(k);
  const std::string wrapper_file = k.name + ".gridspan-wrapper";
  return cached_cubin(
      wrapper, wrapper_file + ".cu", k.name, options, arch, cache_dir, [&](const std::string& log) {
        const std::string messages = jit::user_messages(log, file, wrapper_file);
        const std::string advice = jit::wrapper_error_first(log, file, wrapper_file)
                                       ? jit::signature_advice(k)
                                       : fmt::format(
                                             "Fix the kernel source at the lines above "
                                             "(numbered as in {}).",
                                             file);
        throw CompileError(
            fmt::format("kernel `{}` does not compile for the cuda backend (sm_{}):\n{}\n{}",
                        k.name, arch, messages, advice));
      });
}

std::string builtin_cubin(int arch, const std::string& cache_dir) {
  return cached_cubin(
      builtins_source(), "gridspan-builtins.cu", "gridspan_builtins", {"-std=c++17"}, arch,
      cache_dir, [](const std::string& log) {
        throw CompileError(fmt::format(
            "internal error: gridspan's built-in GPU kernels do not compile:\n{}", log));
      });
}

}  // namespace gridspan::backend::cuda
