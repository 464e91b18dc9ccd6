// The demo problems at larger sizes: `bench_demo [scale] [problem]` (default 4) runs the
// same stencil, HotSpot, K-means and GEMM as `gridspan demo`, with the same spilling limits.
// `bench_demo [scale] [problem] --sweep 1,2,4,8` runs each under its own cut, that many
// chunks and superblocks per device, Dask's and Legate's rules and automatic (issue 17).
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  gridspan::cli::DemoOptions options;
  options.scale = 4;
  std::vector<int> sweep;
  bool sweeping = false;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0 && i + 1 < argc) {
      sweeping = true;
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        sweep.push_back(std::atoi(item.c_str()));
    } else if (positional++ == 0) {
      options.scale = std::atoi(argv[i]);
    } else {
      options.only = argv[i];
    }
  }
  if (sweeping) return gridspan::cli::run_demo_sweep(options, sweep);
  return gridspan::cli::run_demo(options);
}
