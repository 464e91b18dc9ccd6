// The cuda backend's compiler, which needs NVRTC but no GPU: the built-in kernels and user
// wrappers compile to sm_90 cubins, NVRTC errors point at the user's lines, and the disk
// cache serves a second compilation. Skipped where NVRTC is not installed.
#ifdef GRIDSPAN_HAVE_CUDA
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "backend/cuda/cuda.hpp"
#include "backend/cuda/loader.hpp"
#include "backend/kernel_support.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::test {
namespace {

using backend::KernelSource;
namespace cuda = backend::cuda;

// What a driver entry point that cuda.h renames looks like (cuMemAlloc is cuMemAlloc_v2).
CUresult gs_test_renamed_v2(const cuda::CuCall& c) {
  return c.result;
}

// Every CUDA check goes through one funnel: the message names the call as written, the
// device, CUDA's error (its name where a driver is loaded, its number otherwise) and the
// call's file and line.
TEST(CudaCheck, AFailedCallNamesItselfItsPlaceAndTheError) {
  const CUresult invalid = CUDA_ERROR_INVALID_VALUE;
  const int line = __LINE__ + 2;
  try {
    GRIDSPAN_CHECK_CU(invalid, "cuda:7 (test)");
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("invalid failed on cuda:7 (test): ", 0), 0u) << m;
    EXPECT_TRUE(m.find("CUDA_ERROR_INVALID_VALUE") != std::string::npos ||
                m.find("CUDA error 1:") != std::string::npos)
        << m;
    EXPECT_NE(m.find("cuda_compile_test.cpp:" + std::to_string(line) + ")"), std::string::npos)
        << m;
  }
  EXPECT_NO_THROW(GRIDSPAN_CHECK_CU(CUDA_SUCCESS, "cuda:7 (test)"));
  // The call as written, not as cuda.h's macros make it (cuMemAlloc is cuMemAlloc_v2).
  try {
    const cuda::CuCall failed{CUDA_ERROR_INVALID_VALUE, "x", __FILE__, __LINE__};
#define gs_test_renamed gs_test_renamed_v2
    GRIDSPAN_CHECK_CU(gs_test_renamed(failed), "cuda:7 (test)");
#undef gs_test_renamed
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("gs_test_renamed(failed) failed", 0), 0u) << e.what();
  }
  const cuda::CuCall ok = GRIDSPAN_CU(CUDA_SUCCESS);
  EXPECT_TRUE(ok.ok());
}

// A cubin is an ELF file.
bool is_elf(const std::string& image) {
  return image.size() > 64 && image.compare(0, 4,
                                            "\x7f"
                                            "ELF") == 0;
}

std::string fresh_cache(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("gridspan-cuda-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

KernelSource saxpy(bool checked = false) {
  KernelSource k;
  k.name = "saxpy";
  k.file = "saxpy.cu";
  k.source = R"(
__device__ void saxpy(dim3 blockIdx, float a, gridspan::Vector<float> y,
                      const gridspan::Vector<float> x, gridspan::Scalar<__half> h) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
  __shared__ float tile[32];
  tile[threadIdx.x % 32] = y[i];
  __syncthreads();
  (void)h;
}
)";
  k.params = {scalar_param("a", DType::f32), array_param("y", 1, DType::f32),
              array_param("x", 1, DType::f32, true), array_param("h", 0, DType::f16)};
  k.checked = checked;
  return k;
}

TEST(CudaCompile, BuiltinsAndWrappersCompileToSm90Cubins) {
  const std::string cache = fresh_cache("ok");
  try {
    EXPECT_TRUE(is_elf(cuda::builtin_cubin(90, cache)));
  } catch (const CompileError& e) {
    if (std::string(e.what()).find("NVRTC could not be loaded") != std::string::npos)
      GTEST_SKIP() << e.what();
    throw;
  }
  EXPECT_TRUE(is_elf(cuda::compile_cubin(saxpy(), 90, cache)));
  EXPECT_TRUE(is_elf(cuda::compile_cubin(saxpy(true), 90, cache)));
  // The second time comes from the disk cache: NVRTC does not run.
  const long before = cuda::detail::nvrtc_invocations();
  EXPECT_TRUE(is_elf(cuda::compile_cubin(saxpy(), 90, cache)));
  EXPECT_EQ(cuda::detail::nvrtc_invocations(), before);
  std::filesystem::remove_all(cache);
}

// A wrapper has a parts entry (several superblocks in one launch) when its table of at
// least two parts fits the 4 KiB of parameters: up to eight parts, fewer for many arrays,
// none for a kernel without arrays or with too many.
TEST(CudaCompile, WrappersHaveAPartsEntryWhenItsTableFits) {
  EXPECT_EQ(cuda::parts_capacity(saxpy().params), 8);
  std::vector<ParamInfo> params;
  for (int k = 0; k < 6; ++k) params.push_back(array_param("a" + std::to_string(k), 1, DType::f32));
  EXPECT_EQ(cuda::parts_capacity(params), 5);  // (4096 - 24) / (8 + 72 + 6 * 120)
  for (int k = 6; k < 20; ++k)
    params.push_back(array_param("a" + std::to_string(k), 1, DType::f32));
  EXPECT_EQ(cuda::parts_capacity(params), 0);
  EXPECT_EQ(cuda::parts_capacity({scalar_param("n", DType::i32)}), 0);
  KernelSource none = saxpy();
  none.params = params;
  EXPECT_EQ(cuda::generate_wrapper(none).find(GRIDSPAN_CUDA_PARTS_ENTRY_NAME), std::string::npos);
  const std::string cache = fresh_cache("parts");
  std::string cubin;
  try {
    cubin = cuda::compile_cubin(saxpy(), 90, cache);
  } catch (const CompileError& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_NE(cubin.find(std::string(GRIDSPAN_CUDA_PARTS_ENTRY_NAME) + '\0'), std::string::npos);
  std::filesystem::remove_all(cache);
}

// Every wrapper has an entry for a superblock at the grid's origin, which passes the block
// index on without adding an offset; the general entry adds it.
TEST(CudaCompile, WrappersHaveAnEntryWithoutBlockOffsets) {
  const std::string w = cuda::generate_wrapper(saxpy());
  const auto origin = w.find(GRIDSPAN_CUDA_ORIGIN_ENTRY_NAME);
  ASSERT_NE(origin, std::string::npos);
  const std::string body = w.substr(origin, w.find("\n}\n", origin) - origin);
  EXPECT_EQ(body.find("block_lo"), std::string::npos) << body;
  const auto general = w.find(std::string(GRIDSPAN_CUDA_ENTRY_NAME) + "(");
  ASSERT_NE(general, std::string::npos);
  EXPECT_NE(w.substr(general, origin - general).find("gs_h.block_lo[0] + blockIdx.x"),
            std::string::npos);
}

// The device looks built-in kernels up by name (gs_combine_<dtype_name>_<op>, gs_fill_<bytes>,
// gs_copy_<bytes>): every name it can ask for is in the cubin.
TEST(CudaCompile, BuiltinsHaveEveryKernelTheDeviceLooksUp) {
  const std::string cache = fresh_cache("names");
  std::string cubin;
  try {
    cubin = cuda::builtin_cubin(90, cache);
  } catch (const CompileError& e) {
    GTEST_SKIP() << e.what();
  }
  auto has = [&](const std::string& name) { return cubin.find(name + '\0') != std::string::npos; };
  for (DType t : {DType::i8, DType::i16, DType::i32, DType::i64, DType::u8, DType::u16, DType::u32,
                  DType::u64, DType::f16, DType::bf16, DType::f32, DType::f64}) {
    std::vector<std::string> ops = {"add", "mul", "min", "max"};
    if (!dtype_is_float(t)) ops.insert(ops.end(), {"and", "or"});
    for (const auto& op : ops)
      EXPECT_TRUE(has("gs_combine_" + dtype_name(t) + "_" + op)) << dtype_name(t) << " " << op;
  }
  for (int bytes : {1, 2, 4, 8, 16}) {
    EXPECT_TRUE(has("gs_fill_" + std::to_string(bytes))) << bytes;
    EXPECT_TRUE(has("gs_copy_" + std::to_string(bytes))) << bytes;
  }
  for (DType t : {DType::f16, DType::bf16})
    EXPECT_TRUE(has("gs_narrow_" + dtype_name(t))) << dtype_name(t);
  std::filesystem::remove_all(cache);
}

// Reductions of float16 and bfloat16, which views combine into float32 partials (atomicAdd
// on floats) or, for min and max, into 16-bit ones, compile plain and checked.
TEST(CudaCompile, SixteenBitReductionsCompile) {
  const std::string cache = fresh_cache("half");
  KernelSource k;
  k.name = "sums";
  k.file = "sums.cu";
  k.source = R"(
__device__ void sums(dim3 blockIdx, gridspan::Scalar<__half> h,
                     gridspan::Vector<__nv_bfloat16> b) {
  h.reduce(__float2half(1.0f));
  b.reduce(threadIdx.x, __float2bfloat16(0.5f));
}
)";
  k.params = {array_param("h", 0, DType::f16), array_param("b", 1, DType::bf16)};
  for (bool checked : {false, true}) {
    k.checked = checked;
    try {
      EXPECT_TRUE(is_elf(cuda::compile_cubin(k, 90, cache))) << "checked " << checked;
    } catch (const CompileError& e) {
      if (std::string(e.what()).find("NVRTC could not be loaded") != std::string::npos)
        GTEST_SKIP() << e.what();
      throw;
    }
  }
  std::filesystem::remove_all(cache);
}

TEST(CudaCompile, ErrorsPointAtTheUsersLines) {
  const std::string cache = fresh_cache("error");
  KernelSource k = saxpy();
  k.source =
      "\n__device__ void saxpy(dim3 blockIdx, float a, gridspan::Vector<float> y,\n"
      "    const gridspan::Vector<float> x, gridspan::Scalar<__half> h) {\n"
      "  y[0] = undefined_name;\n}\n";
  try {
    cuda::compile_cubin(k, 90, cache);
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    const std::string m = e.what();
    if (m.find("NVRTC could not be loaded") != std::string::npos) GTEST_SKIP() << m;
    EXPECT_NE(m.find("saxpy.cu(4)"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_name"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda backend"), std::string::npos) << m;
  }
  // A signature that does not take what gridspan passes gets the signature advice.
  k.source = "__device__ void saxpy(dim3 blockIdx, int* wrong) {}\n";
  try {
    cuda::compile_cubin(k, 90, cache);
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("does not take what gridspan passes"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(cache);
}

// <gridspan/device/elementwise.hpp> compiles under NVRTC (no standard headers, int64_t is
// long long): every one of its functions for every kind of type it takes.
TEST(CudaCompile, ElementwiseMathCompilesForEveryType) {
  KernelSource k;
  k.name = "ew_all";
  k.file = "ew_all.cu";
  k.source = R"(
#include <gridspan/device/elementwise.hpp>
namespace ew = gridspan::ew;
template <class T>
__device__ T ew_floats(T x, T y, T z) {
  return ew::exp(x) + ew::log(x) + ew::log1p(x) + ew::expm1(x) + ew::sqrt(x) + ew::rsqrt(x) +
         ew::sin(x) + ew::cos(x) + ew::tan(x) + ew::tanh(x) + ew::arcsin(x) + ew::arccos(x) +
         ew::arctan(x) + ew::sinh(x) + ew::cosh(x) + ew::erf(x) + ew::floor(x) + ew::ceil(x) +
         ew::rint(x) + ew::round(x) + ew::abs(x) + ew::sign(x) + ew::pow(x, y) +
         ew::atan2(x, y) + ew::hypot(x, y) + ew::maximum(x, y) + ew::minimum(x, y) +
         ew::clip(x, y, z) + ew::remainder(x, y) + ew::floor_divide(x, y) + T(ew::isnan(x)) +
         T(ew::isinf(y)) + T(ew::isfinite(z)) + ew::gelu(x) + ew::gelu_tanh(x) + ew::silu(x) +
         ew::sigmoid(x) + ew::softplus(x);
}
template <class T>
__device__ T ew_integers(T x, T y, T z) {
  return T(ew::abs(x) ^ ew::sign(x) ^ ew::pow(x, y) ^ ew::maximum(x, y) ^ ew::minimum(x, y) ^
           ew::clip(x, y, z) ^ ew::remainder(x, y) ^ ew::floor_divide(x, y) ^ ew::isnan(x) ^
           ew::isinf(y) ^ ew::isfinite(z));
}
__device__ bool ew_bools(bool x, bool y, bool z) {
  return ew::abs(x) ^ ew::sign(x) ^ ew::maximum(x, y) ^ ew::minimum(x, y) ^ ew::clip(x, y, z) ^
         ew::isnan(x) ^ ew::isinf(y) ^ ew::isfinite(z);
}
__device__ void ew_all(dim3 blockIdx, gridspan::Vector<float> f, gridspan::Vector<double> d,
                       gridspan::Vector<int8_t> i8, gridspan::Vector<int32_t> i32,
                       gridspan::Vector<int64_t> i64, gridspan::Vector<uint8_t> u8,
                       gridspan::Vector<uint64_t> u64, gridspan::Vector<bool> b) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  f[i] = ew_floats(f[i], f[i + 1], f[i + 2]);
  d[i] = ew_floats(d[i], d[i + 1], d[i + 2]);
  i8[i] = ew_integers(i8[i], i8[i + 1], i8[i + 2]);
  i32[i] = ew_integers(i32[i], i32[i + 1], i32[i + 2]);
  i64[i] = ew_integers(i64[i], i64[i + 1], i64[i + 2]);
  u8[i] = ew_integers(u8[i], u8[i + 1], u8[i + 2]);
  u64[i] = ew_integers(u64[i], u64[i + 1], u64[i + 2]);
  b[i] = ew_bools(b[i], b[i + 1], b[i + 2]);
}
)";
  k.params = {array_param("f", 1, DType::f32),   array_param("d", 1, DType::f64),
              array_param("i8", 1, DType::i8),   array_param("i32", 1, DType::i32),
              array_param("i64", 1, DType::i64), array_param("u8", 1, DType::u8),
              array_param("u64", 1, DType::u64), array_param("b", 1, DType::boolean)};
  const std::string cache = fresh_cache("elementwise");
  try {
    EXPECT_TRUE(is_elf(cuda::compile_cubin(k, 90, cache)));
  } catch (const CompileError& e) {
    std::filesystem::remove_all(cache);
    if (std::string(e.what()).find("NVRTC could not be loaded") != std::string::npos)
      GTEST_SKIP() << e.what();
    FAIL() << e.what();
  }
  std::filesystem::remove_all(cache);
}

TEST(CudaCompile, WrapperPassesTheWholeLaunchGridAndVirtualBlockIndices) {
  const std::string w = cuda::generate_wrapper(saxpy());
  EXPECT_NE(w.find("#define gridDim (::gridspan::cuda_detail::grid_dim)"), std::string::npos);
  EXPECT_NE(w.find("#line 1 \"saxpy.cu\""), std::string::npos);
  EXPECT_NE(w.find("gs_h.block_lo[0] + gs_x"), std::string::npos);
  EXPECT_NE(w.find("GsArrayArg gs_p1"), std::string::npos);
  EXPECT_NE(w.find("float gs_p0"), std::string::npos);
}

}  // namespace
}  // namespace gridspan::test
#endif
