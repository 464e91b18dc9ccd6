// The one place that picks where a context's tasks run (see runner.hpp).
#include "runtime/runner.hpp"

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "runtime/cluster.hpp"
#include "runtime/local.hpp"
#include "runtime/process.hpp"

namespace gridspan::runtime {

std::unique_ptr<Runner> make_runner(Config& config) {
  if (!Process::distributed() || !config.mpi) return std::make_unique<LocalRunner>(config);
  Process& process = Process::get();
  if (process.size() == 1) return std::make_unique<LocalRunner>(config);  // mpirun -np 1
  if (process.rank() != 0)
    throw Error(fmt::format(
        "a gs::Context on rank {}: under mpirun only rank 0 runs the program, and the other "
        "ranks serve it; start the program with gs::run or gs::run_program",
        process.rank()));
  config.node_rank = process.transport().node_rank();
  config.node_ranks = process.transport().node_size();
  return std::make_unique<Cluster>(process, config);
}

}  // namespace gridspan::runtime
