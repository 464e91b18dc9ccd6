// Worker scheduler: dependency counts, ready queue, all-or-nothing staging with bounded
// bytes staged ahead per device, executors, completion and unstaging.
#include "runtime/worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "core/scratch.hpp"
#include "core/thread_name.hpp"
#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"

namespace gridspan::runtime {

// Kernels of one launch on one GPU go as one submission (one kernel launch over all their
// superblocks, where the backend can): up to this many, of at most GRIDSPAN_BATCH_BLOCKS
// blocks each. Only small ones: a launch costs them as much as they run, while large ones
// run slower as parts of one launch than on their own (on an H200, HotSpot and
// Black-Scholes at 1.6 GB: 37% and 16% over plain CUDA batched, 6% not).
constexpr std::size_t kMaxBatch = 8;

using plan::Task;
using plan::TaskId;

namespace {

// Send, Recv and RecvHost: tasks the transfer hooks run.
bool is_transfer(const Task& t) {
  return std::holds_alternative<plan::Send>(t.payload) ||
         std::holds_alternative<plan::Recv>(t.payload) ||
         std::holds_alternative<plan::RecvHost>(t.payload);
}

// Tasks deferred at once in one work list (process): beyond, a task that copies stages in
// its turn, and finding whether a task shares a chunk with a deferred one stays cheap.
constexpr std::size_t kMostDeferred = 64;

bool runs_inline(const Task& t) {
  return std::holds_alternative<plan::CreateChunk>(t.payload) ||
         std::holds_alternative<plan::DeleteChunk>(t.payload) ||
         std::holds_alternative<plan::Barrier>(t.payload) ||
         std::holds_alternative<plan::RecvHost>(t.payload);
}

// Tasks that may be queued on an asynchronous device behind dependencies still running
// there: those that only touch device memory. Copies from and to the user's (pageable)
// host memory would make the queuing thread wait for the dependencies.
bool runs_on_device_alone(const Task& t) {
  return std::holds_alternative<plan::Execute>(t.payload) ||
         std::holds_alternative<plan::Copy>(t.payload) ||
         std::holds_alternative<plan::Fill>(t.payload) ||
         std::holds_alternative<plan::Reduce>(t.payload) ||
         std::holds_alternative<plan::Narrow>(t.payload);
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

// While a host thread waits on the worker, its asynchronous devices report ends at once
// (Device::begin_wait).
class WaitingOnDevices {
 public:
  explicit WaitingOnDevices(const std::vector<backend::Device*>& devices) : devices_(devices) {
    for (backend::Device* d : devices_)
      if (d->asynchronous()) d->begin_wait();
  }
  ~WaitingOnDevices() {
    for (backend::Device* d : devices_)
      if (d->asynchronous()) d->end_wait();
  }
  WaitingOnDevices(const WaitingOnDevices&) = delete;
  WaitingOnDevices& operator=(const WaitingOnDevices&) = delete;

 private:
  const std::vector<backend::Device*>& devices_;
};

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
      staged_tasks_(devices_.size(), 0),
      any_asynchronous_(std::any_of(devices_.begin(), devices_.end(),
                                    [](const backend::Device* d) { return d->asynchronous(); })) {
  // By default a device may have half of its memory staged for queued tasks: enough to
  // keep several large superblocks queued on a GPU (one at a time would leave it idle
  // between them) and, out of core, one task's copies in running while others compute;
  // the other half is room for streaming out-of-core data. With a quarter, Black-Scholes
  // out of core on one H100 (automatic chunks of 1/32 of the budget, five arrays: tasks of
  // 5/32 of it) held one task at a time, and ran at 0.92 of the best hand choice; with half
  // (GRIDSPAN_STAGING_BYTES) and blocked tasks that copy retried first (copying_first),
  // every choice of 13 to 32 pieces, automatic's too, ran within 1% of the best
  // (docs/PERFORMANCE.md, issue 17, session 36).
  for (std::size_t d = 0; d < devices_.size(); ++d)
    if (staging_bytes == 0)
      staging_limit_[d] = std::max(std::size_t(256) << 20, devices_[d]->memory_capacity() / 2);
  shares_ = std::make_unique<ShareClock[]>(devices_.size());
  scheduler_ = std::thread([this] {
    name_this_thread("gs-scheduler");
    scheduler_loop();
  });
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
  // Executor threads belong to the backend and may still be leaving a completion callback.
  while (callbacks_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void Worker::submit(std::vector<Task>&& tasks) {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  wait_for_room(lock);
  recycle_finished();
  // All of the batch first: a task may depend on one that comes later in the batch.
  Scratch<std::vector<Node*>> nodes;
  for (Task& t : tasks) {
    nodes->push_back(&add_node(std::move(t)));
    max_submitted_ = std::max(max_submitted_, nodes->back()->task.id);
  }
  stats_.most_unfinished = std::max<uint64_t>(stats_.most_unfinished, pending_.size());
  announce(*nodes);
  for (Node* node : *nodes) count_dependencies(*node);
  // Tasks ready at once are dispatched by the submitting thread: one hand-off fewer. So
  // are those whose unfinished dependencies are all queued on their device already.
  Scratch<std::deque<Node*>> work;
  for (Node* node : *nodes)
    if (node->missing == 0 || releasable(*node)) {
      node->queued = true;
      work->push_back(node);
    }
  if (!work->empty()) process(*work, -1, lock);
}

// A program that launches faster than its devices run waits here, as under StarPU's
// STARPU_LIMIT_MAX_SUBMITTED_TASKS, so that unfinished tasks and their memory stay bounded
// (a GPU's driver holds a launching thread back the same way once its queue is full).
// It waits for tasks submitted before, which end without later ones. Not with other
// processes: a rank must keep taking its part of plans while it waits on theirs.
void Worker::wait_for_room(std::unique_lock<AdaptiveMutex>& lock) {
  if (max_unfinished_ == 0 || pending_.size() < max_unfinished_) return;
  if (hooks_ && hooks_->rank() >= 0) return;
  ++stats_.submit_waits;
  WaitingOnDevices waiting(devices_);
  ++waiting_room_;
  wake_waiters_.wait(lock, [&] { return room_again(); });
  --waiting_room_;
}

bool Worker::room_again() const {
  return pending_.size() <= max_unfinished_ / 2;
}

// Under the lock: a node for `t`, from those of finished tasks where one is left (its
// vectors keep their memory), with the chunks it will use.
Worker::Node& Worker::add_node(Task&& t) {
  const TaskId id = t.id;
  Node* node = nullptr;
  if (spare_nodes_.empty()) {
    auto [it, inserted] = pending_.try_emplace(id);
    if (!inserted) throw Error(fmt::format("internal error: task {} submitted twice", id));
    node = &it->second;
  } else {
    auto handle = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    handle.key() = id;
    auto r = pending_.insert(std::move(handle));
    if (!r.inserted) throw Error(fmt::format("internal error: task {} submitted twice", id));
    node = &r.position->second;
  }
  std::swap(node->task, t);  // `t` takes the finished task back to the caller (submit)
  if (!runs_inline(node->task)) {
    Scratch<std::vector<plan::ChunkAccess>> chunks;
    node->task.chunk_uses(*chunks);
    for (const plan::ChunkAccess& c : *chunks)
      node->uses.push_back(ChunkUse{c.chunk, c.write, c.discard, c.fresh_lo, c.fresh_hi, c.volume});
  }
  return *node;
}

// The chunks each device task will use, announced to the memory manager before anything
// can run, so that eviction knows what the queued tasks need next. Under the lock.
void Worker::announce(const std::vector<Node*>& nodes) {
  if (!memory_.tracking()) return;
  Scratch<std::vector<MemoryManager::Announced>> uses;
  for (const Node* node : nodes)
    if (!node->uses.empty()) uses->push_back({node->task.id, &node->uses});
  memory_.announce(*uses);  // one lock for the batch
}

// Under the lock: what `node` waits for (its unfinished dependencies, and what it awaits
// from elsewhere), and the error of a dependency that failed already.
void Worker::count_dependencies(Node& node) {
  const TaskId id = node.task.id;
  // What it awaits from elsewhere is one more thing to wait for, unless it came first.
  std::exception_ptr came;
  if (hooks_ && is_transfer(node.task) && hooks_->awaits(node.task, came)) {
    ++node.missing;
    ++node.unordered;
  } else if (came) {
    node.error = came;
  }
  for (TaskId dep : node.task.deps) {
    auto p = pending_.find(dep);
    if (p != pending_.end() && dep != id) {
      ++node.missing;
      if (!ordered_on_device(p->second, node)) ++node.unordered;
      p->second.successors.push_back(&node);
    } else if (!failed_.empty()) {
      auto f = failed_.find(dep);
      if (f != failed_.end() && !node.error) node.error = f->second;
    }
  }
}

// Under the lock: finished tasks' nodes become spares for the next (their tasks go back to
// the submitting thread when a new one takes a node over, to be reused or freed there: a
// free from another thread costs the allocator's arena lock and cache lines on every task). Up to
// 65536 are kept: with 1024, a launch of 20000 superblocks freed the rest at once, and the chain of
// launches after it ran 0.82-0.91 us per launch instead of 0.60-0.72 (cpu backend).
void Worker::recycle_finished() {
  constexpr std::size_t kSpares = std::size_t(1) << 16;
  for (auto& handle : finished_) {
    if (spare_nodes_.size() >= kSpares) break;
    handle.mapped().reset();
    spare_nodes_.push_back(std::move(handle));
  }
  finished_.clear();
}

// Every field but the task, which the next add_node swaps for its own (the caller gets the
// finished one back, to reuse its memory).
// A field added to Node is reset here too.
void Worker::Node::reset() {
  missing = 0;
  successors.clear();
  error = nullptr;
  staged_bytes = 0;
  sized = false;
  uses.clear();
  unordered = 0;
  queued = launched = ran = false;
  run_error = nullptr;
  ticket = 0;
  held = submitting = reported = hold = deferred = false;
  batch.clear();
}

bool Worker::is_done(TaskId id) const {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  return id <= max_submitted_ && !pending_.count(id);
}

void Worker::drop_finished(std::vector<TaskId>& ids) const {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  std::erase_if(ids, [&](TaskId id) { return id <= max_submitted_ && !pending_.count(id); });
}

void Worker::wait(TaskId id) {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  recycle_finished();
  if (any_asynchronous_)
    flush_devices(lock);  // even for a finished task: devices learn of the wait
  if (pending_.count(id)) {
    WaitingOnDevices waiting(devices_);
    watch_on_device(id, lock);
    if (pending_.count(id)) {
      ++stats_.waits_slept;
      auto at = waited_.insert(id);
      wake_waiters_.wait(lock, [&] { return !pending_.count(id); });
      waited_.erase(at);
    }
  }
  auto f = failed_.find(id);
  if (f != failed_.end()) {
    if (unreported_ == f->second) unreported_ = nullptr;
    std::rethrow_exception(f->second);
  }
}

// A task queued on an asynchronous device (a GPU), or the barrier of a launch spread over
// such devices: what a waiter watches for instead of sleeping (watch_on_device). Not on
// synchronous devices, whose executors need the cores.
bool Worker::soon_done_on_device(const Node& node) const {
  if (std::holds_alternative<plan::Barrier>(node.task.payload)) return any_asynchronous_;
  return node.launched && devices_[node.task.device]->asynchronous();
}

// Without the lock: what the asynchronous devices have not begun yet, the waiting thread
// begins (Device::flush).
void Worker::flush_devices(std::unique_lock<AdaptiveMutex>& lock) {
  lock.unlock();
  for (backend::Device* d : devices_)
    if (d->asynchronous()) d->flush();
  lock.lock();
}

// A task queued on a GPU (or a barrier while work is queued there) is watched for as long
// as that holds, as plain CUDA's event synchronize spins until the event fires: while a host
// thread waits the GPU's completion threads report an end at once (begin_wait), where a
// sleeping waiter would be woken tens of microseconds later, on a virtual machine's idle
// core hundreds. A task that waits for something else (the host, another rank) is slept on.
void Worker::watch_on_device(TaskId id, std::unique_lock<AdaptiveMutex>& lock) {
  while (true) {
    auto p = pending_.find(id);
    if (p == pending_.end() || !soon_done_on_device(p->second) || on_devices_ == 0) return;
    watch(lock, [&] { return pending_.count(id) > 0; });
  }
}

// Under the lock (released while looking): watches for finishes while `unfinished()` holds,
// for at most 50 us.
template <class Unfinished>
void Worker::watch(std::unique_lock<AdaptiveMutex>& lock, Unfinished&& unfinished) {
  constexpr auto kWatch = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kWatch;
  while (unfinished() && std::chrono::steady_clock::now() < until) {
    const uint64_t seen = finishes_.load(std::memory_order_acquire);
    lock.unlock();
    while (finishes_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    lock.lock();
  }
}

void Worker::wait_all() {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  if (any_asynchronous_) flush_devices(lock);
  if (!pending_.empty()) {
    WaitingOnDevices waiting(devices_);
    wait_on_devices(lock);
    ++waiting_all_;
    wake_waiters_.wait(lock, [&] { return pending_.empty(); });
    --waiting_all_;
  }
  recycle_finished();
  if (unreported_) {
    auto e = unreported_;
    unreported_ = nullptr;
    std::rethrow_exception(e);
  }
}

// While tasks are queued on GPUs the waiter waits on the GPUs themselves, as plain CUDA's
// synchronize does, then watches for their completion reports, which follow within
// microseconds, and for the host-side tasks those release (a partial's deletion after a
// reduction, a barrier); again while that brings more onto the GPUs. It sleeps only once
// nothing is queued there or nothing finished: waking a sleeping waiter from a completion
// thread costs tens of microseconds, on a virtual machine's idle core hundreds.
void Worker::wait_on_devices(std::unique_lock<AdaptiveMutex>& lock) {
  while (on_devices_ > 0 && !pending_.empty()) {
    const uint64_t seen = finishes_.load(std::memory_order_acquire);
    lock.unlock();
    for (backend::Device* d : devices_)
      if (d->asynchronous()) d->wait_queued();
    lock.lock();
    watch(lock, [&] { return !pending_.empty(); });
    if (finishes_.load(std::memory_order_acquire) == seen) return;
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
      copying_first();
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
// hand-off. Those run after the ready tasks of other devices have been handed on, and go
// behind the works other threads queued for this device before: a thread that ran its own
// first would keep the others idle for as long (two devices splitting one launch would
// take turns).
void Worker::process(std::deque<Node*>& work, int here) {
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  process(work, here, lock);
}

// The same, under the lock the caller holds already (it may be released on the way).
void Worker::process(std::deque<Node*>& work, int here, std::unique_lock<AdaptiveMutex>& lock) {
  Scratch<std::vector<Node*>> staged_batch;  // staged kernels of one launch, one submission
  std::vector<Node*>& batch = *staged_batch;
  std::vector<Node*> copying;  // deferred: their staging copies data (allocates only then)
  std::deque<Node*> mine;      // staged for this thread, after the others' tasks
  while (!work.empty() || !batch.empty() || !copying.empty() || !mine.empty()) {
    // Launching a batch may release more work.
    if (!batch.empty() && (work.empty() || !joins(*batch.front(), *work.front(), batch.size())))
      launch_batch(batch, lock, work);
    if (work.empty() && !copying.empty()) {
      take_back_deferred(copying, work);
      continue;
    }
    if (work.empty()) {
      if (!mine.empty()) {
        Node* node = mine.front();
        mine.pop_front();
        run_here_or_queue(node, lock, work);
      }
      continue;
    }
    Node* node = work.front();
    work.pop_front();
    if (node->missing > 0 && node->error) {
      // Released early, but a dependency has failed since: it waits for the others, then
      // is skipped like any task after a failure.
      node->queued = false;
      continue;
    }
    const bool skip = node->error && !runs_after_failure(node->task);
    if (skip || runs_inline(node->task)) {
      run_inline(node, skip, lock, work);
      continue;
    }
    if (!copying.empty() && shares_chunk(*node, copying)) {
      copying.push_back(node);  // keeps its order among the tasks on its chunks
      continue;
    }
    std::exception_ptr error;
    const bool may_defer = !work.empty() && copying.size() < kMostDeferred;
    const Staged staged = admit_and_stage(node, lock, work, batch, error, may_defer);
    if (staged == Staged::deferred) copying.push_back(node);
    if (staged != Staged::now) continue;
    if (error) {
      fail_unstaged(node, error, work);
      continue;
    }
    mark_held(*node);
    const bool ours = node->task.device == here && !devices_[here]->asynchronous();
    if (ours && (devices_[here]->has_queued() || (mine.empty() && !for_others(work, here))))
      run_here_or_queue(node, lock, work);
    else if (ours)
      mine.push_back(node);
    else if (batchable(*node) && !defers_on(copying, node->task.device))
      batch.push_back(node);
    else
      launch(node, lock, work);
  }
  if (progress_ && !blocked_.empty()) wake_scheduler_.notify_one();
  if (short_of_memory_ && hooks_) {
    short_of_memory_ = false;
    lock.unlock();
    hooks_->short_of_memory();
  }
}

// The tasks deferred because their staging copies data go now, in their order, and are not
// deferred again: the tasks that needed no copy have gone to their devices meanwhile, which
// compute while these copies run (out of core, the resident part of a sweep goes first).
void Worker::take_back_deferred(std::vector<Node*>& deferred, std::deque<Node*>& work) {
  for (Node* node : deferred) node->deferred = true;
  work.insert(work.begin(), deferred.begin(), deferred.end());
  deferred.clear();
}

// Of the blocked tasks of each device, the first whose staging copies data or evicts goes
// back to ready first, and is not deferred again (process): its copies then run while the
// device computes the resident tasks that follow it. Retried in their order, the resident
// part of an out-of-core sweep took the staging bound until all of it had run, and the copies
// came after it with nothing to compute beside them (Black-Scholes on one H100, session 35).
// With this and a staging bound of half the device's memory, Black-Scholes out of core ran
// every choice of 13 to 32 pieces within 1% of the best (session 36); under a quarter, this
// alone was slower than the order of retries. One a device: the copies of one device take
// turns on its link, and the bound's other tasks compute. A task stays behind every task
// before it on one of its chunks: the order of a reduction is its result.
void Worker::copying_first() {
  std::vector<Node*> first, others;
  std::vector<bool> device_has(devices_.size(), false);
  for (Node* node : blocked_) {
    const auto dev = static_cast<std::size_t>(node->task.device);
    std::exception_ptr error;  // the staging meets it again and fails the task
    const bool goes = dev < device_has.size() && !device_has[dev] &&
                      !stages_in_place(node, error) && !shares_chunk(*node, others);
    if (goes) {
      device_has[dev] = true;
      node->deferred = true;
    }
    (goes ? first : others).push_back(node);
  }
  blocked_.assign(first.begin(), first.end());
  blocked_.insert(blocked_.end(), others.begin(), others.end());
}

// Whether one of `deferred` waits to be staged on device `dev`. Its staging needs room that
// only a finished task gives back, and a batch reports its tasks when all are done: the
// tasks that go ahead of it go alone, so the first to finish lets the copies begin.
bool Worker::defers_on(const std::vector<Node*>& deferred, int dev) {
  return std::any_of(deferred.begin(), deferred.end(),
                     [dev](const Node* n) { return n->task.device == dev; });
}

// Whether one of `work` is for another device than `here`.
bool Worker::for_others(const std::deque<Node*>& work, int here) {
  return std::any_of(work.begin(), work.end(),
                     [here](const Node* n) { return n->task.device != here; });
}

// Whether `node` uses a chunk one of `others` uses. Ready tasks that share a chunk are
// independent only as reductions into it or writes of disjoint parts, and keep their order
// (the order of a floating-point reduction is its result).
bool Worker::shares_chunk(const Node& node, const std::vector<Node*>& others) {
  for (const Node* other : others)
    for (const ChunkUse& a : node.uses)
      for (const ChunkUse& b : other->uses)
        if (a.chunk == b.chunk) return true;
  return false;
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
      } else if (std::holds_alternative<plan::RecvHost>(t.payload)) {
        hooks(t).run(t);
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    lock.lock();
  }
  finish(node, error, work);
}

// The first time: the bytes of the task's chunks (they exist by the time it is ready), and
// its staging if every chunk is resident and they fit in `budget`, under one lock of the
// memory manager. Returns whether it staged; an error names the task.
bool Worker::size_and_stage(Node* node, std::size_t budget, std::exception_ptr& error) {
  const Task& t = node->task;
  bool staged = false;
  try {
    staged = memory_.size_and_stage_resident(node->uses, budget, node->staged_bytes);
  } catch (const Error& e) {
    error = std::make_exception_ptr(
        Error(fmt::format("{} (task {} {} on device {})", e.what(), t.id, t.kind(), t.device)));
  } catch (...) {
    error = std::current_exception();
  }
  node->sized = true;
  return staged;
}

// Admission (at most the staging limit of bytes per device, beyond the first task), then
// staging: at once when every chunk is resident, else without the scheduler's lock, since
// staging may move data between spaces (disk I/O) and finishing tasks must not wait for
// that. `later`: the task waits (for memory, or tries again now after an unstage).
Worker::Staged Worker::admit_and_stage(Node* node, std::unique_lock<AdaptiveMutex>& lock,
                                       std::deque<Node*>& work, std::vector<Node*>& batch,
                                       std::exception_ptr& error, bool may_defer) {
  const int dev = node->task.device;
  // The first task of a device is always admitted; the others while they fit the bound.
  const std::size_t room =
      staged_tasks_[dev] == 0
          ? SIZE_MAX
          : staging_limit_[dev] - std::min(staging_limit_[dev], staged_bytes_[dev]);
  bool staged = false;
  const bool first = !node->sized;  // then the quick staging was just tried
  if (first) {
    staged = size_and_stage(node, room, error);
    if (error) return Staged::now;  // the caller fails it
  }
  if (node->staged_bytes > room) {
    if (hold_until_ready(node)) return Staged::later;  // released early: no more
    ++stats_.stage_retries;
    blocked_.push_back(node);
    short_of_memory_ = true;
    return Staged::later;
  }
  const int ahead = staged_tasks_[dev];
  staged_bytes_[dev] += node->staged_bytes;
  ++staged_tasks_[dev];
  const uint64_t epoch = unstage_epoch_;
  try {
    if (!staged && !first) staged = memory_.try_stage_resident(node->uses);
  } catch (...) {
    error = std::current_exception();
  }
  if (!staged && !error && node->missing > 0 && !stages_in_place(node, error) &&
      hold_until_ready(node)) {
    staged_bytes_[dev] -= node->staged_bytes;
    --staged_tasks_[dev];
    return Staged::later;
  }
  if (!staged && !error && may_defer && !node->deferred) {
    staged_bytes_[dev] -= node->staged_bytes;
    --staged_tasks_[dev];
    return Staged::deferred;
  }
  if (!staged && !error) {
    // Staging may wait for the tasks staged ahead to finish: those of a batch go first.
    if (!batch.empty()) launch_batch(batch, lock, work);
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
    short_of_memory_ = true;
  }
  return Staged::later;
}

// A task released early (its dependencies are still queued on its device) goes at once
// only when it fits the staging bound and its staging copies and evicts nothing. Otherwise
// it waits for its dependencies like any task: bringing its chunks in now would evict what
// the tasks queued before it still need. Out of core, Black-Scholes' ten sweeps over 16
// superblocks moved 63 GB per run so, against 9 GB without early release. Under the lock.
bool Worker::stages_in_place(Node* node, std::exception_ptr& error) {
  try {
    return memory_.stages_in_place(node->uses);
  } catch (...) {
    error = std::current_exception();
    return true;  // the caller fails it
  }
}

bool Worker::hold_until_ready(Node* node) {
  if (node->missing == 0) return false;
  node->queued = false;
  node->hold = true;  // releasable() no more: finish() queues it once its dependencies end
  return true;
}

// A task that could not be staged (or sized) fails; one released early is reported once
// its dependencies are.
void Worker::fail_unstaged(Node* node, const std::exception_ptr& error, std::deque<Node*>& work) {
  memory_.retire(node->task.id, node->uses);
  if (node->missing > 0) {
    node->ran = true;
    node->run_error = error;
  } else {
    finish(node, error, work);
  }
}

// A transfer task that may be held after it ran (a Send that lends its memory, a Recv
// that copies lent memory) ends only once the other side is done: nothing may be queued on
// the device behind it.
void Worker::mark_held(Node& node) {
  node.held = hooks_ && is_transfer(node.task) && hooks_->held_after_run(node.task);
}

// On this device's own executor thread (a synchronous device): the task runs now.
// On its synchronous device's executor: right here, unless other threads queued works for
// this device before (the node then goes behind them).
void Worker::run_here_or_queue(Node* node, std::unique_lock<AdaptiveMutex>& lock,
                               std::deque<Node*>& work) {
  if (devices_[node->task.device]->has_queued())
    launch(node, lock, work);
  else
    run_here(node, lock, work);
}

void Worker::run_here(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work) {
  lock.unlock();
  std::exception_ptr e;
  try {
    run_task(node);
  } catch (...) {
    e = std::current_exception();
  }
  if (after_run(node, e)) {
    unstage_chunks(node, e);
    lock.lock();
    count_unstaged(*node);
    finish(node, e, work);
  } else {
    lock.lock();
  }
}

// Submits the task to its device. Dependencies still running were queued on this device
// before: it orders this work after them itself (stream waits on a GPU), without a round
// trip through the host; successors on this device whose other dependencies are queued
// there too can go now.
void Worker::launch(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work) {
  const Task& t = node->task;
  const int dev = t.device;
  Scratch<std::vector<backend::Device::Ticket>> after;
  tickets_after(*node, *after);
  // Closures of two pointers: std::function keeps them without allocating.
  const backend::Device::Ticket ticket = submit_unlocked(&node, 1, lock, [&] {
    return devices_[dev]->submit_on(
        queue_of(t), [this, node] { run_task(node); },
        [this, node](std::exception_ptr e) { ran_on_device(node, node->task.device, e); }, *after);
  });
  if (devices_[dev]->asynchronous()) ++stats_.tasks_submitted;
  if (!after->empty()) ++stats_.tasks_released_early;
  launched(node, ticket, work);
}

// Hands work to an asynchronous device (a GPU) without the worker's lock: a kernel launch
// takes microseconds, and its completion thread needs the lock meanwhile. A completion that
// comes first is left for launched() to report (Node::submitting). A synchronous device's
// submit only queues the work: the lock is kept.
template <class Submit>
backend::Device::Ticket Worker::submit_unlocked(Node* const* nodes, std::size_t n,
                                                std::unique_lock<AdaptiveMutex>& lock,
                                                Submit&& submit) {
  if (!devices_[nodes[0]->task.device]->asynchronous()) return submit();
  for (std::size_t k = 0; k < n; ++k) nodes[k]->submitting = true;
  lock.unlock();
  backend::Device::Ticket ticket = 0;
  std::exception_ptr error;
  try {
    ticket = submit();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  for (std::size_t k = 0; k < n; ++k) nodes[k]->submitting = false;
  if (error) std::rethrow_exception(error);
  return ticket;
}

// Under the lock, once the device has a task: successors ordered behind it can go, and a
// completion reported while it was being submitted is taken up now.
void Worker::launched(Node* node, backend::Device::Ticket ticket, std::deque<Node*>& work) {
  node->launched = true;
  node->ticket = ticket;
  if (devices_[node->task.device]->asynchronous()) ++on_devices_;
  release_ordered(*node, work);
  if (!node->reported) return;
  node->reported = false;
  if (node->missing > 0)
    node->ran = true;  // reported after its dependencies (complete_all)
  else
    finish(node, node->run_error, work);
}

// The tickets of a task's dependencies still queued on its device (a task released early).
void Worker::tickets_after(const Node& node, std::vector<backend::Device::Ticket>& after) const {
  if (node.missing == 0) return;
  for (TaskId dep : node.task.deps)
    if (auto p = pending_.find(dep); p != pending_.end() && p->second.launched)
      if (std::find(after.begin(), after.end(), p->second.ticket) == after.end())
        after.push_back(p->second.ticket);
}

// Successors on this device whose other dependencies are queued there too can go now.
void Worker::release_ordered(const Node& node, std::deque<Node*>& work) {
  for (Node* s : node.successors) {
    Node& succ = *s;
    if (ordered_on_device(node, succ) && --succ.unordered == 0 && releasable(succ)) {
      succ.queued = true;
      work.push_back(&succ);
    }
  }
}

bool Worker::batchable(const Node& node) const {
  const auto* ex = std::get_if<plan::Execute>(&node.task.payload);
  return ex && ex->blocks.volume() <= batch_blocks_ && !node.held &&
         devices_[node.task.device]->asynchronous();
}

// Whether `next` may go in one submission with the batch that starts with `first`: a
// kernel of the same launch shape on the same device. Tasks in one work list at once do not
// depend on each other (a successor is released only once its dependency is launched).
bool Worker::joins(const Node& first, const Node& next, std::size_t size) const {
  if (size >= kMaxBatch || next.task.device != first.task.device || next.error || !batchable(next))
    return false;
  const auto& a = std::get<plan::Execute>(first.task.payload);
  const auto& b = std::get<plan::Execute>(next.task.payload);
  return a.executable == b.executable && a.block == b.block && a.grid == b.grid &&
         a.scalars == b.scalars;
}

// Submits staged kernels as one work on their device (see launch for one task).
void Worker::launch_batch(std::vector<Node*>& batch, std::unique_lock<AdaptiveMutex>& lock,
                          std::deque<Node*>& work) {
  if (batch.size() == 1) {
    Node* node = batch[0];
    batch.clear();
    launch(node, lock, work);
    return;
  }
  Node* first = batch[0];
  const int dev = first->task.device;
  Scratch<std::vector<backend::Device::Ticket>> after;
  for (Node* node : batch) tickets_after(*node, *after);
  first->batch.assign(batch.begin(), batch.end());  // lives as long as the batch's tasks
  batch.clear();
  // Copied out: the first node may finish before the others are taken up.
  Node* nodes[kMaxBatch];
  const std::size_t n = first->batch.size();
  std::copy(first->batch.begin(), first->batch.end(), nodes);
  const backend::Device::Ticket ticket = submit_unlocked(nodes, n, lock, [&] {
    return devices_[dev]->submit_on(
        backend::Device::Queue::compute, [this, first] { run_batch(first->batch); },
        [this, first](std::exception_ptr e) { batch_ran(first, e); }, *after);
  });
  stats_.tasks_submitted += n;
  stats_.tasks_batched += n;
  for (std::size_t k = 0; k < n; ++k) {
    if (nodes[k]->missing > 0) ++stats_.tasks_released_early;
    launched(nodes[k], ticket, work);
  }
}

// The device's report that a batch has run. Kernels only: no transfer hooks hold them.
void Worker::batch_ran(Node* first, std::exception_ptr error) {
  callbacks_.fetch_add(1, std::memory_order_relaxed);
  // Copied out: finishing the first task lets its node go.
  Node* nodes[kMaxBatch];
  const std::size_t n = first->batch.size();
  std::copy(first->batch.begin(), first->batch.end(), nodes);
  complete_all(nodes, n, error, first->task.device);
  callbacks_.fetch_sub(1, std::memory_order_release);
}

bool Worker::after_run(Node* node, std::exception_ptr& error) {
  return !hooks_ || !is_transfer(node->task) || hooks_->after_run(node->task, error);
}

TransferHooks& Worker::hooks(const Task& t) const {
  if (!hooks_)
    throw NetError(fmt::format(
        "internal error: task {} ({}) moves data between processes, but this worker has no "
        "connection to other processes",
        t.id, t.kind()));
  return *hooks_;
}

Worker::Node& Worker::pending(TaskId id) {
  auto it = pending_.find(id);
  if (it == pending_.end())
    throw Error(fmt::format("internal error: task {} is not waiting in this worker", id));
  return it->second;
}

// Unstages a task that ran and finishes it (or, when a dependency is not reported done
// yet, marks it to finish after that one); the successors it made ready run here.
void Worker::complete(Node* node, std::exception_ptr error, int dev) {
  complete_all(&node, 1, error, dev);
}

// Tasks that ran as one work (a batch), completed as one: one lock of the worker for all.
void Worker::complete_all(Node* const* nodes, std::size_t n, const std::exception_ptr& error,
                          int dev) {
  std::exception_ptr errors[kMaxBatch];
  Scratch<std::vector<MemoryManager::Announced>> uses;
  for (std::size_t k = 0; k < n; ++k) {
    errors[k] = error;
    uses->push_back({nodes[k]->task.id, &nodes[k]->uses});
  }
  try {
    memory_.unstage_and_retire(*uses);  // one lock for all
  } catch (...) {
    for (std::size_t k = 0; k < n; ++k)
      if (!errors[k]) errors[k] = std::current_exception();
  }
  Scratch<std::deque<Node*>> next;
  std::unique_lock<AdaptiveMutex> lock(mutex_);
  for (std::size_t k = 0; k < n; ++k) {
    count_unstaged(*nodes[k]);
    if (nodes[k]->submitting) {
      // Its launch has not taken the lock back yet: launched() reports it.
      nodes[k]->reported = true;
      nodes[k]->run_error = errors[k];
    } else if (nodes[k]->missing > 0) {
      // Done on the device before a dependency was reported done: it is reported after
      // that one (and fails with it).
      nodes[k]->ran = true;
      nodes[k]->run_error = errors[k];
    } else {
      finish(nodes[k], errors[k], *next);
    }
  }
  if (next->empty() && progress_ && !blocked_.empty()) wake_scheduler_.notify_one();
  if (!next->empty()) process(*next, dev, lock);
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

// Read under the lock (by finishing tasks on executor threads): set under it too.
void Worker::on_barrier(std::function<void(plan::TaskId, std::exception_ptr)> f) {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  on_barrier_ = std::move(f);
}

void Worker::satisfy(TaskId id, std::exception_ptr error) {
  std::deque<Node*> work;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    Node& node = pending(id);
    if (error && !node.error) node.error = error;
    --node.unordered;
    if (--node.missing == 0 && !node.queued && !node.launched) {
      node.queued = true;
      work.push_back(&node);
    }
  }
  if (!work.empty()) process(work, -1);
}

bool Worker::unsatisfy(TaskId id) {
  std::lock_guard<AdaptiveMutex> lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  Node& node = it->second;
  auto b = std::find(blocked_.begin(), blocked_.end(), &node);
  if (node.launched || (node.queued && b == blocked_.end())) return false;
  if (b != blocked_.end()) blocked_.erase(b), node.queued = false;
  ++node.missing;
  ++node.unordered;
  return true;
}

void Worker::resume(TaskId id, std::exception_ptr error, bool again) {
  Node* node = nullptr;
  {
    std::lock_guard<AdaptiveMutex> lock(mutex_);
    node = &pending(id);
  }
  callbacks_.fetch_add(1, std::memory_order_relaxed);
  if (again)
    relaunch(node);
  else
    complete(node, error, -1);
  callbacks_.fetch_sub(1, std::memory_order_release);
}

// Unpins a task's chunks (a failure here becomes the task's error). Without the lock.
void Worker::unstage_chunks(Node* node, std::exception_ptr& error) {
  try {
    memory_.unstage_and_retire(node->task.id, node->uses);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
}

// Under the lock: the task's bytes no longer count against its device's staging bound.
void Worker::count_unstaged(const Node& node) {
  staged_bytes_[node.task.device] -= node.staged_bytes;
  --staged_tasks_[node.task.device];
  progress_ = true;
  ++unstage_epoch_;
}

void Worker::run_task(Node* node) {
  if (!observer_) return run_sampled(node);
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
  run_sampled(node);
}

void Worker::run_sampled(Node* node) {
  const auto* e = costs_ ? std::get_if<plan::Execute>(&node->task.payload) : nullptr;
  if (!e) return run_payload(node);
  run_measured(*e->executable, e->blocks.volume() * e->block.volume(), node->staged_bytes,
               node->task.device, [&] { run_payload(node); });
  if (e->clock) costs_->clocks().tick(e->clock);
}

// A GPU times a sampled run's operations with its events and reports after they end. On a
// synchronous device every run counts on the device's share clock, and a sampled one is
// recorded with its wall time and its share when `run` returns; a run that throws is not.
void Worker::run_measured(const plan::Executable& e, int64_t threads, std::size_t bytes, int dev,
                          const std::function<void()>& run) {
  CostModel* costs = costs_;
  const bool timed = CostModel::should_time(e);
  backend::Device& d = *devices_[dev];
  if (d.asynchronous()) {
    if (timed)
      d.time_work(
          [costs, &e, threads, bytes](double s) { costs->record(e, threads, bytes, s, s); });
    return run();
  }
  struct Running {  // leaves the clock also when `run` throws
    ShareClock& clock;
    double entered = clock.enter(std::chrono::steady_clock::now());
    bool left = false;
    double leave(ShareClock::Time end) { return left = true, clock.leave(entered, end); }
    ~Running() {
      if (!left) clock.leave(entered, std::chrono::steady_clock::now());
    }
  } running{shares_[dev]};
  const auto start = std::chrono::steady_clock::now();
  run();
  const auto end = std::chrono::steady_clock::now();
  const double share = running.leave(end);
  if (timed)
    costs->record(e, threads, bytes, std::chrono::duration<double>(end - start).count(), share);
}

// The memory of a chunk the node's task has staged: kept in its uses by the staging (a task
// uses a handful of chunks, so a scan), else asked of the memory manager.
void* Worker::staged_data(const Node& node, ChunkId chunk) const {
  for (const ChunkUse& use : node.uses)
    if (use.chunk == chunk && use.data) return use.data;
  return memory_.data(chunk);
}

// The memory of each parameter's chunk (null for scalars and untouched arrays).
void Worker::chunk_data(const Node& node, const plan::Execute& ex, void** out) const {
  for (std::size_t i = 0; i < ex.arrays.size(); ++i)
    out[i] = ex.arrays[i].chunk.id ? staged_data(node, ex.arrays[i].chunk.id) : nullptr;
}

// The kernels of a batch, run together by their executable (one GPU launch), each
// reported to the observer as having run for the whole of it.
void Worker::run_batch(const std::vector<Node*>& nodes) {
  const double start = observer_ ? observer_now_us() : 0;
  const std::size_t n = nodes.size();
  Scratch<std::vector<void*>> data;  // every node's chunk pointers, one after the other
  Scratch<std::vector<std::size_t>> at;
  for (std::size_t k = 0; k < n; ++k) {
    const auto& ex = std::get<plan::Execute>(nodes[k]->task.payload);
    at->push_back(data->size());
    data->resize(data->size() + ex.arrays.size());
    chunk_data(*nodes[k], ex, data->data() + at->back());
  }
  const int d = nodes[0]->task.device;
  Scratch<std::vector<plan::ExecFrame>> frames;
  for (std::size_t k = 0; k < n; ++k)
    frames->push_back(plan::ExecFrame{std::get<plan::Execute>(nodes[k]->task.payload),
                                      data->data() + (*at)[k], d, devices_[d]});
  const auto& first = std::get<plan::Execute>(nodes[0]->task.payload);
  auto run = [&] { first.executable->run_batch(frames->data(), n); };
  if (costs_) {
    int64_t threads = 0;
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < n; ++k) {
      threads += (*frames)[k].exec.blocks.volume() * first.block.volume();
      bytes += nodes[k]->staged_bytes;
    }
    run_measured(*first.executable, threads, bytes, d, run);
  } else {
    run();
  }
  if (!observer_) return;
  const double end = observer_now_us();
  for (Node* node : nodes)
    observer_->task_ran(TraceEvent{first.executable->name(), node->task.kind(), d, start, end,
                                   node->task.id, node->staged_bytes});
}

void Worker::run_payload(Node* node) {
  Task& t = node->task;
  backend::Device& dev = *devices_[t.device];
  auto data = [&](const plan::ChunkRef& c) { return staged_data(*node, c.id); };
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
        } else if constexpr (std::is_same_v<P, plan::Narrow>) {
          dev.narrow(data(p.dst), p.dst.rect, data(p.src), p.src.rect, p.region, p.dtype);
        } else if constexpr (std::is_same_v<P, plan::HostWrite>) {
          dev.upload(data(p.dst), p.dst.rect, p.data.data(), p.data_rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::ReadBack>) {
          dev.download(p.dst, p.dst_rect, data(p.src), p.src.rect, p.region, p.elem_size);
        } else if constexpr (std::is_same_v<P, plan::Send> || std::is_same_v<P, plan::Recv>) {
          hooks(t).run(t);
        } else if constexpr (std::is_same_v<P, plan::Execute>) {
          void* ptrs[64];
          std::vector<void*> heap;
          void** slot = ptrs;
          if (p.arrays.size() > 64) heap.resize(p.arrays.size()), slot = heap.data();
          chunk_data(*node, p, slot);
          p.executable->run(plan::ExecFrame{p, slot, t.device, &dev});
        }
      },
      t.payload);
}

bool Worker::ordered_on_device(const Node& dep, const Node& succ) const {
  return stream_order_ && dep.launched && !dep.held && dep.task.device == succ.task.device &&
         runs_on_device_alone(succ.task) && devices_[succ.task.device]->asynchronous();
}

bool Worker::releasable(const Node& node) const {
  return node.missing > 0 && node.unordered == 0 && !node.queued && !node.launched && !node.error &&
         !node.hold && runs_on_device_alone(node.task);
}

// Under the lock: records the end of a task and appends the successors it made ready (or
// releasable). A successor that ran to its end before this task was reported done is
// finished here too, and so on down the chain.
void Worker::finish(Node* first, std::exception_ptr first_error, std::deque<Node*>& ready) {
  Scratch<std::vector<std::pair<Node*, std::exception_ptr>>> todo;
  todo->emplace_back(first, first_error);
  while (!todo->empty()) {
    auto [node, error] = todo->back();
    todo->pop_back();
    TaskId id = node->task.id;
    // A barrier after a failure reports the failure it inherited; so does a task released
    // early whose dependency failed after it was queued (it ran on the failed one's output).
    if (!error && node->error &&
        (node->launched || std::holds_alternative<plan::Barrier>(node->task.payload)))
      error = node->error;
    // Between processes, a task's own failure names the rank and the task.
    if (error && !node->error && hooks_)
      if (const int rank = hooks_->rank(); rank >= 0)
        error = error_in(error, failed_task_name(rank, id, describe(node->task)));
    if (on_barrier_ && std::holds_alternative<plan::Barrier>(node->task.payload))
      on_barrier_(id, error);
    if (hooks_ && is_transfer(node->task)) hooks_->finished(node->task, error);
    if (error) {
      failed_[id] = error;
      ++stats_.tasks_failed;
      if (!unreported_ && !node->error) unreported_ = error;
    } else {
      ++stats_.tasks_run;
    }
    for (Node* s : node->successors) {
      Node& succ = *s;
      if (error && !succ.error) succ.error = error;
      if (!ordered_on_device(*node, succ)) --succ.unordered;
      if (--succ.missing == 0) {
        if (succ.ran) {
          todo->emplace_back(&succ, succ.run_error);
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
    if (node->launched && devices_[node->task.device]->asynchronous()) --on_devices_;
    finished_.push_back(pending_.extract(id));
    finishes_.fetch_add(1, std::memory_order_release);
    if (waited || (waiting_all_ > 0 && pending_.empty()) || (waiting_room_ > 0 && room_again()))
      wake_waiters_.notify_all();
  }
}

}  // namespace gridspan::runtime
