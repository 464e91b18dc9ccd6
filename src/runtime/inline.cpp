// Launches inside a native function's task (executable.hpp, InlineLaunch): the DAHL post's
// inlined calls. The kernel's annotation is bound to the arrays the task's views belong to
// and evaluated for the task's share of the launch's blocks; every access must lie in what
// the task holds, with a mode the task allows; then the kernel runs as one superblock on
// the task's own buffers, device and stream. Nothing is planned, moved or waited for.
#include <fmt/format.h>

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

}  // namespace

InlineBlocks::InlineBlocks(const Rect& blocks) : outer_(t_blocks), blocks_(blocks) {
  t_blocks = &blocks_;
}
InlineBlocks::~InlineBlocks() {
  t_blocks = outer_;
}

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
  const annotation::BoundAnnotation bound =
      launch.annotation->bind({launch.threads, launch.block}, launch.int_scalars, shapes);
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
  const plan::ExecFrame frame{ex, data.data(), task.device, task.dev};
  launch.executable->run(frame);
}

}  // namespace gridspan::runtime
