// The worker's memory manager: chunk copies in device, host and disk spaces, pooled
// allocations, all-or-nothing staging with pins, eviction one level up and bring-back on
// demand. Policy (see DESIGN.md "Memory"):
// - The device evicts by the queued tasks' announced uses: a chunk no queued task uses goes
//   first (least recently used first), else the one whose next use comes last (Belady's
//   rule over the tasks submitted so far). A sweep over more data than fits then keeps
//   part of it resident from one pass to the next, where LRU would evict each chunk just
//   before its next use.
// - A chunk's copies are kept coherent by validity: a copy exists only while it holds the
//   chunk's current data. A task that writes a chunk drops its host and disk copies when
//   it is staged (they are stale from then on) and again when it is unstaged.
// - After a bring-back the host copy is kept (and a disk file too), so evicting the chunk
//   again costs nothing. Such redundant host copies are the first to go when the host
//   space needs room; a host copy that is the chunk's only one is written to disk first.
// - Write-behind: a device that evicts has the chunks it will evict next copied to the host
//   ahead, kept resident, so that their eviction copies nothing and a staging's copies in do
//   not wait for its victims' copies out.
// - Budgets count pool blocks (sizes rounded up to the pool's size classes); cached
//   blocks are released to the backend before anything is evicted.
// - No copy or file I/O runs under the manager's mutex, so a slow spill or reload does
//   not hold up unstage or other stagings: staging pins its chunks first (reserving their
//   space), then plans one movement at a time under the mutex, marks the chunk involved
//   as moving, does the I/O without the mutex and commits the result under it. Whoever
//   needs a moving chunk (or space only moving chunks can free) waits for the transit.
#include "runtime/memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/mutex.hpp"
#include "core/thread_name.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/pool.hpp"
#include "runtime/spill.hpp"

namespace gridspan::runtime {

MemoryLimits memory_limits(const Config& config) {
  MemoryLimits limits;
  limits.device_bytes = config.device_memory;
  limits.host_bytes = config.host_memory;
  if (limits.host_bytes == 0) {  // half of physical memory, shared by the node's ranks
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0)
      limits.host_bytes = std::size_t(pages) * std::size_t(page) / 2 /
                          static_cast<std::size_t>(std::max(1, config.node_ranks));
  }
  limits.spill_dir = config.spill_dir;
  limits.pin_ahead = config.pin_ahead;
  limits.write_behind = config.write_behind;
  limits.pool = config.memory_pool;
  return limits;
}

using detail::BlockPool;
using detail::SpillStore;

namespace {

constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();
// Tasks a device may have staged ahead and still evict chunks announced tasks need for the
// next one: two keep a copy in flight beside the running task.
constexpr int kEvictionLookahead = 2;

// The ids of the queued tasks that will use a chunk, in increasing order. Tasks are
// announced in id order and mostly retired in it, so adding appends and removing usually
// takes the first: kept as a vector with a moving start (no shifting per removal), packed
// when half of it is dead.
class NextUses {
 public:
  bool empty() const { return head_ == ids_.size(); }
  uint64_t front() const { return ids_[head_]; }
  void add(uint64_t task) {
    ids_.insert(std::upper_bound(ids_.begin() + std::ptrdiff_t(head_), ids_.end(), task), task);
  }
  void remove(uint64_t task) {
    auto first = ids_.begin() + std::ptrdiff_t(head_);
    auto it = std::lower_bound(first, ids_.end(), task);
    if (it == ids_.end() || *it != task) return;
    if (it == first) {
      ++head_;
    } else {
      ids_.erase(it);
    }
    if (head_ == ids_.size()) {
      ids_.clear();
      head_ = 0;
    } else if (head_ > 64 && head_ * 2 > ids_.size()) {
      ids_.erase(ids_.begin(), ids_.begin() + std::ptrdiff_t(head_));
      head_ = 0;
    }
  }

 private:
  std::vector<uint64_t> ids_;
  std::size_t head_ = 0;
};

struct Chunk {
  ChunkId id = 0;
  std::size_t bytes = 0;  // the chunk's own size (the disk payload)
  std::size_t block = 0;  // what one copy takes in the device and host spaces
  int device = 0;
  void* device_copy = nullptr;  // valid copies only; null = no copy in that space
  void* host_copy = nullptr;
  bool on_disk = false;
  int pins = 0;                            // tasks using the chunk now, staged or being staged
  NextUses next_uses;                      // announced tasks that will use it
  bool moving = false;                     // a copy or file I/O of the chunk runs without the mutex
  std::list<Chunk*>::iterator device_lru;  // in its device's LRU while device_copy is set
  std::list<Chunk*>::iterator host_lru;    // in the host LRU while host_copy is set
};

// The accounting of one space.
struct Usage {
  std::size_t used = 0;
  std::size_t limit = kUnbounded;
  std::size_t spilled = 0;
  std::size_t peak = 0;
  std::size_t copied_out = 0;  // bytes copied to the level below (device → host, host → disk)
  std::size_t copied_in = 0;   // bytes copied from the level below

  void add(std::size_t bytes) {
    used += bytes;
    peak = std::max(peak, used);
  }
  void remove(std::size_t bytes) { used -= bytes; }
  std::size_t reported_limit() const { return limit == kUnbounded ? 0 : limit; }
};

// One device's space, and the pool of host blocks suited to transfers with it.
struct DeviceSpace {
  DeviceSpace(backend::Device* d, bool caching)
      : device(d),
        pool([d](std::size_t n) { return d->allocate(n); },
             [d](void* p, std::size_t n) { d->deallocate(p, n); }, caching),
        host_pool([d](std::size_t n) { return d->allocate_host(n); },
                  [d](void* p, std::size_t n) { d->deallocate_host(p, n); }, caching) {}

  backend::Device* device;
  BlockPool pool;
  BlockPool host_pool;
  Usage usage;
  std::size_t pinned = 0;          // blocks of chunks with pins
  std::size_t reserved = 0;        // the part of `pinned` held by tasks still being staged
  std::size_t leaving = 0;         // blocks of chunks being written back (freed once written)
  std::exception_ptr write_error;  // a write-back failed: the next staging here throws it
  bool out_of_core = false;        // it has evicted, or will: host blocks are pinned ahead for it
  std::size_t created = 0;         // the blocks of the chunks created on it, resident or not
  std::size_t task_blocks = 0;     // the blocks the latest task staged here takes on it
  std::list<Chunk*> lru;           // resident chunks, least recently used first
};

// A device copy on its way to the host on the write-back thread; the chunk is moving.
struct WriteBack {
  Chunk* chunk;
  void* host;  // its host block, accounted already; null: the thread allocates it
  bool keep;   // written behind: the device copy stays, and evicting it is free from then on
};

// A chunk as seen by executor threads while it is staged.
// Kept from a chunk's first staging to its destruction (no allocation per staging);
// `staged` says whether a task has it staged now.
struct StagedChunk {
  void* data = nullptr;
  std::size_t bytes = 0;
  bool staged = false;
};

// A task's chunks, each once, with whether the task writes it.
struct TaskChunk {
  Chunk* chunk;
  bool write;    // the task writes it
  bool discard;  // every use writes all of it: its old contents are not needed
};
// A task uses a handful of chunks (a temporary per argument, at most 16 partials), so
// membership is a scan, and the vector is reused from one staging to the next.
struct TaskChunks {
  std::vector<TaskChunk> chunks;
  TaskChunk* find(const Chunk* c) {
    for (TaskChunk& u : chunks)
      if (u.chunk == c) return &u;
    return nullptr;
  }
  bool has(const Chunk* c) const {
    return std::any_of(chunks.begin(), chunks.end(),
                       [&](const TaskChunk& u) { return u.chunk == c; });
  }
  bool discards(const Chunk* c) const {
    return std::any_of(chunks.begin(), chunks.end(),
                       [&](const TaskChunk& u) { return u.chunk == c && u.discard; });
  }
  // Bytes [lo, hi) of a chunk that the task overwrites without overwriting all of it: its
  // bring-back copies the rest only. One a chunk used once (a second use clears it).
  struct Fresh {
    const Chunk* chunk;
    std::size_t lo, hi;
  };
  std::vector<Fresh> fresh;
  std::pair<std::size_t, std::size_t> fresh_bytes(const Chunk* c) const {
    for (const Fresh& f : fresh)
      if (f.chunk == c) return {f.lo, f.hi};
    return {0, 0};
  }
};

}  // namespace

struct MemoryManager::Impl {
  explicit Impl(std::string spill_dir) : spill(std::move(spill_dir)) {}

  // Both spin before they sleep: the launching thread and the completion threads take them
  // for short stretches at once, and a sleep and wake-up costs more than the stretch.
  mutable AdaptiveMutex mutex;        // everything below, except `staged`
  std::condition_variable_any moved;  // a transit ended, or a staging finished or failed
  int transits = 0;                   // copies and file I/O running without the mutex
  std::vector<std::unique_ptr<DeviceSpace>> devices;
  Usage host;
  std::list<Chunk*> host_lru;  // chunks with a host copy, least recently used first
  Usage disk;
  SpillStore spill;
  Observer* observer = nullptr;  // set before any chunk exists
  std::unordered_map<ChunkId, std::unique_ptr<Chunk>> chunks;
  // Announced uses of chunks not created yet (a task may be submitted with its chunk's
  // CreateChunk in one batch).
  std::unordered_map<ChunkId, NextUses> early_uses;
  std::atomic<bool> tracking{false};  // announcements are kept (see note_usage)

  // Staged chunks for data() and bytes(), under their own mutex, which is never held
  // while copying: executors are not held up by a spill in progress. Taken after `mutex`.
  mutable AdaptiveMutex staged_mutex;
  std::unordered_map<ChunkId, StagedChunk> staged;
  TaskChunks scratch;  // for a staging or unstaging that keeps the mutex throughout
  std::vector<std::size_t> scratch_bytes;  // per device, likewise

  // Evicted device copies are written to the host on a thread of their own, so that a
  // staging brings its chunks in while its victims go out (the link carries both ways at
  // once). Started with the first write-back; drains its queue before it ends.
  std::thread writer;
  std::deque<WriteBack> write_backs;
  std::condition_variable_any wake_writer;
  bool stop_writer = false;
  // Write-behind: between write-backs the thread copies to the host the chunks an
  // out-of-core device will evict next that have no host copy, keeping them resident, so
  // that evicting them later costs no copy and a staging's copies in need not wait for
  // copies out (GRIDSPAN_WRITE_BEHIND).
  bool write_behind = true;
  bool behind_due = false;  // a task ended since the thread last found nothing to write

  // Pinned host memory takes milliseconds per megabyte to allocate (docs/PERFORMANCE.md), and
  // a chunk's first write-back would wait for its block: once a device evicts, a thread of
  // its own pins host blocks ahead for its resident chunks that have no host copy yet.
  std::thread pinner;
  std::condition_variable_any wake_pinner;
  bool pin_due = false;  // a device evicted since the pinner last found nothing to do
  // Host blocks on their way from the backend outside the pools (pinned ahead, or for a
  // write-back): counted as held, so that the host limit holds meanwhile.
  std::size_t unpooled = 0;
  bool pin_ahead = true;  // off when asked, or once the host space is full or out of pinned memory

  // Ends the write-back thread once its queue is written, and the pinning thread.
  void stop_writing() {
    {
      std::lock_guard lock(mutex);
      stop_writer = true;
    }
    wake_writer.notify_all();
    wake_pinner.notify_all();
    if (writer.joinable()) writer.join();
    if (pinner.joinable()) pinner.join();
  }

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

  // `task` becomes the chunks of `uses`, each once.
  // `bytes`, when given: the bytes of every use's chunk (one named twice counts twice).
  void task_chunks(const std::vector<ChunkUse>& uses, TaskChunks& task,
                   std::size_t* bytes = nullptr) const {
    task.chunks.clear();
    task.fresh.clear();
    for (const ChunkUse& use : uses) {
      Chunk& c = find(use.chunk);
      if (bytes) *bytes += c.bytes;
      if (TaskChunk* u = task.find(&c)) {
        u->write = u->write || use.write;
        u->discard = u->discard && use.discard;
        std::erase_if(task.fresh, [&](const TaskChunks::Fresh& f) { return f.chunk == &c; });
      } else {
        task.chunks.push_back(TaskChunk{&c, use.write, use.discard});
        add_fresh(use, c, task);
      }
    }
  }

  // The bytes of `c` that `use` overwrites without overwriting all of it, if any.
  static void add_fresh(const ChunkUse& use, const Chunk& c, TaskChunks& task) {
    if (use.fresh_lo >= use.fresh_hi || use.volume <= 0 || use.fresh_hi > use.volume) return;
    const auto volume = static_cast<std::size_t>(use.volume);
    if (c.bytes % volume != 0) return;  // not this chunk's elements: bring it all
    const std::size_t elem = c.bytes / volume;
    task.fresh.push_back({&c, std::size_t(use.fresh_lo) * elem, std::size_t(use.fresh_hi) * elem});
  }

  std::size_t host_held() const {
    std::size_t held = unpooled;
    for (const auto& d : devices) held += d->host_pool.held_bytes();
    return held;
  }

  // A device block for `c`, accounted in the device space; the caller has made room.
  void* allocate_device(const Chunk& c) {
    DeviceSpace& d = *devices[c.device];
    if (!d.pool.has_cached(c.bytes) && d.usage.limit != kUnbounded) {
      std::size_t held = d.pool.held_bytes();
      if (held + c.block > d.usage.limit) d.pool.release_cached(held + c.block - d.usage.limit);
    }
    void* p = nullptr;
    try {
      p = d.pool.allocate(c.bytes);
    } catch (const OutOfMemoryError&) {
      // The device itself is smaller than the limit: give it everything cached, once.
      if (d.pool.release_cached(kUnbounded) == 0) throw;
      p = d.pool.allocate(c.bytes);
    }
    d.usage.add(c.block);
    note_usage(d);
    return p;
  }

  // Next uses matter once a device may have to evict: from the first time one holds more
  // than half of its limit, tasks are announced (before, announcing would only cost time).
  void note_usage(const DeviceSpace& d) {
    if (d.usage.limit != kUnbounded && d.usage.used * 2 > d.usage.limit)
      tracking.store(true, std::memory_order_relaxed);
  }

  void free_device(const Chunk& c, void* p) {
    DeviceSpace& d = *devices[c.device];
    d.pool.free(p, c.bytes);
    d.usage.remove(c.block);
  }

  // Cached host blocks go back to the backend until a new block for `c` stays within the
  // host limit; pinning ahead stops from then on.
  void release_host_for(const Chunk& c) {
    if (devices[c.device]->host_pool.has_cached(c.bytes) || host.limit == kUnbounded) return;
    std::size_t held = host_held();
    if (held + c.block <= host.limit) return;
    pin_ahead = false;
    std::size_t excess = held + c.block - host.limit;
    std::size_t released = 0;
    for (auto& d : devices) {
      if (released >= excess) break;
      released += d->host_pool.release_cached(excess - released);
    }
  }

  // A host block for `c`, accounted in the host space; the caller has made room.
  void* allocate_host(const Chunk& c) {
    BlockPool& pool = devices[c.device]->host_pool;
    release_host_for(c);
    void* p = nullptr;
    try {
      p = pool.allocate(c.bytes);
    } catch (const OutOfMemoryError&) {
      if (release_all_host_cache() == 0) throw;
      p = pool.allocate(c.bytes);
    }
    host.add(c.block);
    return p;
  }

  // Every cached host block goes back to the backend (out of pinned memory); the bytes.
  std::size_t release_all_host_cache() {
    std::size_t released = 0;
    for (auto& d : devices) released += d->host_pool.release_cached(kUnbounded);
    return released;
  }

  void free_host(const Chunk& c, void* p) {
    devices[c.device]->host_pool.free(p, c.bytes);
    host.remove(c.block);
  }

  // Makes an accounted block `c`'s valid copy in its space.
  void attach_device(Chunk& c, void* p) {
    DeviceSpace& d = *devices[c.device];
    c.device_copy = p;
    c.device_lru = d.lru.insert(d.lru.end(), &c);
  }

  void attach_host(Chunk& c, void* p) {
    c.host_copy = p;
    c.host_lru = host_lru.insert(host_lru.end(), &c);
  }

  void drop_device(Chunk& c) {
    if (!c.device_copy) return;
    free_device(c, c.device_copy);
    devices[c.device]->lru.erase(c.device_lru);
    c.device_copy = nullptr;
  }

  // `c` leaves its device for good (its data are valid elsewhere now).
  void evict_device(Chunk& c) {
    drop_device(c);
    devices[c.device]->usage.spilled += c.block;
  }

  void drop_host(Chunk& c) {
    if (!c.host_copy) return;
    free_host(c, c.host_copy);
    host_lru.erase(c.host_lru);
    c.host_copy = nullptr;
  }

  // The unified model: the chunk's only block leaves one space for the other without being
  // copied or freed (both pools draw on one allocator), keeping its address and bytes.
  void move_block(Chunk& c, bool to_host) {
    DeviceSpace& d = *devices[c.device];
    if (to_host) {
      void* p = c.device_copy;
      d.pool.forget(c.bytes);
      d.usage.remove(c.block);
      d.lru.erase(c.device_lru);
      c.device_copy = nullptr;
      d.host_pool.adopt(c.bytes);
      host.add(c.block);
      attach_host(c, p);
    } else {
      void* p = c.host_copy;
      d.host_pool.forget(c.bytes);
      host.remove(c.block);
      host_lru.erase(c.host_lru);
      c.host_copy = nullptr;
      d.pool.adopt(c.bytes);
      d.usage.add(c.block);
      note_usage(d);
      attach_device(c, p);
    }
  }

  void drop_disk(Chunk& c) {
    if (!c.on_disk) return;
    spill.remove(c.id);
    disk.remove(c.bytes);
    c.on_disk = false;
  }

  // Runs `io` without the mutex while `c` is marked as moving (no other thread evicts,
  // frees, moves or destroys it meanwhile), then, under the mutex again, `commit` or, when
  // `io` failed, `undo` and the error.
  // The move is reported to the observer as `kind` on `track` once it is committed, with
  // `bytes` (0: the chunk's).
  template <class Io, class Commit, class Undo>
  void transit(std::unique_lock<AdaptiveMutex>& lock, Chunk& c, const char* kind, int track, Io io,
               Commit commit, Undo undo, std::size_t bytes = 0) {
    const double start = observer ? observer_now_us() : 0;
    c.moving = true;
    ++transits;
    lock.unlock();
    std::exception_ptr error;
    try {
      io();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    c.moving = false;
    --transits;
    moved.notify_all();
    if (error) {
      undo();
      std::rethrow_exception(error);
    }
    commit();
    report(kind, c, track, start, bytes);
  }

  // Tells the observer that `c` moved (spill, reload) or was dropped (evict) since `start`,
  // `bytes` of it (0: all).
  void report(const char* kind, const Chunk& c, int track, double start,
              std::size_t bytes = 0) const {
    if (!observer) return;
    const double now = observer_now_us();
    observer->chunk_moved(TraceEvent{fmt::format("chunk {}", c.id), kind, track,
                                     start ? start : now, now, c.id, bytes ? bytes : c.bytes});
  }
  int disk_track() const { return static_cast<int>(devices.size()); }

  // Waits for another thread's transit to end when nothing can be done before; `what`
  // names the space for the error when no transit could ever make room.
  void wait_for_transit(std::unique_lock<AdaptiveMutex>& lock, const std::string& what) {
    if (transits == 0) {
      throw Error(fmt::format("gridspan bug: {} is over its limit with nothing to evict", what));
    }
    moved.wait(lock);
  }

  // The host copy to evict next: redundant copies (the chunk is valid on its device or
  // on disk too) before only copies, least recently used first; the host copies a task
  // is about to bring back from only when nothing else is left. Never a moving chunk.
  Chunk* host_victim(const TaskChunks* task) const {
    auto is_source = [&](const Chunk* c) { return task && !c->device_copy && task->has(c); };
    for (Chunk* c : host_lru) {
      if (!c->moving && !is_source(c) && (c->device_copy || c->on_disk)) return c;
    }
    for (Chunk* c : host_lru) {
      if (!c->moving && !is_source(c)) return c;
    }
    for (Chunk* c : host_lru) {
      if (!c->moving) return c;
    }
    return nullptr;
  }

  // One step towards `need` free bytes in the host space: frees one host copy, writing it
  // to disk first (without the mutex) when it is the chunk's only copy, or waits.
  void free_host_step(std::unique_lock<AdaptiveMutex>& lock, std::size_t need,
                      const TaskChunks* task) {
    if (need > host.limit) {
      throw OutOfMemoryError("host", need, host.used, host.limit,
                             "the host space must hold at least one chunk on its way to or "
                             "from disk; raise GRIDSPAN_HOST_MEMORY or use smaller chunks (a "
                             "finer data distribution)");
    }
    Chunk* victim = host_victim(task);
    if (!victim) return wait_for_transit(lock, "the host space");
    Chunk& c = *victim;
    auto evicted = [&] {
      drop_host(c);
      host.spilled += c.block;
    };
    if (c.device_copy || c.on_disk) {
      report("evict", c, disk_track(), 0);
      return evicted();
    }
    const void* data = c.host_copy;
    transit(
        lock, c, "spill", disk_track(), [&] { spill.write(c.id, data, c.bytes); },
        [&] {
          c.on_disk = true;
          disk.add(c.bytes);
          host.copied_out += c.bytes;
          evicted();
        },
        [] {});  // the host copy stays valid
  }

  // The device copy to evict next among those no task pins or is staging: the least
  // recently used one that no announced task needs, else the one needed last.
  Chunk* device_victim(const DeviceSpace& d, const TaskChunks& task) const {
    Chunk* victim = nullptr;
    for (Chunk* c : d.lru) {
      if (!evictable(*c, task)) continue;
      if (c->next_uses.empty()) return c;
      if (!victim || c->next_uses.front() > victim->next_uses.front()) victim = c;
    }
    return victim;
  }

  void announce(uint64_t task, const std::vector<ChunkUse>& uses);
  void retire(uint64_t task, const std::vector<ChunkUse>& uses);

  // A resident chunk eviction may take for `task`'s staging: no task pins it, it is not in
  // transit, and `task` does not need it.
  static bool evictable(const Chunk& c, const TaskChunks& task) {
    return c.pins == 0 && !c.moving && !task.has(&c);
  }

  // One step towards room on device `d`: moves the chunk device_victim picks off it, to the host
  // unless a valid host copy is there already or the chunk is safe on disk and the host space would
  // have to evict to take it.
  void free_device_step(std::unique_lock<AdaptiveMutex>& lock, DeviceSpace& d,
                        const TaskChunks& task) {
    Chunk* victim = device_victim(d, task);
    if (!victim) return wait_for_transit(lock, d.device->name());
    Chunk& c = *victim;
    bool host_has_room = host.limit == kUnbounded || host.used + c.block <= host.limit;
    if (c.host_copy || (c.on_disk && !host_has_room)) {
      report("evict", c, c.device, 0);
      return evict_device(c);
    }
    if (!host_has_room) return free_host_step(lock, c.block, &task);
    if (d.device->unified()) {
      // One address space: the block changes space; the data stays where it is.
      move_block(c, /*to_host=*/true);
      d.usage.spilled += c.block;
      report("spill", c, c.device, 0);
      return;
    }
    pin_ahead_for(d);
    queue_write(d, c, false);
  }

  // Queues `c`'s write-back (`keep`: write-behind) with a host block from the pool, or,
  // when the pool has none of its size, for the write-back thread to allocate: a new block
  // would hold the mutex for milliseconds.
  void queue_write(DeviceSpace& d, Chunk& c, bool keep) {
    if (d.host_pool.has_cached(c.bytes)) return write_back(d, c, allocate_host(c), keep);
    release_host_for(c);
    host.add(c.block);
    unpooled += c.block;
    write_back(d, c, nullptr, keep);
  }

  // A chunk was created on its device. Once the chunks created on a device outgrow its
  // memory it will evict: pinning host blocks ahead starts now rather than at its first
  // eviction, while the first chunks are written. A host block takes milliseconds to pin
  // (Black-Scholes out of core on one H100: 27 blocks of 134 MB in 362 ms), and until the
  // pinning caught up the write-backs pinned their own, which slowed the first runs.
  void created(const Chunk& c) {
    DeviceSpace& d = *devices[c.device];
    d.created += c.block;
    if (!d.out_of_core && !d.device->unified() && d.created > d.usage.limit) pin_ahead_for(d);
  }

  // `d` evicts: from now on the pinning thread keeps a host block ready for each of its
  // resident chunks without a host copy.
  void pin_ahead_for(DeviceSpace& d) {
    d.out_of_core = true;
    if (!pin_ahead) return;
    pin_due = true;
    if (!pinner.joinable()) {
      pinner = std::thread([this] {
        name_this_thread("gs-host-pin");
        pin_loop();
      });
    }
    wake_pinner.notify_one();
  }

  void pin_loop() {
    std::unique_lock lock(mutex);
    while (true) {
      wake_pinner.wait(lock, [&] { return stop_writer || pin_due; });
      if (stop_writer) return;
      auto [d, bytes] = next_block_ahead();
      if (!d) {
        pin_due = false;
        continue;
      }
      pin_one(lock, *d, bytes);
    }
  }

  // The device and block size of the next host block to pin ahead: a class of which an
  // out-of-core device has more resident chunks without a host copy than its host pool has
  // cached blocks, while the host space has room for one more. {null, 0}: none.
  std::pair<DeviceSpace*, std::size_t> next_block_ahead() const {
    if (!pin_ahead) return {nullptr, 0};
    for (const auto& space : devices) {
      DeviceSpace& d = *space;
      if (!d.out_of_core) continue;
      std::map<std::size_t, std::size_t> wanted;  // by size class; a few classes at most
      for (const Chunk* c : d.lru)
        if (!c->host_copy && !c->moving) ++wanted[BlockPool::size_class(c->bytes)];
      for (auto [block, n] : wanted) {
        if (host.limit != kUnbounded && host_held() + block > host.limit) return {nullptr, 0};
        if (d.host_pool.cached_blocks(block) < n) return {&d, block};
      }
    }
    return {nullptr, 0};
  }

  // Pins one host block of `block` bytes without the mutex and caches it in `d`'s host pool;
  // a failure (out of pinned memory) ends pinning ahead, and the write-backs allocate.
  void pin_one(std::unique_lock<AdaptiveMutex>& lock, DeviceSpace& d, std::size_t block) {
    const double start = observer ? observer_now_us() : 0;
    unpooled += block;
    lock.unlock();
    void* p = nullptr;
    try {
      p = d.device->allocate_host(block);
    } catch (const std::exception& e) {
      logging::debug("pinning host memory ahead stopped: {}", e.what());
    }
    lock.lock();
    unpooled -= block;
    if (!p) {
      pin_ahead = false;
      return;
    }
    d.host_pool.adopt(block);
    d.host_pool.free(p, block);
    if (observer)
      observer->chunk_moved(
          TraceEvent{"host block", "pin", disk_track(), start, observer_now_us(), 0, block});
  }

  // Queues the copy of `c`'s device block to `host` on the write-back thread; `c` moves
  // until it is written, and its device block counts as leaving unless `keep`.
  void write_back(DeviceSpace& d, Chunk& c, void* host, bool keep) {
    c.moving = true;
    ++transits;
    if (!keep) d.leaving += c.block;
    write_backs.push_back(WriteBack{&c, host, keep});
    if (!writer.joinable()) {
      writer = std::thread([this] {
        name_this_thread("gs-write-back");
        write_back_loop();
      });
    }
    wake_writer.notify_one();
  }

  void write_back_loop() {
    std::unique_lock lock(mutex);
    while (true) {
      wake_writer.wait(lock, [&] { return stop_writer || !write_backs.empty() || behind_due; });
      if (write_backs.empty()) {
        if (stop_writer) return;
        if (!write_behind_one()) behind_due = false;
        continue;
      }
      const WriteBack job = write_backs.front();
      write_backs.pop_front();
      write_one(lock, job);
    }
  }

  // A new host block for a chunk of `bytes` from the backend, called without the mutex;
  // out of memory, every cached host block goes back (under the mutex) and it tries again.
  void* new_host_block(std::unique_lock<AdaptiveMutex>& lock, DeviceSpace& d, std::size_t bytes) {
    try {
      return d.device->allocate_host(BlockPool::size_class(bytes));
    } catch (const OutOfMemoryError&) {
      lock.lock();
      const std::size_t released = release_all_host_cache();
      pin_ahead = false;
      lock.unlock();
      if (released == 0) throw;
      return d.device->allocate_host(BlockPool::size_class(bytes));
    }
  }

  // One write-back, the copy (and the host block's allocation, when it has none) without
  // the mutex; a failed one leaves the device copy as it was and is thrown by the next
  // staging on that device.
  void write_one(std::unique_lock<AdaptiveMutex>& lock, const WriteBack& job) {
    Chunk& c = *job.chunk;
    DeviceSpace& d = *devices[c.device];
    const double start = observer ? observer_now_us() : 0;
    const void* from = c.device_copy;
    void* to = job.host;
    lock.unlock();
    std::exception_ptr error;
    try {
      if (!to) to = new_host_block(lock, d, c.bytes);
      d.device->copy_to_host(to, from, c.bytes);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    c.moving = false;
    --transits;
    if (!job.keep) d.leaving -= c.block;
    if (!job.host) {
      unpooled -= c.block;
      if (to) d.host_pool.adopt(c.bytes);  // the block joins the pool
    }
    if (error) {
      if (to) {
        free_host(c, to);
      } else {
        host.remove(c.block);
      }
      d.write_error = error;
    } else {
      attach_host(c, to);
      d.usage.copied_out += c.bytes;
      if (!job.keep) evict_device(c);
      report(job.keep ? "write-behind" : "spill", c, c.device, start);
    }
    moved.notify_all();
  }

  // A task ended: chunks it used may be written behind now.
  void wake_write_behind() {
    if (!write_behind || !writer.joinable()) return;
    behind_due = true;
    wake_writer.notify_one();
  }

  // Queues the write-behind of one chunk, if one is due; false if none is.
  // (next_behind leaves room in the host space, so queue_write releases nothing there.)
  bool write_behind_one() {
    for (auto& space : devices) {
      DeviceSpace& d = *space;
      if (!d.out_of_core || d.device->unified()) continue;
      if (Chunk* c = next_behind(d)) {
        queue_write(d, *c, true);
        return true;
      }
    }
    return false;
  }

  // The chunk of `d` to write behind next: among the unpinned chunks no announced task
  // needs, which are evicted first and in LRU order, the first without a host copy, while
  // those before it hold less than two tasks' blocks (what the stagings ahead may evict).
  // Null when the host space has no room for its block without evicting.
  Chunk* next_behind(const DeviceSpace& d) const {
    std::size_t ready = 0;  // blocks evictable without a copy, or being copied out
    for (Chunk* c : d.lru) {
      if (ready >= std::size_t(kEvictionLookahead) * d.task_blocks) return nullptr;
      if (c->pins > 0 || !c->next_uses.empty()) continue;
      if (c->host_copy || c->moving) {
        ready += c->block;
        continue;
      }
      const bool room =
          host.limit == kUnbounded ||
          (host.used + c->block <= host.limit &&
           (d.host_pool.has_cached(c->bytes) || host_held() + c->block <= host.limit));
      return room ? c : nullptr;
    }
    return nullptr;
  }

  // One step towards making `c` resident on its device: room on the device, a disk read
  // into the host (room there first), or the copy to the device.
  void bring_back_step(std::unique_lock<AdaptiveMutex>& lock, Chunk& c, const TaskChunks& task) {
    DeviceSpace& d = *devices[c.device];
    if (task.discards(&c)) {
      // The task writes all of it: device memory without its old contents, which are
      // stale from now on (as publish would find them).
      drop_host(c);
      drop_disk(c);
    }
    if (!c.host_copy && c.on_disk) {
      if (host.limit != kUnbounded && host.used + c.block > host.limit) {
        return free_host_step(lock, c.block, &task);
      }
      void* h = allocate_host(c);
      transit(
          lock, c, "reload", disk_track(), [&] { spill.read(c.id, h, c.bytes); },
          [&] {
            attach_host(c, h);
            host.copied_in += c.bytes;
          },
          [&] { free_host(c, h); });
      return;
    }
    if (d.usage.used + c.block > d.usage.limit) {
      if (d.leaving > 0) return moved.wait(lock);  // room comes with a write-back
      return free_device_step(lock, d, task);
    }
    if (d.device->unified() && c.host_copy) {
      move_block(c, /*to_host=*/false);
      return report("reload", c, c.device, 0);
    }
    void* p = allocate_device(c);
    if (!c.host_copy) {  // fresh memory: no data yet, and no host block for its eviction
      if (d.out_of_core) pin_ahead_for(d);
      return attach_device(c, p);
    }
    const auto* from = static_cast<const unsigned char*>(c.host_copy);
    const auto [lo, hi] = task.fresh_bytes(&c);  // not copied: the task overwrites these
    const std::size_t copied = c.bytes - (hi - lo);
    transit(
        lock, c, "reload", c.device,
        [&] {
          auto* to = static_cast<unsigned char*>(p);
          if (lo > 0) d.device->copy_from_host(to, from, lo);
          if (c.bytes > hi) d.device->copy_from_host(to + hi, from + hi, c.bytes - hi);
        },
        [&] {
          attach_device(c, p);
          d.usage.copied_in += copied;
        },
        [&] { free_device(c, p); }, copied);
  }

  // One step of staging a task whose chunks are pinned already: evictions for all of a
  // device's missing chunks first (the blocks being written back count as free), then the
  // bring-backs in the task's order. True when every chunk is resident and none is moving.
  // The mutex may be released inside.
  bool stage_step(std::unique_lock<AdaptiveMutex>& lock, const TaskChunks& task) {
    for (auto [c, write, discard] : task.chunks)
      if (auto& failed = devices[c->device]->write_error)
        std::rethrow_exception(std::exchange(failed, nullptr));
    for (auto [c, write, discard] : task.chunks) {
      if (c->moving) {  // another task stages it too: wait, then look again
        moved.wait(lock);
        return false;
      }
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
      std::size_t missing = 0;
      for (auto [c, write, discard] : task.chunks) {
        if (c->device == static_cast<int>(i) && !c->device_copy) missing += c->block;
      }
      DeviceSpace& d = *devices[i];
      if (missing > 0 && d.usage.used - d.leaving + missing > d.usage.limit) {
        free_device_step(lock, d, task);
        return false;
      }
    }
    // Chunks with contents to copy come before fresh ones: a copy in may then run while
    // a victim is written back, and a fresh block takes the room the write-back gives.
    for (bool copied : {true, false}) {
      for (auto [c, write, discard] : task.chunks) {
        if (!c->device_copy && has_contents(*c, task) == copied) {
          bring_back_step(lock, *c, task);
          return false;
        }
      }
    }
    return true;
  }

  // Whether bringing `c` back for `task` copies data (else it gets a fresh block).
  static bool has_contents(const Chunk& c, const TaskChunks& task) {
    return (c.host_copy || c.on_disk) && !task.discards(&c);
  }

  void touch(Chunk& c) {
    DeviceSpace& d = *devices[c.device];
    if (c.device_copy) d.lru.splice(d.lru.end(), d.lru, c.device_lru);
  }

  // data() no longer hands out the chunk's memory (staged_mutex held).
  void unpublish(ChunkId id) {
    if (auto it = staged.find(id); it != staged.end()) it->second.staged = false;
  }

  // Takes back the pins of a staging that failed.
  void unreserve(const TaskChunks& task, const std::vector<Chunk*>& reserved) {
    std::lock_guard staged_lock(staged_mutex);
    for (auto [c, write, discard] : task.chunks) {
      if (--c->pins == 0) {
        devices[c->device]->pinned -= c->block;
        unpublish(c->id);
      }
    }
    for (Chunk* c : reserved) devices[c->device]->reserved -= c->block;
    moved.notify_all();
  }

  // Phase 1 (mutex held): admission, then the task's chunks are pinned, which reserves
  // their space and keeps them from being evicted or destroyed. Phase 2: the copies and
  // file I/O, each without the mutex (stage_step). Phase 3: publish the staged chunks.
  // Bytes device `d` could free without evicting a chunk that an announced task needs.
  std::size_t room_without_needed(const DeviceSpace& d, const TaskChunks& task) const {
    const std::size_t used = d.usage.used - d.leaving;
    std::size_t room = d.usage.limit > used ? d.usage.limit - used : 0;
    for (const Chunk* c : d.lru)
      if (evictable(*c, task) && c->next_uses.empty()) room += c->block;
    return room;
  }

  bool try_stage(std::unique_lock<AdaptiveMutex>& lock, const std::vector<ChunkUse>& uses,
                 int queued_ahead) {
    TaskChunks task;
    std::vector<Chunk*> reserved;
    std::size_t n = devices.size();
    while (true) {
      task_chunks(uses, task);
      if (std::any_of(task.chunks.begin(), task.chunks.end(),
                      [](const auto& use) { return use.chunk->moving; })) {
        moved.wait(lock);
        continue;
      }
      std::vector<std::size_t> total(n), pinned_by_task(n), missing(n);
      for (auto [c, write, discard] : task.chunks) {
        total[c->device] += c->block;
        if (c->pins > 0) pinned_by_task[c->device] += c->block;
        if (!c->device_copy) missing[c->device] += c->block;
      }
      bool blocked_by_staging = false;
      for (std::size_t i = 0; i < n; ++i) {
        DeviceSpace& d = *devices[i];
        if (total[i] > d.usage.limit) {
          throw OutOfMemoryError(d.device->name(), total[i], d.usage.used, d.usage.limit,
                                 "one task needs all of these chunks on the device at once; "
                                 "raise GRIDSPAN_DEVICE_MEMORY or use smaller chunks (a finer "
                                 "data distribution) or smaller superblocks");
        }
        if (d.pinned + total[i] > d.usage.limit + pinned_by_task[i]) {
          // Pins of tasks still staging go away soon (staged or failed): wait for those.
          // Pins of staged tasks go only with an unstage, which the caller waits for.
          if (d.pinned + total[i] > d.usage.limit + pinned_by_task[i] + d.reserved) return false;
          blocked_by_staging = true;
        }
      }
      if (blocked_by_staging) {
        moved.wait(lock);
        continue;
      }
      for (std::size_t i = 0; i < n; ++i)
        if (total[i] > 0) devices[i]->task_blocks = total[i];
      // Staging far ahead would evict what the tasks before this one still need.
      if (queued_ahead >= kEvictionLookahead) {
        for (std::size_t i = 0; i < n; ++i) {
          const DeviceSpace& d = *devices[i];
          if (missing[i] > 0 && d.usage.used + missing[i] > d.usage.limit &&
              room_without_needed(d, task) < missing[i])
            return false;
        }
      }
      break;
    }
    for (auto [c, write, discard] : task.chunks) {
      if (c->pins++ == 0) {
        devices[c->device]->pinned += c->block;
        devices[c->device]->reserved += c->block;
        reserved.push_back(c);
      }
    }
    try {
      while (!stage_step(lock, task)) {
      }
    } catch (...) {
      unreserve(task, reserved);
      throw;
    }
    for (Chunk* c : reserved) devices[c->device]->reserved -= c->block;
    moved.notify_all();
    publish(task, uses);
    return true;
  }

  // The last step of a staging (mutex held, chunks resident and pinned): data() may now
  // hand out their memory, and so do `uses`; written chunks lose their stale host and disk
  // copies.
  void publish(const TaskChunks& task, const std::vector<ChunkUse>& uses) {
    {
      std::lock_guard staged_lock(staged_mutex);
      for (auto [c, write, discard] : task.chunks) {
        staged[c->id] = StagedChunk{c->device_copy, c->bytes, true};
        touch(*c);
        if (write) {
          drop_host(*c);
          drop_disk(*c);
        }
      }
    }
    for (const ChunkUse& use : uses)
      for (const TaskChunk& u : task.chunks)
        if (u.chunk->id == use.chunk) {
          use.data = u.chunk->device_copy;
          break;
        }
  }

  bool try_stage_resident(const std::vector<ChunkUse>& uses) {
    task_chunks(uses, scratch);
    return stage_resident(scratch, uses);
  }

  // try_stage_resident of the chunks `task` holds (those of `uses`).
  bool stage_resident(const TaskChunks& task, const std::vector<ChunkUse>& uses) {
    // Not while another staging on the same device is in progress: its admission counted
    // the unpinned resident chunks as room it may evict, and new pins would take that away.
    for (auto [c, write, discard] : task.chunks)
      if (c->moving || !c->device_copy || devices[c->device]->reserved > 0) return false;
    for (auto [c, write, discard] : task.chunks)
      if (c->pins++ == 0) devices[c->device]->pinned += c->block;
    publish(task, uses);
    return true;
  }

  // Whether staging `uses` needs no copy and no eviction: every chunk is resident, or new
  // (no copy anywhere yet) with room for it on its device.
  bool stages_in_place(const std::vector<ChunkUse>& uses) {
    TaskChunks& task = scratch;
    task_chunks(uses, task);
    std::vector<std::size_t>& missing = scratch_bytes;
    missing.assign(devices.size(), 0);
    for (auto [c, write, discard] : task.chunks) {
      if (c->moving) return false;
      if (c->device_copy) continue;
      if ((c->host_copy || c->on_disk) && !discard) return false;
      missing[c->device] += c->block;
    }
    for (std::size_t i = 0; i < devices.size(); ++i)
      if (missing[i] > 0 && devices[i]->usage.used + missing[i] > devices[i]->usage.limit)
        return false;
    return true;
  }

  void unstage(const std::vector<ChunkUse>& uses) {
    TaskChunks& task = scratch;
    task_chunks(uses, task);
    for (auto [c, write, discard] : task.chunks) {
      if (c->pins == 0) {
        throw Error(
            fmt::format("chunk {} is unstaged but not staged; unstage must match a "
                        "successful try_stage (a bug in gridspan's scheduler)",
                        c->id));
      }
    }
    // A staged chunk is resident, so it is never moving: its host copy is redundant and
    // nothing reads it, and pinned chunks are no eviction victims.
    std::lock_guard staged_lock(staged_mutex);
    for (auto [c, write, discard] : task.chunks) {
      if (--c->pins == 0) {
        devices[c->device]->pinned -= c->block;
        unpublish(c->id);
      }
      touch(*c);
      if (write) {
        drop_host(*c);
        drop_disk(*c);
      }
    }
    wake_write_behind();
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
    auto space = std::make_unique<DeviceSpace>(device, limits.pool);
    const std::size_t capacity = device->memory_capacity();
    if (capacity && limits.device_bytes > capacity)
      logging::warn_once(fmt::format(
          "the device memory limit (GRIDSPAN_DEVICE_MEMORY, {} bytes) is more than {} has ({} "
          "bytes): chunks spill only past the limit, so an allocation may fail first; give at "
          "most {} bytes",
          limits.device_bytes, device->name(), capacity, capacity));
    std::size_t limit = limits.device_bytes ? limits.device_bytes : capacity;
    space->usage.limit = limit ? limit : kUnbounded;
    impl_->devices.push_back(std::move(space));
  }
  impl_->host.limit = limits.host_bytes ? limits.host_bytes : kUnbounded;
  impl_->pin_ahead = limits.pin_ahead && limits.pool;  // pinned ahead = cached
  impl_->write_behind = limits.write_behind;
}

void MemoryManager::observe(Observer* observer) {
  std::lock_guard lock(impl_->mutex);
  impl_->observer = observer;
}

MemoryManager::~MemoryManager() {
  impl_->stop_writing();
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
  if (auto early = impl_->early_uses.find(chunk); early != impl_->early_uses.end()) {
    c->next_uses = std::move(early->second);
    impl_->early_uses.erase(early);
  }
  impl_->created(*c);
  impl_->chunks.emplace(chunk, std::move(c));
}

void MemoryManager::destroy(ChunkId chunk) {
  std::unique_lock lock(impl_->mutex);
  while (impl_->find(chunk).moving) impl_->moved.wait(lock);
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
  impl_->devices[c.device]->created -= c.block;
  impl_->chunks.erase(chunk);
  std::lock_guard staged_lock(impl_->staged_mutex);
  impl_->staged.erase(chunk);
}

void MemoryManager::announce(uint64_t task, const std::vector<ChunkUse>& uses) {
  if (!impl_->tracking.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(impl_->mutex);
  impl_->announce(task, uses);
}

void MemoryManager::announce(const std::vector<Announced>& tasks) {
  if (!tracking()) return;
  std::lock_guard lock(impl_->mutex);
  for (const Announced& t : tasks) impl_->announce(t.task, *t.uses);
}

bool MemoryManager::tracking() const {
  return impl_->tracking.load(std::memory_order_relaxed);
}

void MemoryManager::retire(uint64_t task, const std::vector<ChunkUse>& uses) {
  if (!impl_->tracking.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(impl_->mutex);
  impl_->retire(task, uses);
}

void MemoryManager::Impl::announce(uint64_t task, const std::vector<ChunkUse>& uses) {
  for (const ChunkUse& use : uses) {
    auto it = chunks.find(use.chunk);
    (it != chunks.end() ? it->second->next_uses : early_uses[use.chunk]).add(task);
  }
}

void MemoryManager::Impl::retire(uint64_t task, const std::vector<ChunkUse>& uses) {
  for (const ChunkUse& use : uses) {
    if (auto it = chunks.find(use.chunk); it != chunks.end()) {
      it->second->next_uses.remove(task);
    } else if (auto early = early_uses.find(use.chunk); early != early_uses.end()) {
      early->second.remove(task);
      if (early->second.empty()) early_uses.erase(early);
    }
  }
}

bool MemoryManager::exists(ChunkId chunk) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->chunks.count(chunk) > 0;
}

bool MemoryManager::try_stage(const std::vector<ChunkUse>& uses, int queued_ahead) {
  std::unique_lock lock(impl_->mutex);
  return impl_->try_stage(lock, uses, queued_ahead);
}

bool MemoryManager::stages_in_place(const std::vector<ChunkUse>& uses) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stages_in_place(uses);
}

bool MemoryManager::try_stage_resident(const std::vector<ChunkUse>& uses) {
  std::lock_guard lock(impl_->mutex);
  return impl_->try_stage_resident(uses);
}

bool MemoryManager::size_and_stage_resident(const std::vector<ChunkUse>& uses, std::size_t budget,
                                            std::size_t& bytes) {
  std::lock_guard lock(impl_->mutex);
  bytes = 0;
  impl_->task_chunks(uses, impl_->scratch, &bytes);  // one lookup per use for both
  return bytes <= budget && impl_->stage_resident(impl_->scratch, uses);
}

void* MemoryManager::data(ChunkId chunk) const {
  std::lock_guard lock(impl_->staged_mutex);
  auto it = impl_->staged.find(chunk);
  if (it == impl_->staged.end() || !it->second.staged) {
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

void MemoryManager::unstage_and_retire(uint64_t task, const std::vector<ChunkUse>& uses) {
  std::lock_guard lock(impl_->mutex);
  if (impl_->tracking.load(std::memory_order_relaxed)) impl_->retire(task, uses);
  impl_->unstage(uses);
}

void MemoryManager::unstage_and_retire(const std::vector<Announced>& tasks) {
  std::lock_guard lock(impl_->mutex);
  const bool tracking = impl_->tracking.load(std::memory_order_relaxed);
  for (const Announced& t : tasks) {
    if (tracking) impl_->retire(t.task, *t.uses);
    impl_->unstage(*t.uses);
  }
}

std::size_t MemoryManager::pinned_bytes(int device) const {
  std::lock_guard lock(impl_->mutex);
  if (device < 0 || static_cast<std::size_t>(device) >= impl_->devices.size()) {
    throw Error(fmt::format("pinned_bytes of device {}, but this worker has {} device(s)", device,
                            impl_->devices.size()));
  }
  return impl_->devices[device]->pinned;
}

namespace {
MemoryStats space_stats(std::string name, const Usage& u, std::size_t held, std::size_t cached) {
  MemoryStats s;
  s.name = std::move(name);
  s.used_bytes = u.used;
  s.total_bytes = held;
  s.limit_bytes = u.reported_limit();
  s.spilled_bytes = u.spilled;
  s.peak_bytes = u.peak;
  s.cached_bytes = cached;
  s.copied_out_bytes = u.copied_out;
  s.copied_in_bytes = u.copied_in;
  return s;
}
}  // namespace

std::vector<MemoryStats> MemoryManager::stats() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<MemoryStats> out;
  std::size_t host_cached = 0;
  for (const auto& d : impl_->devices) {
    out.push_back(
        space_stats(d->device->name(), d->usage, d->pool.held_bytes(), d->pool.cached_bytes()));
    host_cached += d->host_pool.cached_bytes();
  }
  out.push_back(space_stats("host", impl_->host, impl_->host_held(), host_cached));
  out.push_back(space_stats("disk", impl_->disk, impl_->disk.used, 0));
  return out;
}

std::size_t MemoryManager::free_cached_blocks() {
  std::lock_guard lock(impl_->mutex);
  std::size_t released = impl_->release_all_host_cache();
  for (auto& d : impl_->devices) released += d->pool.release_cached(kUnbounded);
  return released;
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
