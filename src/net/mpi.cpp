// The MPI transport (transport.hpp). One thread of its own makes every MPI call after
// initialisation: it starts non-blocking sends of what send() queued, tests them, and
// receives whatever has arrived (matched probes, so a large message is received straight
// into its buffer). A message travels as a header (its tag, size and piece count, and the
// body itself when small) followed by its pieces; MPI keeps messages of one sender on one
// tag in order, so a receiver joins the pieces that follow a sender's header.
#include "net/transport.hpp"

#include <cstdlib>

#include "gridspan/core/error.hpp"

#if GRIDSPAN_HAVE_MPI
#include <mpi.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread_name.hpp"
#endif

namespace gridspan::net {

bool launched_by_mpi() {
#if GRIDSPAN_HAVE_MPI
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
#endif
  return false;
}

#if GRIDSPAN_HAVE_MPI
namespace {

constexpr int kMpiTag = 7301;                  // every gridspan message uses this MPI tag
constexpr uint32_t kHeaderMagic = 0x314D5347;  // "GSM1"
constexpr std::size_t kHeaderBytes = 4 + 4 + 8 + 4;
constexpr std::size_t kInlineBytes = 64 << 10;  // bodies this small travel in the header

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, std::size_t(n));
}

void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(std::size_t max_piece)
      : max_piece_(max_piece ? max_piece : std::size_t(1) << 30) {
    if (max_piece_ > std::size_t(1) << 30)
      throw NetError(fmt::format("MPI pieces of {} bytes: at most 1 GiB", max_piece_));
    int initialised = 0;
    MPI_Initialized(&initialised);
    int provided = 0;
    if (initialised) {
      MPI_Query_thread(&provided);
    } else {
      int r = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (r != MPI_SUCCESS) throw NetError("MPI_Init_thread failed: " + mpi_error(r));
      owns_mpi_ = true;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (owns_mpi_) MPI_Finalize();
      throw NetError(fmt::format(
          "MPI gives thread level {}; gridspan calls MPI from a thread of its own and needs "
          "MPI_THREAD_SERIALIZED or more (initialise MPI with MPI_Init_thread, or let "
          "gridspan do it)",
          provided));
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      MPI_Comm_rank(node, &node_rank_);
      MPI_Comm_size(node, &node_size_);
      // Their ranks in the run.
      MPI_Group node_group, world_group;
      MPI_Comm_group(node, &node_group);
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      std::vector<int> local(node_size_);
      node_peers_.assign(node_size_, MPI_UNDEFINED);
      for (int i = 0; i < node_size_; ++i) local[i] = i;
      MPI_Group_translate_ranks(node_group, node_size_, local.data(), world_group,
                                node_peers_.data());
      MPI_Group_free(&node_group);
      MPI_Group_free(&world_group);
      std::erase(node_peers_, MPI_UNDEFINED);
      MPI_Comm_free(&node);
    }
    progress_ = std::thread([this] {
      name_this_thread("gs-mpi");
      progress_loop();
    });
  }

  ~MpiTransport() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    progress_.join();
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_rank() const override { return node_rank_; }
  int node_size() const override { return node_size_; }
  std::vector<int> node_peers() const override {
    return node_peers_.empty() ? std::vector<int>{rank_} : node_peers_;
  }

  // MPI_Abort from the progress thread (the only one that calls MPI); if that thread is
  // stuck, this process ends alone and mpirun ends the others.
  [[noreturn]] void abort(int code) override {
    {
      std::lock_guard lock(mutex_);
      abort_code_ = code;
    }
    wake_.notify_all();
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::_Exit(code);
  }

  void send(int to, uint32_t tag, Bytes body) override {
    if (to < 0 || to >= size_)
      throw NetError(
          fmt::format("a message for rank {}, but the run has ranks 0 to {}", to, size_ - 1));
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    outbox_.push_back(Outgoing{to, tag, std::make_shared<Bytes>(std::move(body))});
    wake_.notify_all();
  }

  std::optional<Message> receive(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, timeout, [&] { return !inbox_.empty() || failure_; });
    if (!inbox_.empty()) {
      Message m = std::move(inbox_.front());
      inbox_.pop_front();
      return m;
    }
    if (failure_) std::rethrow_exception(failure_);
    return std::nullopt;
  }

 private:
  struct Outgoing {
    int to;
    uint32_t tag;
    std::shared_ptr<Bytes> body;
  };
  struct InFlight {
    MPI_Request request;
    std::shared_ptr<Bytes> buffer;  // kept alive until the send is done
  };
  struct Partial {  // a message whose pieces are still arriving from one sender
    uint32_t tag = 0;
    Bytes body;
    std::size_t filled = 0;
    uint32_t pieces_left = 0;
  };

  void check(int code, const char* what) {
    if (code != MPI_SUCCESS)
      throw NetError(fmt::format("rank {}: {} failed: {}", rank_, what, mpi_error(code)));
  }

  void start(const Outgoing& o) {
    const std::size_t n = o.body->size();
    const bool inline_body = n <= kInlineBytes;
    const uint32_t pieces = inline_body ? 0 : uint32_t((n + max_piece_ - 1) / max_piece_);
    auto header =
        std::make_shared<Bytes>(std::vector<unsigned char>(kHeaderBytes + (inline_body ? n : 0)));
    put32(header->data(), kHeaderMagic);
    put32(header->data() + 4, o.tag);
    put64(header->data() + 8, n);
    put32(header->data() + 16, pieces);
    if (inline_body && n) std::memcpy(header->data() + kHeaderBytes, o.body->data(), n);
    isend(header, header->data(), header->size(), o.to);
    for (uint32_t p = 0; p < pieces; ++p) {
      const std::size_t at = std::size_t(p) * max_piece_;
      isend(o.body, o.body->data() + at, std::min(max_piece_, n - at), o.to);
    }
  }

  void isend(const std::shared_ptr<Bytes>& keep, const unsigned char* data, std::size_t n, int to) {
    InFlight f{MPI_REQUEST_NULL, keep};
    check(MPI_Isend(data, int(n), MPI_BYTE, to, kMpiTag, MPI_COMM_WORLD, &f.request), "MPI_Isend");
    sending_.push_back(std::move(f));
  }

  // Receives one message that has arrived, if any; true when it did.
  bool receive_one() {
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    check(MPI_Improbe(MPI_ANY_SOURCE, kMpiTag, MPI_COMM_WORLD, &flag, &msg, &status),
          "MPI_Improbe");
    if (!flag) return false;
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    const int from = status.MPI_SOURCE;
    auto partial = partial_.find(from);
    if (partial != partial_.end()) {  // the next piece of this sender's message
      Partial& p = partial->second;
      if (p.filled + std::size_t(count) > p.body.size())
        throw NetError(
            fmt::format("rank {}: rank {} sent more bytes than its message holds", rank_, from));
      check(MPI_Mrecv(p.body.data() + p.filled, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE),
            "MPI_Mrecv");
      p.filled += std::size_t(count);
      if (--p.pieces_left == 0) {
        if (p.filled != p.body.size())
          throw NetError(
              fmt::format("rank {}: a message from rank {} arrived short ({} of {} bytes)", rank_,
                          from, p.filled, p.body.size()));
        deliver(Message{from, p.tag, std::move(p.body)});
        partial_.erase(partial);
      }
      return true;
    }
    std::vector<unsigned char> header(static_cast<std::size_t>(count));
    check(MPI_Mrecv(header.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
    if (header.size() < kHeaderBytes || get32(header.data()) != kHeaderMagic)
      throw NetError(
          fmt::format("rank {}: a message from rank {} is not a gridspan message "
                      "(another program on the same MPI tag?)",
                      rank_, from));
    const uint32_t tag = get32(header.data() + 4);
    const uint64_t size = get64(header.data() + 8);
    const uint32_t pieces = get32(header.data() + 16);
    if (pieces == 0) {
      if (header.size() != kHeaderBytes + size)
        throw NetError(fmt::format("rank {}: a message from rank {} says {} bytes but holds {}",
                                   rank_, from, size, header.size() - kHeaderBytes));
      deliver(Message{from, tag,
                      std::vector<unsigned char>(header.begin() + kHeaderBytes, header.end())});
      return true;
    }
    Partial p;
    p.tag = tag;
    p.body = Bytes::uninitialized(size);  // pinned where a GPU backend provides it
    p.pieces_left = pieces;
    partial_.emplace(from, std::move(p));
    return true;
  }

  void deliver(Message m) {
    {
      std::lock_guard lock(mutex_);
      inbox_.push_back(std::move(m));
    }
    arrived_.notify_all();
  }

  // Tests the sends in flight and drops those done; true when one finished.
  bool reap_sends() {
    bool any = false;
    for (auto it = sending_.begin(); it != sending_.end();) {
      int done = 0;
      check(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) {
        it = sending_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }

  void progress_loop() {
    try {
      auto idle_since = std::chrono::steady_clock::now();
      while (true) {
        std::deque<Outgoing> out;
        bool stopping;
        {
          std::lock_guard lock(mutex_);
          out.swap(outbox_);
          stopping = stop_;
          if (abort_code_) MPI_Abort(MPI_COMM_WORLD, *abort_code_);
        }
        for (const Outgoing& o : out) start(o);
        bool busy = !out.empty();
        while (receive_one()) busy = true;
        busy = reap_sends() || busy;
        if (stopping && sending_.empty()) {
          std::lock_guard lock(mutex_);
          if (outbox_.empty()) return;
        }
        // Poll while messages flow; after 1 ms without any, wait up to 100 us at a time
        // for something to send (arrivals are only seen by polling).
        const auto now = std::chrono::steady_clock::now();
        if (busy) {
          idle_since = now;
        } else if (now - idle_since > std::chrono::milliseconds(1)) {
          std::unique_lock lock(mutex_);
          wake_.wait_for(lock, std::chrono::microseconds(100),
                         [&] { return !outbox_.empty() || stop_ || abort_code_; });
        } else {
          std::this_thread::yield();
        }
      }
    } catch (const std::exception& e) {
      fail(std::current_exception(), e.what());
    } catch (...) {
      fail(std::current_exception(), "an unknown error");
    }
  }

  void fail(std::exception_ptr error, const std::string& what) {
    {
      std::lock_guard lock(mutex_);
      failure_ = error;
    }
    arrived_.notify_all();
    logging::write(LogLevel::error, fmt::format("rank {}: the MPI transport stopped: {}", rank_, what));
  }

  const std::size_t max_piece_;
  bool owns_mpi_ = false;
  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1;
  std::vector<int> node_peers_;
  std::mutex mutex_;
  std::optional<int> abort_code_;
  std::condition_variable wake_, arrived_;
  std::deque<Outgoing> outbox_;
  std::deque<Message> inbox_;
  std::exception_ptr failure_;
  bool stop_ = false;
  // The progress thread's own (no lock):
  std::deque<InFlight> sending_;
  std::map<int, Partial> partial_;
  std::thread progress_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(std::size_t max_piece) {
  return std::make_unique<MpiTransport>(max_piece);
}

#else

std::unique_ptr<Transport> make_mpi_transport(std::size_t) {
  throw NetError(
      "this gridspan was built without MPI; install libopenmpi-dev (Debian) and rebuild "
      "(GRIDSPAN_ENABLE_MPI=AUTO finds it)");
}

#endif

}  // namespace gridspan::net
