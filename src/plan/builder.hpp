// Appends tasks to a plan under construction: ids from the planner's counter, dependencies
// made unique, so a pass says only what a task is ("a copy on device 1 after these").
#pragma once

#include <algorithm>
#include <vector>

#include "plan/task.hpp"

namespace gridspan::plan {

/// Sorts `deps` and drops repeats.
inline void unique(std::vector<TaskId>& deps) {
  if (deps.size() < 2) return;
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
}

class TaskBuilder {
 public:
  TaskBuilder(std::vector<Task>& tasks, TaskId& last) : tasks_(tasks), last_(last) {}

  /// The next task id (for a task appended later, after tasks it needs are).
  TaskId next_id() { return ++last_; }
  /// Appends a task of `device` doing `payload` after `deps`; `id` from next_id() when one
  /// was taken for it, else a new one. Returns its id.
  TaskId add(int device, Payload payload, std::vector<TaskId> deps = {}, TaskId id = 0) {
    Task t;
    t.id = id ? id : next_id();
    t.device = device;
    unique(deps);
    t.deps = std::move(deps);
    t.payload = std::move(payload);
    tasks_.push_back(std::move(t));
    return tasks_.back().id;
  }
  std::vector<Task>& tasks() { return tasks_; }

 private:
  std::vector<Task>& tasks_;
  TaskId& last_;
};

}  // namespace gridspan::plan
