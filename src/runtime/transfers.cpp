// Transfers between processes and the lending of device memory (see transfers.hpp).
#include "runtime/transfers.hpp"

#include <fmt/format.h>

#include "backend/regions.hpp"
#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::runtime {

using plan::Task;
using plan::TaskId;
using plan::TransferId;

namespace {

// The transfer a Recv or RecvHost receives.
TransferId received(const Task& t) {
  if (auto* r = std::get_if<plan::Recv>(&t.payload)) return r->transfer;
  return std::get<plan::RecvHost>(t.payload).transfer;
}

// The transfer's data must fill the region exactly.
void check_size(const Task& t, std::size_t got, const Rect& region, std::size_t elem) {
  const std::size_t want = static_cast<std::size_t>(region.volume()) * elem;
  if (got != want)
    throw NetError(fmt::format("task {} ({}) received {} bytes for a region of {} bytes ({})", t.id,
                               t.kind(), got, want, region.str()));
}

NetError cannot_lend() {
  return NetError("internal error: this connection cannot lend memory");
}

}  // namespace

void DataLink::send_lent(int, TransferId, const Rect&, std::vector<unsigned char>) {
  throw cannot_lend();
}
void DataLink::lent_done(int, TransferId, LentReply) {
  throw cannot_lend();
}
void DataLink::recall_lent(int, TransferId) {
  throw cannot_lend();
}

Transfers::Transfers(Worker& worker, std::vector<backend::Device*> devices, MemoryManager& memory)
    : worker_(worker), devices_(std::move(devices)), memory_(memory) {
  worker_.connect(this);
}

Transfers::~Transfers() {
  if (stats_.lent + stats_.not_copied > 0)
    logging::info(
        "{} transfers copied by their receivers from this rank's memory, {} of them "
        "declined or out of reach (sent through the host instead)",
        stats_.lent + stats_.not_copied, stats_.not_copied);
}

void Transfers::connect(DataLink* link) {
  std::lock_guard lock(mutex_);
  link_ = link;
}

TransferStats Transfers::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

int Transfers::rank() const {
  std::lock_guard lock(mutex_);
  return link_ ? link_->rank() : -1;
}

DataLink& Transfers::link(const Task& task) const {
  std::lock_guard lock(mutex_);
  if (!link_)
    throw NetError(fmt::format(
        "internal error: task {} ({}) moves data between processes, but this worker has no "
        "connection to other processes",
        task.id, task.kind()));
  return *link_;  // connected before any transfer is submitted, disconnected when idle
}

Transfers::Incoming& Transfers::incoming(TransferId transfer) {
  std::lock_guard lock(mutex_);
  auto it = incoming_.find(transfer);
  if (it == incoming_.end())
    throw NetError(fmt::format("internal error: transfer {} has no receiver here", transfer));
  return it->second;  // its task's own while it runs: nothing else touches it then
}

Transfers::Outgoing& Transfers::outgoing(TransferId transfer) {
  std::lock_guard lock(mutex_);
  auto it = outgoing_.find(transfer);
  if (it == outgoing_.end())
    throw NetError(fmt::format("internal error: transfer {} has no sender here", transfer));
  return it->second;
}

// Tells the lending rank; a rank that is gone waits for no reply.
void Transfers::tell(int to, TransferId transfer, LentReply reply) const {
  DataLink* link = nullptr;
  {
    std::lock_guard lock(mutex_);
    link = link_;
  }
  if (link) link->lent_done(to, transfer, reply);
}

// --- What the worker asks -------------------------------------------------------------

bool Transfers::awaits(const Task& task, std::exception_ptr& error) {
  if (std::holds_alternative<plan::Send>(task.payload)) return false;
  const TransferId transfer = received(task);
  std::lock_guard lock(mutex_);
  Incoming& in = incoming_[transfer];
  if (in.submitted)
    throw NetError(fmt::format("internal error: a second task receives transfer {}", transfer));
  in.submitted = true;
  in.task = task.id;
  if (in.state == Incoming::State::waiting) return true;
  error = in.error;  // it came first
  return false;
}

// A Send that may lend its memory, and a Recv that copies lent memory, end only once the
// other side is done.
bool Transfers::held_after_run(const Task& task) {
  std::lock_guard lock(mutex_);
  if (auto* s = std::get_if<plan::Send>(&task.payload)) {
    Outgoing& out = outgoing_[s->transfer];
    out.task = task.id;
    out.to = s->to;
    const auto bytes = static_cast<std::size_t>(s->region.volume()) * s->elem_size;
    out.lends = s->to_device && link_ && link_->may_lend(s->to, bytes);
    return out.lends;
  }
  auto* r = std::get_if<plan::Recv>(&task.payload);
  if (!r) return false;
  auto it = incoming_.find(r->transfer);
  if (it == incoming_.end() || it->second.lent.empty()) return false;
  it->second.state = Incoming::State::copying;  // too late to decline it
  return true;
}

void Transfers::run(const Task& task) {
  if (auto* s = std::get_if<plan::Send>(&task.payload))
    run_send(task, *s, outgoing(s->transfer));
  else if (auto* r = std::get_if<plan::Recv>(&task.payload))
    run_recv(task, *r, incoming(r->transfer));
  else
    run_recv_host(task, std::get<plan::RecvHost>(task.payload), incoming(received(task)));
}

// The receiver copies the region from this device itself, if the device can lend its
// memory; else the bytes are read, as for any Send.
void Transfers::run_send(const Task& task, const plan::Send& s, Outgoing& out) {
  backend::Device& dev = *devices_[task.device];
  void* src = memory_.data(s.src.id);
  if (out.lends && !out.send_bytes) {
    out.lent = dev.lend(src, static_cast<std::size_t>(s.src.rect.volume()) * s.elem_size);
    out.lent_rect = s.src.rect;
    if (!out.lent.empty()) return;
  }
  // Room for what a DataLink appends (a number); pinned where the backend has it.
  const std::size_t n = static_cast<std::size_t>(s.region.volume()) * s.elem_size;
  out.data = Bytes::uninitialized(n, 16);
  dev.download(out.data.data(), s.region, src, s.src.rect, s.region, s.elem_size);
}

void Transfers::run_recv(const Task& task, const plan::Recv& r, Incoming& in) {
  backend::Device& dev = *devices_[task.device];
  void* dst = memory_.data(r.dst.id);
  if (!in.lent.empty()) {
    if (!in.lent_rect.contains(r.region))
      throw NetError(fmt::format("task {} (Recv) of region {}: rank {} lent the box {}", task.id,
                                 r.region.str(), r.from, in.lent_rect.str()));
    try {
      dev.copy_lent(dst, r.dst.rect, in.lent, in.lent_rect, r.region, r.elem_size);
    } catch (const backend::LendingError& e) {
      in.unreachable = true;  // the sender sends the bytes instead
      logging::info("rank {} sends its data the long way: {}", r.from, e.what());
    }
    return;
  }
  check_size(task, in.data.size(), r.region, r.elem_size);
  dev.upload(dst, r.dst.rect, in.data.data(), r.region, r.region, r.elem_size);
}

void Transfers::run_recv_host(const Task& task, const plan::RecvHost& h, Incoming& in) {
  if (!in.lent.empty())
    throw NetError(
        fmt::format("internal error: task {} (RecvHost) got lent device memory", task.id));
  check_size(task, in.data.size(), h.region, h.elem_size);
  backend::copy_region(h.dst, h.dst_rect, in.data.data(), h.region, h.region, h.elem_size);
  in.data = Bytes();  // back to the pool now
}

bool Transfers::after_run(const Task& task, std::exception_ptr& error) {
  if (auto* s = std::get_if<plan::Send>(&task.payload)) return after_send(task, *s, error);
  if (auto* r = std::get_if<plan::Recv>(&task.payload)) return after_recv(task, *r, error);
  return true;
}

// A Send's data go to their rank now that the device has read them, or where they lie
// when it lent them: then the Send is held until the receiver is done.
bool Transfers::after_send(const Task& task, const plan::Send& s, std::exception_ptr& error) {
  if (error) return true;
  Outgoing& out = outgoing(s.transfer);
  if (check_ && out.lent.empty()) check(task, out.data, error);
  if (error) return true;
  const int to = s.to;
  const TransferId transfer = s.transfer;  // the task may be gone once the receiver replies
  try {
    DataLink& link = this->link(task);
    if (out.lent.empty()) {
      link.send(to, transfer, std::move(out.data));
      return true;
    }
    std::vector<unsigned char> lent;
    Rect rect;
    {
      std::lock_guard lock(mutex_);
      out.waiting = true;  // before asking: the reply may come at once
      lent = out.lent;
      rect = out.lent_rect;
    }
    try {
      link.send_lent(to, transfer, rect, std::move(lent));
    } catch (...) {
      std::lock_guard lock(mutex_);
      auto it = outgoing_.find(transfer);
      if (it == outgoing_.end() || !it->second.waiting) return false;  // fail_all ends it
      it->second.waiting = false;
      throw;
    }
    return false;
  } catch (...) {
    error = std::current_exception();
  }
  return true;
}

// A Recv that copied lent memory tells the sender; one that could not reach it asks for
// the bytes and, still staged, is held until they come.
bool Transfers::after_recv(const Task& task, const plan::Recv& r, std::exception_ptr& error) {
  Incoming& in = incoming(r.transfer);
  if (in.lent.empty()) {
    if (check_ && !error) check(task, in.data, error);
    return true;
  }
  const int from = r.from;
  const TransferId transfer = r.transfer;
  try {
    DataLink& link = this->link(task);
    if (in.unreachable && !error) {
      {
        std::lock_guard lock(mutex_);
        in.lent.clear();
        in.unreachable = false;
        in.state = Incoming::State::refetch;  // before asking: the bytes may come at once
      }
      try {
        link.lent_done(from, transfer, LentReply::unreachable);
      } catch (...) {
        std::lock_guard lock(mutex_);
        auto it = incoming_.find(transfer);
        if (it == incoming_.end() || it->second.state != Incoming::State::refetch) return false;
        it->second.state = Incoming::State::arrived;
        throw;
      }
      return false;
    }
    if (!in.unreachable) devices_[task.device]->release_lent(in.lent);
    {
      std::lock_guard lock(mutex_);
      in.lent.clear();
    }
    link.lent_done(from, transfer, LentReply::copied);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  return true;
}

// A Send that failed tells its receiver, which would wait for the data forever; a Recv
// that did not run is done with the memory lent to it.
void Transfers::finished(const Task& task, const std::exception_ptr& error) {
  DataLink* link = nullptr;
  int from = -1;
  {
    std::lock_guard lock(mutex_);
    link = link_;
    if (auto* s = std::get_if<plan::Send>(&task.payload)) {
      outgoing_.erase(s->transfer);
    } else if (auto it = incoming_.find(received(task)); it != incoming_.end()) {
      if (!it->second.lent.empty()) from = it->second.from;
      incoming_.erase(it);
    }
  }
  if (!link) return;
  if (auto* s = std::get_if<plan::Send>(&task.payload); s && error)
    link->fail(s->to, s->transfer, error);
  if (from < 0) return;
  try {
    link->lent_done(from, received(task), LentReply::copied);
  } catch (...) {
    // The lending rank is gone: nothing waits for the reply.
  }
}

// Lent memory is held on both sides while a Recv waits to copy it: short of memory, this
// side declines what it holds and recalls what it lent, so that no two ranks wait for each
// other's memory.
void Transfers::short_of_memory() {
  std::vector<TransferId> held;
  std::vector<std::pair<int, TransferId>> recalls;
  DataLink* link = nullptr;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [transfer, in] : incoming_)
      if (in.state == Incoming::State::arrived && !in.lent.empty()) held.push_back(transfer);
    for (auto& [transfer, out] : outgoing_)
      if (out.waiting && !out.recalled) {
        out.recalled = true;
        recalls.emplace_back(out.to, transfer);
      }
    link = link_;
  }
  for (TransferId t : held) decline(t);
  if (link)
    for (auto [to, transfer] : recalls) link->recall_lent(to, transfer);
}

// --- What arrives from other processes ------------------------------------------------

void Transfers::deliver(TransferId transfer, Bytes data) {
  Incoming arrival;
  arrival.data = std::move(data);
  arrive(transfer, std::move(arrival));
}

void Transfers::deliver_failure(TransferId transfer, std::exception_ptr error) {
  Incoming arrival;
  arrival.error = std::move(error);
  arrive(transfer, std::move(arrival));
}

void Transfers::deliver_lent(TransferId transfer, int from, const Rect& rect,
                             std::vector<unsigned char> lent) {
  if (lent.empty())
    throw NetError(fmt::format("transfer {}: lent memory without a description", transfer));
  Incoming arrival;
  arrival.lent = std::move(lent);
  arrival.lent_rect = rect;
  arrival.from = from;
  arrive(transfer, std::move(arrival));
}

// A transfer's data (or why they won't come) for its Recv, or kept until it is submitted;
// for a Recv held for its bytes, they let it run again.
void Transfers::arrive(TransferId transfer, Incoming arrival) {
  enum class Then { nothing, satisfy, run_again, fail } then = Then::nothing;
  TaskId task = 0;
  std::exception_ptr error = arrival.error;
  {
    std::lock_guard lock(mutex_);
    Incoming& in = incoming_[transfer];
    if (in.state == Incoming::State::refetch) {
      if (!arrival.lent.empty() && !error)
        error = std::make_exception_ptr(NetError(fmt::format(
            "transfer {}: lent memory again where its bytes were asked for", transfer)));
      then = error ? Then::fail : Then::run_again;
    } else if (in.state == Incoming::State::waiting) {
      in.lent = std::move(arrival.lent);
      in.lent_rect = arrival.lent_rect;
      in.from = arrival.from;
      in.error = error;
      if (in.submitted) then = Then::satisfy;
    } else {
      throw NetError(fmt::format("transfer {} arrived twice", transfer));
    }
    in.data = std::move(arrival.data);
    in.state = Incoming::State::arrived;
    task = in.task;
  }
  if (then == Then::satisfy) worker_.satisfy(task, error);
  if (then == Then::run_again) worker_.resume(task, nullptr, true);
  if (then == Then::fail) worker_.resume(task, error, false);
}

void Transfers::lent_done(TransferId transfer, LentReply reply) {
  const bool copied = reply == LentReply::copied;
  TaskId task = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = outgoing_.find(transfer);
    if (it == outgoing_.end() || !it->second.waiting)
      throw NetError(fmt::format(
          "transfer {}: the receiver is done with memory this rank does not lend", transfer));
    Outgoing& out = it->second;
    out.waiting = false;
    out.lent.clear();
    out.send_bytes = !copied;  // then the bytes, read on the device as for any Send
    ++(copied ? stats_.lent : stats_.not_copied);
    task = out.task;
  }
  worker_.resume(task, nullptr, !copied);
}

void Transfers::recall_lent(TransferId transfer) {
  decline(transfer);  // a copy begun (or done) ends on its own
}

// Lent memory a Recv holds but has not begun to copy goes back (the bytes come instead),
// unless the Recv is on its way to its device already.
bool Transfers::decline(TransferId transfer) {
  int from = -1;
  TaskId task = 0;
  bool submitted = false;
  {
    std::lock_guard lock(mutex_);
    auto it = incoming_.find(transfer);
    if (it == incoming_.end()) return false;
    Incoming& in = it->second;
    if (in.state != Incoming::State::arrived || in.lent.empty()) return false;
    from = in.from;
    task = in.task;
    submitted = in.submitted;
    in.state = submitted ? Incoming::State::declining : Incoming::State::waiting;
    if (!submitted) in.lent.clear();
  }
  if (submitted) {
    const bool taken_back = worker_.unsatisfy(task);
    std::lock_guard lock(mutex_);
    auto it = incoming_.find(transfer);
    if (it == incoming_.end()) return false;  // it ran and finished meanwhile
    Incoming& in = it->second;
    if (!taken_back) {
      if (in.state == Incoming::State::declining) in.state = Incoming::State::arrived;
      return false;
    }
    in.lent.clear();
    in.state = Incoming::State::waiting;  // before the reply: the bytes may come at once
  }
  tell(from, transfer, LentReply::declined);
  return true;
}

void Transfers::fail_all(const std::exception_ptr& error) {
  std::vector<TaskId> waiting, held;
  {
    std::lock_guard lock(mutex_);
    for (auto& [transfer, in] : incoming_) {
      if (in.submitted && in.state == Incoming::State::waiting) {
        in.error = error;
        waiting.push_back(in.task);
      } else if (in.state == Incoming::State::refetch) {
        held.push_back(in.task);
      } else {
        continue;
      }
      in.state = Incoming::State::arrived;
    }
    for (auto& [transfer, out] : outgoing_)
      if (out.waiting) {
        out.waiting = false;
        held.push_back(out.task);
      }
  }
  for (TaskId t : waiting) worker_.satisfy(t, error);
  for (TaskId t : held) worker_.resume(t, error, false);
}

// GRIDSPAN_CHECK_TRANSFERS (a debugging aid; meaningful with GRIDSPAN_STREAM_ORDER=0, when
// nothing can touch a transfer's region before its task is reported): once a Send or Recv
// has run, the region is read again from the device and compared with the bytes sent or
// received. A difference is an internal error naming the task.
void Transfers::check(const Task& t, const Bytes& bytes, std::exception_ptr& error) const {
  const plan::ChunkRef* chunk = nullptr;
  const Rect* region = nullptr;
  std::size_t elem = 0;
  if (auto* s = std::get_if<plan::Send>(&t.payload))
    chunk = &s->src, region = &s->region, elem = s->elem_size;
  else if (auto* r = std::get_if<plan::Recv>(&t.payload))
    chunk = &r->dst, region = &r->region, elem = r->elem_size;
  else
    return;
  try {
    backend::Device& dev = *devices_[t.device];
    const std::size_t size = static_cast<std::size_t>(chunk->rect.volume()) * elem;
    std::vector<unsigned char> whole(size), now(bytes.size());
    dev.copy_to_host(whole.data(), memory_.data(chunk->id), size);
    backend::copy_region(now.data(), *region, whole.data(), chunk->rect, *region, elem);
    if (!(bytes == now)) {
      std::size_t first = 0;
      while (first < now.size() && now[first] == bytes.data()[first]) ++first;
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

}  // namespace gridspan::runtime
