// gs::Config: every setting of a gridspan run, set in code and overridden by GRIDSPAN_*
// environment variables (`gridspan settings` lists them). Sizes take 4096, 64KiB, 512MiB,
// 2GiB; flags take 1/on/yes/true and 0/off/no/false in any case (anything else keeps the
// default and warns once); a GRIDSPAN_* variable that is no setting warns once.
//
//   gs::Config c = gs::Config::from_env();  c.cpu_devices = 4;
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace gridspan {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

struct Config {
  /// Which devices run kernels (GRIDSPAN_BACKEND): "auto" (every GPU when the cuda backend
  /// is built and a GPU with its driver is found, else the cpu backend), "cuda" or "cpu".
  std::string backend = "auto";
  /// GPUs to use on the cuda backend (GRIDSPAN_GPUS); 0 = all.
  int gpus = 0;
  /// Virtual cpu devices when no GPU is used (GRIDSPAN_CPU_DEVICES).
  int cpu_devices = 2;
  /// cpu devices that behave as GPUs (GRIDSPAN_CPU_ASYNC): work queued on lanes and reported
  /// later, device memory apart from host memory. For testing without a GPU what only a GPU
  /// would do; slower.
  bool cpu_async = false;
  /// Executor threads per cpu device (GRIDSPAN_CPU_THREADS); 0 = cores / devices, at least 1.
  int cpu_threads = 0;
  /// Memory budget of each device (GRIDSPAN_DEVICE_MEMORY); 0 = the device's own size
  /// (a GPU: its free memory less a reserve for the driver and kernels; a cpu device: a
  /// quarter of physical memory divided by the devices).
  std::size_t device_memory = 0;
  /// Host memory for spilled chunks (GRIDSPAN_HOST_MEMORY); 0 = half of physical memory.
  std::size_t host_memory = 0;
  /// Once a GPU evicts, a thread pins host memory ahead for its resident chunks that have no
  /// host copy yet, so that their first write-back does not wait for the allocation
  /// (GRIDSPAN_PIN_AHEAD); off = each write-back allocates the block it lacks.
  bool pin_ahead = true;
  /// Once a GPU evicts, the chunks it will evict next that have no host copy are copied to
  /// the host ahead while they stay resident (write-behind, GRIDSPAN_WRITE_BEHIND), so that
  /// evicting them costs no copy and copies in do not wait for copies out; off = a chunk is
  /// written back when it is evicted.
  bool write_behind = true;
  /// Freed chunk memory is kept in per-device pools for reuse (GRIDSPAN_MEMORY_POOL), as
  /// CuPy's memory pool does; off = every free goes back to the device (and pinned host
  /// memory to the host) at once, and nothing is pinned ahead. Context::free_all_blocks
  /// gives the pools' free blocks back when asked.
  bool memory_pool = true;
  /// Folder for spill files (GRIDSPAN_SPILL_DIR); empty = a private folder under $TMPDIR.
  std::string spill_dir;
  /// Compiled-kernel cache (GRIDSPAN_CACHE_DIR); empty = ~/.cache/gridspan, else $TMPDIR.
  std::string cache_dir;
  /// Checked mode for every kernel (GRIDSPAN_CHECK).
  bool check = false;
  /// Warn where the host waits for the devices (GRIDSPAN_SHOW_SYNC_WARNING), once per place
  /// unless GRIDSPAN_SHOW_SYNC_WARNING_ONCE is off.
  bool show_sync_warning = false;
  bool show_sync_warning_once = true;
  /// Bytes of chunks staged for tasks queued or running per device
  /// (GRIDSPAN_STAGING_BYTES); 0 = half of the device's memory budget, at least 256 MiB.
  std::size_t staging_bytes = 0;
  /// Queue a GPU task behind dependencies still running on its GPU, ordered there by
  /// stream waits, instead of waiting for them on the host (GRIDSPAN_STREAM_ORDER).
  bool stream_order = true;
  /// A launch repeated with the same kernel, geometry, work distribution and arrays reuses
  /// the plan of the first one instead of planning again (GRIDSPAN_MEMOIZE).
  bool memoize_launches = true;
  /// Kernels of one launch on one GPU whose superblocks have at most this many blocks go
  /// as parts of one kernel launch (GRIDSPAN_BATCH_BLOCKS); 0 = never.
  int batch_blocks = 2048;
  /// Automatic granularity (dist::automatic, work::automatic, the array library's
  /// defaults) starts from the host's time per task and a device's memory bandwidth,
  /// measured when first needed; set both (GRIDSPAN_TASK_OVERHEAD_US, in microseconds, and
  /// GRIDSPAN_DEVICE_BANDWIDTH, in bytes a second), with cost_history and finer_cuts off,
  /// for a run that chooses the same every time. 0 = measured.
  int task_overhead_us = 0;
  std::size_t device_bandwidth = 0;
  /// On cpu devices, work::automatic tries a launch's superblocks cut finer, and keeps the
  /// cut while each halving makes its launches complete more often (cache effects, gaps
  /// between launches; GRIDSPAN_FINER_CUTS). Off: the same choice every time.
  bool finer_cuts = true;
  /// Automatic granularity keeps what it measured of each kernel in the cache folder (a
  /// file per kernel, as StarPU keeps its history models), and a later run starts each
  /// kernel from there instead of a guess (GRIDSPAN_COST_HISTORY). Off: every run starts
  /// afresh; with the two settings above and GRIDSPAN_FINER_CUTS off, a run chooses the
  /// same every time.
  bool cost_history = true;
  /// How a GPU's completion threads wait for a work's end (GRIDSPAN_COMPLETION_POLL_US): 0
  /// = in the driver, which spins; N > 0 = they look every N microseconds and sleep between,
  /// except while a host thread waits (Event::wait, synchronize), when they wait in the
  /// driver again. A spinning thread slows the launching thread's driver calls.
  int completion_poll_us = 0;
  /// A GPU's works are queued on its streams by a thread of its own, so that a launch
  /// returns without waiting for the driver (GRIDSPAN_LAUNCH_THREAD); off = by the thread
  /// that launches. A chain of launches then costs the larger of the two threads' shares
  /// instead of their sum.
  bool launch_thread = true;
  /// With the launch thread: a launch to a GPU with nothing queued or running there, made
  /// after a host wait, is queued by the launching thread itself (GRIDSPAN_LAUNCH_IDLE_DIRECT):
  /// nothing would overlap with the hand-over, and a wait right after it finds it running
  /// already (launches in a stream go to the launch thread); off = always by the launch thread.
  bool launch_idle_direct = true;
  /// float32 matrix products on GPUs may use TF32 tensor cores (GRIDSPAN_ALLOW_TF32).
  bool allow_tf32 = false;
  /// A launch (or any call that adds tasks) waits while this many tasks are unfinished,
  /// until half of them have ended (GRIDSPAN_MAX_TASKS): a program that launches faster than
  /// its devices run keeps bounded memory. 0 = never waits. In a run of one process.
  int max_tasks = 16384;
  /// Host compiler for the cpu backend (GRIDSPAN_CXX); empty = c++ from PATH.
  std::string cxx;
  /// Under mpirun: seconds without a word from a rank after which the run fails with an
  /// error naming it and every rank exits (GRIDSPAN_NET_TIMEOUT).
  double net_timeout = 60;
  /// Under mpirun: one run over every rank, rank 0 driving (GRIDSPAN_MPI, default on); off
  /// makes every rank a run of its own (a Context with it off is this process's alone).
  bool mpi = true;
  /// Under mpirun: a transfer of at least `lend_min` bytes between ranks of one node goes
  /// from device to device, the receiving rank copying from memory the sending one lends
  /// (GPUs: CUDA IPC; cpu devices: cross-memory attach), instead of through host memory and
  /// MPI (GRIDSPAN_LEND_MEMORY, GRIDSPAN_LEND_MIN).
  bool lend_memory = true;
  std::size_t lend_min = std::size_t(8) << 20;
  /// Ranks of one node share it: this rank uses share `node_rank` of `node_ranks` equal
  /// shares of its GPUs, and of the default memory and threads of the cpu backend and the
  /// host (set by gridspan under mpirun, not by the environment).
  int node_rank = 0, node_ranks = 1;
  LogLevel log_level = LogLevel::warn;  // GRIDSPAN_LOG=error|warn|info|debug
  std::string trace_file;               // GRIDSPAN_TRACE
  /// Debugging: every transfer's region is compared with its bytes once sent or received
  /// (GRIDSPAN_CHECK_TRANSFERS).
  bool check_transfers = false;

  /// Defaults overridden by the environment.
  static Config from_env();
  /// This config overridden by the environment.
  Config with_env() const;
};

/// Parses "4096", "64KiB", "512MiB", "2GiB", "1.5GB"; throws ConfigError naming `what`
/// (also for a size that does not fit in 64 bits).
std::size_t parse_size(const std::string& text, const std::string& what);
/// Parses a flag; returns nullopt for anything that is not one.
std::optional<bool> parse_flag(const std::string& text);

}  // namespace gridspan
