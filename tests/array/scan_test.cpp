// Scans (cumsum, cumprod): values against a sequential host reference for every axis and
// none, NumPy's dtypes and the 16-bit rules, expressions computed inside the scan's kernels,
// views read where they lie, chunks over one, two and three devices, empty arrays, bad axes;
// the GPU's block-scanned segments run on the cpu backend, and compiled for CUDA by NVRTC.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "array/scan.hpp"
#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

#ifdef GRIDSPAN_HAVE_CUDA
#include "support/nvrtc.hpp"
#endif

namespace gridspan {
namespace {

namespace gs = gridspan;
constexpr int kNone = detail::kAllAxes;

static_assert(
    std::is_same_v<decltype(gs::cumsum(std::declval<gs::Array<bool>>())), gs::Array<int64_t>>);
static_assert(std::is_same_v<decltype(gs::cumprod(std::declval<gs::Array<uint8_t>>(), 0)),
                             gs::Array<uint64_t>>);
static_assert(std::is_same_v<decltype(gs::cumsum(std::declval<gs::Array<gs::bfloat16>>())),
                             gs::Array<gs::bfloat16>>);

std::vector<int32_t> random_ints(int64_t n, uint64_t salt, int lo, int hi) {
  auto g = test::rng(salt);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) {
    do x = d(g);
    while (x == 0);
  }
  return v;
}

// A scan on the host in NumPy's order: along `axis` of `shape`, or over the flattened array.
template <class R, class T>
std::vector<R> host_scan(const std::vector<T>& v, const gs::Dim& shape, int axis,
                         const std::function<R(R, T)>& op, R init) {
  std::vector<R> out(v.size());
  const int rank = shape.rank();
  if (axis == kNone || rank == 0) {
    R acc = init;
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = acc = op(acc, v[i]);
    return out;
  }
  if (axis < 0) axis += rank;
  int64_t stride = 1;
  for (int k = axis + 1; k < rank; ++k) stride *= shape[k];
  const int64_t L = shape[axis], outer = shape.volume() / (L * stride);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < stride; ++i) {
      R acc = init;
      for (int64_t j = 0; j < L; ++j) {
        const int64_t at = (o * L + j) * stride + i;
        out[at] = acc = op(acc, v[at]);
      }
    }
  return out;
}

int64_t add64(int64_t a, int32_t b) {
  return a + b;
}
int64_t mul64(int64_t a, int32_t b) {  // wraps as NumPy's int64 does
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(int64_t(b)));
}

gs::Dim result_shape(const gs::Dim& shape, int axis) {
  return axis == kNone ? gs::Dim{shape.volume()} : shape;
}

std::string axis_name(int axis) {
  return axis == kNone ? "none" : std::to_string(axis);
}

struct Case {
  gs::Dim shape;
  std::vector<int> axes;
};
// Ranks 1 to 3, sizes no multiple of 256; lines of one segment and of several (over 2^14
// elements on cpu devices).
const std::vector<Case> kCases = {
    {{70001}, {kNone, 0, -1}},  {{37, 1100}, {kNone, 0, 1, -1, -2}},
    {{20001, 3}, {0, 1}},       {{5, 7, 601}, {kNone, 0, 1, 2, -1, -3}},
    {{3, 6000, 2}, {kNone, 1}},
};

// Rows over `devices` devices in chunks of about a third of the array (unaligned to powers
// of two), so lines along axis 0 cross chunks on different devices.
gs::DataDistribution rows_over(const gs::Dim& shape, int devices) {
  return gs::dist::rows(std::max<int64_t>(1, (shape[0] + devices - 1) / devices));
}

gs::Config checked(int devices) {
  gs::Config c = test::quiet_config(devices);
  c.check = true;  // overwrite regions poisoned and looked at; accesses checked
  return c;
}

// Sums of int32 past int32's range (int64 results, no wrap) and products that wrap as NumPy's
// int64 does, identical on any number of devices.
TEST(ScanValues, IntegersAreExactOnEveryAxisOnOneTwoAndThreeDevices) {
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(checked(devices));
    uint64_t salt = 0;
    for (const Case& c : kCases) {
      const auto v = random_ints(c.shape.volume(), ++salt, -1000000, 1000000);
      const auto small = random_ints(c.shape.volume(), ++salt, -2, 3);
      auto a = ctx.from_vector(v, c.shape, rows_over(c.shape, devices));
      auto b = ctx.from_vector(small, c.shape, rows_over(c.shape, devices));
      for (int axis : c.axes) {
        SCOPED_TRACE(c.shape.str() + " axis " + axis_name(axis) + ", " + std::to_string(devices) +
                     " devices");
        auto s = axis == kNone ? gs::cumsum(a) : gs::cumsum(a, axis);
        auto p = axis == kNone ? gs::cumprod(b) : gs::cumprod(b, axis);
        EXPECT_EQ(s.shape(), result_shape(c.shape, axis));
        EXPECT_EQ(s.to_vector(), (host_scan<int64_t, int32_t>(v, c.shape, axis, add64, 0)));
        EXPECT_EQ(p.to_vector(), (host_scan<int64_t, int32_t>(small, c.shape, axis, mul64, 1)));
      }
    }
  }
}

// |got - want| within float32 rounding of the running sum of magnitudes.
void expect_near_sums(const std::vector<float>& got, const std::vector<double>& want,
                      const std::vector<double>& magnitude) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6 * magnitude[i] + 1e-6) << "element " << i;
}

// On each number of devices the order is fixed (segments follow the chunks): the same run
// to run, within rounding of the host's.
TEST(ScanValues, FloatsWithinRoundingAndTheSameRunToRun) {
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    uint64_t salt = 100;
    for (const Case& c : kCases) {
      auto g = test::rng(++salt);
      const auto v = test::random_vector<float>(c.shape.volume(), g);
      std::vector<float> near_one(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) near_one[i] = 1.0f + 0.001f * v[i];
      auto a = ctx.from_vector(v, c.shape, rows_over(c.shape, devices));
      auto b = ctx.from_vector(near_one, c.shape, rows_over(c.shape, devices));
      for (int axis : c.axes) {
        SCOPED_TRACE(c.shape.str() + " axis " + axis_name(axis) + ", " + std::to_string(devices) +
                     " devices");
        auto s = (axis == kNone ? gs::cumsum(a) : gs::cumsum(a, axis)).to_vector();
        const auto want = host_scan<double, float>(
            v, c.shape, axis, [](double x, float y) { return x + y; }, 0.0);
        const auto magnitude = host_scan<double, float>(
            v, c.shape, axis, [](double x, float y) { return x + std::fabs(y); }, 0.0);
        expect_near_sums(s, want, magnitude);
        EXPECT_EQ((axis == kNone ? gs::cumsum(a) : gs::cumsum(a, axis)).to_vector(), s);
        auto p = (axis == kNone ? gs::cumprod(b) : gs::cumprod(b, axis)).to_vector();
        const auto want_p = host_scan<double, float>(
            near_one, c.shape, axis, [](double x, float y) { return x * y; }, 1.0);
        for (std::size_t i = 0; i < p.size(); ++i)
          ASSERT_NEAR(p[i], want_p[i], 1e-4 * want_p[i]) << "element " << i;
      }
    }
  }
}

TEST(ScanValues, BoolCountsInInt64) {
  gs::Context ctx(test::quiet_config(2));
  const gs::Dim shape{41, 700};
  const auto v = random_ints(shape.volume(), 200, 1, 100);
  auto a = ctx.from_vector(v, shape);
  std::vector<int32_t> big(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) big[i] = v[i] > 50;
  auto mask = (a > 50).copy();
  for (int axis : {kNone, 0, 1}) {
    SCOPED_TRACE(axis_name(axis));
    const auto want = host_scan<int64_t, int32_t>(big, shape, axis, add64, 0);
    EXPECT_EQ((axis == kNone ? gs::cumsum(mask) : gs::cumsum(mask, axis)).to_vector(), want);
    EXPECT_EQ((axis == kNone ? gs::cumsum(a > 50) : gs::cumsum(a > 50, axis)).to_vector(), want);
    EXPECT_EQ((axis == kNone ? gs::cumprod(mask) : gs::cumprod(mask, axis)).to_vector(),
              (host_scan<int64_t, int32_t>(big, shape, axis, mul64, 1)));
  }
}

// One float16 (or bfloat16) ulp at `x`.
float ulp16(float x, int mantissa_bits) {
  int e = 0;
  std::frexp(std::max(std::fabs(x), 1e-3f), &e);
  return std::ldexp(1.0f, e - 1 - mantissa_bits);
}

template <class H>
void expect_rounded_once(const std::vector<H>& got, const std::vector<float>& v, int bits) {
  float acc = 0;  // float32 running sum, rounded once per element
  for (std::size_t i = 0; i < v.size(); ++i) {
    acc += v[i];
    const float want = float(H(acc)), g = float(got[i]);
    ASSERT_LE(std::fabs(g - want), ulp16(want, bits)) << "element " << i;
  }
}

TEST(ScanValues, SixteenBitSumsAccumulateInFloat32AndProductsDoNotWiden) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 40000;  // more than one segment on cpu devices
  auto h = gs::cumsum(gs::ones<gs::float16>(ctx, {n})).to_vector();
  auto bf = gs::cumsum(gs::ones<gs::bfloat16>(ctx, {n})).to_vector();
  EXPECT_EQ(float(h.back()), 40000.0f);  // float16 would stop at 2048
  EXPECT_EQ(float(bf.back()), 39936.0f);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(float(h[i]), float(gs::float16(float(i + 1)))) << i;
    ASSERT_EQ(float(bf[i]), float(gs::bfloat16(float(i + 1)))) << i;
  }
  auto p = ctx.from_vector<gs::float16>(
      {gs::float16(300.0f), gs::float16(300.0f), gs::float16(0.001f)}, {3});
  const auto pv = gs::cumprod(p).to_vector();
  EXPECT_EQ(float(pv[0]), 300.0f);
  EXPECT_TRUE(std::isinf(float(pv[1])));  // 90000 is past float16's range
  EXPECT_TRUE(std::isinf(float(pv[2])));  // not 90: the product was rounded
  auto g = test::rng(300);
  const auto v = test::random_vector<float>(30001, g);
  std::vector<gs::float16> hv;
  std::vector<gs::bfloat16> bv;
  std::vector<float> hf, bfv;
  for (float x : v) {
    hv.emplace_back(x), hf.push_back(float(hv.back()));
    bv.emplace_back(x), bfv.push_back(float(bv.back()));
  }
  const gs::Dim shape{30001};
  expect_rounded_once(gs::cumsum(ctx.from_vector(hv, shape, rows_over(shape, 2))).to_vector(), hf,
                      10);
  expect_rounded_once(gs::cumsum(ctx.from_vector(bv, shape, rows_over(shape, 2))).to_vector(), bfv,
                      7);
}

TEST(ScanLaunches, AnExpressionIsComputedInsideTheScansKernels) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 100003, m = 3;
  auto g = test::rng(400);
  const auto av = test::random_vector<float>(n * m, g), bv = test::random_vector<float>(m, g);
  auto a = ctx.from_vector(av, {n, m}), b = ctx.from_vector(bv, {m});
  for (int axis : {kNone, 0, 1}) {
    SCOPED_TRACE(axis_name(axis));
    auto c = (a * b + 1.0f).copy();
    c.handle();
    const auto before = ctx.stats().launches;
    auto plain = axis == kNone ? gs::cumsum(c) : gs::cumsum(c, axis);
    const auto launches = ctx.stats().launches - before;
    gs::Array<float> fused;
    {
      gs::NoSyncGuard guard;  // launched without a host wait
      fused = axis == kNone ? gs::cumsum(a * b + 1.0f) : gs::cumsum(a * b + 1.0f, axis);
    }
    EXPECT_EQ(ctx.stats().launches - before - launches, launches);
    EXPECT_EQ(launches, axis == 1 ? 1u : 3u);  // totals, carries, scan where lines are long
    EXPECT_EQ(fused.to_vector(), plain.to_vector());
  }
}

TEST(ScanViews, SlicesAndTransposesAreReadWhereTheyLie) {
  gs::Context ctx(checked(2));
  const gs::Dim shape{6, 7, 601};
  const auto v = random_ints(shape.volume(), 500, -1000, 1000);
  auto t = ctx.from_vector(v, shape);
  const std::vector<gs::Array<int32_t>> views = {
      t.slice(gs::range(1, 6, 2), gs::all, gs::range(600, 0, -3)),
      gs::transpose(t, {2, 0, 1}),
      t.slice(3, gs::range(1, 7), gs::all),
  };
  for (const auto& view : views) {
    const auto values = view.to_vector();
    const gs::Dim vs = view.shape();
    std::vector<int> axes{kNone, -1};
    for (int k = 0; k < vs.rank(); ++k) axes.push_back(k);
    for (int axis : axes) {
      SCOPED_TRACE(vs.str() + " axis " + axis_name(axis));
      auto s = axis == kNone ? gs::cumsum(view) : gs::cumsum(view, axis);
      EXPECT_EQ(s.to_vector(), (host_scan<int64_t, int32_t>(values, vs, axis, add64, 0)));
    }
  }
}

TEST(ScanShapes, EmptyArraysZeroDimensionalArraysAndBadAxes) {
  gs::Context ctx(test::quiet_config(2));
  const auto before = ctx.stats().launches;
  EXPECT_EQ(gs::cumsum(gs::zeros<float>(ctx, {0})).shape(), (gs::Dim{0}));
  EXPECT_EQ(gs::cumprod(gs::zeros<int32_t>(ctx, {3, 0})).shape(), (gs::Dim{0}));
  auto e = gs::cumsum(gs::zeros<int16_t>(ctx, {0, 4}), 1);
  EXPECT_EQ(e.shape(), (gs::Dim{0, 4}));
  EXPECT_TRUE(e.to_vector().empty());
  EXPECT_EQ(ctx.stats().launches, before);  // nothing to launch
  auto a = ctx.from_vector<int32_t>({4, -2, 7}, {3});
  auto total = gs::sum(a);  // 0-d
  auto one = gs::cumsum(total * 2);
  EXPECT_EQ(one.shape(), (gs::Dim{1}));
  EXPECT_EQ(one.to_vector(), (std::vector<int64_t>{18}));
  EXPECT_EQ(gs::cumprod(a, -1).to_vector(), (std::vector<int64_t>{4, -8, -56}));
  auto t = gs::zeros<float>(ctx, {4, 5, 6});
  for (int axis : {3, -4}) {
    try {
      (void)gs::cumsum(t, axis);
      ADD_FAILURE() << "axis " << axis << " accepted";
    } catch (const gs::Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("cumsum: axis " + std::to_string(axis)), std::string::npos) << m;
      EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(gs::cumprod(total, 0), gs::Error);
}

// The cuda backend's geometry on cpu devices: segments along the contiguous axis scanned by
// blocks of 256 threads in shared memory (the cpu backend runs them on fibers).
class ScanGpuGeometry : public ::testing::Test {
 protected:
  void SetUp() override { array::set_scan_test_hooks(&hooks); }
  void TearDown() override { array::set_scan_test_hooks(nullptr); }
  // Scans every kind of input the GPU path plans for: lines scanned by blocks and by threads,
  // flattened and along an axis, a line crossing chunks, expressions, views, 16-bit floats.
  void scan_everything(gs::Context& ctx, uint64_t salt) {
    const std::vector<Case> cases = {{{70001}, {kNone}},
                                     {{5, 9001}, {1, kNone}},
                                     {{3, 7, 2001}, {kNone, 2, 0}},
                                     {{40, 30}, {kNone, 0, 1}},
                                     {{4, 5, 6}, {kNone, 1}}};
    for (const Case& c : cases) {
      const auto v = random_ints(c.shape.volume(), ++salt, -1000000, 1000000);
      const auto small = random_ints(c.shape.volume(), ++salt, -2, 3);
      auto a = ctx.from_vector(v, c.shape, rows_over(c.shape, 2));
      auto b = ctx.from_vector(small, c.shape);
      for (int axis : c.axes) {
        SCOPED_TRACE(c.shape.str() + " axis " + axis_name(axis));
        EXPECT_EQ((axis == kNone ? gs::cumsum(a) : gs::cumsum(a, axis)).to_vector(),
                  (host_scan<int64_t, int32_t>(v, c.shape, axis, add64, 0)));
        EXPECT_EQ((axis == kNone ? gs::cumprod(b * 1) : gs::cumprod(b * 1, axis)).to_vector(),
                  (host_scan<int64_t, int32_t>(small, c.shape, axis, mul64, 1)));
      }
    }
    const auto t = random_ints(40 * 30, ++salt, -100, 100);
    auto m = ctx.from_vector(t, {40, 30});
    EXPECT_EQ(gs::cumsum(m.transpose(), 1).to_vector(),
              (host_scan<int64_t, int32_t>(m.transpose().to_vector(), {30, 40}, 1, add64, 0)));
    auto h = gs::cumsum(gs::ones<gs::float16>(ctx, {40000})).to_vector();
    for (int64_t i = 0; i < 40000; ++i)
      ASSERT_EQ(float(h[i]), float(gs::float16(float(i + 1)))) << i;
    auto p = ctx.from_vector<gs::float16>({gs::float16(300.0f), gs::float16(300.0f)}, {2});
    EXPECT_TRUE(std::isinf(float(gs::cumprod(p).to_vector()[1])));  // no widening
    EXPECT_EQ(gs::cumsum(ctx.from_vector<double>({1.5, 2.5}, {2})).to_vector(),
              (std::vector<double>{1.5, 4.0}));
  }
  array::ScanTestHooks hooks{true, 0, {}};
};

TEST_F(ScanGpuGeometry, BlockScannedSegmentsMatchTheHost) {
  gs::Context ctx(checked(2));
  scan_everything(ctx, 600);
}

// Every line along the last axis scanned by blocks, the carries' lines too (exclusive).
TEST_F(ScanGpuGeometry, ShortLinesAndCarriesScannedByBlocks) {
  hooks.block_line = 1;
  gs::Context ctx(checked(2));
  scan_everything(ctx, 650);
}

#ifdef GRIDSPAN_HAVE_CUDA

// Every kind of scan kernel the cuda backend launches compiles for sm_90 with NVRTC.
TEST_F(ScanGpuGeometry, KernelsCompileForCuda) {
  for (int64_t block_line : {0, 1}) {
    hooks.block_line = block_line;
    gs::Context ctx(test::quiet_config(2));
    scan_everything(ctx, 700);
    (void)gs::cumsum(gs::ones<double>(ctx, {20001, 3}) * 2.0, 0).to_vector();
  }
  EXPECT_GE(hooks.generated.size(), 20u);
  test::expect_compile_for_sm90(hooks.generated);
}
#endif

}  // namespace
}  // namespace gridspan
