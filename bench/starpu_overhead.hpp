// StarPU side of the overhead comparison (built when StarPU 1.3 is found).
#pragma once

namespace bench {

enum class StarpuShape { empty, own_chunk, chain };

struct StarpuSession {
  explicit StarpuSession(int workers);
  ~StarpuSession();
  bool ok = false;
};

/// Seconds per task for `tasks` tasks of `shape`, submitted and waited for.
double starpu_seconds_per_task(StarpuShape shape, int tasks);

}  // namespace bench
