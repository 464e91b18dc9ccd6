// The cpu backend's compiled kernels: global-to-chunk indexing of every view kind, virtual
// block indices, scalar parameters, reductions, __syncthreads/__shared__ through fibers,
// atomics under concurrency, checked mode, compile errors and the kernel cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "backend/cpu/cpu.hpp"
#include "backend/kernel_support.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/half.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

using backend::KernelSource;

KernelSource kernel(const std::string& name, const std::string& source,
                    std::vector<ParamInfo> params, bool checked = false) {
  KernelSource k;
  k.name = name;
  k.source = source;
  k.params = std::move(params);
  k.checked = checked;
  return k;
}

// A 1-d stencil run on superblock [20, 28) of a 64-block grid, with chunks that are
// sub-boxes of the arrays not aligned to the superblock.
TEST(CpuKernel, VectorSuperblockInTheMiddleOfTheGrid) {
  const char* src = R"(
__device__ void stencil1d(dim3 blockIdx, int n, gridspan::Vector<float> out,
                          const gridspan::Vector<float> in, gridspan::Vector<int64_t> tag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = in[i - 1] + 2.0f * in[i] + in[i + 1];
  tag[i] = blockIdx.x * 100000 + threadIdx.x * 10 + (gridDim.x == 64 && blockDim.x == 32);
}
)";
  auto k = cpu_backend().compile(
      kernel("stencil1d", src,
             {scalar_param("n", DType::i32), array_param("out", 1, DType::f32),
              array_param("in", 1, DType::f32, true), array_param("tag", 1, DType::i64)}));
  const int n = 2000;
  auto g = rng(1);
  std::vector<float> in = random_vector<float>(n, g);
  // Chunks: in holds [630, 905), out [600, 1000), tag [640, 896) exactly.
  std::vector<float> in_chunk(in.begin() + 630, in.begin() + 905);
  std::vector<float> out_chunk(400, poison<float>());
  std::vector<int64_t> tag_chunk(256, poison<int64_t>());
  LaunchDesc d(4, {20, 0, 0}, {28, 1, 1}, {32, 1, 1}, {64, 1, 1});
  d.scalars[0] = &n;
  d.arrays[1] = array_arg(out_chunk.data(), 1, {600, 0, 0}, {400, 1, 1}, {640, 0, 0}, {896, 1, 1},
                          4, GS_WRITE);
  d.arrays[2] =
      array_arg(in_chunk.data(), 1, {630, 0, 0}, {275, 1, 1}, {639, 0, 0}, {897, 1, 1}, 4, GS_READ);
  d.arrays[3] = chunk_arg(tag_chunk.data(), 1, {640, 0, 0}, {256, 1, 1}, 8, GS_WRITE);
  k->run(d.get(), any_device());
  for (int i = 600; i < 1000; ++i) {
    const float got = out_chunk[i - 600];
    if (i >= 640 && i < 896) {
      EXPECT_EQ(got, in[i - 1] + 2.0f * in[i] + in[i + 1]) << "i=" << i;
    } else {
      EXPECT_TRUE(std::isnan(got)) << "element " << i << " outside the superblock was written";
    }
  }
  for (int i = 640; i < 896; ++i)
    EXPECT_EQ(tag_chunk[i - 640], (i / 32) * 100000 + (i % 32) * 10 + 1) << "i=" << i;
}

// 2-d blocks of 8x4 threads over a matrix chunk that starts at (10, 5).
TEST(CpuKernel, MatrixCallAndRowProxyIndexing) {
  const char* src = R"(
__device__ void mat(dim3 blockIdx, gridspan::Matrix<double> out, gridspan::Matrix<double> out2,
                    const gridspan::Matrix<double> a) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  out(i, j) = a(i, j) * 2.0;
  out2[i][j] = a[i][j] + i * 1000 + j;
}
)";
  auto k = cpu_backend().compile(
      kernel("mat", src,
             {array_param("out", 2, DType::f64), array_param("out2", 2, DType::f64),
              array_param("a", 2, DType::f64, true)}));
  // Superblock: blocks x in [1, 3), y in [3, 5) -> columns [8, 24), rows [12, 20).
  const int64_t r0 = 10, c0 = 5, rows = 14, cols = 23;  // chunk [10, 24) x [5, 28)
  auto g = rng(2);
  std::vector<double> a = random_vector<double>(rows * cols, g);
  std::vector<double> out(rows * cols, poison<double>()), out2(rows * cols, poison<double>());
  LaunchDesc d(3, {1, 3, 0}, {3, 5, 1}, {8, 4, 1}, {4, 8, 1});
  d.arrays[0] = chunk_arg(out.data(), 2, {r0, c0, 0}, {rows, cols, 1}, 8, GS_WRITE);
  d.arrays[1] = chunk_arg(out2.data(), 2, {r0, c0, 0}, {rows, cols, 1}, 8, GS_WRITE);
  d.arrays[2] = chunk_arg(a.data(), 2, {r0, c0, 0}, {rows, cols, 1}, 8, GS_READ);
  k->run(d.get(), any_device());
  for (int64_t i = r0; i < r0 + rows; ++i) {
    for (int64_t j = c0; j < c0 + cols; ++j) {
      const int64_t at = (i - r0) * cols + (j - c0);
      if (i >= 12 && i < 20 && j >= 8 && j < 24) {
        EXPECT_EQ(out[at], a[at] * 2.0) << i << "," << j;
        EXPECT_EQ(out2[at], a[at] + double(i * 1000 + j)) << i << "," << j;
      } else {
        EXPECT_TRUE(std::isnan(out[at]) && std::isnan(out2[at])) << i << "," << j;
      }
    }
  }
}

TEST(CpuKernel, TensorIndexing) {
  const char* src = R"(
__device__ void ten(dim3 blockIdx, gridspan::Tensor<int> out, const gridspan::Tensor<int> in) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int i = blockIdx.z * blockDim.z + threadIdx.z;
  out[i][j][k] = in(i, j, k) * 3 + i * 10000 + j * 100 + k;
}
)";
  auto k = cpu_backend().compile(kernel(
      "ten", src, {array_param("out", 3, DType::i32), array_param("in", 3, DType::i32, true)}));
  // Blocks (4, 2, 2); superblock x [1, 2), y [0, 2), z [1, 3): k [4, 8), j [0, 4), i [2, 6).
  const Box lo{1, 0, 3}, ext{6, 5, 7};  // chunk i [1, 7), j [0, 5), k [3, 10)
  auto g = rng(3);
  std::vector<int> in = random_vector<int>(6 * 5 * 7, g);
  std::vector<int> out(in.size(), poison<int>());
  LaunchDesc d(2, {1, 0, 1}, {2, 2, 3}, {4, 2, 2}, {3, 2, 4});
  d.arrays[0] = chunk_arg(out.data(), 3, lo, ext, 4, GS_WRITE);
  d.arrays[1] = chunk_arg(in.data(), 3, lo, ext, 4, GS_READ);
  k->run(d.get(), any_device());
  for (int i = 1; i < 7; ++i)
    for (int j = 0; j < 5; ++j)
      for (int kk = 3; kk < 10; ++kk) {
        const int at = ((i - 1) * 5 + j) * 7 + (kk - 3);
        if (i >= 2 && i < 6 && j < 4 && kk >= 4 && kk < 8)
          EXPECT_EQ(out[at], in[at] * 3 + i * 10000 + j * 100 + kk) << i << j << kk;
        else
          EXPECT_EQ(out[at], poison<int>()) << i << j << kk;
      }
}

TEST(CpuKernel, ScalarParametersOfSeveralTypes) {
  const char* src = R"(
__device__ void scalars(dim3 blockIdx, int a, float b, double c, int64_t d, unsigned e,
                        bool f, gridspan::Vector<double> out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  switch (i) {
    case 0: out[i] = a; break;
    case 1: out[i] = b; break;
    case 2: out[i] = c; break;
    case 3: out[i] = double(d); break;
    case 4: out[i] = e; break;
    case 5: out[i] = f ? 1.0 : -1.0; break;
    default: out[i] = a + b + c + double(d) + e;
  }
}
)";
  auto k = cpu_backend().compile(kernel(
      "scalars", src,
      {scalar_param("a", DType::i32), scalar_param("b", DType::f32), scalar_param("c", DType::f64),
       scalar_param("d", DType::i64), scalar_param("e", DType::u32),
       scalar_param("f", DType::boolean), array_param("out", 1, DType::f64)}));
  const int32_t a = -123456;
  const float b = 0.375f;
  const double c = 1e-300;
  const int64_t dd = int64_t(1) << 40;
  const uint32_t e = 4000000000u;
  const bool f = true;
  std::vector<double> out(8, poison<double>());
  LaunchDesc d(7, {0, 0, 0}, {2, 1, 1}, {4, 1, 1}, {2, 1, 1});
  d.scalars = {&a, &b, &c, &dd, &e, &f, nullptr};
  d.arrays[6] = chunk_arg(out.data(), 1, {0, 0, 0}, {8, 1, 1}, 8, GS_WRITE);
  k->run(d.get(), any_device());
  EXPECT_EQ(out[0], -123456.0);
  EXPECT_EQ(out[1], 0.375);
  EXPECT_EQ(out[2], 1e-300);
  EXPECT_EQ(out[3], 1099511627776.0);
  EXPECT_EQ(out[4], 4000000000.0);
  EXPECT_EQ(out[5], 1.0);
  EXPECT_EQ(out[6], double(a) + double(b) + c + double(dd) + double(e));
}

TEST(CpuKernel, HalfAndBfloat16Views) {
  const char* src = R"(
__device__ void halves(dim3 blockIdx, gridspan::Vector<__half> h, const gridspan::Vector<__nv_bfloat16> b,
                       gridspan::Vector<float> out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = float(h[i]) + float(b[i]);
  h[i] = __float2half(float(h[i]) * 2.0f);
}
)";
  auto k = cpu_backend().compile(
      kernel("halves", src,
             {array_param("h", 1, DType::f16), array_param("b", 1, DType::bf16, true),
              array_param("out", 1, DType::f32)}));
  // Values exactly representable in both formats: multiples of 1/4 up to 64.
  std::vector<uint16_t> h(16), b(16);
  std::vector<float> expect_h(16), expect_b(16), out(16, poison<float>());
  for (int i = 0; i < 16; ++i) {
    expect_h[i] = 0.25f * float(i + 1) * (i % 2 ? -1.0f : 1.0f);
    expect_b[i] = 4.0f * float(i);
    h[i] = float_to_half(expect_h[i]);
    b[i] = float_to_bf16(expect_b[i]);
  }
  LaunchDesc d(3, {0, 0, 0}, {2, 1, 1}, {8, 1, 1}, {2, 1, 1});
  d.arrays[0] = chunk_arg(h.data(), 1, {0, 0, 0}, {16, 1, 1}, 2);
  d.arrays[1] = chunk_arg(b.data(), 1, {0, 0, 0}, {16, 1, 1}, 2, GS_READ);
  d.arrays[2] = chunk_arg(out.data(), 1, {0, 0, 0}, {16, 1, 1}, 4, GS_WRITE);
  k->run(d.get(), any_device());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], expect_h[i] + expect_b[i]) << i;
    EXPECT_EQ(half_to_float(h[i]), 2.0f * expect_h[i]) << i;
  }
}

// A superblock's blocks spread over a cpu device's threads: every block runs once, every
// element of the superblock is written and none outside it.
TEST(CpuKernel, ASuperblockRunsOnceOverTheDeviceThreads) {
  const char* src = R"(
__device__ void spread(dim3 blockIdx, gridspan::Matrix<float> out, const gridspan::Matrix<float> a,
                       gridspan::Vector<int> hits) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  out(i, j) = a(i, j) * 3.0f + 1.0f;
  atomicAdd(&hits[blockIdx.y * gridDim.x + blockIdx.x], 1);
}
)";
  auto k = cpu_backend().compile(
      kernel("spread", src,
             {array_param("out", 2, DType::f32), array_param("a", 2, DType::f32, true),
              array_param("hits", 1, DType::i32)}));
  backend::cpu::CpuDevice device(0, 1 << 20, 3);
  // Grid 4 x 40 blocks of 16 x 16 threads; the superblock: blocks x [1, 3), y [5, 37), 16384
  // threads (enough to be spread).
  const int64_t rows = 640, cols = 64, gx = 4, gy = 40;
  auto g = rng(23);
  std::uniform_real_distribution<float> u(-8, 8);
  std::vector<float> a(rows * cols), out(rows * cols, poison<float>());
  for (auto& v : a) v = u(g);
  std::vector<int32_t> hits(gx * gy, 0);
  LaunchDesc d(3, {1, 5, 0}, {3, 37, 1}, {16, 16, 1}, {gx, gy, 1});
  d.arrays[0] = chunk_arg(out.data(), 2, {0, 0, 0}, {rows, cols, 1}, 4, GS_WRITE);
  d.arrays[1] = chunk_arg(a.data(), 2, {0, 0, 0}, {rows, cols, 1}, 4, GS_READ);
  d.arrays[2] = chunk_arg(hits.data(), 1, {0, 0, 0}, {gx * gy, 1, 1}, 4, GS_ATOMIC, GS_ADD);
  k->run(d.get(), device);
  for (int64_t by = 0; by < gy; ++by)
    for (int64_t bx = 0; bx < gx; ++bx)
      EXPECT_EQ(hits[by * gx + bx], bx >= 1 && bx < 3 && by >= 5 && by < 37 ? 256 : 0)
          << "block " << bx << "," << by;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t at = i * cols + j;
      if (i >= 80 && i < 592 && j >= 16 && j < 48)
        EXPECT_EQ(out[at], a[at] * 3.0f + 1.0f) << i << "," << j;
      else
        EXPECT_TRUE(std::isnan(out[at])) << i << "," << j << " is outside the superblock";
    }
}

// CUDA's vector types: members, make_ functions, layouts as vector_types.h gives them, in
// __shared__ arrays and through the views.
TEST(CpuKernel, VectorTypes) {
  const char* src = R"(
static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && sizeof(float3) == 12 &&
                  alignof(float3) == 4 && alignof(float2) == 8 && alignof(double2) == 16 &&
                  alignof(double4) == 16 && sizeof(char3) == 3 && alignof(short2) == 4 &&
                  alignof(int4) == 16 && sizeof(ulonglong2) == 16 && sizeof(uint3) == 12,
              "CUDA's vector layouts");
__device__ void vec(dim3 blockIdx, const gridspan::Matrix<float> p, gridspan::Vector<float> out,
                    gridspan::Vector<int> idx) {
  __shared__ float4 tile[4];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = make_float4(p[i][0], p[i][1], p[i][2], p[i][3]);
  __syncthreads();
  float4 q = tile[(threadIdx.x + 1) % blockDim.x];
  double2 d = make_double2(q.x * q.y, q.z - q.w);
  out[i] = float(d.x + d.y);
  int2 ij = make_int2(i, int(threadIdx.x));
  uchar4 c = make_uchar4(1, 2, 3, 200);
  idx[i] = ij.x * 10 + ij.y + c.w;
}
)";
  auto k = cpu_backend().compile(
      kernel("vec", src,
             {array_param("p", 2, DType::f32, true), array_param("out", 1, DType::f32),
              array_param("idx", 1, DType::i32)}));
  auto g = rng(21);
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> p(8 * 4);
  for (auto& v : p) v = u(g);
  std::vector<float> out(8, poison<float>());
  std::vector<int32_t> idx(8, poison<int32_t>());
  LaunchDesc d(3, {0, 0, 0}, {2, 1, 1}, {4, 1, 1}, {2, 1, 1});
  d.arrays[0] = chunk_arg(p.data(), 2, {0, 0, 0}, {8, 4, 1}, 4, GS_READ);
  d.arrays[1] = chunk_arg(out.data(), 1, {0, 0, 0}, {8, 1, 1}, 4, GS_WRITE);
  d.arrays[2] = chunk_arg(idx.data(), 1, {0, 0, 0}, {8, 1, 1}, 4, GS_WRITE);
  k->run(d.get(), any_device());
  for (int i = 0; i < 8; ++i) {
    const int j = i / 4 * 4 + (i % 4 + 1) % 4;  // the next thread's row, within the block
    const float* q = &p[j * 4];
    EXPECT_EQ(out[i], float(double(q[0] * q[1]) + double(q[2] - q[3]))) << i;
    EXPECT_EQ(idx[i], i * 10 + i % 4 + 200) << i;
  }
}

// The device headers' float16/bfloat16 conversions agree with the host's (core/half.hpp)
// on every 16-bit pattern and on random floats, rounding included.
TEST(CpuKernel, Float16ConversionsMatchTheHost) {
  const char* src = R"(
__device__ void conv(dim3 blockIdx, gridspan::Vector<float> hf, gridspan::Vector<float> bf,
                     const gridspan::Vector<float> x, gridspan::Vector<uint16_t> xh,
                     gridspan::Vector<uint16_t> xb) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  hf[i] = __half2float(__ushort_as_half(i));
  bf[i] = __bfloat162float(__ushort_as_bfloat16(i));
  xh[i] = __half_as_ushort(__float2half(x[i]));
  xb[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
}
)";
  auto k = cpu_backend().compile(
      kernel("conv", src,
             {array_param("hf", 1, DType::f32), array_param("bf", 1, DType::f32),
              array_param("x", 1, DType::f32, true), array_param("xh", 1, DType::u16),
              array_param("xb", 1, DType::u16)}));
  const int n = 65536;
  auto g = rng(9);
  std::vector<float> x(n);
  std::uniform_int_distribution<uint32_t> bits;
  for (auto& v : x) {
    const uint32_t b = bits(g);
    std::memcpy(&v, &b, 4);
  }
  x[0] = 65520.0f;                     // rounds to infinity
  x[1] = 65519.0f;                     // rounds to 65504
  x[2] = 5.9604644775390625e-08f / 2;  // ties to even: 0
  std::vector<float> hf(n), bf(n);
  std::vector<uint16_t> xh(n), xb(n);
  LaunchDesc d(5, {0, 0, 0}, {256, 1, 1}, {256, 1, 1}, {256, 1, 1});
  d.arrays[0] = chunk_arg(hf.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_WRITE);
  d.arrays[1] = chunk_arg(bf.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_WRITE);
  d.arrays[2] = chunk_arg(x.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_READ);
  d.arrays[3] = chunk_arg(xh.data(), 1, {0, 0, 0}, {n, 1, 1}, 2, GS_WRITE);
  d.arrays[4] = chunk_arg(xb.data(), 1, {0, 0, 0}, {n, 1, 1}, 2, GS_WRITE);
  k->run(d.get(), any_device());
  auto same = [](float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (a != a && b != b); };
  int mismatches = 0;
  for (int i = 0; i < n && mismatches < 10; ++i) {
    if (!same(hf[i], half_to_float(uint16_t(i)))) ++mismatches, ADD_FAILURE() << "half " << i;
    if (!same(bf[i], bf16_to_float(uint16_t(i)))) ++mismatches, ADD_FAILURE() << "bf16 " << i;
    const bool nan = x[i] != x[i];
    if (nan ? (xh[i] & 0x7FFF) <= 0x7C00 : xh[i] != float_to_half(x[i]))
      ++mismatches, ADD_FAILURE() << "to half " << x[i] << ": " << xh[i];
    if (nan ? (xb[i] & 0x7FFF) <= 0x7F80 : xb[i] != float_to_bf16(x[i]))
      ++mismatches, ADD_FAILURE() << "to bf16 " << x[i] << ": " << xb[i];
  }
  EXPECT_EQ(xh[0], 0x7C00);
  EXPECT_EQ(xh[1], 0x7BFF);
  EXPECT_EQ(xh[2], 0);
}

// A 0-d reduce(+) partial (private to the superblock) and a 1-d reduce(max) partial.
TEST(CpuKernel, ReduceIntoScalarAndVectorPartials) {
  const char* src = R"(
__device__ void sums(dim3 blockIdx, const gridspan::Vector<int> in, gridspan::Scalar<int> total,
                     gridspan::Vector<float> colmax, const gridspan::Vector<float> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  total.reduce(in[i]);
  colmax.reduce(i % 4, x[i]);
}
)";
  auto k = cpu_backend().compile(
      kernel("sums", src,
             {array_param("in", 1, DType::i32, true), array_param("total", 0, DType::i32),
              array_param("colmax", 1, DType::f32), array_param("x", 1, DType::f32, true)}));
  auto g = rng(4);
  const int n = 512;
  std::vector<int> in = random_vector<int>(n, g);
  std::vector<float> x = random_vector<float>(n, g);
  int total = 0;  // the identity of +
  std::vector<float> colmax(4, -INFINITY);
  LaunchDesc d(4, {2, 0, 0}, {6, 1, 1}, {64, 1, 1}, {8, 1, 1});  // elements [128, 384)
  d.arrays[0] = chunk_arg(in.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_READ);
  d.arrays[1] = chunk_arg(&total, 0, {0, 0, 0}, {1, 1, 1}, 4, GS_REDUCE, GS_ADD);
  d.arrays[2] = chunk_arg(colmax.data(), 1, {0, 0, 0}, {4, 1, 1}, 4, GS_REDUCE, GS_MAX);
  d.arrays[3] = chunk_arg(x.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_READ);
  k->run(d.get(), any_device());
  int expect = 0;
  std::vector<float> expect_max(4, -INFINITY);
  for (int i = 128; i < 384; ++i) {
    expect += in[i];
    expect_max[i % 4] = std::max(expect_max[i % 4], x[i]);
  }
  EXPECT_EQ(total, expect);
  EXPECT_EQ(colmax, expect_max);
}

// A tree reduction in __shared__ memory with __syncthreads: exact integer block sums, with
// superblocks running concurrently on several executor threads (shared memory per block).
TEST(CpuKernel, SharedMemoryTreeReductionWithBarriers) {
  const char* src = R"(
#define THREADS 128
__device__ void block_sum(dim3 blockIdx, const gridspan::Vector<int> in,
                          gridspan::Vector<int> out) {
  __shared__ int buf[THREADS];
  unsigned t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();  // the loop's barrier
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}
)";
  ASSERT_TRUE(backend::cpu::uses_barrier(src));
  auto k = cpu_backend().compile(
      kernel("block_sum", src,
             {array_param("in", 1, DType::i32, true), array_param("out", 1, DType::i32)}));
  const int blocks = 64, threads = 128;
  auto g = rng(5);
  std::vector<int> in = random_vector<int>(blocks * threads, g);
  std::vector<int> out(blocks, poison<int>());
  // 8 superblocks of 8 blocks each, on both devices' executor threads at once.
  std::vector<std::unique_ptr<LaunchDesc>> descs;
  std::vector<std::promise<void>> finished(8);
  auto devices = cpu_backend().devices();
  for (int sb = 0; sb < 8; ++sb) {
    auto d = std::make_unique<LaunchDesc>(2, Box{sb * 8, 0, 0}, Box{sb * 8 + 8, 1, 1},
                                          std::array<uint32_t, 3>{threads, 1, 1},
                                          std::array<uint32_t, 3>{blocks, 1, 1});
    d->arrays[0] = chunk_arg(in.data(), 1, {0, 0, 0}, {blocks * threads, 1, 1}, 4, GS_READ);
    d->arrays[1] = chunk_arg(out.data(), 1, {0, 0, 0}, {blocks, 1, 1}, 4, GS_WRITE);
    LaunchDesc* dp = d.get();
    descs.push_back(std::move(d));
    run_on(*devices[sb % devices.size()], *k, *dp, finished[sb]);
  }
  for (auto& f : finished) f.get_future().get();
  for (int b = 0; b < blocks; ++b) {
    int expect = 0;
    for (int t = 0; t < threads; ++t) expect += in[b * threads + t];
    EXPECT_EQ(out[b], expect) << "block " << b;
  }
}

// Threads exchange values through shared memory across a barrier (each reads what another
// thread wrote before it), in a 2-d block, with some threads returning before the barrier.
TEST(CpuKernel, ThreadsExchangeValuesAcrossABarrier) {
  const char* src = R"(
__device__ void transpose_tile(dim3 blockIdx, const gridspan::Matrix<float> in,
                               gridspan::Matrix<float> out, gridspan::Vector<int> early) {
  __shared__ float tile[8][9];
  int x = threadIdx.x, y = threadIdx.y;
  int r = blockIdx.y * 8 + y, c = blockIdx.x * 8 + x;
  tile[y][x] = in(r, c);
  if (x == 7 && y == 7) {  // returns early: counts as arrived at every later barrier
    early[blockIdx.y * gridDim.x + blockIdx.x] = 1;
    return;
  }
  __syncthreads();
  int r2 = blockIdx.x * 8 + y, c2 = blockIdx.y * 8 + x;
  out(r2, c2) = tile[x][y];
}
)";
  auto k = cpu_backend().compile(
      kernel("transpose_tile", src,
             {array_param("in", 2, DType::f32, true), array_param("out", 2, DType::f32),
              array_param("early", 1, DType::i32)}));
  const int n = 24;  // 3x3 blocks of 8x8
  auto g = rng(6);
  std::vector<float> in = random_vector<float>(n * n, g), out(n * n, poison<float>());
  std::vector<int> early(9, 0);
  LaunchDesc d(3, {0, 0, 0}, {3, 3, 1}, {8, 8, 1}, {3, 3, 1});
  d.arrays[0] = chunk_arg(in.data(), 2, {0, 0, 0}, {n, n, 1}, 4, GS_READ);
  d.arrays[1] = chunk_arg(out.data(), 2, {0, 0, 0}, {n, n, 1}, 4, GS_WRITE);
  d.arrays[2] = chunk_arg(early.data(), 1, {0, 0, 0}, {9, 1, 1}, 4, GS_WRITE);
  k->run(d.get(), any_device());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      if (r % 8 == 7 && c % 8 == 7)
        EXPECT_TRUE(std::isnan(out[r * n + c]));
      else
        EXPECT_EQ(out[r * n + c], in[c * n + r]) << r << "," << c;
    }
  EXPECT_EQ(early, std::vector<int>(9, 1));
}

// atomicAdd (float, int), atomicMax (float) and atomic-mode reduce() from many threads of
// concurrent superblocks, all combining into one shared buffer.
TEST(CpuKernel, AtomicsFromConcurrentSuperblocks) {
  const char* src = R"(
__device__ void atomics(dim3 blockIdx, const gridspan::Vector<float> x, const gridspan::Vector<int> v,
                        gridspan::Scalar<float> fsum, gridspan::Scalar<int> isum,
                        gridspan::Scalar<float> fmax, gridspan::Vector<unsigned long long> hist) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&fsum(), x[i]);
  atomicAdd(&isum(), v[i]);
  atomicMax(&fmax(), x[i]);
  hist.reduce(v[i] % 4, 1ull);
}
)";
  auto k = cpu_backend().compile(
      kernel("atomics", src,
             {array_param("x", 1, DType::f32, true), array_param("v", 1, DType::i32, true),
              array_param("fsum", 0, DType::f32), array_param("isum", 0, DType::i32),
              array_param("fmax", 0, DType::f32), array_param("hist", 1, DType::u64)}));
  const int blocks = 256, threads = 64, n = blocks * threads;
  auto g = rng(7);
  std::vector<int> v = random_vector<int>(n, g);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float(v[i] - 50);  // integers: float sums stay exact
  float fsum = 0, fmax = -INFINITY;
  int isum = 0;
  std::vector<unsigned long long> hist(4, 0);
  std::vector<std::unique_ptr<LaunchDesc>> descs;
  std::vector<std::promise<void>> finished(32);
  auto devices = cpu_backend().devices();
  for (int sb = 0; sb < 32; ++sb) {
    auto d = std::make_unique<LaunchDesc>(6, Box{sb * 8, 0, 0}, Box{sb * 8 + 8, 1, 1},
                                          std::array<uint32_t, 3>{threads, 1, 1},
                                          std::array<uint32_t, 3>{blocks, 1, 1});
    d->arrays[0] = chunk_arg(x.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_READ);
    d->arrays[1] = chunk_arg(v.data(), 1, {0, 0, 0}, {n, 1, 1}, 4, GS_READ);
    d->arrays[2] = chunk_arg(&fsum, 0, {0, 0, 0}, {1, 1, 1}, 4, GS_ATOMIC, GS_ADD);
    d->arrays[3] = chunk_arg(&isum, 0, {0, 0, 0}, {1, 1, 1}, 4, GS_ATOMIC, GS_ADD);
    d->arrays[4] = chunk_arg(&fmax, 0, {0, 0, 0}, {1, 1, 1}, 4, GS_ATOMIC, GS_MAX);
    d->arrays[5] = chunk_arg(hist.data(), 1, {0, 0, 0}, {4, 1, 1}, 8, GS_ATOMIC, GS_ADD);
    LaunchDesc* dp = d.get();
    descs.push_back(std::move(d));
    run_on(*devices[sb % devices.size()], *k, *dp, finished[sb]);
  }
  for (auto& f : finished) f.get_future().get();
  double expect_f = 0;
  long long expect_i = 0;
  float expect_max = -INFINITY;
  std::vector<unsigned long long> expect_hist(4, 0);
  for (int i = 0; i < n; ++i) {
    expect_f += x[i];
    expect_i += v[i];
    expect_max = std::max(expect_max, x[i]);
    ++expect_hist[v[i] % 4];
  }
  EXPECT_EQ(fsum, float(expect_f));
  EXPECT_EQ(isum, expect_i);
  EXPECT_EQ(fmax, expect_max);
  EXPECT_EQ(hist, expect_hist);
}

const char* kOutOfRegionSource = R"(
__device__ void shifty(dim3 blockIdx, int read_shift, int write_shift,
                       gridspan::Vector<float> out, const gridspan::Vector<float> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i + write_shift] = in[i + read_shift];
}
)";

std::vector<ParamInfo> shifty_params() {
  return {scalar_param("read_shift", DType::i32), scalar_param("write_shift", DType::i32),
          array_param("out", 1, DType::f32), array_param("in", 1, DType::f32, true)};
}

struct ShiftyRun {
  std::vector<float> in, out;
  GsCheckState check{};
};

// Superblock [1, 3) of 32-thread blocks: elements [32, 96); chunks hold [0, 128) and the
// declared regions are exactly [32, 96).
ShiftyRun run_shifty(const backend::CompiledKernel& k, int read_shift, int write_shift) {
  ShiftyRun r;
  auto g = rng(8);
  r.in = random_vector<float>(128, g);
  r.out.assign(128, poison<float>());
  LaunchDesc d(4, {1, 0, 0}, {3, 1, 1}, {32, 1, 1}, {4, 1, 1});
  d.scalars[0] = &read_shift;
  d.scalars[1] = &write_shift;
  d.arrays[2] =
      array_arg(r.out.data(), 1, {0, 0, 0}, {128, 1, 1}, {32, 0, 0}, {96, 1, 1}, 4, GS_WRITE);
  d.arrays[3] =
      array_arg(r.in.data(), 1, {0, 0, 0}, {128, 1, 1}, {32, 0, 0}, {96, 1, 1}, 4, GS_READ);
  // On a thread of its own, as kernels run on executor threads in gridspan: LeakSanitizer
  // (GCC 12) crashes scanning the main thread's dynamic TLS of dlopen'ed kernel libraries.
  std::thread([&] { k.run(d.get(&r.check), any_device()); }).join();
  return r;
}

TEST(CpuKernel, CheckedModeCatchesOutOfRegionReadAndWrite) {
  auto unchecked = cpu_backend().compile(kernel("shifty", kOutOfRegionSource, shifty_params()));
  auto checked = cpu_backend().compile(kernel("shifty", kOutOfRegionSource, shifty_params(), true));
  ASSERT_NE(unchecked.get(), checked.get());

  // In-region accesses: no violation either way.
  for (auto* k : {unchecked.get(), checked.get()}) {
    ShiftyRun r = run_shifty(*k, 0, 0);
    EXPECT_EQ(r.check.violated, 0);
    for (int i = 32; i < 96; ++i) EXPECT_EQ(r.out[i], r.in[i]);
  }

  // Reading one past the region: the unchecked build reads the chunk's element 96 and
  // reports nothing; the checked build reports `in` (parameter 3) at index 96.
  ShiftyRun u = run_shifty(*unchecked, 1, 0);
  EXPECT_EQ(u.check.violated, 0);
  EXPECT_EQ(u.out[95], u.in[96]);
  ShiftyRun c = run_shifty(*checked, 1, 0);
  EXPECT_EQ(c.check.violated, 1);
  EXPECT_EQ(c.check.param, 3);
  EXPECT_EQ(c.check.index[0], 96);
  for (int i = 32; i < 95; ++i) EXPECT_EQ(c.out[i], c.in[i + 1]);

  // Writing before the region: the checked build reports `out` (parameter 2) at 31 and
  // leaves element 31 untouched; the unchecked build writes it.
  u = run_shifty(*unchecked, 0, -1);
  EXPECT_EQ(u.check.violated, 0);
  EXPECT_EQ(u.out[31], u.in[32]);
  c = run_shifty(*checked, 0, -1);
  EXPECT_EQ(c.check.violated, 1);
  EXPECT_EQ(c.check.param, 2);
  EXPECT_EQ(c.check.index[0], 31);
  EXPECT_TRUE(std::isnan(c.out[31]));
  for (int i = 32; i < 95; ++i) EXPECT_EQ(c.out[i], c.in[i + 1]);
}

TEST(CpuKernel, CheckedModeReportsMatrixIndicesThroughRowProxies) {
  const char* src = R"(
__device__ void rowp(dim3 blockIdx, gridspan::Matrix<int> m) {
  int j = threadIdx.x, i = blockIdx.x;
  m[i][j + 1] = 7;
}
)";
  auto k = cpu_backend().compile(kernel("rowp", src, {array_param("m", 2, DType::i32)}, true));
  std::vector<int> m(4 * 5, poison<int>());
  GsCheckState check{};
  LaunchDesc d(1, {0, 0, 0}, {4, 1, 1}, {4, 1, 1}, {4, 1, 1});
  d.arrays[0] = array_arg(m.data(), 2, {0, 0, 0}, {4, 5, 1}, {0, 0, 0}, {4, 4, 1}, 4, GS_WRITE);
  k->run(d.get(&check), any_device());
  EXPECT_EQ(check.violated, 1);
  EXPECT_EQ(check.param, 0);
  EXPECT_EQ(check.index[0], 0);
  EXPECT_EQ(check.index[1], 4);
  for (int i = 0; i < 4; ++i) {
    for (int j = 1; j < 4; ++j) EXPECT_EQ(m[i * 5 + j], 7);
    EXPECT_EQ(m[i * 5 + 4], poison<int>());
  }
}

TEST(CpuKernel, CompileErrorNamesTheUsersLine) {
  const char* src =
      "// line 1\n"
      "__device__ void broken(dim3 blockIdx, gridspan::Vector<float> out) {\n"
      "  int i = blockIdx.x;\n"
      "  out[i] = undefined_thing + 1;\n"
      "}\n";
  try {
    cpu_backend().compile(kernel("broken", src, {array_param("out", 1, DType::f32)}));
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("broken.cu:4:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undefined_thing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kernel `broken`"), std::string::npos) << msg;
  }
}

TEST(CpuKernel, WritingAConstViewDoesNotCompile) {
  const char* src =
      "__device__ void wc(dim3 blockIdx, const gridspan::Vector<float> in) {\n"
      "  in[blockIdx.x] = 1.0f;\n"
      "}\n";
  try {
    cpu_backend().compile(kernel("wc", src, {array_param("in", 1, DType::f32, true)}));
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("wc.cu:2:"), std::string::npos) << e.what();
  }
}

TEST(CpuKernel, ASignatureThatDoesNotMatchTheParametersIsExplained) {
  const char* src = "__device__ void sig(dim3 blockIdx, gridspan::Vector<float> out) {}\n";
  try {
    cpu_backend().compile(kernel("sig", src, {array_param("out", 1, DType::i32)}));
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("signature does not take what gridspan passes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sig(dim3 blockIdx, gridspan::Vector<int32_t> out)"), std::string::npos)
        << msg;
  }
}

TEST(CpuKernel, WarpIntrinsicsAreRejectedWithAClearMessage) {
  const char* src =
      "__device__ void warp(dim3 blockIdx, gridspan::Vector<float> out) {\n"
      "  // __shfl_down_sync in a comment is fine\n"
      "  float v = out[threadIdx.x];\n"
      "  v += __shfl_down_sync(0xffffffff, v, 16);\n"
      "  out[threadIdx.x] = v;\n"
      "}\n";
  const long before = backend::cpu::detail::compiler_invocations();
  try {
    cpu_backend().compile(kernel("warp", src, {array_param("out", 1, DType::f32)}));
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("warp.cu:4:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("__shfl_down_sync"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
  }
  EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before);  // rejected before compiling
}

TEST(CpuKernel, BarrierScanIgnoresCommentsAndStrings) {
  EXPECT_FALSE(backend::cpu::uses_barrier("// __syncthreads();\n/* __syncthreads() */ x;"));
  EXPECT_FALSE(backend::cpu::uses_barrier("const char* s = \"__syncthreads()\";"));
  EXPECT_FALSE(backend::cpu::uses_barrier("__syncthreads_x(); my__syncthreads();"));
  EXPECT_TRUE(backend::cpu::uses_barrier("if (a) { __syncthreads(); }"));
}

// A fresh cache folder: the first compile runs the compiler, the same source again (same or
// new backend) does not, and a different define or checked flag is a different kernel.
TEST(CpuKernel, CacheHitsSkipTheCompilerAndDefinesMakeNewKernels) {
  char dir_template[] = "/tmp/gridspan-cache-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  Config config = backend_test_config();
  config.cache_dir = dir;
  const char* src = R"(
__device__ void scaled(dim3 blockIdx, gridspan::Vector<int> out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = FACTOR * int(threadIdx.x);
}
)";
  KernelSource ks = kernel("scaled", src, {array_param("out", 1, DType::i32)});
  ks.defines["FACTOR"] = 3;
  auto run = [](const backend::CompiledKernel& k) {
    std::vector<int> out(8, poison<int>());
    LaunchDesc d(1, {0, 0, 0}, {1, 1, 1}, {8, 1, 1}, {1, 1, 1});
    d.arrays[0] = chunk_arg(out.data(), 1, {0, 0, 0}, {8, 1, 1}, 4, GS_WRITE);
    k.run(d.get(), any_device());
    return out[5];
  };
  {
    auto b = backend::make_cpu_backend(config);
    const long before = backend::cpu::detail::compiler_invocations();
    auto k1 = b->compile(ks);
    EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before + 1);
    auto k2 = b->compile(ks);
    EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before + 1);
    EXPECT_EQ(k1.get(), k2.get());  // the in-memory cache
    EXPECT_EQ(run(*k1), 15);
  }
  {
    auto b = backend::make_cpu_backend(config);  // a new process would see the same
    const long before = backend::cpu::detail::compiler_invocations();
    auto k = b->compile(ks);
    EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before);  // the disk cache
    EXPECT_EQ(run(*k), 15);
    ks.defines["FACTOR"] = 4;
    auto k4 = b->compile(ks);
    EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before + 1);
    EXPECT_EQ(run(*k4), 20);
    ks.checked = true;
    auto kc = b->compile(ks);
    EXPECT_EQ(backend::cpu::detail::compiler_invocations(), before + 2);
    EXPECT_EQ(run(*kc), 20);
  }
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(CpuKernel, KernelsUseTheEmbeddedHeadersFromTheCacheFolder) {
  KernelSource ks = kernel("noop", "__device__ void noop(dim3 blockIdx) {}\n", {});
  std::string wrapper = backend::cpu::generate_wrapper(ks);
  EXPECT_NE(wrapper.find("#include <gridspan/device/kernel.hpp>"), std::string::npos);
  EXPECT_NE(wrapper.find("#line 1 \"noop.cu\""), std::string::npos);
  auto k = cpu_backend().compile(ks);
  LaunchDesc d(0, {0, 0, 0}, {3, 2, 1}, {2, 2, 2}, {3, 2, 1});
  k->run(d.get(), any_device());  // runs 48 empty threads
}

}  // namespace
}  // namespace gridspan::test

namespace gridspan::test {
namespace {

// An access far outside its arrays in an unchecked kernel on a cpu device ends the process
// with the signal, as on a GPU it would end the context; before it does, gridspan says which
// kernel and superblock were running and that checked mode finds the access.
TEST(CpuKernelDeathTest, AStrayAccessNamesTheKernelAndSuperblock) {
#if GRIDSPAN_SANITIZE
  GTEST_SKIP() << "AddressSanitizer reports the access itself";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* src = R"(
__device__ void stray(dim3 blockIdx, gridspan::Vector<int> x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 70) x[i + 40000000000ll] = 1;
  else x[i] = i;
}
)";
  auto run_stray = [&] {
    auto k = cpu_backend().compile(kernel("stray", src, {array_param("x", 1, DType::i32)}));
    std::vector<int> chunk(128, poison<int>());
    LaunchDesc d(1, {2, 0, 0}, {4, 1, 1}, {32, 1, 1}, {4, 1, 1});
    d.arrays[0] = chunk_arg(chunk.data(), 1, {0, 0, 0}, {128, 1, 1}, 4, GS_WRITE);
    k->run(d.get(), any_device());
  };
  EXPECT_DEATH(run_stray(),
               "gridspan: a segmentation fault in kernel `stray` on cpu:0, in the superblock of "
               "blocks \\[2\\.\\.4\\).*GRIDSPAN_CHECK=1");
}

}  // namespace
}  // namespace gridspan::test
