// One rank's worker served over a transport: the driver's task batches are
// submitted to it, transfer data from other ranks are delivered to its Transfers, its Send tasks'
// data go out through the transport, and every Barrier part it finishes is reported to the driver's
// rank. A thread of its own receives and dispatches every message; on the driver's rank it also
// hands the other ranks' reports to the driver.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "backend/device.hpp"
#include "gridspan/core/error.hpp"
#include "net/transport.hpp"
#include "net/wire.hpp"
#include "runtime/transfers.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

/// The protocol's message tags (net::heartbeat_tag is the transport's own).
namespace tag {
constexpr uint32_t tasks = 10;          // driver → worker: encoded tasks
constexpr uint32_t data = 11;           // worker → worker: a transfer's bytes, then its number
constexpr uint32_t done = 12;           // worker → driver: a barrier part finished (or failed)
constexpr uint32_t shutdown = 13;       // driver → worker: the session ends, stop serving it
constexpr uint32_t data_failed = 14;    // worker → worker: a transfer's number, why it won't come
constexpr uint32_t compile = 15;        // driver → worker: an executable's number and its kernel
constexpr uint32_t error = 16;          // worker → driver: the rank cannot go on, and why
constexpr uint32_t open = 17;           // driver → worker: a session begins, with its config
constexpr uint32_t hello = 18;          // worker → driver: the session's devices on that rank
constexpr uint32_t stats_request = 19;  // driver → worker: send your memory figures (body
                                        // [1]: free the pools' free blocks first)
constexpr uint32_t stats = 20;          // worker → driver: them
constexpr uint32_t exit = 21;           // driver → worker: the process ends, with this code
constexpr uint32_t closed = 22;         // worker → driver: its part of the session has ended
constexpr uint32_t lent = 23;           // worker → worker: where a transfer's data lie, lent
constexpr uint32_t lent_done = 24;      // worker → worker: done with lent memory (or send it)
constexpr uint32_t lent_recall = 25;    // worker → worker: give lent memory back if you can
constexpr uint32_t trace = 26;          // worker → driver: its trace events, before `closed`
}  // namespace tag

/// What the driver hears from a rank that cannot go on (a kernel that does not compile
/// there, a malformed message, a rank that stopped answering): the run must stop.
struct RankError {
  int rank;
  std::string message;
};

/// A barrier part's end as the driver hears it.
struct BarrierReport {
  int rank;
  plan::TaskId barrier;
  std::exception_ptr error;  // set when it failed: the error of the kind thrown there
  bool failed() const { return error != nullptr; }
  std::string message() const { return error ? describe_error(error).message : std::string(); }
};

class WorkerService final : public DataLink {
 public:
  /// `executables` resolves the kernels named in task batches; `on_report` (on the driver's
  /// rank) gets every barrier report, this rank's own included.
  WorkerService(net::Transport& transport, Worker& worker, Transfers& transfers,
                net::ExecutableOfId executables,
                std::function<void(const BarrierReport&)> on_report = {}, int driver = 0);
  /// Kernels the driver sends (`compile` messages) are compiled with `backend` and named by
  /// the driver's number from then on. `on_error` (on the driver's rank) hears ranks that
  /// cannot go on.
  void compile_with(backend::Backend* backend) { backend_ = backend; }
  void on_error(std::function<void(const RankError&)> f) { on_error_ = std::move(f); }
  /// Messages of tags the service does not serve itself (a session's hello and stats) go
  /// to `f` on the dispatcher thread; it returns false for a tag it does not know either.
  /// Set before any such message can come.
  void on_message(std::function<bool(net::Message&)> f) { on_message_ = std::move(f); }
  ~WorkerService() override;  // stops dispatching
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  /// Ranks of this node (`peers`) may copy transfers of at least `min_bytes` from this
  /// rank's devices themselves (DataLink::may_lend); until a rank says it cannot.
  void lend_to(const std::vector<int>& peers, std::size_t min_bytes);

  void send(int to, plan::TransferId transfer, Bytes data) override;
  void fail(int to, plan::TransferId transfer, const std::exception_ptr& error) override;
  int rank() const override { return transport_.rank(); }
  bool may_lend(int to, std::size_t bytes) const override;
  void send_lent(int to, plan::TransferId transfer, const Rect& rect,
                 std::vector<unsigned char> lent) override;
  void lent_done(int to, plan::TransferId transfer, LentReply reply) override;
  void recall_lent(int to, plan::TransferId transfer) override;
  /// Blocks until the driver's shutdown message has come; rethrows what stopped the
  /// dispatcher (a malformed message, a failed transport).
  void serve_until_shutdown();
  /// Set when the session ended with the driver's `exit` instead of `shutdown` (the driver's
  /// process ended with the session still open): the code to exit with.
  std::optional<int> exit_code() const;
  /// Driver side: sends a batch of tasks to `rank`'s service.
  static void send_tasks(net::Transport& t, int rank, const std::vector<plan::Task>& tasks,
                         const net::IdOfExecutable& id_of);
  static void send_shutdown(net::Transport& t, int rank);
  /// Driver side: `rank` compiles `kernel` and calls it executable `id` in task batches.
  static void send_compile(net::Transport& t, int rank, net::ExecutableId id,
                           const backend::KernelSource& kernel);
  /// Driver side: `rank` calls the native function registered there under `name`
  /// executable `id`.
  static void send_native(net::Transport& t, int rank, net::ExecutableId id,
                          const std::string& name);

 private:
  void dispatch_loop();
  void report(plan::TaskId barrier, std::exception_ptr error);
  void compile(const net::Message& m);
  const plan::Executable* executable(net::ExecutableId id) const;

  net::Transport& transport_;
  Worker& worker_;
  Transfers& transfers_;
  net::ExecutableOfId executables_;
  std::function<void(const BarrierReport&)> on_report_;
  std::function<void(const RankError&)> on_error_;
  std::function<bool(net::Message&)> on_message_;
  int driver_;
  backend::Backend* backend_ = nullptr;
  std::unordered_map<net::ExecutableId, std::shared_ptr<const plan::Executable>> compiled_;
  mutable std::mutex lend_mutex_;
  std::vector<char> lends_;  // per rank: may copy from this rank's devices
  std::size_t lend_min_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable stopped_;
  bool shutdown_ = false;
  std::optional<int> exit_code_;
  std::exception_ptr failure_;
  std::atomic<bool> stop_{false};
  std::thread dispatcher_;
};

}  // namespace gridspan::runtime
