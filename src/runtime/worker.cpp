// Worker scheduler: dependency counts, ready queue, all-or-nothing staging with bounded
// bytes staged ahead per device, executors, completion and unstaging.
#include "runtime/worker.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "backend/regions.hpp"
#include "core/log.hpp"
#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"

namespace gridspan::runtime {

using plan::Task;
using plan::TaskId;

namespace {

bool runs_inline(const Task& t) {
  return std::holds_alternative<plan::CreateChunk>(t.payload) ||
         std::holds_alternative<plan::DeleteChunk>(t.payload) ||
         std::holds_alternative<plan::Barrier>(t.payload) ||
         std::holds_alternative<plan::RecvHost>(t.payload);
}

// The transfer a Recv or RecvHost waits for, or null.
const plan::TransferId* awaited_transfer(const Task& t) {
  if (auto* r = std::get_if<plan::Recv>(&t.payload)) return &r->transfer;
  if (auto* h = std::get_if<plan::RecvHost>(&t.payload)) return &h->transfer;
  return nullptr;
}

// The transfer's data must fill the region exactly.
void check_transfer_size(const Task& t, std::size_t got, const Rect& region, std::size_t elem) {
  const std::size_t want = static_cast<std::size_t>(region.volume()) * elem;
  if (got != want)
    throw NetError(fmt::format("task {} ({}) received {} bytes for a region of {} bytes ({})", t.id,
                               t.kind(), got, want, region.str()));
}

// Tasks that may be queued on an asynchronous device behind dependencies still running
// there: those that only touch device memory. Copies from and to the user's (pageable)
// host memory would make the queuing thread wait for the dependencies.
bool runs_on_device_alone(const Task& t) {
  return std::holds_alternative<plan::Execute>(t.payload) ||
         std::holds_alternative<plan::Copy>(t.payload) ||
         std::holds_alternative<plan::Fill>(t.payload) ||
         std::holds_alternative<plan::Reduce>(t.payload);
}

// Copies between host and device that the host waits for go to the device's transfer
// queues, apart from kernels they do not depend on.
backend::Device::Queue queue_of(const Task& t) {
  using Q = backend::Device::Queue;
  if (std::holds_alternative<plan::Send>(t.payload) ||
      std::holds_alternative<plan::ReadBack>(t.payload))
    return Q::to_host;
  if (std::holds_alternative<plan::Recv>(t.payload) ||
      std::holds_alternative<plan::HostWrite>(t.payload))
    return Q::from_host;
  return Q::compute;
}

// Tasks that still run when a dependency failed: they free memory or report the error.
bool runs_after_failure(const Task& t) {
  return std::holds_alternative<plan::DeleteChunk>(t.payload) ||
         std::holds_alternative<plan::CreateChunk>(t.payload);
}

// "kernel `mix` on device 1", "copy on device 0": a task as an error names it.
std::string describe(const Task& t) {
  if (auto* e = std::get_if<plan::Execute>(&t.payload))
    return fmt::format("kernel `{}` on device {}", e->executable->name(), t.device);
  return fmt::format("{} on device {}", t.kind(), t.device);
}

}  // namespace

std::string failed_task_name(int rank, TaskId task, const std::string& what) {
  return fmt::format("rank {}, task {} ({})", rank, task, what);
}

std::optional<TaskId> failed_task(const std::string& message) {
  unsigned long long rank = 0, task = 0;
  int end = 0;
  if (std::sscanf(message.c_str(), "rank %llu, task %llu (%n", &rank, &task, &end) != 2 || !end)
    return std::nullopt;
  return static_cast<TaskId>(task);
}

Worker::Worker(std::vector<backend::Device*> devices, MemoryManager& memory,
               std::size_t staging_bytes, bool stream_order)
    : devices_(std::move(devices)),
      memory_(memory),
      staging_limit_(devices_.size(), staging_bytes),
      stream_order_(stream_order),
      staged_bytes_(devices_.size(), 0),
      staged_tasks_(devices_.size(), 0) {
  // By default a device may have a quarter of its memory staged for queued tasks: enough
  // to keep several large superblocks queued on a GPU (one at a time would leave it idle
  // between them), little enough to leave room for streaming out-of-core data.
  for (std::size_t d = 0; d < devices_.size(); ++d)
    if (staging_bytes == 0)
      staging_limit_[d] = std::max(std::size_t(256) << 20, devices_[d]->memory_capacity() / 4);
  scheduler_ = std::thread([this] { scheduler_loop(); });
}

Worker::~Worker() {
  {
    std::unique_lock<AdaptiveMutex> lock(mutex_);
    ++waiting_all_;
    wake_waiters_.wait(lock, [&] { return pending_.empty(); });
    --waiting_all_;
    stop_ = true;
  }
  wake_scheduler_.notify_all();
  scheduler_.join();
  if (stats_.transfers_lent + stats_.transfers_refused > 0)
    log::info(
        "{} transfers copied by their receivers from this rank's memory, {} of them "
        "declined or out of reach (sent through the host instead)",
        stats_.transfers_lent + stats_.transfers_refused, stats_.transfers_refused);
  // Executor threads belong to the backend and may still be leaving a completion callback.
  while (callbacks_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void Worker::submit(std::vector<Task>&& tasks) {
  // The chunks each device task will use, announced to the memory manager before anything
  // can run, so that eviction knows what the queued tasks need next.
  std::vector<std::vector<ChunkUse>> uses(tasks.size());
  {
    std::vector<std::pair<plan::ChunkId, bool>> chunks;
    std::vector<TaskId> ids(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      ids[i] = tasks[i].id;
      if (runs_inline(tasks[i])) continue;
      chunks.clear();
      tasks[i].chunk_uses(chunks);
      for (auto& [chunk, write] : chunks) uses[i].push_back(ChunkUse{chunk, write});
    }
    memory_.announce(ids, uses);  // one lock for the batch
  }
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  std::vector<decltype(pending_)::node_type> finished;
  finished.swap(finished_);
  // All of the batch first: a task may depend on one that comes later in the batch.
  std::vector<Node*> nodes;
  nodes.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    Task& t = tasks[i];
    auto [it, inserted] = pending_.try_emplace(t.id);
    if (!inserted) throw Error(fmt::format("internal error: task {} submitted twice", t.id));
    it->second.task = std::move(t);
    it->second.uses = std::move(uses[i]);
    nodes.push_back(&it->second);
    max_submitted_ = std::max(max_submitted_, it->first);
  }
  for (Node* node : nodes) {
    TaskId id = node->task.id;
    if (const plan::TransferId* transfer = awaited_transfer(node->task)) {
      // Its data are one more thing to wait for, unless they came first (or failed).
      if (auto a = arrived_.find(*transfer); a != arrived_.end()) {
        if (auto h = held_.find(*transfer); h != held_.end()) h->second.node = node;
        take(*node, std::move(a->second));
        arrived_.erase(a);
      } else {
        ++node->missing;
        ++node->unordered;
        awaiting_[*transfer] = node;
      }
    }
    for (TaskId dep : node->task.deps) {
      auto p = pending_.find(dep);
      if (p != pending_.end() && dep != id) {
        ++node->missing;
        if (!ordered_on_device(p->second, *node)) ++node->unordered;
        p->second.successors.push_back(id);
      } else if (!failed_.empty()) {
        auto f = failed_.find(dep);
        if (f != failed_.end() && !node->error) node->error = f->second;
      }
    }
  }
  // Tasks ready at once are dispatched by the submitting thread: one hand-off fewer. So
  // are those whose unfinished dependencies are all queued on their device already.
  std::deque<Node*> work;
  for (Node* node : nodes)
    if (node->missing == 0 || releasable(*node)) {
      node->queued = true;
      work.push_back(node);
    }
  lock.unlock();
  if (!work.empty()) process(work, -1);
}

bool Worker::is_done(TaskId id) const {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  return id <= max_submitted_ && !pending_.count(id);
}

void Worker::wait(TaskId id) {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  finished_.clear();
  if (pending_.count(id)) {
    auto at = waited_.insert(id);
    wake_waiters_.wait(lock, [&] { return !pending_.count(id); });
    waited_.erase(at);
  }
  auto f = failed_.find(id);
  if (f != failed_.end()) {
    if (unreported_ == f->second) unreported_ = nullptr;
    std::rethrow_exception(f->second);
  }
}

void Worker::wait_all() {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  ++waiting_all_;
  wake_waiters_.wait(lock, [&] { return pending_.empty(); });
  --waiting_all_;
  finished_.clear();
  if (unreported_) {
    auto e = unreported_;
    unreported_ = nullptr;
    std::rethrow_exception(e);
  }
}

WorkerStats Worker::stats() const {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  return stats_;
}

void Worker::scheduler_loop() {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
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
    std::deque<Node*> work;
    work.swap(ready_);
    lock.unlock();
    process(work, -1);
    lock.lock();
  }
}

// Runs ready tasks until none is left: inline tasks here; device tasks are admitted,
// staged and handed to their device or, when `here` is that device's executor thread, run
// right here, so a finished task's successors continue on the same thread without a
// hand-off.
void Worker::process(std::deque<Node*>& work, int here) {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  while (!work.empty()) {
    Node* node = work.front();
    work.pop_front();
    if (node->missing > 0 && node->error) {
      // Released early, but a dependency has failed since: it waits for the others, then
      // is skipped like any task after a failure.
      node->queued = false;
      continue;
    }
    const bool skip = node->error && !runs_after_failure(node->task);
    if (skip) drop_lent(*node);
    if (skip || runs_inline(node->task)) {
      run_inline(node, skip, lock, work);
      continue;
    }
    std::exception_ptr error = size_of(node);
    if (!error) {
      const Staged staged = admit_and_stage(node, lock, work, error);
      if (staged == Staged::later) continue;
    }
    if (error) {
      fail_unstaged(node, error, work);
      continue;
    }
    mark_lending(*node);
    if (node->task.device == here && !devices_[here]->asynchronous())
      run_here(node, lock, work);
    else
      launch(node, work);
  }
  if (progress_ && !blocked_.empty()) wake_scheduler_.notify_one();
}

// Create, Delete, Barrier and RecvHost tasks run on the calling thread (a skipped one only
// finishes, with its error). Takes and gives back the lock.
void Worker::run_inline(Node* node, bool skip, std::unique_lock<AdaptiveMutex>& lock,
                        std::deque<Node*>& work) {
  Task& t = node->task;
  std::exception_ptr error = node->error;
  if (!node->uses.empty()) memory_.retire(t.id, node->uses);
  if (!skip) {
    lock.unlock();
    try {
      if (auto* c = std::get_if<plan::CreateChunk>(&t.payload)) {
        memory_.create(c->chunk, c->bytes, t.device);
      } else if (auto* d = std::get_if<plan::DeleteChunk>(&t.payload)) {
        memory_.destroy(d->chunk);
      } else if (auto* h = std::get_if<plan::RecvHost>(&t.payload)) {
        if (!node->lent.empty())
          throw NetError(
              fmt::format("internal error: task {} (RecvHost) got lent device memory", t.id));
        check_transfer_size(t, node->transfer.size(), h->region, h->elem_size);
        backend::copy_region(h->dst, h->dst_rect, node->transfer.data(), h->region, h->region,
                             h->elem_size);
        node->transfer = Bytes();  // back to the pool now
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    lock.lock();
  }
  finish(node, error, work);
}

// The bytes of the task's chunks, counted once (they exist by the time it is ready).
std::exception_ptr Worker::size_of(Node* node) {
  if (node->sized) return nullptr;
  const Task& t = node->task;
  std::exception_ptr error;
  std::size_t bytes = 0;
  try {
    for (const ChunkUse& use : node->uses) bytes += memory_.bytes(use.chunk);
  } catch (const Error& e) {
    error = std::make_exception_ptr(
        Error(fmt::format("{} (task {} {} on device {})", e.what(), t.id, t.kind(), t.device)));
  }
  node->staged_bytes = bytes;
  node->sized = true;
  return error;
}

// Admission (at most the staging limit of bytes per device, beyond the first task), then
// staging: at once when every chunk is resident, else without the scheduler's lock, since
// staging may move data between spaces (disk I/O) and finishing tasks must not wait for
// that. `later`: the task waits (for memory, or tries again now after an unstage).
Worker::Staged Worker::admit_and_stage(Node* node, std::unique_lock<AdaptiveMutex>& lock,
                                       std::deque<Node*>& work, std::exception_ptr& error) {
  const int dev = node->task.device;
  if (staged_tasks_[dev] > 0 && staged_bytes_[dev] + node->staged_bytes > staging_limit_[dev]) {
    ++stats_.stage_retries;
    blocked_.push_back(node);
    if (!held_.empty() || !lent_.empty()) ease_memory();
    return Staged::later;
  }
  const int ahead = staged_tasks_[dev];
  staged_bytes_[dev] += node->staged_bytes;
  ++staged_tasks_[dev];
  const uint64_t epoch = unstage_epoch_;
  bool staged = false;
  try {
    staged = memory_.try_stage_resident(node->uses);
  } catch (...) {
    error = std::current_exception();
  }
  if (!staged && !error) {
    lock.unlock();
    try {
      staged = memory_.try_stage(node->uses, ahead);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
  }
  if (staged) return Staged::now;
  staged_bytes_[dev] -= node->staged_bytes;
  --staged_tasks_[dev];
  if (error) return Staged::now;  // the caller finishes it with the error
  ++stats_.stage_retries;
  // Something unstaged while it tried: try again now, or it would wait for the next.
  if (unstage_epoch_ != epoch) {
    work.push_back(node);
  } else {
    blocked_.push_back(node);
    if (!held_.empty() || !lent_.empty()) ease_memory();
  }
  return Staged::later;
}

// A task that could not be staged (or sized) fails; one released early is reported once
// its dependencies are.
void Worker::fail_unstaged(Node* node, const std::exception_ptr& error, std::deque<Node*>& work) {
  drop_lent(*node);
  memory_.retire(node->task.id, node->uses);
  if (node->missing > 0) {
    node->ran = true;
    node->run_error = error;
  } else {
    finish(node, error, work);
  }
}

// A Send that lends its memory, and a Recv that copies lent memory, end only once the other
// side is done: nothing may be queued on the device behind them.
void Worker::mark_lending(Node& node) {
  const Task& t = node.task;
  if (auto* send = std::get_if<plan::Send>(&t.payload))
    node.lends = send->to_device && link_ &&
                 link_->may_lend(send->to,
                                 static_cast<std::size_t>(send->region.volume()) * send->elem_size);
  else if (std::holds_alternative<plan::Recv>(t.payload) && !node.lent.empty())
    node.lends = true, held_.erase(std::get<plan::Recv>(t.payload).transfer);
}

// On this device's own executor thread (a synchronous device): the task runs now.
void Worker::run_here(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work) {
  lock.unlock();
  std::exception_ptr e;
  try {
    run_task(node);
  } catch (...) {
    e = std::current_exception();
  }
  if (after_run(node, e)) {
    unstage(node, e);
    lock.lock();
    finish(node, e, work);
  } else {
    lock.lock();
  }
}

// Submits the task to its device. Dependencies still running were queued on this device
// before: it orders this work after them itself (stream waits on a GPU), without a round
// trip through the host; successors on this device whose other dependencies are queued
// there too can go now.
void Worker::launch(Node* node, std::deque<Node*>& work) {
  const Task& t = node->task;
  const int dev = t.device;
  std::vector<backend::Device::Ticket> after;
  if (node->missing > 0)
    for (TaskId dep : t.deps)
      if (auto p = pending_.find(dep); p != pending_.end() && p->second.launched)
        after.push_back(p->second.ticket);
  node->launched = true;
  node->ticket = devices_[dev]->submit_on(
      queue_of(t), [this, node] { run_task(node); },
      [this, node, dev](std::exception_ptr e) { ran_on_device(node, dev, e); }, after);
  if (devices_[dev]->asynchronous()) ++stats_.tasks_submitted;
  if (!after.empty()) ++stats_.tasks_released_early;
  for (TaskId s : node->successors) {
    Node& succ = pending_.at(s);
    if (ordered_on_device(*node, succ) && --succ.unordered == 0 && releasable(succ)) {
      succ.queued = true;
      work.push_back(&succ);
    }
  }
}

// GRIDSPAN_CHECK_TRANSFERS (a debugging aid; meaningful with GRIDSPAN_STREAM_ORDER=0, when
// nothing can touch a transfer's region before its task is reported): once a Send or Recv
// has run, the region is read again from the device and compared with the bytes sent or
// received. A difference is an internal error naming the task.
void Worker::check_transfer(Node* node, std::exception_ptr& error) {
  const plan::Task& t = node->task;
  const plan::ChunkRef* chunk = nullptr;
  const Rect* region = nullptr;
  std::size_t elem = 0;
  if (auto* s = std::get_if<plan::Send>(&t.payload)) {
    chunk = &s->src, region = &s->region, elem = s->elem_size;
  } else if (auto* r = std::get_if<plan::Recv>(&t.payload)) {
    chunk = &r->dst, region = &r->region, elem = r->elem_size;
  } else {
    return;
  }
  try {
    backend::Device& dev = *devices_[t.device];
    const std::size_t bytes = static_cast<std::size_t>(chunk->rect.volume()) * elem;
    std::vector<unsigned char> whole(bytes), now(node->transfer.size());
    dev.copy_to_host(whole.data(), memory_.data(chunk->id), bytes);
    backend::copy_region(now.data(), *region, whole.data(), chunk->rect, *region, elem);
    if (!(node->transfer == now)) {
      std::size_t first = 0;
      while (first < now.size() && now[first] == node->transfer.data()[first]) ++first;
      throw Error(fmt::format(
          "internal error (GRIDSPAN_CHECK_TRANSFERS): task {} ({}) of transfer region {} of "
          "chunk {}: the device holds other bytes than were {} (first at byte {} of {})",
          t.id, t.kind(), region->str(), chunk->id,
          std::holds_alternative<plan::Send>(t.payload) ? "sent" : "received", first, now.size()));
    }
  } catch (...) {
    if (!error) error = std::current_exception();
  }
}

// After a task ran on its device (without the lock): a Send's data go to their rank now
// that the device has read them (or where they lie, when it lends them); a Recv that
// copied lent memory tells the sender it is done with it.
bool Worker::after_run(Node* node, std::exception_ptr& error) {
  if (check_transfers_ && !error && node->lent.empty()) check_transfer(node, error);
  const Task& t = node->task;
  if (auto* r = std::get_if<plan::Recv>(&t.payload); r && !node->lent.empty()) {
    DataLink* link = this->link();
    try {
      if (!link)
        throw NetError(
            fmt::format("internal error: task {} copied lent memory, but "
                        "this worker has no connection to other processes",
                        t.id));
      if (node->lend_refused && !error) {
        // Out of this device's reach: the bytes come the long way; the Recv, still staged,
        // waits for them (registered before it asks, as they may come at once).
        node->lent.clear();
        node->refetch = true;
        return park(awaiting_, r->transfer, node,
                    [&] { link->lent_done(r->from, r->transfer, LentReply::unreachable); });
      }
      if (!node->lend_refused) devices_[t.device]->release_lent(node->lent);
      node->lent.clear();
      link->lent_done(r->from, r->transfer, LentReply::copied);
    } catch (...) {
      node->refetch = false;
      if (!error) error = std::current_exception();
    }
    return true;
  }
  auto* s = std::get_if<plan::Send>(&t.payload);
  if (!s || error) return true;
  DataLink* link = this->link();
  try {
    if (!link)
      throw NetError(
          fmt::format("internal error: task {} sends to rank {}, but this worker has "
                      "no connection to other processes",
                      t.id, s->to));
    if (!node->lent.empty())  // the receiver copies from this device; then the Send ends
      return park(lent_, s->transfer, node,
                  [&] { link->send_lent(s->to, s->transfer, node->lent_rect, node->lent); });
    link->send(s->to, s->transfer, std::move(node->transfer));
  } catch (...) {
    error = std::current_exception();
  }
  return true;
}

// Registers a task that waits for the other side (in `where`, by transfer) before `tell`
// asks it, as the answer may come at once; returns false (not done yet). When `tell` fails
// the task is taken back and the failure is thrown, unless fail_transfers took it first
// (and finishes it).
bool Worker::park(std::unordered_map<plan::TransferId, Node*>& where, plan::TransferId transfer,
                  Node* node, const std::function<void()>& tell) {
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    where[transfer] = node;
  }
  try {
    tell();
  } catch (...) {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    if (where.erase(transfer)) throw;
  }
  return false;
}

DataLink* Worker::link() const {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  return link_;  // connected before any Send is submitted, disconnected when idle
}

// Unstages a task that ran and finishes it (or, when a dependency is not reported done
// yet, marks it to finish after that one); the successors it made ready run here.
void Worker::complete(Node* node, std::exception_ptr error, int dev) {
  unstage(node, error);
  std::deque<Node*> next;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    if (node->missing > 0) {
      // Done on the device before a dependency was reported done: it is reported after
      // that one (and fails with it).
      node->ran = true;
      node->run_error = error;
    } else {
      finish(node, error, next);
    }
    if (next.empty() && progress_ && !blocked_.empty()) wake_scheduler_.notify_one();
  }
  if (!next.empty()) process(next, dev);
}

// A staged task's work once more (a Send that sends its bytes after all, a Recv that got
// them): queued on its device alone, as nothing was queued behind it.
void Worker::relaunch(Node* node) {
  const int dev = node->task.device;
  devices_[dev]->submit_on(
      queue_of(node->task), [this, node] { run_task(node); },
      [this, node, dev](std::exception_ptr e) { ran_on_device(node, dev, e); }, {});
}

// A device's report that a task's work has finished (on its executor or completion thread).
void Worker::ran_on_device(Node* node, int dev, std::exception_ptr error) {
  callbacks_.fetch_add(1, std::memory_order_relaxed);
  if (after_run(node, error)) complete(node, error, dev);
  // The last touch of the worker: its destructor waits for it.
  callbacks_.fetch_sub(1, std::memory_order_release);
}

void Worker::deliver_lent(plan::TransferId transfer, int from, const Rect& rect,
                          std::vector<unsigned char> lent) {
  if (lent.empty())
    throw NetError(fmt::format("transfer {}: lent memory without a description", transfer));
  arrive(transfer, Arrival{{}, nullptr, std::move(lent), rect, from});
}

void Worker::lent_done(plan::TransferId transfer, LentReply reply) {
  const bool copied = reply == LentReply::copied;
  Node* node = nullptr;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    auto it = lent_.find(transfer);
    if (it == lent_.end())
      throw NetError(fmt::format(
          "transfer {}: the receiver is done with memory this rank does not lend", transfer));
    node = it->second;
    lent_.erase(it);
    ++(copied ? stats_.transfers_lent : stats_.transfers_refused);
  }
  callbacks_.fetch_add(1, std::memory_order_relaxed);
  node->lent.clear();
  if (copied) {
    complete(node, nullptr, -1);
  } else {
    node->lend_refused = true;  // the bytes, read on the device as for any Send
    relaunch(node);
  }
  callbacks_.fetch_sub(1, std::memory_order_release);
}

void Worker::recall_lent(plan::TransferId transfer) {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  decline(transfer);  // a copy begun (or done) ends on its own
}

void Worker::ease_memory() {
  std::vector<plan::TransferId> held;
  for (const auto& [transfer, h] : held_) held.push_back(transfer);
  for (plan::TransferId t : held) decline(t);
  if (!link_) return;
  for (auto& [transfer, node] : lent_)
    if (!node->recalled) {
      node->recalled = true;
      link_->recall_lent(std::get<plan::Send>(node->task.payload).to, transfer);
    }
}

// A Recv that will not run (it fails) is done with the memory lent to it: the Send ends.
void Worker::drop_lent(Node& node) {
  auto* r = std::get_if<plan::Recv>(&node.task.payload);
  if (!r || node.lent.empty()) return;
  held_.erase(r->transfer);
  node.lent.clear();
  try {
    if (link_) link_->lent_done(r->from, r->transfer, LentReply::copied);
  } catch (...) {
    // The lending rank is gone: nothing waits for the reply.
  }
}

// Lent memory a Recv holds but has not begun to copy goes back (the bytes come instead),
// unless the Recv is on its way to its device already (in a work list).
bool Worker::decline(plan::TransferId transfer) {
  auto it = held_.find(transfer);
  if (it == held_.end()) return false;
  auto [node, from] = it->second;
  if (!node) {
    arrived_.erase(transfer);  // its Recv, once submitted, waits for the bytes
  } else {
    auto b = std::find(blocked_.begin(), blocked_.end(), node);
    if (node->missing == 0 && b == blocked_.end()) return false;
    if (b != blocked_.end()) blocked_.erase(b), node->queued = false;
    node->lent.clear();
    ++node->missing;
    ++node->unordered;
    awaiting_[transfer] = node;
  }
  held_.erase(it);
  if (link_) link_->lent_done(from, transfer, LentReply::declined);
  return true;
}

// Both are read under the lock (by finishing tasks on executor threads): set under it too.
void Worker::connect(DataLink* link) {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  link_ = link;
}

void Worker::on_barrier(std::function<void(plan::TaskId, std::exception_ptr)> f) {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  on_barrier_ = std::move(f);
}

void Worker::deliver_failure(plan::TransferId transfer, std::exception_ptr error) {
  arrive(transfer, Arrival{{}, std::move(error), {}, {}, -1});
}

void Worker::deliver(plan::TransferId transfer, Bytes data) {
  arrive(transfer, Arrival{std::move(data), nullptr, {}, {}, -1});
}

// A transfer's data (or why they won't come) for its Recv, or kept until it is submitted.
void Worker::arrive(plan::TransferId transfer, Arrival arrival) {
  std::deque<Node*> work;
  Node* refetched = nullptr;
  std::exception_ptr refetch_error;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    auto it = awaiting_.find(transfer);
    if (it == awaiting_.end()) {
      const int from = arrival.lent.empty() ? -1 : arrival.from;
      if (!arrived_.emplace(transfer, std::move(arrival)).second)
        throw NetError(fmt::format("transfer {} arrived twice", transfer));
      if (from >= 0) held_[transfer] = Held{nullptr, from};
      return;
    }
    Node* node = it->second;
    awaiting_.erase(it);
    if (node->refetch) {  // a staged Recv that could not copy lent memory: its bytes
      node->refetch = false;
      std::exception_ptr error = arrival.error;
      take(*node, std::move(arrival));
      if (!node->lent.empty())
        error = std::make_exception_ptr(NetError(fmt::format(
            "transfer {}: lent memory again where its bytes were asked for", transfer)));
      refetched = node;
      refetch_error = error;
    } else {
      if (!arrival.lent.empty()) held_[transfer] = Held{node, arrival.from};
      take(*node, std::move(arrival));
      --node->unordered;
      if (--node->missing == 0 && !node->queued && !node->launched) {
        node->queued = true;
        work.push_back(node);
      }
    }
  }
  if (refetched) {
    callbacks_.fetch_add(1, std::memory_order_relaxed);
    if (refetch_error)
      complete(refetched, refetch_error, -1);
    else
      relaunch(refetched);
    callbacks_.fetch_sub(1, std::memory_order_release);
  }
  if (!work.empty()) process(work, -1);
}

void Worker::fail_transfers(const std::exception_ptr& error) {
  std::vector<plan::TransferId> waiting;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    for (const auto& [transfer, node] : awaiting_) waiting.push_back(transfer);
  }
  for (plan::TransferId t : waiting) arrive(t, Arrival{{}, error, {}, {}, -1});
  // Sends whose lent memory would be waited for forever end with the error too.
  std::vector<Node*> lent;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    for (const auto& [transfer, node] : lent_) lent.push_back(node);
    lent_.clear();
  }
  callbacks_.fetch_add(1, std::memory_order_relaxed);
  for (Node* node : lent) complete(node, error, -1);
  callbacks_.fetch_sub(1, std::memory_order_release);
}

void Worker::take(Node& node, Arrival arrival) {
  node.transfer = std::move(arrival.data);
  node.lent = std::move(arrival.lent);
  node.lent_rect = arrival.lent_rect;
  if (arrival.error && !node.error) node.error = arrival.error;
}

// Unpins a task's chunks (a failure here becomes the task's error). Without the lock.
void Worker::unstage(Node* node, std::exception_ptr& error) {
  try {
    memory_.unstage_and_retire(node->task.id, node->uses);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  staged_bytes_[node->task.device] -= node->staged_bytes;
  --staged_tasks_[node->task.device];
  progress_ = true;
  ++unstage_epoch_;
}

void Worker::run_task(Node* node) {
  if (!observer_) return run_payload(node);
  struct Report {  // also when the task throws
    Observer& observer;
    const Node& node;
    double start = observer_now_us();
    ~Report() {
      const Task& t = node.task;
      auto* e = std::get_if<plan::Execute>(&t.payload);
      observer.task_ran(TraceEvent{e ? e->executable->name() : std::string(t.kind()), t.kind(),
                                   t.device, start, observer_now_us(), t.id, node.staged_bytes});
    }
  } report{*observer_, *node};
  run_payload(node);
}

void Worker::run_payload(Node* node) {
  Task& t = node->task;
  backend::Device& dev = *devices_[t.device];
  auto data = [&](const plan::ChunkRef& c) { return memory_.data(c.id); };
  std::visit(
      [&](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, plan::Fill>) {
          dev.fill(data(p.dst), p.dst.rect, p.region, p.value.data(), p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Copy>) {
          dev.copy(data(p.dst), p.dst.rect, data(p.src), p.src.rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Reduce>) {
          std::size_t elem = dtype_size(p.dtype);
          auto identity = plan::reduce_identity(p.op, p.dtype);
          dev.fill(data(p.dst), p.dst.rect, p.dst.rect, identity.data(), elem);
          for (auto& src : p.srcs)
            dev.combine(data(p.dst), p.dst.rect, data(src), src.rect, p.op, p.dtype);
        } else if constexpr (std::is_same_v<P, plan::HostWrite>) {
          dev.upload(data(p.dst), p.dst.rect, p.data->data(), p.data_rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::ReadBack>) {
          dev.download(p.dst, p.dst_rect, data(p.src), p.src.rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Send>) {
          const std::size_t n = static_cast<std::size_t>(p.region.volume()) * p.elem_size;
          if (node->lends && !node->lend_refused) {
            // The receiver copies the region from this device itself, if the device can
            // lend its memory; else the bytes go as for any Send.
            node->lent =
                dev.lend(data(p.src), static_cast<std::size_t>(p.src.rect.volume()) * p.elem_size);
            node->lent_rect = p.src.rect;
            if (!node->lent.empty()) return;
          }
          // Room for what a DataLink appends (a number); pinned where the backend has it.
          node->transfer = Bytes::uninitialized(n, 16);
          dev.download(node->transfer.data(), p.region, data(p.src), p.src.rect, p.region,
                       p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Recv>) {
          if (!node->lent.empty()) {
            if (!node->lent_rect.contains(p.region))
              throw NetError(fmt::format("task {} (Recv) of region {}: rank {} lent the box {}",
                                         t.id, p.region.str(), p.from, node->lent_rect.str()));
            try {
              dev.copy_lent(data(p.dst), p.dst.rect, node->lent, node->lent_rect, p.region,
                            p.elem_size);
            } catch (const backend::LendingError& e) {
              node->lend_refused = true;  // the sender sends the bytes instead
              log::info("rank {} sends its data the long way: {}", p.from, e.what());
            }
            return;
          }
          check_transfer_size(t, node->transfer.size(), p.region, p.elem_size);
          dev.upload(data(p.dst), p.dst.rect, node->transfer.data(), p.region, p.region,
                     p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Execute>) {
          void* ptrs[64];
          std::vector<void*> heap;
          std::size_t n = p.arrays.size();
          void** slot = ptrs;
          if (n > 64) heap.resize(n), slot = heap.data();
          for (std::size_t i = 0; i < n; ++i)
            slot[i] = p.arrays[i].chunk.id ? data(p.arrays[i].chunk) : nullptr;
          p.executable->run(plan::ExecFrame{p, slot, t.device, &dev});
        }
      },
      t.payload);
}

bool Worker::ordered_on_device(const Node& dep, const Node& succ) const {
  return stream_order_ && dep.launched && !dep.lends && dep.task.device == succ.task.device &&
         runs_on_device_alone(succ.task) && devices_[succ.task.device]->asynchronous();
}

bool Worker::releasable(const Node& node) const {
  return node.missing > 0 && node.unordered == 0 && !node.queued && !node.launched && !node.error &&
         runs_on_device_alone(node.task);
}

// Under the lock: records the end of a task and appends the successors it made ready (or
// releasable). A successor that ran to its end before this task was reported done is
// finished here too, and so on down the chain.
void Worker::finish(Node* first, std::exception_ptr first_error, std::deque<Node*>& ready) {
  std::vector<std::pair<Node*, std::exception_ptr>> todo{{first, first_error}};
  while (!todo.empty()) {
    auto [node, error] = todo.back();
    todo.pop_back();
    TaskId id = node->task.id;
    // A barrier after a failure reports the failure it inherited; so does a task released
    // early whose dependency failed after it was queued (it ran on the failed one's output).
    if (!error && node->error &&
        (node->launched || std::holds_alternative<plan::Barrier>(node->task.payload)))
      error = node->error;
    // Between processes, a task's own failure names the rank and the task.
    if (error && !node->error && link_)
      error = error_in(error, failed_task_name(link_->rank(), id, describe(node->task)));
    if (on_barrier_ && std::holds_alternative<plan::Barrier>(node->task.payload))
      on_barrier_(id, error);
    // The receiving rank would wait for these data forever: it hears why they won't come.
    if (auto* s = std::get_if<plan::Send>(&node->task.payload); s && error && link_)
      link_->fail(s->to, s->transfer, error);
    if (error) {
      failed_[id] = error;
      ++stats_.tasks_failed;
      if (!unreported_ && !node->error) unreported_ = error;
    } else {
      ++stats_.tasks_run;
    }
    for (TaskId s : node->successors) {
      Node& succ = pending_.at(s);
      if (error && !succ.error) succ.error = error;
      if (!ordered_on_device(*node, succ)) --succ.unordered;
      if (--succ.missing == 0) {
        if (succ.ran) {
          todo.emplace_back(&succ, succ.run_error);
        } else if (!succ.queued && !succ.launched) {
          succ.queued = true;
          ready.push_back(&succ);
        }
      } else if (releasable(succ)) {
        succ.queued = true;
        ready.push_back(&succ);
      }
    }
    bool waited = waited_.count(id) > 0;
    // The node is freed by the next submit() or wait, on the thread that allocated it: a
    // free from another thread costs the allocator's arena lock and cache lines on every
    // task. Host data a write carried goes at once.
    if (auto* w = std::get_if<plan::HostWrite>(&node->task.payload)) w->data.reset();
    finished_.push_back(pending_.extract(id));
    if (waited || (waiting_all_ > 0 && pending_.empty())) wake_waiters_.notify_all();
  }
}

}  // namespace gridspan::runtime
