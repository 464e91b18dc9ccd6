// The table of GRIDSPAN_* settings and what reads and writes them (see settings.hpp).
#include "core/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::settings {

namespace {

using K = Kind;
using C = Config;

const std::vector<Setting> kSettings = {
    {"GRIDSPAN_BACKEND", K::choice, &C::backend,
     "`auto` (GPUs when there are any, else cpu), `cuda` (fail if no GPU can be used) or `cpu`",
     "auto", 0, 0, "auto, cuda, cpu"},
    {"GRIDSPAN_GPUS", K::count, &C::gpus,
     "GPUs to use (the first N; under mpirun, of this rank's share of the node's GPUs); 0: all",
     "all", 0, 1024},
    {"GRIDSPAN_CPU_DEVICES", K::count, &C::cpu_devices, "virtual cpu devices", "2", 1, 1024},
    {"GRIDSPAN_CPU_THREADS", K::count, &C::cpu_threads,
     "executor threads per cpu device (one superblock's blocks are spread over them); 0: the "
     "default",
     "cores / devices", 0, 1024},
    {"GRIDSPAN_DEVICE_MEMORY", K::size, &C::device_memory,
     "memory budget per device (`64MiB`, `2GiB`, ...); 0: the default",
     "a GPU's free memory less 1 GiB + 1/64; a cpu device's share of RAM/4"},
    {"GRIDSPAN_HOST_MEMORY", K::size, &C::host_memory,
     "host memory for spilled chunks; 0: the default", "half of RAM"},
    {"GRIDSPAN_PIN_AHEAD", K::flag, &C::pin_ahead,
     "once a GPU evicts, or the chunks created on it outgrow its memory, host memory is pinned "
     "ahead for its resident chunks without a host copy, so that their first write-back does "
     "not wait for it; off: when a write-back needs it",
     "on"},
    {"GRIDSPAN_WRITE_BEHIND", K::flag, &C::write_behind,
     "once a GPU evicts, the chunks it will evict next are copied to the host ahead while they "
     "stay resident, so that copies in do not wait for copies out; off: when evicted",
     "on"},
    {"GRIDSPAN_MEMORY_POOL", K::flag, &C::memory_pool,
     "freed device and pinned host memory is kept for reuse (`Context::free_all_blocks` gives "
     "it back); off: given back at once",
     "on"},
    {"GRIDSPAN_SPILL_DIR", K::text, &C::spill_dir, "folder for spill files",
     "private folder under `$TMPDIR`"},
    {"GRIDSPAN_CACHE_DIR", K::text, &C::cache_dir, "compiled-kernel cache", "`~/.cache/gridspan`"},
    {"GRIDSPAN_STAGING_BYTES", K::size, &C::staging_bytes,
     "chunk bytes staged per device for queued and running tasks; 0: the default",
     "half of the device's memory, at least 256MiB"},
    {"GRIDSPAN_STREAM_ORDER", K::flag, &C::stream_order,
     "queue a GPU task behind dependencies still running on its GPU (stream waits) instead of "
     "waiting for them on the host",
     "on"},
    {"GRIDSPAN_MEMOIZE", K::flag, &C::memoize_launches,
     "reuse a repeated launch's plan (same kernel, geometry, work distribution and arrays) "
     "instead of planning it again",
     "on"},
    {"GRIDSPAN_BATCH_BLOCKS", K::count, &C::batch_blocks,
     "superblocks of one launch with at most this many blocks go to a GPU as parts of one "
     "kernel launch; 0: never",
     "2048", 0, 2147483647},
    {"GRIDSPAN_TASK_OVERHEAD_US", K::count, &C::task_overhead_us,
     "the host's time per task that automatic granularity works from, in microseconds; 0: "
     "measured when first needed",
     "measured", 0, 1000000},
    {"GRIDSPAN_FINER_CUTS", K::flag, &C::finer_cuts,
     "on cpu devices, automatic work tries a kernel's superblocks cut finer, and keeps the cut "
     "while its launches complete more often (cache effects, gaps between launches)",
     "on"},
    {"GRIDSPAN_COST_HISTORY", K::flag, &C::cost_history,
     "automatic granularity keeps each kernel's measured costs in the cache folder, and a later "
     "run starts from them instead of a guess; off: every run starts afresh",
     "on"},
    {"GRIDSPAN_DEVICE_BANDWIDTH", K::size, &C::device_bandwidth,
     "the bytes a second a device moves that automatic granularity works from (`3000GiB`); "
     "0: measured when first needed",
     "measured"},
    {"GRIDSPAN_COMPLETION_POLL_US", K::count, &C::completion_poll_us,
     "a GPU's completion threads look for finished work every N microseconds and sleep "
     "between (in the driver, spinning, while a host thread waits); 0: always in the driver",
     "0", 0, 1000000},
    {"GRIDSPAN_LAUNCH_THREAD", K::flag, &C::launch_thread,
     "a GPU's kernels and copies are queued by a thread of its own, so that a launch returns "
     "without waiting for the driver; off: by the launching thread",
     "on"},
    {"GRIDSPAN_LAUNCH_IDLE_DIRECT", K::flag, &C::launch_idle_direct,
     "with the launch thread: a launch to a GPU with nothing queued or running there, after a "
     "host wait, is queued by the launching thread itself; off: always by the launch thread",
     "on"},
    {"GRIDSPAN_ALLOW_TF32", K::flag, &C::allow_tf32,
     "float32 matrix products on GPUs may round their inputs to TF32 on the tensor cores "
     "(faster; about 3e-4 from a double reference where it was 4e-7); off: cuBLAS's single "
     "precision, bit for bit",
     "off"},
    {"GRIDSPAN_MAX_TASKS", K::count, &C::max_tasks,
     "a launch waits while this many tasks are unfinished, until half of them have ended (a run "
     "of one process); 0: never",
     "16384", 0, 2147483647},
    {"GRIDSPAN_CHECK", K::flag, &C::check, "checked mode for every kernel", "off"},
    {"GRIDSPAN_SHOW_SYNC_WARNING", K::flag, &C::show_sync_warning,
     "warn where the host waits for the devices (to_vector, item, printing), naming the "
     "operation and the caller's line",
     "off"},
    {"GRIDSPAN_SHOW_SYNC_WARNING_ONCE", K::flag, &C::show_sync_warning_once,
     "with GRIDSPAN_SHOW_SYNC_WARNING: once per place; off: every time", "on"},
    {"GRIDSPAN_LOG", K::level, &C::log_level, "error, warn, info, debug", "warn"},
    {"GRIDSPAN_TRACE", K::text, &C::trace_file,
     "write every task (kernel, kind, device, start, end, bytes) as Chrome/Perfetto trace JSON "
     "to this file when the context ends",
     "off"},
    {"GRIDSPAN_CXX", K::text, &C::cxx, "host compiler of the cpu backend's kernels",
     "`c++` from `PATH`"},
    {"GRIDSPAN_NET_TIMEOUT", K::seconds, &C::net_timeout,
     "under mpirun: seconds without a word from a rank before the run fails naming it (and "
     "every rank ends)",
     "60"},
    {"GRIDSPAN_MPI", K::flag, &C::mpi,
     "under mpirun: one run over every rank, rank 0 driving; off makes every rank a run of its "
     "own",
     "on"},
    {"GRIDSPAN_LEND_MEMORY", K::flag, &C::lend_memory,
     "under mpirun: ranks of one node copy transfers straight from each other's devices (CUDA "
     "IPC; cpu devices: cross-memory attach) instead of through host memory and MPI",
     "on"},
    {"GRIDSPAN_LEND_MIN", K::size, &C::lend_min,
     "the smallest transfer that goes so (smaller ones go through MPI; opening another "
     "process's GPU memory costs about a millisecond)",
     "8MiB"},
    {"GRIDSPAN_CPU_ASYNC", K::flag, &C::cpu_async,
     "cpu devices that behave as GPUs (work on lanes reported later, device memory apart from "
     "host memory), to test without a GPU what a GPU would do",
     "off"},
    {"GRIDSPAN_CHECK_TRANSFERS", K::flag, &C::check_transfers,
     "debugging: compare every transfer's region, once sent or received, with the bytes (with "
     "`GRIDSPAN_STREAM_ORDER=0`)",
     "off"},
    {"GRIDSPAN_TEST_SEED",
     K::tooling,
     {},
     "tests: the random seed (each test prints its own)",
     "from the clock"},
    {"GRIDSPAN_FUZZ_PROGRAMS",
     K::tooling,
     {},
     "tests: random programs in the differential test",
     "200"},
    {"GRIDSPAN_FUZZ_FIRST",
     K::tooling,
     {},
     "tests: the first random program's number (to run one again)",
     "0"},
    {"GRIDSPAN_FUZZ_DEVICES",
     K::tooling,
     {},
     "tests: the most devices a random program runs on",
     "3"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = choices;; ++p) {
    if (*p == ',' || *p == '\0') {
      out.push_back(cur);
      cur.clear();
      if (!*p) break;
      if (p[1] == ' ') ++p;
    } else {
      cur += *p;
    }
  }
  return out;
}

// "a, b or c"
std::string either(const std::vector<std::string>& words) {
  std::string s;
  for (std::size_t i = 0; i < words.size(); ++i)
    s += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return s;
}

const char* kLevels[] = {"error", "warn", "info", "debug"};

void apply_flag(const Setting& s, const std::string& value, bool& field) {
  if (auto f = parse_flag(value)) {
    field = *f;
    return;
  }
  logging::warn_once(
      fmt::format("{}='{}' is not a flag (1/on/yes/true or 0/off/no/false); keeping {}", s.name,
                  value, field ? "on" : "off"));
}

void apply_level(const Setting& s, const std::string& value, LogLevel& field) {
  for (int l = 0; l < 4; ++l)
    if (lower(value) == kLevels[l]) {
      field = static_cast<LogLevel>(l);
      return;
    }
  logging::warn_once(fmt::format("{}='{}' is not one of error, warn, info, debug; keeping {}",
                                 s.name, value, kLevels[static_cast<int>(field)]));
}

void apply_count(const Setting& s, const std::string& value, int& field) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end || errno == ERANGE || n < s.lo || n > s.hi)
    throw ConfigError(fmt::format("{}='{}' is not a whole number from {} to {} ({})", s.name, value,
                                  s.lo, s.hi, s.summary));
  field = static_cast<int>(n);
}

void apply_seconds(const Setting& s, const std::string& value, double& field) {
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !(seconds > 0) || seconds > 1e6)
    throw ConfigError(
        fmt::format("{}='{}' is not a time; give seconds, e.g. 60 or 2.5", s.name, value));
  field = seconds;
}

void apply_choice(const Setting& s, const std::string& value, std::string& field) {
  const auto choices = split_choices(s.choices);
  if (std::find(choices.begin(), choices.end(), lower(value)) == choices.end())
    throw ConfigError(
        fmt::format("{}='{}' is not one of its choices; give {}", s.name, value, either(choices)));
  field = lower(value);
}

std::string show_size(std::size_t bytes) {
  const char* units[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int u = 0; u < 4; ++u) {
    const std::size_t scale = std::size_t(1) << (10 * (4 - u));
    if (bytes && bytes % scale == 0) return fmt::format("{}{}", bytes / scale, units[u]);
  }
  return std::to_string(bytes);
}

// Edits that turn `a` into `b` (insertions, deletions, substitutions).
std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<Setting>& all() {
  return kSettings;
}

const Setting* find(const std::string& name) {
  for (const Setting& s : kSettings)
    if (name == s.name) return &s;
  return nullptr;
}

void apply(const Setting& s, const std::string& value, Config& c) {
  switch (s.kind) {
    case Kind::text:
      c.*std::get<std::string Config::*>(s.field) = value;
      return;
    case Kind::flag:
      return apply_flag(s, value, c.*std::get<bool Config::*>(s.field));
    case Kind::size:
      c.*std::get<std::size_t Config::*>(s.field) = parse_size(value, s.name);
      return;
    case Kind::count:
      return apply_count(s, value, c.*std::get<int Config::*>(s.field));
    case Kind::seconds:
      return apply_seconds(s, value, c.*std::get<double Config::*>(s.field));
    case Kind::choice:
      return apply_choice(s, value, c.*std::get<std::string Config::*>(s.field));
    case Kind::level:
      return apply_level(s, value, c.*std::get<LogLevel Config::*>(s.field));
    case Kind::tooling:
      return;
  }
}

std::string show(const Setting& s, const Config& c) {
  switch (s.kind) {
    case Kind::text:
    case Kind::choice:
      return c.*std::get<std::string Config::*>(s.field);
    case Kind::flag:
      return c.*std::get<bool Config::*>(s.field) ? "on" : "off";
    case Kind::size:
      return show_size(c.*std::get<std::size_t Config::*>(s.field));
    case Kind::count:
      return std::to_string(c.*std::get<int Config::*>(s.field));
    case Kind::seconds:
      return fmt::format("{}", c.*std::get<double Config::*>(s.field));
    case Kind::level:
      return kLevels[static_cast<int>(c.*std::get<LogLevel Config::*>(s.field))];
    case Kind::tooling:
      break;
  }
  return "";  // tooling: no field of a run
}

void check_unknown(char** environ) {
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    std::string name(*e, eq ? static_cast<std::size_t>(eq - *e) : std::strlen(*e));
    if (name.rfind("GRIDSPAN_", 0) != 0 || find(name)) continue;
    const Setting* nearest = &kSettings[0];
    for (const Setting& s : kSettings)
      if (distance(name, s.name) < distance(name, nearest->name)) nearest = &s;
    // A suggestion only when it is near: a few edits, at most a third of the name's own part.
    const std::size_t edits = distance(name, nearest->name);
    const bool near = edits <= 3 && edits * 3 <= name.size() - std::strlen("GRIDSPAN_");
    logging::warn_once(fmt::format(
        "{} is not a gridspan setting, so it changes nothing{}; `gridspan settings` lists them",
        name, near ? fmt::format("; did you mean {}?", nearest->name) : std::string()));
  }
}

std::string markdown_table() {
  std::string s = "| variable | meaning | default |\n| --- | --- | --- |\n";
  for (const Setting& st : kSettings)
    s += fmt::format("| `{}` | {} | {} |\n", st.name, st.summary, st.by_default);
  return s;
}

}  // namespace gridspan::settings
