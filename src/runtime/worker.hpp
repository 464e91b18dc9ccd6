// The worker: schedules its part of the task graph on its devices. A task waits for its
// dependencies, is staged (the memory manager makes all its chunks resident, or none),
// is queued at its device's executor, runs, and is unstaged; then its successors are
// released. The bytes staged ahead per device are bounded (GRIDSPAN_STAGING_BYTES).
// Transfer tasks (Send, Recv, RecvHost) are scheduled the same way; what they do, what they
// wait for from other processes and when they end is the business of TransferHooks
// (runtime/transfers.hpp), which reaches back only through satisfy, unsatisfy and resume.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/device.hpp"
#include "core/mutex.hpp"
#include "plan/task.hpp"
#include "runtime/cost.hpp"
#include "runtime/memory.hpp"
#include "runtime/observer.hpp"

namespace gridspan::runtime {

struct WorkerStats {
  uint64_t tasks_run = 0;
  uint64_t tasks_failed = 0;
  uint64_t stage_retries = 0;         // times a task could not be staged at once
  uint64_t tasks_submitted = 0;       // handed to an asynchronous device (a GPU)
  uint64_t tasks_released_early = 0;  // ... while dependencies of theirs still ran there
  uint64_t tasks_batched = 0;         // kernels that went with others as one submission
  uint64_t most_unfinished = 0;       // the most tasks submitted and unfinished at once
  uint64_t submit_waits = 0;          // times submit waited for tasks to end first
  uint64_t waits_slept = 0;  // host waits for a task that slept (it was not on a GPU, or left)
};

/// On a worker connected to other processes a task's own failure is named "rank R, task T
/// (kernel `k` on device D): why", and errors passed on to later tasks keep that name: the
/// task T that failed, read back from an error's message (nullopt for other messages).
std::string failed_task_name(int rank, plan::TaskId task, const std::string& what);
std::optional<plan::TaskId> failed_task(const std::string& message);

/// What runs a worker's transfer tasks (Send, Recv and RecvHost: runtime/transfers.hpp).
/// The worker schedules them like any task; these say what they wait for, do their work,
/// and may hold one after it ran until the other side is done. A call made under the
/// worker's lock must not call the worker.
class TransferHooks {
 public:
  virtual ~TransferHooks() = default;
  /// At submit, under the worker's lock: whether `task` waits for something from elsewhere
  /// (Worker::satisfy). When that came first, `error` is set if it said it never will.
  virtual bool awaits(const plan::Task& task, std::exception_ptr& error) = 0;
  /// As it is taken to its device, under the worker's lock: whether it may be held after it
  /// ran (after_run answers false); nothing is queued on the device behind such a task.
  virtual bool held_after_run(const plan::Task& task) = 0;
  /// Does the task's work: on its device's executor (a RecvHost on the worker's thread).
  virtual void run(const plan::Task& task) = 0;
  /// After it ran on its device, without the lock: true when it is done (failed if `error`
  /// is set); false when it is held, and Worker::resume ends it or runs it again.
  virtual bool after_run(const plan::Task& task, std::exception_ptr& error) = 0;
  /// It finished, ran or not (with its error if it failed). Under the worker's lock.
  virtual void finished(const plan::Task& task, const std::exception_ptr& error) = 0;
  /// A task waits for memory: let go of what is held for other processes. Without the lock.
  virtual void short_of_memory() = 0;
  /// This process's rank, which a task's failure names (-1: a run of one process).
  virtual int rank() const = 0;
};

class Worker {
 public:
  /// `staging_bytes`: chunk bytes staged per device for queued and running tasks (more
  /// tasks wait); 0 = a quarter of each device's memory capacity, at least 256 MiB.
  /// `stream_order`: a task may be queued on an asynchronous device behind dependencies
  /// still running there (false: every dependency is waited for on the host).
  Worker(std::vector<backend::Device*> devices, MemoryManager& memory, std::size_t staging_bytes,
         bool stream_order = true);
  ~Worker();  // finishes every submitted task first
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Adds tasks; their dependencies are tasks submitted earlier (or in this batch, before
  /// them). Dependencies on finished tasks are satisfied at once. Leaves in `tasks` finished
  /// tasks (or empty ones), whose memory the caller may reuse.
  void submit(std::vector<plan::Task>&& tasks);
  /// Where transfer tasks go (before any is submitted; null: a transfer task fails).
  void connect(TransferHooks* hooks) { hooks_ = hooks; }
  /// Called (with the worker's lock held: it must not block or call the worker) when a
  /// Barrier task finishes, with its error if it failed.
  void on_barrier(std::function<void(plan::TaskId, std::exception_ptr)> f);

  // The one way in for what comes from elsewhere: the transfer hooks call these, never
  // under the worker's lock.
  /// What task `id` awaits (TransferHooks::awaits) is here, or never will be (`error`).
  void satisfy(plan::TaskId id, std::exception_ptr error);
  /// Takes back what satisfied `id`, which waits for satisfy again; false when the task has
  /// set off for its device already (or is done).
  bool unsatisfy(plan::TaskId id);
  /// A task held after it ran: it ends (failed, when `error` is set) or, with `again`, its
  /// work runs on its device again.
  void resume(plan::TaskId id, std::exception_ptr error, bool again);

  /// Finished (successfully or not).
  bool is_done(plan::TaskId id) const;
  /// Removes the finished tasks from `ids`, under one lock.
  void drop_finished(std::vector<plan::TaskId>& ids) const;
  /// Blocks until the task is finished; throws the error that made it (or a task it
  /// depended on) fail.
  void wait(plan::TaskId id);
  /// Blocks until every submitted task is finished; throws the first error not yet reported.
  void wait_all();
  WorkerStats stats() const;

  /// Reports every task that runs from now on to `observer` (null: none). Before any task
  /// is submitted.
  void observe(Observer* observer) { observer_ = observer; }
  /// Kernels whose superblocks have at most `blocks` blocks go to an asynchronous device
  /// with others of their launch as one submission (0: each alone). Before any submit.
  void set_batch_blocks(int64_t blocks) { batch_blocks_ = blocks; }
  /// Times a sample of the Execute tasks into `costs` (null: none). Before any submit.
  void measure(CostModel* costs) { costs_ = costs; }
  /// In a run of one process, submit waits while `tasks` or more are unfinished until half
  /// of them have ended (0: never waits). Before any submit.
  void set_max_unfinished(std::size_t tasks) { max_unfinished_ = tasks; }

 private:
  struct Node {
    plan::Task task;
    int missing = 0;
    // Pending while this one is (a successor finishes after its dependencies): nodes do not
    // move in pending_, so the pointers hold.
    std::vector<Node*> successors;
    std::exception_ptr error;  // set when a dependency failed
    std::size_t staged_bytes = 0;
    bool sized = false;          // staged_bytes counted (the chunks exist by then)
    std::vector<ChunkUse> uses;  // announced to the memory manager at submit
    // Release before the dependencies finish: a task whose unfinished dependencies are all
    // queued on its own asynchronous device is staged and queued behind them at once.
    int unordered = 0;             // unfinished dependencies not queued on this task's device
    bool queued = false;           // in a work list, the ready queue or blocked_
    bool launched = false;         // submitted to its device
    bool ran = false;              // done on the device while a dependency was not reported done
    std::exception_ptr run_error;  // what the device reported then
    backend::Device::Ticket ticket = 0;  // the device's name for it, once launched
    bool held = false;  // may be held after it ran (TransferHooks): nothing is queued behind it
    bool submitting = false;   // being handed to its device without the lock (submit_unlocked)
    bool reported = false;     // ... and reported done meanwhile (with run_error)
    bool hold = false;         // not released early again: waits for its dependencies
    bool deferred = false;     // passed over once by tasks that need no copy (process)
    std::vector<Node*> batch;  // the first of a batch: all of its kernels (launch_batch)
    void reset();              // as new, keeping its vectors' memory
  };
  Node& add_node(plan::Task&& t);
  void announce(const std::vector<Node*>& nodes);
  void count_dependencies(Node& node);
  void recycle_finished();
  // After a task ran on its device: false when the transfer hooks hold it.
  bool after_run(Node* node, std::exception_ptr& error);
  void complete(Node* node, std::exception_ptr error, int dev);  // unstage and finish
  void complete_all(Node* const* nodes, std::size_t n, const std::exception_ptr& error, int dev);
  void relaunch(Node* node);  // runs a staged task's work on its device again
  void ran_on_device(Node* node, int dev, std::exception_ptr error);
  // Runs a task's work, timing it into the cost model when it is a sampled Execute (a GPU
  // with its events, after the work ends; a synchronous device by the clock, with the
  // task's share of the device from its ShareClock).
  void run_sampled(Node* node);
  void run_measured(const plan::Executable& e, int64_t threads, std::size_t bytes, int dev,
                    const std::function<void()>& run);
  TransferHooks& hooks(const plan::Task& task) const;  // throws when none are connected
  Node& pending(plan::TaskId id);                      // under the lock
  bool ordered_on_device(const Node& dep, const Node& succ) const;
  bool releasable(const Node& node) const;
  void scheduler_loop();
  // The steps of taking a ready task to its device (process), each a function.
  void process(std::deque<Node*>& work, int here);
  void process(std::deque<Node*>& work, int here, std::unique_lock<AdaptiveMutex>& lock);
  void run_inline(Node* node, bool skip, std::unique_lock<AdaptiveMutex>& lock,
                  std::deque<Node*>& work);
  bool size_and_stage(Node* node, std::size_t budget, std::exception_ptr& error);
  // deferred: its staging copies data, and tasks after it that need none may go first.
  enum class Staged { now, later, deferred };
  Staged admit_and_stage(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work,
                         std::vector<Node*>& batch, std::exception_ptr& error, bool may_defer);
  static bool for_others(const std::deque<Node*>& work, int here);
  static bool shares_chunk(const Node& node, const std::vector<Node*>& others);
  void copying_first();
  static bool defers_on(const std::vector<Node*>& deferred, int dev);
  static void take_back_deferred(std::vector<Node*>& deferred, std::deque<Node*>& work);
  void fail_unstaged(Node* node, const std::exception_ptr& error, std::deque<Node*>& work);
  bool stages_in_place(Node* node, std::exception_ptr& error);
  bool hold_until_ready(Node* node);
  void mark_held(Node& node);
  void run_here_or_queue(Node* node, std::unique_lock<AdaptiveMutex>& lock,
                         std::deque<Node*>& work);
  void run_here(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work);
  void launch(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work);
  template <class Submit>
  backend::Device::Ticket submit_unlocked(Node* const* nodes, std::size_t n,
                                          std::unique_lock<AdaptiveMutex>& lock, Submit&& submit);
  void launched(Node* node, backend::Device::Ticket ticket, std::deque<Node*>& work);
  void tickets_after(const Node& node, std::vector<backend::Device::Ticket>& after) const;
  void release_ordered(const Node& node, std::deque<Node*>& work);
  bool batchable(const Node& node) const;
  bool joins(const Node& first, const Node& next, std::size_t size) const;
  void launch_batch(std::vector<Node*>& batch, std::unique_lock<AdaptiveMutex>& lock,
                    std::deque<Node*>& work);
  void run_batch(const std::vector<Node*>& nodes);  // on the device, as one work
  void batch_ran(Node* first, std::exception_ptr error);
  void* staged_data(const Node& node, ChunkId chunk) const;
  void chunk_data(const Node& node, const plan::Execute& ex, void** out) const;
  void run_task(Node* node);     // on an executor thread, reported to the observer
  void run_payload(Node* node);  // does the task's work
  void unstage_chunks(Node* node, std::exception_ptr& error);  // without the lock
  void count_unstaged(const Node& node);                       // under the lock
  bool soon_done_on_device(const Node& node) const;
  void flush_devices(std::unique_lock<AdaptiveMutex>& lock);
  void watch_on_device(plan::TaskId id, std::unique_lock<AdaptiveMutex>& lock);
  template <class Unfinished>
  void watch(std::unique_lock<AdaptiveMutex>& lock, Unfinished&& unfinished);
  void wait_on_devices(std::unique_lock<AdaptiveMutex>& lock);
  void wait_for_room(std::unique_lock<AdaptiveMutex>& lock);
  bool room_again() const;
  void finish(Node* node, std::exception_ptr error, std::deque<Node*>& ready);

  std::vector<backend::Device*> devices_;
  MemoryManager& memory_;
  TransferHooks* hooks_ = nullptr;
  std::function<void(plan::TaskId, std::exception_ptr)> on_barrier_;
  std::vector<std::size_t> staging_limit_;  // per device
  bool stream_order_;
  int64_t batch_blocks_ = 2048;
  std::size_t max_unfinished_ = 0;

  mutable AdaptiveMutex mutex_;
  std::condition_variable_any wake_scheduler_, wake_waiters_;
  std::unordered_map<plan::TaskId, Node> pending_;
  std::unordered_map<plan::TaskId, std::exception_ptr> failed_;
  using NodeHandle = std::unordered_map<plan::TaskId, Node>::node_type;
  std::vector<NodeHandle> finished_;     // recycled by submit and wait
  std::vector<NodeHandle> spare_nodes_;  // for the next tasks
  std::deque<Node*> ready_;
  std::deque<Node*> blocked_;  // ready, but could not be staged yet
  std::vector<std::size_t> staged_bytes_;
  std::vector<int> staged_tasks_;
  bool any_asynchronous_;  // a device only queues work (a GPU): waiters watch before sleeping
  plan::TaskId max_submitted_ = 0;
  std::unordered_multiset<plan::TaskId> waited_;  // tasks a wait() is blocked on
  int waiting_all_ = 0;
  int waiting_room_ = 0;        // submits waiting for tasks to end (wait_for_room)
  std::size_t on_devices_ = 0;  // pending tasks queued on asynchronous devices
  bool stop_ = false;
  bool progress_ = false;              // something was unstaged since the last staging attempt
  bool short_of_memory_ = false;       // a task waits for memory: the hooks hear of it
  uint64_t unstage_epoch_ = 0;         // counts unstages, to see one during a staging
  std::atomic<int> callbacks_{0};      // completion callbacks running on executors
  std::atomic<uint64_t> finishes_{0};  // tasks finished, watched by a waiter without the lock
  std::exception_ptr unreported_;
  WorkerStats stats_;
  std::thread scheduler_;
  Observer* observer_ = nullptr;
  CostModel* costs_ = nullptr;
  std::unique_ptr<ShareClock[]> shares_;  // per device, for synchronous ones
};

}  // namespace gridspan::runtime
