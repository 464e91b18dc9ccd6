// Matrix products as native tasks over the rows of C: a task's superblock is a chunk of C's
// rows, it reads those rows of A and the whole of B (the runtime copies B to each device
// once), and calls BLAS on the chunk's memory (array/blas.hpp). An operand that is a plain
// transpose of a stored matrix goes to BLAS as that matrix with its transpose flag set;
// any other view, and a pending expression, is made an array first.
#include <fmt/format.h>

#include "array/blas.hpp"
#include "array/expr.hpp"
#include "array/launch.hpp"
#include "array/rows.hpp"
#include "gridspan/array/linalg.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/driver.hpp"

namespace gridspan::array {

namespace {

// An operand as BLAS takes it: a stored row-major matrix, maybe transposed.
struct Operand {
  std::shared_ptr<ArrayHandle> stored;  // settled, not a view
  bool trans = false;
};

bool plain_transpose(const ArrayHandle& h) {
  if (!h.is_view || h.view.linear || h.shape.rank() != 2) return false;
  const Dim& s = h.storage->meta->shape;
  const detail::ViewMap& v = h.view;
  return s.rank() == 2 && v.axis[0] == 1 && v.axis[1] == 0 && v.start[0] == 0 && v.start[1] == 0 &&
         v.step[0] == 1 && v.step[1] == 1 && s[0] == h.shape[1] && s[1] == h.shape[0];
}

// `h` in `dtype` as BLAS takes it (a copy where it must be one); a plain transpose passed by
// its flag where `by_flag`.
Operand operand(const std::shared_ptr<ArrayHandle>& h, DType dtype, bool by_flag) {
  detail::array_settle(*h);
  if (h->dtype == dtype && !h->is_view) return {h, false};
  if (by_flag && h->dtype == dtype && plain_transpose(*h)) {
    auto base = std::make_shared<ArrayHandle>();
    base->driver = h->driver;
    base->storage = h->storage;
    base->dtype = h->dtype;
    base->shape = h->storage->meta->shape;
    return {base, true};
  }
  auto copy = detail::elementwise(EwOp::cast, dtype, {detail::EwArg{h}});
  detail::array_settle(*copy);
  return {copy, false};
}

// The native function multiplying one superblock's rows of C, for dtype T.
template <class T>
NativeDef gemm_native(const std::string& name, bool trans_a, bool accumulate, bool allow_tf32) {
  auto handles = std::make_shared<blas::CublasHandles>();
  auto fn = [handles, allow_tf32](const NativeContext& nc, Matrix<const T> a, Matrix<const T> b,
                                  Matrix<T> c, int64_t m, int64_t n, int64_t k, int64_t b0,
                                  int64_t b1, int64_t ta, int64_t tb, double alpha, double beta) {
    (void)b0, (void)b1;  // the annotation's: B's stored extents
    const Rect r = nc.threads(Dim{m});
    const int64_t r0 = r.lo[0];
    blas::Gemm g;
    g.dtype = dtype_v<T>;
    g.trans_a = ta != 0, g.trans_b = tb != 0;
    g.m = r.hi[0] - r0, g.n = n, g.k = k;
    g.alpha = alpha, g.beta = beta;
    g.lda = a.stride_[0], g.ldb = b.stride_[0], g.ldc = c.stride_[0];
    g.a = g.trans_a ? a.base_ + r0 : a.base_ + r0 * g.lda;
    g.b = b.base_;
    g.c = c.base_ + r0 * g.ldc;
    if (void* stream = nc.stream())
      blas::gpu_gemm(g, *handles, nc.device, stream, allow_tf32);
    else
      blas::host_gemm(g);
  };
  auto def = NativeDef::from_function(
      name, fn, {"a", "b", "c", "m", "n", "k", "b0", "b1", "ta", "tb", "alpha", "beta"});
  def.annotate(fmt::format(
      "global i => {} c[i, 0 : n - 1], read {}, read b[0 : b0 - 1, 0 : b1 - 1]",
      accumulate ? "readwrite" : "write", trans_a ? "a[0 : k - 1, i]" : "a[i, 0 : k - 1]"));
  return def;
}

// The native function multiplying one tile of C by one panel of k (SUMMA's step: the
// runtime brings each task its tile's rows of A and columns of B over the panel), for
// dtype T: C[I, J] = alpha A[I, P] B[P, J] + beta C[I, J].
template <class T>
NativeDef tile_native(const std::string& name, bool trans_a, bool trans_b, bool accumulate,
                      bool allow_tf32) {
  auto handles = std::make_shared<blas::CublasHandles>();
  auto fn = [handles, allow_tf32](const NativeContext& nc, Matrix<const T> a, Matrix<const T> b,
                                  Matrix<T> c, int64_t m, int64_t n, int64_t p0, int64_t p1,
                                  int64_t ta, int64_t tb, double alpha, double beta) {
    const Rect r = nc.threads(Dim{n, m});  // x: C's columns, y: its rows
    const int64_t i0 = r.lo[1], j0 = r.lo[0];
    blas::Gemm g;
    g.dtype = dtype_v<T>;
    g.trans_a = ta != 0, g.trans_b = tb != 0;
    g.m = r.hi[1] - i0, g.n = r.hi[0] - j0, g.k = p1 - p0;
    g.alpha = alpha, g.beta = beta;
    g.lda = a.stride_[0], g.ldb = b.stride_[0], g.ldc = c.stride_[0];
    g.a = g.trans_a ? a.base_ + p0 * g.lda + i0 : a.base_ + i0 * g.lda + p0;
    g.b = g.trans_b ? b.base_ + j0 * g.ldb + p0 : b.base_ + p0 * g.ldb + j0;
    g.c = c.base_ + i0 * g.ldc + j0;
    if (void* stream = nc.stream())
      blas::gpu_gemm(g, *handles, nc.device, stream, allow_tf32);
    else
      blas::host_gemm(g);
  };
  auto def = NativeDef::from_function(
      name, fn, {"a", "b", "c", "m", "n", "p0", "p1", "ta", "tb", "alpha", "beta"});
  def.annotate(fmt::format("global [j, i] => {} c[i, j], read {}, read {}",
                           accumulate ? "readwrite" : "write",
                           trans_a ? "a[p0 : p1 - 1, i]" : "a[i, p0 : p1 - 1]",
                           trans_b ? "b[j, p0 : p1 - 1]" : "b[p0 : p1 - 1, j]"));
  return def;
}

// `f(T())` for the C++ type of a floating dtype.
template <class F>
NativeDef with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f64:
      return f(double());
    case DType::f16:
      return f(float16());
    case DType::bf16:
      return f(bfloat16());
    default:
      return f(float());
  }
}

NativeDef gemm_native_for(DType dtype, const std::string& name, bool trans_a, bool accumulate,
                          bool allow_tf32) {
  return with_float_type(dtype, [&](auto t) {
    return gemm_native<decltype(t)>(name, trans_a, accumulate, allow_tf32);
  });
}

NativeDef tile_native_for(DType dtype, const std::string& name, bool trans_a, bool trans_b,
                          bool accumulate, bool allow_tf32) {
  return with_float_type(dtype, [&](auto t) {
    return tile_native<decltype(t)>(name, trans_a, trans_b, accumulate, allow_tf32);
  });
}

std::string tile_name(DType dtype, bool trans_a, bool trans_b, bool accumulate, bool tf32) {
  return fmt::format("gs_gemm_tile_{}{}{}{}{}", dtype_name(dtype), trans_a ? "_at" : "",
                     trans_b ? "_bt" : "", accumulate ? "_acc" : "", tf32 ? "_tf32" : "");
}

std::string native_name(DType dtype, bool trans_a, bool accumulate, bool tf32) {
  return fmt::format("gs_gemm_{}{}{}{}", dtype_name(dtype), trans_a ? "_at" : "",
                     accumulate ? "_acc" : "", tf32 ? "_tf32" : "");
}

// C's distribution: the library's default cuts rows for memory-bound work (chunks of at
// least 8 MiB on cpu devices, 256 MiB on GPUs), which leaves a product of small matrices on
// one device; with at least 2^27 flops per device its rows (or batches) go over all of them.
DataDistribution product_distribution(const std::shared_ptr<runtime::Driver>& driver, DType dtype,
                                      const Dim& shape, int64_t k) {
  const int64_t devices = driver->device_count(), rows = shape[0];
  const double flops = 2.0 * double(shape.volume()) * double(k);
  if (devices > 1 && rows >= devices && flops >= double(devices) * double(int64_t(1) << 27))
    return dist::rows((rows + devices - 1) / devices);
  return detail::default_distribution(driver, dtype, shape);
}

// ---- SUMMA: tiles of C, panels of k ---------------------------------------------------------

int g_test_panels = 0;

// How many panels of k a product takes over tiles of C, or 0 for rows of C against the whole
// of B: tiles once B is more than a quarter of the smallest device budget (every device would
// hold all of it), in panels that keep B's part of a task within an eighth.
int64_t summa_panels(const std::shared_ptr<runtime::Driver>& driver, DType dtype, int64_t K,
                     int64_t N) {
  if (g_test_panels > 0) return std::min<int64_t>(g_test_panels, K);
  if (driver->device_count() < 2) return 0;
  double budget = 0;
  for (const RankInfo& r : driver->ranks())
    for (std::size_t b : r.device_memory)
      if (b && (budget == 0 || double(b) < budget)) budget = double(b);
  const double b_bytes = double(K) * double(N) * double(dtype_size(dtype));
  if (budget == 0 || b_bytes <= budget / 4) return 0;
  return std::min<int64_t>(K, static_cast<int64_t>(std::ceil(b_bytes / (budget / 8))));
}

// C in a grid of tiles, one per device: rows x columns, the larger side of C cut more.
DataDistribution tile_distribution(int devices, int64_t M, int64_t N) {
  int cut = 1;  // the grid's smaller side: the largest divisor of `devices` up to its root
  for (int d = 1; d * d <= devices; ++d)
    if (devices % d == 0) cut = d;
  const int64_t pr = M >= N ? devices / cut : cut, pc = devices / pr;
  const int64_t rm = (M + pr - 1) / pr, cn = (N + pc - 1) / pc;
  std::vector<ChunkSpec> chunks;
  for (int64_t a = 0; a < pr; ++a)
    for (int64_t b = 0; b < pc; ++b) {
      const Rect box(2, {a * rm, b * cn, 0},
                     {std::min(M, (a + 1) * rm), std::min(N, (b + 1) * cn), 1});
      if (!box.empty()) chunks.push_back(ChunkSpec{box, box, static_cast<int>(a * pc + b)});
    }
  return dist::custom("matmul tiles", [chunks](const Dim&, int) { return chunks; });
}

// One superblock per chunk of C (x: its columns, y: its rows).
std::vector<Superblock> tile_chunks(const plan::ArrayMeta& c) {
  std::vector<Superblock> sbs;
  for (const plan::ChunkMeta& ch : c.chunks)
    if (!ch.owned.empty())
      sbs.push_back(Superblock{
          Rect(2, {ch.owned.lo[1], ch.owned.lo[0], 0}, {ch.owned.hi[1], ch.owned.hi[0], 1}),
          ch.device});
  return sbs;
}

// One superblock per chunk of C's rows.
std::vector<Superblock> row_chunks(const plan::ArrayMeta& c) {
  std::vector<Superblock> sbs;
  for (const plan::ChunkMeta& ch : c.chunks)
    if (!ch.owned.empty())
      sbs.push_back(Superblock{Rect(1, {ch.owned.lo[0], 0, 0}, {ch.owned.hi[0], 1, 1}), ch.device});
  return sbs;
}

void check_float(const char* what, const ArrayHandle& a, const ArrayHandle& b, DType dtype) {
  if (!detail::is_float(dtype))
    throw Error(
        fmt::format("{} of {} and {}: {}; convert first (astype<float>() or "
                    "astype<double>())",
                    what, dtype_name(a.dtype), dtype_name(b.dtype),
                    std::string(what) == "gemm"
                        ? "gemm scales in floating point (matmul, dot and inner take integer "
                          "matrices)"
                        : "batched integer products are not supported yet (2-D ones are)"));
}

void check_operands(const ArrayHandle& a, const ArrayHandle& b, const ArrayHandle* c, DType dtype) {
  if (a.shape.rank() != 2 || b.shape.rank() != 2)
    throw Error(fmt::format("matmul of shapes {} and {}: both must be 2-D matrices", a.shape.str(),
                            b.shape.str()));
  if (a.shape[1] != b.shape[0])
    throw Error(fmt::format("matmul of shapes {} and {}: the inner dimensions differ ({} and {})",
                            a.shape.str(), b.shape.str(), a.shape[1], b.shape[0]));
  check_float("gemm", a, b, dtype);
  if (c && (c->shape != Dim{a.shape[0], b.shape[1]} || c->dtype != dtype))
    throw Error(fmt::format("gemm's c is {} of shape {}; it must be {} of shape {}",
                            dtype_name(c->dtype), c->shape.str(), dtype_name(dtype),
                            Dim{a.shape[0], b.shape[1]}.str()));
}

// ---- batched products: 3-D operands, the batch axis broadcast ------------------------------

// How a batched product reads an operand: a matrix shared by every batch (2-D), a 3-D array
// of one batch (shared too), or one matrix per batch.
enum class Batch { matrix, one, each };

const char* batch_tag(Batch k) {
  return k == Batch::matrix ? "m" : k == Batch::one ? "o" : "e";
}

// The annotation's read of an operand (rows `rows`, columns `cols`) for batch `g`.
std::string batch_rule(const char* name, Batch k, const std::string& rows,
                       const std::string& cols) {
  if (k == Batch::matrix) return fmt::format("read {}[{}, {}]", name, rows, cols);
  return fmt::format("read {}[{}, {}, {}]", name, k == Batch::one ? "0" : "g", rows, cols);
}

// The matrix of batch `g` of a 2-D or 3-D view, and its row stride.
template <class V>
auto batch_matrix(const V& v, int64_t g, int64_t& ld) {
  if constexpr (V::rank == 2) {
    ld = v.stride_[0];
    return v.base_;
  } else {
    ld = v.stride_[1];
    return v.base_ + g * v.stride_[0];
  }
}

// One superblock's batches and rows of C: a gemm per batch.
template <class T, int RA, int RB>
NativeDef batched_native(const std::string& name, Batch ka, Batch kb, bool allow_tf32) {
  using VA = std::conditional_t<RA == 2, Matrix<const T>, Tensor<const T>>;
  using VB = std::conditional_t<RB == 2, Matrix<const T>, Tensor<const T>>;
  auto handles = std::make_shared<blas::CublasHandles>();
  auto fn = [handles, allow_tf32](const NativeContext& nc, VA a, VB b, Tensor<T> c, int64_t m,
                                  int64_t n, int64_t k, int64_t batches, int64_t ba, int64_t bb) {
    const Rect r = nc.threads(Dim{m, batches});
    for (int64_t g = r.lo[1]; g < r.hi[1]; ++g) {
      blas::Gemm gm;
      gm.dtype = dtype_v<T>;
      gm.m = r.hi[0] - r.lo[0], gm.n = n, gm.k = k;
      gm.a = batch_matrix(a, ba == 1 ? 0 : g, gm.lda) + r.lo[0] * gm.lda;
      gm.b = batch_matrix(b, bb == 1 ? 0 : g, gm.ldb);
      gm.c = batch_matrix(c, g, gm.ldc) + r.lo[0] * gm.ldc;
      if (void* stream = nc.stream())
        blas::gpu_gemm(gm, *handles, nc.device, stream, allow_tf32);
      else
        blas::host_gemm(gm);
    }
  };
  auto def =
      NativeDef::from_function(name, fn, {"a", "b", "c", "m", "n", "k", "batches", "ba", "bb"});
  def.annotate(fmt::format("global [i, g] => write c[g, i, 0 : n - 1], {}, {}",
                           batch_rule("a", ka, "i", "0 : k - 1"),
                           batch_rule("b", kb, "0 : k - 1", "0 : n - 1")));
  return def;
}

template <class T>
NativeDef batched_for(const std::string& name, Batch ka, Batch kb, bool tf32) {
  const bool a3 = ka != Batch::matrix, b3 = kb != Batch::matrix;
  if (a3 && b3) return batched_native<T, 3, 3>(name, ka, kb, tf32);
  if (a3) return batched_native<T, 3, 2>(name, ka, kb, tf32);
  return batched_native<T, 2, 3>(name, ka, kb, tf32);
}

NativeDef batched_native_for(DType dtype, const std::string& name, Batch ka, Batch kb, bool tf32) {
  return with_float_type(dtype,
                         [&](auto t) { return batched_for<decltype(t)>(name, ka, kb, tf32); });
}

std::string batched_name(DType dtype, Batch ka, Batch kb, bool tf32) {
  return fmt::format("gs_bmm_{}_{}{}{}", dtype_name(dtype), batch_tag(ka), batch_tag(kb),
                     tf32 ? "_tf32" : "");
}

Batch batch_kind(const ArrayHandle& h) {
  if (h.shape.rank() == 2) return Batch::matrix;
  return h.shape[0] == 1 ? Batch::one : Batch::each;
}

// One superblock per chunk of C's batches (all its rows).
std::vector<Superblock> batch_chunks(const plan::ArrayMeta& c) {
  std::vector<Superblock> sbs;
  for (const plan::ChunkMeta& ch : c.chunks)
    if (!ch.owned.empty())
      sbs.push_back(
          Superblock{Rect(2, {0, ch.owned.lo[0], 0}, {c.shape[1], ch.owned.hi[0], 1}), ch.device});
  return sbs;
}

// One 2-D product's operands, result and scalars.
struct Product {
  Operand a, b;
  std::shared_ptr<ArrayHandle> out;
  DType dtype;
  int64_t m, n, k;
  double alpha, beta;
  bool accumulate, tf32;
};

// Every product kernel's first parameters: a, b (as stored) and the result.
void add_operands(Arguments& args, const Operand& a, const Operand& b, const ArrayHandle& out,
                  DType dtype) {
  args.array(a.stored->storage, dtype);
  args.array(b.stored->storage, dtype);
  args.array(out.storage, dtype);
}

// Rows of C against the whole of B: one launch, a task per chunk of C's rows.
void rows_product(const Product& p) {
  const auto driver = p.out->driver;
  const std::string name = native_name(p.dtype, p.a.trans, p.accumulate, p.tf32);
  const Kernel& kernel = cached_native(driver, name, [&] {
    return gemm_native_for(p.dtype, name, p.a.trans, p.accumulate, p.tf32);
  });
  auto sbs = row_chunks(*p.out->storage->meta);
  const Dim& bs = p.b.stored->shape;
  Arguments args;
  add_operands(args, p.a, p.b, *p.out, p.dtype);
  for (int64_t v : {p.m, p.n, p.k, bs[0], bs[1], int64_t(p.a.trans), int64_t(p.b.trans)})
    args.integer(v);
  args.real(p.alpha);
  args.real(p.beta);
  kernel.launch_packed(
      Dim{p.m}, Dim{1},
      work::custom("matmul rows", [sbs](const Dim&, const Dim&, int) { return sbs; }), args.list());
}

// SUMMA over C's chunks (tiles): a launch per panel of k, each task adding its tile's
// product over the panel, in the panels' order (so the sum's order is fixed).
void tiled_product(const Product& p, int64_t panels) {
  const auto driver = p.out->driver;
  auto sbs = tile_chunks(*p.out->storage->meta);
  for (int64_t q = 0; q < panels; ++q) {
    const int64_t p0 = q * p.k / panels, p1 = (q + 1) * p.k / panels;
    const bool acc = q > 0 || p.accumulate;
    const std::string name = tile_name(p.dtype, p.a.trans, p.b.trans, acc, p.tf32);
    const Kernel& kernel = cached_native(driver, name, [&] {
      return tile_native_for(p.dtype, name, p.a.trans, p.b.trans, acc, p.tf32);
    });
    Arguments args;
    add_operands(args, p.a, p.b, *p.out, p.dtype);
    for (int64_t v : {p.m, p.n, p0, p1, int64_t(p.a.trans), int64_t(p.b.trans)}) args.integer(v);
    args.real(p.alpha);
    args.real(q > 0 ? 1.0 : p.beta);
    kernel.launch_packed(
        Dim{p.n, p.m}, Dim{1, 1},
        work::custom("matmul tiles", [sbs](const Dim&, const Dim&, int) { return sbs; }),
        args.list());
  }
}

// Every variant, known to every process by name (under mpirun the other ranks find native
// functions so).
bool register_natives() {
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64})
    for (bool t : {false, true})
      for (bool acc : {false, true})
        for (bool tf32 : {false, true})
          register_native(gemm_native_for(d, native_name(d, t, acc, tf32), t, acc, tf32));
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true})
          for (bool tf32 : {false, true})
            register_native(tile_native_for(d, tile_name(d, ta, tb, acc, tf32), ta, tb, acc, tf32));
  const Batch kinds[] = {Batch::matrix, Batch::one, Batch::each};
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64})
    for (Batch ka : kinds)
      for (Batch kb : kinds)
        for (bool tf32 : {false, true})
          if (ka != Batch::matrix || kb != Batch::matrix)
            register_native(batched_native_for(d, batched_name(d, ka, kb, tf32), ka, kb, tf32));
  return true;
}
const bool registered = register_natives();

}  // namespace

void set_summa_panels_for_tests(int panels) {
  g_test_panels = panels;
}

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> gemm(const std::shared_ptr<ArrayHandle>& a,
                                  const std::shared_ptr<ArrayHandle>& b, double alpha, double beta,
                                  const std::shared_ptr<ArrayHandle>& c) {
  if (!a || !b) throw_null_array();
  std::lock_guard lock(lazy_mutex());
  const DType dtype = promote(a->dtype, b->dtype);
  array::check_operands(*a, *b, c.get(), dtype);
  const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
  const auto A = array::operand(a, dtype, true), B = array::operand(b, dtype, true);
  auto driver = a->driver;
  const Dim shape{M, N};
  // The result: a copy of c when it is added in, else a fresh array.
  const bool accumulate = c && beta != 0;
  const int64_t panels = array::summa_panels(driver, dtype, K, N);
  std::shared_ptr<ArrayHandle> out;
  if (accumulate) {
    out = elementwise(EwOp::cast, dtype, {EwArg{c}});
    array_settle(*out);
  } else {
    out = array_create(driver, dtype, shape,
                       panels > 0 ? array::tile_distribution(driver->device_count(), M, N)
                                  : array::product_distribution(driver, dtype, shape, K),
                       nullptr);
  }
  if (M == 0 || N == 0) return out;
  if (K == 0) {  // an empty sum: beta c, or zeros
    if (accumulate)
      return elementwise(EwOp::mul, dtype,
                         {EwArg{c}, EwArg{nullptr, ScalarKind::floating, beta, 0}});
    const unsigned char zeros[8] = {};
    return array_create(driver, dtype, shape, default_distribution(driver, dtype, shape), zeros);
  }
  const array::Product pr{A,
                          B,
                          out,
                          dtype,
                          M,
                          N,
                          K,
                          alpha,
                          accumulate ? beta : 0.0,
                          accumulate,
                          driver->config().allow_tf32};
  if (panels > 0)
    array::tiled_product(pr, panels);
  else
    array::rows_product(pr);
  return out;
}

namespace {

// a (B, M, K) or (M, K) by b (B, K, N) or (K, N): (B, M, N), a batch of 1 broadcast.
std::shared_ptr<ArrayHandle> batched(const std::shared_ptr<ArrayHandle>& a,
                                     const std::shared_ptr<ArrayHandle>& b, const char* what) {
  const Dim& as = a->shape;
  const Dim& bs = b->shape;
  const int64_t ba = as.rank() == 3 ? as[0] : 1, bb = bs.rank() == 3 ? bs[0] : 1;
  const int64_t M = as[as.rank() - 2], K = as[as.rank() - 1], N = bs[bs.rank() - 1];
  if (bs[bs.rank() - 2] != K)
    throw Error(fmt::format("{} of shapes {} and {}: the inner dimensions differ ({} and {})", what,
                            as.str(), bs.str(), K, bs[bs.rank() - 2]));
  if (ba != bb && ba != 1 && bb != 1)
    throw Error(fmt::format("{} of shapes {} and {}: the batch axes cannot broadcast ({} and {})",
                            what, as.str(), bs.str(), ba, bb));
  const DType dtype = promote(a->dtype, b->dtype);
  array::check_float(what, *a, *b, dtype);
  std::lock_guard lock(lazy_mutex());
  // The batched natives take no transpose flags: a transposed operand is copied.
  const auto A = array::operand(a, dtype, false), B = array::operand(b, dtype, false);
  const int64_t batches = std::max(ba, bb);
  auto driver = a->driver;
  const Dim shape{batches, M, N};
  const unsigned char zeros[8] = {};  // an empty sum is zero
  auto out =
      array_create(driver, dtype, shape, array::product_distribution(driver, dtype, shape, K),
                   K == 0 ? zeros : nullptr);
  if (batches == 0 || M == 0 || N == 0 || K == 0) return out;
  const auto ka = array::batch_kind(*A.stored), kb = array::batch_kind(*B.stored);
  const bool tf32 = driver->config().allow_tf32;
  const std::string name = array::batched_name(dtype, ka, kb, tf32);
  const Kernel& kernel = array::cached_native(
      driver, name, [&] { return array::batched_native_for(dtype, name, ka, kb, tf32); });
  auto sbs = array::batch_chunks(*out->storage->meta);
  array::Arguments args;
  array::add_operands(args, A, B, *out, dtype);
  for (int64_t v : {M, N, K, batches, ba, bb}) args.integer(v);
  kernel.launch_packed(
      Dim{M, batches}, Dim{1, 1},
      work::custom("matmul batches", [sbs](const Dim&, const Dim&, int) { return sbs; }),
      args.list());
  return out;
}

// Integer and bool matrices as NumPy multiplies them (no BLAS has them): in their own dtype,
// wrapping as NumPy's integers do (bool: any of the ands), a thread per element of C in a
// generated kernel, C's rows over the devices as for floats.
std::shared_ptr<ArrayHandle> integer_product(const std::shared_ptr<ArrayHandle>& a,
                                             const std::shared_ptr<ArrayHandle>& b, DType dtype) {
  std::lock_guard lock(lazy_mutex());
  const auto A = array::operand(a, dtype, false), B = array::operand(b, dtype, false);
  const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
  auto driver = a->driver;
  const Dim shape{M, N};
  const unsigned char zeros[8] = {};
  if (K == 0)  // empty sums
    return array_create(driver, dtype, shape, default_distribution(driver, dtype, shape), zeros);
  auto out = array_create(driver, dtype, shape,
                          array::product_distribution(driver, dtype, shape, K), nullptr);
  if (M == 0 || N == 0) return out;
  const std::string t = dtype_cpp_name(dtype);
  const std::string step =
      dtype == DType::boolean
          ? "s = s || (a(a0, l) && b(l, a1));"
          : "s = gridspan::fused::add(s, gridspan::fused::mul(a(a0, l), b(l, a1)));";
  const Kernel& kernel = array::cached_kernel(driver, "imatmul:" + t, [&](const std::string& name) {
    const std::string source = fmt::format(
        "#include <gridspan/device/fused.hpp>\n"
        "__device__ void {0}(dim3 blockIdx, int64_t n0, int64_t n1, int64_t k, "
        "const gridspan::Matrix<{1}> a, const gridspan::Matrix<{1}> b, "
        "gridspan::Matrix<{1}> out) {{\n{2}  {1} s = 0;\n"
        "  for (int64_t l = 0; l < k; ++l) {3}\n  out(a0, a1) = s;\n}}\n",
        name, t, array::thread_prologue(2, false), step);
    return KernelDef::from_source(source, name)
        .annotate(
            "global [a1, a0] => overwrite out[a0, a1], read a[a0, 0 : k - 1], "
            "read b[0 : k - 1, a1]");
  });
  array::Arguments args;
  args.shape(shape);
  args.integer(K);
  array::add_operands(args, A, B, *out, dtype);
  array::launch_elements(driver, kernel, shape, out.get(), args.list());
  return out;
}

// A 2-D product of any dtype.
std::shared_ptr<ArrayHandle> product_2d(const std::shared_ptr<ArrayHandle>& a,
                                        const std::shared_ptr<ArrayHandle>& b) {
  const DType dtype = promote(a->dtype, b->dtype);
  if (is_float(dtype)) return gemm(a, b, 1.0, 0.0, nullptr);
  return integer_product(a, b, dtype);
}

}  // namespace

std::shared_ptr<ArrayHandle> matmul(const std::shared_ptr<ArrayHandle>& a,
                                    const std::shared_ptr<ArrayHandle>& b, const char* what) {
  if (!a || !b) throw_null_array();
  const int ra = a->shape.rank(), rb = b->shape.rank();
  if (ra == 0 || rb == 0 || ra > 3 || rb > 3 || (ra == 3 && rb == 1) || (ra == 1 && rb == 3))
    throw Error(fmt::format(
        "{} of shapes {} and {}: operands of 1 to 3 axes are supported, a vector with a matrix "
        "(a 0-d operand is a scalar: use *; a vector with a batch of matrices is not yet)",
        what, a->shape.str(), b->shape.str()));
  if (ra == 3 || rb == 3) return batched(a, b, what);
  const int64_t ka = a->shape[ra - 1], kb = b->shape[0];
  if (ka != kb)
    throw Error(fmt::format("{} of shapes {} and {}: the inner dimensions differ ({} and {})", what,
                            a->shape.str(), b->shape.str(), ka, kb));
  if (ra == 2 && rb == 2) return product_2d(a, b);
  auto a2 = ra == 1 ? view_reshape(a, Dim{1, ka}) : a;
  auto b2 = rb == 1 ? view_reshape(b, Dim{kb, 1}) : b;
  auto c = product_2d(a2, b2);
  Dim shape = ra == 1 && rb == 1 ? Dim() : ra == 1 ? Dim{c->shape[1]} : Dim{c->shape[0]};
  return view_reshape(c, shape);
}

std::shared_ptr<ArrayHandle> inner(const std::shared_ptr<ArrayHandle>& a,
                                   const std::shared_ptr<ArrayHandle>& b) {
  if (!a || !b) throw_null_array();
  if (b->shape.rank() != 2) return matmul(a, b, "inner");
  return matmul(a, view_transpose(b, {1, 0}), "inner");
}

}  // namespace gridspan::detail
