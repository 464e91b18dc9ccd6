// Annotation as a whole: merging several annotate() texts, the merged mode of each array,
// and the checks that need every rule (validate).
#include <fmt/format.h>

#include "annotation/detail.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation {

std::string mode_name(Mode m) {
  switch (m) {
    case Mode::read:
      return "read";
    case Mode::write:
      return "write";
    case Mode::readwrite:
      return "readwrite";
    case Mode::reduce:
      return "reduce";
    case Mode::atomic:
      return "atomic";
    case Mode::overwrite:
      return "overwrite";
  }
  return "?";
}

std::string op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::add:
      return "+";
    case ReduceOp::mul:
      return "*";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::bit_and:
      return "&";
    case ReduceOp::bit_or:
      return "|";
  }
  return "?";
}

std::string access_name(Mode m, ReduceOp op) {
  if (m == Mode::reduce || m == Mode::atomic) return mode_name(m) + "(" + op_name(op) + ")";
  return mode_name(m);
}

namespace detail {

MergedMode merge_modes(const Annotation::Impl& impl, int param) {
  MergedMode m;
  auto combining = [](Mode x) { return x == Mode::reduce || x == Mode::atomic; };
  for (std::size_t i = 0; i < impl.rules.size(); ++i) {
    const Rule& r = impl.rules[i];
    if (r.param != param) continue;
    if (m.first < 0) {
      m.first = static_cast<int>(i);
      m.mode = r.mode;
      m.op = r.op;
      continue;
    }
    if (combining(m.mode) || combining(r.mode)) {
      // Only identical reduce(op) / atomic(op) rules share an array.
      if ((m.mode != r.mode || m.op != r.op) && m.conflict < 0) m.conflict = static_cast<int>(i);
      continue;
    }
    // Several rules of one array: each writes its own region completely, but their union
    // (what the planner sees) may have gaps, so overwrite becomes write.
    if (m.mode == Mode::overwrite || r.mode == Mode::overwrite) {
      const bool reads = m.mode == Mode::read || m.mode == Mode::readwrite ||
                         r.mode == Mode::read || r.mode == Mode::readwrite;
      m.mode = reads ? Mode::readwrite : Mode::write;
    } else if (m.mode != r.mode) {
      m.mode = Mode::readwrite;
    }
  }
  return m;
}

void check_mode_conflicts(const Annotation::Impl& impl) {
  for (std::size_t p = 0; p < impl.params.size(); ++p) {
    if (!impl.params[p].is_array) continue;
    MergedMode m = merge_modes(impl, static_cast<int>(p));
    if (m.conflict < 0) continue;
    const Rule& first = impl.rules[m.first];
    const Rule& bad = impl.rules[m.conflict];
    throw_annotation_error(
        fmt::format("the rules on `{}` cannot be combined: `{}` and `{}`", impl.params[p].name,
                    access_name(first.mode, first.op), access_name(bad.mode, bad.op)),
        impl.texts[bad.text], bad.pos,
        "a reduce or atomic rule must be the only kind of rule on its array, with one "
        "operator; use a second array for other accesses");
  }
}

}  // namespace detail

Annotation::Annotation() : impl_(std::make_shared<Impl>()) {}

void Annotation::merge(const Annotation& other) {
  if (impl_.use_count() > 1) impl_ = std::make_shared<Impl>(*impl_);  // copy on write
  const Impl& o = *other.impl_;
  if (impl_->params.empty()) impl_->params = o.params;
  const int text_off = static_cast<int>(impl_->texts.size());
  const int node_off = static_cast<int>(impl_->nodes.size());
  impl_->texts.insert(impl_->texts.end(), o.texts.begin(), o.texts.end());
  for (detail::Node n : o.nodes) {
    if (n.a >= 0) n.a += node_off;
    if (n.b >= 0) n.b += node_off;
    impl_->nodes.push_back(n);
  }
  for (detail::Rule r : o.rules) {
    r.text += text_off;
    for (auto& ix : r.indices) {
      if (ix.lo >= 0) ix.lo += node_off;
      if (ix.hi >= 0) ix.hi += node_off;
    }
    impl_->rules.push_back(std::move(r));
  }
  impl_->modes = detail::merged_modes(*impl_);
}

void Annotation::validate(const std::vector<ParamInfo>& params) const {
  detail::check_mode_conflicts(*impl_);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const ParamInfo& param = params[p];
    if (!param.is_array) continue;
    bool has_rule = false;
    for (const auto& r : impl_->rules) has_rule |= r.param == static_cast<int>(p);
    if (has_rule) continue;
    std::string example = param.name;
    if (param.rank > 0) {
      example += "[";
      for (int a = 0; a < param.rank; ++a) example += a ? ", :" : ":";
      example += "]";
    }
    if (impl_->texts.empty())
      throw AnnotationError(fmt::format(
          "annotation error: array parameter `{}` has no rule: the kernel has no annotation\n"
          "  annotate the kernel, e.g. .annotate(\"global i => read {}\")",
          param.name, example));
    const std::string& text = impl_->texts.back();
    detail::throw_annotation_error(
        fmt::format("array parameter `{}` has no rule in the annotation", param.name), text,
        text.size(),
        fmt::format("add e.g. `, read {}` (the whole array) or a tighter region", example));
  }
}

const std::vector<Access>& Annotation::modes() const {
  return impl_->modes;
}

std::vector<Access> detail::merged_modes(const Annotation::Impl& impl) {
  std::vector<Access> out;
  for (std::size_t p = 0; p < impl.params.size(); ++p) {
    if (!impl.params[p].is_array) continue;
    detail::MergedMode m = detail::merge_modes(impl, static_cast<int>(p));
    if (m.first < 0) continue;
    Access a;
    a.param = static_cast<int>(p);
    a.mode = m.mode;
    a.op = m.op;
    out.push_back(a);
  }
  return out;
}

const std::vector<std::string>& Annotation::texts() const {
  return impl_->texts;
}

}  // namespace gridspan::annotation
