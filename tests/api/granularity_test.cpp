// Automatic granularity: the cost model's samples, dist::automatic's cut from the rule and
// the memory budget, work::automatic following the written array's chunks, re-splitting a
// kernel whose measured time is worth more devices, and the same results as hand-chosen
// distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

#include "gridspan/gridspan.hpp"
#include "runtime/driver.hpp"
#include "runtime/executable.hpp"
#include "runtime/granularity.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

// 10 us a task and 1 GB/s: the rule gives p = floor(sqrt(T / (2 * 10 us))) pieces for a
// pass of T = 4 bytes an element / 1 GB/s, at most the devices.
gs::Config fixed(int devices) {
  gs::Config c = test::quiet_config(devices);
  c.task_overhead_us = 10;
  c.device_bandwidth = 1000000000;
  c.cost_history = false;  // the choices below start from nothing measured
  return c;
}

int64_t rule_pieces(int64_t elements, int devices) {
  const double seconds = double(elements) * 4 / 1e9;
  return std::clamp<int64_t>(int64_t(std::sqrt(seconds / 20e-6)), 1, devices);
}

template <class T>
std::size_t chunks_of(const gs::Array<T>& a) {
  return gs::detail::array_chunks(a.handle()).size();
}

const char* kScale = R"(
__device__ void scale(dim3 blockIdx, int64_t n, float f, gridspan::Vector<float> out,
                      const gridspan::Vector<float> in) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f * in[i];
}
)";

// Much arithmetic over few elements: what a cost model should spread over devices.
const char* kHeavy = R"(
__device__ void heavy(dim3 blockIdx, int64_t n, int64_t rounds, gridspan::Vector<float> out,
                      const gridspan::Vector<float> in) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = in[i];
  for (int64_t r = 0; r < rounds; ++r) x = x * 0.999f + 0.001f;
  out[i] = x;
}
)";

std::vector<float> random_floats(std::size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

TEST(Granularity, AutomaticDistributionFollowsTheRule) {
  gs::Context ctx(fixed(2));
  for (int64_t n : {1000, 20000, 100000, 1000000}) {
    auto a = ctx.zeros<float>({n}, gs::dist::automatic());
    EXPECT_EQ(chunks_of(a), std::size_t(rule_pieces(n, 2))) << n;
    // One shape, one cut, whatever the dtype: kernels over both find their chunks aligned.
    auto b = ctx.zeros<double>({n}, gs::dist::automatic());
    EXPECT_EQ(gs::detail::array_chunks(a.handle())[0].owned,
              gs::detail::array_chunks(b.handle())[0].owned);
  }
  // The array library's default is the same choice.
  auto c = gs::zeros<float>(ctx, {100000});
  EXPECT_EQ(chunks_of(c), 2u);
}

// A matrix of fewer rows than a two-dimensional block is high (SpMV's ELL matrix, 23 slots
// of 23168 rows, stored slot by row) is cut in whole blocks only where the rule wants more
// than one chunk: on one device it stays whole, on two its first chunk takes whole blocks.
TEST(Granularity, AMatrixOfFewRowsIsCutOnlyWhereTheRuleSaysSo) {
  for (int rows : {5, 23, 31}) {
    gs::Context one(fixed(1));
    auto a = one.zeros<float>({rows, 1 << 16}, gs::dist::automatic());
    EXPECT_EQ(chunks_of(a), 1u) << rows;
    gs::Context two(fixed(2));
    auto b = two.zeros<float>({rows, 1 << 16}, gs::dist::automatic());
    const auto chunks = gs::detail::array_chunks(b.handle());
    ASSERT_EQ(chunks.size(), 2u) << rows;
    const int64_t first = chunks[0].owned.hi[0];  // whole blocks: a power of two high
    EXPECT_EQ(first & (first - 1), 0) << rows;
    EXPECT_GE(2 * first, rows) << rows;
    EXPECT_EQ(chunks[1].owned.hi[0], rows) << rows;
  }
}

TEST(Granularity, AutomaticChunksFitAPartOfTheBudget) {
  gs::Config cfg = fixed(2);
  cfg.device_memory = 1 << 20;
  gs::Context ctx(cfg);
  auto a = ctx.zeros<float>({1 << 18, 2}, gs::dist::automatic());  // 2 MiB
  const auto chunks = gs::detail::array_chunks(a.handle());
  const int64_t most = runtime::Granularity::most_chunk_bytes(1 << 20);  // 64 KiB
  EXPECT_GE(int64_t(chunks.size()), (2 << 20) / most);
  for (const auto& c : chunks) EXPECT_LE(c.owned.volume() * 4, most);
}

// Arrays of one row count whose cut the memory bounds are cut alike (the finest so far), so
// that a superblock following one array's chunk overwrites the other's chunk whole; an array
// the memory does not bound keeps its own cut.
TEST(Granularity, ArraysOfOneRowCountBoundByMemoryAreCutAlike) {
  gs::Config cfg = fixed(2);
  cfg.device_memory = 1 << 20;  // chunks of at most 64 KiB
  gs::Context ctx(cfg);
  auto big = ctx.zeros<float>({256, 1024}, gs::dist::automatic());   // 1 MiB: 16 chunks
  auto small = ctx.zeros<float>({256, 256}, gs::dist::automatic());  // 256 KiB: 4 on its own
  auto tiny = ctx.zeros<float>({256, 1}, gs::dist::automatic());     // 1 KiB: not bound
  const auto b = gs::detail::array_chunks(big.handle());
  const auto s = gs::detail::array_chunks(small.handle());
  ASSERT_EQ(b.size(), 16u);
  ASSERT_EQ(s.size(), b.size());
  for (std::size_t k = 0; k < b.size(); ++k) {
    EXPECT_EQ(s[k].owned.lo[0], b[k].owned.lo[0]) << k;
    EXPECT_EQ(s[k].owned.hi[0], b[k].owned.hi[0]) << k;
  }
  gs::Context alone(cfg);
  auto tiny_alone = alone.zeros<float>({256, 1}, gs::dist::automatic());
  EXPECT_EQ(chunks_of(tiny), chunks_of(tiny_alone));
  EXPECT_LT(chunks_of(tiny), b.size());
  auto small_alone = alone.zeros<float>({256, 256}, gs::dist::automatic());
  EXPECT_EQ(chunks_of(small_alone), 4u);
}

// A memory-bound cut of many rows is a whole number of 256, which every shape's block rows
// divide: K-Means' points {n, 4} (blocks of 64 rows) and labels {n} (of 256) then share it.
TEST(Granularity, ArraysOfOneRowCountAndOtherShapesShareAMemoryBoundCut) {
  gs::Config cfg = fixed(2);
  cfg.device_memory = 16 << 20;  // chunks of at most 1 MiB
  gs::Context ctx(cfg);
  const int64_t n = 1000000;  // 16 chunks of 62500 points, 977 blocks of 64, not of 256
  auto points = ctx.zeros<float>({n, 4}, gs::dist::automatic());
  auto labels = ctx.zeros<int32_t>({n}, gs::dist::automatic());
  const auto p = gs::detail::array_chunks(points.handle());
  const auto l = gs::detail::array_chunks(labels.handle());
  ASSERT_EQ(l.size(), p.size());
  for (std::size_t k = 0; k < p.size(); ++k) {
    EXPECT_EQ(l[k].owned.lo[0], p[k].owned.lo[0]) << k;
    EXPECT_EQ(p[k].owned.lo[0] % runtime::Granularity::kCommonRows, 0) << k;
    EXPECT_LE(p[k].owned.volume() * 4, 1 << 20) << k;
  }
}

// An array far larger than the budget is cut in at most kMostChunks chunks a device while
// chunks of up to 1/16 of the budget allow: every chunk costs a task and a copy.
TEST(Granularity, AnArrayTakesAtMostKMostChunksWhereTheBudgetAllows) {
  gs::Config cfg = fixed(1);
  cfg.device_memory = int64_t(32) << 20;  // 1/64 is 0.5 MiB, raised to 1 MiB; 1/16 is 2 MiB
  gs::Context ctx(cfg);
  const int64_t most = runtime::Granularity::kMostChunks;
  auto big = ctx.zeros<float>({int64_t(24) << 20}, gs::dist::automatic());  // 96 MiB
  const auto chunks = gs::detail::array_chunks(big.handle());
  EXPECT_EQ(int64_t(chunks.size()), most);  // not 96 chunks of 1 MiB
  for (const auto& c : chunks) EXPECT_LE(c.owned.volume() * 4, 2 << 20);
  auto huge = ctx.zeros<float>({int64_t(48) << 20}, gs::dist::automatic());  // 192 MiB
  EXPECT_EQ(chunks_of(huge), 96u);  // chunks of 2 MiB, 1/16 of the budget, at most
}

TEST(Granularity, AutomaticDistributionsAreChosenOnlyByAContext) {
  EXPECT_THROW(gs::dist::automatic().chunks(gs::Dim{10}, 2), gs::ConfigError);
  EXPECT_THROW(gs::work::automatic().superblocks(gs::Dim{10}, gs::Dim{2}, 2), gs::LaunchError);
  EXPECT_TRUE(gs::dist::automatic().is_automatic());
  EXPECT_FALSE(gs::dist::rows(4).is_automatic());
}

std::filesystem::path fresh_folder(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("gridspan-{}-{}-{}", name, ::getpid(), test::base_seed());
  std::filesystem::remove_all(dir);
  return dir;
}

// The history files a context left in `cache` (one folder for the machine).
std::vector<std::filesystem::path> history_files(const std::filesystem::path& cache) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::exists(cache / "granularity")) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(cache / "granularity"))
    if (entry.is_regular_file() && entry.path().parent_path() != cache / "granularity")
      files.push_back(entry.path());
  return files;
}

// What a model recorded is read by the next one that keeps its history in the same folder,
// weighing as kHistorySamples at most; other executables, models without the folder and
// files that are not histories find nothing; a folder that cannot be written loses the
// history, not the run.
TEST(Granularity, TheCostModelKeepsItsHistory) {
  using runtime::CostModel;
  const auto dir = fresh_folder("history");
  auto body = [](const plan::ExecFrame&, const GsArrayArg*, const void* const*) {};
  const runtime::NativeExecutable e("history_e", {}, body), other("history_other", {}, body);
  const double seconds = 1e-3 * (1 + double(test::base_seed() % 100) / 100);
  {
    CostModel m;
    m.keep_history(dir.string());
    for (int k = 0; k < 20; ++k) m.record(e, 1024, 4096, seconds, seconds / 2);
    m.keep_cut(e, "launch-a", {4, true});
    m.keep_cut(e, "launch-c", {2, false, 8});           // a trial the run ended before it settled
    m.keep_cut(e, "launch-d", {4, false, 8, seconds});  // and a period measured at its cut
    EXPECT_EQ(m.kept_cut(e, "launch-a")->factor, 4);
  }  // written as it ends
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);
  {
    CostModel m;
    m.keep_history(dir.string());
    const auto got = m.measured(e, 1500);  // the same size class
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->samples, CostModel::kHistorySamples);
    EXPECT_TRUE(got->earlier);
    EXPECT_NEAR(got->seconds_per_thread, seconds / 1024, seconds / 1024 * 1e-6);
    EXPECT_NEAR(got->share_per_thread, seconds / 2048, seconds / 2048 * 1e-6);
    EXPECT_EQ(got->threads, 1024);
    EXPECT_FALSE(m.measured(other, 1024).has_value());
    ASSERT_TRUE(m.kept_cut(e, "launch-a") && m.kept_cut(e, "launch-c"));
    EXPECT_EQ(m.kept_cut(e, "launch-a")->factor, 4);
    EXPECT_TRUE(m.kept_cut(e, "launch-a")->settled);
    EXPECT_EQ(m.kept_cut(e, "launch-c")->factor, 2);
    EXPECT_FALSE(m.kept_cut(e, "launch-c")->settled);
    EXPECT_EQ(m.kept_cut(e, "launch-c")->probe, 8);
    EXPECT_EQ(m.kept_cut(e, "launch-c")->period, 0);
    ASSERT_TRUE(m.kept_cut(e, "launch-d"));
    EXPECT_EQ(m.kept_cut(e, "launch-d")->probe, 8);
    EXPECT_NEAR(m.kept_cut(e, "launch-d")->period, seconds, seconds * 1e-8);
    EXPECT_FALSE(m.kept_cut(e, "launch-b").has_value());
    EXPECT_FALSE(m.kept_cut(other, "launch-a").has_value());
    EXPECT_FALSE(m.measured(e, 64).has_value());    // another class
    EXPECT_TRUE(m.estimate(e, 64).has_value());     // the nearest class measured
    m.record(e, 1024, 4096, 3 * seconds, seconds);  // a third sample weighs 1/3
    EXPECT_NEAR(m.measured(e, 1024)->seconds_per_thread, seconds * (1 + 2.0 / 3) / 1024,
                seconds / 1024 * 1e-6);
  }
  CostModel none;
  EXPECT_FALSE(none.measured(e, 1024).has_value());
  for (const char* bad : {"10 3 nonsense\n", "10 3 1e-3 1024 4096 1e-3\ncut launch-a 3\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 0 0\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2 6\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2 4 0\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2 4 -1e-3\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2 4 nan\n",
                          "10 3 1e-3 1024 4096 1e-3\ntrial launch-a 2 4 1e-3 8\n"}) {
    for (const auto& f : std::filesystem::directory_iterator(dir))
      std::ofstream(f.path()) << "gridspan costs 2\nhistory_e\n" << bad;
    CostModel m;
    m.keep_history(dir.string());
    EXPECT_FALSE(m.measured(e, 1024).has_value()) << bad;
    EXPECT_FALSE(m.kept_cut(e, "launch-a").has_value()) << bad;
  }
  {
    CostModel m;
    m.keep_history("/dev/null/history");
    m.record(e, 1024, 4096, seconds, seconds);
    EXPECT_NO_THROW(m.save());
  }
  std::filesystem::remove_all(dir);
}

// The first kFirst runs of an executable are timed, then one in kEvery.
TEST(Granularity, TheFirstRunsOfAKernelAreTimedThenASample) {
  using runtime::CostModel;
  auto body = [](const plan::ExecFrame&, const GsArrayArg*, const void* const*) {};
  const runtime::NativeExecutable e("timed_e", {}, body);
  int timed = 0;
  for (uint32_t n = 0; n < 10 * CostModel::kEvery; ++n) timed += CostModel::should_time(e);
  EXPECT_EQ(timed, int(CostModel::kFirst) + 10 - 1);  // 0..9, then 16, 32, ..., 144
}

// A launch clock's period: the median time over which a launch's count of tasks ended,
// once kLaunches launches came after the first; a pause between launches does not move it,
// and ticks of clocks not open are ignored.
TEST(Granularity, ALaunchClockMeasuresHowOftenLaunchesComplete) {
  using runtime::LaunchClocks;
  using namespace std::chrono_literals;
  LaunchClocks clocks;
  constexpr int tasks = 3;
  clocks.open(7, tasks);
  clocks.tick(8);  // not open
  auto launch = [&] {
    for (int k = 0; k < tasks; ++k) clocks.tick(7);
    std::this_thread::sleep_for(2ms);
  };
  for (int l = 0; l < LaunchClocks::kLaunches; ++l) {
    EXPECT_FALSE(clocks.period(7)) << l;
    launch();
  }
  EXPECT_FALSE(clocks.period(7));  // the first launch is left out
  launch();
  std::this_thread::sleep_for(30ms);  // a pause, as between a benchmark's rounds
  for (int l = 0; l < 4; ++l) launch();
  const auto p = clocks.period(7);
  ASSERT_TRUE(p);
  EXPECT_GE(*p, 0.002);
  EXPECT_LT(*p, 0.025);
  const auto spread = clocks.spread(7);  // the windows' least and most, the pause in the most
  ASSERT_TRUE(spread);
  EXPECT_LE(spread->first, *p);
  EXPECT_GE(spread->second, 0.030);
  EXPECT_FALSE(clocks.period(8));
  EXPECT_FALSE(clocks.spread(8));
  clocks.open(7, tasks);  // already open: kept as it is
  EXPECT_TRUE(clocks.period(7));
  clocks.open(7, 2 * tasks);  // launches of other tasks: measured anew
  EXPECT_FALSE(clocks.period(7));
  for (int l = 0; l < 2 * (1 + LaunchClocks::kLaunches); ++l) launch();
  EXPECT_TRUE(clocks.period(7));
  clocks.close(7);
  EXPECT_FALSE(clocks.period(7));
}

// Makes the cut of a trial of finer cuts in a history file of `cache` `factor`, settled
// (`word` "cut") or going on ("trial", trying `probe` next, after a launch at `factor` took
// `period`, where given); false if no file holds one.
bool set_kept_cut(const std::filesystem::path& cache, const std::string& word, int factor,
                  int probe = 0, const std::string& period = "") {
  for (const auto& file : history_files(cache)) {
    std::ifstream in(file);
    std::string text, line;
    bool found = false;
    while (std::getline(in, line)) {
      if (line.rfind("cut ", 0) == 0 || line.rfind("trial ", 0) == 0) {
        std::istringstream words(line);
        std::string launch;
        words >> launch >> launch;
        line = fmt::format("{} {} {}", word, launch, factor);
        if (probe) line += " " + std::to_string(probe);
        if (!period.empty()) line += " " + period;
        found = true;
      }
      text += line + "\n";
    }
    in.close();
    if (found) return bool(std::ofstream(file) << text);
  }
  return false;
}

// The first trial line in a history file of `cache` without its launch ("cut 8", "trial 4
// 8"); empty if none.
std::string kept_cut_line(const std::filesystem::path& cache) {
  for (const auto& file : history_files(cache)) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("cut ", 0) == 0 || line.rfind("trial ", 0) == 0)
        return line.substr(0, line.find(' ')) + line.substr(line.find(' ', line.find(' ') + 1));
  }
  return "";
}

// A context keeps what its kernels cost in the cache folder: a later context's first
// launch of the heavy kernel starts from it and spreads over both devices at once, and at
// the cut its trial of finer cuts settled on, with the same results; with the history off,
// the first launch is the guess again.
TEST(Granularity, ALaterRunStartsFromTheCostsEarlierRunsMeasured) {
  const auto cache = fresh_folder("history-runs");
  gs::Config c = fixed(2);
  c.cache_dir = cache.string();
  c.cost_history = true;
  const int64_t n = 16384, rounds = 2000;
  const auto values = random_floats(n, test::base_seed() + 4);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = values[i];
    for (int64_t r = 0; r < rounds; ++r) x = x * 0.999f + 0.001f;
    want[i] = x;
  }
  // The Execute tasks of the first of `launches` launches of a context.
  auto first_launch = [&](const gs::Config& config, int launches = 4) {
    gs::Context ctx(config);
    ctx.keep_plans(true);
    auto k = ctx.compile(gs::KernelDef::from_source(kHeavy, "heavy")
                             .annotate("global i => write out[i], read in[i]"));
    auto in = ctx.from_vector<float>(values, {n}, gs::dist::centralized(0));
    auto out = ctx.full<float>({n}, -777.0f, gs::dist::centralized(0));
    k.launch({n}, {256}, gs::work::automatic(), n, rounds, out, in);
    const std::string dot = k.last_plan_dot();
    std::size_t count = 0;
    for (auto at = dot.find("heavy"); at != std::string::npos; at = dot.find("heavy", at + 1))
      ++count;
    for (int r = 1; r < launches; ++r)  // one at a time: each plan knows the last's times
      k.launch({n}, {256}, gs::work::automatic(), n, rounds, out, in).wait();
    const auto got = out.to_vector();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::abs(want[i]))) << i;
    return count;
  };
  // Guessed: stays where its arrays are; then measured, over both devices, on trial.
  EXPECT_EQ(first_launch(c, 2 * (1 + runtime::LaunchClocks::kLaunches)), 1u);
  EXPECT_GE(history_files(cache).size(), 1u);
  // A kernel's first run keeps no period with its trial (its launches run slower than
  // later runs'): "trial <cut> <next>" at most.
  const std::string first = kept_cut_line(cache);
  EXPECT_LE(std::count(first.begin(), first.end(), ' '), 2) << first;
  EXPECT_EQ(first_launch(c, 40), 2u);  // measured in the run before; a trial of finer cuts
  // A later run starts where the trial settled (made 8 here, so that it shows).
  ASSERT_TRUE(set_kept_cut(cache, "cut", 8));
  EXPECT_EQ(first_launch(c, 1), 16u);
  EXPECT_EQ(kept_cut_line(cache), "cut 8");
  // A trial that a run ended before it settled goes on in the next from its finest cut
  // that paid (made 4 here): kept as it is by a run too short to measure a cut.
  ASSERT_TRUE(set_kept_cut(cache, "trial", 4, 16));
  EXPECT_EQ(first_launch(c, 1), 8u);
  EXPECT_EQ(kept_cut_line(cache), "trial 4 16");
  // A run that measured its cut but ended before the finer one passes the period on (its
  // last launch measured as the run ends), and the next run's first launch is at once the
  // finer cut, to be measured against it.
  const int measured = 1 + runtime::LaunchClocks::kLaunches;  // the first one's ends left out
  ASSERT_TRUE(set_kept_cut(cache, "trial", 4, 8));
  EXPECT_EQ(first_launch(c, measured), 8u);
  const std::string kept = kept_cut_line(cache);
  ASSERT_EQ(kept.rfind("trial 4 8 ", 0), 0u) << kept;
  EXPECT_GT(std::stod(kept.substr(10)), 0) << kept;
  EXPECT_EQ(first_launch(c, 1), 16u);
  EXPECT_EQ(kept_cut_line(cache), kept);
  // A run of that many launches at the finer cut takes the step as it ends: 8 kept (tried
  // against 16 next, with its period) or leapt over (16 tried against 4's period).
  EXPECT_EQ(first_launch(c, measured), 16u);
  const std::string step = kept_cut_line(cache);
  EXPECT_TRUE(step.rfind("trial 8 16 ", 0) == 0 || step == "trial 4 16" + kept.substr(9)) << step;
  EXPECT_NE(step, kept);

  gs::Config off = c;
  off.cost_history = false;
  EXPECT_EQ(first_launch(off), 1u);
  std::filesystem::remove_all(cache);
}

// The heavy kernel with a few weights every thread reads whole.
const char* kHeavyWeights = R"(
__device__ void heavy_weights(dim3 blockIdx, int64_t n, int64_t rounds, gridspan::Vector<float> out,
                              const gridspan::Vector<float> in, const gridspan::Vector<float> w) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = in[i];
  for (int64_t r = 0; r < rounds; ++r) x = x * 0.999f + 0.001f * w[r % 4];
  out[i] = x;
}
)";

// A trial of finer cuts goes on while the arrays a launch writes keep their chunks: the
// weights, read whole on both devices, are replicated at the second launch (GEMM's `b`),
// and a run of 1 + kLaunches launches still measures its cut and keeps the period.
TEST(Granularity, ATrialGoesOnWhenAnArrayItReadsIsReplicated) {
  const auto cache = fresh_folder("history-replicated");
  gs::Config c = fixed(2);
  c.cache_dir = cache.string();
  c.cost_history = true;
  const int64_t n = 1 << 16, rounds = 500;
  const auto values = random_floats(n, test::base_seed() + 21);
  const auto weights = random_floats(4, test::base_seed() + 22);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = values[i];
    for (int64_t r = 0; r < rounds; ++r) x = x * 0.999f + 0.001f * weights[r % 4];
    want[i] = x;
  }
  auto run = [&](int launches) {
    gs::Context ctx(c);
    auto k = ctx.compile(gs::KernelDef::from_source(kHeavyWeights, "heavy_weights")
                             .annotate("global i => write out[i], read in[i], read w[:]"));
    auto in = ctx.from_vector<float>(values, {n}, gs::dist::automatic());
    auto w = ctx.from_vector<float>(weights, {4}, gs::dist::automatic());
    auto out = ctx.full<float>({n}, -777.0f, gs::dist::automatic());
    ASSERT_EQ(chunks_of(out), 2u);
    for (int l = 0; l < launches; ++l)
      k.launch({n}, {256}, gs::work::automatic(), n, rounds, out, in, w).wait();
    EXPECT_EQ(gs::detail::array_chunks(w.handle()).size(), 2u) << "replicated";
    const auto got = out.to_vector();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::abs(want[i])))
          << i << " seed " << test::base_seed();
  };
  const int measured = 1 + runtime::LaunchClocks::kLaunches;
  run(measured);  // the kernel's first run: no period kept
  run(measured);
  const std::string kept = kept_cut_line(cache);
  ASSERT_EQ(kept.rfind("trial 1 2 ", 0), 0u) << kept;
  EXPECT_GT(std::stod(kept.substr(10)), 0) << kept;
  std::filesystem::remove_all(cache);
}

// On one device (a GPU where there is one: its timing events), superblocks of 2^20
// threads, more blocks than a batch takes.
TEST(Granularity, KernelCostsAreMeasured) {
  gs::Context ctx(fixed(1));
  auto k = ctx.compile(
      gs::KernelDef::from_source(kScale, "scale").annotate("global i => write out[i], read in[i]"));
  const int64_t n = 1 << 21;
  auto in = ctx.from_vector<float>(random_floats(n, test::base_seed()), {n}, gs::dist::rows(n / 2));
  auto out = ctx.zeros<float>({n}, gs::dist::rows(n / 2));
  for (int r = 0; r < 12; ++r) k.launch({n}, {256}, gs::work::tiles({n / 2}), n, 2.0f, out, in);
  ctx.synchronize();
  const auto costs = ctx.kernel_costs();
  const auto it = std::find_if(costs.begin(), costs.end(),
                               [](const gs::KernelCost& c) { return c.kernel == "scale"; });
  ASSERT_NE(it, costs.end());
  EXPECT_EQ(it->threads, n / 2);
  EXPECT_GE(it->samples, 10);  // 24 tasks: the first 10 and one in 16 after
  EXPECT_GT(it->seconds, 0);
  EXPECT_LT(it->seconds, 1.0);
  std::printf("%s: %.1f us a task of %lld threads\n", ctx.backend_name().c_str(), it->seconds * 1e6,
              static_cast<long long>(it->threads));
  EXPECT_NEAR(it->bytes, double(n / 2) * 8, double(n / 2) * 8 * 0.1);  // two chunks a task
}

// work::automatic over arrays cut by hand: one superblock per chunk of the written array,
// so nothing is copied, and the result is the hand-chosen launch's.
TEST(Granularity, AutomaticWorkFollowsTheWrittenArraysChunks) {
  gs::Context ctx(fixed(2));
  auto k = ctx.compile(
      gs::KernelDef::from_source(kScale, "scale").annotate("global i => write out[i], read in[i]"));
  const int64_t n = 3000;
  const auto values = random_floats(n, test::base_seed() + 1);
  auto in = ctx.from_vector<float>(values, {n}, gs::dist::rows(512));
  auto out = ctx.full<float>({n}, -777.0f, gs::dist::rows(512));  // poisoned
  ctx.synchronize();
  const uint64_t moved = ctx.stats().bytes_moved, tasks = ctx.stats().tasks;
  k.launch({n}, {128}, gs::work::automatic(), n, 3.0f, out, in);
  ctx.synchronize();
  EXPECT_EQ(ctx.stats().bytes_moved, moved);  // every superblock used its chunks in place
  EXPECT_GE(ctx.stats().tasks - tasks, 6u);   // one Execute per chunk at least
  const auto got = out.to_vector();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 3.0f * values[i]) << i;
}

const char* kTotal = R"(
__device__ void total_of(dim3 blockIdx, int64_t n, const gridspan::Vector<int> in,
                         gridspan::Scalar<long long> total) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) total.reduce((long long)in[i]);
}
)";

// On the cpu backend a superblock that reduces into a partial runs on one thread: with four
// threads a device, automatic work cuts each chunk's superblock in slabs, about two a
// thread, where one thread a device keeps one superblock a chunk. The sum is the same.
TEST(Granularity, AReductionIsCutForTheDevicesThreads) {
  const int64_t n = int64_t(1) << 21;  // 8 MB: 8 ms at 1 GB/s, worth 16 superblocks
  std::mt19937_64 g(test::base_seed() + 7);
  std::vector<int> values(n);
  for (int& v : values) v = int(g() % 100) + 1;
  const long long expect = std::accumulate(values.begin(), values.end(), 0LL);
  std::vector<uint64_t> tasks;
  for (int threads : {1, 4}) {
    gs::Config cfg = fixed(2);
    cfg.cpu_threads = threads;
    gs::Context ctx(cfg);
    if (ctx.backend_name() != "cpu") GTEST_SKIP() << "a GPU runs a superblock on all of it";
    auto k = ctx.compile(gs::KernelDef::from_source(kTotal, "total_of")
                             .annotate("global i => read in[i], reduce(+) total"));
    auto in = ctx.from_vector<int>(values, {n}, gs::dist::rows(n / 2));
    auto total = ctx.scalar<long long>(-1);
    ctx.synchronize();
    const uint64_t before = ctx.stats().tasks;
    k.launch({n}, {256}, gs::work::automatic(), n, in, total);
    EXPECT_EQ(total.item(), expect) << threads << " threads, seed " << test::base_seed();
    tasks.push_back(ctx.stats().tasks - before);
  }
  EXPECT_GE(tasks[1], tasks[0] + 14) << "16 superblocks (and their partials) against 2";
}

const char* kColumnSums = R"(
__device__ void colsum(dim3 blockIdx, int64_t rows, int64_t cols, gridspan::Vector<float> y,
                       const gridspan::Matrix<float> m) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= cols) return;
  float s = 0.0f;
  for (int64_t r = 0; r < rows; ++r) s += m(r, i);
  y[i] = s;
}
)";

// An automatic matrix its kernel walks along the columns (an ELL matrix's layout) is cut
// anew along them at its first such launch: its values stay, and the superblocks then use
// its chunks in place (on one device, a second launch moves nothing).
TEST(Granularity, AnArrayWalkedAlongItsColumnsIsCutAnew) {
  const int64_t rows = 16, cols = 8192;  // 512 KiB: 8 chunks of at most 64 KiB
  const auto values = random_floats(rows * cols, test::base_seed() + 9);
  std::vector<float> sums(cols, 0.0f);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t r = 0; r < rows; ++r) sums[i] += values[r * cols + i];
  for (int devices : {1, 2}) {
    gs::Config cfg = fixed(devices);
    cfg.device_memory = 1 << 20;
    gs::Context ctx(cfg);
    auto k = ctx.compile(gs::KernelDef::from_source(kColumnSums, "colsum")
                             .annotate("global i => overwrite y[i], read m[:, i]"));
    auto m = ctx.from_vector<float>(values, {rows, cols}, gs::dist::automatic());
    const auto before = gs::detail::array_chunks(m.handle());
    ASSERT_GE(before.size(), 8u);
    EXPECT_EQ(before[0].owned.hi[1], cols) << "cut by rows at first";
    auto y = ctx.full<float>({cols}, -777.0f, gs::dist::automatic());
    k.launch({cols}, {128}, gs::work::automatic(), rows, cols, y, m);
    EXPECT_EQ(y.to_vector(), sums) << devices << " devices, seed " << test::base_seed();
    const auto after = gs::detail::array_chunks(m.handle());
    EXPECT_EQ(after.size(), before.size());
    for (const auto& c : after) {
      EXPECT_EQ(c.owned.lo[0], 0);
      EXPECT_EQ(c.owned.hi[0], rows);
      EXPECT_LT(c.owned.extent(1), cols);
    }
    EXPECT_EQ(m.to_vector(), values);
    if (devices > 1) continue;
    ctx.synchronize();
    const uint64_t moved = ctx.stats().bytes_moved;
    k.launch({cols}, {128}, gs::work::automatic(), rows, cols, y, m);
    ctx.synchronize();
    EXPECT_EQ(ctx.stats().bytes_moved, moved);
    EXPECT_EQ(y.to_vector(), sums);
  }
}

// SpMV's pattern: every thread reads all of `x` (here at a random column), writes its own
// element of `y`, and the two swap at every iteration.
const char* kGather = R"(
__device__ void gather(dim3 blockIdx, int64_t n, gridspan::Vector<float> y,
                       const gridspan::Vector<int> col, const gridspan::Vector<float> x) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.5f * (x[col[i]] + x[i]);
}
)";

struct GatherRun {
  std::vector<float> result;
  bool x_replicated = false, y_replicated = false;
  bool read_replicated = false;  // the vector the last launch read, after it
  uint64_t last_moved = 0;       // bytes the last iteration moved
};

// `iterations` of y = gather(x); swap(x, y) on `devices` devices with device memory `memory`.
// `fresh`: x is a new array at every iteration instead (made from y's values).
GatherRun run_gather(int devices, int64_t memory, const std::vector<int>& cols,
                     const std::vector<float>& x0, int iterations, bool fresh = false) {
  gs::Config cfg = fixed(devices);
  cfg.device_memory = memory;
  gs::Context ctx(cfg);
  auto k = ctx.compile(gs::KernelDef::from_source(kGather, "gather")
                           .annotate("global i => overwrite y[i], read col[i], read x[:]"));
  const int64_t n = int64_t(x0.size());
  auto col = ctx.from_vector<int>(cols, {n}, gs::dist::automatic());
  auto x = ctx.from_vector<float>(x0, {n}, gs::dist::automatic());
  auto y = ctx.full<float>({n}, -777.0f, gs::dist::automatic());
  auto replicated = [&](const gs::Array<float>& a) {
    const auto chunks = gs::detail::array_chunks(a.handle());
    return devices > 1 && chunks.size() == std::size_t(devices) &&
           std::all_of(chunks.begin(), chunks.end(),
                       [&](const auto& c) { return c.region.extent(0) == n; });
  };
  GatherRun r;
  for (int it = 0; it < iterations; ++it) {
    ctx.synchronize();
    const uint64_t before = ctx.stats().bytes_moved;
    k.launch({n}, {256}, gs::work::automatic(), n, y, col, x);
    ctx.synchronize();
    r.last_moved = ctx.stats().bytes_moved - before;
    r.read_replicated = replicated(x);
    if (fresh)
      x = ctx.from_vector<float>(y.to_vector(), {n}, gs::dist::automatic());
    else
      std::swap(x, y);
  }
  r.x_replicated = replicated(x), r.y_replicated = replicated(y);
  r.result = x.to_vector();
  return r;
}

TEST(Granularity, AnArrayReadWholeOnSeveralDevicesIsReplicated) {
  const int64_t n = 65536;  // 256 KiB a vector, a launch worth two devices by the rule
  std::mt19937_64 g(test::base_seed() + 11);
  std::vector<int> cols(n);
  for (int& c : cols) c = int(g() % uint64_t(n));
  const auto x0 = random_floats(n, test::base_seed() + 12);
  const int iterations = 6;  // each vector replicated at its second read (iterations 3, 4)
  std::vector<float> want = x0, next(n);
  for (int it = 0; it < iterations; ++it) {
    for (int64_t i = 0; i < n; ++i) next[i] = 0.5f * (want[cols[i]] + want[i]);
    std::swap(want, next);
  }
  const GatherRun two = run_gather(2, int64_t(64) << 20, cols, x0, iterations);
  EXPECT_EQ(two.result, want) << "seed " << test::base_seed();
  EXPECT_TRUE(two.x_replicated && two.y_replicated && two.read_replicated)
      << "both vectors are read whole on both devices in turn";
  // Each device sends the other its half of the new vector, and nothing else.
  EXPECT_EQ(two.last_moved, uint64_t(n) * 4) << "bytes an iteration once replicated";
  // One device: nothing to replicate on.
  const GatherRun one = run_gather(1, int64_t(64) << 20, cols, x0, iterations);
  EXPECT_EQ(one.result, want);
  EXPECT_FALSE(one.x_replicated || one.y_replicated);
  // A vector larger than a chunk may be (256 KiB against 64 KiB of a 1 MiB budget) stays cut.
  const GatherRun tight = run_gather(2, int64_t(1) << 20, cols, x0, iterations);
  EXPECT_EQ(tight.result, want);
  EXPECT_FALSE(tight.x_replicated || tight.y_replicated);
  // A vector made anew for every launch is read whole once: never replicated.
  const GatherRun fresh = run_gather(2, int64_t(64) << 20, cols, x0, iterations, true);
  EXPECT_EQ(fresh.result, want);
  EXPECT_FALSE(fresh.read_replicated);
}

const char* kAdd2 = R"(
__device__ void add2(dim3 blockIdx, int64_t rows, int64_t cols, gridspan::Matrix<float> out,
                     const gridspan::Matrix<float> in) {
  int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t y = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (x < cols && y < rows) out[y][x] = in[y][x] + 2.0f;
}
)";

// A 2-d launch whose y axis walks the rows (x the columns): the cut is along y.
TEST(Granularity, AutomaticWorkFindsTheAxisAlongTheRows) {
  gs::Context ctx(fixed(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kAdd2, "add2")
                           .annotate("global [x, y] => write out[y, x], read in[y, x]"));
  const int64_t rows = 96, cols = 40;
  const auto values = random_floats(rows * cols, test::base_seed() + 2);
  auto in = ctx.from_vector<float>(values, {rows, cols}, gs::dist::rows(32));
  auto out = ctx.full<float>({rows, cols}, -777.0f, gs::dist::rows(32));
  ctx.synchronize();
  const uint64_t moved = ctx.stats().bytes_moved;
  k.launch({cols, rows}, {8, 8}, gs::work::automatic(), rows, cols, out, in);
  ctx.synchronize();
  EXPECT_EQ(ctx.stats().bytes_moved, moved);
  const auto got = out.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], values[i] + 2.0f) << i;
}

// Chunks of 20 rows under blocks of 8: the slabs of blocks that cross a chunk boundary are
// superblocks of their own, so only their rows are copied, not whole arrays.
TEST(Granularity, AutomaticWorkCutsOutTheBlocksAcrossChunks) {
  gs::Context ctx(fixed(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kAdd2, "add2")
                           .annotate("global [x, y] => write out[y, x], read in[y, x]"));
  const int64_t rows = 200, cols = 40;
  const auto values = random_floats(rows * cols, test::base_seed() + 4);
  auto in = ctx.from_vector<float>(values, {rows, cols}, gs::dist::rows(20));
  auto out = ctx.full<float>({rows, cols}, -777.0f, gs::dist::rows(20));
  ctx.synchronize();
  const uint64_t moved = ctx.stats().bytes_moved;
  k.launch({cols, rows}, {8, 8}, gs::work::automatic(), rows, cols, out, in);
  ctx.synchronize();
  // 5 boundaries at 20 mod 40 cut a slab of 8 rows: each reads and writes its two parts.
  const uint64_t slab = 8 * cols * 4;
  EXPECT_GT(ctx.stats().bytes_moved, moved);
  EXPECT_LE(ctx.stats().bytes_moved - moved, 5 * 3 * slab);
  const auto got = out.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], values[i] + 2.0f) << i;
}

// dist::automatic(halo): the same rows, each chunk widened by the halo, so a stencil's
// superblocks read their neighbours' rows in place; the result is the host's.
TEST(Granularity, AutomaticDistributionKeepsAHalo) {
  const char* src = R"(
__device__ void smooth(dim3 blockIdx, int64_t rows, int64_t cols, gridspan::Matrix<float> out,
                       const gridspan::Matrix<float> in) {
  int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t y = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (x >= cols || y >= rows) return;
  float s = in[y][x];
  if (y > 0) s += in[y - 1][x];
  if (y + 1 < rows) s += in[y + 1][x];
  out[y][x] = s;
}
)";
  gs::Config cfg = fixed(2);
  cfg.device_memory = 1 << 20;  // chunks of at most 64 KiB: several a device
  gs::Context ctx(cfg);
  auto k = ctx.compile(gs::KernelDef::from_source(src, "smooth")
                           .annotate("global [x, y] => write out[y, x], read in[y-1:y+1, x]"));
  const int64_t rows = 2000, cols = 40;
  const auto values = random_floats(rows * cols, test::base_seed() + 6);
  auto in = ctx.from_vector<float>(values, {rows, cols}, gs::dist::automatic({1, 0}));
  auto out = ctx.full<float>({rows, cols}, -777.0f, gs::dist::automatic({1, 0}));
  const auto chunks = gs::detail::array_chunks(in.handle());
  ASSERT_GE(chunks.size(), 4u);
  for (const auto& c : chunks) {
    EXPECT_EQ(c.region.lo[0], std::max<int64_t>(0, c.owned.lo[0] - 1));
    EXPECT_EQ(c.region.hi[0], std::min(rows, c.owned.hi[0] + 1));
  }
  EXPECT_THROW(ctx.zeros<float>({rows, cols}, gs::dist::automatic({1})), gs::ConfigError);
  ctx.synchronize();
  const uint64_t moved = ctx.stats().bytes_moved;
  k.launch({cols, rows}, {8, 8}, gs::work::automatic(), rows, cols, out, in);
  ctx.synchronize();
  // Only the slabs of blocks across chunk boundaries copy (8 rows each, both arrays), and
  // the written halos are brought up to date.
  EXPECT_LE(ctx.stats().bytes_moved - moved, chunks.size() * 3 * 10 * cols * 4);
  const auto got = out.to_vector();
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x) {
      float want = values[y * cols + x];
      if (y > 0) want += values[(y - 1) * cols + x];
      if (y + 1 < rows) want += values[(y + 1) * cols + x];
      ASSERT_EQ(got[y * cols + x], want) << y << ", " << x;
    }
}

// The superblocks follow the array of most bytes (read here), whose chunks are finer than
// the written one's: every superblock uses both in place.
TEST(Granularity, AutomaticWorkFollowsTheLargestArray) {
  const char* src = R"(
__device__ void norm1(dim3 blockIdx, int64_t n, gridspan::Vector<float> out,
                      const gridspan::Matrix<float> pts) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fabsf(pts[i][0]) + fabsf(pts[i][1]) + fabsf(pts[i][2]) + fabsf(pts[i][3]);
}
)";
  gs::Context ctx(fixed(1));
  auto k = ctx.compile(gs::KernelDef::from_source(src, "norm1")
                           .annotate("global i => write out[i], read pts[i, :]"));
  const int64_t n = 4096;
  const auto values = random_floats(n * 4, test::base_seed() + 5);
  auto pts = ctx.from_vector<float>(values, {n, 4}, gs::dist::rows(256));
  auto out = ctx.full<float>({n}, -777.0f, gs::dist::rows(1024));
  ctx.synchronize();
  const uint64_t moved = ctx.stats().bytes_moved;
  k.launch({n}, {128}, gs::work::automatic(), n, out, pts);
  ctx.synchronize();
  EXPECT_EQ(ctx.stats().bytes_moved, moved);
  const auto got = out.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const float* p = &values[std::size_t(i) * 4];
    ASSERT_EQ(got[i], std::abs(p[0]) + std::abs(p[1]) + std::abs(p[2]) + std::abs(p[3])) << i;
  }
}

// A kernel over one chunk that computes much: its first launch stays on the chunk's device
// (a guess from its bytes gives two pieces, but moving the arrays would cost more than they
// gain); once its time is measured, later launches spread over both.
TEST(Granularity, MeasuredTimeSplitsAHeavyKernel) {
  gs::Context ctx(fixed(2));
  ctx.keep_plans(true);
  auto k = ctx.compile(
      gs::KernelDef::from_source(kHeavy, "heavy").annotate("global i => write out[i], read in[i]"));
  const int64_t n = 16384, rounds = 2000;
  const auto values = random_floats(n, test::base_seed() + 3);
  auto in = ctx.from_vector<float>(values, {n}, gs::dist::centralized(0));
  auto out = ctx.full<float>({n}, -777.0f, gs::dist::centralized(0));
  auto executes = [&] {
    const std::string dot = k.last_plan_dot();
    std::size_t count = 0;
    for (std::size_t at = dot.find("heavy"); at != std::string::npos;
         at = dot.find("heavy", at + 1))
      ++count;
    return count;
  };
  k.launch({n}, {256}, gs::work::automatic(), n, rounds, out, in);
  EXPECT_EQ(executes(), 1u);
  ctx.synchronize();
  k.launch({n}, {256}, gs::work::automatic(), n, rounds, out, in);
  EXPECT_EQ(executes(), 2u);
  const auto got = out.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    float x = values[i];
    for (int64_t r = 0; r < rounds; ++r) x = x * 0.999f + 0.001f;
    ASSERT_NEAR(got[i], x, 1e-4f * std::max(1.0f, std::abs(x))) << i;
  }
}

// Cutting a launch over devices pays when the time the devices gain outweighs moving its
// arrays: their bytes over the link, and a copy task and its wait for each.
TEST(Granularity, ASmallLaunchStaysWhereItsArraysAre) {
  using G = runtime::Granularity;
  const runtime::Baseline b{1.1e-6, 16e9, true};              // the 2-core machine's cpu devices
  EXPECT_FALSE(G::moving_pays(10e-6, 2, 2048, 4, b));         // K-Means' update: 5 us to gain
  EXPECT_TRUE(G::moving_pays(10e-3, 2, 2048, 4, b));          // 5 ms to gain
  EXPECT_FALSE(G::moving_pays(10e-3, 2, 200'000'000, 2, b));  // 100 ms of moving
  EXPECT_TRUE(G::moving_pays(40e-6, 2, 64, 4, b));            // 20 us against 8.8 us
  EXPECT_FALSE(G::moving_pays(40e-6, 1, 64, 4, b));           // one piece gains nothing
}

// Finer cuts: once the current cut's launch period is measured, a cut twice as fine is
// tried; it is kept while each halving completes launches at least kFinerGain more often,
// and the search stops where one does not, where tasks would be too short, or at
// kMostFiner. Until a cut is measured, it is kept.
TEST(Granularity, FinerCutsAreKeptWhileLaunchesCompleteMoreOften) {
  using G = runtime::Granularity;
  const std::optional<double> none;
  G::Trial t;
  EXPECT_EQ(G::finer_step(t, none, none, true), 1);  // the current cut is measured first
  EXPECT_EQ(G::finer_step(t, 10.0, none, true), 2);  // then half is tried
  EXPECT_EQ(G::finer_step(t, 10.0, none, true), 2);
  EXPECT_EQ(t.factor, 1);
  EXPECT_EQ(G::finer_step(t, 10.0, 8.0, true), 2);
  EXPECT_EQ(t.factor, 2);  // 20% more often: kept
  EXPECT_FALSE(t.settled);
  EXPECT_EQ(G::finer_step(t, 8.0, none, true), 4);
  EXPECT_EQ(G::finer_step(t, 8.0, 8.0 * (1 - G::kFinerGain / 2), true), 2);
  EXPECT_FALSE(t.settled);  // 4% more often: not enough, but four times as fine is tried
  EXPECT_EQ(t.probe(), 8);
  EXPECT_EQ(G::finer_step(t, 8.0, none, true), 8);
  EXPECT_EQ(G::finer_step(t, 8.0, 8.0 * (1 - G::kFinerGain / 2), true), 2);
  EXPECT_TRUE(t.settled);  // nor that: the last cut that paid is kept
  EXPECT_EQ(G::finer_step(t, 8.0, 1.0, true), 2);

  G::Trial leap;  // twice as fine is slower, four times pays: kept, then twice that tried
  EXPECT_EQ(G::finer_step(leap, 10.0, none, true), 2);
  EXPECT_EQ(G::finer_step(leap, 10.0, 10.5, true), 1);
  EXPECT_EQ(G::finer_step(leap, 10.0, none, true), 4);
  EXPECT_EQ(G::finer_step(leap, 10.0, 8.0, true), 4);
  EXPECT_EQ(leap.factor, 4);
  EXPECT_FALSE(leap.leapt);
  EXPECT_EQ(G::finer_step(leap, 8.0, none, true), 8);
  G::Trial leap_too_fine;  // no leap past kMostFiner
  leap_too_fine.factor = G::kMostFiner / 2;
  EXPECT_EQ(G::finer_step(leap_too_fine, 10.0, 10.0, true), G::kMostFiner / 2);
  EXPECT_TRUE(leap_too_fine.settled);

  G::Trial short_tasks;
  EXPECT_EQ(G::finer_step(short_tasks, 10.0, none, false), 1);
  EXPECT_TRUE(short_tasks.settled);

  G::Trial faster;
  for (int64_t f = 1; f < G::kMostFiner; f *= 2)
    ASSERT_EQ(G::finer_step(faster, 10.0 / double(f), 5.0 / double(f), true), 2 * f);
  EXPECT_TRUE(faster.settled);  // at kMostFiner: nothing finer to try
  EXPECT_EQ(G::finer_step(faster, 1.0, 0.1, true), G::kMostFiner);
  EXPECT_TRUE(faster.settled);
}

// A device's tasks are charged its time: alone, their wall time; together, the time over
// those running at each moment; the charges add up to the device's busy time.
TEST(Granularity, TasksThatRunTogetherShareTheirDevicesTime) {
  using ms = std::chrono::milliseconds;
  runtime::ShareClock clock;
  const runtime::ShareClock::Time t0{};
  const double a = clock.enter(t0 + ms(1000));
  EXPECT_NEAR(clock.leave(a, t0 + ms(1004)), 0.004, 1e-12);  // alone for 4 ms
  // b runs 10 ms; c joins it for 6 ms of them, then d joins for the last 2 of those.
  const double b = clock.enter(t0 + ms(2000));
  const double c = clock.enter(t0 + ms(2002));
  const double d = clock.enter(t0 + ms(2006));
  const double charged_c = clock.leave(c, t0 + ms(2008));
  const double charged_d = clock.leave(d, t0 + ms(2009));
  const double charged_b = clock.leave(b, t0 + ms(2010));
  EXPECT_NEAR(charged_c, 0.004 / 2 + 0.002 / 3, 1e-12);
  EXPECT_NEAR(charged_d, 0.002 / 3 + 0.001 / 2, 1e-12);
  EXPECT_NEAR(charged_b, 0.002 + 0.004 / 2 + 0.002 / 3 + 0.001 / 2 + 0.001, 1e-12);
  EXPECT_NEAR(charged_b + charged_c + charged_d, 0.010, 1e-12);  // the device's busy time
  // One after another, each is charged its own time.
  const double e = clock.enter(t0 + ms(3000));
  EXPECT_NEAR(clock.leave(e, t0 + ms(3003)), 0.003, 1e-12);
  const double f = clock.enter(t0 + ms(3003));
  EXPECT_NEAR(clock.leave(f, t0 + ms(3008)), 0.005, 1e-12);
}

// On a cpu device of several threads, a kernel launched again and again goes through the
// trial (whatever it settles on) and its results stay the hand-chosen launch's.
TEST(Granularity, TheTrialOfFinerCutsKeepsResults) {
  gs::Config c = fixed(2);
  c.cpu_threads = 2;
  gs::Context ctx(c);
  if (ctx.backend_name() != "cpu") GTEST_SKIP() << "cpu devices time each superblock";
  auto k = ctx.compile(
      gs::KernelDef::from_source(kScale, "scale").annotate("global i => write out[i], read in[i]"));
  const int64_t n = int64_t(1) << 20;
  const auto values = random_floats(n, test::base_seed() + 5);
  auto in = ctx.from_vector<float>(values, {n}, gs::dist::rows(n / 2));
  auto out = ctx.full<float>({n}, -777.0f, gs::dist::rows(n / 2));
  for (int i = 0; i < 300; ++i) {
    out.fill(-777.0f);
    k.launch({n}, {256}, gs::work::automatic(), n, 1.5f, out, in);
  }
  const auto got = out.to_vector();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 1.5f * values[i]) << i;
  int64_t tasks = 0;
  for (const gs::KernelCost& kc : ctx.kernel_costs())
    if (kc.kernel == "scale") tasks += kc.samples;
  EXPECT_GE(tasks, int64_t(runtime::CostModel::kFirst)) << "the superblocks were timed";
}

// Unset, the overhead and bandwidth are measured once per machine, with the probe, when
// first needed, and kept in the cache folder: a later context reads them (and so chooses as
// the first did) without the probe.
TEST(Granularity, TheBaselineIsMeasuredOnceAndKept) {
  const auto dir = fresh_folder("granularity");
  gs::Config c = test::quiet_config(1);
  c.cache_dir = dir.string();
  auto probed = [](const gs::Context& ctx) {
    const auto costs = ctx.kernel_costs();
    return std::any_of(costs.begin(), costs.end(),
                       [](const gs::KernelCost& k) { return k.kernel == "gs_granularity_probe"; });
  };
  double overhead = 0, bandwidth = 0;
  {
    gs::Context ctx(c);
    const auto& b = gs::detail::context_driver(ctx)->granularity().baseline();
    EXPECT_TRUE(b.measured);
    EXPECT_GT(b.task_overhead, 1e-8);
    EXPECT_LT(b.task_overhead, 1e-2);
    EXPECT_GT(b.bandwidth, 1e7);
    EXPECT_LT(b.bandwidth, 1e14);
    std::printf("measured: %.2f us a task, %.2f GB/s\n", b.task_overhead * 1e6, b.bandwidth * 1e-9);
    EXPECT_TRUE(probed(ctx));
    EXPECT_EQ(ctx.stats().launches, 0u);  // the probe's launches are not the program's
    overhead = b.task_overhead, bandwidth = b.bandwidth;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "granularity"));
  {
    gs::Context ctx(c);
    const auto& b = gs::detail::context_driver(ctx)->granularity().baseline();
    EXPECT_NEAR(b.task_overhead, overhead, overhead * 1e-6);
    EXPECT_NEAR(b.bandwidth, bandwidth, bandwidth * 1e-6);
    EXPECT_FALSE(probed(ctx));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gridspan
