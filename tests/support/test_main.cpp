// Test entry point: prints the random seed every randomised test derives its inputs from
// (GRIDSPAN_TEST_SEED to repeat a run).
#include <gtest/gtest.h>

#include "support/random.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::printf("gridspan test seed: %llu (set GRIDSPAN_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(gridspan::test::base_seed()));
  return RUN_ALL_TESTS();
}
