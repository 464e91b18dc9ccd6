// How a superblock's blocks are cut into pieces for a cpu device's threads (PieceGrid).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/pieces.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

using backend::cpu::PieceGrid;

// How many pieces hold each block of the box [lo, hi); all must be 1.
std::vector<int> coverage(const int64_t lo[3], const int64_t hi[3], const PieceGrid& grid) {
  const int64_t nx = hi[0] - lo[0], ny = hi[1] - lo[1], nz = hi[2] - lo[2];
  std::vector<int> held(std::size_t(nx * ny * nz), 0);
  for (int64_t i = 0; i < grid.pieces(); ++i) {
    GsLaunch part{};
    grid.cut(i, part);
    for (int64_t z = part.block_lo[2]; z < part.block_hi[2]; ++z)
      for (int64_t y = part.block_lo[1]; y < part.block_hi[1]; ++y)
        for (int64_t x = part.block_lo[0]; x < part.block_hi[0]; ++x) {
          EXPECT_TRUE(x >= lo[0] && x < hi[0] && y >= lo[1] && y < hi[1] && z >= lo[2] &&
                      z < hi[2]);
          ++held[std::size_t(((z - lo[2]) * ny + (y - lo[1])) * nx + (x - lo[0]))];
        }
  }
  return held;
}

TEST(PieceGrid, EveryBlockIsInExactlyOnePiece) {
  auto g = rng(31);
  std::printf("seed %llu\n", static_cast<unsigned long long>(base_seed()));
  for (int round = 0; round < 200; ++round) {
    int64_t lo[3], hi[3], blocks = 1;
    for (int ax = 0; ax < 3; ++ax) {
      lo[ax] = std::uniform_int_distribution<int64_t>(0, 50)(g);
      hi[ax] = lo[ax] + std::uniform_int_distribution<int64_t>(1, ax == 0 ? 60 : 12)(g);
      blocks *= hi[ax] - lo[ax];
    }
    const int64_t wanted = std::uniform_int_distribution<int64_t>(1, 300)(g);
    const uint32_t dim[3] = {std::uniform_int_distribution<uint32_t>(1, 256)(g), 4, 1};
    const PieceGrid grid(lo, hi, dim, wanted);
    EXPECT_GE(grid.pieces(), std::min(wanted, blocks));
    EXPECT_LE(grid.pieces(), blocks);
    const auto held = coverage(lo, hi, grid);
    EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](int n) { return n == 1; }))
        << "box " << lo[0] << ".." << hi[0] << " x " << lo[1] << ".." << hi[1] << " x " << lo[2]
        << ".." << hi[2] << ", " << wanted << " pieces wanted";
  }
}

// GEMM's superblock on the paper's cpu sweep: 45 x 23 blocks of 32 x 8 threads, 7 threads.
// Slabs along x (4 a thread, as before) would leave a thread's last piece 2 of 45 columns
// of blocks long; rows of blocks come first, then x, as rows of 45 blocks are 1440 threads
// (short of kLeastRow).
TEST(PieceGrid, RowsAreCutBeforeShortColumns) {
  const int64_t lo[3] = {0, 23, 0}, hi[3] = {45, 46, 1};
  const uint32_t dim[3] = {32, 8, 1};
  const int64_t wanted = PieceGrid::wanted(45 * 23 * 256, 7);
  EXPECT_EQ(wanted, 64);  // one a 4096 threads: more than 4 for each of the 7 threads
  const PieceGrid grid(lo, hi, dim, wanted);
  EXPECT_EQ(grid.parts(1), 23);
  EXPECT_EQ(grid.parts(0), 3);
  EXPECT_EQ(grid.pieces(), 69);
}

// HotSpot's superblock of 512 x 8 blocks of 32 x 8 threads: x is cut while rows stay
// kLeastRow threads long, then the rows.
TEST(PieceGrid, LongRowsAreCutToKLeastRowThenRows) {
  const int64_t lo[3] = {0, 0, 0}, hi[3] = {512, 8, 1};
  const uint32_t dim[3] = {32, 8, 1};
  const PieceGrid grid(lo, hi, dim, 64);
  EXPECT_EQ(grid.parts(0), 8);  // 64 blocks of 32: 2048 threads a row
  EXPECT_EQ(grid.parts(1), 8);
  EXPECT_EQ(grid.parts(2), 1);
}

// A 1-d launch is cut along x alone, into as many pieces as wanted, however short; one of
// few blocks into one a block.
TEST(PieceGrid, OneAxisIsCutIntoSlabs) {
  const int64_t lo[3] = {100, 0, 0}, hi[3] = {1100, 1, 1};
  const uint32_t dim[3] = {256, 1, 1};
  const PieceGrid grid(lo, hi, dim, 56);
  EXPECT_EQ(grid.pieces(), 56);
  EXPECT_EQ(grid.parts(1) * grid.parts(2), 1);
  const int64_t few_hi[3] = {105, 1, 1};
  EXPECT_EQ(PieceGrid(lo, few_hi, dim, 56).pieces(), 5);
}

// Pieces a thread: at least kLeastPerThread, one per kThreadsPerPiece threads, at most
// kMostPerThread.
TEST(PieceGrid, PiecesWantedFollowTheLaunchSize) {
  EXPECT_EQ(PieceGrid::wanted(65536, 7), 7 * PieceGrid::kLeastPerThread);
  EXPECT_EQ(PieceGrid::wanted(100 * PieceGrid::kThreadsPerPiece, 7), 100);
  EXPECT_EQ(PieceGrid::wanted(int64_t(1) << 40, 7), 7 * PieceGrid::kMostPerThread);
}

}  // namespace
}  // namespace gridspan::test
