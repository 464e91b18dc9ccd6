// End-to-end launches: every access mode and distribution, against plain C++ references.
#include <cmath>
#include <numeric>

#include "e2e/support.hpp"
#include "support/errors.hpp"

namespace gridspan::test {
namespace {

std::vector<float> dyadic(std::vector<float> v) {
  for (auto& x : v) x = std::round(x * 64.0f) / 64.0f;
  return v;
}

const char* kMap = R"(
__device__ void axpb(dim3 blockIdx, int n, float a, gridspan::Vector<float> out,
                     const gridspan::Vector<float> x, const gridspan::Vector<float> y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
)";

struct DistCase {
  const char* name;
  std::function<gs::DataDistribution(int64_t n)> make;
};

TEST(Launch, MapOverEveryDataDistribution) {
  auto g = rng(11);
  std::vector<DistCase> cases = {
      {"rows", [](int64_t n) { return gs::dist::rows(n / 5 + 1); }},
      {"tiles", [](int64_t n) { return gs::dist::tiles({n / 3 + 1}); }},
      {"stencil", [](int64_t n) { return gs::dist::stencil({n / 4 + 1}, {3}); }},
      {"replicated", [](int64_t) { return gs::dist::replicated(); }},
      {"centralized", [](int64_t) { return gs::dist::centralized(1); }},
      {"custom overlapping",
       [](int64_t n) {
         return gs::dist::custom("halves", [](const gs::Dim& s, int devices) {
           int64_t m = s[0];
           return std::vector<gs::ChunkSpec>{
               {gs::Rect(1, {0, 0, 0}, {m / 2 + 7, 1, 1}), {}, 0},
               {gs::Rect(1, {m / 2 - 5, 0, 0}, {m, 1, 1}), {}, devices - 1}};
         });
       }},
  };
  gs::Context ctx(config(3));
  auto k = ctx.compile(gs::KernelDef::from_source(kMap, "axpb")
                           .annotate("global i => write out[i], read x[i], read y[i]"));
  const int n = 1000;
  // Multiples of 1/64: a * x is exact, so a GPU's fused multiply-add gives the same sums.
  auto xs = dyadic(random_vector<float>(n, g)), ys = random_vector<float>(n, g);
  for (auto& out_case : cases)
    for (auto& in_case : cases) {
      SCOPED_TRACE(std::string(out_case.name) + " <- " + in_case.name);
      auto x = ctx.from_vector<float>(xs, {n}, in_case.make(n));
      auto y = ctx.from_vector<float>(ys, {n}, out_case.make(n));
      auto out = ctx.full<float>({n}, poison<float>(), out_case.make(n));
      k.launch({n}, {32}, gs::work::tiles({96}), n, 2.5f, out, x, y);
      auto r = out.to_vector();
      for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], 2.5f * xs[i] + ys[i]) << "i=" << i;
    }
}

TEST(Launch, WorkLikeAndCustomSuperblocks) {
  auto g = rng(12);
  gs::Context ctx(config(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kMap, "axpb")
                           .annotate("global i => write out[i], read x[i], read y[i]"));
  const int n = 777;
  // Multiples of 1/64: a * x is exact, so a GPU's fused multiply-add gives the same sums.
  auto xs = dyadic(random_vector<float>(n, g)), ys = random_vector<float>(n, g);
  auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(128));
  auto y = ctx.from_vector<float>(ys, {n}, gs::dist::rows(64));
  auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(128));
  k.launch({n}, {64}, gs::work::like(out), n, -1.0f, out, x, y);
  auto r = out.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], -xs[i] + ys[i]);
  // Uneven custom superblocks: one block, then the rest.
  auto custom = gs::work::custom("uneven", [](const gs::Dim&, const gs::Dim&, int) {
    return std::vector<gs::Superblock>{{gs::Rect(1, {0, 0, 0}, {1, 1, 1}), 1},
                                       {gs::Rect(1, {1, 0, 0}, {13, 1, 1}), 0}};
  });
  k.launch({n}, {64}, custom, n, 3.0f, out, x, y);
  r = out.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], 3.0f * xs[i] + ys[i]);
}

const char* kStencil = R"(
__device__ void smooth(dim3 blockIdx, int n, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i == 0 || i == n - 1) out[i] = in[i];
  else out[i] = (in[i - 1] + 2 * in[i] + in[i + 1]) % 10007;
}
)";

TEST(Launch, StencilIterationsKeepHalosCoherent) {
  auto g = rng(13);
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(config(devices));
    auto k = ctx.compile(gs::KernelDef::from_source(kStencil, "smooth")
                             .annotate("global i => write out[i], read in[i-1:i+1]"));
    const int n = 1001;
    auto v = random_vector<int>(n, g);
    auto a = ctx.from_vector<int>(v, {n}, gs::dist::stencil({100}, {1}));
    auto b = ctx.full<int>({n}, poison<int>(), gs::dist::stencil({100}, {1}));
    std::vector<int> ref = v, tmp(n);
    for (int it = 0; it < 10; ++it) {
      // Superblocks that do not line up with the chunks.
      k.launch({n}, {16}, gs::work::tiles({it % 2 ? 64 : 112}), n, b, a);
      std::swap(a, b);
      for (int i = 0; i < n; ++i)
        tmp[i] = (i == 0 || i == n - 1) ? ref[i] : (ref[i - 1] + 2 * ref[i] + ref[i + 1]) % 10007;
      std::swap(ref, tmp);
    }
    EXPECT_EQ(a.to_vector(), ref) << devices << " devices";
  }
}

const char* kTranspose = R"(
__device__ void transpose(dim3 blockIdx, int rows, int cols, gridspan::Matrix<double> out,
                          const gridspan::Matrix<double> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < rows && j < cols) out[i][j] = in(j, i) + 0.5;
}
)";

TEST(Launch, TransposeAssemblesRegionsSpanningChunks) {
  auto g = rng(14);
  gs::Context ctx(config(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kTranspose, "transpose")
                           .annotate("global [i, j] => write out[i, j], read in[j, i]"));
  const int rows = 37, cols = 53;
  auto v = random_vector<double>(size_t(rows) * cols, g);
  auto in = ctx.from_vector<double>(v, {cols, rows}, gs::dist::columns(7));
  auto out = ctx.full<double>({rows, cols}, poison<double>(), gs::dist::tiles({10, 20}));
  k.launch({rows, cols}, {4, 8}, gs::work::tiles({16, 24}), rows, cols, out, in);
  auto r = out.to_vector();
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) ASSERT_EQ(r[i * cols + j], v[j * rows + i] + 0.5);
}

const char* kTensor = R"(
__device__ void scale3(dim3 blockIdx, gridspan::Tensor<long long> t) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;
  if (i < NI && j < NJ && k < NK) t(i, j, k) = t(i, j, k) * 3 + i * 100 + j * 10 + k;
}
)";

TEST(Launch, ReadwriteTensor) {
  auto g = rng(15);
  gs::Context ctx(config(2));
  const int ni = 6, nj = 7, nk = 9;
  auto k = ctx.compile(gs::KernelDef::from_source(kTensor, "scale3")
                           .define("NI", ni)
                           .define("NJ", nj)
                           .define("NK", nk)
                           .annotate("global [i, j, k] => readwrite t[i, j, k]"));
  auto v = random_vector<long long>(ni * nj * nk, g);
  auto t = ctx.from_vector<long long>(v, {ni, nj, nk}, gs::dist::tiles({4, 4, 4}));
  k.launch({ni, nj, nk}, {2, 2, 3}, gs::work::tiles({2, 4, 6}), t);
  auto r = t.to_vector();
  for (int i = 0; i < ni; ++i)
    for (int j = 0; j < nj; ++j)
      for (int kk = 0; kk < nk; ++kk) {
        int at = (i * nj + j) * nk + kk;
        ASSERT_EQ(r[at], v[at] * 3 + i * 100 + j * 10 + kk);
      }
}

const char* kReduce = R"(
__device__ void stats(dim3 blockIdx, int rows, int cols, const gridspan::Matrix<int> m,
                      gridspan::Vector<long long> rowsum, gridspan::Scalar<int> biggest,
                      gridspan::Vector<int> hist) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= rows || j >= cols) return;
  int v = m(i, j);
  rowsum.reduce(i, (long long)v);
  biggest.reduce(v);
  atomicAdd(&hist[v % 8], 1);
}
)";

TEST(Launch, ReductionsAndAtomicsAreExactForIntegers) {
  auto g = rng(16);
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(config(devices));
    auto k = ctx.compile(gs::KernelDef::from_source(kReduce, "stats")
                             .annotate("global [i, j] => read m[i, j], reduce(+) rowsum[i], "
                                       "reduce(max) biggest, atomic(+) hist[:]"));
    const int rows = 45, cols = 31;
    auto v = random_vector<int>(rows * cols, g);
    auto m = ctx.from_vector<int>(v, {rows, cols}, gs::dist::tiles({16, 16}));
    auto rowsum = ctx.full<long long>({rows}, -7, gs::dist::rows(10));
    auto biggest = ctx.scalar<int>(-1);
    auto hist = ctx.full<int>({8}, 999, gs::dist::replicated());
    for (int rep = 0; rep < 2; ++rep) {  // reductions overwrite: the same result twice
      k.launch({rows, cols}, {4, 4}, gs::work::tiles({8, 12}), rows, cols, m, rowsum, biggest,
               hist);
      std::vector<long long> rs(rows, 0);
      std::vector<int> h(8, 0);
      int mx = 0;
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          int x = v[i * cols + j];
          rs[i] += x;
          mx = std::max(mx, x);
          ++h[x % 8];
        }
      EXPECT_EQ(rowsum.to_vector(), rs);
      EXPECT_EQ(biggest.item(), mx);
      EXPECT_EQ(hist.to_vector(), h);
    }
  }
}

const char* kSync = R"(
__device__ void block_sum(dim3 blockIdx, int n, const gridspan::Vector<int> in, gridspan::Vector<int> out) {
  __shared__ int buf[64];
  int t = threadIdx.x;
  int i = blockIdx.x * 64 + t;
  buf[t] = i < n ? in[i] : 0;
  __syncthreads();
  for (int s = 32; s > 0; s /= 2) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}
)";

TEST(Launch, SyncthreadsAndSharedMemory) {
  auto g = rng(17);
  gs::Context ctx(config(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kSync, "block_sum")
                           .annotate("block b local t => read in[64*b + t], write out[b]"));
  const int n = 64 * 20 - 5, blocks = 20;
  auto v = random_vector<int>(n, g);
  auto in = ctx.from_vector<int>(v, {n}, gs::dist::rows(100));
  auto out = ctx.full<int>({blocks}, poison<int>(), gs::dist::rows(7));
  k.launch({n}, {64}, gs::work::tiles({192}), n, in, out);
  auto r = out.to_vector();
  for (int b = 0; b < blocks; ++b) {
    int s = 0;
    for (int i = b * 64; i < std::min(n, b * 64 + 64); ++i) s += v[i];
    ASSERT_EQ(r[b], s) << "block " << b;
  }
}

TEST(Launch, ConsecutiveLaunchesRunAsynchronouslyAndInOrder) {
  auto g = rng(18);
  gs::Context ctx(config(2));
  auto k = ctx.compile(gs::KernelDef::from_source(kMap, "axpb")
                           .annotate("global i => write out[i], read x[i], read y[i]"));
  const int n = 4096;
  auto xs = random_vector<float>(n, g);
  auto a = ctx.from_vector<float>(xs, {n}, gs::dist::rows(512));
  auto b = ctx.zeros<float>({n}, gs::dist::rows(1024));
  gs::Event last;
  for (int it = 0; it < 20; ++it)
    last = k.launch({n}, {128}, gs::work::tiles({512}), n, 1.0f, b, a, b);
  last.wait();
  EXPECT_TRUE(last.ready());
  auto r = b.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(r[i], 20.0f * xs[i]);
}

// Under mpirun the other ranks find native functions by name: registered in every process.
constexpr int kRows = 40, kCols = 12;
gs::NativeDef scale_rows() {
  auto def = gs::NativeDef::from_function(
      "scale_rows",
      [](const gs::NativeContext& nc, gs::Matrix<float> out, gs::Matrix<float> in, float s) {
        gs::Rect r = nc.threads({kRows, kCols});
        for (int64_t i = r.lo[0]; i < r.hi[0]; ++i)
          for (int64_t j = r.lo[1]; j < r.hi[1]; ++j) out(i, j) = in(i, j) * s + float(nc.device);
      },
      {"out", "in", "s"});
  def.annotate("global [i, j] => write out[i, j], read in[i, j]");
  return def;
}
const bool scale_rows_registered = gs::register_native(scale_rows());

TEST(Launch, NativeFunctionRunsPerSuperblock) {
  auto g = rng(19);
  gs::Context ctx(config(2));
  // This function works on host memory itself; on a GPU it would get device pointers.
  if (ctx.backend_name() != "cpu") GTEST_SKIP() << "a host-code native function";
  ASSERT_TRUE(scale_rows_registered);
  const int rows = kRows, cols = kCols;
  auto def = scale_rows();
  auto k = ctx.compile(def);
  auto v = random_vector<float>(rows * cols, g);
  auto in = ctx.from_vector<float>(v, {rows, cols}, gs::dist::rows(10));
  auto out = ctx.full<float>({rows, cols}, poison<float>(), gs::dist::rows(10));
  k.launch({rows, cols}, {1, 1}, gs::work::tiles({10, cols}), out, in, 2.0f);
  auto r = out.to_vector();
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      ASSERT_EQ(r[i * cols + j], v[i * cols + j] * 2.0f + float((i / 10) % 2));
}

}  // namespace
}  // namespace gridspan::test

namespace gridspan::test {
namespace {

// Superblocks with more blocks along y or z than a CUDA grid may have (65535): on a GPU
// each goes as several launches, the second superblock's pieces starting past the grid's
// origin; every element is written once, with its global index.
TEST(Launch, SuperblockLargerThanAHardwareGrid) {
  gs::Context ctx(config(1));
  const char* src = R"(
__device__ void index2d(dim3 blockIdx, int rows, int cols, gridspan::Matrix<int> out) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < rows && j < cols) out(i, j) = i * 4 + j + gridDim.y - gridDim.y;
}
__device__ void index3d(dim3 blockIdx, int planes, int rows, gridspan::Tensor<int> out) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, p = blockIdx.z;
  if (p < planes && i < rows && j < 2) out(p, i, j) = (p * 3 + i) * 2 + j;
}
)";
  auto k = ctx.compile(
      gs::KernelDef::from_source(src, "index2d").annotate("global [j, i] => write out[i, j]"));
  const int rows = 70001, cols = 3;
  auto out = ctx.full<int>({rows, cols}, poison<int>(), gs::dist::rows(rows));
  k.launch({cols, rows}, {4, 1}, gs::work::tiles({4, 66000}), rows, cols, out);
  auto r = out.to_vector();
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      ASSERT_EQ(r[std::size_t(i) * cols + j], i * 4 + j) << i << "," << j;
  auto k3 = ctx.compile(gs::KernelDef::from_source(src, "index3d")
                            .annotate("global [j, i, p] => write out[p, i, j]"));
  const int planes = 66000;
  auto out3 = ctx.full<int>({planes, 3, 2}, poison<int>(), gs::dist::rows(planes));
  k3.launch({2, 3, planes}, {2, 1, 1}, gs::work::tiles({2, 3, 65600}), planes, 3, out3);
  auto r3 = out3.to_vector();
  for (int p = 0; p < planes; ++p)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j)
        ASSERT_EQ(r3[(std::size_t(p) * 3 + i) * 2 + j], (p * 3 + i) * 2 + j) << p << "," << i;
}

// launch_bounds: the kernel's blocks are bounded on every backend (on a GPU its entries
// carry CUDA's __launch_bounds__), and bad bounds are errors that say which.
TEST(Launch, LaunchBoundsLimitTheBlock) {
  gs::Context ctx(config(2));
  const char* src = R"(
__device__ void twice(dim3 blockIdx, int n, gridspan::Vector<int> out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out(i) = 2 * i;
}
)";
  auto def = [&] {
    return gs::KernelDef::from_source(src, "twice").annotate("global [i] => write out[i]");
  };
  expect_error([&] { def().launch_bounds(0); }, "launch_bounds(0, 0) needs 1 to 1024 threads");
  expect_error([&] { def().launch_bounds(2048, 1); }, "launch_bounds(2048, 1)");
  expect_error([&] { def().launch_bounds(128, -1); }, "a block count of at least 0");
  auto k = ctx.compile(def().launch_bounds(128, 4));
  const int n = 1000;
  auto out = ctx.full<int>({n}, poison<int>(), gs::dist::rows(256));
  k.launch({n}, {128}, gs::work::tiles({256}), n, out);
  auto r = out.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], 2 * i) << i;
  expect_error([&] { k.launch({n}, {256}, gs::work::tiles({256}), n, out); },
               "has 256 threads; at most 128 (its launch_bounds)");
}

// Twenty superblocks of a 2-D launch on each device: on a GPU they go as parts of a few
// kernel launches (at most eight each), every block still seeing its own blockIdx, the
// whole launch's gridDim and its own shared memory.
TEST(Launch, ManySuperblocksOnADeviceKeepTheirBlocks) {
  auto g = rng(19);
  const char* src = R"(
__device__ void stamp(dim3 blockIdx, int rows, int cols, gridspan::Matrix<int> out,
                      const gridspan::Matrix<int> in) {
  __shared__ int first;
  int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  if (threadIdx.x == 0 && threadIdx.y == 0) first = in(i, j);
  __syncthreads();
  if (i < rows && j < cols) out(i, j) = in(i, j) * 3 + first + gridDim.x * 1000 + gridDim.y;
}
)";
  const int rows = 37, cols = 53;  // blocks of 4 x 8: a grid of 10 x 7
  auto v = random_vector<int>(std::size_t(rows) * cols, g);
  for (auto& x : v) x %= 100000;
  for (int devices : {1, 2}) {
    gs::Context ctx(config(devices));
    auto k = ctx.compile(gs::KernelDef::from_source(src, "stamp")
                             .annotate("global [i, j] => write out[i, j], read in[i, j]"));
    auto in = ctx.from_vector<int>(v, {rows, cols}, gs::dist::rows(19));
    auto out = ctx.full<int>({rows, cols}, poison<int>(), gs::dist::rows(19));
    // Superblocks of 2 x 2 blocks, 20 of them; the last row and column of them are partial.
    k.launch({rows, cols}, {4, 8}, gs::work::tiles({8, 16}), rows, cols, out, in);
    auto r = out.to_vector();
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        const int first = v[std::size_t(i / 4 * 4) * cols + j / 8 * 8];
        ASSERT_EQ(r[std::size_t(i) * cols + j], v[std::size_t(i) * cols + j] * 3 + first + 10007)
            << i << "," << j << " on " << devices << " device(s)";
      }
  }
}

}  // namespace
}  // namespace gridspan::test
