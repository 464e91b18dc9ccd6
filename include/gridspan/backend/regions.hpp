// Box operations over row-major boxes of host-addressable memory. A box `rect` of an array
// is stored with its last axis contiguous; `region` (inside both boxes) says which elements.
#pragma once

#include <cstddef>

#include "gridspan/annotation/annotation.hpp"
#include "gridspan/core/dtype.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::backend {

/// Copies the box `region` between two row-major boxes of host-addressable memory.
void copy_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                 const Rect& region, std::size_t elem_size);
/// Sets `region` of a row-major box to `value` (elem_size bytes).
void fill_region(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
                 std::size_t elem_size);
/// dst[r] = dst[r] op src[r] over r = src_rect ∩ dst_rect.
void combine_region(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                    annotation::ReduceOp op, DType dtype);

}  // namespace gridspan::backend
