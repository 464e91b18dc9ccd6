// What a repeated launch allocates on the launching thread: this binary replaces the global
// operator new with one that counts (support/counting_new.hpp), so it is a binary of
// its own. The counts are bounds: which thread takes up a task that became ready varies
// from run to run, and so does what the launching thread allocates (6.9-7.0 per launch of
// one chunk, 18.1-23.1 of four, on the 2-core build machine). Before the worker reused its
// nodes and work lists it was 26 and 61; before a launch reused its superblocks and scalar
// values, 10.1-11.6 and 28.5-38.3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <gridspan/gridspan.hpp>

#include "support/counting_new.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

namespace gs = gridspan;

const char* kAxpy = R"(
__device__ void axpy_half(dim3 blockIdx, int n, gridspan::Vector<float> y,
                          const gridspan::Vector<float> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + x[i];
})";

// Allocations per launch on this thread over `launches` repeats of bench_launch's chain,
// after a warm-up; the result is checked against the same chain on the host.
double allocations_per_launch(int chunks, int launches) {
  gs::Config c;
  c.backend = "cpu";
  c.log_level = gs::LogLevel::error;
  gs::Context ctx(c);
  const int n = 4096, per = n / chunks;
  auto g = test::rng(static_cast<uint64_t>(chunks));
  const auto xs = test::random_vector<float>(n, g), ys = test::random_vector<float>(n, g);
  auto k = ctx.compile(gs::KernelDef::from_source(kAxpy, "axpy_half")
                           .annotate("global i => readwrite y[i], read x[i]"));
  auto x = ctx.from_vector<float>(xs, {n}, gs::dist::rows(per));
  auto y = ctx.from_vector<float>(ys, {n}, gs::dist::rows(per));
  const auto work = gs::work::tiles({per});
  const int warm = 200;
  for (int i = 0; i < warm; ++i) k.launch({n}, {256}, work, n, y, x);
  ctx.synchronize();
  const test::AllocationCount on_this_thread;
  for (int i = 0; i < launches; ++i) k.launch({n}, {256}, work, n, y, x);
  const long counted = on_this_thread.count();
  const auto out = y.to_vector();
  for (int i = 0; i < n; ++i) {
    float want = ys[i];
    for (int r = 0; r < warm + launches; ++r) want = want * 0.5f + xs[i];
    EXPECT_NEAR(out[i], want, 1e-5f * std::max(1.0f, std::fabs(want))) << "element " << i;
  }
  return static_cast<double>(counted) / launches;
}

TEST(Allocations, ARepeatedLaunchOfOneChunkAllocatesLittle) {
  const double per_launch = allocations_per_launch(1, 2000);
  std::printf("one chunk: %.2f allocations per launch on the launching thread\n", per_launch);
  EXPECT_LE(per_launch, 10.0);
}

TEST(Allocations, ARepeatedLaunchOfFourChunksAllocatesLittle) {
  const double per_launch = allocations_per_launch(4, 2000);
  std::printf("four chunks: %.2f allocations per launch on the launching thread\n", per_launch);
  EXPECT_LE(per_launch, 32.0);
}

}  // namespace
}  // namespace gridspan
