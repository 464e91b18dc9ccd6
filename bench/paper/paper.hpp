// The paper's benchmarks as data: arrays, kernels and the launches of one run. One harness
// runs a spec on gridspan (any number of GPUs, any device memory limit) and as a plain
// single-GPU CUDA program (the same kernel bodies, each launched once over its whole grid
// through the driver API, arrays in one cudaMalloc each), then compares the outputs.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "gridspan/gridspan.hpp"

namespace gridspan::bench {

namespace gs = gridspan;

/// Inputs made on the GPU, so that data of any size needs no host copy: element i (row-major)
/// is lo + (hi - lo) * u(seed, i) for floats, u(seed, i) * hi truncated for integers, with u a
/// counter-based hash in [0, 1). The plain program and gridspan run the same kernels.
struct Generator {
  enum class Kind { none, real, integer } kind = Kind::none;
  uint64_t seed = 0;
  double lo = 0, hi = 1;
};

struct ArraySpec {
  std::string name;
  DType dtype = DType::f32;
  gs::Dim shape;
  /// The array's distribution in `pieces` chunks (the GPUs times the chunks per GPU).
  std::function<gs::DataDistribution(int pieces)> dist;
  std::vector<unsigned char> init;  // host data (row-major); empty: left uninitialised
  Generator gen;                    // or made on the GPU
  gs::Dim halo;  // what a kernel reads beyond a chunk's rows (given to dist::automatic)
  std::size_t bytes() const { return std::size_t(shape.volume()) * dtype_size(dtype); }
};

/// The generator kernels (gen_real1..3, gen_int1..3) and how to launch one for `a`.
const char* generator_source();
std::string generator_function(const ArraySpec& a);
std::string generator_annotation(int rank);
/// Threads, block and arguments (after the array itself) of the generator launch for `a`.
struct GeneratorLaunch {
  gs::Dim threads, block, superblock;
  std::vector<std::variant<int64_t, uint64_t, double>> scalars;
};
GeneratorLaunch generator_launch(const ArraySpec& a, int pieces);
/// What the generator makes for `a`, computed on the host (for checks at small sizes).
std::vector<unsigned char> generated_on_host(const ArraySpec& a);

struct KernelSpec {
  std::string function;
  std::string source;
  std::string annotation;
  /// Parameters combined with reduce(op): the baseline fills them with `fill` bytes before
  /// each launch (0 for +, 0xFF for min over unsigned integers) and combines with `op`.
  struct Reduce {
    unsigned char fill;
    GsReduceOp op;
  };
  std::map<std::string, Reduce> reduce_fill;
};

using Arg = std::variant<std::string, int32_t, int64_t, float>;  // an array by name, or a scalar

struct Step {
  std::string kernel;  // empty: swap arrays `swap_a` and `swap_b`
  gs::Dim threads, block;
  std::function<gs::WorkDistribution(int pieces)> work;
  std::vector<Arg> args;
  std::string swap_a, swap_b;
};

/// A step that exchanges two arrays' names (the next iteration reads what this one wrote).
inline Step swap_step(std::string a, std::string b) {
  Step s;
  s.swap_a = std::move(a);
  s.swap_b = std::move(b);
  return s;
}

struct Spec {
  std::string name;
  std::string size_label;  // "n=1048576"
  double items = 0;        // n, for throughput = items / second
  std::string unit;        // "options/s"
  std::vector<KernelSpec> kernels;
  std::vector<ArraySpec> arrays;
  std::vector<Step> steps;              // one run
  std::string output;                   // the array compared between gridspan and the baseline
  double tolerance = 0;                 // relative, for float outputs; 0: bitwise equal
  std::vector<unsigned char> expected;  // the output known in advance (else: the baseline's)
  bool compute_bound = false;
  std::string no_out_of_core;  // why an out-of-core run makes no sense, if it does not
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& a : arrays) b += a.bytes();
    return b;
  }
};

/// The benchmarks at size step `s` (0 = smallest; each step doubles the data).
std::vector<std::string> benchmark_names();
Spec make_spec(const std::string& name, int s, uint64_t seed);

template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace gridspan::bench
