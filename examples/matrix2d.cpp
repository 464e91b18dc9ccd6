// A 2-D stencil on a rows x cols matrix, spread over every device, checked against a plain
// C++ loop. It shows which thread axis walks which array axis:
//   - thread axis x (blockIdx.x, threadIdx.x) is the fastest-moving one; here it walks the
//     columns j, the contiguous axis of a row-major Matrix;
//   - thread axis y walks the rows i;
//   - the annotation binds names in (x, y) order: `global [j, i]` is j = x, i = y;
//   - the Matrix is indexed (row, column) = (i, j);
//   - the launch's thread domain and the superblock tiles are given in (x, y) order:
//     {cols, rows}; the array's shape and its chunk tiles in (row, column) order: {rows, cols}.
// The weights differ per direction and the sizes are not square, so a swapped axis shows.
// `example_matrix2d [rows cols]` (default 300 x 517).
#include <gridspan/gridspan.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace gs = gridspan;

const char* source = R"(
__device__ void blur(dim3 blockIdx, int rows, int cols, gridspan::Matrix<int> out,
                     const gridspan::Matrix<int> in) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;  // column: thread axis x
  int i = blockIdx.y * blockDim.y + threadIdx.y;  // row: thread axis y
  if (i >= rows || j >= cols) return;             // the grid may overhang the matrix
  if (i == 0 || j == 0 || i == rows - 1 || j == cols - 1) {
    out(i, j) = in(i, j);                         // the border is copied
    return;
  }
  out(i, j) = (in(i - 1, j) + 2 * in(i + 1, j) + 3 * in(i, j - 1) + 4 * in(i, j + 1) + in(i, j)) %
              1000003;
})";

// The same step on the host: the reference.
std::vector<int> blur_reference(const std::vector<int>& in, int rows, int cols) {
  std::vector<int> out(in.size());
  auto at = [&](int i, int j) { return in[std::size_t(i) * cols + j]; };
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      bool border = i == 0 || j == 0 || i == rows - 1 || j == cols - 1;
      out[std::size_t(i) * cols + j] =
          border
              ? at(i, j)
              : (at(i - 1, j) + 2 * at(i + 1, j) + 3 * at(i, j - 1) + 4 * at(i, j + 1) + at(i, j)) %
                    1000003;
    }
  return out;
}

int main(int argc, char** argv) {
  const int rows = argc > 2 ? std::atoi(argv[1]) : 300;
  const int cols = argc > 2 ? std::atoi(argv[2]) : 517;
  return gs::run(argc, argv, [rows, cols](gs::Context& ctx) {
    // j is bound to axis x, i to axis y; each thread writes out[i, j] and reads the 3 x 3
    // box around it (ranges are inclusive; gridspan clamps them to the array).
    auto kernel =
        ctx.compile(gs::KernelDef::from_source(source, "blur")
                        .annotate("global [j, i] => write out[i, j], read in[i-1:i+1, j-1:j+1]"));

    // Array shapes and chunk tiles are in array order (rows, cols): chunks of 64 rows by 128
    // columns with a halo of one element on each side, kept coherent by gridspan.
    auto dist = gs::dist::stencil({64, 128}, /*halo=*/{1, 1});
    std::vector<int> start(std::size_t(rows) * cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) start[std::size_t(i) * cols + j] = (i * 7 + j * 13) % 101;
    auto a = ctx.from_vector<int>(start, {rows, cols}, dist);
    auto b = ctx.zeros<int>({rows, cols}, dist);

    // The thread domain, the block and the superblocks are in thread order (x, y):
    // {cols, rows}; blocks of 32 x 8 threads; superblocks of 128 columns by 64 rows, which
    // are the chunks above.
    const int steps = 4;
    for (int s = 0; s < steps; ++s) {
      kernel.launch({cols, rows}, {32, 8}, gs::work::tiles({128, 64}), rows, cols, b, a);
      std::swap(a, b);  // asynchronous: the next launch waits only for what it reads
    }
    std::vector<int> got = a.to_vector();  // waits for the last launch

    std::vector<int> expect = start;
    for (int s = 0; s < steps; ++s) expect = blur_reference(expect, rows, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        const std::size_t at = std::size_t(i) * cols + j;
        if (got[at] != expect[at]) {
          std::printf("matrix2d: mismatch at (%d, %d): got %d, expected %d\n", i, j, got[at],
                      expect[at]);
          throw gs::Error("matrix2d: the stencil gave a wrong result");  // exit code 1
        }
      }
    std::printf("matrix2d: ok (%d x %d, %d steps on %d %s devices)\n", rows, cols, steps,
                ctx.device_count(), ctx.backend_name().c_str());
  });
}
