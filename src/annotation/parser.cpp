// Annotation::parse: tokens → bindings, rules and an expression arena whose affinity is
// checked as it is built (a product needs a constant side, a divisor must be constant).
// Literal and define arithmetic is folded here; scalar parameters wait for bind().
#include <algorithm>

#include <fmt/format.h>

#include "annotation/detail.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation {
namespace {

using namespace detail;

bool is_binding_keyword(const std::string& s) {
  return s == "global" || s == "block" || s == "local";
}

bool is_mode_keyword(const std::string& s) {
  return s == "read" || s == "write" || s == "overwrite" || s == "readwrite" || s == "reduce" ||
         s == "atomic";
}

std::string describe(const Token& t) {
  return t.kind == Tok::end ? "the end of the annotation" : "`" + t.text + "`";
}

std::string view_name(int rank) {
  switch (rank) {
    case 0:
      return "Scalar";
    case 1:
      return "Vector";
    case 2:
      return "Matrix";
    default:
      return "Tensor";
  }
}

bool is_integer_scalar(const ParamInfo& p) {
  return !p.is_array && !dtype_is_float(p.dtype) && p.dtype != DType::boolean;
}

std::string array_names(const std::vector<ParamInfo>& params) {
  std::string s;
  for (const auto& p : params)
    if (p.is_array) s += (s.empty() ? "" : ", ") + p.name;
  return s.empty() ? "none" : s;
}

/// `name[:, :]` for an array of `rank` axes, `name` for a 0-d array.
std::string whole_array(const std::string& name, int rank) {
  if (rank == 0) return name;
  std::string s = name + "[";
  for (int a = 0; a < rank; ++a) s += a ? ", :" : ":";
  return s + "]";
}

class Parser {
 public:
  Parser(const std::string& text, const std::map<std::string, long long>& defines,
         Annotation::Impl& impl, int text_index)
      : text_(text),
        toks_(lex(text)),
        params_(impl.params),
        defines_(defines),
        impl_(impl),
        text_index_(text_index) {}

  void run() {
    if (!(peek().kind == Tok::ident && is_binding_keyword(peek().text)))
      fail(peek().pos,
           fmt::format("an annotation starts with a binding (`global`, `block` or `local`), "
                       "found {}",
                       describe(peek())),
           "bind the thread index first, e.g. `global i => write out[i]`");
    while (peek().kind == Tok::ident && is_binding_keyword(peek().text)) parse_binding();
    if (!accept("=>")) {
      std::string fix = "write the bindings, then `=>`, then the rules: `global i => write out[i]`";
      if (peek().kind == Tok::ident && is_mode_keyword(peek().text))
        fix = "put `=>` between the bindings and the rules: `global i => write out[i]`";
      else if (peek().kind == Tok::ident)
        fix = "bind several axes with one list: `global [i, j]`";
      fail(peek().pos, fmt::format("expected `=>` after the bindings, found {}", describe(peek())),
           fix);
    }
    parse_rule();
    while (accept(",")) parse_rule();
    if (peek().kind != Tok::end) {
      if (peek().kind == Tok::ident && is_mode_keyword(peek().text))
        fail(peek().pos, fmt::format("expected `,` between rules, found {}", describe(peek())),
             "separate rules with `,`: `write out[i], read in[i]`");
      fail(peek().pos, fmt::format("unexpected {} after the last rule", describe(peek())),
           "separate rules with `,`; each is `mode array[index, ...]`");
    }
  }

 private:
  const Token& peek() const { return toks_[i_]; }
  const Token& next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  bool is_punct(const char* p) const { return peek().kind == Tok::punct && peek().text == p; }
  bool accept(const char* p) {
    if (!is_punct(p)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void fail(std::size_t pos, const std::string& problem, const std::string& fix) {
    throw_annotation_error(problem, text_, pos, fix);
  }
  std::string span(int node) const {
    const Node& n = impl_.nodes[node];
    return text_.substr(n.pos, n.end - n.pos);
  }
  const ParamInfo* find_param(const std::string& name) const {
    for (const auto& p : params_)
      if (p.name == name) return &p;
    return nullptr;
  }

  // ---- bindings ----------------------------------------------------------------------

  void parse_binding() {
    Token kw = next();
    VarKind kind = kw.text == "global"  ? VarKind::global
                   : kw.text == "block" ? VarKind::block
                                        : VarKind::local;
    if (!accept("[")) {
      const Token& t = peek();
      if (t.kind != Tok::ident)
        fail(t.pos,
             fmt::format("expected a name or `[` after `{}`, found {}", kw.text, describe(t)),
             fmt::format("bind a name to each axis: `{0} i` or `{0} [i, j]`", kw.text));
      bind_name(next(), kind, 0);
      return;
    }
    if (is_punct("]"))
      fail(peek().pos, "empty binding list",
           fmt::format("name one to three axes (x, y, z): `{} [i, j]`", kw.text));
    for (int axis = 0;; ++axis) {
      const Token& t = peek();
      if (t.kind != Tok::ident)
        fail(t.pos, fmt::format("expected a name in `{} [...]`, found {}", kw.text, describe(t)),
             "bind names to axes x, y, z in order; `_` skips an axis: `global [_, j]`");
      if (axis == kMaxRank)
        fail(t.pos,
             fmt::format("`{}` binds a fourth axis; launches have at most 3 (x, y, z)", t.text),
             "bind at most three names: `global [i, j, k]`");
      bind_name(next(), kind, axis);
      if (accept(",")) continue;
      if (accept("]")) break;
      fail(peek().pos,
           fmt::format("expected `,` or `]` in the binding list, found {}", describe(peek())),
           fmt::format("close the list: `{} [i, j]`", kw.text));
    }
  }

  void bind_name(const Token& t, VarKind kind, int axis) {
    if (t.text == "_") return;
    if (is_binding_keyword(t.text) || is_mode_keyword(t.text))
      fail(t.pos, fmt::format("`{}` is a keyword and cannot be a bound name", t.text),
           "choose another name for the bound variable");
    if (bound_.count(t.text))
      fail(t.pos, fmt::format("`{}` is bound twice", t.text),
           "give each bound variable its own name (`_` skips an axis)");
    if (find_param(t.text))
      fail(t.pos, fmt::format("`{}` is both a bound name and a kernel parameter", t.text),
           "rename the bound variable; kernel parameters are used as constants in indices");
    if (defines_.count(t.text))
      fail(t.pos, fmt::format("`{}` is both a bound name and a define", t.text),
           "rename the bound variable; defines are used as constants in indices");
    bound_.emplace(t.text, var_slot(kind, axis));
  }

  // ---- rules -------------------------------------------------------------------------

  void parse_rule() {
    const Token m = peek();
    Rule rule;
    rule.pos = m.pos;
    rule.text = text_index_;
    if (m.kind != Tok::ident || !is_mode_keyword(m.text))
      fail(m.pos, fmt::format("expected an access mode, found {}", describe(m)),
           "start each rule with read, write, overwrite, readwrite, reduce(op) or atomic(op)");
    next();
    rule.mode = m.text == "read"        ? Mode::read
                : m.text == "write"     ? Mode::write
                : m.text == "overwrite" ? Mode::overwrite
                : m.text == "readwrite" ? Mode::readwrite
                : m.text == "reduce"    ? Mode::reduce
                                        : Mode::atomic;
    std::size_t op_pos = 0;
    if (rule.mode == Mode::reduce || rule.mode == Mode::atomic) {
      if (!accept("("))
        fail(peek().pos, fmt::format("expected `(` after `{}`, found {}", m.text, describe(peek())),
             fmt::format("name the operator: `{}(+) sum[i]`", m.text));
      const Token& o = peek();
      op_pos = o.pos;
      if (o.text == "+")
        rule.op = ReduceOp::add;
      else if (o.text == "*")
        rule.op = ReduceOp::mul;
      else if (o.text == "min" && o.kind == Tok::ident)
        rule.op = ReduceOp::min;
      else if (o.text == "max" && o.kind == Tok::ident)
        rule.op = ReduceOp::max;
      else if (o.text == "&")
        rule.op = ReduceOp::bit_and;
      else if (o.text == "|")
        rule.op = ReduceOp::bit_or;
      else
        fail(o.pos, fmt::format("{} is not a reduction operator", describe(o)),
             "use one of + * min max (and & | on integer arrays)");
      next();
      if (!accept(")"))
        fail(peek().pos, fmt::format("expected `)` after the operator, found {}", describe(peek())),
             fmt::format("close the operator: `{}({})`", m.text, o.text));
    }

    const Token name = peek();
    if (name.kind != Tok::ident)
      fail(name.pos,
           fmt::format("expected an array name after `{}`, found {}", m.text, describe(name)),
           fmt::format("name one of the kernel's array parameters (its arrays are: {})",
                       array_names(params_)));
    next();
    const ParamInfo* p = find_param(name.text);
    if (!p)
      fail(name.pos,
           fmt::format("`{}` is not an array parameter of the kernel (its arrays are: {})",
                       name.text, array_names(params_)),
           "name one of the kernel's array parameters");
    if (!p->is_array)
      fail(name.pos,
           fmt::format("`{}` is a scalar parameter of the kernel, not an array (its arrays "
                       "are: {})",
                       name.text, array_names(params_)),
           "rules name array parameters; scalars are used as constants inside indices");
    if (p->is_const && rule.mode != Mode::read)
      fail(m.pos,
           fmt::format("`{}` is read-only (`{}` in the kernel's signature) but the rule says `{}`",
                       name.text, p->type_text, m.text),
           fmt::format("use `read {}`, or drop `const` from the parameter's type",
                       whole_array(name.text, p->rank)));
    if ((rule.op == ReduceOp::bit_and || rule.op == ReduceOp::bit_or) &&
        (rule.mode == Mode::reduce || rule.mode == Mode::atomic) && dtype_is_float(p->dtype))
      fail(op_pos,
           fmt::format("`{}` needs an integer array, but `{}` holds {}", op_name(rule.op),
                       name.text, dtype_name(p->dtype)),
           "use + * min or max on floating-point arrays");
    rule.param = static_cast<int>(p - params_.data());
    rule.name_pos = name.pos;

    if (accept("[")) {
      if (is_punct("]"))
        fail(peek().pos, fmt::format("empty index list for `{}`", name.text),
             p->rank == 0 ? fmt::format("a 0-d array takes no brackets: `{} {}`", m.text, name.text)
                          : fmt::format("give one index or slice per axis, e.g. `{}`",
                                        whole_array(name.text, p->rank)));
      do {
        rule.indices.push_back(parse_index());
      } while (accept(","));
      if (!accept("]"))
        fail(peek().pos,
             fmt::format("expected `,` or `]` after index {} of `{}`, found {}",
                         rule.indices.size(), name.text, describe(peek())),
             "close the index list with `]`");
    }
    int given = static_cast<int>(rule.indices.size());
    if (given != p->rank)
      fail(name.pos,
           fmt::format("wrong number of indices for `{}`: it is a {} of rank {}, the rule gives {}",
                       name.text, view_name(p->rank), p->rank, given),
           p->rank == 0 ? fmt::format("a 0-d array takes no brackets: `{} {}`", m.text, name.text)
                        : fmt::format("give one index or slice per axis, e.g. `{}`",
                                      whole_array(name.text, p->rank)));
    impl_.rules.push_back(std::move(rule));
  }

  Index parse_index() {
    Index ix;
    ix.pos = peek().pos;
    if (!accept(":")) {
      int e = parse_expr();
      if (!accept(":")) {
        ix.lo = ix.hi = e;
        return ix;
      }
      ix.lo = e;
    }
    ix.slice = true;
    if (!is_punct(",") && !is_punct("]")) ix.hi = parse_expr();
    return ix;
  }

  // ---- expressions -------------------------------------------------------------------

  int add_node(const Node& n) {
    impl_.nodes.push_back(n);
    return static_cast<int>(impl_.nodes.size()) - 1;
  }

  int parse_expr() {
    int lhs = parse_term();
    while (is_punct("+") || is_punct("-")) {
      Token op = next();
      int rhs = parse_term();
      lhs = binary(op.text == "+" ? NodeKind::add : NodeKind::sub, lhs, rhs, op.pos);
    }
    return lhs;
  }

  int parse_term() {
    int lhs = parse_unary();
    while (is_punct("*") || is_punct("/")) {
      Token op = next();
      int rhs = parse_unary();
      lhs = binary(op.text == "*" ? NodeKind::mul : NodeKind::div, lhs, rhs, op.pos);
    }
    return lhs;
  }

  int parse_unary() {
    if (is_punct("+")) {
      next();
      return parse_unary();
    }
    if (!is_punct("-")) return parse_primary();
    Token op = next();
    int a = parse_unary();
    Node n = impl_.nodes[a];
    if (n.kind == NodeKind::integer) {
      if (n.value == INT64_MIN) fail(op.pos, "constant overflows 64-bit integers", "");
      n.value = -n.value;
      n.pos = op.pos;
      impl_.nodes[a] = n;
      return a;
    }
    Node neg;
    neg.kind = NodeKind::neg;
    neg.constant = n.constant;
    neg.a = a;
    neg.pos = op.pos;
    neg.end = n.end;
    return add_node(neg);
  }

  int parse_primary() {
    const Token t = peek();
    if (t.kind == Tok::integer) {
      next();
      Node n;
      n.value = t.value;
      n.pos = t.pos;
      n.end = t.pos + t.text.size();
      return add_node(n);
    }
    if (is_punct("(")) {
      next();
      int e = parse_expr();
      if (!is_punct(")"))
        fail(peek().pos, fmt::format("expected `)`, found {}", describe(peek())),
             fmt::format("close the parenthesis opened at column {}", t.pos + 1));
      Token close = next();
      impl_.nodes[e].pos = t.pos;
      impl_.nodes[e].end = close.pos + 1;
      return e;
    }
    if (t.kind != Tok::ident)
      fail(t.pos, fmt::format("expected an index expression, found {}", describe(t)),
           "an index is an expression such as `i`, `i + 1`, `2 * i`, `i / 4`, or a slice "
           "`lo:hi` (both inclusive)");
    next();
    Node n;
    n.pos = t.pos;
    n.end = t.pos + t.text.size();
    if (auto it = bound_.find(t.text); it != bound_.end()) {
      n.kind = NodeKind::var;
      n.constant = false;
      n.slot = it->second;
      return add_node(n);
    }
    if (const ParamInfo* p = find_param(t.text)) {
      if (p->is_array)
        fail(t.pos,
             fmt::format("`{}` is an array parameter; an index cannot use its values", t.text),
             "indices use bound names, integer scalar parameters and defines");
      if (!is_integer_scalar(*p))
        fail(t.pos,
             fmt::format("`{}` is a {} scalar parameter; only integer scalars can be used in an "
                         "index",
                         t.text, dtype_name(p->dtype)),
             "pass the value as an integer parameter or a define");
      n.kind = NodeKind::param;
      n.param = static_cast<int>(p - params_.data());
      return add_node(n);
    }
    if (auto it = defines_.find(t.text); it != defines_.end()) {
      n.kind = NodeKind::integer;
      n.value = it->second;
      return add_node(n);
    }
    std::string names;
    for (const auto& [name, slot] : bound_) names += (names.empty() ? "" : ", ") + name;
    fail(t.pos,
         fmt::format("`{}` is not a bound name, an integer scalar parameter or a define", t.text),
         fmt::format("bound names here: {}; bind it (e.g. `global [i, {}]`), or pass it as an "
                     "integer kernel parameter or a define",
                     names.empty() ? "none" : names, t.text));
  }

  int binary(NodeKind kind, int a, int b, std::size_t op_pos) {
    const Node x = impl_.nodes[a], y = impl_.nodes[b];
    if (kind == NodeKind::mul && !x.constant && !y.constant)
      fail(op_pos,
           fmt::format("index `{}` is not affine: it multiplies `{}` by `{}`, which both depend "
                       "on bound names",
                       text_.substr(x.pos, y.end - x.pos), span(a), span(b)),
           "an index may multiply by constants only (integers, integer scalar parameters, "
           "defines)");
    if (kind == NodeKind::div && !y.constant)
      fail(op_pos,
           fmt::format("index `{}` is not affine: it divides by `{}`, which depends on bound names",
                       text_.substr(x.pos, y.end - x.pos), span(b)),
           "an index may divide only by a constant (floor division by an integer, integer scalar "
           "parameter or define)");
    if (kind == NodeKind::div && y.kind == NodeKind::integer && y.value <= 0)
      fail(y.pos, fmt::format("floor division by {}: the divisor must be positive", y.value),
           "divide by a positive constant");
    Node n;
    n.kind = kind;
    n.constant = x.constant && y.constant;
    n.a = a;
    n.b = b;
    n.pos = x.pos;
    n.end = y.end;
    if (x.kind == NodeKind::integer && y.kind == NodeKind::integer) {
      int64_t v = 0;
      bool overflow = false;
      switch (kind) {
        case NodeKind::add:
          overflow = __builtin_add_overflow(x.value, y.value, &v);
          break;
        case NodeKind::sub:
          overflow = __builtin_sub_overflow(x.value, y.value, &v);
          break;
        case NodeKind::mul:
          overflow = __builtin_mul_overflow(x.value, y.value, &v);
          break;
        default:
          v = floor_div(x.value, y.value);
          break;
      }
      if (overflow) fail(op_pos, "constant overflows 64-bit integers", "");
      n.kind = NodeKind::integer;
      n.value = v;
      n.a = n.b = -1;
    }
    return add_node(n);
  }

  const std::string& text_;
  std::vector<Token> toks_;
  std::size_t i_ = 0;
  const std::vector<ParamInfo>& params_;
  const std::map<std::string, long long>& defines_;
  Annotation::Impl& impl_;
  int text_index_;
  std::map<std::string, int> bound_;  // bound name → interval slot
};

}  // namespace

Annotation Annotation::parse(const std::string& text, const std::vector<ParamInfo>& params,
                             const std::map<std::string, long long>& defines) {
  auto impl = std::make_shared<Impl>();
  impl->params = params;
  impl->texts.push_back(text);
  Parser(impl->texts.back(), defines, *impl, 0).run();
  detail::check_mode_conflicts(*impl);
  impl->modes = detail::merged_modes(*impl);
  Annotation a;
  a.impl_ = std::move(impl);
  return a;
}

}  // namespace gridspan::annotation
