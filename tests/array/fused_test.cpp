// Cumo's fused operations: the activations (gelu, gelu_tanh, silu, sigmoid, softplus) against
// a host reference and at the edges the README names, each one launch.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "array/rows.hpp"
#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/random.hpp"
#ifdef GRIDSPAN_HAVE_CUDA
#include "support/nvrtc.hpp"
#endif

namespace gridspan {
namespace {

namespace gs = gridspan;

constexpr double kInf = std::numeric_limits<double>::infinity();

static_assert(
    std::is_same_v<decltype(gs::sigmoid(std::declval<gs::Array<int32_t>>())), gs::Array<double>>);
static_assert(std::is_same_v<decltype(gs::silu(std::declval<gs::Array<gs::bfloat16>>())),
                             gs::Array<gs::bfloat16>>);

// `f` of the values `xs` (converted to T) on one device, as doubles.
template <class T, class F>
std::vector<double> apply(gs::Context& ctx, const std::vector<double>& xs, F&& f) {
  std::vector<T> v;
  for (double x : xs) v.push_back(static_cast<T>(x));
  auto a = ctx.from_vector(v, {static_cast<int64_t>(v.size())});
  std::vector<double> out;
  for (auto y : f(a).to_vector()) out.push_back(static_cast<double>(y));
  return out;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}
double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double softplus_ref(double x) {
  return std::log1p(std::exp(x));
}

// How near each type's answers must be: `rel` of the value, plus `abs` times (1 + |x|) for
// the cancellation in 1 + erf and 1 + tanh at a negative x (the function's own error, times
// x / 2) and in softplus's 1 + exp(x); softplus in double takes single precision's exp.
struct Tolerance {
  double rel, abs, softplus_abs;
};

// Random values in [-8, 8] (representable in T), each activation against its double
// reference; 16-bit floats compute in float and round once.
template <class T>
void check_activations(Tolerance tol) {
  gs::Context ctx(test::quiet_config(2));
  auto g = test::rng(61);
  std::uniform_real_distribution<double> d(-8.0, 8.0);
  std::vector<double> xs(3000);
  for (auto& x : xs) x = static_cast<double>(static_cast<T>(d(g)));
  const std::vector<std::pair<const char*, double (*)(double)>> refs = {
      {"gelu", gelu_ref},
      {"gelu_tanh", gelu_tanh_ref},
      {"silu", silu_ref},
      {"sigmoid", sigmoid_ref},
      {"softplus", softplus_ref}};
  const std::vector<std::function<gs::Array<T>(const gs::Array<T>&)>> fns = {
      [](const gs::Array<T>& a) { return gs::gelu(a); },
      [](const gs::Array<T>& a) { return gs::gelu_tanh(a); },
      [](const gs::Array<T>& a) { return gs::silu(a); },
      [](const gs::Array<T>& a) { return gs::sigmoid(a); },
      [](const gs::Array<T>& a) { return gs::softplus(a); }};
  for (std::size_t f = 0; f < fns.size(); ++f) {
    const auto before = ctx.stats().launches;
    auto got = apply<T>(ctx, xs, fns[f]);
    EXPECT_EQ(ctx.stats().launches, before + 1) << refs[f].first;  // a write is no launch
    const double abs = f == 4 ? tol.softplus_abs : tol.abs;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = refs[f].second(xs[i]);
      ASSERT_NEAR(got[i], want, tol.rel * std::abs(want) + abs * (1 + std::abs(xs[i])))
          << refs[f].first << "(" << xs[i] << ")";
    }
  }
}

TEST(ArrayActivations, MatchTheirDefinitionsInEveryFloatType) {
  std::printf("gridspan test seed: %llu\n", static_cast<unsigned long long>(test::base_seed()));
  check_activations<float>({5e-7, 1.2e-7, 1.2e-7});
  check_activations<double>({1e-14, 1e-15, 1.2e-7});
  check_activations<gs::float16>({1.0 / 1024, 6e-8, 6e-8});
  check_activations<gs::bfloat16>({1.0 / 128, 1.2e-7, 1.2e-7});
}

// The README's "at most 4.1e-4" is the largest difference at whole x (4.12e-4 at x = 3); between
// them it reaches 4.73e-4 (x = 2.70), as the definitions do in exact arithmetic.
TEST(ArrayActivations, GeluSpellingsDifferByAtMostFourTenThousandthsAtWholeX) {
  gs::Context ctx(test::quiet_config(1));
  std::vector<double> xs;
  for (double x = -10; x <= 10; x += 1.0 / 256) xs.push_back(x);
  auto erf_form = apply<double>(ctx, xs, [](const auto& a) { return gs::gelu(a); });
  auto tanh_form = apply<double>(ctx, xs, [](const auto& a) { return gs::gelu_tanh(a); });
  double most = 0, most_whole = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double diff = std::abs(erf_form[i] - tanh_form[i]);
    most = std::max(most, diff);
    if (xs[i] == std::round(xs[i])) most_whole = std::max(most_whole, diff);
  }
  EXPECT_NEAR(most_whole, 4.123e-4, 1e-7);
  EXPECT_NEAR(most, 4.732e-4, 1e-6);
  // The edges follow PyTorch: a large negative x answers 0, -inf NaN, +inf inf.
  for (auto fn : {0, 1}) {
    auto got = apply<float>(ctx, {-30.0, -kInf, kInf},
                            [&](const auto& a) { return fn ? gs::gelu_tanh(a) : gs::gelu(a); });
    EXPECT_EQ(got[0], 0.0) << fn;
    EXPECT_TRUE(std::isnan(got[1])) << fn;
    EXPECT_EQ(got[2], kInf) << fn;
  }
}

TEST(ArrayActivations, SiluIsOneDivisionWithTorchsEdges) {
  gs::Context ctx(test::quiet_config(1));
  auto g = test::rng(62);
  std::uniform_real_distribution<double> d(-20.0, 20.0);
  std::vector<double> xs(2000);
  for (auto& x : xs) x = static_cast<float>(d(g));
  auto silu = apply<float>(ctx, xs, [](const auto& a) { return gs::silu(a); });
  auto written = apply<float>(ctx, xs, [](const auto& a) { return a / (1.0f + gs::exp(-a)); });
  for (std::size_t i = 0; i < xs.size(); ++i)
    ASSERT_LE(std::abs(silu[i] - written[i]),
              std::nextafter(static_cast<float>(std::abs(written[i])), INFINITY) -
                  static_cast<float>(std::abs(written[i])))
        << xs[i];
  auto edges = apply<float>(ctx, {-kInf, -0.0, 0.0, -88.0, -89.0},
                            [](const auto& a) { return gs::silu(a); });
  EXPECT_TRUE(std::isnan(edges[0]));
  EXPECT_TRUE(edges[1] == 0.0 && std::signbit(edges[1]));
  EXPECT_TRUE(edges[2] == 0.0 && !std::signbit(edges[2]));
  EXPECT_LT(edges[3], 0.0);                                // still a number at -88
  EXPECT_TRUE(edges[4] == 0.0 && std::signbit(edges[4]));  // exp(89) overflows float
  auto bf = apply<gs::bfloat16>(ctx, {-88.0, -89.0}, [](const auto& a) { return gs::silu(a); });
  EXPECT_LT(bf[0], 0.0);
  EXPECT_EQ(bf[1], 0.0);
  auto half = apply<gs::float16>(ctx, {-20.0, -21.0}, [](const auto& a) { return gs::silu(a); });
  EXPECT_LT(half[0], 0.0);  // rounds to the smallest subnormal
  EXPECT_EQ(half[1], 0.0);  // under half of it: the round to half gets to zero first
  auto dbl = apply<double>(ctx, {-700.0}, [](const auto& a) { return gs::silu(a); });
  EXPECT_LT(dbl[0], 0.0);
}

TEST(ArrayActivations, SigmoidKeepsTheExponentsArgumentNegative) {
  gs::Context ctx(test::quiet_config(1));
  auto far = apply<float>(ctx, {-100.0}, [](const auto& a) { return gs::sigmoid(a); });
  EXPECT_NEAR(far[0], 3.783506e-44, 1.5e-45);  // 27 subnormal steps, give or take one
  EXPECT_GT(far[0], 0.0);
  auto written =
      apply<float>(ctx, {-100.0}, [](const auto& a) { return 1.0f / (1.0f + gs::exp(-a)); });
  EXPECT_EQ(written[0], 0.0);
  // Where each type reaches zero (Cumo's table).
  auto f32 = apply<float>(ctx, {-103.0, -104.0}, [](const auto& a) { return gs::sigmoid(a); });
  EXPECT_GT(f32[0], 0.0);
  EXPECT_EQ(f32[1], 0.0);
  auto half = apply<gs::float16>(ctx, {-17.0, -17.5}, [](const auto& a) { return gs::sigmoid(a); });
  EXPECT_GT(half[0], 0.0);
  EXPECT_EQ(half[1], 0.0);
  auto bf = apply<gs::bfloat16>(ctx, {-92.0, -93.0}, [](const auto& a) { return gs::sigmoid(a); });
  EXPECT_GT(bf[0], 0.0);
  EXPECT_EQ(bf[1], 0.0);
  // A non-negative x: the plain quotient, bit for bit.
  auto g = test::rng(63);
  std::uniform_real_distribution<double> d(0.0, 30.0);
  std::vector<double> xs(2000);
  for (auto& x : xs) x = static_cast<float>(d(g));
  xs[0] = 0.0;
  auto got = apply<float>(ctx, xs, [](const auto& a) { return gs::sigmoid(a); });
  auto plain = apply<float>(ctx, xs, [](const auto& a) { return 1.0f / (1.0f + gs::exp(-a)); });
  EXPECT_EQ(got, plain);
  EXPECT_EQ(got[0], 0.5);
  auto nan = apply<float>(ctx, {std::nan("")}, [](const auto& a) { return gs::sigmoid(a); });
  EXPECT_TRUE(std::isnan(nan[0]));
}

TEST(ArrayActivations, SoftplusTakesTheSumBeforeTheLogarithm) {
  gs::Context ctx(test::quiet_config(1));
  auto half = apply<gs::float16>(ctx, {22.26}, [](const auto& a) { return gs::softplus(a); });
  EXPECT_EQ(half[0], 22.265625);
  auto written =
      apply<gs::float16>(ctx, {22.26}, [](const auto& a) { return gs::log(1.0 + gs::exp(a)); });
  EXPECT_EQ(written[0], kInf);
  auto f32 = apply<float>(ctx, {-17.0, -16.0, 100.0, -kInf, kInf, std::nan("")},
                          [](const auto& a) { return gs::softplus(a); });
  EXPECT_EQ(f32[0], 0.0);  // 4.1e-8 is under half float's epsilon: the sum drops it
  EXPECT_NEAR(f32[1], 1.125e-7, 0.07 * 1.125e-7);  // within 6% of the value, 5.9% off
  EXPECT_EQ(f32[2], 100.0);                        // exp overflows: x itself
  EXPECT_EQ(f32[3], 0.0);
  EXPECT_EQ(f32[4], kInf);
  EXPECT_TRUE(std::isnan(f32[5]));
  auto f64 =
      apply<double>(ctx, {-37.0, -36.0, 100.0, 2.0}, [](const auto& a) { return gs::softplus(a); });
  EXPECT_EQ(f64[0], 0.0);
  EXPECT_GT(f64[1], 0.0);
  EXPECT_EQ(f64[2], 100.0);
  EXPECT_NEAR(f64[3], softplus_ref(2.0), 1e-7);  // single precision's exp
}

TEST(ArrayActivations, FuseWithWhatSurroundsThem) {
  gs::Context ctx(test::quiet_config(2));
  auto g = test::rng(64);
  const int64_t n = 4000;
  auto xv = test::random_vector<float>(n, g);
  auto x = ctx.from_vector(xv, {n});
  const auto before = ctx.stats().launches;
  auto y = gs::silu(x) * 2.0f + gs::sigmoid(x) - gs::gelu_tanh(x);
  auto got = y.to_vector();
  EXPECT_EQ(ctx.stats().launches, before + 1);
  for (int64_t i = 0; i < n; ++i) {
    const double want = silu_ref(xv[i]) * 2 + sigmoid_ref(xv[i]) - gelu_tanh_ref(xv[i]);
    ASSERT_NEAR(got[i], want, 2e-6) << i;
  }
}

// ---- row operations ------------------------------------------------------------------------

namespace rowref {

// Per row of `x` (rows of length L), in double.
std::vector<double> softmax(const std::vector<double>& x, int64_t L) {
  std::vector<double> out(x.size());
  for (std::size_t r = 0; r < x.size() / L; ++r) {
    double m = -kInf, s = 0;
    for (int64_t j = 0; j < L; ++j) m = std::max(m, x[r * L + j]);
    for (int64_t j = 0; j < L; ++j) s += std::exp(x[r * L + j] - m);
    for (int64_t j = 0; j < L; ++j) out[r * L + j] = std::exp(x[r * L + j] - m) / s;
  }
  return out;
}
std::vector<double> layer_norm(const std::vector<double>& x, int64_t L,
                               const std::vector<double>& g, const std::vector<double>& b,
                               double eps) {
  std::vector<double> out(x.size());
  for (std::size_t r = 0; r < x.size() / L; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < L; ++j) mean += x[r * L + j] / L;
    for (int64_t j = 0; j < L; ++j) var += (x[r * L + j] - mean) * (x[r * L + j] - mean) / L;
    for (int64_t j = 0; j < L; ++j)
      out[r * L + j] = (x[r * L + j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
  }
  return out;
}
std::vector<double> rms_norm(const std::vector<double>& x, int64_t L, const std::vector<double>& g,
                             double eps) {
  std::vector<double> out(x.size());
  for (std::size_t r = 0; r < x.size() / L; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < L; ++j) ms += x[r * L + j] * x[r * L + j] / L;
    for (int64_t j = 0; j < L; ++j) out[r * L + j] = x[r * L + j] / std::sqrt(ms + eps) * g[j];
  }
  return out;
}

}  // namespace rowref

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  std::vector<T> out;
  for (double x : v) out.push_back(static_cast<T>(x));
  return out;
}
template <class T>
std::vector<double> doubles(const std::vector<T>& v) {
  std::vector<double> out;
  for (const T& x : v) out.push_back(static_cast<double>(x));
  return out;
}
// Values representable in T, drawn from [lo, hi).
template <class T>
std::vector<double> uniform(std::size_t n, double lo, double hi, uint64_t salt) {
  auto g = test::rng(salt);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<double>(static_cast<T>(d(g)));
  return v;
}

// softmax, layer_norm and rms_norm of random rows in `shape`, one launch each, against the
// double reference within `tol` of each answer, or of a hundredth of the largest (cancellation).
template <class T>
void check_rows(gs::Context& ctx, const Dim& shape, double tol, uint64_t salt) {
  SCOPED_TRACE(shape.str());
  const int64_t L = shape[shape.rank() - 1];
  const auto xv = uniform<T>(shape.volume(), -4, 4, salt);
  const auto gv = uniform<T>(L, 0.5, 2, salt + 1), bv = uniform<T>(L, -1, 1, salt + 2);
  auto x = ctx.from_vector(as<T>(xv), shape);
  auto g = ctx.from_vector(as<T>(gv), {L});
  auto b = ctx.from_vector(as<T>(bv), {L});
  const std::vector<std::pair<std::string, std::vector<double>>> want = {
      {"softmax", rowref::softmax(xv, L)},
      {"layer_norm", rowref::layer_norm(xv, L, gv, bv, 1e-5)},
      {"rms_norm", rowref::rms_norm(xv, L, gv, 1e-5)}};
  for (const auto& [name, w] : want) {
    const auto before = ctx.stats().launches;
    auto y = name == "softmax"      ? gs::softmax(x)
             : name == "layer_norm" ? gs::layer_norm(x, g, b)
                                    : gs::rms_norm(x, g);
    EXPECT_EQ(ctx.stats().launches, before + 1) << name;
    EXPECT_EQ(y.shape(), shape);
    const auto got = doubles(y.to_vector());
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(got[i], w[i], tol * std::max(std::abs(w[i]), 1e-2 * scale)) << name << " " << i;
  }
}

gs::Config checked(int devices) {
  gs::Config c = test::quiet_config(devices);
  c.check = true;  // overwrite regions poisoned and looked at; accesses checked
  return c;
}

TEST(ArrayRows, MatchTheirDefinitionsOnEveryShapeAndDtype) {
  gs::Context ctx(checked(3));
  check_rows<float>(ctx, {37, 100}, 1e-4, 70);
  check_rows<float>(ctx, {5, 3, 33}, 1e-4, 71);
  check_rows<float>(ctx, {1000}, 1e-4, 72);
  check_rows<double>(ctx, {20, 301}, 1e-12, 73);
  check_rows<gs::float16>(ctx, {9, 64}, 2.0 / 1024, 74);
  check_rows<gs::bfloat16>(ctx, {9, 64}, 2.0 / 128, 75);
  // More rows than a launch's grid axis holds (65535): a GPU launches them in pieces.
  check_rows<float>(ctx, {70000, 16}, 1e-4, 76);
  check_rows<float>(ctx, {2, 66000, 8}, 1e-4, 77);
}

TEST(ArrayRows, TheReadmesExamples) {
  gs::Context ctx(test::quiet_config(1));
  auto x = ctx.from_vector<float>({1, 2, 3, 4}, {1, 4});
  auto ones = gs::ones<float>(ctx, {4});
  auto zeros = gs::zeros<float>(ctx, {4});
  const std::vector<double> rms = {0.365, 0.730, 1.095, 1.461}, ln = {-1.342, -0.447, 0.447, 1.342};
  auto r = gs::rms_norm(x, ones).to_vector(), l = gs::layer_norm(x, ones, zeros).to_vector();
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(r[j], rms[j], 5e-4) << j;
    EXPECT_NEAR(l[j], ln[j], 5e-4) << j;
  }
}

TEST(ArrayRows, AccumulateInFloat32WhateverTheDtype) {
  gs::Context ctx(test::quiet_config(1));
  // A bfloat16 row whose squares pass what a float holds answers zeros; double answers ones.
  const std::vector<double> big = {-3e20, 3e20, 3e20, -3e20};
  auto bf = ctx.from_vector(as<gs::bfloat16>(big), {1, 4});
  for (double v : doubles(gs::rms_norm(bf, gs::ones<gs::bfloat16>(ctx, {4})).to_vector()))
    EXPECT_EQ(v, 0.0);
  auto d = ctx.from_vector(big, {1, 4});
  for (double v : gs::rms_norm(d, gs::ones<double>(ctx, {4})).to_vector())
    EXPECT_NEAR(std::abs(v), 1.0, 1e-12);
  // A float16 row whose squares pass 65504 is answered as float32 answers it.
  const std::vector<double> wide = {300, -300, 200, 100};
  auto h = ctx.from_vector(as<gs::float16>(wide), {1, 4});
  auto got = doubles(gs::rms_norm(h, gs::ones<gs::float16>(ctx, {4})).to_vector());
  auto want = rowref::rms_norm(wide, 4, {1, 1, 1, 1}, 1e-5);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(got[j], want[j], 2e-3 * std::abs(want[j])) << j;
}

TEST(ArrayRows, SoftmaxOfMaskedRows) {
  gs::Context ctx(test::quiet_config(2));
  auto x = ctx.from_vector<float>({1, -INFINITY, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                                   -INFINITY, 0.5f, 0.5f, 0.5f, 0.5f},
                                  {3, 4});
  auto p = gs::softmax(x).to_vector();
  const double e = std::exp(-1.0);
  EXPECT_NEAR(p[0], e / (1 + e), 1e-6);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_NEAR(p[2], 1 / (1 + e), 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  for (int j = 4; j < 8; ++j) EXPECT_TRUE(std::isnan(p[j])) << j;  // all masked: NaN
  for (int j = 8; j < 12; ++j) EXPECT_FLOAT_EQ(p[j], 0.25f) << j;
}

// An expression handed in is computed inside the row kernel; a view (here a transpose) is
// read where it lies: one launch either way.
TEST(ArrayRows, ExpressionsAndViewsInOneLaunch) {
  gs::Context ctx(test::quiet_config(2));
  const auto xv = uniform<float>(30 * 40, -3, 3, 76);
  auto x = ctx.from_vector(as<float>(xv), {30, 40});
  auto before = ctx.stats().launches;
  auto p = gs::softmax(x * 2.0f - 1.0f);
  EXPECT_EQ(ctx.stats().launches, before + 1);
  std::vector<double> scaled;
  for (double v : xv) scaled.push_back(static_cast<float>(static_cast<float>(v) * 2.0f - 1.0f));
  auto want = rowref::softmax(scaled, 40);
  auto got = p.to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << i;
  before = ctx.stats().launches;
  auto t = gs::softmax(x.transpose());
  EXPECT_EQ(ctx.stats().launches, before + 1);
  std::vector<double> xt(xv.size());
  for (int i = 0; i < 30; ++i)
    for (int j = 0; j < 40; ++j) xt[j * 30 + i] = xv[i * 40 + j];
  want = rowref::softmax(xt, 30);
  got = t.to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(ArrayRows, BadParametersAreErrorsThatSayWhich) {
  gs::Context ctx(test::quiet_config(1));
  auto x = gs::ones<float>(ctx, {3, 4});
  auto ones4 = gs::ones<float>(ctx, {4});
  test::expect_error([&] { gs::layer_norm(x, gs::ones<float>(ctx, {5}), ones4); },
                     "gamma has shape {5}");
  test::expect_error(
      [&] {
        gs::layer_norm(x, ones4, gs::ones<float>(ctx, {1, 4}));
      },
      "beta has shape {1, 4}");
  test::expect_error([&] { gs::rms_norm(x, gs::ones<double>(ctx, {4})); },
                     "gamma is float64 where x is float32");
  test::expect_error([&] { gs::softmax(gs::ones<int32_t>(ctx, {3, 4})); }, "softmax of an integer");
  test::expect_error(
      [&] {
        gs::quantize_symmetric(gs::ones<int8_t>(ctx, {3, 4}));
      },
      "quantize_symmetric of an integer");
  test::expect_error([&] { gs::softmax(gs::ones<float>(ctx, {})); }, "0-d");
}

TEST(ArrayQuantize, TiesAwayFromZeroZeroAndNonFiniteRows) {
  gs::Context ctx(test::quiet_config(2));
  auto x = ctx.from_vector<float>({-2.5f, -1.5f, -0.5f,    0.5f, 1.5f, 2.5f, 127.0f,  // scale 1
                                   0,     0,     0,        0,    0,    0,    0,       // zeros
                                   1,     2,     INFINITY, 3,    4,    5,    6,       // inf
                                   1,     NAN,   2,        3,    4,    5,    6},      // NaN
                                  {4, 7});
  const auto before = ctx.stats().launches;
  auto [xq, scale] = gs::quantize_symmetric(x);
  static_assert(std::is_same_v<decltype(xq), gs::Array<int8_t>>);
  static_assert(std::is_same_v<decltype(scale), gs::Array<float>>);
  auto q = xq.to_vector();
  auto s = scale.to_vector();
  EXPECT_EQ(ctx.stats().launches, before + 1);
  EXPECT_EQ(scale.shape(), Dim{4});
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + 7),
            (std::vector<int8_t>{-3, -2, -1, 1, 2, 3, 127}));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[2], INFINITY);
  EXPECT_TRUE(std::isnan(s[3]));
  for (int i = 7; i < 28; ++i) EXPECT_EQ(q[i], 0) << i;
}

TEST(ArrayQuantize, RowsStandForTheirValues) {
  gs::Context ctx(test::quiet_config(3));
  for (int64_t L : {5, 300}) {
    const auto xv = uniform<gs::bfloat16>(11 * L, -50, 50, 77 + L);
    auto x = ctx.from_vector(as<gs::bfloat16>(xv), {11, L});
    auto [xq, scale] = gs::quantize_symmetric(x);
    static_assert(std::is_same_v<decltype(scale), gs::Array<float>>);
    auto q = xq.to_vector();
    auto s = scale.to_vector();
    for (int64_t r = 0; r < 11; ++r) {
      double m = 0;
      for (int64_t j = 0; j < L; ++j) m = std::max(m, std::abs(xv[r * L + j]));
      EXPECT_FLOAT_EQ(s[r], static_cast<float>(m) / 127.0f) << r;
      for (int64_t j = 0; j < L; ++j)
        ASSERT_LE(std::abs(q[r * L + j] * static_cast<double>(s[r]) - xv[r * L + j]), s[r] * 0.5001)
            << r << " " << j;
    }
    // The scales broadcast back over the rows: xq * scale[..., newaxis].
    auto back = (xq * scale.reshape({11, 1})).to_vector();
    for (int64_t i = 0; i < 11 * L; ++i) ASSERT_NEAR(back[i], xv[i], s[i / L] * 0.5001) << i;
  }
  auto one = gs::quantize_symmetric(ctx.from_vector<double>({-4, 2, 1}, {3}));
  EXPECT_EQ(one.second.shape(), Dim());
  EXPECT_DOUBLE_EQ(one.second.item(), 4.0 / 127);
  EXPECT_EQ(one.first.to_vector(), (std::vector<int8_t>{-127, 64, 32}));
}

// quantize_symmetric against dividing each element, exactly: random rows of T, a third of
// whose elements lie at a half of the scale or one unit in the last place either side.
template <class T>
void check_quantize_exact(gs::Context& ctx, int64_t rows, int64_t L, uint64_t salt) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " x " << L);
  auto g = test::rng(salt);
  std::uniform_real_distribution<T> value(-1, 1);
  std::uniform_int_distribution<int> k(-126, 125);
  std::vector<T> xv(static_cast<std::size_t>(rows * L));
  for (int64_t r = 0; r < rows; ++r) {
    const T m = std::ldexp(T(1) + value(g), static_cast<int>(r % 40) - 20);
    const T sc = m / T(127);
    T* row = &xv[static_cast<std::size_t>(r * L)];
    for (int64_t j = 0; j < L; ++j) row[j] = m * value(g);
    row[0] = r % 2 ? m : -m;
    // Halves, one ulp beside them, and just inside and outside the distance from a half
    // where the kernels divide rather than trust the product (2^-14; 2^-40 in double).
    const T near = std::ldexp(T(1), sizeof(T) == 4 ? -14 : -40);
    for (int64_t j = 1; j + 6 < L; j += 9) {
      const T half = T(k(g)) + T(0.5);
      row[j] = half * sc;
      row[j + 1] = std::nextafter(row[j], T(1000));
      row[j + 2] = std::nextafter(row[j], T(-1000));
      row[j + 3] = (half - near * T(1.01)) * sc;
      row[j + 4] = (half - near * T(0.99)) * sc;
      row[j + 5] = (half + near * T(1.01)) * sc;
      row[j + 6] = (half + near * T(0.99)) * sc;
    }
  }
  auto [xq, scale] = gs::quantize_symmetric(ctx.from_vector(xv, {rows, L}));
  const auto q = xq.to_vector();
  const auto s = scale.to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    T m = 0;
    for (int64_t j = 0; j < L; ++j) m = std::max(m, std::abs(xv[r * L + j]));
    const T sc = m / T(127);
    ASSERT_EQ(s[r], sc) << r;
    for (int64_t j = 0; j < L; ++j) {
      const T x = xv[r * L + j];
      ASSERT_EQ(q[r * L + j], static_cast<int8_t>(std::round(x / sc)))
          << "row " << r << " element " << j << " x " << x << " scale " << sc;
    }
  }
}

// bfloat16 rows quantized as their float32 values divided by a float32 scale.
void check_quantize_bf16(gs::Context& ctx, int64_t rows, int64_t L, uint64_t salt) {
  auto g = test::rng(salt);
  std::uniform_real_distribution<float> value(-3, 3);
  std::vector<gs::bfloat16> xv(static_cast<std::size_t>(rows * L));
  for (auto& x : xv) x = gs::bfloat16(value(g));
  auto [xq, scale] = gs::quantize_symmetric(ctx.from_vector(xv, {rows, L}));
  const auto q = xq.to_vector();
  const auto s = scale.to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t j = 0; j < L; ++j) m = std::max(m, std::abs(float(xv[r * L + j])));
    ASSERT_EQ(s[r], m / 127.0f) << r;
    for (int64_t j = 0; j < L; ++j)
      ASSERT_EQ(q[r * L + j], static_cast<int8_t>(std::round(float(xv[r * L + j]) / s[r])))
          << "row " << r << " element " << j;
  }
}

TEST(ArrayQuantize, EveryElementAsDividedNearHalvesToo) {
  gs::Context ctx(test::quiet_config(2));
  check_quantize_exact<float>(ctx, 40, 300, 91);
  check_quantize_exact<double>(ctx, 40, 300, 92);
}

// The cuda backend's geometry on cpu devices: blocks of 32 to 1024 threads combining through
// block_all (run on fibers), rows in registers or read in each pass.
class RowGpuGeometry : public ::testing::Test {
 protected:
  void SetUp() override { array::set_row_test_hooks(&hooks); }
  void TearDown() override { array::set_row_test_hooks(nullptr); }
  void everything(gs::Context& ctx) {
    check_rows<float>(ctx, {6, 100}, 1e-4, 80);       // 32 threads, 4 elements each in registers
    check_rows<double>(ctx, {3, 5000}, 1e-12, 81);    // 512 threads, 10 each
    check_rows<float>(ctx, {2, 3, 20000}, 1e-4, 82);  // 1024 threads, read in each pass
    check_rows<gs::bfloat16>(ctx, {700}, 2.0 / 128, 83);      // 64 threads, 11 each
    check_rows<float>(ctx, {5, 256}, 1e-4, 85);               // 32 x 8: full rows, no guards
    check_rows<gs::bfloat16>(ctx, {3, 512}, 2.0 / 128, 86);   // 32 x 16, full
    check_quantize_exact<float>(ctx, 8, 4096, 87);            // 256 x 16, full
    check_quantize_exact<double>(ctx, 6, 1000, 88);           // 64 x 16
    check_quantize_bf16(ctx, 3, 512, 89);                     // 32 x 16, packed registers
    check_quantize_bf16(ctx, 3, 2048, 90);                    // 64 x 32, packed registers
    check_rows<gs::bfloat16>(ctx, {2, 1024}, 2.0 / 128, 91);  // 32 x 32: norms packed
    auto [xq, scale] = gs::quantize_symmetric(ctx.from_vector<float>(
        {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 127.0f, 1, NAN, 2, 3, 4, 5, 6}, {2, 7}));
    EXPECT_EQ(xq.to_vector(), (std::vector<int8_t>{-3, -2, -1, 1, 2, 3, 127, 0, 0, 0, 0, 0, 0, 0}));
    auto s = scale.to_vector();
    EXPECT_EQ(s[0], 1.0f);
    EXPECT_TRUE(std::isnan(s[1]));
    auto m = ctx.from_vector<float>({1, -INFINITY, -INFINITY, -INFINITY}, {2, 2});
    auto p = gs::softmax(m).to_vector();
    EXPECT_EQ(p[0], 1.0f);
    EXPECT_EQ(p[1], 0.0f);
    EXPECT_TRUE(std::isnan(p[2]) && std::isnan(p[3]));
  }
  array::RowTestHooks hooks{true, {}};
};

TEST_F(RowGpuGeometry, BlocksOfManyThreadsMatchTheHost) {
  gs::Context ctx(checked(2));
  everything(ctx);
}

// Unchecked, rows in registers whose length is a multiple of a vector are read and written
// a vector (16 bytes) at a time.
TEST_F(RowGpuGeometry, VectorsOfSixteenBytesMatchTheHost) {
  gs::Context ctx(test::quiet_config(2));
  everything(ctx);
  int vectors = 0, quantized = 0, packed = 0, packed32 = 0;
  for (const auto& def : hooks.generated) {
    packed32 += def.source().find("__nv_bfloat16 gs_r[32]") != std::string::npos;
    vectors += def.source().find("load_vector<8>") != std::string::npos ||
               def.source().find("load_vector<4>") != std::string::npos;
    quantized += def.source().find("quantize_group<4>") != std::string::npos;
    packed += def.source().find("__nv_bfloat16 gs_r[") != std::string::npos;
  }
  EXPECT_GE(vectors, 6);
  EXPECT_GE(quantized, 1);  // 8 rows of 4096 float32: a vector's elements quantized together
  EXPECT_GE(packed, 3);     // bfloat16's layer_norm, rms_norm and quantize (not softmax)
  EXPECT_GE(packed32, 3);   // 32 a thread: rows of 1024 and quantize's of 2048
}

#ifdef GRIDSPAN_HAVE_CUDA
// Every kind of row kernel the cuda backend launches compiles for sm_90 with NVRTC.
TEST_F(RowGpuGeometry, KernelsCompileForCuda) {
  gs::Context ctx(test::quiet_config(2));
  everything(ctx);
  check_rows<gs::float16>(ctx, {4, 64}, 2.0 / 1024, 84);
  EXPECT_GE(hooks.generated.size(), 15u);
  test::expect_compile_for_sm90(hooks.generated);
}
#endif

}  // namespace
}  // namespace gridspan
