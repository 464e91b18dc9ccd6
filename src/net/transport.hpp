// Messages between the processes of one gridspan run (the driver on rank 0, a worker on
// every rank): tagged byte strings, sent without blocking the sender and received in the
// order each sender sent them. The MPI transport moves them with non-blocking
// point-to-point operations progressed by a thread of its own, splits messages larger
// than one MPI message may be (2 GiB) into pieces, and never blocks the threads that call it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.hpp"

namespace gridspan::net {

struct Message {
  int source = -1;
  uint32_t tag = 0;  // what the message is (the protocol's own numbering)
  Bytes body;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Queues `body` for rank `to` and returns at once. Messages from one rank to another
  /// arrive in the order they were sent. Throws NetError for a rank that does not exist or
  /// once the transport has failed.
  virtual void send(int to, uint32_t tag, Bytes body) = 0;
  /// The next message that has arrived, waiting up to `timeout` for one; nullopt when none
  /// came. Throws NetError once the transport has failed.
  virtual std::optional<Message> receive(std::chrono::milliseconds timeout) = 0;
  /// This rank's place among the ranks of its node (GPUs of a node are shared out by it).
  virtual int node_rank() const { return 0; }
  virtual int node_size() const { return 1; }
  /// The ranks of this rank's node, itself included: processes that may reach each other's
  /// memory (Device::lend).
  virtual std::vector<int> node_peers() const { return {rank()}; }
  /// Ends every rank of the run at once with `code` (a rank that died or hangs cannot take
  /// part in an orderly end). The default ends this process only.
  [[noreturn]] virtual void abort(int code);
};

/// The tag of the heartbeats a watched transport sends and swallows.
constexpr uint32_t heartbeat_tag = 9;

/// `inner`, watching `peers`: it sends each of them a heartbeat every `timeout / 6` (at
/// most every second), and once one of them has not been heard from (any message counts)
/// for `timeout`, receive() throws NetError naming that rank, from then on. Every other
/// message passes through unchanged. One thread receives at a time.
std::unique_ptr<Transport> watch(std::unique_ptr<Transport> inner, std::vector<int> peers,
                                 std::chrono::milliseconds timeout);

/// `ranks` transports joined in this process (transport r is rank r): for tests, and for
/// running several ranks' workers in one process. Messages are moved, never copied.
std::vector<std::unique_ptr<Transport>> make_local_transports(int ranks);

/// True when this build has MPI and the process was started by an MPI launcher (mpirun
/// sets its environment), so that a Context should be one rank of many.
bool launched_by_mpi();

/// The MPI transport over MPI_COMM_WORLD. Initialises MPI (at least MPI_THREAD_SERIALIZED:
/// only its own thread calls MPI after that) and finalises it when destroyed, after every
/// queued message has gone. One per process. `max_piece`: the largest MPI message it sends
/// (larger messages go in pieces); 0 = 1 GiB. Throws NetError when the build has no MPI.
std::unique_ptr<Transport> make_mpi_transport(std::size_t max_piece = 0);

}  // namespace gridspan::net
