// A pending expression becomes a Program (build_program), and a Program becomes kernel
// source and its annotation (key, source, annotation). The source reads each leaf through
// its broadcast and view, computes every operation once in its own dtype (16-bit floats in
// float, rounded after each), and writes the target.
#include <algorithm>
#include <cctype>
#include <unordered_map>

#include <fmt/format.h>

#include "array/expr.hpp"
#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"

namespace gridspan::array {

const Node* node_of(const ArrayHandle& h) {
  if (!h.pending.load(std::memory_order_acquire)) return nullptr;
  return dynamic_cast<const Node*>(h.producer.get());
}

const char* const kViewKinds[] = {"Scalar", "Vector", "Matrix", "Tensor"};

std::string reg(DType d) {
  return detail::is_16bit_float(d) ? "float" : dtype_cpp_name(d);
}

std::string convert(const std::string& v, DType from, DType to) {
  if (from == to) return v;
  if (to == DType::f16) return fmt::format("gridspan::fused::round_f16({})", v);
  if (to == DType::bf16) return fmt::format("gridspan::fused::round_bf16({})", v);
  return fmt::format("gridspan::fused::convert<{}>({})", dtype_cpp_name(to), v);
}

namespace {

bool same_view(const detail::ViewMap& a, const detail::ViewMap& b) {
  return a.start == b.start && a.step == b.step && a.axis == b.axis && a.linear == b.linear &&
         a.offset == b.offset && a.strides == b.strides;
}

}  // namespace

Leaf leaf_of(const ArrayHandle& h, int rank) {
  Leaf leaf;
  leaf.storage = h.storage;
  leaf.dtype = h.dtype;
  leaf.rank = h.meta().shape.rank();
  leaf.general = h.is_view;
  leaf.view = h.view;
  if (h.is_view && h.view.linear) {
    leaf.linear = true;
    leaf.vrank = h.shape.rank();
    for (int k = 0; k < leaf.vrank; ++k)
      if (h.shape[k] != 1) leaf.vfollows[k] = k + rank - leaf.vrank;
    return leaf;
  }
  for (int b = 0; b < leaf.rank; ++b) {
    const int k = h.is_view ? h.view.axis[b] : b;
    if (k < 0 || h.shape[k] == 1) continue;  // fixed at the view's start (0 for an array)
    leaf.follows[b] = k + rank - h.shape.rank();
  }
  return leaf;
}

namespace {

// The output axis an index sequence of `shape` walks in a program of rank `rank` (its last
// axis longer than 1, counted from the end as broadcasting aligns axes; -1: none).
int walking_axis(const Dim& shape, int rank) {
  for (int k = shape.rank() - 1; k >= 0; --k)
    if (shape[k] != 1) return k + rank - shape.rank();
  return -1;
}

class Builder {
 public:
  Builder(Program& p) : p_(p) {}

  Ref walk(const std::shared_ptr<ArrayHandle>& h) {
    auto it = memo_.find(h.get());
    if (it != memo_.end()) return it->second;
    Ref r;
    if (const Node* n = node_of(*h)) {
      r = step(*n);
    } else {
      if (h->pending.load(std::memory_order_acquire)) detail::array_settle(*h);
      r = leaf(h);
    }
    memo_.emplace(h.get(), r);
    return r;
  }

  Ref step(const Node& n) {
    Step s;
    s.op = n.op;
    s.dtype = n.dtype;
    if (n.op == EwOp::arange) s.axis = walking_axis(n.shape, p_.shape.rank());
    if (n.op == EwOp::random_uniform || n.op == EwOp::random_normal) s.axis = p_.shape.rank();
    for (const Input& in : n.inputs)
      s.args.emplace_back(in.array ? walk(in.array) : scalar(in), in.as);
    p_.steps.push_back(std::move(s));
    return Ref{Ref::step, static_cast<int>(p_.steps.size()) - 1};
  }

 private:
  Ref scalar(const Input& in) {
    p_.scalars.push_back(Scalar{in.as, in.value, in.bits});
    return Ref{Ref::scalar, static_cast<int>(p_.scalars.size()) - 1};
  }

  Ref leaf(const std::shared_ptr<ArrayHandle>& h) {
    Leaf l = leaf_of(*h, p_.shape.rank());
    const Target& t = p_.target;
    if (!t.fresh && l.storage == t.handle->storage) {
      // The target itself: read where it is written, or (another part of it) from a copy
      // made first, since the kernel overwrites what other threads would read.
      if (h->shape == p_.shape && h->is_view == t.handle->is_view &&
          (!h->is_view || same_view(h->view, t.handle->view))) {
        p_.target.also_read = true;
        return Ref{Ref::target, 0};
      }
      auto copy = detail::elementwise(EwOp::cast, h->dtype, {detail::EwArg{h}});
      detail::array_settle(*copy);
      kept_.push_back(copy);
      l = leaf_of(*copy, p_.shape.rank());
    }
    p_.leaves.push_back(std::move(l));
    return Ref{Ref::leaf, static_cast<int>(p_.leaves.size()) - 1};
  }

  Program& p_;
  std::unordered_map<const ArrayHandle*, Ref> memo_;
  std::vector<std::shared_ptr<ArrayHandle>> kept_;
};

}  // namespace

Program build_expression(const Node& root) {
  Program p;
  p.shape = root.shape;
  p.dtype = root.dtype;
  Builder builder(p);
  p.result = builder.step(root);
  return p;
}

Program build_program(const Node& root, ArrayHandle& target, bool fresh) {
  Program p;
  p.shape = root.shape;
  p.dtype = root.dtype;
  p.target.handle = &target;
  p.target.fresh = fresh;
  if (fresh) {
    Leaf& out = p.target.access;
    out.dtype = root.dtype;
    out.rank = root.shape.rank();
    for (int k = 0; k < out.rank; ++k) out.follows[k] = k;
  } else {
    p.target.access = leaf_of(target, target.shape.rank());
  }
  Builder builder(p);
  p.result = builder.step(root);
  return p;
}

// ---- key ----------------------------------------------------------------------------------

namespace {
void key_leaf(std::string& k, const Leaf& l) {
  k += fmt::format("{}{}{}", static_cast<int>(l.dtype), l.rank,
                   l.linear    ? 'l'
                   : l.general ? 'v'
                               : 'a');
  for (int b = 0; b < l.rank; ++b)
    k += fmt::format(",{}{}", l.follows[b], l.general && l.view.step[b] < 0 ? "-" : "");
  for (int j = 0; j < l.vrank; ++j)
    k += fmt::format(".{}{}", l.vfollows[j], l.view.strides[j] < 0 ? "-" : "");
  k += ';';
}
}  // namespace

std::string Program::key() const {
  std::string k = fmt::format("r{}d{}t{}{}{}{}{}|", shape.rank(), static_cast<int>(dtype),
                              target.fresh ? 'f' : 'u', target.also_read ? 'r' : 'w',
                              static_cast<int>(target.access.dtype),
                              looped   ? fmt::format("l{}{}", unrolled, vector ? "v" : "")
                              : origin ? "o"
                                       : "",
                              contribute);
  if (!target.fresh) key_leaf(k, target.access);
  k += '|';
  for (const Leaf& l : leaves) key_leaf(k, l);
  k += '|';
  for (const Scalar& s : scalars) k += fmt::format("{},", static_cast<int>(s.dtype));
  k += '|';
  for (const Step& s : steps) {
    k += fmt::format("{}:{}:{}(", static_cast<int>(s.op), static_cast<int>(s.dtype), s.axis);
    for (const auto& [ref, as] : s.args)
      k += fmt::format("{}{}:{},", static_cast<int>(ref.kind), ref.index, static_cast<int>(as));
    k += ')';
  }
  return k;
}

// ---- source -------------------------------------------------------------------------------

namespace {

std::string axis_name(int k) {
  return fmt::format("a{}", k);
}

// The index of storage axis b of a leaf (or the target) named `name`.
std::string index_expr(const Leaf& l, const std::string& name, int b) {
  const std::string start = fmt::format("{}s{}", name, b), step = fmt::format("{}t{}", name, b);
  if (l.follows[b] < 0) return l.general ? start : "0";
  const std::string a = axis_name(l.follows[b]);
  return l.general ? fmt::format("{} + {}*{}", start, step, a) : a;
}
// A linear leaf's element number in its storage.
std::string linear_expr(const Leaf& l, const std::string& name) {
  std::string s = "(" + name + "o";
  for (int k = 0; k < l.vrank; ++k)
    if (l.vfollows[k] >= 0) s += fmt::format(" + {}q{}*{}", name, k, axis_name(l.vfollows[k]));
  return s + ")";
}
// A linear leaf's storage index on axis b (for the kernel; the annotation bounds it).
std::string linear_index(const Leaf& l, const std::string& name, int b) {
  const std::string lin = linear_expr(l, name);
  if (l.rank == 1) return lin;
  if (b == 0) return fmt::format("{} / {}m{}", lin, name, l.rank == 2 ? "1" : "12");
  if (b == l.rank - 1) return fmt::format("{} % {}m{}", lin, name, b);
  return fmt::format("({} / {}m2) % {}m1", lin, name, name);
}
std::string indices(const Leaf& l, const std::string& name) {
  std::string s;
  for (int b = 0; b < l.rank; ++b)
    s += (b ? ", " : "") + (l.linear ? linear_index(l, name, b) : index_expr(l, name, b));
  return s;
}
// The annotation's indices of a linear leaf: the rows its element numbers reach, whole
// along the other axes.
std::string linear_region(const Leaf& l, const std::string& name) {
  if (l.rank == 1) return linear_expr(l, name);
  std::string s = linear_index(l, name, 0);
  for (int b = 1; b < l.rank; ++b) s += fmt::format(", 0:{}m{} - 1", name, b);
  return s;
}
std::string element(const Leaf& l, const std::string& name) {
  return fmt::format("{}({})", name, indices(l, name));
}
std::string rule(const Leaf& l, const std::string& mode, const std::string& name) {
  if (l.rank == 0) return mode + " " + name;
  return fmt::format("{} {}[{}]", mode, name, l.linear ? linear_region(l, name) : indices(l, name));
}

// ---- the annotation of a reduction's input: an axis may be a range of the thread's elements

std::string substitute(const std::string& e, int k, const std::string& with) {
  std::string out = e, from = axis_name(k);
  for (std::size_t at = out.find(from); at != std::string::npos; at = out.find(from, at)) {
    const bool whole = at + from.size() >= out.size() || !std::isdigit(out[at + from.size()]);
    if (whole)
      out.replace(at, from.size(), "(" + with + ")"), at += with.size() + 2;
    else
      at += from.size();
  }
  return out;
}
// `e` with every axis bound as `ab` says; with lo_end, a ranged axis at the end that makes e
// smallest (e grows with the axis when `grows`), else largest.
std::string bound(std::string e, const AxisBounds& ab, bool low_end, bool grows) {
  for (int k = 0; k < kMaxRank; ++k) {
    const bool ranged = !ab.hi[k].empty();
    e = substitute(e, k, ranged && (low_end != grows) ? ab.hi[k] : ab.lo[k]);
  }
  return e;
}
bool grows_along_range(const Leaf& l, int b, const AxisBounds& ab) {
  if (l.linear) {
    for (int k = 0; k < l.vrank; ++k)
      if (l.vfollows[k] >= 0 && !ab.hi[l.vfollows[k]].empty()) return l.view.strides[k] >= 0;
    return true;
  }
  return !l.general || l.view.step[b] >= 0;
}
std::string ranged(const std::string& e, const Leaf& l, int b, const AxisBounds& ab) {
  const bool grows = grows_along_range(l, b, ab);
  const std::string lo = bound(e, ab, true, grows), hi = bound(e, ab, false, grows);
  return lo == hi ? lo : lo + " : " + hi;
}

// `mode name[...]` for leaf `l` (named `name`), its axes bound as `ab` says.
std::string ranged_rule(const Leaf& l, const std::string& mode, const std::string& name,
                        const AxisBounds& ab) {
  if (l.rank == 0) return mode + " " + name;
  std::string idx;
  if (l.linear) {
    idx = l.rank == 1 ? ranged(linear_expr(l, name), l, 0, ab)
                      : ranged(linear_index(l, name, 0), l, 0, ab);
    for (int b = 1; b < l.rank; ++b) idx += fmt::format(", 0:{}m{} - 1", name, b);
  } else {
    for (int b = 0; b < l.rank; ++b)
      idx += (b ? ", " : "") + ranged(index_expr(l, name, b), l, b, ab);
  }
  return fmt::format("{} {}[{}]", mode, name, idx);
}

}  // namespace

std::string Program::read_rules(const AxisBounds& ab) const {
  std::string a;
  for (std::size_t i = 0; i < leaves.size(); ++i)
    a += ", " + ranged_rule(leaves[i], "read", fmt::format("L{}", i), ab);
  return a;
}

namespace {

std::string call(const char* f, const std::vector<std::string>& a) {
  std::string s = fmt::format("gridspan::{}(", f);
  for (std::size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + a[i];
  return s + ")";
}

// The expression of one operation over its (converted) arguments, in its register type.
std::string op_expr(EwOp op, const std::vector<std::string>& a, DType as) {
  const std::string r = reg(as);
  switch (op) {
    case EwOp::add:
      return fmt::format("gridspan::fused::add<{}>({}, {})", r, a[0], a[1]);
    case EwOp::sub:
      return fmt::format("gridspan::fused::sub<{}>({}, {})", r, a[0], a[1]);
    case EwOp::mul:
      return fmt::format("gridspan::fused::mul<{}>({}, {})", r, a[0], a[1]);
    case EwOp::neg:
      return fmt::format("gridspan::fused::neg<{}>({})", r, a[0]);
    case EwOp::div:
      return fmt::format("({} / {})", a[0], a[1]);
    case EwOp::mod:
      return call("ew::remainder", a);
    case EwOp::pow:
      return call("ew::pow", a);
    case EwOp::maximum:
      return call("ew::maximum", a);
    case EwOp::minimum:
      return call("ew::minimum", a);
    case EwOp::atan2:
      return call("ew::atan2", a);
    case EwOp::hypot:
      return call("ew::hypot", a);
    case EwOp::eq:
      return fmt::format("({} == {})", a[0], a[1]);
    case EwOp::ne:
      return fmt::format("({} != {})", a[0], a[1]);
    case EwOp::lt:
      return fmt::format("({} < {})", a[0], a[1]);
    case EwOp::le:
      return fmt::format("({} <= {})", a[0], a[1]);
    case EwOp::gt:
      return fmt::format("({} > {})", a[0], a[1]);
    case EwOp::ge:
      return fmt::format("({} >= {})", a[0], a[1]);
    case EwOp::logical_and:
      return fmt::format("({} && {})", a[0], a[1]);
    case EwOp::logical_or:
      return fmt::format("({} || {})", a[0], a[1]);
    case EwOp::logical_not:
      return fmt::format("(!{})", a[0]);
    case EwOp::where:
      return fmt::format("({} ? {} : {})", a[0], a[1], a[2]);
    case EwOp::clip:
      return call("ew::clip", a);
    case EwOp::cast:
      return a[0];
    case EwOp::arange:
      return "";  // SourceWriter::step writes it
    case EwOp::random_uniform:
    case EwOp::random_normal:
      return "";  // SourceWriter::step writes them
    default:
      break;
  }
  static const std::unordered_map<int, const char*> functions = {
      {int(EwOp::isnan), "ew::isnan"},
      {int(EwOp::isinf), "ew::isinf"},
      {int(EwOp::isfinite), "ew::isfinite"},
      {int(EwOp::exp), "ew::exp"},
      {int(EwOp::log), "ew::log"},
      {int(EwOp::log1p), "ew::log1p"},
      {int(EwOp::expm1), "ew::expm1"},
      {int(EwOp::sqrt), "ew::sqrt"},
      {int(EwOp::rsqrt), "ew::rsqrt"},
      {int(EwOp::sin), "ew::sin"},
      {int(EwOp::cos), "ew::cos"},
      {int(EwOp::tan), "ew::tan"},
      {int(EwOp::tanh), "ew::tanh"},
      {int(EwOp::arcsin), "ew::arcsin"},
      {int(EwOp::arccos), "ew::arccos"},
      {int(EwOp::arctan), "ew::arctan"},
      {int(EwOp::sinh), "ew::sinh"},
      {int(EwOp::cosh), "ew::cosh"},
      {int(EwOp::abs), "ew::abs"},
      {int(EwOp::sign), "ew::sign"},
      {int(EwOp::floor), "ew::floor"},
      {int(EwOp::ceil), "ew::ceil"},
      {int(EwOp::rint), "ew::rint"},
      {int(EwOp::round), "ew::round"},
      {int(EwOp::erf), "ew::erf"},
      {int(EwOp::gelu), "ew::gelu"},
      {int(EwOp::gelu_tanh), "ew::gelu_tanh"},
      {int(EwOp::silu), "ew::silu"},
      {int(EwOp::sigmoid), "ew::sigmoid"},
      {int(EwOp::softplus), "ew::softplus"}};
  return call(functions.at(int(op)), a);
}

// A random number for the output's element (its row-major number in the output, which is
// the random array itself: random arrays are made on their own). Uniform: lo + (hi - lo) * u
// as one fused multiply-add, so every backend rounds it alike.
std::string random_expr(const Step& s, const std::vector<std::string>& a) {
  std::string lin = "0";
  for (int k = 0; k < kMaxRank && k < s.axis; ++k)
    lin = k == 0 ? "a0" : fmt::format("({}) * n{} + a{}", lin, k, k);
  const bool wide = s.dtype == DType::f64;
  const std::string t = wide ? "double" : "float";
  if (s.op == EwOp::random_normal)
    return fmt::format("gridspan::rng::normal_{}({}, {}, 1)", t, a[0], lin);
  return fmt::format("{}(({})({} - {}), gridspan::rng::uniform_{}({}, {}, 0), ({}){})",
                     wide ? "fma" : "fmaf", t, a[2], a[1], t, a[0], lin, t, a[1]);
}

std::string view_param(const Leaf& l, const std::string& name, bool read_only) {
  return fmt::format("{}gridspan::{}<{}> {}", read_only ? "const " : "", kViewKinds[l.rank],
                     dtype_cpp_name(l.dtype), name);
}
std::string view_scalars(const Leaf& l, const std::string& name) {
  std::string s;
  if (l.linear) {
    s += fmt::format(", int64_t {}o", name);
    for (int k = 0; k < l.vrank; ++k)
      if (l.vfollows[k] >= 0) s += fmt::format(", int64_t {}q{}", name, k);
    for (int b = 1; b < l.rank; ++b) s += fmt::format(", int64_t {}m{}", name, b);
    if (l.rank == 3) s += fmt::format(", int64_t {}m12", name);
    return s;
  }
  if (!l.general) return s;
  for (int b = 0; b < l.rank; ++b) {
    s += fmt::format(", int64_t {}s{}", name, b);
    if (l.follows[b] >= 0) s += fmt::format(", int64_t {}t{}", name, b);
  }
  return s;
}

class SourceWriter {
 public:
  explicit SourceWriter(const Program& p) : p_(p) {}

  std::string write(const std::string& name) {
    std::string body;
    const int rank = p_.shape.rank();
    const bool looped = p_.looped && rank > 0;
    const Leaf& out = p_.target_access();
    const bool gathers = gathers_warp(out, looped);
    body += thread_prologue(rank, looped, p_.origin, gathers);
    std::string element_code = steps();
    if (p_.contribute.empty())
      element_code +=
          fmt::format("  gridspan::fused::store({}, v{});\n", element(out, "out"), p_.result.index);
    else if (gathers)
      element_code = warp_contribution(element_code);
    else
      element_code += fmt::format("  out.reduce({}{}v{});\n", indices(out, "out"),
                                  out.rank ? ", " : "", p_.result.index);
    if (looped && gathers_line(out)) {
      body += line_contribution();
    } else if (looped) {
      // The line's end, then a loop over it (its body as one thread's).
      body += fmt::format(
          "  const int64_t gs_end = gs_w * gs_e + gs_e < n{0} ? gs_w * gs_e + gs_e : n{0};\n"
          "  for (int64_t a{0} = gs_w * gs_e; a{0} < gs_end; ++a{0}) {{\n{1}  }}\n",
          rank - 1, element_code);
      if (p_.unrolled > 0)
        body = fmt::format("#if GRIDSPAN_CHECKED\n{}#else\n{}#endif\n", body, unrolled_body());
    } else {
      body += element_code;
    }
    return fmt::format(
        "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n"
        "#include <gridspan/device/random.hpp>\n"
        "__device__ void {}(dim3 blockIdx{}) {{\n{}}}\n",
        name, params(), body);
  }

  // The unrolled variant's body: the leading axes as one thread per element, then the
  // thread's `unrolled` elements of the block's part of the last axis in three passes: every
  // input loaded into registers, every result computed, every result stored. Loads are then
  // in flight together, not held behind the branches of an earlier element's math (erff's,
  // a division's slow path).
  std::string unrolled_body() const {
    if (p_.vector) return vector_body();
    const int u = p_.unrolled;
    std::string body = leading_axes();
    // A thread's elements are blockDim apart along the last axis; an access whose index is
    // affine there (every one but a reshaped view's) is its first element's address plus k
    // times a step taken once, not the index worked out anew for each element.
    body += fmt::format(
        "  const int64_t gs_first = (int64_t)blockIdx.x * blockDim.x * {0} + threadIdx.x;\n"
        "  const int64_t gs_next = gs_first + blockDim.x;\n",
        u);
    std::string decls;
    for (const Ref& r : read_refs()) {
      decls += fmt::format("  {} {}[{}];\n", reg(dtype_of(r)), register_name(r), u);
      decls += stepped_address(access_of(r), register_name(r), memory_element(r));
    }
    decls += stepped_address(p_.target_access(), "gs_o", element(p_.target_access(), "out"));
    decls += fmt::format("  {} gs_u[{}];\n", reg(p_.steps[p_.result.index].dtype), u);
    // (An unguarded copy of the passes for lines wholly inside the array made gelu 8% faster
    // and silu and sigmoid, whose divisions have a slow path, 24% slower: not kept.)
    return body + decls + passes();
  }
  // The leading axes as one thread per element, threads past the array's end returning.
  std::string leading_axes() const {
    const int rank = p_.shape.rank();
    std::string body, guard;
    for (int k = rank - 2; k >= 0; --k) {
      const char axis = "xyz"[rank - 1 - k];
      body += fmt::format(
          "  const int64_t {0} = (int64_t)blockIdx.{1} * blockDim.{1} + threadIdx.{1};\n",
          axis_name(k), axis);
      guard += fmt::format("{}{} >= n{}", guard.empty() ? "" : " || ", axis_name(k), k);
    }
    if (!guard.empty()) body += fmt::format("  if ({}) return;\n", guard);
    return body;
  }
  // The vector variant's body: the thread's line of `unrolled` neighbouring elements from
  // gs_a (whole: the last axis is a multiple of the line), one vector load for each access
  // that walks the last axis (one element for one broadcast along it), the math, one vector
  // store.
  std::string vector_body() const {
    const int last = p_.shape.rank() - 1, u = p_.unrolled;
    std::string body =
        leading_axes() +
        fmt::format(
            "  const int64_t gs_a = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * {0};\n"
            "  if (gs_a >= n{1}) return;\n",
            u, last);
    for (const Ref& r : read_refs()) {
      const std::string regs = register_name(r), at = substitute(memory_element(r), last, "gs_a");
      body += fmt::format("  {} {}[{}];\n", reg(dtype_of(r)), regs, u);
      if (walks_last(access_of(r)))
        body += fmt::format("  gridspan::fused::load_vector<{}>(&{}, {});\n", u, at, regs);
      else
        body += fmt::format(
            "  for (int gs_k = 0; gs_k < {}; ++gs_k) {}[gs_k] = gridspan::fused::load({});\n", u,
            regs, at);
    }
    SourceWriter from_registers = *this;
    from_registers.registers_ = true;
    return body +
           fmt::format(
               "  {} gs_u[{}];\n#pragma unroll\n  for (int gs_k = 0; gs_k < {}; ++gs_k) {{\n"
               "    const int64_t a{} = gs_a + gs_k;\n",
               reg(p_.steps[p_.result.index].dtype), u, u, last) +
           from_registers.steps() +
           fmt::format(
               "    gs_u[gs_k] = v{};\n  }}\n  gridspan::fused::store_vector<{}>(&{}, gs_u);\n",
               p_.result.index, u, substitute(element(p_.target_access(), "out"), last, "gs_a"));
  }
  // Whether an access's index walks the program's last axis (on its own last axis).
  bool walks_last(const Leaf& l) const {
    const int last = p_.shape.rank() - 1;
    for (int b = 0; b < l.rank; ++b)
      if (l.follows[b] == last) return true;
    return false;
  }
  // The three passes over a thread's elements: loads, math, stores, each only where its
  // element is inside the array.
  std::string passes() const {
    const int last = p_.shape.rank() - 1;
    const std::string each = fmt::format(
        "#pragma unroll\n  for (int gs_k = 0; gs_k < {0}; ++gs_k) {{\n"
        "    const int64_t a{1} = gs_first + (int64_t)gs_k * blockDim.x;\n",
        p_.unrolled, last);
    const std::string in = fmt::format("if (a{0} < n{0}) ", last);
    std::string loads;
    for (const Ref& r : read_refs())
      loads += fmt::format("    {}{}[gs_k] = gridspan::fused::load({});\n", in, register_name(r),
                           kth_element(access_of(r), register_name(r), memory_element(r)));
    SourceWriter from_registers = *this;
    from_registers.registers_ = true;
    return each + loads + "  }\n" + each + fmt::format("    {}{{\n", in) + from_registers.steps() +
           fmt::format("    gs_u[gs_k] = v{};\n    }}\n  }}\n", p_.result.index) + each +
           fmt::format(
               "    {}gridspan::fused::store({}, gs_u[gs_k]);\n", in,
               kth_element(p_.target_access(), "gs_o", element(p_.target_access(), "out"))) +
           "  }\n";
  }
  // An affine access's first address (`name`p) and step between a thread's elements (`name`d).
  std::string stepped_address(const Leaf& l, const std::string& name, const std::string& e) const {
    if (l.linear) return "";
    const int last = p_.shape.rank() - 1;
    return fmt::format("  auto* const {0}p = &{1};\n  const int64_t {0}d = &{2} - {0}p;\n", name,
                       substitute(e, last, "gs_first"), substitute(e, last, "gs_next"));
  }
  // The thread's element gs_k of an access: through its step, or (a reshaped view) its index.
  static std::string kth_element(const Leaf& l, const std::string& name, const std::string& e) {
    return l.linear ? e : fmt::format("{0}p[gs_k * {0}d]", name);
  }
  const Leaf& access_of(Ref r) const {
    return r.kind == Ref::target ? p_.target_access() : p_.leaves[r.index];
  }
  // The arrays the steps read (leaves, and the target when updated in place), once each.
  std::vector<Ref> read_refs() const {
    std::vector<Ref> refs;
    for (const Step& s : p_.steps)
      for (const auto& arg : s.args) {
        const Ref& r = arg.first;
        if (r.kind != Ref::leaf && r.kind != Ref::target) continue;
        const bool seen = std::any_of(refs.begin(), refs.end(), [&](const Ref& o) {
          return o.kind == r.kind && o.index == r.index;
        });
        if (!seen) refs.push_back(r);
      }
    return refs;
  }
  static std::string register_name(Ref r) {
    return r.kind == Ref::target ? "gs_t" : fmt::format("gs_l{}", r.index);
  }

  // A contribution to one element (a whole reduction inside a task) is combined over each
  // warp first on a GPU, then added by one thread of it: one atomic a warp, not a thread.
  bool gathers_warp(const Leaf& out, bool looped) const {
    if (p_.contribute.empty() || out.rank != 0 || looped || p_.shape.rank() == 0) return false;
    switch (p_.steps[p_.result.index].dtype) {
      case DType::i32:
      case DType::i64:
      case DType::u32:
      case DType::u64:
      case DType::f16:
      case DType::bf16:
      case DType::f32:
      case DType::f64:
        return true;
      default:
        return false;  // no warp shuffle of 8- and 16-bit integers
    }
  }
  std::string warp_contribution(const std::string& steps) const {
    const int r = p_.result.index;
    return fmt::format(
        "#ifdef __CUDACC__\n  {0} gs_c{{}};\n  if (gs_in) {{\n{1}  gs_c = v{2};\n  }}\n"
        "  gridspan::fused::warp_contribute(out, gs_c, gs_in);\n#else\n  if (!gs_in) return;\n"
        "{1}  out.reduce(v{2});\n#endif\n",
        reg(p_.steps[r].dtype), steps, r);
  }

  // A whole reduction inside a task on the cpu backend (a thread a line): the line's values
  // are combined in 16 registers (a loop the compiler vectorises) and contributed once, not
  // an update of the partial in memory an element. A 16-bit float's values are contributed
  // one by one, each widened into the float32 partial.
  bool gathers_line(const Leaf& out) const {
    return !p_.contribute.empty() && out.rank == 0 && p_.shape.rank() > 0 &&
           !detail::is_16bit_float(p_.steps[p_.result.index].dtype);
  }
  std::string line_contribution() const {
    const int last = p_.shape.rank() - 1, r = p_.result.index;
    const std::string t = reg(p_.steps[r].dtype);
    return fmt::format(
               "  const int64_t first = gs_w * gs_e, J = n{0} - first < gs_e ? n{0} - first "
               ": gs_e;\n  constexpr int32_t gs_op = {1};\n",
               last, p_.contribute_op) +
           lanes_loop(t, fmt::format("gridspan::fused::identity<{}>(gs_op)", t), last, steps(),
                      fmt::format("v{}", r),
                      [](const std::string& x, const std::string& y) {
                        return fmt::format("gridspan::detail::combine(gs_op, {}, {})", x, y);
                      }) +
           "  out.reduce(acc);\n";
  }

  std::string steps() const {
    std::string body;
    for (std::size_t s = 0; s < p_.steps.size(); ++s) body += step(s);
    return body;
  }
  std::string input_params() const {
    std::string s;
    for (std::size_t l = 0; l < p_.leaves.size(); ++l) {
      const std::string name = fmt::format("L{}", l);
      s += ", " + view_param(p_.leaves[l], name, true) + view_scalars(p_.leaves[l], name);
    }
    for (std::size_t i = 0; i < p_.scalars.size(); ++i)
      s += fmt::format(", {} S{}", reg(p_.scalars[i].dtype), i);
    return s;
  }

 private:
  std::string params() const {
    std::string s;
    for (int k = 0; k < p_.shape.rank(); ++k) s += fmt::format(", int64_t n{}", k);
    s += ", " + view_param(p_.target_access(), "out", false);
    s += view_scalars(p_.target_access(), "out");
    s += input_params();
    if (p_.looped && p_.shape.rank() > 0) s += ", int64_t gs_e";
    for (int k = 0; p_.origin && k < p_.shape.rank(); ++k) s += fmt::format(", int64_t o{}", k);
    return s;
  }
  // A leaf's or the target's value: read from memory, or in the unrolled body's compute
  // pass from the register its load pass filled.
  std::string memory_element(Ref r) const {
    if (r.kind == Ref::target) return element(p_.target_access(), "out");
    return element(p_.leaves[r.index], fmt::format("L{}", r.index));
  }
  std::string memory_value(Ref r) const {
    return fmt::format("gridspan::fused::load({})", memory_element(r));
  }
  std::string value(Ref r) const {
    switch (r.kind) {
      case Ref::leaf:
      case Ref::target:
        return registers_ ? register_name(r) + "[gs_k]" : memory_value(r);
      case Ref::scalar:
        return fmt::format("S{}", r.index);
      case Ref::step:
        return fmt::format("v{}", r.index);
    }
    return "";
  }
  DType dtype_of(Ref r) const {
    switch (r.kind) {
      case Ref::leaf:
        return p_.leaves[r.index].dtype;
      case Ref::target:
        return p_.target_access().dtype;
      case Ref::scalar:
        return p_.scalars[r.index].dtype;
      case Ref::step:
        return p_.steps[r.index].dtype;
    }
    return DType::f32;
  }
  std::string step(std::size_t i) const {
    const Step& s = p_.steps[i];
    std::vector<std::string> args;
    for (const auto& [ref, as] : s.args) args.push_back(convert(value(ref), dtype_of(ref), as));
    const DType as = s.args.empty() ? s.dtype : s.args.back().second;
    std::string e = op_expr(s.op, args, as);
    if (s.op == EwOp::random_uniform || s.op == EwOp::random_normal) {
      e = random_expr(s, args);
    } else if (s.op == EwOp::arange) {
      const std::string i = s.axis < 0 ? "0" : axis_name(s.axis);
      e = fmt::format("({} == {} ? {} : {} + (double){} * {})", i, args[3], args[2], args[0], i,
                      args[1]);
      e = convert(e, DType::f64, s.dtype);
    } else if (s.op == EwOp::cast)
      e = convert(e, s.args[0].second, s.dtype);
    else if (s.dtype == DType::f16 && !store_rounds(i))
      e = fmt::format("gridspan::fused::round_f16({})", e);
    else if (s.dtype == DType::bf16 && !store_rounds(i))
      e = fmt::format("gridspan::fused::round_bf16({})", e);
    else if (s.op != EwOp::where)
      e = fmt::format("({})({})", reg(s.dtype), e);
    return fmt::format("  const {} v{} = {};\n", reg(s.dtype), i, e);
  }

  // The last step, stored into its own 16-bit dtype: the store rounds it, so it is not
  // rounded before (rounding a value already rounded changes nothing: the answer is the same).
  bool store_rounds(std::size_t i) const {
    return i + 1 == p_.steps.size() && int(i) == p_.result.index && p_.result.kind == Ref::step &&
           p_.target_access().dtype == p_.steps[i].dtype;
  }

  const Program& p_;
  bool registers_ = false;  // leaves and target read from the unrolled body's registers
};

}  // namespace

std::string leaf_params(const Leaf& l, const std::string& name, bool read_only) {
  return view_param(l, name, read_only) + view_scalars(l, name);
}
std::string leaf_element(const Leaf& l, const std::string& name) {
  return element(l, name);
}
std::string leaf_rule(const Leaf& l, const std::string& mode, const std::string& name) {
  return rule(l, mode, name);
}

std::string Program::input_params() const {
  return SourceWriter(*this).input_params();
}
std::string Program::step_code() const {
  return SourceWriter(*this).steps();
}

const Leaf& Program::target_access() const {
  return target.access;
}

std::string thread_prologue(int rank, bool looped, bool origin, bool flag) {
  std::string body, guard;
  for (int k = rank - 1; k >= 0; --k) {
    const char axis = "xyz"[rank - 1 - k];
    body +=
        fmt::format("  const int64_t {} = {}(int64_t)blockIdx.{} * blockDim.{} + threadIdx.{};\n",
                    looped && k == rank - 1 ? "gs_w" : axis_name(k),
                    origin ? fmt::format("o{} + ", k) : "", axis, axis, axis);
  }
  if (rank == 0) return body + "  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;\n";
  for (int k = 0; k < rank; ++k)
    guard += fmt::format("{}{} >= n{}", k ? " || " : "",
                         looped && k == rank - 1 ? "gs_w * gs_e" : axis_name(k), k);
  return body + (flag ? fmt::format("  const bool gs_in = !({});\n", guard)
                      : fmt::format("  if ({}) return;\n", guard));
}

std::string Program::source(const std::string& name) const {
  return SourceWriter(*this).write(name);
}

std::string Program::annotation() const {
  const int rank = shape.rank();
  const bool loop = looped && rank > 0;
  std::string binding = "global ";
  if (rank == 0)
    binding += "t";
  else {
    binding += "[";
    for (int k = rank - 1; k >= 0; --k)
      binding += (loop && k == rank - 1 ? "gs_w" : axis_name(k)) + (k ? ", " : "");
    binding += "]";
  }
  const std::string mode = !contribute.empty() ? contribute
                           : target.also_read  ? "readwrite"
                           : target.fresh      ? "overwrite"
                                               : "write";
  if (origin) {  // thread a0.. computes the element o0 + a0, ...
    AxisBounds ab;
    for (int k = 0; k < rank; ++k) ab.lo[k] = fmt::format("a{0} + o{0}", k);
    return binding + " => " + ranged_rule(target.access, mode, "out", ab) + read_rules(ab);
  }
  if (!loop) {
    std::string a = binding + " => " + rule(target.access, mode, "out");
    for (std::size_t l = 0; l < leaves.size(); ++l)
      a += ", " + rule(leaves[l], "read", fmt::format("L{}", l));
    return a;
  }
  // A thread's line: the last axis from gs_w * gs_e to gs_w * gs_e + gs_e - 1.
  AxisBounds ab;
  ab.lo[rank - 1] = "gs_w*gs_e";
  ab.hi[rank - 1] = "gs_w*gs_e + gs_e - 1";
  return binding + " => " + ranged_rule(target.access, mode, "out", ab) + read_rules(ab);
}

}  // namespace gridspan::array
