// Internals of the annotation layer, shared by its parser, binder and region evaluator.
// Parse time keeps a small expression arena per annotation (checked for affinity, with
// literal and define constants folded); bind time flattens it into coefficient arrays
// (`Form`s over interval slots) that `BoundAnnotation::regions` evaluates without a tree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "annotation/annotation.hpp"

namespace gridspan::annotation::detail {

// ---- messages ------------------------------------------------------------------------

/// "\n  <line of text holding pos>\n  <spaces>^": the quoted line with a caret under `pos`.
std::string quote_with_caret(const std::string& text, std::size_t pos);

/// "annotation error: PROBLEM\n  TEXT\n  ^\n  FIX" (the fix line is left out when empty).
std::string annotation_message(const std::string& problem, const std::string& text, std::size_t pos,
                               const std::string& fix);

[[noreturn]] void throw_annotation_error(const std::string& problem, const std::string& text,
                                         std::size_t pos, const std::string& fix);

/// Floor division for d > 0 (rounds towards negative infinity).
inline int64_t floor_div(int64_t a, int64_t d) {
  int64_t q = a / d;
  if ((a % d != 0) && (a < 0)) --q;
  return q;
}

// ---- lexer -------------------------------------------------------------------------

enum class Tok : uint8_t { ident, integer, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;     // identifier, digits, or the punctuation ("=>", "[", "+" ...)
  int64_t value = 0;    // integers
  std::size_t pos = 0;  // offset of the first character in the annotation text
};

/// Splits an annotation into tokens; the last one is Tok::end at text.size(). Throws
/// AnnotationError on a character that no token starts with.
std::vector<Token> lex(const std::string& text);

// ---- parse-time representation -------------------------------------------------------

enum class VarKind : uint8_t { global = 0, block = 1, local = 2 };
/// Interval slots 0..8 hold the bound variables, (kind, axis) -> kind * 3 + axis.
constexpr int kVarSlots = 9;
inline int var_slot(VarKind kind, int axis) {
  return static_cast<int>(kind) * 3 + axis;
}

enum class NodeKind : uint8_t { integer, var, param, add, sub, neg, mul, div };

/// One node of an index expression. `constant` = no bound variable below it (integers and
/// scalar parameters only), which is what the affinity rules are stated in.
struct Node {
  NodeKind kind = NodeKind::integer;
  bool constant = true;
  int64_t value = 0;             // integer
  int slot = -1;                 // var
  int param = -1;                // param
  int a = -1, b = -1;            // operands (neg: a only)
  std::size_t pos = 0, end = 0;  // source span in the rule's text
};

struct Index {
  bool slice = false;
  int lo = -1;  // node id; for a single expression lo == hi
  int hi = -1;  // -1 in a slice: bound omitted (0, or extent - 1)
  std::size_t pos = 0;
};

struct Rule {
  Mode mode = Mode::read;
  ReduceOp op = ReduceOp::add;
  int param = -1;
  std::vector<Index> indices;
  int text = 0;              // index into Impl::texts
  std::size_t pos = 0;       // column of the mode keyword
  std::size_t name_pos = 0;  // column of the array name
};

/// The merged mode of one array's rules; `conflict` is the first rule that cannot be
/// merged with the ones before it (reduce/atomic mixed with others, or two ops).
struct MergedMode {
  Mode mode = Mode::read;
  ReduceOp op = ReduceOp::add;
  int first = -1;     // first rule on the array, -1 when it has none
  int conflict = -1;  // rule index, -1 when they merge
};

MergedMode merge_modes(const Annotation::Impl& impl, int param);

/// Throws AnnotationError on the first array whose rules do not merge (see MergedMode).
void check_mode_conflicts(const Annotation::Impl& impl);
/// Each array parameter's merged mode (Annotation::modes, made when the rules change).
std::vector<Access> merged_modes(const Annotation::Impl& impl);

// ---- bind-time representation ------------------------------------------------------

struct Interval {
  int64_t lo, hi;
};

struct Term {
  int64_t coeff;
  int32_t slot;
};

/// c0 + sum(coeff * slot) over terms[first, first + count); with divisor > 0 the form's
/// result is floor(form / divisor). The result goes to slot kVarSlots + form index, so a
/// form may use the results of forms before it (nested floor divisions).
struct Form {
  int64_t c0 = 0;
  uint32_t first = 0, count = 0;
  int64_t divisor = 0;
};

/// Where one axis of one rule reads its bounds: lower = slots[lo].lo, upper = slots[hi].hi
/// (both inclusive).
struct AxisBounds {
  int32_t lo, hi;
};

struct ArrayPlan {
  int param = -1;
  Mode mode = Mode::read;
  ReduceOp op = ReduceOp::add;
  int rank = 0;
  Rect shape;                // the whole array, for clamping
  uint32_t first_bound = 0;  // bounds[first_bound, + n_rules * rank)
  uint32_t n_rules = 0;
};

}  // namespace gridspan::annotation::detail

namespace gridspan::annotation {

struct Annotation::Impl {
  std::vector<ParamInfo> params;
  std::vector<std::string> texts;
  std::vector<detail::Node> nodes;
  std::vector<detail::Rule> rules;
  std::vector<Access> modes;  // each array parameter's merged mode, made once rules change
};

struct BoundAnnotation::Impl {
  std::array<int64_t, kMaxRank> block{1, 1, 1};    // block size per axis
  std::array<int64_t, kMaxRank> threads{1, 1, 1};  // thread domain per axis
  std::array<int64_t, kMaxRank> grid{1, 1, 1};     // ceil(threads / block)
  std::vector<detail::Form> forms;
  std::vector<detail::Term> terms;
  std::vector<detail::AxisBounds> bounds;
  std::vector<detail::ArrayPlan> arrays;
  int slots = detail::kVarSlots;  // kVarSlots + forms.size()
};

}  // namespace gridspan::annotation
