// Dim and Rect arithmetic.
#include "gridspan/core/geometry.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan {

Dim::Dim(std::initializer_list<int64_t> extents) {
  if (extents.size() > kMaxRank)
    throw Error(fmt::format("a Dim has at most {} axes, got {}", kMaxRank, extents.size()));
  for (int64_t e : extents) {
    if (e < 0) throw Error(fmt::format("a Dim extent must not be negative, got {}", e));
    e_[rank_++] = e;
  }
}

Dim Dim::of_rank(int rank, int64_t fill) {
  Dim d;
  d.rank_ = rank;
  for (int a = 0; a < rank; ++a) d.e_[a] = fill;
  return d;
}

int64_t Dim::volume() const {
  int64_t v = 1;
  for (int a = 0; a < rank_; ++a) v *= e_[a];
  return v;
}

bool Dim::operator==(const Dim& o) const {
  if (rank_ != o.rank_) return false;
  for (int a = 0; a < rank_; ++a)
    if (e_[a] != o.e_[a]) return false;
  return true;
}

std::string Dim::str() const {
  std::string s = "{";
  for (int a = 0; a < rank_; ++a) s += fmt::format("{}{}", a ? ", " : "", e_[a]);
  return s + "}";
}

Rect::Rect(int r, Point l, Point h) : lo(l), hi(h), rank(r) {
  for (int a = r; a < kMaxRank; ++a) lo[a] = 0, hi[a] = 1;
}

Rect Rect::of_shape(const Dim& shape) {
  Rect r;
  r.rank = shape.rank();
  for (int a = 0; a < shape.rank(); ++a) r.hi[a] = shape[a];
  return r;
}

Dim Rect::shape() const {
  Dim d = Dim::of_rank(rank, 0);
  for (int a = 0; a < rank; ++a) d[a] = std::max<int64_t>(0, extent(a));
  return d;
}

int64_t Rect::volume() const {
  int64_t v = 1;
  for (int a = 0; a < rank; ++a) v *= std::max<int64_t>(0, extent(a));
  return v;
}

bool Rect::empty() const {
  for (int a = 0; a < rank; ++a)
    if (hi[a] <= lo[a]) return true;
  return false;
}

bool Rect::contains(const Rect& o) const {
  if (o.empty()) return true;
  for (int a = 0; a < rank; ++a)
    if (o.lo[a] < lo[a] || o.hi[a] > hi[a]) return false;
  return true;
}

bool Rect::contains(const Point& p) const {
  for (int a = 0; a < rank; ++a)
    if (p[a] < lo[a] || p[a] >= hi[a]) return false;
  return true;
}

Rect Rect::intersect(const Rect& o) const {
  Rect r = *this;
  for (int a = 0; a < rank; ++a) {
    r.lo[a] = std::max(lo[a], o.lo[a]);
    r.hi[a] = std::min(hi[a], o.hi[a]);
  }
  return r;
}

Rect Rect::bounding_union(const Rect& o) const {
  if (o.empty()) return *this;
  if (empty()) return o;
  Rect r = *this;
  for (int a = 0; a < rank; ++a) {
    r.lo[a] = std::min(lo[a], o.lo[a]);
    r.hi[a] = std::max(hi[a], o.hi[a]);
  }
  return r;
}

bool Rect::operator==(const Rect& o) const {
  if (rank != o.rank) return false;
  for (int a = 0; a < rank; ++a)
    if (lo[a] != o.lo[a] || hi[a] != o.hi[a]) return false;
  return true;
}

int64_t Rect::offset_of(const Point& p) const {
  int64_t off = 0;
  for (int a = 0; a < rank; ++a) off = off * extent(a) + (p[a] - lo[a]);
  return off;
}

std::string Rect::str() const {
  if (rank == 0) return "[]";
  std::string s;
  for (int a = 0; a < rank; ++a) s += fmt::format("{}[{}..{})", a ? " x " : "", lo[a], hi[a]);
  return s;
}

std::vector<Rect> subtract(const Rect& a, const Rect& b) {
  Rect cut = a.intersect(b);
  if (cut.empty()) return a.empty() ? std::vector<Rect>{} : std::vector<Rect>{a};
  std::vector<Rect> out;
  Rect rest = a;
  for (int ax = 0; ax < a.rank; ++ax) {
    if (rest.lo[ax] < cut.lo[ax]) {
      Rect piece = rest;
      piece.hi[ax] = cut.lo[ax];
      out.push_back(piece);
      rest.lo[ax] = cut.lo[ax];
    }
    if (rest.hi[ax] > cut.hi[ax]) {
      Rect piece = rest;
      piece.lo[ax] = cut.hi[ax];
      out.push_back(piece);
      rest.hi[ax] = cut.hi[ax];
    }
  }
  return out;
}

std::vector<Rect> subtract_all(const Rect& target, const std::vector<Rect>& covered) {
  std::vector<Rect> left;
  if (!target.empty()) left.push_back(target);
  for (const Rect& c : covered) {
    std::vector<Rect> next;
    for (const Rect& r : left) {
      auto pieces = subtract(r, c);
      next.insert(next.end(), pieces.begin(), pieces.end());
    }
    left.swap(next);
    if (left.empty()) break;
  }
  return left;
}

}  // namespace gridspan
