// Entry point of the end-to-end tests: as test_main.cpp, and under mpirun rank 0 runs the
// tests over every rank while the other ranks serve it (as gs::run does), so every test
// runs unchanged on several processes; every rank exits with rank 0's result.
#include <gtest/gtest.h>

#include <string>

#include "gridspan/runtime/process.hpp"
#include "support/random.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  using gridspan::runtime::Process;
  Process* p = Process::distributed() ? &Process::get() : nullptr;
  if (p && p->rank() != 0) return p->serve();
  const std::string ranks = p ? " on " + std::to_string(p->size()) + " ranks" : "";
  std::printf("gridspan test seed: %llu (set GRIDSPAN_TEST_SEED to repeat)%s\n",
              static_cast<unsigned long long>(gridspan::test::base_seed()), ranks.c_str());
  const int code = RUN_ALL_TESTS();
  return p ? p->finish(code) : code;
}
