// Per-task overhead and planner throughput, with StarPU 1.3 side by side when it is found.
//   bench_overhead                      Google Benchmark cases, then the side-by-side table
//   bench_overhead --side-by-side-only  just the table (what docs/PERFORMANCE.md records)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "gridspan/gridspan.hpp"
#include "plan/planner.hpp"  // internal: the planner timed on its own (no public way in)

#ifdef GRIDSPAN_WITH_STARPU
#include "starpu_overhead.hpp"
#endif

namespace gs = gridspan;

namespace {

const char* kEmpty = R"(
__device__ void touch(dim3 blockIdx, gridspan::Vector<float> a) {}
)";

gs::Config bench_config() {
  gs::Config c = gs::Config::from_env();
  c.cpu_devices = 2;
  c.cpu_threads = 1;
  c.log_level = gs::LogLevel::error;
  // The split below queues 20000 launches behind a sleeping task: no bound on unfinished
  // tasks, as StarPU has none by default.
  c.max_tasks = 0;
  return c;
}

// Seconds per task: `tasks` superblocks, each writing its own one-element chunk.
double own_chunk_seconds(gs::Context& ctx, gs::Kernel& k, gs::Array<float>& a, int tasks) {
  auto t0 = std::chrono::steady_clock::now();
  k.launch({tasks}, {1}, gs::work::tiles({1}), a).wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / tasks;
}

// Seconds per launch: a chain of one-superblock launches on one array.
double chain_seconds(gs::Context& ctx, gs::Kernel& k, gs::Array<float>& a, int launches) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) k.launch({1}, {1}, gs::work::tiles({1}), a);
  ctx.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / launches;
}

void BM_OwnChunk(benchmark::State& state) {
  int tasks = static_cast<int>(state.range(0));
  gs::Context ctx(bench_config());
  auto k =
      ctx.compile(gs::KernelDef::from_source(kEmpty, "touch").annotate("global i => write a[i]"));
  auto a = ctx.zeros<float>({tasks}, gs::dist::rows(1));
  for (auto _ : state) own_chunk_seconds(ctx, k, a, tasks);
  state.SetItemsProcessed(state.iterations() * tasks);
}
BENCHMARK(BM_OwnChunk)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void BM_Chain(benchmark::State& state) {
  int launches = static_cast<int>(state.range(0));
  gs::Context ctx(bench_config());
  auto k = ctx.compile(
      gs::KernelDef::from_source(kEmpty, "touch").annotate("global i => readwrite a[i]"));
  auto a = ctx.zeros<float>({1}, gs::dist::rows(1));
  for (auto _ : state) chain_seconds(ctx, k, a, launches);
  state.SetItemsProcessed(state.iterations() * launches);
}
BENCHMARK(BM_Chain)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

class Nothing : public gs::plan::Executable {
 public:
  const std::string& name() const override { return name_; }
  void run(const gs::plan::ExecFrame&) const override {}
  std::string name_ = "nothing";
};

// A launch of Nothing for the planner alone, without scalars.
gs::plan::LaunchSpec spec_of(const gs::annotation::Annotation& ann,
                             const std::vector<gs::ParamInfo>& params,
                             std::vector<const gs::plan::ArrayMeta*> arrays, const gs::Dim& threads,
                             const gs::Dim& block, const gs::WorkDistribution& work, int devices) {
  gs::plan::LaunchSpec spec;
  spec.executable = std::make_shared<Nothing>();
  spec.annotation = &ann;
  spec.params = &params;
  spec.threads = threads;
  spec.block = block;
  spec.superblocks = work.superblocks(threads, block, devices);
  spec.arrays = std::move(arrays);
  spec.int_scalars.assign(params.size(), 0);
  spec.scalar_offsets = std::make_shared<std::vector<uint32_t>>(params.size(), 0);
  spec.scalars = std::make_shared<std::vector<unsigned char>>();
  return spec;
}

// Tasks planned per second: a launch of `superblocks` superblocks over a rows(1) array,
// planned (not run) again and again.
double planner_tasks_per_second(int superblocks, int repeats) {
  gs::ParamInfo p;
  p.name = "a";
  p.is_array = true;
  p.rank = 1;
  std::vector<gs::ParamInfo> params{p};
  auto ann = gs::annotation::Annotation::parse("global i => write a[i]", params, {});
  gs::plan::Planner planner(2, nullptr);
  gs::plan::ArrayMeta meta;
  meta.shape = {superblocks};
  for (auto& c : gs::dist::rows(1).chunks(meta.shape, 2))
    meta.chunks.push_back({0, c.region, c.owned, c.device});
  planner.assign_chunk_ids(meta);
  const gs::plan::LaunchSpec spec =
      spec_of(ann, params, {&meta}, {superblocks}, {1}, gs::work::tiles({1}), 2);
  std::size_t tasks = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) tasks += planner.launch(spec).tasks.size();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return tasks / s;
}

// Microseconds to plan one launch of bench_launch's chain (readwrite y[i], read x[i], 65536
// threads over arrays of `chunks` chunks on one device, a superblock per chunk), planned
// again and again: from its memoized skeleton, or afresh each time.
double planner_launch_us(int chunks, bool memoize, int launches) {
  auto param = [](const char* name, bool is_const) {
    gs::ParamInfo p;
    p.name = name;
    p.is_array = true;
    p.rank = 1;
    p.is_const = is_const;
    return p;
  };
  std::vector<gs::ParamInfo> params{param("y", false), param("x", true)};
  auto ann = gs::annotation::Annotation::parse("global i => readwrite y[i], read x[i]", params, {});
  gs::plan::Planner planner(1, nullptr);
  planner.set_memoize(memoize);
  const int n = 65536, per = n / chunks;
  std::vector<gs::plan::ArrayMeta> arrays(2);
  for (auto& meta : arrays) {
    meta.shape = {n};
    for (auto& c : gs::dist::rows(per).chunks(meta.shape, 1))
      meta.chunks.push_back({0, c.region, c.owned, c.device});
    planner.assign_chunk_ids(meta);
  }
  const gs::plan::LaunchSpec spec =
      spec_of(ann, params, {&arrays[0], &arrays[1]}, {n}, {256}, gs::work::tiles({per}), 1);
  std::size_t tasks = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < launches; ++r) tasks += planner.launch(spec).tasks.size();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(tasks);
  return s / launches * 1e6;
}

void BM_Planner(benchmark::State& state) {
  for (auto _ : state) state.counters["tasks_per_s"] = planner_tasks_per_second(10000, 5);
}
BENCHMARK(BM_Planner)->Unit(benchmark::kMillisecond);

void side_by_side() {
  const int tasks = 20000;
  gs::Context ctx(bench_config());
  auto k =
      ctx.compile(gs::KernelDef::from_source(kEmpty, "touch").annotate("global i => write a[i]"));
  auto krw = ctx.compile(
      gs::KernelDef::from_source(kEmpty, "touch").annotate("global i => readwrite a[i]"));
  auto a = ctx.zeros<float>({tasks}, gs::dist::rows(1));
  auto one = ctx.zeros<float>({1}, gs::dist::rows(1));
  own_chunk_seconds(ctx, k, a, tasks);  // warm-up
  chain_seconds(ctx, krw, one, 1000);
  double best_own = 1e9, best_chain = 1e9;
  for (int r = 0; r < 3; ++r) {
    best_own = std::min(best_own, own_chunk_seconds(ctx, k, a, tasks));
    best_chain = std::min(best_chain, chain_seconds(ctx, krw, one, tasks));
  }
  // The chain split: launches queued behind a native task that sleeps (submission alone),
  // then the time to run them once the sleeper ends.
  auto sleeper = ctx.compile(
      gs::NativeDef::from_function("sleep",
                                   [](const gs::NativeContext&, gs::Vector<float>) {
                                     std::this_thread::sleep_for(std::chrono::milliseconds(500));
                                   },
                                   {"a"})
          .annotate("global i => readwrite a[i]"));
  sleeper.launch({1}, {1}, gs::work::tiles({1}), one);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < tasks; ++i) krw.launch({1}, {1}, gs::work::tiles({1}), one);
  double submit = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.synchronize();
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double run = std::max(0.0, total - 0.5);  // the sleeper covers the submission
  double planned = planner_tasks_per_second(20000, 5);
  std::printf("\nside by side (%d tasks, 2 cpu devices / 2 StarPU cpu workers, best of 3):\n",
              tasks);
  std::printf("%-34s %14s %14s %8s\n", "shape", "gridspan [us]", "StarPU [us]", "ratio");
#ifdef GRIDSPAN_WITH_STARPU
  bench::StarpuSession session(2);
  double sp_own = 1e9, sp_chain = 1e9, sp_empty = 1e9;
  if (session.ok) {
    bench::starpu_seconds_per_task(bench::StarpuShape::empty, 1000);
    for (int r = 0; r < 3; ++r) {
      sp_empty =
          std::min(sp_empty, bench::starpu_seconds_per_task(bench::StarpuShape::empty, tasks));
      sp_own =
          std::min(sp_own, bench::starpu_seconds_per_task(bench::StarpuShape::own_chunk, tasks));
      sp_chain =
          std::min(sp_chain, bench::starpu_seconds_per_task(bench::StarpuShape::chain, tasks));
    }
  }
  std::printf("%-34s %14s %14.2f %8s\n", "empty task, no data", "-", sp_empty * 1e6, "-");
  std::printf("%-34s %14.2f %14.2f %8.2f\n", "task touching its own chunk", best_own * 1e6,
              sp_own * 1e6, best_own / sp_own);
  std::printf("%-34s %14.2f %14.2f %8.2f\n", "dependent chain on one array", best_chain * 1e6,
              sp_chain * 1e6, best_chain / sp_chain);
#else
  std::printf("%-34s %14.2f %14s\n", "task touching its own chunk", best_own * 1e6, "(no StarPU)");
  std::printf("%-34s %14.2f %14s\n", "dependent chain on one array", best_chain * 1e6,
              "(no StarPU)");
#endif
  std::printf(
      "chain, split: %.2f us per launch to plan and submit, %.2f us per task to run "
      "once submitted\n",
      submit / tasks * 1e6, run / tasks * 1e6);
  std::printf("planner: %.0f tasks planned per second (target > 200000)\n", planned);
  for (int chunks : {1, 4}) {
    double memo = 1e9, afresh = 1e9;
    for (int r = 0; r < 3; ++r) {
      memo = std::min(memo, planner_launch_us(chunks, true, 20000));
      afresh = std::min(afresh, planner_launch_us(chunks, false, 20000));
    }
    std::printf(
        "planner, bench_launch's launch of %d superblock%s: %.2f us memoized, %.2f us planned "
        "afresh (%.2fx)\n",
        chunks, chunks == 1 ? "" : "s", memo, afresh, memo / afresh);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool only = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--side-by-side-only") == 0) only = true;
  if (!only) {
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
  }
  side_by_side();
  return 0;
}
