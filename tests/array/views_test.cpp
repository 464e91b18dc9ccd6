// Views and copies: slicing, transposing and reshaping share or copy as NumPy and Cumo say,
// writes through a view land in its base, elementwise operations read views where they lie,
// printing follows NumPy, and host reads are seen (NoSyncGuard, sync warnings).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

std::vector<double> seq(int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return v;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const gs::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ArrayViews, SlicesAreViewsThatWriteTheirBase) {
  gs::Context ctx(test::quiet_config(2));
  auto a = ctx.from_vector(seq(24), {4, 6});
  auto top = a.slice(gs::range(0, 2), gs::all);
  EXPECT_EQ(top.shape(), (gs::Dim{2, 6}));
  EXPECT_EQ(top.to_vector()[7], 7.0);
  top.slice(0, 0).fill(77.0);  // Cumo: a[0..1, true][0, 0] = 77 changes a
  EXPECT_EQ(a.to_vector()[0], 77.0);
  auto col = a.slice(gs::all, 4);  // an index drops its axis
  EXPECT_EQ(col.shape(), (gs::Dim{4}));
  EXPECT_EQ(col.to_vector(), (std::vector<double>{4, 10, 16, 22}));
  auto back = a.slice(3, gs::range(5, -7, -2));  // 5, 3, 1 of row 3
  EXPECT_EQ(back.to_vector(), (std::vector<double>{23, 21, 19}));
  EXPECT_EQ(a.slice(-1, -1).item(), 23.0);
  EXPECT_NE(error_of([&] { a.slice(4); }).find("index 4 is out of bounds for axis 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.slice(gs::all, gs::range(0, 6, 0)); }).find("step of 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.slice(gs::range(0, 5)); }).find("out of bounds"), std::string::npos);
  EXPECT_NE(error_of([&] { a.slice(0, 0, 0); }).find("3 indices"), std::string::npos);
  EXPECT_NE(error_of([&] { a.item(); }).find("item() needs one"), std::string::npos);
}

TEST(ArrayViews, ReshapeCopiesAndReshapeInPlaceDoesNot) {
  gs::Context ctx(test::quiet_config(2));
  auto a = ctx.from_vector(seq(24), {4, 6});
  auto r = a.reshape({2, 12});
  r.slice(0, 0).fill(99.0);  // a copy: a does not change
  EXPECT_EQ(a.to_vector()[0], 0.0);
  EXPECT_EQ(r.to_vector()[0], 99.0);
  EXPECT_EQ(r.to_vector()[13], 13.0);
  auto v = a.reshape_in_place({3, 8});
  EXPECT_EQ(v.to_vector()[9], 9.0);
  v.slice(1, 1).fill(-1.0);  // element 9 of a
  EXPECT_EQ(a.to_vector()[9], -1.0);
  auto rows = a.slice(gs::range(1, 3)).reshape_in_place({12});  // a contiguous slice
  EXPECT_EQ(rows.slice(gs::range(0, 12, 5)).to_vector(), (std::vector<double>{6, 11, 16}));
  EXPECT_NE(error_of([&] { a.reshape({5, 5}); }).find("25 elements"), std::string::npos);
  EXPECT_NE(error_of([&] {
              a.slice(gs::all, gs::range(0, 2)).reshape_in_place({8});
            }).find("not contiguous"),
            std::string::npos);
  auto strided = a.slice(gs::all, gs::range(0, 6, 2)).reshape({12});  // copied first
  EXPECT_EQ(strided.to_vector()[4], 8.0);
}

TEST(ArrayViews, ALengthOneAxisDoesNotBreakContiguity) {
  gs::Context ctx(test::quiet_config(1));
  EXPECT_TRUE(ctx.from_vector(seq(4), {1, 4}).slice(gs::all, gs::range(0, 2)).is_contiguous());
  EXPECT_TRUE(
      ctx.from_vector(seq(4), {1, 1, 4}).slice(gs::all, gs::all, gs::range(0, 2)).is_contiguous());
  EXPECT_TRUE(ctx.from_vector(seq(3), {1, 3}).transpose().is_contiguous());
  EXPECT_FALSE(ctx.from_vector(seq(8), {2, 4}).slice(gs::all, gs::range(0, 2)).is_contiguous());
  EXPECT_FALSE(ctx.from_vector(seq(6), {2, 3}).transpose().is_contiguous());
  EXPECT_EQ(ctx.from_vector(seq(4), {1, 4}).slice(gs::all, gs::range(0, 2)).to_vector(),
            (std::vector<double>{0, 1}));
}

TEST(ArrayViews, TransposesAndStridedOperandsAreReadWhereTheyLie) {
  gs::Context ctx(test::quiet_config(3));
  auto g = test::rng(21);
  auto av = test::random_vector<float>(35 * 8, g), bv = test::random_vector<float>(8 * 35, g);
  auto a = ctx.from_vector(av, {35, 8}), b = ctx.from_vector(bv, {8, 35});
  auto t = (a.transpose() * b).to_vector();  // (8, 35)
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 35; ++j) ASSERT_EQ(t[i * 35 + j], av[j * 8 + i] * bv[i * 35 + j]);
  auto every_other = (a.slice(gs::range(0, 35, 2), gs::range(7, -9, -1)) + 1.0f).to_vector();
  ASSERT_EQ(every_other.size(), std::size_t(18 * 8));
  EXPECT_EQ(every_other[2 * 8 + 0], av[4 * 8 + 7] + 1.0f);
  auto t3 = ctx.from_vector(seq(24), {2, 3, 4});
  auto p = gs::transpose(t3, {1, 2, 0});  // shape (3, 4, 2): p[i, j, k] = t3[k, i, j]
  EXPECT_EQ(p.shape(), (gs::Dim{3, 4, 2}));
  EXPECT_EQ(p.to_vector()[(2 * 4 + 1) * 2 + 1], 1 * 12 + 2 * 4 + 1);
  EXPECT_THROW(gs::transpose(t3, {0, 0, 1}), gs::Error);
}

TEST(ArrayViews, AssignBroadcastsConvertsAndCopesWithOverlap) {
  gs::Context ctx(test::quiet_config(2));
  auto a = ctx.from_vector(seq(12), {3, 4});
  a.slice(gs::range(0, 2), gs::all).assign(ctx.from_vector<double>({10, 20, 30, 40}, {4}));
  EXPECT_EQ(a.to_vector(), (std::vector<double>{10, 20, 30, 40, 10, 20, 30, 40, 8, 9, 10, 11}));
  auto line = ctx.from_vector(seq(6), {6});
  line.slice(gs::range(1, 6)).assign(line.slice(gs::range(0, 5)));  // NumPy: a[1:] = a[:-1]
  EXPECT_EQ(line.to_vector(), (std::vector<double>{0, 0, 1, 2, 3, 4}));
  EXPECT_NE(error_of([&] { a.assign(ctx.from_vector(seq(3), {3})); }).find("cannot assign"),
            std::string::npos);
  auto ints = ctx.from_vector<int32_t>({1, 2, 3}, {3});
  ints.assign(ctx.from_vector<double>({2.9, -2.9, 1e20}, {3}));  // toward zero, saturating
  EXPECT_EQ(ints.to_vector(), (std::vector<int32_t>{2, -2, 2147483647}));
  auto f = ctx.from_vector<double>({std::nan(""), -1e30, 3.5}, {3});
  EXPECT_EQ(f.astype<int16_t>().to_vector(), (std::vector<int16_t>{0, -32768, 3}));
  EXPECT_NE(
      error_of([&] { ctx.from_vector<int8_t>({1}, {1}).assign(300); }).find("300 does not fit"),
      std::string::npos);
}

TEST(ArrayViews, PrintingFollowsNumPy) {
  gs::Context ctx(test::quiet_config(2));
  std::ostringstream out;
  out << ctx.from_vector(seq(6), {2, 3});
  EXPECT_EQ(out.str(), "[[0. 1. 2.]\n [3. 4. 5.]]");
  EXPECT_EQ(gs::to_string(ctx.from_vector<int32_t>({-1, 20, 3}, {3}) > 2), "[False  True  True]");
  EXPECT_EQ(gs::to_string(gs::arange<int64_t>(ctx, 2000)), "[   0    1    2 ... 1997 1998 1999]");
}

TEST(ArrayViews, ANoSyncGuardRefusesHostReadsAndTheWarningNamesThePlace) {
  auto config = test::quiet_config(1);
  config.log_level = LogLevel::warn;
  config.show_sync_warning = true;
  gs::Context ctx(config);
  auto a = ctx.from_vector(seq(10), {10});
  {
    gs::NoSyncGuard guard;
    auto b = a * 2.0 + 1.0;  // no read: fine
    EXPECT_NE(error_of([&] { (void)b.to_vector(); }).find("to_vector() at"), std::string::npos);
    EXPECT_NE(error_of([&] { (void)b.slice(1).item(); }).find("item() at"), std::string::npos);
    EXPECT_NE(error_of([&] { (void)gs::to_string(b); }).find("printing at"), std::string::npos);
  }
  EXPECT_EQ((a * 2.0).to_vector()[3], 6.0);  // after the guard
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) (void)a.to_vector();  // one place: said once
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("views_test.cpp"), std::string::npos) << said;
  EXPECT_EQ(said.find("to_vector()"), said.rfind("to_vector()")) << said;
}

}  // namespace
}  // namespace gridspan
