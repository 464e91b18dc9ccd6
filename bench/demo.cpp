// The demo problems at larger sizes: `bench_demo [scale]` (default 4) runs the same
// stencil, HotSpot, K-means and GEMM as `gridspan demo`, with the same spilling limits.
#include <cstdlib>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  gridspan::cli::DemoOptions options;
  options.scale = argc > 1 ? std::atoi(argv[1]) : 4;
  if (argc > 2) options.only = argv[2];
  return gridspan::cli::run_demo(options);
}
