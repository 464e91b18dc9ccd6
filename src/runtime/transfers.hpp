// Transfers between processes: a worker's Send, Recv and RecvHost tasks, run for it
// (Worker's TransferHooks), and the protocol by which ranks of one node lend each other
// device memory. What arrives from other ranks comes here; a Recv's task waits in the
// worker until its data (or why they won't come) are here.
//
// Lending: a Send to a rank of this node lends the memory of its region instead of reading
// it (Device::lend); the Recv's device copies from there (Device::copy_lent) and says it is
// done (LentReply::copied), and only then does the Send end. A receiver that cannot reach
// that memory replies `unreachable`, one short of memory `declined`: the Send sends the
// bytes after all. A sender short of memory recalls what it lent (declined unless its copy
// has begun), so that no two ranks wait for each other's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/device.hpp"
#include "core/bytes.hpp"
#include "plan/task.hpp"
#include "runtime/memory.hpp"
#include "runtime/worker.hpp"

namespace gridspan::runtime {

/// What the receiver of lent memory says when it is done with it.
enum class LentReply : uint8_t {
  copied = 0,       // the data are copied (or the Recv failed): the Send is done
  unreachable = 1,  // that memory is out of the receiver's reach: send the bytes, now and on
  declined = 2,     // the receiver is short of memory, or the sender is: send the bytes
};

/// How Send tasks reach another process: the process's dispatcher implements it over its
/// transport, and hands what arrives to Transfers (deliver, deliver_lent, ...). Every call
/// may be made with the worker's lock held: none may block on the network.
class DataLink {
 public:
  virtual ~DataLink() = default;
  /// Queues the data of `transfer` for rank `to`.
  virtual void send(int to, plan::TransferId transfer, Bytes data) = 0;
  /// Tells rank `to` that `transfer` will never come (its Send failed, or a task before it
  /// did), so that its Recv fails with `error` instead of waiting.
  virtual void fail(int to, plan::TransferId transfer, const std::exception_ptr& error) = 0;
  /// This process's rank: a task that fails on a connected worker names it and the task.
  virtual int rank() const = 0;
  /// Whether a Send of `bytes` to rank `to` may lend its memory.
  virtual bool may_lend(int to, std::size_t bytes) const {
    (void)to, (void)bytes;
    return false;
  }
  /// Tells rank `to` where the data of `transfer` are: the box `rect` of memory that
  /// `lent` describes.
  virtual void send_lent(int to, plan::TransferId transfer, const Rect& rect,
                         std::vector<unsigned char> lent);
  /// Tells rank `to` that the memory it lent for `transfer` is no longer needed (`reply`
  /// says whether it was copied).
  virtual void lent_done(int to, plan::TransferId transfer, LentReply reply);
  /// Asks rank `to` to give back the memory lent for `transfer` unless its copy has begun.
  virtual void recall_lent(int to, plan::TransferId transfer);
};

struct TransferStats {
  uint64_t lent = 0;        // Sends whose memory the receiver copied itself
  uint64_t not_copied = 0;  // ... out of the receiver's reach, or declined: bytes sent instead
};

class Transfers final : public TransferHooks {
 public:
  /// Runs the transfer tasks of `worker` (whose devices and memory these are) and connects
  /// itself to it.
  Transfers(Worker& worker, std::vector<backend::Device*> devices, MemoryManager& memory);
  ~Transfers() override;  // after the worker has finished every task
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  /// Where Send tasks go (null: nowhere; a Send fails). Before any is submitted, and
  /// disconnected only when the worker is idle.
  void connect(DataLink* link);
  /// Debugging (GRIDSPAN_CHECK_TRANSFERS): every transfer's region is compared with its
  /// bytes once sent or received. Before any task is submitted.
  void check_transfers(bool on) { check_ = on; }

  // What arrives from other processes (on the dispatcher's thread).
  /// The data of a transfer: its Recv or RecvHost, submitted before or after, takes them.
  void deliver(plan::TransferId transfer, Bytes data);
  /// A transfer that will never come: its Recv fails with `error`.
  void deliver_failure(plan::TransferId transfer, std::exception_ptr error);
  /// Where another process of this node lent the data of a transfer: the Recv copies them
  /// from there, then tells the sender.
  void deliver_lent(plan::TransferId transfer, int from, const Rect& rect,
                    std::vector<unsigned char> lent);
  /// The receiver of a Send that lent its memory is done with it: the Send ends, or (when
  /// it did not copy) sends the bytes after all.
  void lent_done(plan::TransferId transfer, LentReply reply);
  /// The sender of lent memory wants it back: declined unless the copy has begun.
  void recall_lent(plan::TransferId transfer);
  /// Every Recv waiting for its data, and every Send waiting for its receiver, fails with
  /// `error` (the rank on the other side is gone, or the session ends).
  void fail_all(const std::exception_ptr& error);
  TransferStats stats() const;

  // TransferHooks: what the worker asks.
  bool awaits(const plan::Task& task, std::exception_ptr& error) override;
  bool held_after_run(const plan::Task& task) override;
  void run(const plan::Task& task) override;
  bool after_run(const plan::Task& task, std::exception_ptr& error) override;
  void finished(const plan::Task& task, const std::exception_ptr& error) override;
  void short_of_memory() override;
  int rank() const override;

 private:
  // A Recv's (or RecvHost's) transfer, from whichever comes first, its task or its data.
  struct Incoming {
    enum class State {
      waiting,    // for its data
      arrived,    // its data, their error or lent memory are here
      declining,  // lent memory being given back (Worker::unsatisfy)
      copying,    // lent memory the Recv is on its way to copy
      refetch,    // a staged Recv that could not reach lent memory, waiting for the bytes
    };
    State state = State::waiting;
    bool submitted = false;
    plan::TaskId task = 0;
    Bytes data;
    std::exception_ptr error;
    std::vector<unsigned char> lent;  // described by the lending device
    Rect lent_rect;
    int from = -1;             // the lending rank
    bool unreachable = false;  // the device could not reach the lent memory
  };
  // A Send's transfer, from when it is taken to its device.
  struct Outgoing {
    plan::TaskId task = 0;
    int to = -1;
    bool lends = false;       // to a rank of this node that may copy from this device
    bool send_bytes = false;  // the receiver did not copy: the bytes go
    bool recalled = false;
    bool waiting = false;  // lent: for the receiver to say it is done
    Bytes data;
    std::vector<unsigned char> lent;
    Rect lent_rect;
  };
  void arrive(plan::TransferId transfer, Incoming arrival);
  bool decline(plan::TransferId transfer);
  void run_send(const plan::Task& task, const plan::Send& send, Outgoing& out);
  void run_recv(const plan::Task& task, const plan::Recv& recv, Incoming& in);
  void run_recv_host(const plan::Task& task, const plan::RecvHost& recv, Incoming& in);
  bool after_send(const plan::Task& task, const plan::Send& send, std::exception_ptr& error);
  bool after_recv(const plan::Task& task, const plan::Recv& recv, std::exception_ptr& error);
  void check(const plan::Task& task, const Bytes& bytes, std::exception_ptr& error) const;
  void tell(int to, plan::TransferId transfer, LentReply reply) const;
  DataLink& link(const plan::Task& task) const;
  Incoming& incoming(plan::TransferId transfer);
  Outgoing& outgoing(plan::TransferId transfer);

  Worker& worker_;
  std::vector<backend::Device*> devices_;
  MemoryManager& memory_;
  bool check_ = false;
  // Worker → Transfers is the lock order: no call to the worker is made with this held.
  mutable std::mutex mutex_;
  DataLink* link_ = nullptr;
  std::unordered_map<plan::TransferId, Incoming> incoming_;
  std::unordered_map<plan::TransferId, Outgoing> outgoing_;
  TransferStats stats_;
};

}  // namespace gridspan::runtime
