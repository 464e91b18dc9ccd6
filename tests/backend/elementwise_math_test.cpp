// <gridspan/device/elementwise.hpp> (gridspan::ew: NumPy's element-wise math) in kernels the
// cpu backend compiles: every function of the header for float, double, every integer type
// and bool, on random inputs and on the edge cases NumPy specifies, against host references
// (<cmath>) and against values NumPy 1.24 gives (python3 -c 'import numpy as np; ...').
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu.hpp"
#include "backend/kernel_support.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

__extension__ typedef __int128 i128;

// bool elements travel as bytes (std::vector<bool> is packed).
template <class T>
using Elem = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

/// One function of a test kernel: out(f, i) = T(expr) of x = a[i], y = b[i], z = c[i].
struct Fn {
  std::string name;
  std::string expr;
};

constexpr unsigned char kPoison = 0x5A;

/// The kernel's output: one row per function, one column per element, every byte poisoned
/// before the run.
template <class T>
struct Output {
  std::size_t n = 0;
  std::vector<unsigned char> bytes;

  /// Element i of function f's row (a bool must be one byte 0 or 1).
  T at(std::size_t f, std::size_t i) const {
    const unsigned char* p = bytes.data() + (f * n + i) * sizeof(T);
    if constexpr (std::is_same_v<T, bool>) {
      if (*p > 1) ADD_FAILURE() << "bool byte " << int(*p) << " at function " << f << " i=" << i;
      return *p == 1;
    } else {
      T v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
};

/// Compiles (once per source) and runs on the cpu backend
///   out(f, i) = T(fns[f].expr)   with x = a[i], y = b[i], z = c[i]
/// in a kernel that includes <gridspan/device/elementwise.hpp>.
template <class T>
Output<T> run_ew(const std::vector<Fn>& fns, const std::vector<Elem<T>>& a,
                 const std::vector<Elem<T>>& b, const std::vector<Elem<T>>& c) {
  const std::string t = dtype_cpp_name(dtype_v<T>);
  const std::string name = "ew_" + t;
  std::string src = "#include <gridspan/device/elementwise.hpp>\n";
  src += "__device__ void " + name + "(dim3 blockIdx, int64_t n, gridspan::Matrix<" + t +
         "> out, const gridspan::Vector<" + t + "> a, const gridspan::Vector<" + t +
         "> b, const gridspan::Vector<" + t + "> c) {\n";
  src += "  namespace ew = gridspan::ew;\n";
  src += "  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n";
  src += "  if (i >= n) return;\n";
  src += "  const " + t + " x = a[i], y = b[i], z = c[i];\n";
  src += "  (void)y;\n  (void)z;\n";
  for (std::size_t f = 0; f < fns.size(); ++f)
    src += "  out(" + std::to_string(f) + ", i) = " + t + "(" + fns[f].expr + ");\n";
  src += "}\n";
  backend::KernelSource ks;
  ks.name = name;
  ks.source = src;
  ks.params = {scalar_param("n", DType::i64), array_param("out", 2, dtype_v<T>),
               array_param("a", 1, dtype_v<T>, true), array_param("b", 1, dtype_v<T>, true),
               array_param("c", 1, dtype_v<T>, true)};
  auto kernel = cpu_backend().compile(ks);

  const int64_t n = static_cast<int64_t>(a.size());
  EXPECT_EQ(b.size(), a.size());
  EXPECT_EQ(c.size(), a.size());
  const int64_t rows = static_cast<int64_t>(fns.size());
  const int size = static_cast<int>(sizeof(T));
  Output<T> out;
  out.n = a.size();
  out.bytes.assign(fns.size() * a.size() * sizeof(T), kPoison);
  const uint32_t block = 64;
  const int64_t blocks = (n + block - 1) / block;
  LaunchDesc d(5, {0, 0, 0}, {blocks, 1, 1}, {block, 1, 1}, {uint32_t(blocks), 1, 1});
  d.scalars[0] = &n;
  d.arrays[1] = chunk_arg(out.bytes.data(), 2, {0, 0, 0}, {rows, n, 1}, size, GS_WRITE);
  d.arrays[2] = chunk_arg(const_cast<Elem<T>*>(a.data()), 1, {0, 0, 0}, {n, 1, 1}, size, GS_READ);
  d.arrays[3] = chunk_arg(const_cast<Elem<T>*>(b.data()), 1, {0, 0, 0}, {n, 1, 1}, size, GS_READ);
  d.arrays[4] = chunk_arg(const_cast<Elem<T>*>(c.data()), 1, {0, 0, 0}, {n, 1, 1}, size, GS_READ);
  kernel->run(d.get(), any_device());
  return out;
}

std::size_t row_of(const std::vector<Fn>& fns, const std::string& name) {
  for (std::size_t f = 0; f < fns.size(); ++f)
    if (fns[f].name == name) return f;
  ADD_FAILURE() << "no function " << name;
  return 0;
}

template <class T>
std::string show(T v) {
  std::ostringstream s;
  if constexpr (std::is_floating_point_v<T>) {
    s.precision(std::numeric_limits<T>::max_digits10);
    s << v;
    if (v == 0 && std::signbit(v)) s.str("-0");
  } else {
    s << +v;
  }
  return s.str();
}

// ---- floating point ---------------------------------------------------------------------

template <class T>
struct FloatFn {
  const char* name;
  const char* expr;
  T (*ref)(T x, T y, T z);
  int ulps;  // 0: bit for bit (zeros' signs too); NaN matches any NaN
};

template <class T>
T ref_sign(T x, T, T) {
  if (std::isnan(x)) return x;
  return x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
}
// np.maximum / np.minimum (NaN from either side; x86 NumPy gives b for equal operands).
template <class T>
T ref_max(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a > b ? a : b;
}
template <class T>
T ref_min(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a < b ? a : b;
}
// CPython's float % and // (float_rem, _float_div_mod), which NumPy's npy_divmod follows.
template <class T>
T ref_remainder(T a, T b, T) {
  if (b == 0) return std::numeric_limits<T>::quiet_NaN();
  T mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(T(0), b);
  }
  return mod;
}
template <class T>
T ref_floor_divide(T a, T b, T) {
  if (b == 0) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += 1;
  return floordiv;
}

template <class T>
std::vector<FloatFn<T>> float_fns() {
  // Transcendental functions call the same glibc function on both sides, so they should be
  // equal; 2 ulp is what the header promises across libraries.
  return {
      {"exp", "ew::exp(x)", [](T x, T, T) -> T { return std::exp(x); }, 2},
      {"log", "ew::log(x)", [](T x, T, T) -> T { return std::log(x); }, 2},
      {"log1p", "ew::log1p(x)", [](T x, T, T) -> T { return std::log1p(x); }, 2},
      {"expm1", "ew::expm1(x)", [](T x, T, T) -> T { return std::expm1(x); }, 2},
      {"sqrt", "ew::sqrt(x)", [](T x, T, T) -> T { return std::sqrt(x); }, 0},
      {"rsqrt", "ew::rsqrt(x)", [](T x, T, T) -> T { return T(1) / std::sqrt(x); }, 0},
      {"sin", "ew::sin(x)", [](T x, T, T) -> T { return std::sin(x); }, 2},
      {"cos", "ew::cos(x)", [](T x, T, T) -> T { return std::cos(x); }, 2},
      {"tan", "ew::tan(x)", [](T x, T, T) -> T { return std::tan(x); }, 2},
      {"tanh", "ew::tanh(x)", [](T x, T, T) -> T { return std::tanh(x); }, 2},
      {"arcsin", "ew::arcsin(x)", [](T x, T, T) -> T { return std::asin(x); }, 2},
      {"arccos", "ew::arccos(x)", [](T x, T, T) -> T { return std::acos(x); }, 2},
      {"arctan", "ew::arctan(x)", [](T x, T, T) -> T { return std::atan(x); }, 2},
      {"sinh", "ew::sinh(x)", [](T x, T, T) -> T { return std::sinh(x); }, 2},
      {"cosh", "ew::cosh(x)", [](T x, T, T) -> T { return std::cosh(x); }, 2},
      {"erf", "ew::erf(x)", [](T x, T, T) -> T { return std::erf(x); }, 2},
      {"floor", "ew::floor(x)", [](T x, T, T) -> T { return std::floor(x); }, 0},
      {"ceil", "ew::ceil(x)", [](T x, T, T) -> T { return std::ceil(x); }, 0},
      {"rint", "ew::rint(x)", [](T x, T, T) -> T { return std::rint(x); }, 0},
      {"round", "ew::round(x)", [](T x, T, T) -> T { return std::round(x); }, 0},
      {"abs", "ew::abs(x)", [](T x, T, T) -> T { return std::fabs(x); }, 0},
      {"sign", "ew::sign(x)", ref_sign<T>, 0},
      {"pow", "ew::pow(x, y)", [](T x, T y, T) -> T { return std::pow(x, y); }, 2},
      {"atan2", "ew::atan2(x, y)", [](T x, T y, T) -> T { return std::atan2(x, y); }, 2},
      {"hypot", "ew::hypot(x, y)", [](T x, T y, T) -> T { return std::hypot(x, y); }, 2},
      {"maximum", "ew::maximum(x, y)", [](T x, T y, T) -> T { return ref_max(x, y); }, 0},
      {"minimum", "ew::minimum(x, y)", [](T x, T y, T) -> T { return ref_min(x, y); }, 0},
      {"clip", "ew::clip(x, y, z)", [](T x, T y, T z) -> T { return ref_min(ref_max(x, y), z); },
       0},
      {"remainder", "ew::remainder(x, y)", ref_remainder<T>, 0},
      {"floor_divide", "ew::floor_divide(x, y)", ref_floor_divide<T>, 0},
      {"isnan", "ew::isnan(x)", [](T x, T, T) -> T { return T(std::isnan(x)); }, 0},
      {"isinf", "ew::isinf(x)", [](T x, T, T) -> T { return T(std::isinf(x)); }, 0},
      {"isfinite", "ew::isfinite(x)", [](T x, T, T) -> T { return T(std::isfinite(x)); }, 0},
  };
}

template <class T>
std::vector<Fn> fns_of(const std::vector<FloatFn<T>>& table) {
  std::vector<Fn> fns;
  for (const auto& f : table) fns.push_back({f.name, f.expr});
  return fns;
}

template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

/// got == want bit for bit (any NaN for a NaN), or both finite, of one sign and at most
/// `ulps` apart.
template <class T>
bool float_matches(T got, T want, int ulps) {
  if (std::isnan(want)) return std::isnan(got);
  Bits<T> g, w;
  std::memcpy(&g, &got, sizeof g);
  std::memcpy(&w, &want, sizeof w);
  if (g == w) return true;
  if (ulps == 0 || !std::isfinite(got) || !std::isfinite(want)) return false;
  if (std::signbit(got) != std::signbit(want)) return false;
  return (g > w ? g - w : w - g) <= Bits<T>(ulps);
}

/// Special values (NaN, infinities, zeros, halfway cases, extremes) and their pairs, then
/// random values of many magnitudes, random halves, and values in [-1.25, 1.25].
template <class T>
void float_inputs(std::mt19937_64& g, std::vector<T>& a, std::vector<T>& b, std::vector<T>& c) {
  using L = std::numeric_limits<T>;
  const std::vector<T> special = {L::quiet_NaN(),
                                  L::infinity(),
                                  -L::infinity(),
                                  T(0),
                                  -T(0),
                                  T(0.5),
                                  T(-0.5),
                                  T(1),
                                  T(-1),
                                  T(1.5),
                                  T(-1.5),
                                  T(2.5),
                                  T(-2.5),
                                  T(3),
                                  T(-3),
                                  T(7),
                                  T(-7),
                                  T(0.1),
                                  T(-0.1),
                                  L::max(),
                                  -L::max(),
                                  L::min(),
                                  -L::min(),
                                  L::denorm_min(),
                                  T(1e30),
                                  T(-1e30),
                                  T(8388609),
                                  T(0x1p60),
                                  std::nextafter(T(0.5), T(0)),
                                  T(1e-3),
                                  T(-100)};
  std::uniform_int_distribution<std::size_t> pick(0, special.size() - 1);
  for (T x : special) {
    for (T y : special) {
      a.push_back(x);
      b.push_back(y);
      c.push_back(special[pick(g)]);
    }
  }
  std::uniform_real_distribution<double> mantissa(-8, 8), unit(-1.25, 1.25);
  std::uniform_int_distribution<int> exponent(-30, 30), half(-40, 40);
  auto wide = [&] { return T(std::ldexp(mantissa(g), exponent(g))); };
  for (int k = 0; k < 3000; ++k) {
    a.push_back(wide());
    b.push_back(wide());
    c.push_back(wide());
  }
  for (int k = 0; k < 600; ++k) {
    a.push_back(T(half(g) * 0.5));
    b.push_back(T(half(g) * 0.5));
    c.push_back(T(half(g) * 0.5));
  }
  for (int k = 0; k < 600; ++k) {
    a.push_back(T(unit(g)));
    b.push_back(T(unit(g)));
    c.push_back(T(unit(g)));
  }
}

template <class T>
void check_floats(uint64_t salt) {
  SCOPED_TRACE("random inputs from std::mt19937_64 seeded by base seed " +
               std::to_string(base_seed()) + " and salt " + std::to_string(salt) +
               " (GRIDSPAN_TEST_SEED repeats a run)");
  auto g = rng(salt);
  std::vector<T> a, b, c;
  float_inputs(g, a, b, c);
  const auto table = float_fns<T>();
  const Output<T> out = run_ew<T>(fns_of(table), a, b, c);
  for (std::size_t f = 0; f < table.size(); ++f) {
    int wrong = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const T got = out.at(f, i), want = table[f].ref(a[i], b[i], c[i]);
      if (float_matches(got, want, table[f].ulps)) continue;
      if (++wrong <= 5) {
        ADD_FAILURE() << table[f].name << "(" << show(a[i]) << ", " << show(b[i]) << ", "
                      << show(c[i]) << ") = " << show(got) << ", expected " << show(want);
      }
    }
    EXPECT_EQ(wrong, 0) << table[f].name << ": " << wrong << " of " << a.size() << " wrong";
  }
}

TEST(ElementwiseMath, FloatFunctionsMatchTheHostOnRandomAndSpecialInputs) {
  check_floats<float>(701);
}

TEST(ElementwiseMath, DoubleFunctionsMatchTheHostOnRandomAndSpecialInputs) {
  check_floats<double>(702);
}

/// Runs (a[i], b[i], c[i]) through the float kernel and expects `want[i]` from function `fn`
/// (bit for bit; NaN matches any NaN).
template <class T>
void expect_float_row(const std::string& fn, const std::vector<T>& a, const std::vector<T>& b,
                      const std::vector<T>& c, const std::vector<T>& want) {
  const auto fns = fns_of(float_fns<T>());
  const Output<T> out = run_ew<T>(fns, a, b, c);
  const std::size_t f = row_of(fns, fn);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(float_matches(out.at(f, i), want[i], 0))
        << fn << "(" << show(a[i]) << ", " << show(b[i]) << ", " << show(c[i])
        << ") = " << show(out.at(f, i)) << ", NumPy gives " << show(want[i]);
  }
}

// Python's % and //: a, b, np.remainder(a, b), np.floor_divide(a, b), as NumPy 1.24 computes
// them in float64 and in float32.
template <class T>
void check_float_divmod(const std::vector<std::array<double, 4>>& cases) {
  std::vector<T> a, b, zero, rem, div;
  for (const auto& k : cases) {
    a.push_back(T(k[0]));
    b.push_back(T(k[1]));
    zero.push_back(T(0));
    rem.push_back(T(k[2]));
    div.push_back(T(k[3]));
  }
  expect_float_row<T>("remainder", a, b, zero, rem);
  expect_float_row<T>("floor_divide", a, b, zero, div);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(ElementwiseMath, FloatRemainderAndFloorDivideAreNumPys) {
  // Cases whose float32 result differs from float64's are in the lists of their own below.
  const std::vector<std::array<double, 4>> both = {
      {7.0, 2.0, 1.0, 3.0},     {-7.0, 2.0, 1.0, -4.0},    {7.0, -2.0, -1.0, -4.0},
      {-7.0, -2.0, -1.0, 3.0},  {0.0, 3.0, 0.0, 0.0},      {-0.0, 3.0, 0.0, -0.0},
      {0.0, -3.0, -0.0, -0.0},  {-0.0, -3.0, -0.0, 0.0},   {1.0, kInf, 1.0, 0.0},
      {-1.0, kInf, kInf, -1.0}, {1.0, -kInf, -kInf, -1.0}, {-1.0, -kInf, -1.0, 0.0},
      {kInf, 3.0, kNaN, kNaN},  {-kInf, 3.0, kNaN, kNaN},  {kInf, kInf, kNaN, kNaN},
      {kNaN, 1.0, kNaN, kNaN},  {1.0, kNaN, kNaN, kNaN},   {5.0, 0.0, kNaN, kInf},
      {-5.0, 0.0, kNaN, -kInf}, {6.0, -0.0, kNaN, -kInf},  {-6.0, -0.0, kNaN, kInf},
      {0.0, 0.0, kNaN, kNaN},   {-0.0, 0.0, kNaN, kNaN},   {kInf, 0.0, kNaN, kInf},
      {0.5, kInf, 0.5, 0.0},    {-0.5, -kInf, -0.5, 0.0},  {5.5, -2.0, -0.5, -3.0},
      {-5.5, 2.0, 0.5, -3.0},
  };
  auto f64 = both;
  f64.push_back({3.0, 0.1, 0.09999999999999984, 29.0});
  f64.push_back({-3.0, 0.1, 1.6653345369377348e-16, -30.0});
  f64.push_back({1e300, 1e-300, 4.891554850853602e-301, kInf});
  check_float_divmod<double>(f64);
  auto f32 = both;  // 0.1f is 0.10000000149011612
  f32.push_back({3.0, 0.10000000149011612, 0.09999995678663254, 29.0});
  f32.push_back({-3.0, 0.10000000149011612, 4.470348358154297e-08, -30.0});
  check_float_divmod<float>(f32);
}

template <class T>
void check_float_edges() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  // np.rint: halfway cases to even. ew::round is C's round (halfway cases away from zero),
  // which NumPy does not have (np.round is np.rint).
  const std::vector<T> ties = {
      -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5, std::nextafter(T(-0.5), T(0))};
  const std::vector<T> zeros(ties.size(), T(0));
  expect_float_row<T>("rint", ties, zeros, zeros, {-2, -2, -0.0, 0, 2, 2, 4, -4, -0.0});
  expect_float_row<T>("round", ties, zeros, zeros, {-3, -2, -1, 1, 2, 3, 4, -4, -0.0});
  // np.sign: +0 for either zero, NaN for NaN; np.abs.
  const std::vector<T> s = {-0.0, 0.0, nan, -inf, inf, -3, std::numeric_limits<T>::denorm_min()};
  const std::vector<T> s0(s.size(), T(0));
  expect_float_row<T>("sign", s, s0, s0, {0.0, 0.0, nan, -1, 1, -1, 1});
  expect_float_row<T>("abs", s, s0, s0, {0.0, 0.0, nan, inf, inf, 3, s[6]});
  // np.maximum / np.minimum: NaN from either side; equal operands (+-0) give the second.
  const std::vector<T> ma = {-0.0, 0.0, nan, 1, -inf, 2}, mb = {0.0, -0.0, 1, nan, nan, -3};
  const std::vector<T> m0(ma.size(), T(0));
  expect_float_row<T>("maximum", ma, mb, m0, {0.0, -0.0, nan, nan, nan, 2});
  expect_float_row<T>("minimum", ma, mb, m0, {0.0, -0.0, nan, nan, nan, -3});
  // np.clip (the ufunc, array bounds): NaN from any of the three; hi where lo > hi.
  expect_float_row<T>("clip", {-0.0, 0.0, nan, 0.5, 0.5, 5, -inf, 2},
                      {0.0, -0.0, 0, nan, 0, 3, -1, -1}, {1, 1, 1, 1, nan, 1, 1, 1},
                      {0.0, -0.0, nan, nan, nan, 1, -1, 1});
  // np.isnan / np.isinf / np.isfinite.
  const std::vector<T> c = {
      nan, inf, -inf, 0, std::numeric_limits<T>::max(), std::numeric_limits<T>::denorm_min()};
  const std::vector<T> c0(c.size(), T(0));
  expect_float_row<T>("isnan", c, c0, c0, {1, 0, 0, 0, 0, 0});
  expect_float_row<T>("isinf", c, c0, c0, {0, 1, 1, 0, 0, 0});
  expect_float_row<T>("isfinite", c, c0, c0, {0, 0, 0, 1, 1, 1});
}

TEST(ElementwiseMath, FloatRoundingSignsAndNaNsAreNumPys) {
  check_float_edges<float>();
  check_float_edges<double>();
}

// ---- integers and bool ----------------------------------------------------------------

std::vector<Fn> integer_fns() {
  return {{"abs", "ew::abs(x)"},
          {"sign", "ew::sign(x)"},
          {"pow", "ew::pow(x, y)"},
          {"maximum", "ew::maximum(x, y)"},
          {"minimum", "ew::minimum(x, y)"},
          {"clip", "ew::clip(x, y, z)"},
          {"remainder", "ew::remainder(x, y)"},
          {"floor_divide", "ew::floor_divide(x, y)"},
          {"isnan", "ew::isnan(x)"},
          {"isinf", "ew::isinf(x)"},
          {"isfinite", "ew::isfinite(x)"}};
}

// a^e mod 2^64, by halving the exponent.
uint64_t pow_mod64(uint64_t a, uint64_t e) {
  if (e == 0) return 1;
  const uint64_t h = pow_mod64(a, e / 2);
  return e % 2 ? h * h * a : h * h;
}

/// The references, computed wide (i128) and wrapped to T as NumPy wraps.
template <class T>
T ref_int(const std::string& fn, T x, T y, T z) {
  if (fn == "abs") return T(x < 0 ? -i128(x) : i128(x));
  if (fn == "sign") return T(x > 0 ? 1 : x < 0 ? -1 : 0);
  if (fn == "pow") {
    if constexpr (std::is_signed_v<T>) {
      if (y < 0) return T(x == 1 ? 1 : x == -1 ? (y % 2 != 0 ? -1 : 1) : 0);
    }
    return T(pow_mod64(uint64_t(int64_t(x)), uint64_t(y)));
  }
  if (fn == "maximum") return std::max(x, y);
  if (fn == "minimum") return std::min(x, y);
  if (fn == "clip") return std::min(std::max(x, y), z);
  if (fn == "remainder" || fn == "floor_divide") {
    if (y == 0) return T(0);
    const i128 a = x, b = y;
    i128 q = a / b;
    if (a % b != 0 && (a < 0) != (b < 0)) --q;
    return T(fn == "floor_divide" ? q : a - q * b);
  }
  if (fn == "isnan" || fn == "isinf") return T(0);
  if (fn == "isfinite") return T(1);
  ADD_FAILURE() << "no reference for " << fn;
  return T(0);
}

/// Every pair of the type's edge values (MIN, MIN + 1, -7 ... 7, MAX - 1, MAX), then random
/// values over the whole range and small ones (exponents for pow).
template <class T>
void integer_inputs(std::mt19937_64& g, std::vector<T>& a, std::vector<T>& b, std::vector<T>& c) {
  using L = std::numeric_limits<T>;
  std::vector<T> edge = {L::min(), T(L::min() + 1), T(L::max() - 1), L::max()};
  for (int v = -7; v <= 7; ++v)
    if (v >= 0 || std::is_signed_v<T>) edge.push_back(T(v));
  std::uniform_int_distribution<std::size_t> pick(0, edge.size() - 1);
  for (T x : edge) {
    for (T y : edge) {
      a.push_back(x);
      b.push_back(y);
      c.push_back(edge[pick(g)]);
    }
  }
  std::uniform_int_distribution<uint64_t> bits;
  std::uniform_int_distribution<int> small(std::is_signed_v<T> ? -20 : 0, 70);
  auto any = [&] { return T(bits(g)); };  // the low bits: uniform over T
  for (int k = 0; k < 3000; ++k) {
    a.push_back(any());
    b.push_back(any());
    c.push_back(any());
  }
  for (int k = 0; k < 2000; ++k) {
    a.push_back(k % 2 ? any() : T(small(g)));
    b.push_back(T(small(g)));
    c.push_back(any());
  }
}

template <class T>
void check_integers(uint64_t salt) {
  SCOPED_TRACE("random inputs from std::mt19937_64 seeded by base seed " +
               std::to_string(base_seed()) + " and salt " + std::to_string(salt) +
               " (GRIDSPAN_TEST_SEED repeats a run)");
  auto g = rng(salt);
  std::vector<T> a, b, c;
  integer_inputs(g, a, b, c);
  const auto fns = integer_fns();
  const Output<T> out = run_ew<T>(fns, a, b, c);
  for (std::size_t f = 0; f < fns.size(); ++f) {
    int wrong = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const T got = out.at(f, i), want = ref_int<T>(fns[f].name, a[i], b[i], c[i]);
      if (got == want) continue;
      if (++wrong <= 5) {
        ADD_FAILURE() << fns[f].name << "(" << show(a[i]) << ", " << show(b[i]) << ", "
                      << show(c[i]) << ") = " << show(got) << ", expected " << show(want);
      }
    }
    EXPECT_EQ(wrong, 0) << fns[f].name << ": " << wrong << " of " << a.size() << " wrong";
  }
}

TEST(ElementwiseMath, Int8FunctionsMatchTheReferences) {
  check_integers<int8_t>(711);
}
TEST(ElementwiseMath, Int16FunctionsMatchTheReferences) {
  check_integers<int16_t>(712);
}
TEST(ElementwiseMath, Int32FunctionsMatchTheReferences) {
  check_integers<int32_t>(713);
}
TEST(ElementwiseMath, Int64FunctionsMatchTheReferences) {
  check_integers<int64_t>(714);
}
TEST(ElementwiseMath, Uint8FunctionsMatchTheReferences) {
  check_integers<uint8_t>(715);
}
TEST(ElementwiseMath, Uint16FunctionsMatchTheReferences) {
  check_integers<uint16_t>(716);
}
TEST(ElementwiseMath, Uint32FunctionsMatchTheReferences) {
  check_integers<uint32_t>(717);
}
TEST(ElementwiseMath, Uint64FunctionsMatchTheReferences) {
  check_integers<uint64_t>(718);
}

/// a, b, the expected value of `fn`.
template <class T>
void expect_int_rows(const std::vector<std::pair<std::string, std::array<T, 3>>>& cases) {
  const auto fns = integer_fns();
  std::vector<T> a, b, zero;
  for (const auto& k : cases) {
    a.push_back(k.second[0]);
    b.push_back(k.second[1]);
    zero.push_back(T(0));
  }
  const Output<T> out = run_ew<T>(fns, a, b, zero);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [fn, k] = cases[i];
    EXPECT_EQ(out.at(row_of(fns, fn), i), k[2])
        << fn << "(" << show(k[0]) << ", " << show(k[1]) << ") of " << dtype_name(dtype_v<T>);
  }
}

/// Python's % and // in NumPy 1.24 (no trap for MIN % -1 or MIN // -1, 0 for x % 0 and
/// x // 0), abs and sign at the extremes, and wrapping pow; then pow's negative exponents,
/// where NumPy raises and the header documents its own answer.
template <class T>
void check_integer_edges(const std::vector<std::array<T, 4>>& divmod,
                         const std::vector<std::array<T, 3>>& pows) {
  using L = std::numeric_limits<T>;
  std::vector<std::pair<std::string, std::array<T, 3>>> cases;
  for (const auto& k : divmod) {
    cases.push_back({"remainder", {k[0], k[1], k[2]}});
    cases.push_back({"floor_divide", {k[0], k[1], k[3]}});
  }
  for (const auto& k : pows) cases.push_back({"pow", k});
  cases.push_back({"abs", {L::min(), 0, std::is_signed_v<T> ? L::min() : T(0)}});
  cases.push_back({"abs", {L::max(), 0, L::max()}});
  cases.push_back({"sign", {L::min(), 0, std::is_signed_v<T> ? T(-1) : T(0)}});
  cases.push_back({"sign", {L::max(), 0, 1}});
  cases.push_back({"sign", {0, 0, 0}});
  if constexpr (std::is_signed_v<T>) {
    cases.push_back({"pow", {2, -1, 0}});
    cases.push_back({"pow", {0, -1, 0}});
    cases.push_back({"pow", {1, -5, 1}});
    cases.push_back({"pow", {-1, -3, -1}});
    cases.push_back({"pow", {-1, -4, 1}});
    cases.push_back({"pow", {-1, L::min(), 1}});
    cases.push_back({"pow", {L::min(), -1, 0}});
  }
  expect_int_rows<T>(cases);
}

TEST(ElementwiseMath, IntegerRemainderFloorDivideAbsSignAndPowAreNumPys) {
  // a, b, np.remainder(a, b), np.floor_divide(a, b)
  check_integer_edges<int8_t>({{-7, 3, 2, -3},
                               {7, -3, -2, -3},
                               {-7, -3, -1, 2},
                               {7, 3, 1, 2},
                               {7, 0, 0, 0},
                               {-7, 0, 0, 0},
                               {0, 0, 0, 0},
                               {-128, -1, 0, -128},
                               {-128, 0, 0, 0},
                               {-128, 1, 0, -128},
                               {-128, 127, 126, -2},
                               {127, -128, -1, -1},
                               {-1, 5, 4, -1},
                               {0, -3, 0, 0},
                               {127, -1, 0, -127},
                               {-128, 2, 0, -64},
                               {-128, -2, 0, 64},
                               {127, 2, 1, 63}},
                              // a, b, np.power(a, b)
                              {{3, 5, -13},
                               {2, 7, -128},
                               {-2, 7, -128},
                               {2, 8, 0},
                               {-2, 63, 0},
                               {3, 40, 33},
                               {0, 0, 1},
                               {-3, 3, -27},
                               {10, 19, 0}});
  check_integer_edges<int16_t>({{-7, 3, 2, -3},
                                {7, -3, -2, -3},
                                {7, 0, 0, 0},
                                {-32768, -1, 0, -32768},
                                {-32768, 0, 0, 0},
                                {-32768, 32767, 32766, -2},
                                {32767, -32768, -1, -1},
                                {32767, -1, 0, -32767},
                                {-32768, -2, 0, 16384}},
                               {{3, 40, -6111}, {255, 2, -511}, {7, 200, -10047}, {-2, 63, 0}});
  const int32_t i32min = std::numeric_limits<int32_t>::min();
  check_integer_edges<int32_t>(
      {{-7, 3, 2, -3},
       {7, -3, -2, -3},
       {-7, -3, -1, 2},
       {7, 0, 0, 0},
       {-7, 0, 0, 0},
       {0, 0, 0, 0},
       {i32min, -1, 0, i32min},
       {i32min, 0, 0, 0},
       {i32min, 1, 0, i32min},
       {i32min, 2147483647, 2147483646, -2},
       {2147483647, i32min, -1, -1},
       {-1, 5, 4, -1},
       {0, -3, 0, 0},
       {2147483647, -1, 0, -2147483647},
       {i32min, -2, 0, 1073741824}},
      {{3, 40, 689956897}, {10, 19, -1981284352}, {7, 200, 816568513}, {-3, 3, -27}, {-2, 63, 0}});
  const int64_t i64min = std::numeric_limits<int64_t>::min(), i64max = INT64_MAX;
  check_integer_edges<int64_t>({{-7, 3, 2, -3},
                                {7, -3, -2, -3},
                                {-7, -3, -1, 2},
                                {7, 0, 0, 0},
                                {-7, 0, 0, 0},
                                {i64min, -1, 0, i64min},
                                {i64min, 0, 0, 0},
                                {i64min, i64max, i64max - 1, -2},
                                {i64max, i64min, -1, -1},
                                {i64max, -1, 0, -i64max},
                                {i64min, -2, 0, 4611686018427387904},
                                {i64max, 2, 1, 4611686018427387903}},
                               {{-2, 63, i64min},
                                {3, 40, -6289078614652622815},
                                {10, 19, -8446744073709551616},
                                {7, 200, 1459632558914132161}});
  check_integer_edges<uint8_t>(
      {{7, 3, 1, 2}, {7, 0, 0, 0}, {0, 0, 0, 0}, {255, 0, 0, 0}, {255, 2, 1, 127}},
      {{3, 5, 243}, {2, 8, 0}, {3, 40, 33}, {255, 2, 1}, {7, 200, 193}});
  check_integer_edges<uint64_t>({{7, 3, 1, 2},
                                 {7, 0, 0, 0},
                                 {18446744073709551615ull, 0, 0, 0},
                                 {18446744073709551615ull, 2, 1, 9223372036854775807ull}},
                                {{3, 40, 12157665459056928801ull},
                                 {10, 19, 10000000000000000000ull},
                                 {7, 200, 1459632558914132161ull}});
}

TEST(ElementwiseMath, BoolFunctionsAreNumPys) {
  // Where NumPy has a bool loop: abs, maximum (or), minimum (and), clip, isnan, isinf,
  // isfinite; and sign, whose int8 promotion in NumPy gives the same values.
  const std::vector<Fn> fns = {{"abs", "ew::abs(x)"},
                               {"sign", "ew::sign(x)"},
                               {"maximum", "ew::maximum(x, y)"},
                               {"minimum", "ew::minimum(x, y)"},
                               {"clip", "ew::clip(x, y, z)"},
                               {"isnan", "ew::isnan(x)"},
                               {"isinf", "ew::isinf(x)"},
                               {"isfinite", "ew::isfinite(x)"}};
  std::vector<uint8_t> a, b, c;
  for (int k = 0; k < 8; ++k) {
    a.push_back(uint8_t(k & 1));
    b.push_back(uint8_t((k >> 1) & 1));
    c.push_back(uint8_t((k >> 2) & 1));
  }
  const Output<bool> out = run_ew<bool>(fns, a, b, c);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool x = a[i], y = b[i], z = c[i];
    const bool want[] = {x, x, x || y, x && y, (x || y) && z, false, false, true};
    for (std::size_t f = 0; f < fns.size(); ++f)
      EXPECT_EQ(out.at(f, i), want[f]) << fns[f].name << "(" << x << ", " << y << ", " << z << ")";
  }
}

}  // namespace
}  // namespace gridspan::test
