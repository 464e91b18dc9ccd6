// This process as one rank of a run under mpirun. Every rank is a worker; rank 0
// also drives: it runs the user's program, and each gs::Context there is a session that
// every other rank serves (its own backend, memory manager and worker) from `open` to
// `shutdown`. The other ranks run no user code: they serve sessions until the driver ends
// the process (`exit`, with the code every rank returns). Heartbeats go both ways; a rank
// not heard from for GRIDSPAN_NET_TIMEOUT fails the run, and a failed run ends every rank
// at once (MPI_Abort), since a rank that hangs cannot take part in an orderly end.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "gridspan/core/config.hpp"
#include "gridspan/core/info.hpp"
#include "net/transport.hpp"
#include "net/wire.hpp"
#include "plan/task.hpp"
#include "runtime/memory.hpp"

namespace gridspan::runtime {

void write_rank_info(net::Writer& w, const RankInfo& info);
RankInfo read_rank_info(net::Reader& r);

/// The session's settings as the driver sends them (every rank runs with the driver's).
void write_config(net::Writer& w, const Config& c);
Config read_config(net::Reader& r);
/// Memory figures of one rank's spaces.
void write_stats(net::Writer& w, const std::vector<MemoryStats>& stats);
std::vector<MemoryStats> read_stats(net::Reader& r);

class Process {
 public:
  /// True when mpirun started this process with other ranks and GRIDSPAN_MPI is not off.
  static bool distributed();
  /// The processes of the run: the ranks when distributed, else 1.
  static int count();
  /// Runs `program` in this process, or under mpirun on rank 0 while the others serve it;
  /// returns its exit code on every rank (gs::run_program).
  static int run_program(const std::function<int()>& program);
  /// The process's rank; the first call starts MPI and the heartbeats (NetError when this
  /// build has no MPI).
  static Process& get();
  ~Process();

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  net::Transport& transport() { return *transport_; }
  /// Not the driver: serves the driver's sessions until it ends the process; returns the
  /// code the driver's rank exits with.
  int serve();
  /// The driver: every rank returns `code` (after a failure of the run, every rank is
  /// aborted with it). Once per process; later sessions cannot start.
  int finish(int code);
  /// The run lost a rank or its messages: finish() aborts every rank, and no session
  /// starts any more (messages of the failed one may still be on their way).
  void mark_failed() { failed_ = true; }
  bool failed() const { return failed_; }

 private:
  Process();
  // Serves one session; returns the exit code when the driver ended the process in it.
  std::optional<int> serve_session(const net::Message& open);

  std::unique_ptr<net::Transport> transport_;
  std::mutex mutex_;
  bool finished_ = false;
  std::atomic<bool> failed_{false};
};

}  // namespace gridspan::runtime
