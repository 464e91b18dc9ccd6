// Elementwise operations of the array library: values against a host reference, NumPy's
// promotion and broadcasting, fusion counted in launches, and lazy results that read the
// values they were built from.
#include <gtest/gtest.h>

#include <cmath>

#include "array/launch.hpp"
#include "gridspan/device/random.hpp"
#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/nvrtc.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

gs::Config quiet(int devices) {
  return test::quiet_config(devices);
}

template <class T>
std::vector<T> randoms(std::size_t n, uint64_t salt) {
  auto g = test::rng(salt);
  return test::random_vector<T>(n, g);
}

static_assert(std::is_same_v<decltype(std::declval<gs::Array<float>>() * 2.0), gs::Array<float>>);
static_assert(
    std::is_same_v<decltype(std::declval<gs::Array<int32_t>>() * 2.5), gs::Array<double>>);
static_assert(
    std::is_same_v<decltype(std::declval<gs::Array<int32_t>>() + std::declval<gs::Array<float>>()),
                   gs::Array<double>>);
static_assert(
    std::is_same_v<decltype(std::declval<gs::Array<int16_t>>() + std::declval<gs::Array<float>>()),
                   gs::Array<float>>);
static_assert(
    std::is_same_v<decltype(std::declval<gs::Array<uint8_t>>() + std::declval<gs::Array<int8_t>>()),
                   gs::Array<int16_t>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<uint64_t>>() +
                                      std::declval<gs::Array<int64_t>>()),
                             gs::Array<double>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<gs::float16>>() +
                                      std::declval<gs::Array<gs::bfloat16>>()),
                             gs::Array<float>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<gs::float16>>() +
                                      std::declval<gs::Array<int32_t>>()),
                             gs::Array<gs::float16>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<gs::bfloat16>>() * 2.0),
                             gs::Array<gs::bfloat16>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<int32_t>>() / 2), gs::Array<double>>);
static_assert(
    std::is_same_v<decltype(gs::sqrt(std::declval<gs::Array<int8_t>>())), gs::Array<gs::float16>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<float>>() < 1), gs::Array<bool>>);
static_assert(std::is_same_v<decltype(std::declval<gs::Array<bool>>() + 1), gs::Array<int64_t>>);

TEST(ArrayElementwise, AChainRunsAsOneKernelAndMatchesTheHost) {
  gs::Context ctx(quiet(1));
  const int64_t n = 5000;
  auto av = randoms<float>(n, 1), bv = randoms<float>(n, 2), cv = randoms<float>(n, 3);
  auto a = ctx.from_vector(av, {n}), b = ctx.from_vector(bv, {n}), c = ctx.from_vector(cv, {n});
  const auto before = ctx.stats();
  auto t = a * b + c;  // across statements
  auto y = gs::tanh(t) * 0.5f - a;
  EXPECT_EQ(ctx.stats().launches, before.launches);  // nothing ran yet
  std::vector<float> got = y.to_vector();
  EXPECT_EQ(ctx.stats().launches, before.launches + 1);
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::tanh(av[i] * bv[i] + cv[i]) * 0.5f - av[i];
    ASSERT_NEAR(got[i], want, 1e-6f) << "element " << i;
  }
}

TEST(ArrayElementwise, BroadcastingFollowsNumPy) {
  gs::Context ctx(quiet(3));
  const int64_t n = 37, m = 11;
  auto av = randoms<double>(n * m, 4), rv = randoms<double>(m, 5), cv = randoms<double>(n, 6);
  auto a = ctx.from_vector(av, {n, m});
  auto row = ctx.from_vector(rv, {m});
  auto col = ctx.from_vector(cv, {n, 1});
  auto got = (a - row * col).to_vector();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      ASSERT_EQ(got[i * m + j], av[i * m + j] - rv[j] * cv[i]) << i << "," << j;
  auto outer = (row + col).to_vector();  // (m,) with (n, 1): (n, m)
  ASSERT_EQ(outer.size(), std::size_t(n * m));
  EXPECT_EQ(outer[3 * m + 7], rv[7] + cv[3]);
  try {
    auto bad = ctx.from_vector(randoms<double>(5, 7), {5});
    (void)(a + bad);
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("{37, 11} and {5}"), std::string::npos) << e.what();
  }
}

TEST(ArrayElementwise, IntegersPromoteDivideAndWrapAsNumPy) {
  gs::Context ctx(quiet(1));
  auto a = ctx.from_vector<int32_t>({-7, 7, -7, 7, 2147483647, 5}, {6});
  auto b = ctx.from_vector<int32_t>({3, 3, -3, -3, 1, 0}, {6});
  EXPECT_EQ((a % b).to_vector(), (std::vector<int32_t>{2, 1, -1, -2, 0, 0}));
  EXPECT_EQ((a + b).to_vector()[4], -2147483647 - 1);  // wraps
  auto q = (a / b).to_vector();                        // true division: float64
  EXPECT_DOUBLE_EQ(q[0], -7.0 / 3.0);
  EXPECT_TRUE(std::isinf(q[5]));
  EXPECT_EQ((a * 2.5).to_vector()[1], 17.5);
  auto c = a.copy();
  c += b;  // integers in place, as NumPy's same_kind rule allows
  c *= 2;
  c -= a;
  EXPECT_EQ(c.to_vector(), (std::vector<int32_t>{-1, 13, -13, 1, -2147483647, 5}));
  auto flags = ctx.from_vector<bool>({true, false, false, true}, {4});
  flags += ctx.from_vector<bool>({false, false, true, true}, {4});  // bool + bool: or
  EXPECT_EQ(flags.to_vector(), (std::vector<bool>{true, false, true, true}));
  try {
    auto small = ctx.from_vector<int8_t>({1, 2}, {2});
    (void)(small + 300);
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("300 does not fit"), std::string::npos) << e.what();
  }
}

TEST(ArrayElementwise, SixteenBitFloatsComputeInFloatAndRoundOnce) {
  EXPECT_EQ(float(gs::float16(2049.0f)), 2048.0f);
  EXPECT_EQ(float(gs::float16(50257.0f)), 50272.0f);
  EXPECT_EQ(float(gs::bfloat16(257.0f)), 256.0f);
  EXPECT_EQ(float(gs::float16(257.0f)), 257.0f);
  EXPECT_EQ(float(gs::bfloat16(79800.0f)), 79872.0f);
  EXPECT_TRUE(std::isinf(float(gs::float16(79800.0f))));
  gs::Context ctx(quiet(1));
  auto h = ctx.from_vector<gs::float16>({gs::float16(1.0f), gs::float16(2048.0f)}, {2});
  auto bf = ctx.from_vector<gs::bfloat16>({gs::bfloat16(1.0f), gs::bfloat16(256.0f)}, {2});
  auto sum = h + bf;  // float32
  EXPECT_EQ(sum.to_vector(), (std::vector<float>{2.0f, 2304.0f}));
  auto h1 = (h + 1).to_vector();  // 2049 rounds to 2048 in float16
  EXPECT_EQ(float(h1[1]), 2048.0f);
  auto chained = ((h + 1) + 1).to_vector();  // each operation rounds: 2048 + 1 + 1 = 2048
  EXPECT_EQ(float(chained[1]), 2048.0f);
}

TEST(ArrayElementwise, ALazyResultKeepsTheValuesItWasBuiltFrom) {
  gs::Context ctx(quiet(1));
  auto av = randoms<float>(1000, 8);
  auto a = ctx.from_vector(av, {1000});
  auto c = a + 1.0f;  // pending, reads a
  a += 5.0f;          // writes a: c is launched first
  auto cv = c.to_vector(), now = a.to_vector();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(cv[i], av[i] + 1.0f);
    ASSERT_EQ(now[i], av[i] + 5.0f);
  }
  auto b = a + 1.0f;  // pending, and read by another pending array
  auto e = b * 2.0f;
  b += 10.0f;  // b settles, then is written: e is launched before the write
  auto ev = e.to_vector(), bv = b.to_vector();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(ev[i], (av[i] + 5.0f + 1.0f) * 2.0f) << i;
    ASSERT_EQ(bv[i], av[i] + 5.0f + 1.0f + 10.0f) << i;
  }
  a.copy_from(av);  // a write through the runtime API settles readers too
  auto d = a * 2.0f;
  a.copy_from(std::vector<float>(1000, 3.0f));
  EXPECT_EQ(d.to_vector()[10], av[10] * 2.0f);
}

TEST(ArrayElementwise, KernelsAreCachedByTheShapeOfTheExpression) {
  gs::Context ctx(quiet(2));
  auto a = ctx.from_vector(randoms<float>(300, 9), {300});
  auto t = gs::exp(a);
  auto y1 = (t * t + t).to_vector();
  const auto compiled = ctx.stats().kernels_compiled;
  auto b = ctx.from_vector(randoms<float>(300, 10), {300});
  auto u = gs::exp(b * 1.0f);  // another shape of expression: a new kernel
  (void)u.to_vector();
  EXPECT_EQ(ctx.stats().kernels_compiled, compiled + 1);
  auto t2 = gs::exp(b);
  auto y2 = (t2 * t2 + t2).to_vector();  // the same shape as y1's: no compile
  EXPECT_EQ(ctx.stats().kernels_compiled, compiled + 1);
  EXPECT_FLOAT_EQ(
      y2[0], std::exp(b.to_vector()[0]) * std::exp(b.to_vector()[0]) + std::exp(b.to_vector()[0]));
}

TEST(ArrayElementwise, ArangeAndLinspace) {
  gs::Context ctx(quiet(1));
  EXPECT_EQ(gs::arange<int32_t>(ctx, 5).to_vector(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(gs::arange<double>(ctx, 1, 2, 0.25).to_vector(),
            (std::vector<double>{1, 1.25, 1.5, 1.75}));
  auto l = gs::linspace<double>(ctx, 0, 1, 7).to_vector();
  ASSERT_EQ(l.size(), 7u);
  EXPECT_EQ(l.back(), 1.0);
  EXPECT_DOUBLE_EQ(l[3], 0.5);
  auto grid = (gs::arange<float>(ctx, 4) + gs::zeros<float>(ctx, {3, 4})).to_vector();
  EXPECT_EQ(grid[5], 1.0f);
  EXPECT_THROW(gs::arange<float>(ctx, 0, 1, 0), gs::Error);
}

}  // namespace
}  // namespace gridspan

namespace gridspan {
namespace {

// Random arrays: element i is Philox's number for (seed, i), whatever the devices.
TEST(ArrayRandom, ElementsDependOnlyOnSeedAndIndex) {
  const uint64_t seed = test::base_seed() + 11;
  std::vector<float> one;
  for (int devices : {1, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    auto u = gs::random::uniform<float>(ctx, {300, 70}, seed, -2.0, 3.0).to_vector();
    if (one.empty()) one = u;
    EXPECT_EQ(u, one) << devices << " devices";
    double mean = 0;
    for (float x : u) {
      ASSERT_GE(x, -2.0f);
      ASSERT_LE(x, 3.0f);
      mean += x;
    }
    EXPECT_NEAR(mean / u.size(), 0.5, 0.05);
    auto n = gs::random::normal<double>(ctx, {20000}, seed).to_vector();
    double m = 0, v = 0;
    for (double x : n) m += x, v += x * x;
    m /= n.size();
    EXPECT_NEAR(m, 0.0, 0.05);
    EXPECT_NEAR(v / n.size() - m * m, 1.0, 0.05);
  }
  for (int64_t i : {0, 1, 69, 70, 12345})
    EXPECT_EQ(one[i], std::fma(5.0f, rng::uniform_float(seed, i, 0), -2.0f)) << i;
}

TEST(ArrayElementwise, SmallResultsReuseTheArraysOfResultsThatWent) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 3000;
  auto av = randoms<float>(n, 21);
  auto a = ctx.from_vector(av, {n});
  gs::Array<float> out, kept;
  for (int i = 0; i < 40; ++i) {
    out = a * float(i);      // the previous result's array is offered for reuse
    if (i == 7) kept = out;  // a result still held is never reused
    if (i % 3 == 0) {
      auto later = out + 1.0f;  // a pending reader: it reads the values it was built from
      out = a * -1.0f;
      auto v = later.to_vector();
      for (int64_t k = 0; k < n; k += 97) ASSERT_EQ(v[k], av[k] * float(i) + 1.0f) << i;
    }
    auto v = out.to_vector();
    const float f = i % 3 == 0 ? -1.0f : float(i);
    for (int64_t k = 0; k < n; k += 97) ASSERT_EQ(v[k], av[k] * f) << i << " " << k;
  }
  auto k7 = kept.to_vector();
  for (int64_t k = 0; k < n; k += 97) ASSERT_EQ(k7[k], av[k] * 7.0f) << k;
}

// The GPU's unrolled elementwise kernels (four elements a thread, a block's threads apart,
// in blocks of 1024 elements), run on cpu devices: tails, ranks 1 to 3, broadcasts, views,
// in-place updates, 16-bit floats, on 1 and 3 devices, checked (the annotation's lines) and
// not; then NVRTC compiles every kernel they made.
class UnrolledElementwise : public ::testing::Test {
 protected:
  void SetUp() override { array::set_elementwise_test_hooks(&hooks); }
  void TearDown() override { array::set_elementwise_test_hooks(nullptr); }
  void everything(gs::Context& ctx) {
    for (const gs::Dim& shape :
         {gs::Dim{4099}, gs::Dim{7, 1000}, gs::Dim{3, 2048}, gs::Dim{2, 3, 700}, gs::Dim{5, 96},
          gs::Dim{7, 768}, gs::Dim{3, 5, 384}}) {
      const auto n = std::size_t(shape.volume());
      const auto av = randoms<float>(n, 40), bv = randoms<float>(n, 41);
      auto a = ctx.from_vector(av, shape), b = ctx.from_vector(bv, shape);
      auto y = (gs::tanh(a * b + 1.0f) - a).to_vector();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[i], std::tanh(av[i] * bv[i] + 1.0f) - av[i], 1e-5) << shape.str() << " " << i;
      a += b;  // in place: the target is read and written
      auto s = a.to_vector();
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(s[i], av[i] + bv[i]) << shape.str();
      auto h = (b.astype<gs::bfloat16>() * 3.0f).to_vector();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(float(h[i]), float(gs::bfloat16(float(gs::bfloat16(bv[i])) * 3.0f)));
    }
    // A broadcast row, and a transposed view read and a sliced view written.
    const auto mv = randoms<double>(64 * 300, 42), rv = randoms<double>(300, 43);
    auto m = ctx.from_vector(mv, {64, 300});
    auto r = ctx.from_vector(rv, {300});
    auto t = (gs::transpose(m, {1, 0}) * 2.0).to_vector();  // (300, 64)
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t j = 0; j < 64; ++j) ASSERT_EQ(t[i * 64 + j], 2 * mv[j * 300 + i]);
    auto p = (m + r).to_vector();
    for (int64_t i = 0; i < 64 * 300; ++i) ASSERT_EQ(p[i], mv[i] + rv[i % 300]);
    auto part = m.slice(gs::range(0, 64, 2), gs::range(10, 290));
    part.assign(part * 0.5);
    auto back = m.to_vector();
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 300; ++j) {
        const bool in = i % 2 == 0 && j >= 10 && j < 290;
        ASSERT_EQ(back[i * 300 + j], in ? mv[i * 300 + j] * 0.5 : mv[i * 300 + j]);
      }
  }
  array::ElementwiseTestHooks hooks{true, {}};
};

TEST_F(UnrolledElementwise, MatchTheHostOnOneAndThreeDevices) {
  for (int devices : {1, 3}) {
    gs::Context ctx(quiet(devices));
    everything(ctx);
  }
  // Both variants ran: a line of neighbouring elements as one vector load and store where
  // every access is an array's last axis, aligned (4 float32, 2 float64), and the elements
  // a block's threads apart elsewhere (a tail of 4099, a transposed or sliced view).
  std::size_t vectors = 0, strided = 0;
  for (const auto& def : hooks.generated) {
    vectors += def.source().find("store_vector<4>") != std::string::npos ||
               def.source().find("store_vector<2>") != std::string::npos;
    strided += def.source().find("gs_first") != std::string::npos;
  }
  EXPECT_GE(vectors, 4u);
  EXPECT_GE(strided, 3u);
}

TEST_F(UnrolledElementwise, CheckedModeRunsTheAnnotationsLines) {
  gs::Config c = quiet(2);
  c.check = true;
  gs::Context ctx(c);
  everything(ctx);
}

#ifdef GRIDSPAN_HAVE_CUDA
TEST_F(UnrolledElementwise, KernelsCompileForCuda) {
  gs::Context ctx(quiet(2));
  everything(ctx);
  auto i = gs::matmul(gs::ones<int16_t>(ctx, {3, 4}), gs::full<int16_t>(ctx, {4, 5}, 2));
  EXPECT_EQ(i.to_vector(), std::vector<int16_t>(15, 8));  // the integer product's kernel too
  ASSERT_GE(hooks.generated.size(), 5u);
  std::size_t unrolled = 0;
  for (const auto& def : hooks.generated)
    unrolled += def.source().find("gs_u[") != std::string::npos;
  EXPECT_GE(unrolled, 5u) << "the unrolled variant should have been generated";
  test::expect_compile_for_sm90(hooks.generated);
}
#endif

}  // namespace
}  // namespace gridspan
