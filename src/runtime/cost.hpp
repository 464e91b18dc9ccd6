// What kernels cost, measured (the DAHL post: measure, do not assume). The worker times a
// sample of the Execute tasks it runs (cpu devices: the run's wall time and its share of the
// device, ShareClock; GPUs: timing events around the work's operations) and records them here, per
// executable and size class (the superblock's threads, in powers of two). A task's time is not
// linear in its size (caches), so each class keeps its own figure and an estimate uses the nearest
// class measured.
//
// As StarPU keeps its history models, the classes are kept across runs (keep_history): a file
// per executable in a folder for the machine, read when the executable is first looked up and
// written when the model ends. A later run's first launches then start from what earlier runs
// measured instead of a guess.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gridspan/core/info.hpp"
#include "plan/task.hpp"

namespace gridspan::runtime {

/// What a trial of finer cuts compares (granularity.hpp): how often a launch of a kernel
/// completes, whatever the gaps between its tasks. A launch on trial carries a clock
/// (plan::Execute::clock); the worker ticks it as each of its tasks ends, and the ends of a
/// launch's tasks, `tasks` of them on this process, give its period.
class LaunchClocks {
 public:
  /// The first launch's ticks are left out (its tasks share the devices with the launches
  /// before the cut changed); then this many launches are measured.
  static constexpr int kLaunches = 3;
  /// A clock of launches whose tasks on this process are `tasks` (again: kept as it is, or
  /// started anew if the count differs).
  void open(uint32_t id, int64_t tasks);
  void close(uint32_t id);
  void close_all();
  /// A task of clock `id` ended now (ignored for a clock not open). Any thread.
  void tick(uint32_t id);
  /// The median over the ticks of the time in which `tasks` of them came: a launch's
  /// period in a steady stream (a pause between launches moves few windows). None before
  /// kLaunches launches were measured, or for a clock not open.
  std::optional<double> period(uint32_t id) const;
  /// The least and the most of the windows period() takes the median of (for the log).
  std::optional<std::pair<double, double>> spread(uint32_t id) const;

 private:
  struct Clock {
    int64_t tasks = 0;
    std::vector<double> ends;  // seconds on the steady clock, in the order they came
  };
  static constexpr std::size_t kMostTicks = std::size_t(1) << 16;
  std::vector<double> windows(uint32_t id) const;  // under mutex_; empty before kLaunches
  mutable std::mutex mutex_;
  std::map<uint32_t, Clock> clocks_;
};

class CostModel {
 public:
  /// The first runs of each executable are timed, then one in `kEvery` (StarPU trusts a
  /// history model after 10 samples).
  static constexpr uint32_t kFirst = 10, kEvery = 16;
  /// Whether to time the next run of `e` (counts its runs; any thread).
  static bool should_time(const plan::Executable& e);
  /// The launch clocks of the kernels on trial.
  LaunchClocks& clocks() { return clocks_; }

  /// A timed run of `threads` threads (a batch: all of its superblocks') whose chunks hold
  /// `bytes`: its wall time, and its share of the device's time (the same where it ran
  /// alone; see ShareClock). Any thread.
  void record(const plan::Executable& e, int64_t threads, std::size_t bytes, double seconds,
              double share);

  struct Estimate {
    double seconds_per_thread = 0;  // in the nearest size class measured
    double bytes_per_second = 0;    // the chunks' bytes over the time, in that class
    int64_t threads = 0;            // that class's mean threads per task
    int samples = 0;                // runs timed in that class
    double share_per_thread = 0;    // what a thread cost its device (ShareClock)
    bool earlier = false;           // some of the samples came from earlier runs' history
  };
  /// The estimate for a task of `threads` threads of `e`; none before a run was timed.
  std::optional<Estimate> estimate(const plan::Executable& e, int64_t threads) const;
  /// The same from the size class of `threads` alone; none before a run of it was timed.
  std::optional<Estimate> measured(const plan::Executable& e, int64_t threads) const;
  /// The fastest bytes per second any task of at least `min_bytes` reached (a device's
  /// memory bandwidth as kernels see it); none before such a task was timed.
  std::optional<double> best_bandwidth(std::size_t min_bytes) const;
  /// Drops what was recorded for `e` (its runs so far were warming up).
  void forget(const plan::Executable& e);
  /// Every executable's classes, for Context::kernel_costs.
  std::vector<KernelCost> report() const;

  /// Keeps the classes across runs in `folder` (created when first written): each
  /// executable's history is read there when it is first looked up, and what this model
  /// recorded is written back when it ends (or at save()). Empty: kept in memory only.
  void keep_history(std::string folder);
  /// A class read from the history weighs as this many samples at most: an estimate uses it
  /// at once, and this run's own samples soon outweigh a machine that has changed.
  static constexpr int kHistorySamples = 2;
  /// Where a trial of finer cuts of the launch `launch` (a name alike in every run) of `e`
  /// stands: the cut it settled on, or the finest cut that paid so far in a trial still
  /// going. Kept with the history, so that later runs start there instead of trying again
  /// (a run too short for the whole trial goes on with it where the last one stopped, and
  /// one that measured its cut tries the finer one at once against that period).
  struct Cut {
    int64_t factor = 1;
    bool settled = false;
    int64_t probe = 2;  // going on: the finer cut tried next (twice or four times factor)
    double period = 0;  // going on: seconds a launch at `factor` took in the run (0: none)
  };
  std::optional<Cut> kept_cut(const plan::Executable& e, const std::string& launch) const;
  void keep_cut(const plan::Executable& e, const std::string& launch, Cut cut);
  /// Writes the history of every executable that recorded since it was read (never throws;
  /// a folder that cannot be written is logged at debug).
  void save() const;
  ~CostModel();

 private:
  struct Class {  // running means, the newest sample weighing at least 1/kEvery
    int samples = 0;
    double seconds = 0, threads = 0, bytes = 0, share = 0;
    bool earlier = false;  // read from the history
  };
  static Estimate of(const Class& c);
  struct Entry {
    std::string name, key;            // the executable's name and history_key()
    std::map<int, Class> classes;     // by floor(log2(threads))
    std::map<std::string, Cut> cuts;  // kept_cut, by launch
    bool read = false;                // its history was looked for
    bool recorded = false;            // a sample came since
  };
  /// The entry of `e`, its history read once there is a folder; null when it has no
  /// classes and `create` is false. Under mutex_.
  Entry* entry(const plan::Executable& e, bool create) const;
  void read_history(Entry& entry) const;
  static bool read_line(const std::string& line, Entry& entry, std::map<int, Class>& read);
  std::string history_path(const std::string& key) const;

  mutable std::mutex mutex_;
  mutable std::map<const plan::Executable*, Entry> entries_;
  std::string folder_;
  LaunchClocks clocks_;
};

/// The time a synchronous device gives each of its tasks. Tasks that run together on a
/// device share its threads, so each is charged, moment by moment, the time over the tasks
/// running then (processor sharing); a device's charges add up to its busy time, whether
/// its tasks ran one after another (tasks that use one chunk keep their order) or together.
class ShareClock {
 public:
  using Time = std::chrono::steady_clock::time_point;
  /// A task starts at `now`; returns the clock's reading, for leave.
  double enter(Time now);
  /// The task that entered at reading `entered` ends at `now`; returns its charge in seconds.
  double leave(double entered, Time now);

 private:
  void advance(Time now);  // under the mutex
  std::mutex mutex_;
  double reading_ = 0;  // seconds a task running throughout would have been charged
  int running_ = 0;
  Time last_{};
};

}  // namespace gridspan::runtime
