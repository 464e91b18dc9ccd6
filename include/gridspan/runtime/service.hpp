// One rank's worker served over a transport (issue 4): the driver's task batches are
// submitted to it, transfer data from other ranks are delivered to it, its Send tasks' data
// go out through the transport, and every Barrier part it finishes is reported to the
// driver's rank. A thread of its own receives and dispatches every message; on the
// driver's rank it also hands the other ranks' reports to the driver.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "gridspan/net/transport.hpp"
#include "gridspan/net/wire.hpp"
#include "gridspan/runtime/worker.hpp"

namespace gridspan::runtime {

/// The protocol's message tags.
namespace tag {
constexpr uint32_t tasks = 10;        // driver → worker: encoded tasks
constexpr uint32_t data = 11;         // worker → worker: a transfer's number, then its bytes
constexpr uint32_t done = 12;         // worker → driver: a barrier part finished (or failed)
constexpr uint32_t shutdown = 13;     // driver → worker: stop serving
constexpr uint32_t data_failed = 14;  // worker → worker: a transfer's number, why it won't come
}  // namespace tag

/// A barrier part's end as the driver hears it.
struct BarrierReport {
  int rank;
  plan::TaskId barrier;
  bool failed;
  std::string message;  // the error's message when failed
};

class WorkerService final : public DataLink {
 public:
  /// `executables` resolves the kernels named in task batches; `on_report` (on the driver's
  /// rank) gets every barrier report, this rank's own included.
  WorkerService(net::Transport& transport, Worker& worker, net::ExecutableOfId executables,
                std::function<void(const BarrierReport&)> on_report = {}, int driver = 0);
  ~WorkerService() override;  // stops dispatching
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  void send(int to, plan::TransferId transfer, std::vector<unsigned char> data) override;
  void fail(int to, plan::TransferId transfer, const std::string& why) override;
  /// Blocks until the driver's shutdown message has come; rethrows what stopped the
  /// dispatcher (a malformed message, a failed transport).
  void serve_until_shutdown();
  /// Driver side: sends a batch of tasks to `rank`'s service.
  static void send_tasks(net::Transport& t, int rank, const std::vector<plan::Task>& tasks,
                         const net::IdOfExecutable& id_of);
  static void send_shutdown(net::Transport& t, int rank);

 private:
  void dispatch_loop();
  void report(plan::TaskId barrier, std::exception_ptr error);

  net::Transport& transport_;
  Worker& worker_;
  net::ExecutableOfId executables_;
  std::function<void(const BarrierReport&)> on_report_;
  int driver_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  bool shutdown_ = false;
  std::exception_ptr failure_;
  std::atomic<bool> stop_{false};
  std::thread dispatcher_;
};

}  // namespace gridspan::runtime
