// Spilling: device and host limits far below the data; results stay exact, statistics show
// the bytes that went to host memory and to disk.
#include "e2e/support.hpp"

namespace gridspan::test {
namespace {

const char* kInc = R"(
__device__ void inc(dim3 blockIdx, int n, int by, gridspan::Vector<int> a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] + by;
}
)";

TEST(Spill, DataSurvivesDeviceHostDiskRoundTrips) {
  auto g = rng(21);
  const int n = 256 * 1024;  // 1 MiB of ints, in 64 chunks of 16 KiB
  gs::Context ctx(config(2, 64 << 10, 128 << 10));
  auto k =
      ctx.compile(gs::KernelDef::from_source(kInc, "inc").annotate("global i => readwrite a[i]"));
  auto v = random_vector<int>(n, g);
  auto a = ctx.from_vector<int>(v, {n}, gs::dist::rows(4096));
  for (int it = 1; it <= 4; ++it) k.launch({n}, {256}, gs::work::tiles({4096}), n, it, a);
  auto r = a.to_vector();
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], v[i] + 10) << i;
  auto stats = ctx.memory_stats();
  ASSERT_EQ(stats.size(), 4u);  // cpu:0, cpu:1, host, disk
  EXPECT_GT(stats[0].spilled_bytes, 0u);
  EXPECT_GT(stats[2].spilled_bytes, 0u);  // host → disk
  EXPECT_LE(stats[0].peak_bytes, stats[0].total_bytes);
  EXPECT_LE(stats[2].peak_bytes, stats[2].total_bytes);
}

}  // namespace
}  // namespace gridspan::test
