// The access-annotation language (DESIGN.md, "Annotation language"):
//   annotation := binding+ "=>" rule ("," rule)*
//   binding    := ("global" | "block" | "local") (name | "[" name ("," name){0,2} "]")
//   rule       := mode array ("[" index ("," index)* "]")?
//   mode       := read | write | overwrite | readwrite | reduce(op) | atomic(op)
//                 (overwrite: the kernel writes every element of the region, so its old
//                 contents are neither brought to the device nor assembled)
//   index      := expr | expr? ":" expr?        -- both bounds inclusive
// parse → checked affine expressions → per-superblock access regions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "annotation/signature.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::annotation {

enum class Mode { read, write, readwrite, reduce, atomic, overwrite };
enum class ReduceOp { add, mul, min, max, bit_and, bit_or };

std::string mode_name(Mode m);     // "read", "reduce(+)" needs the op: use access_name
std::string op_name(ReduceOp op);  // "+", "*", "min", "max", "&", "|"
/// The mode as an annotation writes it: "read", "write", "readwrite", "reduce(+)",
/// "atomic(max)".
std::string access_name(Mode m, ReduceOp op);

/// What a launch looks like to the annotation: thread domain and block size per axis
/// (missing axes are 1).
struct LaunchGeometry {
  Dim threads;
  Dim block;
};

/// One array parameter's access in one superblock: the union of its rules' regions,
/// clamped to the array. `region` may be empty (the superblock touches nothing of it).
struct Access {
  int param = -1;  // index into the kernel's parameter list
  Mode mode = Mode::read;
  ReduceOp op = ReduceOp::add;
  Rect region;
};

class Annotation;

/// An annotation with the launch's constants filled in: cheap per-superblock queries.
class BoundAnnotation {
 public:
  /// Access regions of every annotated array for the superblock whose blocks are
  /// `blocks` (a Rect in block coordinates, rank = threads' rank). One entry per array
  /// parameter that has rules, in parameter order. Blocks past the launch's grid and
  /// threads past its thread domain count for nothing; a superblock without threads gets
  /// empty regions (a 0-d array's region is always its one element). Thread-safe.
  std::vector<Access> regions(const Rect& blocks) const;
  /// Same, into `out` (reused storage: the planner's hot path).
  void regions(const Rect& blocks, std::vector<Access>& out) const;

  struct Impl;
  std::shared_ptr<const Impl> impl;
};

class Annotation {
 public:
  Annotation();
  /// Parses one annotation text against the kernel's parameters; `defines` are named
  /// constants. Throws AnnotationError: the message quotes `text` with a caret under the
  /// offending column and says what was expected. Checks: known array names, the number
  /// of indices equals the array's rank, indices are affine (constants multiply and floor-
  /// divide only), no write/readwrite/reduce/atomic on a `const` parameter, names in
  /// expressions are bound names, integer scalar parameters or defines.
  static Annotation parse(const std::string& text, const std::vector<ParamInfo>& params,
                          const std::map<std::string, long long>& defines);
  /// Joins the rules of several annotate() calls (bindings stay per text).
  void merge(const Annotation& other);
  /// Throws AnnotationError if an array parameter has no rule, or rules on one array mix
  /// reduce/atomic with anything else (or two different ops).
  void validate(const std::vector<ParamInfo>& params) const;

  /// Fills in the launch: `scalars[p]` holds the value of integer scalar parameter p (others
  /// ignored), `shapes[p]` the shape of array parameter p. Axes past the geometry's rank
  /// have extent 1, so `global [i, j]` on a 1-d launch binds j to 0. Throws LaunchError
  /// when a divisor is not positive at this launch, a block extent is not positive, or
  /// `scalars`/`shapes` lack an entry (or have the wrong rank) for a parameter it uses.
  BoundAnnotation bind(const LaunchGeometry& geometry, const std::vector<int64_t>& scalars,
                       const std::vector<Dim>& shapes) const;

  /// Mode of each array parameter after merging (read if only read rules ...).
  const std::vector<Access>& modes() const;
  const std::vector<std::string>& texts() const;
  /// The rules' identity, shared by copies until one is changed (merge copies first): a key
  /// for a cache that holds a copy, so that the identity is not reused while it is kept.
  const void* identity() const { return impl_.get(); }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// One line for `gridspan annotate`: "superblock " + the superblock's thread range, then
/// " NAME MODE REGION" per access, e.g.
///   superblock [0..256) x [0..16) out write [0..256) x [0..16) in read [0..258)
/// REGION is Rect::str(); an empty region prints as "empty" and a 0-d array's region as
/// "[]" (Rect::str of rank 0).
std::string describe_superblock(const Rect& threads_range, const std::vector<Access>& accesses,
                                const std::vector<ParamInfo>& params);

}  // namespace gridspan::annotation
