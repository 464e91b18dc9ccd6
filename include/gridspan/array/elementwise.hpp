// Elementwise operations on gs::Array: operators, comparisons and math functions with
// NumPy's broadcasting and promotion (promote.hpp). Results are lazy: an operation answers
// a pending array at once, and a chain of them runs as one generated kernel when its value
// is needed (a read, a kernel launch, a reduction, synchronize()).
//
//   auto y = gs::tanh(a * b + c) * 0.5f - a;   // nothing runs yet
//   float first = y.to_vector()[0];            // one kernel computes y
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "gridspan/api/array.hpp"
#include "gridspan/array/promote.hpp"

namespace gridspan {

namespace detail {
enum class EwOp : uint8_t {
  // arithmetic
  add,
  sub,
  mul,
  div,
  mod,
  neg,
  pow,
  maximum,
  minimum,
  atan2,
  hypot,
  // comparisons and logic (answer bool)
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
  logical_not,
  isnan,
  isinf,
  isfinite,
  // math functions of one argument
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  sin,
  cos,
  tan,
  tanh,
  arcsin,
  arccos,
  arctan,
  sinh,
  cosh,
  abs,
  sign,
  floor,
  ceil,
  rint,
  round,
  erf,
  gelu,  // Cumo's fused activations (device/elementwise.hpp)
  gelu_tanh,
  silu,
  sigmoid,
  softplus,
  // others
  where,
  clip,
  cast,
  arange,  // start + i * step along the node's one axis (i == last: stop)
  random_uniform,
  random_normal,  // of the element's row-major number in the output
};

/// An argument of an elementwise operation: an array, or a C++ scalar and its kind.
struct EwArg {
  std::shared_ptr<ArrayHandle> array;
  ScalarKind kind = ScalarKind::floating;
  long double value = 0;  // exact for every integer up to 64 bits and every double
  uint64_t bits = 0;      // an integer's bits
};
template <class T>
EwArg ew_arg(const Array<T>& a) {
  EwArg arg;
  arg.array = a.shared();
  if (!arg.array) throw_null_array();
  return arg;
}
template <class S>
EwArg ew_arg(S s) {
  EwArg arg;
  arg.kind = scalar_kind<S>();
  if constexpr (std::is_same_v<S, float16> || std::is_same_v<S, bfloat16>)
    arg.value = static_cast<float>(s);
  else
    arg.value = static_cast<long double>(s);
  if constexpr (std::is_integral_v<S>) arg.bits = static_cast<uint64_t>(s);
  return arg;
}

/// A pending array: `op` over `args` (broadcast), of dtype `result`. Throws gs::Error when
/// the shapes cannot broadcast, or a scalar does not fit the array's integer type.
std::shared_ptr<ArrayHandle> elementwise(EwOp op, DType result, std::span<EwArg> args);
inline std::shared_ptr<ArrayHandle> elementwise(EwOp op, DType result,
                                                std::initializer_list<EwArg> args) {
  std::vector<EwArg> copy(args);
  return elementwise(op, result, std::span<EwArg>(copy));
}
/// Writes the value of `value` into `target` (an array or a view), converting to its dtype:
/// one kernel, launched now (asynchronously).
void assign(const std::shared_ptr<ArrayHandle>& target, const EwArg& value);

template <class T>
struct is_array : std::false_type {};
template <class T>
struct is_array<Array<T>> : std::true_type {};
template <class S>
constexpr bool is_scalar_v =
    std::is_arithmetic_v<S> || std::is_same_v<S, float16> || std::is_same_v<S, bfloat16>;

template <class X>
constexpr DType operand_dtype() {
  if constexpr (is_array<X>::value)
    return dtype_v<typename X::value_type>;
  else
    return dtype_v<X>;
}
// What a binary operation's operands promote to: NumPy's table between arrays, a scalar's
// kind against an array.
template <class X, class Y>
constexpr DType binary_dtype() {
  if constexpr (is_array<X>::value && is_array<Y>::value)
    return promote(operand_dtype<X>(), operand_dtype<Y>());
  else if constexpr (is_array<X>::value)
    return promote_scalar(operand_dtype<X>(), scalar_kind<Y>());
  else
    return promote_scalar(operand_dtype<Y>(), scalar_kind<X>());
}
template <class X, class Y>
constexpr bool binary_ok = (is_array<X>::value && (is_array<Y>::value || is_scalar_v<Y>)) ||
                           (is_array<Y>::value && is_scalar_v<X>);

template <DType D, std::size_t N>
Array<type_of_dtype_t<D>> make_result(EwOp op, EwArg (&&args)[N]) {
  return Array<type_of_dtype_t<D>>(elementwise(op, D, std::span<EwArg>(args, N)));
}
template <EwOp Op, DType D, class X, class Y>
auto binary(const X& x, const Y& y) {
  return make_result<D>(Op, {ew_arg(x), ew_arg(y)});
}
// Arithmetic on bools: + and * are logical (NumPy), - and % have no bool meaning.
template <DType D>
constexpr DType arithmetic_dtype() {
  return D == DType::boolean ? DType::i8 : D;
}
}  // namespace detail

// ---- operators: arrays with arrays or scalars on either side --------------------------------
#define GRIDSPAN_BINARY_OPERATOR(sym, op, dtype_expr)                             \
  template <class X, class Y, std::enable_if_t<detail::binary_ok<X, Y>, int> = 0> \
  auto operator sym(const X& x, const Y& y) {                                     \
    constexpr DType P = detail::binary_dtype<X, Y>();                             \
    return detail::binary<detail::EwOp::op, dtype_expr>(x, y);                    \
  }
GRIDSPAN_BINARY_OPERATOR(+, add, P)
GRIDSPAN_BINARY_OPERATOR(*, mul, P)
GRIDSPAN_BINARY_OPERATOR(-, sub, detail::arithmetic_dtype<P>())
GRIDSPAN_BINARY_OPERATOR(%, mod, detail::arithmetic_dtype<P>())
GRIDSPAN_BINARY_OPERATOR(/, div, detail::is_float(P) ? P : DType::f64)
GRIDSPAN_BINARY_OPERATOR(==, eq, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(!=, ne, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(<, lt, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(<=, le, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(>, gt, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(>=, ge, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(&&, logical_and, DType::boolean)
GRIDSPAN_BINARY_OPERATOR(||, logical_or, DType::boolean)
#undef GRIDSPAN_BINARY_OPERATOR

template <class T>
auto operator-(const Array<T>& a) {
  static_assert(!std::is_same_v<T, bool>, "negating a bool array: use !a (NumPy has no bool -)");
  return detail::make_result<dtype_v<T>>(detail::EwOp::neg, {detail::ew_arg(a)});
}
template <class T>
Array<bool> operator!(const Array<T>& a) {
  return detail::make_result<DType::boolean>(detail::EwOp::logical_not, {detail::ew_arg(a)});
}

// In place: the result converted to the array's dtype, written into it (or into the part of
// its base a view covers) by one kernel launched now. As NumPy's same_kind rule, a float
// result cannot go into an integer array.
#define GRIDSPAN_COMPOUND(sym, op)                                                       \
  template <class T, class Y, std::enable_if_t<detail::binary_ok<Array<T>, Y>, int> = 0> \
  Array<T>& operator sym##=(Array<T>& a, const Y& y) {                                   \
    auto value = a op y;                                                                 \
    using R = typename decltype(value)::value_type;                                      \
    static_assert(detail::is_float(dtype_v<T>) || !detail::is_float(dtype_v<R>),         \
                  "a float result cannot be stored into an integer array in place "      \
                  "(NumPy's same_kind rule): use a = (a " #op " y).astype<T>()");        \
    detail::assign(a.shared(), detail::ew_arg(value));                                   \
    return a;                                                                            \
  }
GRIDSPAN_COMPOUND(+, +)
GRIDSPAN_COMPOUND(-, -)
GRIDSPAN_COMPOUND(*, *)
GRIDSPAN_COMPOUND(/, /)
#undef GRIDSPAN_COMPOUND

// ---- math functions ---------------------------------------------------------------------
#define GRIDSPAN_FLOAT_FUNCTION(name)                                                              \
  template <class T>                                                                               \
  auto name(const Array<T>& a) {                                                                   \
    return detail::make_result<float_result(dtype_v<T>)>(detail::EwOp::name, {detail::ew_arg(a)}); \
  }
GRIDSPAN_FLOAT_FUNCTION(exp)
GRIDSPAN_FLOAT_FUNCTION(log)
GRIDSPAN_FLOAT_FUNCTION(log1p)
GRIDSPAN_FLOAT_FUNCTION(expm1)
GRIDSPAN_FLOAT_FUNCTION(sqrt)
GRIDSPAN_FLOAT_FUNCTION(rsqrt)
GRIDSPAN_FLOAT_FUNCTION(sin)
GRIDSPAN_FLOAT_FUNCTION(cos)
GRIDSPAN_FLOAT_FUNCTION(tan)
GRIDSPAN_FLOAT_FUNCTION(tanh)
GRIDSPAN_FLOAT_FUNCTION(arcsin)
GRIDSPAN_FLOAT_FUNCTION(arccos)
GRIDSPAN_FLOAT_FUNCTION(arctan)
GRIDSPAN_FLOAT_FUNCTION(sinh)
GRIDSPAN_FLOAT_FUNCTION(cosh)
GRIDSPAN_FLOAT_FUNCTION(floor)
GRIDSPAN_FLOAT_FUNCTION(ceil)
GRIDSPAN_FLOAT_FUNCTION(rint)
GRIDSPAN_FLOAT_FUNCTION(round)
GRIDSPAN_FLOAT_FUNCTION(erf)
// Activations, one kernel each (and fused with what surrounds them), as Cumo's: gelu =
// 0.5 x (1 + erf(x / sqrt(2))); gelu_tanh = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
// silu = x / (1 + exp(-x)); sigmoid = 1 / (1 + exp(-x)) computed without overflow for a
// negative x; softplus = log(1 + exp(x)) with exp in single precision, x where it overflows.
GRIDSPAN_FLOAT_FUNCTION(gelu)
GRIDSPAN_FLOAT_FUNCTION(gelu_tanh)
GRIDSPAN_FLOAT_FUNCTION(silu)
GRIDSPAN_FLOAT_FUNCTION(sigmoid)
GRIDSPAN_FLOAT_FUNCTION(softplus)
#undef GRIDSPAN_FLOAT_FUNCTION

/// |a| in a's dtype (the most negative integer stays as it is, as in NumPy).
template <class T>
Array<T> abs(const Array<T>& a) {
  return detail::make_result<dtype_v<T>>(detail::EwOp::abs, {detail::ew_arg(a)});
}
/// -1, 0 or 1 (NaN for NaN) in a's dtype.
template <class T>
Array<T> sign(const Array<T>& a) {
  return detail::make_result<dtype_v<T>>(detail::EwOp::sign, {detail::ew_arg(a)});
}

#define GRIDSPAN_PREDICATE(name)                                                         \
  template <class T>                                                                     \
  Array<bool> name(const Array<T>& a) {                                                  \
    return detail::make_result<DType::boolean>(detail::EwOp::name, {detail::ew_arg(a)}); \
  }
GRIDSPAN_PREDICATE(isnan)
GRIDSPAN_PREDICATE(isinf)
GRIDSPAN_PREDICATE(isfinite)
#undef GRIDSPAN_PREDICATE

#define GRIDSPAN_BINARY_FUNCTION(name, dtype_expr)                                \
  template <class X, class Y, std::enable_if_t<detail::binary_ok<X, Y>, int> = 0> \
  auto name(const X& x, const Y& y) {                                             \
    constexpr DType P = detail::binary_dtype<X, Y>();                             \
    return detail::binary<detail::EwOp::name, dtype_expr>(x, y);                  \
  }
GRIDSPAN_BINARY_FUNCTION(maximum, P)
GRIDSPAN_BINARY_FUNCTION(minimum, P)
GRIDSPAN_BINARY_FUNCTION(pow, detail::arithmetic_dtype<P>())
GRIDSPAN_BINARY_FUNCTION(atan2, float_result(P))
GRIDSPAN_BINARY_FUNCTION(hypot, float_result(P))
#undef GRIDSPAN_BINARY_FUNCTION

/// Elements of `a` where `cond` is true (nonzero), else of `b`; `a` and `b` arrays or scalars.
template <
    class C, class X, class Y,
    std::enable_if_t<detail::binary_ok<X, Y> || (detail::is_scalar_v<X> && detail::is_scalar_v<Y>),
                     int> = 0>
auto where(const Array<C>& cond, const X& x, const Y& y) {
  constexpr DType P =
      detail::is_array<X>::value || detail::is_array<Y>::value
          ? detail::binary_dtype<X, Y>()
          : promote_scalar(promote_scalar(DType::boolean, scalar_kind<X>()), scalar_kind<Y>());
  return detail::make_result<P>(detail::EwOp::where,
                                {detail::ew_arg(cond), detail::ew_arg(x), detail::ew_arg(y)});
}

/// a limited to [lo, hi] (scalars or arrays), in a's dtype promoted with them.
template <class T, class L, class H>
auto clip(const Array<T>& a, const L& lo, const H& hi) {
  constexpr DType P1 = detail::binary_dtype<Array<T>, L>();
  constexpr DType P = detail::is_array<H>::value ? promote(P1, detail::operand_dtype<H>())
                                                 : promote_scalar(P1, scalar_kind<H>());
  return detail::make_result<P>(detail::EwOp::clip,
                                {detail::ew_arg(a), detail::ew_arg(lo), detail::ew_arg(hi)});
}

}  // namespace gridspan
