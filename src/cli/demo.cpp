// `gridspan demo`: four problems on the embedded default, each with a device memory limit
// below its data so chunks spill to host memory and disk, each checked against a plain
// C++ reference. Prints: problem, n, time, throughput, bytes spilled, check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "gridspan/gridspan.hpp"

namespace gridspan::cli {

namespace {

namespace gs = gridspan;

struct Row {
  std::string problem;
  long long n;
  double seconds;
  std::string unit;
  std::size_t spilled;
  bool ok;
  std::string detail;
};

// Limits per problem: each device holds a quarter of the data, the host another quarter,
// so the rest goes to disk.
gs::Config limits_for(std::size_t data_bytes, int devices) {
  gs::Config c = gs::Config::from_env();
  c.device_memory = std::max<std::size_t>(data_bytes / 4 / devices, 1 << 20);
  c.host_memory = std::max<std::size_t>(data_bytes / 4, 1 << 20);
  c.staging_bytes = c.device_memory / 2;
  return c;
}

std::size_t spilled(const gs::Context& ctx) {
  std::size_t s = 0;
  for (auto& st : ctx.memory_stats())
    if (st.name != "disk") s += st.spilled_bytes;
  return s;
}

// Rows a chunk for an array of `rows` rows of `row_bytes` bytes and `row_elems` elements
// under `cut` (`own`: the demo's `own_rows`).
long long rows_for(const DemoCut& cut, long long rows, long long row_elems, long long row_bytes,
                   long long own_rows) {
  const long long devices = std::max(1, gs::Config::from_env().cpu_devices);
  long long pieces = 1;
  switch (cut.kind) {
    case DemoCut::own:
    case DemoCut::automatic:
      return own_rows;
    case DemoCut::hand:
      pieces = cut.pieces * devices;
      break;
    case DemoCut::dask:  // chunks of 128 MiB
      return std::min(rows, std::max(1LL, (128LL << 20) / row_bytes));
    case DemoCut::legate:  // at least 1 Mi elements a piece, at most a piece a device
      pieces = std::clamp(rows * row_elems / (1LL << 20), 1LL, devices);
      break;
  }
  return std::max(1LL, (rows + pieces - 1) / pieces);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* kStencil = R"(
__device__ void stencil(dim3 blockIdx, long long n, gridspan::Vector<float> out,
                        const gridspan::Vector<float> in) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i == 0 || i == n - 1) out[i] = in[i];
  else out[i] = (in[i - 1] + in[i] + in[i + 1]) * (1.0f / 3.0f);
}
)";

Row demo_stencil(int scale, const DemoCut& cut) {
  const long long n = (1LL << 22) * scale;
  const int iters = 10;
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(n);
  for (auto& v : x) v = u(g);
  std::vector<float> ref = x, tmp(n);
  for (int it = 0; it < iters; ++it) {
    for (long long i = 0; i < n; ++i)
      tmp[i] = (i == 0 || i == n - 1) ? ref[i] : (ref[i - 1] + ref[i] + ref[i + 1]) * (1.0f / 3.0f);
    std::swap(ref, tmp);
  }
  gs::Config cfg = limits_for(2 * n * sizeof(float), gs::Config::from_env().cpu_devices);
  gs::Context ctx(cfg);
  auto k = ctx.compile(gs::KernelDef::from_source(kStencil, "stencil")
                           .annotate("global i => overwrite out[i], read in[i-1:i+1]"));
  const bool automatic = cut.kind == DemoCut::automatic;
  long long chunk = rows_for(cut, n, 1, 4, n / 32);
  auto dist = automatic ? gs::dist::automatic({1}) : gs::dist::stencil({chunk}, {1});
  auto work = automatic ? gs::work::automatic() : gs::work::tiles({chunk});
  auto a = ctx.from_vector<float>(x, {n}, dist);
  auto b = ctx.empty<float>({n}, dist);
  ctx.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    k.launch({n}, {256}, work, n, b, a);
    std::swap(a, b);
  }
  std::vector<float> out = a.to_vector();
  double t = seconds_since(t0);
  double err = 0;
  for (long long i = 0; i < n; ++i) err = std::max(err, (double)std::fabs(out[i] - ref[i]));
  return {"stencil-1d (10 it)",
          n,
          t,
          "elem/s",
          spilled(ctx),
          err == 0.0,
          fmt::format("max |diff| {:.1e}", err)};
}

const char* kHotspot = R"(
#define AMB 80.0f
__device__ void hotspot(dim3 blockIdx, int rows, int cols, float cap, float rx, float ry, float rz,
                        gridspan::Matrix<float> out, const gridspan::Matrix<float> temp,
                        const gridspan::Matrix<float> power) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= rows || j >= cols) return;
  float t = temp(i, j);
  float n = temp(i > 0 ? i - 1 : i, j), s = temp(i < rows - 1 ? i + 1 : i, j);
  float w = temp(i, j > 0 ? j - 1 : j), e = temp(i, j < cols - 1 ? j + 1 : j);
  out(i, j) = t + cap * (power(i, j) + (s + n - 2.0f * t) * ry + (e + w - 2.0f * t) * rx +
                         (AMB - t) * rz);
}
)";

Row demo_hotspot(int scale, const DemoCut& cut) {
  const int rows = 1024 * scale, cols = 1024;
  const int iters = 10;
  const float cap = 0.5f, rx = 0.1f, ry = 0.1f, rz = 0.01f;
  std::mt19937 g(2);
  std::uniform_real_distribution<float> ut(300, 340), up(0, 1);
  std::vector<float> temp((size_t)rows * cols), power((size_t)rows * cols);
  for (auto& v : temp) v = ut(g);
  for (auto& v : power) v = up(g);
  std::vector<float> ref = temp, tmp(ref.size());
  auto at = [&](const std::vector<float>& m, int i, int j) { return m[(size_t)i * cols + j]; };
  for (int it = 0; it < iters; ++it) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        float t = at(ref, i, j);
        float n = at(ref, i > 0 ? i - 1 : i, j), s = at(ref, i < rows - 1 ? i + 1 : i, j);
        float w = at(ref, i, j > 0 ? j - 1 : j), e = at(ref, i, j < cols - 1 ? j + 1 : j);
        tmp[(size_t)i * cols + j] = t + cap * (at(power, i, j) + (s + n - 2.0f * t) * ry +
                                               (e + w - 2.0f * t) * rx + (80.0f - t) * rz);
      }
    std::swap(ref, tmp);
  }
  gs::Config cfg = limits_for(3 * temp.size() * sizeof(float), gs::Config::from_env().cpu_devices);
  gs::Context ctx(cfg);
  auto k = ctx.compile(
      gs::KernelDef::from_source(kHotspot, "hotspot")
          .annotate("global [i, j] => overwrite out[i, j], read temp[i-1:i+1, j-1:j+1], "
                    "read power[i, j]"));
  // Its own cut: tiles of 256 x 256; the others cut rows.
  const long long r = rows_for(cut, rows, cols, cols * 4LL, 256);
  const gs::Dim tile = cut.kind == DemoCut::own ? gs::Dim{256, 256} : gs::Dim{r, cols};
  const bool automatic = cut.kind == DemoCut::automatic;
  auto dist = automatic ? gs::dist::automatic({1, 1}) : gs::dist::stencil(tile, {1, 1});
  auto a = ctx.from_vector<float>(temp, {rows, cols}, dist);
  auto b = ctx.empty<float>({rows, cols}, dist);
  auto p = ctx.from_vector<float>(power, {rows, cols},
                                  automatic ? gs::dist::automatic() : gs::dist::tiles(tile));
  auto work = automatic ? gs::work::automatic() : gs::work::tiles(tile);
  ctx.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    k.launch({rows, cols}, {16, 16}, work, rows, cols, cap, rx, ry, rz, b, a, p);
    std::swap(a, b);
  }
  std::vector<float> out = a.to_vector();
  double t = seconds_since(t0);
  double err = 0;
  double magnitude = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    err = std::max(err, (double)std::fabs(out[i] - ref[i]));
    magnitude = std::max(magnitude, (double)std::fabs(ref[i]));
  }
  // Exact on the cpu backend; a GPU fuses multiply-adds (as nvcc does by default), which
  // rounds once where the reference rounds twice: a few units in the last place.
  const bool fused = ctx.backend_name() != "cpu";
  return {"hotspot-2d (10 it)",
          (long long)rows * cols,
          t,
          "cell/s",
          spilled(ctx),
          fused ? err <= 1e-5 * magnitude : err == 0.0,
          fmt::format("max |diff| {:.1e}{}", err, fused ? " (fused multiply-add)" : "")};
}

const char* kKmeans = R"(
__device__ void assign(dim3 blockIdx, long long n, int k, const gridspan::Matrix<float> points,
                       const gridspan::Matrix<float> centres, gridspan::Vector<int> label,
                       gridspan::Matrix<double> sums, gridspan::Vector<long long> counts) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int best = 0;
  float best_d = 3.4e38f;
  for (int c = 0; c < k; ++c) {
    float d = 0;
    for (int f = 0; f < FEATURES; ++f) {
      float x = points(i, f) - centres(c, f);
      d += x * x;
    }
    if (d < best_d) { best_d = d; best = c; }
  }
  label[i] = best;
  for (int f = 0; f < FEATURES; ++f) sums.reduce(best, f, (double)points(i, f));
  counts.reduce(best, 1LL);
}
)";

Row demo_kmeans(int scale, const DemoCut& cut) {
  const long long n = (1LL << 20) * scale;
  const int k = 8, F = 4, iters = 5;
  std::mt19937 g(3);
  std::normal_distribution<float> noise(0, 0.5f);
  std::vector<float> truth(k * F), points(n * F), centres(k * F);
  for (auto& v : truth) v = std::uniform_real_distribution<float>(-20, 20)(g);
  for (long long i = 0; i < n; ++i)
    for (int f = 0; f < F; ++f) points[i * F + f] = truth[(i % k) * F + f] + noise(g);
  for (int c = 0; c < k; ++c)
    for (int f = 0; f < F; ++f) centres[c * F + f] = points[c * F + f];
  // Reference.
  std::vector<float> ref_c = centres;
  std::vector<int> ref_label(n);
  for (int it = 0; it < iters; ++it) {
    std::vector<double> sums(k * F, 0.0);
    std::vector<long long> counts(k, 0);
    for (long long i = 0; i < n; ++i) {
      int best = 0;
      float best_d = 3.4e38f;
      for (int c = 0; c < k; ++c) {
        float d = 0;
        for (int f = 0; f < F; ++f) {
          float x = points[i * F + f] - ref_c[c * F + f];
          d += x * x;
        }
        if (d < best_d) best_d = d, best = c;
      }
      ref_label[i] = best;
      for (int f = 0; f < F; ++f) sums[best * F + f] += points[i * F + f];
      ++counts[best];
    }
    for (int c = 0; c < k; ++c)
      for (int f = 0; f < F; ++f)
        if (counts[c]) ref_c[c * F + f] = static_cast<float>(sums[c * F + f] / counts[c]);
  }
  gs::Config cfg = limits_for(points.size() * 4 + n * 4, gs::Config::from_env().cpu_devices);
  gs::Context ctx(cfg);
  auto kern =
      ctx.compile(gs::KernelDef::from_source(kKmeans, "assign")
                      .define("FEATURES", F)
                      .annotate("global i => read points[i, :], read centres[:, :], "
                                "write label[i], reduce(+) sums[:, :], reduce(+) counts[:]"));
  const bool automatic = cut.kind == DemoCut::automatic;
  long long chunk = rows_for(cut, n, F, F * 4, n / 32);
  auto rows = automatic ? gs::dist::automatic() : gs::dist::rows(chunk);
  auto work = automatic ? gs::work::automatic() : gs::work::tiles({chunk});
  auto pts = ctx.from_vector<float>(points, {n, F}, rows);
  auto cen = ctx.from_vector<float>(centres, {k, F}, gs::dist::replicated());
  auto label = ctx.empty<int>({n}, rows);
  auto sums = ctx.zeros<double>({k, F}, gs::dist::centralized(0));
  auto counts = ctx.zeros<long long>({k}, gs::dist::centralized(0));
  ctx.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> cur = centres;
  for (int it = 0; it < iters; ++it) {
    kern.launch({n}, {256}, work, n, k, pts, cen, label, sums, counts);
    auto s = sums.to_vector();
    auto c = counts.to_vector();
    for (int ci = 0; ci < k; ++ci)
      for (int f = 0; f < F; ++f)
        if (c[ci]) cur[ci * F + f] = static_cast<float>(s[ci * F + f] / c[ci]);
    cen.copy_from(cur);
  }
  std::vector<int> labels = label.to_vector();
  double t = seconds_since(t0);
  long long wrong = 0;
  for (long long i = 0; i < n; ++i) wrong += labels[i] != ref_label[i];
  double err = 0;
  for (int i = 0; i < k * F; ++i) err = std::max(err, (double)std::fabs(cur[i] - ref_c[i]));
  return {"k-means (k=8, 5 it)",
          n,
          t,
          "point/s",
          spilled(ctx),
          wrong == 0 && err < 1e-4,
          fmt::format("{} labels differ, centres max |diff| {:.1e}", wrong, err)};
}

const char* kGemm = R"(
__device__ void gemm(dim3 blockIdx, int n, gridspan::Matrix<float> C, const gridspan::Matrix<float> A,
                     const gridspan::Matrix<float> B) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= n) return;
  float acc = 0;
  for (int k = 0; k < n; ++k) acc += A(i, k) * B(k, j);
  C(i, j) = acc;
}
)";

Row demo_gemm(int scale, const DemoCut& cut) {
  const int n = 512 * scale;
  std::mt19937 g(4);
  std::uniform_int_distribution<int> u(-4, 4);
  std::vector<float> A((size_t)n * n), B((size_t)n * n), ref((size_t)n * n, 0.0f);
  for (auto& v : A) v = (float)u(g);
  for (auto& v : B) v = (float)u(g);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) {
      float a = A[(size_t)i * n + k];
      for (int j = 0; j < n; ++j) ref[(size_t)i * n + j] += a * B[(size_t)k * n + j];
    }
  gs::Config cfg = limits_for(3 * A.size() * 4, gs::Config::from_env().cpu_devices);
  cfg.device_memory = std::max(cfg.device_memory, A.size() * 4 + A.size() * 4 / 4);
  gs::Context ctx(cfg);
  auto k = ctx.compile(gs::KernelDef::from_source(kGemm, "gemm")
                           .annotate("global [i, j] => write C[i, j], read A[i, :], read B[:, j]"));
  const bool automatic = cut.kind == DemoCut::automatic;
  const long long rows = rows_for(cut, n, n, n * 4LL, std::max(16, n / 16));
  auto by_rows = automatic ? gs::dist::automatic() : gs::dist::rows(rows);
  auto a = ctx.from_vector<float>(A, {n, n}, by_rows);
  auto b = ctx.from_vector<float>(B, {n, n}, gs::dist::replicated());
  auto c = ctx.empty<float>({n, n}, by_rows);
  auto work = automatic ? gs::work::automatic() : gs::work::tiles({rows, n});
  ctx.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  k.launch({n, n}, {16, 16}, work, n, c, a, b);
  std::vector<float> out = c.to_vector();
  double t = seconds_since(t0);
  long long wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) wrong += out[i] != ref[i];
  return {"gemm (B replicated)",
          (long long)n * n * n,
          t,
          "FMA/s",
          spilled(ctx),
          wrong == 0,
          fmt::format("{} elements differ", wrong)};
}

struct Problem {
  const char* name;
  Row (*fn)(int, const DemoCut&);
};
constexpr Problem kProblems[] = {{"stencil", demo_stencil},
                                 {"hotspot", demo_hotspot},
                                 {"kmeans", demo_kmeans},
                                 {"gemm", demo_gemm}};

bool known_problem(const std::string& only) {
  bool known = only.empty();
  for (auto& p : kProblems) known = known || only == p.name;
  if (!known)
    std::fprintf(stderr, "no problem named '%s'; choose stencil, hotspot, kmeans or gemm\n",
                 only.c_str());
  return known;
}

}  // namespace

std::string DemoCut::name() const {
  switch (kind) {
    case hand:
      return fmt::format("{}", pieces);
    case dask:
      return "dask";
    case legate:
      return "legate";
    case automatic:
      return "automatic";
    default:
      return "own";
  }
}

int run_demo_sweep(const DemoOptions& o, const std::vector<int>& pieces) {
  if (!known_problem(o.only)) return 2;
  std::vector<DemoCut> cuts{DemoCut{}};
  for (int p : pieces) cuts.push_back(DemoCut{DemoCut::hand, p});
  for (auto kind : {DemoCut::dask, DemoCut::legate, DemoCut::automatic})
    cuts.push_back(DemoCut{kind, 0});
  bool all_ok = true;
  for (auto& p : kProblems) {
    if (!o.only.empty() && o.only != p.name) continue;
    for (const DemoCut& cut : cuts) {
      try {  // a cut too coarse for the memory limits fails; the others go on
        Row r = p.fn(o.scale, cut);
        all_ok = all_ok && r.ok;
        std::printf("sweep %-10s %-10s %10.5f s  %s\n", p.name, cut.name().c_str(), r.seconds,
                    r.ok ? "ok" : "FAILED");
      } catch (const gs::Error& e) {
        std::printf("sweep %-10s %-10s failed: %.160s\n", p.name, cut.name().c_str(), e.what());
      }
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}

int run_demo(const DemoOptions& o) {
  if (!known_problem(o.only)) return 2;
  gs::Config cfg = gs::Config::from_env();
  std::printf(
      "gridspan demo: %d virtual cpu devices; each problem gets a device memory limit "
      "below its data, so chunks spill to host memory and disk\n\n",
      cfg.cpu_devices);
  std::printf("%-22s %12s %10s %14s %14s  %s\n", "problem", "n", "time [s]", "throughput",
              "spilled [B]", "check");
  bool all_ok = true;
  for (auto& p : kProblems) {
    if (!o.only.empty() && o.only != p.name) continue;
    std::fprintf(stderr, "running %s ...\n", p.name);
    Row r = p.fn(o.scale, o.cut);
    all_ok = all_ok && r.ok;
    std::printf("%-22s %12lld %10.3f %10.3g %-6s %14zu  %s (%s)\n", r.problem.c_str(), r.n,
                r.seconds, r.n / r.seconds, r.unit.c_str(), r.spilled, r.ok ? "ok" : "FAILED",
                r.detail.c_str());
    std::fflush(stdout);
  }
  std::printf("\n%s\n",
              all_ok ? "all results match the plain C++ reference" : "SOME RESULTS DIFFER");
  return all_ok ? 0 : 1;
}

}  // namespace gridspan::cli
