// The memory manager of one worker (CHAI's design applied to chunks): every chunk has a
// home device and a copy per space (device, host, disk) with a valid flag. Staging makes
// all chunks of a task resident on their devices at once or not at all and pins them;
// a full space evicts unpinned chunks one level up (device → host → disk): on a device
// the one the queued tasks need last (announce), on the host the least recently used;
// spill files carry a checksum verified on reload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/info.hpp"
#include "runtime/observer.hpp"

namespace gridspan::runtime {

using ChunkId = uint64_t;

struct MemoryLimits {
  std::size_t device_bytes = 0;  // per device; 0 = the device's capacity
  std::size_t host_bytes = 0;    // host space for spilled chunks; 0 = unbounded
  std::string spill_dir;         // created if missing; must be writable
  bool pin_ahead = true;         // host blocks pinned ahead for devices that evict
  bool pool = true;              // freed blocks kept for reuse (off: given back at once)
  bool write_behind = true;      // chunks about to be evicted copied to the host ahead
};
/// The limits a configuration sets (host: half of physical memory unless it says).
MemoryLimits memory_limits(const Config& config);

/// Where a chunk's valid copies are now, and how many staged tasks pin it.
struct ChunkState {
  bool on_device = false;
  bool on_host = false;
  bool on_disk = false;
  int pins = 0;
};

/// One chunk a task needs, and whether the task writes it.
struct ChunkUse {
  ChunkId chunk;
  bool write;
  bool discard = false;  // the task writes all of it: its old contents need not be brought
  // Elements [fresh_lo, fresh_hi) of its `volume` that the task overwrites, where it does
  // not overwrite all of it (plan::ChunkAccess): their old contents need not be brought.
  int64_t fresh_lo = 0, fresh_hi = 0, volume = 0;
  // Set by a successful staging: the chunk's memory on its device until the unstage (what
  // data() would answer, without its lock and lookup).
  mutable void* data = nullptr;
};

class MemoryManager {
 public:
  /// Throws IoError when the spill directory cannot be created or written.
  MemoryManager(std::vector<backend::Device*> devices, MemoryLimits limits);
  ~MemoryManager();
  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  /// Registers a chunk of `bytes` whose home is `device`; no memory is taken yet.
  void create(ChunkId chunk, std::size_t bytes, int device);
  /// Frees every copy of the chunk. It must not be staged.
  void destroy(ChunkId chunk);
  bool exists(ChunkId chunk) const;

  /// Makes every chunk resident on its home device and pins it, all or nothing. A chunk
  /// with no data yet gets fresh (uninitialised) memory; an evicted one is brought back.
  /// Returns false when it cannot now because pinned chunks hold the space (try again
  /// after an unstage). Throws OutOfMemoryError (space, requested, in use, limit) when
  /// the chunks can never fit, IoError for a failed or corrupt spill file.
  /// `queued_ahead`: tasks staged on these devices and not unstaged yet. With two or more,
  /// a staging that would have to evict chunks announced tasks need returns false instead
  /// (it would only trade data needed sooner for data needed later). Once staged, each
  /// use's `data` is its chunk's memory; the same for the two below.
  bool try_stage(const std::vector<ChunkUse>& uses, int queued_ahead = 0);
  /// The quick case of try_stage: stages (and returns true) only when every chunk is already
  /// resident on its device and none is moving, so no data moves and no space is needed;
  /// otherwise changes nothing and returns false (then call try_stage). Callers may hold
  /// their own locks around it.
  bool try_stage_resident(const std::vector<ChunkUse>& uses);
  /// The bytes of every chunk `uses` names (one named twice counts twice) into `bytes`,
  /// then try_stage_resident(uses) if they are at most `budget`
  /// (false, staging nothing, if not): the usual first staging of a task, under one lock.
  bool size_and_stage_resident(const std::vector<ChunkUse>& uses, std::size_t budget,
                               std::size_t& bytes);
  /// Whether staging `uses` would copy nothing and evict nothing (the chunks are resident,
  /// or new with room for them).
  bool stages_in_place(const std::vector<ChunkUse>& uses) const;
  /// Device pointer of a staged chunk.
  void* data(ChunkId chunk) const;
  std::size_t bytes(ChunkId chunk) const;
  /// Unpins; chunks that were written lose their host and disk copies.
  void unstage(const std::vector<ChunkUse>& uses);
  /// retire(task, uses) and unstage(uses) under one lock (the end of every staged task).
  void unstage_and_retire(uint64_t task, const std::vector<ChunkUse>& uses);
  /// A task and the chunks it uses, for the calls on many tasks at once.
  struct Announced {
    uint64_t task;
    const std::vector<ChunkUse>* uses;
  };
  /// The same for several tasks (a batch that ran as one work), under one lock.
  void unstage_and_retire(const std::vector<Announced>& tasks);

  /// Announces that queued task `task` (ids grow in submission order) will use these
  /// chunks, which need not exist yet. A full device keeps the chunks needed soonest:
  /// it evicts those no announced task uses first, then the one whose next use is last.
  /// Each announcement is taken back by retire() once the task is done or dropped.
  /// Announcements are kept only from the first time a device holds more than half of its
  /// limit (before that no device evicts, and the bookkeeping would only cost time).
  void announce(uint64_t task, const std::vector<ChunkUse>& uses);
  /// Many at once (one lock).
  void announce(const std::vector<Announced>& tasks);
  /// Whether announcements are kept yet (announce ignores them until then).
  bool tracking() const;
  void retire(uint64_t task, const std::vector<ChunkUse>& uses);

  /// Bytes pinned now on `device`.
  std::size_t pinned_bytes(int device) const;
  /// Stats for each device, then host, then disk.
  std::vector<MemoryStats> stats() const;
  /// Gives every block the pools keep for reuse back to the devices and the host (blocks
  /// in use stay); returns the bytes given back.
  std::size_t free_cached_blocks();

  /// Where the chunk's copies are (for tests, logs and the scheduler's heuristics).
  ChunkState state(ChunkId chunk) const;
  /// Reports every spill, reload and eviction from now on to `observer` (null: none).
  /// Before any chunk is created.
  void observe(Observer* observer);
  /// The chunk's spill file; empty when the chunk has no copy on disk.
  std::string spill_file(ChunkId chunk) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridspan::runtime
