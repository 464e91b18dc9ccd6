// Elementwise operations: their dtypes (promote.hpp's rules applied per operation), NumPy's
// broadcasting, and the pending arrays they answer; assignment into arrays and views.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "array/expr.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/half.hpp"

namespace gridspan::array {

namespace {

constexpr int kMaxDepth = 32;   // operations in one kernel, along a path
constexpr int kMaxParams = 24;  // leaves, views and scalars in one kernel

enum class Family {
  arithmetic,
  logical_arith,
  divide,
  compare,
  logic,
  floating,
  same,
  predicate,
  select,
  cast
};

Family family(EwOp op) {
  switch (op) {
    case EwOp::add:
    case EwOp::mul:
    case EwOp::maximum:
    case EwOp::minimum:
    case EwOp::clip:
      return Family::arithmetic;
    case EwOp::sub:
    case EwOp::mod:
    case EwOp::pow:
      return Family::logical_arith;
    case EwOp::div:
      return Family::divide;
    case EwOp::eq:
    case EwOp::ne:
    case EwOp::lt:
    case EwOp::le:
    case EwOp::gt:
    case EwOp::ge:
      return Family::compare;
    case EwOp::logical_and:
    case EwOp::logical_or:
    case EwOp::logical_not:
      return Family::logic;
    case EwOp::neg:
    case EwOp::abs:
    case EwOp::sign:
      return Family::same;
    case EwOp::isnan:
    case EwOp::isinf:
    case EwOp::isfinite:
      return Family::predicate;
    case EwOp::where:
      return Family::select;
    case EwOp::cast:
      return Family::cast;
    default:
      return Family::floating;
  }
}

// The dtype the arrays and scalars of `args` promote to (from `first` on).
DType promoted(std::span<const detail::EwArg> args, std::size_t first) {
  bool any = false;
  DType p = DType::boolean;
  for (std::size_t i = first; i < args.size(); ++i)
    if (args[i].array)
      p = any ? promote(p, args[i].array->dtype) : args[i].array->dtype, any = true;
  for (std::size_t i = first; i < args.size(); ++i)
    if (!args[i].array) p = promote_scalar(p, args[i].kind);
  return p;
}

// The dtype operation `op` computes its operands in.
DType operand_dtype(EwOp op, std::span<const detail::EwArg> args) {
  const DType p = promoted(args, op == EwOp::where ? 1 : 0);
  switch (family(op)) {
    case Family::logical_arith:
      return p == DType::boolean ? DType::i8 : p;
    case Family::divide:
      return detail::is_float(p) ? p : DType::f64;
    case Family::logic:
      return DType::boolean;
    case Family::floating:
      return float_result(p);
    default:
      return p;
  }
}

// What `op` answers when its operands are computed in `as`.
DType result_dtype(EwOp op, DType as) {
  switch (family(op)) {
    case Family::compare:
    case Family::logic:
    case Family::predicate:
      return DType::boolean;
    default:
      return as;
  }
}

// A scalar's value as the dtype `as` holds it (16-bit floats rounded), or an error when an
// integer does not fit an integer type (NumPy 2 raises so too).
void convert_scalar(const detail::EwArg& arg, DType as, Input& in) {
  in.as = as;
  in.value = arg.value;
  in.bits = arg.bits;
  if (as == DType::f16) in.value = half_to_float(float_to_half(static_cast<float>(arg.value)));
  if (as == DType::bf16) in.value = bf16_to_float(float_to_bf16(static_cast<float>(arg.value)));
  if (as == DType::boolean) in.value = arg.value != 0, in.bits = arg.value != 0;
  if (arg.kind != ScalarKind::integer || detail::is_float(as) || as == DType::boolean) return;
  const int bits = 8 * detail::dtype_bytes(as);
  const long double lo = detail::is_unsigned(as) ? 0 : -std::ldexp(1.0L, bits - 1);
  const long double hi = std::ldexp(1.0L, detail::is_unsigned(as) ? bits : bits - 1) - 1;
  if (arg.value < lo || arg.value > hi)
    throw Error(fmt::format(
        "the scalar {} does not fit the array's {} (NumPy 2 refuses it too): convert the "
        "array first, e.g. a.astype<int64_t>()",
        static_cast<long long>(arg.value), dtype_name(as)));
}

// What an input adds to a Node's limits: its own operations and parameters.
void count_input(const Input& in, Node& node) {
  if (!in.array) {
    node.params += 1;
    return;
  }
  if (const Node* n = node_of(*in.array)) {
    node.depth = std::max(node.depth, n->depth + 1);
    node.params += n->params;
  } else {
    node.params += in.array->is_view ? 1 + 2 * kMaxRank : 1;
  }
}

// Splits a Node that is past the limits: its biggest pending inputs run as kernels of their
// own and become arrays it reads.
void keep_within_limits(Node& node) {
  for (;;) {
    node.depth = 1;
    node.params = 0;
    for (const Input& in : node.inputs) count_input(in, node);
    if (node.depth <= kMaxDepth && node.params <= kMaxParams) return;
    Input* biggest = nullptr;
    for (Input& in : node.inputs)
      if (in.array && node_of(*in.array) &&
          (!biggest || node_of(*in.array)->params > node_of(*biggest->array)->params))
        biggest = &in;
    if (!biggest) return;  // only leaves and scalars: within any real kernel's limits
    detail::array_settle(*biggest->array);
  }
}

const std::shared_ptr<runtime::Driver>& driver_of(std::span<const detail::EwArg> args) {
  const std::shared_ptr<runtime::Driver>* driver = nullptr;
  for (const auto& a : args) {
    if (!a.array) continue;
    if (driver && a.array->driver != *driver)
      throw Error("an operation mixes arrays of two gs::Contexts; copy one into the other's");
    driver = &a.array->driver;
  }
  if (!driver) throw Error("internal error: an elementwise operation without an array");
  return *driver;
}

}  // namespace

Dim broadcast(const Dim& a, const Dim& b) {
  const int rank = std::max(a.rank(), b.rank());
  Dim out = Dim::of_rank(rank, 1);
  for (int k = 0; k < rank; ++k) {
    const int ka = k - (rank - a.rank()), kb = k - (rank - b.rank());
    const int64_t ea = ka >= 0 ? a[ka] : 1, eb = kb >= 0 ? b[kb] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      throw Error(fmt::format(
          "shapes {} and {} cannot be broadcast together: axis {} from the end is {} in one and "
          "{} in the other (each must be equal or 1)",
          a.str(), b.str(), rank - k, ea, eb));
    out[k] = ea == 1 ? eb : ea;
  }
  return out;
}

std::shared_ptr<ArrayHandle> pending_handle(const std::shared_ptr<runtime::Driver>& driver,
                                            std::shared_ptr<Node> node) {
  auto h = std::make_shared<ArrayHandle>();
  h->driver = driver;
  h->dtype = node->dtype;
  h->shape = node->shape;
  h->producer = std::move(node);
  h->pending.store(true, std::memory_order_release);
  track_pending(h);
  return h;
}

std::shared_ptr<Node> arange_node(DType dtype, const Dim& shape, double start, double step,
                                  double stop, int64_t last) {
  auto node = std::make_shared<Node>();
  node->op = EwOp::arange;
  node->dtype = dtype;
  node->shape = shape;
  for (double v : {start, step, stop}) {
    Input in;
    in.as = DType::f64;
    in.value = v;
    node->inputs.push_back(in);
  }
  Input end;
  end.as = DType::i64;
  end.value = static_cast<long double>(last);
  end.bits = static_cast<uint64_t>(last);
  node->inputs.push_back(end);
  node->params = 4;
  return node;
}

void Node::produce(ArrayHandle& into) {
  Program program = build_program(*this, into, /*fresh=*/true);
  launch_program(into.driver, program);
}

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> elementwise(EwOp op, DType result, std::span<EwArg> args) {
  if (array::in_task(args)) return array::task_elementwise(op, result, args);
  std::lock_guard lock(lazy_mutex());
  const std::shared_ptr<runtime::Driver> driver = array::driver_of(args);
  return array::pending_handle(driver, array::make_node(op, result, args));
}

}  // namespace gridspan::detail

namespace gridspan::array {

std::shared_ptr<Node> make_node(EwOp op, DType result, std::span<detail::EwArg> args) {
  auto node = std::make_shared<array::Node>();
  node->inputs.reserve(args.size());
  node->op = op;
  const DType as = array::operand_dtype(op, args);
  node->dtype = op == EwOp::cast ? result : array::result_dtype(op, as);
  if (node->dtype != result)
    throw Error(fmt::format("internal error: {} computed {} where the operator promised {}",
                            static_cast<int>(op), dtype_name(node->dtype), dtype_name(result)));
  bool shaped = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    array::Input in;
    const DType in_as =
        op == EwOp::where && i == 0 ? DType::boolean
        : array::family(op) == array::Family::predicate || array::family(op) == array::Family::cast
            ? args[i].array->dtype
            : as;
    if (args[i].array) {
      in.array = std::move(args[i].array);  // the caller's copy: one reference fewer to count
      in.as = in_as;
      node->shape = shaped ? array::broadcast(node->shape, in.array->shape) : in.array->shape;
      shaped = true;
    } else {
      array::convert_scalar(args[i], in_as, in);
    }
    node->inputs.push_back(std::move(in));
  }
  array::keep_within_limits(*node);
  return node;
}

std::shared_ptr<Node> assign_node(const ArrayHandle& target, const detail::EwArg& value) {
  auto node = std::make_shared<array::Node>();
  node->op = EwOp::cast;
  node->dtype = target.dtype;
  array::Input in;
  if (value.array) {
    Dim b;
    try {
      b = array::broadcast(target.shape, value.array->shape);
    } catch (const Error&) {
    }
    if (b != target.shape)
      throw Error(fmt::format("cannot assign an array of shape {} to one of shape {}",
                              value.array->shape.str(), target.shape.str()));
    in.array = value.array;
    in.as = value.array->dtype;
  } else {
    const DType natural = value.kind == ScalarKind::floating  ? DType::f64
                          : value.kind == ScalarKind::integer ? DType::i64
                                                              : DType::boolean;
    if (value.kind == ScalarKind::integer && !detail::is_float(target.dtype)) {
      array::Input check;
      array::convert_scalar(value, target.dtype, check);  // throws when it does not fit
    }
    array::convert_scalar(value, natural, in);
  }
  node->inputs.push_back(std::move(in));
  node->shape = target.shape;
  array::keep_within_limits(*node);
  return node;
}

}  // namespace gridspan::array

namespace gridspan::detail {

void assign(const std::shared_ptr<ArrayHandle>& target, const EwArg& value) {
  if (!target) throw_null_array();
  if (target->task || (value.array && value.array->task)) return array::task_assign(target, value);
  std::lock_guard lock(lazy_mutex());
  if (target->pending.load(std::memory_order_acquire)) array_settle(*target);
  if (value.array && value.array->driver != target->driver)
    throw Error("assigning an array of another gs::Context; copy it into this one's first");
  auto node = array::assign_node(*target, value);
  array::Program program = array::build_program(*node, *target, /*fresh=*/false);
  array::launch_program(target->driver, program);
}

}  // namespace gridspan::detail

namespace gridspan::detail {

int64_t arange_length(double start, double stop, double step) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    throw Error(
        fmt::format("arange({}, {}, {}): the step must be finite and not 0, the bounds "
                    "finite",
                    start, stop, step));
  return std::max<int64_t>(0, static_cast<int64_t>(std::ceil((stop - start) / step)));
}

std::shared_ptr<ArrayHandle> index_sequence(const std::shared_ptr<runtime::Driver>& driver,
                                            DType dtype, int64_t n, double start, double step,
                                            bool last, double stop) {
  if (n < 0) throw Error(fmt::format("an array of {} elements: the length must be 0 or more", n));
  std::lock_guard lock(lazy_mutex());
  return array::pending_handle(
      driver, array::arange_node(dtype, Dim{n}, start, step, stop, last ? n - 1 : -1));
}

}  // namespace gridspan::detail

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> random_array(const std::shared_ptr<runtime::Driver>& driver,
                                          DType dtype, const Dim& shape, bool normal, uint64_t seed,
                                          double lo, double hi) {
  std::lock_guard lock(lazy_mutex());
  auto node = std::make_shared<array::Node>();
  node->op = normal ? EwOp::random_normal : EwOp::random_uniform;
  node->dtype = dtype;
  node->shape = shape;
  array::Input s;
  s.as = DType::u64;
  s.value = static_cast<long double>(seed);
  s.bits = seed;
  node->inputs.push_back(s);
  for (double v : {lo, hi}) {
    array::Input in;
    in.as = DType::f64;
    in.value = v;
    node->inputs.push_back(in);
  }
  node->params = 3;
  auto h = array::pending_handle(driver, std::move(node));
  array_settle(*h);  // made on its own: its numbers count the elements of this array
  return h;
}

}  // namespace gridspan::detail
