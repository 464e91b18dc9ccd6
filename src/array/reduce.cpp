// Reductions as a short series of generated kernels ("levels"), each reducing one axis of its
// input by a fixed factor into a partials array, in a fixed order, so results are the same
// run to run and on any number of devices:
//   - the last axis (F1): a block of threads reads C = K x blockDim consecutive elements,
//     each thread K of them, combined in the block by a tree in shared memory;
//   - another axis (F2): each thread combines K consecutive elements of it.
// The first level computes the input's elementwise expression where it reads it. A level's
// partials follow the chunks of the input they come from, so each device reduces what it
// holds; the last level writes the result. Every axis: the last axis is reduced until it
// is gone, then the next.
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "array/expr.hpp"
#include "array/kernels.hpp"
#include "array/launch.hpp"
#include "gridspan/array/reduce.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/half.hpp"
#include "runtime/driver.hpp"

namespace gridspan::array {

namespace {

using detail::RedOp;

// The dtype a reduction accumulates in.
DType accumulator(RedOp op, DType in, DType out) {
  switch (op) {
    case RedOp::any:
    case RedOp::all:
      return DType::boolean;
    case RedOp::count_nonzero:
      return DType::i64;
    case RedOp::min:
    case RedOp::max:
      return in;
    case RedOp::prod:
      return out;  // 16-bit floats do not widen
    default:
      return detail::is_16bit_float(out) ? DType::f32 : out;
  }
}

std::string identity(RedOp op, DType acc) {
  const std::string r = reg(acc);
  switch (op) {
    case RedOp::prod:
    case RedOp::all:
      return fmt::format("({})1", r);
    case RedOp::min:
      return fmt::format("gridspan::fused::highest<{}>()", r);
    case RedOp::max:
      return fmt::format("gridspan::fused::lowest<{}>()", r);
    default:
      return fmt::format("({})0", r);
  }
}

std::string combine(RedOp op, DType acc, const std::string& x, const std::string& y) {
  const std::string r = reg(acc);
  switch (op) {
    case RedOp::prod: {
      const std::string m = fmt::format("gridspan::fused::mul<{}>({}, {})", r, x, y);
      return detail::is_16bit_float(acc) ? convert(m, DType::f32, acc) : m;
    }
    case RedOp::min:
      return fmt::format("gridspan::ew::minimum({}, {})", x, y);
    case RedOp::max:
      return fmt::format("gridspan::ew::maximum({}, {})", x, y);
    case RedOp::any:
      return fmt::format("({} || {})", x, y);
    case RedOp::all:
      return fmt::format("({} && {})", x, y);
    default:
      return fmt::format("gridspan::fused::add<{}>({}, {})", r, x, y);
  }
}

// A value of the first level's input as the accumulator takes it.
std::string map_value(RedOp op, const std::string& v, DType in, DType acc) {
  if (op == RedOp::count_nonzero) return fmt::format("(int64_t)({} != 0)", v);
  return convert(v, in, acc);
}

struct Level {
  bool last_axis = true;  // F1; else F2 along `axis`
  int axis = 0;
  Dim in;                // this level's input shape
  Dim out;               // what it writes
  int64_t K = 1, C = 1;  // elements per thread, per block (F1)
  int64_t groups = 1;    // along the reduced axis: blocks (F1) or threads (F2)
  int64_t block_x = 1;   // F1's threads per block
  bool final = false;
  bool drop = false;    // the reduced axis is not in `out`
  bool looped = false;  // F2 on a cpu: a thread runs a line of `gs_e` along the last axis
  bool lanes = false;   // F1 on a cpu: a thread's elements go round kLanes accumulators
};

// F1's accumulators per thread on a cpu: element j goes into lane j % kLanes (the tail into
// lane 0), then the lanes combine as a tree. A fixed order, as the GPU's shared-memory tree,
// and one the compiler can keep in vector registers.
constexpr int kLanes = 16;

struct Plan {
  RedOp op;
  DType in_dtype, acc, out_dtype;
  double count = 1;  // elements per result (mean)
  int axis;          // kAllAxes or one
  bool keepdims;
  Dim keep_shape;                        // the final shape with keepdims
  const CustomReduce* custom = nullptr;  // a ReductionKernel's steps instead of op's
};

std::string identity_of(const Plan& plan) {
  return plan.custom ? "gs_identity()" : identity(plan.op, plan.acc);
}
std::string combine_of(const Plan& plan, const std::string& x, const std::string& y) {
  return plan.custom ? fmt::format("gs_reduce({}, {})", x, y) : combine(plan.op, plan.acc, x, y);
}

int64_t largest_pow2_dividing(int64_t k, int64_t grain) {
  while (grain != 0 && k > 1 && grain % k != 0) k /= 2;
  return k;
}

// The next level for `in`, reducing axis `ax`; `grain`: the boundaries of the input's chunks
// along it (0: none), which a group must not straddle.
Level next_level(const Plan& plan, const Dim& in, int ax, bool gpu, int64_t grain) {
  Level l;
  l.in = in;
  l.axis = ax;
  l.last_axis = ax == in.rank() - 1;
  l.looped = !gpu && !l.last_axis;
  l.lanes = !gpu && l.last_axis;
  const int64_t L = in[ax], other = std::max<int64_t>(1, in.volume() / std::max<int64_t>(L, 1));
  if (l.last_axis) {
    l.block_x = gpu ? 256 : 1;
    const int64_t most_blocks = std::max<int64_t>(1, (gpu ? 4096 : 64) / other);
    int64_t k = L <= l.block_x * 64 ? (L + l.block_x - 1) / l.block_x
                                    : (L + l.block_x * most_blocks - 1) / (l.block_x * most_blocks);
    k = pow2_at_least(std::max<int64_t>(k, 1));
    if (grain != 0 && grain % l.block_x == 0) k = largest_pow2_dividing(k, grain / l.block_x);
    if (k * l.block_x < 2 && L > 1) k = 2;  // a level always shrinks its axis
    l.K = k;
    l.C = k * l.block_x;
  } else {
    const int64_t want_groups = std::max<int64_t>(1, (gpu ? (1 << 17) : 64) / other);
    int64_t k = L <= 64 ? L : pow2_at_least((L + want_groups - 1) / want_groups);
    if (grain != 0) k = largest_pow2_dividing(pow2_at_least(k), grain);
    // A level always shrinks its axis: where the other axes give every thread wanted (or the
    // chunks' boundaries allow no group), groups of up to 64 straddle them.
    if (k < 2 && L > 1) k = pow2_at_least(std::min<int64_t>(L, 64));
    l.K = std::max<int64_t>(k, 1);
    l.C = l.K;
  }
  l.groups = (L + l.C - 1) / l.C;
  l.final = l.groups == 1 && (plan.axis != detail::kAllAxes || in.rank() == 1);
  l.drop = l.groups == 1 && !(l.final && plan.keepdims);
  l.out = l.drop ? without(in, ax) : with_extent(in, ax, l.groups);
  if (l.final && plan.keepdims) l.out = plan.keep_shape;
  return l;
}

// The output's indices in the kernel (and the annotation): the input's axis names with the
// reduced one replaced by `group`, or dropped, or 0 (keepdims of an every-axis reduction).
std::string out_indices(const Level& l, const Plan& plan, const std::array<std::string, 3>& names,
                        const std::string& group) {
  if (l.out.rank() == 0) return "";
  std::string s;
  if (l.final && plan.keepdims && plan.axis == detail::kAllAxes) {
    for (int k = 0; k < l.out.rank(); ++k) s += k ? ", 0" : "0";
    return s;
  }
  for (int k = 0; k < l.in.rank(); ++k) {
    if (k == l.axis && l.drop) continue;
    s += (s.empty() ? "" : ", ") +
         (k == l.axis ? (l.groups == 1 ? std::string("0") : group) : names[k]);
  }
  return s;
}

std::string post(const Plan& plan, const Level& l, const std::string& acc) {
  if (!l.final) return acc;
  if (plan.custom) return fmt::format("gs_post({})", acc);
  std::string v = acc;
  if (plan.op == RedOp::mean) v = fmt::format("({})({} / cnt)", reg(plan.acc), acc);
  return convert(v, plan.acc, plan.out_dtype);
}

}  // namespace

std::string lanes_loop(
    const std::string& type, const std::string& identity, int axis, const std::string& steps,
    const std::string& value,
    const std::function<std::string(const std::string&, const std::string&)>& combine) {
  return fmt::format(
      "  {0} gs_acc[{1}];\n"
      "  for (int gs_c = 0; gs_c < {1}; ++gs_c) gs_acc[gs_c] = {2};\n"
      "  int64_t j = 0;\n"
      "  for (; j + {1} <= J; j += {1})\n"
      "    for (int gs_c = 0; gs_c < {1}; ++gs_c) {{\n"
      "      const int64_t a{3} = first + j + gs_c;\n{4}      gs_acc[gs_c] = {5};\n    }}\n"
      "  for (; j < J; ++j) {{\n"
      "    const int64_t a{3} = first + j;\n{4}    gs_acc[0] = {6};\n  }}\n"
      "  for (int gs_half = {1} / 2; gs_half > 0; gs_half /= 2)\n"
      "    for (int gs_c = 0; gs_c < gs_half; ++gs_c) gs_acc[gs_c] = {7};\n"
      "  {0} acc = gs_acc[0];\n",
      type, kLanes, identity, axis, steps, combine("gs_acc[gs_c]", value),
      combine("gs_acc[0]", value), combine("gs_acc[gs_c]", "gs_acc[gs_c + gs_half]"));
}

namespace {

// F1's loop on a cpu (one thread per block, its J elements consecutive): lanes_loop.
std::string lanes_row(const Plan& plan, const Level& l, const Program& p,
                      const std::string& value) {
  return lanes_loop(
      reg(plan.acc), identity_of(plan), l.in.rank() - 1, p.step_code(), value,
      [&](const std::string& x, const std::string& y) { return combine_of(plan, x, y); });
}

// F2's loop: a thread's column of the input (K elements along the reduced axis from g * K).
std::string column(const Plan& plan, const Level& l, const Program& p, const std::string& value) {
  return fmt::format(
      "  {0} acc = {1};\n"
      "  const int64_t J = n{2} - g * K < K ? n{2} - g * K : K;\n"
      "#ifdef __CUDACC__\n#pragma unroll 8\n#endif\n"
      "  for (int64_t j = 0; j < J; ++j) {{\n"
      "    const int64_t a{2} = g * K + j;\n{3}    acc = {4};\n  }}\n"
      "  gridspan::fused::store(out({5}), {6});\n",
      reg(plan.acc), identity_of(plan), l.axis, p.step_code(), combine_of(plan, "acc", value),
      out_indices(l, plan, {"a0", "a1", "a2"}, "g"), post(plan, l, "acc"));
}

// F2's loops on a cpu: gs_e columns side by side (the last axis), row after row, each into
// its own accumulator; the inner loop runs along memory and vectorises.
std::string looped_columns(const Plan& plan, const Level& l, const Program& p,
                           const std::string& value) {
  const int last = l.in.rank() - 1;
  return fmt::format(
      "  const int64_t gs_lo = gs_w * gs_e, gs_n = n{2} - gs_lo < gs_e ? n{2} - gs_lo : gs_e;\n"
      "  {0} gs_acc[256];\n"
      "  for (int64_t gs_c = 0; gs_c < gs_n; ++gs_c) gs_acc[gs_c] = {1};\n"
      "  const int64_t J = n{3} - g * K < K ? n{3} - g * K : K;\n"
      "  for (int64_t j = 0; j < J; ++j) {{\n"
      "    const int64_t a{3} = g * K + j;\n"
      "    for (int64_t gs_c = 0; gs_c < gs_n; ++gs_c) {{\n"
      "      const int64_t a{2} = gs_lo + gs_c;\n{4}      gs_acc[gs_c] = {5};\n    }}\n  }}\n"
      "  for (int64_t gs_c = 0; gs_c < gs_n; ++gs_c) {{\n"
      "    const int64_t a{2} = gs_lo + gs_c;\n"
      "    gridspan::fused::store(out({6}), {7});\n  }}\n",
      reg(plan.acc), identity_of(plan), last, l.axis, p.step_code(),
      combine_of(plan, "gs_acc[gs_c]", value), out_indices(l, plan, {"a0", "a1", "a2"}, "g"),
      post(plan, l, "gs_acc[gs_c]"));
}

// The kernel source and annotation of one level.
std::pair<std::string, std::string> level_kernel(const Plan& plan, const Level& l, const Program& p,
                                                 bool first, const std::string& name) {
  const int R = l.in.rank();
  const DType out_dtype = l.final ? plan.out_dtype : plan.acc;
  std::string sig;
  for (int k = 0; k < R; ++k) sig += fmt::format(", int64_t n{}", k);
  sig += fmt::format(", int64_t K, int64_t C, int64_t G, double cnt, gridspan::{}<{}> out",
                     kViewKinds[l.out.rank()], dtype_cpp_name(out_dtype));
  sig += p.input_params();
  if (l.looped) sig += ", int64_t gs_e";
  const std::string value = first && plan.custom
                                ? plan.custom->map
                                : map_value(first ? plan.op : RedOp::sum,
                                            fmt::format("v{}", p.result.index), p.dtype, plan.acc);
  const std::string acc_t = reg(plan.acc);
  std::string body, ann;
  std::array<std::string, 3> names{"a0", "a1", "a2"};
  AxisBounds ab;
  if (l.last_axis) {
    const char* bnames[] = {"bx", "by", "bz"};
    std::string binding;
    for (int t = 0; t < std::max(R, 1); ++t) binding += (t ? ", " : "") + std::string(bnames[t]);
    for (int k = 0; k < R - 1; ++k) {
      const char axis = "xyz"[R - 1 - k];
      body += fmt::format("  const int64_t a{} = blockIdx.{};\n", k, axis);
      names[k] = bnames[R - 1 - k];
      ab.lo[k] = names[k];
    }
    ab.lo[R - 1] = "bx*C";
    ab.hi[R - 1] = "bx*C + C - 1";
    body += fmt::format(
        "  const int64_t first = (int64_t)blockIdx.x * C + threadIdx.x;\n"
        "  // the thread's elements, counted first, so the loads of an unrolled loop go ahead\n"
        "  const int64_t left = n{} - first, count = left <= 0 ? 0 : "
        "(left + blockDim.x - 1) / blockDim.x, J = count < K ? count : K;\n",
        R - 1);
    body += l.lanes ? lanes_row(plan, l, p, value)
                    : fmt::format(
                          "  {} acc = {};\n#ifdef __CUDACC__\n#pragma unroll 8\n#endif\n"
                          "  for (int64_t j = 0; j < J; ++j) {{\n"
                          "    const int64_t a{} = first + j * (int64_t)blockDim.x;\n{}"
                          "    acc = {};\n  }}\n",
                          acc_t, identity_of(plan), R - 1, p.step_code(),
                          combine_of(plan, "acc", value));
    body += fmt::format(
        "#ifdef __CUDACC__\n  __shared__ {} sh[256];\n  sh[threadIdx.x] = acc;\n  "
        "__syncthreads();\n"
        "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {{\n"
        "    if (threadIdx.x < s) sh[threadIdx.x] = {};\n    __syncthreads();\n  }}\n"
        "  if (threadIdx.x != 0) return;\n  acc = sh[0];\n#endif\n",
        acc_t, combine_of(plan, "sh[threadIdx.x]", "sh[threadIdx.x + s]"));
    const std::string oi = out_indices(l, plan, names, "bx");
    body +=
        fmt::format("  gridspan::fused::store(out({}), {});\n",
                    out_indices(l, plan, {"a0", "a1", "a2"}, "blockIdx.x"), post(plan, l, "acc"));
    ann = fmt::format("block [{}] => overwrite out{}", binding, oi.empty() ? "" : "[" + oi + "]");
  } else {
    std::string binding, guard;
    for (int k = R - 1; k >= 0; --k) {
      const char axis = "xyz"[R - 1 - k];
      const std::string n = k == l.axis ? "g" : l.looped && k == R - 1 ? "gs_w" : names[k];
      binding += (k == R - 1 ? "" : ", ") + n;
      body +=
          fmt::format("  const int64_t {} = (int64_t)blockIdx.{} * blockDim.{} + threadIdx.{};\n",
                      n, axis, axis, axis);
      guard += fmt::format("{}{} >= {}", guard.empty() ? "" : " || ",
                           n == "gs_w" ? std::string("gs_w * gs_e") : n,
                           k == l.axis ? std::string("G") : fmt::format("n{}", k));
    }
    ab.lo[l.axis] = "g*K";
    ab.hi[l.axis] = "g*K + K - 1";
    body += fmt::format("  if ({}) return;\n", guard);
    body += l.looped ? looped_columns(plan, l, p, value) : column(plan, l, p, value);
    std::array<std::string, 3> ann_names = names;
    if (l.looped) {
      ab.lo[R - 1] = "gs_w*gs_e";
      ab.hi[R - 1] = "gs_w*gs_e + gs_e - 1";
      ann_names[R - 1] = "gs_w*gs_e : gs_w*gs_e + gs_e - 1";
    }
    const std::string oi = out_indices(l, plan, ann_names, "g");
    ann = fmt::format("global [{}] => overwrite out{}", binding, oi.empty() ? "" : "[" + oi + "]");
  }
  ann += p.read_rules(ab);
  std::string src = fmt::format(
      "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n"
      "{}__device__ void {}(dim3 blockIdx{}) {{\n{}}}\n",
      plan.custom ? plan.custom->code : "", name, sig, body);
  return {src, ann};
}

// The level's output distribution: the guide's chunks with the reduced axis divided by C
// (dropped when it goes), when that cuts the output into disjoint boxes; else the default.
DataDistribution out_distribution(const std::shared_ptr<runtime::Driver>& driver, const Level& l,
                                  const Leaf* guide, DType dtype) {
  if (guide && l.out.rank() > 0 && !(l.final && l.out.rank() != l.in.rank() - (l.drop ? 1 : 0))) {
    std::vector<ChunkSpec> chunks;
    bool ok = true;
    for (const plan::ChunkMeta& c : guide->storage->meta->chunks) {
      if (c.owned.empty()) continue;
      Rect box(l.out.rank(), {0, 0, 0}, {1, 1, 1});
      for (int k = 0, j = 0; k < l.in.rank(); ++k) {
        if (k == l.axis && l.drop) continue;
        int64_t lo = c.owned.lo[k], hi = c.owned.hi[k];
        if (k == l.axis) {
          ok = ok && lo % l.C == 0;
          lo /= l.C, hi = (hi + l.C - 1) / l.C;
          if (l.out[j] == 1) lo = 0, hi = 1;
        }
        box.lo[j] = lo, box.hi[j] = hi, ++j;
      }
      for (const ChunkSpec& o : chunks) ok = ok && !o.owned.overlaps(box);
      chunks.push_back(ChunkSpec{box, box, c.device});
    }
    if (ok && !chunks.empty())
      return dist::custom("reduction partials", [chunks](const Dim&, int) { return chunks; });
  }
  return detail::default_distribution(driver, dtype, l.out);
}

// Superblocks: one per output chunk, in the level's thread space.
std::vector<Superblock> level_superblocks(const Level& l, const plan::ArrayMeta& out,
                                          std::array<int64_t, 3>& block) {
  const int R = l.in.rank();
  const bool whole = out.shape.rank() == 0 || (l.final && out.shape.rank() != R - (l.drop ? 1 : 0));
  // The output axis each thread axis writes along (-1: none).
  auto out_axis = [&](int k) {
    if (whole || (k == l.axis && l.drop)) return -1;
    return l.drop && k > l.axis ? k - 1 : k;
  };
  std::vector<Superblock> sbs;
  block = {1, 1, 1};
  if (!l.last_axis) {
    // Blocks divide the output's chunk boundaries, so that superblocks follow its chunks.
    const auto out_grain = chunk_grain(out);
    std::array<int64_t, 3> grain{0, 0, 0};
    for (int k = 0; k < R; ++k) grain[k] = out_axis(k) < 0 ? 0 : out_grain[out_axis(k)];
    Dim threads = with_extent(l.in, l.axis, l.groups);
    block = choose_block(threads, grain);
  } else {
    block[R - 1] = l.block_x;
  }
  for (const plan::ChunkMeta& c : out.chunks) {
    if (c.owned.empty() && out.shape.rank() > 0) continue;
    Rect r(R, {0, 0, 0}, {1, 1, 1});
    for (int k = 0, j = 0; k < R; ++k) {
      int64_t lo = 0, hi = 1;  // in groups along the reduced axis, else elements
      const bool in_out = out_axis(k) >= 0;
      if (in_out)
        lo = c.owned.lo[j], hi = c.owned.hi[j], ++j;
      else if (k != l.axis)
        lo = 0, hi = l.in[k];
      const int64_t e = l.last_axis ? 1 : block[k];
      const int t = R - 1 - k;
      r.lo[t] = lo / e;
      r.hi[t] = (hi + e - 1) / e;
    }
    sbs.push_back(Superblock{r, c.device});
    if (whole) break;
  }
  return sbs;
}

// Runs one level over `p`'s expression (the first level's input, or partials), into a new
// array.
std::shared_ptr<ArrayHandle> run_level(const std::shared_ptr<runtime::Driver>& driver,
                                       const Plan& plan, const Program& p, int ax, bool first,
                                       Level& l);

// Runs one level: its input `in_h` (pending expression or array), into a new array.
std::shared_ptr<ArrayHandle> run_level(const std::shared_ptr<runtime::Driver>& driver,
                                       const Plan& plan, const std::shared_ptr<ArrayHandle>& in_h,
                                       int ax, bool first, Level& l) {
  return run_level(driver, plan, read_program(in_h), ax, first, l);
}

std::shared_ptr<ArrayHandle> run_level(const std::shared_ptr<runtime::Driver>& driver,
                                       const Plan& plan, const Program& p, int ax, bool first,
                                       Level& l) {
  const Dim& in_shape = p.shape;
  const Leaf* guide = guide_leaf(p, in_shape);
  int64_t grain = 0;
  if (guide) grain = chunk_grain(*guide->storage->meta)[ax];
  const bool gpu = driver->backend_name() == "cuda";
  l = next_level(plan, in_shape, ax, gpu, grain);
  const DType out_dtype = l.final ? plan.out_dtype : plan.acc;
  auto out = detail::array_create(driver, out_dtype, l.out,
                                  out_distribution(driver, l, guide, out_dtype), nullptr);
  // `first`: the first level maps the input (count_nonzero's `!= 0`, a ReductionKernel's map
  // expression), later ones combine partials that may have the input's dtype and rank.
  std::string key =
      fmt::format("reduce{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}|{}", int(plan.op), int(plan.acc),
                  int(out_dtype), l.last_axis, l.axis, l.final, l.drop, plan.keepdims, l.out.rank(),
                  l.looped + 2 * l.lanes, first, p.key());
  if (plan.custom) key += "|custom|" + plan.custom->code + "|" + plan.custom->map;
  const Kernel& kernel = cached_kernel(driver, key, [&](const std::string& name) {
    auto [src, ann] = level_kernel(plan, l, p, first, name);
    return KernelDef::from_source(src, name).annotate(ann);
  });
  Arguments args;
  args.shape(l.in);
  args.integer(l.K);
  args.integer(l.C);
  args.integer(l.groups);
  args.real(plan.count);
  Leaf out_leaf;
  out_leaf.storage = out->storage;
  out_leaf.dtype = out_dtype;
  args.view(out_leaf);
  for (const Leaf& leaf : p.leaves) args.view(leaf);
  for (const Scalar& s : p.scalars) args.scalar(s);
  std::array<int64_t, 3> block;
  auto sbs = level_superblocks(l, out->meta(), block);
  Dim threads = l.last_axis ? with_extent(l.in, l.axis, l.groups * l.block_x)
                            : with_extent(l.in, l.axis, l.groups);
  if (l.looped) {  // a thread per block-wide line of the last axis: the same blocks
    const int last = l.in.rank() - 1;
    const int64_t line = block[last];
    threads[last] = (threads[last] + line - 1) / line;
    block[last] = 1;
    args.integer(line);
  }
  std::array<int64_t, 3> t3{threads.get(0), threads.get(1), threads.get(2)};
  kernel.launch_packed(
      thread_dim(threads, t3), thread_dim(threads, block),
      work::custom("reduction", [sbs](const Dim&, const Dim&, int) { return sbs; }), args.list());
  return out;
}

// `v` as `dtype`'s bytes.
std::array<unsigned char, 8> value_bytes(DType dtype, double v) {
  std::array<unsigned char, 8> b{};
  auto put = [&](auto x) { std::memcpy(b.data(), &x, sizeof x); };
  switch (dtype) {
    case DType::f64:
      put(v);
      break;
    case DType::f32:
      put(static_cast<float>(v));
      break;
    case DType::f16:
      put(float_to_half(static_cast<float>(v)));
      break;
    case DType::bf16:
      put(float_to_bf16(static_cast<float>(v)));
      break;
    case DType::u64:
      put(static_cast<uint64_t>(v));
      break;
    case DType::boolean:
      put(v != 0);
      break;
    default:
      put(static_cast<int64_t>(v));
      break;
  }
  return b;
}

bool has_identity(RedOp op) {
  return op != RedOp::min && op != RedOp::max;
}

}  // namespace

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> reduce(RedOp op, DType result, const std::shared_ptr<ArrayHandle>& a,
                                    int axis, bool keepdims) {
  if (a->task) return array::task_reduce(op, result, a, axis, keepdims);  // inside a task
  std::lock_guard lock(lazy_mutex());
  const int R = a->shape.rank();
  array::Plan plan{op, a->dtype, DType::f32, result, 1, axis, keepdims, Dim()};
  plan.acc = array::accumulator(op, a->dtype, op == RedOp::mean ? result : result);
  if (axis != kAllAxes) {
    if (axis < -R || axis >= R)
      throw Error(fmt::format("axis {} is out of range for an array of shape {} (rank {})", axis,
                              a->shape.str(), R));
    plan.axis = axis < 0 ? axis + R : axis;
    plan.count = static_cast<double>(a->shape[plan.axis]);
    plan.keep_shape = array::with_extent(a->shape, plan.axis, 1);
  } else {
    plan.count = static_cast<double>(a->shape.volume());
    plan.keep_shape = Dim::of_rank(R, 1);
  }
  if (R == 0) {
    auto as_array = elementwise(EwOp::cast, a->dtype, {EwArg{a}});
    const bool nonzero = op == RedOp::any || op == RedOp::all || op == RedOp::count_nonzero;
    auto v = nonzero ? elementwise(EwOp::ne, DType::boolean,
                                   {EwArg{as_array}, EwArg{nullptr, ScalarKind::integer, 0, 0}})
                     : as_array;
    auto out = elementwise(EwOp::cast, result, {EwArg{v}});
    array_settle(*out);
    return out;
  }
  if (a->shape.volume() == 0) {
    if (!array::has_identity(op))
      throw Error(
          fmt::format("{} of an empty array (shape {}): it has no identity; NumPy refuses "
                      "it too",
                      op == RedOp::min ? "min" : "max", a->shape.str()));
    const Dim shape = keepdims
                          ? plan.keep_shape
                          : (plan.axis == kAllAxes ? Dim() : array::without(a->shape, plan.axis));
    const double fill = op == RedOp::mean                         ? std::nan("")
                        : (op == RedOp::prod || op == RedOp::all) ? 1.0
                                                                  : 0.0;
    const auto bytes = array::value_bytes(result, fill);
    return array_create(a->driver, result, shape, default_distribution(a->driver, result, shape),
                        bytes.data());
  }
  auto driver = a->driver;
  std::shared_ptr<ArrayHandle> current = a;
  bool first = true;
  for (;;) {
    const int ax = axis == kAllAxes ? current->shape.rank() - 1 : plan.axis;
    array::Level level;
    auto next = array::run_level(driver, plan, current, ax, first, level);
    current = next;
    first = false;
    if (level.final) return current;
    // Later levels reduce partials, which are in the accumulator's dtype.
  }
}

}  // namespace gridspan::detail

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> variance(DType result, const std::shared_ptr<ArrayHandle>& a, int axis,
                                      int ddof, bool keepdims, bool root) {
  if (!a) throw_null_array();
  std::lock_guard lock(lazy_mutex());
  const DType acc = is_16bit_float(result) ? DType::f32 : result;
  auto x = elementwise(EwOp::cast, acc, {EwArg{a}});
  auto m = reduce(RedOp::mean, acc, x, axis, true);
  auto d = elementwise(EwOp::sub, acc, {EwArg{x}, EwArg{m}});
  auto s =
      reduce(RedOp::sum, acc, elementwise(EwOp::mul, acc, {EwArg{d}, EwArg{d}}), axis, keepdims);
  const int R = a->shape.rank();
  const int ax = axis == kAllAxes ? axis : (axis < 0 ? axis + R : axis);
  const double count =
      static_cast<double>(ax == kAllAxes ? a->shape.volume() : a->shape[ax]) - ddof;
  auto v = elementwise(EwOp::div, acc, {EwArg{s}, EwArg{nullptr, ScalarKind::floating, count, 0}});
  if (root) v = elementwise(EwOp::sqrt, acc, {EwArg{v}});
  return elementwise(EwOp::cast, result, {EwArg{v}});
}

}  // namespace gridspan::detail

namespace gridspan::detail {

namespace {

// The int64 index of each element along `axis` of `shape` (every axis: its row-major number),
// as a lazy expression of index sequences.
std::shared_ptr<ArrayHandle> element_index(const std::shared_ptr<runtime::Driver>& driver,
                                           const Dim& shape, int axis) {
  const int R = shape.rank();
  std::shared_ptr<ArrayHandle> index;
  int64_t stride = 1;
  for (int k = R - 1; k >= 0; --k) {
    if (axis != kAllAxes && k != axis) continue;
    auto node = array::arange_node(DType::i64, array::with_extent(Dim::of_rank(R, 1), k, shape[k]),
                                   0, static_cast<double>(stride), 0, -1);
    auto term = array::pending_handle(driver, std::move(node));
    index = index ? elementwise(EwOp::add, DType::i64, {EwArg{index}, EwArg{term}}) : term;
    stride *= shape[k];
  }
  return index;
}

}  // namespace

std::shared_ptr<ArrayHandle> arg_reduce(bool max, const std::shared_ptr<ArrayHandle>& a, int axis,
                                        bool keepdims) {
  if (!a) throw_null_array();
  std::lock_guard lock(lazy_mutex());
  const int R = a->shape.rank();
  const char* name = max ? "argmax" : "argmin";
  if (axis != kAllAxes && (axis < -R || axis >= R))
    throw Error(fmt::format("{}: axis {} is out of range for an array of shape {} (rank {})", name,
                            axis, a->shape.str(), R));
  const int ax = axis == kAllAxes ? axis : (axis < 0 ? axis + R : axis);
  if (ax == kAllAxes ? a->shape.volume() == 0 : a->shape[ax] == 0)
    throw Error(
        fmt::format("{} of an empty array (shape {}): it has no first extreme; NumPy "
                    "refuses it too",
                    name, a->shape.str()));
  if (a->shape.volume() == 0) {  // other axes empty: an empty result
    const Dim shape = keepdims ? array::with_extent(a->shape, ax, 1) : array::without(a->shape, ax);
    return array_create(a->driver, DType::i64, shape,
                        default_distribution(a->driver, DType::i64, shape), nullptr);
  }
  if (R == 0) {  // NumPy: 0
    const auto zero = array::value_bytes(DType::i64, 0);
    return array_create(a->driver, DType::i64, Dim(), dist::centralized(0), zero.data());
  }
  // The first index where the element equals the extreme, a NaN counting as both extremes
  // (when there is one, the extreme is NaN and nothing equals it).
  auto m = reduce(max ? RedOp::max : RedOp::min, a->dtype, a, axis, true);
  auto hit = elementwise(EwOp::logical_or, DType::boolean,
                         {EwArg{elementwise(EwOp::eq, DType::boolean, {EwArg{a}, EwArg{m}})},
                          EwArg{elementwise(EwOp::isnan, DType::boolean, {EwArg{a}})}});
  const auto none = static_cast<long double>(std::numeric_limits<int64_t>::max());
  auto index =
      elementwise(EwOp::where, DType::i64,
                  {EwArg{hit}, EwArg{element_index(a->driver, a->shape, ax)},
                   EwArg{nullptr, ScalarKind::integer, none, static_cast<uint64_t>(INT64_MAX)}});
  return reduce(RedOp::min, DType::i64, index, axis, keepdims);
}

}  // namespace gridspan::detail

namespace gridspan::array {

std::shared_ptr<ArrayHandle> reduce_custom(const std::shared_ptr<runtime::Driver>& driver,
                                           const CustomReduce& r, const Program& p, int axis,
                                           bool keepdims) {
  const int R = p.shape.rank();
  Plan plan{RedOp::sum, p.dtype, r.acc, r.out, 1, axis, keepdims, Dim::of_rank(R, 1), &r};
  if (axis != detail::kAllAxes) plan.keep_shape = with_extent(p.shape, axis, 1);
  Level level;
  auto current = run_level(driver, plan, p, axis == detail::kAllAxes ? R - 1 : axis, true, level);
  while (!level.final)
    current = run_level(driver, plan, current,
                        axis == detail::kAllAxes ? current->shape.rank() - 1 : axis, false, level);
  return current;
}

}  // namespace gridspan::array
