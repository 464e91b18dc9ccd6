// Automatic granularity (see granularity.hpp).
//
// One rule sizes both chunks and superblocks. A launch cut into p tasks costs the host
// p * h (h: the per-task overhead) and each device about T / p (T: the launch's time on one
// device). A launch lasts about max(p * h, T / p), which is least at p = sqrt(T / h); the
// rule takes the largest p (at most the device count) whose tasks outlast the host's work
// for all of them kHostShare times over: T / p >= kHostShare * p * h.
#include "runtime/granularity.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/jit.hpp"
#include "core/log.hpp"
#include "runtime/driver.hpp"
#include "runtime/executable.hpp"
#include "runtime/observer.hpp"

namespace gridspan::runtime {

namespace {

constexpr double kHostShare = 2;
constexpr const char* kProbe = "gs_granularity_probe";

std::vector<ParamInfo> probe_params() {
  return {ParamInfo{"a", true, 1, false, DType::u32, "gs::Vector<uint32_t>"}};
}

// The probe: fills its region of an array of 4-byte words on its device (the device's own
// fill, the kind of memory-bound work a chunk sees; GPUs store bytes one by one far slower).
// Registered in every process, so that the ranks of an mpirun find it by name.
std::shared_ptr<const NativeExecutable> make_probe() {
  return std::make_shared<NativeExecutable>(
      kProbe, probe_params(), [](const plan::ExecFrame& f, const GsArrayArg*, const void* const*) {
        const plan::ExecArg& a = f.exec.arrays[0];
        const uint32_t value = 0x5a5a5a5a;
        f.dev->fill(f.data[0], a.chunk.rect, a.region, &value, sizeof value);
      });
}
const bool g_probe_registered = (register_native(make_probe()), true);

// The largest p in [1, most] with seconds / p >= kHostShare * p * overhead.
int64_t pieces_for(double seconds, double overhead, int64_t most) {
  const double p = std::sqrt(seconds / (kHostShare * std::max(overhead, 1e-9)));
  return std::clamp<int64_t>(static_cast<int64_t>(p), 1, std::max<int64_t>(most, 1));
}

// The rows a block of 256 threads covers when it takes the last axis first (in powers of
// two up to each axis's extent), as the array library's kernels do.
int64_t block_rows(const Dim& shape) {
  int64_t left = 256;
  for (int k = shape.rank() - 1; k > 0; --k) {
    int64_t e = 1;
    while (e < shape[k] && e < left) e *= 2;
    left /= e;
  }
  return left;
}

std::string us(double seconds) {
  return fmt::format("{:.1f} us", seconds * 1e6);
}

bool read_baseline(const std::string& path, Baseline& b) {
  std::string text;
  Baseline r;
  if (!backend::jit::read_file(path, text) ||
      std::sscanf(text.c_str(), "%lf %lf", &r.task_overhead, &r.bandwidth) != 2 ||
      !(r.task_overhead > 0) || !(r.bandwidth > 0))
    return false;
  b.task_overhead = r.task_overhead, b.bandwidth = r.bandwidth;
  return true;
}

void keep_baseline(const std::string& path, const Baseline& b) {
  try {
    backend::jit::make_dirs(path.substr(0, path.rfind('/')));
    backend::jit::write_file_atomically(
        path, fmt::format("{:.9g} {:.9g}\n", b.task_overhead, b.bandwidth));
  } catch (const std::exception& e) {
    logging::debug("automatic granularity: could not keep its measurements: {}", e.what());
  }
}

// Where a machine's measurements are kept: the cache folder, under a name for this host,
// backend, devices and build. The baseline in "<name>.txt", the kernels' cost history in the
// folder "<name>".
std::string machine_path(const Driver& driver) {
  const RankInfo self = driver.ranks().front();
  std::string key = fmt::format("probe 2|{}|{}|{}|{}", self.host, self.backend,
                                driver.device_count(), driver.config().cpu_threads);
  for (const std::string& d : self.devices) key += "|" + d;
#ifdef NDEBUG
  key += "|release";
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  key += "|sanitized";
#endif
  backend::jit::Hasher h;
  h.add(key);
  return fmt::format("{}/granularity/{}",
                     backend::jit::resolve_cache_root(driver.config().cache_dir), h.hex());
}

}  // namespace

std::size_t smallest_budget(const Driver& driver) {
  std::size_t budget = SIZE_MAX;
  for (const RankInfo& r : driver.ranks())
    for (std::size_t b : r.device_memory) budget = std::min(budget, b);
  return budget == SIZE_MAX ? std::size_t(1) << 30 : budget;
}

namespace {

// Remembers a launch a rule found nothing in (the set bounded as the other memos).
void remember(std::set<std::vector<int64_t>>& kept, std::vector<int64_t> key) {
  if (kept.size() > 4096) kept.clear();
  kept.insert(std::move(key));
}

}  // namespace

// The budgets are fixed for the Context's life; asking every rank for them (a host name and
// the memory manager's figures each) on every launch cost the launching thread 4 us.
int64_t Granularity::budget() {
  if (!budget_) budget_ = int64_t(smallest_budget(driver_));
  return budget_;
}

int64_t Granularity::chunk_cap() {
  return most_chunk_bytes(budget());
}

int64_t Granularity::array_cap(int64_t bytes) {
  const int64_t most = kMostChunks * std::max(1, driver_.device_count());
  return std::max(chunk_cap(), std::min((bytes + most - 1) / most, budget() / kSmallBudgetParts));
}

Granularity::Granularity(Driver& driver) : driver_(driver) {
  (void)g_probe_registered;
}
Granularity::~Granularity() = default;

const Baseline& Granularity::baseline() {
  std::lock_guard lock(mutex_);
  if (!have_baseline_) {
    measure(baseline_);
    have_baseline_ = true;
    if (driver_.config().cost_history) keep_history();
    report(fmt::format("automatic granularity: {} a task on the host, {:.1f} GB/s a device ({})",
                       us(baseline_.task_overhead), baseline_.bandwidth * 1e-9,
                       baseline_.measured ? "measured"
                                          : "GRIDSPAN_TASK_OVERHEAD_US and "
                                            "GRIDSPAN_DEVICE_BANDWIDTH"));
  }
  return baseline_;
}

void Granularity::keep_history() {
  try {
    driver_.costs().keep_history(machine_path(driver_));
  } catch (const std::exception& e) {  // no cache folder: this run's costs stay its own
    logging::debug("automatic granularity: kernels' costs not kept across runs: {}", e.what());
  }
}

namespace {

// Launches of the probe over all of `a` on device 0; returns the last one's task.
struct Prober {
  Driver& driver;
  std::shared_ptr<const plan::Executable> probe;
  annotation::Annotation annotation;
  std::vector<ParamInfo> params = probe_params();

  plan::TaskId launch(const plan::ArrayMeta& a) {
    plan::LaunchSpec spec;
    spec.executable = probe;
    spec.annotation = &annotation;
    spec.params = &params;
    spec.threads = Dim{a.shape[0]};
    spec.block = Dim{256};
    const int64_t grid = (a.shape[0] + 255) / 256;
    spec.superblocks = {Superblock{Rect(1, {0, 0, 0}, {grid, 1, 1}), 0}};
    spec.arrays = {&a};
    spec.int_scalars = {0};
    spec.scalars = std::make_shared<const std::vector<unsigned char>>();
    spec.scalar_offsets = std::make_shared<const std::vector<uint32_t>>(1, 0);
    return driver.launch(spec);
  }
  // Seconds per launch over `n` launches one after another (each overwrites `a`).
  double per_launch(const plan::ArrayMeta& a, int n) {
    const auto start = std::chrono::steady_clock::now();
    plan::TaskId last = 0;
    for (int k = 0; k < n; ++k) last = launch(a);
    driver.wait(last);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / n;
  }
};

}  // namespace

// The overhead: the best of three rounds of 64 launches of the probe on one byte, each
// after the one before (what a chain of small launches costs per launch). The bandwidth:
// the probe over a larger array, timed by the cost model as any kernel is.
void Granularity::measure(Baseline& b) {
  const Config& c = driver_.config();
  b.task_overhead = c.task_overhead_us * 1e-6;
  b.bandwidth = double(c.device_bandwidth);
  if (b.task_overhead > 0 && b.bandwidth > 0) return;
  b.measured = true;
  // Measured once per machine and build: later contexts read what the first wrote (as
  // StarPU keeps its performance models), so that their choices agree from run to run.
  const bool none_set = !(b.task_overhead > 0) && !(b.bandwidth > 0);
  const std::string path = machine_path(driver_) + ".txt";
  if (none_set && read_baseline(path, b)) return;
  // The probe's launches are not the program's: Context::stats leaves them out.
  Driver::Counters& n = driver_.counters();
  const uint64_t launches = n.launches, tasks = n.tasks, moved = n.bytes_moved;
  measure_probe(b);
  n.launches -= n.launches - launches;
  n.tasks -= n.tasks - tasks;
  n.bytes_moved -= n.bytes_moved - moved;
  if (none_set) keep_baseline(path, b);
}

void Granularity::measure_probe(Baseline& b) {
  if (!probe_) {
    probe_ = find_native(kProbe);
    driver_.add_executable(probe_);
  }
  Prober p{driver_, probe_,
           annotation::Annotation::parse("global i => overwrite a[i]", probe_params(), {})};
  if (!(b.task_overhead > 0)) {
    auto one = driver_.create_array(DType::u32, Dim{1}, dist::centralized(0), nullptr);
    p.per_launch(*one, 16);
    b.task_overhead =
        std::min({p.per_launch(*one, 64), p.per_launch(*one, 64), p.per_launch(*one, 64)});
    driver_.release_array(*one);
  }
  if (!(b.bandwidth > 0)) {
    const int64_t most = driver_.backend_name() == "cuda" ? int64_t(256) << 20 : int64_t(32) << 20;
    const int64_t n = std::max<int64_t>(4096, std::min<int64_t>(most, budget() / kBudgetParts));
    auto big = driver_.create_array(DType::u32, Dim{n / 4}, dist::centralized(0), nullptr);
    p.per_launch(*big, 1);  // first touch
    driver_.costs().forget(*probe_);
    p.per_launch(*big, 4);
    auto e = driver_.costs().estimate(*probe_, n / 4);
    b.bandwidth = e ? e->bytes_per_second : double(n) / p.per_launch(*big, 1);
    driver_.release_array(*big);
  }
}

void Granularity::report(const std::string& what) {
  if (said_.size() > 4096) said_.clear();
  if (!said_.insert(what).second) return;
  logging::info("{}", what);
  if (Observer* o = driver_.observer()) {
    const double now = observer_now_us();
    o->task_ran(TraceEvent{what, "granularity", 0, now, now, 0, 0});
  }
}

DataDistribution Granularity::distribution(DType dtype, const Dim& shape, const Dim& halo) {
  if (halo.rank() != 0 && halo.rank() != shape.rank())
    throw ConfigError(
        fmt::format("dist::automatic: the halo {} must have the array's rank {} "
                    "(shape {})",
                    halo.str(), shape.rank(), shape.str()));
  if (shape.rank() == 0) return dist::centralized(0);
  const int64_t per = rows_per_chunk(dtype, shape);
  // Blocked: arrays of one row count cut into different numbers of chunks still find their
  // rows on the same device.
  if (halo.rank() == 0) return dist::rows(per).blocked();
  Dim chunk = shape;
  chunk[0] = per;
  return dist::stencil(chunk, halo).blocked();
}

int64_t Granularity::rows_per_chunk(DType dtype, const Dim& shape) {
  const std::array<int64_t, 5> key{shape.rank(), shape[0], shape.get(1), shape.get(2),
                                   int64_t(dtype_size(dtype))};
  {
    std::lock_guard lock(mutex_);
    if (auto it = rows_.find(key); it != rows_.end()) return it->second;
  }
  const Baseline& b = baseline();
  const int64_t rows = std::max<int64_t>(shape[0], 1);
  const int64_t row_elems = std::max<int64_t>(1, shape.volume() / rows);
  const int64_t row_bytes = row_elems * int64_t(dtype_size(dtype));
  // The launch time of a pass over the array, with 4-byte elements: arrays of one shape get
  // one cut whatever their dtype, so that kernels over several find their chunks aligned.
  const double seconds = double(shape.volume()) * 4 / b.bandwidth;
  const int64_t by_time = pieces_for(seconds, b.task_overhead, driver_.device_count());
  const int64_t cap = std::max(row_bytes, array_cap(rows * row_bytes));
  const int64_t by_memory = (rows * row_bytes + cap - 1) / cap;
  const int64_t pieces = std::max(by_time, by_memory);
  // Rows in whole blocks of the array library's kernels.
  const int64_t align = block_rows(shape);
  int64_t own = std::max<int64_t>(1, ((rows + pieces - 1) / pieces + align - 1) / align * align);
  if (shape.rank() > 1 && own < std::min<int64_t>(rows, 1024)) {
    // A matrix's rows also in whole two-dimensional blocks (8 to 32 rows high) where a chunk
    // is a few such blocks high: blocks that straddle chunks are assembled in a temporary
    // (the demo's HotSpot on the cpu backend, chunks of 12 rows, ran 9 times slower so;
    // HotSpot out of core on a GPU, chunks of 1490 rows, ran faster with its few straddling
    // slabs than aligned, 0.74 of the best hand choice). Rounded down where the memory sets
    // the cut, so that chunks stay under the cap; else up, so that they stay as few as the
    // time asks. An array whole in one chunk stays so (SpMV's 23-row matrix on one device
    // was cut at 16 rows, in two chunks and two superblocks, 1.4 times slower).
    int64_t high = 1;
    while (high * 2 <= std::min<int64_t>(32, own)) high *= 2;
    const int64_t whole = std::max(align, high);
    own = by_memory >= by_time ? std::max(whole, own / whole * whole)
                               : std::min(rows, (own + whole - 1) / whole * whole);
  } else if (by_memory > by_time && own >= 100 * kCommonRows) {
    // Where that changes a chunk by 1% at most. K-Means' points {n, 4} cut at 40722 x 64
    // rows (chunks of 1/64 of the budget) left its labels {n} on a cut of their own: 154
    // superblocks over 103 and 26 chunks.
    own = (own + kCommonRows - 1) / kCommonRows * kCommonRows;
  }
  std::lock_guard lock(mutex_);
  const int64_t per = by_memory > by_time ? shared_cut(rows, own, align) : own;
  if (rows_.size() > 4096) rows_.clear();
  rows_[key] = per;
  report(fmt::format(
      "automatic distribution of {} arrays {}: chunks of {} rows ({} chunks): a pass takes "
      "about {} against {} a task, at most {:.2f} MiB a chunk{}",
      dtype_name(dtype), shape.str(), per, (rows + per - 1) / per, us(seconds), us(b.task_overhead),
      double(cap) / double(1 << 20),
      per < own ? fmt::format(" (an earlier array of {} rows is cut so: {} on its own)", rows, own)
                : ""));
  return per;
}

int64_t Granularity::most_chunk_bytes(int64_t budget) {
  return std::max(budget / kBudgetParts, std::min(kLeastChunk, budget / kSmallBudgetParts));
}

// Arrays of one row count whose cut the memory bound are cut alike, the finest so far: a
// superblock that follows one array's chunks then overwrites the others' chunks whole. Out of
// core a chunk partly overwritten must first be brought in (the Correlator's visibilities, cut
// four times coarser than its samples, made it 0.79 of the best hand choice).
int64_t Granularity::shared_cut(int64_t rows, int64_t per, int64_t align) {
  if (bound_rows_.size() > 4096) bound_rows_.clear();
  auto [it, fresh] = bound_rows_.try_emplace(rows, per);
  if (fresh) return per;
  if (it->second < per && it->second % align == 0) return it->second;
  it->second = std::min(it->second, per);
  return per;
}

// ---- work::automatic ------------------------------------------------------------------------
//
// The superblocks follow the chunks of the array the launch writes most of (else reads most
// of), cut along the thread axis that walks that array's rows: each superblock then uses its
// chunk in place, with no copy. When those chunks are fewer than the rule's pieces (a
// kernel that computes much over little data) and what the extra devices gain outweighs
// moving the arrays, the grid is cut evenly into the rule's pieces instead.

struct Granularity::Choice {
  std::vector<Superblock> superblocks;
  std::string why;
};

namespace {

struct Launch {
  const plan::LaunchSpec& spec;
  Dim grid;
  Rect all;  // every block
  annotation::BoundAnnotation bound;
  int param = -1;  // the principal array's parameter, -1: none
  int axis = -1;   // the thread axis that walks it along `along`, -1: none
  int along = 0;   // the principal array's axis that `axis` walks (its rows first)

  Rect slab(int64_t lo, int64_t hi) const {
    Rect r = all;
    r.lo[axis] = lo, r.hi[axis] = hi;
    return r;
  }
  Rect region(const Rect& blocks) const {
    for (const annotation::Access& a : bound.regions(blocks))
      if (a.param == param) return a.region;
    return Rect();
  }
};

bool writes(annotation::Mode m) {
  using M = annotation::Mode;
  return m == M::write || m == M::readwrite || m == M::overwrite;
}

// The arrays a launch's superblocks may follow, most bytes first (the one that moves most
// stays in place), written before read among equals; reduced and atomic ones never.
// A replicated array is on every device: there is nothing to follow.
std::vector<int> candidates(const plan::LaunchSpec& spec) {
  std::vector<std::tuple<std::size_t, bool, int>> found;
  for (const annotation::Access& a : spec.annotation->modes()) {
    const plan::ArrayMeta* m = spec.arrays[a.param];
    if (!m || m->shape.rank() == 0 || a.mode == annotation::Mode::reduce ||
        a.mode == annotation::Mode::atomic || is_replicated(*m))
      continue;
    found.emplace_back(m->shape.volume() * m->elem_size, writes(a.mode), a.param);
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<int> out;
  for (const auto& f : found) out.push_back(std::get<2>(f));
  return out;
}

// The params of `among` that the launch writes; all of them where it writes none.
std::vector<int> written(const plan::LaunchSpec& spec, const std::vector<int>& among) {
  std::vector<int> out;
  for (int param : among)
    for (const annotation::Access& a : spec.annotation->modes())
      if (a.param == param && writes(a.mode)) {
        out.push_back(param);
        break;
      }
  return out.empty() ? among : out;
}

// Each chunk of the arrays `params` (its box and device) appended to `key`.
void add_chunks(const plan::LaunchSpec& spec, const std::vector<int>& params,
                std::vector<int64_t>& key) {
  for (int param : params)
    for (const plan::ChunkMeta& c : spec.arrays[param]->chunks) {
      for (int ax = 0; ax < c.owned.rank; ++ax)
        key.insert(key.end(), {c.owned.lo[ax], c.owned.hi[ax]});
      key.push_back(c.device);
    }
}

// The principal array's axis (rows first) and the highest thread axis whose first slab of
// blocks reaches only part of it: sets `l.along` and `l.axis`; false when there is none.
bool walk_axes(Launch& l) {
  const Dim& shape = l.spec.arrays[l.param]->shape;
  for (int k = 0; k < shape.rank(); ++k)
    for (int a = l.grid.rank() - 1; a >= 0; --a) {
      if (l.grid[a] < 2) continue;
      l.axis = a;
      const Rect r = l.region(l.slab(0, 1));
      if (!r.empty() && r.extent(k) < shape[k]) {
        l.along = k;
        return true;
      }
    }
  l.axis = -1;
  l.along = 0;
  return false;
}

// Superblocks one per chunk of the principal array (slabs along `l.along` only), or none.
std::vector<Superblock> follow_chunks(const Launch& l) {
  const plan::ArrayMeta& m = *l.spec.arrays[l.param];
  const int k = l.along;
  std::vector<plan::ChunkMeta> chunks = m.chunks;
  for (const auto& c : chunks)
    for (int ax = 0; ax < m.shape.rank(); ++ax)
      if (ax != k && (c.owned.lo[ax] != 0 || c.owned.hi[ax] != m.shape[ax])) return {};
  std::sort(chunks.begin(), chunks.end(),
            [k](const auto& a, const auto& b) { return a.owned.lo[k] < b.owned.lo[k]; });
  const int64_t g = l.grid[l.axis];
  // The first slab of blocks whose part of axis k starts at `row` or later (it grows with
  // the thread axis).
  auto first_at = [&](int64_t row) {
    int64_t lo = 0, hi = g;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      const Rect r = l.region(l.slab(mid, mid + 1));
      if (!r.empty() && r.lo[k] >= row)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  // A slab whose rows cross a chunk boundary (blocks that do not divide the chunks) is a
  // superblock of its own: only it assembles a temporary.
  std::vector<Superblock> out;
  int64_t from = 0;
  for (std::size_t j = 0; j < chunks.size(); ++j) {
    const int64_t to = j + 1 < chunks.size() ? first_at(chunks[j + 1].owned.lo[k]) : g;
    if (to <= from) continue;
    int64_t end = to;
    if (!chunks[j].owned.contains(l.region(l.slab(to - 1, to)))) --end;
    if (end > from) {
      Superblock sb{l.slab(from, end), chunks[j].device};
      if (!chunks[j].owned.contains(l.region(sb.blocks))) return {};
      out.push_back(sb);
    }
    if (end < to) out.push_back(Superblock{l.slab(end, to), chunks[j].device});
    from = to;
  }
  return from == g ? out : std::vector<Superblock>{};
}

// `pieces` even slabs along `axis` (the last axis of more than one block when -1).
std::vector<Superblock> even_cut(const Launch& l, int64_t pieces, int devices) {
  int axis = l.axis;
  for (int a = l.grid.rank() - 1; axis < 0 && a >= 0; --a)
    if (l.grid[a] > 1) axis = a;
  if (axis < 0) return {Superblock{l.all, 0}};
  const int64_t g = l.grid[axis], per = (g + pieces - 1) / pieces;
  std::vector<Superblock> out;
  for (int64_t lo = 0, k = 0; lo < g; lo += per, ++k) {
    Rect r = l.all;
    r.lo[axis] = lo, r.hi[axis] = std::min(g, lo + per);
    out.push_back(Superblock{r, int(k * devices / pieces)});
  }
  return out;
}

// Each superblock cut in `k` slabs along the launch's axis, on its own device: within a
// chunk-following superblock every slab still uses the chunk in place.
std::vector<Superblock> split_each(const Launch& l, const std::vector<Superblock>& sbs, int64_t k) {
  int axis = l.axis;
  for (int a = l.grid.rank() - 1; axis < 0 && a >= 0; --a)
    if (l.grid[a] > 1) axis = a;
  if (axis < 0) return sbs;
  std::vector<Superblock> out;
  for (const Superblock& sb : sbs) {
    const int64_t lo = sb.blocks.lo[axis], extent = sb.blocks.extent(axis);
    const int64_t parts = std::max<int64_t>(1, std::min(k, extent));
    for (int64_t i = 0; i < parts; ++i) {
      Rect r = sb.blocks;
      r.lo[axis] = lo + extent * i / parts;
      r.hi[axis] = lo + extent * (i + 1) / parts;
      out.push_back(Superblock{r, sb.device});
    }
  }
  return out;
}

// What identifies a launch to the memos: its kernel, geometry and integer scalars.
// A launch alike in every run (for the cost history): `stable` but the executable's address,
// and the count of superblocks the choice has.
std::string launch_name(const std::vector<int64_t>& stable, std::size_t count) {
  backend::jit::Hasher h;
  h.add(fmt::format("{} {}", fmt::join(stable.begin() + 1, stable.end(), " "), count));
  return h.hex();
}

std::vector<int64_t> launch_key(const plan::LaunchSpec& spec) {
  std::vector<int64_t> key{int64_t(reinterpret_cast<uintptr_t>(spec.executable.get()))};
  for (int a = 0; a < 3; ++a) key.push_back(spec.threads.get(a)), key.push_back(spec.block.get(a));
  key.insert(key.end(), spec.int_scalars.begin(), spec.int_scalars.end());
  return key;
}

// The launch as the rules see it: its grid and its annotation bound to its arrays.
Launch bound_launch(const plan::LaunchSpec& spec) {
  std::vector<Dim> shapes(spec.arrays.size());
  for (std::size_t p = 0; p < spec.arrays.size(); ++p)
    if (spec.arrays[p]) shapes[p] = spec.arrays[p]->shape;
  Launch l{spec, grid_of(spec.threads, spec.block), Rect(), {}};
  l.all = Rect::of_shape(l.grid);
  l.bound = spec.annotation->bind(annotation::LaunchGeometry{spec.threads, spec.block},
                                  spec.int_scalars, shapes);
  return l;
}

// The principal array: the first of `followable` whose chunks the superblocks can follow
// (its superblocks are returned), else the first a thread axis walks, else the first.
std::vector<Superblock> pick_principal(Launch& l, const std::vector<int>& followable) {
  int walked = -1;
  for (int p : followable) {
    l.param = p;
    if (!walk_axes(l)) continue;
    if (walked < 0) walked = p;
    std::vector<Superblock> chunked = follow_chunks(l);
    if (!chunked.empty()) return chunked;
  }
  l.param = walked >= 0 ? walked : followable.empty() ? -1 : followable.front();
  if (l.param >= 0) walk_axes(l);
  return {};
}

}  // namespace

std::vector<std::pair<int, DataDistribution>> Granularity::recuts(const plan::LaunchSpec& spec) {
  const std::vector<int> followable = candidates(spec);
  // Only an automatic array of several chunks and axes may be cut anew: most launches stop
  // here, before the annotation is bound.
  if (std::none_of(followable.begin(), followable.end(), [&](int p) {
        const plan::ArrayMeta& a = *spec.arrays[p];
        return a.automatic && a.chunks.size() > 1 && a.shape.rank() > 1;
      }))
    return {};
  // A launch found to keep its cuts is not looked at again (the same kernel, geometry and
  // arrays).
  std::vector<int64_t> key = launch_key(spec);
  for (int p : followable) key.push_back(int64_t(spec.arrays[p]->id));
  {
    std::lock_guard lock(mutex_);
    if (kept_cuts_.count(key)) return {};
  }
  auto keep = [&] {
    std::lock_guard lock(mutex_);
    remember(kept_cuts_, key);
    return std::vector<std::pair<int, DataDistribution>>{};
  };
  Launch l = bound_launch(spec);
  for (int p : followable) {  // the largest a thread axis walks
    l.param = p;
    if (walk_axes(l)) break;
    l.param = -1;
  }
  if (l.param < 0 || l.along == 0) return keep();
  const plan::ArrayMeta& m = *spec.arrays[l.param];
  if (!m.automatic || m.chunks.size() < 2 || !follow_chunks(l).empty()) return keep();
  // As many chunks as now, along the walked axis, each a whole number of what a slab of
  // blocks reads of it.
  const int k = l.along;
  const int64_t span = std::max<int64_t>(1, l.region(l.slab(0, 1)).extent(k));
  const int64_t pieces = int64_t(m.chunks.size());
  int64_t per = (m.shape[k] + pieces - 1) / pieces;
  per = (per + span - 1) / span * span;
  Dim chunk = m.shape;
  chunk[k] = per;
  const DataDistribution cut = dist::tiles(chunk).blocked();
  // Only a cut the superblocks can then follow (else every launch would cut anew).
  plan::ArrayMeta proposed = m;
  proposed.chunks.clear();
  for (const ChunkSpec& c : cut.chunks(m.shape, driver_.device_count()))
    proposed.chunks.push_back(plan::ChunkMeta{0, c.region, c.owned, c.device});
  plan::LaunchSpec trial = spec;
  trial.arrays[l.param] = &proposed;
  if (follow_chunks(Launch{trial, l.grid, l.all, l.bound, l.param, l.axis, l.along}).empty())
    return keep();
  std::vector<std::pair<int, DataDistribution>> out;
  std::set<const plan::ArrayMeta*> seen;  // an array passed twice is cut once
  for (int p : followable) {
    const plan::ArrayMeta* a = spec.arrays[p];
    if (a->automatic && a->shape == m.shape && a->chunks.size() > 1 && !is_replicated(*a) &&
        seen.insert(a).second)
      out.emplace_back(p, cut);
  }
  std::lock_guard lock(mutex_);
  report(fmt::format(
      "automatic distribution of `{}` {}: cut anew in chunks of {} along axis {} ({} chunks), "
      "as kernel `{}` walks that axis with its threads ({} array(s) of that shape)",
      (*spec.params)[l.param].name, m.shape.str(), chunk.str(), k, (m.shape[k] + per - 1) / per,
      spec.executable->name(), out.size()));
  return out;
}

bool is_replicated(const plan::ArrayMeta& m) {
  const Rect whole = Rect::of_shape(m.shape);
  return m.chunks.size() > 1 &&
         std::all_of(m.chunks.begin(), m.chunks.end(),
                     [&](const plan::ChunkMeta& c) { return c.region == whole; });
}

namespace {

// The automatic arrays of a launch that it only reads, no larger than `cap` bytes and not
// replicated yet, by parameter (an array passed twice once).
std::vector<int> small_read_only(const plan::LaunchSpec& spec, int64_t cap) {
  std::vector<int> out;
  std::set<const plan::ArrayMeta*> written, seen;
  const std::vector<annotation::Access> modes = spec.annotation->modes();
  for (const annotation::Access& a : modes)
    if (a.mode != annotation::Mode::read) written.insert(spec.arrays[a.param]);
  for (const annotation::Access& a : modes) {
    const plan::ArrayMeta* m = spec.arrays[a.param];
    if (m && m->automatic && m->shape.rank() > 0 && !written.count(m) && !is_replicated(*m) &&
        int64_t(m->shape.volume() * m->elem_size) <= cap && seen.insert(m).second)
      out.push_back(a.param);
  }
  return out;
}

// By parameter, the devices whose superblocks each read all of that array.
std::map<int, std::set<int>> whole_readers(const plan::LaunchSpec& spec) {
  const Launch l = bound_launch(spec);
  std::map<int, std::set<int>> out;
  for (const Superblock& sb : spec.superblocks)
    for (const annotation::Access& a : l.bound.regions(sb.blocks))
      if (a.region == Rect::of_shape(spec.arrays[a.param]->shape)) out[a.param].insert(sb.device);
  return out;
}

}  // namespace

std::vector<int> Granularity::replicas(const plan::LaunchSpec& spec) {
  const std::vector<Superblock>& sbs = spec.superblocks;
  if (std::all_of(sbs.begin(), sbs.end(),
                  [&](const Superblock& sb) { return sb.device == sbs.front().device; }))
    return {};  // one device at most
  std::vector<int> read = small_read_only(spec, chunk_cap());
  if (read.empty()) return {};
  std::vector<int64_t> key = launch_key(spec);
  for (int p : read) key.push_back(int64_t(spec.arrays[p]->id));
  for (const Superblock& sb : spec.superblocks) key.push_back(sb.device);
  {
    std::lock_guard lock(mutex_);
    if (kept_places_.count(key)) return {};
  }
  std::map<int, std::set<int>> whole_on = whole_readers(spec);
  std::erase_if(read, [&](int p) { return whole_on[p].size() < 2; });
  std::lock_guard lock(mutex_);
  if (read.empty()) {
    remember(kept_places_, std::move(key));
    return {};
  }
  // At the second launch that reads it so: an array made anew for every launch (`p = r +
  // beta * p`) would pay a copy launch, and more bytes than the reads, each time.
  if (whole_reads_.size() > 4096) whole_reads_.clear();
  std::erase_if(read, [&](int p) { return ++whole_reads_[spec.arrays[p]->id] < 2; });
  for (int p : read) {
    whole_reads_.erase(spec.arrays[p]->id);
    report(fmt::format(
        "automatic distribution of `{}` {}: replicated on every device, as kernel `{}` reads it "
        "whole on {} devices, a second time ({:.2f} MiB a copy)",
        (*spec.params)[p].name, spec.arrays[p]->shape.str(), spec.executable->name(),
        whole_on[p].size(),
        double(spec.arrays[p]->shape.volume() * spec.arrays[p]->elem_size) / (1 << 20)));
  }
  return read;
}

namespace {

// One superblock per chunk of the principal array when they are enough (or moving data does
// not pay), else `pieces` even ones over the devices when moving pays, else one.
std::pair<std::vector<Superblock>, std::string> across_devices(const Launch& l,
                                                               std::vector<Superblock> chunked,
                                                               int64_t pieces, bool worth,
                                                               int devices) {
  const plan::LaunchSpec& spec = l.spec;
  const std::string name = l.param >= 0 ? (*spec.params)[l.param].name : "";
  if (int64_t(chunked.size()) >= pieces || (!chunked.empty() && !worth)) {
    std::string why = fmt::format("{} superblocks following `{}`'s chunks", chunked.size(), name);
    return {std::move(chunked), std::move(why)};
  }
  if (pieces > 1 && worth)
    return {even_cut(l, pieces, devices),
            fmt::format("{} even superblocks (the arrays' chunks are fewer, and moving the "
                        "arrays costs less than the devices gain)",
                        pieces)};
  int device = 0;
  if (l.param >= 0 && !spec.arrays[l.param]->chunks.empty())
    device = spec.arrays[l.param]->chunks.front().device;
  return {{Superblock{l.all, device}}, "one superblock"};
}

// Whether a superblock of the launch runs on one thread of a cpu device: a kernel that
// reduces into a partial (combined without atomics) or checks its accesses, and a native
// function. A device then runs as many of them at once as it has executor threads.
bool one_thread_each(const plan::LaunchSpec& spec) {
  if (dynamic_cast<const NativeExecutable*>(spec.executable.get())) return true;
  if (auto* k = dynamic_cast<const KernelExecutable*>(spec.executable.get());
      k && k->source().checked)
    return true;
  for (const annotation::Access& a : spec.annotation->modes())
    if (a.mode == annotation::Mode::reduce) return true;
  return false;
}

int array_count(const plan::LaunchSpec& spec) {
  int n = 0;
  for (const plan::ArrayMeta* m : spec.arrays) n += m ? 1 : 0;
  return n;
}

std::size_t array_bytes(const plan::LaunchSpec& spec) {
  std::size_t bytes = 0;
  for (const plan::ArrayMeta* m : spec.arrays)
    if (m) bytes += std::size_t(m->shape.volume()) * m->elem_size;
  return bytes;
}

}  // namespace

// The task overheads count since K-Means' update (64 threads, about 10 us on the cpu
// backend) was cut over two devices for a gain of 5 us, its few bytes moving almost free.
bool Granularity::moving_pays(double seconds, int64_t pieces, std::size_t bytes, int arrays,
                              const Baseline& b) {
  const double gain = seconds - seconds / double(pieces);
  return gain > double(bytes) / (b.bandwidth / 8) + 2 * b.task_overhead * double(arrays);
}

void Granularity::superblocks(plan::LaunchSpec& spec) {
  spec.superblocks.clear();
  if (grid_of(spec.threads, spec.block).volume() == 0) return;  // nothing to run
  const Baseline& b = baseline();
  const int devices = driver_.device_count();
  const int64_t threads = grid_of(spec.threads, spec.block).volume() * spec.block.volume();
  const auto est = driver_.costs().estimate(*spec.executable, threads / devices);
  const double seconds =
      est ? est->seconds_per_thread * double(threads) : double(array_bytes(spec)) / b.bandwidth;
  const int64_t pieces = pieces_for(seconds, b.task_overhead, devices);
  // Superblocks that run on one thread each: about two a thread of every device (uneven
  // ones and busy threads even out), as many as the time pays for.
  const int executors =
      one_thread_each(spec) ? driver_.backend().devices().front()->executors() : 1;
  const int64_t thread_pieces =
      executors > 1 ? pieces_for(seconds, b.task_overhead, int64_t(devices) * executors * 2) : 0;
  const bool worth = moving_pays(seconds, pieces, array_bytes(spec), array_count(spec), b);
  // The choice depends on the launch, the principal array's chunks, the pieces and whether
  // moving data pays.
  const std::vector<int> followable = candidates(spec);
  std::vector<int64_t> stable = launch_key(spec), key = stable;
  add_chunks(spec, followable, key);
  // A trial of finer cuts goes on while the arrays the launch writes keep their chunks: an
  // array it only reads may be replicated at its second launch (GEMM's `b`), which left a
  // run of 4 launches 2 on a trial begun anew, too few to measure.
  add_chunks(spec, written(spec, followable), stable);
  key.insert(key.end(), {pieces, worth, thread_pieces});
  std::lock_guard lock(mutex_);
  auto it = choices_.find(key);
  if (it == choices_.end()) {
    it = choices_
             .emplace(key,
                      choose_reported(spec, followable, pieces, worth, thread_pieces, seconds, est))
             .first;
  }
  uint32_t clock = 0;
  const int64_t f = finer(spec, stable, it->second.size(), threads, clock);
  if (f == 1) {
    spec.superblocks = it->second;
  } else {
    key.push_back(-f);  // the choice cut finer
    auto cut = choices_.find(key);
    if (cut == choices_.end())
      cut = choices_.emplace(key, split_each(bound_launch(spec), it->second, f)).first;
    spec.superblocks = cut->second;
  }
  // The launch's clock, its tasks on this process's devices counted (the planning
  // process's devices come first). With none here, the trial cannot measure: it ends.
  const int local = int(driver_.backend().devices().size());
  const auto tasks = std::count_if(spec.superblocks.begin(), spec.superblocks.end(),
                                   [&](const Superblock& s) { return s.device < local; });
  if (clock && tasks == 0) trials_[stable].settled = true, clock = 0;
  if (clock) driver_.costs().clocks().open(clock, tasks);
  spec.clock = clock;
}

std::vector<Superblock> Granularity::choose_reported(
    const plan::LaunchSpec& spec, const std::vector<int>& followable, int64_t pieces, bool worth,
    int64_t thread_pieces, double seconds, const std::optional<CostModel::Estimate>& est) {
  const Baseline& b = baseline_;
  Choice c = choose(spec, followable, pieces, worth, thread_pieces);
  report(
      fmt::format("automatic work for `{}` over threads {}: {}; the launch takes about {} "
                  "({}), {} a task on the host",
                  spec.executable->name(), spec.threads.str(), c.why, us(seconds),
                  est ? fmt::format("measured, {} tasks timed{}", est->samples,
                                    est->earlier ? ", some in earlier runs" : "")
                      : "guessed from its arrays' bytes",
                  us(b.task_overhead)));
  if (choices_.size() > 4096) {
    choices_.clear(), trials_.clear();
    driver_.costs().clocks().close_all();
  }
  return std::move(c.superblocks);
}

int64_t Granularity::finer_step(Trial& t, std::optional<double> now, std::optional<double> probed,
                                bool probe_ok) {
  if (t.settled || !now) return t.factor;  // the current cut is measured first
  if (!probe_ok || t.probe() > kMostFiner) {
    t.settled = true;
    return t.factor;
  }
  if (!probed) return t.probe();  // the finer cut until it is measured
  if (*probed <= *now * (1 - kFinerGain))
    t.factor = t.probe(), t.leapt = false, t.settled = t.probe() > kMostFiner;
  else if (!t.leapt && t.factor * 4 <= kMostFiner)
    t.leapt = true;  // four times as fine next
  else
    t.settled = true;
  return t.factor;
}

int64_t Granularity::finer(const plan::LaunchSpec& spec, const std::vector<int64_t>& stable,
                           std::size_t count, int64_t threads, uint32_t& clock) {
  clock = 0;
  if (count == 0 || !driver_.config().finer_cuts ||
      driver_.backend().devices().front()->asynchronous())
    return 1;
  Trial& t = trials_[stable];
  if (t.settled) return t.factor;
  CostModel& costs = driver_.costs();
  if (t.serial == 0) {
    t.executable = spec.executable, t.name = launch_name(stable, count);
    t.threads = spec.threads.str();
    const auto est = costs.estimate(*spec.executable, threads / int64_t(count));
    t.fresh = !est || !est->earlier;
    if (settled_earlier(t)) return t.factor;
  }
  auto long_enough = [&](int64_t cut) {  // a task's threads at `cut`
    const int64_t per = threads / (int64_t(count) * cut);
    const auto est = costs.estimate(*spec.executable, per);
    return per >= spec.block.volume() && est &&
           est->seconds_per_thread * double(per) >= kOverheads * baseline_.task_overhead;
  };
  const Trial before = t;
  const auto [now, probed] = measured(costs, t);
  int64_t f = finer_step(t, now, probed, long_enough(t.probe()));
  if (t.leapt && !before.leapt)  // four times as fine at once, where tasks stay long enough
    f = finer_step(t, now, std::nullopt, long_enough(t.probe()));
  if (moved(before, t)) trial_moved(costs, before, t, now, probed);
  if (!t.settled) clock = t.clock(f);
  return f;
}

// The periods of `t`'s launches at its cut (else an earlier run's) and at the finer cut it
// tries. A period at its cut measured now goes to the history at once, so that a run that
// ends before the finer cut is measured passes it on; but not from a kernel's first run
// (no history), whose launches ran slower than later runs' (N-Body on the GPU machine's
// cores: 56843.3 us a launch against 31358.1; a finer cut would win against it unearned).
std::pair<std::optional<double>, std::optional<double>> Granularity::measured(CostModel& costs,
                                                                              Trial& t) {
  LaunchClocks& clocks = costs.clocks();
  auto now = clocks.period(t.clock(t.factor));
  if (now && !t.kept && !t.fresh)
    costs.keep_cut(*t.executable, t.name, {t.factor, false, t.probe(), *now}), t.kept = true;
  if (!now && t.earlier > 0) now = t.earlier;  // the finer cut is tried at once against it
  return {now, clocks.period(t.clock(t.probe()))};
}

void Granularity::end_trials(CostModel& costs) {
  std::lock_guard lock(mutex_);
  for (auto& [stable, t] : trials_) {
    if (t.settled || !t.executable) continue;
    const Trial before = t;
    const auto [now, probed] = measured(costs, t);
    finer_step(t, now, probed, true);  // launches ran at the finer cut: long enough
    if (moved(before, t)) trial_moved(costs, before, t, now, probed);
  }
  costs.clocks().close_all();
}

// A trial's step from `before` to `t`: the clocks no longer needed closed, the cut kept with
// the cost history (with the period measured at it), and the periods reported.
void Granularity::trial_moved(CostModel& costs, const Trial& before, Trial& t,
                              std::optional<double> now, std::optional<double> probed) {
  LaunchClocks& clocks = costs.clocks();
  auto every = [&](const std::optional<double>& p, int64_t factor) {  // and the windows' spread
    const auto s = clocks.spread(t.clock(factor));
    if (!p) return std::string("(not measured)");
    if (!s) return fmt::format("{} (in an earlier run)", us(*p));
    return fmt::format("{} ({} to {})", us(*p), us(s->first), us(s->second));
  };
  const std::string at_now = every(now, before.factor), at_probe = every(probed, before.probe());
  if (t.factor != before.factor || t.settled) clocks.close(t.clock(before.factor));
  if (t.factor != before.probe()) clocks.close(t.clock(before.probe()));
  const std::optional<double> period = t.factor == before.factor ? now : probed;
  costs.keep_cut(*t.executable, t.name,
                 {t.factor, t.settled, t.probe(), t.fresh ? 0 : period.value_or(0)});
  if (t.factor != before.factor) t.earlier = 0, t.kept = true;  // the probe's period, kept
  report(fmt::format(
      "automatic work for `{}` over threads {}: superblocks cut in {}: a launch every {}{}; {}",
      t.executable->name(), t.threads, before.factor, at_now,
      probed ? fmt::format(", cut in {}: every {}", before.probe(), at_probe) : "",
      t.settled ? fmt::format("cut in {} (settled)", t.factor)
                : fmt::format("cut in {}, trying {}", t.factor, t.probe())));
}

// A new trial starts settled where one settled in an earlier run (the cost history), or
// goes on from the finest cut that paid in one that run ended before it settled; and names
// its clocks.
bool Granularity::settled_earlier(Trial& t) {
  t.serial = ++serials_;
  const auto earlier = driver_.costs().kept_cut(*t.executable, t.name);
  if (!earlier || earlier->factor > kMostFiner) return false;
  t.factor = earlier->factor, t.settled = earlier->settled;
  t.leapt = !t.settled && earlier->probe == 4 * t.factor;
  t.earlier = t.settled ? 0 : earlier->period;
  report(fmt::format(
      "automatic work for `{}` over threads {}: superblocks cut in {}, where a trial in an "
      "earlier run {}",
      t.executable->name(), t.threads, t.factor,
      t.settled       ? "settled"
      : t.earlier > 0 ? fmt::format("stopped (trying {} at once, against its {} a launch)",
                                    t.probe(), us(t.earlier))
                      : fmt::format("stopped (trying {} again)", t.probe())));
  return t.settled;
}

Granularity::Choice Granularity::choose(const plan::LaunchSpec& spec,
                                        const std::vector<int>& followable, int64_t pieces,
                                        bool worth, int64_t thread_pieces) {
  Launch l = bound_launch(spec);
  std::vector<Superblock> chunked = pick_principal(l, followable);
  auto [superblocks, why] =
      across_devices(l, std::move(chunked), pieces, worth, driver_.device_count());
  Choice c{std::move(superblocks), std::move(why)};
  // A superblock cut in slabs on its own device (within a chunk, each slab uses it in place).
  const int64_t have = int64_t(c.superblocks.size());
  if (thread_pieces > have) {
    const int64_t k = (thread_pieces + have - 1) / have;
    c.superblocks = split_each(l, c.superblocks, k);
    c.why += fmt::format(
        ", each cut in {} for the devices' threads (a superblock of this "
        "kernel runs on one)",
        k);
  }
  return c;
}

}  // namespace gridspan::runtime
