// The MPI transport, run by ctest under `mpirun -np 2` and `-np 3`: every rank sends every
// other rank messages of every size class (empty, inline, split into pieces: the test's
// pieces are 4 KiB, so a 3 MiB message travels in 768), in order and intact; a receive with
// nothing coming times out; a message for a rank that does not exist is an error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gridspan/core/error.hpp"
#include "net/transport.hpp"

#include "mpi/mpi_main.hpp"
#include "support/random.hpp"

namespace gridspan::net {
namespace {

constexpr std::size_t kPiece = 4096;

test::TestTransport& world() {
  static test::TestTransport t(make_mpi_transport(kPiece));
  return t;
}

// The message `index` from rank `from` to rank `to`: its size and contents follow from the
// run's seed, so the receiver can check it.
std::vector<unsigned char> message(int from, int to, int index, std::size_t size) {
  auto g = test::rng(uint64_t(from) * 1000003 + uint64_t(to) * 1009 + uint64_t(index));
  std::vector<unsigned char> m(size);
  for (auto& b : m) b = static_cast<unsigned char>(g());
  return m;
}

const std::size_t kSizes[] = {0, 1, 100, 64 << 10, (64 << 10) + 1, kPiece * 3, 3 << 20, 12345};

TEST(MpiTransport, EveryRankSendsEveryOtherMessagesOfEverySizeInOrder) {
  Transport& t = world();
  ASSERT_GE(t.size(), 2) << "run this under mpirun -np 2 or more";
  const int rounds = 3, per_peer = rounds * int(std::size(kSizes));
  for (int to = 0; to < t.size(); ++to) {
    if (to == t.rank()) continue;
    for (int i = 0; i < per_peer; ++i) {
      const std::size_t size = kSizes[i % std::size(kSizes)];
      t.send(to, 100 + uint32_t(i), message(t.rank(), to, i, size));
    }
  }
  std::vector<int> next(t.size(), 0);
  int expected = per_peer * (t.size() - 1);
  while (expected > 0) {
    auto m = t.receive(std::chrono::seconds(60));
    ASSERT_TRUE(m) << "rank " << t.rank() << ": no message within 60 s, " << expected
                   << " still expected";
    ASSERT_GE(m->source, 0);
    ASSERT_LT(m->source, t.size());
    ASSERT_NE(m->source, t.rank());
    const int i = next[m->source]++;
    EXPECT_EQ(m->tag, 100 + uint32_t(i)) << "from rank " << m->source;
    const std::size_t size = kSizes[i % std::size(kSizes)];
    ASSERT_EQ(m->body.size(), size) << "message " << i << " from rank " << m->source;
    EXPECT_TRUE(m->body == message(m->source, t.rank(), i, size))
        << "message " << i << " from rank " << m->source << " arrived changed";
    --expected;
  }
  for (int r = 0; r < t.size(); ++r)
    if (r != t.rank()) EXPECT_EQ(next[r], per_peer);
}

TEST(MpiTransport, KnowsItWasStartedByMpirun) {
  EXPECT_TRUE(launched_by_mpi());
}

TEST(MpiTransport, ReceiveWithNothingComingTimesOut) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(world().receive(std::chrono::milliseconds(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(45));
}

TEST(MpiTransport, AMessageForARankThatDoesNotExistIsAnError) {
  Transport& t = world();
  try {
    t.send(t.size(), 1, std::vector<unsigned char>{1, 2, 3});
    ADD_FAILURE() << "no error";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 to"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.send(-1, 1, {}), NetError);
}

}  // namespace
}  // namespace gridspan::net

int main(int argc, char** argv) {
  return gridspan::test::mpi_test_main(argc, argv, gridspan::net::world());
}
