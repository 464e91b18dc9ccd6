// BoundAnnotation::regions — the planner's hot path: the access region of every annotated
// array for one superblock, by interval arithmetic over the flat forms made at bind().
// Each bound variable ranges over exactly the values the superblock's threads give it
// (threads past the launch's thread domain excluded); variables are treated as
// independent, so an index mixing e.g. `global i` and `block b` of one axis is bounded
// conservatively.
#include <algorithm>

#include <fmt/format.h>

#include "annotation/detail.hpp"

namespace gridspan::annotation {
namespace {

using namespace detail;

Rect empty_region(int rank) {
  Rect r;
  r.rank = rank;
  for (int a = 0; a < rank; ++a) r.hi[a] = 0;
  return r;
}

}  // namespace

std::vector<Access> BoundAnnotation::regions(const Rect& blocks) const {
  std::vector<Access> out;
  regions(blocks, out);
  return out;
}

void BoundAnnotation::regions(const Rect& blocks, std::vector<Access>& out) const {
  const Impl& im = *impl;
  out.resize(im.arrays.size());

  constexpr int kStackSlots = 64;
  Interval stack_slots[kStackSlots];
  Interval* s = stack_slots;
  if (im.slots > kStackSlots) {
    thread_local std::vector<Interval> heap_slots;
    if (heap_slots.size() < static_cast<std::size_t>(im.slots)) heap_slots.resize(im.slots);
    s = heap_slots.data();
  }

  // Ranges of the bound variables over the superblock's threads.
  bool no_threads = false;
  for (int a = 0; a < kMaxRank; ++a) {
    const int64_t lo = a < blocks.rank ? std::max<int64_t>(blocks.lo[a], 0) : 0;
    const int64_t hi = a < blocks.rank ? std::min(blocks.hi[a], im.grid[a]) : 1;
    const int64_t b = im.block[a], n = im.threads[a];
    const int64_t g_lo = lo * b, g_hi = std::min(hi * b, n) - 1;
    if (hi <= lo || g_hi < g_lo) {
      no_threads = true;
      break;
    }
    s[var_slot(VarKind::global, a)] = {g_lo, g_hi};
    s[var_slot(VarKind::block, a)] = {lo, hi - 1};
    s[var_slot(VarKind::local, a)] = {0, std::min(b, n - g_lo) - 1};
  }
  if (no_threads) {
    for (std::size_t i = 0; i < im.arrays.size(); ++i) {
      const ArrayPlan& plan = im.arrays[i];
      out[i].param = plan.param;
      out[i].mode = plan.mode;
      out[i].op = plan.op;
      out[i].region = plan.rank == 0 ? Rect() : empty_region(plan.rank);
    }
    return;
  }

  const Term* terms = im.terms.data();
  const std::size_t n_forms = im.forms.size();
  for (std::size_t f = 0; f < n_forms; ++f) {
    const Form& form = im.forms[f];
    int64_t lo = form.c0, hi = form.c0;
    for (uint32_t t = form.first, e = form.first + form.count; t < e; ++t) {
      const int64_t c = terms[t].coeff;
      const Interval& v = s[terms[t].slot];
      if (c >= 0) {
        lo += c * v.lo;
        hi += c * v.hi;
      } else {
        lo += c * v.hi;
        hi += c * v.lo;
      }
    }
    if (form.divisor > 0) {
      lo = floor_div(lo, form.divisor);
      hi = floor_div(hi, form.divisor);
    }
    s[kVarSlots + f] = {lo, hi};
  }

  const AxisBounds* bounds = im.bounds.data();
  for (std::size_t i = 0; i < im.arrays.size(); ++i) {
    const ArrayPlan& plan = im.arrays[i];
    Access& acc = out[i];
    acc.param = plan.param;
    acc.mode = plan.mode;
    acc.op = plan.op;
    if (plan.rank == 0) {
      acc.region = Rect();
      continue;
    }
    // Bounding union of the rules' clamped regions; empty ones add nothing.
    Rect region = empty_region(plan.rank);
    bool any = false;
    const AxisBounds* ab = bounds + plan.first_bound;
    for (uint32_t r = 0; r < plan.n_rules; ++r, ab += plan.rank) {
      Point lo{0, 0, 0}, hi{1, 1, 1};
      bool empty = false;
      for (int a = 0; a < plan.rank; ++a) {
        lo[a] = std::max<int64_t>(s[ab[a].lo].lo, 0);
        hi[a] = std::min(s[ab[a].hi].hi + 1, plan.shape.hi[a]);
        empty |= hi[a] <= lo[a];
      }
      if (empty) continue;
      if (!any) {
        region.lo = lo;
        region.hi = hi;
        any = true;
        continue;
      }
      for (int a = 0; a < plan.rank; ++a) {
        region.lo[a] = std::min(region.lo[a], lo[a]);
        region.hi[a] = std::max(region.hi[a], hi[a]);
      }
    }
    acc.region = region;
  }
}

std::string describe_superblock(const Rect& threads_range, const std::vector<Access>& accesses,
                                const std::vector<ParamInfo>& params) {
  std::string line = "superblock " + threads_range.str();
  for (const Access& a : accesses) {
    std::string name = a.param >= 0 && a.param < static_cast<int>(params.size())
                           ? params[a.param].name
                           : fmt::format("#{}", a.param);
    std::string region = a.region.rank > 0 && a.region.empty() ? "empty" : a.region.str();
    line += fmt::format(" {} {} {}", name, access_name(a.mode, a.op), region);
  }
  return line;
}

}  // namespace gridspan::annotation
