// The annotation language: parsing every construct, merged modes, per-superblock access
// regions (checked against a brute-force evaluation over every thread), and the error
// messages with their caret lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <random>

#include <fmt/format.h>

#include "annotation/annotation.hpp"
#include "gridspan/core/error.hpp"
#include "support/random.hpp"

// Counts heap allocations so a test can assert that the planner's hot path makes none.
#include "support/counting_new.hpp"

namespace gridspan::annotation {
namespace {

ParamInfo array(const std::string& name, int rank, bool is_const = false,
                DType dtype = DType::f32) {
  ParamInfo p;
  p.name = name;
  p.is_array = true;
  p.rank = rank;
  p.is_const = is_const;
  p.dtype = dtype;
  static const char* views[] = {"Scalar", "Vector", "Matrix", "Tensor"};
  p.type_text = std::string(is_const ? "const " : "") + "gridspan::" + views[rank] + "<" +
                dtype_cpp_name(dtype) + ">";
  return p;
}

ParamInfo scalar(const std::string& name, DType dtype = DType::i32) {
  ParamInfo p;
  p.name = name;
  p.dtype = dtype;
  p.type_text = dtype_cpp_name(dtype);
  return p;
}

// The stencil kernel of DESIGN.md: (int n, Vector<float> out, const Vector<float> in).
std::vector<ParamInfo> stencil_params() {
  return {scalar("n"), array("out", 1), array("in", 1, true)};
}

Rect rect1(int64_t lo, int64_t hi) {
  return Rect(1, {lo, 0, 0}, {hi, 1, 1});
}
Rect rect2(int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1) {
  return Rect(2, {lo0, lo1, 0}, {hi0, hi1, 1});
}

const Access& access_of(const std::vector<Access>& acc, int param) {
  for (const auto& a : acc)
    if (a.param == param) return a;
  throw std::runtime_error("no access for parameter " + std::to_string(param));
}

// ---- parsing ---------------------------------------------------------------------------

TEST(AnnotationParse, EveryModeAndOperator) {
  struct Case {
    std::string rule;
    Mode mode;
    ReduceOp op;
    std::string name;
  };
  const std::vector<Case> cases = {
      {"read x[i]", Mode::read, ReduceOp::add, "read"},
      {"write x[i]", Mode::write, ReduceOp::add, "write"},
      {"readwrite x[i]", Mode::readwrite, ReduceOp::add, "readwrite"},
      {"overwrite x[i]", Mode::overwrite, ReduceOp::add, "overwrite"},
      {"reduce(+) x[i]", Mode::reduce, ReduceOp::add, "reduce(+)"},
      {"reduce(*) x[i]", Mode::reduce, ReduceOp::mul, "reduce(*)"},
      {"reduce(min) x[i]", Mode::reduce, ReduceOp::min, "reduce(min)"},
      {"reduce(max) x[i]", Mode::reduce, ReduceOp::max, "reduce(max)"},
      {"reduce(&) x[i]", Mode::reduce, ReduceOp::bit_and, "reduce(&)"},
      {"reduce(|) x[i]", Mode::reduce, ReduceOp::bit_or, "reduce(|)"},
      {"atomic(+) x[i]", Mode::atomic, ReduceOp::add, "atomic(+)"},
      {"atomic( max ) x[i]", Mode::atomic, ReduceOp::max, "atomic(max)"},
      {"atomic(|) x[i]", Mode::atomic, ReduceOp::bit_or, "atomic(|)"},
  };
  const std::vector<ParamInfo> params = {scalar("n"), array("x", 1, false, DType::i32)};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rule);
    Annotation a = Annotation::parse("global i => " + c.rule, params, {});
    auto modes = a.modes();
    ASSERT_EQ(modes.size(), 1u);
    EXPECT_EQ(modes[0].param, 1);
    EXPECT_EQ(modes[0].mode, c.mode);
    if (c.mode == Mode::reduce || c.mode == Mode::atomic) {
      EXPECT_EQ(modes[0].op, c.op);
    }
    EXPECT_EQ(access_name(modes[0].mode, modes[0].op), c.name);
  }
}

TEST(AnnotationParse, ModeAndOperatorNames) {
  EXPECT_EQ(mode_name(Mode::read), "read");
  EXPECT_EQ(mode_name(Mode::readwrite), "readwrite");
  EXPECT_EQ(mode_name(Mode::reduce), "reduce");
  EXPECT_EQ(mode_name(Mode::atomic), "atomic");
  EXPECT_EQ(mode_name(Mode::overwrite), "overwrite");
  EXPECT_EQ(op_name(ReduceOp::add), "+");
  EXPECT_EQ(op_name(ReduceOp::mul), "*");
  EXPECT_EQ(op_name(ReduceOp::min), "min");
  EXPECT_EQ(op_name(ReduceOp::bit_and), "&");
  EXPECT_EQ(access_name(Mode::write, ReduceOp::max), "write");
  EXPECT_EQ(access_name(Mode::atomic, ReduceOp::min), "atomic(min)");
}

TEST(AnnotationParse, MergedModes) {
  struct Case {
    std::string rules;
    Mode mode;
  };
  const std::vector<Case> cases = {
      {"read x[i], read x[i+1]", Mode::read},
      {"write x[i], write x[i+1]", Mode::write},
      {"read x[i], write x[i]", Mode::readwrite},
      {"write x[i], read x[i+1]", Mode::readwrite},
      {"readwrite x[i], read x[i+1]", Mode::readwrite},
      {"write x[i], readwrite x[i]", Mode::readwrite},
      // The union of two overwritten regions may have gaps: it is written, not overwritten.
      {"overwrite x[2*i], overwrite x[2*i+1]", Mode::write},
      {"overwrite x[i], write x[i+1]", Mode::write},
      {"overwrite x[i], read x[i]", Mode::readwrite},
      {"read x[i+1], overwrite x[i]", Mode::readwrite},
      {"reduce(+) x[i], reduce(+) x[i+1]", Mode::reduce},
      {"atomic(max) x[i], atomic(max) x[0]", Mode::atomic},
  };
  const std::vector<ParamInfo> params = {array("x", 1)};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rules);
    auto modes = Annotation::parse("global i => " + c.rules, params, {}).modes();
    ASSERT_EQ(modes.size(), 1u);
    EXPECT_EQ(modes[0].mode, c.mode);
  }
}

TEST(AnnotationParse, TextsAndMergeAcrossAnnotateCalls) {
  const auto params = stencil_params();
  Annotation a = Annotation::parse("global i => write out[i]", params, {});
  Annotation copy = a;  // merge must not change a copy sharing the same parse
  a.merge(Annotation::parse("block b => read in[b * 256 : b * 256 + 255]", params, {}));
  ASSERT_EQ(a.texts().size(), 2u);
  EXPECT_EQ(a.texts()[1], "block b => read in[b * 256 : b * 256 + 255]");
  EXPECT_EQ(copy.texts().size(), 1u);
  EXPECT_NO_THROW(a.validate(params));
  EXPECT_THROW(copy.validate(params), AnnotationError);
  auto modes = a.modes();
  ASSERT_EQ(modes.size(), 2u);
  EXPECT_EQ(modes[0].param, 1);
  EXPECT_EQ(modes[0].mode, Mode::write);
  EXPECT_EQ(modes[1].param, 2);
  EXPECT_EQ(modes[1].mode, Mode::read);
  ASSERT_EQ(copy.modes().size(), 1u);  // the copy's modes are its own rules'
  EXPECT_EQ(copy.modes()[0].mode, Mode::write);

  auto bound = a.bind({{1000}, {256}}, {1000, 0, 0}, {{}, {1000}, {1000}});
  auto acc = bound.regions(rect1(1, 3));
  EXPECT_EQ(access_of(acc, 1).region, rect1(256, 768));
  EXPECT_EQ(access_of(acc, 2).region, rect1(256, 768));

  // A default-constructed annotation takes its parameters from the first merged one.
  Annotation empty;
  EXPECT_TRUE(empty.texts().empty());
  empty.merge(a);
  EXPECT_EQ(empty.texts().size(), 2u);
  EXPECT_EQ(empty.modes().size(), 2u);
}

// ---- regions ---------------------------------------------------------------------------

TEST(AnnotationRegions, StencilClampsAndExcludesThreadsPastTheDomain) {
  const auto params = stencil_params();
  auto a = Annotation::parse("global i => write out[i], read in[i-1:i+1]", params, {});
  a.validate(params);
  // 1000 threads in blocks of 256; the arrays are larger than the thread domain, so only
  // the exclusion of threads >= 1000 keeps the last superblock's regions short.
  auto bound = a.bind({{1000}, {256}}, {1000, 0, 0}, {{}, {2000}, {2000}});
  struct Case {
    int64_t lo, hi;
    Rect out, in;
  };
  const std::vector<Case> cases = {
      {0, 1, rect1(0, 256), rect1(0, 257)},  // i - 1 = -1 is clamped
      {1, 2, rect1(256, 512), rect1(255, 513)},
      {0, 4, rect1(0, 1000), rect1(0, 1001)},
      {3, 4, rect1(768, 1000), rect1(767, 1001)},  // threads 1000..1023 do not exist
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.lo);
    auto acc = bound.regions(rect1(c.lo, c.hi));
    ASSERT_EQ(acc.size(), 2u);
    EXPECT_EQ(acc[0].param, 1);
    EXPECT_EQ(acc[0].mode, Mode::write);
    EXPECT_EQ(acc[0].region, c.out);
    EXPECT_EQ(acc[1].param, 2);
    EXPECT_EQ(acc[1].mode, Mode::read);
    EXPECT_EQ(acc[1].region, c.in);
  }
  // Arrays exactly the size of the domain clamp the halo at both ends.
  auto tight = a.bind({{1000}, {256}}, {1000, 0, 0}, {{}, {1000}, {1000}});
  EXPECT_EQ(tight.regions(rect1(3, 4))[1].region, rect1(767, 1000));
}

TEST(AnnotationRegions, BindingKinds) {
  const std::vector<ParamInfo> params = {array("A", 1), array("B", 1), array("C", 1)};
  auto a = Annotation::parse("global i block b local l => read A[i], read B[b], read C[l + 1000]",
                             params, {});
  auto bound = a.bind({{1000}, {100}}, {0, 0, 0}, {{5000}, {5000}, {5000}});
  auto acc = bound.regions(rect1(2, 5));
  EXPECT_EQ(acc[0].region, rect1(200, 500));
  EXPECT_EQ(acc[1].region, rect1(2, 5));
  EXPECT_EQ(acc[2].region, rect1(1000, 1100));
  // A superblock holding only a partial last block: 30 threads, local indices 0..29.
  auto bound2 = a.bind({{930}, {100}}, {0, 0, 0}, {{5000}, {5000}, {5000}});
  auto last = bound2.regions(rect1(9, 10));
  EXPECT_EQ(last[0].region, rect1(900, 930));
  EXPECT_EQ(last[1].region, rect1(9, 10));
  EXPECT_EQ(last[2].region, rect1(1000, 1030));
  // Blocks past the grid hold no threads.
  EXPECT_EQ(bound2.regions(rect1(9, 12))[1].region, rect1(9, 10));
}

TEST(AnnotationRegions, MultiAxisBindingsAndSkippedAxes) {
  const std::vector<ParamInfo> params = {array("A", 2), array("B", 2), array("C", 1)};
  auto a = Annotation::parse(
      "global [i, j] block [_, by] => read A[j, i], write B[i, by], read C[by]", params, {});
  // threads 100 x 50 in blocks of 16 x 8 (grid 7 x 7)
  auto bound = a.bind({{100, 50}, {16, 8}}, {0, 0, 0}, {{1000, 1000}, {1000, 1000}, {100}});
  auto acc = bound.regions(rect2(1, 3, 2, 7));
  EXPECT_EQ(acc[0].region, rect2(16, 50, 16, 48));
  EXPECT_EQ(acc[1].region, rect2(16, 48, 2, 7));
  EXPECT_EQ(acc[2].region, rect1(2, 7));

  // A 2-d binding on a 1-d launch: the y axis has extent 1, so j is 0.
  auto flat = a.bind({{100}, {16}}, {0, 0, 0}, {{1000, 1000}, {1000, 1000}, {100}});
  auto acc1 = flat.regions(rect1(0, 2));
  EXPECT_EQ(acc1[0].region, rect2(0, 1, 0, 32));
  EXPECT_EQ(acc1[2].region, rect1(0, 1));
}

TEST(AnnotationRegions, MatmulSlicesWithOmittedBounds) {
  const std::vector<ParamInfo> params = {array("A", 2, true), array("B", 2, true), array("C", 2)};
  auto a = Annotation::parse("global [i, j] => read A[i,:], read B[:,j], write C[i,j]", params, {});
  auto bound = a.bind({{64, 48}, {16, 16}}, {0, 0, 0}, {{64, 32}, {32, 48}, {64, 48}});
  auto acc = bound.regions(rect2(1, 2, 2, 3));
  EXPECT_EQ(acc[0].region, rect2(16, 32, 0, 32));
  EXPECT_EQ(acc[1].region, rect2(0, 32, 32, 48));
  EXPECT_EQ(acc[2].region, rect2(16, 32, 32, 48));

  const std::vector<ParamInfo> vec = {array("x", 1)};
  struct Case {
    std::string index;
    Rect region;
  };
  // 1000 threads, superblock = threads [200, 300); array of 1000.
  const std::vector<Case> cases = {
      {":", rect1(0, 1000)},        {"i:", rect1(200, 1000)},   {":i", rect1(0, 300)},
      {"i:i+9", rect1(200, 309)},   {"i-5:i", rect1(195, 300)}, {"7:7", rect1(7, 8)},
      {"i+1:i-1", rect1(201, 299)},  // per thread empty, but the box is [min lo, max hi]
      {"2000:", rect1(0, 0)},        // past the array: empty
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.index);
    auto b = Annotation::parse("global i => read x[" + c.index + "]", vec, {})
                 .bind({{1000}, {100}}, {0}, {{1000}});
    Rect r = b.regions(rect1(2, 3))[0].region;
    if (c.region.empty()) {
      EXPECT_TRUE(r.empty()) << r.str();
      EXPECT_EQ(r.rank, 1);
    } else {
      EXPECT_EQ(r, c.region) << r.str();
    }
  }
}

TEST(AnnotationRegions, ConstantsFromScalarsAndDefines) {
  const std::vector<ParamInfo> params = {scalar("n"), scalar("m", DType::i64), array("x", 1),
                                         scalar("alpha", DType::f32), array("y", 1)};
  const std::map<std::string, long long> defines = {{"K", 4}, {"HALO", 2}};
  struct Case {
    std::string index;
    Rect region;
  };
  // n = 10, m = 3; superblock = threads [100, 200).
  const std::vector<Case> cases = {
      {"i + n", rect1(110, 210)},
      {"i * K", rect1(400, 797)},
      {"K * i + HALO", rect1(402, 799)},
      {"n * i", rect1(1000, 1991)},
      {"(i + 1) * (n - 7)", rect1(303, 601)},
      {"i - HALO : i + HALO", rect1(98, 202)},
      {"m * (i / K)", rect1(75, 148)},
      {"-i + 5000", rect1(4801, 4901)},
      {"-(i - n) + 4000", rect1(3811, 3911)},
      {"i + n * m - K / 2", rect1(128, 228)},
      {"+i", rect1(100, 200)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.index);
    auto a = Annotation::parse("global i => read x[" + c.index + "], write y[i]", params, defines);
    auto b = a.bind({{1000}, {100}}, {10, 3, 0, 0, 0}, {{}, {}, {10000}, {}, {1000}});
    EXPECT_EQ(b.regions(rect1(1, 2))[0].region, c.region);
  }
}

TEST(AnnotationRegions, FloorDivisionRoundsTowardsNegativeInfinity) {
  const std::vector<ParamInfo> params = {scalar("s"), array("x", 1)};
  struct Case {
    std::string index;
    Rect region;
  };
  // 4 threads: i in [0, 3].
  const std::vector<Case> cases = {
      {"(i - 5) / 2 + 10", rect1(7, 10)},  // floor(-5/2) = -3, floor(-2/2) = -1
      {"(i - 5) / s + 10", rect1(7, 10)},  // same with a scalar divisor s = 2
      {"-7 / 2 + 10", rect1(6, 7)},        // folded at parse time: -4
      {"(-i - 1) / 3 + 5", rect1(3, 5)},   // floor(-4/3) = -2, floor(-1/3) = -1
      {"i / 2 / 2 + 1", rect1(1, 2)},      // nested
      {"(i / 2 + i) * 2", rect1(0, 9)},    // a floor division inside a product
      {"i / (s + 1) + 20", rect1(20, 22)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.index);
    auto b = Annotation::parse("global i => read x[" + c.index + "]", params, {})
                 .bind({{4}, {4}}, {2, 0}, {{}, {100}});
    EXPECT_EQ(b.regions(rect1(0, 1))[0].region, c.region);
  }
}

TEST(AnnotationRegions, EmptyAfterClampAndZeroDimensionalArrays) {
  const std::vector<ParamInfo> params = {array("x", 1), array("total", 0), array("M", 2)};
  auto a = Annotation::parse("global i => read x[i + 5000], reduce(+) total, read M[i, -3:-1]",
                             params, {});
  auto b = a.bind({{100}, {10}}, {0, 0, 0}, {{1000}, {}, {100, 100}});
  auto acc = b.regions(rect1(0, 3));
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_TRUE(acc[0].region.empty());
  EXPECT_EQ(acc[0].region.rank, 1);
  EXPECT_EQ(acc[1].region.rank, 0);
  EXPECT_EQ(acc[1].region.volume(), 1);
  EXPECT_EQ(acc[1].mode, Mode::reduce);
  EXPECT_TRUE(acc[2].region.empty());
  EXPECT_EQ(acc[2].region.rank, 2);
  // A superblock with no threads (past the grid) touches nothing.
  auto none = b.regions(rect1(10, 12));
  EXPECT_TRUE(none[0].region.empty());
}

TEST(AnnotationRegions, UnionOfRulesIgnoresEmptyOnes) {
  const std::vector<ParamInfo> params = {array("x", 1)};
  auto a =
      Annotation::parse("global i => read x[i], read x[i + 500], read x[i + 9000]", params, {});
  auto b = a.bind({{100}, {10}}, {0}, {{1000}});
  EXPECT_EQ(b.regions(rect1(2, 3))[0].region, rect1(20, 530));
}

TEST(AnnotationRegions, ReusedOutputMatchesAndDoesNotAllocate) {
  const std::vector<ParamInfo> params = {scalar("n"), array("A", 2), array("B", 2), array("C", 1)};
  auto a = Annotation::parse(
      "global [i, j] => read A[i-1:i+1, j/2], write B[j, i], reduce(+) C[(i + n) / 4]", params, {});
  auto b = a.bind({{4096, 512}, {32, 8}}, {7, 0, 0, 0}, {{}, {4096, 512}, {512, 4096}, {2048}});
  std::vector<Access> out;
  b.regions(rect2(0, 1, 0, 1), out);  // warm-up
  auto g = test::rng(11);
  std::vector<Rect> superblocks;
  for (int k = 0; k < 200; ++k) {
    int64_t x = std::uniform_int_distribution<int64_t>(0, 127)(g);
    int64_t y = std::uniform_int_distribution<int64_t>(0, 63)(g);
    superblocks.push_back(rect2(x, x + 1, y, y + 1));
  }
  long before = test::allocations();
  int64_t checksum = 0;
  for (const Rect& sb : superblocks) {
    b.regions(sb, out);
    checksum += out[0].region.lo[0] + out[2].region.hi[0];
  }
  EXPECT_EQ(test::allocations() - before, 0);
  EXPECT_NE(checksum, 0);
  for (const Rect& sb : superblocks) {
    b.regions(sb, out);
    auto fresh = b.regions(sb);
    ASSERT_EQ(fresh.size(), out.size());
    for (std::size_t k = 0; k < out.size(); ++k) EXPECT_EQ(fresh[k].region, out[k].region);
  }
}

// ---- brute force -----------------------------------------------------------------------

int64_t ref_floor_div(int64_t a, int64_t d) {
  return a >= 0 ? a / d : -((-a + d - 1) / d);
}

struct ThreadIdx {
  std::array<int64_t, 3> g, b, l;
};
// Per thread: one entry per rule (array parameter, inclusive bounds per axis).
struct RuleBox {
  int param;
  int rank;
  std::array<int64_t, 3> lo, hi;
};
using Reference = std::function<void(const ThreadIdx&, int64_t n, const std::vector<Dim>& shapes,
                                     std::vector<RuleBox>&)>;

RuleBox box(int param, std::initializer_list<std::pair<int64_t, int64_t>> axes) {
  RuleBox r{param, static_cast<int>(axes.size()), {0, 0, 0}, {0, 0, 0}};
  int a = 0;
  for (auto [lo, hi] : axes) r.lo[a] = lo, r.hi[a++] = hi;
  return r;
}

struct BruteCase {
  std::string text;
  Reference reference;
  bool exact;  // false: the annotation mixes variables of one axis; regions only contain
};

// n, A and B matrices, C and D vectors, E and F tensors.
std::vector<ParamInfo> brute_params() {
  return {scalar("n"),   array("A", 2), array("B", 2), array("C", 1),
          array("D", 1), array("E", 3), array("F", 3)};
}

std::vector<BruteCase> brute_cases() {
  using V = std::vector<RuleBox>;
  return {
      {"global [i, j] => read A[i-1:i+1, j-2:j+2], write B[2*j+1, (i-7)/4], "
       "readwrite C[-i + n], read D[:i/3]",
       [](const ThreadIdx& t, int64_t n, const std::vector<Dim>&, V& out) {
         int64_t i = t.g[0], j = t.g[1];
         out = {
             box(1, {{i - 1, i + 1}, {j - 2, j + 2}}),
             box(2, {{2 * j + 1, 2 * j + 1}, {ref_floor_div(i - 7, 4), ref_floor_div(i - 7, 4)}}),
             box(3, {{n - i, n - i}}), box(4, {{0, ref_floor_div(i, 3)}})};
       },
       true},
      {"global i block [_, by] local [lx, ly] => read A[by*3 - lx, ly/2], write C[i/5 - 3], "
       "read D[lx + 2*ly :], read A[lx, n - ly]",
       [](const ThreadIdx& t, int64_t n, const std::vector<Dim>& shapes, V& out) {
         int64_t by = t.b[1], lx = t.l[0], ly = t.l[1], i = t.g[0];
         int64_t c = ref_floor_div(i, 5) - 3;
         out = {box(1, {{by * 3 - lx, by * 3 - lx}, {ref_floor_div(ly, 2), ref_floor_div(ly, 2)}}),
                box(3, {{c, c}}), box(4, {{lx + 2 * ly, shapes[4][0] - 1}}),
                box(1, {{lx, lx}, {n - ly, n - ly}})};
       },
       true},
      {"global [i, j, k] => read E[k, j/2, i + j], write F[i, j, k-1:k+1], "
       "reduce(max) C[(k - n) / 3 + 4]",
       [](const ThreadIdx& t, int64_t n, const std::vector<Dim>&, V& out) {
         int64_t i = t.g[0], j = t.g[1], k = t.g[2];
         int64_t c = ref_floor_div(k - n, 3) + 4;
         out = {box(5, {{k, k}, {ref_floor_div(j, 2), ref_floor_div(j, 2)}, {i + j, i + j}}),
                box(6, {{i, i}, {j, j}, {k - 1, k + 1}}), box(3, {{c, c}})};
       },
       true},
      {"global i block b => read C[i - b*4 + (i+3)/2], write D[(i - b) / 2 : n]",
       [](const ThreadIdx& t, int64_t n, const std::vector<Dim>&, V& out) {
         int64_t i = t.g[0], b = t.b[0];
         int64_t c = i - b * 4 + ref_floor_div(i + 3, 2);
         out = {box(3, {{c, c}}), box(4, {{ref_floor_div(i - b, 2), n}})};
       },
       false},
  };
}

TEST(AnnotationRegions, MatchBruteForceOverEveryThread) {
  auto g = test::rng(7);
  const auto params = brute_params();
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(g);
  };
  int checked = 0;
  long threads_seen = 0;
  for (const BruteCase& bc : brute_cases()) {
    SCOPED_TRACE(bc.text);
    Annotation ann = Annotation::parse(bc.text, params, {});
    for (int trial = 0; trial < 200; ++trial) {
      // Random geometry: rank 1..3, thread domain and block size per axis.
      const int rank = static_cast<int>(uni(1, 3));
      const int64_t max_n[3] = {120, 24, 10};
      Dim threads = Dim::of_rank(rank, 1), block = Dim::of_rank(rank, 1);
      for (int a = 0; a < rank; ++a) {
        threads[a] = uni(1, max_n[a]);
        block[a] = uni(1, a == 0 ? 32 : 6);
      }
      const int64_t n = uni(-10, 150);
      std::vector<Dim> shapes(params.size());
      for (std::size_t p = 0; p < params.size(); ++p) {
        if (!params[p].is_array) continue;
        shapes[p] = Dim::of_rank(params[p].rank, 1);
        for (int a = 0; a < params[p].rank; ++a) shapes[p][a] = uni(1, 150);
      }
      // A random superblock of the grid (sometimes reaching past it).
      Rect sb;
      sb.rank = rank;
      for (int a = 0; a < rank; ++a) {
        int64_t grid = (threads[a] + block[a] - 1) / block[a];
        sb.lo[a] = uni(0, grid - 1);
        sb.hi[a] = std::min(grid + 1, sb.lo[a] + uni(1, a == 0 ? 4 : 3));
      }
      std::vector<int64_t> scalars(params.size(), 0);
      scalars[0] = n;
      BoundAnnotation bound = ann.bind({threads, block}, scalars, shapes);
      std::vector<Access> got = bound.regions(sb);

      // Reference: every thread of the superblock, per rule min of lower / max of upper.
      std::vector<RuleBox> acc, per_thread;
      bool first = true;
      for (int64_t bz = sb.lo[2]; bz < sb.hi[2]; ++bz)
        for (int64_t by = sb.lo[1]; by < sb.hi[1]; ++by)
          for (int64_t bx = sb.lo[0]; bx < sb.hi[0]; ++bx)
            for (int64_t lz = 0; lz < block.get(2); ++lz)
              for (int64_t ly = 0; ly < block.get(1); ++ly)
                for (int64_t lx = 0; lx < block.get(0); ++lx) {
                  ThreadIdx t{
                      {bx * block.get(0) + lx, by * block.get(1) + ly, bz * block.get(2) + lz},
                      {bx, by, bz},
                      {lx, ly, lz}};
                  if (t.g[0] >= threads.get(0) || t.g[1] >= threads.get(1) ||
                      t.g[2] >= threads.get(2))
                    continue;
                  bc.reference(t, n, shapes, per_thread);
                  ++threads_seen;
                  if (first) {
                    acc = per_thread;
                    first = false;
                    continue;
                  }
                  for (std::size_t r = 0; r < acc.size(); ++r)
                    for (int a = 0; a < acc[r].rank; ++a) {
                      acc[r].lo[a] = std::min(acc[r].lo[a], per_thread[r].lo[a]);
                      acc[r].hi[a] = std::max(acc[r].hi[a], per_thread[r].hi[a]);
                    }
                }
      ASSERT_FALSE(first) << "superblock without threads";
      // Clamp each rule to its array, then unite per array.
      std::map<int, Rect> expected;
      for (const RuleBox& r : acc) {
        Rect box(r.rank, {0, 0, 0}, {0, 0, 0});
        for (int a = 0; a < r.rank; ++a) {
          box.lo[a] = std::max<int64_t>(r.lo[a], 0);
          box.hi[a] = std::min<int64_t>(r.hi[a] + 1, shapes[r.param][a]);
        }
        auto it = expected.find(r.param);
        if (it == expected.end())
          expected.emplace(r.param, box);
        else
          it->second = it->second.bounding_union(box);
      }
      ASSERT_EQ(got.size(), expected.size());
      for (const Access& a : got) {
        SCOPED_TRACE(fmt::format("trial {} param {} threads {} block {} superblock {}", trial,
                                 a.param, threads.str(), block.str(), sb.str()));
        const Rect& want = expected.at(a.param);
        if (!bc.exact) {
          EXPECT_TRUE(a.region.contains(want)) << a.region.str() << " vs " << want.str();
        } else if (want.empty()) {
          EXPECT_TRUE(a.region.empty()) << a.region.str();
        } else {
          EXPECT_EQ(a.region, want) << a.region.str() << " vs " << want.str();
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(threads_seen, 40000);
  std::printf("brute force: %ld threads, %d regions\n", threads_seen, checked);
}

// ---- errors ----------------------------------------------------------------------------

// The message quotes `text` with a caret under column `col` and contains `phrase`.
void expect_caret(const std::string& msg, const std::string& text, std::size_t col,
                  const std::string& phrase) {
  EXPECT_NE(msg.find("\n  " + text + "\n  " + std::string(col, ' ') + "^"), std::string::npos)
      << "caret not at column " << col << " in:\n"
      << msg;
  EXPECT_NE(msg.find(phrase), std::string::npos) << "no `" << phrase << "` in:\n" << msg;
}

std::string annotation_error(const std::string& text, const std::vector<ParamInfo>& params,
                             const std::map<std::string, long long>& defines = {}) {
  try {
    Annotation::parse(text, params, defines);
  } catch (const AnnotationError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no AnnotationError for: " << text;
  return "";
}

TEST(AnnotationErrors, UnknownArrayMessageIsExact) {
  EXPECT_EQ(annotation_error("global i => write C[i]", stencil_params()),
            "annotation error: `C` is not an array parameter of the kernel (its arrays are: out, "
            "in)\n  global i => write C[i]\n                    ^\n  name one of the kernel's "
            "array parameters");
}

TEST(AnnotationErrors, EveryPathHasACaretAndAPhrase) {
  auto params = stencil_params();
  params.push_back(scalar("alpha", DType::f32));
  params.push_back(array("M", 2));
  params.push_back(array("s", 0, false, DType::i32));
  params.push_back(array("flags", 1, false, DType::u8));
  const std::map<std::string, long long> defines = {{"K", 8}};
  struct Case {
    std::string text;
    std::string marker;  // the caret goes under the first occurrence (empty: end of text)
    std::string phrase;
  };
  const std::vector<Case> cases = {
      // syntax
      {"global i write out[i]", "write", "expected `=>` after the bindings, found `write`"},
      {"global i j => write out[i]", "j =>", "bind several axes with one list"},
      {"global i => write out[i", "", "expected `,` or `]` after index 1 of `out`"},
      {"global i => write out[i] read in[i]", "read", "expected `,` between rules"},
      {"global i => write out[i]] ", "] ", "unexpected `]` after the last rule"},
      {"write out[i]", "write", "an annotation starts with a binding"},
      {"global => write out[0]", "=>", "expected a name or `[` after `global`"},
      {"global [] => write out[0]", "]", "empty binding list"},
      {"global [i j] => write out[i]", "j]", "expected `,` or `]` in the binding list"},
      {"global [a, b, c, d] => write out[a]", "d]", "fourth axis"},
      {"global i => wirte out[i]", "wirte", "expected an access mode, found `wirte`"},
      {"global i => reduce out[i]", "out", "expected `(` after `reduce`"},
      {"global i => reduce(-) out[i]", "-)", "`-` is not a reduction operator"},
      {"global i => reduce(+ out[i]", "out", "expected `)` after the operator"},
      {"global i => write [i]", "[i]", "expected an array name after `write`"},
      {"global i => write out[]", "]", "empty index list for `out`"},
      {"global i => write out[(i + 1]", "]", "expected `)`"},
      {"global i => write out[i +]", "]", "expected an index expression, found `]`"},
      {"global i => write out[i % 2]", "%", "unexpected character `%`"},
      {"global i = write out[i]", "=", "unexpected character `=`"},
      {"global i => write out[99999999999999999999]", "9999", "integer constant is too large"},
      // names
      {"global i => write C[i]", "C[i]", "`C` is not an array parameter of the kernel"},
      {"global i => read n[i]", "n[i]", "`n` is a scalar parameter of the kernel, not an array"},
      {"global i => write out[k]", "k]", "`k` is not a bound name, an integer scalar parameter"},
      {"global i => write out[i * alpha]", "alpha", "`alpha` is a float32 scalar parameter"},
      {"global i => write out[in]", "in]", "`in` is an array parameter"},
      {"global [i, i] => write out[i]", "i]", "`i` is bound twice"},
      {"global i block i => write out[i]", "i =>", "`i` is bound twice"},
      {"global n => write out[n]", "n =>", "`n` is both a bound name and a kernel parameter"},
      {"global K => write out[K]", "K =>", "`K` is both a bound name and a define"},
      {"global read => write out[0]", "read", "`read` is a keyword"},
      // affinity
      {"global [i, j] => write out[i*j]", "*", "index `i*j` is not affine"},
      {"global [i, j] => write out[(i + 1) * (j - 1)]", "* (", "multiplies `(i + 1)` by `(j - 1)`"},
      {"global [i, j] => write out[i / j]", "/", "divides by `j`"},
      {"global i => write out[n / i]", "/", "divides by `i`"},
      {"global i => write out[i / 0]", "0]", "floor division by 0: the divisor must be positive"},
      {"global i => write out[i / (K - 10)]", "(K", "floor division by -2"},
      // ranks
      {"global i => write out[i, i]", "out",
       "wrong number of indices for `out`: it is a Vector "
       "of rank 1, the rule gives 2"},
      {"global i => write M[i]", "M[i]", "it is a Matrix of rank 2, the rule gives 1"},
      {"global i => write M", "M", "the rule gives 0"},
      {"global i => reduce(+) s[i]", "s[i]", "a 0-d array takes no brackets"},
      // const and operators
      {"global i => write in[i]", "write", "`in` is read-only"},
      {"global i => readwrite in[i]", "readwrite", "but the rule says `readwrite`"},
      {"global i => reduce(+) in[i]", "reduce", "but the rule says `reduce`"},
      {"global i => atomic(max) in[i]", "atomic", "`in` is read-only"},
      {"global i => overwrite in[i]", "overwrite", "but the rule says `overwrite`"},
      {"global i => overwrit out[i]", "overwrit", "start each rule with read, write, overwrite"},
      {"global i => reduce(&) out[i]", "&", "`&` needs an integer array, but `out` holds float32"},
      {"global i => atomic(|) out[i]", "|", "`|` needs an integer array"},
      // conflicting rules within one text
      {"global i => reduce(+) out[i], read out[i]", "read",
       "the rules on `out` cannot be combined"},
      {"global i => reduce(+) out[i], reduce(max) out[i]", "reduce(max)",
       "`reduce(+)` and `reduce(max)`"},
      {"global i => atomic(+) out[i], reduce(+) out[i]", "reduce", "cannot be combined"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = annotation_error(c.text, params, defines);
    std::size_t col = c.marker.empty() ? c.text.size() : c.text.find(c.marker);
    ASSERT_NE(col, std::string::npos) << "bad marker in the test";
    EXPECT_EQ(msg.rfind("annotation error: ", 0), 0u) << msg;
    expect_caret(msg, c.text, col, c.phrase);
  }
  // `&` and `|` are fine on integer arrays.
  EXPECT_NO_THROW(Annotation::parse("global i => reduce(&) flags[i], reduce(|) s", params, {}));
}

TEST(AnnotationErrors, CaretOnTheRightLineOfAMultiLineText) {
  std::string msg = annotation_error("global i =>\n  write C[i]", stencil_params());
  EXPECT_NE(msg.find("\n    write C[i]\n          ^\n"), std::string::npos) << msg;
}

TEST(AnnotationErrors, ValidateNamesArraysWithoutRules) {
  const auto params = stencil_params();
  const std::string text = "global i => write out[i]";
  Annotation a = Annotation::parse(text, params, {});
  try {
    a.validate(params);
    ADD_FAILURE() << "validate accepted an array without a rule";
  } catch (const AnnotationError& e) {
    expect_caret(e.what(), text, text.size(), "array parameter `in` has no rule in the annotation");
    EXPECT_NE(std::string(e.what()).find("read in[:]"), std::string::npos) << e.what();
  }
  try {
    Annotation().validate(params);
    ADD_FAILURE() << "validate accepted a missing annotation";
  } catch (const AnnotationError& e) {
    EXPECT_NE(std::string(e.what()).find("array parameter `out` has no rule"), std::string::npos);
  }
  // Only arrays need rules.
  EXPECT_NO_THROW(Annotation().validate({scalar("n")}));
}

TEST(AnnotationErrors, ValidateRejectsMixedReductionsAcrossTexts) {
  const auto params = stencil_params();
  Annotation a = Annotation::parse("global i => reduce(+) out[i], read in[i]", params, {});
  const std::string second = "block b => write out[b]";
  a.merge(Annotation::parse(second, params, {}));
  try {
    a.validate(params);
    ADD_FAILURE() << "validate accepted reduce(+) mixed with write";
  } catch (const AnnotationError& e) {
    expect_caret(e.what(), second, second.find("write"),
                 "the rules on `out` cannot be combined: `reduce(+)` and `write`");
  }
  EXPECT_THROW(a.bind({{10}, {10}}, {10, 0, 0}, {{}, {10}, {10}}), AnnotationError);
}

TEST(AnnotationErrors, BindRejectsBadDivisorsAndMissingLaunchValues) {
  const std::vector<ParamInfo> params = {scalar("s"), array("x", 1)};
  const std::string text = "global i => read x[i / (s - 1)]";
  Annotation a = Annotation::parse(text, params, {});
  for (int64_t s : {1, 0, -3}) {
    try {
      a.bind({{100}, {10}}, {s, 0}, {{}, {100}});
      ADD_FAILURE() << "divisor " << s - 1 << " accepted";
    } catch (const LaunchError& e) {
      expect_caret(e.what(), text, text.find("(s"),
                   fmt::format("the divisor `(s - 1)` is {} at this launch", s - 1));
    }
  }
  auto ok = a.bind({{100}, {10}}, {3, 0}, {{}, {100}});
  EXPECT_EQ(ok.regions(rect1(1, 3))[0].region, rect1(5, 15));

  EXPECT_THROW(a.bind({{100}, {10}}, {}, {{}, {100}}), LaunchError);         // no scalars
  EXPECT_THROW(a.bind({{100}, {10}}, {3, 0}, {{}}), LaunchError);            // no shape
  EXPECT_THROW(a.bind({{100}, {10}}, {3, 0}, {{}, {10, 10}}), LaunchError);  // wrong rank
  EXPECT_THROW(a.bind({{100}, {0}}, {3, 0}, {{}, {100}}), LaunchError);      // empty block
}

TEST(AnnotationErrors, MutatedTextsParseOrFailWithACaret) {
  // Random edits of valid annotations either still parse or raise an AnnotationError that
  // quotes the text and has a caret; nothing else (no crash, no other exception).
  auto params = stencil_params();
  params.push_back(array("M", 2));
  const std::vector<std::string> seeds = {
      "global i => write out[i], read in[i-1:i+1]",
      "global [i, j] block b => read M[i, :], readwrite out[(j + n) / 4 - b]",
      "local [x, _, z] => reduce(+) out[x * 3 - z], read in[:n]"};
  const std::string alphabet = "ij[](),:+-*/=> 0123456789nbglobalreadwrite_";
  auto g = test::rng(23);
  int parsed = 0, failed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text = seeds[trial % seeds.size()];
    for (int edits = 1 + trial % 3; edits > 0 && !text.empty(); --edits) {
      std::size_t at = std::uniform_int_distribution<std::size_t>(0, text.size() - 1)(g);
      char c = alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(g)];
      switch (trial % 3) {
        case 0:
          text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, c);
          break;
        default:
          text[at] = c;
          break;
      }
    }
    try {
      Annotation a = Annotation::parse(text, params, {});
      ++parsed;
      EXPECT_EQ(a.texts().at(0), text);
    } catch (const AnnotationError& e) {
      ++failed;
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("annotation error: ", 0), 0u) << msg;
      EXPECT_NE(msg.find("\n  " + text + "\n  "), std::string::npos) << msg;
      EXPECT_NE(msg.find("^"), std::string::npos) << msg;
    }
  }
  EXPECT_GT(failed, 1000);
  EXPECT_GT(parsed, 10);
}

// ---- describe_superblock ---------------------------------------------------------------

TEST(AnnotationDescribe, OneLinePerSuperblock) {
  const std::vector<ParamInfo> params = {scalar("n"), array("out", 2), array("in", 1, true),
                                         array("total", 0), array("hist", 1)};
  std::vector<Access> acc(4);
  acc[0] = {1, Mode::write, ReduceOp::add, rect2(0, 256, 0, 16)};
  acc[1] = {2, Mode::read, ReduceOp::add, rect1(0, 258)};
  acc[2] = {3, Mode::reduce, ReduceOp::add, Rect()};
  acc[3] = {4, Mode::atomic, ReduceOp::max, rect1(5, 5)};
  EXPECT_EQ(describe_superblock(rect2(0, 256, 0, 16), acc, params),
            "superblock [0..256) x [0..16) out write [0..256) x [0..16) in read [0..258) "
            "total reduce(+) [] hist atomic(max) empty");
  EXPECT_EQ(describe_superblock(rect1(0, 4), {}, params), "superblock [0..4)");
}

}  // namespace
}  // namespace gridspan::annotation
