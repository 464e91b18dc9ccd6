// Annotation::bind: fills in the launch's scalar values and flattens every index into an
// affine form over interval slots (bound variables, then nested floor divisions), so that
// BoundAnnotation::regions is a few multiply-adds per index with no tree to walk.
#include <fmt/format.h>

#include "annotation/detail.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation {
namespace {

using namespace detail;

/// c + sum(v[s] * slot s) + sum(div.coeff * slot div.slot): an index before it is emitted.
struct Linear {
  int64_t c = 0;
  std::array<int64_t, kVarSlots> v{};
  std::vector<Term> divs;
  bool is_constant() const {
    for (int64_t x : v)
      if (x) return false;
    return divs.empty();
  }
};

class Binder {
 public:
  Binder(const Annotation::Impl& ann, BoundAnnotation::Impl& out,
         const std::vector<int64_t>& scalars)
      : ann_(ann), out_(out), scalars_(scalars) {}

  void set_text(int text) { text_ = text; }

  Linear linear(int id) {
    const Node& n = ann_.nodes[id];
    Linear l;
    switch (n.kind) {
      case NodeKind::integer:
        l.c = n.value;
        return l;
      case NodeKind::param:
        l.c = scalar(n);
        return l;
      case NodeKind::var:
        l.v[n.slot] = 1;
        return l;
      case NodeKind::add:
      case NodeKind::sub: {
        l = linear(n.a);
        Linear r = linear(n.b);
        if (n.kind == NodeKind::sub) scale(r, -1, n);
        l.c = add(l.c, r.c, n);
        for (int s = 0; s < kVarSlots; ++s) l.v[s] = add(l.v[s], r.v[s], n);
        l.divs.insert(l.divs.end(), r.divs.begin(), r.divs.end());
        return l;
      }
      case NodeKind::neg:
        l = linear(n.a);
        scale(l, -1, n);
        return l;
      case NodeKind::mul: {
        const bool left_constant = ann_.nodes[n.a].constant;
        int64_t k = constant(left_constant ? n.a : n.b);
        l = linear(left_constant ? n.b : n.a);
        scale(l, k, n);
        return l;
      }
      case NodeKind::div: {
        int64_t d = divisor(n);
        l = linear(n.a);
        if (l.is_constant()) {
          l.c = floor_div(l.c, d);
          return l;
        }
        int slot = emit(l, d);
        Linear r;
        r.divs.push_back({1, slot});
        return r;
      }
    }
    return l;
  }

  /// Appends the form (with `divisor` > 0 it is floor-divided) and returns its result slot.
  int emit(const Linear& l, int64_t divisor) {
    Form f;
    f.c0 = l.c;
    f.first = static_cast<uint32_t>(out_.terms.size());
    for (int s = 0; s < kVarSlots; ++s)
      if (l.v[s] != 0) out_.terms.push_back({l.v[s], s});
    out_.terms.insert(out_.terms.end(), l.divs.begin(), l.divs.end());
    f.count = static_cast<uint32_t>(out_.terms.size()) - f.first;
    f.divisor = divisor;
    out_.forms.push_back(f);
    return kVarSlots + static_cast<int>(out_.forms.size()) - 1;
  }

  int emit_constant(int64_t c) {
    Linear l;
    l.c = c;
    return emit(l, 0);
  }

 private:
  [[noreturn]] void fail(const Node& at, const std::string& problem, const std::string& fix) {
    const std::string& text = ann_.texts[text_];
    throw LaunchError("launch error in annotation: " + problem + quote_with_caret(text, at.pos) +
                      "\n  " + fix);
  }

  int64_t scalar(const Node& n) {
    const ParamInfo& p = ann_.params[n.param];
    if (n.param >= static_cast<int>(scalars_.size()))
      fail(n,
           fmt::format("the annotation uses scalar parameter `{}` (parameter {}), but the launch "
                       "gave values for {} parameters",
                       p.name, n.param, scalars_.size()),
           "pass a value for every kernel parameter");
    return scalars_[n.param];
  }

  int64_t constant(int id) {
    const Node& n = ann_.nodes[id];
    switch (n.kind) {
      case NodeKind::integer:
        return n.value;
      case NodeKind::param:
        return scalar(n);
      case NodeKind::add:
        return add(constant(n.a), constant(n.b), n);
      case NodeKind::sub:
        return add(constant(n.a), mul(constant(n.b), -1, n), n);
      case NodeKind::neg:
        return mul(constant(n.a), -1, n);
      case NodeKind::mul:
        return mul(constant(n.a), constant(n.b), n);
      case NodeKind::div:
        return floor_div(constant(n.a), divisor(n));
      case NodeKind::var:
        break;
    }
    fail(n, "internal error: a bound name in a constant", "please report this");
  }

  int64_t divisor(const Node& n) {
    int64_t d = constant(n.b);
    if (d <= 0) {
      const Node& b = ann_.nodes[n.b];
      const std::string& text = ann_.texts[text_];
      fail(b,
           fmt::format("the divisor `{}` is {} at this launch; floor division needs a positive "
                       "divisor",
                       text.substr(b.pos, b.end - b.pos), d),
           "check the scalar arguments of the launch, or guard the division in the annotation");
    }
    return d;
  }

  int64_t add(int64_t x, int64_t y, const Node& at) {
    int64_t r;
    if (__builtin_add_overflow(x, y, &r)) overflow(at);
    return r;
  }
  int64_t mul(int64_t x, int64_t y, const Node& at) {
    int64_t r;
    if (__builtin_mul_overflow(x, y, &r)) overflow(at);
    return r;
  }
  void scale(Linear& l, int64_t k, const Node& at) {
    l.c = mul(l.c, k, at);
    for (auto& x : l.v) x = mul(x, k, at);
    for (auto& t : l.divs) t.coeff = mul(t.coeff, k, at);
  }
  [[noreturn]] void overflow(const Node& at) {
    fail(at, "the index overflows 64-bit integers at this launch",
         "check the scalar arguments of the launch");
  }

  const Annotation::Impl& ann_;
  BoundAnnotation::Impl& out_;
  const std::vector<int64_t>& scalars_;
  int text_ = 0;
};

}  // namespace

BoundAnnotation Annotation::bind(const LaunchGeometry& geometry,
                                 const std::vector<int64_t>& scalars,
                                 const std::vector<Dim>& shapes) const {
  auto out = std::make_shared<BoundAnnotation::Impl>();
  for (int a = 0; a < kMaxRank; ++a) {
    const int64_t b = geometry.block.get(a), n = geometry.threads.get(a);
    if (b <= 0)
      throw LaunchError(fmt::format(
          "launch error: the block size {} has extent {} on axis {}; every axis of a block "
          "needs at least one thread",
          geometry.block.str(), b, "xyz"[a]));
    out->block[a] = b;
    out->threads[a] = n;
    out->grid[a] = (n + b - 1) / b;
  }

  Binder binder(*impl_, *out, scalars);
  const auto& params = impl_->params;
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].is_array) continue;
    detail::MergedMode m = detail::merge_modes(*impl_, static_cast<int>(p));
    if (m.first < 0) continue;
    if (m.conflict >= 0) detail::check_mode_conflicts(*impl_);  // throws
    const ParamInfo& param = params[p];
    if (p >= shapes.size())
      throw LaunchError(fmt::format(
          "launch error: no shape for array parameter `{}` (parameter {}); the launch gave {} "
          "shapes",
          param.name, p, shapes.size()));
    const Dim& shape = shapes[p];
    if (shape.rank() != param.rank)
      throw LaunchError(fmt::format(
          "launch error: array `{}` has shape {} (rank {}), but the kernel declares it `{}` "
          "(rank {})",
          param.name, shape.str(), shape.rank(), param.type_text, param.rank));

    detail::ArrayPlan plan;
    plan.param = static_cast<int>(p);
    plan.mode = m.mode;
    plan.op = m.op;
    plan.rank = param.rank;
    plan.shape = Rect::of_shape(shape);
    plan.first_bound = static_cast<uint32_t>(out->bounds.size());
    for (const detail::Rule& rule : impl_->rules) {
      if (rule.param != static_cast<int>(p)) continue;
      binder.set_text(rule.text);
      for (int ax = 0; ax < param.rank; ++ax) {
        const detail::Index& ix = rule.indices[ax];
        if (!ix.slice) {
          int s = binder.emit(binder.linear(ix.lo), 0);
          out->bounds.push_back({s, s});
          continue;
        }
        int lo = ix.lo < 0 ? binder.emit_constant(0) : binder.emit(binder.linear(ix.lo), 0);
        int hi =
            ix.hi < 0 ? binder.emit_constant(shape[ax] - 1) : binder.emit(binder.linear(ix.hi), 0);
        out->bounds.push_back({lo, hi});
      }
      ++plan.n_rules;
    }
    out->arrays.push_back(plan);
  }
  out->slots = detail::kVarSlots + static_cast<int>(out->forms.size());
  BoundAnnotation bound;
  bound.impl = std::move(out);
  return bound;
}

}  // namespace gridspan::annotation
