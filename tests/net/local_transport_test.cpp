// Transports joined in one process: messages between every pair of ranks arrive in order and
// intact from threads sending at once; receives time out; unknown ranks are errors.
#include <gtest/gtest.h>

#include <thread>

#include "gridspan/core/error.hpp"
#include "net/transport.hpp"
#include "support/random.hpp"

namespace gridspan::net {
namespace {

TEST(LocalTransport, RanksExchangeMessagesInOrder) {
  const int ranks = 3, per_peer = 200;
  auto t = make_local_transports(ranks);
  auto g = test::rng(43);
  const uint64_t salt = g();
  auto body = [&](int from, int to, int i) {
    std::vector<unsigned char> b(std::size_t((from * 7 + to * 3 + i) % 50));
    for (std::size_t k = 0; k < b.size(); ++k)
      b[k] = static_cast<unsigned char>(salt + from + i + k);
    return b;
  };
  std::vector<std::thread> senders;
  for (int from = 0; from < ranks; ++from)
    senders.emplace_back([&, from] {
      for (int i = 0; i < per_peer; ++i)
        for (int to = 0; to < ranks; ++to)
          if (to != from) t[from]->send(to, uint32_t(i), body(from, to, i));
    });
  for (auto& s : senders) s.join();
  for (int to = 0; to < ranks; ++to) {
    EXPECT_EQ(t[to]->rank(), to);
    EXPECT_EQ(t[to]->size(), ranks);
    std::vector<int> next(ranks, 0);
    for (int n = 0; n < per_peer * (ranks - 1); ++n) {
      auto m = t[to]->receive(std::chrono::seconds(5));
      ASSERT_TRUE(m);
      const int i = next[m->source]++;
      EXPECT_EQ(m->tag, uint32_t(i));
      EXPECT_EQ(m->body, body(m->source, to, i));
    }
    EXPECT_FALSE(t[to]->receive(std::chrono::milliseconds(10)));
  }
  EXPECT_THROW(t[0]->send(3, 0, {}), NetError);
  EXPECT_THROW(make_local_transports(0), NetError);
}

// A watched transport: heartbeats keep a quiet peer heard (and are never handed out), other
// messages pass through, and a peer that stops sending is named once the timeout has passed;
// from then on every receive throws.
TEST(WatchedTransport, ASilentPeerIsNamedAfterTheTimeout) {
  auto local = make_local_transports(2);
  const auto timeout = std::chrono::milliseconds(1000);  // heartbeats every 166 ms
  auto zero = watch(std::move(local[0]), {1}, timeout);
  auto one = watch(std::move(local[1]), {0}, timeout);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 3 * timeout)
    EXPECT_FALSE(zero->receive(std::chrono::milliseconds(50)));  // heartbeats only: quiet
  one->send(0, 77, std::vector<unsigned char>{1, 2, 3});
  auto m = zero->receive(std::chrono::seconds(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->tag, 77u);
  EXPECT_TRUE(m->body == std::vector<unsigned char>({1, 2, 3}));
  one.reset();  // rank 1 stops: no heartbeats any more
  const auto stopped = std::chrono::steady_clock::now();
  try {
    while (true) zero->receive(std::chrono::milliseconds(50));
  } catch (const NetError& e) {
    const auto after = std::chrono::steady_clock::now() - stopped;
    EXPECT_GE(after, timeout - std::chrono::milliseconds(200));  // from the last heartbeat
    EXPECT_LT(after, 10 * timeout);
    EXPECT_NE(std::string(e.what()).find("rank 1 has not been heard from"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(zero->receive(std::chrono::milliseconds(0)), NetError);
}

}  // namespace
}  // namespace gridspan::net
