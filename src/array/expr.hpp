// The array library's lazy elementwise expressions: a pending array's producer is a Node
// (one operation over arrays, pending arrays and scalars). When the value is needed, the
// tree under it becomes one Program: the operations in order, the arrays they read (leaves,
// each through its broadcast and view), the scalars, and the target; a Program is one
// generated kernel, compiled once per shape of expression and launched through the public
// runtime.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gridspan/api/context.hpp"
#include "gridspan/array/elementwise.hpp"
#include "gridspan/array/reduce.hpp"

namespace gridspan::array {

using detail::ArrayHandle;
using detail::EwOp;

/// One input of a Node: an array (pending or not) or a scalar, and the dtype the operation
/// computes it in.
struct Input {
  std::shared_ptr<ArrayHandle> array;  // null for a scalar
  DType as = DType::f32;
  long double value = 0;  // a scalar's value, converted to `as`
  uint64_t bits = 0;      // ... and an integer's bits
  uint64_t writes = 0;    // a task's array: its storage's task_writes when the Node was built
};

/// A pending elementwise result.
class Node final : public detail::Producer {
 public:
  EwOp op = EwOp::add;
  DType dtype = DType::f32;
  Dim shape;
  std::vector<Input> inputs;
  int depth = 1;   // operations on the longest path to a leaf
  int params = 0;  // kernel parameters its program takes at most (leaves, views, scalars)
  void produce(ArrayHandle& into) override;
};

/// Where a Program reads a value from.
struct Ref {
  enum Kind : uint8_t { leaf, scalar, step, target } kind = leaf;
  int index = 0;
};
/// An array a Program reads: storage axis b follows the output axis follows[b] (-1: it
/// stays at the view's start, or 0), through the view's start and step when `general`.
/// A linear leaf (a view made by reshape_in_place) instead follows per view axis k the
/// output axis vfollows[k], and is read at its element number in the storage's row-major
/// order.
struct Leaf {
  std::shared_ptr<detail::ArrayStorage> storage;
  DType dtype = DType::f32;
  int rank = 0;  // the storage's
  std::array<int, kMaxRank> follows{-1, -1, -1};
  bool general = false;
  detail::ViewMap view;
  bool linear = false;
  int vrank = 0;
  std::array<int, kMaxRank> vfollows{-1, -1, -1};
};
struct Scalar {
  DType dtype = DType::f32;
  long double value = 0;
  uint64_t bits = 0;
};
struct Step {
  EwOp op = EwOp::add;
  DType dtype = DType::f32;
  int axis = -1;  // arange: the output axis its index walks (-1: always 0)
  std::vector<std::pair<Ref, DType>> args;  // each with the dtype it is computed in
};
/// Where the result goes: a fresh array (the pending one being produced), or an array or
/// view the user assigns to.
struct Target {
  ArrayHandle* handle = nullptr;
  Leaf access;             // how the kernel indexes it
  bool fresh = true;       // a new array: written whole (overwrite), distributed by the library
  bool also_read = false;  // the expression reads the target where it writes: readwrite
};

/// How an annotation sees the axes of a kernel's input: axis k as the expression lo[k], or as
/// the range lo[k]..hi[k] when hi[k] is set (a reduction's thread reads many elements).
struct AxisBounds {
  std::array<std::string, kMaxRank> lo{"a0", "a1", "a2"};
  std::array<std::string, kMaxRank> hi;
};

struct Program {
  Dim shape;
  DType dtype = DType::f32;
  std::vector<Leaf> leaves;
  std::vector<Scalar> scalars;
  std::vector<Step> steps;
  Ref result;
  Target target;
  std::array<int64_t, kMaxRank> block{1, 1, 1};  // per array axis
  /// Each thread runs a line of `gs_e` elements (a kernel parameter after the others) along
  /// the last axis, as a loop the compiler vectorises: the cpu backend's kernels, whose
  /// threads are iterations of a loop on one core anyway. A GPU's are looped too when
  /// `unrolled` is set (below): the lines are then what the annotation says a thread has.
  bool looped = false;
  /// On a GPU (with `looped`): a thread runs `unrolled` elements of its block's part of the
  /// last axis, blockDim.x apart (each access coalesced), all loaded before any is stored;
  /// the block's elements are its threads' lines, as the annotation says, and a checked
  /// build runs the lines themselves. 0: one element per thread, or the cpu's lines.
  int unrolled = 0;
  /// With `unrolled`: a thread's elements are its line itself, each access that walks the
  /// last axis read or written as one vector of `unrolled` elements (at most 16 bytes; one
  /// that is broadcast along it read once). launch.cpp's vector_elements says where: every
  /// access an array's own last axis or broadcast along it, every vector whole and aligned.
  bool vector = false;
  /// Thread (i, j, k) computes the element at the origin o0.. (kernel parameters after the
  /// others) plus (i, j, k), up to n0.. (exclusive): the elements a native task writes (an
  /// expression assigned inside the task, array/task.cpp). One element a thread.
  bool origin = false;
  /// The target is a reduce (or atomic) parameter of a native task (array/task.cpp), its
  /// access mode as the annotation writes it ("reduce(+)"): each thread contributes its value
  /// with `out.reduce(...)` at the target's indices (its axes follow the thread's as
  /// `target.access.follows` says) instead of storing it. Empty: the value is stored.
  std::string contribute;
  /// With `contribute`: its operator, as the kernels' GsReduceOp (annotation::ReduceOp's value).
  int contribute_op = 0;

  /// The shape of the expression (operations, dtypes, broadcasts, views), not its values:
  /// equal keys, equal kernels.
  std::string key() const;
  /// The leaves' and scalars' parameter declarations (", const gridspan::Vector<float> L0 ...").
  std::string input_params() const;
  /// The code of every step: `const float v3 = ...;`, reading axes a0, a1, a2.
  std::string step_code() const;
  /// ", read L0[...]" for every leaf, its axes bound as `ab` says.
  std::string read_rules(const AxisBounds& ab) const;
  const Leaf& target_access() const;
  std::string source(const std::string& name) const;
  std::string annotation() const;
};

/// A generated kernel's first lines for one thread per element of a rank-`rank` array
/// (`n0`.. its extents): axes a0.. from the thread's index, returning past the ends (with
/// `flag`, setting `gs_in` instead, so that every thread goes on); with
/// `looped`, the last axis's line `gs_w` of `gs_e` elements instead; with `origin`, the axes
/// start at o0.. (Program::origin).
std::string thread_prologue(int rank, bool looped, bool origin = false, bool flag = false);

/// The Program computing `root` (a pending array's Node) into `target` (of the root's shape
/// and dtype), inlining the pending arrays under it and reading the others where they lie.
Program build_program(const Node& root, ArrayHandle& target, bool fresh);
/// The Program of `root`'s expression alone (its leaves, scalars and steps; no target).
Program build_expression(const Node& root);
/// Compiles (once per key) and launches `program` into its target.
void launch_program(const std::shared_ptr<runtime::Driver>& driver, Program& program);

/// How a kernel indexes array `h` (settled) inside an output of rank `rank`: through its
/// broadcast and its view.
Leaf leaf_of(const ArrayHandle& h, int rank);
/// A leaf's kernel parameters, named `name` ("const gridspan::Vector<float> L0, int64_t
/// L0s0 ..."; no leading comma), in the order Arguments::view passes them.
std::string leaf_params(const Leaf& l, const std::string& name, bool read_only);
/// The leaf's element at the output's axes a0, a1, a2 ("L0(a0, a1)").
std::string leaf_element(const Leaf& l, const std::string& name);
/// Its annotation rule ("read L0[a0, a1]").
std::string leaf_rule(const Leaf& l, const std::string& mode, const std::string& name);

/// NumPy's broadcast of two shapes; a gs::Error naming both when they cannot be.
Dim broadcast(const Dim& a, const Dim& b);

/// A pending handle's Node (null when settled or made by another producer).
const Node* node_of(const ArrayHandle& h);
/// The view type names by rank ("Scalar" .. "Tensor").
extern const char* const kViewKinds[4];
/// The register type a value of `d` is computed in: float for the 16-bit floats.
std::string reg(DType d);
/// A cpu thread's `J` consecutive elements from `first` along axis `axis` (both defined
/// before): each `value` (computed by `steps`) combined into 16 accumulators `gs_acc` of
/// `type` from `identity` (element j into lane j % 16, the tail into lane 0), then the lanes
/// as a tree into `acc`. A fixed order, which the compiler keeps in vector registers.
std::string lanes_loop(
    const std::string& type, const std::string& identity, int axis, const std::string& steps,
    const std::string& value,
    const std::function<std::string(const std::string&, const std::string&)>& combine);
/// Code converting `v`, a value of dtype `from` in its register type, to dtype `to`
/// (16-bit floats rounded to nearest even, floats into integers saturating).
std::string convert(const std::string& v, DType from, DType to);

/// A pending handle produced by `node`, registered with its context and its inputs.
std::shared_ptr<ArrayHandle> pending_handle(const std::shared_ptr<runtime::Driver>& driver,
                                            std::shared_ptr<Node> node);

/// An index sequence of `shape` (one axis longer than 1): start + i * step along it, and
/// `stop` exactly at i == last (-1: never).
std::shared_ptr<Node> arange_node(DType dtype, const Dim& shape, double start, double step,
                                  double stop, int64_t last);

/// Registers a new pending array: with its context (for synchronize) and with the
/// storages it reads (launched before they are written).
void track_pending(const std::shared_ptr<ArrayHandle>& h);

/// The Node of `op` over `args` (shapes broadcast, scalars converted; the arrays moved out
/// of `args`), within one kernel's limits.
std::shared_ptr<Node> make_node(EwOp op, DType result, std::span<detail::EwArg> args);
/// The Node writing `value` (broadcast, converted) into `target`.
std::shared_ptr<Node> assign_node(const ArrayHandle& target, const detail::EwArg& value);

// ---- the array library inside a native function's task (task.cpp) ----
/// Whether an operation over `args` is a task's (one of them is a task's array).
bool in_task(std::span<const detail::EwArg> args);
/// An elementwise operation over a task's arrays: a pending expression of the task, without
/// the library's lock or its context's tracking.
std::shared_ptr<ArrayHandle> task_elementwise(EwOp op, DType result, std::span<detail::EwArg> args);
/// `target.assign(value)` inside a task: computed at once for the elements the task writes,
/// or contributed to what it reduces (`total += value`, `total += gs::sum(x)`).
void task_assign(const std::shared_ptr<ArrayHandle>& target, const detail::EwArg& value);
/// A reduction of a task's array `a` inside the task: pending until it is contributed into
/// one of the task's reduce arrays, over the elements the task holds of what it reads.
std::shared_ptr<ArrayHandle> task_reduce(detail::RedOp op, DType result,
                                         const std::shared_ptr<ArrayHandle>& a, int axis,
                                         bool keepdims);

/// The Program reading array `in` where it lies: a pending expression is computed inside
/// the kernel that reads it (a reduction's or a scan's), with no launch of its own.
inline Program read_program(const std::shared_ptr<ArrayHandle>& in) {
  Node root;
  root.op = EwOp::cast;
  root.dtype = in->dtype;
  root.shape = in->shape;
  root.inputs.push_back(Input{in, in->dtype, 0, 0});
  return build_expression(root);
}

}  // namespace gridspan::array
