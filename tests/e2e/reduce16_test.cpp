// Kernels' reductions of float16 and bfloat16 arrays: sums and products accumulate in
// float32 partials and are rounded once, into the array (not at every combine); min and max
// stay exact. Through reduce and atomic, on one to three devices and many superblocks.
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "e2e/support.hpp"

namespace gridspan::test {
namespace {

// The kernel source's name of a 16-bit type.
template <class T>
const char* device_type() {
  return std::is_same_v<T, gs::float16> ? "__half" : "__nv_bfloat16";
}

// `global i => MODE(+) h, MODE(+) b`: every thread adds one to a float16 and a bfloat16.
const char* kOnes = R"(
__device__ void ones(dim3 blockIdx, int n, gridspan::Scalar<__half> h,
                     gridspan::Scalar<__nv_bfloat16> b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h.reduce(__half(1.0f));
    b.reduce(__nv_bfloat16(1.0f));
  }
}
)";

// 40000 ones in superblocks of 4096 threads: a float16 partial rounded at every addition
// would stop at 2048 (2049 rounds to even) and a bfloat16 one at 256; rounded once, the
// sums are 40000 (exact in float16) and bfloat16(40000) = 39936.
TEST(Reduce16, SumsOfOnesAreRoundedOnce) {
  const int n = 40000;
  for (const char* mode : {"reduce", "atomic"})
    for (int devices : {1, 2, 3}) {
      gs::Context ctx(config(devices));
      auto k = ctx.compile(gs::KernelDef::from_source(kOnes, "ones")
                               .annotate(fmt::format("global i => {0}(+) h, {0}(+) b", mode)));
      auto h = ctx.scalar<gs::float16>(gs::float16(-3.0f));
      auto b = ctx.scalar<gs::bfloat16>(gs::bfloat16(-3.0f));
      for (int rep = 0; rep < 2; ++rep) {  // a reduction overwrites: the same result twice
        k.launch({n}, {256}, gs::work::tiles({4096}), n, h, b);
        EXPECT_EQ(float(h.item()), 40000.0f) << mode << " on " << devices << " device(s)";
        EXPECT_EQ(float(b.item()), 39936.0f) << mode << " on " << devices << " device(s)";
      }
    }
}

// Row i of m summed, multiplied and maxed into out[i], prod[i] and top[i].
std::string row_kernel(const char* type) {
  return fmt::format(R"(
__device__ void rows(dim3 blockIdx, int r, int c, const gridspan::Matrix<{0}> m,
                     const gridspan::Matrix<{0}> f, gridspan::Vector<{0}> out,
                     gridspan::Vector<{0}> prod, gridspan::Vector<{0}> top) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= r || j >= c) return;
  out.reduce(i, m(i, j));
  prod.reduce(i, f(i, j));
  top.reduce(i, m(i, j));
}}
)",
                     type);
}

// Random multiples of 1/64 in [-4, 4] (exact in both 16-bit types, and their sums of a few
// thousand exact in float32) and random factors near 1, rows of 5000 over 10 superblocks:
// each sum is the exact sum rounded once, each product the product rounded once to within
// one unit in the last place (float32's rounding in another order may cross a boundary),
// each max exact. Rounded at every combine, sums and products are many units off.
template <class T>
void check_rows(const char* mode) {
  auto g = rng(std::is_same_v<T, gs::float16> ? 41 : 42);
  const int rows = 6, cols = 5000;
  std::vector<T> m(rows * cols), f(rows * cols);
  std::uniform_int_distribution<int> step(-256, 256);
  std::uniform_real_distribution<float> near_one(0.97f, 1.03f);
  for (auto& x : m) x = T(float(step(g)) / 64.0f);
  for (auto& x : f) x = T(near_one(g));
  std::vector<float> sum(rows, 0.0f), top(rows, -INFINITY);
  std::vector<double> product(rows, 1.0);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      sum[i] += float(m[i * cols + j]);
      top[i] = std::max(top[i], float(m[i * cols + j]));
      product[i] *= float(f[i * cols + j]);
    }
  const std::string annotation = fmt::format(
      "global [i, j] => read m[i, j], read f[i, j], {0}(+) out[i], {0}(*) prod[i], "
      "{0}(max) top[i]",
      mode);
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(config(devices));
    auto k = ctx.compile(
        gs::KernelDef::from_source(row_kernel(device_type<T>()), "rows").annotate(annotation));
    auto dm = ctx.from_vector<T>(m, {rows, cols}, gs::dist::tiles({3, 1024}));
    auto df = ctx.from_vector<T>(f, {rows, cols}, gs::dist::tiles({3, 1024}));
    auto out = ctx.full<T>({rows}, T(-7.0f), gs::dist::rows(2));
    auto prod = ctx.full<T>({rows}, T(-7.0f), gs::dist::rows(2));
    auto tp = ctx.full<T>({rows}, T(-7.0f), gs::dist::rows(2));
    k.launch({rows, cols}, {1, 256}, gs::work::tiles({3, 1024}), rows, cols, dm, df, out, prod, tp);
    auto rs = out.to_vector(), rp = prod.to_vector(), rt = tp.to_vector();
    for (int i = 0; i < rows; ++i) {
      const std::string where =
          fmt::format("{} {} row {} on {} device(s)", mode, dtype_name(dtype_v<T>), i, devices);
      EXPECT_EQ(rs[i].bits, T(sum[i]).bits) << where << ": " << float(rs[i]) << " " << sum[i];
      EXPECT_LE(std::abs(int(rp[i].bits) - int(T(float(product[i])).bits)), 1)
          << where << ": " << float(rp[i]) << " " << product[i];
      EXPECT_EQ(rt[i].bits, T(top[i]).bits) << where;
    }
  }
}

TEST(Reduce16, RandomSumsAndProductsAreRoundedOnce) {
  for (const char* mode : {"reduce", "atomic"}) {
    check_rows<gs::float16>(mode);
    check_rows<gs::bfloat16>(mode);
  }
}

// In checked mode a kernel that touches an element of a 16-bit sum's float32 partial
// directly (here a CUDA-style atomic on &h[i]) is an AccessError naming it; unchecked, it
// would write 16-bit values into float storage.
TEST(Reduce16, CheckedModeRefusesRawAccessToAFloat32Partial) {
  const char* raw = R"(
__device__ void raw(dim3 blockIdx, int n, gridspan::Vector<__half> h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = __half(1.0f);
}
)";
  for (const char* mode : {"reduce", "atomic"}) {
    gs::Context ctx(config(2));
    auto k = ctx.compile(gs::KernelDef::from_source(raw, "raw")
                             .annotate(fmt::format("global i => {}(+) h[i]", mode))
                             .checked());
    auto h = ctx.zeros<gs::float16>({64}, gs::dist::rows(32));
    k.launch({64}, {32}, gs::work::tiles({32}), 64, h);
    expect_error<gs::AccessError>([&] { ctx.synchronize(); },
                                  {"raw", "accessed `h[", "float32", "h.reduce(", mode});
  }
}

// A native function's views get the float32 partial too (host code: gs::float16).
gs::NativeDef count_native() {
  gs::NativeDef def = gs::NativeDef::from_function(
      "count16",
      [](const gs::NativeContext& nc, int n, gs::Scalar<gs::float16> h) {
        const gs::Rect t = nc.threads({n});
        for (int64_t i = t.lo[0]; i < t.hi[0]; ++i) h.reduce(gs::float16(1.0f));
      },
      {"n", "h"});
  def.annotate("global i => reduce(+) h");
  return def;
}
const bool count_registered = gs::register_native(count_native());

TEST(Reduce16, NativeFunctionSumsAreRoundedOnce) {
  gs::Context ctx(config(2));
  if (ctx.backend_name() != "cpu") GTEST_SKIP() << "a host-code native function";
  ASSERT_TRUE(count_registered);
  auto k = ctx.compile(count_native());
  auto h = ctx.scalar<gs::float16>(gs::float16(-3.0f));
  k.launch({40000}, {1}, gs::work::tiles({5000}), 40000, h);
  EXPECT_EQ(float(h.item()), 40000.0f);
}

}  // namespace
}  // namespace gridspan::test
