// One launch planned as passes (Planner::Launch): every superblock's access regions; the
// arrays the launch changes (their kept read-only copies go); per superblock, each array
// argument resolved to a chunk used in place, a shared read-only temporary, a temporary
// assembled from the chunks that hold its region, or a reduction partial, then the execute
// and the copies that scatter its writes back and keep halos and replicas coherent; the
// shared temporaries kept for later launches; atomic partials; and the reductions (per
// device, across devices or ranks, then the overwrite of the array).
#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "plan/planner.hpp"

namespace gridspan::plan {

using annotation::Access;
using annotation::Mode;
using annotation::ReduceOp;

namespace {

constexpr std::size_t kReduceFanIn = 16;  // partials one Reduce task combines at most

// Chunk lookup by one axis: chunks sorted by their low bound on the axis where the chunks'
// low bounds differ most, so a region's candidates are a short range.
struct ChunkIndex {
  int axis = 0;
  int64_t max_extent = 0;
  std::vector<std::pair<int64_t, int>> by_lo;  // (lo on axis, chunk index)

  explicit ChunkIndex(const ArrayMeta& a) {
    if (a.chunks.size() <= 8) return;  // few chunks: a linear scan is cheaper
    int rank = a.shape.rank();
    std::size_t best = 0;
    for (int ax = 0; ax < rank; ++ax) {
      std::vector<int64_t> los;
      for (auto& c : a.chunks) los.push_back(c.region.lo[ax]);
      std::sort(los.begin(), los.end());
      std::size_t distinct = std::unique(los.begin(), los.end()) - los.begin();
      if (distinct > best) best = distinct, axis = ax;
    }
    for (int k = 0; k < static_cast<int>(a.chunks.size()); ++k) {
      by_lo.emplace_back(a.chunks[k].region.lo[axis], k);
      max_extent = std::max(max_extent, a.chunks[k].region.extent(axis));
    }
    std::sort(by_lo.begin(), by_lo.end());
  }

  template <class F>
  void for_overlapping(const ArrayMeta& a, const Rect& r, F&& f) const {
    if (a.shape.rank() == 0 || by_lo.empty()) {
      for (int k = 0; k < static_cast<int>(a.chunks.size()); ++k)
        if (a.shape.rank() == 0 || a.chunks[k].region.overlaps(r)) f(k);
      return;
    }
    int64_t from = r.lo[axis] - max_extent + 1;
    auto it = std::lower_bound(by_lo.begin(), by_lo.end(),
                               std::make_pair(from, std::numeric_limits<int>::min()));
    for (; it != by_lo.end() && it->first < r.hi[axis]; ++it)
      if (a.chunks[it->second].region.overlaps(r)) f(it->second);
  }
};

// A read-only temporary shared within a launch: its array, device and region.
struct SharedKey {
  const ArrayMeta* array;
  int device;
  Rect region;
  bool operator==(const SharedKey& o) const {
    return array == o.array && device == o.device && region == o.region;
  }
};

// By the array's id, not its address: the order the shared temporaries are kept and let go
// in (their tasks' order in the plan) is then the same from run to run.
struct SharedKeyHash {
  std::size_t operator()(const SharedKey& k) const {
    std::size_t h = std::size_t(k.array->id) ^ (std::size_t(k.device) << 48);
    for (int ax = 0; ax < 3; ++ax) {
      h = h * 1000003 + std::size_t(k.region.lo[ax]);
      h = h * 1000003 + std::size_t(k.region.hi[ax]);
    }
    return h;
  }
};

struct SharedRead {
  ChunkRef ref;
  std::vector<TaskId> ready;    // its creation and assembly: what a reader waits for
  std::vector<TaskId> readers;  // the executes that read it
};

// A reduction partial: its chunk, device, and the execute or Reduce that writes it (0: the
// atomic users of a device partial).
struct Partial {
  ChunkRef chunk;
  int device;
  TaskId producer;
};

// One array's reduction in this launch.
struct ReduceState {
  const ArrayMeta* array = nullptr;
  Mode mode = Mode::reduce;
  ReduceOp op = ReduceOp::add;
  DType dtype = DType::f32;  // the partials' (partial_dtype): float32 for a 16-bit sum
  std::vector<std::vector<Partial>> per_device;             // reduce: superblock partials
  std::vector<std::vector<TaskId>> device_users;            // atomic: the executes per device
  std::vector<std::vector<std::size_t>> device_user_tasks;  // ... as indices in the tasks
  std::vector<Rect> regions;                                // all superblocks' regions
};

}  // namespace

class Planner::Launch {
 public:
  /// `log`: where the record operations go, in order (for a skeleton), or null.
  Launch(Planner& planner, const LaunchSpec& spec, std::vector<RecordOp>* log)
      : pl_(planner),
        spec_(spec),
        np_(static_cast<int>(spec.params->size())),
        b_(tasks_, pl_.last_task_),
        log_(log) {
    tasks_.reserve(spec.superblocks.size() * 2);
  }

  /// Whether the plan depends only on the launch and the dependency records: it took no
  /// kept read-only copy and kept none (a later launch would plan differently).
  bool memoizable() const { return !cache_used_; }

  Plan plan() {
    bind_regions();
    note_changed_arrays();
    for (std::size_t s = 0; s < spec_.superblocks.size(); ++s) plan_superblock(s);
    keep_shared_reads();
    add_atomic_partials();
    for (int p = 0; p < np_; ++p)
      if (reductions_[p].array) reduce(reductions_[p]);
    return pl_.finish(std::move(tasks_));
  }

 private:
  // --- the passes -----------------------------------------------------------------------

  // Every superblock's access regions (the scratch is the planner's, reused across launches).
  void bind_regions() {
    std::vector<Dim> shapes(np_);
    for (int p = 0; p < np_; ++p)
      if (spec_.arrays[p]) shapes[p] = spec_.arrays[p]->shape;
    annotation::BoundAnnotation bound = spec_.annotation->bind(
        annotation::LaunchGeometry{spec_.threads, spec_.block}, spec_.int_scalars, shapes);
    grid_ = grid_of(spec_.threads, spec_.block);
    auto& accesses = pl_.accesses_;
    if (accesses.size() < spec_.superblocks.size()) accesses.resize(spec_.superblocks.size());
    for (std::size_t s = 0; s < spec_.superblocks.size(); ++s)
      bound.regions(spec_.superblocks[s].blocks, accesses[s]);
    reductions_.resize(np_);
    direct_.resize(np_);
    temp_.resize(np_);
  }

  // Read-only temporaries are shared by the superblocks of a device that read the same
  // region of an array this launch does not change (GEMM's B: assembled once per device,
  // not once per superblock); kept copies of what it changes are stale from now on.
  void note_changed_arrays() {
    for (std::size_t s = 0; s < spec_.superblocks.size(); ++s)
      for (const Access& acc : pl_.accesses_[s])
        if (acc.mode != Mode::read && !acc.region.empty())
          changed_.emplace(spec_.arrays[acc.param]->id, spec_.arrays[acc.param]);
    for (const auto& [id, a] : changed_) pl_.read_cache_.drop(id, b_);
  }

  // One superblock: its arguments resolved, its execute, then the copies after its writes.
  void plan_superblock(std::size_t s) {
    const Superblock& sb = spec_.superblocks[s];
    Task exec;
    exec.id = b_.next_id();
    exec.device = sb.device;
    Execute ex;
    ex.executable = spec_.executable.get();
    ex.blocks = sb.blocks;
    ex.block = spec_.block;
    ex.grid = grid_;
    ex.arrays.resize(np_);
    ex.scalars = spec_.scalars;
    ex.scalar_offsets = spec_.scalar_offsets;  // shared, not copied
    ex.clock = spec_.clock;
    std::vector<int> atomic_params;
    for (const Access& acc : pl_.accesses_[s])
      resolve(acc, exec, ex.arrays[acc.param], atomic_params);
    depend_in_place(s, exec);
    const TaskId exec_id = exec.id;
    const int dev = sb.device;
    exec.payload = std::move(ex);
    tasks_.push_back(std::move(exec));
    for (int p : atomic_params) reductions_[p].device_user_tasks[dev].push_back(tasks_.size() - 1);
    scatter_writes(s, exec_id, dev);
    // Temporaries that were only read go once the execute is done.
    for (const Access& acc : pl_.accesses_[s]) {
      int p = acc.param;
      if (temp_[p].second && acc.mode == Mode::read)
        b_.add(dev, DeleteChunk{temp_[p].first.id}, {exec_id});
    }
  }

  // One array argument of a superblock: a reduction partial, a chunk on its device that
  // holds the whole region (used in place), or a temporary on its device.
  void resolve(const Access& acc, Task& exec, ExecArg& arg, std::vector<int>& atomic_params) {
    const int p = acc.param;
    arg.region = acc.region;
    arg.shape = spec_.arrays[p]->shape;
    arg.mode = acc.mode;
    arg.op = acc.op;
    arg.write = acc.mode != Mode::read;
    direct_[p] = -1;
    temp_[p] = {};
    if (acc.region.empty()) return;
    if (acc.mode == Mode::reduce || acc.mode == Mode::atomic)
      return add_partial(acc, exec, arg, atomic_params);
    const ArrayMeta* a = spec_.arrays[p];
    const ChunkIndex& index = index_of(a);
    int local = -1, remote = -1;
    index.for_overlapping(*a, acc.region, [&](int k) {
      const ChunkMeta& c = a->chunks[k];
      if (!c.region.contains(acc.region)) return;
      if (c.device == exec.device && local < 0) local = k;
      if (remote < 0) remote = k;
    });
    if (local >= 0) {
      const ChunkMeta& c = a->chunks[local];
      arg.chunk = ChunkRef{c.id, c.region};
      direct_[p] = local;
      return;
    }
    const bool shareable = acc.mode == Mode::read && !changed_.count({a->id, a});
    if (shareable && use_shared(acc, exec, arg)) return;
    assemble(acc, exec, arg, remote, shareable);
  }

  // reduce: an identity-filled partial of its own; atomic: the device's (made in
  // add_atomic_partials once every user's region is known).
  void add_partial(const Access& acc, Task& exec, ExecArg& arg, std::vector<int>& atomic_params) {
    const int p = acc.param, dev = exec.device;
    const ArrayMeta* a = spec_.arrays[p];
    ReduceState& rs = reductions_[p];
    rs.array = a;
    rs.mode = acc.mode;
    rs.op = acc.op;
    rs.dtype = partial_dtype(acc.op, a->dtype);
    if (rs.per_device.empty()) {
      rs.per_device.resize(pl_.devices_);
      rs.device_users.resize(pl_.devices_);
      rs.device_user_tasks.resize(pl_.devices_);
    }
    rs.regions.push_back(acc.region);
    if (acc.mode == Mode::reduce) {
      auto [ref, created] = new_identity_partial(rs, acc.region, dev);
      exec.deps.push_back(created);
      arg.chunk = ref;
      rs.per_device[dev].push_back(Partial{ref, dev, exec.id});
    } else {
      arg.chunk = {};  // filled in once the device partial's box is known
      rs.device_users[dev].push_back(exec.id);
      atomic_params.push_back(p);
    }
  }

  // A read-only temporary of this region another superblock of the device (or an earlier
  // launch: the read cache) assembled; false when there is none.
  bool use_shared(const Access& acc, Task& exec, ExecArg& arg) {
    const ArrayMeta* a = spec_.arrays[acc.param];
    const SharedKey key{a, exec.device, acc.region};
    auto it = shared_.find(key);
    if (it == shared_.end()) {
      auto kept = pl_.read_cache_.take(a->id, exec.device, acc.region);
      if (!kept) return false;
      cache_used_ = true;
      it = shared_.emplace(key, SharedRead{kept->ref, kept->ready, kept->readers}).first;
    }
    arg.chunk = it->second.ref;
    exec.deps.insert(exec.deps.end(), it->second.ready.begin(), it->second.ready.end());
    it->second.readers.push_back(exec.id);
    return true;
  }

  // A temporary on the superblock's device, assembled by copies from the chunks that hold
  // its region: one on another device holding it all, else disjoint pieces, local chunks
  // first. Written temporaries are assembled too, so elements the kernel leaves alone keep
  // their values when scattered back (as they would in a chunk used in place); those it
  // overwrites are not.
  void assemble(const Access& acc, Task& exec, ExecArg& arg, int remote, bool shareable) {
    const int p = acc.param, dev = exec.device;
    const ArrayMeta* a = spec_.arrays[p];
    const std::size_t ready_from = exec.deps.size();
    auto [ref, created] = new_temp(acc.region, dev, a->elem_size);
    arg.chunk = ref;
    if (!shareable) temp_[p] = {ref, created};
    exec.deps.push_back(created);
    if (acc.mode == Mode::overwrite) {
      // Nothing to bring, and nothing to wait for: the kernel writes the temporary only,
      // and the scatter after it waits for the chunks' earlier users.
    } else if (remote >= 0) {
      exec.deps.push_back(copy_in(a->chunks[remote], ref, created, acc.region, dev, a->elem_size));
    } else {
      const ChunkIndex& index = index_of(a);
      std::vector<Rect> covered;
      std::vector<int> local_first, others;
      index.for_overlapping(*a, acc.region, [&](int k) {
        (a->chunks[k].device == dev ? local_first : others).push_back(k);
      });
      local_first.insert(local_first.end(), others.begin(), others.end());
      for (int k : local_first) {
        const ChunkMeta& c = a->chunks[k];
        Rect part = c.region.intersect(acc.region);
        for (const Rect& piece : subtract_all(part, covered))
          exec.deps.push_back(copy_in(c, ref, created, piece, dev, a->elem_size));
        covered.push_back(part);
      }
    }
    if (shareable)
      shared_.emplace(
          SharedKey{a, dev, acc.region},
          SharedRead{
              ref, {exec.deps.begin() + std::ptrdiff_t(ready_from), exec.deps.end()}, {exec.id}});
  }

  // The execute waits for the tasks before it on the chunks it uses in place, and is
  // recorded on them.
  void depend_in_place(std::size_t s, Task& exec) {
    for (const Access& acc : pl_.accesses_[s]) {
      const int p = acc.param;
      if (direct_[p] < 0) continue;
      const ChunkMeta& c = spec_.arrays[p]->chunks[direct_[p]];
      deps_on(exec.id, c.id, acc.region, acc.mode != Mode::read, exec.deps);
    }
    unique(exec.deps);
    for (const Access& acc : pl_.accesses_[s]) {
      const int p = acc.param;
      if (direct_[p] < 0) continue;
      const ChunkMeta& c = spec_.arrays[p]->chunks[direct_[p]];
      record(exec.id, c.id, acc.region, acc.mode != Mode::read);
    }
  }

  // After a write: temporaries are scattered back, and every other chunk holding part of the
  // written region (halos, replicas) gets a copy of that part.
  void scatter_writes(std::size_t s, TaskId exec_id, int dev) {
    for (const Access& acc : pl_.accesses_[s]) {
      const int p = acc.param;
      if (acc.region.empty() || acc.mode == Mode::read || acc.mode == Mode::reduce ||
          acc.mode == Mode::atomic)
        continue;
      const ArrayMeta* a = spec_.arrays[p];
      const ChunkIndex& index = index_of(a);
      if (direct_[p] >= 0) {
        const ChunkMeta& used = a->chunks[direct_[p]];
        ChunkRef src{used.id, used.region};
        index.for_overlapping(*a, acc.region, [&](int k) {
          if (k == direct_[p]) return;
          const ChunkMeta& c = a->chunks[k];
          copy_out(src, {exec_id}, c, c.region.intersect(acc.region), a->elem_size, true);
        });
      } else {
        std::vector<TaskId> users{exec_id};
        index.for_overlapping(*a, acc.region, [&](int k) {
          const ChunkMeta& c = a->chunks[k];
          users.push_back(copy_out(temp_[p].first, {exec_id}, c, c.region.intersect(acc.region),
                                   a->elem_size, false));
        });
        b_.add(dev, DeleteChunk{temp_[p].first.id}, users);
      }
    }
  }

  // Shared temporaries are kept for later launches while there is room on their device
  // (the least recently used go first), else deleted after their last reader.
  void keep_shared_reads() {
    for (auto& [key, read] : shared_) {
      const int d = key.device;
      const std::size_t bytes =
          static_cast<std::size_t>(key.region.volume()) * key.array->elem_size;
      std::vector<TaskId> readers;  // the finished ones need no waiting for
      for (TaskId r : read.readers)
        if (read.readers.size() <= 16 || !pl_.is_done_(r)) readers.push_back(r);
      ReadCache::Copy copy{key.array->id,      d,    key.region, read.ref, std::move(read.ready),
                           std::move(readers), bytes};
      if (pl_.read_cache_.keep(std::move(copy), b_))
        cache_used_ = true;
      else
        b_.add(d, DeleteChunk{read.ref.id}, std::move(read.readers));
    }
  }

  // Atomic partials: one per device, over the union of its superblocks' regions, shared by
  // that device's superblocks.
  void add_atomic_partials() {
    for (int p = 0; p < np_; ++p) {
      ReduceState& rs = reductions_[p];
      if (!rs.array || rs.mode != Mode::atomic) continue;
      for (int d = 0; d < pl_.devices_; ++d) {
        if (rs.device_users[d].empty()) continue;
        Rect box;
        bool first = true;
        for (std::size_t at : rs.device_user_tasks[d]) {
          const Rect& r = std::get<Execute>(tasks_[at].payload).arrays[p].region;
          box = first ? r : box.bounding_union(r);
          first = false;
        }
        auto [ref, filled] = new_identity_partial(rs, box, d);
        for (std::size_t at : rs.device_user_tasks[d]) {
          std::get<Execute>(tasks_[at].payload).arrays[p].chunk = ref;
          tasks_[at].deps.push_back(filled);
        }
        rs.per_device[d].push_back(Partial{ref, d, 0});
      }
    }
  }

  // --- reductions -----------------------------------------------------------------------

  // One array's partials: per device, then across devices (or ranks), then the result
  // overwrites the union of the reduce regions; every partial goes after its readers.
  void reduce(ReduceState& rs) {
    reduced_ = &rs;
    to_delete_.clear();
    users_.clear();
    device_level_.clear();
    for (int d = 0; d < pl_.devices_; ++d) {
      auto& parts = rs.per_device[d];
      if (parts.empty()) continue;
      if (parts.size() == 1) {
        device_level_.push_back(parts[0]);
        to_delete_.emplace_back(parts[0].chunk.id, d);
        continue;
      }
      for (auto& part : parts) to_delete_.emplace_back(part.chunk.id, d);
      device_level_.push_back(reduce_tree(parts, d));
    }
    if (device_level_.empty()) return;
    Partial final_part = device_level_[0];
    if (pl_.rank_of_device_.empty()) {
      if (device_level_.size() > 1)
        final_part = reduce_tree(device_level_, device_level_[0].device);
    } else {
      final_part = reduce_across_ranks();
    }
    overwrite_reduced(narrow(final_part));
    delete_partials();
  }

  // The tasks that finish writing a partial: its execute or Reduce, or every atomic user.
  std::vector<TaskId> producers_of(const Partial& part, int device) const {
    if (part.producer) return {part.producer};
    return reduced_->device_users[device];
  }

  // One Reduce task combining `parts` (in order) into a new partial on `device`.
  Partial reduce_into(const std::vector<Partial>& parts, int device) {
    Rect box = parts[0].chunk.rect;
    for (auto& part : parts) box = box.bounding_union(part.chunk.rect);
    auto [ref, created] = new_temp(box, device, partial_size());
    const TaskId id = b_.next_id();
    std::vector<TaskId> deps{created};
    Reduce payload{ref, {}, reduced_->op, reduced_->dtype};
    for (auto& part : parts) {
      auto more = producers_of(part, part.device);
      deps.insert(deps.end(), more.begin(), more.end());
      payload.srcs.push_back(part.chunk);
      users_[part.chunk.id].push_back(id);
    }
    to_delete_.emplace_back(ref.id, device);
    b_.add(device, std::move(payload), std::move(deps), id);
    return Partial{ref, device, id};
  }

  // A tree of Reduce tasks of at most kReduceFanIn inputs each, in a fixed order, so no
  // task has to stage more than that many partials at once (however many superblocks).
  Partial reduce_tree(std::vector<Partial> parts, int device) {
    while (parts.size() > kReduceFanIn) {
      std::vector<Partial> next;
      for (std::size_t i = 0; i < parts.size(); i += kReduceFanIn) {
        std::vector<Partial> group(parts.begin() + i,
                                   parts.begin() + std::min(parts.size(), i + kReduceFanIn));
        next.push_back(group.size() == 1 ? group[0] : reduce_into(group, device));
      }
      parts.swap(next);
    }
    return reduce_into(parts, device);
  }

  // Each rank's partials on that rank (peer reads between its devices), then a tree across
  // ranks: the partial of the right-hand rank of each pair is copied over (a transfer once
  // split) and reduced into the left-hand one's.
  Partial reduce_across_ranks() {
    const std::size_t elem_size = partial_size();
    const auto& rank_of = pl_.rank_of_device_;
    std::vector<std::vector<Partial>> by_rank;
    for (const Partial& part : device_level_) {
      const int r = rank_of[part.device];
      if (by_rank.empty() || rank_of[by_rank.back()[0].device] != r) by_rank.emplace_back();
      by_rank.back().push_back(part);
    }
    std::vector<Partial> level;
    for (auto& group : by_rank)
      level.push_back(group.size() == 1 ? group[0] : reduce_tree(group, group[0].device));
    while (level.size() > 1) {
      std::vector<Partial> next;
      for (std::size_t i = 0; i < level.size(); i += 2) {
        if (i + 1 == level.size()) {
          next.push_back(level[i]);
          continue;
        }
        const Partial& left = level[i];
        const Partial& right = level[i + 1];
        auto [ref, created] = new_temp(right.chunk.rect, left.device, elem_size);
        std::vector<TaskId> deps = producers_of(right, right.device);
        deps.push_back(created);
        const TaskId moved = b_.add(
            left.device, Copy{right.chunk, ref, right.chunk.rect, elem_size}, std::move(deps));
        users_[right.chunk.id].push_back(moved);
        to_delete_.emplace_back(ref.id, left.device);
        next.push_back(reduce_into({left, Partial{ref, left.device, moved}}, left.device));
      }
      level.swap(next);
    }
    return level[0];
  }

  // A float32 partial of a 16-bit array rounded into a temporary of the array's dtype, on
  // its device (so that what crosses devices and ranks after it is the array's elements);
  // any other partial as it is.
  Partial narrow(const Partial& part) {
    const ArrayMeta* a = reduced_->array;
    if (reduced_->dtype == a->dtype) return part;
    auto [ref, created] = new_temp(part.chunk.rect, part.device, a->elem_size);
    std::vector<TaskId> deps = producers_of(part, part.device);
    deps.push_back(created);
    const TaskId id =
        b_.add(part.device, Narrow{part.chunk, ref, part.chunk.rect, a->dtype}, std::move(deps));
    users_[part.chunk.id].push_back(id);
    to_delete_.emplace_back(ref.id, part.device);
    return Partial{ref, part.device, id};
  }

  // The elements reduced, the union of the superblocks' regions as disjoint boxes, are
  // overwritten in every chunk that holds part of them.
  void overwrite_reduced(const Partial& final_part) {
    const ReduceState& rs = *reduced_;
    const ArrayMeta* a = rs.array;
    Rect box = rs.regions[0];
    for (auto& r : rs.regions) box = box.bounding_union(r);
    std::vector<Rect> pieces;
    if (subtract_all(box, rs.regions).empty()) {
      pieces.push_back(box);
    } else {
      std::vector<Rect> seen;
      for (auto& r : rs.regions) {
        for (auto& piece : subtract_all(r, seen)) pieces.push_back(piece);
        seen.push_back(r);
      }
    }
    std::vector<TaskId> final_deps = producers_of(final_part, final_part.device);
    const ChunkIndex& index = index_of(a);
    for (const Rect& piece : pieces)
      index.for_overlapping(*a, piece, [&](int k) {
        const ChunkMeta& c = a->chunks[k];
        users_[final_part.chunk.id].push_back(copy_out(
            final_part.chunk, final_deps, c, c.region.intersect(piece), a->elem_size, false));
      });
  }

  // Every partial goes after whatever reads or writes it.
  void delete_partials() {
    const ReduceState& rs = *reduced_;
    for (auto& [chunk, device] : to_delete_) {
      std::vector<TaskId> deps = users_[chunk];
      for (auto& part : device_level_)
        if (part.chunk.id == chunk) {
          auto more = producers_of(part, device);
          deps.insert(deps.end(), more.begin(), more.end());
        }
      for (auto& parts : rs.per_device)
        for (auto& part : parts)
          if (part.chunk.id == chunk && part.producer) deps.push_back(part.producer);
      if (rs.mode == Mode::atomic) {
        auto more = rs.device_users[device];
        deps.insert(deps.end(), more.begin(), more.end());
      }
      b_.add(device, DeleteChunk{chunk}, std::move(deps));
    }
  }

  // --- tasks the passes share -----------------------------------------------------------

  std::size_t partial_size() const { return dtype_size(reduced_->dtype); }

  // A reduction partial over `rect` on `device`, filled with the identity of the op: its
  // temporary and the fill.
  std::pair<ChunkRef, TaskId> new_identity_partial(const ReduceState& rs, const Rect& rect,
                                                   int device) {
    const std::size_t elem_size = dtype_size(rs.dtype);
    auto [ref, created] = new_temp(rect, device, elem_size);
    const TaskId filled =
        b_.add(device, Fill{ref, rect, elem_size, reduce_identity(rs.op, rs.dtype)}, {created});
    return {ref, filled};
  }

  std::pair<ChunkRef, TaskId> new_temp(const Rect& rect, int device, std::size_t elem_size) {
    ChunkRef ref{pl_.next_chunk(), rect};
    const TaskId id = b_.next_id();
    b_.add(device, CreateChunk{ref.id, static_cast<std::size_t>(rect.volume()) * elem_size}, {},
           id);
    return {ref, id};
  }

  // A copy of `region` from an array chunk into a temporary (tracked on the source side).
  TaskId copy_in(const ChunkMeta& src, const ChunkRef& dst, TaskId dst_created, const Rect& region,
                 int device, std::size_t elem_size) {
    const TaskId id = b_.next_id();
    std::vector<TaskId> deps;
    deps_on(id, src.id, region, false, deps);
    deps.push_back(dst_created);
    record(id, src.id, region, false);
    return b_.add(device, Copy{ChunkRef{src.id, src.region}, dst, region, elem_size},
                  std::move(deps), id);
  }

  // A copy of `region` from a temporary or chunk into an array chunk (tracked on the target).
  TaskId copy_out(const ChunkRef& src, std::vector<TaskId> deps, const ChunkMeta& dst,
                  const Rect& region, std::size_t elem_size, bool src_tracked) {
    const TaskId id = b_.next_id();
    if (src_tracked) deps_on(id, src.id, region, false, deps);
    deps_on(id, dst.id, region, true, deps);
    if (src_tracked) record(id, src.id, region, false);
    record(id, dst.id, region, true);
    return b_.add(dst.device, Copy{src, ChunkRef{dst.id, dst.region}, region, elem_size},
                  std::move(deps), id);
  }

  // The dependency records, through here so that a skeleton learns what was asked.
  void deps_on(TaskId task, ChunkId chunk, const Rect& region, bool write,
               std::vector<TaskId>& deps) {
    if (log_)
      log_->push_back({write ? RecordOp::write_deps : RecordOp::read_deps, chunk, region, task});
    if (write)
      pl_.records_.write_deps(chunk, region, deps);
    else
      pl_.records_.read_deps(chunk, region, deps);
  }
  void record(TaskId task, ChunkId chunk, const Rect& region, bool write) {
    if (log_)
      log_->push_back(
          {write ? RecordOp::record_write : RecordOp::record_read, chunk, region, task});
    pl_.records_.record(chunk, region, task, write);
  }

  const ChunkIndex& index_of(const ArrayMeta* a) {
    if (a == last_array_) return *last_index_;
    auto it = index_.find(a);
    if (it == index_.end()) it = index_.emplace(a, ChunkIndex(*a)).first;
    last_array_ = a;
    last_index_ = &it->second;
    return it->second;
  }

  Planner& pl_;
  const LaunchSpec& spec_;
  const int np_;
  Dim grid_;
  std::vector<Task> tasks_;
  TaskBuilder b_;
  std::unordered_map<const ArrayMeta*, ChunkIndex> index_;
  const ArrayMeta* last_array_ = nullptr;
  const ChunkIndex* last_index_ = nullptr;
  // By id, so that the kept copies of changed arrays go in the same order in every run.
  std::set<std::pair<uint64_t, const ArrayMeta*>> changed_;
  std::unordered_map<SharedKey, SharedRead, SharedKeyHash> shared_;
  std::vector<int> direct_;                        // per parameter: the chunk used in place
  std::vector<std::pair<ChunkRef, TaskId>> temp_;  // per parameter: its own temporary
  std::vector<ReduceState> reductions_;            // per parameter
  // The reduction in progress (reduce()).
  const ReduceState* reduced_ = nullptr;
  std::vector<Partial> device_level_;
  std::vector<std::pair<ChunkId, int>> to_delete_;
  std::unordered_map<ChunkId, std::vector<TaskId>> users_;  // who reads each partial
  std::vector<RecordOp>* log_;
  bool cache_used_ = false;  // a kept read-only copy was taken or kept
};

// A repeated launch is instantiated from its skeleton (memo.hpp). Not while read-only copies
// of its arrays are kept: it may use them, and plan differently from one time to the next.
Plan Planner::launch(const LaunchSpec& spec) {
  const bool cached = std::any_of(spec.arrays.begin(), spec.arrays.end(), [&](const ArrayMeta* a) {
    return a && read_cache_.holds(a->id);
  });
  if (!memoize_ || cached) return Launch(*this, spec, nullptr).plan();
  if (const Skeleton* s = memo_.find(spec))
    return LaunchMemo::instantiate(*s, spec, records_, last_task_, last_chunk_,
                                   std::move(spare_tasks_));
  const TaskId first = last_task_ + 1;
  const ChunkId chunk_base = last_chunk_;
  std::vector<RecordOp> ops;
  Launch launch(*this, spec, &ops);
  Plan plan = launch.plan();
  if (launch.memoizable() && last_task_ + 1 - first == plan.tasks.size())
    memo_.keep(spec, plan, std::move(ops), first, chunk_base, last_chunk_);
  return plan;
}

}  // namespace gridspan::plan
