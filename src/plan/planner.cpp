// The planner: superblocks → access regions → chunks → tasks with dependencies.
//
// Per superblock and array: a chunk on the superblock's device that holds the whole access
// region is used in place; otherwise the region is assembled into a temporary chunk from
// the chunks that hold it (reads) and scattered back afterwards (writes). After a write,
// every other chunk holding part of the written region (halos, replicas) gets a copy of
// that part. reduce(op) gives each superblock an identity-filled partial, reduced per
// device and then across devices in a fixed order, and the result overwrites the union of
// the reduce regions. Dependencies come from per-chunk (region, task) records.
#include "plan/planner.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan::plan {

using annotation::Access;
using annotation::Mode;
using annotation::ReduceOp;

std::string ArrayMeta::describe() const {
  return fmt::format("array {} {} {}", id, dtype_name(dtype), shape.str());
}

namespace {

constexpr std::size_t kReduceFanIn = 16;  // partials one Reduce task combines at most

template <class T>
std::array<unsigned char, 16> bytes_of(T v) {
  std::array<unsigned char, 16> out{};
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

template <class T>
std::array<unsigned char, 16> identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::add:
      return bytes_of<T>(T(0));
    case ReduceOp::mul:
      return bytes_of<T>(T(1));
    case ReduceOp::min:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return bytes_of<T>(std::numeric_limits<T>::infinity());
      else
        return bytes_of<T>(std::numeric_limits<T>::max());
    case ReduceOp::max:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return bytes_of<T>(-std::numeric_limits<T>::infinity());
      else
        return bytes_of<T>(std::numeric_limits<T>::lowest());
    case ReduceOp::bit_and:
      return bytes_of<T>(static_cast<T>(~0ull));
    case ReduceOp::bit_or:
      return bytes_of<T>(T(0));
  }
  return {};
}

uint16_t half_bits(float f, bool bf16) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (bf16) return static_cast<uint16_t>(x >> 16);
  // Only 0, 1 and ±inf are needed here.
  if (f == 0.0f) return 0;
  if (f == 1.0f) return 0x3C00;
  return f > 0 ? 0x7C00 : 0xFC00;
}

}  // namespace

std::array<unsigned char, 16> reduce_identity(ReduceOp op, DType dtype) {
  switch (dtype) {
    case DType::i8:
      return identity_of<int8_t>(op);
    case DType::i16:
      return identity_of<int16_t>(op);
    case DType::i32:
      return identity_of<int32_t>(op);
    case DType::i64:
      return identity_of<int64_t>(op);
    case DType::u8:
      return identity_of<uint8_t>(op);
    case DType::u16:
      return identity_of<uint16_t>(op);
    case DType::u32:
      return identity_of<uint32_t>(op);
    case DType::u64:
      return identity_of<uint64_t>(op);
    case DType::boolean:
      return identity_of<uint8_t>(op);
    case DType::f32:
      return identity_of<float>(op);
    case DType::f64:
      return identity_of<double>(op);
    case DType::f16:
    case DType::bf16: {
      float f = 0;
      auto id = identity_of<float>(op);
      std::memcpy(&f, id.data(), 4);
      return bytes_of<uint16_t>(half_bits(f, dtype == DType::bf16));
    }
  }
  return {};
}

const char* Task::kind() const {
  static const char* names[] = {"create", "delete",  "fill",    "copy", "reduce", "write",
                                "read",   "execute", "barrier", "send", "recv",   "recv-host"};
  static_assert(std::size(names) == std::variant_size_v<Payload>);
  return names[payload.index()];
}

void Task::chunk_uses(std::vector<std::pair<ChunkId, bool>>& out) const {
  out.clear();
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, Fill>)
          out.emplace_back(p.dst.id, true);
        else if constexpr (std::is_same_v<P, Copy>) {
          out.emplace_back(p.src.id, false);
          out.emplace_back(p.dst.id, true);
        } else if constexpr (std::is_same_v<P, Reduce>) {
          for (auto& s : p.srcs) out.emplace_back(s.id, false);
          out.emplace_back(p.dst.id, true);
        } else if constexpr (std::is_same_v<P, HostWrite>)
          out.emplace_back(p.dst.id, true);
        else if constexpr (std::is_same_v<P, ReadBack>)
          out.emplace_back(p.src.id, false);
        else if constexpr (std::is_same_v<P, Send>)
          out.emplace_back(p.src.id, false);
        else if constexpr (std::is_same_v<P, Recv>)
          out.emplace_back(p.dst.id, true);
        else if constexpr (std::is_same_v<P, Execute>) {
          for (auto& a : p.arrays)
            if (a.chunk.id) {
              bool merged = false;
              for (auto& u : out)
                if (u.first == a.chunk.id) u.second = u.second || a.write, merged = true;
              if (!merged) out.emplace_back(a.chunk.id, a.write);
            }
        }
      },
      payload);
}

std::string Plan::to_dot() const {
  std::string s = "digraph plan {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const Task& t : tasks) {
    std::string label = fmt::format("{} {}\\ndevice {}", t.kind(), t.id, t.device);
    if (auto* e = std::get_if<Execute>(&t.payload))
      label += fmt::format("\\n{} blocks {}", e->executable ? e->executable->name() : "?",
                           e->blocks.str());
    if (auto* c = std::get_if<Copy>(&t.payload))
      label += fmt::format("\\nchunk {} -> {}\\n{}", c->src.id, c->dst.id, c->region.str());
    s += fmt::format("  t{} [label=\"{}\"];\n", t.id, label);
    for (TaskId d : t.deps) s += fmt::format("  t{} -> t{};\n", d, t.id);
  }
  return s + "}\n";
}

Planner::Planner(int devices, std::function<bool(TaskId)> is_done)
    : devices_(devices), is_done_(std::move(is_done)) {}

void Planner::set_ranks(std::vector<int> rank_of_device) {
  if (!rank_of_device.empty() && static_cast<int>(rank_of_device.size()) != devices_)
    throw Error(fmt::format("internal error: ranks for {} devices, the planner has {}",
                            rank_of_device.size(), devices_));
  for (std::size_t d = 1; d < rank_of_device.size(); ++d)
    if (rank_of_device[d] < rank_of_device[d - 1])
      throw Error("internal error: devices must be numbered rank by rank");
  rank_of_device_ = std::move(rank_of_device);
}

std::size_t Planner::tracked_records() const {
  std::size_t n = 0;
  for (auto& [c, r] : records_) n += r.size();
  return n;
}

void Planner::assign_chunk_ids(ArrayMeta& meta) {
  for (auto& c : meta.chunks) c.id = next_chunk();
  int64_t owned = 0;
  std::vector<Rect> boxes;
  for (auto& c : meta.chunks) owned += c.owned.volume(), boxes.push_back(c.owned);
  meta.owned_partition =
      owned == meta.shape.volume() && subtract_all(Rect::of_shape(meta.shape), boxes).empty();
}

// --- dependency records -------------------------------------------------------------

void Planner::prune(std::vector<Record>& records) {
  if (records.size() < 32 || !is_done_) return;
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const Record& r) { return is_done_(r.task); }),
                records.end());
}

void Planner::read_dep(ChunkId c, const Rect& r, std::vector<TaskId>& deps) {
  auto it = records_.find(c);
  if (it == records_.end()) return;
  for (const Record& rec : it->second)
    if (rec.write && rec.region.overlaps(r)) deps.push_back(rec.task);
}

void Planner::write_dep(ChunkId c, const Rect& r, std::vector<TaskId>& deps) {
  auto it = records_.find(c);
  if (it == records_.end()) return;
  for (const Record& rec : it->second)
    if (rec.region.overlaps(r)) deps.push_back(rec.task);
}

void Planner::record(ChunkId c, const Rect& r, TaskId t, bool write) {
  auto& recs = records_[c];
  if (write) {
    // A writer depends on every record it overlaps; those it covers are superseded.
    recs.erase(std::remove_if(recs.begin(), recs.end(),
                              [&](const Record& rec) { return r.contains(rec.region); }),
               recs.end());
  }
  prune(recs);
  recs.push_back(Record{r, t, write});
}

static void unique(std::vector<TaskId>& deps) {
  if (deps.size() < 2) return;
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
}

Plan Planner::finish(std::vector<Task> tasks) {
  // The barrier waits for the tasks no other task of this plan waits for.
  // The plan's tasks have the ids (first, last_task_]: a flag per id, no hashing.
  std::vector<TaskId> sinks;
  if (!tasks.empty()) {
    TaskId first = last_task_ + 1;
    for (auto& t : tasks) first = std::min(first, t.id);
    std::vector<char> has_successor(last_task_ - first + 1, 0);
    for (auto& t : tasks)
      for (TaskId d : t.deps)
        if (d >= first) has_successor[d - first] = 1;
    for (auto& t : tasks)
      if (!has_successor[t.id - first]) sinks.push_back(t.id);
  }
  Plan plan;
  // One last task: it is what the caller waits for. Over several ranks the driver hears
  // of barriers only, so every plan gets one.
  if (sinks.size() == 1 && rank_of_device_.empty()) {
    plan.done = sinks[0];
    plan.tasks = std::move(tasks);
    return plan;
  }
  Task barrier;
  barrier.id = next_task();
  barrier.deps = std::move(sinks);
  barrier.payload = Barrier{};
  plan.done = barrier.id;
  plan.tasks = std::move(tasks);
  plan.tasks.push_back(std::move(barrier));
  return plan;
}

// --- arrays ---------------------------------------------------------------------------

Plan Planner::create_array(const ArrayMeta& meta, const unsigned char* fill) {
  std::vector<Task> tasks;
  for (const ChunkMeta& c : meta.chunks) {
    Task create;
    create.id = next_task();
    create.device = c.device;
    create.payload =
        CreateChunk{c.id, static_cast<std::size_t>(c.region.volume()) * meta.elem_size};
    record(c.id, c.region, create.id, true);
    TaskId created = create.id;
    tasks.push_back(std::move(create));
    if (fill) {
      Task f;
      f.id = next_task();
      f.device = c.device;
      f.deps = {created};
      Fill payload{ChunkRef{c.id, c.region}, c.region, meta.elem_size, {}};
      std::memcpy(payload.value.data(), fill, meta.elem_size);
      f.payload = payload;
      record(c.id, c.region, f.id, true);
      tasks.push_back(std::move(f));
    }
  }
  return finish(std::move(tasks));
}

void Planner::set_read_cache(std::vector<std::size_t> bytes_per_device) {
  bytes_per_device.resize(static_cast<std::size_t>(devices_), 0);
  read_cache_limit_ = std::move(bytes_per_device);
  read_cache_bytes_.assign(read_cache_limit_.size(), 0);
}

void Planner::delete_cached(const CachedRead& c, std::vector<Task>& tasks) {
  Task del;
  del.id = next_task();
  del.device = c.device;
  del.deps = c.readers;
  unique(del.deps);
  del.payload = DeleteChunk{c.ref.id};
  tasks.push_back(std::move(del));
  read_cache_bytes_[c.device] -= c.bytes;
}

void Planner::drop_cached(uint64_t array, std::vector<Task>& tasks) {
  for (auto it = read_cache_.begin(); it != read_cache_.end();) {
    if (it->array != array) {
      ++it;
      continue;
    }
    delete_cached(*it, tasks);
    it = read_cache_.erase(it);
  }
}

Plan Planner::write_array(const ArrayMeta& meta,
                          std::shared_ptr<const std::vector<unsigned char>> data) {
  std::vector<Task> tasks;
  drop_cached(meta.id, tasks);
  Rect whole = Rect::of_shape(meta.shape);
  for (const ChunkMeta& c : meta.chunks) {
    Task t;
    t.id = next_task();
    t.device = c.device;
    write_dep(c.id, c.region, t.deps);
    unique(t.deps);
    t.payload = HostWrite{ChunkRef{c.id, c.region}, c.region, data, whole, meta.elem_size};
    record(c.id, c.region, t.id, true);
    tasks.push_back(std::move(t));
  }
  return finish(std::move(tasks));
}

Plan Planner::read_array(const ArrayMeta& meta, void* dst) {
  std::vector<Task> tasks;
  Rect whole = Rect::of_shape(meta.shape);
  std::vector<Rect> done;
  for (const ChunkMeta& c : meta.chunks) {
    std::vector<Rect> pieces;
    if (meta.owned_partition) {
      if (!c.owned.empty()) pieces.push_back(c.owned);
    } else {
      pieces = subtract_all(c.region, done);
      done.push_back(c.region);
    }
    for (const Rect& piece : pieces) {
      Task t;
      t.id = next_task();
      t.device = c.device;
      read_dep(c.id, piece, t.deps);
      unique(t.deps);
      t.payload = ReadBack{ChunkRef{c.id, c.region}, piece, dst, whole, meta.elem_size};
      record(c.id, piece, t.id, false);
      tasks.push_back(std::move(t));
    }
  }
  return finish(std::move(tasks));
}

Plan Planner::delete_array(const ArrayMeta& meta) {
  std::vector<Task> tasks;
  drop_cached(meta.id, tasks);
  for (const ChunkMeta& c : meta.chunks) {
    Task t;
    t.id = next_task();
    t.device = c.device;
    write_dep(c.id, c.region, t.deps);
    unique(t.deps);
    t.payload = DeleteChunk{c.id};
    records_.erase(c.id);
    tasks.push_back(std::move(t));
  }
  return finish(std::move(tasks));
}

// --- launches -------------------------------------------------------------------------

namespace {

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

struct SharedKeyHash {
  std::size_t operator()(const SharedKey& k) const {
    std::size_t h = std::hash<const void*>()(k.array) ^ (std::size_t(k.device) << 48);
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

}  // namespace

struct Planner::LaunchState {
  std::vector<Task> tasks;
  std::unordered_map<const ArrayMeta*, ChunkIndex> index;
  const ArrayMeta* last_array = nullptr;
  const ChunkIndex* last_index = nullptr;

  const ChunkIndex& index_of(const ArrayMeta* a) {
    if (a == last_array) return *last_index;
    auto it = index.find(a);
    if (it == index.end()) it = index.emplace(a, ChunkIndex(*a)).first;
    last_array = a;
    last_index = &it->second;
    return it->second;
  }
};

Plan Planner::launch(const LaunchSpec& spec) {
  const auto& params = *spec.params;
  int np = static_cast<int>(params.size());
  std::vector<Dim> shapes(np);
  for (int p = 0; p < np; ++p)
    if (spec.arrays[p]) shapes[p] = spec.arrays[p]->shape;
  annotation::BoundAnnotation bound = spec.annotation->bind(
      annotation::LaunchGeometry{spec.threads, spec.block}, spec.int_scalars, shapes);
  Dim grid = grid_of(spec.threads, spec.block);

  LaunchState st;
  auto& tasks = st.tasks;
  tasks.reserve(spec.superblocks.size() * 2);

  // Pass 1: every superblock's access regions.
  auto& accesses = accesses_;  // reused across launches: no allocation in steady state
  if (accesses.size() < spec.superblocks.size()) accesses.resize(spec.superblocks.size());
  for (std::size_t s = 0; s < spec.superblocks.size(); ++s)
    bound.regions(spec.superblocks[s].blocks, accesses[s]);

  // Reductions: per array, the partial chunks of each superblock / device.
  struct Partial {
    ChunkRef chunk;
    int device;
    TaskId producer;
  };
  struct ReduceState {
    const ArrayMeta* array = nullptr;
    Mode mode = Mode::reduce;
    ReduceOp op = ReduceOp::add;
    std::vector<std::vector<Partial>> per_device;   // reduce: superblock partials by device
    std::vector<Partial> device_partial;            // atomic: one per device
    std::vector<std::vector<TaskId>> device_users;  // atomic: the executes per device
    std::vector<std::vector<std::size_t>> device_user_tasks;  // ... as indices in `tasks`
    std::vector<Rect> regions;                                // all superblocks' regions
  };
  std::vector<ReduceState> reductions(np);

  auto new_temp = [&](const Rect& rect, int device, std::size_t elem_size) {
    Task create;
    create.id = next_task();
    create.device = device;
    ChunkRef ref{next_chunk(), rect};
    create.payload = CreateChunk{ref.id, static_cast<std::size_t>(rect.volume()) * elem_size};
    TaskId id = create.id;
    tasks.push_back(std::move(create));
    return std::make_pair(ref, id);
  };
  auto add_delete = [&](ChunkId chunk, int device, std::vector<TaskId> deps) {
    Task del;
    del.id = next_task();
    del.device = device;
    unique(deps);
    del.deps = std::move(deps);
    del.payload = DeleteChunk{chunk};
    tasks.push_back(std::move(del));
  };
  // A copy of `region` from an array chunk into a temporary (tracked on the source side).
  auto copy_in = [&](const ChunkMeta& src, const ChunkRef& dst, TaskId dst_created,
                     const Rect& region, int device, std::size_t elem_size) {
    Task t;
    t.id = next_task();
    t.device = device;
    read_dep(src.id, region, t.deps);
    t.deps.push_back(dst_created);
    unique(t.deps);
    t.payload = Copy{ChunkRef{src.id, src.region}, dst, region, elem_size};
    record(src.id, region, t.id, false);
    TaskId id = t.id;
    tasks.push_back(std::move(t));
    return id;
  };
  // A copy of `region` from a temporary / chunk into an array chunk (tracked on the target).
  auto copy_out = [&](const ChunkRef& src, std::vector<TaskId> deps, const ChunkMeta& dst,
                      const Rect& region, std::size_t elem_size, bool src_tracked) {
    Task t;
    t.id = next_task();
    t.device = dst.device;
    t.deps = std::move(deps);
    if (src_tracked) read_dep(src.id, region, t.deps);
    write_dep(dst.id, region, t.deps);
    unique(t.deps);
    t.payload = Copy{src, ChunkRef{dst.id, dst.region}, region, elem_size};
    if (src_tracked) record(src.id, region, t.id, false);
    record(dst.id, region, t.id, true);
    TaskId id = t.id;
    tasks.push_back(std::move(t));
    return id;
  };

  // Read-only temporaries are shared by the superblocks of a device that read the same
  // region of an array this launch does not change (GEMM's B: assembled once per device,
  // not once per superblock); each goes when its last reader is done.
  std::unordered_set<const ArrayMeta*> changed;
  for (std::size_t s = 0; s < spec.superblocks.size(); ++s)
    for (const Access& acc : accesses[s])
      if (acc.mode != Mode::read && !acc.region.empty()) changed.insert(spec.arrays[acc.param]);
  std::unordered_map<SharedKey, SharedRead, SharedKeyHash> shared;
  // What this launch changes, kept copies of it are stale from now on.
  for (const ArrayMeta* a : changed) drop_cached(a->id, tasks);

  std::vector<int> direct(np);
  std::vector<std::pair<ChunkRef, TaskId>> temp(np);
  for (std::size_t s = 0; s < spec.superblocks.size(); ++s) {
    const Superblock& sb = spec.superblocks[s];
    int dev = sb.device;
    Task exec;
    exec.id = next_task();
    exec.device = dev;
    Execute ex;
    ex.executable = spec.executable.get();
    ex.blocks = sb.blocks;
    ex.block = spec.block;
    ex.grid = grid;
    ex.arrays.resize(np);
    ex.scalars = spec.scalars;
    ex.scalar_offsets = spec.scalar_offsets;  // shared, not copied
    std::vector<int> atomic_params;

    // Resolve every array argument to a chunk or a temporary.
    for (const Access& acc : accesses[s]) {
      int p = acc.param;
      const ArrayMeta* a = spec.arrays[p];
      ExecArg& arg = ex.arrays[p];
      arg.region = acc.region;
      arg.mode = acc.mode;
      arg.op = acc.op;
      arg.write = acc.mode != Mode::read;
      direct[p] = -1;
      temp[p] = {};
      if (acc.region.empty()) continue;
      if (acc.mode == Mode::reduce || acc.mode == Mode::atomic) {
        ReduceState& rs = reductions[p];
        rs.array = a;
        rs.mode = acc.mode;
        rs.op = acc.op;
        if (rs.per_device.empty()) {
          rs.per_device.resize(devices_);
          rs.device_partial.resize(devices_);
          rs.device_users.resize(devices_);
          rs.device_user_tasks.resize(devices_);
        }
        rs.regions.push_back(acc.region);
        if (acc.mode == Mode::reduce) {
          auto [ref, created] = new_temp(acc.region, dev, a->elem_size);
          Task fill;
          fill.id = next_task();
          fill.device = dev;
          fill.deps = {created};
          fill.payload = Fill{ref, acc.region, a->elem_size, reduce_identity(acc.op, a->dtype)};
          exec.deps.push_back(fill.id);
          tasks.push_back(std::move(fill));
          arg.chunk = ref;
          rs.per_device[dev].push_back(Partial{ref, dev, exec.id});
        } else {
          arg.chunk = {};  // filled in once the device partial's box is known (pass 3)
          rs.device_users[dev].push_back(exec.id);
          atomic_params.push_back(p);
        }
        continue;
      }
      // A chunk on this device that holds the whole region is used in place.
      const ChunkIndex& index = st.index_of(a);
      int local = -1, remote = -1;
      index.for_overlapping(*a, acc.region, [&](int k) {
        const ChunkMeta& c = a->chunks[k];
        if (!c.region.contains(acc.region)) return;
        if (c.device == dev && local < 0) local = k;
        if (remote < 0) remote = k;
      });
      if (local >= 0) {
        const ChunkMeta& c = a->chunks[local];
        arg.chunk = ChunkRef{c.id, c.region};
        direct[p] = local;
        continue;
      }
      // Otherwise a temporary on this device, assembled from the chunks that hold it.
      const bool shareable = acc.mode == Mode::read && !changed.count(a);
      const SharedKey key{a, dev, acc.region};
      if (shareable) {
        auto it = shared.find(key);
        if (it == shared.end()) {  // kept by an earlier launch?
          auto kept =
              std::find_if(read_cache_.begin(), read_cache_.end(), [&](const CachedRead& c) {
                return c.array == a->id && c.device == dev && c.region == acc.region;
              });
          if (kept != read_cache_.end()) {
            it = shared.emplace(key, SharedRead{kept->ref, kept->ready, kept->readers}).first;
            read_cache_bytes_[dev] -= kept->bytes;
            read_cache_.erase(kept);
          }
        }
        if (it != shared.end()) {
          arg.chunk = it->second.ref;
          exec.deps.insert(exec.deps.end(), it->second.ready.begin(), it->second.ready.end());
          it->second.readers.push_back(exec.id);
          continue;
        }
      }
      const std::size_t ready_from = exec.deps.size();
      auto [ref, created] = new_temp(acc.region, dev, a->elem_size);
      arg.chunk = ref;
      if (!shareable) temp[p] = {ref, created};
      exec.deps.push_back(created);
      // Written temporaries are assembled too, so elements the kernel leaves alone keep
      // their values when scattered back (as they would in a chunk used in place).
      {
        if (remote >= 0) {
          exec.deps.push_back(
              copy_in(a->chunks[remote], ref, created, acc.region, dev, a->elem_size));
        } else {
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
      }
      if (shareable)
        shared.emplace(
            key,
            SharedRead{
                ref, {exec.deps.begin() + std::ptrdiff_t(ready_from), exec.deps.end()}, {exec.id}});
    }

    // Dependencies of the chunks used in place, then their records.
    for (const Access& acc : accesses[s]) {
      int p = acc.param;
      if (direct[p] < 0) continue;
      const ChunkMeta& c = spec.arrays[p]->chunks[direct[p]];
      if (acc.mode == Mode::read)
        read_dep(c.id, acc.region, exec.deps);
      else
        write_dep(c.id, acc.region, exec.deps);
    }
    unique(exec.deps);
    for (const Access& acc : accesses[s]) {
      int p = acc.param;
      if (direct[p] < 0) continue;
      const ChunkMeta& c = spec.arrays[p]->chunks[direct[p]];
      record(c.id, acc.region, exec.id, acc.mode != Mode::read);
    }
    TaskId exec_id = exec.id;
    exec.payload = std::move(ex);
    tasks.push_back(std::move(exec));
    for (int p : atomic_params) reductions[p].device_user_tasks[dev].push_back(tasks.size() - 1);

    // After a write: scatter temporaries back, and make halos and replicas coherent.
    for (const Access& acc : accesses[s]) {
      int p = acc.param;
      if (acc.region.empty() || acc.mode == Mode::read || acc.mode == Mode::reduce ||
          acc.mode == Mode::atomic)
        continue;
      const ArrayMeta* a = spec.arrays[p];
      const ChunkIndex& index = st.index_of(a);
      if (direct[p] >= 0) {
        const ChunkMeta& used = a->chunks[direct[p]];
        ChunkRef src{used.id, used.region};
        index.for_overlapping(*a, acc.region, [&](int k) {
          if (k == direct[p]) return;
          const ChunkMeta& c = a->chunks[k];
          copy_out(src, {exec_id}, c, c.region.intersect(acc.region), a->elem_size, true);
        });
      } else {
        std::vector<TaskId> users{exec_id};
        index.for_overlapping(*a, acc.region, [&](int k) {
          const ChunkMeta& c = a->chunks[k];
          users.push_back(copy_out(temp[p].first, {exec_id}, c, c.region.intersect(acc.region),
                                   a->elem_size, false));
        });
        add_delete(temp[p].first.id, sb.device, users);
      }
    }
    // Temporaries that were only read go once the execute is done.
    for (const Access& acc : accesses[s]) {
      int p = acc.param;
      if (temp[p].second && acc.mode == Mode::read)
        add_delete(temp[p].first.id, sb.device, {exec_id});
    }
  }

  // Shared temporaries are kept for later launches while there is room on their device
  // (the least recently used go first), else deleted after their last reader.
  for (auto& [key, read] : shared) {
    const int d = key.device;
    const std::size_t bytes = static_cast<std::size_t>(key.region.volume()) * key.array->elem_size;
    if (read_cache_limit_.empty() || bytes > read_cache_limit_[d]) {
      add_delete(read.ref.id, d, std::move(read.readers));
      continue;
    }
    while (read_cache_bytes_[d] + bytes > read_cache_limit_[d]) {
      auto lru = read_cache_.end();
      for (auto c = read_cache_.begin(); c != read_cache_.end(); ++c)
        if (c->device == d && (lru == read_cache_.end() || c->used < lru->used)) lru = c;
      delete_cached(*lru, tasks);
      read_cache_.erase(lru);
    }
    std::vector<TaskId> readers;  // the finished ones need no waiting for
    for (TaskId r : read.readers)
      if (read.readers.size() <= 16 || !is_done_(r)) readers.push_back(r);
    read_cache_.push_back(CachedRead{key.array->id, d, key.region, read.ref, std::move(read.ready),
                                     std::move(readers), bytes, ++read_cache_clock_});
    read_cache_bytes_[d] += bytes;
  }

  // Pass 3: atomic partials (one per device, shared by that device's superblocks).
  for (int p = 0; p < np; ++p) {
    ReduceState& rs = reductions[p];
    if (!rs.array || rs.mode != Mode::atomic) continue;
    for (int d = 0; d < devices_; ++d) {
      if (rs.device_users[d].empty()) continue;
      Rect box;
      bool first = true;
      for (std::size_t at : rs.device_user_tasks[d]) {
        const Rect& r = std::get<Execute>(tasks[at].payload).arrays[p].region;
        box = first ? r : box.bounding_union(r);
        first = false;
      }
      auto [ref, created] = new_temp(box, d, rs.array->elem_size);
      Task fill;
      fill.id = next_task();
      fill.device = d;
      fill.deps = {created};
      fill.payload = Fill{ref, box, rs.array->elem_size, reduce_identity(rs.op, rs.array->dtype)};
      TaskId filled = fill.id;
      tasks.push_back(std::move(fill));
      for (std::size_t at : rs.device_user_tasks[d]) {
        std::get<Execute>(tasks[at].payload).arrays[p].chunk = ref;
        tasks[at].deps.push_back(filled);
      }
      rs.per_device[d].push_back(Partial{ref, d, 0});
      rs.device_partial[d] = Partial{ref, d, 0};
    }
  }

  // Pass 4: reduce partials per device, then across devices, then overwrite the array.
  for (int p = 0; p < np; ++p) {
    ReduceState& rs = reductions[p];
    if (!rs.array) continue;
    const ArrayMeta* a = rs.array;
    std::vector<Partial> device_level;
    std::vector<std::pair<ChunkId, int>> to_delete;
    std::unordered_map<ChunkId, std::vector<TaskId>> users;  // who reads each partial
    auto producers_of = [&](const Partial& part, int device) {
      // The tasks that finish writing a partial: its execute, or every atomic user.
      std::vector<TaskId> deps;
      if (part.producer)
        deps.push_back(part.producer);
      else
        deps = rs.device_users[device];
      return deps;
    };
    // One Reduce task combining `parts` (in order) into a new partial on `device`.
    auto reduce_into = [&](const std::vector<Partial>& parts, int device) {
      Rect box = parts[0].chunk.rect;
      for (auto& part : parts) box = box.bounding_union(part.chunk.rect);
      auto [ref, created] = new_temp(box, device, a->elem_size);
      Task red;
      red.id = next_task();
      red.device = device;
      red.deps = {created};
      Reduce payload{ref, {}, rs.op, a->dtype};
      for (auto& part : parts) {
        auto deps = producers_of(part, part.device);
        red.deps.insert(red.deps.end(), deps.begin(), deps.end());
        payload.srcs.push_back(part.chunk);
        users[part.chunk.id].push_back(red.id);
      }
      unique(red.deps);
      red.payload = std::move(payload);
      to_delete.emplace_back(ref.id, device);
      Partial out{ref, device, red.id};
      tasks.push_back(std::move(red));
      return out;
    };
    // A tree of Reduce tasks of at most kReduceFanIn inputs each, in a fixed order, so no
    // task has to stage more than that many partials at once (however many superblocks).
    auto reduce_tree = [&](std::vector<Partial> parts, int device) {
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
    };
    for (int d = 0; d < devices_; ++d) {
      auto& parts = rs.per_device[d];
      if (parts.empty()) continue;
      if (parts.size() == 1) {
        device_level.push_back(parts[0]);
        to_delete.emplace_back(parts[0].chunk.id, d);
        continue;
      }
      for (auto& part : parts) to_delete.emplace_back(part.chunk.id, d);
      device_level.push_back(reduce_tree(parts, d));
    }
    if (device_level.empty()) continue;
    Partial final_part = device_level[0];
    if (rank_of_device_.empty()) {
      if (device_level.size() > 1) final_part = reduce_tree(device_level, device_level[0].device);
    } else {
      // Each rank's partials on that rank (peer reads between its devices), then a tree
      // across ranks: the partial of the right-hand rank of each pair is copied over (a
      // transfer once split) and reduced into the left-hand one's.
      std::vector<std::vector<Partial>> by_rank;
      for (const Partial& part : device_level) {
        const int r = rank_of_device_[part.device];
        if (by_rank.empty() || rank_of_device_[by_rank.back()[0].device] != r)
          by_rank.emplace_back();
        by_rank.back().push_back(part);
      }
      std::vector<Partial> rank_level;
      for (auto& group : by_rank)
        rank_level.push_back(group.size() == 1 ? group[0] : reduce_tree(group, group[0].device));
      while (rank_level.size() > 1) {
        std::vector<Partial> next;
        for (std::size_t i = 0; i < rank_level.size(); i += 2) {
          if (i + 1 == rank_level.size()) {
            next.push_back(rank_level[i]);
            continue;
          }
          const Partial& left = rank_level[i];
          const Partial& right = rank_level[i + 1];
          auto [ref, created] = new_temp(right.chunk.rect, left.device, a->elem_size);
          Task move;
          move.id = next_task();
          move.device = left.device;
          move.deps = producers_of(right, right.device);
          move.deps.push_back(created);
          unique(move.deps);
          move.payload = Copy{right.chunk, ref, right.chunk.rect, a->elem_size};
          users[right.chunk.id].push_back(move.id);
          to_delete.emplace_back(ref.id, left.device);
          Partial moved{ref, left.device, move.id};
          tasks.push_back(std::move(move));
          next.push_back(reduce_into({left, moved}, left.device));
        }
        rank_level.swap(next);
      }
      final_part = rank_level[0];
    }
    // The elements reduced: the union of the superblocks' regions, as disjoint boxes.
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
    const ChunkIndex& index = st.index_of(a);
    for (const Rect& piece : pieces)
      index.for_overlapping(*a, piece, [&](int k) {
        const ChunkMeta& c = a->chunks[k];
        users[final_part.chunk.id].push_back(copy_out(
            final_part.chunk, final_deps, c, c.region.intersect(piece), a->elem_size, false));
      });
    for (auto& [chunk, device] : to_delete) {
      std::vector<TaskId> deps = users[chunk];
      for (auto& part : device_level)
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
      add_delete(chunk, device, std::move(deps));
    }
  }
  return finish(std::move(tasks));
}

}  // namespace gridspan::plan
