// Memoized launches (see memo.hpp): the key, keeping a plan as a skeleton, and its repeats.
#include "plan/memo.hpp"

#include <algorithm>

#include "core/scratch.hpp"
#include "plan/builder.hpp"
#include "plan/planner.hpp"

namespace gridspan::plan {

namespace {

bool same_superblocks(const std::vector<Superblock>& a, const std::vector<Superblock>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.device == y.device && x.blocks == y.blocks;
  });
}

// A temporary's chunk id (above `base`) moved by `by`; an array's chunk keeps its id.
void move_chunk(ChunkId& id, ChunkId base, ChunkId by) {
  if (id > base) id += by;
}

void move_chunks(Payload& payload, ChunkId base, ChunkId by) {
  std::visit(
      [&](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, CreateChunk> || std::is_same_v<P, DeleteChunk>) {
          move_chunk(p.chunk, base, by);
        } else if constexpr (std::is_same_v<P, Fill>) {
          move_chunk(p.dst.id, base, by);
        } else if constexpr (std::is_same_v<P, Copy> || std::is_same_v<P, Narrow>) {
          move_chunk(p.src.id, base, by);
          move_chunk(p.dst.id, base, by);
        } else if constexpr (std::is_same_v<P, Reduce>) {
          move_chunk(p.dst.id, base, by);
          for (auto& src : p.srcs) move_chunk(src.id, base, by);
        } else if constexpr (std::is_same_v<P, Execute>) {
          for (auto& arg : p.arrays)
            if (arg.chunk.id) move_chunk(arg.chunk.id, base, by);
        }
      },
      payload);
}

}  // namespace

LaunchKey::LaunchKey(const LaunchSpec& spec)
    : executable(spec.executable.get()),
      annotation(spec.annotation),
      threads(spec.threads),
      block(spec.block),
      superblocks(spec.superblocks),
      int_scalars(spec.int_scalars),
      clock(spec.clock) {
  arrays.reserve(spec.arrays.size());
  for (const ArrayMeta* a : spec.arrays) arrays.emplace_back(a, a ? a->id : 0);
}

bool LaunchKey::matches(const LaunchSpec& spec) const {
  if (executable != spec.executable.get() || annotation != spec.annotation ||
      !(threads == spec.threads) || !(block == spec.block) || int_scalars != spec.int_scalars ||
      clock != spec.clock || arrays.size() != spec.arrays.size() ||
      !same_superblocks(superblocks, spec.superblocks))
    return false;
  for (std::size_t p = 0; p < arrays.size(); ++p) {
    const ArrayMeta* a = spec.arrays[p];
    if (arrays[p].first != a || arrays[p].second != (a ? a->id : 0)) return false;
  }
  return true;
}

const Skeleton* LaunchMemo::find(const LaunchSpec& spec) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (!it->key.matches(spec)) continue;
    if (it != kept_.begin()) {  // the most recently used first
      Skeleton s = std::move(*it);
      kept_.erase(it);
      kept_.push_front(std::move(s));
    }
    ++hits_;
    return &kept_.front();
  }
  return nullptr;
}

void LaunchMemo::keep(const LaunchSpec& spec, const Plan& plan, std::vector<RecordOp> ops,
                      TaskId plan_first, ChunkId chunk_base, ChunkId chunk_end) {
  Skeleton s{LaunchKey(spec), plan.tasks, std::move(ops), plan_first,
             plan.done,       chunk_base, chunk_end};
  // Dependencies on earlier work come from the record operations at each repeat.
  for (Task& t : s.tasks)
    t.deps.erase(
        std::remove_if(t.deps.begin(), t.deps.end(), [&](TaskId d) { return d < plan_first; }),
        t.deps.end());
  kept_.push_front(std::move(s));
  if (kept_.size() > kCapacity) kept_.pop_back();
}

Plan LaunchMemo::instantiate(const Skeleton& s, const LaunchSpec& spec, RegionRecords& records,
                             TaskId& last_task, ChunkId& last_chunk, std::vector<Task> reuse) {
  const TaskId by = last_task + 1 - s.first;
  const ChunkId chunks_by = last_chunk - s.chunk_base;
  Plan plan;
  plan.tasks = std::move(reuse);
  plan.tasks.resize(s.tasks.size());
  for (std::size_t k = 0; k < s.tasks.size(); ++k) plan.tasks[k] = s.tasks[k];
  Scratch<std::vector<std::size_t>> index;  // task id - first -> index in the plan
  std::vector<std::size_t>& at = *index;
  at.resize(s.tasks.size());
  for (std::size_t k = 0; k < plan.tasks.size(); ++k) {
    Task& t = plan.tasks[k];
    at[t.id - s.first] = k;
    t.id += by;
    for (TaskId& d : t.deps) d += by;
    move_chunks(t.payload, s.chunk_base, chunks_by);
    if (auto* ex = std::get_if<Execute>(&t.payload)) {
      ex->scalars = spec.scalars;
      ex->scalar_offsets = spec.scalar_offsets;
    }
  }
  for (const RecordOp& op : s.ops) {
    Task& t = plan.tasks[at[op.task - s.first]];
    switch (op.kind) {
      case RecordOp::read_deps:
        records.read_deps(op.chunk, op.region, t.deps);
        break;
      case RecordOp::write_deps:
        records.write_deps(op.chunk, op.region, t.deps);
        break;
      case RecordOp::record_read:
      case RecordOp::record_write:
        records.record(op.chunk, op.region, t.id, op.kind == RecordOp::record_write);
        break;
    }
  }
  for (Task& t : plan.tasks) unique(t.deps);
  plan.done = s.done + by;
  last_task += plan.tasks.size();
  last_chunk = s.chunk_end + chunks_by;
  return plan;
}

}  // namespace gridspan::plan
