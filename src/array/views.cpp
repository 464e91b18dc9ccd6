// Views and copies: slices, transposes and reshapes as (storage, ViewMap) pairs that share
// the base's chunks, contiguity as Cumo defines it, and copies as one generated kernel.
#include <numeric>

#include <fmt/format.h>

#include "array/expr.hpp"
#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"

namespace gridspan::array {

namespace {

// The map of a whole array: storage axis b is view axis b.
detail::ViewMap identity(int rank) {
  detail::ViewMap m;
  for (int b = 0; b < rank; ++b) m.axis[b] = b;
  return m;
}

const detail::ViewMap& map_of(const ArrayHandle& h, detail::ViewMap& scratch) {
  if (h.is_view) return h.view;
  scratch = identity(h.shape.rank());
  return scratch;
}

// The storage's row-major strides.
std::array<int64_t, kMaxRank> row_strides(const Dim& shape) {
  std::array<int64_t, kMaxRank> s{0, 0, 0};
  int64_t acc = 1;
  for (int b = shape.rank() - 1; b >= 0; --b) s[b] = acc, acc *= shape[b];
  return s;
}

// The same view counted in the storage's row-major order.
detail::ViewMap as_linear(const detail::ViewMap& m, const Dim& storage, int view_rank) {
  if (m.linear) return m;
  detail::ViewMap out;
  out.linear = true;
  const auto rs = row_strides(storage);
  for (int b = 0; b < storage.rank(); ++b) {
    out.offset += m.start[b] * rs[b];
    if (m.axis[b] >= 0 && m.axis[b] < view_rank) out.strides[m.axis[b]] += m.step[b] * rs[b];
  }
  return out;
}

std::shared_ptr<ArrayHandle> make_view(const ArrayHandle& base, const Dim& shape,
                                       const detail::ViewMap& map) {
  auto v = std::make_shared<ArrayHandle>();
  v->driver = base.driver;
  v->storage = base.storage;
  v->dtype = base.dtype;
  v->shape = shape;
  v->is_view = true;
  v->view = map;
  return v;
}

// One axis of a slice in Python's terms: first index, step and length; throws for an index
// out of bounds or a step of 0.
struct Cut {
  int64_t first = 0, step = 1, length = 0;
  bool keep = true;
};
Cut cut_axis(const Index& idx, int64_t n, int axis) {
  const Range& r = idx.r;
  if (idx.kind == Index::whole) return Cut{0, 1, n, true};
  if (idx.kind == Index::at) {
    const int64_t i = r.lo < 0 ? r.lo + n : r.lo;
    if (i < 0 || i >= n)
      throw Error(
          fmt::format("slice: index {} is out of bounds for axis {} of length {}", r.lo, axis, n));
    return Cut{i, 1, 1, false};
  }
  if (r.step == 0) throw Error(fmt::format("slice: axis {} has a step of 0", axis));
  const int64_t lo = r.lo < 0 ? r.lo + n : r.lo, hi = r.hi < 0 ? r.hi + n : r.hi;
  const bool ok = r.step > 0 ? (lo >= 0 && lo <= n && hi >= 0 && hi <= n)
                             : (lo >= -1 && lo < n && hi >= -1 && hi < n);
  if (!ok)
    throw Error(fmt::format("slice: range({}, {}, {}) is out of bounds for axis {} of length {}",
                            r.lo, r.hi, r.step, axis, n));
  const int64_t span = r.step > 0 ? hi - lo : lo - hi, s = r.step > 0 ? r.step : -r.step;
  return Cut{lo, r.step, std::max<int64_t>(0, (span + s - 1) / s), true};
}

void settle(const std::shared_ptr<ArrayHandle>& h) {
  if (!h) detail::throw_null_array();
  if (h->pending.load(std::memory_order_acquire)) detail::array_settle(*h);
}

}  // namespace

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> view_slice(const std::shared_ptr<ArrayHandle>& h,
                                        const std::vector<Index>& indices) {
  std::lock_guard lock(lazy_mutex());
  array::settle(h);
  const int rank = h->shape.rank();
  if (static_cast<int>(indices.size()) > rank)
    throw Error(fmt::format("slice: {} indices for an array of shape {} (rank {})", indices.size(),
                            h->shape.str(), rank));
  ViewMap scratch;
  ViewMap map = array::map_of(*h, scratch);
  std::array<int, kMaxRank> renumber{-1, -1, -1};
  Dim shape;
  std::vector<int64_t> extents;
  std::array<array::Cut, kMaxRank> cuts;
  for (int k = 0; k < rank; ++k) {
    cuts[k] = array::cut_axis(k < static_cast<int>(indices.size()) ? indices[k] : Index(all),
                              h->shape[k], k);
    if (cuts[k].keep)
      renumber[k] = static_cast<int>(extents.size()), extents.push_back(cuts[k].length);
  }
  shape = Dim::of_rank(static_cast<int>(extents.size()), 1);
  for (std::size_t j = 0; j < extents.size(); ++j) shape[static_cast<int>(j)] = extents[j];
  if (map.linear) {
    ViewMap out = map;
    out.strides = {0, 0, 0};
    for (int k = 0; k < rank; ++k) {
      out.offset += map.strides[k] * cuts[k].first;
      if (renumber[k] >= 0) out.strides[renumber[k]] = map.strides[k] * cuts[k].step;
    }
    return array::make_view(*h, shape, out);
  }
  for (int b = 0; b < kMaxRank; ++b) {
    const int k = map.axis[b];
    if (k < 0) continue;
    map.start[b] += map.step[b] * cuts[k].first;
    map.step[b] *= cuts[k].step;
    map.axis[b] = renumber[k];
  }
  return array::make_view(*h, shape, map);
}

std::shared_ptr<ArrayHandle> view_transpose(const std::shared_ptr<ArrayHandle>& h,
                                            std::vector<int> axes) {
  std::lock_guard lock(lazy_mutex());
  array::settle(h);
  const int rank = h->shape.rank();
  if (axes.empty())
    for (int k = rank - 1; k >= 0; --k) axes.push_back(k);
  std::vector<int> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> want(static_cast<std::size_t>(rank));
  std::iota(want.begin(), want.end(), 0);
  if (sorted != want)
    throw Error(
        fmt::format("transpose: the axes must be a permutation of 0..{} for an array of "
                    "shape {}",
                    rank - 1, h->shape.str()));
  ViewMap scratch;
  ViewMap map = array::map_of(*h, scratch);
  std::array<int, kMaxRank> position{-1, -1, -1};  // old axis -> new axis
  Dim shape = Dim::of_rank(rank, 1);
  for (int j = 0; j < rank; ++j) position[axes[j]] = j, shape[j] = h->shape[axes[j]];
  if (map.linear) {
    ViewMap out = map;
    for (int j = 0; j < rank; ++j) out.strides[j] = map.strides[axes[j]];
    return array::make_view(*h, shape, out);
  }
  for (int b = 0; b < kMaxRank; ++b)
    if (map.axis[b] >= 0) map.axis[b] = position[map.axis[b]];
  return array::make_view(*h, shape, map);
}

bool is_contiguous(const ArrayHandle& h) {
  if (!h.is_view) return true;
  const ViewMap m = array::as_linear(h.view, h.storage->meta->shape, h.shape.rank());
  int64_t expected = 1;
  for (int k = h.shape.rank() - 1; k >= 0; --k) {
    if (h.shape[k] == 1) continue;  // never moves the pointer
    if (m.strides[k] != expected) return false;
    expected *= h.shape[k];
  }
  return true;
}

std::shared_ptr<ArrayHandle> view_reshape(const std::shared_ptr<ArrayHandle>& h, const Dim& shape) {
  std::lock_guard lock(lazy_mutex());
  array::settle(h);
  if (shape.volume() != h->shape.volume())
    throw Error(
        fmt::format("reshape_in_place: shape {} ({} elements) for an array of shape {} ({} "
                    "elements)",
                    shape.str(), shape.volume(), h->shape.str(), h->shape.volume()));
  if (!is_contiguous(*h))
    throw Error(
        fmt::format("reshape_in_place: this view of shape {} is not contiguous; use "
                    "reshape (a copy), or copy() it first",
                    h->shape.str()));
  ViewMap scratch;
  ViewMap m =
      array::as_linear(array::map_of(*h, scratch), h->storage->meta->shape, h->shape.rank());
  const auto rs = array::row_strides(shape);
  m.strides = rs;
  return array::make_view(*h, shape, m);
}

std::shared_ptr<ArrayHandle> array_copy(const std::shared_ptr<ArrayHandle>& h, DType dtype) {
  if (!h) throw_null_array();
  return elementwise(EwOp::cast, dtype, {EwArg{h}});
}

std::shared_ptr<ArrayHandle> array_reshape(const std::shared_ptr<ArrayHandle>& h,
                                           const Dim& shape) {
  std::lock_guard lock(lazy_mutex());
  array::settle(h);
  if (shape.volume() != h->shape.volume())
    throw Error(
        fmt::format("reshape: shape {} ({} elements) for an array of shape {} ({} "
                    "elements)",
                    shape.str(), shape.volume(), h->shape.str(), h->shape.volume()));
  auto source = is_contiguous(*h) ? h : array_copy(h, h->dtype);
  return array_copy(view_reshape(source, shape), h->dtype);
}

}  // namespace gridspan::detail
