// Automatic granularity (the DAHL post, made real): dist::automatic() and work::automatic()
// choose chunk and superblock sizes from what the driver knows and what it measured: the
// devices and their memory budgets, the host's cost per task and a device's bandwidth (both
// measured once, the first time a choice is made), and each kernel's cost model (runtime/
// cost.hpp). A kernel's first launch uses a guess from its arrays' bytes; later launches
// re-split with its measured time. Every choice is logged at info (once per distinct
// choice) and recorded in the trace.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gridspan/core/dtype.hpp"
#include "gridspan/distribution/distribution.hpp"
#include "plan/planner.hpp"
#include "runtime/cost.hpp"

namespace gridspan::runtime {

class Driver;

/// What the rules start from: measured, or set by GRIDSPAN_TASK_OVERHEAD_US and
/// GRIDSPAN_DEVICE_BANDWIDTH (for runs that must choose the same every time).
struct Baseline {
  double task_overhead = 0;  // seconds of host time per task (planning, worker, launch)
  double bandwidth = 0;      // bytes per second a device's memory-bound task moves
  bool measured = false;     // false: both came from settings
};

/// Whether every chunk of `m` holds all of it, on more than one device (dist::replicated()).
bool is_replicated(const plan::ArrayMeta& m);

class Granularity {
 public:
  /// Tasks should last at least this many times the per-task overhead (5% at most).
  static constexpr double kOverheads = 20;
  /// A chunk holds at most this part of the smallest device budget, so that a task's
  /// chunks (a kernel takes several arrays) fit beside others' and transfers overlap
  /// kernels out of core: on one H200 with half of the data resident, 32 pieces were best
  /// for every paper benchmark and 8 up to 2.4x slower. 1/64 on one H100 ran Black-Scholes
  /// 3% faster, but K-Means (64 chunks) at 0.70 of 26 pieces, where 1/32's 52 ran as fast
  /// as those; HotSpot's hand choices there swung 2.5x between identical runs
  /// (docs/PERFORMANCE.md, issue 17, session 34).
  static constexpr int64_t kBudgetParts = 32;
  /// But an array takes at most this many chunks a device where chunks of up to
  /// 1/kSmallBudgetParts of the budget allow: every chunk costs a task, a copy and its
  /// bookkeeping (the Correlator's samples in 128 chunks ran at 0.78 of 64, on one H100).
  static constexpr int64_t kMostChunks = 64;
  /// Rows a memory-bound cut of 100 such or more is a multiple of: every shape's block rows
  /// divide it, so that arrays of one row count and other shapes can share the cut
  /// (shared_cut).
  static constexpr int64_t kCommonRows = 256;
  /// Chunks may be up to this large where 1/kBudgetParts of the budget is less, at most
  /// 1/kSmallBudgetParts of it: a chunk moved to host memory or disk costs a fixed time
  /// besides its bytes (the demo's K-Means on the cpu backend, out of core in 2.5 MiB, ran
  /// 2.4 times slower with chunks of 1/32 of it; a quarter left no room beside its GEMM's
  /// replicated matrix).
  static constexpr int64_t kLeastChunk = int64_t(1) << 20;
  static constexpr int64_t kSmallBudgetParts = 16;
  /// The most bytes dist::automatic puts in a chunk for a device budget of `budget` bytes.
  static int64_t most_chunk_bytes(int64_t budget);
  /// Whether cutting a launch of `seconds` in `pieces` over the devices gains more than
  /// moving its `arrays` (of `bytes` in all) once costs: the bytes over a link about an
  /// eighth of a device's memory bandwidth, and twice a task's overhead an array (a copy,
  /// and the wait for it in the launch's path).
  static bool moving_pays(double seconds, int64_t pieces, std::size_t bytes, int arrays,
                          const Baseline& b);

  explicit Granularity(Driver& driver);
  ~Granularity();

  /// dist::automatic() for an array: rows over the devices, each chunk long enough that a
  /// memory-bound pass over it outlasts the per-task overhead kOverheads times, at most
  /// 1/kBudgetParts of the smallest budget, as many as the devices where the bytes allow,
  /// rows aligned to what a block of 256 threads covers when it takes the last axis first.
  /// With a `halo`, each chunk widened by it (dist::stencil of the same rows).
  DataDistribution distribution(DType dtype, const Dim& shape, const Dim& halo = Dim());
  /// work::automatic() for a launch: fills `spec.superblocks` (see granularity.cpp).
  void superblocks(plan::LaunchSpec& spec);
  /// Before superblocks(): the automatic arrays of the launch to cut anew, by parameter, and
  /// how. An array the launch's threads walk along an axis other than its rows (an ELL
  /// matrix's columns) is cut along that axis, so that superblocks use its chunks in place.
  std::vector<std::pair<int, DataDistribution>> recuts(const plan::LaunchSpec& spec);
  /// After superblocks(): the automatic arrays of the launch to replicate, by parameter. An
  /// array that superblocks on several devices read whole and the launch does not write (SpMV's
  /// `x`, N-Body's positions) gets a copy on every device, at the second launch that reads it
  /// so, when it is no larger than a chunk may be: a device then reads its own copy, and a
  /// later write in parts sends only those parts to the others, instead of every device
  /// assembling the whole array at every launch.
  std::vector<int> replicas(const plan::LaunchSpec& spec);
  /// A copy of `old` cut by `dist` (filled by a launch that reads `old`): the caller puts it
  /// in the old one's place and releases the old one.
  std::shared_ptr<plan::ArrayMeta> recut(const plan::ArrayMeta& old, const DataDistribution& dist);
  /// The overhead and bandwidth, measured on the first call.
  const Baseline& baseline();

  /// Cache effects and gaps (the DAHL post: a task's time is not linear in its size; and
  /// smaller tasks of one launch may start while the last ones of the launch before still
  /// run). A launch's superblocks are tried cut in two on their devices: the launches at
  /// each cut tick a launch clock (LaunchClocks), and the cut is kept while each halving
  /// completes launches at least kFinerGain more often, and tasks stay long enough for
  /// their overhead. A halving that does not pay is leapt over once: four times as fine is
  /// tried against the last cut that paid (GEMM on cpu devices: 2 pieces a superblock 4%
  /// slower than 1, 16 pieces 8% faster). Else the last cut that paid is kept. Devices that
  /// run superblocks one by one only (cpu devices; a GPU's superblocks run as one batch).
  static constexpr double kFinerGain = 0.08;
  static constexpr int64_t kMostFiner = 16;  // at most this many pieces a superblock
  struct Trial {
    int64_t factor = 1;  // each superblock of the launch's choice cut in this many
    bool settled = false;
    bool leapt = false;   // twice as fine did not pay: four times as fine is tried
    uint32_t serial = 0;  // names its clocks
    double earlier = 0;   // seconds a launch at `factor` took in an earlier run (0: none)
    bool kept = false;    // this run's period at `factor` is in the cost history
    bool fresh = false;   // the kernel had no history: periods stay in this run
    std::shared_ptr<const plan::Executable> executable;         // the launch's, for the history
    std::string name, threads;                                  // its launch_name; for the log
    int64_t probe() const { return factor * (leapt ? 4 : 2); }  // the finer cut tried
    /// Whether a step from `before` changed the cut, settled or leapt.
    friend bool moved(const Trial& before, const Trial& t) {
      return t.factor != before.factor || t.settled || t.leapt != before.leapt;
    }
    uint32_t clock(int64_t cut) const {  // the launch clock of the launches at `cut`
      return serial * 8 + uint32_t(std::bit_width(uint64_t(cut)));
    }
  };
  /// The factor to cut by now, from the launch periods measured at the current cut (`now`)
  /// and at the finer one tried (`probed`); `probe_ok`: tasks that fine would still be
  /// long enough. Advances `t`.
  static int64_t finer_step(Trial& t, std::optional<double> now, std::optional<double> probed,
                            bool probe_ok);
  /// At the run's end, once every task ended: each trial going on takes the step its last
  /// launches measured, kept with the cost history (a run of 4 launches measures its cut
  /// only after its last launch was planned). `costs`: the run's model, still there.
  void end_trials(CostModel& costs);

 private:
  struct Choice;
  void measure(Baseline& b);
  void keep_history();  // the cost model's history in this machine's folder
  void measure_probe(Baseline& b);
  /// `followable`: the arrays the superblocks may follow, most bytes first.
  /// `thread_pieces`: superblocks wanted for the devices' threads (0: the devices' count).
  Choice choose(const plan::LaunchSpec& spec, const std::vector<int>& followable, int64_t pieces,
                bool worth, int64_t thread_pieces);
  /// choose(), reported (under mutex_): `seconds` the launch's estimated time, from `est`
  /// (none: guessed).
  std::vector<Superblock> choose_reported(const plan::LaunchSpec& spec,
                                          const std::vector<int>& followable, int64_t pieces,
                                          bool worth, int64_t thread_pieces, double seconds,
                                          const std::optional<CostModel::Estimate>& est);
  /// The factor the launch's `count` superblocks (of `threads` threads in all) are cut by
  /// now (Trial, under mutex_); `stable` identifies the launch and its chunks. `clock`: the
  /// launch clock of the launch at that cut, 0 once the trial is settled.
  int64_t finer(const plan::LaunchSpec& spec, const std::vector<int64_t>& stable, std::size_t count,
                int64_t threads, uint32_t& clock);
  /// Starts `t` where a trial of an earlier run left it (the cost history); true if that
  /// one had settled.
  bool settled_earlier(Trial& t);
  void trial_moved(CostModel& costs, const Trial& before, Trial& t, std::optional<double> now,
                   std::optional<double> probed);
  /// The periods measured at `t`'s cut (else an earlier run's) and at the finer one.
  std::pair<std::optional<double>, std::optional<double>> measured(CostModel& costs, Trial& t);
  int64_t rows_per_chunk(DType dtype, const Dim& shape);  // memoized per shape and size
  int64_t budget();     // the smallest device budget (over every rank), found once
  int64_t chunk_cap();  // most_chunk_bytes of budget()
  /// The most bytes a chunk of an array of `bytes` bytes takes: chunk_cap(), or more, up to
  /// 1/kSmallBudgetParts of the budget, where that leaves more than kMostChunks a device.
  int64_t array_cap(int64_t bytes);
  /// The rows a chunk of a memory-bound array of `rows` rows takes (under mutex_).
  int64_t shared_cut(int64_t rows, int64_t per, int64_t align);
  void report(const std::string& what);  // info log, once per text, and the trace

  Driver& driver_;
  std::mutex mutex_;  // guards what follows
  Baseline baseline_;
  bool have_baseline_ = false;
  std::shared_ptr<const plan::Executable> probe_;
  std::map<std::vector<int64_t>, std::vector<Superblock>> choices_;  // by launch and estimate
  std::set<std::string> said_;
  std::map<std::array<int64_t, 5>, int64_t> rows_;  // chunk rows by shape and element size
  std::map<int64_t, int64_t> bound_rows_;           // by row count: the finest memory-bound cut
  std::set<std::vector<int64_t>> kept_cuts_;        // launches recuts() found nothing to cut in
  std::set<std::vector<int64_t>> kept_places_;      // launches replicas() found nothing in
  std::map<uint64_t, int> whole_reads_;             // by array, launches that read it whole
  std::map<std::vector<int64_t>, Trial> trials_;    // by launch and chunks
  uint32_t serials_ = 0;
  std::atomic<int64_t> budget_{0};  // budget(), 0 until found
  std::array<std::shared_ptr<const plan::Executable>, kMaxRank> copiers_;  // recut's, by rank
};

/// The devices' smallest memory budget (over every rank).
std::size_t smallest_budget(const Driver& driver);

}  // namespace gridspan::runtime
