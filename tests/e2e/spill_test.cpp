// Spilling: device and host limits far below the data; results stay exact, statistics show
// the bytes that went to host memory and to disk.
#include <set>

#include "e2e/support.hpp"

namespace gridspan::test {
namespace {

const char* kInc = R"(
__device__ void inc(dim3 blockIdx, int n, int by, gridspan::Vector<int> a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] + by;
}
)";

TEST(Spill, DataSurvivesDeviceHostDiskRoundTrips) {
  auto g = rng(21);
  // 1 MiB of ints per rank, in 64 chunks of 16 KiB (under mpirun each rank holds a share).
  const int n = 256 * 1024 * ranks();
  gs::Context ctx(config(2, 64 << 10, 128 << 10));
  auto k =
      ctx.compile(gs::KernelDef::from_source(kInc, "inc").annotate("global i => readwrite a[i]"));
  auto v = random_vector<int>(n, g);
  auto a = ctx.from_vector<int>(v, {n}, gs::dist::rows(4096));
  for (int it = 1; it <= 4; ++it) k.launch({n}, {256}, gs::work::tiles({4096}), n, it, a);
  auto r = a.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], v[i] + 10) << i;
  auto stats = ctx.memory_stats();
  const std::size_t devices = static_cast<std::size_t>(ctx.device_count());
  ASSERT_EQ(stats.size(), devices + 2);  // cpu:0, cpu:1 (of every rank), host, disk
  // Every device once: under mpirun each rank's own names come after "rank R ".
  std::set<std::string> names;
  for (std::size_t d = 0; d < devices; ++d) names.insert(stats[d].name);
  EXPECT_EQ(names.size(), devices);
  EXPECT_EQ(stats[devices].name, "host");
  EXPECT_EQ(stats[devices + 1].name, "disk");
  if (ranks() > 1)  // the last device is the last rank's
    EXPECT_EQ(stats[devices - 1].name.rfind(fmt::format("rank {} ", ranks() - 1), 0), 0u)
        << stats[devices - 1].name;
  EXPECT_GT(stats[0].spilled_bytes, 0u);
  EXPECT_GT(stats[devices].spilled_bytes, 0u);  // host → disk
  EXPECT_LE(stats[0].peak_bytes, stats[0].limit_bytes);
  EXPECT_LE(stats[devices].peak_bytes, stats[devices].limit_bytes);
}

// Sweeps over twice the device's memory, one launch at a time: eviction by the queued
// tasks' next uses keeps about half of the array resident from one sweep to the next
// (least-recently-used eviction would move all of it out and in again every sweep).
TEST(Spill, RepeatedSweepsKeepPartOfTheArrayResident) {
  auto g = rng(22);
  // 16 chunks of 16 KiB per rank: 256 KiB (under mpirun every rank has a device of its
  // own, and an equal share of the array).
  const int n = 64 * 1024 * ranks(), chunk = 4096, sweeps = 6;
  const std::size_t bytes = std::size_t(n) * 4;
  gs::Context ctx(config(1, bytes / 2 / ranks() + 2 * chunk * 4, 0));
  auto spilled_now = [&] {
    std::size_t sum = 0;
    auto stats = ctx.memory_stats();
    for (int d = 0; d < ctx.device_count(); ++d) sum += stats[d].spilled_bytes;
    return sum;
  };
  auto k =
      ctx.compile(gs::KernelDef::from_source(kInc, "inc").annotate("global i => readwrite a[i]"));
  auto v = random_vector<int>(n, g);
  auto a = ctx.from_vector<int>(v, {n}, gs::dist::rows(chunk));
  ctx.synchronize();
  const std::size_t before = spilled_now();
  for (int it = 1; it <= sweeps; ++it) {
    k.launch({n}, {256}, gs::work::tiles({chunk}), n, it, a);
    ctx.synchronize();
  }
  const std::size_t spilled = spilled_now() - before;
  auto r = a.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], v[i] + sweeps * (sweeps + 1) / 2) << i;
  std::printf("spilled %zu bytes in %d sweeps of %zu bytes\n", spilled, sweeps, bytes);
  EXPECT_GT(spilled, 0u);
  // Least recently used first: sweeps * bytes; staging without a look-ahead bound: 3/4 of it.
  EXPECT_LE(spilled, sweeps * bytes * 5 / 8);
}

const char* kScale = R"(
__device__ void scale(dim3 blockIdx, int n, int it, gridspan::Vector<int> out,
                      const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3 + it;
}
)";

// The bytes copied to `ctx`'s devices since its statistics were `before`.
std::size_t copied_in_since(gs::Context& ctx, const std::vector<gs::MemoryStats>& before) {
  const auto after = ctx.memory_stats();
  std::size_t copied = 0;
  for (int d = 0; d < ctx.device_count(); ++d)
    copied += after[d].copied_in_bytes - before[d].copied_in_bytes;
  return copied;
}

// Out of core, a kernel that overwrites its output: declared `overwrite`, the output's
// chunks are not brought back to the device before each launch (declared `write`, they
// are), and the results are the same. On devices with memory of their own (a GPU; the cpu
// backend's lanes devices), where bringing a chunk back is a copy.
TEST(Spill, AnOverwrittenOutputIsNotBroughtBack) {
  auto g = rng(24);
  const int n = 64 * 1024 * ranks(), chunk = 4096, launches = 3;
  const std::size_t bytes = std::size_t(n) * 4;
  auto v = random_vector<int>(n, g);
  auto run = [&](const char* mode, std::size_t& copied_in) {
    gs::Config c = config(1, bytes / 2 / ranks() + 2 * chunk * 4, 0);
    c.cpu_async = true;  // device memory apart from host memory (no effect on GPUs)
    gs::Context ctx(c);
    auto k = ctx.compile(gs::KernelDef::from_source(kScale, "scale")
                             .annotate(fmt::format("global i => {} out[i], read in[i]", mode)));
    auto in = ctx.from_vector<int>(v, {n}, gs::dist::rows(chunk));
    auto out = ctx.full<int>({n}, poison<int>(), gs::dist::rows(chunk));
    ctx.synchronize();
    const auto before = ctx.memory_stats();
    for (int it = 1; it <= launches; ++it) {
      k.launch({n}, {256}, gs::work::tiles({chunk}), n, it, out, in);
      ctx.synchronize();
    }
    copied_in = copied_in_since(ctx, before);
    return out.to_vector();
  };
  std::size_t written = 0, overwritten = 0;
  auto w = run("write", written);
  auto o = run("overwrite", overwritten);
  for (int i = 0; i < n; ++i) ASSERT_EQ(o[i], v[i] * 3 + launches) << i;
  EXPECT_EQ(o, w);
  std::printf("copied to the devices: %zu bytes (write), %zu (overwrite)\n", written, overwritten);
  EXPECT_GT(written, 0u);
  // `in` comes back as often either way; `out` does only when it is merely written.
  EXPECT_LT(overwritten * 10, written * 7);
}

const char* kSmooth = R"(
__device__ void smooth(dim3 blockIdx, int n, gridspan::Vector<int> out,
                       const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (i > 0 ? in[i - 1] : 0) + 2 * in[i] + (i + 1 < n ? in[i + 1] : 0);
}
)";

// The same for a stencil whose arrays' chunks have halo elements, swapped from launch to
// launch (HotSpot's pattern): an output chunk overwritten in place but for its halos has
// only the halos brought back, and the results match the host's.
TEST(Spill, AnOverwrittenChunkWithHalosHasOnlyItsHalosBroughtBack) {
  auto g = rng(25);
  const int n = 64 * 1024 * ranks(), chunk = 4096, launches = 3;
  const std::size_t bytes = std::size_t(n) * 4;
  const auto v = random_vector<int>(n, g);
  std::vector<int> want = v, next(n);
  for (int it = 0; it < launches; ++it) {
    for (int i = 0; i < n; ++i)
      next[i] = (i > 0 ? want[i - 1] : 0) + 2 * want[i] + (i + 1 < n ? want[i + 1] : 0);
    std::swap(want, next);
  }
  auto run = [&](const char* mode, std::size_t& copied_in) {
    gs::Config c = config(1, bytes / ranks() + 4 * chunk * 4, 0);
    c.cpu_async = true;  // device memory apart from host memory (no effect on GPUs)
    gs::Context ctx(c);
    auto k =
        ctx.compile(gs::KernelDef::from_source(kSmooth, "smooth")
                        .annotate(fmt::format("global i => {} out[i], read in[i-1:i+1]", mode)));
    auto a = ctx.from_vector<int>(v, {n}, gs::dist::stencil({chunk}, {1}));
    auto b = ctx.full<int>({n}, poison<int>(), gs::dist::stencil({chunk}, {1}));
    ctx.synchronize();
    const auto before = ctx.memory_stats();
    for (int it = 0; it < launches; ++it) {
      k.launch({n}, {256}, gs::work::tiles({chunk}), n, b, a);
      ctx.synchronize();
      std::swap(a, b);
    }
    copied_in = copied_in_since(ctx, before);
    return a.to_vector();
  };
  std::size_t written = 0, overwritten = 0;
  const auto w = run("write", written);
  const auto o = run("overwrite", overwritten);
  for (int i = 0; i < n; ++i) ASSERT_EQ(o[i], want[i]) << i;
  EXPECT_EQ(w, want);
  std::printf("copied to the devices: %zu bytes (write), %zu (overwrite)\n", written, overwritten);
  EXPECT_GT(written, 0u);
  // Locally (cpu devices, 2026-12-08) 0.54-0.80 of `write`'s bytes in 20 runs, and 0.97-1.08
  // in 10 with the halos-only bring-back turned off: the eviction order varies.
  EXPECT_LT(overwritten * 10, written * 9);
}

const char* kMatmul = R"(
__device__ void matmul(dim3 blockIdx, int n, gridspan::Matrix<float> c,
                       const gridspan::Matrix<float> a, const gridspan::Matrix<float> b) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= n) return;
  float s = 0.0f;
  for (int k = 0; k < n; ++k) s += a(i, k) * b(k, j);
  c(i, j) = s;
}
)";

// C = A B out of core, rows of A and C streamed while every superblock reads all of B: B
// is assembled once per device and launch and shared by the superblocks, so a launch moves
// each matrix about once (assembled per superblock, B would move once per superblock).
TEST(Spill, OperandEveryTaskReadsStaysResident) {
  auto g = rng(23);
  const int n = 256, rows = 16;  // 16 row chunks of each matrix: 256 KiB per matrix
  const std::size_t matrix = std::size_t(n) * n * 4;
  gs::Context ctx(config(1, 3 * matrix / 2, 0));
  auto k = ctx.compile(gs::KernelDef::from_source(kMatmul, "matmul")
                           .annotate("global [j, i] => write c[i, j], read a[i, :], read b[:, j]"));
  auto va = random_vector<float>(std::size_t(n) * n, g), vb = random_vector<float>(n * n, g);
  auto a = ctx.from_vector<float>(va, {n, n}, gs::dist::rows(rows));
  auto b = ctx.from_vector<float>(vb, {n, n}, gs::dist::rows(rows));
  auto c = ctx.full<float>({n, n}, poison<float>(), gs::dist::rows(rows));
  ctx.synchronize();
  const std::size_t before = ctx.memory_stats()[0].spilled_bytes;
  const int launches = 3;
  for (int it = 0; it < launches; ++it) {
    k.launch({n, n}, {16, 16}, gs::work::tiles({n, rows}), n, c, a, b);
    ctx.synchronize();
  }
  const std::size_t spilled = ctx.memory_stats()[0].spilled_bytes - before;
  auto r = c.to_vector();
  for (int i = 0; i < n; i += 17)
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int x = 0; x < n; ++x) want += double(va[i * n + x]) * vb[x * n + j];
      ASSERT_NEAR(r[i * n + j], want, 1e-3 * (1 + std::abs(want))) << i << "," << j;
    }
  std::printf("spilled %zu bytes in %d launches over %zu bytes of data\n", spilled, launches,
              3 * matrix);
  EXPECT_LE(spilled, launches * 3 * matrix + matrix);
}

}  // namespace
}  // namespace gridspan::test
