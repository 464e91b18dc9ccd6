// `gridspan info`: the workers of a run (every MPI rank under mpirun), their devices and
// memory, from the hellos of a session like any program's.
#include <cstdio>

#include <cstdlib>

#include "cli/commands.hpp"
#include "core/settings.hpp"
#include "gridspan/gridspan.hpp"

namespace gridspan::cli {

int run_info() {
  return gridspan::run(Config::from_env(), [](Context& ctx) {
    const auto ranks = ctx.ranks();
    std::size_t devices = 0;
    for (const auto& r : ranks) devices += r.devices.size();
    std::printf("gridspan: %zu worker%s, %zu device%s (%s backend)\n", ranks.size(),
                ranks.size() == 1 ? "" : "s", devices, devices == 1 ? "" : "s",
                ctx.backend_name().c_str());
    int global = 0;
    for (const auto& r : ranks) {
      std::printf("rank %d on %s: %s backend, host memory for spills %s\n", r.rank, r.host.c_str(),
                  r.backend.c_str(), format_bytes(r.host_memory).c_str());
      for (std::size_t d = 0; d < r.devices.size(); ++d)
        std::printf("  device %d (local %zu): %s, %s for gridspan\n", global++, d,
                    r.devices[d].c_str(),
                    r.device_memory[d] ? format_bytes(r.device_memory[d]).c_str() : "no limit");
    }
    std::printf("settings (`gridspan settings` says what each does):\n");
    for (const settings::Setting& s : settings::all()) {
      if (s.kind == settings::Kind::tooling) continue;
      const bool set = std::getenv(s.name) && *std::getenv(s.name);
      std::string value = settings::show(s, ctx.config());
      if (!set && (value.empty() || value == "0")) value = std::string("(") + s.by_default + ")";
      std::printf("  %s=%s%s\n", s.name, value.c_str(), set ? "  (from the environment)" : "");
    }
  });
}

int run_settings() {
  std::fputs(settings::markdown_table().c_str(), stdout);
  return 0;
}

}  // namespace gridspan::cli
