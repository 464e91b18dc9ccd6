// The differential test: random programs (random sequences of launches from a fixed library
// of kernels, random shapes, data and work distributions, superblock sizes, device counts
// and device/host memory limits that force spilling to host and disk) run by gridspan and
// by a plain sequential reference, compared element for element after every read.
// GRIDSPAN_FUZZ_PROGRAMS=N runs N programs (default 200); each prints its seed on failure
// (GRIDSPAN_FUZZ_FIRST=K starts at program K). Each program runs on 1 to 3 devices (per
// rank), or up to GRIDSPAN_FUZZ_DEVICES.
#include <cstdlib>
#include <map>
#include <random>

#include "e2e/support.hpp"
#include "plan/planner.hpp"

namespace gridspan::test {
namespace {

// Integer kernels only, so results are exact whatever the order of combination.
const char* kLibrary = R"(
__device__ void mix(dim3 blockIdx, int n, int c, gridspan::Vector<int> out,
                    const gridspan::Vector<int> a, const gridspan::Vector<int> b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (a[i] * 3 + b[i] + c) % 10007;
}
__device__ void smooth(dim3 blockIdx, int n, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i == 0 || i == n - 1) out[i] = in[i];
  else out[i] = (in[i - 1] + 2 * in[i] + in[i + 1]) % 10007;
}
__device__ void reverse(dim3 blockIdx, int n, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[n - 1 - i];
}
__device__ void bump(dim3 blockIdx, int n, int by, gridspan::Vector<int> a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = (a[i] + by) % 10007;
}
__device__ void evens(dim3 blockIdx, int half, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < half) out[2 * i] = in[2 * i] + 1;
}
__device__ void vmax(dim3 blockIdx, int n, const gridspan::Vector<int> a, gridspan::Scalar<int> m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m.reduce(a[i]);
}
__device__ void hist(dim3 blockIdx, int n, const gridspan::Vector<int> a, gridspan::Vector<int> h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&h[a[i] % 16], 1);
}
__device__ void transpose(dim3 blockIdx, int rows, int cols, gridspan::Matrix<int> out,
                          const gridspan::Matrix<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < rows && j < cols) out(i, j) = in(j, i);
}
__device__ void blur(dim3 blockIdx, int rows, int cols, gridspan::Matrix<int> out,
                     const gridspan::Matrix<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= rows || j >= cols) return;
  int s = in(i, j) * 4;
  if (i > 0) s += in(i - 1, j);
  if (i < rows - 1) s += in(i + 1, j);
  if (j > 0) s += in(i, j - 1);
  if (j < cols - 1) s += in(i, j + 1);
  out(i, j) = s % 10007;
}
__device__ void rowsum(dim3 blockIdx, int rows, int cols, const gridspan::Matrix<int> m,
                       gridspan::Vector<int> sum) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < rows && j < cols) sum.reduce(i, m(i, j));
}
)";

const char* kAnnotations[][2] = {
    // mix, reverse and blur write every element of `out`: `overwrite` (smooth and
    // transpose do too, and keep `write`, so both modes are in every program).
    {"mix", "global i => overwrite out[i], read a[i], read b[i]"},
    {"smooth", "global i => write out[i], read in[i-1:i+1]"},
    {"reverse", "global i => overwrite out[i], read in[n-1-i]"},
    {"bump", "global i => readwrite a[i]"},
    {"evens", "global i => write out[2*i], read in[2*i]"},
    {"vmax", "global i => read a[i], reduce(max) m"},
    {"hist", "global i => read a[i], atomic(+) h[:]"},
    {"transpose", "global [i, j] => write out[i, j], read in[j, i]"},
    {"blur", "global [i, j] => overwrite out[i, j], read in[i-1:i+1, j-1:j+1]"},
    {"rowsum", "global [i, j] => read m[i, j], reduce(+) sum[i]"},
};

using Data = std::vector<int>;

struct Program {
  std::mt19937_64 g;
  int devices;
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }

  gs::DataDistribution dist(const gs::Dim& shape) {
    if (pick(0, 7) == 0) return gs::dist::automatic();
    int rank = shape.rank();
    switch (pick(0, rank == 2 ? 6 : 5)) {
      case 0:
        return gs::dist::rows(pick(1, std::max<int>(1, shape[0])));
      case 1: {
        gs::Dim t = shape;
        for (int a = 0; a < rank; ++a) t[a] = pick(1, std::max<int>(1, shape[a]));
        return gs::dist::tiles(t);
      }
      case 2: {
        gs::Dim t = shape, h = shape;
        for (int a = 0; a < rank; ++a)
          t[a] = pick(1, std::max<int>(1, shape[a])), h[a] = pick(0, 2);
        return gs::dist::stencil(t, h);
      }
      case 3:
        return gs::dist::replicated();
      case 4:
        return gs::dist::centralized(pick(0, devices - 1));
      case 5: {  // random overlapping cover: tiles widened at random
        int seed = pick(0, 1 << 30);
        return gs::dist::custom("random", [seed](const gs::Dim& s, int devs) {
          std::mt19937 r(seed);
          std::vector<gs::ChunkSpec> out;
          gs::Dim t = s;
          for (int a = 0; a < s.rank(); ++a) t[a] = 1 + r() % std::max<int64_t>(1, s[a]);
          for (auto& c : gs::dist::tiles(t).chunks(s, devs)) {
            gs::Rect reg = c.region;
            for (int a = 0; a < s.rank(); ++a) {
              reg.lo[a] = std::max<int64_t>(0, reg.lo[a] - int64_t(r() % 3));
              reg.hi[a] = std::min<int64_t>(s[a], reg.hi[a] + int64_t(r() % 3));
            }
            out.push_back({reg, {}, int(r() % devs)});
          }
          return out;
        });
      }
      default:
        return gs::dist::columns(pick(1, std::max<int>(1, shape[1])));
    }
  }

  gs::WorkDistribution work(const gs::Dim& threads, const gs::Dim& block) {
    if (pick(0, 3) == 0) return gs::work::automatic();
    gs::Dim per = threads;
    for (int a = 0; a < threads.rank(); ++a) {
      int64_t blocks = (threads[a] + block[a] - 1) / block[a];
      per[a] = block[a] * pick(1, std::max<int>(1, int(blocks)));
    }
    return gs::work::tiles(per);
  }
  gs::Dim block(const gs::Dim& threads) {
    gs::Dim b = threads;
    for (int a = 0; a < threads.rank(); ++a) b[a] = pick(1, threads.rank() == 1 ? 64 : 8);
    return b;
  }
};

struct Var {
  gs::Array<int> array;
  Data ref;
  gs::Dim shape;
};

struct Spilled {
  int to_host = 0, to_disk = 0;
};

// One random program. Memory limits: no task stages more than 3 arrays' worth of chunks and
// temporaries (reductions combine at most 16 small partials), so a device limit of three of
// the largest array plus slack always fits one task but rarely the program's data (5
// vectors, 2 matrices, replicas), and a host of one to three arrays sends the rest to disk.
void run_program(uint64_t seed, Spilled& spilled, bool memoize) {
  Program p{std::mt19937_64(seed), 0};
  static const int max_devices = [] {
    const char* s = std::getenv("GRIDSPAN_FUZZ_DEVICES");
    return s ? std::max(1, std::atoi(s)) : 3;
  }();
  p.devices = p.pick(1, max_devices);
  int n = p.pick(0, 3) == 0 ? p.pick(1, 300) : p.pick(1500, 3000);
  int rows = p.pick(1, 40), cols = p.pick(1, 40);
  std::size_t largest = 4 * std::size_t(std::max(n, rows * cols));
  std::size_t device_mem = 3 * largest + (8 << 10) + std::size_t(p.pick(0, 100)) * largest / 100;
  std::size_t host_mem = largest + (4 << 10) + std::size_t(p.pick(0, 200)) * largest / 100;
  gs::Config cfg = config(p.devices, device_mem, host_mem);
  cfg.memoize_launches = memoize;
  // What automatic distributions start from, from the seed: one chunk and superblock
  // (fast devices) to one per device.
  cfg.task_overhead_us = p.pick(1, 20);
  cfg.device_bandwidth = std::size_t(1) << p.pick(10, 32);
  // Cpu devices of several threads: automatic work cuts one-thread superblocks for them.
  cfg.cpu_threads = p.pick(1, 3);
  gs::Context ctx(cfg);
  p.devices = ctx.device_count();  // fewer where fewer GPUs are there
  std::map<std::string, gs::Kernel> k;
  for (auto& [name, ann] : kAnnotations)
    k[name] = ctx.compile(gs::KernelDef::from_source(kLibrary, name).annotate(ann));

  auto make = [&](gs::Dim shape) {
    Data d(shape.volume());
    for (auto& x : d) x = p.pick(1, 10006);
    Var v{ctx.from_vector<int>(d, shape, p.dist(shape)), d, shape};
    return v;
  };
  std::vector<Var> vec, mat;
  for (int i = 0; i < 5; ++i) vec.push_back(make({n}));
  for (int i = 0; i < 2; ++i) mat.push_back(make({rows, cols}));
  auto scalar = Var{ctx.scalar<int>(-1), {-1}, {}};
  auto h = Var{ctx.full<int>({16}, -3, p.dist({16})), Data(16, -3), {16}};
  auto sums = Var{ctx.full<int>({rows}, -5, p.dist({rows})), Data(rows, -5), {rows}};

  int step = -1;
  auto check = [&](const Var& v, const char* what) {
    const Data got = v.array.to_vector();
    if (got == v.ref) return;
    // Where they differ, to find the chunk or superblock at fault.
    std::size_t first = 0, count = 0;
    for (std::size_t i = 0; i < got.size() && i < v.ref.size(); ++i)
      if (got[i] != v.ref[i] && count++ == 0) first = i;
    std::string chunks;
    for (const auto& c : v.array.handle().meta().chunks)
      chunks += fmt::format(" {}@{}", c.region.str(), c.device);
    FAIL() << what << " after step " << step << ": " << count << " of " << v.ref.size()
           << " elements differ, the first at " << first << " (got " << got[first] << ", want "
           << v.ref[first] << "); chunks" << chunks << " (program seed " << seed << ")";
  };
  int steps = p.pick(3, 10);
  for (int s = 0; s < steps; ++s) {
    step = s;
    int op = p.pick(0, 12);
    int x = p.pick(0, 4), y = p.pick(0, 4), w = p.pick(0, 4), z = p.pick(0, 4);
    while (y == x) y = p.pick(0, 4);
    while (w == x || w == y) w = p.pick(0, 4);
    gs::Dim t1{n}, b1 = p.block(t1), t2{rows, cols}, b2 = p.block(t2);
    const int half = (n + 1) / 2, c = p.pick(0, 100), by = p.pick(1, 50), o = p.pick(0, 1);
    gs::Dim th{half}, bh = p.block(th);
    const gs::WorkDistribution w1 = p.work(t1, b1), w2 = p.work(t2, b2), wh = p.work(th, bh);
    // A launch done again as it was (a memoized plan the second time), up to three times.
    const int times = op <= 9 && p.pick(0, 2) == 0 ? p.pick(2, 3) : 1;
    for (int again = 0; again < times; ++again) switch (op) {
        case 0: {  // out = mix(a, b); out distinct from inputs
          Var &out = vec[x], &a = vec[y], &b = vec[w];
          k["mix"].launch(t1, b1, w1, n, c, out.array, a.array, b.array);
          for (int i = 0; i < n; ++i) out.ref[i] = (a.ref[i] * 3 + b.ref[i] + c) % 10007;
          break;
        }
        case 1: {
          Var &out = vec[x], &in = vec[y];
          k["smooth"].launch(t1, b1, w1, n, out.array, in.array);
          for (int i = 0; i < n; ++i)
            out.ref[i] = (i == 0 || i == n - 1)
                             ? in.ref[i]
                             : (in.ref[i - 1] + 2 * in.ref[i] + in.ref[i + 1]) % 10007;
          break;
        }
        case 2: {
          Var &out = vec[x], &in = vec[y];
          k["reverse"].launch(t1, b1, w1, n, out.array, in.array);
          for (int i = 0; i < n; ++i) out.ref[i] = in.ref[n - 1 - i];
          break;
        }
        case 3: {
          k["bump"].launch(t1, b1, w1, n, by, vec[z].array);
          for (auto& e : vec[z].ref) e = (e + by) % 10007;
          break;
        }
        case 4: {
          Var &out = vec[x], &in = vec[y];
          k["evens"].launch(th, bh, wh, half, out.array, in.array);
          for (int i = 0; i < half; ++i) out.ref[2 * i] = in.ref[2 * i] + 1;
          break;
        }
        case 5: {
          k["vmax"].launch(t1, b1, w1, n, vec[z].array, scalar.array);
          scalar.ref[0] = *std::max_element(vec[z].ref.begin(), vec[z].ref.end());
          break;
        }
        case 6: {
          k["hist"].launch(t1, b1, w1, n, vec[z].array, h.array);
          std::fill(h.ref.begin(), h.ref.end(), 0);
          for (int e : vec[z].ref) ++h.ref[e % 16];
          break;
        }
        case 7: {
          if (rows != cols) break;  // transpose needs a square matrix here
          Var &out = mat[0], &in = mat[1];
          k["transpose"].launch(t2, b2, w2, rows, cols, out.array, in.array);
          for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j) out.ref[i * cols + j] = in.ref[j * cols + i];
          break;
        }
        case 8: {
          Var &out = mat[o], &in = mat[1 - o];
          k["blur"].launch(t2, b2, w2, rows, cols, out.array, in.array);
          for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j) {
              auto at = [&](int a, int b) { return in.ref[a * cols + b]; };
              int sum = at(i, j) * 4;
              if (i > 0) sum += at(i - 1, j);
              if (i < rows - 1) sum += at(i + 1, j);
              if (j > 0) sum += at(i, j - 1);
              if (j < cols - 1) sum += at(i, j + 1);
              out.ref[i * cols + j] = sum % 10007;
            }
          break;
        }
        case 9: {
          Var& m = mat[o];
          k["rowsum"].launch(t2, b2, w2, rows, cols, m.array, sums.array);
          for (int i = 0; i < rows; ++i) {
            int sum = 0;
            for (int j = 0; j < cols; ++j) sum += m.ref[i * cols + j];
            sums.ref[i] = sum;
          }
          break;
        }
        case 10: {  // host write
          Var& v = vec[z];
          for (auto& e : v.ref) e = p.pick(1, 10006);
          v.array.copy_from(v.ref);
          break;
        }
        case 12: {  // a new array in place of an old one: the old one is freed after its users
          Var& v = vec[z];
          Data d = v.ref;
          v.array = ctx.from_vector<int>(d, {n}, p.dist({n}));
          break;
        }
        default: {  // read back something now (mid-program reads)
          check(vec[z], "vector");
          break;
        }
      }
  }
  for (auto& v : vec) check(v, "vector");
  for (auto& v : mat) check(v, "matrix");
  check(scalar, "reduce(max) scalar");
  check(h, "atomic histogram");
  check(sums, "row sums");
  auto stats = ctx.memory_stats();
  std::size_t device_spills = 0;
  for (int d = 0; d < p.devices; ++d) device_spills += stats[d].spilled_bytes;
  spilled.to_host += device_spills > 0;
  spilled.to_disk += stats[p.devices].spilled_bytes > 0;
}

// Repeated launches reuse their first plan (GRIDSPAN_MEMOIZE, on by default) in the first
// test, and are planned afresh each time in the second: both match the reference.
void run_programs(int programs, bool memoize, bool count_spills) {
  int first = 0;
  // To repeat one failing program: its number here, the run's seed in GRIDSPAN_TEST_SEED.
  if (const char* s = std::getenv("GRIDSPAN_FUZZ_FIRST")) first = std::atoi(s);
  uint64_t base = base_seed();
  Spilled spilled;
  for (int i = first; i < first + programs; ++i) {
    uint64_t seed = base * 1000003ull + i;
    SCOPED_TRACE(::testing::Message() << "program " << i << " seed " << seed);
    ASSERT_NO_FATAL_FAILURE(run_program(seed, spilled, memoize));
    if (::testing::Test::HasFailure()) break;
  }
  std::printf("%d programs: %d spilled to host memory, %d to disk\n", programs, spilled.to_host,
              spilled.to_disk);
  // The memory limits are there to make programs spill: most must. Under mpirun each rank
  // holds a share of the data in memory of its own, so fewer spill (how many also depends
  // on timing there: what is queued when a device fills). Disk spills vary most: with up to
  // 8 devices (GRIDSPAN_FUZZ_DEVICES) about a third of the programs spill to disk, and under
  // the sanitizers fewer (20 of 100 once), so the bar is a sixth.
  if (!count_spills) return;
  EXPECT_GE(spilled.to_host, programs / (2 * ranks()));
  EXPECT_GE(spilled.to_disk, programs / (6 * ranks()));
}

int fuzz_programs() {
  const char* s = std::getenv("GRIDSPAN_FUZZ_PROGRAMS");
  return s ? std::atoi(s) : 200;
}

TEST(Differential, RandomProgramsMatchTheSequentialReference) {
  run_programs(fuzz_programs(), true, true);
}

TEST(Differential, RandomProgramsMatchWithoutMemoizedLaunches) {
  // Too few programs to count on their spilling.
  run_programs(std::max(1, fuzz_programs() / 4), false, false);
}

}  // namespace
}  // namespace gridspan::test
