// Box operations over row-major boxes of host-addressable memory. A box `rect` of an array
// is stored with its last axis contiguous; `region` (inside both boxes) says which elements.
#pragma once

#include <cstddef>

#include "annotation/annotation.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::backend {

/// Calls f(dst_offset, src_offset, elements) for every contiguous run of `region` in the
/// two row-major boxes (offsets in elements from each box's start).
template <class F>
void for_each_run(const Rect& dst_rect, const Rect& src_rect, const Rect& region, F&& f) {
  if (region.empty()) return;
  const int rank = region.rank;
  if (rank == 0) {
    f(int64_t(0), int64_t(0), int64_t(1));
    return;
  }
  const int last = rank - 1;
  const int64_t run = region.extent(last);
  Point p = region.lo;
  while (true) {
    f(dst_rect.offset_of(p), src_rect.offset_of(p), run);
    int a = last - 1;
    for (; a >= 0; --a) {
      if (++p[a] < region.hi[a]) break;
      p[a] = region.lo[a];
    }
    if (a < 0) return;
  }
}

/// Copies the box `region` between two row-major boxes of host-addressable memory.
void copy_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                 const Rect& region, std::size_t elem_size);
/// Sets `region` of a row-major box to `value` (elem_size bytes).
void fill_region(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
                 std::size_t elem_size);
/// dst[r] = dst[r] op src[r] over r = src_rect ∩ dst_rect.
void combine_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                    annotation::ReduceOp op, DType dtype);
/// Rounds `region` of a float32 box into a box of the 16-bit float `dtype` (f16 or bf16),
/// to nearest even.
void narrow_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                   const Rect& region, DType dtype);

}  // namespace gridspan::backend
