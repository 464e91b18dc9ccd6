// Launches inside a native function's task (executable.hpp, InlineLaunch): the DAHL post's
// inlined calls. The kernel's annotation is bound to the arrays the task's views belong to
// and evaluated for the task's share of the launch's blocks; every access must lie in what
// the task holds, with a mode the task allows; then the kernel runs as one superblock on
// the task's own buffers, device and stream. Nothing is planned, moved or waited for. The
// native tasks of one batch on a GPU gather their inline launches and queue them together.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <optional>

#include "annotation/annotation.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/distribution/distribution.hpp"
#include "runtime/executable.hpp"

namespace gridspan::runtime {

namespace {

using annotation::Mode;

bool is_partial(Mode m) {
  return m == Mode::reduce || m == Mode::atomic;
}

// The task's parameters whose buffer is the view's (an array passed twice has two).
std::vector<int> holders(const NativeScope& scope, const void* view) {
  std::vector<int> found;
  const auto& params = scope.native->params();
  for (std::size_t q = 0; q < params.size(); ++q)
    if (params[q].is_array && view && scope.frame->data[q] == view)
      found.push_back(static_cast<int>(q));
  return found;
}

// Why the task's argument `held` cannot serve the access `acc`; empty when it can.
std::string unfit(const plan::ExecArg& held, const annotation::Access& acc) {
  if (acc.region.empty()) return {};
  if ((is_partial(held.mode) || is_partial(acc.mode)) &&
      (held.mode != acc.mode || held.op != acc.op))
    return fmt::format("the task holds it as {}, and a partial serves only the same access",
                       annotation::access_name(held.mode, held.op));
  if (acc.mode != Mode::read && held.mode == Mode::read) return "the task only reads it";
  if (!held.region.contains(acc.region)) return fmt::format("the task holds {}", held.region.str());
  return {};
}

// The task's argument (one of `candidates`) that serves `acc`; throws when none does.
int holder_for(const NativeScope& scope, const std::vector<int>& candidates,
               const annotation::Access& acc, const InlineLaunch& launch) {
  std::string why;
  for (int q : candidates) {
    std::string reason = unfit(scope.frame->exec.arrays[q], acc);
    if (reason.empty()) return q;
    if (why.empty()) why = std::move(reason);
  }
  const ParamInfo& p = (*launch.params)[acc.param];
  const std::string& native = scope.native->name();
  throw Error(fmt::format(
      "kernel `{}` launched inside native function `{}` would {} `{}` over {}, but {}: a "
      "launch inside a task works only on what the task holds; widen `{}`'s annotation of `{}`, "
      "or launch over the task's own threads",
      launch.executable->name(), native, annotation::access_name(acc.mode, acc.op), p.name,
      acc.region.str(), why, native, scope.native->params()[candidates.front()].name));
}

// The blocks of the inline launch whose first threads lie in the task's own threads (its
// superblock's blocks times its block size): every block of the inline grid falls to
// exactly one task. Blocks past the native launch's threads go to its last task along that
// axis; axes the native launch lacks are whole; an axis of the native launch that the
// inline launch lacks is done by its first task along it only (else each would repeat it).
Rect task_share(const plan::Execute& task, const Dim& grid, const Dim& block) {
  Rect share;
  share.rank = grid.rank();
  for (int a = grid.rank(); a < task.blocks.rank; ++a)
    if (task.blocks.lo[a] > 0) return Rect(grid.rank(), {0, 0, 0}, {0, 0, 0});
  for (int a = 0; a < grid.rank(); ++a) {
    share.lo[a] = 0;
    share.hi[a] = grid[a];
    if (a >= task.blocks.rank) continue;
    const int64_t first = task.blocks.lo[a] * task.block[a];
    const int64_t end = task.blocks.hi[a] * task.block[a];
    share.lo[a] = std::min(grid[a], (first + block[a] - 1) / block[a]);
    if (task.blocks.hi[a] < task.grid[a])
      share.hi[a] = std::min(grid[a], (end + block[a] - 1) / block[a]);
  }
  return share;
}

thread_local const Rect* t_blocks = nullptr;  // InlineBlocks'
std::atomic<uint64_t> g_together{0};          // inline_launches_together()

// The inline launches of a batch of native tasks (independent, on one asynchronous
// device): while the bodies run one after another, each task's launches are gathered in
// order; then they are queued round by round, the r-th launch of every task together, those
// of one kernel, block, grid and scalars as one run_batch (on a GPU one kernel launch of
// the parts entry): K steps in each of 4 tasks cost K launches instead of 4K. A task that
// takes its stream, or launches a native function inline, has what it gathered queued at
// once and the rest of its launches run as they come, so its stream keeps the body's order.
class InlineBatch {
 public:
  InlineBatch(const NativeExecutable& native, std::size_t tasks);
  ~InlineBatch() { t_batch = outer_; }
  InlineBatch(const InlineBatch&) = delete;
  InlineBatch& operator=(const InlineBatch&) = delete;

  static InlineBatch* current() { return t_batch; }
  void begin(std::size_t task) { task_ = task; }
  /// Whether a launch of `exe` by the current task is gathered; when not, what the task
  /// gathered is queued first.
  bool gathers(const plan::Executable* exe);
  void gather(plan::Execute ex, std::vector<void*> data, const plan::ExecFrame& task);
  /// Queues what the current task gathered, one launch after another; the task's later
  /// launches run at once.
  void release();
  /// Queues every task's gathered launches, round by round.
  void run();

 private:
  struct Launch {
    plan::Execute ex;
    std::vector<void*> data;
    const plan::ExecFrame* task;
    plan::ExecFrame frame() const { return {ex, data.data(), task->device, task->dev}; }
  };
  void run_group(std::vector<const Launch*>& round);

  static thread_local InlineBatch* t_batch;
  InlineBatch* outer_;
  const NativeExecutable& native_;
  std::vector<std::vector<Launch>> gathered_;  // per task, in its order
  std::vector<bool> direct_;                   // per task: runs its launches at once
  std::size_t task_ = 0;
};
thread_local InlineBatch* InlineBatch::t_batch = nullptr;

InlineBatch::InlineBatch(const NativeExecutable& native, std::size_t tasks)
    : outer_(t_batch), native_(native), gathered_(tasks), direct_(tasks, false) {
  t_batch = this;
}

bool InlineBatch::gathers(const plan::Executable* exe) {
  if (!direct_[task_] && !dynamic_cast<const NativeExecutable*>(exe)) return true;
  release();
  return false;
}

void InlineBatch::gather(plan::Execute ex, std::vector<void*> data, const plan::ExecFrame& task) {
  gathered_[task_].push_back(Launch{std::move(ex), std::move(data), &task});
}

void InlineBatch::release() {
  direct_[task_] = true;
  for (const Launch& l : gathered_[task_]) {
    const plan::ExecFrame frame = l.frame();
    l.ex.executable->run(frame);
  }
  gathered_[task_].clear();
}

void InlineBatch::run() {
  t_batch = outer_;  // what runs now is not gathered
  std::vector<const Launch*> round;
  for (std::size_t r = 0;; ++r) {
    round.clear();
    for (const auto& launches : gathered_)
      if (r < launches.size()) round.push_back(&launches[r]);
    if (round.empty()) return;
    while (!round.empty()) run_group(round);
  }
}

// Runs the launches of `round` like its first as one batch, and takes them out of it.
void InlineBatch::run_group(std::vector<const Launch*>& round) {
  const plan::Execute& first = round.front()->ex;
  const plan::ExecFrame& task = *round.front()->task;
  std::vector<plan::ExecFrame> frames;
  std::size_t kept = 0;
  for (const Launch* l : round) {
    if (l->ex.same_launch(first))
      frames.push_back(l->frame());
    else
      round[kept++] = l;
  }
  round.resize(kept);
  if (frames.size() > 1) g_together.fetch_add(frames.size(), std::memory_order_relaxed);
  try {
    first.executable->run_batch(frames.data(), frames.size());
  } catch (...) {
    native_.rethrow_failed(task);
  }
}

}  // namespace

void NativeExecutable::run_batch(const plan::ExecFrame* frames, std::size_t n) const {
  if (n == 1 || !frames[0].dev->asynchronous()) return Executable::run_batch(frames, n);
  InlineBatch batch(*this, n);
  for (std::size_t k = 0; k < n; ++k) {
    batch.begin(k);
    run(frames[k]);
  }
  batch.run();
}

uint64_t inline_launches_together() {
  return g_together.load(std::memory_order_relaxed);
}

void inline_stream_taken() {
  if (InlineBatch* batch = InlineBatch::current()) batch->release();
}

InlineBlocks::InlineBlocks(const Rect& blocks) : outer_(t_blocks), blocks_(blocks) {
  t_blocks = &blocks_;
}
InlineBlocks::~InlineBlocks() {
  t_blocks = outer_;
}

namespace {

// A cached binding of an annotation to a launch's geometry, scalars and shapes.
struct BoundEntry {
  annotation::Annotation rules;  // a copy: it keeps the rules, so their identity stays theirs
  Dim threads, block;
  std::vector<int64_t> scalars;
  std::vector<Dim> shapes;
  annotation::BoundAnnotation bound;
};

// `launch`'s annotation bound to it, the last 8 bindings of this thread kept: an expression
// repeated inside a task (a step of an inline loop) binds once.
annotation::BoundAnnotation bound_for(const InlineLaunch& launch, const std::vector<Dim>& shapes) {
  thread_local std::array<std::optional<BoundEntry>, 8> kept;
  thread_local std::size_t next = 0;
  for (const std::optional<BoundEntry>& e : kept)
    if (e && e->rules.identity() == launch.annotation->identity() && e->threads == launch.threads &&
        e->block == launch.block && e->scalars == launch.int_scalars && e->shapes == shapes)
      return e->bound;
  std::optional<BoundEntry>& slot = kept[next++ % kept.size()];
  slot = BoundEntry{
      *launch.annotation,
      launch.threads,
      launch.block,
      launch.int_scalars,
      shapes,
      launch.annotation->bind({launch.threads, launch.block}, launch.int_scalars, shapes)};
  return slot->bound;
}

}  // namespace

void run_inline(const InlineLaunch& launch) {
  const NativeScope scope = native_scope();
  if (!scope.native)
    throw LaunchError(
        fmt::format("kernel `{}`: views are launched over only inside a native "
                    "function's task; outside one, pass gs::Arrays",
                    launch.executable->name()));
  const auto& params = *launch.params;
  const plan::ExecFrame& task = *scope.frame;
  const Dim grid = grid_of(launch.threads, launch.block);
  const Rect blocks = t_blocks ? *t_blocks : task_share(task.exec, grid, launch.block);
  if (blocks.empty()) return;  // nothing of it is this task's
  std::vector<std::vector<int>> held(params.size());
  std::vector<Dim> shapes(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].is_array) continue;
    held[p] = holders(scope, launch.views[p]);
    if (held[p].empty())
      throw Error(fmt::format(
          "kernel `{}` launched inside native function `{}`: argument `{}` is not one of the "
          "views the task received (or the task holds none of it); pass the task's views",
          launch.executable->name(), scope.native->name(), params[p].name));
    shapes[p] = task.exec.arrays[held[p].front()].shape;
  }
  const annotation::BoundAnnotation bound = bound_for(launch, shapes);
  plan::Execute ex;
  ex.executable = launch.executable;
  ex.blocks = blocks;
  ex.block = launch.block;
  ex.grid = grid;
  ex.arrays.resize(params.size());
  ex.scalars = launch.scalars;
  ex.scalar_offsets = launch.scalar_offsets;
  std::vector<void*> data(params.size(), nullptr);
  for (const annotation::Access& acc : bound.regions(blocks)) {
    const int q = holder_for(scope, held[acc.param], acc, launch);
    const plan::ExecArg& h = task.exec.arrays[q];
    ex.arrays[acc.param] =
        plan::ExecArg{h.chunk, acc.region, h.shape, acc.mode, acc.op, acc.mode != Mode::read};
    if (!acc.region.empty()) data[acc.param] = task.data[q];
  }
  InlineBatch* batch = InlineBatch::current();
  if (batch && batch->gathers(launch.executable))
    return batch->gather(std::move(ex), std::move(data), task);
  const plan::ExecFrame frame{ex, data.data(), task.device, task.dev};
  launch.executable->run(frame);
}

}  // namespace gridspan::runtime
