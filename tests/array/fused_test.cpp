// Cumo's fused operations: the activations (gelu, gelu_tanh, silu, sigmoid, softplus) against
// a host reference and at the edges the README names, each one launch.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

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

}  // namespace
}  // namespace gridspan
