// The array library inside a native function's task (the DAHL post's inlined library
// calls): NativeContext::array makes an array of one of the task's views; elementwise
// expressions over such arrays are nodes of the task alone (no library lock, no context
// tracking), and an assignment into one of them compiles the expression (once per backend
// and shape of expression) and runs it inline over the elements the task writes of the
// target, through runtime::run_inline's checks against what the task holds. A reduction of
// a task's arrays (gs::sum, prod, min, max) is pending too, until it is contributed into an
// array the task holds as reduce (`total += gs::sum(x * y)`): one kernel over the elements the
// task holds of what it reduces, each thread contributing its value to the task's partial,
// which the runtime combines with the other tasks' as for any reduce parameter.
#include <fmt/format.h>

#include "array/launch.hpp"
#include "backend/device.hpp"
#include "backend/jit.hpp"
#include "runtime/executable.hpp"

namespace gridspan::array {

namespace {

using annotation::Mode;
using annotation::ReduceOp;
using detail::RedOp;

// A reduction of a task's arrays, pending until it is contributed (task_assign).
class TaskReduction final : public detail::Producer {
 public:
  RedOp op = RedOp::sum;
  int axis = detail::kAllAxes;  // normalised
  bool keepdims = false;
  std::shared_ptr<ArrayHandle> value;  // what it reduces, converted to its dtype (a task's)
  void produce(ArrayHandle&) override {
    throw Error("internal error: a task's reduction was settled outside its contribution");
  }
};

const TaskReduction* reduction_of(const ArrayHandle* h) {
  return h && h->pending.load(std::memory_order_acquire)
             ? dynamic_cast<const TaskReduction*>(h->producer.get())
             : nullptr;
}

const char* reduction_name(RedOp op) {
  switch (op) {
    case RedOp::sum:
      return "gs::sum";
    case RedOp::prod:
      return "gs::prod";
    case RedOp::min:
      return "gs::min";
    case RedOp::max:
      return "gs::max";
    case RedOp::any:
      return "gs::any";
    case RedOp::all:
      return "gs::all";
    case RedOp::count_nonzero:
      return "gs::count_nonzero";
    case RedOp::mean:
      return "gs::mean";
  }
  return "a reduction";
}

// The operator a reduce parameter combines with, as a reduction and as an update
// (`t = t op v`); false where `op` is no such operator.
bool combines_as(RedOp op, ReduceOp& as) {
  switch (op) {
    case RedOp::sum:
      return as = ReduceOp::add, true;
    case RedOp::prod:
      return as = ReduceOp::mul, true;
    case RedOp::min:
      return as = ReduceOp::min, true;
    case RedOp::max:
      return as = ReduceOp::max, true;
    default:
      return false;
  }
}
bool updates_as(EwOp op, ReduceOp& as) {
  switch (op) {
    case EwOp::add:
      return as = ReduceOp::add, true;
    case EwOp::mul:
      return as = ReduceOp::mul, true;
    case EwOp::minimum:
      return as = ReduceOp::min, true;
    case EwOp::maximum:
      return as = ReduceOp::max, true;
    default:
      return false;
  }
}

// The native function this thread runs; a gs::Error naming `what` outside one.
runtime::NativeScope task_scope(const char* what) {
  runtime::NativeScope scope = runtime::native_scope();
  if (!scope.native)
    throw Error(
        fmt::format("{} works only inside a native function's task, on its views; "
                    "outside one, use the context's gs::Arrays",
                    what));
  return scope;
}

// The task's parameter whose buffer `data` is: a writable one first when `write` (-1: none).
int holder(const runtime::NativeScope& scope, const void* data, bool write) {
  const auto& params = scope.native->params();
  int found = -1;
  for (std::size_t q = 0; q < params.size(); ++q) {
    if (!params[q].is_array || !data || scope.frame->data[q] != data) continue;
    const Mode m = scope.frame->exec.arrays[q].mode;
    const bool writable = m == Mode::write || m == Mode::overwrite || m == Mode::readwrite;
    if (!write || writable) return static_cast<int>(q);
    if (found < 0) found = static_cast<int>(q);
  }
  return found;
}

// Checks that `h` belongs to the task running now.
void check_own(const runtime::NativeScope& scope, const ArrayHandle& h) {
  if (h.task == scope.serial) return;
  if (h.task == 0)
    throw Error(fmt::format(
        "native function `{}` mixes a gs::Array of the program with its task's arrays: inside a "
        "task, pass the array to the native function as a view and use NativeContext::array",
        scope.native->name()));
  throw Error(fmt::format(
      "native function `{}` uses an array made in another task (or one that has ended): a "
      "task's arrays live only as long as the task",
      scope.native->name()));
}

// Every task's array the expression under `node` reads must be as it was when the
// expression was built: inside a task nothing is computed before it is assigned, so an
// assignment since then would change what it reads.
void check_unchanged(const Node& node, const runtime::NativeScope& scope) {
  for (const Input& in : node.inputs) {
    if (!in.array) continue;
    if (const Node* n = node_of(*in.array)) {
      check_unchanged(*n, scope);
      continue;
    }
    if (in.array->storage->task_writes != in.writes)
      throw Error(fmt::format(
          "native function `{}` assigns an expression that reads a task's array written since "
          "the expression was built: inside a task an expression is computed where it is "
          "assigned, so assign it before writing what it reads",
          scope.native->name()));
  }
}

// The kernel of `p`, compiled by the task's backend once per shape of expression.
const Kernel& task_kernel(const runtime::NativeScope& scope, const Program& p) {
  backend::Backend* backend = scope.frame->dev->owner();
  if (!backend) throw Error("internal error: a task's device without its backend");
  const std::string key = "gridspan.task." + p.key();
  auto kept = backend->kept(key, [&] {
    backend::jit::Hasher hash;
    hash.add(key);
    const std::string name = "gs_t" + hash.hex().substr(0, 16);
    return std::make_shared<Kernel>(detail::compile_in_task(
        *backend, KernelDef::from_source(p.source(name), name).annotate(p.annotation())));
  });
  return *std::static_pointer_cast<Kernel>(kept);
}

// The task's parameter `target` is an array of (a writable one where there is one).
int target_param(const runtime::NativeScope& scope, const ArrayHandle& target) {
  if (target.storage->task_read_only)
    throw Error(
        fmt::format("native function `{}` assigns into an array of a view of const "
                    "elements: the task only reads it",
                    scope.native->name()));
  return holder(scope, target.storage->task_data, true);
}

// The elements of parameter `q` the task writes (its held region).
Rect written_region(const runtime::NativeScope& scope, int q) {
  const plan::ExecArg& held = scope.frame->exec.arrays[q];
  if (held.mode != Mode::write && held.mode != Mode::overwrite && held.mode != Mode::readwrite)
    throw Error(fmt::format(
        "native function `{}` assigns into its parameter `{}`, which it holds as {}: an "
        "expression is assigned only into what the task writes (write, overwrite, readwrite)",
        scope.native->name(), scope.native->params()[q].name,
        annotation::access_name(held.mode, held.op)));
  return held.region;
}

// Whether `h` is a task's reduction or an operation over one.
bool has_reduction(const ArrayHandle* h) {
  if (reduction_of(h)) return true;
  const Node* n = h ? node_of(*h) : nullptr;
  for (std::size_t i = 0; n && i < n->inputs.size(); ++i)
    if (reduction_of(n->inputs[i].array.get())) return true;
  return false;
}

// Whether `region` of `shape` starts on the grid of `block` on every axis and ends on it or
// at the shape's end.
bool on_blocks(const Rect& region, const Dim& shape, const std::array<int64_t, kMaxRank>& block) {
  for (int k = 0; k < shape.rank(); ++k)
    if (region.lo[k] % block[k] != 0 || (region.hi[k] % block[k] != 0 && region.hi[k] != shape[k]))
      return false;
  return shape.rank() > 0;
}

// Runs `p` over `region` (of its shape) inline: one element a thread, or on the cpu
// backend a thread a block-wide line of the last axis (`looped`, a loop the compiler
// vectorises, as the library's own cpu kernels). A region on the grid of its blocks runs as
// those blocks of a launch over the whole shape: the same kernel, grid and scalars in every
// task of a launch, so the tasks of a batch go as one launch (runtime/inline.cpp). Any other
// region runs with its corner as parameters (`origin`), one element a thread.
void run_over(const runtime::NativeScope& scope, Program& p, const Rect& region) {
  const int rank = p.shape.rank();
  Dim extent = Dim::of_rank(rank, 1), end = Dim::of_rank(rank, 1);
  for (int k = 0; k < rank; ++k) extent[k] = region.hi[k] - region.lo[k], end[k] = region.hi[k];
  const std::array<int64_t, kMaxRank> block = choose_block(extent, {0, 0, 0});
  p.unrolled = 0;
  p.origin = !on_blocks(region, p.shape, block);
  p.looped = rank > 0 && !p.origin && scope.frame->dev->owner()->name() == "cpu";
  const Kernel& kernel = task_kernel(scope, p);
  const Dim space = p.origin ? extent : p.shape;  // the launch's threads, array axes
  Arguments args;
  args.shape(p.origin ? end : p.shape);
  args.view(p.target.access);
  for (const Leaf& l : p.leaves) args.view(l);
  for (const Scalar& s : p.scalars) args.scalar(s);
  for (int k = 0; p.origin && k < rank; ++k) args.integer(region.lo[k]);
  std::array<int64_t, 3> counts{space.get(0), space.get(1), space.get(2)}, per_block = block;
  if (p.looped) {  // a thread a block-wide line
    std::tie(counts, per_block) = line_threads(space, block, block[rank - 1]);
    args.integer(block[rank - 1]);
  }
  const Dim threads = rank ? thread_dim(space, counts) : Dim{1};
  const Dim tblock = rank ? thread_dim(space, per_block) : Dim{1};
  const Dim grid = grid_of(threads, tblock);
  Rect blocks(grid.rank(), {0, 0, 0}, {grid.get(0), grid.get(1), grid.get(2)});
  for (int k = 0; !p.origin && k < rank; ++k) {  // array axis k is thread axis rank-1-k
    blocks.lo[rank - 1 - k] = region.lo[k] / block[k];
    blocks.hi[rank - 1 - k] = (region.hi[k] + block[k] - 1) / block[k];
  }
  runtime::InlineBlocks mine(blocks);
  kernel.launch_packed(threads, tblock, work::automatic(), args.list());
}

}  // namespace

bool in_task(std::span<const detail::EwArg> args) {
  for (const detail::EwArg& a : args)
    if (a.array && a.array->task) return true;
  return false;
}

std::shared_ptr<ArrayHandle> task_elementwise(EwOp op, DType result,
                                              std::span<detail::EwArg> args) {
  const runtime::NativeScope scope = task_scope("an operation over a task's arrays");
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].array) check_own(scope, *args[i].array);
    ReduceOp as{};
    if (has_reduction(args[i].array.get()) && (i != 1 || !updates_as(op, as)))
      throw Error(fmt::format(
          "native function `{}` uses a reduction of a task's arrays inside an expression: "
          "inside a task a reduction is contributed as it is into an array the task holds as "
          "reduce: `total += gs::sum(x)` (or *= with gs::prod, or "
          "total.assign(gs::maximum(total, gs::max(x))), gs::minimum with gs::min)",
          scope.native->name()));
  }
  std::shared_ptr<Node> node = make_node(op, result, args);
  for (Input& in : node->inputs)
    if (in.array && in.array->storage) in.writes = in.array->storage->task_writes;
  auto h = std::make_shared<ArrayHandle>();
  h->task = scope.serial;
  h->dtype = node->dtype;
  h->shape = node->shape;
  h->producer = std::move(node);
  h->pending.store(true, std::memory_order_release);
  return h;
}

namespace {

// Runs `p` over `region` inline, a failure put in the user's terms (parameter `q`: the target).
void run_for(const runtime::NativeScope& scope, Program& p, const Rect& region, int q,
             const char* what) {
  if (region.empty()) return;
  try {
    run_over(scope, p, region);
  } catch (const Error& e) {  // its generated kernel's words, put in the user's terms
    throw Error(fmt::format(
        "native function `{}` {} (into `{}`) that it cannot compute inline (`out` is that "
        "array, L0, L1, ... the arrays the expression reads, in order): {}",
        scope.native->name(), what, scope.native->params()[q].name, e.what()));
  }
}

// How a task contributes to an array it holds as reduce(op): "`total += value`".
std::string update_form(ReduceOp op, const std::string& t) {
  switch (op) {
    case ReduceOp::add:
      return fmt::format("`{} += value`", t);
    case ReduceOp::mul:
      return fmt::format("`{} *= value`", t);
    case ReduceOp::min:
      return fmt::format("`{0}.assign(gs::minimum({0}, value))`", t);
    case ReduceOp::max:
      return fmt::format("`{0}.assign(gs::maximum({0}, value))`", t);
    default:
      return "nothing the array library writes (only +, *, min and max)";
  }
}

// The value `update` (t = t op value) contributes to `target`, held as `held`; a gs::Error
// where it is no such update.
const Input& contribution(const runtime::NativeScope& scope, const ArrayHandle& target,
                          const Node* update, const plan::ExecArg& held, int q) {
  ReduceOp as{};
  if (update && update->inputs.size() == 2 && updates_as(update->op, as) && as == held.op &&
      update->inputs[0].array && update->inputs[0].array->storage == target.storage &&
      !update->inputs[0].array->is_view)
    return update->inputs[1];
  const std::string& param = scope.native->params()[q].name;
  throw Error(fmt::format(
      "native function `{}` assigns into its parameter `{}`, which it holds as {}: the task "
      "only contributes to it, as {} (a value of its shape, or a reduction such as "
      "gs::sum(x) of the task's arrays), combined with the other tasks' contributions",
      scope.native->name(), param, annotation::access_name(held.mode, held.op),
      update_form(held.op, param)));
}

// The cast of `in` to `target`'s dtype, of shape `shape`: the root of a contribution.
std::shared_ptr<Node> contribution_root(const ArrayHandle& target, Input in, const Dim& shape) {
  auto root = std::make_shared<Node>();
  root->op = EwOp::cast;
  root->dtype = target.dtype;
  root->shape = shape;
  root->inputs.push_back(std::move(in));
  return root;
}

// The program contributing the reduction `red` into `target`: threads over the reduced
// array, the target's axes following the ones the reduction keeps.
Program reduction_program(const runtime::NativeScope& scope, ArrayHandle& target,
                          const TaskReduction& red, ReduceOp held_op) {
  ReduceOp as{};
  const std::string& native = scope.native->name();
  if (!combines_as(red.op, as) || as != held_op)
    throw Error(fmt::format(
        "native function `{}` contributes {}(...) into an array it holds as reduce with "
        "another operator: a task's share combines with the other tasks' by the operator it "
        "is held with",
        native, reduction_name(red.op)));
  Input in;
  in.array = red.value;
  in.as = red.value->dtype;
  Program p = build_program(*contribution_root(target, in, red.value->shape), target, false);
  Leaf& out = p.target.access;
  for (int b = 0; b < out.rank; ++b)
    out.follows[b] = red.axis == detail::kAllAxes ? -1
                     : red.keepdims               ? (b == red.axis ? -1 : b)
                                                  : (b < red.axis ? b : b + 1);
  return p;
}

// `total op= value` inside a task holding `total` (parameter q) as reduce(op) or
// atomic(op): `value` (an expression of the target's shape, or a reduction of the task's
// arrays) computed over the elements the task holds and contributed to its partial.
void contribute(const runtime::NativeScope& scope, ArrayHandle& target, const detail::EwArg& value,
                int q) {
  const plan::ExecArg& held = scope.frame->exec.arrays[q];
  const Input& c =
      contribution(scope, target, value.array ? node_of(*value.array) : nullptr, held, q);
  const std::string& native = scope.native->name();
  Program p;
  Rect region = held.region;
  if (const TaskReduction* red = reduction_of(c.array.get())) {
    if (c.array->shape != target.shape)
      throw Error(fmt::format(
          "native function `{}` contributes a reduction of shape {} into `{}` of shape {}: "
          "reduce to the shape of what it contributes to",
          native, c.array->shape.str(), scope.native->params()[q].name, target.shape.str()));
    p = reduction_program(scope, target, *red, held.op);
    check_unchanged(*node_of(*red->value), scope);
    const Leaf* guide = guide_leaf(p, p.shape);
    if (!guide)
      throw Error(fmt::format(
          "native function `{}` reduces an expression of shape {} that reads no array of the "
          "task of that shape: the elements it reduces are those the task holds of such an "
          "array",
          native, p.shape.str()));
    region = scope.frame->exec.arrays[holder(scope, guide->storage->task_data, false)].region;
  } else {
    if (value.array->shape != target.shape)
      throw Error(fmt::format(
          "native function `{}` contributes a value of shape {} into `{}` of shape {}", native,
          value.array->shape.str(), scope.native->params()[q].name, target.shape.str()));
    std::shared_ptr<Node> root = contribution_root(target, c, target.shape);
    check_unchanged(*root, scope);
    p = build_program(*root, target, false);
  }
  if (p.target.also_read)
    throw Error(fmt::format(
        "native function `{}` contributes a value that reads `{}`, which it holds as {}: a "
        "task's partial is not read",
        native, scope.native->params()[q].name, annotation::access_name(held.mode, held.op)));
  p.contribute = annotation::access_name(held.mode, held.op);
  p.contribute_op = static_cast<int>(held.op);
  ++target.storage->task_writes;
  run_for(scope, p, region, q, "contributes an expression");
}

}  // namespace

std::shared_ptr<ArrayHandle> task_reduce(RedOp op, DType result,
                                         const std::shared_ptr<ArrayHandle>& a, int axis,
                                         bool keepdims) {
  const runtime::NativeScope scope = task_scope("a reduction of a task's array");
  check_own(scope, *a);
  const std::string& native = scope.native->name();
  ReduceOp as{};
  if (!combines_as(op, as))
    throw Error(fmt::format(
        "native function `{}` calls {} on a task's array: inside a task gs::sum, gs::prod, "
        "gs::min and gs::max reduce the elements the task holds, contributed into an array "
        "it holds as reduce (`total += gs::sum(x)`); compute the rest after the native "
        "function's launch, from its arrays",
        native, reduction_name(op)));
  if (has_reduction(a.get()))
    throw Error(fmt::format(
        "native function `{}` reduces a reduction of a task's array: reduce over every axis "
        "at once (axis omitted) instead",
        native));
  const int R = a->shape.rank();
  if (axis != detail::kAllAxes && (axis < -R || axis >= R))
    throw Error(fmt::format("axis {} is out of range for an array of shape {} (rank {})", axis,
                            a->shape.str(), R));
  auto red = std::make_shared<TaskReduction>();
  red->op = op;
  red->axis = axis == detail::kAllAxes || axis >= 0 ? axis : axis + R;
  red->keepdims = keepdims;
  std::array<detail::EwArg, 1> value{detail::EwArg{a}};
  red->value = task_elementwise(EwOp::cast, result, value);
  auto h = std::make_shared<ArrayHandle>();
  h->task = scope.serial;
  h->dtype = result;
  h->shape = red->axis == detail::kAllAxes ? (keepdims ? Dim::of_rank(R, 1) : Dim())
             : keepdims                    ? with_extent(a->shape, red->axis, 1)
                                           : without(a->shape, red->axis);
  h->producer = std::move(red);
  h->pending.store(true, std::memory_order_release);
  return h;
}

void task_assign(const std::shared_ptr<ArrayHandle>& target, const detail::EwArg& value) {
  const runtime::NativeScope scope = task_scope("an assignment into a task's array");
  check_own(scope, *target);
  if (value.array) check_own(scope, *value.array);
  if (!target->storage || target->is_view)
    throw Error(fmt::format(
        "native function `{}` assigns into {}: inside a task, assign into an array of one of "
        "the task's views (NativeContext::array) itself",
        scope.native->name(), target->storage ? "a view of a task's array" : "an expression"));
  const int q = target_param(scope, *target);
  const Mode mode = scope.frame->exec.arrays[q].mode;
  if (mode == Mode::reduce || mode == Mode::atomic) return contribute(scope, *target, value, q);
  const Rect region = written_region(scope, q);
  if (has_reduction(value.array.get()))
    throw Error(fmt::format(
        "native function `{}` assigns a reduction of a task's arrays into `{}`, which it "
        "holds as {}: inside a task a reduction is contributed into an array the task holds "
        "as reduce (`total += gs::sum(x)`), combined with the other tasks' shares",
        scope.native->name(), scope.native->params()[q].name,
        annotation::access_name(mode, scope.frame->exec.arrays[q].op)));
  std::shared_ptr<Node> node = assign_node(*target, value);
  if (node->inputs[0].array && node->inputs[0].array->storage)
    node->inputs[0].writes = node->inputs[0].array->storage->task_writes;
  check_unchanged(*node, scope);
  Program p = build_program(*node, *target, /*fresh=*/false);
  ++target->storage->task_writes;
  run_for(scope, p, region, q, "assigns an expression");
}

}  // namespace gridspan::array

namespace gridspan::detail {

std::shared_ptr<ArrayHandle> task_array(const void* data, DType dtype, bool read_only) {
  const runtime::NativeScope scope = array::task_scope("NativeContext::array");
  const int q = array::holder(scope, data, false);
  if (q < 0)
    throw Error(fmt::format(
        "NativeContext::array in native function `{}`: the view is not one of the task's (or "
        "the task holds none of its array); pass one of the views the function received",
        scope.native->name()));
  const plan::ExecArg& held = scope.frame->exec.arrays[q];
  auto meta = std::make_shared<plan::ArrayMeta>();
  meta->dtype = dtype;
  meta->elem_size = dtype_size(dtype);
  meta->shape = held.shape;
  meta->owned_partition = false;
  auto storage = std::make_shared<ArrayStorage>(nullptr, std::move(meta));
  storage->task = scope.serial;
  storage->task_data = data;
  storage->task_read_only = read_only;
  auto h = std::make_shared<ArrayHandle>();
  h->storage = std::move(storage);
  h->dtype = dtype;
  h->shape = held.shape;
  h->task = scope.serial;
  return h;
}

void require_context_array(const ArrayHandle& h, const char* what) {
  if (!h.task) return;
  const std::string* native = runtime::native_running();
  throw Error(fmt::format(
      "{} of a task's array{} (NativeContext::array): inside a task the array library computes "
      "elementwise expressions where they are assigned into one of the task's arrays "
      "(`out.assign(expr)`), and nothing else; read the values after the native function's "
      "launch, from its arrays",
      what, native ? fmt::format(" in native function `{}`", *native) : std::string()));
}

}  // namespace gridspan::detail
