// Transports joined inside one process (transport.hpp): one mailbox per rank.
#include <condition_variable>
#include <deque>
#include <mutex>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "net/transport.hpp"

namespace gridspan::net {

namespace {

struct Mailbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Message> messages;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(int rank, std::shared_ptr<std::vector<Mailbox>> boxes)
      : rank_(rank), boxes_(std::move(boxes)) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(boxes_->size()); }
  std::vector<int> node_peers() const override {  // one process: one node
    std::vector<int> all(boxes_->size());
    for (int r = 0; r < size(); ++r) all[r] = r;
    return all;
  }

  void send(int to, uint32_t tag, Bytes body) override {
    if (to < 0 || to >= size())
      throw NetError(
          fmt::format("a message for rank {}, but the run has ranks 0 to {}", to, size() - 1));
    Mailbox& box = (*boxes_)[to];
    {
      std::lock_guard lock(box.mutex);
      box.messages.push_back(Message{rank_, tag, std::move(body)});
    }
    box.arrived.notify_all();
  }

  std::optional<Message> receive(std::chrono::milliseconds timeout) override {
    Mailbox& box = (*boxes_)[rank_];
    std::unique_lock lock(box.mutex);
    if (!box.arrived.wait_for(lock, timeout, [&] { return !box.messages.empty(); }))
      return std::nullopt;
    Message m = std::move(box.messages.front());
    box.messages.pop_front();
    return m;
  }

 private:
  int rank_;
  std::shared_ptr<std::vector<Mailbox>> boxes_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_local_transports(int ranks) {
  if (ranks < 1) throw NetError(fmt::format("{} ranks: at least 1", ranks));
  auto boxes = std::make_shared<std::vector<Mailbox>>(static_cast<std::size_t>(ranks));
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<LocalTransport>(r, boxes));
  return out;
}

}  // namespace gridspan::net
