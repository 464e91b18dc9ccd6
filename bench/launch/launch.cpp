// What one launch costs, through the public API: a chain of dependent launches of a one-line
// elementwise kernel (y[i] = y[i] * 0.5f + x[i]), and a launch followed by wait() (and of
// that, the time until the launch call returned), for arrays of one chunk or several.
// bench/launch/cupy_launch.py times the same kernel as a CuPy ElementwiseKernel;
// scripts/launch-bench.sh runs the two side by side. With --inline K, each launch is a
// native function that launches the kernel K times inline on its views (K steps in one
// task a chunk); the figures are then per step. With --arrays, each step is the array
// library's `y.assign(y * 0.5f + x)`: from the program (one library launch a step), or with
// --inline K inside a native function on its arrays (NativeContext::array), K a task.
// With --dot, each step is a whole reduction, `acc += gs::sum(y * x)` from the program, or
// with --inline K, `d += gs::sum(y * x)` K times inside a native function into its
// reduce(+) parameter.
//
//   bench_launch [--n 65536] [--chunks 1,4 (0: automatic)] [--launches 20000] [--runs 5]
//                [--json out.json] [--waits-only] [--inline 1,8] [--arrays | --dot]
#include <gridspan/gridspan.hpp>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>
#include <vector>

namespace gs = gridspan;

namespace {

const char* kSource = R"(
__device__ void axpy_half(dim3 blockIdx, int n, gridspan::Vector<float> y,
                          const gridspan::Vector<float> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + x[i];
})";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU time of the calling thread: what a chain costs the launching thread, beside its wall
// time (the two are equal when the launching thread is what limits the chain).
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// x and y before the first launch (the same every run: the host check remakes them).
std::pair<std::vector<float>, std::vector<float>> inputs(int n) {
  std::mt19937 g(12345);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xs(n), ys(n);
  for (auto& v : xs) v = u(g);
  for (auto& v : ys) v = u(g);
  return {xs, ys};
}

// x and y of +-1 whose dot product is exactly 1: every partial sum is a small integer, so
// each sum in float is exact whatever its order.
std::pair<std::vector<float>, std::vector<float>> dot_inputs(int n) {
  std::mt19937 g(54321);
  std::vector<float> zs(n), xs(n), ys(n);
  for (int i = 0; i < n; ++i) zs[i] = i % 2 ? -1.0f : 1.0f;  // sums to 0 (n even) or 1
  if (n % 2 == 0) zs[1] = 0;
  std::shuffle(zs.begin(), zs.end(), g);
  for (int i = 0; i < n; ++i) {
    ys[i] = g() % 2 ? 1.0f : -1.0f;
    xs[i] = zs[i] * ys[i];
  }
  return {xs, ys};
}

struct Figures {
  double chain_us = 0, chain_cpu_us = 0, wait_us = 0;
  double wait_launch_us = 0;  // of launch+wait, the time until launch() returned
};

// The arrays' chunks and the launches' superblocks: `chunks` of each, or (0) gridspan's
// own choice (dist::automatic, work::automatic), to time what choosing costs a launch.
std::pair<gs::DataDistribution, gs::WorkDistribution> cut(int n, int chunks) {
  if (chunks == 0) return {gs::dist::automatic(), gs::work::automatic()};
  const int per_chunk = (n + chunks - 1) / chunks;
  return {gs::dist::rows(per_chunk), gs::work::tiles({per_chunk})};
}

// Seconds per launch of `waits` launches each followed by wait(), and of that the seconds
// until each launch call returned.
template <class Launch>
std::pair<double, double> waited_launches(Launch&& launch, int waits) {
  double in_launch = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < waits; ++i) {
    const auto l0 = Clock::now();
    auto l = launch();
    in_launch += seconds_since(l0);
    l.wait();
  }
  return {seconds_since(t0) / waits, in_launch / waits};
}

// One step of the chain: the kernel, or (steps > 1) a native function doing `steps` steps;
// with `arrays`, the array library's assignment (from the program, or inside the native).
struct Step {
  const gs::Kernel& kernel;
  const gs::Kernel& native;
  int steps = 1;
  bool arrays = false;
};

// Seconds per step of `launches` dependent launches, then one wait; and of `waits`
// launches each followed by wait(). The medians of `runs`.
Figures time_launches(gs::Context& ctx, const Step& step, int n, int chunks, int launches, int runs,
                      bool waits_only, std::vector<float>& y_out, int& total_launches) {
  const auto [dist, work] = cut(n, chunks);
  const auto [xs, ys] = inputs(n);
  auto x = ctx.from_vector<float>(xs, {n}, dist);
  auto y = ctx.from_vector<float>(ys, {n}, dist);
  const int s = step.steps;
  const bool library = step.arrays && s == 1;  // a library call a step: no Event to wait on
  auto launch = [&] {
    if (library) {
      y.assign(y * 0.5f + x);
      return gs::Event();
    }
    return s > 1 ? step.native.launch({n}, {256}, work, n, s, y, x)
                 : step.kernel.launch({n}, {256}, work, n, y, x);
  };
  for (int i = 0; i < 100; ++i) launch();  // warm: compiled, chunks resident
  ctx.synchronize();
  total_launches = 100 * s;
  std::vector<double> chain, chain_cpu, wait, wait_launch;
  for (int r = 0; r < runs; ++r) {
    if (!waits_only) {
      const auto t0 = Clock::now();
      const double cpu0 = thread_seconds();
      for (int i = 0; i < launches; ++i) launch();
      chain_cpu.push_back((thread_seconds() - cpu0) / launches / s);
      ctx.synchronize();
      chain.push_back(seconds_since(t0) / launches / s);
      total_launches += launches * s;
    }
    if (library) continue;
    const int waits = std::max(1, launches / 4);
    const auto [per_wait, per_launch] = waited_launches(launch, waits);
    wait.push_back(per_wait / s);
    wait_launch.push_back(per_launch / s);
    total_launches += waits * s;
  }
  y_out = y.to_vector();
  const double none = std::nan("");
  return {waits_only ? none : median(chain) * 1e6, waits_only ? none : median(chain_cpu) * 1e6,
          wait.empty() ? none : median(wait) * 1e6,
          wait_launch.empty() ? none : median(wait_launch) * 1e6};
}

// Microseconds per step of `launches` dot products (see --dot), then one wait, the median of
// `runs`; `ok` false if a result is not exact.
double time_dots(gs::Context& ctx, const gs::Kernel& native, int n, int chunks, int steps,
                 int launches, int runs, bool& ok) {
  const auto [dist, work] = cut(n, chunks);
  const auto [xs, ys] = dot_inputs(n);
  auto x = ctx.from_vector<float>(xs, {n}, dist);
  auto y = ctx.from_vector<float>(ys, {n}, dist);
  auto acc = ctx.scalar<float>(0.0f), d = ctx.scalar<float>(-777.0f);
  int64_t made = 0;
  auto step = [&] {
    if (steps == 1)
      acc += gs::sum(y * x), ++made;
    else
      native.launch({n}, {256}, work, n, steps, d, y, x);
  };
  for (int i = 0; i < 100; ++i) step();  // warm: compiled, chunks resident
  ctx.synchronize();
  std::vector<double> chain;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < launches; ++i) step();
    ctx.synchronize();
    chain.push_back(seconds_since(t0) / launches / steps);
  }
  const float got = steps == 1 ? acc.item() : d.item(), want = steps == 1 ? float(made) : steps;
  if (got != want) std::fprintf(stderr, "dot: %g, expected %g\n", got, want);
  ok = ok && got == want;
  return median(chain) * 1e6;
}

// The chain's result on the host: each launch is y = y * 0.5 + x, in float as on a device
// (0.5 is exact, so the one rounding per step matches a fused multiply-add's). y tends to
// 2x, a fixed point it reaches well within 300 steps, so 300 stand for more.
bool check(int n, int total_launches, const std::vector<float>& got) {
  total_launches = std::min(total_launches, 300);
  const auto [xs, ys] = inputs(n);
  for (int i = 0; i < n; ++i) {
    float y = ys[i];
    for (int s = 0; s < total_launches; ++s) y = std::fma(y, 0.5f, xs[i]);
    if (std::fabs(y - got[i]) > 1e-5f * std::max(1.0f, std::fabs(y))) {
      std::fprintf(stderr, "element %d: %g, expected %g\n", i, got[i], y);
      return false;
    }
    if (i > 4096) break;  // the first elements suffice (every chunk is launched alike)
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the cost of one launch through the public API"};
  int n = 1 << 16, launches = 20000, runs = 5;
  std::vector<int> chunk_counts{1, 4}, inline_steps{1};
  std::string json_path;
  bool waits_only = false, arrays = false, dot = false;
  app.add_option("--n", n, "elements per array");
  app.add_option("--chunks", chunk_counts,
                 "chunks per array (each a run; 0: gridspan chooses, dist/work::automatic)")
      ->delimiter(',');
  app.add_option("--launches", launches, "launches per timed chain");
  app.add_option("--runs", runs, "timed chains (the median is reported)");
  app.add_option("--json", json_path, "write the figures here");
  app.add_option("--inline", inline_steps,
                 "steps per launch: above 1, a native function launching the kernel that many "
                 "times inline (each a run)")
      ->delimiter(',');
  app.add_flag("--arrays", arrays,
               "each step the array library's y.assign(y * 0.5f + x): from the program, or "
               "with --inline inside a native function on its arrays");
  app.add_flag("--dot", dot,
               "each step a whole reduction, acc += gs::sum(y * x) from the program, or with "
               "--inline inside a native function into its reduce(+) parameter");
  app.add_flag("--waits-only", waits_only,
               "only launches each followed by wait(), launches/4 per run (for a profiler)");
  CLI11_PARSE(app, argc, argv);
  return gs::run_program([&] {
    gs::Context ctx;
    auto k = ctx.compile(gs::KernelDef::from_source(kSource, "axpy_half")
                             .annotate("global i => readwrite y[i], read x[i]"));
    auto native =
        ctx.compile(gs::NativeDef::from_function(
                        "axpy_half_steps",
                        [&k](const gs::NativeContext&, int n, int steps, gs::Vector<float> y,
                             gs::Vector<const float> x) {
                          for (int s = 0; s < steps; ++s)
                            k.launch({n}, {256}, gs::work::automatic(), n, y, x);  // inline
                        },
                        {"n", "steps", "y", "x"})
                        .annotate("global i => readwrite y[i], read x[i]"));
    auto array_native = ctx.compile(
        gs::NativeDef::from_function("axpy_half_array_steps",
                                     [](const gs::NativeContext& c, int, int steps,
                                        gs::Vector<float> y, gs::Vector<const float> x) {
                                       auto ya = c.array(y);
                                       const auto xa = c.array(x);
                                       for (int s = 0; s < steps; ++s)
                                         ya.assign(ya * 0.5f + xa);  // inline
                                     },
                                     {"n", "steps", "y", "x"})
            .annotate("global i => readwrite y[i], read x[i]"));
    auto dot_native =
        ctx.compile(gs::NativeDef::from_function(
                        "dot_steps",
                        [](const gs::NativeContext& c, int, int steps, gs::Scalar<float> d,
                           gs::Vector<const float> y, gs::Vector<const float> x) {
                          auto da = c.array(d);
                          const auto ya = c.array(y), xa = c.array(x);
                          for (int s = 0; s < steps; ++s) da += gs::sum(ya * xa);  // inline
                        },
                        {"n", "steps", "d", "y", "x"})
                        .annotate("global i => reduce(+) d, read y[i], read x[i]"));
    nlohmann::json out = {{"n", n}, {"launches", launches}, {"runs", runs}, {"results", {}}};
    std::printf("%-8s %-7s %10s %22s %22s %22s %14s\n", "chunks", "inline", "n", "chain [us/step]",
                "launching thread [us]", "launch+wait [us]", "in launch [us]");
    bool ok = true;
    for (int steps : inline_steps)
      for (int chunks : chunk_counts) {
        if (dot) {
          const double us =
              time_dots(ctx, dot_native, n, chunks, std::max(1, steps), launches, runs, ok);
          std::printf("%-8d %-7d %10d %22.2f %-22s (dot)\n", chunks, std::max(1, steps), n, us, "");
          out["results"].push_back({{"chunks", chunks},
                                    {"inline_steps", std::max(1, steps)},
                                    {"dot", true},
                                    {"chain_us", us}});
          continue;
        }
        std::vector<float> y;
        int total = 0;
        const Step step{k, arrays ? array_native : native, std::max(1, steps), arrays};
        Figures f = time_launches(ctx, step, n, chunks, launches, runs, waits_only, y, total);
        ok = check(n, total, y) && ok;
        std::printf("%-8d %-7d %10d %22.2f %22.2f %22.2f %14.2f\n", chunks, step.steps, n,
                    f.chain_us, f.chain_cpu_us, f.wait_us, f.wait_launch_us);
        out["results"].push_back({{"chunks", chunks},
                                  {"inline_steps", step.steps},
                                  {"arrays", arrays},
                                  {"chain_us", f.chain_us},
                                  {"chain_thread_cpu_us", f.chain_cpu_us},
                                  {"wait_us", f.wait_us},
                                  {"wait_launch_us", f.wait_launch_us}});
      }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    if (!ok) std::fprintf(stderr, "the results differ from the host's\n");
    return ok ? 0 : 1;
  });
}
