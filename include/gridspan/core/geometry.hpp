// Dim, Point and Rect: the n-d index types (rank 0 to 3) that every layer speaks.
// Arrays are row-major (last index contiguous); a Rect is [lo, hi) per axis.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace gridspan {

constexpr int kMaxRank = 3;

/// Extents of 0 to 3 axes, brace-initialised: {}, {n}, {n, m}, {n, m, k}.
class Dim {
 public:
  Dim() = default;
  Dim(std::initializer_list<int64_t> extents);
  static Dim of_rank(int rank, int64_t fill);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return e_[axis]; }
  int64_t& operator[](int axis) { return e_[axis]; }
  /// Extent of `axis`, or 1 past the rank (so a 1-d Dim reads as {n, 1, 1}).
  int64_t get(int axis) const { return axis < rank_ ? e_[axis] : 1; }
  int64_t volume() const;
  bool operator==(const Dim& o) const;
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string str() const;  // "{4, 5}"

 private:
  std::array<int64_t, kMaxRank> e_{0, 0, 0};
  int rank_ = 0;
};

using Point = std::array<int64_t, kMaxRank>;

/// A dense box [lo, hi) of `rank` axes. Rank 0 is the single point of a 0-d array.
struct Rect {
  Point lo{0, 0, 0};
  Point hi{1, 1, 1};
  int rank = 0;

  Rect() = default;
  Rect(int r, Point l, Point h);
  /// The whole of an array of this shape.
  static Rect of_shape(const Dim& shape);

  int64_t extent(int axis) const { return hi[axis] - lo[axis]; }
  Dim shape() const;
  int64_t volume() const;
  bool empty() const;
  bool contains(const Rect& o) const;  // an empty `o` is contained everywhere
  bool contains(const Point& p) const;
  bool overlaps(const Rect& o) const { return !intersect(o).empty(); }
  Rect intersect(const Rect& o) const;
  Rect bounding_union(const Rect& o) const;  // smallest box holding both (empty ones ignored)
  bool operator==(const Rect& o) const;
  bool operator!=(const Rect& o) const { return !(*this == o); }
  /// Row-major offset of point `p` inside this box.
  int64_t offset_of(const Point& p) const;
  std::string str() const;  // "[0..4, 2..8)" style: "[lo0..hi0) x [lo1..hi1)"
};

/// `a` minus `b` as disjoint boxes (at most 2 per axis).
std::vector<Rect> subtract(const Rect& a, const Rect& b);
/// Disjoint boxes covering `target` minus every box of `covered`.
std::vector<Rect> subtract_all(const Rect& target, const std::vector<Rect>& covered);

}  // namespace gridspan
