// Data and work distributions: cover, placement, and the errors of bad ones.
#include <gtest/gtest.h>

#include "gridspan/core/error.hpp"
#include "gridspan/distribution/distribution.hpp"

namespace gridspan {
namespace {

// Every element is in at least one chunk, and in exactly one owned box.
void expect_cover(const std::vector<ChunkSpec>& chunks, const Dim& shape) {
  Rect whole = Rect::of_shape(shape);
  for (int64_t i = 0; i < shape.get(0); ++i)
    for (int64_t j = 0; j < shape.get(1); ++j)
      for (int64_t k = 0; k < shape.get(2); ++k) {
        Point p{i, j, k};
        int in = 0, owned = 0;
        for (auto& c : chunks) in += c.region.contains(p), owned += c.owned.contains(p);
        ASSERT_GE(in, 1);
        ASSERT_EQ(owned, 1) << i << "," << j << "," << k;
      }
  (void)whole;
}

TEST(Distribution, RowsColumnsTilesStencil) {
  auto rows = dist::rows(3).chunks({10, 4}, 2);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[3].region, Rect(2, {9, 0, 0}, {10, 4, 1}));
  EXPECT_EQ(rows[1].device, 1);
  EXPECT_EQ(rows[2].device, 0);
  expect_cover(rows, {10, 4});
  auto cols = dist::columns(3).chunks({4, 10}, 3);
  ASSERT_EQ(cols.size(), 4u);
  EXPECT_EQ(cols[1].region, Rect(2, {0, 3, 0}, {4, 6, 1}));
  expect_cover(cols, {4, 10});
  auto tiles = dist::tiles({4, 4, 4}).chunks({5, 6, 7}, 2);
  EXPECT_EQ(tiles.size(), 8u);
  expect_cover(tiles, {5, 6, 7});
  auto st = dist::stencil({4, 4}, {1, 2}).chunks({9, 9}, 2);
  EXPECT_EQ(st[0].region, Rect(2, {0, 0, 0}, {5, 6, 1}));
  EXPECT_EQ(st[0].owned, Rect(2, {0, 0, 0}, {4, 4, 1}));
  EXPECT_EQ(st[4].region, Rect(2, {3, 2, 0}, {9, 9, 1}));
  expect_cover(st, {9, 9});
  auto blocked = dist::rows(1).blocked().chunks({6}, 2);
  EXPECT_EQ(blocked[2].device, 0);
  EXPECT_EQ(blocked[3].device, 1);
}

TEST(Distribution, ReplicatedAndCentralized) {
  auto rep = dist::replicated().chunks({7}, 3);
  ASSERT_EQ(rep.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(rep[d].device, d);
    EXPECT_EQ(rep[d].region.volume(), 7);
  }
  expect_cover(rep, {7});
  auto c = dist::centralized(1).chunks({3, 3}, 2);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].device, 1);
}

TEST(Distribution, BadDistributionsAreErrors) {
  EXPECT_THROW(dist::rows(0), ConfigError);
  EXPECT_THROW(dist::columns(2).chunks({5}, 1), ConfigError);
  EXPECT_THROW(dist::tiles({2}).chunks({4, 4}, 1), ConfigError);
  EXPECT_THROW(dist::centralized(2).chunks({4}, 2), ConfigError);
  auto gap = dist::custom("gap", [](const Dim&, int) {
    return std::vector<ChunkSpec>{{Rect(1, {0, 0, 0}, {3, 1, 1}), {}, 0},
                                  {Rect(1, {4, 0, 0}, {8, 1, 1}), {}, 0}};
  });
  try {
    gap.chunks({8}, 1);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[3..4)"), std::string::npos) << e.what();
  }
}

TEST(Work, TilesAndLike) {
  auto sbs = work::tiles({64, 32}).superblocks({100, 50}, {16, 16}, 2);
  ASSERT_EQ(sbs.size(), 4u);  // grid 7 x 4 blocks, superblocks of 4 x 2 blocks
  EXPECT_EQ(sbs[0].blocks, Rect(2, {0, 0, 0}, {4, 2, 1}));
  EXPECT_EQ(sbs[3].blocks, Rect(2, {4, 2, 0}, {7, 4, 1}));
  EXPECT_EQ(sbs[1].device, 1);
  try {
    work::tiles({60}).superblocks({100}, {16}, 1);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the block size"), std::string::npos);
  }
  auto like = work::like_chunks(dist::rows(32).chunks({100}, 2), "a").superblocks({100}, {16}, 2);
  ASSERT_EQ(like.size(), 4u);
  EXPECT_EQ(like[3].blocks, Rect(1, {6, 0, 0}, {7, 1, 1}));
  EXPECT_EQ(like[3].device, 1);
  EXPECT_THROW(work::like_chunks(dist::rows(30).chunks({100}, 2), "a").superblocks({100}, {16}, 2),
               LaunchError);
  // Threads laid out x = columns over a rows x columns array: a clear error, not a
  // misaligned chunk.
  try {
    work::like_chunks(dist::rows(16).chunks({64, 32}, 2), "out").superblocks({32, 64}, {32, 8}, 2);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("work::like(out): the launch's threads {32, 64} pass "
                                         "the array's extents {64, 32} on axis 1"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("use work::tiles"), std::string::npos) << e.what();
  }
  // Threads over the first rows only still follow the chunks there.
  auto part = work::like_chunks(dist::rows(32).chunks({100}, 2), "a").superblocks({48}, {16}, 2);
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part[1].blocks, Rect(1, {2, 0, 0}, {3, 1, 1}));
  auto overlap = work::custom("overlap", [](const Dim&, const Dim&, int) {
    return std::vector<Superblock>{{Rect(1, {0, 0, 0}, {3, 1, 1}), 0},
                                   {Rect(1, {2, 0, 0}, {5, 1, 1}), 0}};
  });
  EXPECT_THROW(overlap.superblocks({64}, {16}, 1), LaunchError);
}

// work::tiles keeps, per thread, its last superblocks for a launch that repeats its tile,
// threads, block and devices (every launch of a chain asks, often with tiles made in the
// call), and computes them again for others; a failure is not kept. A custom distribution
// is asked every time, as it may change its answer.
TEST(Work, TilesKeepTheirLastSuperblocks) {
  std::vector<Superblock> out(7, Superblock{Rect(1, {0, 0, 0}, {1, 1, 1}), 5});
  work::tiles({64, 32}).superblocks({100, 50}, {16, 16}, 2, out);
  const auto fresh = work::custom("tiles again", [](const Dim& t, const Dim& b, int d) {
                       return work::tiles({64, 32}).superblocks(t, b, d);
                     }).superblocks({100, 50}, {16, 16}, 2);
  ASSERT_EQ(out.size(), 4u);
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (std::size_t k = 0; k < fresh.size(); ++k) {
      EXPECT_EQ(out[k].blocks, fresh[k].blocks) << k;
      EXPECT_EQ(out[k].device, fresh[k].device) << k;
    }
    work::tiles({64, 32}).superblocks({100, 50}, {16, 16}, 2, out);  // made again: kept ones
  }
  const auto tiles = work::tiles({64, 32});
  tiles.superblocks({100, 50}, {16, 16}, 1, out);  // other devices: all on device 0
  ASSERT_EQ(out.size(), 4u);
  for (const auto& sb : out) EXPECT_EQ(sb.device, 0);
  tiles.superblocks({200, 50}, {16, 16}, 1, out);  // other threads: 13 x 4 blocks
  EXPECT_EQ(out.size(), 8u);
  work::tiles({32, 32}).superblocks({200, 50}, {16, 16}, 1, out);  // another tile: 7 x 2
  EXPECT_EQ(out.size(), 14u);
  EXPECT_THROW(tiles.superblocks({100, 50}, {24, 16}, 1, out), LaunchError);
  EXPECT_THROW(tiles.superblocks({100, 50}, {24, 16}, 1, out), LaunchError);

  int asked = 0;
  const auto counted = work::custom("counted", [&asked](const Dim& t, const Dim& b, int d) {
    ++asked;
    return work::tiles({64}).superblocks(t, b, d);
  });
  for (int k = 0; k < 3; ++k) counted.superblocks({128}, {16}, 1, out);
  EXPECT_EQ(asked, 3);
}

}  // namespace
}  // namespace gridspan
