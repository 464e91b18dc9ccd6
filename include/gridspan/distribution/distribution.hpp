// Data distributions (how an array is cut into chunks and placed on devices) and work
// distributions (how a launch's thread blocks are cut into superblocks and placed).
// A distribution only ever changes performance, never results.
//
//   auto a = ctx.zeros<float>({n, m}, gs::dist::rows(1024));
//   kernel.launch({n, m}, {16, 16}, gs::work::tiles({1024, m}), a);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gridspan/core/geometry.hpp"

namespace gridspan {

/// One chunk: the box of the array it holds, the part of it it owns (the box without its
/// halo; disjoint across chunks for every built-in distribution except replicated, where
/// only the first replica owns) and the device (index over all devices of all workers).
struct ChunkSpec {
  Rect region;
  Rect owned;
  int device = 0;
};

enum class Placement { round_robin, blocked };

class DataDistribution;
namespace dist {
DataDistribution automatic(Dim halo);
}

class DataDistribution {
 public:
  using Fn = std::function<std::vector<ChunkSpec>(const Dim& shape, int devices)>;
  DataDistribution(std::string name, Fn fn);

  /// The chunks for an array of `shape` over `devices` devices. Throws ConfigError when they
  /// leave part of the array uncovered, reach outside it, or name a device that does not
  /// exist.
  std::vector<ChunkSpec> chunks(const Dim& shape, int devices) const;
  const std::string& name() const { return name_; }
  /// The same cut, with chunk k on device k * devices / chunks (contiguous groups) instead
  /// of k % devices.
  DataDistribution blocked() const;
  /// dist::automatic(): the Context that creates the array chooses the chunks.
  bool is_automatic() const { return automatic_; }
  /// dist::automatic(halo)'s halo (rank 0: none).
  const Dim& automatic_halo() const { return halo_; }

 private:
  friend DataDistribution dist::automatic(Dim halo);
  std::string name_;
  Fn fn_;
  Placement placement_ = Placement::round_robin;
  bool automatic_ = false;
  Dim halo_;
};

namespace dist {
/// Chunks of `rows_per_chunk` rows (axis 0), whole along the other axes.
DataDistribution rows(int64_t rows_per_chunk);
/// Chunks of `cols_per_chunk` columns (axis 1); arrays of rank 2 or more.
DataDistribution columns(int64_t cols_per_chunk);
/// Tiles of `chunk` (its rank must equal the array's; the last tiles may be smaller).
DataDistribution tiles(Dim chunk);
/// Tiles of `chunk` widened by `halo` on each side (clamped to the array); gridspan keeps
/// the overlapping halos coherent.
DataDistribution stencil(Dim chunk, Dim halo);
/// A full copy of the array on every device.
DataDistribution replicated();
/// The whole array on one device.
DataDistribution centralized(int device = 0);
/// Any cut: `fn(shape, devices)` returns the chunks; they may overlap and must cover.
DataDistribution custom(std::string name, DataDistribution::Fn fn);
/// gridspan chooses: rows over the devices, as many as the array's bytes make worth their
/// per-task overhead (measured when first asked), each at most 1/32 of the smallest device
/// memory budget (up to 1/16 where that keeps an array to 64 chunks a device), consecutive
/// chunks on one device. Arrays of one shape get one cut. The
/// array library's default. `halo` (the array's rank, or none): each chunk widened by it,
/// as dist::stencil, for kernels that read their neighbours' rows (a stencil's chunk then
/// holds all it reads; without one, each superblock copies its rows and the halo).
DataDistribution automatic(Dim halo = Dim());
}  // namespace dist

/// A superblock: a box of thread blocks (block coordinates, rank = the launch's) and the
/// device (over all devices) that runs it.
struct Superblock {
  Rect blocks;
  int device = 0;
};

class WorkDistribution;
namespace work {
WorkDistribution tiles(Dim threads_per_superblock);
WorkDistribution automatic();
}  // namespace work

class WorkDistribution {
 public:
  using Fn =
      std::function<std::vector<Superblock>(const Dim& threads, const Dim& block, int devices)>;
  WorkDistribution(std::string name, Fn fn);
  /// The superblocks of a launch. Throws LaunchError when they overlap, leave blocks out,
  /// or are not block-aligned.
  std::vector<Superblock> superblocks(const Dim& threads, const Dim& block, int devices) const;
  /// The same into `out` (whose memory it reuses). `work::tiles` keeps, per thread, the
  /// superblocks it gave last: a launch asking the same again copies them.
  void superblocks(const Dim& threads, const Dim& block, int devices,
                   std::vector<Superblock>& out) const;
  const std::string& name() const { return name_; }
  /// work::automatic(): Kernel::launch chooses the superblocks.
  bool is_automatic() const { return automatic_; }

 private:
  friend WorkDistribution work::tiles(Dim);
  friend WorkDistribution work::automatic();
  bool automatic_ = false;
  std::vector<Superblock> checked(const Dim& threads, const Dim& block, int devices) const;
  std::string name_;
  Fn fn_;
  Dim tile_;  // work::tiles' threads per superblock (rank 0: another distribution)
};

namespace work {
/// Superblocks of `threads_per_superblock` threads per axis (a multiple of the block size),
/// placed round-robin.
WorkDistribution tiles(Dim threads_per_superblock);
/// Superblocks following chunks: one per chunk's owned box (thread axis k = array axis k),
/// on the chunk's device. Owned boxes must be block-aligned.
WorkDistribution like_chunks(std::vector<ChunkSpec> chunks, std::string array_name);
WorkDistribution custom(std::string name, WorkDistribution::Fn fn);
/// gridspan chooses, at each launch: superblocks that follow the chunks of the array the
/// kernel writes (used in place), or, for a kernel whose measured time is worth more
/// devices than those chunks span, even slabs over them. A kernel's first launch works from
/// its arrays' bytes; later ones from its measured time (Context::kernel_costs).
WorkDistribution automatic();
}  // namespace work

/// Blocks per axis of a launch: ceil(threads / block), 1 past the threads' rank.
Dim grid_of(const Dim& threads, const Dim& block);

}  // namespace gridspan
