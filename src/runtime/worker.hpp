// The worker: schedules its part of the task graph on its devices. A task waits for its
// dependencies, is staged (the memory manager makes all its chunks resident, or none),
// is queued at its device's executor, runs, and is unstaged; then its successors are
// released. The bytes staged ahead per device are bounded (GRIDSPAN_STAGING_BYTES).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/device.hpp"
#include "core/bytes.hpp"
#include "core/mutex.hpp"
#include "plan/task.hpp"
#include "runtime/memory.hpp"
#include "runtime/observer.hpp"

namespace gridspan::runtime {

struct WorkerStats {
  uint64_t tasks_run = 0;
  uint64_t tasks_failed = 0;
  uint64_t stage_retries = 0;         // times a task could not be staged at once
  uint64_t tasks_submitted = 0;       // handed to an asynchronous device (a GPU)
  uint64_t tasks_released_early = 0;  // ... while dependencies of theirs still ran there
  uint64_t transfers_lent = 0;        // Sends whose memory the receiver copied itself
  uint64_t transfers_refused = 0;     // ... out of the receiver's reach: bytes sent instead
};

/// On a worker connected to other processes a task's own failure is named "rank R, task T
/// (kernel `k` on device D): why", and errors passed on to later tasks keep that name: the
/// task T that failed, read back from an error's message (nullopt for other messages).
std::string failed_task_name(int rank, plan::TaskId task, const std::string& what);
std::optional<plan::TaskId> failed_task(const std::string& message);

/// What the receiver of lent memory says when it is done with it.
enum class LentReply : uint8_t {
  copied = 0,       // the data are copied (or the Recv failed): the Send is done
  unreachable = 1,  // that memory is out of the receiver's reach: send the bytes, now and on
  declined = 2,     // the receiver is short of memory, or the sender is: send the bytes
};

/// How a worker's Send tasks reach the worker of another process: the process's dispatcher
/// implements it over its transport, and hands what arrives to Worker::deliver.
class DataLink {
 public:
  virtual ~DataLink() = default;
  /// Queues the data of `transfer` for rank `to`; must not block on the network.
  virtual void send(int to, plan::TransferId transfer, Bytes data) = 0;
  /// Tells rank `to` that `transfer` will never come (its Send failed, or a task before it
  /// did), so that its Recv fails with `error` instead of waiting. Called with the worker's
  /// lock held: must not block.
  virtual void fail(int to, plan::TransferId transfer, const std::exception_ptr& error) = 0;
  /// This process's rank: a task that fails on a connected worker names it and the task.
  virtual int rank() const = 0;

  // Transfers between processes of one node may skip host memory and the network: the Send
  // lends its device memory (Device::lend), the Recv's device copies from there, and the
  // Send finishes once the receiver says it is done with it.

  /// Whether a Send of `bytes` to rank `to` may lend its memory.
  virtual bool may_lend(int to, std::size_t bytes) const {
    (void)to, (void)bytes;
    return false;
  }
  /// Tells rank `to` where the data of `transfer` are: the box `rect` of memory that
  /// `lent` describes. Must not block on the network.
  virtual void send_lent(int to, plan::TransferId transfer, const Rect& rect,
                         std::vector<unsigned char> lent) {
    (void)to, (void)transfer, (void)rect, (void)lent;
    throw NetError("internal error: this connection cannot lend memory");
  }
  /// Tells rank `to` that the memory it lent for `transfer` is no longer needed: copied, or
  /// not, when it is out of reach from here or when this rank is short of memory, so that
  /// it sends the bytes instead. Must not block on the network.
  virtual void lent_done(int to, plan::TransferId transfer, LentReply reply) {
    (void)to, (void)transfer, (void)reply;
    throw NetError("internal error: this connection cannot lend memory");
  }
  /// Asks rank `to` to give back the memory lent for `transfer` unless its copy has begun
  /// (this rank is short of memory). Must not block on the network.
  virtual void recall_lent(int to, plan::TransferId transfer) {
    (void)to, (void)transfer;
    throw NetError("internal error: this connection cannot lend memory");
  }
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
  /// them). Dependencies on finished tasks are satisfied at once.
  void submit(std::vector<plan::Task>&& tasks);
  /// Debugging (GRIDSPAN_CHECK_TRANSFERS): every transfer's region is compared with its
  /// bytes once sent or received. Before any task is submitted.
  void check_transfers(bool on) { check_transfers_ = on; }
  /// Where Send tasks go (before any is submitted; null: none may be).
  void connect(DataLink* link);
  /// Called (with the worker's lock held: it must not block or call the worker) when a
  /// Barrier task finishes, with its error if it failed.
  void on_barrier(std::function<void(plan::TaskId, std::exception_ptr)> f);
  /// The data of a transfer from another process: the Recv or RecvHost task of that
  /// transfer, submitted before or after, takes it.
  void deliver(plan::TransferId transfer, Bytes data);
  /// A transfer that will never come: its Recv fails with `error`.
  void deliver_failure(plan::TransferId transfer, std::exception_ptr error);
  /// Where another process of this node lent the data of a transfer (DataLink::send_lent):
  /// the Recv copies them from there, then tells the sender (lent_done).
  void deliver_lent(plan::TransferId transfer, int from, const Rect& rect,
                    std::vector<unsigned char> lent);
  /// The receiver of a Send that lent its memory is done with it: the Send finishes, or
  /// (when it did not copy) sends the bytes after all.
  void lent_done(plan::TransferId transfer, LentReply reply);
  /// The sender of lent memory wants it back: declined unless the copy has begun.
  void recall_lent(plan::TransferId transfer);
  /// Every Recv waiting for its data fails with `error` (the rank they would come from is
  /// gone, or the session ends), so that nothing waits for them forever.
  void fail_transfers(const std::exception_ptr& error);
  /// Finished (successfully or not).
  bool is_done(plan::TaskId id) const;
  /// Blocks until the task is finished; throws the error that made it (or a task it
  /// depended on) fail.
  void wait(plan::TaskId id);
  /// Blocks until every submitted task is finished; throws the first error not yet reported.
  void wait_all();
  WorkerStats stats() const;

  /// Reports every task that runs from now on to `observer` (null: none). Before any task
  /// is submitted.
  void observe(Observer* observer) { observer_ = observer; }

 private:
  struct Node {
    plan::Task task;
    int missing = 0;
    std::vector<plan::TaskId> successors;
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
    Bytes transfer;                      // a Send's data once read, a Recv's once arrived
    // Transfers within a node (DataLink::may_lend): the memory a Send lent, or where a
    // Recv copies from, described (Device::lend), and the box it holds.
    std::vector<unsigned char> lent;
    Rect lent_rect;
    bool lend_refused = false;  // the receiver could not reach the memory: bytes go
    bool lends = false;         // launched as a Send that lends or a Recv that copies lent memory:
                                // done only once the other side is, so nothing is queued behind it
    bool refetch = false;       // a Recv waiting for the bytes after all
    bool recalled = false;      // a lending Send whose memory was asked back
  };
  // After a task ran on its device: a Send's data go to their rank, a Recv that copied
  // lent memory says so. False when the task is not done yet: a Send whose lent memory
  // is still to be copied, a Recv that waits for the bytes after all.
  bool after_run(Node* node, std::exception_ptr& error);
  void complete(Node* node, std::exception_ptr error, int dev);  // unstage and finish
  void relaunch(Node* node);  // runs a staged task's work on its device again
  void ran_on_device(Node* node, int dev, std::exception_ptr error);
  bool park(std::unordered_map<plan::TransferId, Node*>& where, plan::TransferId transfer,
            Node* node, const std::function<void()>& tell);
  DataLink* link() const;
  // Lent memory is held on both sides while a Recv waits to copy it: short of memory, a
  // worker declines what it holds and recalls what it lent, so that no two ranks wait for
  // each other's memory. Under the lock.
  void ease_memory();
  bool decline(plan::TransferId transfer);
  void drop_lent(Node& node);
  void check_transfer(Node* node, std::exception_ptr& error);
  bool check_transfers_ = false;
  struct Arrival;
  void arrive(plan::TransferId transfer, Arrival arrival);
  static void take(Node& node, Arrival arrival);
  bool ordered_on_device(const Node& dep, const Node& succ) const;
  bool releasable(const Node& node) const;
  void scheduler_loop();
  // The steps of taking a ready task to its device (process), each a function.
  void process(std::deque<Node*>& work, int here);
  void run_inline(Node* node, bool skip, std::unique_lock<AdaptiveMutex>& lock,
                  std::deque<Node*>& work);
  std::exception_ptr size_of(Node* node);
  enum class Staged { now, later };
  Staged admit_and_stage(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work,
                         std::exception_ptr& error);
  void fail_unstaged(Node* node, const std::exception_ptr& error, std::deque<Node*>& work);
  void mark_lending(Node& node);
  void run_here(Node* node, std::unique_lock<AdaptiveMutex>& lock, std::deque<Node*>& work);
  void launch(Node* node, std::deque<Node*>& work);
  void run_task(Node* node);     // on an executor thread, reported to the observer
  void run_payload(Node* node);  // does the task's work
  void unstage(Node* node, std::exception_ptr& error);
  void finish(Node* node, std::exception_ptr error, std::deque<Node*>& ready);

  std::vector<backend::Device*> devices_;
  MemoryManager& memory_;
  DataLink* link_ = nullptr;
  std::function<void(plan::TaskId, std::exception_ptr)> on_barrier_;
  std::vector<std::size_t> staging_limit_;  // per device
  bool stream_order_;

  mutable AdaptiveMutex mutex_;
  std::condition_variable_any wake_scheduler_, wake_waiters_;
  std::unordered_map<plan::TaskId, Node> pending_;
  std::unordered_map<plan::TaskId, std::exception_ptr> failed_;
  std::vector<std::unordered_map<plan::TaskId, Node>::node_type> finished_;  // freed by submit
  std::deque<Node*> ready_;
  std::deque<Node*> blocked_;  // ready, but could not be staged yet
  // Transfers that arrived before their Recv was submitted, and Recvs waiting for theirs.
  struct Arrival {
    Bytes data;
    std::exception_ptr error;         // set: the data will never come, and why
    std::vector<unsigned char> lent;  // or where they are (another process lent them)
    Rect lent_rect;
    int from = -1;  // the lending rank
  };
  std::unordered_map<plan::TransferId, Node*> lent_;  // Sends whose memory is being copied
  // Lent memory this worker's Recvs have not begun to copy: the Recv (null while it is not
  // submitted) and the lending rank.
  struct Held {
    Node* node;
    int from;
  };
  std::unordered_map<plan::TransferId, Held> held_;
  std::unordered_map<plan::TransferId, Arrival> arrived_;
  std::unordered_map<plan::TransferId, Node*> awaiting_;
  std::vector<std::size_t> staged_bytes_;
  std::vector<int> staged_tasks_;
  plan::TaskId max_submitted_ = 0;
  std::unordered_multiset<plan::TaskId> waited_;  // tasks a wait() is blocked on
  int waiting_all_ = 0;
  bool stop_ = false;
  bool progress_ = false;          // something was unstaged since the last staging attempt
  uint64_t unstage_epoch_ = 0;     // counts unstages, to see one during a staging
  std::atomic<int> callbacks_{0};  // completion callbacks running on executors
  std::exception_ptr unreported_;
  WorkerStats stats_;
  std::thread scheduler_;
  Observer* observer_ = nullptr;
};

}  // namespace gridspan::runtime
