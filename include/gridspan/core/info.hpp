// What a gs::Context reports about where it runs: memory figures per space
// (Context::memory_stats) and the ranks of the run with their devices (Context::ranks).
//
//   for (const gs::MemoryStats& s : ctx.memory_stats())
//     fmt::print("{}: {} of {} bytes\n", s.name, s.used_bytes, s.limit_bytes);
//   ctx.free_all_blocks();  // the pools' free blocks back to the devices and the host
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gridspan {

/// One memory space: a device, the host (spilled chunks) or the disk.
struct MemoryStats {
  std::string name;                  // "cpu:0", "host", "disk"
  std::size_t used_bytes = 0;        // bytes of chunk copies held now (device and host: in
                                     // pool blocks, 512-byte multiples; disk: payload bytes)
  std::size_t total_bytes = 0;       // bytes taken from the space: used plus the pool's free
                                     // blocks (CuPy's and Cumo's total_bytes; disk: used)
  std::size_t limit_bytes = 0;       // the space's budget (0 for disk: unbounded)
  std::size_t spilled_bytes = 0;     // bytes evicted out of this space so far, in all
  std::size_t peak_bytes = 0;        // the most `used_bytes` has been
  std::size_t cached_bytes = 0;      // freed blocks the space's pool keeps for reuse
  std::size_t copied_out_bytes = 0;  // bytes copied down so far (device → host, host → disk)
  std::size_t copied_in_bytes = 0;   // bytes copied up so far (host → device, disk → host)
};

/// What one kernel's tasks took on this process's devices, from a sample of its runs
/// (Context::kernel_costs): one entry per size class (tasks of about `threads` threads, in
/// powers of two). gridspan's automatic granularity works from these.
struct KernelCost {
  std::string kernel;
  int64_t threads = 0;  // mean threads per task timed in this class
  int samples = 0;      // tasks timed
  double seconds = 0;   // mean time per task on its device
  double bytes = 0;     // mean bytes its chunks held
};

/// One rank (process) of a run: one outside mpirun.
struct RankInfo {
  int rank = 0;
  std::string host;
  std::string backend;                     // "cuda" or "cpu"
  std::vector<std::string> devices;        // names, in local order
  std::vector<std::size_t> device_memory;  // each device's budget
  std::size_t host_memory = 0;             // the host space's limit for spilled chunks
};

}  // namespace gridspan
