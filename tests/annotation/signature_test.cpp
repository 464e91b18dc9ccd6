// Reading a kernel's parameters from its `__device__ void f(dim3, ...)` signature: every
// accepted spelling, and each error with its line number and caret.
#include <gtest/gtest.h>

#include "annotation/signature.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::annotation {
namespace {

TEST(Signature, StencilFromTheDesign) {
  const std::string src = R"(// stencil.cu
__device__ void stencil(dim3 blockIdx, int n, gridspan::Vector<float> out,
                        const gridspan::Vector<float> in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = in[i - 1] + in[i] + in[i + 1];
}
)";
  auto p = parse_signature(src, "stencil");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "n");
  EXPECT_FALSE(p[0].is_array);
  EXPECT_EQ(p[0].dtype, DType::i32);
  EXPECT_EQ(p[0].type_text, "int");
  EXPECT_EQ(p[1].name, "out");
  EXPECT_TRUE(p[1].is_array);
  EXPECT_EQ(p[1].rank, 1);
  EXPECT_FALSE(p[1].is_const);
  EXPECT_EQ(p[1].dtype, DType::f32);
  EXPECT_EQ(p[1].type_text, "gridspan::Vector<float>");
  EXPECT_EQ(p[2].name, "in");
  EXPECT_TRUE(p[2].is_const);
  EXPECT_EQ(p[2].type_text, "const gridspan::Vector<float>");
}

TEST(Signature, EveryParameterForm) {
  struct Case {
    std::string decl;
    bool is_array;
    int rank;
    bool is_const;
    DType dtype;
    std::string type_text;
  };
  const std::vector<Case> cases = {
      {"gridspan::Vector<float> x", true, 1, false, DType::f32, "gridspan::Vector<float>"},
      {"Vector<float> x", true, 1, false, DType::f32, "Vector<float>"},
      {"const gridspan::Matrix<double> x", true, 2, true, DType::f64,
       "const gridspan::Matrix<double>"},
      {"gridspan::Tensor<int> const x", true, 3, true, DType::i32, "gridspan::Tensor<int> const"},
      {"gridspan::Scalar<int64_t> x", true, 0, false, DType::i64, "gridspan::Scalar<int64_t>"},
      {"Scalar<unsigned long long> x", true, 0, false, DType::u64, "Scalar<unsigned long long>"},
      {"gs::Vector<uint8_t> x", true, 1, false, DType::u8, "gs::Vector<uint8_t>"},
      {"gridspan::Vector<const float> x", true, 1, true, DType::f32,
       "gridspan::Vector<const float>"},
      {"gridspan::Vector<__half> x", true, 1, false, DType::f16, "gridspan::Vector<__half>"},
      {"gridspan :: Matrix < std::int16_t > x", true, 2, false, DType::i16,
       "gridspan :: Matrix < std::int16_t >"},
      {"int x", false, 0, false, DType::i32, "int"},
      {"float x", false, 0, false, DType::f32, "float"},
      {"double x", false, 0, false, DType::f64, "double"},
      {"long long x", false, 0, false, DType::i64, "long long"},
      {"int64_t x", false, 0, false, DType::i64, "int64_t"},
      {"std::int64_t x", false, 0, false, DType::i64, "std::int64_t"},
      {"unsigned x", false, 0, false, DType::u32, "unsigned"},
      {"unsigned int x", false, 0, false, DType::u32, "unsigned int"},
      {"uint32_t x", false, 0, false, DType::u32, "uint32_t"},
      {"size_t x", false, 0, false, DType::u64, "size_t"},
      {"bool x", false, 0, false, DType::boolean, "bool"},
      {"const int x", false, 0, true, DType::i32, "const int"},
      {"int x = 4", false, 0, false, DType::i32, "int"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.decl);
    auto p = parse_signature("__device__ void k(dim3 b, " + c.decl + ") {}", "k");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].name, "x");
    EXPECT_EQ(p[0].is_array, c.is_array);
    EXPECT_EQ(p[0].rank, c.rank);
    EXPECT_EQ(p[0].is_const, c.is_const);
    EXPECT_EQ(p[0].dtype, c.dtype);
    EXPECT_EQ(p[0].type_text, c.type_text);
  }
}

TEST(Signature, SpecifiersCommentsAndOtherFunctions) {
  const std::vector<std::string> heads = {
      "__device__ void k(",          "__device__ __forceinline__ void k(",
      "static __device__ void k(",   "static inline __device__ void k(",
      "__host__ __device__ void k(", "__device__\nvoid\nk\n(",
  };
  for (const auto& head : heads) {
    SCOPED_TRACE(head);
    auto p = parse_signature(head + "dim3 blockIdx, int n) { }", "k");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].name, "n");
  }

  // Comments, strings, directives, a prototype, helpers and a call all around the kernel.
  const std::string src = R"src(#include <gridspan/device.hpp>
#define CALL_K k(blockIdx, 1, x)
// __device__ void k(int wrong)
/* __device__ void k(float* wrong) */
const char* note = "__device__ void k(double wrong)";
__device__ void k(dim3 blockIdx, int n, gridspan::Vector<float> x);
__device__ float helper(float v) { return v * 2; }
__device__ void caller(dim3 b, gridspan::Vector<float> x) { k(b, 3, x); }
__device__ /* qualifiers */ void
k(  // the block index
    dim3 b,
    /* float* skipped, */ unsigned n,  // count
    gridspan::Matrix<double> const
        x) {
  char c = ')';
}
)src";
  auto p = parse_signature(src, "k");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "n");
  EXPECT_EQ(p[0].dtype, DType::u32);  // the definition wins over the prototype
  EXPECT_EQ(p[1].name, "x");
  EXPECT_EQ(p[1].rank, 2);
  EXPECT_TRUE(p[1].is_const);
  EXPECT_EQ(p[1].type_text, "gridspan::Matrix<double> const");

  auto only_prototype = parse_signature("__device__ void f(dim3 b, bool flag);", "f");
  ASSERT_EQ(only_prototype.size(), 1u);
  EXPECT_EQ(only_prototype[0].dtype, DType::boolean);
  EXPECT_TRUE(parse_signature("__device__ void f(const dim3 b) {}", "f").empty());
  EXPECT_TRUE(parse_signature("__device__ void f(dim3) {}", "f").empty());
}

// The CompileError's message for `src`; fails the test when there is none.
std::string signature_error(const std::string& src, const std::string& function) {
  try {
    parse_signature(src, function);
  } catch (const CompileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CompileError for:\n" << src;
  return "";
}

TEST(Signature, ErrorsQuoteTheLineWithACaret) {
  struct Case {
    std::string src;
    std::string line;    // the quoted source line
    std::string marker;  // the caret goes under its first occurrence in `line`
    int line_number;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"__device__ void k(dim3 b, float* x) {}", "__device__ void k(dim3 b, float* x) {}", "*", 1,
       "pointer parameters are not supported; pass arrays as gridspan::Vector<T> views"},
      {"\n\n__device__ void k(dim3 b,\n    const float *x) {}", "    const float *x) {}", "*", 4,
       "pointer parameters are not supported"},
      {"__device__ void k(dim3 b, int& n) {}", "__device__ void k(dim3 b, int& n) {}", "&", 1,
       "reference parameters are not supported"},
      {"__device__ void k(dim3 b, const gridspan::Vector<float>& v) {}",
       "__device__ void k(dim3 b, const gridspan::Vector<float>& v) {}", "&", 1,
       "reference parameters are not supported"},
      {"__device__ void k(dim3 b, float v[]) {}", "__device__ void k(dim3 b, float v[]) {}", "[", 1,
       "pass arrays as gridspan::Vector<T> views"},
      {"__device__ void k(int n, dim3 b) {}", "__device__ void k(int n, dim3 b) {}", "int", 1,
       "the first parameter of `k` must be `dim3 blockIdx`"},
      {"__device__ void k() {}", "__device__ void k() {}", ")", 1, "found no parameter"},
      {"__device__ void k(dim3 b, Foo x) {}", "__device__ void k(dim3 b, Foo x) {}", "Foo", 1,
       "has type `Foo`, which gridspan cannot pass"},
      {"__device__ void k(dim3 b, gridspan::Vector<Foo> x) {}",
       "__device__ void k(dim3 b, gridspan::Vector<Foo> x) {}", "Foo", 1,
       "`Foo` is not an element type gridspan knows"},
      {"__device__ void k(dim3 b, int) {}", "__device__ void k(dim3 b, int) {}", "int)", 1,
       "parameter 1 of `k` has no name"},
      {"__device__ void k(dim3 b, unsigned int) {}", "__device__ void k(dim3 b, unsigned int) {}",
       "int)", 1, "has no name"},
      {"__device__ void k(dim3 b, gridspan::Vector<float>) {}",
       "__device__ void k(dim3 b, gridspan::Vector<float>) {}", ">", 1, "has no name"},
      {"__device__ void k(dim3 b, int n, float n) {}",
       "__device__ void k(dim3 b, int n, float n) {}", "float", 1,
       "two parameters of `k` are named `n`"},
      {"__device__ void k(dim3 b, int n, ) {}", "__device__ void k(dim3 b, int n, ) {}", ")", 1,
       "parameter 2 of `k` is empty"},
      {"int x;\n__global__ void k(dim3 b) {}", "__global__ void k(dim3 b) {}", "k(", 2,
       "`k` is not declared `__device__`"},
      {"__device__ int k(dim3 b) { return 0; }", "__device__ int k(dim3 b) { return 0; }", "int", 1,
       "`k` returns `int`; a gridspan kernel returns void"},
      {"__device__ void k(dim3 b, int n {}", "__device__ void k(dim3 b, int n {}", "(", 1,
       "the parameter list of `k` is not closed"},
      {"__device__ void k(dim3 b, int* out) {\n  out[0] = blockIdx.x;\n}", "  out[0] = blockIdx.x;",
       "blockIdx", 2, "`k` reads `blockIdx`, but its first parameter is named `b`"},
      {"__device__ void k(dim3, int* out) { if (blockIdx.y) out[0] = 1; }",
       "__device__ void k(dim3, int* out) { if (blockIdx.y) out[0] = 1; }", "blockIdx", 1,
       "`k` reads `blockIdx`, but its first parameter is unnamed"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.src);
    std::string msg = signature_error(c.src, "k");
    std::size_t col = c.line.find(c.marker);
    ASSERT_NE(col, std::string::npos) << "bad marker in the test";
    EXPECT_NE(msg.find("\n  " + c.line + "\n  " + std::string(col, ' ') + "^"), std::string::npos)
        << "caret not at column " << col << " in:\n"
        << msg;
    EXPECT_NE(msg.find(c.phrase), std::string::npos) << msg;
    EXPECT_NE(msg.find("line " + std::to_string(c.line_number) + " of the kernel source"),
              std::string::npos)
        << msg;
  }
}

// Inside the kernel, `blockIdx` must be its first parameter: a body that reads it under
// another name reads CUDA's own index, which counts from 0 in every superblock. Other
// functions, prototypes and a parameter named `blockIdx` are fine.
TEST(Signature, AKernelReadingBlockIdxNamesItsFirstParameterSo) {
  EXPECT_TRUE(
      parse_signature("__device__ void k(dim3 blockIdx) { int i = blockIdx.x; (void)i; }", "k")
          .empty());
  EXPECT_TRUE(parse_signature("__device__ void k(dim3 b) { int i = b.x; (void)i; }", "k").empty());
  EXPECT_TRUE(parse_signature("__device__ int row(dim3 blockIdx) { return blockIdx.x; }\n"
                              "__device__ void k(dim3 b);\n"
                              "__device__ void k(dim3 b) { (void)row(b); }",
                              "k")
                  .empty());
  EXPECT_TRUE(parse_signature("__device__ void k(dim3 b); // blockIdx", "k").empty());
  EXPECT_TRUE(parse_signature("__device__ void k(dim3 b) { /* not blockIdx */ }", "k").empty());
  const std::string msg =
      signature_error("__device__ void k(dim3 b, int* out) { out[0] = blockIdx.x; }", "k");
  EXPECT_NE(msg.find("name the first parameter `blockIdx` (`__device__ void k(dim3 blockIdx, "
                     "...)`), or read `b` instead"),
            std::string::npos)
      << msg;
}

TEST(Signature, MissingFunctionListsTheDeviceFunctions) {
  const std::string src =
      "__device__ float helper(float v) { return v; }\n"
      "__device__ void stencil(dim3 b, int n) {}\n"
      "// __device__ void commented(dim3 b) {}\n";
  std::string msg = signature_error(src, "stencl");
  EXPECT_NE(msg.find("function `stencl` not found in the kernel source (its __device__ functions "
                     "are: helper, stencil)"),
            std::string::npos)
      << msg;
  std::string none = signature_error("int main() { return 0; }", "k");
  EXPECT_NE(none.find("(its __device__ functions are: none)"), std::string::npos) << none;
  // A call is not a declaration.
  std::string call = signature_error("void host() { k(1); }", "k");
  EXPECT_NE(call.find("function `k` not found"), std::string::npos) << call;
}

}  // namespace
}  // namespace gridspan::annotation
