// <gridspan/device/random.hpp> (counter-based Philox4x32-10 random numbers) on the host:
// Random123's known answers, the moments and CDF of the uniforms and normals, and that an
// element's value depends on (seed, index, stream) only, whatever order or split computes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "gridspan/device/random.hpp"

namespace gridspan::test {
namespace {

using rng::Philox4;
using rng::PhiloxKey;

constexpr double kPi = 3.14159265358979323846;

Philox4 words(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return Philox4{{a, b, c, d}};
}

void expect_words(const Philox4& got, const Philox4& want) {
  for (int k = 0; k < 4; ++k) EXPECT_EQ(got.v[k], want.v[k]) << "word " << k;
}

/// The standard normal CDF.
double phi(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}

/// The Kolmogorov-Smirnov statistic sup |F_n - F| of a sample against the CDF `cdf`.
double ks_statistic(std::vector<double> x, const std::function<double(double)>& cdf) {
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  double d = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const double f = cdf(x[k]), below = static_cast<double>(k) / n;
    d = std::max(d, std::max(f - below, below + 1 / n - f));
  }
  return d;
}

// KS critical value at p = 1e-6 (Kolmogorov's asymptotic law: P(sqrt(n) D > l) ~
// 2 exp(-2 l^2)), and a 5-sigma band for the moments: the samples are fixed (fixed seeds),
// so a failure means a broken generator, never bad luck.
constexpr double kKsLambda = 2.69;
constexpr double kSigmas = 5.0;
constexpr int64_t kSamples = 1000000;

// Bit patterns, so that -0.0 / 0.0 and NaNs compare as what they are.
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
uint64_t bits_of(double f) {
  uint64_t b;
  std::memcpy(&b, &f, 8);
  return b;
}

// ---- (1) known answers ------------------------------------------------------------------

// Random123's kat_vectors for philox4x32_10 (counter words, key words, output words), as
// reproduced in Random123-Boost's libs/random/test/test_philox.cpp.
TEST(DeviceRandom, PhiloxKnownAnswers) {
  expect_words(rng::philox4x32_10(words(0, 0, 0, 0), PhiloxKey{{0, 0}}),
               words(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8));
  expect_words(rng::philox4x32_10(words(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff),
                                  PhiloxKey{{0xffffffff, 0xffffffff}}),
               words(0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd));
  expect_words(rng::philox4x32_10(words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
                                  PhiloxKey{{0xa4093822, 0x299f31d0}}),
               words(0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1));
}

// key = {lo32(seed), hi32(seed)}, counter = {lo32(i), hi32(i), stream, 0}.
TEST(DeviceRandom, CounterAndKeyLayout) {
  expect_words(rng::philox_words(0, 0, 0), words(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8));
  const uint64_t seed = 0x299f31d0a4093822ull;
  const int64_t i = static_cast<int64_t>(0x85a308d3243f6a88ull);
  expect_words(rng::philox_words(seed, i, 0x13198a2e),
               rng::philox4x32_10(words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0),
                                  PhiloxKey{{0xa4093822, 0x299f31d0}}));
}

// The uniforms and the Box-Muller inputs are the documented bits of the known answer above.
TEST(DeviceRandom, ValuesFromKnownWords) {
  const uint32_t v0 = 0x6627e8d5, v1 = 0xe169c58d, v2 = 0xbc57ac4c, v3 = 0x9b00dbd8;
  EXPECT_EQ(rng::uniform_float(0, 0, 0), static_cast<float>(v0 >> 8) / 16777216.0f);
  const auto b53 = [](uint32_t a, uint32_t b) {
    return (static_cast<uint64_t>(a) << 21) | (b >> 11);
  };
  EXPECT_EQ(rng::uniform_double(0, 0, 0), std::ldexp(static_cast<double>(b53(v0, v1)), -53));

  // The normals against the same formula in long double: close, not equal (float's 2 pi and
  // the rounding of 2 pi u2 move the angle by up to ~1e-7 relative; the math library's
  // error, and a constant the compiler folds may round differently).
  const long double u1f = ((v0 >> 8) + 1) / 16777216.0L, u2f = (v1 >> 8) / 16777216.0L;
  const long double zf =
      std::sqrt(-2 * std::log(u1f)) * std::cos(2 * static_cast<long double>(kPi) * u2f);
  EXPECT_NEAR(rng::normal_float(0, 0, 0), static_cast<double>(zf),
              2e-6 * (1 + std::fabs(static_cast<double>(zf))));
  const long double u1d = std::ldexp(static_cast<long double>(b53(v0, v1) + 1), -53);
  const long double u2d = std::ldexp(static_cast<long double>(b53(v2, v3)), -53);
  const long double zd =
      std::sqrt(-2 * std::log(u1d)) * std::cos(2 * static_cast<long double>(kPi) * u2d);
  EXPECT_NEAR(rng::normal_double(0, 0, 0), static_cast<double>(zd),
              1e-14 * (1 + std::fabs(static_cast<double>(zd))));
}

// ---- (2) uniforms -----------------------------------------------------------------------

template <class T>
void check_uniform(T (*draw)(uint64_t, int64_t, uint32_t), uint64_t seed) {
  std::vector<double> x(kSamples);
  double sum = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const T u = draw(seed, i, 0);
    ASSERT_GE(u, T(0)) << "i = " << i;
    ASSERT_LT(u, T(1)) << "i = " << i;
    x[i] = static_cast<double>(u);
    sum += x[i];
  }
  const double n = static_cast<double>(kSamples);
  const double mean = sum / n;
  double m2 = 0;
  for (double v : x) m2 += (v - mean) * (v - mean);
  const double var = m2 / (n - 1);
  // sd(mean) = sqrt(1/12 / n); sd(var) ~ sqrt((mu4 - sigma^4) / n), mu4 = 1/80.
  EXPECT_NEAR(mean, 0.5, kSigmas * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, kSigmas * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
  const double d = ks_statistic(std::move(x), [](double v) { return v; });
  EXPECT_LT(d, kKsLambda / std::sqrt(n));
}

TEST(DeviceRandom, UniformFloatRangeMomentsAndCdf) {
  check_uniform<float>(rng::uniform_float, 42);
}

TEST(DeviceRandom, UniformDoubleRangeMomentsAndCdf) {
  check_uniform<double>(rng::uniform_double, 0x0123456789abcdefull);
}

// ---- (3) normals ------------------------------------------------------------------------

template <class T>
void check_normal(T (*draw)(uint64_t, int64_t, uint32_t), uint64_t seed, double bound) {
  std::vector<double> x(kSamples);
  double sum = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const T z = draw(seed, i, 1);
    ASSERT_TRUE(std::isfinite(z)) << "i = " << i;
    ASSERT_LE(std::fabs(static_cast<double>(z)), bound) << "i = " << i;
    x[i] = static_cast<double>(z);
    sum += x[i];
  }
  const double n = static_cast<double>(kSamples);
  const double mean = sum / n;
  double m2 = 0, m4 = 0;
  for (double v : x) {
    m2 += (v - mean) * (v - mean);
    m4 += v * v * v * v;
  }
  const double var = m2 / (n - 1);
  // sd(mean) = 1/sqrt(n), sd(var) ~ sqrt(2/n), sd(E x^4) = sqrt((105 - 9) / n).
  EXPECT_NEAR(mean, 0.0, kSigmas / std::sqrt(n));
  EXPECT_NEAR(var, 1.0, kSigmas * std::sqrt(2.0 / n));
  EXPECT_NEAR(m4 / n, 3.0, kSigmas * std::sqrt(96.0 / n));

  // The empirical CDF at a few points, each within 5 sigma of a binomial proportion.
  for (double at : {-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0}) {
    const double p = phi(at);
    const double f =
        static_cast<double>(std::count_if(x.begin(), x.end(), [&](double v) { return v <= at; })) /
        n;
    EXPECT_NEAR(f, p, kSigmas * std::sqrt(p * (1 - p) / n)) << "at " << at;
  }
  const double d = ks_statistic(std::move(x), phi);
  EXPECT_LT(d, kKsLambda / std::sqrt(n));
}

TEST(DeviceRandom, NormalFloatMomentsAndCdf) {
  // |z| <= sqrt(-2 ln 2^-24): u1 is never below 2^-24.
  check_normal<float>(rng::normal_float, 42, std::sqrt(-2 * std::log(std::ldexp(1.0, -24))) + 1e-5);
}

TEST(DeviceRandom, NormalDoubleMomentsAndCdf) {
  check_normal<double>(rng::normal_double, 0x0123456789abcdefull,
                       std::sqrt(-2 * std::log(std::ldexp(1.0, -53))) + 1e-12);
}

// ---- (4) a value depends on (seed, i, stream) only --------------------------------------

/// Every function's bits for element i, so one comparison covers all four.
struct Draw {
  uint32_t uf, nf;
  uint64_t ud, nd;
  bool operator==(const Draw& o) const {
    return uf == o.uf && nf == o.nf && ud == o.ud && nd == o.nd;
  }
};

Draw draw(uint64_t seed, int64_t i) {
  return Draw{bits_of(rng::uniform_float(seed, i, 0)), bits_of(rng::normal_float(seed, i, 1)),
              bits_of(rng::uniform_double(seed, i, 0)), bits_of(rng::normal_double(seed, i, 1))};
}

TEST(DeviceRandom, ValueDependsOnSeedIndexAndStreamOnly) {
  const uint64_t seed = 0x5eed5eed12345678ull;
  // Indices past 2^32 too, so the counter's high word is exercised.
  const int64_t base = (int64_t{1} << 32) - 3000;
  constexpr int64_t n = 6000;
  std::vector<Draw> forward(n);
  for (int64_t k = 0; k < n; ++k) forward[k] = draw(seed, base + k);

  // Backwards, with draws of other seeds, streams and indices in between (no hidden state).
  std::vector<Draw> backward(n);
  for (int64_t k = n - 1; k >= 0; --k) {
    (void)draw(seed + 1, k);
    (void)rng::uniform_float(seed, base + k, 7);
    backward[k] = draw(seed, base + k);
  }
  EXPECT_TRUE(forward == backward);

  // Split over 1, 2 and 3 "devices" (chunks of uneven sizes, each on its own thread) and
  // over "threads" striding through the array.
  for (int parts : {1, 2, 3}) {
    std::vector<Draw> split(n);
    std::vector<std::thread> threads;
    for (int p = 0; p < parts; ++p) {
      const int64_t lo = n * p / parts + (p > 0 ? 17 * p : 0);
      const int64_t hi = p + 1 == parts ? n : n * (p + 1) / parts + 17 * (p + 1);
      threads.emplace_back([&, lo, hi] {
        for (int64_t k = lo; k < hi; ++k) split[k] = draw(seed, base + k);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_TRUE(split == forward) << parts << " parts";
  }
  std::vector<Draw> strided(n);
  constexpr int64_t kStride = 97;
  for (int64_t t = 0; t < kStride; ++t)
    for (int64_t k = t; k < n; k += kStride) strided[k] = draw(seed, base + k);
  EXPECT_TRUE(strided == forward);
}

// ---- (5) seeds, streams and indices give different sequences ----------------------------

TEST(DeviceRandom, SeedsAndStreamsGiveDifferentSequences) {
  constexpr int64_t n = 4096;
  const uint64_t seeds[] = {
      0, 1, 2, uint64_t{1} << 32, (uint64_t{1} << 32) + 1, 12345, 0xffffffffffffffffull};
  const uint32_t streams[] = {0, 1, 2};
  std::vector<std::vector<double>> seqs;
  for (uint64_t s : seeds)
    for (uint32_t st : streams) {
      std::vector<double> u(n);
      for (int64_t i = 0; i < n; ++i) u[i] = rng::uniform_double(s, i, st);
      seqs.push_back(std::move(u));
    }
  // A shifted sequence too: element i and i + 2^32 (the counter's high word) differ.
  {
    std::vector<double> u(n);
    for (int64_t i = 0; i < n; ++i) u[i] = rng::uniform_double(0, i + (int64_t{1} << 32), 0);
    seqs.push_back(std::move(u));
  }
  for (size_t a = 0; a < seqs.size(); ++a)
    for (size_t b = a + 1; b < seqs.size(); ++b) {
      int equal = 0;
      double sab = 0, sa = 0, sb = 0, saa = 0, sbb = 0;
      for (int64_t i = 0; i < n; ++i) {
        equal += seqs[a][i] == seqs[b][i];
        sa += seqs[a][i];
        sb += seqs[b][i];
        sab += seqs[a][i] * seqs[b][i];
        saa += seqs[a][i] * seqs[a][i];
        sbb += seqs[b][i] * seqs[b][i];
      }
      EXPECT_EQ(equal, 0) << "sequences " << a << " and " << b;
      const double cov = sab / n - (sa / n) * (sb / n);
      const double corr =
          cov / std::sqrt((saa / n - (sa / n) * (sa / n)) * (sbb / n - (sb / n) * (sb / n)));
      EXPECT_LT(std::fabs(corr), kSigmas / std::sqrt(static_cast<double>(n)))
          << "sequences " << a << " and " << b;
    }
}

// The uniform (stream 0) and normal (stream 1) draws of one seed are unrelated.
TEST(DeviceRandom, UniformAndNormalStreamsAreUncorrelated) {
  constexpr int64_t n = 100000;
  double su = 0, sz = 0, suz = 0, suu = 0, szz = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = rng::uniform_double(99, i, 0);
    const double z = rng::normal_double(99, i, 1);
    su += u;
    sz += z;
    suz += u * z;
    suu += u * u;
    szz += z * z;
  }
  const double cov = suz / n - (su / n) * (sz / n);
  const double corr =
      cov / std::sqrt((suu / n - (su / n) * (su / n)) * (szz / n - (sz / n) * (sz / n)));
  EXPECT_LT(std::fabs(corr), kSigmas / std::sqrt(static_cast<double>(n)));
}

}  // namespace
}  // namespace gridspan::test
