// A transport that watches its peers (transport.hpp): heartbeats out, silence detected.
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "gridspan/core/error.hpp"
#include "net/transport.hpp"

namespace gridspan::net {

void Transport::abort(int code) {
  std::_Exit(code);
}

namespace {

using Clock = std::chrono::steady_clock;

class WatchedTransport final : public Transport {
 public:
  WatchedTransport(std::unique_ptr<Transport> inner, std::vector<int> peers,
                   std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), timeout_(timeout) {
    const auto now = Clock::now();
    for (int p : peers)
      if (p != inner_->rank() && !heard_.count(p)) {
        heard_[p] = now;
        peers_.push_back(p);
      }
    period_ =
        std::clamp(timeout_ / 6, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    if (!heard_.empty())
      beater_ = std::thread([this] {
        name_this_thread("gs-heartbeat");
        beat();
      });
  }

  ~WatchedTransport() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (beater_.joinable()) beater_.join();
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int node_rank() const override { return inner_->node_rank(); }
  int node_size() const override { return inner_->node_size(); }
  std::vector<int> node_peers() const override { return inner_->node_peers(); }
  [[noreturn]] void abort(int code) override {
    inner_->abort(code);
    std::_Exit(code);  // not reached
  }

  void send(int to, uint32_t tag, Bytes body) override { inner_->send(to, tag, std::move(body)); }

  std::optional<Message> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    std::lock_guard lock(receiving_);
    while (true) {
      // Everything that has arrived first, so that a queue of heartbeats counts as heard.
      while (auto m = inner_->receive(std::chrono::milliseconds(0))) keep(std::move(*m));
      check_silence();
      if (!kept_.empty()) {
        Message m = std::move(kept_.front());
        kept_.pop_front();
        return m;
      }
      const auto now = Clock::now();
      if (now >= deadline) return std::nullopt;
      auto wait = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                           std::chrono::milliseconds(20));
      if (auto m = inner_->receive(wait)) keep(std::move(*m));
    }
  }

 private:
  void keep(Message m) {
    if (auto it = heard_.find(m.source); it != heard_.end()) it->second = Clock::now();
    if (m.tag != heartbeat_tag) kept_.push_back(std::move(m));
  }

  void check_silence() {
    if (failure_) std::rethrow_exception(failure_);
    const auto now = Clock::now();
    for (const auto& [peer, when] : heard_) {
      if (now - when <= timeout_) continue;
      const double s = std::chrono::duration<double>(now - when).count();
      failure_ = std::make_exception_ptr(NetError(fmt::format(
          "rank {} has not been heard from for {:.1f} s (GRIDSPAN_NET_TIMEOUT is {:.1f} s): it "
          "died or stopped answering",
          peer, s, std::chrono::duration<double>(timeout_).count())));
      std::rethrow_exception(failure_);
    }
  }

  void beat() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      lock.unlock();
      try {
        for (int peer : peers_) inner_->send(peer, heartbeat_tag, {});
      } catch (const std::exception& e) {
        logging::debug("heartbeats stopped: {}", e.what());
        return;
      }
      lock.lock();
      wake_.wait_for(lock, period_, [&] { return stop_; });
    }
  }

  std::unique_ptr<Transport> inner_;
  const std::chrono::milliseconds timeout_;
  std::chrono::milliseconds period_{1000};
  std::vector<int> peers_;
  std::mutex receiving_;  // the receiving thread's state:
  std::map<int, Clock::time_point> heard_;
  std::deque<Message> kept_;
  std::exception_ptr failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread beater_;
};

}  // namespace

std::unique_ptr<Transport> watch(std::unique_ptr<Transport> inner, std::vector<int> peers,
                                 std::chrono::milliseconds timeout) {
  return std::make_unique<WatchedTransport>(std::move(inner), std::move(peers), timeout);
}

}  // namespace gridspan::net
