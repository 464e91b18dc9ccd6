// bench_paper: the paper's benchmarks on gridspan against plain single-GPU CUDA programs.
//
//   bench_paper [--bench md5,nbody,...] [--sizes 0,1,2] [--gpus 1,2] [--runs 5]
//               [--out-of-core] [--json results.json]
//
// For each benchmark and size: the plain CUDA program (the same kernel bodies launched
// directly over their whole grids on GPU 0), gridspan on each GPU count, and (with
// --out-of-core) gridspan on one GPU with GRIDSPAN_DEVICE_MEMORY at half of the data. One
// untimed warm-up, then the mean of --runs runs, each timed from its first launch to the
// end of its last; throughput = items / time. Outputs are compared with the baseline's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

// Internal: the plain CUDA baselines call the driver API through gridspan's own loader.
#include "backend/cuda/cuda.hpp"
#include "backend/cuda/loader.hpp"
#include "backend/jit.hpp"
#include "bench/paper/paper.hpp"

namespace gridspan::bench {
namespace {

namespace cuda = backend::cuda;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Timing {
  std::vector<double> runs;
  std::vector<unsigned char> output;
  std::size_t moved_bytes = 0;  // bytes copied between GPUs and host in the timed runs
  double mean() const {
    double s = 0;
    for (double r : runs) s += r;
    return runs.empty() ? 0 : s / double(runs.size());
  }
};

// ---- gridspan ---------------------------------------------------------------------------

using AnyArray =
    std::variant<gs::Array<float>, gs::Array<double>, gs::Array<int32_t>, gs::Array<uint32_t>>;

// `pieces`: what the spec's distributions divide the data by (the GPU count, times a
// finer split for out-of-core runs); 0: gridspan chooses (dist::automatic, work::automatic).
AnyArray create(gs::Context& ctx, const ArraySpec& a, int pieces) {
  const gs::DataDistribution dist = pieces > 0 ? a.dist(pieces) : gs::dist::automatic(a.halo);
  switch (a.dtype) {
    case DType::f32:
      return ctx.empty<float>(a.shape, dist);
    case DType::f64:
      return ctx.empty<double>(a.shape, dist);
    case DType::i32:
      return ctx.empty<int32_t>(a.shape, dist);
    case DType::u32:
      return ctx.empty<uint32_t>(a.shape, dist);
    default:
      throw Error(fmt::format("bench: array {} has an unsupported dtype", a.name));
  }
}

const gs::detail::ArrayHandle& handle(const AnyArray& a) {
  return std::visit([](const auto& x) -> const gs::detail::ArrayHandle& { return x.handle(); }, a);
}

gs::detail::LaunchArg array_arg(const AnyArray& a) {
  gs::detail::LaunchArg la;
  la.array = &handle(a);
  la.dtype = la.array->dtype;
  return la;
}

// Fills `arr` (spec `a`) with its generator through gridspan; `kernels` keeps the compiled
// generators between arrays.
void generate(gs::Context& ctx, std::map<std::string, gs::Kernel>& kernels, const ArraySpec& a,
              const AnyArray& arr, int pieces) {
  const std::string fn = generator_function(a);
  if (!kernels.count(fn))
    kernels[fn] = ctx.compile(gs::KernelDef::from_source(generator_source(), fn)
                                  .annotate(generator_annotation(a.shape.rank())));
  const GeneratorLaunch l = generator_launch(a, std::max(pieces, 1));
  std::vector<gs::detail::LaunchArg> args;
  for (const auto& v : l.scalars)
    std::visit([&](const auto& x) { args.push_back(gs::detail::make_arg(x)); }, v);
  args.push_back(array_arg(arr));
  kernels[fn].launch_packed(
      l.threads, l.block, pieces > 0 ? gs::work::tiles(l.superblock) : gs::work::automatic(), args);
}

// 1, or the MPI ranks when run under mpirun (rank 0 runs the benchmarks over all of them).
int mpi_ranks() {
  return gs::process_count();
}

// `per_gpu`: chunks and superblocks per GPU (out-of-core runs stream finer pieces, so that
// part of the data stays resident between sweeps); 0: gridspan chooses them. `one_process`: under
// mpirun, rank 0 alone with `gpus` GPUs (the others wait). `backend` "cpu": `gpus` virtual cpu
// devices instead (GRIDSPAN_CPU_THREADS threads each).
Timing run_gridspan(const Spec& spec, const std::string& backend, int gpus,
                    std::size_t device_memory, int runs, int per_gpu, bool one_process = false,
                    const std::string& trace_tag = "") {
  gs::Config c = gs::Config::from_env();
  c.backend = backend;
  // A sweep's variants trace into files of their own: GRIDSPAN_TRACE=t.json gives t-16.json...
  if (!c.trace_file.empty() && !trace_tag.empty()) {
    const auto dot = c.trace_file.rfind('.');
    const std::string stem = dot == std::string::npos ? c.trace_file : c.trace_file.substr(0, dot);
    c.trace_file = fmt::format("{}-{}.json", stem, trace_tag);
  }
  // Under mpirun `gpus` counts every rank's: each rank takes its share.
  const int ranks = one_process ? 1 : mpi_ranks();
  if (gpus % ranks)
    throw Error(fmt::format("bench: {} GPUs cannot be shared by {} ranks", gpus, ranks));
  (backend == "cpu" ? c.cpu_devices : c.gpus) = gpus / ranks;
  c.mpi = !one_process;
  c.device_memory = device_memory;
  gs::Context ctx(c);
  if (ctx.device_count() != gpus)
    throw Error(fmt::format("bench: asked for {} GPUs, got {}", gpus, ctx.device_count()));
  std::map<std::string, gs::Kernel> kernels;
  for (const auto& k : spec.kernels)
    kernels[k.function] =
        ctx.compile(gs::KernelDef::from_source(k.source, k.function).annotate(k.annotation));
  std::map<std::string, AnyArray> arrays;
  std::map<std::string, gs::Kernel> generators;
  for (const auto& a : spec.arrays) {
    auto it = arrays.emplace(a.name, create(ctx, a, gpus * per_gpu)).first;
    if (!a.init.empty()) gs::detail::array_write(handle(it->second), a.init.data(), a.init.size());
    if (a.gen.kind != Generator::Kind::none)
      generate(ctx, generators, a, it->second, gpus * per_gpu);
  }
  ctx.synchronize();
  auto run_once = [&] {
    for (const auto& s : spec.steps) {
      if (s.kernel.empty()) {
        std::swap(arrays.at(s.swap_a), arrays.at(s.swap_b));
        continue;
      }
      std::vector<gs::detail::LaunchArg> args;
      for (const auto& arg : s.args) {
        if (auto* name = std::get_if<std::string>(&arg)) {
          args.push_back(array_arg(arrays.at(*name)));
        } else {
          std::visit(
              [&](const auto& v) {
                using V = std::decay_t<decltype(v)>;
                if constexpr (!std::is_same_v<V, std::string>)
                  args.push_back(gs::detail::make_arg(v));
              },
              arg);
        }
      }
      kernels.at(s.kernel).launch_packed(
          s.threads, s.block, per_gpu > 0 ? s.work(gpus * per_gpu) : gs::work::automatic(), args);
    }
  };
  auto spilled = [&] {
    std::size_t b = 0;
    auto stats = ctx.memory_stats();
    for (int d = 0; d < ctx.device_count(); ++d)
      b += stats[d].copied_out_bytes + stats[d].copied_in_bytes;
    return b;
  };
  run_once();  // warm-up: compiles nothing more, touches every page
  ctx.synchronize();
  Timing t;
  const std::size_t spilled_before = spilled();
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    run_once();
    ctx.synchronize();
    t.runs.push_back(seconds(t0, Clock::now()));
  }
  t.moved_bytes = spilled() - spilled_before;
  const auto& out = handle(arrays.at(spec.output));
  const ArraySpec* os = nullptr;
  for (const auto& a : spec.arrays)
    if (a.name == spec.output) os = &a;
  t.output.resize(os->bytes());
  gs::detail::array_read(out, t.output.data(), t.output.size());
  return t;
}

// ---- the plain CUDA program ---------------------------------------------------------------

// The kernel body with an entry that launches it directly: views over whole arrays.
std::string baseline_cubin(const KernelSpec& k, int arch) {
  auto params = annotation::parse_signature(k.source, k.function);
  std::string s = "#include <gridspan/device/kernel.hpp>\n" + k.source + "\n";
  s += "extern \"C\" __global__ void gs_baseline(";
  for (std::size_t i = 0; i < params.size(); ++i)
    s += fmt::format("{}{} p{}", i ? ", " : "",
                     params[i].is_array ? "GsArrayArg" : dtype_cpp_name(params[i].dtype), i);
  s += ") {\n  " + k.function + "(blockIdx";
  for (std::size_t i = 0; i < params.size(); ++i)
    s += params[i].is_array ? fmt::format(", {}::from_arg(p{}, {}, nullptr)",
                                          backend::jit::view_type(params[i]), i, i)
                            : fmt::format(", p{}", i);
  s += ");\n}\n";
  return cuda::compile_program(s, "baseline_" + k.function, arch, "");
}

constexpr const char* kBaseline = "GPU 0 (baseline)";

class Direct {
 public:
  Direct() {
    std::string why;
    api_ = cuda::driver(why);
    if (!api_) throw Error("bench: no GPU: " + why);
    GRIDSPAN_CHECK_CU(api_->cuDeviceGet(&device_, 0), kBaseline);
    GRIDSPAN_CHECK_CU(api_->cuDevicePrimaryCtxRetain(&context_, device_), kBaseline);
    GRIDSPAN_CHECK_CU(api_->cuCtxSetCurrent(context_), kBaseline);
    GRIDSPAN_CHECK_CU(api_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), kBaseline);
    int major = 0, minor = 0;
    api_->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    api_->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    arch_ = major * 10 + minor;
  }
  ~Direct() {
    api_->cuCtxSetCurrent(context_);
    for (auto& [k, m] : modules_) api_->cuModuleUnload(m);
    api_->cuStreamDestroy(stream_);
    api_->cuDevicePrimaryCtxRelease(device_);
  }
  const cuda::DriverApi& api() const { return *api_; }
  void bind() { GRIDSPAN_CHECK_CU(api_->cuCtxSetCurrent(context_), kBaseline); }
  CUstream stream() const { return stream_; }

  CUfunction function(const KernelSpec& k) {
    bind();
    auto it = modules_.find(k.function);
    if (it == modules_.end()) {
      const std::string cubin = baseline_cubin(k, arch_);
      CUmodule m = nullptr;
      GRIDSPAN_CHECK_CU(api_->cuModuleLoadData(&m, cubin.data()), kBaseline);
      it = modules_.emplace(k.function, m).first;
    }
    CUfunction f = nullptr;
    GRIDSPAN_CHECK_CU(api_->cuModuleGetFunction(&f, it->second, "gs_baseline"), kBaseline);
    return f;
  }

  // Bandwidths measured now: device-to-device copy (bytes read + written) and pinned
  // host -> device, in bytes per second.
  std::pair<double, double> bandwidths() {
    const std::size_t n = std::size_t(1) << 30;
    CUdeviceptr a = 0, b = 0;
    void* h = nullptr;
    GRIDSPAN_CHECK_CU(api_->cuMemAlloc(&a, n), kBaseline);
    GRIDSPAN_CHECK_CU(api_->cuMemAlloc(&b, n), kBaseline);
    GRIDSPAN_CHECK_CU(api_->cuMemHostAlloc(&h, n, 0), kBaseline);
    auto time = [&](auto f) {
      f();
      api_->cuStreamSynchronize(stream_);
      auto t0 = Clock::now();
      for (int i = 0; i < 5; ++i) f();
      api_->cuStreamSynchronize(stream_);
      return seconds(t0, Clock::now()) / 5;
    };
    double d2d = 2.0 * double(n) / time([&] { api_->cuMemcpyAsync(b, a, n, stream_); });
    double h2d = double(n) / time([&] { api_->cuMemcpyHtoDAsync(a, h, n, stream_); });
    api_->cuMemFree(a);
    api_->cuMemFree(b);
    api_->cuMemFreeHost(h);
    return {d2d, h2d};
  }

 private:
  const cuda::DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  int arch_ = 0;
  std::map<std::string, CUmodule> modules_;
};

Timing run_baseline(Direct& gpu, const Spec& spec, int runs) {
  const auto& api = gpu.api();
  gpu.bind();
  std::map<std::string, CUdeviceptr> ptr;
  struct Free {  // every buffer goes, also when an allocation fails midway
    const cuda::DriverApi& api;
    std::map<std::string, CUdeviceptr>& ptr;
    ~Free() {
      for (auto& [n, p] : ptr) api.cuMemFree(p);
    }
  } free_all{api, ptr};
  std::map<std::string, const ArraySpec*> info;
  for (const auto& a : spec.arrays) {
    CUdeviceptr p = 0;
    GRIDSPAN_CHECK_CU(api.cuMemAlloc(&p, std::max<std::size_t>(a.bytes(), 1)), kBaseline);
    if (!a.init.empty()) {
      GRIDSPAN_CHECK_CU(api.cuMemcpyHtoDAsync(p, a.init.data(), a.init.size(), gpu.stream()),
                        kBaseline);
      GRIDSPAN_CHECK_CU(api.cuStreamSynchronize(gpu.stream()), kBaseline);
    }
    ptr[a.name] = p;
    info[a.name] = &a;
    if (a.gen.kind != Generator::Kind::none) {
      KernelSpec k{
          generator_function(a), generator_source(), generator_annotation(a.shape.rank()), {}};
      const GeneratorLaunch l = generator_launch(a, 1);
      std::vector<unsigned char> scalars(l.scalars.size() * 8);
      std::vector<void*> params;
      for (std::size_t i = 0; i < l.scalars.size(); ++i) {
        std::visit([&](const auto& x) { std::memcpy(&scalars[i * 8], &x, sizeof x); },
                   l.scalars[i]);
        params.push_back(&scalars[i * 8]);
      }
      GsArrayArg g;
      std::memset(&g, 0, sizeof g);
      g.data = reinterpret_cast<void*>(p);
      g.rank = a.shape.rank();
      g.elem_size = int32_t(dtype_size(a.dtype));
      for (int ax = 0; ax < 3; ++ax) g.extent[ax] = g.region_hi[ax] = a.shape.get(ax);
      params.push_back(&g);
      unsigned grid[3], block[3];
      for (int ax = 0; ax < 3; ++ax) {
        block[ax] = unsigned(l.block.get(ax));
        grid[ax] = unsigned(std::min<int64_t>(
            (l.threads.get(ax) + l.block.get(ax) - 1) / l.block.get(ax), ax ? 65535 : 0x7FFFFFFF));
      }
      GRIDSPAN_CHECK_CU(
          api.cuLaunchKernel(gpu.function(k), grid[0], grid[1], grid[2], block[0], block[1],
                             block[2], 0, gpu.stream(), params.data(), nullptr),
          kBaseline);
      GRIDSPAN_CHECK_CU(api.cuStreamSynchronize(gpu.stream()), kBaseline);
    }
  }
  std::map<std::string, const KernelSpec*> kspec;
  std::map<std::string, CUfunction> fn;
  std::map<std::string, std::vector<ParamInfo>> signature;  // read once, not per run
  for (const auto& k : spec.kernels) {
    kspec[k.function] = &k;
    fn[k.function] = gpu.function(k);
    signature[k.function] = annotation::parse_signature(k.source, k.function);
  }
  auto run_once = [&] {
    for (const auto& s : spec.steps) {
      if (s.kernel.empty()) {
        std::swap(ptr.at(s.swap_a), ptr.at(s.swap_b));
        std::swap(info.at(s.swap_a), info.at(s.swap_b));
        continue;
      }
      const KernelSpec& k = *kspec.at(s.kernel);
      const auto& params = signature.at(s.kernel);
      std::vector<GsArrayArg> arrays(s.args.size());
      std::vector<unsigned char> scalars(s.args.size() * 8);
      std::vector<void*> p(s.args.size());
      for (std::size_t i = 0; i < s.args.size(); ++i) {
        if (auto* name = std::get_if<std::string>(&s.args[i])) {
          const ArraySpec& a = *info.at(*name);
          GsArrayArg& g = arrays[i];
          std::memset(&g, 0, sizeof g);
          g.data = reinterpret_cast<void*>(ptr.at(*name));
          g.rank = a.shape.rank();
          g.elem_size = int32_t(dtype_size(a.dtype));
          for (int ax = 0; ax < 3; ++ax) {
            g.extent[ax] = a.shape.get(ax);
            g.region_hi[ax] = a.shape.get(ax);
          }
          g.mode = GS_READWRITE;
          if (auto r = k.reduce_fill.find(params[i].name); r != k.reduce_fill.end()) {
            g.mode = GS_REDUCE;
            g.op = r->second.op;
            GRIDSPAN_CHECK_CU(
                api.cuMemsetD8Async(ptr.at(*name), r->second.fill, a.bytes(), gpu.stream()),
                kBaseline);
          }
          p[i] = &g;
        } else {
          std::visit(
              [&](const auto& v) {
                using V = std::decay_t<decltype(v)>;
                if constexpr (!std::is_same_v<V, std::string>) {
                  std::memcpy(&scalars[i * 8], &v, sizeof v);
                  p[i] = &scalars[i * 8];
                }
              },
              s.args[i]);
        }
      }
      unsigned grid[3], block[3];
      for (int ax = 0; ax < 3; ++ax) {
        block[ax] = unsigned(s.block.get(ax));
        grid[ax] = unsigned((s.threads.get(ax) + s.block.get(ax) - 1) / s.block.get(ax));
      }
      GRIDSPAN_CHECK_CU(api.cuLaunchKernel(fn.at(s.kernel), grid[0], grid[1], grid[2], block[0],
                                           block[1], block[2], 0, gpu.stream(), p.data(), nullptr),
                        kBaseline);
    }
  };
  run_once();
  GRIDSPAN_CHECK_CU(api.cuStreamSynchronize(gpu.stream()), kBaseline);
  Timing t;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    run_once();
    GRIDSPAN_CHECK_CU(api.cuStreamSynchronize(gpu.stream()), kBaseline);
    t.runs.push_back(seconds(t0, Clock::now()));
  }
  t.output.resize(info.at(spec.output)->bytes());
  GRIDSPAN_CHECK_CU(
      api.cuMemcpyDtoHAsync(t.output.data(), ptr.at(spec.output), t.output.size(), gpu.stream()),
      kBaseline);
  GRIDSPAN_CHECK_CU(api.cuStreamSynchronize(gpu.stream()), kBaseline);
  return t;
}

// "equal", or what differs.
std::string compare(const Spec& spec, const std::vector<unsigned char>& got,
                    const std::vector<unsigned char>& want) {
  if (want.empty()) return "unchecked";
  if (got.size() != want.size()) return "sizes differ";
  if (spec.tolerance == 0)
    return got == want ? "equal" : fmt::format("{} bytes differ", [&] {
      std::size_t d = 0;
      for (std::size_t i = 0; i < got.size(); ++i) d += got[i] != want[i];
      return d;
    }());
  const auto out = std::find_if(spec.arrays.begin(), spec.arrays.end(),
                                [&](const ArraySpec& a) { return a.name == spec.output; });
  const bool f64 = out != spec.arrays.end() && out->dtype == DType::f64;
  const std::size_t size = f64 ? 8 : 4, n = got.size() / size;
  auto value = [&](const std::vector<unsigned char>& v, std::size_t i) {
    if (f64) {
      double d;
      std::memcpy(&d, &v[i * 8], 8);
      return d;
    }
    float f;
    std::memcpy(&f, &v[i * 4], 4);
    return double(f);
  };
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = value(got, i), b = value(want, i);
    err = std::max(err, std::fabs(a - b));
    scale = std::max(scale, std::fabs(b));
  }
  return err <= spec.tolerance * std::max(scale, 1e-30)
             ? fmt::format("within {:.0e} (max diff {:.1e})", spec.tolerance, err)
             : fmt::format("DIFFERENT (max diff {:.2e} of {:.2e})", err, scale);
}

std::vector<int> parse_ints(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// ---- the granularity sweep (issue 17) -----------------------------------------------------
//
// One benchmark at one size on `gpus` devices with hand-chosen chunks and superblocks per
// device (each of `per_gpu`), Dask's rule (chunks of 128 MiB of the largest array), Legate's
// (a piece per device only above 2^20 elements a piece) and gridspan's own choice: the
// best of `runs` timed runs each (of every round's, with --rounds), the results checked against
// the first variant's.
struct Variant {
  std::string label;
  int devices;
  int per_gpu;  // 0: automatic
};

std::vector<Variant> sweep_variants(const Spec& spec, int gpus, const std::vector<int>& per_gpu) {
  std::size_t largest = 0;
  int64_t elements = 0;
  for (const auto& a : spec.arrays)
    if (a.bytes() > largest) largest = a.bytes(), elements = a.shape.volume();
  std::vector<Variant> out;
  for (int p : per_gpu) out.push_back({fmt::format("{}", p), gpus, p});
  // Dask: chunks of 128 MiB; Legate: one piece per device of at least 2^20 elements, on
  // as many devices as that gives.
  const int64_t dask = std::max<int64_t>(1, (int64_t(largest) + (int64_t(128) << 20) - 1) >> 27);
  out.push_back({fmt::format("dask {}", dask), gpus,
                 int(std::clamp<int64_t>((dask + gpus - 1) / gpus, 1, 64))});
  const int64_t legate = std::clamp<int64_t>(elements >> 20, 1, gpus);
  out.push_back({fmt::format("legate {}", legate), int(legate), 1});
  out.push_back({"automatic", gpus, 0});
  return out;
}

// What one variant gave over every round: its runs' times, its first output, or its error.
struct Outcome {
  std::vector<double> runs;
  std::vector<unsigned char> output;
  std::string error;
  std::size_t moved_bytes = 0;  // between devices and host, over the timed runs
};

// Every variant `rounds` times, interleaved (round r starts at variant r), so that a drift of
// the machine's speed over the sweep falls on every variant alike.
std::vector<Outcome> run_variants(const Spec& spec, const std::string& backend,
                                  const std::vector<Variant>& variants, std::size_t memory,
                                  int runs, int rounds) {
  std::vector<Outcome> out(variants.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const std::size_t k = (i + std::size_t(r)) % variants.size();
      const Variant& v = variants[k];
      if (!out[k].error.empty()) continue;
      try {
        std::string tag = v.label;
        std::replace(tag.begin(), tag.end(), ' ', '-');
        Timing t = run_gridspan(spec, backend, v.devices, memory, runs, v.per_gpu, false, tag);
        out[k].runs.insert(out[k].runs.end(), t.runs.begin(), t.runs.end());
        out[k].moved_bytes += t.moved_bytes;
        if (out[k].output.empty()) out[k].output = std::move(t.output);
      } catch (const std::exception& e) {  // a hand choice whose chunks do not fit
        out[k].error = e.what();
      }
    }
  return out;
}

nlohmann::json sweep_one(const Spec& spec, const std::string& backend, int gpus, int runs,
                         int rounds, const std::vector<int>& per_gpu, bool ooc) {
  if (ooc && !spec.no_out_of_core.empty()) {
    fmt::print("sweep {:<12} {:<22} out of core: n/a ({})\n", spec.name, spec.size_label,
               spec.no_out_of_core);
    return nlohmann::json::array();
  }
  // Out of core: each device holds half of the data.
  const std::size_t memory = ooc ? spec.bytes() / 2 / std::size_t(gpus) : 0;
  const std::vector<Variant> variants = sweep_variants(spec, gpus, per_gpu);
  const std::vector<Outcome> outcomes = run_variants(spec, backend, variants, memory, runs, rounds);
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<unsigned char>* first = nullptr;
  for (std::size_t k = 0; k < variants.size(); ++k) {
    const Variant& v = variants[k];
    const Outcome& o = outcomes[k];
    nlohmann::json row = {{"bench", spec.name},   {"size", spec.size_label}, {"variant", v.label},
                          {"per_gpu", v.per_gpu}, {"device_memory", memory}, {"gpus", v.devices},
                          {"rounds", rounds}};
    if (!o.error.empty()) {
      fmt::print("sweep {:<12} {:<22} {:>14} failed: {}\n", spec.name, spec.size_label, v.label,
                 o.error);
      row["error"] = o.error;
      rows.push_back(row);
      continue;
    }
    const double best = *std::min_element(o.runs.begin(), o.runs.end());
    if (!first) first = &o.output;
    const std::string check = compare(spec, o.output, *first);
    // Out of core, the bytes a run moved between device and host memory: a choice that
    // keeps less resident from one pass to the next shows here.
    const double moved = double(o.moved_bytes) / double(o.runs.size());
    const std::string moved_text = ooc ? fmt::format("  moved {:.2f} GB a run", moved / 1e9) : "";
    fmt::print("sweep {:<12} {:<22} {:>14} {:>10.5f} s {:>12.4g} {}  {}{}\n", spec.name,
               spec.size_label, v.label, best, spec.items / best, spec.unit, check, moved_text);
    row.update({{"best_s", best},
                {"runs_s", o.runs},
                {"throughput", spec.items / best},
                {"check", check},
                {"moved_bytes_per_run", moved}});
    rows.push_back(row);
  }
  return rows;
}

// The generators through gridspan on 3 cpu devices, against the host's values: every rank
// and kind, shapes that do not divide evenly.
int check_generators_on_cpu() {
  gs::Config c = gs::Config::from_env();
  c.backend = "cpu";
  c.cpu_devices = 3;
  gs::Context ctx(c);
  std::mt19937_64 g(99);
  std::vector<ArraySpec> arrays = {{"r1",
                                    DType::f32,
                                    gs::Dim{1000},
                                    [](int) { return gs::dist::rows(300); },
                                    {},
                                    {Generator::Kind::real, g(), -2, 5}},
                                   {"r2",
                                    DType::f32,
                                    gs::Dim{77, 5},
                                    [](int) { return gs::dist::rows(20); },
                                    {},
                                    {Generator::Kind::real, g(), 0, 1}},
                                   {"r3",
                                    DType::f32,
                                    gs::Dim{7, 9, 300},
                                    [](int) { return gs::dist::rows(2); },
                                    {},
                                    {Generator::Kind::real, g(), 10, 20}},
                                   {"i1",
                                    DType::i32,
                                    gs::Dim{999},
                                    [](int) { return gs::dist::rows(100); },
                                    {},
                                    {Generator::Kind::integer, g(), 0, 12345}},
                                   {"i2",
                                    DType::i32,
                                    gs::Dim{5, 3001},
                                    [](int) { return gs::dist::replicated(); },
                                    {},
                                    {Generator::Kind::integer, g(), 0, 7}}};
  int bad = 0;
  std::map<std::string, gs::Kernel> kernels;
  for (const auto& a : arrays) {
    auto arr = create(ctx, a, ctx.device_count());
    generate(ctx, kernels, a, arr, ctx.device_count());
    std::vector<unsigned char> got(a.bytes());
    gs::detail::array_read(handle(arr), got.data(), got.size());
    const bool ok = got == generated_on_host(a);
    fmt::print("{} {}: {}\n", a.name, a.shape.str(),
               ok ? "equal to the host's values" : "DIFFERENT");
    bad += !ok;
  }
  return bad ? 1 : 0;
}

}  // namespace
}  // namespace gridspan::bench

struct Options {
  std::string which = "all", sizes = "0", gpus = "1,2", json_path, backend = "cuda";
  int runs = 5, rounds = 1;
  bool ooc = false;
  int pieces = 1, ooc_split = 4;
  bool dry = false, check_generators = false, skip_cuda = false;
  std::string sweep;  // chunks a device to sweep, beside automatic, Dask's and Legate's rules
};
int bench_main(const Options& o);

int main(int argc, char** argv) {
  using namespace gridspan::bench;
  CLI::App app{"gridspan's paper benchmarks against plain CUDA"};
  Options o;
  app.add_option("--bench", o.which, "comma-separated benchmarks, or all");
  app.add_option("--sizes", o.sizes, "size steps (0 = smallest; each step doubles the data)");
  app.add_option("--gpus", o.gpus, "GPU counts for gridspan (under mpirun: of all ranks)");
  app.add_option("--runs", o.runs, "timed runs (after one warm-up)");
  app.add_flag("--out-of-core", o.ooc, "also run on 1 GPU with device memory at half the data");
  app.add_option("--pieces", o.pieces,
                 "chunks and superblocks per GPU in the in-core runs (1: one of each, as for "
                 "data that fit; more for data that do not)")
      ->check(CLI::Range(1, 64));
  app.add_option("--ooc-split", o.ooc_split,
                 "out of core (and the in-core run it is compared with): 4 x this many chunks "
                 "and superblocks per GPU")
      ->check(CLI::Range(1, 64));
  app.add_option("--json", o.json_path, "write every figure here");
  app.add_flag("--dry-run", o.dry, "only parse every kernel's signature and annotation");
  app.add_flag("--check-generators", o.check_generators,
               "run the input generators on the cpu backend and compare them with the host");
  app.add_flag("--skip-cuda", o.skip_cuda,
               "do not run the plain CUDA program (gridspan's results are checked against the "
               "known answer where there is one)");
  app.add_option("--backend", o.backend,
                 "cpu: gridspan on virtual cpu devices (--gpus counts them), no plain CUDA run")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--sweep", o.sweep,
                 "instead of the comparison with plain CUDA: throughput with these chunks and "
                 "superblocks a device (\"1,2,4,8\"), Dask's and Legate's rules and "
                 "work::automatic/dist::automatic, on the first of --gpus (with --out-of-core: "
                 "each device's memory at half of its share of the data)");
  app.add_option("--rounds", o.rounds,
                 "with --sweep: run every variant this many times, interleaved (each round "
                 "starts one variant later), and keep each variant's best run of all")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  // Under mpirun the other ranks serve rank 0's runs; every rank returns its code.
  return gridspan::run_program([&] { return bench_main(o); });
}

int bench_main(const Options& o) {
  const auto& [which, sizes, gpus, json_path, backend, runs, rounds, ooc, pieces, ooc_split, dry,
               check_generators, skip_cuda_flag, sweep] = o;
  const bool skip_cuda = skip_cuda_flag || backend == "cpu";
  const char* device_word = backend == "cpu" ? "cpu device" : "GPU";
  using namespace gridspan::bench;
  if (check_generators) return check_generators_on_cpu();
  if (dry) {
    try {
      for (const auto& name : benchmark_names())
        for (const auto& k : make_spec(name, 0, 1).kernels) {
          auto params = gridspan::annotation::parse_signature(k.source, k.function);
          auto a = gridspan::annotation::Annotation::parse(k.annotation, params, {});
          a.validate(params);
          gridspan::backend::KernelSource src;
          src.name = k.function;
          src.source = k.source;
          src.params = params;
          gridspan::backend::cuda::compile_cubin(src, 90, "");  // NVRTC only, no GPU
          baseline_cubin(k, 90);
          fmt::print("{}: {} parameters, annotation ok, compiles for sm_90\n", k.function,
                     params.size());
        }
      for (const char* fn : {"gen_real1", "gen_real2", "gen_real3", "gen_int1", "gen_int2"}) {
        const int rank = fn[std::strlen(fn) - 1] - '0';
        KernelSpec k{fn, generator_source(), generator_annotation(rank), {}};
        auto params = gridspan::annotation::parse_signature(k.source, k.function);
        gridspan::annotation::Annotation::parse(k.annotation, params, {}).validate(params);
        gridspan::backend::KernelSource src;
        src.name = k.function;
        src.source = k.source;
        src.params = params;
        gridspan::backend::cuda::compile_cubin(src, 90, "");
        baseline_cubin(k, 90);
        fmt::print("{}: compiles for sm_90\n", fn);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "bench_paper: {}\n", e.what());
      return 1;
    }
    return 0;
  }
  try {
    std::vector<std::string> names;
    if (which == "all") {
      names = benchmark_names();
    } else {
      std::stringstream ss(which);
      for (std::string n; std::getline(ss, n, ',');) names.push_back(n);
    }
    if (!sweep.empty()) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& name : names)
        for (int s : parse_ints(sizes))
          for (auto& r : sweep_one(make_spec(name, s, 1234 + uint64_t(s)), backend,
                                   parse_ints(gpus).front(), runs, rounds, parse_ints(sweep), ooc))
            rows.push_back(r);
      if (!json_path.empty()) std::ofstream(json_path) << rows.dump(1);
      return 0;
    }
    // The plain CUDA program's GPU (and the copy bandwidths), unless it is not run.
    std::optional<Direct> gpu;
    nlohmann::json out = {{"backend", backend}, {"results", {}}};
    if (backend == "cuda") {
      gpu.emplace();
      auto [d2d, h2d] = gpu->bandwidths();
      fmt::print("device-to-device copy {:.0f} GB/s, pinned host->device {:.1f} GB/s\n", d2d / 1e9,
                 h2d / 1e9);
      out["d2d_bytes_per_s"] = d2d;
      out["h2d_bytes_per_s"] = h2d;
    }
    fmt::print("{:<12} {:<22} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8} {:>9} {:>6}  {}\n", "bench",
               "size", "data", "cuda s", "gs1 s", "gs2 s", "overhead", "speedup", "ooc loss",
               "GB/s", "check");
    for (const auto& name : names) {
      for (int s : parse_ints(sizes)) {
        Spec spec = make_spec(name, s, 1234 + uint64_t(s));
        nlohmann::json row = {{"bench", name},
                              {"size", spec.size_label},
                              {"items", spec.items},
                              {"bytes", spec.bytes()},
                              {"unit", spec.unit}};
        // Beyond one GPU's memory the plain program cannot run: gridspan is then compared
        // with nothing but itself (and its output with the expected one, where known).
        Timing base;
        std::string check = "equal";
        // What gridspan's output must match: the plain program's, else the known answer.
        auto reference = [&](const Timing& b) -> const std::vector<unsigned char>& {
          return b.output.empty() ? spec.expected : b.output;
        };
        try {
          if (skip_cuda)
            throw gridspan::Error(backend == "cpu" ? "skipped (--backend cpu)"
                                                   : "skipped (--skip-cuda)");
          base = run_baseline(*gpu, spec, runs);
          row["cuda_s"] = base.runs;
        } catch (const gridspan::Error& e) {
          row["cuda_error"] = e.what();
          check = "no plain-CUDA run (" + std::string(e.what()).substr(0, 60) + ")";
        }
        if (!spec.expected.empty() && !base.output.empty() && base.output != spec.expected)
          check = "the plain CUDA program's result is WRONG";
        std::map<int, double> gs_time;
        std::map<int, std::vector<unsigned char>> gs_output;
        for (int g : parse_ints(gpus)) {
          Timing t = run_gridspan(spec, backend, g, 0, runs, pieces);
          gs_time[g] = t.mean();
          gs_output[g] = t.output;
          row[fmt::format("gridspan_{}gpu_s", g)] = t.runs;
          std::string c = compare(spec, t.output, reference(base));
          if (c.rfind("DIFFERENT", 0) == 0 || c.find("bytes differ") != std::string::npos ||
              c == "sizes differ")
            check = fmt::format("{} GPU: {}", g, c);
          else if (check == "equal")
            check = c;
        }
        // The plain program once more after gridspan's runs, and the overhead against both:
        // a GPU's clock moves as it warms, so whichever runs first would be favoured.
        if (!base.runs.empty()) {
          const double before = base.mean();
          Timing again = run_baseline(*gpu, spec, runs);
          row["cuda_after_s"] = again.runs;
          row["cuda_after_vs_before"] = again.mean() / before - 1.0;
          fmt::print("{:<12} {:<22} the plain program again after gridspan's runs: {:+.2f}%\n",
                     name, spec.size_label, 100 * (again.mean() / before - 1.0));
          base.runs.insert(base.runs.end(), again.runs.begin(), again.runs.end());
        }
        // Under mpirun: R ranks of one GPU each against one process with R GPUs.
        if (const int r = mpi_ranks(); r > 1) {
          Timing one = run_gridspan(spec, backend, r, 0, runs, pieces, true);
          row[fmt::format("gridspan_1proc_{}gpu_s", r)] = one.runs;
          const double ratio = gs_time.count(r) ? gs_time[r] / one.mean() : NAN;
          row["ranks_vs_one_process"] = ratio;
          // The same result from both (to the benchmark's tolerance), and the expected one.
          std::string c = fmt::format("ranks vs one process: {}; one process: {}",
                                      compare(spec, gs_output[r], one.output),
                                      compare(spec, one.output, reference(base)));
          fmt::print(
              "{:<12} {:<22} {} ranks x 1 {} {:.5f} s, 1 process x {} {}s {:.5f} s: "
              "{:+.2f}% ({})\n",
              name, spec.size_label, r, device_word, gs_time.count(r) ? gs_time[r] : NAN, r,
              device_word, one.mean(), 100 * (ratio - 1), c);
        }
        double loss = NAN, link = NAN;
        if (ooc && !spec.no_out_of_core.empty()) {
          row["ooc_error"] = spec.no_out_of_core;
          check += " (out-of-core: n/a)";
        } else if (ooc) {
          try {
            // Finer chunks out of core, and the same in core for the comparison.
            Timing in = run_gridspan(spec, backend, 1, 0, runs, 4 * ooc_split);
            Timing t = run_gridspan(spec, backend, 1, spec.bytes() / 2, runs, 4 * ooc_split);
            row["ooc_split"] = ooc_split;
            row["ooc_pieces_per_gpu"] = 4 * ooc_split;
            row["incore_split_1gpu_s"] = in.runs;
            row["ooc_1gpu_s"] = t.runs;
            row["ooc_moved_bytes"] = t.moved_bytes;
            link = double(t.moved_bytes) / (t.mean() * runs);
            row["ooc_link_bytes_per_s"] = link;
            loss = 1.0 - in.mean() / t.mean();
            std::string c = compare(spec, t.output, reference(base));
            if (c.rfind("DIFFERENT", 0) == 0 || c.find("bytes differ") != std::string::npos)
              check = "out-of-core: " + c;
          } catch (const gridspan::Error& e) {
            row["ooc_error"] = e.what();
            check += fmt::format(" (out-of-core failed: {})", std::string(e.what()).substr(0, 80));
          }
        }
        row["check"] = check;
        const double overhead = gs_time.count(1) ? gs_time[1] / base.mean() - 1.0 : NAN;
        const double speedup = gs_time.count(1) && gs_time.count(2) ? gs_time[1] / gs_time[2] : NAN;
        fmt::print(
            "{:<12} {:<22} {:>7.2f}GB {:>10.5f} {:>10.5f} {:>10.5f} {:>8.2f}% {:>7.2f}x {:>8.1f}% "
            "{:>6.1f}  {}\n",
            name, spec.size_label, double(spec.bytes()) / 1e9, base.mean(),
            gs_time.count(1) ? gs_time[1] : NAN, gs_time.count(2) ? gs_time[2] : NAN,
            100 * overhead, speedup, 100 * loss, link / 1e9, check);
        std::fflush(stdout);
        out["results"].push_back(row);
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(1);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_paper: {}\n", e.what());
    return 1;
  }
  return 0;
}
