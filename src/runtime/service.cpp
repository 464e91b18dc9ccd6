// One rank's worker served over a transport (see service.hpp).
#include "runtime/service.hpp"

#include <cstring>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/executable.hpp"

namespace gridspan::runtime {

WorkerService::WorkerService(net::Transport& transport, Worker& worker, Transfers& transfers,
                             net::ExecutableOfId executables,
                             std::function<void(const BarrierReport&)> on_report, int driver)
    : transport_(transport),
      worker_(worker),
      transfers_(transfers),
      executables_(std::move(executables)),
      on_report_(std::move(on_report)),
      driver_(driver) {
  transfers_.connect(this);
  worker_.on_barrier([this](plan::TaskId id, std::exception_ptr e) { report(id, e); });
  dispatcher_ = std::thread([this] {
    name_this_thread("gs-dispatch");
    dispatch_loop();
  });
}

WorkerService::~WorkerService() {
  stop_ = true;
  dispatcher_.join();
  worker_.on_barrier({});
  transfers_.connect(nullptr);
}

// The transfer's number goes after its bytes, so neither side copies them (a Send reserves
// the room).
void WorkerService::send(int to, plan::TransferId transfer, Bytes data) {
  unsigned char number[8];
  for (int i = 0; i < 8; ++i) number[i] = static_cast<unsigned char>(transfer >> (8 * i));
  data.append(number, 8);
  transport_.send(to, tag::data, std::move(data));
}

void WorkerService::lend_to(const std::vector<int>& peers, std::size_t min_bytes) {
  std::lock_guard lock(lend_mutex_);
  lends_.assign(transport_.size(), 0);
  for (int r : peers)
    if (r >= 0 && r < transport_.size() && r != transport_.rank()) lends_[r] = 1;
  lend_min_ = min_bytes;
}

bool WorkerService::may_lend(int to, std::size_t bytes) const {
  std::lock_guard lock(lend_mutex_);
  return to >= 0 && std::size_t(to) < lends_.size() && lends_[to] && bytes >= lend_min_;
}

void WorkerService::send_lent(int to, plan::TransferId transfer, const Rect& rect,
                              std::vector<unsigned char> lent) {
  net::Writer w;
  w.u64(transfer);
  w.rect(rect);
  w.bytes(lent.data(), lent.size());
  transport_.send(to, tag::lent, std::move(w.buffer()));
}

void WorkerService::lent_done(int to, plan::TransferId transfer, LentReply reply) {
  net::Writer w;
  w.u64(transfer);
  w.u8(static_cast<uint8_t>(reply));
  transport_.send(to, tag::lent_done, std::move(w.buffer()));
}

void WorkerService::recall_lent(int to, plan::TransferId transfer) {
  net::Writer w;
  w.u64(transfer);
  transport_.send(to, tag::lent_recall, std::move(w.buffer()));
}

void WorkerService::fail(int to, plan::TransferId transfer, const std::exception_ptr& error) {
  net::Writer w;
  w.u64(transfer);
  net::write_error(w, error);
  transport_.send(to, tag::data_failed, std::move(w.buffer()));
}

void WorkerService::send_tasks(net::Transport& t, int rank, const std::vector<plan::Task>& tasks,
                               const net::IdOfExecutable& id_of) {
  t.send(rank, tag::tasks, net::encode_tasks(tasks, id_of));
}

void WorkerService::send_shutdown(net::Transport& t, int rank) {
  t.send(rank, tag::shutdown, {});
}

namespace {

enum : uint8_t { kKernel = 0, kNative = 1 };

}  // namespace

void WorkerService::send_native(net::Transport& t, int rank, net::ExecutableId id,
                                const std::string& name) {
  net::Writer w;
  w.u64(id);
  w.u8(kNative);
  w.str(name);
  t.send(rank, tag::compile, std::move(w.buffer()));
}

void WorkerService::send_compile(net::Transport& t, int rank, net::ExecutableId id,
                                 const backend::KernelSource& kernel) {
  net::Writer w;
  w.u64(id);
  w.u8(kKernel);
  w.str(kernel.name);
  w.str(kernel.source);
  w.str(kernel.file);
  w.u32(static_cast<uint32_t>(kernel.defines.size()));
  for (const auto& [name, value] : kernel.defines) {
    w.str(name);
    w.i64(value);
  }
  w.u8(kernel.checked ? 1 : 0);
  t.send(rank, tag::compile, std::move(w.buffer()));
}

// A kernel from the driver, compiled here as the driver did there (the parameters come
// from the kernel's own signature again).
void WorkerService::compile(const net::Message& m) {
  net::Reader r(m.body.data(), m.body.size(), "kernel message");
  const net::ExecutableId id = r.u64("executable number");
  const uint8_t kind = r.u8("executable kind");
  if (kind == kNative) {
    const std::string name = r.str("native function name");
    r.finish();
    std::shared_ptr<const plan::Executable> native = find_native(name);
    if (!native)
      throw Error(fmt::format(
          "rank {}: native function `{}` is not registered in this process; under mpirun "
          "every rank needs it: register it with gs::register_native before gs::run (or "
          "at static initialisation)",
          transport_.rank(), name));
    compiled_[id] = std::move(native);
    return;
  }
  if (kind != kKernel) r.fail(fmt::format("executable kind {} is neither kernel nor native", kind));
  backend::KernelSource src;
  src.name = r.str("kernel name");
  src.source = r.str("kernel source", std::size_t(1) << 30);
  src.file = r.str("kernel file");
  const std::size_t defines = r.count("defines", 16);
  for (std::size_t i = 0; i < defines; ++i) {
    std::string name = r.str("define name");
    src.defines[name] = r.i64("define value");
  }
  src.checked = r.u8("checked flag") != 0;
  r.finish();
  if (!backend_)
    throw NetError(fmt::format("rank {}: kernel `{}` arrived, but this rank compiles none",
                               transport_.rank(), src.name));
  compiled_[id] = KernelExecutable::compile(*backend_, std::move(src));
}

const plan::Executable* WorkerService::executable(net::ExecutableId id) const {
  if (auto it = compiled_.find(id); it != compiled_.end()) return it->second.get();
  return executables_ ? executables_(id) : nullptr;
}

// With the worker's lock held: only queues a message (or calls the driver's callback,
// which must not block either).
void WorkerService::report(plan::TaskId barrier, std::exception_ptr error) {
  if (transport_.rank() == driver_) {
    if (on_report_) on_report_(BarrierReport{driver_, barrier, error});
    return;
  }
  net::Writer w;
  w.u64(barrier);
  w.u8(error ? 1 : 0);
  if (error) net::write_error(w, error);
  transport_.send(driver_, tag::done, std::move(w.buffer()));
}

void WorkerService::serve_until_shutdown() {
  std::unique_lock lock(mutex_);
  stopped_.wait(lock, [&] { return shutdown_ || failure_; });
  if (failure_) std::rethrow_exception(failure_);
}

std::optional<int> WorkerService::exit_code() const {
  std::lock_guard lock(mutex_);
  return exit_code_;
}

void WorkerService::dispatch_loop() {
  try {
    while (!stop_) {
      auto m = transport_.receive(std::chrono::milliseconds(20));
      if (!m) continue;
      switch (m->tag) {
        case tag::tasks:
          worker_.submit(
              net::decode_tasks(m->body.data(), m->body.size(),
                                [this](net::ExecutableId id) { return executable(id); }));
          break;
        case tag::compile:
          compile(*m);
          break;
        case tag::error: {
          net::Reader r(m->body.data(), m->body.size(), "rank error");
          RankError e{m->source, r.str("error message")};
          r.finish();
          if (on_error_) on_error_(e);
          break;
        }
        case tag::data: {
          if (m->body.size() < 8)
            throw NetError(
                fmt::format("rank {}: a transfer message of {} bytes from rank {} has "
                            "no transfer number",
                            transport_.rank(), m->body.size(), m->source));
          const std::size_t n = m->body.size() - 8;
          net::Reader r(m->body.data() + n, 8, "transfer message");
          const plan::TransferId transfer = r.u64("transfer number");
          m->body.shrink(8);
          transfers_.deliver(transfer, std::move(m->body));
          break;
        }
        case tag::lent: {
          net::Reader r(m->body.data(), m->body.size(), "lent memory message");
          const plan::TransferId transfer = r.u64("transfer number");
          const Rect rect = r.rect("lent box");
          std::vector<unsigned char> lent = r.bytes("lent memory", 4096);
          r.finish();
          transfers_.deliver_lent(transfer, m->source, rect, std::move(lent));
          break;
        }
        case tag::lent_done: {
          net::Reader r(m->body.data(), m->body.size(), "lent memory done message");
          const plan::TransferId transfer = r.u64("transfer number");
          const uint8_t reply = r.u8("reply");
          r.finish();
          if (reply > static_cast<uint8_t>(LentReply::declined))
            r.fail(fmt::format("reply {} to lent memory", reply));
          if (reply == static_cast<uint8_t>(LentReply::unreachable)) {
            // That rank cannot reach this one's memory: bytes from now on.
            std::lock_guard lock(lend_mutex_);
            if (std::size_t(m->source) < lends_.size()) lends_[m->source] = 0;
          }
          transfers_.lent_done(transfer, static_cast<LentReply>(reply));
          break;
        }
        case tag::lent_recall: {
          net::Reader r(m->body.data(), m->body.size(), "lent memory recall");
          const plan::TransferId transfer = r.u64("transfer number");
          r.finish();
          transfers_.recall_lent(transfer);
          break;
        }
        case tag::data_failed: {
          net::Reader r(m->body.data(), m->body.size(), "failed transfer message");
          const plan::TransferId transfer = r.u64("transfer number");
          std::exception_ptr why = net::read_error(r);
          r.finish();
          transfers_.deliver_failure(transfer, std::move(why));
          break;
        }
        case tag::done: {
          net::Reader r(m->body.data(), m->body.size(), "barrier report");
          BarrierReport report{m->source, r.u64("barrier"), nullptr};
          if (r.u8("failed flag")) report.error = net::read_error(r);
          r.finish();
          if (on_report_) on_report_(report);
          break;
        }
        case tag::exit:        // the driver's process ended with the session open
        case tag::shutdown: {  // the last message it takes: later ones are another's
          std::optional<int> code;
          if (m->tag == tag::exit) {
            net::Reader r(m->body.data(), m->body.size(), "exit message");
            code = static_cast<int>(r.u32("exit code"));
            r.finish();
          }
          std::lock_guard lock(mutex_);
          exit_code_ = code;
          shutdown_ = true;
          stopped_.notify_all();
          return;
        }
        default:
          if (on_message_ && on_message_(*m)) break;
          throw NetError(
              fmt::format("rank {}: a message with tag {} from rank {}, which the "
                          "protocol does not have",
                          transport_.rank(), m->tag, m->source));
      }
    }
  } catch (...) {
    // Stop dispatching, and tell the driver why (it stops the run).
    std::string why = "an unknown error";
    try {
      throw;
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    try {
      if (transport_.rank() == driver_) {
        if (on_error_) on_error_(RankError{transport_.rank(), why});
      } else {
        net::Writer w;
        w.str(why);
        transport_.send(driver_, tag::error, std::move(w.buffer()));
      }
    } catch (...) {
      // The transport itself failed: the driver finds out by its timeout.
    }
    std::lock_guard lock(mutex_);
    failure_ = std::current_exception();
    stopped_.notify_all();
  }
}

}  // namespace gridspan::runtime
