// Splitting plans over processes (see split.hpp).
#include "plan/split.hpp"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan::plan {

namespace {

void add_rank(std::vector<int>& ranks, int r) {
  if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
}

}  // namespace

Placement Placement::by_rank(const std::vector<int>& counts, int driver) {
  Placement p;
  p.ranks = static_cast<int>(counts.size());
  p.driver = driver;
  for (int r = 0; r < p.ranks; ++r)
    for (int i = 0; i < counts[r]; ++i) {
      p.rank.push_back(r);
      p.local.push_back(i);
    }
  return p;
}

int PlanSplitter::rank_of_device(const Task& t) const {
  if (t.device < 0 || static_cast<std::size_t>(t.device) >= placement_.rank.size())
    throw Error(
        fmt::format("internal error: task {} ({}) runs on device {}, but the run has {} "
                    "devices",
                    t.id, t.kind(), t.device, placement_.rank.size()));
  return placement_.rank[t.device];
}

const std::vector<int>& PlanSplitter::barrier_ranks(TaskId barrier) const {
  static const std::vector<int> none;
  auto it = ranks_of_.find(barrier);
  return it == ranks_of_.end() ? none : it->second;
}

void PlanSplitter::forget(TaskId last, const std::function<bool(TaskId)>& keep) {
  for (auto it = ranks_of_.begin(); it != ranks_of_.end();)
    it = it->first <= last && !(keep && keep(it->first)) ? ranks_of_.erase(it) : std::next(it);
}

std::vector<std::vector<Task>> PlanSplitter::split(std::vector<Task> tasks) {
  const Placement& pl = placement_;
  auto chunk_rank = [&](const Task& t, ChunkId chunk) {
    auto it = chunk_device_.find(chunk);
    if (it == chunk_device_.end())
      throw Error(fmt::format("internal error: task {} ({}) uses chunk {}, which no task created",
                              t.id, t.kind(), chunk));
    return std::make_pair(pl.rank[it->second], it->second);
  };
  // The ranks of every task of the plan (barriers last: theirs follow their dependencies').
  for (const Task& t : tasks) {
    if (std::holds_alternative<Barrier>(t.payload)) continue;
    std::vector<int>& ranks = ranks_of_[t.id];
    ranks.clear();
    add_rank(ranks, rank_of_device(t));
    if (auto* c = std::get_if<CreateChunk>(&t.payload)) chunk_device_[c->chunk] = t.device;
    if (auto* c = std::get_if<Copy>(&t.payload)) add_rank(ranks, chunk_rank(t, c->src.id).first);
    if (std::holds_alternative<ReadBack>(t.payload)) add_rank(ranks, pl.driver);
    if (auto* r = std::get_if<Reduce>(&t.payload))
      for (const ChunkRef& s : r->srcs)
        if (chunk_rank(t, s.id).first != ranks[0])
          throw Error(
              fmt::format("internal error: reduction {} reads chunk {} of another rank; "
                          "the planner must bring it over first",
                          t.id, s.id));
  }
  // A barrier has a part on every rank with tasks of the plan (each waits for all of them
  // there, below), so that a plan whose parts have all finished has no task left anywhere:
  // a rank's task need not lead to a task of the barrier's on that rank (the receiving half
  // of a scatter whose sending half a deletion of the temporary follows, for one).
  std::vector<int> plan_ranks;
  for (const Task& t : tasks)
    if (!std::holds_alternative<Barrier>(t.payload))
      for (int r : ranks_of_.at(t.id)) add_rank(plan_ranks, r);
  for (const Task& t : tasks) {
    if (!std::holds_alternative<Barrier>(t.payload)) continue;
    std::vector<int> ranks = plan_ranks;
    for (TaskId d : t.deps)
      if (auto it = ranks_of_.find(d); it != ranks_of_.end())
        for (int r : it->second) add_rank(ranks, r);
    if (ranks.empty()) ranks.push_back(pl.driver);
    ranks_of_[t.id] = std::move(ranks);
  }

  std::vector<std::vector<Task>> out(pl.ranks);
  // A part of `t` on rank r, on local device `device`, with its dependencies on rank r.
  // The two parts of a transfer each keep those on their own rank; a dependency on no rank
  // of the task is an internal error (nothing would carry it over).
  auto emit = [&](const Task& t, int r, int device, Payload payload) {
    const std::vector<int>& own = ranks_of_.at(t.id);
    Task part;
    part.id = t.id;
    part.device = device;
    part.payload = std::move(payload);
    for (TaskId d : t.deps) {
      auto it = ranks_of_.find(d);
      if (it == ranks_of_.end()) continue;  // finished
      const std::vector<int>& theirs = it->second;
      if (std::find(theirs.begin(), theirs.end(), r) != theirs.end()) {
        part.deps.push_back(d);
      } else if (std::none_of(theirs.begin(), theirs.end(), [&](int x) {
                   return std::find(own.begin(), own.end(), x) != own.end();
                 })) {
        throw Error(
            fmt::format("internal error: task {} ({}) on rank {} depends on task {}, "
                        "which runs on rank {} only",
                        t.id, t.kind(), r, d, theirs.front()));
      }
    }
    out[r].push_back(std::move(part));
  };
  for (const Task& t : tasks) {
    if (std::holds_alternative<Barrier>(t.payload)) {
      for (int r : ranks_of_.at(t.id)) {
        emit(t, r, 0, Barrier{});
        // ... and on every task of its rank in this plan that no other one there waits for
        // (the part's own dependencies count as waited for).
        Task& part = out[r].back();
        std::unordered_set<TaskId> waited;
        for (const Task& u : out[r])
          for (TaskId d : u.deps) waited.insert(d);
        for (const Task& u : out[r])
          if (&u != &part && !std::holds_alternative<Barrier>(u.payload) && !waited.count(u.id))
            part.deps.push_back(u.id);
      }
      continue;
    }
    const int r = rank_of_device(t), device = pl.local[t.device];
    if (auto* c = std::get_if<Copy>(&t.payload)) {
      auto [src_rank, src_device] = chunk_rank(t, c->src.id);
      if (src_rank != r) {
        emit(t, src_rank, pl.local[src_device],
             Send{c->src, c->region, c->elem_size, r, t.id, true});
        emit(t, r, device, Recv{c->dst, c->region, c->elem_size, src_rank, t.id});
        continue;
      }
    } else if (auto* b = std::get_if<ReadBack>(&t.payload)) {
      if (r != pl.driver) {
        emit(t, r, device, Send{b->src, b->region, b->elem_size, pl.driver, t.id});
        emit(t, pl.driver, 0, RecvHost{b->dst, b->dst_rect, b->region, b->elem_size, r, t.id});
        continue;
      }
    } else if (auto* d = std::get_if<DeleteChunk>(&t.payload)) {
      chunk_device_.erase(d->chunk);
    }
    emit(t, r, device, t.payload);
  }
  return out;
}

}  // namespace gridspan::plan
