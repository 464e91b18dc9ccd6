// Installed-package check: a kernel launched through find_package(gridspan), result checked.
#include <gridspan/gridspan.hpp>

#include <cstdio>

namespace gs = gridspan;

int main(int argc, char** argv) {
  int failures = -1;
  int rc = gs::run(argc, argv, [&](gs::Context& ctx) {
    auto k = ctx.compile(gs::KernelDef::from_source(R"(
__device__ void twice(dim3 blockIdx, int n, gridspan::Vector<int> out, const gridspan::Vector<int> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i] + 1;
})",
                                                    "twice")
                             .annotate("global i => write out[i], read in[i]"));
    const int n = 1000;
    std::vector<int> x(n);
    for (int i = 0; i < n; ++i) x[i] = i * 7 - 300;
    auto in = ctx.from_vector<int>(x, {n}, gs::dist::rows(300));
    auto out = ctx.full<int>({n}, -12345, gs::dist::rows(128));
    k.launch({n}, {64}, gs::work::tiles({256}), n, out, in);
    auto y = out.to_vector();
    failures = 0;
    for (int i = 0; i < n; ++i) failures += y[i] != 2 * x[i] + 1;
  });
  if (rc != 0 || failures != 0) {
    std::fprintf(stderr, "package test failed: rc %d, %d wrong elements\n", rc, failures);
    return 1;
  }
  return 0;
}
