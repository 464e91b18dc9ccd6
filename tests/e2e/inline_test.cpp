// Launches inside a native function's task (the DAHL post's inlined calls): a native
// function passes its views to Kernel::launch, and the kernel runs at once on the task's
// device and buffers, over the task's share of its grid. The same launch from the program
// covers the whole arrays, so one function serves both. Every backend: the native bodies
// here only launch, they never touch memory themselves.
#include <cmath>

#include "e2e/support.hpp"
#include "runtime/executable.hpp"
#include "support/errors.hpp"

namespace gridspan::test {
namespace {

const char* kAxpb = R"(
__device__ void axpb(dim3 blockIdx, int n, float a, gridspan::Vector<float> out,
                     const gridspan::Vector<float> x, const gridspan::Vector<float> y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
__device__ void neighbours(dim3 blockIdx, int n, gridspan::Vector<float> out,
                           const gridspan::Vector<float> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i > 0 ? i - 1 : i] + x[i + 1 < n ? i + 1 : i];
}
__device__ void isum(dim3 blockIdx, int n, const gridspan::Vector<int> x,
                     gridspan::Scalar<int> total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) total.reduce(x[i]);
}
)";

// Values on a 1/64 grid, small: a * x + y is exact in float with or without a fused
// multiply-add.
std::vector<float> dyadic(std::size_t n, std::mt19937_64& g) {
  auto v = random_vector<float>(n, g);
  for (auto& x : v) x = std::round(x * 64.0f) / 64.0f;
  return v;
}

struct Kernels {
  gs::Kernel axpb, neighbours, isum;
  explicit Kernels(gs::Context& ctx)
      : axpb(ctx.compile(gs::KernelDef::from_source(kAxpb, "axpb")
                             .annotate("global i => write out[i], read x[i], read y[i]"))),
        neighbours(ctx.compile(gs::KernelDef::from_source(kAxpb, "neighbours")
                                   .annotate("global i => write out[i], read x[i-1:i+1]"))),
        isum(ctx.compile(gs::KernelDef::from_source(kAxpb, "isum")
                             .annotate("global i => read x[i], reduce(+) total"))) {}
};

bool skip_under_mpirun(gs::Context& ctx) {
  // Under mpirun the other ranks run natives without the kernels this program compiled.
  return ctx.ranks().size() > 1;
}

// t = a x + y, then out = 2 t + x: a chain of two dependent kernels in one task per
// superblock, the second reading what the first wrote; the inner launches' blocks may be
// smaller or larger than the native's, as long as they tile its superblocks.
TEST(Inline, AChainOfKernelsRunsInsideEachTask) {
  auto g = rng(71);
  for (int devices : {1, 2}) {
    gs::Context ctx(config(devices));
    if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
    Kernels k(ctx);
    for (int inner_block : {16, 64, 128}) {
      const int n = 1000 + static_cast<int>(g() % 900);
      const float a = 0.5f;
      auto def = gs::NativeDef::from_function(
          "two_steps",
          [&](const gs::NativeContext&, int n, gs::Vector<float> t, gs::Vector<float> out,
              gs::Vector<const float> x, gs::Vector<const float> y) {
            k.axpb.launch({n}, {inner_block}, gs::work::automatic(), n, a, t, x, y);
            k.axpb.launch({n}, {inner_block}, gs::work::automatic(), n, 2.0f, out, t, x);
          },
          {"n", "t", "out", "x", "y"});
      auto chain =
          ctx.compile(def.annotate("global i => write t[i], write out[i], read x[i], "
                                   "read y[i]"));
      auto xs = dyadic(n, g), ys = dyadic(n, g);
      auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(300));
      auto y = ctx.from_vector<float>(ys, {n}, gs::dist::rows(200));
      auto t = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
      auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
      chain.launch({n}, {64}, gs::work::tiles({256}), n, t, out, x, y);
      auto rt = t.to_vector(), ro = out.to_vector();
      for (int i = 0; i < n; ++i) {
        const float ti = a * xs[i] + ys[i];
        ASSERT_EQ(rt[i], ti) << i << ", inner block " << inner_block << ", seed " << base_seed();
        ASSERT_EQ(ro[i], 2.0f * ti + xs[i]) << i << ", inner block " << inner_block;
      }
    }
  }
}

// The native tasks of one device that run as one batch (small superblocks on an
// asynchronous device: a GPU, or cpu devices behaving as GPUs) gather their inline launches
// and queue the r-th launch of every task together. Each task's chain of dependent steps
// keeps its order; a nested native launch, which runs at once, first queues what its task
// gathered, so it reads the step before it, and the task's later steps follow it.
TEST(Inline, TheInlineLaunchesOfABatchOfTasksRunTogetherInOrder) {
  auto g = rng(74);
  gs::Config c = config(1);
  c.cpu_async = true;  // the cpu backend's devices batch as GPUs do
  gs::Context ctx(c);
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  Kernels k(ctx);
  auto twice =
      ctx.compile(gs::NativeDef::from_function(
                      "twice_plus",
                      [&](const gs::NativeContext&, int n, gs::Vector<float> out,
                          gs::Vector<const float> t, gs::Vector<const float> x) {
                        k.axpb.launch({n}, {32}, gs::work::automatic(), n, 2.0f, out, t, x);
                      },
                      {"n", "out", "t", "x"})
                      .annotate("global i => write out[i], read t[i], read x[i]"));
  constexpr int kSteps = 5;
  auto steps = ctx.compile(
      gs::NativeDef::from_function(
          "batched_steps",
          [&](const gs::NativeContext&, int n, int nest, float a, gs::Vector<float> t,
              gs::Vector<float> out, gs::Vector<const float> x, gs::Vector<const float> y) {
            k.axpb.launch({n}, {32}, gs::work::automatic(), n, a, t, x, y);  // t = a x + y
            for (int s = 1; s < kSteps; ++s)
              k.axpb.launch({n}, {32}, gs::work::automatic(), n, 1.0f, t, t, x);  // t += x
            if (nest)
              twice.launch({n}, {32}, gs::work::automatic(), n, out, t, x);
            else
              k.axpb.launch({n}, {32}, gs::work::automatic(), n, 2.0f, out, t, x);
            k.axpb.launch({n}, {32}, gs::work::automatic(), n, 1.0f, t, t, x);
          },
          {"n", "nest", "a", "t", "out", "x", "y"})
          .annotate("global i => write t[i], write out[i], read x[i], read y[i]"));
  for (int nest : {0, 1}) {
    const int n = 1000 + static_cast<int>(g() % 900);
    const float a = 0.75f;
    auto xs = dyadic(n, g), ys = dyadic(n, g);
    auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(256));
    auto y = ctx.from_vector<float>(ys, {n}, gs::dist::rows(256));
    auto t = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
    auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
    const uint64_t before = runtime::inline_launches_together();
    steps.launch({n}, {32}, gs::work::tiles({256}), n, nest, a, t, out, x, y);
    auto rt = t.to_vector(), ro = out.to_vector();
    for (int i = 0; i < n; ++i) {
      const float last = a * xs[i] + ys[i] + (kSteps - 1) * xs[i];
      ASSERT_EQ(ro[i], 2.0f * last + xs[i]) << i << ", nest " << nest << ", seed " << base_seed();
      ASSERT_EQ(rt[i], last + xs[i]) << i << ", nest " << nest << ", seed " << base_seed();
    }
    // Without the nested launch every step of the 4 to 8 tasks went with the others'.
    if (!nest) EXPECT_GE(runtime::inline_launches_together() - before, 2u * (kSteps + 1));
  }
  // The array library's steps over chunks on the grid of their blocks go together too.
  auto array_steps =
      ctx.compile(gs::NativeDef::from_function("batched_array_steps",
                                               [](const gs::NativeContext& c, gs::Vector<float> t,
                                                  gs::Vector<const float> x) {
                                                 auto ta = c.array(t), xa = c.array(x);
                                                 ta.assign(xa * 0.5f);
                                                 for (int s = 1; s < kSteps; ++s) ta += xa;
                                               },
                                               {"t", "x"})
                      .annotate("global i => write t[i], read x[i]"));
  const int n = 1000 + static_cast<int>(g() % 900);
  auto xs = dyadic(n, g);
  auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(256));
  auto t = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
  const uint64_t before = runtime::inline_launches_together();
  array_steps.launch({n}, {32}, gs::work::tiles({256}), t, x);
  auto rt = t.to_vector();
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(rt[i], 0.5f * xs[i] + (kSteps - 1) * xs[i]) << i << ", seed " << base_seed();
  EXPECT_GE(runtime::inline_launches_together() - before, 2u * kSteps);
}

// One function, two contexts: launched from the program it covers whole arrays in tasks;
// called inside a native task (here, of another native) it does that task's share inline.
TEST(Inline, ANativeFunctionLaunchesAnotherInline) {
  auto g = rng(72);
  gs::Context ctx(config(2));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  Kernels k(ctx);
  auto scale = ctx.compile(gs::NativeDef::from_function(
                               "scale",
                               [&](const gs::NativeContext&, int n, float s, gs::Vector<float> out,
                                   gs::Vector<const float> x) {
                                 k.axpb.launch({n}, {32}, gs::work::automatic(), n, s, out, x, x);
                               },
                               {"n", "s", "out", "x"})
                               .annotate("global i => write out[i], read x[i]"));
  auto outer = ctx.compile(
      gs::NativeDef::from_function(
          "outer",
          [&](const gs::NativeContext&, int n, gs::Vector<float> out, gs::Vector<const float> x) {
            scale.launch({n}, {32}, gs::work::automatic(), n, 1.5f, out, x);
          },
          {"n", "out", "x"})
          .annotate("global i => write out[i], read x[i]"));
  const int n = 777 + static_cast<int>(g() % 500);
  auto xs = dyadic(n, g);
  auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(128));
  auto direct = ctx.full<float>({n}, poison<float>(), gs::dist::rows(128));
  auto nested = ctx.full<float>({n}, poison<float>(), gs::dist::rows(100));
  scale.launch({n}, {32}, gs::work::tiles({128}), n, 1.5f, direct, x);  // tasks
  outer.launch({n}, {32}, gs::work::tiles({160}), n, nested, x);        // inline inside
  auto rd = direct.to_vector(), rn = nested.to_vector();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(rd[i], 2.5f * xs[i]) << i << ", seed " << base_seed();
    ASSERT_EQ(rn[i], 2.5f * xs[i]) << i << ", seed " << base_seed();
  }
}

// A reduce parameter's partial is the task's: an inline kernel that reduces with the same
// operator adds into it, and the runtime combines the tasks' partials as for any launch.
TEST(Inline, AnInlineReductionAddsIntoTheTasksPartial) {
  auto g = rng(73);
  gs::Context ctx(config(2));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  Kernels k(ctx);
  auto total_of = ctx.compile(
      gs::NativeDef::from_function(
          "total_of",
          [&](const gs::NativeContext&, int n, gs::Vector<const int> x, gs::Scalar<int> total) {
            k.isum.launch({n}, {64}, gs::work::automatic(), n, x, total);
          },
          {"n", "x", "total"})
          .annotate("global i => read x[i], reduce(+) total"));
  const int n = 3000 + static_cast<int>(g() % 1000);
  auto xs = random_vector<int>(n, g);
  auto x = ctx.from_vector<int>(xs, {n}, gs::dist::rows(512));
  auto total = ctx.scalar<int>(poison<int>());
  total_of.launch({n}, {64}, gs::work::tiles({640}), n, x, total);
  long long expect = 0;
  for (int v : xs) expect += v;
  EXPECT_EQ(total.item(), expect) << "seed " << base_seed();
}

// Every block of an inline launch falls to exactly one task: a native function cut along an
// axis its inline launch lacks (rows of a 2-D launch, a 1-D sum inside) sums once, in its
// first task along that axis, not once a task; blocks past the native launch's threads fall
// to its last task (here not held: an error, not work silently skipped).
TEST(Inline, EachBlockOfAnInlineLaunchRunsOnce) {
  auto g = rng(74);
  gs::Context ctx(config(2));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  Kernels k(ctx);
  const int n = 700 + static_cast<int>(g() % 300), rows = 64;
  auto sum_rows = ctx.compile(
      gs::NativeDef::from_function(
          "sum_rows",
          [&](const gs::NativeContext&, int n, gs::Vector<const int> x, gs::Scalar<int> total) {
            k.isum.launch({n}, {64}, gs::work::automatic(), n, x, total);
          },
          {"n", "x", "total"})
          .annotate("global [i, j] => read x[i], reduce(+) total"));
  auto xs = random_vector<int>(n, g);
  auto x = ctx.from_vector<int>(xs, {n}, gs::dist::rows(n));
  auto total = ctx.scalar<int>(poison<int>());
  const int cover = (n + 63) / 64 * 64;  // the whole of axis 0 in whole blocks
  sum_rows.launch({n, rows}, {64, 1}, gs::work::tiles({cover, rows / 4}), n, x, total);  // 4 tasks
  long long expect = 0;
  for (int v : xs) expect += v;
  EXPECT_EQ(total.item(), expect) << "seed " << base_seed();

  auto scale = ctx.compile(
      gs::NativeDef::from_function(
          "scale_more",
          [&](const gs::NativeContext&, int n, gs::Vector<float> out, gs::Vector<const float> x) {
            k.axpb.launch({n + 100}, {64}, gs::work::automatic(), n + 100, 2.0f, out, x, x);
          },
          {"n", "out", "x"})
          .annotate("global i => write out[i], read x[i]"));
  auto xf = ctx.full<float>({n + 100}, 1.0f, gs::dist::rows(n + 100));
  auto out = ctx.full<float>({n + 100}, poison<float>(), gs::dist::rows(n + 100));
  scale.launch({n}, {64}, gs::work::tiles({256}), n, out, xf);
  expect_error<gs::Error>([&] { out.to_vector(); },
                          {"kernel `axpb` launched inside native function `scale_more`",
                           "would write `out` over", "the task holds"});
}

// What an inline launch cannot do is an error naming the kernel, the native function and
// what to change; the context goes on.
TEST(Inline, WhatATaskDoesNotHoldIsAClearError) {
  gs::Context ctx(config(1));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  Kernels k(ctx);
  const int n = 1024;
  using Body = std::function<void(int, gs::Vector<float>, gs::Vector<const float>)>;
  const std::vector<std::pair<Body, std::vector<std::string>>> cases = {
      {[&](int n, gs::Vector<float> out, gs::Vector<const float> x) {  // a stencil needs a halo
         k.neighbours.launch({n}, {64}, gs::work::automatic(), n, out, x);
       },
       {"kernel `neighbours` launched inside native function `body`", "read `x` over",
        "the task holds [", "widen `body`'s annotation of `x`"}},
      {[&](int n, gs::Vector<float> out, gs::Vector<const float> x) {  // blocks across tasks
         k.axpb.launch({n}, {96}, gs::work::automatic(), n, 1.0f, out, x, x);
       },
       {"kernel `axpb`", "would write `out` over", "the task holds"}},
      {[&](int n, gs::Vector<float>, gs::Vector<const float> x) {  // a const view written
         k.axpb.launch({n}, {64}, gs::work::automatic(), n, 1.0f, x, x, x);
       },
       {"parameter `out`", "a view of const elements, and the kernel writes it"}},
      {[&](int n, gs::Vector<float> out, gs::Vector<const float>) {  // not the task's view
         k.axpb.launch({n}, {64}, gs::work::automatic(), n, 1.0f, out, gs::Vector<const float>{},
                       out);
       },
       {"argument `x` is not one of the views the task received"}},
      {[&](int n, gs::Vector<float> out, gs::Vector<const float>) {  // a scalar for a view
         k.axpb.launch({n}, {64}, gs::work::automatic(), n, 1.0f, out, 2.0f, out);
       },
       {"parameter `x`", "must be one of the task's views, got a float32 scalar"}},
  };
  auto x = ctx.full<float>({n}, 0.75f, gs::dist::rows(256));
  for (const auto& [body, phrases] : cases) {
    auto native = ctx.compile(
        gs::NativeDef::from_function("body",
                                     [&body](const gs::NativeContext&, int n, gs::Vector<float> out,
                                             gs::Vector<const float> x) { body(n, out, x); },
                                     {"n", "out", "x"})
            .annotate("global i => write out[i], read x[i]"));
    auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
    native.launch({n}, {64}, gs::work::tiles({256}), n, out, x);
    expect_error<gs::Error>([&] { out.to_vector(); }, phrases);
  }
  auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
  k.axpb.launch({n}, {64}, gs::work::tiles({256}), n, 2.0f, out, x, x);  // the context goes on
  EXPECT_EQ(out.to_vector(), std::vector<float>(n, 2.25f));
}

const char* kShifted = R"(
__device__ void shifted(dim3 blockIdx, int n, int s, gridspan::Vector<float> out,
                        const gridspan::Vector<float> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && i + s < n) out[i + s] = x[i];
}
)";

// The annotation of an inline launch repeated in a task is bound once for its geometry,
// scalars and shapes (a step of a loop): a launch with another shift is bound anew, so
// what it writes outside the task's rows is still an error, not a write past its chunk.
TEST(Inline, ARepeatedLaunchIsCheckedForItsOwnScalars) {
  gs::Context ctx(config(1));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack this program's kernels";
  auto shifted = ctx.compile(gs::KernelDef::from_source(kShifted, "shifted")
                                 .annotate("global i => write out[i + s], read x[i]"));
  auto native = ctx.compile(
      gs::NativeDef::from_function(
          "shifts",
          [&shifted](const gs::NativeContext&, int n, int s, gs::Vector<float> out,
                     gs::Vector<const float> x) {
            for (int step = 0; step < 3; ++step)  // the same launch thrice, then shifted
              shifted.launch({n}, {64}, gs::work::automatic(), n, step < 2 ? 0 : s, out, x);
          },
          {"n", "s", "out", "x"})
          .annotate("global i => write out[i], read x[i]"));
  auto g = rng(78);
  const int n = 1024;
  const auto xs = dyadic(n, g);
  auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(256));
  auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
  native.launch({n}, {64}, gs::work::tiles({256}), n, 0, out, x);
  EXPECT_EQ(out.to_vector(), xs) << "seed " << base_seed();
  auto moved = ctx.full<float>({n}, poison<float>(), gs::dist::rows(256));
  native.launch({n}, {64}, gs::work::tiles({256}), n, 64, moved, x);
  expect_error<gs::Error>([&] { moved.to_vector(); },
                          {"kernel `shifted`", "would write `out` over", "the task holds"});
}

// Outside a task there are no views to launch over; inside one, whole arrays cannot be
// launched over (they are the Errors test's): both say which to pass.
TEST(Inline, AViewOutsideATaskIsALaunchError) {
  gs::Context ctx(config(1));
  Kernels k(ctx);
  auto x = ctx.full<float>({64}, 1.0f, gs::dist::rows(64));
  expect_error<gs::LaunchError>(
      [&] {
        k.axpb.launch({64}, {64}, gs::work::tiles({64}), 64, 1.0f, x, gs::Vector<const float>{}, x);
      },
      {"kernel `axpb`", "only inside a native function's task", "pass gs::Arrays"});
}

// Kernels from their definitions inside the task: each process compiles one once, so the
// same native function runs on every rank under mpirun. The chain t = a x + y, out = 2 t + x.
gs::KernelDef axpb_def() {
  return gs::KernelDef::from_source(kAxpb, "axpb")
      .annotate("global i => write out[i], read x[i], read y[i]");
}
gs::NativeDef two_steps_by_def() {
  auto def = gs::NativeDef::from_function(
      "two_steps_by_def",
      [](const gs::NativeContext& c, int n, float a, gs::Vector<float> t, gs::Vector<float> out,
         gs::Vector<const float> x, gs::Vector<const float> y) {
        static const gs::KernelDef axpb = axpb_def();
        gs::Kernel k = c.kernel(axpb);
        k.launch({n}, {32}, gs::work::automatic(), n, a, t, x, y);
        k.launch({n}, {32}, gs::work::automatic(), n, 2.0f, out, t, x);
      },
      {"n", "a", "t", "out", "x", "y"});
  def.annotate("global i => write t[i], write out[i], read x[i], read y[i]");
  return def;
}
const bool two_steps_registered = gs::register_native(two_steps_by_def());

TEST(Inline, KernelsFromTheirDefinitionsRunInsideTasksOnEveryRank) {
  ASSERT_TRUE(two_steps_registered);
  auto g = rng(79);
  for (int devices : {1, 2}) {
    gs::Context ctx(config(devices));
    auto chain = ctx.compile(two_steps_by_def());
    for (int per_task : {96, 320}) {
      const int n = 1000 + static_cast<int>(g() % 900);
      const float a = 0.25f;
      auto xs = dyadic(n, g), ys = dyadic(n, g);
      auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(per_task));
      auto y = ctx.from_vector<float>(ys, {n}, gs::dist::rows(per_task));
      auto t = ctx.full<float>({n}, poison<float>(), gs::dist::rows(per_task));
      auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(per_task));
      chain.launch({n}, {32}, gs::work::like(out), n, a, t, out, x, y);
      auto rt = t.to_vector(), ro = out.to_vector();
      for (int i = 0; i < n; ++i) {
        const float ti = a * xs[i] + ys[i];
        ASSERT_EQ(rt[i], ti) << i << ", " << devices << " devices, seed " << base_seed();
        ASSERT_EQ(ro[i], 2.0f * ti + xs[i]) << i << ", " << devices << " devices";
      }
    }
  }
}

// Outside a task there is no device to compile for; a definition the compiler rejects fails
// the task with the compiler's error, and the context goes on.
gs::NativeDef bad_rules() {
  auto def = gs::NativeDef::from_function(
      "bad_rules",
      [](const gs::NativeContext& c, int n, gs::Vector<float> out) {
        auto k = c.kernel(
            gs::KernelDef::from_source(kAxpb, "axpb").annotate("global i => write nothing[i]"));
        k.launch({n}, {32}, gs::work::automatic(), n, 1.0f, out, out, out);
      },
      {"n", "out"});
  def.annotate("global i => write out[i]");
  return def;
}
const bool bad_rules_registered = gs::register_native(bad_rules());

TEST(Inline, AKernelFromItsDefinitionOutsideATaskOrBadIsAClearError) {
  expect_error<gs::Error>([] { gs::NativeContext{}.kernel(axpb_def()); },
                          {"NativeContext::kernel(`axpb`)", "only inside a native function's task",
                           "Context::compile"});
  ASSERT_TRUE(bad_rules_registered);
  gs::Context ctx(config(2));
  auto bad = ctx.compile(bad_rules());
  auto out = ctx.full<float>({256}, poison<float>(), gs::dist::rows(64));
  bad.launch({256}, {32}, gs::work::like(out), 256, out);
  expect_error<gs::Error>([&] { out.to_vector(); }, {"bad_rules", "nothing"});
  auto fine = ctx.full<float>({256}, 1.5f, gs::dist::rows(64));
  EXPECT_EQ(fine.to_vector(), std::vector<float>(256, 1.5f));
}

}  // namespace
// ---- the array library inside a task ------------------------------------------------------

// out = x / 2 + w (w one row, broadcast along the rows), then out += x * w, in-place on the
// task's rows: elementwise expressions over the task's arrays, computed inline where they are
// assigned. Registered in every process, so under mpirun the other ranks run it too (each
// compiles the expressions itself).
gs::NativeDef blend_rows() {
  auto def = gs::NativeDef::from_function("blend_rows",
                                          [](const gs::NativeContext& c, gs::Matrix<float> out,
                                             gs::Matrix<const float> x, gs::Vector<const float> w) {
                                            auto o = c.array(out);
                                            auto xa = c.array(x), wa = c.array(w);
                                            o.assign(xa * 0.5f + wa);
                                            o += xa * wa;
                                          },
                                          {"out", "x", "w"});
  def.annotate("global [i, j] => readwrite out[i, j], read x[i, j], read w[j]");
  return def;
}
const bool blend_rows_registered = gs::register_native(blend_rows());

// A chain of three assignments of one task, each reading what the one before wrote, with a
// comparison, a select and a math function: y = |x|, t = sqrt(y) + 1, y = where(x < 0, -t, t).
gs::NativeDef signed_root() {
  auto def = gs::NativeDef::from_function("signed_root",
                                          [](const gs::NativeContext& c, gs::Vector<float> y,
                                             gs::Vector<float> t, gs::Vector<const float> x) {
                                            auto ya = c.array(y), ta = c.array(t), xa = c.array(x);
                                            ya.assign(gs::abs(xa));
                                            ta.assign(gs::sqrt(ya) + 1.0f);
                                            ya.assign(gs::where(xa < 0.0f, -ta, ta));
                                          },
                                          {"y", "t", "x"});
  def.annotate("global i => write y[i], write t[i], read x[i]");
  return def;
}
const bool signed_root_registered = gs::register_native(signed_root());

TEST(Inline, ArrayExpressionsRunInsideEachTask) {
  ASSERT_TRUE(blend_rows_registered && signed_root_registered);
  auto g = rng(75);
  for (int devices : {1, 2}) {
    gs::Context ctx(config(devices));
    auto blend = ctx.compile(blend_rows());
    // Rows a task not a power of two: the inline kernels start at the task's first element.
    for (int rows_per_task : {3, 8, 40}) {
      const int rows = 90 + static_cast<int>(g() % 40), cols = 33 + static_cast<int>(g() % 60);
      auto xs = dyadic(static_cast<std::size_t>(rows) * cols, g), ws = dyadic(cols, g);
      auto x = ctx.from_vector<float>(xs, {rows, cols}, gs::dist::rows(rows_per_task));
      auto w = ctx.from_vector<float>(ws, {cols}, gs::dist::rows(cols));
      auto out = ctx.full<float>({rows, cols}, poison<float>(), gs::dist::rows(rows_per_task));
      blend.launch({rows, cols}, {1, 32}, gs::work::like(out), out, x, w);
      auto r = out.to_vector();
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          const float xv = xs[i * cols + j], wv = ws[j];
          ASSERT_EQ(r[i * cols + j], (xv * 0.5f + wv) + xv * wv)
              << i << ", " << j << ", rows a task " << rows_per_task << ", seed " << base_seed();
        }
    }
    auto root = ctx.compile(signed_root());
    const int n = 1000 + static_cast<int>(g() % 900);
    auto xs = random_vector<float>(n, g);
    auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(96));
    auto y = ctx.full<float>({n}, poison<float>(), gs::dist::rows(96));
    auto t = ctx.full<float>({n}, poison<float>(), gs::dist::rows(96));
    root.launch({n}, {32}, gs::work::tiles({96}), y, t, x);
    auto ry = y.to_vector();
    for (int i = 0; i < n; ++i) {
      const float s = std::sqrt(std::fabs(xs[i])) + 1.0f;
      ASSERT_NEAR(ry[i], xs[i] < 0 ? -s : s, 2e-6f * s) << i << ", seed " << base_seed();
    }
  }
}

// Reductions inside a task: each task contributes the reduction of what it holds to its
// partials, which the runtime combines: a dot product, row sums, column sums, a largest
// magnitude, a count, and an elementwise contribution.
gs::NativeDef task_reductions() {
  auto def = gs::NativeDef::from_function(
      "task_reductions",
      [](const gs::NativeContext& c, gs::Matrix<const float> x, gs::Vector<const float> w,
         gs::Scalar<double> dot, gs::Vector<float> rows, gs::Vector<float> cols,
         gs::Scalar<float> top, gs::Scalar<long long> positives, gs::Matrix<float> twice) {
        auto xa = c.array(x), wa = c.array(w);
        auto d = c.array(dot);
        auto r = c.array(rows), k = c.array(cols), m = c.array(top), t = c.array(twice);
        auto p = c.array(positives);
        d += gs::sum(xa * wa);
        r += gs::sum(xa, 1);
        k += gs::sum(xa, -2);
        m.assign(gs::maximum(m, gs::max(gs::abs(xa))));
        p += gs::sum(xa > 0.0f);
        t += xa * 2.0f;
      },
      {"x", "w", "dot", "rows", "cols", "top", "positives", "twice"});
  def.annotate(
      "global [i, j] => read x[i, j], read w[j], reduce(+) dot, reduce(+) rows[i], "
      "reduce(+) cols[j], reduce(max) top, reduce(+) positives, reduce(+) twice[i, j]");
  return def;
}
const bool task_reductions_registered = gs::register_native(task_reductions());

TEST(Inline, ReductionsInsideATaskContributeToItsPartials) {
  ASSERT_TRUE(task_reductions_registered);
  auto g = rng(76);
  for (int devices : {1, 2}) {
    gs::Context ctx(config(devices));
    auto native = ctx.compile(task_reductions());
    for (int rows_per_task : {5, 32}) {
      const int rows = 70 + static_cast<int>(g() % 40), cols = 20 + static_cast<int>(g() % 50);
      auto xs = dyadic(static_cast<std::size_t>(rows) * cols, g), ws = dyadic(cols, g);
      auto x = ctx.from_vector<float>(xs, {rows, cols}, gs::dist::rows(rows_per_task));
      auto w = ctx.from_vector<float>(ws, {cols}, gs::dist::rows(cols));
      auto dot = ctx.scalar<double>(poison<double>());
      auto row_sums = ctx.full<float>({rows}, poison<float>(), gs::dist::rows(rows_per_task));
      auto col_sums = ctx.full<float>({cols}, poison<float>(), gs::dist::rows(cols));
      auto top = ctx.scalar<float>(poison<float>());
      auto positives = ctx.scalar<long long>(poison<long long>());
      auto twice = ctx.full<float>({rows, cols}, poison<float>(), gs::dist::rows(rows_per_task));
      native.launch({rows, cols}, {1, 32}, gs::work::like(x), x, w, dot, row_sums, col_sums, top,
                    positives, twice);
      double expect_dot = 0;
      std::vector<double> expect_rows(rows, 0.0), expect_cols(cols, 0.0);
      float expect_top = 0;
      long long expect_positives = 0;
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          const float v = xs[i * cols + j];
          expect_dot += double(v * ws[j]);
          expect_rows[i] += v, expect_cols[j] += v;
          expect_top = std::max(expect_top, std::fabs(v));
          expect_positives += v > 0;
        }
      const std::string where =
          fmt::format("rows a task {}, devices {}, seed {}", rows_per_task, devices, base_seed());
      EXPECT_EQ(dot.item(), expect_dot) << where;
      EXPECT_EQ(top.item(), expect_top) << where;
      EXPECT_EQ(positives.item(), expect_positives) << where;
      auto rs = row_sums.to_vector(), cs = col_sums.to_vector(), tw = twice.to_vector();
      for (int i = 0; i < rows; ++i) ASSERT_EQ(rs[i], float(expect_rows[i])) << i << ", " << where;
      for (int j = 0; j < cols; ++j) ASSERT_EQ(cs[j], float(expect_cols[j])) << j << ", " << where;
      for (std::size_t e = 0; e < tw.size(); ++e)
        ASSERT_EQ(tw[e], 2.0f * xs[e]) << e << ", " << where;
    }
  }
}

// A whole reduction inside a task is combined over each warp first on a GPU: regions of a
// few elements (blocks of fewer than 32 threads, warps partly filled) and of several warps
// add up exactly, as on the cpu backend.
gs::NativeDef small_sums() {
  auto def = gs::NativeDef::from_function(
      "small_sums",
      [](const gs::NativeContext& c, gs::Vector<const float> x, gs::Scalar<double> total,
         gs::Scalar<float> least, gs::Scalar<long long> count) {
        auto xa = c.array(x);
        auto t = c.array(total);
        auto l = c.array(least);
        auto k = c.array(count);
        t += gs::sum(xa);
        l.assign(gs::minimum(l, gs::min(xa)));
        k += gs::sum(xa < 0.0f);
      },
      {"x", "total", "least", "count"});
  def.annotate("global i => read x[i], reduce(+) total, reduce(min) least, reduce(+) count");
  return def;
}
const bool small_sums_registered = gs::register_native(small_sums());

TEST(Inline, WholeReductionsOfFewOrManyElementsAddUp) {
  ASSERT_TRUE(small_sums_registered);
  auto g = rng(77);
  gs::Context ctx(config(2));
  auto native = ctx.compile(small_sums());
  for (int n : {1, 7, 45, 100, 2000}) {
    for (int per_task : {3, 29, 64, 1000}) {
      auto xs = dyadic(n, g);
      auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(per_task));
      auto total = ctx.scalar<double>(poison<double>());
      auto least = ctx.scalar<float>(poison<float>());
      auto count = ctx.scalar<long long>(poison<long long>());
      native.launch({n}, {1}, gs::work::like(x), x, total, least, count);
      double sum = 0;
      float lo = xs[0];
      long long negatives = 0;
      for (float v : xs) sum += v, lo = std::min(lo, v), negatives += v < 0.0f;
      const std::string where = fmt::format("n {}, {} a task, seed {}", n, per_task, base_seed());
      EXPECT_EQ(total.item(), sum) << where;
      EXPECT_EQ(least.item(), lo) << where;
      EXPECT_EQ(count.item(), negatives) << where;
    }
  }
}

// What a task cannot do with its reductions is a gs::Error saying what to write instead.
TEST(Inline, WhatATaskCannotReduceIsAClearError) {
  gs::Context ctx(config(1));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack these native functions";
  using Body = std::function<void(const gs::NativeContext&, gs::Scalar<float>, gs::Vector<float>,
                                  gs::Vector<const float>)>;
  const std::vector<std::pair<Body, std::vector<std::string>>> cases = {
      {[](const gs::NativeContext& c, auto, gs::Vector<float> out, gs::Vector<const float> x) {
         c.array(out).assign(gs::sum(c.array(x)));
       },
       {"assigns a reduction of a task's arrays into `out`, which it holds as write",
        "`total += gs::sum(x)`"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         c.array(total).assign(gs::sum(c.array(x)));
       },
       {"into its parameter `total`, which it holds as reduce(+)", "as `total += value`"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         auto t = c.array(total);
         t += gs::max(c.array(x));
       },
       {"contributes gs::max(...) into an array it holds as reduce with another operator"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         auto t = c.array(total);
         t += gs::sum(c.array(x)) * 2.0f;
       },
       {"uses a reduction of a task's arrays inside an expression", "`total += gs::sum(x)`"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         auto t = c.array(total);
         t += gs::mean(c.array(x));
       },
       {"calls gs::mean on a task's array", "gs::sum, gs::prod, gs::min and gs::max"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         auto t = c.array(total);
         t += gs::sum(c.array(x), 1);
       },
       {"axis 1 is out of range for an array of shape"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, gs::Vector<const float> x) {
         auto t = c.array(total);
         t += c.array(x);
       },
       {"contributes a value of shape", "into `total` of shape"}},
      {[](const gs::NativeContext& c, gs::Scalar<float> total, auto, auto) {
         auto t = c.array(total);
         t += t;
       },
       {"contributes a value that reads `total`, which it holds as reduce(+)"}},
  };
  const int n = 256;
  auto x = ctx.full<float>({n}, 0.75f, gs::dist::rows(64));
  for (const auto& [body, phrases] : cases) {
    auto native = ctx.compile(
        gs::NativeDef::from_function(
            "body",
            [&body](const gs::NativeContext& c, gs::Scalar<float> total, gs::Vector<float> out,
                    gs::Vector<const float> x) { body(c, total, out, x); },
            {"total", "out", "x"})
            .annotate("global i => reduce(+) total, write out[i], read x[i]"));
    auto total = ctx.scalar<float>(poison<float>());
    auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(64));
    native.launch({n}, {64}, gs::work::tiles({64}), total, out, x);
    expect_error<gs::Error>([&] { total.item(); }, phrases);
  }
  auto total = ctx.scalar<float>(poison<float>());
  total.assign(gs::sum(x));  // the context goes on
  EXPECT_EQ(total.item(), 0.75f * n);
}

// What the array library cannot do inside a task is a gs::Error saying what and what to do
// instead; the context goes on.
TEST(Inline, WhatATasksArraysCannotDoIsAClearError) {
  gs::Context ctx(config(1));
  if (skip_under_mpirun(ctx)) GTEST_SKIP() << "the other ranks lack these native functions";
  const int n = 512;
  auto program_array = ctx.full<float>({n}, 1.0f, gs::dist::rows(n));
  std::shared_ptr<gs::detail::ArrayHandle> kept;  // an array of an earlier task
  using Body = std::function<void(const gs::NativeContext&, gs::Vector<float>,
                                  gs::Vector<const float>, gs::Vector<const float>)>;
  const std::vector<std::pair<Body, std::vector<std::string>>> cases = {
      {[](const gs::NativeContext& c, gs::Vector<float> out, auto, auto) {
         (void)c.array(out).to_vector();
       },
       {"to_vector() of a task's array in native function `body`", "`out.assign(expr)`"}},
      {[](const gs::NativeContext& c, auto, gs::Vector<const float> x, auto) {
         (void)gs::cumsum(c.array(x));
       },
       {"native function `body` calls the array library inside its task",
        "make arrays of them (NativeContext::array)"}},
      {[&](const gs::NativeContext& c, gs::Vector<float> out, gs::Vector<const float> x, auto) {
         c.array(out).assign(c.array(x) + program_array);
       },
       {"`body` mixes a gs::Array of the program with its task's arrays", "as a view"}},
      {[](const gs::NativeContext& c, auto, gs::Vector<const float> x, auto) {
         c.array(x).assign(1.0f);
       },
       {"assigns into an array of a view of const elements"}},
      {[](const gs::NativeContext& c, gs::Vector<float> out, gs::Vector<const float> x, auto) {
         auto o = c.array(out);
         auto before = o + 1.0f;
         o.assign(c.array(x));
         o.assign(before);
       },
       {"reads a task's array written since the expression was built"}},
      {[](const gs::NativeContext& c, gs::Vector<float> out, gs::Vector<const float> x,
          gs::Vector<const float> one) {  // the task holds one element of `one`
         c.array(out).assign(c.array(x) + c.array(one));
       },
       {"native function `body` assigns an expression", "would read", "the task holds [0..1)",
        "widen `body`'s annotation of `one`"}},
      {[](const gs::NativeContext& c, gs::Vector<float>, gs::Vector<const float>, auto) {
         (void)c.array(gs::Vector<const float>{});
       },
       {"NativeContext::array in native function `body`", "not one of the task's"}},
      {[&](const gs::NativeContext& c, gs::Vector<float> out, auto, auto) {
         if (!kept) {  // the first task keeps its array; the next uses it
           kept = c.array(out).shared();
           return;
         }
         c.array(out).assign(gs::Array<float>(kept) * 2.0f);
       },
       {"uses an array made in another task (or one that has ended)"}},
  };
  auto x = ctx.full<float>({n}, 0.75f, gs::dist::rows(128));
  auto one = ctx.full<float>({n}, 0.5f, gs::dist::rows(n));
  for (const auto& [body, phrases] : cases) {
    auto native = ctx.compile(
        gs::NativeDef::from_function(
            "body",
            [&body](const gs::NativeContext& c, gs::Vector<float> out, gs::Vector<const float> x,
                    gs::Vector<const float> one) { body(c, out, x, one); },
            {"out", "x", "one"})
            .annotate("global i => write out[i], read x[i], read one[0]"));
    auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(128));
    native.launch({n}, {64}, gs::work::tiles({128}), out, x, one);
    expect_error<gs::Error>([&] { out.to_vector(); }, phrases);
  }
  kept.reset();
  expect_error<gs::Error>([] { (void)gs::NativeContext{}.array(gs::Vector<const float>{}); },
                          {"NativeContext::array works only inside a native function's task"});
  auto out = ctx.full<float>({n}, poison<float>(), gs::dist::rows(128));
  out.assign(x * 2.0f);  // the context goes on
  EXPECT_EQ(out.to_vector(), std::vector<float>(n, 1.5f));
}

}  // namespace gridspan::test
