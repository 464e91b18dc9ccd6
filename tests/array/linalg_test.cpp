// Matrix products on BLAS per chunk: values against a host reference on 1 to 3 devices,
// transposed views passed by flag (no copy: one launch), Cumo's 16-bit examples, gemm's
// alpha, beta and c, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "array/rows.hpp"
#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

static_assert(std::is_same_v<decltype(gs::matmul(std::declval<gs::Array<float>>(),
                                                 std::declval<gs::Array<double>>())),
                             gs::Array<double>>);

// Row-major (m x k) values.
std::vector<double> values(int64_t n, uint64_t salt) {
  auto g = test::rng(salt);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}
template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
// alpha a b + beta c, a (m x k), b (k x n), in double.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                            int64_t k, int64_t n, double alpha = 1, double beta = 0,
                            const std::vector<double>& c = {}) {
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * b[l * n + j];
      out[i * n + j] = alpha * s + (c.empty() ? 0 : beta * c[i * n + j]);
    }
  return out;
}
std::vector<double> transposed(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}
template <class T>
void expect_near(const std::vector<T>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol) << "element " << i;
}

template <class T>
void check_products(int devices, double tol) {
  gs::Context ctx(test::quiet_config(devices));
  for (auto [m, k, n] : {std::array<int64_t, 3>{37, 19, 23}, {2, 5, 3}, {300, 64, 40}}) {
    SCOPED_TRACE(fmt::format("{} devices, ({} x {}) x ({} x {})", devices, m, k, k, n));
    const auto av = values(m * k, 90 + m), bv = values(k * n, 91 + n);
    auto a = ctx.from_vector(as<T>(av), {m, k}), b = ctx.from_vector(as<T>(bv), {k, n});
    const auto before = ctx.stats().launches;
    auto c = gs::matmul(a, b);
    EXPECT_EQ(ctx.stats().launches, before + 1);
    EXPECT_EQ(c.shape(), (Dim{m, n}));
    expect_near(c.to_vector(), product(av, bv, m, k, n), tol);
  }
}

TEST(ArrayMatmul, MatchesTheHostOnOneToThreeDevices) {
  std::printf("gridspan test seed: %llu\n", static_cast<unsigned long long>(test::base_seed()));
  for (int devices : {1, 3}) {
    check_products<float>(devices, 1e-5);
    check_products<double>(devices, 1e-12);
  }
}

// A transposed view goes to BLAS with its flag set: one launch, no copy.
TEST(ArrayMatmul, TransposedOperandsAreNotCopied) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t m = 33, k = 17, n = 21;
  const auto xv = values(k * m, 92), yv = values(n * k, 93);  // x (k x m), y (n x k)
  auto x = ctx.from_vector(xv, {k, m}), y = ctx.from_vector(yv, {n, k});
  const auto a = transposed(xv, k, m), b = transposed(yv, n, k);
  auto before = ctx.stats().launches;
  auto c = gs::matmul(x.transpose(), y.transpose());
  EXPECT_EQ(ctx.stats().launches, before + 1);
  expect_near(c.to_vector(), product(a, b, m, k, n), 1e-12);
  auto bv = values(k * n, 94);
  auto bb = ctx.from_vector(bv, {k, n});
  before = ctx.stats().launches;
  auto d = gs::matmul(x.transpose(), bb);
  EXPECT_EQ(ctx.stats().launches, before + 1);
  expect_near(d.to_vector(), product(a, bv, m, k, n), 1e-12);
  // Any other view, and an expression, is made an array first: one launch more.
  before = ctx.stats().launches;
  auto e = gs::matmul(x.transpose() * 2.0, bb);
  EXPECT_EQ(ctx.stats().launches, before + 2);
  expect_near(e.to_vector(), product(a, bv, m, k, n, 2.0), 1e-12);
}

// Cumo's half-precision example: the product's true value (102400) passes float16's range,
// so it is stored as inf; scaled by gemm's alpha first it is kept (102.375). bfloat16 keeps
// float32's range: 102400 exactly.
TEST(ArrayMatmul, SixteenBitProductsAccumulateInFloat32AndRoundOnce) {
  gs::Context ctx(test::quiet_config(1));
  auto a = gs::ones<gs::float16>(ctx, {1, 1024});
  auto b = gs::full<gs::float16>(ctx, {1024, 1}, gs::float16(100.0f));
  EXPECT_TRUE(std::isinf(float(gs::matmul(a, b).to_vector()[0])));
  EXPECT_EQ(float(gs::gemm(a, b, 0.001).to_vector()[0]), 102.375f);
  auto ab = gs::ones<gs::bfloat16>(ctx, {1, 1024});
  auto bb = gs::full<gs::bfloat16>(ctx, {1024, 1}, gs::bfloat16(100.0f));
  EXPECT_EQ(float(gs::matmul(ab, bb).to_vector()[0]), 102400.0f);
  // Random 16-bit operands: within the 16-bit rounding of the float32 product.
  const int64_t m = 20, k = 40, n = 12;
  const auto av = values(m * k, 95), bv = values(k * n, 96);
  std::vector<double> ar, br;
  for (double v : av) ar.push_back(float(gs::float16(float(v))));
  for (double v : bv) br.push_back(float(gs::float16(float(v))));
  auto ha = ctx.from_vector(as<gs::float16>(ar), {m, k}),
       hb = ctx.from_vector(as<gs::float16>(br), {k, n});
  auto want = product(ar, br, m, k, n);
  auto got = gs::matmul(ha, hb).to_vector();
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(float(got[i]), want[i], std::abs(want[i]) / 1024 + 1e-4) << i;
}

TEST(ArrayMatmul, GemmScalesAndAddsIntoANewArray) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t m = 25, k = 9, n = 14;
  const auto av = values(m * k, 97), bv = values(k * n, 98), cv = values(m * n, 99);
  auto a = ctx.from_vector(av, {m, k}), b = ctx.from_vector(bv, {k, n}),
       c = ctx.from_vector(cv, {m, n});
  auto d = gs::gemm(a, b, 0.5, 2.0, c);
  expect_near(d.to_vector(), product(av, bv, m, k, n, 0.5, 2.0, cv), 1e-12);
  expect_near(c.to_vector(), cv, 0);  // c is not written
  // An empty inner dimension: beta c, or zeros.
  auto e0 = gs::zeros<double>(ctx, {m, 0}), e1 = gs::zeros<double>(ctx, {0, n});
  expect_near(gs::matmul(e0, e1).to_vector(), std::vector<double>(m * n, 0.0), 0);
  auto twice = cv;
  for (double& v : twice) v *= 2;
  expect_near(gs::gemm(e0, e1, 1.0, 2.0, c).to_vector(), twice, 1e-15);
}

// NumPy's rules for vectors: a 1-D a is a row, a 1-D b a column, and their axis is dropped;
// dot is matmul for these ranks; inner sums over both last axes (b's transpose by flag).
TEST(ArrayMatmul, VectorsDotAndInner) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t m = 7, k = 11, n = 5;
  const auto av = values(m * k, 100), bv = values(k * n, 101), u = values(k, 102),
             w = values(k, 103), ev = values(n * k, 104);
  auto a = ctx.from_vector(av, {m, k}), b = ctx.from_vector(bv, {k, n});
  auto x = ctx.from_vector(u, {k}), y = ctx.from_vector(w, {k});
  auto e = ctx.from_vector(ev, {n, k});
  auto ax = gs::matmul(a, x);
  EXPECT_EQ(ax.shape(), Dim{m});
  expect_near(ax.to_vector(), product(av, u, m, k, 1), 1e-12);
  auto xb = gs::dot(x, b);
  EXPECT_EQ(xb.shape(), Dim{n});
  expect_near(xb.to_vector(), product(u, bv, 1, k, n), 1e-12);
  auto xy = gs::dot(x, y);
  EXPECT_EQ(xy.shape(), Dim());
  EXPECT_NEAR(xy.item(), product(u, w, 1, k, 1)[0], 1e-12);
  auto ae = gs::inner(a, e);  // a e^T: (m, n)
  EXPECT_EQ(ae.shape(), (Dim{m, n}));
  expect_near(ae.to_vector(), product(av, transposed(ev, n, k), m, k, n), 1e-12);
  EXPECT_NEAR(gs::inner(x, y).item(), xy.item(), 1e-15);
  expect_near(gs::inner(x, e).to_vector(), product(u, transposed(ev, n, k), 1, k, n), 1e-12);
}

// Batched products: 3-D operands, a shared matrix or a batch of one broadcast over the
// other's batches, the batches spread over the devices.
TEST(ArrayMatmul, BatchesBroadcastLikeNumPy) {
  gs::Context ctx(test::quiet_config(2));
  const int64_t m = 6, k = 5, n = 4, batches = 3;
  const auto av = values(batches * m * k, 105), bv = values(batches * k * n, 106);
  const auto a2 = values(m * k, 107), b2 = values(k * n, 108);
  auto a = ctx.from_vector(av, {batches, m, k}), b = ctx.from_vector(bv, {batches, k, n});
  auto one_b = ctx.from_vector(b2, {1, k, n});
  auto mat_a = ctx.from_vector(a2, {m, k}), mat_b = ctx.from_vector(b2, {k, n});
  auto slice = [](const std::vector<double>& v, int64_t g, int64_t size) {
    return std::vector<double>(v.begin() + g * size, v.begin() + (g + 1) * size);
  };
  // The product of batch g of each operand (size 0: the same matrix for every batch).
  auto expect = [&](const gs::Array<double>& c, const std::vector<double>& x, int64_t xs,
                    const std::vector<double>& y, int64_t ys) {
    EXPECT_EQ(c.shape(), (Dim{batches, m, n}));
    const auto got = c.to_vector();
    for (int64_t g = 0; g < batches; ++g) {
      auto want = product(xs ? slice(x, g, xs) : x, ys ? slice(y, g, ys) : y, m, k, n);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_NEAR(got[g * m * n + i], want[i], 1e-12) << "batch " << g << ", " << i;
    }
  };
  const auto before = ctx.stats().launches;
  auto c1 = gs::matmul(a, b);
  EXPECT_EQ(ctx.stats().launches, before + 1);
  expect(c1, av, m * k, bv, k * n);
  expect(gs::matmul(a, mat_b), av, m * k, b2, 0);
  expect(gs::matmul(mat_a, b), a2, 0, bv, k * n);
  expect(gs::matmul(a, one_b), av, m * k, b2, 0);
  test::expect_error(
      [&] {
        gs::matmul(a, ctx.from_vector(values(4 * k * n, 109), {4, k, n}));
      },
      "the batch axes cannot broadcast (3 and 4)");
  test::expect_error(
      [&] {
        gs::matmul(a, gs::ones<double>(ctx, {batches, k + 1, n}));
      },
      "inner dimensions differ (5 and 6)");
  auto empty = gs::matmul(gs::zeros<double>(ctx, {batches, m, 0}), gs::zeros<double>(ctx, {0, n}));
  for (double v : empty.to_vector()) EXPECT_EQ(v, 0.0);
}

// Integer and bool matrices as NumPy multiplies them: in their own dtype, wrapping (int8
// sums past 127 wrap), bool as any of the ands; 1-D operands and inner too; 1 and 3 devices.
TEST(ArrayMatmul, IntegersAndBoolsAsNumPy) {
  for (int devices : {1, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    const int64_t m = 23, k = 41, n = 17;
    auto g = test::rng(103);
    std::uniform_int_distribution<int> d(-1000, 1000);
    std::vector<int32_t> av(m * k), bv(k * n);
    for (auto& x : av) x = d(g);
    for (auto& x : bv) x = d(g);
    auto a = ctx.from_vector(av, {m, k}), b = ctx.from_vector(bv, {k, n});
    std::vector<int64_t> want(m * n, 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l) want[i * n + j] += int64_t(av[i * k + l]) * bv[l * n + j];
    const auto got = gs::matmul(a, b).to_vector();
    static_assert(std::is_same_v<decltype(gs::matmul(a, b)), gs::Array<int32_t>>);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], int32_t(want[i])) << i;
    auto wide = gs::matmul(a.astype<int64_t>(), b).to_vector();  // promoted to int64
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(wide[i], want[i]);
    // int8: 100 * 2 + 100 * 2 = 400 wraps to -112, as NumPy's int8 matmul gives.
    auto small = gs::full<int8_t>(ctx, {1, 2}, 100), two = gs::full<int8_t>(ctx, {2, 1}, 2);
    EXPECT_EQ(gs::matmul(small, two).to_vector(), std::vector<int8_t>{-112});
    auto v = ctx.from_vector(std::vector<int32_t>(av.begin(), av.begin() + k), {k});
    const auto row = gs::dot(v, b).to_vector();  // a vector times a matrix
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t l = 0; l < k; ++l) s += int64_t(av[l]) * bv[l * n + j];
      ASSERT_EQ(row[j], int32_t(s));
    }
    EXPECT_EQ(gs::inner(v, v).item(), gs::matmul(v, v).item());
    auto p = ctx.from_vector(std::vector<bool>{true, false, false, false, true, false}, {2, 3});
    auto q = ctx.from_vector(std::vector<bool>{false, true, true, false, false, false}, {3, 2});
    EXPECT_EQ(gs::matmul(p, q).to_vector(), (std::vector<bool>{false, true, true, false}));
    EXPECT_EQ(gs::matmul(ctx.from_vector(std::vector<int32_t>{}, {2, 0}),
                         ctx.from_vector(std::vector<int32_t>{}, {0, 3}))
                  .to_vector(),
              std::vector<int32_t>(6, 0));
  }
}

// SUMMA: C in tiles over the devices, k in panels (a launch each), with transposed operands
// by flag and gemm's c; the same values as the host within rounding, on 1 to 4 devices.
TEST(ArrayMatmul, TilesAndPanelsMatchTheHost) {
  struct Reset {
    ~Reset() { array::set_summa_panels_for_tests(0); }
  } reset;
  for (int panels : {1, 3}) {
    array::set_summa_panels_for_tests(panels);
    for (int devices : {1, 3, 4}) {
      gs::Context ctx(test::quiet_config(devices));
      for (auto [m, k, n] : {std::array<int64_t, 3>{37, 19, 23}, {64, 50, 70}, {5, 2, 9}}) {
        SCOPED_TRACE(fmt::format("{} panels, {} devices, ({} x {}) x ({} x {})", panels, devices, m,
                                 k, k, n));
        const auto av = values(m * k, 97 + m), bv = values(k * n, 98 + n), cv = values(m * n, 99);
        auto a = ctx.from_vector(av, {m, k}), b = ctx.from_vector(bv, {k, n});
        const auto before = ctx.stats().launches;
        expect_near(gs::matmul(a, b).to_vector(), product(av, bv, m, k, n), 1e-12);
        EXPECT_EQ(ctx.stats().launches, before + uint64_t(std::min<int64_t>(panels, k)));
        auto at = ctx.from_vector(transposed(av, m, k), {k, m});
        auto bt = ctx.from_vector(transposed(bv, k, n), {n, k});
        expect_near(gs::matmul(gs::transpose(at, {1, 0}), gs::transpose(bt, {1, 0})).to_vector(),
                    product(av, bv, m, k, n), 1e-12);
        auto c = ctx.from_vector(cv, {m, n});
        expect_near(gs::gemm(a, b, 0.5, -2.0, c).to_vector(),
                    product(av, bv, m, k, n, 0.5, -2.0, cv), 1e-12);
        expect_near(gs::matmul(a.astype<float>(), b.astype<float>()).to_vector(),
                    product(av, bv, m, k, n), 1e-5);
      }
    }
  }
}

// The library takes tiles by itself once B is more than a quarter of a device's budget.
TEST(ArrayMatmul, ALargeBGoesOverTiles) {
  gs::Config c = test::quiet_config(4);
  c.device_memory = 256 << 10;
  gs::Context ctx(c);
  const int64_t m = 96, k = 200, n = 160;  // B: 256,000 bytes of doubles
  const auto av = values(m * k, 101), bv = values(k * n, 102);
  auto a = ctx.from_vector(av, {m, k}), b = ctx.from_vector(bv, {k, n});
  const auto before = ctx.stats().launches;
  auto p = gs::matmul(a, b);
  EXPECT_GT(ctx.stats().launches, before + 1) << "a launch per panel of k";
  bool cut_columns = false;
  for (const ChunkSpec& ch : detail::array_chunks(p.handle())) cut_columns |= ch.owned.lo[1] > 0;
  EXPECT_TRUE(cut_columns) << "C in tiles, not rows";
  expect_near(p.to_vector(), product(av, bv, m, k, n), 1e-12);
}

// float32 products use TF32 tensor cores only when GRIDSPAN_ALLOW_TF32 says so: off, within
// float32's rounding of a double reference; on (cuBLAS), about TF32's 2^-11 away; the cpu's
// BLAS has no TF32 and answers the same either way; doubles are the same either way.
TEST(ArrayMatmul, Tf32OnlyWhenAllowed) {
  const int64_t m = 256, k = 384, n = 320;
  const auto av = values(m * k, 95), bv = values(k * n, 96);
  const auto want = product(av, bv, m, k, n);
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  std::vector<float> f[2];
  std::vector<double> d[2];
  std::string backend;
  for (int allow : {0, 1}) {
    gs::Config c = test::quiet_config(1);
    c.allow_tf32 = allow;
    gs::Context ctx(c);
    backend = ctx.backend_name();
    f[allow] =
        gs::matmul(ctx.from_vector(as<float>(av), {m, k}), ctx.from_vector(as<float>(bv), {k, n}))
            .to_vector();
    d[allow] = gs::matmul(ctx.from_vector(av, {m, k}), ctx.from_vector(bv, {k, n})).to_vector();
  }
  auto worst = [&](const std::vector<float>& got) {
    double e = 0;
    for (std::size_t i = 0; i < want.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]));
    return e / scale;
  };
  EXPECT_LT(worst(f[0]), 2e-6) << "TF32 off: float32's rounding only";
  if (backend == "cuda") {
    EXPECT_GT(worst(f[1]), 2e-5) << "TF32 on: the inputs rounded to 10 bits of mantissa";
    EXPECT_LT(worst(f[1]), 5e-3);
  } else {
    EXPECT_EQ(f[0], f[1]) << "the cpu's BLAS has no TF32";
  }
  EXPECT_EQ(d[0], d[1]) << "doubles do not use TF32";
}

TEST(ArrayMatmul, BadOperandsAreErrorsThatSayWhy) {
  gs::Context ctx(test::quiet_config(1));
  auto a = gs::ones<float>(ctx, {3, 4});
  test::expect_error(
      [&] {
        gs::matmul(a, gs::ones<float>(ctx, {5, 2}));
      },
      "inner dimensions differ (4 and 5)");
  test::expect_error(
      [&] {
        gs::matmul(gs::ones<float>(ctx, {4}), gs::ones<float>(ctx, {2, 4, 3}));
      },
      "a vector with a batch of matrices is not yet");
  test::expect_error([&] { gs::dot(a, gs::ones<float>(ctx, {})); }, "dot of shapes");
  test::expect_error([&] { gs::matmul(gs::ones<float>(ctx, {5}), a); }, "differ (5 and 3)");
  test::expect_error(
      [&] {
        gs::matmul(gs::ones<int32_t>(ctx, {2, 3, 4}), gs::ones<int32_t>(ctx, {4, 2}));
      },
      "batched integer products are not supported yet");
  test::expect_error(
      [&] {
        gs::gemm(gs::ones<int8_t>(ctx, {3, 4}), gs::ones<int8_t>(ctx, {4, 2}), 2.0);
      },
      "gemm scales in floating point");
  test::expect_error(
      [&] {
        gs::gemm(a, gs::ones<float>(ctx, {4, 2}), 1.0, 1.0, gs::ones<float>(ctx, {2, 3}));
      },
      "gemm's c is float32 of shape {2, 3}");
}

}  // namespace
}  // namespace gridspan
