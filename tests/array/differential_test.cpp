// The array library's differential test: random programs of array expressions (random shapes
// with broadcasting, all 13 dtypes, views read and written, distributions, 1 to 3 devices,
// memory limits that spill) run by gridspan and by a plain sequential reference, compared
// element for element; the same program on 1 and on 3 devices; and, on the cpu backend,
// NumPy (Debian's python3-numpy, tests/array/numpy_reference.py) as a second reference.
//
// A program's structure (ops, dtypes, which axes are 1, views) comes from a structure seed
// drawn from a fixed family, so the kernels it needs are compiled once and then found on
// disk; its instance (extents, values, distributions, devices, memory) from the run's seed.
// A failure prints GRIDSPAN_DIFF_SEED=structure:instance, which replays that one program.
// GRIDSPAN_DIFF_PROGRAMS sets the count, GRIDSPAN_DIFF_FRESH=1 draws structures afresh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "array/launch.hpp"
#include "gridspan/gridspan.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

// ---- dtypes, as the reference sees them (NumPy's rules, written apart from promote.hpp) ----
using D = DType;
constexpr D kAllDtypes[] = {D::boolean, D::i8,  D::i16, D::i32,  D::i64, D::u8, D::u16,
                            D::u32,     D::u64, D::f16, D::bf16, D::f32, D::f64};

bool is_fp(D d) {
  return d == D::f16 || d == D::bf16 || d == D::f32 || d == D::f64;
}
bool is_uint(D d) {
  return d == D::u8 || d == D::u16 || d == D::u32 || d == D::u64;
}
bool is_sint(D d) {
  return d == D::i8 || d == D::i16 || d == D::i32 || d == D::i64;
}
bool is_int(D d) {
  return is_uint(d) || is_sint(d);
}
bool is_half(D d) {
  return d == D::f16 || d == D::bf16;
}
int int_bits(D d) {
  return static_cast<int>(dtype_size(d)) * 8;
}
const char* numpy_name(D d) {
  switch (d) {
    case D::boolean:
      return "bool";
    case D::i8:
      return "int8";
    case D::i16:
      return "int16";
    case D::i32:
      return "int32";
    case D::i64:
      return "int64";
    case D::u8:
      return "uint8";
    case D::u16:
      return "uint16";
    case D::u32:
      return "uint32";
    case D::u64:
      return "uint64";
    case D::f16:
      return "float16";
    case D::bf16:
      return "bfloat16";
    case D::f32:
      return "float32";
    case D::f64:
      return "float64";
  }
  return "?";
}
// The range of an integer dtype (bool as 0..1).
std::pair<long double, long double> int_range(D d) {
  if (d == D::boolean) return {0, 1};
  const long double span = std::ldexp(1.0L, int_bits(d));
  if (is_uint(d)) return {0, span - 1};
  return {-span / 2, span / 2 - 1};
}
// Bits of an integer dtype's magnitude, against a float's significand.
int magnitude_bits(D d) {
  return int_bits(d) - (is_sint(d) ? 1 : 0);
}
int significand_bits(D d) {
  return d == D::f16 ? 11 : d == D::bf16 ? 8 : d == D::f32 ? 24 : 53;
}

// Two integer dtypes: the smallest integer holding both ranges; float64 when none does.
D promote_ints(D a, D b) {
  const auto [la, ha] = int_range(a);
  const auto [lb, hb] = int_range(b);
  const long double lo = std::min(la, lb), hi = std::max(ha, hb);
  const D candidates[2][4] = {{D::u8, D::u16, D::u32, D::u64}, {D::i8, D::i16, D::i32, D::i64}};
  for (D c : candidates[lo < 0]) {
    const auto [lc, hc] = int_range(c);
    if (lc <= lo && hi <= hc) return c;
  }
  return D::f64;
}
// NumPy's table between arrays; the library keeps float16 and bfloat16 with any integer and
// makes float16 with bfloat16 float32 (GUIDE.md section 11).
D ref_promote(D a, D b) {
  if (a == b) return a;
  if (a == D::boolean) return b;
  if (b == D::boolean) return a;
  if (is_int(a) && is_int(b)) return promote_ints(a, b);
  if (is_fp(a) && is_fp(b)) {
    if (is_half(a) && is_half(b)) return D::f32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  const D f = is_fp(a) ? a : b, i = is_fp(a) ? b : a;
  if (is_half(f)) return f;
  return (f == D::f32 && significand_bits(D::f32) >= magnitude_bits(i)) ? D::f32 : D::f64;
}
// NumPy 2's weak scalars: the scalar's kind may promote the array, its width never.
D ref_promote_scalar(D a, ScalarKind k) {
  if (k == ScalarKind::floating && !is_fp(a)) return D::f64;
  if (k == ScalarKind::integer && a == D::boolean) return D::i64;
  return a;
}
// The float a math function answers for an integer (NumPy: 1 byte -> float16, 2 -> float32).
D ref_float_of(D a) {
  if (is_fp(a)) return a;
  return dtype_size(a) == 1 ? D::f16 : dtype_size(a) == 2 ? D::f32 : D::f64;
}
double dtype_eps(D d) {
  switch (d) {
    case D::f16:
      return std::ldexp(1.0, -10);
    case D::bf16:
      return std::ldexp(1.0, -7);
    case D::f32:
      return std::ldexp(1.0, -23);
    case D::f64:
      return std::ldexp(1.0, -52);
    default:
      return 0;
  }
}
long double dtype_max(D d) {
  switch (d) {
    case D::f16:
      return 65504.0L;
    case D::bf16:
      return static_cast<long double>(float(gs::bfloat16::from_bits(0x7F7F)));
    case D::f32:
      return std::numeric_limits<float>::max();
    case D::f64:
      return std::numeric_limits<double>::max();
    default:
      return int_range(d).second;
  }
}
double dtype_tiny(D d) {
  switch (d) {
    case D::f16:
      return 4 * std::ldexp(1.0, -14);
    case D::bf16:
    case D::f32:
      return 4 * std::numeric_limits<float>::min();
    case D::f64:
      return 4 * std::numeric_limits<double>::min();
    default:
      return 0;
  }
}
// Where the library computes a dtype's operations: 16-bit floats and float32 in float.
D compute_dtype(D d) {
  return d == D::f64 ? D::f64 : D::f32;
}

// ---- values: every element a long double (exact for every dtype's values) -----------------
using Real = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();

Real round_to_float(D d, Real x) {
  const float f = static_cast<float>(x);
  if (d == D::f16) return float(gs::float16(f));
  if (d == D::bf16) return float(gs::bfloat16(f));
  if (d == D::f32) return f;
  return static_cast<double>(x);
}
// An integer value wrapped into `d` (two's complement), as C++ conversions of integers do.
Real wrap_int(D d, Real x) {
  if (d == D::boolean) return x != 0;
  const int bits = int_bits(d);
  uint64_t u = x < 0 ? ~static_cast<uint64_t>(-(x + 1)) : static_cast<uint64_t>(x);
  if (bits < 64) u &= (uint64_t(1) << bits) - 1;
  if (is_uint(d)) return static_cast<Real>(u);
  if (bits < 64 && (u >> (bits - 1))) return static_cast<Real>(u) - std::ldexp(1.0L, bits);
  return static_cast<Real>(static_cast<int64_t>(u));
}
// `x` of dtype `from` converted to `to` as the library converts (a float into an integer
// rounds toward zero and saturates, NaN gives 0: GUIDE.md section 11).
Real convert(D from, D to, Real x) {
  if (to == D::boolean) return x != 0;
  if (is_fp(to)) return round_to_float(to, x);
  if (!is_fp(from)) return wrap_int(to, x);
  if (std::isnan(x)) return 0;
  const auto [lo, hi] = int_range(to);
  return std::clamp(std::trunc(x), lo, hi);
}

// One element of the reference: its value and a bound on how far the library's may lie from
// it (rounding of the operations so far; kInf: anything goes, e.g. a comparison of values
// closer than their rounding).
struct Num {
  Real v = 0;
  double e = 0;
};

// ---- the program: statements over variables --------------------------------------------
enum class Op : uint8_t {
  input,
  poison,
  binary,
  unary,
  where,
  clip,
  astype,
  slice,
  transpose,
  reshape,
  reshape_view,
  copy,
  reduce,
  arg,
  cumsum,
  assign,
  fill,
  compound,
  read
};
enum class Bin : uint8_t {
  add,
  sub,
  mul,
  div,
  mod,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  land,
  lor,
  maximum,
  minimum
};
const char* const kBinNames[] = {"add", "sub", "mul", "div", "mod", "eq",      "ne",     "lt",
                                 "le",  "gt",  "ge",  "and", "or",  "maximum", "minimum"};
enum class Un : uint8_t {
  neg,
  lnot,
  abs,
  sign,
  exp,
  sqrt_abs,
  sin,
  cos,
  tanh,
  arctan,
  floor,
  ceil,
  rint,
  round,
  isnan,
  isfinite
};
const char* const kUnNames[] = {"neg",  "not",   "abs",   "sign",    "exp",   "sqrt_abs",
                                "sin",  "cos",   "tanh",  "arctan",  "floor", "ceil",
                                "rint", "round", "isnan", "isfinite"};
enum class Red : uint8_t { sum, prod, min, max, mean, any, all, count_nonzero };
const char* const kRedNames[] = {"sum",  "prod", "min", "max",
                                 "mean", "any",  "all", "count_nonzero"};

// An operand: a variable, or a C++ scalar of a kind.
struct Operand {
  int var = -1;
  ScalarKind kind = ScalarKind::integer;
  Real value = 0;
  bool is_scalar() const { return var < 0; }
};
// One axis of a slice: all, an index, or lo:hi:step (Python's meaning).
struct Cut {
  enum Kind : uint8_t { whole, at, range } kind = whole;
  int64_t lo = 0, hi = 0, step = 1;
};
// Where an input or poisoned array's chunks go.
struct DistSpec {
  enum Kind : uint8_t { fallback, rows, columns, tiles, replicated, centralized } kind = fallback;
  std::vector<int64_t> size;  // rows/columns: one; tiles: one per axis
  int device = 0;
  bool blocked = false;
};

struct Stmt {
  Op op = Op::read;
  int out = -1;  // the variable defined (or written, for assign, fill, compound)
  std::vector<Operand> args;
  int code = 0;  // Bin, Un or Red; compound: Bin (add, sub, mul, div); arg: 1 argmax, 0 argmin
  D dtype = D::f32;
  int axis = -1;  // -1: every axis (flattened for cumsum)
  bool keepdims = false;
  std::vector<Cut> cuts;
  std::vector<int> perm;
  std::vector<int64_t> shape;
  std::vector<Real> values;  // input
  DistSpec dist;
};

// What the generator knows of a variable.
struct VarInfo {
  D dtype = D::f32;
  std::vector<int> syms;  // per axis: 0 for length one, else an extent's symbol
  int base = -1;          // the variable whose storage it is (itself when not a view)
  bool writable = false;  // may be written in place
};

struct Program {
  std::string seed;  // structure:instance
  int devices = 1;
  bool cpu_async = false;
  std::size_t device_memory = 0, host_memory = 0;
  // What the library's automatic distributions start from (fixed, so that a seed replays).
  int task_overhead_us = 10;
  std::size_t bandwidth = std::size_t(1) << 30;
  std::vector<Stmt> stmts;
  std::vector<VarInfo> vars;
};

std::string real_text(Real x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == std::trunc(x) && std::fabs(x) < 1e19L) return fmt::format("{}", static_cast<double>(x));
  return fmt::format("{}", static_cast<double>(x));
}
std::string operand_text(const Operand& o) {
  if (!o.is_scalar()) return fmt::format("v{}", o.var);
  switch (o.kind) {
    case ScalarKind::boolean:
      return o.value != 0 ? "true" : "false";
    case ScalarKind::integer:
      return fmt::format("{}", static_cast<int64_t>(o.value));
    case ScalarKind::floating:
      return fmt::format("{:.2f}", static_cast<double>(o.value));
  }
  return "?";
}
std::string dist_text(const DistSpec& d) {
  std::string s;
  switch (d.kind) {
    case DistSpec::fallback:
      return "default";
    case DistSpec::rows:
      s = fmt::format("rows({})", d.size[0]);
      break;
    case DistSpec::columns:
      s = fmt::format("columns({})", d.size[0]);
      break;
    case DistSpec::tiles:
      s = fmt::format("tiles({{{}}})", fmt::join(d.size, ", "));
      break;
    case DistSpec::replicated:
      return "replicated()";
    case DistSpec::centralized:
      return fmt::format("centralized({})", d.device);
  }
  return d.blocked ? s + ".blocked()" : s;
}
std::string cut_text(const Cut& c) {
  if (c.kind == Cut::whole) return "all";
  if (c.kind == Cut::at) return fmt::format("{}", c.lo);
  return fmt::format("range({}, {}, {})", c.lo, c.hi, c.step);
}
std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("{{{}}}", fmt::join(s, ", "));
}

// The statement as C++-like text, for the report of a failing program.
std::string stmt_text(const Stmt& s) {
  const std::string v = fmt::format("v{}", s.out);
  auto a = [&](int k) { return operand_text(s.args[k]); };
  const std::string axis = s.axis < 0 ? "" : fmt::format(", {}, {}", s.axis, s.keepdims);
  switch (s.op) {
    case Op::input:
      return fmt::format("{} = from_vector<{}>({} values, {}, {})", v, numpy_name(s.dtype),
                         s.values.size(), shape_text(s.shape), dist_text(s.dist));
    case Op::poison:
      return fmt::format("{} = full<{}>({}, poison, {})", v, numpy_name(s.dtype),
                         shape_text(s.shape), dist_text(s.dist));
    case Op::binary:
      return fmt::format("{} = {}({}, {})", v, kBinNames[s.code], a(0), a(1));
    case Op::unary:
      return fmt::format("{} = {}({})", v, kUnNames[s.code], a(0));
    case Op::where:
      return fmt::format("{} = where({}, {}, {})", v, a(0), a(1), a(2));
    case Op::clip:
      return fmt::format("{} = clip({}, {}, {})", v, a(0), a(1), a(2));
    case Op::astype:
      return fmt::format("{} = {}.astype<{}>()", v, a(0), numpy_name(s.dtype));
    case Op::slice: {
      std::vector<std::string> cuts;
      for (const Cut& c : s.cuts) cuts.push_back(cut_text(c));
      return fmt::format("{} = {}.slice({})", v, a(0), fmt::join(cuts, ", "));
    }
    case Op::transpose:
      return fmt::format("{} = transpose({}, {{{}}})", v, a(0), fmt::join(s.perm, ", "));
    case Op::reshape:
      return fmt::format("{} = {}.reshape({})", v, a(0), shape_text(s.shape));
    case Op::reshape_view:
      return fmt::format("{} = {}.reshape_in_place({})", v, a(0), shape_text(s.shape));
    case Op::copy:
      return fmt::format("{} = {}.copy()", v, a(0));
    case Op::reduce:
      return fmt::format("{} = {}({}{})", v, kRedNames[s.code], a(0), axis);
    case Op::arg:
      return fmt::format("{} = {}({}{})", v, s.code ? "argmax" : "argmin", a(0), axis);
    case Op::cumsum:
      return fmt::format("{} = cumsum({}{})", v, a(0),
                         s.axis < 0 ? "" : fmt::format(", {}", s.axis));
    case Op::assign:
      return fmt::format("{}.assign({})", v, a(0));
    case Op::fill:
      return fmt::format("{}.fill({})", v, a(0));
    case Op::compound: {
      const char* sym[] = {"+=", "-=", "*=", "/="};
      return fmt::format("{} {} {}", v, sym[std::min(s.code, 3)], a(0));
    }
    case Op::read:
      return fmt::format("read({})", v);
  }
  return "?";
}

std::string program_text(const Program& p) {
  std::string t = fmt::format(
      "program {} on {} device(s){}, device memory {}, host memory {}, {} us and "
      "{} B/s a task\n",
      p.seed, p.devices, p.cpu_async ? " (cpu_async)" : "", p.device_memory, p.host_memory,
      p.task_overhead_us, p.bandwidth);
  for (const Stmt& s : p.stmts) t += "  " + stmt_text(s) + ";\n";
  return t;
}

// ---- the generator ------------------------------------------------------------------------
// Structure (ops, dtypes, ranks, which axes have length one, kinds of cut) comes from one
// generator, everything else (extents, positions, values, distributions, devices, memory)
// from the other, so that a structure's kernels are the same in every instance.
class Generator {
 public:
  Generator(uint64_t structure, uint64_t instance, bool numpy)
      : s_(structure * 0x9E3779B97F4A7C15ull + 17),
        d_(instance * 0xD1B54A32D192ED03ull + 5),
        numpy_(numpy) {
    p_.seed = fmt::format("{}:{}", structure, instance);
  }

  Program make() {
    choose_base();
    choose_machine();
    const int inputs = spick(2, 4);
    for (int i = 0; i < inputs; ++i) add_input();
    const int stmts = spick(5, 12);
    for (int i = 0; i < stmts; ++i) add_statement();
    if (tight_) size_memory();
    return std::move(p_);
  }

 private:
  std::mt19937_64 s_, d_;
  bool numpy_;
  Program p_;
  std::vector<int64_t> ext_{1};         // per symbol (symbol 0: length one)
  std::vector<bool> empty_sym_{false};  // structural: the symbol's extent is 0
  int rank_ = 0;
  bool tight_ = false;  // memory limits that spill

  int spick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(s_); }
  int64_t dpick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(d_);
  }
  bool schance(int one_in) { return spick(1, one_in) == 1; }
  bool dchance(int one_in) { return dpick(1, one_in) == 1; }

  int new_sym(int64_t extent, bool empty) {
    ext_.push_back(extent);
    empty_sym_.push_back(empty);
    return static_cast<int>(ext_.size()) - 1;
  }
  std::vector<int64_t> shape_of(const std::vector<int>& syms) const {
    std::vector<int64_t> s;
    for (int k : syms) s.push_back(ext_[k]);
    return s;
  }
  bool has_empty(const std::vector<int>& syms) const {
    for (int k : syms)
      if (empty_sym_[k]) return true;
    return false;
  }
  D pick_dtype() {
    D d;
    do d = kAllDtypes[spick(0, 12)];
    while (numpy_ && d == D::bf16);
    return d;
  }

  void choose_base() {
    const int r = spick(0, 10);
    rank_ = r == 0 ? 0 : r <= 3 ? 1 : r <= 7 ? 2 : 3;
    const bool empty = rank_ > 0 && schance(12);
    int64_t budget = 3000;
    for (int a = 0; a < rank_; ++a) {
      const int64_t most = rank_ == 1 ? budget : rank_ == 2 ? (a == 0 ? 60 : budget) : 14;
      const int64_t e = dpick(2, std::max<int64_t>(2, most));
      budget = std::max<int64_t>(2, budget / e);
      new_sym(empty && a == 0 ? 0 : e, empty && a == 0);
    }
  }
  void choose_machine() {
    p_.devices = static_cast<int>(dpick(1, 3));
    tight_ = dchance(3);
    if (tight_) p_.cpu_async = dchance(2);
    // From every array on one device (fast devices) to every array over all of them.
    p_.task_overhead_us = static_cast<int>(dpick(1, 20));
    p_.bandwidth = std::size_t(1) << dpick(10, 32);
  }
  // The bytes an array the program distributes itself (rows, columns, tiles) takes on the
  // devices: every chunk a block of 512-byte steps (tiles of 145 8-byte elements take 1536
  // each, a third more than their elements: seed 250001:608468767170 needed 56 KiB of 55).
  static int64_t held_bytes(const Stmt& s) {
    const DistSpec& d = s.dist;
    if (d.kind != DistSpec::rows && d.kind != DistSpec::columns && d.kind != DistSpec::tiles)
      return 0;
    std::vector<int64_t> tile = s.shape;
    for (std::size_t a = 0; a < tile.size(); ++a) {
      const bool cut = d.kind == DistSpec::tiles || (d.kind == DistSpec::rows && a == 0) ||
                       (d.kind == DistSpec::columns && a == 1);
      const std::size_t k = d.kind == DistSpec::tiles ? a : 0;
      if (cut && k < d.size.size()) tile[a] = std::min(tile[a], std::max<int64_t>(1, d.size[k]));
    }
    int64_t chunks = 1, elements = 1;
    for (std::size_t a = 0; a < tile.size(); ++a) {
      if (s.shape[a] == 0) return 0;
      chunks *= (s.shape[a] + tile[a] - 1) / tile[a];
      elements *= tile[a];
    }
    return chunks * ((elements * 8 + 511) / 512 * 512);
  }
  // Tight memory: a task's arrays fit, the program's do not. Sized once the program is
  // made, from its largest variable (broadcasting can make one larger than every input:
  // (846, 1) against (846,) is 846 x 846).
  void size_memory() {
    int64_t volume = 1;
    for (const VarInfo& v : p_.vars) {
      int64_t n = 1;
      for (int k : v.syms) n *= std::max<int64_t>(1, ext_[k]);
      volume = std::max(volume, n);
    }
    // Where the rounding at most doubles an input (tiles of 64 elements and more), its
    // blocks count; finer tiles keep the bound of their elements, as before, so that the
    // limits stay tight enough for some programs to spill.
    int64_t held = volume;
    for (const Stmt& s : p_.stmts)
      if (const int64_t h = held_bytes(s) / 8; h <= 2 * volume) held = std::max(held, h);
    volume = held;
    const std::size_t largest = static_cast<std::size_t>(volume) * 8 + 4096;
    p_.device_memory = 2 * largest + (4 << 10);
    p_.host_memory = 16 * largest + (256 << 10);
  }

  int add_var(VarInfo v) {
    if (v.base < 0) v.base = static_cast<int>(p_.vars.size());
    p_.vars.push_back(v);
    return static_cast<int>(p_.vars.size()) - 1;
  }
  Stmt& push(Op op, int out) {
    p_.stmts.push_back(Stmt{});
    Stmt& s = p_.stmts.back();
    s.op = op;
    s.out = out;
    return s;
  }

  // ---- inputs and values ----
  Real random_value(D d) {
    if (d == D::boolean) return dchance(2);
    if (is_uint(d)) return dpick(0, 40);
    if (is_sint(d)) return dpick(-20, 20);
    if (dchance(150)) {
      const Real specials[] = {std::numeric_limits<Real>::quiet_NaN(),
                               std::numeric_limits<Real>::infinity(),
                               -std::numeric_limits<Real>::infinity(), 0};
      return specials[dpick(0, 3)];
    }
    const Real x = std::uniform_real_distribution<double>(0.5, 2.0)(d_);
    return round_to_float(d, dchance(2) ? x : -x);
  }
  DistSpec random_dist(const std::vector<int64_t>& shape) {
    DistSpec ds;
    const int rank = static_cast<int>(shape.size());
    auto extent = [&](int a) { return std::max<int64_t>(1, shape[a]); };
    switch (dpick(0, rank == 0 ? 2 : rank == 1 ? 5 : 6)) {
      case 0:
        return ds;
      case 1:
        ds.kind = DistSpec::replicated;
        return ds;
      case 2:
        ds.kind = DistSpec::centralized;
        ds.device = static_cast<int>(dpick(0, 2));
        return ds;
      case 3:
        ds.kind = DistSpec::rows;
        ds.size = {dpick(1, extent(0))};
        break;
      case 4:
      case 5:
        ds.kind = DistSpec::tiles;
        for (int a = 0; a < rank; ++a) ds.size.push_back(dpick(1, extent(a)));
        break;
      default:
        ds.kind = DistSpec::columns;
        ds.size = {dpick(1, extent(1))};
    }
    ds.blocked = dchance(4);
    return ds;
  }
  void add_input() {
    VarInfo v;
    v.dtype = pick_dtype();
    const int dropped = rank_ > 0 && schance(4) ? spick(1, rank_) : 0;
    for (int a = 1 + dropped; a <= rank_; ++a) v.syms.push_back(schance(4) ? 0 : a);
    v.writable = true;
    Stmt& s = push(Op::input, -1);
    s.dtype = v.dtype;
    s.shape = shape_of(v.syms);
    int64_t n = 1;
    for (int64_t e : s.shape) n *= e;
    for (int64_t i = 0; i < n; ++i) s.values.push_back(random_value(v.dtype));
    s.dist = random_dist(s.shape);
    s.out = add_var(v);
  }

  // ---- operands ----
  int any_var() { return spick(0, static_cast<int>(p_.vars.size()) - 1); }
  static bool broadcastable(const std::vector<int>& a, const std::vector<int>& b) {
    for (std::size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
      const int x = a[a.size() - k], y = b[b.size() - k];
      if (x != y && x != 0 && y != 0) return false;
    }
    return true;
  }
  // Whether `value` broadcasts to `target` (NumPy's assignment).
  static bool fits_into(const std::vector<int>& value, const std::vector<int>& target) {
    if (value.size() > target.size()) return false;
    for (std::size_t k = 1; k <= value.size(); ++k) {
      const int x = value[value.size() - k];
      if (x != 0 && x != target[target.size() - k]) return false;
    }
    return true;
  }
  static std::vector<int> broadcast(const std::vector<int>& a, const std::vector<int>& b) {
    const std::vector<int>& longer = a.size() >= b.size() ? a : b;
    const std::vector<int>& shorter = a.size() >= b.size() ? b : a;
    std::vector<int> out = longer;
    for (std::size_t k = 1; k <= shorter.size(); ++k) {
      int& o = out[out.size() - k];
      if (o == 0) o = shorter[shorter.size() - k];
    }
    return out;
  }
  // A variable that broadcasts with `syms` (and passes `ok`), or -1.
  int partner(const std::vector<int>& syms, const std::function<bool(const VarInfo&)>& ok) {
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(p_.vars.size()); ++i)
      if (broadcastable(syms, p_.vars[i].syms) && ok(p_.vars[i])) c.push_back(i);
    return c.empty() ? -1 : c[spick(0, static_cast<int>(c.size()) - 1)];
  }
  // A scalar of `kind` that fits an array of dtype `d`.
  Operand scalar(ScalarKind kind, D d) {
    Operand o;
    o.kind = kind;
    if (kind == ScalarKind::boolean) {
      o.value = dchance(2);
    } else if (kind == ScalarKind::integer) {
      o.value = is_uint(d) ? dpick(0, 5) : dpick(-3, 5);
    } else {
      const double f[] = {0.5, 1.5, -2.25, 3.0, 0.75, -1.0};
      o.value = f[dpick(0, 5)];
    }
    return o;
  }
  ScalarKind scalar_kind_for(D d) {
    const int k = spick(0, 5);
    if (k == 0) return ScalarKind::boolean;
    if (k <= 2 && !is_fp(d)) return ScalarKind::integer;
    return k <= 3 ? ScalarKind::integer : ScalarKind::floating;
  }
  D operand_dtype(const Operand& o) const { return p_.vars[o.var].dtype; }
  // The dtype two operands promote to.
  D promoted(const Operand& a, const Operand& b) const {
    if (!a.is_scalar() && !b.is_scalar()) return ref_promote(operand_dtype(a), operand_dtype(b));
    if (a.is_scalar()) return ref_promote_scalar(operand_dtype(b), a.kind);
    return ref_promote_scalar(operand_dtype(a), b.kind);
  }
  std::vector<int> syms_of(const Operand& o) const {
    return o.is_scalar() ? std::vector<int>{} : p_.vars[o.var].syms;
  }

  // ---- statements ----
  void add_statement() {
    for (int tries = 0; tries < 20; ++tries) {
      const int k = spick(0, 99);
      const bool made = k < 28   ? add_binary()
                        : k < 39 ? add_unary()
                        : k < 44 ? add_where()
                        : k < 47 ? add_clip()
                        : k < 52 ? add_astype()
                        : k < 60 ? add_slice(any_var()) >= 0
                        : k < 64 ? add_transpose()
                        : k < 67 ? add_reshape()
                        : k < 69 ? add_copy()
                        : k < 77 ? add_reduce()
                        : k < 80 ? add_arg()
                        : k < 83 ? add_cumsum()
                        : k < 88 ? add_assign()
                        : k < 90 ? add_fill()
                        : k < 95 ? add_compound()
                        : k < 98 ? add_read()
                                 : add_poison();
      if (made) return;
    }
  }

  static D binary_result(Bin op, D p) {
    switch (op) {
      case Bin::add:
      case Bin::mul:
      case Bin::maximum:
      case Bin::minimum:
        return p;
      case Bin::sub:
      case Bin::mod:
        return p == D::boolean ? D::i8 : p;
      case Bin::div:
        return is_fp(p) ? p : D::f64;
      default:
        return D::boolean;
    }
  }
  bool add_binary() {
    const Bin op = static_cast<Bin>(spick(0, 14));
    Operand x{any_var()}, y;
    if (schance(3)) {
      y = scalar(scalar_kind_for(operand_dtype(x)), operand_dtype(x));
    } else {
      y.var = partner(p_.vars[x.var].syms, [](const VarInfo&) { return true; });
      if (y.var < 0) return false;
    }
    if (schance(4)) std::swap(x, y);
    const D p = promoted(x, y);
    if (numpy_ && op == Bin::sub && p == D::boolean) return false;  // NumPy: no bool -
    VarInfo v;
    v.dtype = binary_result(op, p);
    v.syms = broadcast(syms_of(x), syms_of(y));
    Stmt& s = push(Op::binary, -1);
    s.code = static_cast<int>(op);
    s.args = {x, y};
    s.out = add_var(v);
    return true;
  }
  static D unary_result(Un op, D d) {
    switch (op) {
      case Un::neg:
      case Un::abs:
      case Un::sign:
        return d;
      case Un::lnot:
      case Un::isnan:
      case Un::isfinite:
        return D::boolean;
      default:
        return ref_float_of(d);
    }
  }
  bool add_unary() {
    const Un op = static_cast<Un>(spick(0, 15));
    const int x = any_var();
    const D d = p_.vars[x].dtype;
    if (d == D::boolean && (op == Un::neg || op == Un::sign)) return false;
    VarInfo v;
    v.dtype = unary_result(op, d);
    v.syms = p_.vars[x].syms;
    Stmt& s = push(Op::unary, -1);
    s.code = static_cast<int>(op);
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  bool add_where() {
    std::vector<int> conds;
    for (int i = 0; i < static_cast<int>(p_.vars.size()); ++i)
      if (p_.vars[i].dtype == D::boolean) conds.push_back(i);
    if (conds.empty()) return false;
    const int c = conds[spick(0, static_cast<int>(conds.size()) - 1)];
    Operand x{partner(p_.vars[c].syms, [](const VarInfo&) { return true; })}, y;
    if (x.var < 0) return false;
    const auto both = broadcast(p_.vars[c].syms, p_.vars[x.var].syms);
    if (schance(2)) {
      y = scalar(scalar_kind_for(operand_dtype(x)), operand_dtype(x));
    } else {
      y.var = partner(both, [](const VarInfo&) { return true; });
      if (y.var < 0) return false;
    }
    VarInfo v;
    v.dtype = promoted(x, y);
    v.syms = broadcast(both, syms_of(y));
    Stmt& s = push(Op::where, -1);
    s.args = {Operand{c}, x, y};
    s.out = add_var(v);
    return true;
  }
  bool add_clip() {
    const int x = any_var();
    const D d = p_.vars[x].dtype;
    if (d == D::boolean) return false;
    const ScalarKind kind = is_fp(d) || schance(4) ? ScalarKind::floating : ScalarKind::integer;
    Operand lo = scalar(kind, d), hi = scalar(kind, d);
    if (lo.value > hi.value) std::swap(lo, hi);
    VarInfo v = p_.vars[x];
    v.dtype = ref_promote_scalar(d, kind);
    v.base = -1;
    v.writable = false;
    Stmt& s = push(Op::clip, -1);
    s.args = {Operand{x}, lo, hi};
    s.out = add_var(v);
    return true;
  }
  bool add_astype() {
    const int x = any_var();
    VarInfo v = p_.vars[x];
    v.dtype = pick_dtype();
    v.base = -1;
    v.writable = true;
    Stmt& s = push(Op::astype, -1);
    s.dtype = v.dtype;
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  // A cut of an axis of symbol `sym` whose result keeps the symbol's kind (length one, empty,
  // or at least two).
  Cut random_cut(int sym, std::vector<int>& syms) {
    Cut c;
    const int64_t e = ext_[sym];
    const int kind = spick(0, 5);
    if (sym == 0) {
      if (kind < 2)
        c.kind = Cut::at, c.lo = dchance(2) ? 0 : -1;
      else
        syms.push_back(0);
      return c;
    }
    if (empty_sym_[sym] || kind < 2) {
      syms.push_back(sym);
      return c;
    }
    if (kind == 2) {
      c.kind = Cut::at;
      c.lo = dpick(-e, e - 1);
      return c;
    }
    c.kind = Cut::range;
    const int64_t mag = e >= 5 && dchance(2) ? 2 : 1;
    if (kind == 3) {  // backwards
      const int64_t start = dpick(mag, e - 1), stop = dpick(-1, start - mag - 1);
      c.step = -mag;
      c.lo = dchance(3) ? start - e : start;
      c.hi = stop < 0 ? -(e + 1) : stop;
    } else {
      const int64_t lo = dpick(0, e - mag - 1), hi = dpick(lo + mag + 1, e);
      c.step = mag;
      c.lo = lo;
      c.hi = hi < e && dchance(3) ? hi - e : hi;
    }
    syms.push_back(new_sym(slice_length(c, e), false));
    return c;
  }
  int add_slice(int x) {
    const VarInfo& from = p_.vars[x];
    if (from.syms.empty()) return -1;
    VarInfo v = from;
    v.syms.clear();
    std::vector<Cut> cuts;
    for (int k : from.syms) cuts.push_back(random_cut(k, v.syms));
    Stmt& s = push(Op::slice, -1);
    s.args = {Operand{x}};
    s.cuts = cuts;
    s.out = add_var(v);
    return s.out;
  }
  bool add_transpose() {
    const int x = any_var();
    const int rank = static_cast<int>(p_.vars[x].syms.size());
    if (rank < 2) return false;
    std::vector<int> perm(rank);
    for (int a = 0; a < rank; ++a) perm[a] = a;
    std::shuffle(perm.begin(), perm.end(), s_);
    VarInfo v = p_.vars[x];
    for (int a = 0; a < rank; ++a) v.syms[a] = p_.vars[x].syms[perm[a]];
    Stmt& s = push(Op::transpose, -1);
    s.args = {Operand{x}};
    s.perm = perm;
    s.out = add_var(v);
    return true;
  }
  bool add_reshape() {
    const int x = any_var();
    const VarInfo& from = p_.vars[x];
    const bool in_place = from.base == x && schance(2);
    const bool flatten = from.syms.size() >= 2 || (from.syms.size() == 1 && schance(2));
    if (!flatten && from.syms.size() >= 3) return false;
    VarInfo v = from;
    if (flatten) {
      bool all_one = true;
      int64_t n = 1;
      for (int k : from.syms) all_one = all_one && k == 0, n *= ext_[k];
      v.syms = {all_one ? 0 : new_sym(n, has_empty(from.syms))};
    } else {
      v.syms.insert(v.syms.begin(), 0);
    }
    if (!in_place) v.base = -1, v.writable = true;
    Stmt& s = push(in_place ? Op::reshape_view : Op::reshape, -1);
    s.args = {Operand{x}};
    s.shape = shape_of(v.syms);
    s.out = add_var(v);
    return true;
  }
  bool add_copy() {
    const int x = any_var();
    VarInfo v = p_.vars[x];
    v.base = -1;
    v.writable = true;
    Stmt& s = push(Op::copy, -1);
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  // An axis to reduce or scan (-1: all).
  int reduction_axis(const VarInfo& x) {
    const int rank = static_cast<int>(x.syms.size());
    if (rank == 0 || schance(2)) return -1;
    return spick(0, rank - 1);
  }
  static std::vector<int> reduced_syms(const std::vector<int>& syms, int axis, bool keepdims) {
    if (axis < 0) return {};
    std::vector<int> out = syms;
    if (keepdims)
      out[axis] = 0;
    else
      out.erase(out.begin() + axis);
    return out;
  }

 public:
  static D reduce_result(Red op, D d) {
    switch (op) {
      case Red::sum:
      case Red::prod:
        return is_fp(d) ? d : is_uint(d) ? D::u64 : D::i64;
      case Red::min:
      case Red::max:
        return d;
      case Red::mean:
        return is_fp(d) ? d : D::f64;
      case Red::count_nonzero:
        return D::i64;
      default:
        return D::boolean;
    }
  }

 private:
  bool add_reduce() {
    const Red op = static_cast<Red>(spick(0, 7));
    const int x = any_var();
    const VarInfo& from = p_.vars[x];
    if ((op == Red::min || op == Red::max) && has_empty(from.syms)) return false;
    const int axis = reduction_axis(from);
    VarInfo v;
    v.dtype = reduce_result(op, from.dtype);
    const bool keepdims = axis >= 0 && schance(3);
    v.syms = reduced_syms(from.syms, axis, keepdims);
    Stmt& s = push(Op::reduce, -1);
    s.code = static_cast<int>(op);
    s.axis = axis;
    s.keepdims = keepdims;
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  bool add_arg() {
    const int x = any_var();
    const VarInfo& from = p_.vars[x];
    if (has_empty(from.syms)) return false;
    const int axis = reduction_axis(from);
    VarInfo v;
    v.dtype = D::i64;
    const bool keepdims = axis >= 0 && schance(3);
    v.syms = reduced_syms(from.syms, axis, keepdims);
    Stmt& s = push(Op::arg, -1);
    s.code = spick(0, 1);
    s.axis = axis;
    s.keepdims = keepdims;
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  bool add_cumsum() {
    const int x = any_var();
    const VarInfo& from = p_.vars[x];
    const int axis = reduction_axis(from);
    VarInfo v;
    v.dtype = reduce_result(Red::sum, from.dtype);
    if (axis >= 0) {
      v.syms = from.syms;
    } else {
      bool all_one = true;
      int64_t n = 1;
      for (int k : from.syms) all_one = all_one && k == 0, n *= ext_[k];
      v.syms = {all_one ? 0 : new_sym(n, has_empty(from.syms))};
    }
    Stmt& s = push(Op::cumsum, -1);
    s.axis = axis;
    s.args = {Operand{x}};
    s.out = add_var(v);
    return true;
  }
  // A variable to write in place: a writable one, or a new view of it.
  int write_target() {
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(p_.vars.size()); ++i)
      if (p_.vars[i].writable) c.push_back(i);
    if (c.empty()) return -1;
    const int t = c[spick(0, static_cast<int>(c.size()) - 1)];
    if (schance(2)) {
      const int view = add_slice(t);
      if (view >= 0) return view;
    }
    return t;
  }
  Operand value_for(int target, bool scalar_ok) {
    const D d = p_.vars[target].dtype;
    if (scalar_ok && schance(3)) {
      const ScalarKind k = d == D::boolean ? ScalarKind::boolean
                           : is_fp(d)      ? ScalarKind::floating
                                           : ScalarKind::integer;
      return scalar(k, d);
    }
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(p_.vars.size()); ++i)
      if (fits_into(p_.vars[i].syms, p_.vars[target].syms)) c.push_back(i);
    if (c.empty()) return Operand{-2};
    return Operand{c[spick(0, static_cast<int>(c.size()) - 1)]};
  }
  bool add_assign() {
    const int t = write_target();
    if (t < 0) return false;
    const Operand value = value_for(t, true);
    if (value.var == -2) return false;
    Stmt& s = push(Op::assign, t);
    s.args = {value};
    return true;
  }
  bool add_fill() {
    const int t = write_target();
    if (t < 0) return false;
    const D d = p_.vars[t].dtype;
    Operand value = scalar(d == D::boolean ? ScalarKind::boolean
                           : is_fp(d)      ? ScalarKind::floating
                                           : ScalarKind::integer,
                           d);
    Stmt& s = push(Op::fill, t);
    s.args = {value};
    return true;
  }
  // Whether `target op= value` is allowed: NumPy's same_kind (a float result into an integer
  // array is not; bool and integer results stay in their kind).
  bool compound_allowed(D target, Bin op, D result) const {
    if (is_fp(target)) return true;
    if (op == Bin::div) return false;
    if (target == D::boolean) return result == D::boolean;
    return is_int(result) && (is_sint(target) || is_uint(result));
  }
  bool add_compound() {
    const int t = write_target();
    if (t < 0) return false;
    const Bin op = static_cast<Bin>(spick(0, 3));
    const Operand value = value_for(t, true);
    if (value.var == -2) return false;
    const D p = promoted(Operand{t}, value);
    if (numpy_ && op == Bin::sub && p == D::boolean) return false;
    if (!compound_allowed(p_.vars[t].dtype, op, binary_result(op, p))) return false;
    Stmt& s = push(Op::compound, t);
    s.code = static_cast<int>(op);
    s.args = {value};
    return true;
  }
  bool add_read() {
    push(Op::read, any_var());
    return true;
  }
  bool add_poison() {
    VarInfo v;
    v.dtype = pick_dtype();
    v.syms = p_.vars[any_var()].syms;
    v.writable = true;
    Stmt& s = push(Op::poison, -1);
    s.dtype = v.dtype;
    s.shape = shape_of(v.syms);
    s.dist = random_dist(s.shape);
    s.out = add_var(v);
    return true;
  }

 public:
  // Python's slice(lo, hi, step).indices(e): the number of elements taken.
  static int64_t slice_length(const Cut& c, int64_t e) { return slice_bounds(c, e).second; }
  // The first index and the count of a range cut on an axis of extent e.
  static std::pair<int64_t, int64_t> slice_bounds(const Cut& c, int64_t e) {
    auto clampi = [&](int64_t i, int64_t lo, int64_t hi) {
      if (i < 0) i += e;
      return std::clamp(i, lo, hi);
    };
    if (c.step > 0) {
      const int64_t lo = clampi(c.lo, 0, e), hi = clampi(c.hi, 0, e);
      return {lo, hi > lo ? (hi - lo + c.step - 1) / c.step : 0};
    }
    const int64_t lo = clampi(c.lo, -1, e - 1), hi = clampi(c.hi, -1, e - 1);
    return {lo, lo > hi ? (lo - hi - c.step - 1) / -c.step : 0};
  }
};

// ---- the sequential reference -------------------------------------------------------------
// An array: a dtype and shape over shared storage, seen through an offset and strides (views
// share the storage as the library's do).
struct Store {
  std::vector<Num> data;
};
struct HostArray {
  D dtype = D::f32;
  std::vector<int64_t> shape;
  std::shared_ptr<Store> store;
  int64_t offset = 0;
  std::vector<int64_t> strides;

  int64_t size() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
};

HostArray make_host(D dtype, std::vector<int64_t> shape) {
  HostArray a{dtype, std::move(shape), std::make_shared<Store>(), 0, {}};
  a.strides.assign(a.shape.size(), 1);
  for (int k = static_cast<int>(a.shape.size()) - 2; k >= 0; --k)
    a.strides[k] = a.strides[k + 1] * a.shape[k + 1];
  a.store->data.resize(static_cast<std::size_t>(a.size()));
  return a;
}
// The multi-index of row-major element number i of `shape`.
std::vector<int64_t> index_of(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int k = static_cast<int>(shape.size()) - 1; k >= 0; --k) {
    idx[k] = shape[k] ? i % shape[k] : 0;
    i = shape[k] ? i / shape[k] : 0;
  }
  return idx;
}
// The storage position of `idx` in `a`; an operand of lower rank or with axes of length one
// is read broadcast (aligned from the last axis).
int64_t position(const HostArray& a, const std::vector<int64_t>& idx) {
  int64_t pos = a.offset;
  const std::size_t skip = idx.size() - a.shape.size();
  for (std::size_t k = 0; k < a.shape.size(); ++k)
    if (a.shape[k] != 1) pos += idx[skip + k] * a.strides[k];
  return pos;
}
Num& at(HostArray& a, const std::vector<int64_t>& idx) {
  return a.store->data[static_cast<std::size_t>(position(a, idx))];
}
Num at(const HostArray& a, const std::vector<int64_t>& idx) {
  return a.store->data[static_cast<std::size_t>(position(a, idx))];
}
// Every element in row-major order.
std::vector<Num> elements(const HostArray& a) {
  std::vector<Num> out(static_cast<std::size_t>(a.size()));
  for (int64_t i = 0; i < a.size(); ++i) out[i] = at(a, index_of(i, a.shape));
  return out;
}
std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out = a.size() >= b.size() ? a : b;
  const auto& shorter = a.size() >= b.size() ? b : a;
  for (std::size_t k = 1; k <= shorter.size(); ++k) {
    int64_t& o = out[out.size() - k];
    if (o == 1) o = shorter[shorter.size() - k];
  }
  return out;
}

// A result of dtype `d` computed as `exact` in d's compute type, whose operands were within
// `e` of theirs: adds `ulps` roundings, and gives up (kInf) where an uncertain value is near
// d's overflow.
Num rounded(D d, Real exact, double e, double ulps = 1) {
  Num n{round_to_float(d, exact), e};
  n.e += ulps * (dtype_eps(d) * static_cast<double>(std::fabs(n.v)) +
                 dtype_eps(compute_dtype(d)) * static_cast<double>(std::fabs(exact)));
  if (e > 0 && (!std::isfinite(n.v) || std::fabs(n.v) + n.e >= dtype_max(d))) n.e = kInf;
  if (std::isnan(n.e)) n.e = kInf;
  return n;
}
bool truthy(Real x) {
  return x != 0;
}
// Whether an element may be zero or not, given its error (the library's value lies within
// twice the bound of the reference's).
bool unsure_truth(const Num& n) {
  return n.e > 0 && std::fabs(n.v) <= 2 * n.e;
}
// An element converted from dtype `from` to `to`, as the library converts.
Num convert_num(D from, D to, Num n) {
  if (from == to) return n;
  if (to == D::boolean) return Num{Real(n.v != 0), unsure_truth(n) ? kInf : 0};
  if (is_fp(to)) {
    const Real r = round_to_float(to, n.v);
    return r == n.v || std::isnan(r) ? Num{r, n.e} : rounded(to, n.v, n.e);
  }
  const Real v = convert(from, to, n.v);
  if (n.e == 0) return Num{v, 0};
  const Real up = convert(from, to, n.v + 2 * n.e), down = convert(from, to, n.v - 2 * n.e);
  return Num{v, static_cast<double>(std::max(std::fabs(up - v), std::fabs(down - v)))};
}
// Computes `f` in the library's compute type for `d` (float or double).
template <class F>
Real in_compute_type(D d, F f) {
  if (compute_dtype(d) == D::f32) return f(float{});
  return f(double{});
}

// An integer value's two's complement bits.
uint64_t bits_of(Real a) {
  return a < 0 ? static_cast<uint64_t>(static_cast<int64_t>(a)) : static_cast<uint64_t>(a);
}
Real int_binary(Bin op, D p, Real a, Real b) {
  const uint64_t ua = bits_of(a), ub = bits_of(b);
  switch (op) {
    case Bin::add:
      return p == D::boolean ? Real(a != 0 || b != 0) : wrap_int(p, Real(ua + ub));
    case Bin::sub:
      return wrap_int(p, Real(ua - ub));
    case Bin::mul:
      return p == D::boolean ? Real(a != 0 && b != 0) : wrap_int(p, Real(ua * ub));
    case Bin::mod: {
      if (b == 0) return 0;
      Real r = std::fmod(a, b);
      if (r != 0 && (r < 0) != (b < 0)) r += b;
      return wrap_int(p, r);
    }
    case Bin::maximum:
      return std::max(a, b);
    case Bin::minimum:
      return std::min(a, b);
    default:
      return 0;
  }
}
template <class C>
Real float_binary(Bin op, C a, C b) {
  switch (op) {
    case Bin::add:
      return a + b;
    case Bin::sub:
      return a - b;
    case Bin::mul:
      return a * b;
    case Bin::div:
      return a / b;
    case Bin::mod: {
      C r = std::fmod(a, b);
      if (r != 0 && (r < 0) != (b < 0)) r += b;
      return r;
    }
    case Bin::maximum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case Bin::minimum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    default:
      return 0;
  }
}
bool compare(Bin op, Real a, Real b) {
  switch (op) {
    case Bin::eq:
      return a == b;
    case Bin::ne:
      return a != b;
    case Bin::lt:
      return a < b;
    case Bin::le:
      return a <= b;
    case Bin::gt:
      return a > b;
    case Bin::ge:
      return a >= b;
    case Bin::land:
      return truthy(a) && truthy(b);
    default:
      return truthy(a) || truthy(b);
  }
}
// How far a result of `op` may move when its operands move by ea and eb.
double propagated(Bin op, Real a, Real b, double ea, double eb, Real r) {
  if (ea == 0 && eb == 0) return 0;
  const double fa = static_cast<double>(std::fabs(a)), fb = static_cast<double>(std::fabs(b));
  switch (op) {
    case Bin::add:
    case Bin::sub:
      return ea + eb;
    case Bin::mul:
      return fa * eb + fb * ea + ea * eb;
    case Bin::div:
      return fb > eb ? (ea + static_cast<double>(std::fabs(r)) * eb) / (fb - eb) : kInf;
    case Bin::maximum:
    case Bin::minimum:
      return std::max(ea, eb);
    default:
      return kInf;  // mod: not continuous
  }
}
// One element of a binary operation computed in dtype `p` (operands already of dtype p).
Num binary_element(Bin op, D p, D result, Num a, Num b) {
  if (op >= Bin::eq && op <= Bin::lor) {
    const bool r = compare(op, a.v, b.v);
    bool sure = a.e == 0 && b.e == 0;
    if (!sure && op <= Bin::ge)
      sure = std::fabs(a.v - b.v) > 2 * (a.e + b.e) && !std::isnan(a.v - b.v);
    if (!sure && op > Bin::ge) sure = !unsure_truth(a) && !unsure_truth(b);
    return Num{Real(r), sure ? 0 : kInf};
  }
  if (!is_fp(result)) {
    const double e = propagated(op, a.v, b.v, a.e, b.e, 0);
    return Num{int_binary(op, result, a.v, b.v), e};
  }
  const Real r = in_compute_type(result, [&](auto c) {
    using C = decltype(c);
    return float_binary<C>(op, static_cast<C>(a.v), static_cast<C>(b.v));
  });
  return rounded(result, r, propagated(op, a.v, b.v, a.e, b.e, r));
}

template <class C>
Real float_unary(Un op, C x) {
  switch (op) {
    case Un::exp:
      return std::exp(x);
    case Un::sqrt_abs:
      return std::sqrt(x);
    case Un::sin:
      return std::sin(x);
    case Un::cos:
      return std::cos(x);
    case Un::tanh:
      return std::tanh(x);
    case Un::arctan:
      return std::atan(x);
    case Un::floor:
      return std::floor(x);
    case Un::ceil:
      return std::ceil(x);
    case Un::rint:
      return std::nearbyint(x);
    case Un::round:
      return std::round(x);  // ties away from zero (the library's rule)
    default:
      return x;
  }
}
// The spread of a unary function over [x - e, x + e] (the functions here are monotonic or
// 1-Lipschitz).
double unary_spread(Un op, D d, Real x, double e, Real r) {
  if (e == 0) return 0;
  if (op == Un::sin || op == Un::cos || op == Un::tanh || op == Un::arctan) return e;
  auto f = [&](Real y) {
    return in_compute_type(d, [&](auto c) {
      using C = decltype(c);
      return float_unary<C>(op, static_cast<C>(op == Un::sqrt_abs ? std::max<Real>(y, 0) : y));
    });
  };
  const double spread =
      static_cast<double>(std::max(std::fabs(f(x + e) - r), std::fabs(f(x - e) - r)));
  return std::isnan(spread) ? kInf : spread;
}
Num unary_element(Un op, D from, D result, Num x) {
  switch (op) {
    case Un::neg:
      return is_fp(result) ? Num{-x.v, x.e} : Num{int_binary(Bin::sub, result, 0, x.v), x.e};
    case Un::abs:
      if (result == D::boolean) return x;
      return is_fp(result) ? Num{std::fabs(x.v), x.e} : Num{wrap_int(result, std::fabs(x.v)), x.e};
    case Un::sign: {
      const Real s = std::isnan(x.v) ? x.v : Real((x.v > 0) - (x.v < 0));
      return Num{s, unsure_truth(x) ? kInf : 0};
    }
    case Un::lnot:
      return Num{Real(x.v == 0), unsure_truth(x) ? kInf : 0};
    case Un::isnan:
      return Num{Real(std::isnan(x.v)), x.e == kInf ? kInf : 0};
    case Un::isfinite:
      return Num{Real(std::isfinite(x.v)), x.e == kInf ? kInf : 0};
    default:
      break;
  }
  // A math function: the operand converted to the result's float dtype first.
  Num y = convert_num(from, result, x);
  if (op == Un::sqrt_abs) y.v = std::fabs(y.v);
  const Real r = in_compute_type(result, [&](auto c) {
    using C = decltype(c);
    return float_unary<C>(op, static_cast<C>(y.v));
  });
  const bool exact = op == Un::floor || op == Un::ceil || op == Un::rint || op == Un::round;
  return rounded(result, r, unary_spread(op, result, y.v, y.e, r), exact ? 0 : 4);
}

// An operand's elements as dtype `p`, broadcast to `shape` (a scalar converted as the library
// converts a C++ scalar to the operation's dtype).
struct Reader {
  const HostArray* array = nullptr;
  Num scalar;
  D from = D::f64;
  D to = D::f64;
  Num operator()(const std::vector<int64_t>& idx) const {
    return convert_num(from, to, array ? at(*array, idx) : scalar);
  }
};
Reader reader(const Operand& o, const std::vector<HostArray>& vars, D to) {
  if (!o.is_scalar()) return Reader{&vars[o.var], {}, vars[o.var].dtype, to};
  const D from = o.kind == ScalarKind::floating  ? D::f64
                 : o.kind == ScalarKind::boolean ? D::boolean
                                                 : D::i64;
  return Reader{nullptr, Num{o.value, 0}, from, to};
}
std::vector<int64_t> shape_of_operand(const Operand& o, const std::vector<HostArray>& vars) {
  return o.is_scalar() ? std::vector<int64_t>{} : vars[o.var].shape;
}
// A new array of `shape` whose elements are fn(index).
HostArray tabulate(D dtype, const std::vector<int64_t>& shape,
                   const std::function<Num(const std::vector<int64_t>&)>& fn) {
  HostArray out = make_host(dtype, shape);
  for (int64_t i = 0; i < out.size(); ++i) out.store->data[i] = fn(index_of(i, shape));
  return out;
}

// ---- reductions and scans in the reference ---------------------------------------------
// The elements each output of a reduction along `axis` (-1: all) combines, in order.
std::vector<std::vector<Num>> reduction_groups(const HostArray& x, int axis,
                                               std::vector<int64_t>& out_shape, bool keepdims) {
  std::vector<std::vector<Num>> groups;
  if (axis < 0) {
    out_shape = {};
    groups.push_back(elements(x));
    return groups;
  }
  std::vector<int64_t> outer = x.shape;
  outer.erase(outer.begin() + axis);
  out_shape = x.shape;
  if (keepdims)
    out_shape[axis] = 1;
  else
    out_shape.erase(out_shape.begin() + axis);
  int64_t n = 1;
  for (int64_t e : outer) n *= e;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> idx = index_of(i, outer);
    idx.insert(idx.begin() + axis, 0);
    std::vector<Num> g;
    for (idx[axis] = 0; idx[axis] < x.shape[axis]; ++idx[axis]) g.push_back(at(x, idx));
    groups.push_back(std::move(g));
  }
  return groups;
}
// The accumulator's precision: float for 16-bit floats and float32, else the dtype's.
double acc_eps(D d) {
  return dtype_eps(compute_dtype(d));
}
Num sum_of(const std::vector<Num>& g, D from, D result) {
  if (!is_fp(result)) {
    uint64_t acc = 0;
    for (const Num& n : g) acc += bits_of(n.v);
    double e = 0;
    for (const Num& n : g) e += n.e;
    return Num{wrap_int(result, Real(acc)), e};
  }
  Real acc = 0, mag = 0;
  double e = 0;
  for (const Num& n : g) {
    const Num c = convert_num(from, result, n);
    acc += c.v, mag += std::fabs(c.v), e += c.e;
  }
  e += static_cast<double>(g.size()) * acc_eps(result) * static_cast<double>(mag);
  return rounded(result, acc, std::isnan(e) ? kInf : e);
}
Num prod_of(const std::vector<Num>& g, D from, D result) {
  if (!is_fp(result)) {
    uint64_t acc = 1;
    for (const Num& n : g) acc *= bits_of(n.v);
    double e = 0;
    for (const Num& n : g) e += n.e;
    return Num{wrap_int(result, Real(acc)), e > 0 ? kInf : 0};
  }
  Real acc = 1, big = 1, small = 1;
  double rel = static_cast<double>(g.size()) * dtype_eps(result);
  for (const Num& n : g) {
    const Num c = convert_num(from, result, n);
    acc *= c.v;
    const Real m = std::fabs(c.v);
    (m > 1 ? big : small) *= m;
    if (c.e > 0) rel += c.v == 0 ? kInf : c.e / static_cast<double>(m);
  }
  // Partial products in another order may overflow or underflow where the whole does not.
  if (big >= dtype_max(result) || (small < dtype_tiny(result) && acc != 0)) rel = kInf;
  const double e = rel * static_cast<double>(std::fabs(acc));
  return rounded(result, acc, std::isnan(e) || rel == kInf ? kInf : e);
}
Num extreme_of(const std::vector<Num>& g, bool max) {
  Num best = g.front();
  double e = 0;
  for (const Num& n : g) {
    e = std::max(e, n.e);
    if (std::isnan(best.v)) continue;
    if (std::isnan(n.v) || (max ? n.v > best.v : n.v < best.v)) best = n;
  }
  return Num{best.v, e};
}
Num mean_of(const std::vector<Num>& g, D from, D result) {
  if (g.empty()) return Num{std::numeric_limits<Real>::quiet_NaN(), 0};
  const Num s = sum_of(g, from, compute_dtype(result));
  const Real n = static_cast<Real>(g.size());
  return rounded(result, s.v / n, s.e / static_cast<double>(n));
}
Num truth_of(const std::vector<Num>& g, Red op) {
  int64_t sure = 0, unsure = 0;
  for (const Num& n : g) unsure_truth(n) ? ++unsure : sure += truthy(n.v);
  const int64_t n = static_cast<int64_t>(g.size());
  switch (op) {
    case Red::any:
      return Num{Real(sure > 0), sure == 0 && unsure > 0 ? kInf : 0};
    case Red::all:
      return Num{Real(sure + unsure == n), sure + unsure == n && unsure > 0 ? kInf : 0};
    default:
      return Num{Real(sure) + Real(unsure) / 2, static_cast<double>(unsure) / 2};
  }
}
Num reduce_group(Red op, const std::vector<Num>& g, D from, D result) {
  switch (op) {
    case Red::sum:
      return sum_of(g, from, result);
    case Red::prod:
      return prod_of(g, from, result);
    case Red::min:
      return extreme_of(g, false);
    case Red::max:
      return extreme_of(g, true);
    case Red::mean:
      return mean_of(g, from, result);
    default:
      return truth_of(g, op);
  }
}
// The index of the first extreme (the first NaN, as NumPy); kInf when another element lies
// within rounding of it.
Num arg_group(const std::vector<Num>& g, bool max) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < g.size() && !std::isnan(g[best].v); ++i)
    if (std::isnan(g[i].v) || (max ? g[i].v > g[best].v : g[i].v < g[best].v)) best = i;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (i == best || (g[i].e == 0 && g[best].e == 0)) continue;
    if (std::isnan(g[i].v - g[best].v) || std::fabs(g[i].v - g[best].v) <= 2 * (g[i].e + g[best].e))
      return Num{Real(best), kInf};
  }
  return Num{Real(best), 0};
}
HostArray reduce_ref(const HostArray& x, Red op, int axis, bool keepdims, D result) {
  std::vector<int64_t> shape;
  auto groups = reduction_groups(x, axis, shape, keepdims);
  HostArray out = make_host(result, shape);
  for (std::size_t i = 0; i < groups.size(); ++i)
    out.store->data[i] = reduce_group(op, groups[i], x.dtype, result);
  return out;
}
HostArray arg_ref(const HostArray& x, bool max, int axis, bool keepdims) {
  std::vector<int64_t> shape;
  auto groups = reduction_groups(x, axis, shape, keepdims);
  HostArray out = make_host(D::i64, shape);
  for (std::size_t i = 0; i < groups.size(); ++i) out.store->data[i] = arg_group(groups[i], max);
  return out;
}
// Running sums of one line, each rounded once to `result`.
std::vector<Num> running_sums(const std::vector<Num>& line, D from, D result) {
  std::vector<Num> out;
  std::vector<Num> prefix;
  for (const Num& n : line) {
    prefix.push_back(n);
    out.push_back(sum_of(prefix, from, result));
  }
  return out;
}
HostArray cumsum_ref(const HostArray& x, int axis, D result) {
  if (axis < 0) {
    HostArray out = make_host(result, {x.size()});
    out.store->data = running_sums(elements(x), x.dtype, result);
    return out;
  }
  HostArray out = make_host(result, x.shape);
  std::vector<int64_t> shape;
  auto groups = reduction_groups(x, axis, shape, true);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto sums = running_sums(groups[i], x.dtype, result);
    std::vector<int64_t> idx = index_of(static_cast<int64_t>(i), shape);
    for (idx[axis] = 0; idx[axis] < x.shape[axis]; ++idx[axis]) at(out, idx) = sums[idx[axis]];
  }
  return out;
}

// ---- running a program in the reference --------------------------------------------------
// What a program read: after each read statement and, at the end, every variable.
struct Snapshot {
  std::string what;
  D dtype = D::f32;
  std::vector<int64_t> shape;
  std::vector<Real> values;
  std::vector<double> errors;  // the reference's bounds (empty for the library's)
};

// The dtype of a binary statement and the dtype its operands are computed in.
std::pair<D, D> binary_dtypes(Bin op, D p) {
  const bool logical = op >= Bin::eq && op <= Bin::lor;
  D result = logical ? D::boolean : p;
  if ((op == Bin::sub || op == Bin::mod) && p == D::boolean) result = D::i8;
  if (op == Bin::div && !is_fp(p)) result = D::f64;
  return {result, logical ? p : result};
}
D promoted_ref(const Operand& a, const Operand& b, const std::vector<HostArray>& vars) {
  if (!a.is_scalar() && !b.is_scalar()) return ref_promote(vars[a.var].dtype, vars[b.var].dtype);
  if (a.is_scalar()) return ref_promote_scalar(vars[b.var].dtype, a.kind);
  return ref_promote_scalar(vars[a.var].dtype, b.kind);
}
HostArray binary_ref(Bin op, const Operand& x, const Operand& y,
                     const std::vector<HostArray>& vars) {
  const auto [result, in] = binary_dtypes(op, promoted_ref(x, y, vars));
  const Reader a = reader(x, vars, in), b = reader(y, vars, in);
  const auto shape = broadcast_shape(shape_of_operand(x, vars), shape_of_operand(y, vars));
  return tabulate(result, shape, [&, result = result, in = in](const auto& idx) {
    return binary_element(op, in, result, a(idx), b(idx));
  });
}
HostArray where_ref(const Stmt& s, const std::vector<HostArray>& vars) {
  const HostArray& c = vars[s.args[0].var];
  const D p = promoted_ref(s.args[1], s.args[2], vars);
  const Reader a = reader(s.args[1], vars, p), b = reader(s.args[2], vars, p);
  auto shape = broadcast_shape(c.shape, shape_of_operand(s.args[1], vars));
  shape = broadcast_shape(shape, shape_of_operand(s.args[2], vars));
  return tabulate(p, shape, [&](const auto& idx) {
    const Num cond = at(c, idx), x = a(idx), y = b(idx);
    if (!unsure_truth(cond)) return truthy(cond.v) ? x : y;
    return Num{x.v, static_cast<double>(std::fabs(x.v - y.v)) + std::max(x.e, y.e)};
  });
}
HostArray clip_ref(const Stmt& s, const std::vector<HostArray>& vars) {
  const HostArray& x = vars[s.args[0].var];
  const D p = ref_promote_scalar(x.dtype, s.args[1].kind);
  const Reader a = reader(s.args[0], vars, p), lo = reader(s.args[1], vars, p),
               hi = reader(s.args[2], vars, p);
  return tabulate(p, x.shape, [&](const auto& idx) {
    const Num v = a(idx);
    if (std::isnan(v.v)) return v;
    return Num{std::min(std::max(v.v, lo(idx).v), hi(idx).v), v.e};
  });
}
HostArray convert_ref(const HostArray& x, D to) {
  return tabulate(to, x.shape,
                  [&](const auto& idx) { return convert_num(x.dtype, to, at(x, idx)); });
}
HostArray slice_ref(const HostArray& x, const std::vector<Cut>& cuts) {
  HostArray v = x;
  v.shape.clear();
  v.strides.clear();
  for (std::size_t k = 0; k < cuts.size(); ++k) {
    const Cut& c = cuts[k];
    if (c.kind == Cut::whole) {
      v.shape.push_back(x.shape[k]);
      v.strides.push_back(x.strides[k]);
    } else if (c.kind == Cut::at) {
      v.offset += (c.lo < 0 ? c.lo + x.shape[k] : c.lo) * x.strides[k];
    } else {
      const auto [first, count] = Generator::slice_bounds(c, x.shape[k]);
      v.offset += first * x.strides[k];
      v.shape.push_back(count);
      v.strides.push_back(x.strides[k] * c.step);
    }
  }
  return v;
}
HostArray transpose_ref(const HostArray& x, const std::vector<int>& perm) {
  HostArray v = x;
  for (std::size_t k = 0; k < perm.size(); ++k) {
    v.shape[k] = x.shape[perm[k]];
    v.strides[k] = x.strides[perm[k]];
  }
  return v;
}
HostArray copy_ref(const HostArray& x, std::vector<int64_t> shape) {
  HostArray out = make_host(x.dtype, std::move(shape));
  out.store->data = elements(x);
  return out;
}
// `target` (an array or a view) set from `value` broadcast, computed whole first (NumPy's
// semantics where they overlap).
void write_ref(HostArray& target, const std::function<Num(const std::vector<int64_t>&)>& value) {
  std::vector<Num> values(static_cast<std::size_t>(target.size()));
  for (int64_t i = 0; i < target.size(); ++i) values[i] = value(index_of(i, target.shape));
  for (int64_t i = 0; i < target.size(); ++i) at(target, index_of(i, target.shape)) = values[i];
}
Num scalar_num(const Operand& o) {
  return Num{o.value, 0};
}
D scalar_dtype(const Operand& o) {
  return o.kind == ScalarKind::floating  ? D::f64
         : o.kind == ScalarKind::boolean ? D::boolean
                                         : D::i64;
}

class Reference {
 public:
  std::vector<HostArray> vars;
  std::vector<Snapshot> reads;

  void run(const Program& p) {
    for (index_ = 0; index_ < p.stmts.size(); ++index_) step(p.stmts[index_]);
    for (std::size_t i = 0; i < vars.size(); ++i) snapshot(static_cast<int>(i), "at the end");
  }

 private:
  std::size_t index_ = 0;

  void define(int out, HostArray a) {
    if (static_cast<int>(vars.size()) <= out) vars.resize(out + 1);
    vars[out] = std::move(a);
  }
  void snapshot(int v, const std::string& when) {
    Snapshot s{fmt::format("v{} {}", v, when), vars[v].dtype, vars[v].shape, {}, {}};
    for (const Num& n : elements(vars[v])) s.values.push_back(n.v), s.errors.push_back(n.e);
    reads.push_back(std::move(s));
  }
  const HostArray& arg(const Stmt& s, int k = 0) const { return vars[s.args[k].var]; }

  void step(const Stmt& s) {
    switch (s.op) {
      case Op::input:
      case Op::poison: {
        HostArray a = make_host(s.dtype, s.shape);
        for (int64_t i = 0; i < a.size(); ++i)
          a.store->data[i] = Num{s.op == Op::input ? s.values[i] : poison_value(s.dtype), 0};
        return define(s.out, a);
      }
      case Op::binary:
        return define(s.out, binary_ref(Bin(s.code), s.args[0], s.args[1], vars));
      case Op::unary: {
        const HostArray& x = arg(s);
        const D result = unary_dtype(Un(s.code), x.dtype);
        return define(s.out, tabulate(result, x.shape, [&](const auto& idx) {
                        return unary_element(Un(s.code), x.dtype, result, at(x, idx));
                      }));
      }
      case Op::where:
        return define(s.out, where_ref(s, vars));
      case Op::clip:
        return define(s.out, clip_ref(s, vars));
      case Op::astype:
        return define(s.out, convert_ref(arg(s), s.dtype));
      case Op::slice:
        return define(s.out, slice_ref(arg(s), s.cuts));
      case Op::transpose:
        return define(s.out, transpose_ref(arg(s), s.perm));
      case Op::reshape:
        return define(s.out, copy_ref(arg(s), s.shape));
      case Op::reshape_view: {
        HostArray v = copy_ref(arg(s), s.shape);  // the strides of a contiguous array
        v.store = arg(s).store;
        v.offset = arg(s).offset;
        return define(s.out, v);
      }
      case Op::copy:
        return define(s.out, copy_ref(arg(s), arg(s).shape));
      case Op::reduce: {
        const D result = Generator::reduce_result(Red(s.code), arg(s).dtype);
        return define(s.out, reduce_ref(arg(s), Red(s.code), s.axis, s.keepdims, result));
      }
      case Op::arg:
        return define(s.out, arg_ref(arg(s), s.code == 1, s.axis, s.keepdims));
      case Op::cumsum: {
        const D result = Generator::reduce_result(Red::sum, arg(s).dtype);
        return define(s.out, cumsum_ref(arg(s), s.axis, result));
      }
      case Op::assign:
      case Op::fill:
        return assign(s);
      case Op::compound:
        return compound(s);
      case Op::read:
        return snapshot(s.out, fmt::format("read by statement {}", index_));
    }
  }
  static Real poison_value(D d) {
    if (is_fp(d)) return std::numeric_limits<Real>::quiet_NaN();
    return wrap_int(d, Real(0x5A5A5A5A5A5A5A5Aull));
  }
  static D unary_dtype(Un op, D d) {
    switch (op) {
      case Un::neg:
      case Un::abs:
      case Un::sign:
        return d;
      case Un::lnot:
      case Un::isnan:
      case Un::isfinite:
        return D::boolean;
      default:
        return ref_float_of(d);
    }
  }
  void assign(const Stmt& s) {
    HostArray& t = vars[s.out];
    const Operand& o = s.args[0];
    if (o.is_scalar()) {
      const Num v = convert_num(scalar_dtype(o), t.dtype, scalar_num(o));
      return write_ref(t, [&](const auto&) { return v; });
    }
    const HostArray& from = vars[o.var];
    write_ref(t, [&](const auto& idx) { return convert_num(from.dtype, t.dtype, at(from, idx)); });
  }
  void compound(const Stmt& s) {
    HostArray& t = vars[s.out];
    const HostArray r = binary_ref(Bin(s.code), Operand{s.out}, s.args[0], vars);
    write_ref(t, [&](const auto& idx) { return convert_num(r.dtype, t.dtype, at(r, idx)); });
  }
};

// ---- running a program in the library ----------------------------------------------------
using AnyArray =
    std::variant<gs::Array<bool>, gs::Array<int8_t>, gs::Array<int16_t>, gs::Array<int32_t>,
                 gs::Array<int64_t>, gs::Array<uint8_t>, gs::Array<uint16_t>, gs::Array<uint32_t>,
                 gs::Array<uint64_t>, gs::Array<gs::float16>, gs::Array<gs::bfloat16>,
                 gs::Array<float>, gs::Array<double>>;

// Calls f(T{}) for the C++ type T of dtype d.
template <class F>
decltype(auto) with_type(D d, F&& f) {
  switch (d) {
    case D::boolean:
      return f(bool{});
    case D::i8:
      return f(int8_t{});
    case D::i16:
      return f(int16_t{});
    case D::i32:
      return f(int32_t{});
    case D::i64:
      return f(int64_t{});
    case D::u8:
      return f(uint8_t{});
    case D::u16:
      return f(uint16_t{});
    case D::u32:
      return f(uint32_t{});
    case D::u64:
      return f(uint64_t{});
    case D::f16:
      return f(gs::float16{});
    case D::bf16:
      return f(gs::bfloat16{});
    case D::f32:
      return f(float{});
    default:
      return f(double{});
  }
}
// Calls f(scalar) with the operand as a C++ bool, int or double.
template <class F>
decltype(auto) with_scalar(const Operand& o, F&& f) {
  switch (o.kind) {
    case ScalarKind::boolean:
      return f(o.value != 0);
    case ScalarKind::integer:
      return f(static_cast<int>(o.value));
    default:
      return f(static_cast<double>(o.value));
  }
}
template <class T>
constexpr bool is_float_type = std::is_floating_point_v<T> || std::is_same_v<T, gs::float16> ||
                               std::is_same_v<T, gs::bfloat16>;

template <class X, class Y>
AnyArray binary_op(Bin op, const X& x, const Y& y) {
  switch (op) {
    case Bin::add:
      return x + y;
    case Bin::sub:
      return x - y;
    case Bin::mul:
      return x * y;
    case Bin::div:
      return x / y;
    case Bin::mod:
      return x % y;
    case Bin::eq:
      return x == y;
    case Bin::ne:
      return x != y;
    case Bin::lt:
      return x < y;
    case Bin::le:
      return x <= y;
    case Bin::gt:
      return x > y;
    case Bin::ge:
      return x >= y;
    case Bin::land:
      return x && y;
    case Bin::lor:
      return x || y;
    case Bin::maximum:
      return gs::maximum(x, y);
    default:
      return gs::minimum(x, y);
  }
}
template <class T>
AnyArray unary_op(Un op, const gs::Array<T>& x) {
  switch (op) {
    case Un::neg:
      if constexpr (!std::is_same_v<T, bool>) return -x;
      break;
    case Un::lnot:
      return !x;
    case Un::abs:
      return gs::abs(x);
    case Un::sign:
      return gs::sign(x);
    case Un::exp:
      return gs::exp(x);
    case Un::sqrt_abs:
      return gs::sqrt(gs::abs(x));
    case Un::sin:
      return gs::sin(x);
    case Un::cos:
      return gs::cos(x);
    case Un::tanh:
      return gs::tanh(x);
    case Un::arctan:
      return gs::arctan(x);
    case Un::floor:
      return gs::floor(x);
    case Un::ceil:
      return gs::ceil(x);
    case Un::rint:
      return gs::rint(x);
    case Un::round:
      return gs::round(x);
    case Un::isnan:
      return gs::isnan(x);
    case Un::isfinite:
      return gs::isfinite(x);
  }
  throw std::logic_error("negating a bool array");
}
template <class T>
AnyArray reduce_op(Red op, const gs::Array<T>& x, int axis, bool keepdims) {
  auto go = [&](auto&& f) -> AnyArray { return axis < 0 ? f(x) : f(x, axis, keepdims); };
  switch (op) {
    case Red::sum:
      return go([](const auto&... a) { return gs::sum(a...); });
    case Red::prod:
      return go([](const auto&... a) { return gs::prod(a...); });
    case Red::min:
      return go([](const auto&... a) { return gs::min(a...); });
    case Red::max:
      return go([](const auto&... a) { return gs::max(a...); });
    case Red::mean:
      return go([](const auto&... a) { return gs::mean(a...); });
    case Red::any:
      return go([](const auto&... a) { return gs::any(a...); });
    case Red::all:
      return go([](const auto&... a) { return gs::all(a...); });
    default:
      return go([](const auto&... a) { return gs::count_nonzero(a...); });
  }
}
template <class T>
gs::Array<T> slice_op(const gs::Array<T>& x, const std::vector<Cut>& cuts) {
  std::vector<gs::Index> idx;
  for (const Cut& c : cuts) {
    if (c.kind == Cut::whole)
      idx.emplace_back(gs::all);
    else if (c.kind == Cut::at)
      idx.emplace_back(c.lo);
    else
      idx.emplace_back(gs::range(c.lo, c.hi, c.step));
  }
  switch (idx.size()) {
    case 1:
      return x.slice(idx[0]);
    case 2:
      return x.slice(idx[0], idx[1]);
    default:
      return x.slice(idx[0], idx[1], idx[2]);
  }
}
gs::Dim dim_of(const std::vector<int64_t>& s) {
  gs::Dim d = gs::Dim::of_rank(static_cast<int>(s.size()), 1);
  for (std::size_t k = 0; k < s.size(); ++k) d[static_cast<int>(k)] = s[k];
  return d;
}
std::vector<int64_t> shape_vector(const gs::Dim& d) {
  std::vector<int64_t> s;
  for (int k = 0; k < d.rank(); ++k) s.push_back(d[k]);
  return s;
}
gs::DataDistribution make_dist(const DistSpec& d, int devices) {
  gs::DataDistribution out = gs::dist::replicated();
  switch (d.kind) {
    case DistSpec::rows:
      out = gs::dist::rows(d.size[0]);
      break;
    case DistSpec::columns:
      out = gs::dist::columns(d.size[0]);
      break;
    case DistSpec::tiles:
      out = gs::dist::tiles(dim_of(d.size));
      break;
    case DistSpec::centralized:
      return gs::dist::centralized(d.device % devices);
    default:
      return out;
  }
  return d.blocked ? out.blocked() : out;
}
template <class T>
T host_value(Real v) {
  if constexpr (std::is_same_v<T, gs::float16> || std::is_same_v<T, gs::bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

class Library {
 public:
  Library(gs::Context& ctx) : ctx_(ctx) {}
  std::vector<AnyArray> vars;
  std::vector<Snapshot> reads;

  void run(const Program& p) {
    for (index_ = 0; index_ < p.stmts.size(); ++index_) {
      try {
        step(p.stmts[index_]);
      } catch (const std::exception& e) {
        throw std::runtime_error(
            fmt::format("statement {} ({}): {}", index_, stmt_text(p.stmts[index_]), e.what()));
      }
    }
    for (std::size_t i = 0; i < vars.size(); ++i) snapshot(static_cast<int>(i), "at the end");
  }
  static Snapshot read(const AnyArray& a) {
    return std::visit(
        [](const auto& x) {
          using T = typename std::decay_t<decltype(x)>::value_type;
          Snapshot s{"", dtype_v<T>, shape_vector(x.shape()), {}, {}};
          for (const auto& v : x.to_vector()) s.values.push_back(static_cast<Real>(to_real(v)));
          return s;
        },
        a);
  }

 private:
  gs::Context& ctx_;
  std::size_t index_ = 0;

  template <class T>
  static Real to_real(const T& v) {
    if constexpr (std::is_same_v<T, gs::float16> || std::is_same_v<T, gs::bfloat16>)
      return static_cast<float>(v);
    else
      return static_cast<Real>(v);
  }
  void define(int out, AnyArray a) {
    if (static_cast<int>(vars.size()) <= out) vars.resize(out + 1);
    vars[out] = std::move(a);
  }
  void snapshot(int v, const std::string& when) {
    Snapshot s = read(vars[v]);
    s.what = fmt::format("v{} {}", v, when);
    reads.push_back(std::move(s));
  }
  const AnyArray& arg(const Stmt& s, int k = 0) const { return vars[s.args[k].var]; }

  AnyArray make_input(const Stmt& s) {
    const gs::Dim shape = dim_of(s.shape);
    return with_type(s.dtype, [&](auto t) -> AnyArray {
      using T = decltype(t);
      if (s.op == Op::poison) {
        T value{};
        if constexpr (is_float_type<T>)
          value = host_value<T>(NAN);
        else
          value = test::poison<T>();
        if (s.dist.kind == DistSpec::fallback) return gs::full<T>(ctx_, shape, value);
        return gs::full<T>(ctx_, shape, value, make_dist(s.dist, ctx_.device_count()));
      }
      std::vector<T> values;
      for (Real v : s.values) values.push_back(host_value<T>(v));
      if (s.dist.kind == DistSpec::fallback) return ctx_.from_vector(values, shape);
      return ctx_.from_vector(values, shape, make_dist(s.dist, ctx_.device_count()));
    });
  }
  AnyArray binary(const Stmt& s) {
    const Bin op = Bin(s.code);
    const Operand &x = s.args[0], &y = s.args[1];
    if (x.is_scalar())
      return with_scalar(x, [&](auto a) {
        return std::visit([&](const auto& b) { return binary_op(op, a, b); }, vars[y.var]);
      });
    if (y.is_scalar())
      return with_scalar(y, [&](auto b) {
        return std::visit([&](const auto& a) { return binary_op(op, a, b); }, vars[x.var]);
      });
    return std::visit([&](const auto& a, const auto& b) { return binary_op(op, a, b); },
                      vars[x.var], vars[y.var]);
  }
  AnyArray where(const Stmt& s) {
    const auto& cond = std::get<gs::Array<bool>>(arg(s, 0));
    if (s.args[2].is_scalar())
      return with_scalar(s.args[2], [&](auto b) {
        return std::visit([&](const auto& a) -> AnyArray { return gs::where(cond, a, b); },
                          arg(s, 1));
      });
    return std::visit(
        [&](const auto& a, const auto& b) -> AnyArray { return gs::where(cond, a, b); }, arg(s, 1),
        arg(s, 2));
  }
  AnyArray clip(const Stmt& s) {
    return std::visit(
        [&](const auto& a) -> AnyArray {
          using T = typename std::decay_t<decltype(a)>::value_type;
          if constexpr (std::is_same_v<T, bool>) {
            throw std::logic_error("clip of a bool array");
          } else if (s.args[1].kind == ScalarKind::floating) {
            return gs::clip(a, static_cast<double>(s.args[1].value),
                            static_cast<double>(s.args[2].value));
          } else {
            return gs::clip(a, static_cast<int>(s.args[1].value),
                            static_cast<int>(s.args[2].value));
          }
        },
        arg(s));
  }
  AnyArray astype(const Stmt& s) {
    return std::visit(
        [&](const auto& a) {
          return with_type(s.dtype,
                           [&](auto t) -> AnyArray { return a.template astype<decltype(t)>(); });
        },
        arg(s));
  }
  template <class F>
  AnyArray map(const Stmt& s, F&& f) {
    return std::visit([&](const auto& a) -> AnyArray { return f(a); }, arg(s));
  }
  void assign(const Stmt& s) {
    const Operand& o = s.args[0];
    std::visit(
        [&](auto& t) {
          using T = typename std::decay_t<decltype(t)>::value_type;
          if (s.op == Op::fill) return t.fill(host_value<T>(o.value));
          if (o.is_scalar()) return with_scalar(o, [&](auto v) { t.assign(v); });
          std::visit([&](const auto& v) { t.assign(v); }, vars[o.var]);
        },
        vars[s.out]);
  }
  // target op= value, where it compiles (NumPy's same_kind).
  template <class T, class Y>
  static void compound_op(Bin op, gs::Array<T>& t, const Y& y) {
    using R = typename decltype(t + y)::value_type;
    constexpr bool fits = is_float_type<T> || !is_float_type<R>;
    if constexpr (fits) {
      switch (op) {
        case Bin::add:
          t += y;
          return;
        case Bin::sub:
          t -= y;
          return;
        case Bin::mul:
          t *= y;
          return;
        default:
          if constexpr (is_float_type<T>) {
            t /= y;
            return;
          }
      }
    }
    throw std::logic_error("a compound assignment the generator does not make");
  }
  void compound(const Stmt& s) {
    const Operand& o = s.args[0];
    const Bin op = Bin(s.code);
    std::visit(
        [&](auto& t) {
          if (o.is_scalar()) return with_scalar(o, [&](auto v) { compound_op(op, t, v); });
          std::visit([&](const auto& v) { compound_op(op, t, v); }, vars[o.var]);
        },
        vars[s.out]);
  }

  void step(const Stmt& s) {
    switch (s.op) {
      case Op::input:
      case Op::poison:
        return define(s.out, make_input(s));
      case Op::binary:
        return define(s.out, binary(s));
      case Op::unary:
        return define(s.out, map(s, [&](const auto& a) { return unary_op(Un(s.code), a); }));
      case Op::where:
        return define(s.out, where(s));
      case Op::clip:
        return define(s.out, clip(s));
      case Op::astype:
        return define(s.out, astype(s));
      case Op::slice:
        return define(s.out, map(s, [&](const auto& a) { return slice_op(a, s.cuts); }));
      case Op::transpose:
        return define(s.out, map(s, [&](const auto& a) { return gs::transpose(a, s.perm); }));
      case Op::reshape:
        return define(s.out, map(s, [&](const auto& a) { return a.reshape(dim_of(s.shape)); }));
      case Op::reshape_view:
        return define(s.out,
                      map(s, [&](const auto& a) { return a.reshape_in_place(dim_of(s.shape)); }));
      case Op::copy:
        return define(s.out, map(s, [&](const auto& a) { return a.copy(); }));
      case Op::reduce:
        return define(s.out, map(s, [&](const auto& a) {
                        return reduce_op(Red(s.code), a, s.axis, s.keepdims);
                      }));
      case Op::arg:
        return define(s.out, map(s, [&](const auto& a) -> AnyArray {
                        if (s.axis < 0) return s.code ? gs::argmax(a) : gs::argmin(a);
                        return s.code ? gs::argmax(a, s.axis, s.keepdims)
                                      : gs::argmin(a, s.axis, s.keepdims);
                      }));
      case Op::cumsum:
        return define(s.out, map(s, [&](const auto& a) -> AnyArray {
                        return s.axis < 0 ? gs::cumsum(a) : gs::cumsum(a, s.axis);
                      }));
      case Op::assign:
      case Op::fill:
        return assign(s);
      case Op::compound:
        return compound(s);
      case Op::read:
        return snapshot(s.out, fmt::format("read by statement {}", index_));
    }
  }
};

// ---- comparing -------------------------------------------------------------------------
// Whether `got` may be the value of an element the reference computed as `want` within `e`.
bool acceptable(D d, Real want, double e, Real got) {
  if (e == kInf || std::isnan(e)) return true;
  if (d == D::boolean) return (want != 0) == (got != 0);
  if (!is_fp(d)) return std::fabs(got - want) <= e;
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (got == want) return true;
  if (std::isinf(want) || std::isinf(got)) return false;
  return std::fabs(got - want) <= 2 * e + dtype_tiny(d);
}
// What differs between two series of snapshots (`want` carries the error bounds; `exact`
// asks for the same bits); empty when nothing does.
std::string differences(const std::vector<Snapshot>& want, const std::vector<Snapshot>& got,
                        bool exact = false) {
  if (want.size() != got.size()) return fmt::format("{} reads, want {}\n", got.size(), want.size());
  std::string out;
  for (std::size_t r = 0; r < want.size(); ++r) {
    const Snapshot &w = want[r], &g = got[r];
    if (w.dtype != g.dtype || w.shape != g.shape) {
      out += fmt::format("{}: dtype {} shape {}, want {} {}\n", w.what, numpy_name(g.dtype),
                         shape_text(g.shape), numpy_name(w.dtype), shape_text(w.shape));
      continue;
    }
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < w.values.size(); ++i) {
      const bool ok = exact ? (w.values[i] == g.values[i] ||
                               (std::isnan(w.values[i]) && std::isnan(g.values[i])))
                            : acceptable(w.dtype, w.values[i], w.errors[i], g.values[i]);
      if (!ok && bad++ == 0) first = i;
    }
    if (bad)
      out += fmt::format(
          "{} ({} {}): {} of {} elements differ, the first at {}: got {}, want {}{}\n", w.what,
          numpy_name(w.dtype), shape_text(w.shape), bad, w.values.size(),
          shape_text(index_of(static_cast<int64_t>(first), w.shape)), real_text(g.values[first]),
          real_text(w.values[first]), exact ? "" : fmt::format(" (within {})", w.errors[first]));
  }
  return out;
}

// ---- running programs ------------------------------------------------------------------
struct Outcome {
  std::vector<Snapshot> reads;
  std::string error;  // what the library threw
  bool spilled = false;
};

// The bytes one task needed where that alone was more than a device holds (0 otherwise),
// read from the library's OutOfMemoryError (its message: an error from another rank keeps
// only that). Tight memory is twice the largest array, which a task with two whole inputs
// and a whole result can pass (seed 250001:118701299726: 54 KiB of 53.2): the program
// asked the impossible, not a library fault.
std::size_t task_beyond_device(const std::string& error) {
  if (error.find("one task needs all of these chunks") == std::string::npos) return 0;
  auto bytes_after = [&](const char* word) -> std::size_t {
    const std::size_t at = error.find(word), open = error.find('(', at);
    return at == std::string::npos || open == std::string::npos
               ? 0
               : std::strtoull(error.c_str() + open + 1, nullptr, 10);
  };
  const std::size_t requested = bytes_after("requested "), limit = bytes_after("limit ");
  return requested > limit ? requested : 0;
}

Outcome run_once(const Program& p, int devices, std::size_t device_memory);

// `p` on `devices` devices; a program whose tight memory could not hold one of its tasks
// runs again with that task's bytes added (up to three times: a later task may need more),
// still tight enough to spill. Under mpirun every rank has `devices` devices and the arrays
// spread over all of them: each device's limit shrinks with the ranks, so that programs
// still spill.
Outcome run_library(const Program& p, int devices) {
  std::size_t limit =
      p.device_memory > 0
          ? std::max<std::size_t>(p.device_memory / std::size_t(gs::process_count()), 4 << 10)
          : 0;
  Outcome out = run_once(p, devices, limit);
  for (int again = 0; again < 3 && limit > 0; ++again) {
    const std::size_t need = task_beyond_device(out.error);
    if (need == 0) break;
    limit += need;
    out = run_once(p, devices, limit);
  }
  return out;
}

Outcome run_once(const Program& p, int devices, std::size_t device_memory) {
  gs::Config c = test::quiet_config(devices);
  c.device_memory = device_memory;
  c.host_memory = p.host_memory;
  c.cpu_async = p.cpu_async;
  c.task_overhead_us = p.task_overhead_us;
  c.device_bandwidth = p.bandwidth;
  Outcome out;
  try {
    gs::Context ctx(c);
    Library lib(ctx);
    lib.run(p);
    out.reads = std::move(lib.reads);
    const auto stats = ctx.memory_stats();
    for (int d = 0; d < ctx.device_count(); ++d) out.spilled |= stats[d].spilled_bytes > 0;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}
std::vector<Snapshot> run_reference(const Program& p) {
  Reference ref;
  ref.run(p);
  return std::move(ref.reads);
}

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::strtoull(s, nullptr, 10) : fallback;
}
// GRIDSPAN_DIFF_SEED=structure:instance: that program alone.
std::optional<std::pair<uint64_t, uint64_t>> replayed_seed() {
  const char* s = std::getenv("GRIDSPAN_DIFF_SEED");
  if (!s || !*s) return std::nullopt;
  char* end = nullptr;
  const uint64_t structure = std::strtoull(s, &end, 10);
  const uint64_t instance = *end == ':' ? std::strtoull(end + 1, nullptr, 10) : 0;
  return std::make_pair(structure, instance);
}
// The seeds of program i of a test: three instances per structure, structures from one of
// four fixed families (so their kernels are on disk after a few runs), or afresh with
// GRIDSPAN_DIFF_FRESH=1.
std::pair<uint64_t, uint64_t> program_seeds(int i, uint64_t test_salt) {
  const uint64_t base = test::base_seed();
  const uint64_t family = env_number("GRIDSPAN_DIFF_FRESH", 0) ? base : base % 4;
  const uint64_t structure = family * 100000 + test_salt + static_cast<uint64_t>(i / 3);
  const uint64_t instance =
      (base * 1000003ull + test_salt * 7919 + static_cast<uint64_t>(i)) % 1000000000000ull;
  return {structure, instance};
}
std::vector<Program> programs(int count, uint64_t test_salt, bool numpy) {
  std::vector<Program> out;
  if (auto replay = replayed_seed()) {
    out.push_back(Generator(replay->first, replay->second, numpy).make());
    return out;
  }
  for (int i = 0; i < count; ++i) {
    const auto [structure, instance] = program_seeds(i, test_salt);
    out.push_back(Generator(structure, instance, numpy).make());
  }
  return out;
}
void report(const Program& p, const std::string& what) {
  ADD_FAILURE() << what << "\nreplay with GRIDSPAN_DIFF_SEED=" << p.seed << "\n" << program_text(p);
}

// What the library's run of `p` got that the reference does not answer, or what it threw.
std::string against_reference(const Program& p, const Outcome& got) {
  return got.error.empty() ? differences(run_reference(p), got.reads)
                           : "the library threw: " + got.error;
}

TEST(Differential, RandomPrograms) {
  const int count = static_cast<int>(env_number("GRIDSPAN_DIFF_PROGRAMS", 204));
  std::printf("differential: base seed %llu (GRIDSPAN_TEST_SEED), %d programs\n",
              static_cast<unsigned long long>(test::base_seed()), count);
  int failures = 0, spilled = 0, tight = 0;
  for (const Program& p : programs(count, 0, false)) {
    const Outcome got = run_library(p, p.devices);
    tight += p.device_memory > 0;
    spilled += got.spilled;
    const std::string diff = against_reference(p, got);
    if (!diff.empty() && failures++ < 5) report(p, diff);
  }
  std::printf("differential: %d of %d programs with memory limits spilled\n", spilled, tight);
  if (count >= 100) EXPECT_GT(spilled, 0) << "no program spilled: the memory limits are too loose";
}

// The GPU's unrolled elementwise kernels (their blocks, launches and three passes) run on
// cpu devices, so that every program's layouts and distributions meet them here too.
TEST(Differential, UnrolledKernels) {
  const int count = static_cast<int>(env_number("GRIDSPAN_DIFF_PROGRAMS", 204) / 4);
  array::ElementwiseTestHooks hooks;
  hooks.unroll_on_cpu = true;
  array::set_elementwise_test_hooks(&hooks);
  int failures = 0;
  for (const Program& p : programs(count, 0, false)) {
    const Outcome got = run_library(p, p.devices);
    const std::string diff = against_reference(p, got);
    if (!diff.empty() && failures++ < 5) report(p, "unrolled kernels:\n" + diff);
  }
  array::set_elementwise_test_hooks(nullptr);
}

TEST(Differential, OneVsThreeDevices) {
  const int count = static_cast<int>(env_number("GRIDSPAN_DIFF_PROGRAMS", 204) / 6);
  int failures = 0;
  for (const Program& p : programs(count, 0, false)) {
    const Outcome one = run_library(p, 1), three = run_library(p, 3), again = run_library(p, 3);
    std::string diff = one.error + three.error;
    if (diff.empty()) {
      std::vector<Snapshot> bounds = run_reference(p);
      for (std::size_t r = 0; r < bounds.size() && r < one.reads.size(); ++r)
        bounds[r].values = one.reads[r].values;  // one device's values, the reference's bounds
      diff = differences(bounds, three.reads);
      const std::string rerun = differences(three.reads, again.reads, true);
      if (!rerun.empty()) diff += "run again on 3 devices:\n" + rerun;
    }
    if (!diff.empty() && failures++ < 5) report(p, "1 device against 3 devices:\n" + diff);
  }
}

// ---- NumPy as a second reference ---------------------------------------------------------
// Programs as tests/array/numpy_reference.py reads them: one statement a line.
std::string file_operand(const Operand& o) {
  if (!o.is_scalar()) return fmt::format("v{}", o.var);
  if (o.kind == ScalarKind::boolean) return fmt::format("b:{}", o.value != 0 ? 1 : 0);
  if (o.kind == ScalarKind::integer) return fmt::format("i:{}", static_cast<int64_t>(o.value));
  return fmt::format("f:{:a}", static_cast<double>(o.value));
}
std::string file_shape(const std::vector<int64_t>& s) {
  return fmt::format("{} {}", s.size(), fmt::join(s, " "));
}
std::string file_value(D d, Real v) {
  if (!is_fp(d)) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:a}", static_cast<double>(v));
}
std::string file_stmt(const Stmt& s) {
  const std::string v = fmt::format("{}", s.out);
  std::vector<std::string> a;
  for (const Operand& o : s.args) a.push_back(file_operand(o));
  const std::string axis = fmt::format("{} {}", s.axis, s.keepdims ? 1 : 0);
  switch (s.op) {
    case Op::input: {
      std::vector<std::string> values;
      for (Real x : s.values) values.push_back(file_value(s.dtype, x));
      return fmt::format("input {} {} {} {}", v, numpy_name(s.dtype), file_shape(s.shape),
                         fmt::join(values, " "));
    }
    case Op::poison:
      return fmt::format("poison {} {} {}", v, numpy_name(s.dtype), file_shape(s.shape));
    case Op::binary:
      return fmt::format("binary {} {} {} {}", v, kBinNames[s.code], a[0], a[1]);
    case Op::unary:
      return fmt::format("unary {} {} {}", v, kUnNames[s.code], a[0]);
    case Op::where:
      return fmt::format("where {} {} {} {}", v, a[0], a[1], a[2]);
    case Op::clip:
      return fmt::format("clip {} {} {} {}", v, a[0], a[1], a[2]);
    case Op::astype:
      return fmt::format("astype {} {} {}", v, a[0], numpy_name(s.dtype));
    case Op::slice: {
      std::vector<std::string> cuts;
      for (const Cut& c : s.cuts)
        cuts.push_back(c.kind == Cut::whole ? "all"
                       : c.kind == Cut::at  ? fmt::format("at:{}", c.lo)
                                            : fmt::format("range:{}:{}:{}", c.lo, c.hi, c.step));
      return fmt::format("slice {} {} {} {}", v, a[0], cuts.size(), fmt::join(cuts, " "));
    }
    case Op::transpose:
      return fmt::format("transpose {} {} {}", v, a[0], fmt::join(s.perm, " "));
    case Op::reshape:
    case Op::reshape_view:
      return fmt::format("{} {} {} {}", s.op == Op::reshape ? "reshape" : "reshape_view", v, a[0],
                         file_shape(s.shape));
    case Op::copy:
      return fmt::format("copy {} {}", v, a[0]);
    case Op::reduce:
      return fmt::format("reduce {} {} {} {}", v, kRedNames[s.code], a[0], axis);
    case Op::arg:
      return fmt::format("arg {} {} {} {}", v, s.code, a[0], axis);
    case Op::cumsum:
      return fmt::format("cumsum {} {} {}", v, a[0], s.axis);
    case Op::assign:
      return fmt::format("assign {} {}", v, a[0]);
    case Op::fill:
      return fmt::format("fill {} {}", v, a[0]);
    case Op::compound:
      return fmt::format("compound {} {} {}", v, kBinNames[s.code], a[0]);
    case Op::read:
      return fmt::format("read {}", v);
  }
  return "";
}
D dtype_named(const std::string& name) {
  for (D d : kAllDtypes)
    if (name == numpy_name(d)) return d;
  throw std::runtime_error("NumPy answered an unknown dtype " + name);
}
// NumPy's reads per program seed (an `error` line: what NumPy threw).
std::map<std::string, std::vector<Snapshot>> read_numpy(
    const std::string& path, std::map<std::string, std::string>& errors) {
  std::map<std::string, std::vector<Snapshot>> out;
  std::ifstream in(path);
  std::string line, seed;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "program") words >> seed;
    if (kind == "error") errors[seed] = line;
    if (kind != "snap") continue;
    Snapshot s;
    std::string name, word;
    int rank = 0;
    words >> name >> rank;
    s.dtype = dtype_named(name);
    s.shape.resize(rank);
    for (auto& e : s.shape) words >> e;
    while (words >> word) s.values.push_back(std::strtold(word.c_str(), nullptr));
    out[seed].push_back(std::move(s));
  }
  return out;
}
bool numpy_present() {
  return std::filesystem::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

TEST(Differential, AgainstNumPy) {
  if (!numpy_present())
    GTEST_SKIP() << "/usr/bin/python3 with numpy is missing: install Debian's python3-numpy "
                    "(scripts/install-deps.sh does) to compare the array library with NumPy";
  const auto list =
      programs(static_cast<int>(env_number("GRIDSPAN_DIFF_NUMPY_PROGRAMS", 60)), 50000, true);
  const std::string dir = testing::TempDir();
  const std::string in = dir + "gridspan_numpy_programs.txt", out = dir + "gridspan_numpy_out.txt";
  {
    std::ofstream f(in);
    for (const Program& p : list) {
      f << "program " << p.seed << "\n";
      for (const Stmt& s : p.stmts) f << file_stmt(s) << "\n";
      f << "end\n";
    }
  }
  const std::string cmd = fmt::format("/usr/bin/python3 {}/tests/array/numpy_reference.py {} {}",
                                      GRIDSPAN_SOURCE_DIR, in, out);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, std::string> errors;
  const auto numpy = read_numpy(out, errors);
  int failures = 0;
  for (const Program& p : list) {
    const Outcome got = run_library(p, p.devices);
    std::string diff = got.error.empty() ? "" : "the library threw: " + got.error + "\n";
    if (errors.count(p.seed)) diff += "NumPy threw: " + errors.at(p.seed) + "\n";
    if (diff.empty()) {
      std::vector<Snapshot> want = run_reference(p);  // the reference's bounds
      const auto it = numpy.find(p.seed);
      const std::size_t n = it == numpy.end() ? 0 : it->second.size();
      if (n != want.size()) diff = fmt::format("NumPy gave {} reads, want {}\n", n, want.size());
      for (std::size_t r = 0; r < n && diff.empty() && r < want.size(); ++r) {
        want[r].dtype = it->second[r].dtype;
        want[r].shape = it->second[r].shape;
        want[r].values = it->second[r].values;
      }
      if (diff.empty()) diff = differences(want, got.reads);
    }
    if (!diff.empty() && failures++ < 5) report(p, "against NumPy:\n" + diff);
  }
}

}  // namespace
}  // namespace gridspan
