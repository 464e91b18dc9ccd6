// How the cpu backend cuts a superblock's blocks into pieces for a cpu device's threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gridspan/device/abi.h"

namespace gridspan::backend::cpu {

/// A grid of tiles over a superblock's blocks, with at least `at_least` tiles (or
/// one a block). Many tiles a thread even out the threads' ends (a superblock alone on its
/// device waits for its last piece; slabs along one axis were at most as many as its
/// blocks: GEMM's 45). The y and z axes are cut first, the longest in blocks first; x
/// (along which a block's threads read consecutive elements, by CUDA's custom) only while
/// a tile's rows stay at least kLeastRow threads long, or once y and z are cut to single
/// blocks: HotSpot on two threads ran a third slower in tiles of 256-element rows than in
/// slabs of 2048.
class PieceGrid {
 public:
  /// The pieces wanted for `threads` threads of `device_threads`: one per kThreadsPerPiece
  /// threads, at least kLeastPerThread and at most kMostPerThread a device thread.
  static constexpr int64_t kThreadsPerPiece = 4096, kLeastPerThread = 4, kMostPerThread = 32;
  static int64_t wanted(int64_t threads, int device_threads) {
    const int64_t d = device_threads;
    return std::clamp(threads / kThreadsPerPiece, kLeastPerThread * d, kMostPerThread * d);
  }

  static constexpr int64_t kLeastRow = 2048;
  PieceGrid(const int64_t block_lo[3], const int64_t block_hi[3], const uint32_t block_dim[3],
            int64_t at_least) {
    for (int ax = 0; ax < 3; ++ax) {
      lo_[ax] = block_lo[ax];
      blocks_[ax] = block_hi[ax] - block_lo[ax];
    }
    while (pieces() < at_least) {
      const bool x_first = blocks_[0] / (parts_[0] + 1) * int64_t(block_dim[0]) >= kLeastRow;
      int axis = -1;  // the longest axis in blocks that can be cut, x last unless rows stay long
      for (int ax : {0, 1, 2})
        if (parts_[ax] < blocks_[ax] && (ax > 0 || x_first) &&
            (axis < 0 || blocks_[ax] * parts_[axis] > blocks_[axis] * parts_[ax]))
          axis = ax;
      if (axis < 0 && parts_[0] < blocks_[0]) axis = 0;
      if (axis < 0) break;
      ++parts_[axis];
    }
  }
  int64_t pieces() const { return parts_[0] * parts_[1] * parts_[2]; }
  int64_t parts(int axis) const { return parts_[axis]; }
  /// Narrows `part` to tile i (0 <= i < pieces()), x fastest.
  void cut(int64_t i, GsLaunch& part) const {
    for (int ax = 0; ax < 3; ++ax) {
      const int64_t k = i % parts_[ax];
      i /= parts_[ax];
      part.block_lo[ax] = lo_[ax] + blocks_[ax] * k / parts_[ax];
      part.block_hi[ax] = lo_[ax] + blocks_[ax] * (k + 1) / parts_[ax];
    }
  }

 private:
  int64_t lo_[3] = {}, blocks_[3] = {};
  int64_t parts_[3] = {1, 1, 1};
};

}  // namespace gridspan::backend::cpu
