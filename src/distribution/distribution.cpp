// Built-in data and work distributions, and the checks that keep custom ones honest.
#include "gridspan/distribution/distribution.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan {

Dim grid_of(const Dim& threads, const Dim& block) {
  Dim g = Dim::of_rank(threads.rank(), 1);
  for (int a = 0; a < threads.rank(); ++a) {
    int64_t b = block.get(a);
    g[a] = b > 0 ? (threads[a] + b - 1) / b : 0;
  }
  return g;
}

namespace {

// Cuts `shape` into boxes of `tile` (last ones smaller), in row-major order of the tile grid.
std::vector<Rect> cut(const Dim& shape, const Dim& tile) {
  int rank = shape.rank();
  Point count{1, 1, 1};
  for (int a = 0; a < rank; ++a) count[a] = (shape[a] + tile[a] - 1) / tile[a];
  std::vector<Rect> out;
  if (shape.volume() == 0) return out;
  for (int64_t i = 0; i < count[0]; ++i)
    for (int64_t j = 0; j < count[1]; ++j)
      for (int64_t k = 0; k < count[2]; ++k) {
        Point idx{i, j, k}, lo{0, 0, 0}, hi{1, 1, 1};
        for (int a = 0; a < rank; ++a) {
          lo[a] = idx[a] * tile[a];
          hi[a] = std::min(shape[a], lo[a] + tile[a]);
        }
        out.emplace_back(rank, lo, hi);
      }
  return out;
}

std::vector<ChunkSpec> tiled(const Dim& shape, const Dim& tile, const Dim& halo, int devices) {
  std::vector<ChunkSpec> chunks;
  if (shape.rank() == 0) return {ChunkSpec{Rect::of_shape(shape), Rect::of_shape(shape), 0}};
  int n = 0;
  for (const Rect& owned : cut(shape, tile)) {
    Rect region = owned;
    for (int a = 0; a < shape.rank(); ++a) {
      int64_t h = a < halo.rank() ? halo[a] : 0;
      region.lo[a] = std::max<int64_t>(0, owned.lo[a] - h);
      region.hi[a] = std::min<int64_t>(shape[a], owned.hi[a] + h);
    }
    chunks.push_back(ChunkSpec{region, owned, n++ % devices});
  }
  return chunks;
}

void check_positive(const Dim& d, const char* what) {
  for (int a = 0; a < d.rank(); ++a)
    if (d[a] <= 0)
      throw ConfigError(fmt::format("{} {} must be positive on every axis", what, d.str()));
}

}  // namespace

DataDistribution::DataDistribution(std::string name, Fn fn)
    : name_(std::move(name)), fn_(std::move(fn)) {}

DataDistribution DataDistribution::blocked() const {
  DataDistribution d = *this;
  d.placement_ = Placement::blocked;
  d.name_ = name_ + ".blocked()";
  return d;
}

std::vector<ChunkSpec> DataDistribution::chunks(const Dim& shape, int devices) const {
  std::vector<ChunkSpec> chunks = fn_(shape, devices);
  Rect whole = Rect::of_shape(shape);
  if (chunks.empty() && whole.volume() > 0)
    throw ConfigError(fmt::format("distribution {} gives no chunks for an array of shape {}", name_,
                                  shape.str()));
  if (placement_ == Placement::blocked) {
    int n = static_cast<int>(chunks.size());
    for (int k = 0; k < n; ++k)
      chunks[k].device = static_cast<int>(static_cast<int64_t>(k) * devices / n);
  }
  std::vector<Rect> regions;
  regions.reserve(chunks.size());
  for (auto& c : chunks) {
    if (c.region.rank != shape.rank())
      throw ConfigError(fmt::format(
          "distribution {} gives a chunk {} of rank {} for an array of rank {} (shape {})", name_,
          c.region.str(), c.region.rank, shape.rank(), shape.str()));
    if (!whole.contains(c.region))
      throw ConfigError(fmt::format(
          "distribution {} gives a chunk {} that reaches outside the array {}; chunks must lie "
          "inside the array",
          name_, c.region.str(), whole.str()));
    if (c.device < 0 || c.device >= devices)
      throw ConfigError(fmt::format(
          "distribution {} places a chunk on device {}, but there are {} devices (0..{})", name_,
          c.device, devices, devices - 1));
    if (c.owned.rank != c.region.rank) c.owned = c.region;
    regions.push_back(c.region);
  }
  auto uncovered = subtract_all(whole, regions);
  if (!uncovered.empty())
    throw ConfigError(fmt::format(
        "distribution {} does not cover the array of shape {}: {} is in no chunk; chunks must "
        "cover every element",
        name_, shape.str(), uncovered.front().str()));
  return chunks;
}

namespace dist {

DataDistribution rows(int64_t rows_per_chunk) {
  if (rows_per_chunk <= 0)
    throw ConfigError(
        fmt::format("dist::rows({}): rows per chunk must be positive", rows_per_chunk));
  return DataDistribution(fmt::format("rows({})", rows_per_chunk),
                          [rows_per_chunk](const Dim& shape, int devices) {
                            Dim tile = shape;
                            if (shape.rank() > 0) tile[0] = rows_per_chunk;
                            for (int a = 1; a < shape.rank(); ++a)
                              tile[a] = std::max<int64_t>(1, shape[a]);
                            return tiled(shape, tile, Dim{}, devices);
                          });
}

DataDistribution columns(int64_t cols_per_chunk) {
  if (cols_per_chunk <= 0)
    throw ConfigError(
        fmt::format("dist::columns({}): columns per chunk must be positive", cols_per_chunk));
  std::string name = fmt::format("columns({})", cols_per_chunk);
  return DataDistribution(name, [cols_per_chunk, name](const Dim& shape, int devices) {
    if (shape.rank() < 2)
      throw ConfigError(fmt::format(
          "dist::{} needs an array of rank 2 or more, got shape {}; use dist::rows for vectors",
          name, shape.str()));
    Dim tile = shape;
    for (int a = 0; a < shape.rank(); ++a) tile[a] = std::max<int64_t>(1, shape[a]);
    tile[1] = cols_per_chunk;
    return tiled(shape, tile, Dim{}, devices);
  });
}

DataDistribution tiles(Dim chunk) {
  check_positive(chunk, "dist::tiles: the tile");
  std::string name = fmt::format("tiles({})", chunk.str());
  return DataDistribution(name, [chunk, name](const Dim& shape, int devices) {
    if (chunk.rank() != shape.rank())
      throw ConfigError(fmt::format("dist::{}: the tile has rank {} but the array has shape {}",
                                    name, chunk.rank(), shape.str()));
    return tiled(shape, chunk, Dim{}, devices);
  });
}

DataDistribution stencil(Dim chunk, Dim halo) {
  check_positive(chunk, "dist::stencil: the tile");
  std::string name = fmt::format("stencil({}, {})", chunk.str(), halo.str());
  return DataDistribution(name, [chunk, halo, name](const Dim& shape, int devices) {
    if (chunk.rank() != shape.rank() || (halo.rank() != 0 && halo.rank() != shape.rank()))
      throw ConfigError(
          fmt::format("dist::{}: tile and halo must have the array's rank {} (shape {})", name,
                      shape.rank(), shape.str()));
    return tiled(shape, chunk, halo, devices);
  });
}

DataDistribution replicated() {
  return DataDistribution("replicated()", [](const Dim& shape, int devices) {
    std::vector<ChunkSpec> chunks;
    Rect whole = Rect::of_shape(shape);
    Rect none = whole;
    if (none.rank > 0) none.hi[0] = none.lo[0];
    for (int d = 0; d < devices; ++d) chunks.push_back(ChunkSpec{whole, d == 0 ? whole : none, d});
    return chunks;
  });
}

DataDistribution centralized(int device) {
  return DataDistribution(fmt::format("centralized({})", device), [device](const Dim& shape, int) {
    Rect whole = Rect::of_shape(shape);
    return std::vector<ChunkSpec>{ChunkSpec{whole, whole, device}};
  });
}

DataDistribution custom(std::string name, DataDistribution::Fn fn) {
  return DataDistribution("custom(" + name + ")", std::move(fn));
}

DataDistribution automatic(Dim halo) {
  const std::string name = halo.rank() ? fmt::format("automatic({})", halo.str()) : "automatic";
  DataDistribution d(name, [](const Dim&, int) -> std::vector<ChunkSpec> {
    throw ConfigError(
        "dist::automatic() is chosen by the Context that creates the array (from its devices "
        "and measurements); ask the Context for the array, not the distribution for chunks");
  });
  d.automatic_ = true;
  d.halo_ = halo;
  return d;
}

}  // namespace dist

WorkDistribution::WorkDistribution(std::string name, Fn fn)
    : name_(std::move(name)), fn_(std::move(fn)) {}

std::vector<Superblock> WorkDistribution::superblocks(const Dim& threads, const Dim& block,
                                                      int devices) const {
  std::vector<Superblock> out;
  superblocks(threads, block, devices, out);
  return out;
}

// work::tiles depends on its tile, the threads, the block and the devices only: the last
// answer on this thread serves a launch that repeats them, whichever object asks (a chain
// of launches often makes its tiles in the call).
void WorkDistribution::superblocks(const Dim& threads, const Dim& block, int devices,
                                   std::vector<Superblock>& out) const {
  if (tile_.rank() == 0) {
    out = checked(threads, block, devices);
    return;
  }
  struct Last {
    bool valid = false;
    Dim tile, threads, block;
    int devices = 0;
    std::vector<Superblock> superblocks;
  };
  thread_local Last last;
  if (!last.valid || last.devices != devices || last.tile != tile_ || last.threads != threads ||
      last.block != block) {
    last.valid = false;
    last.superblocks = checked(threads, block, devices);
    last.tile = tile_, last.threads = threads, last.block = block, last.devices = devices;
    last.valid = true;
  }
  out = last.superblocks;
}

std::vector<Superblock> WorkDistribution::checked(const Dim& threads, const Dim& block,
                                                  int devices) const {
  std::vector<Superblock> sbs = fn_(threads, block, devices);
  Dim grid = grid_of(threads, block);
  Rect all = Rect::of_shape(grid);
  int64_t volume = 0;
  for (const auto& s : sbs) {
    if (s.blocks.rank != grid.rank() || !all.contains(s.blocks) || s.blocks.empty())
      throw LaunchError(fmt::format(
          "work distribution {} gives superblock {} (in blocks) outside the grid {} of the launch",
          name_, s.blocks.str(), all.str()));
    if (s.device < 0 || s.device >= devices)
      throw LaunchError(
          fmt::format("work distribution {} places a superblock on device {}, but "
                      "there are {} devices",
                      name_, s.device, devices));
    volume += s.blocks.volume();
  }
  bool disjoint = volume == all.volume();
  if (disjoint && sbs.size() <= 2048) {
    for (std::size_t i = 0; i < sbs.size() && disjoint; ++i)
      for (std::size_t j = i + 1; j < sbs.size(); ++j)
        if (sbs[i].blocks.overlaps(sbs[j].blocks)) {
          disjoint = false;
          break;
        }
  }
  if (!disjoint)
    throw LaunchError(fmt::format(
        "work distribution {} does not cut the grid {} into disjoint superblocks ({} blocks in "
        "superblocks, {} in the grid); every block must be in exactly one superblock",
        name_, grid.str(), volume, all.volume()));
  return sbs;
}

namespace work {

WorkDistribution tiles(Dim per) {
  // The name is spelled out only in messages: launches build this on their hot path.
  WorkDistribution w("tiles", [per](const Dim& threads, const Dim& block, int devices) {
    auto name = [&] { return "tiles(" + per.str() + ")"; };
    if (per.rank() != threads.rank())
      throw LaunchError(fmt::format(
          "work::{}: the superblock has rank {} but the launch's threads {} have rank {}", name(),
          per.rank(), threads.str(), threads.rank()));
    Dim tile = Dim::of_rank(threads.rank(), 1);
    for (int a = 0; a < threads.rank(); ++a) {
      int64_t b = block.get(a);
      if (per[a] <= 0 || per[a] % b != 0)
        throw LaunchError(fmt::format(
            "work::{}: the superblock size {} is not a multiple of the block size {} on axis {}; "
            "make every superblock extent a multiple of the block's",
            name(), per.str(), block.str(), a));
      tile[a] = per[a] / b;
    }
    std::vector<Superblock> out;
    int n = 0;
    for (const Rect& r : cut(grid_of(threads, block), tile)) out.push_back({r, n++ % devices});
    return out;
  });
  w.tile_ = per;
  return w;
}

namespace {

// like() maps thread axis k to array axis k: a launch whose threads pass the array's extent
// on an axis (threads laid out x = columns, or padded) cannot follow its chunks.
void check_like_shape(const std::vector<ChunkSpec>& chunks, const Dim& threads,
                      const std::string& name) {
  if (chunks.empty()) return;
  const int rank = std::min(threads.rank(), chunks[0].region.rank);
  Dim shape = Dim::of_rank(rank, 0);
  for (const auto& c : chunks)
    for (int a = 0; a < rank; ++a) shape[a] = std::max(shape[a], c.region.hi[a]);
  for (int a = 0; a < rank; ++a)
    if (threads[a] > shape[a])
      throw LaunchError(fmt::format(
          "work::{}: the launch's threads {} pass the array's extents {} on axis {}; "
          "like() runs thread axis k over array axis k, so the threads must have the array's "
          "shape (`global [i, j]` over threads {{rows, cols}}); for threads laid out x = "
          "columns, or padded, use work::tiles",
          name, threads.str(), shape.str(), a));
}

}  // namespace

WorkDistribution like_chunks(std::vector<ChunkSpec> chunks, std::string array_name) {
  std::string name = "like(" + array_name + ")";
  return WorkDistribution(
      name, [chunks = std::move(chunks), name](const Dim& threads, const Dim& block, int) {
        check_like_shape(chunks, threads, name);
        Dim grid = grid_of(threads, block);
        std::vector<Superblock> out;
        for (const auto& c : chunks) {
          if (c.owned.empty()) continue;
          Rect blocks = Rect(threads.rank(), {0, 0, 0}, {1, 1, 1});
          for (int a = 0; a < threads.rank(); ++a) {
            int64_t lo = a < c.owned.rank ? c.owned.lo[a] : 0;
            int64_t hi = a < c.owned.rank ? c.owned.hi[a] : threads[a];
            int64_t b = block.get(a);
            if (lo % b != 0 || (hi % b != 0 && hi < threads[a]))
              throw LaunchError(fmt::format(
                  "work::{}: chunk {} does not start and end on block boundaries (block {}); "
                  "choose chunk sizes that are multiples of the block size",
                  name, c.owned.str(), block.str()));
            blocks.lo[a] = lo / b;
            blocks.hi[a] = hi >= threads[a] ? grid[a] : hi / b;
          }
          if (!blocks.empty()) out.push_back({blocks, c.device});
        }
        return out;
      });
}

WorkDistribution custom(std::string name, WorkDistribution::Fn fn) {
  return WorkDistribution("custom(" + name + ")", std::move(fn));
}

WorkDistribution automatic() {
  WorkDistribution w("automatic", [](const Dim&, const Dim&, int) -> std::vector<Superblock> {
    throw LaunchError(
        "work::automatic() is chosen by Kernel::launch (from the launch's arrays and the "
        "kernel's measured costs); pass it to a launch, not asked for superblocks alone");
  });
  w.automatic_ = true;
  return w;
}

}  // namespace work

}  // namespace gridspan
