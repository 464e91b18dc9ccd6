// Kernels from strings (CuPy's ElementwiseKernel and ReductionKernel): their parameters
// parsed once, the placeholder dtypes resolved per call (outputs first, then inputs, then
// scalars), and a generated kernel whose source wraps the user's operation: each input read
// through its broadcast and view into a const local of its type, the outputs locals stored
// after the operation, raw parameters whole arrays indexed by element number. Reductions
// run as reduce.cpp's levels with the user's map, reduce and post expressions.
#include "gridspan/array/kernels.hpp"

#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "array/kernels.hpp"
#include "array/launch.hpp"
#include "gridspan/array/reduce.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::array {

namespace {

constexpr DType kAllDTypes[] = {DType::boolean, DType::i8,  DType::i16, DType::i32, DType::i64,
                                DType::u8,      DType::u16, DType::u32, DType::u64, DType::f16,
                                DType::bf16,    DType::f32, DType::f64};

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// A type word: a dtype (NumPy's name), or a placeholder; words NumPy reads otherwise than
// C++ does, and dtypes gridspan lacks, are errors.
void parse_type(const std::string& word, KParam& p, const std::string& where) {
  for (DType d : kAllDTypes)
    if (word == dtype_name(d)) {
      p.fixed = true;
      p.dtype = d;
      return;
    }
  static const std::set<std::string> ambiguous = {"float", "double", "int",  "long",
                                                  "short", "char",   "uint", "half"};
  static const std::set<std::string> missing = {"complex64",  "complex128", "complex", "float128",
                                                "longdouble", "object",     "str",     "bytes"};
  if (ambiguous.count(word))
    throw Error(fmt::format(
        "{}: the type `{}` is ambiguous (NumPy and C++ read it differently); write a NumPy "
        "dtype name: float32, float64, int32, int64, float16 ...",
        where, word));
  if (missing.count(word))
    throw Error(
        fmt::format("{}: a kernel parameter cannot take the dtype `{}`; gridspan's dtypes "
                    "are bool, int8..int64, uint8..uint64, float16, bfloat16, float32, "
                    "float64",
                    where, word));
  if (!is_identifier(word))
    throw Error(fmt::format("{}: `{}` is neither a dtype nor a placeholder name", where, word));
  p.fixed = false;
  p.placeholder = word;
}

std::vector<KParam> parse_params(const std::string& text, const char* which,
                                 const std::string& kernel) {
  std::vector<KParam> params;
  std::stringstream all(text);
  for (std::string item; std::getline(all, item, ',');) {
    std::stringstream words(item);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    const std::string where = fmt::format("{} `{}` parameter `{}`", kernel, which, item);
    KParam p;
    if (!w.empty() && w[0] == "raw") p.raw = true, w.erase(w.begin());
    if (w.size() != 2)
      throw Error(fmt::format("{}: write `[raw] TYPE NAME`, e.g. `T x` or `raw float32 y`", where));
    parse_type(w[0], p, where);
    p.name = w[1];
    static const std::regex reserved("^(i|_.*|gs_.*|[an][0-2])$");
    if (!is_identifier(p.name) || std::regex_match(p.name, reserved))
      throw Error(
          fmt::format("{}: `{}` cannot name a parameter (names i, a0..a2, n0..n2 and "
                      "those starting with _ or gs_ belong to the generated code)",
                      where, p.name));
    params.push_back(std::move(p));
  }
  return params;
}

void check_names(const KernelSpec& s) {
  std::set<std::string> seen;
  for (const auto* list : {&s.in, &s.out})
    for (const KParam& p : *list)
      if (!seen.insert(p.name).second)
        throw Error(fmt::format("{}: two parameters are named `{}`", s.name, p.name));
  if (s.out.empty()) throw Error(fmt::format("{}: a kernel needs at least one output", s.name));
}

std::shared_ptr<KernelSpec> make_spec(const std::string& in, const std::string& out,
                                      const std::string& name, const std::string& preamble) {
  auto s = std::make_shared<KernelSpec>();
  s->name = is_identifier(name) ? name : "kernel";
  s->in = parse_params(in, "in_params", s->name);
  s->out = parse_params(out, "out_params", s->name);
  s->preamble = preamble;
  check_names(*s);
  return s;
}

// ---- a call's dtypes and shape ------------------------------------------------------------

/// A call's dtypes: per parameter, and per placeholder.
struct Call {
  std::vector<DType> in_dtypes, out_dtypes;
  std::map<std::string, DType> letters;
};

void bind(std::map<std::string, DType>& letters, const KParam& p, DType d, const KernelSpec& s) {
  auto [it, fresh] = letters.emplace(p.placeholder, d);
  if (!fresh && it->second != d)
    throw Error(
        fmt::format("{}: the type {} is {} where parameter `{}` is {}; its arrays must "
                    "agree (convert one with astype)",
                    s.name, p.placeholder, dtype_name(it->second), p.name, dtype_name(d)));
}

DType scalar_dtype(ScalarKind k) {
  return k == ScalarKind::floating  ? DType::f64
         : k == ScalarKind::integer ? DType::i64
                                    : DType::boolean;
}

Call resolve(const KernelSpec& s, const std::vector<detail::KernelArg>& args,
             std::size_t outputs_given) {
  Call c;
  std::map<std::string, DType> letters;
  for (std::size_t k = 0; k < outputs_given; ++k) {
    const auto& a = args[s.in.size() + k].arg.array;
    if (!a)
      throw Error(
          fmt::format("{}: output `{}` must be an array, not a scalar", s.name, s.out[k].name));
    if (s.out[k].fixed && s.out[k].dtype != a->dtype)
      throw Error(fmt::format("{}: output `{}` is declared {} but the array given is {}", s.name,
                              s.out[k].name, dtype_name(s.out[k].dtype), dtype_name(a->dtype)));
    if (!s.out[k].fixed) bind(letters, s.out[k], a->dtype, s);
  }
  for (std::size_t k = 0; k < s.in.size(); ++k)
    if (args[k].arg.array && !s.in[k].fixed) bind(letters, s.in[k], args[k].arg.array->dtype, s);
  for (std::size_t k = 0; k < s.in.size(); ++k)
    if (!args[k].arg.array && !s.in[k].fixed)
      letters.emplace(s.in[k].placeholder, scalar_dtype(args[k].arg.kind));
  auto type_of = [&](const KParam& p) {
    if (p.fixed) return p.dtype;
    auto it = letters.find(p.placeholder);
    if (it == letters.end())
      throw Error(
          fmt::format("{}: the type {} of output `{}` is not known from the inputs; pass "
                      "the output array",
                      s.name, p.placeholder, p.name));
    return it->second;
  };
  for (const KParam& p : s.in) c.in_dtypes.push_back(type_of(p));
  for (const KParam& p : s.out) c.out_dtypes.push_back(type_of(p));
  c.letters = letters;
  return c;
}

Dim broadcast_shape(const KernelSpec& s, const std::vector<detail::KernelArg>& args,
                    std::size_t outputs_given) {
  std::optional<Dim> shape;
  auto join = [&](const Dim& d) {
    try {
      shape = shape ? broadcast(*shape, d) : d;
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", s.name, e.what()));
    }
  };
  for (std::size_t k = 0; k < s.in.size(); ++k)
    if (args[k].arg.array && !s.in[k].raw) join(args[k].arg.array->shape);
  for (std::size_t k = 0; k < outputs_given; ++k)
    if (!s.out[k].raw) join(args[s.in.size() + k].arg.array->shape);
  if (!shape)
    throw Error(
        fmt::format("{}: no array gives the kernel's shape (every argument is raw or a "
                    "scalar); pass the output array",
                    s.name));
  for (std::size_t k = 0; k < outputs_given; ++k)
    if (!s.out[k].raw && args[s.in.size() + k].arg.array->shape != *shape)
      throw Error(fmt::format("{}: output `{}` has shape {} where the inputs broadcast to {}",
                              s.name, s.out[k].name, args[s.in.size() + k].arg.array->shape.str(),
                              shape->str()));
  return *shape;
}

std::string typedefs(const Call& c) {
  std::string s;
  for (const auto& [letter, d] : c.letters) s += fmt::format("typedef {} {};\n", reg(d), letter);
  return s;
}

Scalar kernel_scalar(const detail::EwArg& a, DType as) {
  Scalar sc;
  sc.dtype = as;
  sc.value = a.value;
  sc.bits = a.bits;
  if (detail::is_float(as)) return sc;
  if (as == DType::boolean) {
    sc.value = a.value != 0;
    sc.bits = a.value != 0;
    return sc;
  }
  if (a.kind == ScalarKind::floating) {  // C++'s conversion: toward zero
    sc.value = std::trunc(a.value);
    sc.bits = static_cast<uint64_t>(static_cast<int64_t>(sc.value));
  }
  return sc;
}

// A settled, plain (not a view) array of `h`'s values: raw parameters index storage.
std::shared_ptr<ArrayHandle> plain(const std::shared_ptr<ArrayHandle>& h) {
  if (h->pending.load(std::memory_order_acquire)) detail::array_settle(*h);
  if (!h->is_view) return h;
  auto copy = detail::elementwise(EwOp::cast, h->dtype, {detail::EwArg{h}});
  detail::array_settle(*copy);
  return copy;
}

std::string raw_params(const std::string& name, int rank, DType d, bool read_only) {
  std::string s = fmt::format(", {}gridspan::{}<{}> {}", read_only ? "const " : "",
                              kViewKinds[std::max(rank, 1)], dtype_cpp_name(d), name);
  for (int b = 0; b < std::max(rank, 1); ++b) s += fmt::format(", int64_t {}n{}", name, b);
  return s;
}
std::string raw_rule(const std::string& name, int rank, const char* mode) {
  std::string idx;
  for (int b = 0; b < std::max(rank, 1); ++b)
    idx += fmt::format("{}0:{}n{} - 1", b ? ", " : "", name, b);
  return fmt::format(", {} {}[{}]", mode, name, idx);
}
std::string raw_local(const std::string& user, const std::string& name, int rank, DType d,
                      bool read_only) {
  const int r = std::max(rank, 1);
  return fmt::format("  gridspan::fused::Raw<{}gridspan::{}<{}>, {}> {}{{&{}, {}, {}, {}}};\n",
                     read_only ? "const " : "", kViewKinds[r], dtype_cpp_name(d), r, user, name,
                     r > 1 ? fmt::format("{}n1", name) : "1",
                     r > 2 ? fmt::format("{}n2", name) : "1",
                     r == 1   ? fmt::format("{}n0", name)
                     : r == 2 ? fmt::format("{}n0 * {}n1", name, name)
                              : fmt::format("{}n0 * {}n1 * {}n2", name, name, name));
}
void raw_args(Arguments& args, const std::shared_ptr<ArrayHandle>& h) {
  args.array(h->storage, h->dtype);
  const Dim& m = h->storage->meta->shape;
  if (m.rank() == 0) args.integer(1);
  for (int b = 0; b < m.rank(); ++b) args.integer(m[b]);
}

// Appends " at line N: <the generated line>" to a compiler's message naming a line of `src`.
[[noreturn]] void rethrow_with_line(const CompileError& e, const std::string& src,
                                    const std::string& kernel) {
  std::string msg = e.what();
  std::smatch m;
  static const std::regex at(R"((?:\.cu\(|\.cpp:|\.cu:)(\d+))");
  std::vector<std::string> lines;
  std::stringstream in(src);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string shown;
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), at); it != std::sregex_iterator();
       ++it) {
    const std::size_t n = std::stoul((*it)[1]);
    if (n >= 1 && n <= lines.size()) {
      shown = fmt::format("\n  generated line {}: {}", n, lines[n - 1]);
      break;
    }
  }
  std::string listing;
  for (std::size_t n = 0; n < lines.size(); ++n)
    listing += fmt::format("{:4}| {}\n", n + 1, lines[n]);
  throw CompileError(
      fmt::format("{}: the kernel's code does not compile{}\n{}\n--- generated code ---\n{}",
                  kernel, shown, msg, listing));
}

const Kernel& compiled(const std::shared_ptr<runtime::Driver>& driver, const std::string& source,
                       const std::string& annotation, const std::string& kernel_name) {
  try {
    return cached_kernel(
        driver, "string|" + source + "|" + annotation, [&](const std::string& name) {
          std::string src = source;
          for (auto at = src.find("@NAME@"); at != std::string::npos; at = src.find("@NAME@"))
            src.replace(at, 6, name);
          return KernelDef::from_source(src, name).annotate(annotation);
        });
  } catch (const CompileError& e) {
    rethrow_with_line(e, source, kernel_name);
  }
}

std::shared_ptr<runtime::Driver> driver_of(const KernelSpec& s,
                                           const std::vector<detail::KernelArg>& args) {
  std::shared_ptr<runtime::Driver> driver;
  for (const auto& a : args) {
    if (!a.arg.array) continue;
    if (driver && a.arg.array->driver != driver)
      throw Error(fmt::format("{}: the arrays belong to two gs::Contexts", s.name));
    driver = a.arg.array->driver;
  }
  if (!driver) throw Error(fmt::format("{}: at least one argument must be an array", s.name));
  return driver;
}

// The generated elementwise kernel of one call: parameters, annotation, body and arguments,
// grown together parameter by parameter.
class ElementwiseSource {
 public:
  ElementwiseSource(const KernelSpec& s, const Call& c, const Dim& shape)
      : s_(s), c_(c), shape_(shape) {
    const int R = shape.rank();
    for (int k = 0; k < R; ++k) params_ += fmt::format(", int64_t n{}", k);
    args_.shape(shape);
    for (int k = R - 1; k >= 0; --k) {
      const char axis = "xyz"[R - 1 - k];
      head_ +=
          fmt::format("  const int64_t a{} = (int64_t)blockIdx.{} * blockDim.{} + threadIdx.{};\n",
                      k, axis, axis, axis);
    }
    std::string guard, index = "0", count = "1";
    for (int k = 0; k < R; ++k) {
      guard += fmt::format("{}a{} >= n{}", k ? " || " : "", k, k);
      index = k == 0 ? "a0" : fmt::format("({}) * n{} + a{}", index, k, k);
      count += fmt::format(" * n{}", k);
    }
    head_ += R ? fmt::format("  if ({}) return;\n", guard)
               : "  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;\n";
    head_ += fmt::format(
        "  const int64_t i = {};\n  const gridspan::fused::Index _ind{{{}}};\n  (void)i;\n  "
        "(void)_ind;\n",
        index, count);
  }

  void output(std::size_t k, const std::shared_ptr<ArrayHandle>& h, bool given) {
    const KParam& p = s_.out[k];
    const DType d = c_.out_dtypes[k];
    const std::string name = fmt::format("gs_O{}", k);
    if (p.raw) {
      params_ += raw_params(name, h->storage->meta->shape.rank(), d, false);
      rules_ += raw_rule(name, h->storage->meta->shape.rank(), "readwrite");
      locals_ += raw_local(p.name, name, h->storage->meta->shape.rank(), d, false);
      raw_args(args_, h);
      return;
    }
    const Leaf l = leaf_of(*h, shape_.rank());
    params_ += ", " + leaf_params(l, name, false);
    rules_ += ", " + leaf_rule(l, given ? "readwrite" : "overwrite", name);
    const std::string init =
        given ? convert(fmt::format("gridspan::fused::load({})", leaf_element(l, name)), l.dtype, d)
              : reg(d) + "()";
    locals_ += fmt::format("  {} {} = {};\n", reg(d), p.name, init);
    tail_ += fmt::format("  gridspan::fused::store({}, {});\n", leaf_element(l, name), p.name);
    args_.view(l);
  }

  void input(std::size_t k, const detail::EwArg& a) {
    const KParam& p = s_.in[k];
    const DType d = c_.in_dtypes[k];
    const std::string name = fmt::format("gs_I{}", k);
    if (!a.array) {
      params_ += fmt::format(", {} {}", reg(d), name);
      locals_ += fmt::format("  const {} {} = {};\n", reg(d), p.name, name);
      args_.scalar(kernel_scalar(a, d));
      return;
    }
    if (p.raw) {
      auto h = plain(a.array);
      kept_.push_back(h);
      params_ += raw_params(name, h->storage->meta->shape.rank(), h->dtype, true);
      rules_ += raw_rule(name, h->storage->meta->shape.rank(), "read");
      locals_ += raw_local(p.name, name, h->storage->meta->shape.rank(), h->dtype, true);
      raw_args(args_, h);
      return;
    }
    if (a.array->pending.load(std::memory_order_acquire)) detail::array_settle(*a.array);
    const Leaf l = leaf_of(*a.array, shape_.rank());
    params_ += ", " + leaf_params(l, name, true);
    rules_ += ", " + leaf_rule(l, "read", name);
    locals_ += fmt::format(
        "  const {} {} = {};\n", reg(d), p.name,
        convert(fmt::format("gridspan::fused::load({})", leaf_element(l, name)), l.dtype, d));
    args_.view(l);
  }

  std::string source() const {
    return fmt::format(
        "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n"
        "{}{}\n__device__ void @NAME@(dim3 blockIdx{}) {{\n{}{}  {{\n{};\n  }}\n{}}}\n",
        typedefs(c_), s_.preamble, params_, head_, locals_, s_.operation, tail_);
  }
  std::string annotation() const {
    const int R = shape_.rank();
    std::string binding = "t";
    if (R) {
      binding = "[";
      for (int k = R - 1; k >= 0; --k) binding += fmt::format("a{}{}", k, k ? ", " : "");
      binding += "]";
    }
    return fmt::format("global {} =>{}", binding, rules_.substr(1));
  }
  const std::vector<detail::LaunchArg>& args() const { return args_.list(); }

 private:
  const KernelSpec& s_;
  const Call& c_;
  Dim shape_;
  std::string params_, head_, locals_, tail_, rules_;
  Arguments args_;
  std::vector<std::shared_ptr<ArrayHandle>> kept_;
};

std::size_t outputs_given(const KernelSpec& s, std::size_t n) {
  if (n == s.in.size()) return 0;
  if (n == s.in.size() + s.out.size()) return s.out.size();
  throw Error(
      fmt::format("{}: takes {} input(s), then optionally all {} output(s); {} "
                  "argument(s) given",
                  s.name, s.in.size(), s.out.size(), n));
}

// A reduction call's trailing axis and keepdims.
struct AxisArgs {
  int axis = detail::kAllAxes;
  bool keepdims = false;
};
AxisArgs axis_args(const KernelSpec& s, const std::vector<detail::KernelArg>& args, int rank) {
  AxisArgs a;
  std::size_t k = s.in.size();
  if (args.size() < k)
    throw Error(fmt::format("{}: takes {} input(s); {} argument(s) given", s.name, k, args.size()));
  if (k < args.size() && args[k].integral) {
    const auto v = static_cast<int64_t>(args[k].arg.value);
    if (v < -rank || v >= rank)
      throw Error(
          fmt::format("{}: axis {} is out of range for the inputs' rank {}", s.name, v, rank));
    a.axis = static_cast<int>(v < 0 ? v + rank : v);
    ++k;
  }
  if (k < args.size() && args[k].boolean) a.keepdims = args[k].arg.value != 0, ++k;
  if (k != args.size())
    throw Error(
        fmt::format("{}: after its {} input(s) a reduction takes an axis (an integer) "
                    "and keepdims (a bool); argument {} is neither",
                    s.name, s.in.size(), k + 1));
  return a;
}

// The code of a reduction's steps: gs_map over the inputs, gs_identity, gs_reduce, gs_post.
std::string reduce_code(const KernelSpec& s, const Call& c, DType acc) {
  const std::string A = reg(acc), O = reg(c.out_dtypes[0]);
  std::string map_params;
  for (std::size_t k = 0; k < s.in.size(); ++k)
    map_params += fmt::format("{}const {} {}", k ? ", " : "", reg(c.in_dtypes[k]), s.in[k].name);
  return fmt::format(
      "{}typedef {} _type_reduce;\n{}\n"
      "__device__ inline {} gs_map({}) {{\n  return ({})({});\n}}\n"
      "__device__ inline {} gs_identity() {{\n  return ({})({});\n}}\n"
      "__device__ inline {} gs_reduce(const {} a, const {} b) {{\n  return ({})({});\n}}\n"
      "__device__ inline {} gs_post(const {} a) {{\n  {} {} = {}();\n  {};\n  return {};\n}}\n",
      typedefs(c), A, s.preamble, A, map_params, A, s.map_expr, A, A, s.identity, A, A, A, A,
      s.reduce_expr, O, A, O, s.out[0].name, O, s.post_map_expr, s.out[0].name);
}

// The first level's Program: each input read (or a scalar taken) as its parameter's dtype.
Program map_program(const KernelSpec& s, const Call& c, const std::vector<detail::KernelArg>& args,
                    const Dim& shape, std::string& map_call) {
  Program p;
  p.shape = shape;
  p.dtype = c.out_dtypes[0];
  for (std::size_t k = 0; k < s.in.size(); ++k) {
    const auto& a = args[k].arg;
    Step st;
    st.op = EwOp::cast;
    st.dtype = c.in_dtypes[k];
    if (a.array) {
      if (a.array->pending.load(std::memory_order_acquire)) detail::array_settle(*a.array);
      p.leaves.push_back(leaf_of(*a.array, shape.rank()));
      st.args.emplace_back(Ref{Ref::leaf, static_cast<int>(p.leaves.size()) - 1}, a.array->dtype);
    } else {
      p.scalars.push_back(kernel_scalar(a, c.in_dtypes[k]));
      st.args.emplace_back(Ref{Ref::scalar, static_cast<int>(p.scalars.size()) - 1},
                           c.in_dtypes[k]);
    }
    p.steps.push_back(std::move(st));
    map_call += fmt::format("{}v{}", k ? ", " : "", k);
  }
  map_call = "gs_map(" + map_call + ")";
  p.result = Ref{Ref::step, static_cast<int>(p.steps.size()) - 1};
  return p;
}

}  // namespace

}  // namespace gridspan::array

namespace gridspan {

using namespace array;

DType KernelOutputs::dtype(std::size_t i) const {
  if (i >= outs_.size())
    throw Error(fmt::format("output {} of a kernel with {} output(s)", i, outs_.size()));
  return outs_[i]->dtype;
}

void KernelOutputs::check(std::size_t i, DType want, bool only) const {
  if (only && outs_.size() != 1)
    throw Error(fmt::format("the kernel has {} outputs: take each with get<T>(i)", outs_.size()));
  if (dtype(i) != want)
    throw Error(
        fmt::format("the kernel's output {} is {}, not {}: take it as an Array of that "
                    "type",
                    i, dtype_name(dtype(i)), dtype_name(want)));
}

ElementwiseKernel::ElementwiseKernel(const std::string& in_params, const std::string& out_params,
                                     const std::string& operation, const std::string& name,
                                     const std::string& preamble) {
  auto s = make_spec(in_params, out_params, name, preamble);
  s->operation = operation;
  spec_ = s;
}

KernelOutputs ElementwiseKernel::call(const std::vector<detail::KernelArg>& args) const {
  const KernelSpec& s = *spec_;
  const std::size_t given = outputs_given(s, args.size());
  std::lock_guard lock(detail::lazy_mutex());
  auto driver = driver_of(s, args);
  const Call c = resolve(s, args, given);
  const Dim shape = broadcast_shape(s, args, given);
  ElementwiseSource gen(s, c, shape);
  std::vector<std::shared_ptr<ArrayHandle>> outs;
  const ArrayHandle* along = nullptr;
  for (std::size_t k = 0; k < s.out.size(); ++k) {
    std::shared_ptr<ArrayHandle> h;
    if (given) {
      h = args[s.in.size() + k].arg.array;
      if (h->pending.load(std::memory_order_acquire)) detail::array_settle(*h);
    } else if (s.out[k].raw) {
      throw Error(
          fmt::format("{}: the raw output `{}` must be given (its shape is not the "
                      "kernel's)",
                      s.name, s.out[k].name));
    } else {
      h = detail::array_create(driver, c.out_dtypes[k], shape,
                               detail::default_distribution(driver, c.out_dtypes[k], shape),
                               nullptr);
    }
    if (!along && !s.out[k].raw && !h->is_view) along = h.get();
    gen.output(k, h, given != 0);
    outs.push_back(h);
  }
  for (std::size_t k = 0; k < s.in.size(); ++k) gen.input(k, args[k].arg);
  const Kernel& kernel = compiled(driver, gen.source(), gen.annotation(), s.name);
  launch_elements(driver, kernel, shape, along, gen.args());
  return KernelOutputs(std::move(outs));
}

}  // namespace gridspan

namespace gridspan {

using namespace array;

ReductionKernel::ReductionKernel(const std::string& in_params, const std::string& out_params,
                                 const std::string& map_expr, const std::string& reduce_expr,
                                 const std::string& post_map_expr, const std::string& identity,
                                 const std::string& name, const std::string& preamble) {
  auto s = make_spec(in_params, out_params, name, preamble);
  if (s->out.size() != 1 || s->out[0].raw)
    throw Error(fmt::format("{}: a ReductionKernel has one output, not raw", s->name));
  for (const KParam& p : s->in)
    if (p.raw) throw Error(fmt::format("{}: a ReductionKernel's inputs cannot be raw", s->name));
  if (s->in.empty()) throw Error(fmt::format("{}: a ReductionKernel needs an input", s->name));
  if (identity.empty())
    throw Error(
        fmt::format("{}: give an identity, the value an empty reduction answers (e.g. "
                    "\"0\" for a sum, \"-INFINITY\" for a max)",
                    s->name));
  s->map_expr = map_expr;
  s->reduce_expr = reduce_expr;
  s->post_map_expr = post_map_expr;
  s->identity = identity;
  spec_ = s;
}

namespace {

// The answer to a reduction of an empty input, as CuPy's: every element of the result (shaped
// as gs::sum's) is the post-mapped identity, written by one kernel.
std::shared_ptr<ArrayHandle> identity_result(const std::shared_ptr<runtime::Driver>& driver,
                                             const KernelSpec& s, const CustomReduce& r,
                                             const Dim& in, const AxisArgs& ax) {
  Dim shape = Dim::of_rank(ax.keepdims ? in.rank() : 0, 1);
  if (ax.axis != detail::kAllAxes) {
    shape = Dim::of_rank(in.rank() - (ax.keepdims ? 0 : 1), 1);
    for (int k = 0, j = 0; k < in.rank(); ++k)
      if (k != ax.axis)
        shape[j++] = in[k];
      else if (ax.keepdims)
        ++j;
  }
  auto out = detail::array_create(driver, r.out, shape,
                                  detail::default_distribution(driver, r.out, shape), nullptr);
  if (shape.volume() == 0) return out;
  const int R = shape.rank();
  std::string params, binding, where;
  for (int k = 0; k < R; ++k) {
    params += fmt::format(", int64_t n{}", k);
    where += fmt::format("{}a{}", k ? ", " : "", k);
  }
  for (int k = R - 1; k >= 0; --k) binding += fmt::format("{}a{}", k == R - 1 ? "" : ", ", k);
  const std::string index = thread_prologue(R, false);
  const std::string source = fmt::format(
      "#include <gridspan/device/elementwise.hpp>\n#include <gridspan/device/fused.hpp>\n{}"
      "__device__ void @NAME@(dim3 blockIdx{}, gridspan::{}<{}> out) {{\n{}"
      "  gridspan::fused::store(out({}), gs_post(gs_identity()));\n}}\n",
      r.code, params, kViewKinds[R], dtype_cpp_name(r.out), index, where);
  const std::string annotation =
      R == 0 ? "global t => overwrite out"
             : fmt::format("global [{}] => overwrite out[{}]", binding, where);
  const Kernel& kernel = compiled(driver, source, annotation, s.name);
  Arguments args;
  args.shape(shape);
  args.array(out->storage, r.out);
  launch_elements(driver, kernel, shape, out.get(), args.list());
  return out;
}

}  // namespace

KernelOutputs ReductionKernel::call(const std::vector<detail::KernelArg>& args) const {
  const KernelSpec& s = *spec_;
  std::lock_guard lock(detail::lazy_mutex());
  if (args.size() < s.in.size())
    throw Error(fmt::format("{}: takes {} input(s); {} argument(s) given", s.name, s.in.size(),
                            args.size()));
  const std::vector<detail::KernelArg> inputs(args.begin(), args.begin() + s.in.size());
  auto driver = driver_of(s, inputs);
  const Call c = resolve(s, inputs, 0);
  Dim shape = broadcast_shape(s, inputs, 0);
  const AxisArgs ax = axis_args(s, args, shape.rank());
  CustomReduce r;
  r.out = c.out_dtypes[0];
  r.acc = detail::is_16bit_float(r.out) ? DType::f32 : r.out;
  r.code = reduce_code(s, c, r.acc);
  try {
    if (shape.volume() == 0) return KernelOutputs({identity_result(driver, s, r, shape, ax)});
    if (shape.rank() == 0) shape = Dim{1};  // one element, reduced over its one axis
    const Program p = map_program(s, c, inputs, shape, r.map);
    return KernelOutputs({reduce_custom(driver, r, p, ax.axis, ax.keepdims)});
  } catch (const CompileError& e) {
    throw CompileError(
        fmt::format("{}: the kernel's code does not compile\n{}\n--- its "
                    "steps ---\n{}",
                    s.name, e.what(), r.code));
  }
}

}  // namespace gridspan
