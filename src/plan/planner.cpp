// The planner: arrays' creation, host writes, read-backs and deletion as plans, and what
// every plan ends with (its barrier). A launch's passes are in launch.cpp, the dependency
// records in records.cpp, the kept read-only copies in read_cache.cpp, and the tasks' own
// methods in task.cpp.
#include "plan/planner.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan::plan {

std::string ArrayMeta::describe() const {
  return fmt::format("array {} {} {}", id, dtype_name(dtype), shape.str());
}

Planner::Planner(int devices, std::function<bool(TaskId)> is_done)
    : devices_(devices), is_done_(is_done), records_(std::move(is_done)) {}

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
  return records_.size();
}

void Planner::assign_chunk_ids(ArrayMeta& meta) {
  for (auto& c : meta.chunks) c.id = next_chunk();
  int64_t owned = 0;
  std::vector<Rect> boxes;
  for (auto& c : meta.chunks) owned += c.owned.volume(), boxes.push_back(c.owned);
  meta.owned_partition =
      owned == meta.shape.volume() && subtract_all(Rect::of_shape(meta.shape), boxes).empty();
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
  barrier.id = ++last_task_;
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
  TaskBuilder b(tasks, last_task_);
  for (const ChunkMeta& c : meta.chunks) {
    const TaskId created = b.add(
        c.device, CreateChunk{c.id, static_cast<std::size_t>(c.region.volume()) * meta.elem_size});
    records_.record(c.id, c.region, created, true);
    if (!fill) continue;
    Fill payload{ChunkRef{c.id, c.region}, c.region, meta.elem_size, {}};
    std::memcpy(payload.value.data(), fill, meta.elem_size);
    records_.record(c.id, c.region, b.add(c.device, payload, {created}), true);
  }
  return finish(std::move(tasks));
}

void Planner::set_read_cache(std::vector<std::size_t> bytes_per_device) {
  bytes_per_device.resize(static_cast<std::size_t>(devices_), 0);
  read_cache_.set_limits(std::move(bytes_per_device));
}

Plan Planner::write_array(const ArrayMeta& meta, HostBytes data) {
  std::vector<Task> tasks;
  TaskBuilder b(tasks, last_task_);
  read_cache_.drop(meta.id, b);
  const Rect whole = Rect::of_shape(meta.shape);
  for (const ChunkMeta& c : meta.chunks) {
    std::vector<TaskId> deps;
    records_.write_deps(c.id, c.region, deps);
    const TaskId id = b.add(
        c.device, HostWrite{ChunkRef{c.id, c.region}, c.region, data, whole, meta.elem_size}, deps);
    records_.record(c.id, c.region, id, true);
  }
  return finish(std::move(tasks));
}

Plan Planner::read_array(const ArrayMeta& meta, void* dst) {
  std::vector<Task> tasks;
  TaskBuilder b(tasks, last_task_);
  const Rect whole = Rect::of_shape(meta.shape);
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
      std::vector<TaskId> deps;
      records_.read_deps(c.id, piece, deps);
      const TaskId id = b.add(
          c.device, ReadBack{ChunkRef{c.id, c.region}, piece, dst, whole, meta.elem_size}, deps);
      records_.record(c.id, piece, id, false);
    }
  }
  return finish(std::move(tasks));
}

Plan Planner::delete_array(const ArrayMeta& meta) {
  std::vector<Task> tasks;
  TaskBuilder b(tasks, last_task_);
  read_cache_.drop(meta.id, b);
  for (const ChunkMeta& c : meta.chunks) {
    std::vector<TaskId> deps;
    records_.write_deps(c.id, c.region, deps);
    b.add(c.device, DeleteChunk{c.id}, deps);
    records_.forget(c.id);
  }
  return finish(std::move(tasks));
}

}  // namespace gridspan::plan
