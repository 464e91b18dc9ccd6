// The README's program: a 1-D stencil, ten asynchronous launches over every device, the
// result read back and checked. `example_stencil [n]` (default 1 << 20).
#include <gridspan/gridspan.hpp>

#include <cstdio>
#include <cstdlib>

namespace gs = gridspan;

const char* source = R"(
__device__ void stencil(dim3 blockIdx, int n, gridspan::Vector<float> out,
                        const gridspan::Vector<float> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = in[i - 1] + in[i] + in[i + 1];
})";

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1 << 20;
  return gs::run(argc, argv, [n](gs::Context& ctx) {
    auto kernel = ctx.compile(gs::KernelDef::from_source(source, "stencil")
                                  .annotate("global i => write out[i], read in[i-1:i+1]"));
    int chunk = std::max(256, n / 8 / 256 * 256);
    auto dist = gs::dist::stencil({chunk}, /*halo=*/{1});
    auto a = ctx.ones<float>({n}, dist), b = ctx.ones<float>({n}, dist);
    for (int it = 0; it < 10; ++it) {
      kernel.launch({n}, {256}, gs::work::tiles({chunk}), n, b, a);  // asynchronous
      std::swap(a, b);
    }
    std::vector<float> result = a.to_vector();  // waits for what it reads
    // Far from the ends, ten sweeps of a three-point sum of ones give 3^10.
    float expect = 59049.0f, got = result[n / 2];
    std::printf("stencil on %d devices: a[%d] = %.0f (expected %.0f)\n", ctx.device_count(), n / 2,
                got, expect);
    if (got != expect) throw gs::Error("the stencil gave a wrong result");
  });
}
