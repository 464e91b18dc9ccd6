// The entry point of the tests run under mpirun: every rank must derive the same random
// inputs, so rank 0's seed goes to the others, and each has it, before any test runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "net/transport.hpp"
#include "support/random.hpp"

namespace gridspan::test {

inline int mpi_test_main(int argc, char** argv, net::Transport& t) {
  testing::InitGoogleTest(&argc, argv);
  if (t.rank() == 0) {
    const std::string seed = std::to_string(base_seed());
    for (int r = 1; r < t.size(); ++r)
      t.send(r, 1, std::vector<unsigned char>(seed.begin(), seed.end()));
    // No test starts before every rank has its seed: a rank that served rank 0's first
    // tasks could otherwise send a slower one a message that comes before the seed.
    for (int r = 1; r < t.size(); ++r) {
      auto m = t.receive(std::chrono::seconds(60));
      if (!m || m->tag != 2) {
        std::fprintf(stderr, "rank 0: not every rank has its seed\n");
        return 1;
      }
    }
    std::printf("gridspan test seed: %s on %d ranks (set GRIDSPAN_TEST_SEED to repeat)\n",
                seed.c_str(), t.size());
  } else {
    auto m = t.receive(std::chrono::seconds(60));
    if (!m || m->source != 0 || m->tag != 1) {
      std::fprintf(stderr, "rank %d: no seed from rank 0\n", t.rank());
      return 1;
    }
    setenv("GRIDSPAN_TEST_SEED", std::string(m->body.begin(), m->body.end()).c_str(), 1);
    t.send(0, 2, {});
  }
  return RUN_ALL_TESTS();  // every rank reports (mpirun --tag-output names them)
}

}  // namespace gridspan::test
