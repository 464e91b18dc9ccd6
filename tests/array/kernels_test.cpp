// Kernels from strings: CuPy's ElementwiseKernel and ReductionKernel semantics (placeholder
// letters from the outputs first, then the inputs, scalars' int64 and float64, outputs given
// or allocated, broadcasting, raw parameters, axis and keepdims), values against the host,
// and the bad paths (a type that is no dtype, letters that disagree, code that does not
// compile shows its generated line).
#include <gtest/gtest.h>

#include <cmath>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

std::vector<float> floats(std::size_t n, uint64_t salt) {
  auto g = test::rng(salt);
  return test::random_vector<float>(n, g);
}

TEST(ArrayKernels, ElementwiseKernelAllocatesOrWritesItsOutputsAndBroadcasts) {
  for (int devices : {1, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    const int64_t n = 301, m = 7;
    auto xv = floats(n * m, 1), yv = floats(m, 2);
    auto x = ctx.from_vector(xv, {n, m}), y = ctx.from_vector(yv, {m});
    gs::ElementwiseKernel sq("T x, T y", "T z", "z = (x - y) * (x - y)", "squared_diff");
    gs::Array<float> z = sq(x, y);  // y broadcast along the rows
    ASSERT_EQ(z.shape(), (gs::Dim{n, m}));
    auto got = z.to_vector();
    for (int64_t i = 0; i < n * m; ++i) {
      const float d = xv[i] - yv[i % m];
      ASSERT_EQ(got[i], d * d) << i;
    }
    // A given output is written in place; a scalar reaches T as the arrays' dtype.
    auto out = gs::full<float>(ctx, {n, m}, -777.0f);  // poisoned
    gs::ElementwiseKernel axpy("T x, T y, T a", "T z", "z = a * x + y", "axpy");
    axpy(x, y, 2.5f, out);
    auto w = out.to_vector();
    for (int64_t i = 0; i < n * m; ++i)  // a GPU's compiler may fuse it into one fma
      ASSERT_NEAR(w[i], 2.5f * xv[i] + yv[i % m], 1e-6f * (1 + std::abs(w[i]))) << i;
    // A readwrite output: the operation reads what it holds.
    gs::ElementwiseKernel acc("T x", "T z", "z += x", "accumulate");
    acc(x, out);
    auto w2 = out.to_vector();
    for (int64_t i = 0; i < n * m; ++i) ASSERT_EQ(w2[i], w[i] + xv[i]) << i;
  }
}

TEST(ArrayKernels, LettersComeFromOutputsThenInputsAndScalarsAloneAreInt64OrFloat64) {
  gs::Context ctx(test::quiet_config(2));
  auto i32 = ctx.from_vector<int32_t>({1, -2, 3, 40000}, {4});
  // U reached by a scalar only: int64 for an integer, float64 for a floating scalar.
  gs::ElementwiseKernel scale("T x, U s", "T y", "y = (T)(x * s)", "scale");
  gs::Array<int32_t> a = scale(i32, 3);
  EXPECT_EQ(a.to_vector(), (std::vector<int32_t>{3, -6, 9, 120000}));
  gs::Array<int32_t> b = scale(i32, 0.5);
  EXPECT_EQ(b.to_vector(), (std::vector<int32_t>{0, -1, 1, 20000}));
  // The output's letter decides: a float64 output makes T float64, and the int32 input
  // then disagrees with it.
  auto d = gs::empty<double>(ctx, {4});
  EXPECT_THROW(scale(i32, 2, d), gs::Error);
  // Fixed types convert their inputs: float32 x reads the int32 array as float.
  gs::ElementwiseKernel half("float32 x", "float32 y", "y = x / 2", "halve");
  gs::Array<float> h = half(i32);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{0.5f, -1.0f, 1.5f, 20000.0f}));
  // 16-bit floats are float inside and rounded once when stored.
  auto f16 = ctx.from_vector<gs::float16>({gs::float16(2049.0f), gs::float16(1.0f)}, {2});
  gs::ElementwiseKernel twice("T x", "T y", "y = x + x + 1", "twice");
  gs::Array<gs::float16> t = twice(f16);
  EXPECT_EQ(float(t.to_vector()[0]), 4096.0f);  // 2048 + 2048 + 1 = 4097 rounds to 4096
  EXPECT_EQ(float(t.to_vector()[1]), 3.0f);
  // Several outputs, taken with get<T>(i); a wrong T is an error.
  gs::ElementwiseKernel both("T x", "T lo, bool neg", "lo = x - 1; neg = x < 0", "both");
  auto r = both(i32);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.get<int32_t>(0).to_vector(), (std::vector<int32_t>{0, -3, 2, 39999}));
  EXPECT_EQ(r.get<bool>(1).to_vector(), (std::vector<bool>{false, true, false, false}));
  EXPECT_THROW(r.get<float>(0), gs::Error);
  EXPECT_THROW((void)static_cast<gs::Array<int32_t>>(r), gs::Error);  // two outputs
}

TEST(ArrayKernels, RawParametersAreWholeArraysIndexedByElementNumber) {
  gs::Context ctx(test::quiet_config(3));
  const int64_t n = 1000;
  auto xv = floats(n, 3);
  auto x = ctx.from_vector(xv, {n});
  // Reverse through a raw input: every element reads another's.
  gs::ElementwiseKernel rev("raw T x, T y", "T z", "z = x[_ind.size() - 1 - i] + y", "reverse");
  auto ones = gs::ones<float>(ctx, {n});
  gs::Array<float> z = rev(x, ones);
  auto got = z.to_vector();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], xv[n - 1 - i] + 1.0f) << i;
  // A 2-D raw array (here a transposed view, copied first) indexed row-major.
  auto m = ctx.from_vector(floats(12, 4), {3, 4});
  auto mv = m.to_vector();
  gs::ElementwiseKernel pick("raw T m, int64 j", "T z", "z = m[j]", "pick");
  auto idx = ctx.from_vector<int64_t>({0, 5, 11, 7}, {4});
  gs::Array<float> p = pick(m.transpose(), idx);
  // transposed (4,3): element j is m[j % 3][j / 3]
  const std::vector<int64_t> js{0, 5, 11, 7};
  for (int k = 0; k < 4; ++k) EXPECT_EQ(p.to_vector()[k], mv[(js[k] % 3) * 4 + js[k] / 3]) << k;
}

TEST(ArrayKernels, ReductionKernelFollowsSumsAxesAndKeepdims) {
  for (int devices : {1, 2, 3}) {
    gs::Context ctx(test::quiet_config(devices));
    const int64_t n = 67, m = 1030;
    auto xv = floats(n * m, 5);
    auto x = ctx.from_vector(xv, {n, m});
    gs::ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
    gs::Array<float> all = l2(x);
    EXPECT_EQ(all.shape(), gs::Dim{});
    double want = 0;
    for (float v : xv) want += double(v) * v;
    EXPECT_NEAR(all.item(), std::sqrt(want), 1e-4 * std::sqrt(want));
    gs::Array<float> rows = l2(x, 1);
    ASSERT_EQ(rows.shape(), gs::Dim{n});
    auto r = rows.to_vector();
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < m; ++j) s += double(xv[i * m + j]) * xv[i * m + j];
      ASSERT_NEAR(r[i], std::sqrt(s), 1e-5 * std::sqrt(s)) << i;
    }
    gs::Array<float> cols = l2(x, -2, true);
    ASSERT_EQ(cols.shape(), (gs::Dim{1, m}));
    EXPECT_EQ(gs::Array<float>(l2(x, 1)).to_vector(), r);  // the same run to run
    // Two inputs and an integer max: exact on every device count.
    std::vector<int32_t> iv(n * m);
    auto g = test::rng(6);
    for (auto& v : iv) v = static_cast<int32_t>(g() % 100001) - 50000;
    auto xi = ctx.from_vector(iv, {n, m});
    gs::ReductionKernel maxabs("T x, T y", "T z", "abs(x - y)", "a > b ? a : b", "z = a", "0",
                               "maxabs");
    gs::Array<int32_t> mx = maxabs(xi, 7);
    int32_t wmax = 0;
    for (int32_t v : iv) wmax = std::max(wmax, std::abs(v - 7));
    EXPECT_EQ(mx.item(), wmax);
  }
}

TEST(ArrayKernels, BadKernelsAreErrorsThatSayWhat) {
  gs::Context ctx(test::quiet_config(1));
  auto x = ctx.from_vector(floats(8, 7), {8});
  auto xi = ctx.from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  EXPECT_THROW(gs::ElementwiseKernel("complex64 x", "T y", "y = x", "k"), gs::Error);
  EXPECT_THROW(gs::ElementwiseKernel("float x", "T y", "y = x", "k"), gs::Error);
  EXPECT_THROW(gs::ElementwiseKernel("T x, T x", "T y", "y = x", "k"), gs::Error);
  EXPECT_THROW(gs::ElementwiseKernel("T i", "T y", "y = i", "k"), gs::Error);
  EXPECT_THROW(gs::ElementwiseKernel("T", "T y", "y = 1", "k"), gs::Error);
  gs::ElementwiseKernel add("T x, T y", "T z", "z = x + y", "add");
  EXPECT_THROW(add(x, xi), gs::Error);                                  // T is float32 and int32
  EXPECT_THROW(add(x), gs::Error);                                      // too few arguments
  EXPECT_THROW(add(x, ctx.from_vector(floats(3, 8), {3})), gs::Error);  // cannot broadcast
  EXPECT_THROW(add(x, x, gs::empty<float>(ctx, {4})), gs::Error);       // output's shape
  gs::ElementwiseKernel unknown("T x", "U y", "y = x", "unknown");
  EXPECT_THROW(unknown(x), gs::Error);  // U not known from the inputs
  gs::ElementwiseKernel broken("T x", "T y", "y = x +* 2;", "broken");
  try {
    broken(x);
    FAIL() << "a kernel that does not compile ran";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("y = x +* 2;"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("generated line"), std::string::npos) << e.what();
  }
  gs::ReductionKernel sum("T x", "T y", "x", "a + b", "y = a", "0", "sum");
  EXPECT_THROW(sum(x, 1), gs::Error);  // axis out of range
  EXPECT_THROW(sum(x, 0.5), gs::Error);
  EXPECT_THROW(gs::ReductionKernel("T x", "T y", "x", "a + b", "y = a", "", "noidentity"),
               gs::Error);
  EXPECT_THROW(gs::ReductionKernel("raw T x", "T y", "x", "a + b", "y = a", "0", "raw"), gs::Error);
}

TEST(ArrayKernels, AReductionOfNothingAnswersThePostMappedIdentity) {
  // CuPy's answer: every result element is post(identity), the result shaped as gs::sum's.
  gs::Context ctx(test::quiet_config(2));
  gs::ReductionKernel shifted("T x", "T y", "x * x", "a + b", "y = a + 1.5", "2", "shifted");
  auto e = gs::zeros<float>(ctx, {0, 3});
  gs::Array<float> all = shifted(e);
  EXPECT_EQ(all.shape(), gs::Dim{});
  EXPECT_EQ(all.item(), 3.5f);
  gs::Array<float> cols = shifted(e, 0);
  EXPECT_EQ(cols.to_vector(), (std::vector<float>{3.5f, 3.5f, 3.5f}));
  gs::Array<float> kept = shifted(e, 0, true);
  EXPECT_EQ(kept.shape(), (gs::Dim{1, 3}));
  EXPECT_EQ(kept.to_vector(), (std::vector<float>{3.5f, 3.5f, 3.5f}));
  gs::Array<float> rows = shifted(e, 1);
  EXPECT_EQ(rows.shape(), (gs::Dim{0}));
  gs::Array<float> every_kept = shifted(e, true);
  EXPECT_EQ(every_kept.shape(), (gs::Dim{1, 1}));
  EXPECT_EQ(every_kept.item(), 3.5f);
}

}  // namespace
}  // namespace gridspan
