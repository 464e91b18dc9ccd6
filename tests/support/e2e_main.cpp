// Entry point of the end-to-end tests: as test_main.cpp, and under mpirun rank 0 runs the
// tests over every rank while the other ranks serve it (as gs::run does), so every test
// runs unchanged on several processes; every rank exits with rank 0's result.
#include <gtest/gtest.h>

#include <string>

#include "gridspan/gridspan.hpp"
#include "support/random.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return gridspan::run_program([] {
    const int n = gridspan::process_count();
    const std::string ranks = n > 1 ? " on " + std::to_string(n) + " ranks" : "";
    std::printf("gridspan test seed: %llu (set GRIDSPAN_TEST_SEED to repeat)%s\n",
                static_cast<unsigned long long>(gridspan::test::base_seed()), ranks.c_str());
    return RUN_ALL_TESTS();
  });
}
