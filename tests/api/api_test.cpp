// The public API's own behaviour: configuration from the environment, kernel files, array
// handles and their errors, gs::run's exit codes, plans as pictures, memory statistics.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

struct Env {
  std::string name;
  explicit Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name.c_str()); }
};

gs::Config quiet(int devices) {
  return test::quiet_config(devices);
}

const char* kTwice = R"(
__device__ void twice(dim3 blockIdx, int n, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i];
}
)";

TEST(Api, ConfigFromTheEnvironment) {
  {
    Env a("GRIDSPAN_CPU_DEVICES", "3"), b("GRIDSPAN_DEVICE_MEMORY", "64MiB"),
        c("GRIDSPAN_CHECK", "Yes"), d("GRIDSPAN_SPILL_DIR", "/tmp/x");
    gs::Config cfg = gs::Config::from_env();
    EXPECT_EQ(cfg.cpu_devices, 3);
    EXPECT_EQ(cfg.device_memory, 64u << 20);
    EXPECT_TRUE(cfg.check);
    EXPECT_EQ(cfg.spill_dir, "/tmp/x");
  }
  {
    Env a("GRIDSPAN_CHECK", "perhaps"), l("GRIDSPAN_LOG", "error");
    EXPECT_FALSE(gs::Config::from_env().check);  // not a flag: the default stays
  }
  {
    EXPECT_TRUE(gs::Config::from_env().stream_order);
    Env a("GRIDSPAN_STREAM_ORDER", "off");
    EXPECT_FALSE(gs::Config::from_env().stream_order);
  }
  {
    Env a("GRIDSPAN_CPU_DEVICES", "lots");
    EXPECT_THROW(gs::Config::from_env(), gs::ConfigError);
  }
  {
    Env a("GRIDSPAN_HOST_MEMORY", "12 parsecs");
    EXPECT_THROW(gs::Config::from_env(), gs::ConfigError);
  }
  {
    Env a("GRIDSPAN_BACKEND", "CUDA"), b("GRIDSPAN_GPUS", "1");
    gs::Config cfg = gs::Config::from_env();
    EXPECT_EQ(cfg.backend, "cuda");
    EXPECT_EQ(cfg.gpus, 1);
  }
  for (const char* bad : {"opencl", "gpu"}) {
    Env a("GRIDSPAN_BACKEND", bad);
    try {
      gs::Config::from_env();
      ADD_FAILURE() << "GRIDSPAN_BACKEND='" << bad << "' was accepted";
    } catch (const gs::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("auto, cuda or cpu"), std::string::npos) << e.what();
    }
  }
  {
    Env a("GRIDSPAN_GPUS", "-2");
    EXPECT_THROW(gs::Config::from_env(), gs::ConfigError);
  }
  {
    EXPECT_EQ(gs::Config::from_env().net_timeout, 60.0);
    EXPECT_TRUE(gs::Config::from_env().mpi);
    Env a("GRIDSPAN_NET_TIMEOUT", "2.5"), b("GRIDSPAN_MPI", "off");
    EXPECT_EQ(gs::Config::from_env().net_timeout, 2.5);
    EXPECT_FALSE(gs::Config::from_env().mpi);
  }
  for (const char* bad : {"soon", "0", "-3", "5s"}) {
    Env a("GRIDSPAN_NET_TIMEOUT", bad);
    EXPECT_THROW(gs::Config::from_env(), gs::ConfigError) << bad;
  }
  {
    EXPECT_FALSE(gs::Config::from_env().cpu_async);
    Env a("GRIDSPAN_CPU_ASYNC", "on");
    EXPECT_TRUE(gs::Config::from_env().cpu_async);
  }
  {
    EXPECT_TRUE(gs::Config::from_env().lend_memory);
    EXPECT_EQ(gs::Config::from_env().lend_min, std::size_t(8) << 20);
    Env a("GRIDSPAN_LEND_MEMORY", "off"), b("GRIDSPAN_LEND_MIN", "64KiB");
    EXPECT_FALSE(gs::Config::from_env().lend_memory);
    EXPECT_EQ(gs::Config::from_env().lend_min, std::size_t(64) << 10);
  }
  {
    Env a("GRIDSPAN_LEND_MIN", "a little");
    EXPECT_THROW(gs::Config::from_env(), gs::ConfigError);
  }
}

// Outside mpirun a run is one process: one worker (this one) with its devices and memory.
TEST(Api, OneProcessIsOneWorker) {
  gs::Context ctx(quiet(3));
  auto ranks = ctx.ranks();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[0].backend, ctx.backend_name());
  EXPECT_EQ(ranks[0].devices.size(), 3u);
  ASSERT_EQ(ranks[0].device_memory.size(), 3u);
  auto stats = ctx.memory_stats();
  for (int d = 0; d < 3; ++d) EXPECT_EQ(ranks[0].device_memory[d], stats[d].limit_bytes);
  EXPECT_EQ(ranks[0].host_memory, stats[3].limit_bytes);
  EXPECT_FALSE(ranks[0].host.empty());
}

// Asking for the cuda backend where it cannot run is an error that says why; the cpu
// backend asked for by name is used even where GPUs are.
TEST(Api, BackendChoice) {
  gs::Config cpu = quiet(2);
  cpu.backend = "cpu";
  {
    gs::Context ctx(cpu);
    EXPECT_EQ(ctx.backend_name(), "cpu");
    EXPECT_EQ(ctx.device_count(), 2);
  }
  gs::Config cuda = quiet(1);
  cuda.backend = "cuda";
  try {
    gs::Context ctx(cuda);
    EXPECT_EQ(ctx.backend_name(), "cuda");  // a GPU machine
    EXPECT_GE(ctx.device_count(), 1);
  } catch (const gs::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GRIDSPAN_BACKEND=cuda"), std::string::npos) << m;
#ifdef GRIDSPAN_HAVE_CUDA
    EXPECT_NE(m.find("cannot run"), std::string::npos) << m;  // and why: no driver, no GPU, ...
#else
    EXPECT_NE(m.find("built without it"), std::string::npos) << m;
#endif
  }
  gs::Config bogus = quiet(1);
  bogus.backend = "tpu";
  EXPECT_THROW(gs::Context ctx(bogus), gs::ConfigError);
}

TEST(Api, KernelFromFileAndMissingFile) {
  auto path = std::filesystem::temp_directory_path() /
              ("gridspan-api-test-" + std::to_string(test::base_seed()) + ".cu");
  { std::ofstream(path) << kTwice; }
  gs::Context ctx(quiet(2));
  EXPECT_EQ(ctx.device_count(), 2);
  auto k = ctx.compile(gs::KernelDef::from_file(path.string(), "twice")
                           .annotate("global i => write out[i]")
                           .annotate("global i => read in[i]"));  // two annotate() calls
  std::filesystem::remove(path);
  auto g = test::rng(41);
  const int n = 333;
  auto v = test::random_vector<int>(n, g);
  auto in = ctx.from_vector<int>(v, {n}, gs::dist::rows(100));
  auto out = ctx.full<int>({n}, test::poison<int>(), gs::dist::tiles({50}));
  gs::Event e = k.launch({n}, {32}, gs::work::tiles({64}), n, out, in);
  e.wait();
  EXPECT_TRUE(e.ready());
  auto r = out.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], 2 * v[i]);
  try {
    gs::KernelDef::from_file("/nonexistent/kernel.cu", "k");
    FAIL();
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kernel.cu"), std::string::npos);
  }
}

TEST(Api, ArrayHandlesAndTheirErrors) {
  gs::Context ctx(quiet(2));
  gs::Array<float> none;
  EXPECT_FALSE(none.valid());
  EXPECT_THROW(none.to_vector(), gs::Error);
  EXPECT_THROW(ctx.from_vector<float>({1, 2, 3}, {4}, gs::dist::rows(2)), gs::Error);
  auto a = ctx.full<double>({2, 3}, 1.5, gs::dist::rows(1));
  EXPECT_EQ(a.shape(), (gs::Dim{2, 3}));
  EXPECT_EQ(a.size(), 6);
  EXPECT_THROW(a.copy_from({1.0, 2.0}), gs::Error);
  EXPECT_THROW(a.item(), gs::Error);
  auto copy = a;  // handles share the data
  copy.copy_from({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(a.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  auto s = ctx.scalar<int64_t>(-42);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.item(), -42);
}

TEST(Api, RunReturnsOneAfterAnErrorAndZeroOtherwise) {
  EXPECT_EQ(gs::run(quiet(1), [](gs::Context& ctx) { ctx.zeros<int>({5}, gs::dist::rows(5)); }), 0);
  testing::internal::CaptureStderr();
  int rc = gs::run(quiet(1), [](gs::Context& ctx) {
    ctx.compile(gs::KernelDef::from_source(kTwice, "twice")
                    .annotate("global i => write out[i], read nope[i]"));
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("nope"), std::string::npos) << err;
}

TEST(Api, EmptyLaunchesAndEmptyArrays) {
  gs::Context ctx(quiet(2));
  auto k = ctx.compile(
      gs::KernelDef::from_source(kTwice, "twice").annotate("global i => write out[i], read in[i]"));
  auto in = ctx.full<int>({0}, 1, gs::dist::rows(4));
  auto out = ctx.full<int>({0}, 2, gs::dist::rows(4));
  gs::Event e = k.launch({0}, {4}, gs::work::tiles({4}), 0, out, in);
  e.wait();
  EXPECT_TRUE(e.ready());
  EXPECT_TRUE(out.to_vector().empty());
  // A non-gs exception from the app is reported too, with exit code 1.
  testing::internal::CaptureStderr();
  EXPECT_EQ(gs::run(quiet(1), [](gs::Context&) { throw std::runtime_error("app failed"); }), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("app failed"), std::string::npos);
}

// An empty Kernel says so on every use; an exception that escapes gs::run_program's
// program is reported and gives exit code 1, as in gs::run.
TEST(Api, EmptyKernelsAndEscapingExceptionsAreReported) {
  gs::Kernel empty;
  EXPECT_THROW(empty.name(), gs::LaunchError);
  EXPECT_THROW(empty.params(), gs::LaunchError);
  EXPECT_THROW(empty.last_plan_dot(), gs::LaunchError);
  testing::internal::CaptureStderr();
  EXPECT_EQ(gs::run_program([]() -> int { throw gs::IoError("no disk for the program"); }), 1);
  EXPECT_EQ(gs::run_program([]() -> int { throw std::runtime_error("plain failure"); }), 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gridspan error: no disk for the program"), std::string::npos) << err;
  EXPECT_NE(err.find("error: plain failure"), std::string::npos) << err;
  EXPECT_EQ(gs::run_program([] { return 7; }), 7);
}

// The same program plans the same tasks in the same order in every run: the kept
// read-only copies of an array (here d's columns, on every device) were let go in the
// order of the arrays' addresses when a later launch wrote it.
TEST(Api, PlansAreTheSameFromRunToRun) {
  const char* src = R"(
__device__ void cols(dim3 blockIdx, int n, gridspan::Matrix<float> c, const gridspan::Matrix<float> d) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) c(i, j) = d(j, i);
}
__device__ void back(dim3 blockIdx, int n, gridspan::Matrix<float> d, const gridspan::Matrix<float> c) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) d(i, j) = c(i, j) + 1.0f;
})";
  std::vector<std::unique_ptr<char[]>> noise;  // another heap layout for each run
  auto plans = [&](int run) {
    for (int k = 0; k < 5 * run + 3; ++k) noise.emplace_back(new char[48 + 200 * k]);
    gs::Context ctx(quiet(3));
    ctx.keep_plans(true);
    auto read_cols = ctx.compile(gs::KernelDef::from_source(src, "cols")
                                     .annotate("global [j, i] => write c[i, j], read d[:, i]"));
    auto write_back = ctx.compile(gs::KernelDef::from_source(src, "back")
                                      .annotate("global [j, i] => write d[i, j], read c[i, j]"));
    const int n = 48;
    auto d = ctx.ones<float>({n, n}, gs::dist::rows(16));
    auto c = ctx.zeros<float>({n, n}, gs::dist::rows(16));
    std::vector<std::string> dots;
    for (int it = 0; it < 2; ++it) {
      read_cols.launch({n, n}, {8, 8}, gs::work::tiles({n, 8}), n, c, d);
      dots.push_back(read_cols.last_plan_dot());
      write_back.launch({n, n}, {8, 8}, gs::work::tiles({n, 8}), n, d, c);  // d's copies go
      dots.push_back(write_back.last_plan_dot());
    }
    return dots;
  };
  const auto first = plans(0);
  for (int run = 1; run < 6; ++run) EXPECT_EQ(plans(run), first) << "run " << run;
}

// A native function's view of const elements is read-only, as a kernel's: a rule that
// writes it is an error at compile; its parameters are named by their types. (A `const`
// view passed by value is not part of the function's type, so it cannot say so.)
TEST(Api, NativeFunctionsConstViewsAreReadOnly) {
  gs::Context ctx(quiet(1));
  auto def =
      gs::NativeDef::from_function("copy_in",
                                   [](const gs::NativeContext&, gs::Vector<int>,
                                      const gs::Vector<int>, gs::Vector<const int>, double) {},
                                   {"out", "in", "more", "scale"});
  ASSERT_EQ(def.params().size(), 4u);
  EXPECT_FALSE(def.params()[0].is_const);
  EXPECT_TRUE(def.params()[2].is_const);
  EXPECT_EQ(def.params()[0].type_text, "gridspan::Vector<int32>");
  EXPECT_EQ(def.params()[2].type_text, "const gridspan::Vector<int32>");
  EXPECT_EQ(def.params()[3].type_text, "float64");
  auto writes_in = def;
  writes_in.annotate("global i => write out[i], read in[i], write more[i]");
  try {
    ctx.compile(writes_in);
    ADD_FAILURE() << "a write to a const view was accepted";
  } catch (const gs::AnnotationError& e) {
    EXPECT_NE(std::string(e.what()).find("`more` is read-only"), std::string::npos) << e.what();
  }
  auto fine = def;
  fine.annotate("global i => write out[i], read in[i], read more[i]");
  EXPECT_NO_THROW(ctx.compile(fine));
}

TEST(Api, PlansAsGraphvizAndMemoryStatistics) {
  gs::Context ctx(quiet(2));
  ctx.keep_plans(true);
  auto k = ctx.compile(
      gs::KernelDef::from_source(kTwice, "twice").annotate("global i => write out[i], read in[i]"));
  const int n = 64;
  auto in = ctx.full<int>({n}, 3, gs::dist::rows(32));
  auto out = ctx.zeros<int>({n}, gs::dist::rows(32));
  k.launch({n}, {16}, gs::work::tiles({32}), n, out, in);
  EXPECT_EQ(out.to_vector(), std::vector<int>(n, 6));  // a read is a plan too, not a launch
  std::string dot = k.last_plan_dot();
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0u);
  EXPECT_NE(dot.find("execute"), std::string::npos);
  EXPECT_NE(dot.find("twice"), std::string::npos);
  EXPECT_EQ(out.to_vector(), std::vector<int>(n, 6));
  auto stats = ctx.memory_stats();
  ASSERT_EQ(stats.size(), 4u);
  EXPECT_EQ(stats[0].name.rfind(ctx.backend_name() + ":0", 0), 0u) << stats[0].name;
  EXPECT_EQ(stats[2].name, "host");
  EXPECT_EQ(stats[3].name, "disk");
  EXPECT_GE(stats[0].used_bytes + stats[1].used_bytes, 2u * n * 4u);
}

TEST(Api, TraceFileHasOneEventPerTask) {
  auto path = std::filesystem::temp_directory_path() /
              ("gridspan-trace-" + std::to_string(test::base_seed()) + ".json");
  {
    gs::Config c = quiet(2);
    c.trace_file = path.string();
    gs::Context ctx(c);
    auto k = ctx.compile(gs::KernelDef::from_source(kTwice, "twice")
                             .annotate("global i => write out[i], read in[i]"));
    auto in = ctx.full<int>({64}, 1, gs::dist::rows(16));
    auto out = ctx.zeros<int>({64}, gs::dist::rows(16));
    k.launch({64}, {16}, gs::work::tiles({16}), 64, out, in);
    EXPECT_EQ(out.to_vector(), std::vector<int>(64, 2));
  }  // the trace is written when the context ends
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  auto trace = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  int executes = 0, devices_seen = 0;
  std::set<int> tids;
  for (auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    tids.insert(e["tid"].get<int>());
    if (e["cat"] == "execute") {
      ++executes;
      EXPECT_EQ(e["name"], "twice");
    }
  }
  devices_seen = static_cast<int>(tids.size());
  EXPECT_EQ(executes, 4);  // four superblocks
  EXPECT_EQ(devices_seen, 2);
}

// Spills and reloads are in the trace too: device memory for a quarter of the data, swept
// twice, moves chunks out and back in; every event a span of a chunk of this run.
TEST(Api, TraceHasTheSpillsAndReloads) {
  auto path = std::filesystem::temp_directory_path() /
              ("gridspan-spill-trace-" + std::to_string(test::base_seed()) + ".json");
  const int n = 1 << 16;
  {
    gs::Config c = quiet(1);
    c.trace_file = path.string();
    c.device_memory = n;  // a quarter of one array of ints
    c.cpu_async = true;   // device memory apart from host memory: spills copy
    gs::Context ctx(c);
    auto k = ctx.compile(gs::KernelDef::from_source(kTwice, "twice")
                             .annotate("global i => write out[i], read in[i]"));
    auto in = ctx.full<int>({n}, 3, gs::dist::rows(n / 16));
    auto out = ctx.full<int>({n}, -1, gs::dist::rows(n / 16));
    for (int sweep = 0; sweep < 2; ++sweep)
      k.launch({n}, {64}, gs::work::tiles({n / 16}), n, out, in);
    EXPECT_EQ(out.to_vector(), std::vector<int>(n, 6));
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  auto trace = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  std::map<std::string, int> moves;
  for (auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string cat = e["cat"];
    if (cat != "spill" && cat != "reload" && cat != "evict") continue;
    ++moves[cat];
    EXPECT_EQ(e["name"].get<std::string>().rfind("chunk ", 0), 0u) << e.dump();
    EXPECT_GT(e["args"]["bytes"].get<std::size_t>(), 0u) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  EXPECT_GT(moves["spill"], 0) << "no spill in the trace";
  EXPECT_GT(moves["reload"], 0) << "no reload in the trace";
}

// A trace file that cannot be written is an error when the run starts, not after it.
TEST(Api, AnUnwritableTraceFileIsAnErrorAtTheStart) {
  gs::Config c = quiet(1);
  c.trace_file = "/nonexistent-folder/trace.json";
  try {
    gs::Context ctx(c);
    ADD_FAILURE() << "the context started";
  } catch (const gs::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GRIDSPAN_TRACE='/nonexistent-folder/trace.json' cannot "
                                         "be written"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gridspan
