// format_array against NumPy's str(): every expected string below is the output of NumPy
// 1.24.2 (Debian's python3-numpy) for the same values and shape, pasted as it printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "array/print.hpp"
#include "gridspan/core/half.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

template <class T>
std::string str(const std::vector<T>& values, DType t, const Dim& shape) {
  return array::format_array(values.data(), t, shape);
}

template <class T>
std::string scalar(T value, DType t) {
  return array::format_array(&value, t, Dim{});
}

/// np.arange(n) * step as doubles.
std::vector<double> arange(int64_t n, double step = 1.0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) * step;
  return v;
}

std::vector<int64_t> arange_int(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

template <class F>
std::vector<uint16_t> bits16(const std::vector<float>& values, F convert) {
  std::vector<uint16_t> v;
  for (float f : values) v.push_back(convert(f));
  return v;
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ArrayPrint, ZeroDimFloatsPrintAsScalars) {
  EXPECT_EQ(scalar(1.5, DType::f64), "1.5");
  EXPECT_EQ(scalar(1.0, DType::f64), "1.0");
  EXPECT_EQ(scalar(-0.0, DType::f64), "-0.0");
  EXPECT_EQ(scalar(1e16, DType::f64), "1e+16");
  EXPECT_EQ(scalar(1.5e-5, DType::f64), "1.5e-05");
  EXPECT_EQ(scalar(kNan, DType::f64), "nan");
  EXPECT_EQ(scalar(-kInf, DType::f64), "-inf");
  EXPECT_EQ(scalar(0.1f, DType::f32), "0.1");
  EXPECT_EQ(scalar(float_to_half(2049.0f), DType::f16), "2048.0");
  EXPECT_EQ(scalar(float_to_half(65504.0f), DType::f16), "65500.0");
}

TEST(ArrayPrint, ZeroDimIntegersAndBools) {
  EXPECT_EQ(scalar(int64_t{3}, DType::i64), "3");
  EXPECT_EQ(scalar(std::numeric_limits<uint64_t>::max(), DType::u64), "18446744073709551615");
  EXPECT_EQ(scalar(int8_t{-128}, DType::i8), "-128");
  EXPECT_EQ(scalar(uint8_t{1}, DType::boolean), "True");
  EXPECT_EQ(scalar(uint8_t{0}, DType::boolean), "False");
}

TEST(ArrayPrint, ReadmeExample) {  // np.arange(6.).reshape(2, 3)
  EXPECT_EQ(str(arange(6), DType::f64, Dim{2, 3}), "[[0. 1. 2.]\n [3. 4. 5.]]");
}

TEST(ArrayPrint, FloatsPadToOneWidth) {
  EXPECT_EQ(str(std::vector<double>{0.5, 1.25, 3.0}, DType::f64, Dim{3}), "[0.5  1.25 3.  ]");
  EXPECT_EQ(str(std::vector<double>{-0.0, 1.0}, DType::f64, Dim{2}), "[-0.  1.]");
}

TEST(ArrayPrint, FloatsRoundAtEightDigitsTiesToEven) {
  std::vector<double> v{1.0 / 3, 2.0 / 3, 0.001953125};
  EXPECT_EQ(str(v, DType::f64, Dim{3}), "[0.33333333 0.66666667 0.00195312]");
  EXPECT_EQ(str(std::vector<double>{0.1 + 0.2, 1.0}, DType::f64, Dim{2}), "[0.3 1. ]");
}

TEST(ArrayPrint, Float32UsesItsOwnShortestDigits) {
  EXPECT_EQ(str(std::vector<float>{0.1f, 0.2f, 0.3f}, DType::f32, Dim{3}), "[0.1 0.2 0.3]");
  // Past the shortest digits when others need more, and every integer digit positionally.
  EXPECT_EQ(str(std::vector<float>{5.2483417e-12f, 1.5f, 3e5f}, DType::f32, Dim{3}),
            "[5.2483417e-12 1.5000000e+00 3.0000000e+05]");
  EXPECT_EQ(str(std::vector<float>{67108872.f, 1e6f}, DType::f32, Dim{2}), "[67108872.  1000000.]");
  EXPECT_EQ(scalar(67108872.f, DType::f32), "67108870.0");
}

TEST(ArrayPrint, MixedMagnitudesSwitchToScientific) {
  EXPECT_EQ(str(std::vector<double>{1e-5, 1.0, 1000.5}, DType::f64, Dim{3}),
            "[1.0000e-05 1.0000e+00 1.0005e+03]");
  EXPECT_EQ(str(std::vector<double>{1.5, 2.25e10}, DType::f64, Dim{2}), "[1.50e+00 2.25e+10]");
  EXPECT_EQ(str(std::vector<double>{1e-100, 1.0}, DType::f64, Dim{2}), "[1.e-100 1.e+000]");
  EXPECT_EQ(str(std::vector<double>{0.001, 1.5}, DType::f64, Dim{2}), "[1.0e-03 1.5e+00]");
  // float32 1e-4 is 9.99999975e-05: below 1e-4 as NumPy 1.24 compares it.
  EXPECT_EQ(str(std::vector<float>{1e-4f, 0.05f}, DType::f32, Dim{2}), "[1.e-04 5.e-02]");
  EXPECT_EQ(str(std::vector<double>{1e-4, 0.05}, DType::f64, Dim{2}), "[0.0001 0.05  ]");
}

TEST(ArrayPrint, NanAndInf) {
  EXPECT_EQ(str(std::vector<double>{kNan, 1.5, -kInf, kInf}, DType::f64, Dim{4}),
            "[ nan  1.5 -inf  inf]");
  EXPECT_EQ(str(std::vector<double>{kNan, kInf}, DType::f64, Dim{2}), "[nan inf]");
}

TEST(ArrayPrint, IntegersRightAlignedWithNegatives) {
  EXPECT_EQ(str(std::vector<int32_t>{-5, 10, 300, -2000}, DType::i32, Dim{4}),
            "[   -5    10   300 -2000]");
}

TEST(ArrayPrint, Uint64Max) {
  std::vector<uint64_t> v{0, std::numeric_limits<uint64_t>::max()};
  EXPECT_EQ(str(v, DType::u64, Dim{2}), "[                   0 18446744073709551615]");
}

TEST(ArrayPrint, Int8) {
  EXPECT_EQ(str(std::vector<int8_t>{-128, 127, 0}, DType::i8, Dim{3}), "[-128  127    0]");
}

TEST(ArrayPrint, BoolsPadTrue) {
  EXPECT_EQ(str(std::vector<uint8_t>{1, 0, 1}, DType::boolean, Dim{3}), "[ True False  True]");
  EXPECT_EQ(str(std::vector<uint8_t>{1, 0, 0, 0}, DType::boolean, Dim{2, 2}),
            "[[ True False]\n [False False]]");
}

TEST(ArrayPrint, Float16) {
  // 2049 is stored as 2048; 0.1 as 0.0999755859375, whose digits past the shortest show when
  // the others need them.
  auto v = bits16({2049.0f, 0.1f, 65504.0f}, float_to_half);
  EXPECT_EQ(str(v, DType::f16, Dim{3}), "[2.048e+03 9.998e-02 6.550e+04]");
  // Positional output keeps every integer digit, unlike the 0-d "65500.0".
  EXPECT_EQ(str(bits16({65504.0f, 100.0f}, float_to_half), DType::f16, Dim{2}), "[65504.   100.]");
}

TEST(ArrayPrint, Bfloat16) {
  // NumPy has no bfloat16: these are NumPy's str() of float32 arrays holding the shortest
  // bfloat16 digits (bfloat16 0.1 is 0.10009765625, 3.14 is 3.140625).
  EXPECT_EQ(str(bits16({0.1f, 1.5f, 3.14f}, float_to_bf16), DType::bf16, Dim{3}),
            "[0.1  1.5  3.14]");
  EXPECT_EQ(str(bits16({1e10f, -2.5f, 0.01f}, float_to_bf16), DType::bf16, Dim{3}),
            "[ 1.0e+10 -2.5e+00  1.0e-02]");
  EXPECT_EQ(scalar(float_to_bf16(0.1f), DType::bf16), "0.1");
}

TEST(ArrayPrint, SixteenBitDigitsReadBackToTheSameBits) {
  auto g = rng(41);  // the seed is printed by the test main
  SCOPED_TRACE("GRIDSPAN_TEST_SEED=" + std::to_string(base_seed()));
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (int trial = 0; trial < 2000; ++trial) {
    auto h = static_cast<uint16_t>(bits(g)), b = static_cast<uint16_t>(bits(g));
    if (std::isfinite(half_to_float(h))) {
      std::string s = scalar(h, DType::f16);
      EXPECT_EQ(float_to_half(std::strtof(s.c_str(), nullptr)), h) << s;
    }
    if (std::isfinite(bf16_to_float(b))) {
      std::string s = scalar(b, DType::bf16);
      EXPECT_EQ(float_to_bf16(std::strtof(s.c_str(), nullptr)), b) << s;
    }
  }
}

TEST(ArrayPrint, Summarised1d) {  // np.arange(2000), np.arange(2000.) * 0.5
  EXPECT_EQ(str(arange_int(2000), DType::i64, Dim{2000}), "[   0    1    2 ... 1997 1998 1999]");
  EXPECT_EQ(str(arange(2000, 0.5), DType::f64, Dim{2000}),
            "[0.000e+00 5.000e-01 1.000e+00 ... 9.985e+02 9.990e+02 9.995e+02]");
}

TEST(ArrayPrint, Summarised2dRowsAndColumns) {  // np.arange(2500).reshape(50, 50) / 4
  EXPECT_EQ(str(arange(2500, 0.25), DType::f64, Dim{50, 50}),
            "[[0.0000e+00 2.5000e-01 5.0000e-01 ... 1.1750e+01 1.2000e+01 1.2250e+01]\n"
            " [1.2500e+01 1.2750e+01 1.3000e+01 ... 2.4250e+01 2.4500e+01 2.4750e+01]\n"
            " [2.5000e+01 2.5250e+01 2.5500e+01 ... 3.6750e+01 3.7000e+01 3.7250e+01]\n"
            " ...\n"
            " [5.8750e+02 5.8775e+02 5.8800e+02 ... 5.9925e+02 5.9950e+02 5.9975e+02]\n"
            " [6.0000e+02 6.0025e+02 6.0050e+02 ... 6.1175e+02 6.1200e+02 6.1225e+02]\n"
            " [6.1250e+02 6.1275e+02 6.1300e+02 ... 6.2425e+02 6.2450e+02 6.2475e+02]]");
}

TEST(ArrayPrint, Summarised3d) {  // np.arange(1331).reshape(11, 11, 11)
  EXPECT_EQ(str(arange_int(1331), DType::i64, Dim{11, 11, 11}),
            "[[[   0    1    2 ...    8    9   10]\n"
            "  [  11   12   13 ...   19   20   21]\n"
            "  [  22   23   24 ...   30   31   32]\n"
            "  ...\n"
            "  [  88   89   90 ...   96   97   98]\n"
            "  [  99  100  101 ...  107  108  109]\n"
            "  [ 110  111  112 ...  118  119  120]]\n"
            "\n"
            " [[ 121  122  123 ...  129  130  131]\n"
            "  [ 132  133  134 ...  140  141  142]\n"
            "  [ 143  144  145 ...  151  152  153]\n"
            "  ...\n"
            "  [ 209  210  211 ...  217  218  219]\n"
            "  [ 220  221  222 ...  228  229  230]\n"
            "  [ 231  232  233 ...  239  240  241]]\n"
            "\n"
            " [[ 242  243  244 ...  250  251  252]\n"
            "  [ 253  254  255 ...  261  262  263]\n"
            "  [ 264  265  266 ...  272  273  274]\n"
            "  ...\n"
            "  [ 330  331  332 ...  338  339  340]\n"
            "  [ 341  342  343 ...  349  350  351]\n"
            "  [ 352  353  354 ...  360  361  362]]\n"
            "\n"
            " ...\n"
            "\n"
            " [[ 968  969  970 ...  976  977  978]\n"
            "  [ 979  980  981 ...  987  988  989]\n"
            "  [ 990  991  992 ...  998  999 1000]\n"
            "  ...\n"
            "  [1056 1057 1058 ... 1064 1065 1066]\n"
            "  [1067 1068 1069 ... 1075 1076 1077]\n"
            "  [1078 1079 1080 ... 1086 1087 1088]]\n"
            "\n"
            " [[1089 1090 1091 ... 1097 1098 1099]\n"
            "  [1100 1101 1102 ... 1108 1109 1110]\n"
            "  [1111 1112 1113 ... 1119 1120 1121]\n"
            "  ...\n"
            "  [1177 1178 1179 ... 1185 1186 1187]\n"
            "  [1188 1189 1190 ... 1196 1197 1198]\n"
            "  [1199 1200 1201 ... 1207 1208 1209]]\n"
            "\n"
            " [[1210 1211 1212 ... 1218 1219 1220]\n"
            "  [1221 1222 1223 ... 1229 1230 1231]\n"
            "  [1232 1233 1234 ... 1240 1241 1242]\n"
            "  ...\n"
            "  [1298 1299 1300 ... 1306 1307 1308]\n"
            "  [1309 1310 1311 ... 1317 1318 1319]\n"
            "  [1320 1321 1322 ... 1328 1329 1330]]]");
}

TEST(ArrayPrint, ThreeDimBlocksSeparatedByBlankLines) {  // np.arange(12.).reshape(2, 2, 3)
  EXPECT_EQ(str(arange(12), DType::f64, Dim{2, 2, 3}),
            "[[[ 0.  1.  2.]\n  [ 3.  4.  5.]]\n\n [[ 6.  7.  8.]\n  [ 9. 10. 11.]]]");
}

TEST(ArrayPrint, LongRowsWrapAt75Columns) {  // np.arange(30.) / 7
  std::vector<double> v(30);
  for (int i = 0; i < 30; ++i) v[i] = i / 7.0;
  EXPECT_EQ(str(v, DType::f64, Dim{30}),
            "[0.         0.14285714 0.28571429 0.42857143 0.57142857 0.71428571\n"
            " 0.85714286 1.         1.14285714 1.28571429 1.42857143 1.57142857\n"
            " 1.71428571 1.85714286 2.         2.14285714 2.28571429 2.42857143\n"
            " 2.57142857 2.71428571 2.85714286 3.         3.14285714 3.28571429\n"
            " 3.42857143 3.57142857 3.71428571 3.85714286 4.         4.14285714]");
}

TEST(ArrayPrint, WrappedRowsIndentToTheirBracket) {
  std::vector<int64_t> v;  // [10**15 + i for i in range(12)], [-(10**14) - i ...]
  for (int i = 0; i < 12; ++i) v.push_back(1000000000000000 + i);
  for (int i = 0; i < 12; ++i) v.push_back(-100000000000000 - i);
  EXPECT_EQ(str(v, DType::i64, Dim{2, 12}),
            "[[1000000000000000 1000000000000001 1000000000000002 1000000000000003\n"
            "  1000000000000004 1000000000000005 1000000000000006 1000000000000007\n"
            "  1000000000000008 1000000000000009 1000000000000010 1000000000000011]\n"
            " [-100000000000000 -100000000000001 -100000000000002 -100000000000003\n"
            "  -100000000000004 -100000000000005 -100000000000006 -100000000000007\n"
            "  -100000000000008 -100000000000009 -100000000000010 -100000000000011]]");
}

TEST(ArrayPrint, EmptyArrays) {
  std::vector<double> none;
  EXPECT_EQ(str(none, DType::f64, Dim{0}), "[]");
  EXPECT_EQ(str(none, DType::f64, Dim{2, 0}), "[]");
}

}  // namespace
}  // namespace gridspan::test
