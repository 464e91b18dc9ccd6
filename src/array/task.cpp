// The array library inside a native function's task (the DAHL post's inlined library
// calls): NativeContext::array makes an array of one of the task's views; elementwise
// expressions over such arrays are nodes of the task alone (no library lock, no context
// tracking), and an assignment into one of them compiles the expression (once per backend
// and shape of expression) and runs it inline over the elements the task writes of the
// target, through runtime::run_inline's checks against what the task holds.
#include <fmt/format.h>

#include "array/launch.hpp"
#include "backend/device.hpp"
#include "backend/jit.hpp"
#include "runtime/executable.hpp"

namespace gridspan::array {

namespace {

using annotation::Mode;

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

// The elements of `target` the task writes (the held region of its writable parameter).
Rect written_region(const runtime::NativeScope& scope, const ArrayHandle& target) {
  const detail::ArrayStorage& s = *target.storage;
  const std::string& native = scope.native->name();
  if (s.task_read_only)
    throw Error(
        fmt::format("native function `{}` assigns into an array of a view of const "
                    "elements: the task only reads it",
                    native));
  const int q = holder(scope, s.task_data, true);
  const plan::ExecArg& held = scope.frame->exec.arrays[q];
  if (held.mode != Mode::write && held.mode != Mode::overwrite && held.mode != Mode::readwrite)
    throw Error(fmt::format(
        "native function `{}` assigns into its parameter `{}`, which it holds as {}: an "
        "expression is assigned only into what the task writes (write, overwrite, readwrite)",
        native, scope.native->params()[q].name, annotation::access_name(held.mode, held.op)));
  return held.region;
}

// Runs `p` over `region` of its target inline: one element a thread, the threads starting
// at the region's corner.
void run_over(const runtime::NativeScope& scope, Program& p, const Rect& region) {
  const int rank = p.shape.rank();
  p.looped = false;
  p.unrolled = 0;
  p.origin = true;
  const Kernel& kernel = task_kernel(scope, p);
  Dim extent = Dim::of_rank(rank, 1), end = Dim::of_rank(rank, 1);
  for (int k = 0; k < rank; ++k) extent[k] = region.hi[k] - region.lo[k], end[k] = region.hi[k];
  const std::array<int64_t, kMaxRank> block = choose_block(extent, {0, 0, 0});
  Arguments args;
  args.shape(end);
  args.view(p.target.access);
  for (const Leaf& l : p.leaves) args.view(l);
  for (const Scalar& s : p.scalars) args.scalar(s);
  for (int k = 0; k < rank; ++k) args.integer(region.lo[k]);
  const Dim threads =
      rank ? thread_dim(extent, {extent.get(0), extent.get(1), extent.get(2)}) : Dim{1};
  const Dim tblock = rank ? thread_dim(extent, block) : Dim{1};
  const Dim grid = grid_of(threads, tblock);
  runtime::InlineBlocks whole(
      Rect(grid.rank(), {0, 0, 0}, {grid.get(0), grid.get(1), grid.get(2)}));
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
  for (const detail::EwArg& a : args)
    if (a.array) check_own(scope, *a.array);
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

void task_assign(const std::shared_ptr<ArrayHandle>& target, const detail::EwArg& value) {
  const runtime::NativeScope scope = task_scope("an assignment into a task's array");
  check_own(scope, *target);
  if (value.array) check_own(scope, *value.array);
  if (!target->storage || target->is_view)
    throw Error(fmt::format(
        "native function `{}` assigns into {}: inside a task, assign into an array of one of "
        "the task's views (NativeContext::array) itself",
        scope.native->name(), target->storage ? "a view of a task's array" : "an expression"));
  const Rect region = written_region(scope, *target);
  std::shared_ptr<Node> node = assign_node(*target, value);
  if (node->inputs[0].array && node->inputs[0].array->storage)
    node->inputs[0].writes = node->inputs[0].array->storage->task_writes;
  check_unchanged(*node, scope);
  Program p = build_program(*node, *target, /*fresh=*/false);
  ++target->storage->task_writes;
  if (region.empty()) return;
  try {
    run_over(scope, p, region);
  } catch (const Error& e) {  // its generated kernel's words, put in the user's terms
    throw Error(fmt::format(
        "native function `{}` assigns an expression (into `{}`) that it cannot compute inline "
        "(`out` is that array, L0, L1, ... the arrays the expression reads, in order): {}",
        scope.native->name(),
        scope.native->params()[holder(scope, target->storage->task_data, true)].name, e.what()));
  }
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
