// Cumulative sums and products as a few generated kernels ("levels") in a fixed order, as
// reductions are (reduce.cpp). A line (the scanned axis, or the flattened array) is cut into
// segments that follow the input's chunks:
//   - level 1 writes each segment's total (only where a line has several segments);
//   - the totals are scanned exclusively into carries: a scan of their own, recursively;
//   - the last level scans each segment again from its carry and writes the result.
// Both levels that read the input compute its elementwise expression there. A segment is
// scanned by one thread, or on a GPU along the contiguous axis by a block, round by round in
// shared memory, so loads are coalesced; on a cpu device a thread off the last axis scans 64
// lines side by side, so it reads rows. The order depends on the shape and the chunks only:
// integers are exact, floats the same run to run.
#include <numeric>

#include <fmt/format.h>

#include "array/expr.hpp"
#include "array/launch.hpp"
#include "array/scan.hpp"
#include "gridspan/array/scan.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/driver.hpp"

namespace gridspan::array {

namespace {

using detail::ScanOp;

constexpr int64_t kBlock = 256;  // threads of a block-scanned segment
constexpr int64_t kTile = 64;    // cpu: consecutive elements of the last axis per thread
ScanTestHooks* g_hooks = nullptr;

// What a scan computes: the operation, its accumulator's dtype and the result's.
struct Kind {
  ScanOp op = ScanOp::sum;
  DType acc = DType::f64, out = DType::f64;
  bool exclusive = false;  // each element combines those before it (carries)
};

// The geometry of one scan of an input of shape `in`.
struct Pass {
  Dim in;
  Dim space;  // the result's shape: `in`, or {N} flattened
  bool flat = false;
  int ax = 0;          // the scanned axis of `space`
  bool block = false;  // a block of kBlock threads per segment, else one thread
  bool tiled = false;  // a thread scans kTile lines side by side: consecutive in memory
  int64_t K = 1;       // elements per thread, or rounds per block
  int64_t C = 1;       // elements per segment
  int64_t G = 1;       // segments per line
  int64_t line() const { return space[ax]; }
  int last() const { return space.rank() - 1; }
  // Elements per thread (or block) index along axis k of the space (`unit` along the line).
  int64_t per_index(int k, int64_t unit) const {
    return k == ax ? unit : tiled && k == last() ? kTile : 1;
  }
};

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// ---- the plan ------------------------------------------------------------------------------

// The guide's chunks in the scan's space: as they are, or flattened, the runs of whole rows
// they hold. Empty when there is no guide or its chunks do not map.
std::vector<ChunkSpec> space_chunks(const Leaf* guide, const Pass& s) {
  if (!guide || s.in.rank() == 0 || !guide->storage->meta->owned_partition) return {};
  std::vector<ChunkSpec> out;
  for (const plan::ChunkMeta& c : guide->storage->meta->chunks) {
    if (c.owned.empty()) continue;
    Rect box = c.owned;
    if (s.flat) {
      for (int k = 1; k < s.in.rank(); ++k)
        if (c.owned.lo[k] != 0 || c.owned.hi[k] != s.in[k]) return {};
      const int64_t row = s.in.volume() / s.in[0];
      box = Rect(1, {c.owned.lo[0] * row, 0, 0}, {c.owned.hi[0] * row, 1, 1});
    }
    out.push_back(ChunkSpec{box, box, c.device});
  }
  return out;
}

// The chunks of the segments' totals: a chunk takes the segments that start in it.
std::vector<ChunkSpec> totals_chunks(const std::vector<ChunkSpec>& chunks, const Pass& s) {
  std::vector<ChunkSpec> out;
  for (ChunkSpec c : chunks) {
    c.owned.lo[s.ax] = ceil_div(c.owned.lo[s.ax], s.C);
    c.owned.hi[s.ax] = ceil_div(c.owned.hi[s.ax], s.C);
    c.region = c.owned;
    if (!c.owned.empty()) out.push_back(c);
  }
  return out;
}

// The gcd of the chunk boundaries inside a line (0: none).
int64_t grain_along(const std::vector<ChunkSpec>& chunks, const Pass& s) {
  int64_t g = 0;
  for (const ChunkSpec& c : chunks) {
    if (c.owned.lo[s.ax] != 0) g = std::gcd(g, c.owned.lo[s.ax]);
    if (c.owned.hi[s.ax] != s.line()) g = std::gcd(g, c.owned.hi[s.ax]);
  }
  return g;
}

int64_t largest_divisor_up_to(int64_t n, int64_t most) {
  int64_t best = 1;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (d <= most) best = std::max(best, d);
    if (n / d <= most) best = std::max(best, n / d);
  }
  return best;
}

// Elements (block: rounds of kBlock) per segment: near `want`, dividing the chunks' grain so
// that segments follow the chunks, unless that makes them far smaller.
int64_t segment_length(int64_t want, int64_t grain, int64_t unit) {
  if (grain == 0 || grain % unit != 0) return want;
  const int64_t g = grain / unit, d = largest_divisor_up_to(g, want);
  return d * unit >= 2 && 4 * d >= std::min(want, g) ? d : want;
}

Pass pass_shape(const Dim& in, int axis) {
  Pass s;
  s.in = in;
  s.flat = axis == detail::kAllAxes;
  s.space = s.flat ? Dim{in.volume()} : in;
  s.ax = s.flat ? 0 : axis;
  return s;
}

// Segments long enough for a launch's overhead, and enough of them to fill the devices. On a
// cpu device a thread off the last axis takes a tile of lines, so that it reads rows.
void plan_segments(Pass& s, bool gpu, int64_t grain) {
  const int64_t L = s.line();
  s.tiled = !gpu && s.ax != s.last() && s.space[s.last()] > 1;
  const int64_t lines = s.space.volume() / L / (s.tiled ? std::min(kTile, s.space[s.last()]) : 1);
  const int64_t block_line = g_hooks && g_hooks->block_line ? g_hooks->block_line : 16 * kBlock;
  s.block = gpu && s.ax == s.last() && L >= block_line;
  if (s.block) {
    const int64_t want = std::max<int64_t>(8, ceil_div(L, kBlock * ceil_div(2048, lines)));
    s.K = std::min(segment_length(want, grain, kBlock), ceil_div(L, kBlock));
    s.C = s.K * kBlock;
  } else {
    const int64_t threads = gpu ? 1 << 16 : 64, least = gpu ? 64 : 1 << 14;
    const int64_t want = std::max(least, ceil_div(L, ceil_div(threads, lines)));
    s.K = s.C = std::min(segment_length(want, grain, 1), L);
  }
  s.G = ceil_div(L, s.C);
}

// ---- the kernels ---------------------------------------------------------------------------

std::string identity(const Kind& k) {
  return fmt::format("({}){}", reg(k.acc), k.op == ScanOp::prod ? 1 : 0);
}
std::string combine(const Kind& k, const std::string& x, const std::string& y) {
  const std::string r = reg(k.acc);
  if (k.op == ScanOp::sum) return fmt::format("gridspan::fused::add<{}>({}, {})", r, x, y);
  const std::string m = fmt::format("gridspan::fused::mul<{}>({}, {})", r, x, y);
  return detail::is_16bit_float(k.acc) ? convert(m, DType::f32, k.acc) : m;  // no widening
}

// Indices into an array of the scan's space (or of its totals): axis `ax` is `at`.
std::string space_index(const Pass& s, const std::string& at) {
  std::string r;
  for (int k = 0; k < s.space.rank(); ++k)
    r += (k ? ", " : "") + (k == s.ax ? at : fmt::format("a{}", k));
  return r;
}

// How a thread walks its segment's elements `p`: binding the input's axis names to element p
// (`bind`), flattened with counters set at `lo` (`start`) and stepped (`step`) when
// `counters`, else by division.
struct Walk {
  std::string start, bind, step;
};
Walk walk(const Pass& s, bool counters) {
  const int R = s.in.rank();
  if (!s.flat) return {"", fmt::format("    const int64_t a{} = p;\n", s.ax), ""};
  if (R <= 1) return {"", R ? "    const int64_t a0 = p;\n" : "", ""};
  if (!counters && R == 2) return {"", "    const int64_t a0 = p / n1, a1 = p - a0 * n1;\n", ""};
  if (!counters)
    return {"",
            "    const int64_t a0 = p / (n1 * n2), r12 = p - a0 * (n1 * n2), a1 = r12 / n2, "
            "a2 = r12 - a1 * n2;\n",
            ""};
  if (R == 2)
    return {"  int64_t i0 = lo / n1, i1 = lo - i0 * n1;\n", "    const int64_t a0 = i0, a1 = i1;\n",
            "    if (++i1 == n1) i1 = 0, ++i0;\n"};
  return {
      "  int64_t i0 = lo / (n1 * n2), i12 = lo - i0 * (n1 * n2), i1 = i12 / n2, "
      "i2 = i12 - i1 * n2;\n",
      "    const int64_t a0 = i0, a1 = i1, a2 = i2;\n",
      "    if (++i2 == n2) {\n      i2 = 0;\n      if (++i1 == n1) i1 = 0, ++i0;\n    }\n"};
}

// The input's element as the accumulator takes it: `x`.
std::string value(const Program& p, const Kind& k, const std::string& decl) {
  return p.step_code() + fmt::format("    {}x = {};\n", decl,
                                     convert(fmt::format("v{}", p.result.index), p.dtype, k.acc));
}

// The annotation's bounds of the input's axes over segment `g` (and tile `c`).
AxisBounds segment_bounds(const Pass& s) {
  AxisBounds ab;
  const std::string lo = "g*C", hi = "g*C + C - 1";
  if (s.tiled) ab.lo[s.last()] = fmt::format("c*{}", kTile);
  if (s.tiled) ab.hi[s.last()] = fmt::format("c*{} + {}", kTile, kTile - 1);
  if (!s.flat || s.in.rank() == 1) {
    ab.lo[s.ax] = lo, ab.hi[s.ax] = hi;
    return ab;
  }
  const std::string row = s.in.rank() == 2 ? "n1" : "(n1*n2)";
  ab.lo[0] = fmt::format("({}) / {}", lo, row), ab.hi[0] = fmt::format("({}) / {}", hi, row);
  for (int k = 1; k < s.in.rank(); ++k) ab.lo[k] = "0", ab.hi[k] = fmt::format("n{} - 1", k);
  return ab;
}

// The name of the thread (or block) index along axis k of the space.
std::string thread_name(const Pass& s, int k) {
  return k == s.ax ? "g" : s.tiled && k == s.last() ? "c" : fmt::format("a{}", k);
}

// The segment `g` and the line (the other axes a<k>, or tile `c`) of this thread or block.
std::string header(const Pass& s) {
  const int R = s.space.rank();
  std::string body, guard;
  for (int k = R - 1; k >= 0; --k) {
    const char t = "xyz"[R - 1 - k];
    const std::string n = thread_name(s, k);
    if (s.block) {
      body += fmt::format("  const int64_t {} = blockIdx.{};\n", n, t);
      continue;
    }
    body += fmt::format("  const int64_t {} = (int64_t)blockIdx.{} * blockDim.{} + threadIdx.{};\n",
                        n, t, t, t);
    const std::string end = k == s.ax ? std::string("G") : fmt::format("n{}", k);
    guard += fmt::format("{}{}{} >= {}", guard.empty() ? "" : " || ", n,
                         n == "c" ? fmt::format(" * {}", kTile) : "", end);
  }
  if (!guard.empty()) body += fmt::format("  if ({}) return;\n", guard);
  return body;
}

std::string start(const Kind& k, const Pass& s, bool carry) {
  return carry ? fmt::format("gridspan::fused::load(carry({}))", space_index(s, "g")) : identity(k);
}

// A thread walks its segment in order (level 1: summing it; the last level: scanning it from
// its carry), at each element across the elements `w` of its tile of the last axis.
std::string thread_body(const Kind& k, const Pass& s, const Program& p, bool totals, bool carry) {
  const std::string acc_t = reg(k.acc), next = combine(k, "acc[w]", "x");
  const int tile = s.tiled ? kTile : 1, last = s.last();
  const std::string col =
      s.tiled ? fmt::format("    const int64_t a{} = c * {} + w;\n", last, kTile) : "";
  const std::string wn =
      s.tiled ? fmt::format("n{0} - c * {1} < {1} ? n{0} - c * {1} : {1}", last, kTile) : "1";
  const std::string out = fmt::format("out({})", space_index(s, "p"));
  const std::string store =
      fmt::format("    gridspan::fused::store({}, {});\n", out, convert("acc[w]", k.acc, k.out));
  const std::string update = totals        ? "    acc[w] = " + next + ";\n"
                             : k.exclusive ? store + "    acc[w] = " + next + ";\n"
                                           : "    acc[w] = " + next + ";\n" + store;
  const Walk wk = walk(s, true);
  std::string body = fmt::format(
      "  {} acc[{}];\n  const int64_t wn = {};\n"
      "  for (int64_t w = 0; w < wn; ++w) {{\n{}    acc[w] = {};\n  }}\n"
      "  const int64_t lo = g * C, hi = lo + C < L ? lo + C : L;\n{}"
      "  for (int64_t p = lo; p < hi; ++p) {{\n{}"
      "    for (int64_t w = 0; w < wn; ++w) {{\n{}{}{}    }}\n{}  }}\n",
      acc_t, tile, wn, col, totals ? identity(k) : start(k, s, carry), wk.start, wk.bind, col,
      value(p, k, "const " + acc_t + " "), update, wk.step);
  if (totals)
    body += fmt::format(
        "  for (int64_t w = 0; w < wn; ++w) {{\n{}    gridspan::fused::store(out({}), acc[w]);\n"
        "  }}\n",
        col, space_index(s, "g"));
  return body;
}

// Level 1 by a block: each thread sums every kBlock-th element, then a tree in shared memory.
std::string totals_block_body(const Kind& k, const Pass& s, const Program& p) {
  const std::string acc_t = reg(k.acc);
  return fmt::format(
      "  {0} acc = {1};\n  const int64_t first = g * C + threadIdx.x, left = L - first;\n"
      "  const int64_t rounds = left <= 0 ? 0 : (left + {2} - 1) / {2}, J = rounds < K ? rounds : "
      "K;\n#ifdef __CUDACC__\n#pragma unroll 8\n#endif\n"
      "  for (int64_t j = 0; j < J; ++j) {{\n    const int64_t p = first + j * {2};\n{3}{4}"
      "    acc = {5};\n  }}\n"
      "  __shared__ {0} sh[{2}];\n  sh[threadIdx.x] = acc;\n  __syncthreads();\n"
      "  for (unsigned s = {2} / 2; s > 0; s >>= 1) {{\n"
      "    if (threadIdx.x < s) sh[threadIdx.x] = {6};\n    __syncthreads();\n  }}\n"
      "  if (threadIdx.x == 0) gridspan::fused::store(out({7}), sh[0]);\n",
      acc_t, identity(k), kBlock, walk(s, false).bind, value(p, k, "const " + acc_t + " "),
      combine(k, "acc", "x"), combine(k, "sh[threadIdx.x]", "sh[threadIdx.x + s]"),
      space_index(s, "g"));
}

// The last level by a block: rounds of kBlock elements, each scanned in shared memory
// (Hillis and Steele) and added to the carry of the rounds before.
std::string scan_block_body(const Kind& k, const Pass& s, const Program& p, bool carry) {
  const std::string acc_t = reg(k.acc);
  const std::string mine = k.exclusive
                               ? fmt::format("t == 0 ? c : {}", combine(k, "c", "sh[t - 1]"))
                               : combine(k, "c", "sh[t]");
  return fmt::format(
      "  {0} c = {1};\n  __shared__ {0} sh[{2}];\n  const int64_t t = threadIdx.x;\n"
      "  for (int64_t j = 0; j < K; ++j) {{\n    const int64_t base = g * C + j * {2};\n"
      "    if (base >= L) break;\n    const int64_t p = base + t;\n    {0} x = {3};\n"
      "    if (p < L) {{\n{4}{5}    }}\n    sh[t] = x;\n    __syncthreads();\n"
      "    for (int64_t d = 1; d < {2}; d <<= 1) {{\n"
      "      const {0} y = t >= d ? sh[t - d] : {3};\n      __syncthreads();\n"
      "      if (t >= d) sh[t] = {6};\n      __syncthreads();\n    }}\n"
      "    const {0} v = {7};\n"
      "    if (p < L) gridspan::fused::store(out({8}), {9});\n"
      "    c = {10};\n    __syncthreads();\n  }}\n",
      acc_t, start(k, s, carry), kBlock, identity(k), walk(s, false).bind, value(p, k, ""),
      combine(k, "y", "sh[t]"), mine, space_index(s, "p"), convert("v", k.acc, k.out),
      combine(k, "c", fmt::format("sh[{}]", kBlock - 1)));
}

std::string signature(const Kind& k, const Pass& s, const Program& p, DType out, bool carry) {
  std::string sig;
  for (int d = 0; d < s.in.rank(); ++d) sig += fmt::format(", int64_t n{}", d);
  const char* view = kViewKinds[s.space.rank()];
  sig += fmt::format(", int64_t L, int64_t K, int64_t C, int64_t G, gridspan::{}<{}> out", view,
                     dtype_cpp_name(out));
  if (carry) sig += fmt::format(", const gridspan::{}<{}> carry", view, dtype_cpp_name(k.acc));
  return sig + p.input_params();
}

// The annotation's indices into an array of the space: axis `ax` is `at`, a tile a range.
std::string rule_index(const Pass& s, const std::string& at) {
  std::string r;
  for (int k = 0; k < s.space.rank(); ++k) {
    std::string i = k == s.ax ? at : fmt::format("a{}", k);
    if (k != s.ax && s.tiled && k == s.last())
      i = fmt::format("c*{} : c*{} + {}", kTile, kTile, kTile - 1);
    r += (k ? ", " : "") + i;
  }
  return r;
}

std::string annotation(const Pass& s, const Program& p, bool totals, bool carry) {
  std::string names;
  for (int d = s.space.rank() - 1; d >= 0; --d)
    names += (names.empty() ? "" : ", ") + thread_name(s, d);
  std::string ann = fmt::format("{} [{}] => overwrite out[{}]", s.block ? "block" : "global", names,
                                rule_index(s, totals ? "g" : "g*C : g*C + C - 1"));
  if (carry) ann += fmt::format(", read carry[{}]", rule_index(s, "g"));
  return ann + p.read_rules(segment_bounds(s));
}

// The source and annotation of a level: the totals (level 1), or the scan (the last level).
std::pair<std::string, std::string> level_kernel(const Kind& k, const Pass& s, const Program& p,
                                                 bool totals, bool carry, const std::string& name) {
  const DType out = totals ? k.acc : k.out;
  const std::string body = header(s) + (!s.block ? thread_body(k, s, p, totals, carry)
                                        : totals ? totals_block_body(k, s, p)
                                                 : scan_block_body(k, s, p, carry));
  std::string src = fmt::format(
      "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n"
      "#include <gridspan/device/random.hpp>\n"
      "__device__ void {}(dim3 blockIdx{}) {{\n{}}}\n",
      name, signature(k, s, p, out, carry), body);
  return {src, annotation(s, p, totals, carry)};
}

// ---- the launch ----------------------------------------------------------------------------

// One superblock per chunk of `out`, of the blocks whose first element lies in it; a block
// spans e[k] thread (or block) indices along axis k, each of s.per_index(k, unit) elements.
std::vector<Superblock> superblocks(const plan::ArrayMeta& out, const Pass& s, int64_t unit,
                                    const std::array<int64_t, kMaxRank>& e) {
  const int R = out.shape.rank();
  std::vector<Superblock> sbs;
  for (const plan::ChunkMeta& c : out.chunks) {
    if (c.owned.empty()) continue;
    Rect r(R, {0, 0, 0}, {1, 1, 1});
    for (int k = 0; k < R; ++k) {
      const int64_t u = s.per_index(k, unit) * e[k];
      r.lo[R - 1 - k] = ceil_div(c.owned.lo[k], u);
      r.hi[R - 1 - k] = ceil_div(c.owned.hi[k], u);
    }
    if (!r.empty()) sbs.push_back(Superblock{r, c.device});
  }
  return sbs;
}

DataDistribution distribution(const std::shared_ptr<runtime::Driver>& driver,
                              const std::vector<ChunkSpec>& chunks, DType dtype, const Dim& shape) {
  if (chunks.empty()) return detail::default_distribution(driver, dtype, shape);
  return dist::custom("scan", [chunks](const Dim&, int) { return chunks; });
}

// The kernel of a level, compiled once per shape of scan and expression.
const Kernel& level_compiled(const std::shared_ptr<runtime::Driver>& driver, const Kind& k,
                             const Pass& s, const Program& p, bool totals, bool carry) {
  const std::string key = fmt::format("scan{}:{}:{}:{}:{}|{}:{}:{}:{}:{}:{}|{}", totals, int(k.op),
                                      int(k.acc), int(k.out), k.exclusive, s.flat, s.in.rank(),
                                      s.ax, s.block, s.tiled, carry, p.key());
  return cached_kernel(driver, key, [&](const std::string& name) {
    auto [src, ann] = level_kernel(k, s, p, totals, carry, name);
    KernelDef def = KernelDef::from_source(src, name).annotate(ann);
    if (g_hooks) g_hooks->generated.push_back(def);
    return def;
  });
}

// The launch's arguments, in the order `signature` declares them.
void add_arguments(Arguments& args, const Pass& s, const Program& p, const ArrayHandle& out,
                   const ArrayHandle* carry) {
  args.shape(s.in);
  for (int64_t v : {s.line(), s.K, s.C, s.G}) args.integer(v);
  for (const ArrayHandle* a : {&out, carry}) {
    if (!a) continue;
    Leaf l;
    l.storage = a->storage;
    l.dtype = a->dtype;
    args.view(l);
  }
  for (const Leaf& leaf : p.leaves) args.view(leaf);
  for (const Scalar& v : p.scalars) args.scalar(v);
}

// Launches a level writing `out` (the segments' totals, or the scan): threads over the
// segments along the line (by blocks: kBlock threads each) and the tiles along the last axis,
// in superblocks following out's chunks.
void launch_level(const Kernel& kernel, const Pass& s, bool totals, const plan::ArrayMeta& out,
                  const Arguments& args) {
  const int64_t unit = totals ? 1 : s.C;
  Dim threads = with_extent(s.space, s.ax, s.block ? s.G * kBlock : s.G);
  if (s.tiled) threads[s.last()] = ceil_div(threads[s.last()], kTile);
  std::array<int64_t, kMaxRank> block{1, 1, 1}, e{1, 1, 1};
  if (s.block) {
    block[s.ax] = kBlock;
  } else {
    auto grain = chunk_grain(out);
    for (int d = 0; d < s.space.rank(); ++d) {
      const int64_t u = s.per_index(d, unit);
      if (grain[d] != 0) grain[d] = grain[d] % u == 0 ? grain[d] / u : 1;
    }
    block = e = choose_block(threads, grain);
  }
  const std::array<int64_t, kMaxRank> t3{threads.get(0), threads.get(1), threads.get(2)};
  kernel.launch_packed(thread_dim(threads, t3), thread_dim(threads, block),
                       work::custom("scan", [sbs = superblocks(out, s, unit, e)](
                                                const Dim&, const Dim&, int) { return sbs; }),
                       args.list());
}

// Runs a level into a new array, distributed as `chunks` say (or by default): the segments'
// totals, or the scan from `carry`.
std::shared_ptr<ArrayHandle> run_level(const std::shared_ptr<runtime::Driver>& driver,
                                       const Kind& k, const Program& p, const Pass& s, bool totals,
                                       const std::shared_ptr<ArrayHandle>& carry,
                                       const std::vector<ChunkSpec>& chunks) {
  const DType dtype = totals ? k.acc : k.out;
  const Dim shape = totals ? with_extent(s.space, s.ax, s.G) : s.space;
  auto out = detail::array_create(driver, dtype, shape, distribution(driver, chunks, dtype, shape),
                                  nullptr);
  const Kernel& kernel = level_compiled(driver, k, s, p, totals, carry != nullptr);
  Arguments args;
  add_arguments(args, s, p, *out, carry.get());
  launch_level(kernel, s, totals, out->meta(), args);
  return out;
}

bool plans_for_gpu(const std::shared_ptr<runtime::Driver>& driver) {
  return driver->backend_name() == "cuda" || (g_hooks && g_hooks->gpu_geometry);
}

// Scans `in` along `axis` (kAllAxes: flattened): the totals and their carries first where a
// line has several segments, then the scan.
std::shared_ptr<ArrayHandle> scan_pass(const std::shared_ptr<runtime::Driver>& driver,
                                       const Kind& k, const std::shared_ptr<ArrayHandle>& in,
                                       int axis) {
  const Program p = read_program(in);
  Pass s = pass_shape(in->shape, axis);
  const auto chunks = space_chunks(guide_leaf(p, in->shape), s);
  // Carries are few: their segments need not follow the chunks.
  plan_segments(s, plans_for_gpu(driver), k.exclusive ? 0 : grain_along(chunks, s));
  std::shared_ptr<ArrayHandle> carry;
  if (s.G > 1) {
    auto totals = run_level(driver, k, p, s, true, nullptr, totals_chunks(chunks, s));
    carry = scan_pass(driver, Kind{k.op, k.acc, k.acc, true}, totals, s.ax);
  }
  return run_level(driver, k, p, s, false, carry, chunks);
}

}  // namespace

void set_scan_test_hooks(ScanTestHooks* hooks) {
  g_hooks = hooks;
}

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> scan(ScanOp op, DType result, const std::shared_ptr<ArrayHandle>& a,
                                  int axis) {
  if (!a) throw_null_array();
  std::lock_guard lock(lazy_mutex());
  const int R = a->shape.rank();
  if (axis != kAllAxes && (axis < -R || axis >= R))
    throw Error(fmt::format("{}: axis {} is out of range for an array of shape {} (rank {})",
                            op == ScanOp::sum ? "cumsum" : "cumprod", axis, a->shape.str(), R));
  if (axis != kAllAxes && axis < 0) axis += R;
  const Dim shape = axis == kAllAxes ? Dim{a->shape.volume()} : a->shape;
  if (shape.volume() == 0)
    return array_create(a->driver, result, shape, default_distribution(a->driver, result, shape),
                        nullptr);
  // Sums of 16-bit floats accumulate in float32; products do not widen.
  const DType acc = op == ScanOp::sum && is_16bit_float(result) ? DType::f32 : result;
  return array::scan_pass(a->driver, array::Kind{op, acc, result, false}, a, axis);
}

}  // namespace gridspan::detail
