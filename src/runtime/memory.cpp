// The worker's memory manager: chunk copies in device, host and disk spaces, pooled
// allocations, all-or-nothing staging with pins, LRU eviction one level up and bring-back
// on demand. Policy (see DESIGN.md "Memory"):
// - A chunk's copies are kept coherent by validity: a copy exists only while it holds the
//   chunk's current data. A task that writes a chunk drops its host and disk copies when
//   it is staged (they are stale from then on) and again when it is unstaged.
// - After a bring-back the host copy is kept (and a disk file too), so evicting the chunk
//   again costs nothing. Such redundant host copies are the first to go when the host
//   space needs room; a host copy that is the chunk's only one is written to disk first.
// - Budgets count pool blocks (sizes rounded up to the pool's size classes); cached
//   blocks are released to the backend before anything is evicted.
// - Every copy happens under the manager's mutex. Future work: bring-back and eviction
//   on copy streams, outside the lock, so a slow spill does not hold up unstage.
#include "gridspan/runtime/memory.hpp"

#include <algorithm>
#include <limits>
#include <list>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "runtime/pool.hpp"
#include "runtime/spill.hpp"

namespace gridspan::runtime {

using detail::BlockPool;
using detail::SpillStore;

namespace {

constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();

struct Chunk {
  ChunkId id = 0;
  std::size_t bytes = 0;  // the chunk's own size (the disk payload)
  std::size_t block = 0;  // what one copy takes in the device and host spaces
  int device = 0;
  void* device_copy = nullptr;  // valid copies only; null = no copy in that space
  void* host_copy = nullptr;
  bool on_disk = false;
  int pins = 0;                            // staged tasks using the chunk now
  std::list<Chunk*>::iterator device_lru;  // in its device's LRU while device_copy is set
  std::list<Chunk*>::iterator host_lru;    // in the host LRU while host_copy is set
};

// The accounting of one space.
struct Usage {
  std::size_t used = 0;
  std::size_t limit = kUnbounded;
  std::size_t spilled = 0;
  std::size_t peak = 0;

  void add(std::size_t bytes) {
    used += bytes;
    peak = std::max(peak, used);
  }
  void remove(std::size_t bytes) { used -= bytes; }
  std::size_t reported_limit() const { return limit == kUnbounded ? 0 : limit; }
};

// One device's space, and the pool of host blocks suited to transfers with it.
struct DeviceSpace {
  explicit DeviceSpace(backend::Device* d)
      : device(d),
        pool([d](std::size_t n) { return d->allocate(n); },
             [d](void* p, std::size_t n) { d->deallocate(p, n); }),
        host_pool([d](std::size_t n) { return d->allocate_host(n); },
                  [d](void* p, std::size_t n) { d->deallocate_host(p, n); }) {}

  backend::Device* device;
  BlockPool pool;
  BlockPool host_pool;
  Usage usage;
  std::size_t pinned = 0;
  std::list<Chunk*> lru;  // resident chunks, least recently used first
};

// A chunk as seen by executor threads while it is staged.
struct StagedChunk {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// A task's chunks, each once, with whether the task writes it.
struct TaskChunks {
  std::vector<std::pair<Chunk*, bool>> chunks;
  std::unordered_set<const Chunk*> members;
};

}  // namespace

struct MemoryManager::Impl {
  explicit Impl(std::string spill_dir) : spill(std::move(spill_dir)) {}

  mutable std::mutex mutex;  // everything below, except `staged`
  std::vector<std::unique_ptr<DeviceSpace>> devices;
  Usage host;
  std::list<Chunk*> host_lru;  // chunks with a host copy, least recently used first
  Usage disk;
  SpillStore spill;
  std::unordered_map<ChunkId, std::unique_ptr<Chunk>> chunks;

  // Staged chunks for data() and bytes(), under their own mutex, which is never held
  // while copying: executors are not held up by a spill in progress. Taken after `mutex`.
  mutable std::mutex staged_mutex;
  std::unordered_map<ChunkId, StagedChunk> staged;

  Chunk& find(ChunkId id) const {
    auto it = chunks.find(id);
    if (it == chunks.end()) {
      throw Error(
          fmt::format("chunk {} is not known to this worker's memory manager (never "
                      "created, or destroyed already); this is a bug in gridspan's "
                      "scheduler",
                      id));
    }
    return *it->second;
  }

  TaskChunks task_chunks(const std::vector<ChunkUse>& uses) const {
    TaskChunks task;
    for (const ChunkUse& use : uses) {
      Chunk& c = find(use.chunk);
      if (task.members.insert(&c).second) {
        task.chunks.emplace_back(&c, use.write);
      } else {
        for (auto& [chunk, write] : task.chunks) {
          if (chunk == &c) write = write || use.write;
        }
      }
    }
    return task;
  }

  std::size_t host_held() const {
    std::size_t held = 0;
    for (const auto& d : devices) held += d->host_pool.held_bytes();
    return held;
  }

  // A device block for `c`; the caller has made room in the space already.
  void* allocate_device(const Chunk& c) {
    DeviceSpace& d = *devices[c.device];
    if (!d.pool.has_cached(c.bytes) && d.usage.limit != kUnbounded) {
      std::size_t held = d.pool.held_bytes();
      if (held + c.block > d.usage.limit) d.pool.release_cached(held + c.block - d.usage.limit);
    }
    try {
      return d.pool.allocate(c.bytes);
    } catch (const OutOfMemoryError&) {
      // The device itself is smaller than the limit: give it everything cached, once.
      if (d.pool.release_cached(kUnbounded) == 0) throw;
      return d.pool.allocate(c.bytes);
    }
  }

  // A host block for `c`, making room in the host space first.
  void* allocate_host(const Chunk& c, const TaskChunks* task) {
    make_host_room(c.block, task);
    BlockPool& pool = devices[c.device]->host_pool;
    if (!pool.has_cached(c.bytes) && host.limit != kUnbounded) {
      std::size_t held = host_held();
      if (held + c.block > host.limit) {
        std::size_t excess = held + c.block - host.limit;
        std::size_t released = 0;
        for (auto& d : devices) {
          if (released >= excess) break;
          released += d->host_pool.release_cached(excess - released);
        }
      }
    }
    try {
      return pool.allocate(c.bytes);
    } catch (const OutOfMemoryError&) {
      std::size_t released = 0;
      for (auto& d : devices) released += d->host_pool.release_cached(kUnbounded);
      if (released == 0) throw;
      return pool.allocate(c.bytes);
    }
  }

  void attach_device(Chunk& c, void* p) {
    DeviceSpace& d = *devices[c.device];
    c.device_copy = p;
    d.usage.add(c.block);
    c.device_lru = d.lru.insert(d.lru.end(), &c);
  }

  void attach_host(Chunk& c, void* p) {
    c.host_copy = p;
    host.add(c.block);
    c.host_lru = host_lru.insert(host_lru.end(), &c);
  }

  void drop_device(Chunk& c) {
    if (!c.device_copy) return;
    DeviceSpace& d = *devices[c.device];
    d.pool.free(c.device_copy, c.bytes);
    d.usage.remove(c.block);
    d.lru.erase(c.device_lru);
    c.device_copy = nullptr;
  }

  void drop_host(Chunk& c) {
    if (!c.host_copy) return;
    devices[c.device]->host_pool.free(c.host_copy, c.bytes);
    host.remove(c.block);
    host_lru.erase(c.host_lru);
    c.host_copy = nullptr;
  }

  void drop_disk(Chunk& c) {
    if (!c.on_disk) return;
    spill.remove(c.id);
    disk.remove(c.bytes);
    c.on_disk = false;
  }

  // Moves `c`'s only copy one level up if needed, then frees its host copy.
  void evict_host(Chunk& c) {
    if (!c.device_copy && !c.on_disk) {
      spill.write(c.id, c.host_copy, c.bytes);
      c.on_disk = true;
      disk.add(c.bytes);
    }
    drop_host(c);
    host.spilled += c.block;
  }

  // The host copy to evict next: redundant copies (the chunk is valid on its device or
  // on disk too) before only copies, least recently used first; the host copies a task
  // is about to bring back from only when nothing else is left.
  Chunk* host_victim(const TaskChunks* task) const {
    auto is_source = [&](const Chunk* c) {
      return task && !c->device_copy && task->members.count(c) > 0;
    };
    for (Chunk* c : host_lru) {
      if (!is_source(c) && (c->device_copy || c->on_disk)) return c;
    }
    for (Chunk* c : host_lru) {
      if (!is_source(c)) return c;
    }
    return host_lru.empty() ? nullptr : host_lru.front();
  }

  void make_host_room(std::size_t need, const TaskChunks* task) {
    if (host.limit == kUnbounded) return;
    if (need > host.limit) {
      throw OutOfMemoryError("host", need, host.used, host.limit,
                             "the host space must hold at least one chunk on its way to or "
                             "from disk; raise GRIDSPAN_HOST_MEMORY or use smaller chunks (a "
                             "finer data distribution)");
    }
    while (host.used + need > host.limit) {
      Chunk* victim = host_victim(task);
      if (!victim) throw Error("gridspan bug: the host space is over its limit with no copies");
      evict_host(*victim);
    }
  }

  // Moves `c` off its device: to the host unless a valid host copy is there already, or
  // the chunk is safe on disk and the host space would have to evict to take it.
  void evict_device(Chunk& c, const TaskChunks& task) {
    bool host_has_room = host.limit == kUnbounded || host.used + c.block <= host.limit;
    if (!c.host_copy && (!c.on_disk || host_has_room)) {
      void* h = allocate_host(c, &task);
      try {
        devices[c.device]->device->copy_to_host(h, c.device_copy, c.bytes);
      } catch (...) {
        devices[c.device]->host_pool.free(h, c.bytes);
        throw;
      }
      attach_host(c, h);
    }
    drop_device(c);
    devices[c.device]->usage.spilled += c.block;
  }

  void make_device_room(DeviceSpace& d, std::size_t need, const TaskChunks& task) {
    while (d.usage.used + need > d.usage.limit) {
      auto it = std::find_if(d.lru.begin(), d.lru.end(), [&](const Chunk* c) {
        return c->pins == 0 && task.members.count(c) == 0;
      });
      if (it == d.lru.end()) {
        throw Error(fmt::format("gridspan bug: {} is over its limit with nothing to evict",
                                d.device->name()));
      }
      evict_device(**it, task);
    }
  }

  // Makes `c` resident on its device; room is there already.
  void bring_back(Chunk& c, const TaskChunks& task) {
    backend::Device* device = devices[c.device]->device;
    if (!c.host_copy && c.on_disk) {
      void* h = allocate_host(c, &task);
      try {
        spill.read(c.id, h, c.bytes);
      } catch (...) {
        devices[c.device]->host_pool.free(h, c.bytes);
        throw;
      }
      attach_host(c, h);
    }
    void* p = allocate_device(c);
    if (c.host_copy) {
      try {
        device->copy_from_host(p, c.host_copy, c.bytes);
      } catch (...) {
        devices[c.device]->pool.free(p, c.bytes);
        throw;
      }
    }
    attach_device(c, p);
  }

  void touch(Chunk& c) {
    DeviceSpace& d = *devices[c.device];
    if (c.device_copy) d.lru.splice(d.lru.end(), d.lru, c.device_lru);
  }

  bool try_stage(const std::vector<ChunkUse>& uses) {
    TaskChunks task = task_chunks(uses);
    std::size_t n = devices.size();
    std::vector<std::size_t> total(n), missing(n), pinned_by_task(n);
    for (auto [c, write] : task.chunks) {
      total[c->device] += c->block;
      if (!c->device_copy) missing[c->device] += c->block;
      if (c->pins > 0) pinned_by_task[c->device] += c->block;
    }
    for (std::size_t i = 0; i < n; ++i) {
      DeviceSpace& d = *devices[i];
      if (total[i] > d.usage.limit) {
        throw OutOfMemoryError(d.device->name(), total[i], d.usage.used, d.usage.limit,
                               "one task needs all of these chunks on the device at once; "
                               "raise GRIDSPAN_DEVICE_MEMORY or use smaller chunks (a finer "
                               "data distribution) or smaller superblocks");
      }
      if (d.pinned - pinned_by_task[i] + total[i] > d.usage.limit) return false;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (missing[i] > 0) make_device_room(*devices[i], missing[i], task);
    }
    for (auto [c, write] : task.chunks) {
      if (!c->device_copy) bring_back(*c, task);
    }
    std::lock_guard staged_lock(staged_mutex);
    for (auto [c, write] : task.chunks) {
      if (c->pins++ == 0) {
        devices[c->device]->pinned += c->block;
        staged[c->id] = StagedChunk{c->device_copy, c->bytes};
      }
      touch(*c);
      if (write) {
        drop_host(*c);
        drop_disk(*c);
      }
    }
    return true;
  }

  void unstage(const std::vector<ChunkUse>& uses) {
    TaskChunks task = task_chunks(uses);
    for (auto [c, write] : task.chunks) {
      if (c->pins == 0) {
        throw Error(
            fmt::format("chunk {} is unstaged but not staged; unstage must match a "
                        "successful try_stage (a bug in gridspan's scheduler)",
                        c->id));
      }
    }
    std::lock_guard staged_lock(staged_mutex);
    for (auto [c, write] : task.chunks) {
      if (--c->pins == 0) {
        devices[c->device]->pinned -= c->block;
        staged.erase(c->id);
      }
      touch(*c);
      if (write) {
        drop_host(*c);
        drop_disk(*c);
      }
    }
  }

  void release_everything() {
    for (auto& [id, c] : chunks) {
      drop_device(*c);
      drop_host(*c);
      drop_disk(*c);
    }
    chunks.clear();
  }
};

MemoryManager::MemoryManager(std::vector<backend::Device*> devices, MemoryLimits limits)
    : impl_(std::make_unique<Impl>(limits.spill_dir)) {
  for (backend::Device* device : devices) {
    if (!device) throw Error("MemoryManager needs devices, not null pointers");
    auto space = std::make_unique<DeviceSpace>(device);
    std::size_t limit = limits.device_bytes ? limits.device_bytes : device->memory_capacity();
    space->usage.limit = limit ? limit : kUnbounded;
    impl_->devices.push_back(std::move(space));
  }
  impl_->host.limit = limits.host_bytes ? limits.host_bytes : kUnbounded;
}

MemoryManager::~MemoryManager() {
  impl_->release_everything();
}

void MemoryManager::create(ChunkId chunk, std::size_t bytes, int device) {
  std::lock_guard lock(impl_->mutex);
  if (device < 0 || static_cast<std::size_t>(device) >= impl_->devices.size()) {
    throw Error(
        fmt::format("chunk {} is created on device {}, but this worker has {} "
                    "device(s); this is a bug in gridspan's planner",
                    chunk, device, impl_->devices.size()));
  }
  if (impl_->chunks.count(chunk)) {
    throw Error(
        fmt::format("chunk {} is created twice; this is a bug in gridspan's planner", chunk));
  }
  auto c = std::make_unique<Chunk>();
  c->id = chunk;
  c->bytes = bytes;
  c->block = BlockPool::size_class(bytes);
  c->device = device;
  impl_->chunks.emplace(chunk, std::move(c));
}

void MemoryManager::destroy(ChunkId chunk) {
  std::lock_guard lock(impl_->mutex);
  Chunk& c = impl_->find(chunk);
  if (c.pins > 0) {
    throw Error(
        fmt::format("chunk {} is destroyed while {} staged task(s) use it; destroy it "
                    "only after they are unstaged (a bug in gridspan's scheduler)",
                    chunk, c.pins));
  }
  impl_->drop_device(c);
  impl_->drop_host(c);
  impl_->drop_disk(c);
  impl_->chunks.erase(chunk);
}

bool MemoryManager::exists(ChunkId chunk) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->chunks.count(chunk) > 0;
}

bool MemoryManager::try_stage(const std::vector<ChunkUse>& uses) {
  std::lock_guard lock(impl_->mutex);
  return impl_->try_stage(uses);
}

void* MemoryManager::data(ChunkId chunk) const {
  std::lock_guard lock(impl_->staged_mutex);
  auto it = impl_->staged.find(chunk);
  if (it == impl_->staged.end()) {
    throw Error(
        fmt::format("data() of chunk {}, which is not staged; a task may use a "
                    "chunk's memory only between try_stage and unstage",
                    chunk));
  }
  return it->second.data;
}

std::size_t MemoryManager::bytes(ChunkId chunk) const {
  {
    std::lock_guard lock(impl_->staged_mutex);
    auto it = impl_->staged.find(chunk);
    if (it != impl_->staged.end()) return it->second.bytes;
  }
  std::lock_guard lock(impl_->mutex);
  return impl_->find(chunk).bytes;
}

void MemoryManager::unstage(const std::vector<ChunkUse>& uses) {
  std::lock_guard lock(impl_->mutex);
  impl_->unstage(uses);
}

std::size_t MemoryManager::pinned_bytes(int device) const {
  std::lock_guard lock(impl_->mutex);
  if (device < 0 || static_cast<std::size_t>(device) >= impl_->devices.size()) {
    throw Error(fmt::format("pinned_bytes of device {}, but this worker has {} device(s)", device,
                            impl_->devices.size()));
  }
  return impl_->devices[device]->pinned;
}

std::vector<SpaceStats> MemoryManager::stats() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<SpaceStats> out;
  std::size_t host_cached = 0;
  for (const auto& d : impl_->devices) {
    out.push_back(SpaceStats{d->device->name(), d->usage.used, d->usage.reported_limit(),
                             d->usage.spilled, d->usage.peak, d->pool.cached_bytes()});
    host_cached += d->host_pool.cached_bytes();
  }
  const Usage& host = impl_->host;
  out.push_back(
      SpaceStats{"host", host.used, host.reported_limit(), host.spilled, host.peak, host_cached});
  const Usage& disk = impl_->disk;
  out.push_back(SpaceStats{"disk", disk.used, 0, disk.spilled, disk.peak, 0});
  return out;
}

ChunkState MemoryManager::state(ChunkId chunk) const {
  std::lock_guard lock(impl_->mutex);
  const Chunk& c = impl_->find(chunk);
  return ChunkState{c.device_copy != nullptr, c.host_copy != nullptr, c.on_disk, c.pins};
}

std::string MemoryManager::spill_file(ChunkId chunk) const {
  std::lock_guard lock(impl_->mutex);
  const Chunk& c = impl_->find(chunk);
  return c.on_disk ? impl_->spill.path(chunk) : std::string();
}

}  // namespace gridspan::runtime
