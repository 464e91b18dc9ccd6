// The paper's eight benchmarks (Lightning, section 6) as specs: kernels written from the
// algorithms (SHOC MD5 and SpMV, CUDA samples N-Body and Black-Scholes, Rodinia K-Means and
// HotSpot, a radio-astronomy correlator, a tiled GEMM). Step s doubles the data of step s-1;
// steps below 0 halve it (small sizes for the cpu backend).
#include <array>
#include <cmath>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "bench/paper/paper.hpp"

namespace gridspan::bench {
namespace {

// Element i of a stream: splitmix64 of (seed, i), so that tens of GB are generated on every
// core at once and come out the same whatever the thread count.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class T, class F>
std::vector<T> generate(std::size_t n, F f) {
  std::vector<T> v(n);
  const std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t per = (n + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers && w * per < n; ++w)
    threads.emplace_back([&, w] {
      for (std::size_t i = w * per; i < std::min(n, (w + 1) * per); ++i) v[i] = f(i);
    });
  for (auto& t : threads) t.join();
  return v;
}

template <class T>
std::vector<T> uniform(std::size_t n, std::mt19937_64& g, double lo, double hi) {
  const uint64_t seed = g();
  return generate<T>(n, [=](std::size_t i) {
    const double u = double(mix(seed ^ mix(i)) >> 11) * 0x1.0p-53;
    return T(lo + (hi - lo) * u);
  });
}

Generator gpu_real(std::mt19937_64& g, double lo, double hi) {
  return Generator{Generator::Kind::real, g(), lo, hi};
}

Generator gpu_integers(std::mt19937_64& g, int64_t below) {
  return Generator{Generator::Kind::integer, g(), 0, double(below)};
}

// base x 2^s, for any step s.
int64_t doubled(int64_t base, int s) {
  return s >= 0 ? base << s : base >> -s;
}

// Sizes that grow by sqrt(2) per step: base x 2^floor(s/2) (x sqrt(2) on odd steps, as
// `odd` says), for any step s.
int64_t doubled_every_other(int64_t base, int s) {
  return doubled(base, s >= 0 ? s / 2 : -((1 - s) / 2));
}
bool odd(int s) {
  return s % 2 != 0;
}

// Chunks of about 1/pieces of `n` along axis 0, rounded up to `align`.
int64_t share(int64_t n, int pieces, int64_t align) {
  int64_t per = (n + pieces - 1) / pieces;
  return std::max<int64_t>(align, (per + align - 1) / align * align);
}

gs::Dim dim1(int64_t a) {
  return gs::Dim{a};
}

// ---- Black-Scholes (CUDA samples) -------------------------------------------------------
const char* kBlackScholes = R"(
__device__ inline float cnd(float d) {
  const float A1 = 0.31938153f, A2 = -0.356563782f, A3 = 1.781477937f, A4 = -1.821255978f,
              A5 = 1.330274429f, RSQRT2PI = 0.39894228040143267793994605993438f;
  float k = 1.0f / (1.0f + 0.2316419f * fabsf(d));
  float c = RSQRT2PI * __expf(-0.5f * d * d) * (k * (A1 + k * (A2 + k * (A3 + k * (A4 + k * A5)))));
  return d > 0 ? 1.0f - c : c;
}
__device__ void blackscholes(dim3 blockIdx, int64_t n, float r, float v, gridspan::Vector<float> call,
                             gridspan::Vector<float> put, const gridspan::Vector<float> price,
                             const gridspan::Vector<float> strike, const gridspan::Vector<float> years) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = price[i], x = strike[i], t = years[i];
  float sqrt_t = sqrtf(t);
  float d1 = (__logf(s / x) + (r + 0.5f * v * v) * t) / (v * sqrt_t);
  float d2 = d1 - v * sqrt_t;
  float c1 = cnd(d1), c2 = cnd(d2), e = __expf(-r * t);
  call[i] = s * c1 - x * e * c2;
  put[i] = x * e * (1.0f - c2) - s * (1.0f - c1);
}
)";

Spec blackscholes(int s, std::mt19937_64& g) {
  const int64_t n = doubled(int64_t(1) << 26, s);  // 5 arrays of 4 bytes: 1.3 GB at s = 0
  Spec p;
  p.name = "blackscholes";
  p.size_label = fmt::format("n={}", n);
  p.unit = "options/s";
  p.items = double(n) * 10;
  p.kernels = {{"blackscholes",
                kBlackScholes,
                "global i => overwrite call[i], overwrite put[i], read price[i], read strike[i], "
                "read years[i]",
                {}}};
  auto rows = [n](int d) { return gs::dist::rows(share(n, d, 1 << 20)); };
  p.arrays = {{"price", DType::f32, dim1(n), rows, {}, gpu_real(g, 5, 30)},
              {"strike", DType::f32, dim1(n), rows, {}, gpu_real(g, 1, 100)},
              {"years", DType::f32, dim1(n), rows, {}, gpu_real(g, 0.25, 10)},
              {"call", DType::f32, dim1(n), rows, {}},
              {"put", DType::f32, dim1(n), rows, {}}};
  for (int it = 0; it < 10; ++it)
    p.steps.push_back({"blackscholes",
                       dim1(n),
                       dim1(256),
                       [n](int d) { return gs::work::tiles(dim1(share(n, d, 1 << 20))); },
                       {n, 0.02f, 0.30f, std::string("call"), std::string("put"),
                        std::string("price"), std::string("strike"), std::string("years")}});
  p.output = "call";
  return p;
}

// ---- N-Body (CUDA samples; 10 steps) ----------------------------------------------------
const char* kNbody = R"(
__device__ void nbody(dim3 blockIdx, int64_t n, float dt, float eps2, gridspan::Matrix<float> out,
                      gridspan::Matrix<float> vel, const gridspan::Matrix<float> pos) {
  __shared__ float4 tile[256];
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = i < n;
  float px = 0, py = 0, pz = 0, ax = 0, ay = 0, az = 0;
  if (active) px = pos(i, 0), py = pos(i, 1), pz = pos(i, 2);
  for (int64_t base = 0; base < n; base += blockDim.x) {
    int64_t j = base + threadIdx.x;
    tile[threadIdx.x] = j < n ? make_float4(pos(j, 0), pos(j, 1), pos(j, 2), pos(j, 3))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < 256; ++k) {
      float4 q = tile[k];
      float dx = q.x - px, dy = q.y - py, dz = q.z - pz;
      float inv = rsqrtf(dx * dx + dy * dy + dz * dz + eps2);
      float f = q.w * inv * inv * inv;
      ax += dx * f, ay += dy * f, az += dz * f;
    }
    __syncthreads();
  }
  if (!active) return;
  float vx = vel(i, 0) + ax * dt, vy = vel(i, 1) + ay * dt, vz = vel(i, 2) + az * dt;
  vel(i, 0) = vx, vel(i, 1) = vy, vel(i, 2) = vz;
  out(i, 0) = px + vx * dt, out(i, 1) = py + vy * dt, out(i, 2) = pz + vz * dt;
  out(i, 3) = pos(i, 3);
}
)";

Spec nbody(int s, std::mt19937_64& g) {
  const int64_t n = doubled_every_other(65536, s);  // O(n^2) work
  const int64_t bodies = odd(s) ? n + n / 2 : n;
  Spec p;
  p.name = "nbody";
  p.size_label = fmt::format("n={}", bodies);
  p.unit = "interactions/s";
  p.items = double(bodies) * double(bodies) * 10;
  p.no_out_of_core = "every task reads all positions, so none can run with half of the data";
  p.compute_bound = true;
  p.kernels = {
      {"nbody", kNbody, "global i => write out[i, :], readwrite vel[i, :], read pos[:, :]", {}}};
  std::vector<float> pos = uniform<float>(bodies * 4, g, -1, 1), vel(bodies * 4, 0.0f);
  for (int64_t i = 0; i < bodies; ++i) pos[i * 4 + 3] = 1.0f / float(bodies);
  auto rows = [bodies](int d) { return gs::dist::rows(share(bodies, d, 256)); };
  auto all = [](int) { return gs::dist::replicated(); };
  p.arrays = {{"pos", DType::f32, gs::Dim{bodies, 4}, all, bytes_of(pos)},
              {"out", DType::f32, gs::Dim{bodies, 4}, all, bytes_of(pos)},
              {"vel", DType::f32, gs::Dim{bodies, 4}, rows, bytes_of(vel)}};
  for (int it = 0; it < 10; ++it) {
    p.steps.push_back(
        {"nbody",
         dim1(bodies),
         dim1(256),
         [bodies](int d) { return gs::work::tiles(dim1(share(bodies, d, 256))); },
         {bodies, 0.001f, 0.01f, std::string("out"), std::string("vel"), std::string("pos")}});
    p.steps.push_back(swap_step("pos", "out"));
  }
  p.output = "pos";
  return p;
}

// ---- HotSpot (Rodinia; 10 iterations, halo exchange) ------------------------------------
const char* kHotspot = R"(
__device__ void hotspot(dim3 blockIdx, int rows, int cols, float cap, float rx, float ry, float rz,
                        gridspan::Matrix<float> out, const gridspan::Matrix<float> temp,
                        const gridspan::Matrix<float> power) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= rows || j >= cols) return;
  float c = temp(i, j);
  float n = temp(i > 0 ? i - 1 : i, j), s = temp(i < rows - 1 ? i + 1 : i, j);
  float w = temp(i, j > 0 ? j - 1 : j), e = temp(i, j < cols - 1 ? j + 1 : j);
  out(i, j) = c + cap * (power(i, j) + (s + n - 2.0f * c) * ry + (e + w - 2.0f * c) * rx +
                         (80.0f - c) * rz);
}
)";

Spec hotspot(int s, std::mt19937_64& g) {
  const int64_t cols = 16384, rows = doubled(8192, s);  // 3 arrays: 1.6 GB at s = 0
  Spec p;
  p.name = "hotspot";
  p.size_label = fmt::format("{}x{}", rows, cols);
  p.unit = "cells/s";
  p.items = double(rows) * double(cols) * 10;
  p.kernels = {{"hotspot",
                kHotspot,
                "global [j, i] => overwrite out[i, j], read temp[i-1:i+1, j-1:j+1], "
                "read power[i, j]",
                {}}};
  auto slab = [rows, cols](int d) {
    return gs::dist::stencil(gs::Dim{share(rows, d, 16), cols}, gs::Dim{1, 0});
  };
  auto tiles = [rows, cols](int d) { return gs::dist::tiles(gs::Dim{share(rows, d, 16), cols}); };
  p.arrays = {{"a", DType::f32, gs::Dim{rows, cols}, slab, {}, gpu_real(g, 320, 340)},
              {"b", DType::f32, gs::Dim{rows, cols}, slab, {}},
              {"power", DType::f32, gs::Dim{rows, cols}, tiles, {}, gpu_real(g, 0, 0.01)}};
  p.arrays[0].halo = p.arrays[1].halo = gs::Dim{1, 0};
  for (int it = 0; it < 10; ++it) {
    p.steps.push_back({"hotspot",
                       gs::Dim{cols, rows},
                       gs::Dim{32, 8},
                       [rows, cols](int d) {
                         return gs::work::tiles(gs::Dim{cols, share(rows, d, 16)});
                       },
                       {int32_t(rows), int32_t(cols), 0.5f, 0.1f, 0.1f, 0.05f, std::string("b"),
                        std::string("a"), std::string("power")}});
    p.steps.push_back(swap_step("a", "b"));
  }
  p.output = "a";
  return p;
}

// ---- GEMM (rows of A and C per GPU; B exchanged) ----------------------------------------
const char* kGemm = R"(
#define TILE 32
__device__ void gemm(dim3 blockIdx, int n, gridspan::Matrix<float> c, const gridspan::Matrix<float> a,
                     const gridspan::Matrix<float> b) {
  __shared__ float as[TILE][TILE + 1], bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;  // a block of 32 x 8 threads, 4 rows each
  const int col = blockIdx.x * TILE + tx, row0 = blockIdx.y * TILE + ty;
  float acc[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < n; k0 += TILE) {
    for (int r = 0; r < 4; ++r) {
      int row = row0 + 8 * r;
      as[ty + 8 * r][tx] = row < n && k0 + tx < n ? a(row, k0 + tx) : 0.0f;
      bs[ty + 8 * r][tx] = k0 + ty + 8 * r < n && col < n ? b(k0 + ty + 8 * r, col) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) {
      float bv = bs[k][tx];
      for (int r = 0; r < 4; ++r) acc[r] += as[ty + 8 * r][k] * bv;
    }
    __syncthreads();
  }
  for (int r = 0; r < 4; ++r)
    if (row0 + 8 * r < n && col < n) c(row0 + 8 * r, col) = acc[r];
}
)";

Spec gemm(int s, std::mt19937_64& g) {
  // Each step doubles the data: n grows by sqrt(2), rounded to the 32-wide tiles.
  const int64_t n = int64_t(std::llround(double(doubled_every_other(8192, s)) *
                                         (odd(s) ? std::sqrt(2.0) : 1.0) / 32)) *
                    32;
  Spec p;
  p.name = "gemm";
  p.size_label = fmt::format("n={}", n);
  p.unit = "FMA/s";
  p.items = double(n) * double(n) * double(n);
  p.compute_bound = true;
  // The kernel's block is 32 x 8 threads covering a 32 x 32 tile: the launch's threads are
  // n x n/4, and each thread's rows are 8 apart.
  p.kernels = {{"gemm",
                kGemm,
                "global [j, _] block [_, by] => write c[by*32:by*32+31, j], "
                "read a[by*32:by*32+31, :], read b[:, j]",
                {}}};
  auto rows = [n](int d) { return gs::dist::rows(share(n, d, 32)); };
  p.arrays = {{"a", DType::f32, gs::Dim{n, n}, rows, {}, gpu_real(g, -1, 1)},
              {"b", DType::f32, gs::Dim{n, n}, rows, {}, gpu_real(g, -1, 1)},
              {"c", DType::f32, gs::Dim{n, n}, rows, {}}};
  p.steps.push_back({"gemm",
                     gs::Dim{n, n / 4},
                     gs::Dim{32, 8},
                     [n](int d) {
                       return gs::work::tiles(gs::Dim{n, share(n, d, 32) / 4});
                     },
                     {int32_t(n), std::string("c"), std::string("a"), std::string("b")}});
  p.output = "c";
  return p;
}

// ---- SpMV (SHOC, ELL format, 0.1% density, 10 iterations, vector broadcast) ---------------
const char* kSpmv = R"(
__device__ void spmv(dim3 blockIdx, int64_t n, int width, gridspan::Vector<float> y,
                     const gridspan::Matrix<float> vals, const gridspan::Matrix<int> cols,
                     const gridspan::Vector<float> x) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int k = 0; k < width; ++k) sum += vals(k, i) * x[cols(k, i)];
  y[i] = sum;
}
)";

Spec spmv(int s, std::mt19937_64& g) {
  const int64_t n = doubled_every_other(odd(s) ? 181 * 1024 : 128 * 1024, s);
  const int width = int(n / 1000);  // 0.1% of the columns in every row
  Spec p;
  p.name = "spmv";
  p.size_label = fmt::format("n={} nnz/row={}", n, width);
  p.unit = "nonzeros/s";
  p.items = double(n) * width * 10;
  p.kernels = {{"spmv",
                kSpmv,
                "global i => overwrite y[i], read vals[:, i], read cols[:, i], read x[:]",
                {}}};
  auto by_columns = [n, width](int d) {
    return gs::dist::tiles(gs::Dim{width, share(n, d, 1024)});
  };
  auto all = [](int) { return gs::dist::replicated(); };
  p.arrays = {{"vals", DType::f32, gs::Dim{width, n}, by_columns, {}, gpu_real(g, 0, 1.0 / width)},
              {"cols", DType::i32, gs::Dim{width, n}, by_columns, {}, gpu_integers(g, n)},
              {"x", DType::f32, dim1(n), all, {}, gpu_real(g, 0, 1)},
              {"y", DType::f32, dim1(n), all, {}}};
  for (int it = 0; it < 10; ++it) {
    p.steps.push_back({"spmv",
                       dim1(n),
                       dim1(256),
                       [n](int d) { return gs::work::tiles(dim1(share(n, d, 1024))); },
                       {n, int32_t(width), std::string("y"), std::string("vals"),
                        std::string("cols"), std::string("x")}});
    p.steps.push_back(swap_step("x", "y"));
  }
  p.output = "x";
  return p;
}

// ---- K-Means (Rodinia; k = 40, 4 features, 5 iterations, reductions on the GPU) ----------
const char* kKmeans = R"(
#define K 40
#define F 4
__device__ void kmeans_assign(dim3 blockIdx, int64_t n, gridspan::Vector<int> label,
                              gridspan::Matrix<double> sums, gridspan::Vector<unsigned int> counts,
                              const gridspan::Matrix<float> pts, const gridspan::Matrix<float> centres) {
  __shared__ float c[K * F], s[K * F];
  __shared__ unsigned int m[K];
  for (int t = threadIdx.x; t < K * F; t += blockDim.x) c[t] = centres(t / F, t % F), s[t] = 0.0f;
  for (int t = threadIdx.x; t < K; t += blockDim.x) m[t] = 0;
  __syncthreads();
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float p[F];
    for (int f = 0; f < F; ++f) p[f] = pts(i, f);
    int best = 0;
    float best_d = 3.4e38f;
    for (int k = 0; k < K; ++k) {
      float d = 0.0f;
      for (int f = 0; f < F; ++f) d += (p[f] - c[k * F + f]) * (p[f] - c[k * F + f]);
      if (d < best_d) best_d = d, best = k;
    }
    label[i] = best;
    for (int f = 0; f < F; ++f) atomicAdd(&s[best * F + f], p[f]);
    atomicAdd(&m[best], 1u);
  }
  __syncthreads();
  for (int t = threadIdx.x; t < K * F; t += blockDim.x) sums.reduce(t / F, t % F, double(s[t]));
  for (int t = threadIdx.x; t < K; t += blockDim.x) counts.reduce(t, m[t]);
}
__device__ void kmeans_update(dim3 blockIdx, gridspan::Matrix<float> centres,
                              const gridspan::Matrix<double> sums, const gridspan::Vector<unsigned int> counts) {
  int k = threadIdx.x;
  if (k >= K) return;
  for (int f = 0; f < F; ++f)
    if (counts[k] > 0) centres(k, f) = float(sums(k, f) / double(counts[k]));
}
)";

Spec kmeans(int s, std::mt19937_64& g) {
  const int64_t n = doubled(int64_t(1) << 25, s);  // 20 bytes per point: 0.67 GB at s = 0
  Spec p;
  p.name = "kmeans";
  p.size_label = fmt::format("n={}", n);
  p.unit = "points/s";
  p.items = double(n) * 5;
  p.compute_bound = true;
  // Float sums through shared-memory atomics: their order varies run to run, and a point
  // near two centres may switch between them. The sums over all points are doubles: a
  // float total of 2^31 points loses whole block partials to rounding.
  p.tolerance = 1e-3;
  p.kernels = {{"kmeans_assign",
                kKmeans,
                "global i => write label[i], reduce(+) sums[:, :], reduce(+) counts[:], "
                "read pts[i, :], read centres[:, :]",
                {{"sums", {0, GS_ADD}}, {"counts", {0, GS_ADD}}}},
               {"kmeans_update",
                kKmeans,
                "global k => write centres[:, :], read sums[:, :], read counts[:]",
                {}}};
  auto rows = [n](int d) { return gs::dist::rows(share(n, d, 1 << 16)); };
  auto all = [](int) { return gs::dist::replicated(); };
  std::vector<float> centres = uniform<float>(40 * 4, g, 0, 100);
  p.arrays = {{"pts", DType::f32, gs::Dim{n, 4}, rows, {}, gpu_real(g, 0, 100)},
              {"label", DType::i32, dim1(n), rows, {}},
              {"centres", DType::f32, gs::Dim{40, 4}, all, bytes_of(centres)},
              {"sums", DType::f64, gs::Dim{40, 4}, all, {}},
              {"counts", DType::u32, dim1(40), all, {}}};
  for (int it = 0; it < 5; ++it) {
    p.steps.push_back({"kmeans_assign",
                       dim1(n),
                       dim1(256),
                       [n](int d) { return gs::work::tiles(dim1(share(n, d, 1 << 16))); },
                       {n, std::string("label"), std::string("sums"), std::string("counts"),
                        std::string("pts"), std::string("centres")}});
    p.steps.push_back({"kmeans_update",
                       dim1(64),
                       dim1(64),
                       [](int) { return gs::work::tiles(dim1(64)); },
                       {std::string("centres"), std::string("sums"), std::string("counts")}});
  }
  p.output = "centres";
  return p;
}

// ---- MD5 (SHOC md5hash: brute-force search of a key space) -----------------------------
// Key k is the 8 bytes of k (little endian); each thread hashes 16 keys and reports a key
// whose digest is the target through reduce(min).
const char* kMd5 = R"(
__constant__ unsigned int md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
__device__ inline unsigned int rotl(unsigned int x, int c) { return (x << c) | (x >> (32 - c)); }
__device__ void md5_key(unsigned long long key, unsigned int h[4]) {
  const int r[16] = {7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21};
  unsigned int m[16] = {(unsigned int)key, (unsigned int)(key >> 32), 0x80u, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 64u, 0};
  unsigned int a = 0x67452301u, b = 0xefcdab89u, c = 0x98badcfeu, d = 0x10325476u;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    unsigned int f;
    int g;
    if (i < 16) f = (b & c) | (~b & d), g = i;
    else if (i < 32) f = (d & b) | (~d & c), g = (5 * i + 1) % 16;
    else if (i < 48) f = b ^ c ^ d, g = (3 * i + 5) % 16;
    else f = c ^ (b | ~d), g = (7 * i) % 16;
    f += a + md5_k[i] + m[g];
    a = d, d = c, c = b;
    b += rotl(f, r[(i / 16) * 4 + i % 4]);
  }
  h[0] = 0x67452301u + a, h[1] = 0xefcdab89u + b, h[2] = 0x98badcfeu + c, h[3] = 0x10325476u + d;
}
__device__ void md5search(dim3 blockIdx, int64_t n, int t0, int t1, int t2, int t3,
                          gridspan::Scalar<unsigned int> found) {
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 16;
  for (int64_t key = first; key < first + 16 && key < n; ++key) {
    unsigned int h[4];
    md5_key((unsigned long long)key, h);
    if (h[0] == (unsigned int)t0 && h[1] == (unsigned int)t1 && h[2] == (unsigned int)t2 &&
        h[3] == (unsigned int)t3)
      found.reduce((unsigned int)key);
  }
}
)";

// The same digest on the host, to pick the target.
std::array<uint32_t, 4> md5_host(uint64_t key) {
  static const uint32_t k[64] = {
      0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
      0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
      0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
      0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
      0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
      0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
      0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
      0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
      0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
      0xeb86d391};
  static const int r[16] = {7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21};
  const uint32_t m[16] = {
      uint32_t(key), uint32_t(key >> 32), 0x80u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64u, 0};
  uint32_t a = 0x67452301u, b = 0xefcdab89u, c = 0x98badcfeu, d = 0x10325476u;
  for (int i = 0; i < 64; ++i) {
    uint32_t f;
    int g;
    if (i < 16)
      f = (b & c) | (~b & d), g = i;
    else if (i < 32)
      f = (d & b) | (~d & c), g = (5 * i + 1) % 16;
    else if (i < 48)
      f = b ^ c ^ d, g = (3 * i + 5) % 16;
    else
      f = c ^ (b | ~d), g = (7 * i) % 16;
    f += a + k[i] + m[g];
    a = d, d = c, c = b;
    const int sh = r[(i / 16) * 4 + i % 4];
    b += (f << sh) | (f >> (32 - sh));
  }
  return {0x67452301u + a, 0xefcdab89u + b, 0x98badcfeu + c, 0x10325476u + d};
}

Spec md5(int s, std::mt19937_64& g) {
  const int64_t n = doubled(int64_t(1) << 29, s);  // 2^29 keys at s = 0; no data to speak of
  const int64_t target = std::uniform_int_distribution<int64_t>(0, n - 1)(g);
  const auto h = md5_host(uint64_t(target));
  Spec p;
  p.name = "md5";
  p.size_label = fmt::format("keys={}", n);
  p.unit = "keys/s";
  p.items = double(n);
  p.compute_bound = true;
  p.no_out_of_core = "no data: the keys are made in the kernel";
  p.kernels = {{"md5search", kMd5, "global i => reduce(min) found", {{"found", {0xFF, GS_MIN}}}}};
  p.arrays = {{"found", DType::u32, gs::Dim{}, [](int) { return gs::dist::replicated(); }, {}}};
  const int64_t threads = (n + 15) / 16;
  p.steps.push_back(
      {"md5search",
       dim1(threads),
       dim1(256),
       [threads](int d) { return gs::work::tiles(dim1(share(threads, d, 256))); },
       {n, int32_t(h[0]), int32_t(h[1]), int32_t(h[2]), int32_t(h[3]), std::string("found")}});
  p.output = "found";
  p.expected = bytes_of(std::vector<uint32_t>{uint32_t(target)});
  return p;
}

// ---- Correlator (radio astronomy: 256 antennas, a 3-D grid of channel x antenna pairs) ----
// samples[c][t][2a + {0, 1}] are complex voltages; vis[c][i][2j + {0, 1}] = sum over t of
// x_i(t) * conj(x_j(t)) for j >= i (zero below the diagonal).
const char* kCorrelator = R"(
__device__ void correlate(dim3 blockIdx, int antennas, int times, gridspan::Tensor<float> vis,
                          const gridspan::Tensor<float> samples) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.z;
  if (i >= antennas || j >= antennas) return;
  float re = 0.0f, im = 0.0f;
  if (j >= i) {
    for (int t = 0; t < times; ++t) {
      float xr = samples(c, t, 2 * i), xi = samples(c, t, 2 * i + 1);
      float yr = samples(c, t, 2 * j), yi = samples(c, t, 2 * j + 1);
      re += xr * yr + xi * yi;
      im += xi * yr - xr * yi;
    }
  }
  vis(c, i, 2 * j) = re;
  vis(c, i, 2 * j + 1) = im;
}
)";

Spec correlator(int s, std::mt19937_64& g) {
  const int64_t antennas = 256, times = 1024, channels = doubled(64, s);  // 0.6 GB at s = 0
  Spec p;
  p.name = "correlator";
  p.size_label = fmt::format("channels={}", channels);
  p.unit = "complex MAC/s";
  p.items = double(channels) * double(antennas * (antennas + 1) / 2) * double(times);
  p.compute_bound = true;
  p.kernels = {{"correlate",
                kCorrelator,
                "global [j, i, c] => overwrite vis[c, i, 2*j:2*j+1], read samples[c, :, :]",
                {}}};
  auto by_channel = [channels](int d) {
    return gs::dist::tiles(gs::Dim{share(channels, d, 1), times, 2 * antennas});
  };
  auto vis_by_channel = [channels](int d) {
    return gs::dist::tiles(gs::Dim{share(channels, d, 1), antennas, 2 * antennas});
  };
  p.arrays = {{"samples",
               DType::f32,
               gs::Dim{channels, times, 2 * antennas},
               by_channel,
               {},
               gpu_real(g, -1, 1)},
              {"vis", DType::f32, gs::Dim{channels, antennas, 2 * antennas}, vis_by_channel, {}}};
  p.steps.push_back(
      {"correlate",
       gs::Dim{antennas, antennas, channels},
       gs::Dim{16, 16, 1},
       [channels](int d) {
         return gs::work::tiles(gs::Dim{256, 256, share(channels, d, 1)});
       },
       {int32_t(antennas), int32_t(times), std::string("vis"), std::string("samples")}});
  p.output = "vis";
  return p;
}

// ---- Co-clustering (CGC: Bregman block-average co-clustering, Euclidean) ----------------
// Rows and columns of z get k and l cluster labels. Each iteration: (1) the co-cluster sums
// and counts (a reduction over every element), (2) every row's cost for each row cluster
// (a reduction over the columns) and its new label, (3) every column's cost for each column
// cluster (a reduction over the rows) and its new label.
const char* kCocluster = R"(
#define KR 8
#define LC 8
__device__ void cc_sums(dim3 blockIdx, int m, int n, gridspan::Matrix<double> s, gridspan::Matrix<double> cnt,
                        const gridspan::Matrix<float> z, const gridspan::Vector<int> rl,
                        const gridspan::Vector<int> cl) {
  __shared__ float ps[KR * LC], pc[KR * LC];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < KR * LC) ps[t] = 0.0f, pc[t] = 0.0f;
  __syncthreads();
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < m && j < n) {
    atomicAdd(&ps[rl[i] * LC + cl[j]], z(i, j));
    atomicAdd(&pc[rl[i] * LC + cl[j]], 1.0f);
  }
  __syncthreads();
  if (t < KR * LC) s.reduce(t / LC, t % LC, double(ps[t])), cnt.reduce(t / LC, t % LC, double(pc[t]));
}
__device__ inline float cc_mean(const gridspan::Matrix<double>& s, const gridspan::Matrix<double>& cnt,
                                int r, int c) {
  double k = cnt(r, c);
  return k > 0.0 ? float(s(r, c) / k) : 0.0f;
}
__device__ void cc_rowcost(dim3 blockIdx, int m, int n, gridspan::Matrix<float> cost,
                           const gridspan::Matrix<float> z, const gridspan::Vector<int> cl,
                           const gridspan::Matrix<double> s, const gridspan::Matrix<double> cnt) {
  __shared__ float mean[KR * LC];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < KR * LC) mean[t] = cc_mean(s, cnt, t / LC, t % LC);
  __syncthreads();
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  const bool in = i < m && j < n;
  const float v = in ? z(i, j) : 0.0f;
  const int c = in ? cl[j] : 0;
  for (int r = 0; r < KR; ++r) {  // a warp is 32 columns of one row
    float d = in ? (v - mean[r * LC + c]) * (v - mean[r * LC + c]) : 0.0f;
    for (int o = 16; o > 0; o /= 2) d += __shfl_down_sync(0xffffffffu, d, o);
    if (threadIdx.x == 0 && i < m) cost.reduce(i, r, d);
  }
}
__device__ void cc_colcost(dim3 blockIdx, int m, int n, gridspan::Matrix<float> cost,
                           const gridspan::Matrix<float> z, const gridspan::Vector<int> rl,
                           const gridspan::Matrix<double> s, const gridspan::Matrix<double> cnt) {
  __shared__ float mean[KR * LC];
  __shared__ float part[8][32];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  if (t < KR * LC) mean[t] = cc_mean(s, cnt, t / LC, t % LC);
  __syncthreads();
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  const bool in = i < m && j < n;
  const float v = in ? z(i, j) : 0.0f;
  const int r = in ? rl[i] : 0;
  for (int c = 0; c < LC; ++c) {  // a block is 8 rows of 32 columns
    part[threadIdx.y][threadIdx.x] = in ? (v - mean[r * LC + c]) * (v - mean[r * LC + c]) : 0.0f;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
      float sum = 0.0f;
      for (int y = 0; y < 8; ++y) sum += part[y][threadIdx.x];
      cost.reduce(j, c, sum);
    }
    __syncthreads();
  }
}
__device__ void cc_assign(dim3 blockIdx, int count, int clusters, gridspan::Vector<int> label,
                          const gridspan::Matrix<float> cost) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  int best = 0;
  for (int r = 1; r < clusters; ++r)
    if (cost(i, r) < cost(i, best)) best = r;
  label[i] = best;
}
)";

Spec cocluster(int s, std::mt19937_64& g) {
  const int64_t n = 4096, m = doubled(16384, s);  // 256 MB at s = 0
  Spec p;
  p.name = "cocluster";
  p.size_label = fmt::format("{}x{}", m, n);
  p.unit = "elements/s";
  p.items = double(m) * double(n) * 5;
  p.tolerance = 1e-3;  // float sums combined in a varying order
  const std::map<std::string, KernelSpec::Reduce> none;
  p.kernels = {{"cc_sums",
                kCocluster,
                "global [j, i] => reduce(+) s[:, :], reduce(+) cnt[:, :], read z[i, j], read "
                "rl[i], read cl[j]",
                {{"s", {0, GS_ADD}}, {"cnt", {0, GS_ADD}}}},
               {"cc_rowcost",
                kCocluster,
                "global [j, i] => reduce(+) cost[i, :], read z[i, j], read cl[j], read s[:, :], "
                "read cnt[:, :]",
                {{"cost", {0, GS_ADD}}}},
               {"cc_colcost",
                kCocluster,
                "global [j, i] => reduce(+) cost[j, :], read z[i, j], read rl[i], read s[:, :], "
                "read cnt[:, :]",
                {{"cost", {0, GS_ADD}}}},
               {"cc_assign", kCocluster, "global i => write label[i], read cost[i, :]", none}};
  std::vector<float> z = uniform<float>(std::size_t(m * n), g, 0, 1);
  // A planted block structure, so the clustering has something to find.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) z[std::size_t(i * n + j)] += float((i % 8) * (j % 8)) / 16.0f;
  std::vector<int32_t> rl(m), cl(n);
  std::uniform_int_distribution<int> pick(0, 7);
  for (auto& x : rl) x = pick(g);
  for (auto& x : cl) x = pick(g);
  auto rows = [m, n](int d) { return gs::dist::rows(share(m, d, 64)); };
  auto vrows = [m](int d) { return gs::dist::rows(share(m, d, 64)); };
  auto all = [](int) { return gs::dist::replicated(); };
  p.arrays = {{"z", DType::f32, gs::Dim{m, n}, rows, bytes_of(z)},
              {"rl", DType::i32, dim1(m), vrows, bytes_of(rl)},
              {"cl", DType::i32, dim1(n), all, bytes_of(cl)},
              {"s", DType::f64, gs::Dim{8, 8}, all, {}},  // doubles: a float count stops at 2^24
              {"cnt", DType::f64, gs::Dim{8, 8}, all, {}},
              {"rcost", DType::f32, gs::Dim{m, 8}, vrows, {}},
              {"ccost", DType::f32, gs::Dim{n, 8}, all, {}}};
  auto slabs = [m, n](int d) { return gs::work::tiles(gs::Dim{n, share(m, d, 64)}); };
  for (int it = 0; it < 5; ++it) {
    p.steps.push_back({"cc_sums",
                       gs::Dim{n, m},
                       gs::Dim{32, 8},
                       slabs,
                       {int32_t(m), int32_t(n), std::string("s"), std::string("cnt"),
                        std::string("z"), std::string("rl"), std::string("cl")}});
    p.steps.push_back({"cc_rowcost",
                       gs::Dim{n, m},
                       gs::Dim{32, 8},
                       slabs,
                       {int32_t(m), int32_t(n), std::string("rcost"), std::string("z"),
                        std::string("cl"), std::string("s"), std::string("cnt")}});
    p.steps.push_back({"cc_assign",
                       dim1(m),
                       dim1(256),
                       [m](int d) { return gs::work::tiles(dim1(share(m, d, 64))); },
                       {int32_t(m), int32_t(8), std::string("rl"), std::string("rcost")}});
    p.steps.push_back({"cc_colcost",
                       gs::Dim{n, m},
                       gs::Dim{32, 8},
                       slabs,
                       {int32_t(m), int32_t(n), std::string("ccost"), std::string("z"),
                        std::string("rl"), std::string("s"), std::string("cnt")}});
    p.steps.push_back({"cc_assign",
                       dim1(n),
                       dim1(256),
                       [n](int) { return gs::work::tiles(dim1(n)); },
                       {int32_t(n), int32_t(8), std::string("cl"), std::string("ccost")}});
  }
  p.output = "s";
  return p;
}

}  // namespace

const char* generator_source() {
  return R"(
__device__ inline unsigned long long gen_mix(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ inline double gen_unit(uint64_t seed, int64_t i) {
  return double(gen_mix(seed ^ gen_mix((unsigned long long)i)) >> 11) * (1.0 / 9007199254740992.0);
}
__device__ void gen_real1(dim3 blockIdx, int64_t n0, uint64_t seed, double lo, double hi,
                          gridspan::Vector<float> out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n0) out[i] = float(lo + (hi - lo) * gen_unit(seed, i));
}
// Rows past a grid of at most 65535 blocks along y and z (the plain program's) are reached by
// striding; under gridspan gridDim covers every row, so each thread writes one element.
__device__ void gen_real2(dim3 blockIdx, int64_t n0, int64_t n1, uint64_t seed, double lo, double hi,
                          gridspan::Matrix<float> out) {
  int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; i < n0 && j < n1;
       i += int64_t(gridDim.y) * blockDim.y)
    out(i, j) = float(lo + (hi - lo) * gen_unit(seed, i * n1 + j));
}
__device__ void gen_real3(dim3 blockIdx, int64_t n0, int64_t n1, int64_t n2, uint64_t seed, double lo,
                          double hi, gridspan::Tensor<float> out) {
  int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = int64_t(blockIdx.z) * blockDim.z + threadIdx.z; i < n0; i += int64_t(gridDim.z) * blockDim.z)
    for (int64_t j = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; j < n1 && k < n2;
         j += int64_t(gridDim.y) * blockDim.y)
      out(i, j, k) = float(lo + (hi - lo) * gen_unit(seed, (i * n1 + j) * n2 + k));
}
__device__ void gen_int1(dim3 blockIdx, int64_t n0, uint64_t seed, double lo, double hi,
                         gridspan::Vector<int> out) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n0) out[i] = int(gen_unit(seed, i) * hi);
}
__device__ void gen_int2(dim3 blockIdx, int64_t n0, int64_t n1, uint64_t seed, double lo, double hi,
                         gridspan::Matrix<int> out) {
  int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; i < n0 && j < n1;
       i += int64_t(gridDim.y) * blockDim.y)
    out(i, j) = int(gen_unit(seed, i * n1 + j) * hi);
}
)";
}

std::string generator_function(const ArraySpec& a) {
  const bool real = a.gen.kind == Generator::Kind::real;
  if ((real && a.dtype != DType::f32) || (!real && a.dtype != DType::i32) || a.shape.rank() < 1 ||
      a.shape.rank() > (real ? 3 : 2))
    throw Error(fmt::format("bench: no generator for array {} ({} of rank {})", a.name,
                            dtype_name(a.dtype), a.shape.rank()));
  return fmt::format("gen_{}{}", real ? "real" : "int", a.shape.rank());
}

std::string generator_annotation(int rank) {
  switch (rank) {
    case 1:
      return "global i => write out[i]";
    case 2:
      return "global [j, i] => write out[i, j]";
    default:
      return "global [k, j, i] => write out[i, j, k]";
  }
}

// Threads along the last axis (coalesced); superblocks are slabs along the first.
GeneratorLaunch generator_launch(const ArraySpec& a, int pieces) {
  GeneratorLaunch l;
  const int r = a.shape.rank();
  const int64_t last = a.shape[r - 1];
  const int64_t bx = r == 1 ? 256 : std::min<int64_t>(256, std::max<int64_t>(32, last));
  const int64_t by = r == 2 ? 256 / bx : 1;
  const int64_t first = a.shape[0];
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  if (r == 1) {
    l.threads = gs::Dim{first};
    l.block = gs::Dim{bx};
    l.superblock = gs::Dim{round_up(share(first, pieces, 1), bx)};
  } else if (r == 2) {
    l.threads = gs::Dim{last, first};
    l.block = gs::Dim{bx, by};
    l.superblock = gs::Dim{round_up(last, bx), round_up(share(first, pieces, 1), by)};
  } else {
    l.threads = gs::Dim{last, a.shape[1], first};
    l.block = gs::Dim{bx, 1, 1};
    l.superblock = gs::Dim{round_up(last, bx), a.shape[1], share(first, pieces, 1)};
  }
  for (int ax = 0; ax < r; ++ax) l.scalars.push_back(int64_t(a.shape[ax]));
  l.scalars.push_back(a.gen.seed);
  l.scalars.push_back(a.gen.lo);
  l.scalars.push_back(a.gen.hi);
  return l;
}

std::vector<unsigned char> generated_on_host(const ArraySpec& a) {
  const std::size_t n = std::size_t(a.shape.volume());
  const Generator g = a.gen;
  auto unit = [g](std::size_t i) { return double(mix(g.seed ^ mix(i)) >> 11) * 0x1.0p-53; };
  if (g.kind == Generator::Kind::real)
    return bytes_of(
        generate<float>(n, [&](std::size_t i) { return float(g.lo + (g.hi - g.lo) * unit(i)); }));
  return bytes_of(generate<int32_t>(n, [&](std::size_t i) { return int32_t(unit(i) * g.hi); }));
}

std::vector<std::string> benchmark_names() {
  return {"md5",  "nbody", "correlator",   "kmeans",   "hotspot",
          "gemm", "spmv",  "blackscholes", "cocluster"};
}

Spec make_spec(const std::string& name, int s, uint64_t seed) {
  std::mt19937_64 g(seed);
  if (name == "blackscholes") return blackscholes(s, g);
  if (name == "nbody") return nbody(s, g);
  if (name == "hotspot") return hotspot(s, g);
  if (name == "gemm") return gemm(s, g);
  if (name == "spmv") return spmv(s, g);
  if (name == "kmeans") return kmeans(s, g);
  if (name == "md5") return md5(s, g);
  if (name == "correlator") return correlator(s, g);
  if (name == "cocluster") return cocluster(s, g);
  throw Error(fmt::format("no benchmark named '{}'; there are: {}", name,
                          fmt::join(benchmark_names(), ", ")));
}

}  // namespace gridspan::bench
