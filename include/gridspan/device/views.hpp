// Array views a kernel receives: gridspan::Scalar/Vector/Matrix/Tensor<T>, indexed with
// GLOBAL element indices over the chunk (or temporary) the runtime staged for the
// superblock. A view is a pointer pre-offset by the chunk's lo plus strides: free when not
// checked. Built with GRIDSPAN_CHECKED=1, every access is tested against the declared
// access region; the first violation is recorded in the launch's GsCheckState and the
// access goes to a scratch element instead, so the kernel runs on without harm.
//
//   __device__ void k(dim3 blockIdx, gridspan::Matrix<float> out, const gridspan::Vector<float> in)
//   { ... out(i, j) = in[j];  out[i][j] += 1;  sum.reduce(i, v); ... }
#pragma once

#include "abi.h"

#ifdef __CUDACC__
#define GRIDSPAN_HD __host__ __device__ __forceinline__
#else
#include "cpu_atomic.hpp"
#define GRIDSPAN_HD inline __attribute__((always_inline))
#endif

#ifndef GRIDSPAN_CHECKED
#define GRIDSPAN_CHECKED 0
#endif

namespace gridspan {
namespace detail {

template <bool B, class T = int>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  using type = T;
};
template <bool B>
using enable_if_t = typename enable_if<B>::type;
template <class T>
struct remove_const {
  using type = T;
};
template <class T>
struct remove_const<const T> {
  using type = T;
};
template <class A, class B>
struct is_same {
  static constexpr bool value = false;
};
template <class A>
struct is_same<A, A> {
  static constexpr bool value = true;
};
template <class T>
struct is_integer {
  static constexpr bool value = false;
};
#define GRIDSPAN_IS_INTEGER(T)          \
  template <>                           \
  struct is_integer<T> {                \
    static constexpr bool value = true; \
  };
GRIDSPAN_IS_INTEGER(bool)
GRIDSPAN_IS_INTEGER(char)
GRIDSPAN_IS_INTEGER(signed char)
GRIDSPAN_IS_INTEGER(unsigned char)
GRIDSPAN_IS_INTEGER(short)
GRIDSPAN_IS_INTEGER(unsigned short)
GRIDSPAN_IS_INTEGER(int)
GRIDSPAN_IS_INTEGER(unsigned int)
GRIDSPAN_IS_INTEGER(long)
GRIDSPAN_IS_INTEGER(unsigned long)
GRIDSPAN_IS_INTEGER(long long)
GRIDSPAN_IS_INTEGER(unsigned long long)
#undef GRIDSPAN_IS_INTEGER

template <class T, bool = is_integer<T>::value>
struct is_signed {
  static constexpr bool value = false;
};
template <class T>
struct is_signed<T, true> {
  static constexpr bool value = T(-1) < T(0);
};
template <class T>
struct is_const {
  static constexpr bool value = false;
};
template <class T>
struct is_const<const T> {
  static constexpr bool value = true;
};
/// A 16-bit floating-point type (__half, __nv_bfloat16, gs::float16, gs::bfloat16): its
/// sums and products reduce into float32 partials (View::reduce).
template <class T>
struct is_float16 {
  static constexpr bool value =
      sizeof(T) == 2 && !is_integer<typename remove_const<T>::type>::value;
};
/// Whether a View<From> converts to a View<To>: `To` may add const, and integers of one
/// size and signedness (long and long long) are interchangeable.
template <class From, class To>
struct compatible {
  using F = typename remove_const<From>::type;
  using T = typename remove_const<To>::type;
  static constexpr bool same_integer = is_integer<F>::value && is_integer<T>::value &&
                                       sizeof(F) == sizeof(T) &&
                                       is_signed<F>::value == is_signed<T>::value &&
                                       !is_same<F, bool>::value && !is_same<T, bool>::value;
  static constexpr bool value = !is_same<From, To>::value &&
                                (is_const<To>::value || !is_const<From>::value) &&
                                (is_same<F, T>::value || same_integer);
};

/// a op b for a GsReduceOp (& and | only for integers; the annotation rejects the rest).
template <class T>
GRIDSPAN_HD T combine(int32_t op, T a, T b) {
  switch (op) {
    case GS_ADD:
      return T(a + b);
    case GS_MUL:
      return T(a * b);
    case GS_MIN:
      return b < a ? b : a;
    case GS_MAX:
      return a < b ? b : a;
    default:
      break;
  }
  if constexpr (is_integer<T>::value) {
    if (op == GS_AND) return T(a & b);
    if (op == GS_OR) return T(a | b);
  }
  return a;
}

/// *p = *p op v, atomically (other superblocks or threads may combine into p at once).
template <class T>
GRIDSPAN_HD void atomic_combine(int32_t op, T* p, T v) {
#ifdef __CUDACC__
  // The hardware's own atomics where they exist, a compare-and-swap loop otherwise.
  if constexpr (is_same<T, float>::value || is_same<T, double>::value || is_same<T, int>::value ||
                is_same<T, unsigned int>::value || is_same<T, unsigned long long>::value) {
    if (op == GS_ADD) {
      atomicAdd(p, v);
      return;
    }
  }
  if constexpr (is_same<T, int>::value || is_same<T, unsigned int>::value ||
                is_same<T, long long>::value || is_same<T, unsigned long long>::value) {
    if (op == GS_MIN) {
      atomicMin(p, v);
      return;
    }
    if (op == GS_MAX) {
      atomicMax(p, v);
      return;
    }
  }
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    using B = unsigned long long;
    if constexpr (sizeof(T) == 4) {
      unsigned int* bp = reinterpret_cast<unsigned int*>(p);
      unsigned int old = *bp, assumed;
      do {
        assumed = old;
        T a;
        memcpy(&a, &assumed, 4);
        const T n = combine(op, a, v);
        unsigned int nb;
        memcpy(&nb, &n, 4);
        old = atomicCAS(bp, assumed, nb);
      } while (old != assumed);
    } else {
      B* bp = reinterpret_cast<B*>(p);
      B old = *bp, assumed;
      do {
        assumed = old;
        T a;
        memcpy(&a, &assumed, 8);
        const T n = combine(op, a, v);
        B nb;
        memcpy(&nb, &n, 8);
        old = atomicCAS(bp, assumed, nb);
      } while (old != assumed);
    }
  } else {
    // 1- and 2-byte elements: CAS on the aligned 32-bit word that holds them.
    const unsigned long long address = reinterpret_cast<unsigned long long>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(address & ~3ull);
    const unsigned int shift = static_cast<unsigned int>(address & 3) * 8;
    const unsigned int mask = ((1u << (sizeof(T) * 8)) - 1u) << shift;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      unsigned int bits = (assumed & mask) >> shift;
      T a;
      memcpy(&a, &bits, sizeof(T));
      const T n = combine(op, a, v);
      unsigned int nb = 0;
      memcpy(&nb, &n, sizeof(T));
      old = atomicCAS(word, assumed, (assumed & ~mask) | (nb << shift));
    } while (old != assumed);
  }
#else
  if constexpr (is_integer<T>::value && !is_same<T, bool>::value) {
    if (op == GS_ADD) {
      __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
      return;
    }
  }
  cpu_detail::atomic_update(p, [op, v](T a) { return combine(op, a, v); });
#endif
}

#if GRIDSPAN_CHECKED
/// What checked mode needs of a view: where to report, and the declared access region.
struct CheckInfo {
  GsCheckState* state;
  int64_t lo[3];
  int64_t hi[3];
  int32_t param;
  int32_t wide;  // a float32 partial of a 16-bit array: only .reduce may touch it
};

// Where an out-of-region access goes instead, so the kernel continues without harm. On the
// cpu backend a namespace-scope thread_local (internal linkage): a function-local static in
// a template would be a GNU "unique" TLS symbol, which LeakSanitizer cannot scan once the
// kernel library is loaded with dlopen.
#ifndef __CUDACC__
alignas(16) static thread_local unsigned char t_scratch[16];
#endif
template <class T>
GRIDSPAN_HD T& scratch() {
#ifdef __CUDACC__
  __shared__ alignas(16) unsigned char buf[16];
  return *reinterpret_cast<T*>(buf);
#else
  return *reinterpret_cast<T*>(t_scratch);
#endif
}

/// True when (i0, i1, i2) lies in the region on the view's first `rank` axes (a 0-d view
/// uses axis 0 with index 0: its region is [0, 1) when it may be accessed).
GRIDSPAN_HD bool check_access(const CheckInfo& c, int rank, int64_t i0, int64_t i1, int64_t i2,
                              bool reducing = false) {
  const int64_t idx[3] = {i0, i1, i2};
  const int axes = rank == 0 ? 1 : rank;
  bool inside = true;
  for (int a = 0; a < axes; ++a) inside = inside && idx[a] >= c.lo[a] && idx[a] < c.hi[a];
  if (inside && (reducing || !c.wide)) return true;
  if (c.state) {
#ifdef __CUDACC__
    const bool first = atomicCAS(&c.state->violated, 0, 1) == 0;
#else
    int32_t expected = 0;
    const bool first = __atomic_compare_exchange_n(&c.state->violated, &expected, 1, false,
                                                   __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
#endif
    if (first) {
      c.state->kind = inside ? GS_CHECK_RAW_PARTIAL : GS_CHECK_OUTSIDE;
      c.state->param = c.param;
      c.state->index[0] = i0;
      c.state->index[1] = i1;
      c.state->index[2] = i2;
    }
  }
  return false;
}
#endif

/// The element pointer and remaining strides of a partly indexed view (`m[i]` of a
/// Matrix is a Slice<T, 1>); indexing it again gives the next slice or the element.
template <class T, int N>
class Slice {
 public:
  GRIDSPAN_HD decltype(auto) operator[](int64_t i) const {
    if constexpr (N == 1) {
#if GRIDSPAN_CHECKED
      int64_t idx[3] = {idx_[0], idx_[1], idx_[2]};
      idx[rank_ - 1] = i;
      if (!check_access(check_, rank_, idx[0], idx[1], idx[2])) return scratch<T>();
#endif
      return static_cast<T&>(p_[i]);
    } else {
      Slice<T, N - 1> s;
      s.p_ = p_ + i * stride_[0];
#if GRIDSPAN_CHECKED
      s.check_ = check_;
      s.rank_ = rank_;
      s.idx_[0] = idx_[0];
      s.idx_[1] = i;
      s.idx_[2] = 0;
#endif
      return s;
    }
  }

  T* p_;
  int64_t stride_[1];  // of the first remaining index, when N == 2
#if GRIDSPAN_CHECKED
  CheckInfo check_;
  int32_t rank_;
  int64_t idx_[3];  // the indices given so far
#endif
};

/// A view of an N-dimensional array (0 <= N <= 3); see Scalar, Vector, Matrix, Tensor.
template <class T, int N>
class View {
 public:
  using value_type = T;
  static constexpr int rank = N;

  View() = default;
  /// A read-only view from a writable one (`Vector<const float>` from `Vector<float>`), or
  /// between integer types of one size and signedness (`long long` and `int64_t`).
  template <class U, detail::enable_if_t<compatible<U, T>::value> = 0>
  GRIDSPAN_HD View(const View<U, N>& o) {
    base_ = reinterpret_cast<T*>(o.base_);
    data_ = reinterpret_cast<T*>(o.data_);
    for (int a = 0; a < (N > 1 ? N - 1 : 1); ++a) stride_[a] = o.stride_[a];
    wide_ = o.wide_;
    mode_ = o.mode_;
    op_ = o.op_;
#if GRIDSPAN_CHECKED
    check_ = o.check_;
#endif
  }

  /// The view of argument `param` of a launch (called by the generated wrapper).
  GRIDSPAN_HD static View from_arg(const GsArrayArg& a, int32_t param, GsCheckState* state) {
    View v;
    v.data_ = static_cast<T*>(a.data);
    int64_t offset = 0;
    if constexpr (N == 1) {
      offset = a.lo[0];
    } else if constexpr (N == 2) {
      v.stride_[0] = a.extent[1];
      offset = a.lo[0] * a.extent[1] + a.lo[1];
    } else if constexpr (N == 3) {
      v.stride_[0] = a.extent[1] * a.extent[2];
      v.stride_[1] = a.extent[2];
      offset = a.lo[0] * v.stride_[0] + a.lo[1] * a.extent[2] + a.lo[2];
    }
    if constexpr (N < 2) v.stride_[0] = 1;
    v.base_ = v.data_ - offset;
    // A 16-bit sum's or product's partial is float32, so that it is rounded once, at the end.
    v.wide_ =
        is_float16<T>::value && a.elem_size == 4 ? static_cast<float*>(a.data) - offset : nullptr;
    v.mode_ = a.mode;
    v.op_ = a.op;
#if GRIDSPAN_CHECKED
    v.check_.state = state;
    v.check_.param = param;
    v.check_.wide = v.wide_ != nullptr;
    for (int ax = 0; ax < 3; ++ax) {
      v.check_.lo[ax] = a.region_lo[ax];
      v.check_.hi[ax] = a.region_hi[ax];
    }
#else
    (void)param;
    (void)state;
#endif
    return v;
  }

  // ---- element access: v[i], m(i, j), m[i][j], t(i, j, k), t[i][j][k], s() -------------
  template <int M = N, detail::enable_if_t<M == 0> = 0>
  GRIDSPAN_HD T& operator()() {
    return at(0, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 0> = 0>
  GRIDSPAN_HD const T& operator()() const {
    return at(0, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 1> = 0>
  GRIDSPAN_HD T& operator()(int64_t i) {
    return at(i, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 1> = 0>
  GRIDSPAN_HD const T& operator()(int64_t i) const {
    return at(i, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 2> = 0>
  GRIDSPAN_HD T& operator()(int64_t i, int64_t j) {
    return at(i, j, 0);
  }
  template <int M = N, detail::enable_if_t<M == 2> = 0>
  GRIDSPAN_HD const T& operator()(int64_t i, int64_t j) const {
    return at(i, j, 0);
  }
  template <int M = N, detail::enable_if_t<M == 3> = 0>
  GRIDSPAN_HD T& operator()(int64_t i, int64_t j, int64_t k) {
    return at(i, j, k);
  }
  template <int M = N, detail::enable_if_t<M == 3> = 0>
  GRIDSPAN_HD const T& operator()(int64_t i, int64_t j, int64_t k) const {
    return at(i, j, k);
  }
  template <int M = N, detail::enable_if_t<M == 1> = 0>
  GRIDSPAN_HD T& operator[](int64_t i) {
    return at(i, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 1> = 0>
  GRIDSPAN_HD const T& operator[](int64_t i) const {
    return at(i, 0, 0);
  }
  template <int M = N, detail::enable_if_t<(M >= 2)> = 0>
  GRIDSPAN_HD Slice<T, N - 1> operator[](int64_t i) {
    return slice<T>(i);
  }
  template <int M = N, detail::enable_if_t<(M >= 2)> = 0>
  GRIDSPAN_HD Slice<const T, N - 1> operator[](int64_t i) const {
    return slice<const T>(i);
  }

  // ---- reduce(op) / atomic(op) parameters: combine a contribution with the op declared
  // in the annotation. A reduce partial is private to the superblock: on the cpu backend its
  // blocks run on one thread, so it combines plainly; on a GPU, and for atomic parameters,
  // contributions combine atomically. The runtime's partials of a 16-bit sum or product are
  // float32: a contribution is widened and added there, and the result rounded once.
  template <int M = N, detail::enable_if_t<M == 0> = 0>
  GRIDSPAN_HD void reduce(T value) const {
    reduce_at(value, 0, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 1> = 0>
  GRIDSPAN_HD void reduce(int64_t i, T value) const {
    reduce_at(value, i, 0, 0);
  }
  template <int M = N, detail::enable_if_t<M == 2> = 0>
  GRIDSPAN_HD void reduce(int64_t i, int64_t j, T value) const {
    reduce_at(value, i, j, 0);
  }
  template <int M = N, detail::enable_if_t<M == 3> = 0>
  GRIDSPAN_HD void reduce(int64_t i, int64_t j, int64_t k, T value) const {
    reduce_at(value, i, j, k);
  }

  /// The chunk's first element (the one at its lo corner), row-major.
  GRIDSPAN_HD T* data() const {
    return data_;
  }

  // Public so that View<const T> can be built from View<T>; not part of the interface.
  T* base_;  // data_ offset by -lo, so a global index addresses the chunk directly
  T* data_;
  float* wide_;  // a float32 partial's base_ (a 16-bit sum or product), else null
  int64_t stride_[N > 1 ? N - 1 : 1];
  int32_t mode_;
  int32_t op_;
#if GRIDSPAN_CHECKED
  CheckInfo check_;
#endif

 private:
  GRIDSPAN_HD int64_t offset(int64_t i, int64_t j, int64_t k) const {
    if constexpr (N == 0)
      return 0;
    else if constexpr (N == 1)
      return i;
    else if constexpr (N == 2)
      return i * stride_[0] + j;
    else
      return i * stride_[0] + j * stride_[1] + k;
  }
  GRIDSPAN_HD T& at(int64_t i, int64_t j, int64_t k) const {
#if GRIDSPAN_CHECKED
    if (!check_access(check_, N, i, j, k)) return scratch<T>();
#endif
    return base_[offset(i, j, k)];
  }
  template <class E>
  GRIDSPAN_HD Slice<E, N - 1> slice(int64_t i) const {
    Slice<E, N - 1> s;
    s.p_ = base_ + i * stride_[0];
    s.stride_[0] = N == 3 ? stride_[N == 3 ? 1 : 0] : 1;
#if GRIDSPAN_CHECKED
    s.check_ = check_;
    s.rank_ = N;
    s.idx_[0] = i;
    s.idx_[1] = 0;
    s.idx_[2] = 0;
#endif
    return s;
  }
  GRIDSPAN_HD void reduce_at(T value, int64_t i, int64_t j, int64_t k) const {
    if constexpr (is_float16<T>::value) {
      if (wide_) {
#if GRIDSPAN_CHECKED
        if (!check_access(check_, N, i, j, k, true)) return;
#endif
        return combine_into(wide_[offset(i, j, k)], static_cast<float>(value));
      }
    }
    combine_into(at(i, j, k), value);
  }
  template <class E>
  GRIDSPAN_HD void combine_into(E& target, E value) const {
#ifdef __CUDACC__
    atomic_combine(op_, &target, value);
#else
    if (mode_ == GS_REDUCE)
      target = combine(op_, target, value);
    else
      atomic_combine(op_, &target, value);
#endif
  }
};

}  // namespace detail

/// A 0-d array: `s()` is the element, `s.reduce(v)` a contribution.
template <class T>
using Scalar = detail::View<T, 0>;
/// A 1-d array: `v[i]`, `v(i)`, `v.reduce(i, x)` with global index i.
template <class T>
using Vector = detail::View<T, 1>;
/// A 2-d row-major array: `m(i, j)`, `m[i][j]`, `m.reduce(i, j, x)`.
template <class T>
using Matrix = detail::View<T, 2>;
/// A 3-d row-major array: `t(i, j, k)`, `t[i][j][k]`, `t.reduce(i, j, k, x)`.
template <class T>
using Tensor = detail::View<T, 3>;

}  // namespace gridspan
