// Cumo's fused row operations (softmax, layer_norm, rms_norm, quantize_symmetric) as one
// generated kernel each: one block per row of the last axis (rank 1: one row), its threads
// reading the row through the input's Program (an expression is computed where it is read, a
// view read where it lies), combining their partials with device/rows.hpp's block_all, and
// writing the row. On a GPU a row of up to 16 Ki elements is read once into registers
// (up to 16 per thread, 32 for 16-bit rows kept packed two to a register; `per_thread` a
// compile-time constant, and so is the thread count:
// addresses are offsets of one, and a row that fills every register has no guards);
// longer rows, and the cpu backend's one-thread blocks, read it again in each pass.
// Per element the passes multiply by a reciprocal taken once per row, and softmax keeps
// its exponentials in the registers. Superblocks follow the output's chunks, which cut
// only the leading axes: each row stays whole on one device.
#include <fmt/format.h>

#include "array/expr.hpp"
#include "array/kernels.hpp"
#include "array/launch.hpp"
#include "array/rows.hpp"
#include "gridspan/array/fused.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/driver.hpp"

namespace gridspan::array {

namespace {

using detail::RowOp;

RowTestHooks* g_hooks = nullptr;

enum class Kind { softmax, layer_norm, rms_norm, quantize };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::softmax:
      return "softmax";
    case Kind::layer_norm:
      return "layer_norm";
    case Kind::rms_norm:
      return "rms_norm";
    default:
      return "quantize_symmetric";
  }
}

struct RowPlan {
  Kind kind = Kind::softmax;
  DType in = DType::f32;   // x's dtype
  DType acc = DType::f32;  // float32, or float64 for double
  DType out = DType::f32;  // x's, or int8
  int rank = 1;
  int64_t length = 0;      // of a row
  int64_t threads = 1;     // per block (blockDim.x)
  int64_t per_thread = 0;  // elements kept in registers per thread (0: read in each pass)
  bool full = false;       // threads * per_thread == length: no thread's element is past the end
  int64_t vec = 1;         // elements one load or store moves (up to 16 bytes; 1: one at a time)
  bool gamma = false, beta = false;
};

// How many threads a row gets, and whether it stays in registers: up to `most` elements a
// thread, 32 to 1024 threads; on the cpu one thread.
void choose_threads(RowPlan& plan, bool gpu, int64_t most = 16) {
  if (!gpu) return;
  const int64_t L = std::max<int64_t>(plan.length, 1);
  plan.threads = std::clamp<int64_t>(pow2_at_least((L + most - 1) / most), 32, 1024);
  const int64_t k = (L + plan.threads - 1) / plan.threads;
  plan.per_thread = k <= most ? k : 0;
  plan.full = plan.per_thread > 0 && plan.threads * plan.per_thread == L;
}

// The index along the row of register gs_k (the thread count a compile-time constant, so
// that the addresses are offsets of one); with vectors, thread t's vector q starts at
// (q * threads + t) * vec.
std::string reg_index(const RowPlan& plan) {
  if (plan.vec > 1)
    return fmt::format("((int64_t)(gs_k / {0}) * {1} + threadIdx.x) * {0} + gs_k % {0}", plan.vec,
                       plan.threads);
  return fmt::format("threadIdx.x + (int64_t)gs_k * {}", plan.threads);
}
// The index of vector gs_q's first element.
std::string vector_start(const RowPlan& plan) {
  return fmt::format("((int64_t)gs_q * {} + threadIdx.x) * {}", plan.threads, plan.vec);
}

// The type of the row's registers: x's own 16-bit type as loaded, two to a register, where
// a vector loads them and no pass writes them back (softmax keeps its exponentials there);
// the accumulator's type otherwise. Half the registers for 16-bit rows: more blocks fit an
// SM, and more of the row's bytes are in flight.
bool packed(const RowPlan& plan) {
  return plan.vec > 1 && plan.kind != Kind::softmax && dtype_size(plan.in) == 2;
}
std::string register_type(const RowPlan& plan) {
  return packed(plan) ? dtype_cpp_name(plan.in) : "A";
}
// Register `i` (an expression) in the accumulator's type.
std::string held(const RowPlan& plan, const std::string& i) {
  return packed(plan) ? fmt::format("(A)gridspan::fused::load(gs_r[{}])", i)
                      : fmt::format("gs_r[{}]", i);
}

// The axis names of a row's leading axes (blockIdx.y, .z) and the last axis's index `gs_j`.
std::string leading_axes(int rank) {
  std::string s;
  for (int k = 0; k < rank - 1; ++k)
    s += fmt::format("  const int64_t a{} = blockIdx.{};\n", k, "xyz"[rank - 1 - k]);
  return s;
}
// "a0, a1, gs_j" style indices of an element of the row.
std::string row_index(int rank, const std::string& last) {
  std::string s;
  for (int k = 0; k < rank - 1; ++k) s += fmt::format("a{}, ", k);
  return s + last;
}
std::string lead_index(int rank) {
  std::string s;
  for (int k = 0; k < rank - 1; ++k) s += fmt::format("{}a{}", k ? ", " : "", k);
  return s;
}

// A loop over the thread's elements of the row running `body` with `x` (the element, in the
// accumulator's type) and `gs_j` (its index along the last axis) bound. The registers' loop
// has a guard, not a break, so that it unrolls and gs_r stays in registers.
std::string each(const RowPlan& plan, const Program& p, const std::string& body) {
  const int last = plan.rank - 1;
  if (plan.per_thread > 0)
    return fmt::format(
        "#pragma unroll\n  for (int gs_k = 0; gs_k < {0}; ++gs_k) {{\n"
        "    const int64_t gs_j = {3};\n"
        "    if ({4}) {{\n    const A x = {5};\n{2}    }}\n  }}\n",
        plan.per_thread, last, body, reg_index(plan),
        plan.full ? "true" : fmt::format("gs_j < n{}", last), held(plan, "gs_k"));
  return fmt::format(
      "  for (int64_t gs_j = threadIdx.x; gs_j < n{0}; gs_j += {4}) {{\n"
      "    const int64_t a{0} = gs_j;\n{1}    const A x = (A)v{2};\n{3}  }}\n",
      last, p.step_code(), p.result.index, body, plan.threads);
}

// The row read into registers once (per_thread > 0).
std::string load_row(const RowPlan& plan, const Program& p) {
  if (plan.per_thread == 0) return "";
  if (plan.vec > 1)
    return fmt::format(
        "  {4} gs_r[{0}];\n#pragma unroll\n  for (int gs_q = 0; gs_q < {1}; ++gs_q)\n"
        "    gridspan::fused::load_vector<{2}>(&L0({3}), gs_r + gs_q * {2});\n",
        plan.per_thread, plan.per_thread / plan.vec, plan.vec,
        row_index(plan.rank, vector_start(plan)), register_type(plan));
  const int last = plan.rank - 1;
  const std::string past =
      plan.full ? "" : fmt::format("    if (a{0} >= n{0}) {{ gs_r[gs_k] = 0; continue; }}\n", last);
  return fmt::format(
      "  A gs_r[{0}];\n#pragma unroll\n  for (int gs_k = 0; gs_k < {0}; ++gs_k) {{\n"
      "    const int64_t a{1} = {4};\n{5}{2}"
      "    gs_r[gs_k] = (A)v{3};\n  }}\n",
      plan.per_thread, last, p.step_code(), p.result.index, reg_index(plan), past);
}

// The last pass: each element's `value` (with x, and gamma's and beta's elements as g and b
// bound) stored, one at a time or a vector at a time (gamma and beta read so too). A value
// `as_out` is of the output's type already. A vector's values come from `group` instead
// where it is given: code filling gs_o from the vector's registers (`{V}` its length).
std::string final_pass(const RowPlan& plan, const Program& p, const std::string& value, bool as_out,
                       const std::string& group = "") {
  const std::string g = plan.vec > 1 ? "gs_gv[gs_i]" : "(A)gridspan::fused::load(gs_g(gs_j))";
  const std::string b = plan.vec > 1 ? "gs_bv[gs_i]" : "(A)gridspan::fused::load(gs_be(gs_j))";
  const std::string v = fmt::format(fmt::runtime(value), fmt::arg("g", g), fmt::arg("b", b));
  if (plan.vec == 1)
    return each(
        plan, p,
        fmt::format("    gridspan::fused::store(out({}), {});\n", row_index(plan.rank, "gs_j"),
                    as_out ? v : convert(v, plan.acc, plan.out)));
  const int64_t V = plan.vec;
  std::string params;
  if (plan.gamma)
    params += fmt::format(
        "    A gs_gv[{0}];\n    gridspan::fused::load_vector<{0}>(&gs_g(gs_j0), gs_gv);\n", V);
  if (plan.beta)
    params += fmt::format(
        "    A gs_bv[{0}];\n    gridspan::fused::load_vector<{0}>(&gs_be(gs_j0), gs_bv);\n", V);
  const std::string values =
      group.empty()
          ? fmt::format(
                "#pragma unroll\n    for (int gs_i = 0; gs_i < {0}; ++gs_i) {{\n"
                "      const A x = {2};\n      gs_o[gs_i] = {1};\n    }}\n",
                V, v, held(plan, "gs_q * " + std::to_string(V) + " + gs_i"))
          : fmt::format(fmt::runtime(group), fmt::arg("V", V),
                        fmt::arg("x", held(plan, "gs_q * " + std::to_string(V) + " + gs_i")));
  return fmt::format(
      "#pragma unroll\n  for (int gs_q = 0; gs_q < {0}; ++gs_q) {{\n"
      "    const int64_t gs_j0 = {1};\n{2}    {3} gs_o[{4}];\n{5}"
      "    gridspan::fused::store_vector<{4}>(&out({6}), gs_o);\n  }}\n",
      plan.per_thread / V, vector_start(plan), params, as_out ? dtype_cpp_name(plan.out) : "A", V,
      values, row_index(plan.rank, "gs_j0"));
}

// The kernel's body after the row's registers: the passes of `plan.kind`.
std::string passes(const RowPlan& plan, const Program& p) {
  const std::string n = fmt::format("(A)n{}", plan.rank - 1);
  const std::string g = plan.gamma ? "{g}" : "";
  const std::string b = plan.beta ? "{b}" : "";
  switch (plan.kind) {
    case Kind::softmax: {
      // In registers the exponentials are kept from the sum's pass for the last.
      const bool kept = plan.per_thread > 0;
      return "  A m = -gridspan::rows::infinity(A());\n" +
             each(plan, p, "    m = gridspan::rows::Max()(m, x);\n") +
             "  m = gridspan::rows::block_all(m, gridspan::rows::Max());\n  A s = 0;\n" +
             each(plan, p,
                  kept ? "    const A e = gridspan::ew::exp(x - m);\n    s += e;\n"
                         "    gs_r[gs_k] = e;\n"
                       : "    s += gridspan::ew::exp(x - m);\n") +
             "  const A inv = (A)1 / gridspan::rows::block_all(s, gridspan::rows::Sum());\n" +
             final_pass(plan, p, kept ? "x * inv" : "gridspan::ew::exp(x - m) * inv", false);
    }
    case Kind::layer_norm:
      return "  A s = 0;\n" + each(plan, p, "    s += x;\n") +
             fmt::format(
                 "  const A mean = gridspan::rows::block_all(s, gridspan::rows::Sum()) / {};\n  A "
                 "q = 0;\n",
                 n) +
             each(plan, p, "    q += (x - mean) * (x - mean);\n") +
             fmt::format(
                 "  const A rstd = (A)1 / gridspan::ew::sqrt(gridspan::rows::block_all(q, "
                 "gridspan::rows::Sum()) / {} + (A)eps);\n",
                 n) +
             final_pass(plan, p, fmt::format("(x - mean) * rstd * {} + {}", g, b), false);
    case Kind::rms_norm:
      return "  A q = 0;\n" + each(plan, p, "    q += x * x;\n") +
             fmt::format(
                 "  const A rinv = (A)1 / gridspan::ew::sqrt(gridspan::rows::block_all(q, "
                 "gridspan::rows::Sum()) / {} + (A)eps);\n",
                 n) +
             final_pass(plan, p, fmt::format("x * rinv * {}", g), false);
    default:  // quantize: zeros where the scale is zero, infinite or NaN
      return "  auto m = gridspan::rows::abs_bits((A)0);\n" +
             each(plan, p, "    m = gridspan::rows::Max()(m, gridspan::rows::abs_bits(x));\n") +
             "  const A sc = gridspan::rows::from_bits(gridspan::rows::block_all(m, "
             "gridspan::rows::Max())) / (A)127;\n"
             "  const bool zero = !(sc > 0 && sc < gridspan::rows::infinity(A()));\n"
             "  const A inv = (A)1 / sc;\n"
             "  const bool fast = sc >= gridspan::rows::normal_min(A());\n" +
             final_pass(
                 plan, p, "zero ? (int8_t)0 : gridspan::rows::quantize(x, sc, inv, fast)", true,
                 "    gridspan::rows::quantize_group<{V}>([&](int gs_i) {{ return {x}; }}, sc, "
                 "inv, fast, zero, gs_o);\n") +
             fmt::format("  if (threadIdx.x == 0) gridspan::fused::store(gs_s({}), sc);\n",
                         lead_index(plan.rank));
  }
}

// The kernel's source and annotation.
std::pair<std::string, std::string> row_kernel(const RowPlan& plan, const Program& p,
                                               const std::string& name) {
  const int R = plan.rank;
  const std::string t = dtype_cpp_name(plan.in);
  std::string sig;
  for (int k = 0; k < R; ++k) sig += fmt::format(", int64_t n{}", k);
  sig += fmt::format(", double eps, gridspan::{}<{}> out", kViewKinds[R], dtype_cpp_name(plan.out));
  if (plan.gamma) sig += fmt::format(", const gridspan::Vector<{}> gs_g", t);
  if (plan.beta) sig += fmt::format(", const gridspan::Vector<{}> gs_be", t);
  if (plan.kind == Kind::quantize)
    sig += fmt::format(", gridspan::{}<{}> gs_s", kViewKinds[R - 1], dtype_cpp_name(plan.acc));
  sig += p.input_params();
  // The threads of a block meet in block_all: said here too, so that the cpu backend runs a
  // block of more than one thread (the GPU's geometry in tests) on fibers.
  const std::string meet = plan.threads > 1 ? "  __syncthreads();\n" : "";
  std::string body = leading_axes(R) + load_row(plan, p) + passes(plan, p);
  if (plan.vec > 1) {  // checked mode checks each element's access: one at a time there
    RowPlan single = plan;
    single.vec = 1;
    body = fmt::format("#if GRIDSPAN_CHECKED\n{}#else\n{}#endif\n",
                       leading_axes(R) + load_row(single, p) + passes(single, p), body);
  }
  body = fmt::format("  typedef {} A;\n", reg(plan.acc)) + meet + body;
  std::string src = fmt::format(
      "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n"
      "#include <gridspan/device/rows.hpp>\n"
      "__device__ void {}(dim3 blockIdx{}) {{\n{}}}\n",
      name, sig, body);
  // The annotation: a block writes its row (and its scale) and reads its row.
  const char* bnames[] = {"bx", "by", "bz"};
  std::string binding, lead;
  for (int k = 0; k < R; ++k) binding += (k ? ", " : "") + std::string(bnames[k]);
  AxisBounds ab;
  for (int k = 0; k < R - 1; ++k) {
    ab.lo[k] = bnames[R - 1 - k];
    lead += (k ? ", " : "") + ab.lo[k];
  }
  ab.lo[R - 1] = "0";
  ab.hi[R - 1] = fmt::format("n{} - 1", R - 1);
  const std::string row = fmt::format("0 : n{} - 1", R - 1);
  std::string ann = fmt::format("block [{}] => overwrite out[{}{}]", binding,
                                lead.empty() ? "" : lead + ", ", row);
  if (plan.gamma) ann += fmt::format(", read gs_g[{}]", row);
  if (plan.beta) ann += fmt::format(", read gs_be[{}]", row);
  if (plan.kind == Kind::quantize)
    ann += lead.empty() ? ", overwrite gs_s" : fmt::format(", overwrite gs_s[{}]", lead);
  ann += p.read_rules(ab);
  return {src, ann};
}

void check_x(Kind kind, const ArrayHandle& x) {
  if (!detail::is_float(x.dtype))
    throw Error(fmt::format(
        "{} of an integer or bool array ({}, shape {}): it takes float16, bfloat16, float32 or "
        "float64; convert first, e.g. x.astype<float>()",
        kind_name(kind), dtype_name(x.dtype), x.shape.str()));
  if (x.shape.rank() == 0)
    throw Error(
        fmt::format("{} of a 0-d array: it works along the last axis, which a 0-d "
                    "array does not have",
                    kind_name(kind)));
}

// gamma or beta: 1-D, as long as the last axis, of x's dtype; settled into a plain array.
std::shared_ptr<ArrayHandle> row_parameter(Kind kind, const char* what, const ArrayHandle& x,
                                           std::shared_ptr<ArrayHandle> v) {
  const int64_t L = x.shape[x.shape.rank() - 1];
  if (v->shape.rank() != 1 || v->shape[0] != L)
    throw Error(
        fmt::format("{}'s {} has shape {}; it must be 1-D and as long as x's last axis "
                    "({}; x has shape {})",
                    kind_name(kind), what, v->shape.str(), L, x.shape.str()));
  if (v->dtype != x.dtype)
    throw Error(
        fmt::format("{}'s {} is {} where x is {}; they must have one dtype (use "
                    "{}.astype<...>())",
                    kind_name(kind), what, dtype_name(v->dtype), dtype_name(x.dtype), what));
  if (v->is_view || v->pending.load(std::memory_order_acquire)) {
    v = detail::elementwise(EwOp::cast, v->dtype, {detail::EwArg{v}});
    detail::array_settle(*v);
  }
  return v;
}

// The output's chunks cut only the leading axes (rank 1: one chunk, the row).
DataDistribution row_distribution(const std::shared_ptr<runtime::Driver>& driver, DType dtype,
                                  const Dim& shape) {
  if (shape.rank() <= 1) return dist::centralized(0);
  return detail::default_distribution(driver, dtype, shape);
}

// The scales' chunks: the output's without the last axis.
DataDistribution scale_distribution(const plan::ArrayMeta& out) {
  const int R = out.shape.rank();
  if (R <= 1) return dist::centralized(out.chunks.empty() ? 0 : out.chunks[0].device);
  std::vector<ChunkSpec> chunks;
  for (const plan::ChunkMeta& c : out.chunks) {
    if (c.owned.empty()) continue;
    Rect box(R - 1, {0, 0, 0}, {1, 1, 1});
    for (int k = 0; k < R - 1; ++k) box.lo[k] = c.owned.lo[k], box.hi[k] = c.owned.hi[k];
    chunks.push_back(ChunkSpec{box, box, c.device});
  }
  return dist::custom("quantize scales", [chunks](const Dim&, int) { return chunks; });
}

struct RowArrays {
  std::shared_ptr<ArrayHandle> out, scale, gamma, beta;
};

// Vectors of up to 16 bytes per load and store where every one is whole and aligned: rows
// in registers with no guards (a length of a multiple of the vector), read from an array
// (not a view or an expression) whose chunks hold whole rows.
int64_t choose_vector(const RowPlan& plan, const Program& p) {
  if (plan.per_thread == 0 || !plan.full || p.leaves.size() != 1 || !p.scalars.empty() ||
      p.steps.size() != 1 || p.steps[0].op != EwOp::cast || p.steps[0].dtype != plan.in)
    return 1;
  const Leaf& l = p.leaves[0];
  const int last = plan.rank - 1;
  if (l.general || l.linear || l.dtype != plan.in || l.rank != plan.rank || l.follows[last] != last)
    return 1;
  for (const plan::ChunkMeta& c : l.storage->meta->chunks)
    if (c.region.lo[last] != 0 || c.region.hi[last] != plan.length) return 1;
  int64_t v = 16 / static_cast<int64_t>(dtype_size(plan.in));
  while (v > 1 && plan.per_thread % v != 0) v /= 2;
  return v;
}

// A packed row holds two elements a register, so a thread keeps up to 32 of them (half the
// threads 16 would take): the per-thread set-up and the block's reduction are shared by
// twice the elements. bfloat16 quantize went from 63-66% of torch's copy to 73-80%, and
// layer_norm gained 6% (docs/PERFORMANCE.md, twenty-first session).
void widen_packed(RowPlan& plan, const Program& p) {
  if (!packed(plan)) return;
  RowPlan wide = plan;
  choose_threads(wide, true, 32);
  wide.vec = choose_vector(wide, p);
  if (packed(wide)) plan = wide;
}

void launch_rows(const std::shared_ptr<runtime::Driver>& driver, RowPlan plan, const Program& p,
                 const RowArrays& a, double eps) {
  plan.vec = choose_vector(plan, p);
  widen_packed(plan, p);
  const std::string key =
      fmt::format("rows:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}|{}", int(plan.kind), int(plan.in),
                  int(plan.acc), plan.rank, plan.threads, plan.per_thread, plan.full, plan.vec,
                  plan.gamma, plan.beta, p.key());
  const Kernel& kernel = cached_kernel(driver, key, [&](const std::string& name) {
    auto [src, ann] = row_kernel(plan, p, name);
    auto def = KernelDef::from_source(src, name).annotate(ann);
    if (g_hooks) g_hooks->generated.push_back(def);
    return def;
  });
  Arguments args;
  args.shape(a.out->shape);
  args.real(eps);
  args.array(a.out->storage, plan.out);
  if (a.gamma) args.array(a.gamma->storage, plan.in);
  if (a.beta) args.array(a.beta->storage, plan.in);
  if (a.scale) args.array(a.scale->storage, plan.acc);
  for (const Leaf& leaf : p.leaves) args.view(leaf);
  for (const Scalar& s : p.scalars) args.scalar(s);
  const int R = plan.rank;
  Dim threads = a.out->shape;
  threads[R - 1] = plan.threads;
  std::array<int64_t, 3> t3{threads.get(0), threads.get(1), threads.get(2)}, block{1, 1, 1};
  block[R - 1] = plan.threads;
  // One superblock per output chunk, a block per row (a row is one block along the last
  // axis); the cuda backend launches one of more than 65535 rows in pieces.
  std::array<int64_t, kMaxRank> row_block;
  row_block.fill(1);
  row_block[R - 1] = plan.length;
  auto sbs = chunk_superblocks(*a.out->storage->meta, row_block);
  kernel.launch_packed(
      thread_dim(threads, t3), thread_dim(threads, block),
      work::custom(kind_name(plan.kind), [sbs](const Dim&, const Dim&, int) { return sbs; }),
      args.list());
}

RowPlan make_plan(Kind kind, const ArrayHandle& x) {
  RowPlan plan;
  plan.kind = kind;
  plan.in = x.dtype;
  plan.acc = x.dtype == DType::f64 ? DType::f64 : DType::f32;
  plan.out = kind == Kind::quantize ? DType::i8 : x.dtype;
  plan.rank = x.shape.rank();
  plan.length = x.shape[plan.rank - 1];
  choose_threads(plan, x.driver->backend_name() == "cuda" || (g_hooks && g_hooks->gpu_geometry));
  return plan;
}

}  // namespace

void set_row_test_hooks(RowTestHooks* hooks) {
  g_hooks = hooks;
}

}  // namespace gridspan::array

namespace gridspan::detail {

using array::Kind;

std::shared_ptr<ArrayHandle> row_op(RowOp op, const std::shared_ptr<ArrayHandle>& x,
                                    const std::shared_ptr<ArrayHandle>& gamma,
                                    const std::shared_ptr<ArrayHandle>& beta, double eps) {
  std::lock_guard lock(lazy_mutex());
  const Kind kind = op == RowOp::softmax      ? Kind::softmax
                    : op == RowOp::layer_norm ? Kind::layer_norm
                                              : Kind::rms_norm;
  array::check_x(kind, *x);
  array::RowArrays a;
  if (gamma) a.gamma = array::row_parameter(kind, "gamma", *x, gamma);
  if (beta) a.beta = array::row_parameter(kind, "beta", *x, beta);
  a.out = array_create(x->driver, x->dtype, x->shape,
                       array::row_distribution(x->driver, x->dtype, x->shape), nullptr);
  if (x->shape.volume() == 0) return a.out;
  array::RowPlan plan = array::make_plan(kind, *x);
  plan.gamma = a.gamma != nullptr;
  plan.beta = a.beta != nullptr;
  array::launch_rows(x->driver, plan, array::read_program(x), a, eps);
  return a.out;
}

std::pair<std::shared_ptr<ArrayHandle>, std::shared_ptr<ArrayHandle>> quantize_symmetric(
    const std::shared_ptr<ArrayHandle>& x) {
  std::lock_guard lock(lazy_mutex());
  array::check_x(Kind::quantize, *x);
  array::RowArrays a;
  a.out = array_create(x->driver, DType::i8, x->shape,
                       array::row_distribution(x->driver, DType::i8, x->shape), nullptr);
  const DType sd = quantize_scale_dtype(x->dtype);
  const Dim scale_shape = array::without(x->shape, x->shape.rank() - 1);
  if (x->shape.volume() == 0) {  // an empty row's max|x| is 0: zero scales
    const unsigned char zeros[8] = {};
    a.scale = array_create(x->driver, sd, scale_shape,
                           default_distribution(x->driver, sd, scale_shape), zeros);
    return {a.out, a.scale};
  }
  a.scale = array_create(x->driver, sd, scale_shape,
                         array::scale_distribution(*a.out->storage->meta), nullptr);
  array::launch_rows(x->driver, array::make_plan(Kind::quantize, *x), array::read_program(x), a, 0);
  return {a.out, a.scale};
}

}  // namespace gridspan::detail
