// Worker scheduler: dependency counts, ready queue, all-or-nothing staging with bounded
// bytes staged ahead per device, executors, completion and unstaging.
#include "gridspan/runtime/worker.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "gridspan/core/log.hpp"
#include "gridspan/plan/planner.hpp"

namespace gridspan::runtime {

using plan::Task;
using plan::TaskId;

namespace {

bool runs_inline(const Task& t) {
  return std::holds_alternative<plan::CreateChunk>(t.payload) ||
         std::holds_alternative<plan::DeleteChunk>(t.payload) ||
         std::holds_alternative<plan::Barrier>(t.payload);
}

// Tasks that still run when a dependency failed: they free memory or report the error.
bool runs_after_failure(const Task& t) {
  return std::holds_alternative<plan::DeleteChunk>(t.payload) ||
         std::holds_alternative<plan::CreateChunk>(t.payload);
}

}  // namespace

Worker::Worker(std::vector<backend::Device*> devices, MemoryManager& memory,
               std::size_t staging_bytes)
    : devices_(std::move(devices)),
      memory_(memory),
      staging_limit_(staging_bytes),
      staged_bytes_(devices_.size(), 0),
      staged_tasks_(devices_.size(), 0) {
  scheduler_ = std::thread([this] { scheduler_loop(); });
}

Worker::~Worker() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_waiters_.wait(lock, [&] { return pending_.empty(); });
    stop_ = true;
  }
  wake_scheduler_.notify_all();
  scheduler_.join();
}

void Worker::submit(std::vector<Task>&& tasks) {
  std::lock_guard<std::mutex> lock(mutex_);
  // All of the batch first: a task may depend on one that comes later in the batch.
  std::vector<Node*> nodes;
  nodes.reserve(tasks.size());
  for (Task& t : tasks) {
    auto [it, inserted] = pending_.try_emplace(t.id);
    if (!inserted) throw Error(fmt::format("internal error: task {} submitted twice", t.id));
    it->second.task = std::move(t);
    nodes.push_back(&it->second);
    max_submitted_ = std::max(max_submitted_, it->first);
  }
  for (Node* node : nodes) {
    TaskId id = node->task.id;
    for (TaskId dep : node->task.deps) {
      auto p = pending_.find(dep);
      if (p != pending_.end() && dep != id) {
        ++node->missing;
        p->second.successors.push_back(id);
      } else if (!failed_.empty()) {
        auto f = failed_.find(dep);
        if (f != failed_.end() && !node->error) node->error = f->second;
      }
    }
  }
  for (Node* node : nodes)
    if (node->missing == 0) ready_.push_back(node);
  wake_scheduler_.notify_one();
}

bool Worker::is_done(TaskId id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return id <= max_submitted_ && !pending_.count(id);
}

void Worker::wait(TaskId id) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_waiters_.wait(lock, [&] { return !pending_.count(id); });
  auto f = failed_.find(id);
  if (f != failed_.end()) {
    if (unreported_ == f->second) unreported_ = nullptr;
    std::rethrow_exception(f->second);
  }
}

void Worker::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_waiters_.wait(lock, [&] { return pending_.empty(); });
  if (unreported_) {
    auto e = unreported_;
    unreported_ = nullptr;
    std::rethrow_exception(e);
  }
}

WorkerStats Worker::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Worker::scheduler_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_scheduler_.wait(
        lock, [&] { return stop_ || !ready_.empty() || (progress_ && !blocked_.empty()); });
    if (stop_) return;
    if (progress_ && !blocked_.empty()) {
      // Something was unstaged: the tasks that waited for memory go first.
      ready_.insert(ready_.begin(), blocked_.begin(), blocked_.end());
      blocked_.clear();
    }
    progress_ = false;
    while (!ready_.empty()) {
      Node* node = ready_.front();
      ready_.pop_front();
      if (!dispatch(node)) blocked_.push_back(node);
    }
  }
}

// Under the lock. Inline tasks complete here; others are staged and handed to an executor.
bool Worker::dispatch(Node* node) {
  Task& t = node->task;
  if (node->error && !runs_after_failure(t)) {
    auto error = node->error;
    TaskId id = t.id;
    mutex_.unlock();
    complete(id, error);
    mutex_.lock();
    return true;
  }
  if (runs_inline(t)) {
    std::exception_ptr error = node->error;
    TaskId id = t.id;
    mutex_.unlock();
    try {
      if (auto* c = std::get_if<plan::CreateChunk>(&t.payload))
        memory_.create(c->chunk, c->bytes, t.device);
      else if (auto* d = std::get_if<plan::DeleteChunk>(&t.payload))
        memory_.destroy(d->chunk);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    complete(id, error);
    mutex_.lock();
    return true;
  }
  if (node->uses.empty()) {
    std::vector<std::pair<plan::ChunkId, bool>> uses;
    t.chunk_uses(uses);
    node->uses.reserve(uses.size());
    std::size_t bytes = 0;
    try {
      for (auto& [chunk, write] : uses) {
        node->uses.push_back(ChunkUse{chunk, write});
        bytes += memory_.bytes(chunk);
      }
    } catch (const Error& e) {
      node->uses.clear();
      TaskId id = t.id;
      auto error = std::make_exception_ptr(
          Error(fmt::format("{} (task {} {} on device {})", e.what(), id, t.kind(), t.device)));
      mutex_.unlock();
      complete(id, error);
      mutex_.lock();
      return true;
    }
    node->staged_bytes = bytes;
  }
  int dev = t.device;
  if (staged_tasks_[dev] > 0 && staged_bytes_[dev] + node->staged_bytes > staging_limit_) {
    ++stats_.stage_retries;
    return false;
  }
  bool staged = false;
  std::exception_ptr error;
  try {
    staged = memory_.try_stage(node->uses);
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    TaskId id = t.id;
    mutex_.unlock();
    complete(id, error);
    mutex_.lock();
    return true;
  }
  if (!staged) {
    ++stats_.stage_retries;
    return false;
  }
  staged_bytes_[dev] += node->staged_bytes;
  ++staged_tasks_[dev];
  ++running_;
  devices_[dev]->submit([this, node] { run_task(node); },
                        [this, node](std::exception_ptr e) {
                          try {
                            memory_.unstage(node->uses);
                          } catch (...) {
                            if (!e) e = std::current_exception();
                          }
                          {
                            std::lock_guard<std::mutex> lock(mutex_);
                            staged_bytes_[node->task.device] -= node->staged_bytes;
                            --staged_tasks_[node->task.device];
                            --running_;
                            progress_ = true;
                          }
                          complete(node->task.id, e);
                        });
  return true;
}

void Worker::run_task(Node* node) {
  Task& t = node->task;
  auto data = [&](const plan::ChunkRef& c) { return memory_.data(c.id); };
  std::visit(
      [&](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, plan::Fill>) {
          fill_region(data(p.dst), p.dst.rect, p.region, p.value.data(), p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Copy>) {
          copy_region(data(p.dst), p.dst.rect, data(p.src), p.src.rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Reduce>) {
          std::size_t elem = dtype_size(p.dtype);
          auto identity = plan::reduce_identity(p.op, p.dtype);
          fill_region(data(p.dst), p.dst.rect, p.dst.rect, identity.data(), elem);
          for (auto& src : p.srcs)
            combine_region(data(p.dst), p.dst.rect, data(src), src.rect, p.op, p.dtype);
        } else if constexpr (std::is_same_v<P, plan::HostWrite>) {
          copy_region(data(p.dst), p.dst.rect, p.data->data(), p.data_rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::ReadBack>) {
          copy_region(p.dst, p.dst_rect, data(p.src), p.src.rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Execute>) {
          void* ptrs[64];
          std::vector<void*> heap;
          std::size_t n = p.arrays.size();
          void** slot = ptrs;
          if (n > 64) heap.resize(n), slot = heap.data();
          for (std::size_t i = 0; i < n; ++i)
            slot[i] = p.arrays[i].chunk.id ? data(p.arrays[i].chunk) : nullptr;
          p.executable->run(plan::ExecFrame{p, slot, t.device});
        }
      },
      t.payload);
}

void Worker::complete(TaskId id, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Node& node = it->second;
  // A barrier or deletion after a failure reports the failure it inherited.
  if (!error && node.error && std::holds_alternative<plan::Barrier>(node.task.payload))
    error = node.error;
  if (error) {
    failed_[id] = error;
    ++stats_.tasks_failed;
    if (!unreported_ && !node.error) unreported_ = error;
  } else {
    ++stats_.tasks_run;
  }
  for (TaskId s : node.successors) {
    Node& succ = pending_.at(s);
    if (error && !succ.error) succ.error = error;
    if (--succ.missing == 0) ready_.push_back(&succ);
  }
  pending_.erase(it);
  wake_scheduler_.notify_one();
  wake_waiters_.notify_all();
}

}  // namespace gridspan::runtime
