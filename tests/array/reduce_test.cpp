// Reductions: values against the host, integers exact on any number of devices, floats the
// same run to run, NumPy's dtypes and Cumo's 16-bit examples, NaN in min and max, axes and
// keepdims, expressions taken into the reduction's kernel, scalars that stay on the devices.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

static_assert(
    std::is_same_v<decltype(gs::sum(std::declval<gs::Array<int8_t>>())), gs::Array<int64_t>>);
static_assert(
    std::is_same_v<decltype(gs::sum(std::declval<gs::Array<uint16_t>>())), gs::Array<uint64_t>>);
static_assert(
    std::is_same_v<decltype(gs::mean(std::declval<gs::Array<int32_t>>())), gs::Array<double>>);
static_assert(std::is_same_v<decltype(gs::sum(std::declval<gs::Array<gs::float16>>())),
                             gs::Array<gs::float16>>);
static_assert(std::is_same_v<decltype(gs::all(std::declval<gs::Array<float>>())), gs::Array<bool>>);

std::vector<double> randoms(std::size_t n, uint64_t salt) {
  auto g = test::rng(salt);
  return test::random_vector<double>(n, g);
}

TEST(ArrayReduce, SumsOverEverythingAndAnExpressionRunsInsideTheReduction) {
  gs::Context ctx(test::quiet_config(1));
  const int64_t n = 100003;
  auto av = randoms(n, 1), bv = randoms(n, 2);
  auto a = ctx.from_vector(av, {n}), b = ctx.from_vector(bv, {n});
  double want = 0, want_dot = 0;
  for (int64_t i = 0; i < n; ++i) want += av[i], want_dot += av[i] * bv[i];
  auto s = gs::sum(a);
  EXPECT_EQ(s.shape(), gs::Dim{});
  EXPECT_NEAR(s.item(), want, 1e-9 * n);
  auto c = (a * b).copy();
  c.handle();
  const auto before = ctx.stats().launches;
  (void)gs::sum(c);
  const auto plain = ctx.stats().launches - before;
  auto dot = gs::sum(a * b);  // the product is computed in the reduction's first kernel
  EXPECT_EQ(ctx.stats().launches - before - plain, plain);
  EXPECT_NEAR(dot.item(), want_dot, 1e-9 * n);
  EXPECT_EQ(gs::sum(a * b).item(), dot.item());  // the same run to run
}

TEST(ArrayReduce, IntegersAreExactOnOneTwoAndThreeDevices) {
  const int64_t n = 70001;
  std::vector<int32_t> v(n);
  auto g = test::rng(3);
  for (auto& x : v) x = static_cast<int32_t>(g() % 2000001) - 1000000;
  const int64_t want = std::accumulate(v.begin(), v.end(), int64_t(0));
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    auto a = ctx.from_vector(v, {n});
    EXPECT_EQ(gs::sum(a).item(), want) << devices << " devices";
    EXPECT_EQ(gs::count_nonzero(a % 7).item(),
              std::count_if(v.begin(), v.end(), [](int32_t x) { return x % 7 != 0; }));
    EXPECT_EQ(gs::max(a).item(), *std::max_element(v.begin(), v.end()));
    EXPECT_EQ(gs::min(a).item(), *std::min_element(v.begin(), v.end()));
    EXPECT_TRUE(gs::any(a > 999000).item());
    EXPECT_FALSE(gs::all(a > -999000).item());
  }
}

TEST(ArrayReduce, AxesAndKeepdims) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 37, m = 1100;
  auto av = randoms(n * m, 4);
  auto a = ctx.from_vector(av, {n, m});
  auto rows = gs::sum(a, 1), cols = gs::sum(a, 0), last = gs::max(a, -1, true);
  EXPECT_EQ(rows.shape(), (gs::Dim{n}));
  EXPECT_EQ(cols.shape(), (gs::Dim{m}));
  EXPECT_EQ(last.shape(), (gs::Dim{n, 1}));
  auto rv = rows.to_vector(), cv = cols.to_vector(), lv = last.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0, mx = -1e300;
    for (int64_t j = 0; j < m; ++j) s += av[i * m + j], mx = std::max(mx, av[i * m + j]);
    ASSERT_NEAR(rv[i], s, 1e-9 * m) << i;
    ASSERT_EQ(lv[i], mx) << i;
  }
  for (int64_t j = 0; j < m; ++j) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += av[i * m + j];
    ASSERT_NEAR(cv[j], s, 1e-9 * n) << j;
  }
  auto t = ctx.from_vector(randoms(4 * 5 * 6, 5), {4, 5, 6});
  auto tv = t.to_vector();
  auto mid = gs::sum(t, 1, true).to_vector();  // (4, 1, 6)
  ASSERT_EQ(mid.size(), 24u);
  double s = 0;
  for (int j = 0; j < 5; ++j) s += tv[(2 * 5 + j) * 6 + 3];
  EXPECT_NEAR(mid[2 * 6 + 3], s, 1e-12);
  EXPECT_NEAR(gs::mean(t).item(), std::accumulate(tv.begin(), tv.end(), 0.0) / 120, 1e-12);
  EXPECT_THROW(gs::sum(t, 3), gs::Error);
  EXPECT_THROW(gs::sum(t, -4), gs::Error);
}

TEST(ArrayReduce, CumosSixteenBitExamplesAndNaN) {
  gs::Context ctx(test::quiet_config(1));
  auto h = gs::ones<gs::float16>(ctx, {40000});
  EXPECT_EQ(float(gs::sum(h).item()), 40000.0f);
  auto bf = gs::ones<gs::bfloat16>(ctx, {40000});
  EXPECT_EQ(float(gs::sum(bf).item()), 39936.0f);
  auto p = ctx.from_vector<gs::float16>({gs::float16(300.0f), gs::float16(300.0f)}, {2});
  EXPECT_TRUE(std::isinf(float(gs::prod(p).item())));  // prod does not widen
  auto f = ctx.from_vector<float>({1.0f, std::nanf(""), -3.0f}, {3});
  EXPECT_TRUE(std::isnan(gs::max(f).item()));
  EXPECT_TRUE(std::isnan(gs::min(f).item()));
  EXPECT_EQ(gs::max(gs::where(gs::isnan(f), 0.0f, f)).item(), 1.0f);
  EXPECT_DOUBLE_EQ(gs::mean(ctx.from_vector<int32_t>({1, 2, 4}, {3})).item(), 7.0 / 3.0);
  auto empty = ctx.from_vector<float>({}, {0});
  EXPECT_EQ(gs::sum(empty).item(), 0.0f);
  EXPECT_TRUE(std::isnan(gs::mean(empty).item()));
  EXPECT_THROW(gs::max(empty), gs::Error);
}

TEST(ArrayReduce, ScalarsStayOnTheDevicesInAConjugateGradientStep) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t n = 5000;
  auto rv = randoms(n, 6), pv = randoms(n, 7);
  auto r = ctx.from_vector(rv, {n}), p = ctx.from_vector(pv, {n});
  auto x = gs::zeros<double>(ctx, {n});
  {
    gs::NoSyncGuard guard;
    auto rs = gs::sum(r * r);
    auto pap = gs::sum(p * p * 2.0);
    auto alpha = rs / pap;  // 0-d, on the device
    x += p * alpha;
  }
  double rs = 0, pap = 0;
  for (int64_t i = 0; i < n; ++i) rs += rv[i] * rv[i], pap += pv[i] * pv[i] * 2;
  auto xv = x.to_vector();
  EXPECT_NEAR(xv[17], pv[17] * rs / pap, 1e-12);
}

}  // namespace
}  // namespace gridspan

namespace gridspan {
namespace {

TEST(ArrayReduce, VarianceAndStandardDeviation) {
  gs::Context ctx(test::quiet_config(2));
  auto h = ctx.from_vector<gs::float16>(
      {gs::float16(2000.0f), gs::float16(-2000.0f), gs::float16(1000.0f), gs::float16(-1000.0f)},
      {4});
  EXPECT_TRUE(std::isinf(float(gs::var(h).item())));
  EXPECT_EQ(float(gs::std(h).item()), 1581.0f);        // sqrt(2.5e6) = 1581.1 in float16
  EXPECT_EQ(float(gs::std(h, 0, 1).item()), 1826.0f);  // Cumo's stddev (ddof 1)
  EXPECT_TRUE(std::isinf(float(gs::var(h, 0, 1).item())));
  const int64_t n = 41, m = 300;
  auto av = randoms(n * m, 8);
  auto a = ctx.from_vector(av, {n, m});
  auto v1 = gs::var(a, 1, 1).to_vector();
  for (int64_t i = 0; i < n; i += 7) {
    double mean = 0, ss = 0;
    for (int64_t j = 0; j < m; ++j) mean += av[i * m + j];
    mean /= m;
    for (int64_t j = 0; j < m; ++j) ss += (av[i * m + j] - mean) * (av[i * m + j] - mean);
    ASSERT_NEAR(v1[i], ss / (m - 1), 1e-12) << i;
  }
  auto ints = ctx.from_vector<int32_t>({1, 2, 3, 4}, {4});
  EXPECT_DOUBLE_EQ(gs::var(ints).item(), 1.25);
  EXPECT_DOUBLE_EQ(gs::std(ints, 0, 0, true).to_vector()[0], std::sqrt(1.25));
}

TEST(ArrayReduce, ArgmaxAndArgminAnswerTheFirstExtremeAndTheFirstNaN) {
  for (int devices : {1, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    const int64_t n = 37, m = 515;
    std::vector<int16_t> v(n * m);
    auto g = test::rng(11);
    for (auto& x : v) x = static_cast<int16_t>(g() % 41) - 20;  // many ties
    auto a = ctx.from_vector(v, {n, m});
    const auto top = std::max_element(v.begin(), v.end()) - v.begin();
    const auto bottom = std::min_element(v.begin(), v.end()) - v.begin();
    auto am = gs::argmax(a);
    static_assert(std::is_same_v<decltype(am), gs::Array<int64_t>>);
    EXPECT_EQ(am.shape(), gs::Dim{});
    EXPECT_EQ(am.item(), top);
    EXPECT_EQ(gs::argmin(a).item(), bottom);
    auto rows = gs::argmax(a, 1).to_vector(), cols = gs::argmin(a, -2, true).to_vector();
    ASSERT_EQ(gs::argmin(a, 0, true).shape(), (gs::Dim{1, m}));
    for (int64_t i = 0; i < n; ++i) {
      auto row = v.begin() + i * m;
      ASSERT_EQ(rows[i], std::max_element(row, row + m) - row) << i;
    }
    for (int64_t j = 0; j < m; ++j) {
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i)
        if (v[i * m + j] < v[best * m + j]) best = i;
      ASSERT_EQ(cols[j], best) << j;
    }
    // An expression: argmax of -a is argmin of a.
    EXPECT_EQ(gs::argmax(-a).item(), bottom);
  }
  gs::Context ctx(test::quiet_config(2));
  const float nan = std::nanf("");
  auto f = ctx.from_vector<float>({1, 5, nan, 5, nan, -7}, {2, 3});
  EXPECT_EQ(gs::argmax(f).item(), 2);  // NumPy: the first NaN
  EXPECT_EQ(gs::argmin(f).item(), 2);
  EXPECT_EQ(gs::argmax(f, 1).to_vector(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(gs::argmin(f, 1).to_vector(), (std::vector<int64_t>{2, 1}));
  auto h = ctx.from_vector<gs::bfloat16>({gs::bfloat16(-1.0f), gs::bfloat16(3.0f)}, {2});
  EXPECT_EQ(gs::argmax(h).item(), 1);
  auto b = ctx.from_vector<bool>({false, true, true}, {3});
  EXPECT_EQ(gs::argmax(b).item(), 1);
  EXPECT_EQ(gs::argmin(b).item(), 0);
  EXPECT_EQ(gs::argmax(ctx.from_vector<double>({4.5}, {})).item(), 0);
  EXPECT_THROW(gs::argmax(f, 2), gs::Error);
  EXPECT_THROW(gs::argmax(gs::zeros<float>(ctx, {0, 3})), gs::Error);
  EXPECT_THROW(gs::argmin(gs::zeros<float>(ctx, {3, 0}), 1), gs::Error);
  EXPECT_EQ(gs::argmin(gs::zeros<float>(ctx, {3, 0}), 0).shape(), (gs::Dim{0}));
}

TEST(ArrayReduce, EveryLevelShrinksItsAxisWhateverTheChunks) {
  // Partials of one element per chunk (4096 -> ... -> 2 over two chunks) once made a level of
  // one element per group, which never ended; so did a short axis beside many columns.
  gs::Context ctx(test::quiet_config(2));
  auto g = test::rng(31);
  std::vector<int32_t> v(4096);
  for (auto& x : v) x = static_cast<int32_t>(g() % 1001) - 500;
  const int64_t want = std::accumulate(v.begin(), v.end(), int64_t(0));
  auto a = ctx.from_vector(v, {4096}, gs::dist::rows(2048));
  EXPECT_EQ(gs::sum(a).item(), want);
  auto b = ctx.from_vector(v, {4096}, gs::dist::rows(1024));
  EXPECT_EQ(gs::sum(b).item(), want);
  std::vector<int32_t> w(67 * 1030);
  for (auto& x : w) x = static_cast<int32_t>(g() % 1001) - 500;
  auto m = ctx.from_vector(w, {67, 1030});
  auto cols = gs::sum(m, 0).to_vector();
  for (int64_t j = 0; j < 1030; j += 103) {
    int64_t s = 0;
    for (int64_t i = 0; i < 67; ++i) s += w[i * 1030 + j];
    ASSERT_EQ(cols[j], s) << j;
  }
}

TEST(ArrayReduce, ColumnChunksThatNoBlockDividesStillCutTheOutput) {
  // Columns cut at 15 of 18: the block along them once ignored the cut, so two output chunks
  // fell into one block ("does not cut the grid into disjoint superblocks"; found by the
  // differential test).
  auto g = test::rng(32);
  std::vector<int32_t> w(2 * 18);
  for (auto& x : w) x = static_cast<int32_t>(g() % 1001) - 500;
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    auto m = ctx.from_vector(w, {2, 18}, gs::dist::columns(15));
    auto cols = gs::sum(m, 0).to_vector();
    auto kept = gs::sum(m, 0, true).to_vector();
    ASSERT_EQ(cols.size(), 18u);
    for (int64_t j = 0; j < 18; ++j) {
      ASSERT_EQ(cols[j], w[j] + w[18 + j]) << devices << " " << j;
      ASSERT_EQ(kept[j], cols[j]) << devices << " " << j;
    }
    auto rows = gs::max(m, 1).to_vector();
    for (int64_t i = 0; i < 2; ++i)
      ASSERT_EQ(rows[i], *std::max_element(w.begin() + 18 * i, w.begin() + 18 * (i + 1)));
  }
}

TEST(ArrayReduce, UnderMpirunArraysSpanEveryRank) {
  // ctest runs this file under mpirun on 2 and 3 ranks (mpi.array.np*): one device per rank,
  // rows spread over all of them, results exact as on one process.
  gs::Context ctx(test::quiet_config(1));
  const int ranks = gs::process_count();
  ASSERT_EQ(static_cast<int>(ctx.ranks().size()), ranks);
  ASSERT_EQ(ctx.device_count(), ranks);
  const int64_t rows = 301, cols = 67;
  auto g = test::rng(33);
  std::vector<int32_t> v(rows * cols);
  for (auto& x : v) x = static_cast<int32_t>(g() % 2001) - 1000;
  auto m = ctx.from_vector(v, {rows, cols}, gs::dist::rows((rows + ranks - 1) / ranks));
  auto doubled = (m * 2 + 1).to_vector();
  const auto by_col = gs::sum(m, 0).to_vector();
  const auto by_row = gs::max(m, 1).to_vector();
  int64_t total = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int32_t x = v[i * cols + j];
      ASSERT_EQ(doubled[i * cols + j], 2 * x + 1);
      total += x;
    }
  EXPECT_EQ(gs::sum(m).item(), total);
  for (int64_t j = 0; j < cols; ++j) {
    int64_t s = 0;
    for (int64_t i = 0; i < rows; ++i) s += v[i * cols + j];
    ASSERT_EQ(by_col[j], s) << j;
  }
  for (int64_t i = 0; i < rows; ++i)
    ASSERT_EQ(by_row[i], *std::max_element(v.begin() + i * cols, v.begin() + (i + 1) * cols));
}

TEST(ArrayReduce, OnlyTheFirstLevelMapsTheInput) {
  // Partials in the input's dtype and rank once took the first level's compiled kernel, so
  // count_nonzero counted the nonzero partials and a ReductionKernel mapped them again
  // (found by the differential test: int64 (59, 11) in tiles of (23, 10)).
  auto g = test::rng(34);
  std::vector<int64_t> v(59 * 11);
  for (auto& x : v) x = g() % 5 == 0 ? 0 : static_cast<int64_t>(g() % 1999) - 999;
  std::vector<double> d(v.begin(), v.end());
  int64_t nonzero = 0;
  double squares = 0;
  for (int64_t x : v) nonzero += x != 0, squares += double(x) * double(x);
  gs::ReductionKernel sum_squares("T x", "T y", "x * x", "a + b", "y = a", "0", "sum_squares");
  for (int devices : {1, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    auto a = ctx.from_vector(v, {59, 11}, gs::dist::tiles({23, 10}));
    EXPECT_EQ(gs::count_nonzero(a).item(), nonzero) << devices;
    auto f = ctx.from_vector(d, {59, 11}, gs::dist::tiles({23, 10}));
    gs::Array<double> got = sum_squares(f);
    EXPECT_EQ(got.item(), squares) << devices;  // integers: exact in double
  }
}

TEST(ArrayReduce, NarrowIntegersHaveTheirOwnExtremes) {
  // ~uint8_t(0) is the int -1: min started from -1 and max from 0 for int8 and int16, and a
  // float past their range converted to -1 (found by the differential test).
  gs::Context ctx(test::quiet_config(1));
  EXPECT_EQ(gs::min(ctx.from_vector<int8_t>({5, 7, 9}, {3})).item(), 5);
  EXPECT_EQ(gs::max(ctx.from_vector<int16_t>({-5, -7, -9}, {3})).item(), -5);
  EXPECT_EQ(gs::max(ctx.from_vector<int8_t>({-128, -100}, {2})).item(), -100);
  auto f = ctx.from_vector<float>({1000.0f, -1000.0f, 1e5f}, {3});
  EXPECT_EQ(f.astype<int8_t>().to_vector(), (std::vector<int8_t>{127, -128, 127}));
  EXPECT_EQ(f.astype<int16_t>().to_vector(), (std::vector<int16_t>{1000, -1000, 32767}));
}

}  // namespace
}  // namespace gridspan
