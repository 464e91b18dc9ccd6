// Rect arithmetic: intersection, subtraction into disjoint boxes, offsets.
#include <gtest/gtest.h>

#include <random>

#include "gridspan/core/config.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/geometry.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

TEST(Geometry, DimBasics) {
  Dim d{4, 5};
  EXPECT_EQ(d.rank(), 2);
  EXPECT_EQ(d.volume(), 20);
  EXPECT_EQ(d.get(2), 1);
  EXPECT_EQ(d.str(), "{4, 5}");
  EXPECT_EQ(Dim{}.volume(), 1);
  EXPECT_THROW((Dim{1, 2, 3, 4}), Error);
  EXPECT_THROW((Dim{-1}), Error);
}

TEST(Geometry, RectOffsetIsRowMajor) {
  Rect r(2, {2, 3, 0}, {5, 7, 1});
  EXPECT_EQ(r.offset_of({2, 3, 0}), 0);
  EXPECT_EQ(r.offset_of({2, 4, 0}), 1);
  EXPECT_EQ(r.offset_of({3, 3, 0}), 4);
  EXPECT_EQ(r.volume(), 12);
}

TEST(Geometry, SubtractGivesDisjointCover) {
  auto g = test::rng(1);
  std::uniform_int_distribution<int> u(0, 9);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = 1 + trial % 3;
    auto box = [&] {
      Point lo{0, 0, 0}, hi{1, 1, 1};
      for (int a = 0; a < rank; ++a) {
        int x = u(g), y = u(g);
        lo[a] = std::min(x, y);
        hi[a] = std::max(x, y) + 1;
      }
      return Rect(rank, lo, hi);
    };
    Rect a = box(), b = box(), c = box();
    auto pieces = subtract_all(a, {b, c});
    // Every point of a is in exactly one piece iff it is in neither b nor c.
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t j = 0; j < (rank > 1 ? 10 : 1); ++j)
        for (int64_t k = 0; k < (rank > 2 ? 10 : 1); ++k) {
          Point p{i, j, k};
          int count = 0;
          for (auto& r : pieces) count += r.contains(p);
          bool expect = a.contains(p) && !b.contains(p) && !c.contains(p);
          ASSERT_EQ(count, expect ? 1 : 0) << a.str() << " - " << b.str() << " - " << c.str();
        }
  }
}

TEST(Config, Sizes) {
  EXPECT_EQ(parse_size("4096", "x"), 4096u);
  EXPECT_EQ(parse_size("64KiB", "x"), 64u << 10);
  EXPECT_EQ(parse_size("512MiB", "x"), 512ull << 20);
  EXPECT_EQ(parse_size("2GiB", "x"), 2ull << 30);
  EXPECT_THROW(parse_size("lots", "GRIDSPAN_DEVICE_MEMORY"), ConfigError);
  try {
    parse_size("12XB", "GRIDSPAN_HOST_MEMORY");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GRIDSPAN_HOST_MEMORY"), std::string::npos);
  }
}

TEST(Config, Flags) {
  EXPECT_EQ(parse_flag("YES"), true);
  EXPECT_EQ(parse_flag("Off"), false);
  EXPECT_EQ(parse_flag("maybe"), std::nullopt);
}

}  // namespace
}  // namespace gridspan
