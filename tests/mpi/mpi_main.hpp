// The entry point of the tests run under mpirun: every rank must derive the same random
// inputs, so rank 0's seed goes to the others before any test runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include "net/transport.hpp"
#include "support/random.hpp"

namespace gridspan::test {

/// The transport of a test under mpirun: another one, with the messages that arrived
/// before the seed kept and handed out first. A rank slow to start can hear from a faster
/// one (serving rank 0's first tasks, or sending to every rank) before it hears rank 0.
class TestTransport final : public net::Transport {
 public:
  explicit TestTransport(std::unique_ptr<net::Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void send(int to, uint32_t tag, Bytes body) override { inner_->send(to, tag, std::move(body)); }
  std::optional<net::Message> receive(std::chrono::milliseconds timeout) override {
    if (early_.empty()) {
      auto m = inner_->receive(timeout);
      if (!m || hold_ <= std::chrono::milliseconds(0) || m->tag != hold_tag_) return m;
      hold_back(std::move(*m));
    }
    net::Message m = std::move(early_.front());
    early_.pop_front();
    return m;
  }
  int node_rank() const override { return inner_->node_rank(); }
  int node_size() const override { return inner_->node_size(); }
  std::vector<int> node_peers() const override { return inner_->node_peers(); }
  [[noreturn]] void abort(int code) override { inner_->abort(code); }

  /// Messages with `tag` (and what their sender sends after them) are handed out `delay`
  /// late, after what other ranks send meanwhile: MPI orders the messages of one sender
  /// only, so a slow rank may see them so (0: as they come). While no thread receives.
  void hold_back(uint32_t tag, std::chrono::milliseconds delay) {
    hold_tag_ = tag;
    hold_ = delay;
  }

  /// The first message from `source` with `tag` within `timeout`; the others that come
  /// before it are kept for receive().
  std::optional<net::Message> receive_from(int source, uint32_t tag,
                                           std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (auto now = std::chrono::steady_clock::now(); now < until;
         now = std::chrono::steady_clock::now()) {
      auto m = inner_->receive(std::chrono::duration_cast<std::chrono::milliseconds>(until - now));
      if (!m) return std::nullopt;
      if (m->source == source && m->tag == tag) return m;
      early_.push_back(std::move(*m));
    }
    return std::nullopt;
  }

 private:
  // `m` and its sender's later messages go behind those of other senders for hold_.
  void hold_back(net::Message m) {
    std::deque<net::Message> held;
    held.push_back(std::move(m));
    const auto until = std::chrono::steady_clock::now() + hold_;
    for (auto now = std::chrono::steady_clock::now(); now < until;
         now = std::chrono::steady_clock::now()) {
      auto n = inner_->receive(std::chrono::duration_cast<std::chrono::milliseconds>(until - now));
      if (!n) continue;
      (n->source == held.front().source ? held : early_).push_back(std::move(*n));
    }
    for (net::Message& h : held) early_.push_back(std::move(h));
  }

  std::unique_ptr<net::Transport> inner_;
  std::deque<net::Message> early_;
  uint32_t hold_tag_ = 0;
  std::chrono::milliseconds hold_{0};
};

inline int mpi_test_main(int argc, char** argv, TestTransport& t) {
  testing::InitGoogleTest(&argc, argv);
  if (t.rank() == 0) {
    const std::string seed = std::to_string(base_seed());
    for (int r = 1; r < t.size(); ++r)
      t.send(r, 1, std::vector<unsigned char>(seed.begin(), seed.end()));
    std::printf("gridspan test seed: %s on %d ranks (set GRIDSPAN_TEST_SEED to repeat)\n",
                seed.c_str(), t.size());
  } else {
    auto m = t.receive_from(0, 1, std::chrono::seconds(60));
    if (!m) {
      std::fprintf(stderr, "rank %d: no seed from rank 0\n", t.rank());
      return 1;
    }
    setenv("GRIDSPAN_TEST_SEED", std::string(m->body.begin(), m->body.end()).c_str(), 1);
  }
  return RUN_ALL_TESTS();  // every rank reports (mpirun --tag-output names them)
}

}  // namespace gridspan::test
