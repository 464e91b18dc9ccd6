// gridspan's side of the array benchmarks (bench/arrays/README.md): the same operations as
// cupy_baseline.py and numpy_baseline.py, float32, printed as the same JSON lines with
// "library": "gridspan", so that compare.py puts them side by side.
//
//   bench_arrays [--sizes 12 20 28] [--reps 20]
// gpu_ms: the median over R calls of one call's wall time from its launch to the end of a
// synchronize (it includes the launch; CuPy's gpu_ms does not); wall_us_per_call: a loop of
// R calls ending with one synchronize, divided by R.
#include <gridspan/gridspan.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace gs = gridspan;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

int chunks = 0;  // --chunks: the inputs' chunks (0: dist::automatic)

// The inputs' distribution over `rows` rows: --chunks of them, or gridspan's choice.
gs::DataDistribution dist_for(int64_t rows) {
  return chunks > 0 ? gs::dist::rows((rows + chunks - 1) / chunks) : gs::dist::automatic();
}

struct Timing {
  double call_ms;
  double wall_us;
};

// `call` returns an array whose values it asks for (a launch, not a read).
Timing time_calls(gs::Context& ctx, int reps, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  ctx.synchronize();
  std::vector<double> each;
  for (int i = 0; i < reps; ++i) {
    const auto t = Clock::now();
    call();
    ctx.synchronize();
    each.push_back(ms_since(t));
  }
  std::sort(each.begin(), each.end());
  const auto t = Clock::now();
  for (int i = 0; i < reps; ++i) call();
  ctx.synchronize();
  return {each[each.size() / 2], ms_since(t) * 1000.0 / reps};
}

void report(gs::Context& ctx, const char* bench, int64_t n, double bytes, Timing t) {
  std::printf(
      "{\"library\": \"gridspan\", \"bench\": \"%s\", \"n\": %lld, \"gpu_ms\": %.6f, "
      "\"wall_us_per_call\": %.3f, \"bytes\": %.0f, \"gbps\": %.3f, \"backend\": \"%s\", "
      "\"devices\": %d, \"chunks\": %d}\n",
      bench, static_cast<long long>(n), t.call_ms, t.wall_us, bytes, bytes / t.call_ms / 1e6,
      ctx.backend_name().c_str(), ctx.device_count(), chunks);
  std::fflush(stdout);
}

std::vector<std::string> only;  // --only: the figures to time (all when empty)

// Reports `call`'s timing as `bench`, unless --only names other figures.
void timed(gs::Context& ctx, const char* bench, int64_t n, double bytes, int reps,
           const std::function<void()>& call) {
  if (only.empty() || std::find(only.begin(), only.end(), bench) != only.end())
    report(ctx, bench, n, bytes, time_calls(ctx, reps, call));
}

// Every element of `got` within `tol` (relative to the largest |want|) of `want`.
void check(const char* bench, const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(scale, 1e-30));
  if (worst > 1e-6) {
    std::fprintf(stderr, "bench_arrays: %s is wrong (relative error %g)\n", bench, worst);
    std::exit(1);
  }
}

// Sums over everything, and over the last and the first axis of (n / 4096, 4096).
void run_sums(gs::Context& ctx, const std::vector<float>& av, int64_t n, int reps) {
  double total = 0;
  for (float x : av) total += x;
  auto a = ctx.from_vector(av, {n}, dist_for(n));
  const float got = gs::sum(a).item();
  if (std::abs(got - total) > 1e-4 * std::max(1.0, std::sqrt(double(n)))) {
    std::fprintf(stderr, "bench_arrays: sum is wrong (%g, want %g)\n", got, total);
    std::exit(1);
  }
  const double f = sizeof(float);
  gs::Array<float> out;
  timed(ctx, "sum_all", n, n * f, reps, [&] { out = gs::sum(a); });
  const int64_t row = 4096;
  if (n < 2 * row) return;
  auto a2 = ctx.from_vector(av, {n / row, row}, dist_for(n / row));
  const float r0 = gs::sum(a2, 1).to_vector()[0], c0 = gs::sum(a2, 0).to_vector()[0];
  double want_r = 0, want_c = 0;
  for (int64_t j = 0; j < row; ++j) want_r += av[j];
  for (int64_t i = 0; i < n / row; ++i) want_c += av[i * row];
  if (std::abs(r0 - want_r) > 1e-3 ||
      std::abs(c0 - want_c) > 1e-4 * std::sqrt(double(n / row)) + 1e-3) {
    std::fprintf(stderr, "bench_arrays: axis sums are wrong\n");
    std::exit(1);
  }
  timed(ctx, "sum_last", n, n * f, reps, [&] { out = gs::sum(a2, 1); });
  timed(ctx, "sum_first", n, n * f, reps, [&] { out = gs::sum(a2, 0); });
}

// Every prefix of `got` within 1e-4 of the prefix sums of |x| (at least 1) of a float64 scan of
// `av` along lines of `line` elements.
void check_scan(const char* bench, const std::vector<float>& got, const std::vector<float>& av,
                int64_t line) {
  double want = 0, scale = 0;
  for (std::size_t i = 0; i < av.size(); ++i) {
    if (static_cast<int64_t>(i) % line == 0) want = scale = 0;
    want += av[i], scale += std::abs(av[i]);
    if (std::abs(got[i] - want) > 1e-4 * std::max(scale, 1.0)) {
      std::fprintf(stderr, "bench_arrays: %s is wrong at %zu (%g, want %g)\n", bench, i,
                   double(got[i]), want);
      std::exit(1);
    }
  }
}

// cumsum of everything, and along the last axis of (n / 4096, 4096).
void run_scans(gs::Context& ctx, const std::vector<float>& av, int64_t n, int reps) {
  const double f = sizeof(float);
  gs::Array<float> out;
  auto a = ctx.from_vector(av, {n}, dist_for(n));
  check_scan("cumsum_all", gs::cumsum(a).to_vector(), av, n);
  timed(ctx, "cumsum_all", n, 2 * n * f, reps, [&] { out = gs::cumsum(a); });
  const int64_t row = 4096;
  if (n < 2 * row) return;
  auto a2 = ctx.from_vector(av, {n / row, row}, dist_for(n / row));
  check_scan("cumsum_last", gs::cumsum(a2, 1).to_vector(), av, row);
  timed(ctx, "cumsum_last", n, 2 * n * f, reps, [&] { out = gs::cumsum(a2, 1); });
}

void run_size(gs::Context& ctx, int64_t n, int reps) {
  const auto av = random_floats(n, 1), bv = random_floats(n, 2), cv = random_floats(n, 3);
  auto a = ctx.from_vector(av, {n}, dist_for(n)), b = ctx.from_vector(bv, {n}, dist_for(n)),
       c = ctx.from_vector(cv, {n}, dist_for(n));
  const int64_t sample = std::min<int64_t>(n, 1 << 16);
  auto first = [&](const gs::Array<float>& x) {
    auto v = x.to_vector();
    v.resize(sample);
    return v;
  };
  std::vector<double> add_ref(sample), chain_ref(sample);
  for (int64_t i = 0; i < sample; ++i) {
    add_ref[i] = double(av[i]) + bv[i];
    chain_ref[i] = std::tanh(double(av[i]) * bv[i] + cv[i]) * 0.5 - av[i];
  }
  check("add", first(a + b), add_ref);
  check("chain_fused", first(gs::tanh(a * b + c) * 0.5f - a), chain_ref);
  gs::Array<float> out;
  const double f = sizeof(float);
  timed(ctx, "copy", n, 2 * n * f, reps, [&] {
    out = (a + 0.0f);
    out.handle();
  });
  timed(ctx, "add", n, 3 * n * f, reps, [&] {
    out = a + b;
    out.handle();
  });
  timed(ctx, "chain_fused", n, 4 * n * f, reps, [&] {
    out = gs::tanh(a * b + c) * 0.5f - a;
    out.handle();
  });
  run_sums(ctx, av, n, reps);
  run_scans(ctx, av, n, reps);
}

// ---- Cumo's fused operations (--fused): rows of 4096 ---------------------------------------

template <class T>
std::vector<T> converted(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The first rows of `got` against float64 references of softmax, layer_norm (gamma 1, beta 0)
// or rms_norm (gamma 1) of `x`, within `tol`.
template <class T>
void check_rows(const char* bench, const std::vector<T>& got, const std::vector<float>& x,
                int64_t row, int rows, int kind, double tol) {
  for (int r = 0; r < rows; ++r) {
    const float* v = x.data() + r * row;
    double m = -INFINITY, s = 0, mean = 0, var = 0, ms = 0;
    for (int64_t j = 0; j < row; ++j) m = std::max(m, double(v[j])), mean += v[j];
    mean /= row;
    for (int64_t j = 0; j < row; ++j)
      s += std::exp(v[j] - m), var += (v[j] - mean) * (v[j] - mean), ms += double(v[j]) * v[j];
    var /= row, ms /= row;
    for (int64_t j = 0; j < row; ++j) {
      const double want = kind == 0   ? std::exp(v[j] - m) / s
                          : kind == 1 ? (v[j] - mean) / std::sqrt(var + 1e-5)
                                      : v[j] / std::sqrt(ms + 1e-5);
      const double scale = kind == 0 ? 1.0 / row : 1.0;
      if (std::abs(double(got[r * row + j]) - want) > tol * std::max(std::abs(want), scale)) {
        std::fprintf(stderr, "bench_arrays: %s is wrong at row %d, %lld (%g, want %g)\n", bench, r,
                     static_cast<long long>(j), double(got[r * row + j]), want);
        std::exit(1);
      }
    }
  }
}

// softmax, layer_norm, rms_norm and quantize_symmetric of (n / 4096, 4096) in T; bytes: the
// input read and the output written once.
template <class T>
void run_rows(gs::Context& ctx, const std::vector<float>& xv, int64_t n, int reps,
              const char* suffix, double tol) {
  const int64_t row = 4096;
  const double e = sizeof(T);
  // The input as T, and its values back as float (the reference's input).
  const auto xt = converted<T>(xv);
  const std::vector<float> xf(xt.begin(), xt.end());
  auto x = ctx.from_vector(xt, {n / row, row});
  auto g = gs::ones<T>(ctx, {row});
  auto b = gs::zeros<T>(ctx, {row});
  const int rows = static_cast<int>(std::min<int64_t>(n / row, 4));
  auto head = [&](const gs::Array<T>& y) {
    auto v = y.to_vector();
    v.resize(static_cast<std::size_t>(rows * row));
    return v;
  };
  const std::string s = suffix;
  check_rows((s + "softmax").c_str(), head(gs::softmax(x)), xf, row, rows, 0, tol);
  check_rows((s + "layer_norm").c_str(), head(gs::layer_norm(x, g, b)), xf, row, rows, 1, tol);
  check_rows((s + "rms_norm").c_str(), head(gs::rms_norm(x, g)), xf, row, rows, 2, tol);
  gs::Array<T> out;
  timed(ctx, ("softmax" + s).c_str(), n, 2 * n * e, reps, [&] { out = gs::softmax(x); });
  timed(ctx, ("layer_norm" + s).c_str(), n, 2 * n * e, reps,
        [&] { out = gs::layer_norm(x, g, b); });
  timed(ctx, ("rms_norm" + s).c_str(), n, 2 * n * e, reps, [&] { out = gs::rms_norm(x, g); });
  std::pair<gs::Array<int8_t>, gs::Array<float>> q;
  timed(ctx, ("quantize" + s).c_str(), n, n * (e + 1) + 4.0 * (n / row), reps,
        [&] { q = gs::quantize_symmetric(x); });
}

// The activations against a copy, float32, n elements.
void run_activations(gs::Context& ctx, const std::vector<float>& xv, int64_t n, int reps) {
  auto x = ctx.from_vector(xv, {n});
  const int64_t sample = std::min<int64_t>(n, 1 << 16);
  auto first = [&](const gs::Array<float>& y) {
    auto v = y.to_vector();
    v.resize(static_cast<std::size_t>(sample));
    return v;
  };
  std::vector<double> silu(sample), sig(sample);
  for (int64_t i = 0; i < sample; ++i) {
    silu[i] = xv[i] / (1 + std::exp(-double(xv[i])));
    sig[i] = 1 / (1 + std::exp(-double(xv[i])));
  }
  check("silu", first(gs::silu(x)), silu);
  check("sigmoid", first(gs::sigmoid(x)), sig);
  gs::Array<float> out;
  const double f = sizeof(float);
  timed(ctx, "copy", n, 2 * n * f, reps, [&] {
    out = (x + 0.0f);
    out.handle();
  });
  const std::vector<std::pair<const char*, std::function<gs::Array<float>()>>> ops = {
      {"gelu", [&] { return gs::gelu(x); }},
      {"gelu_tanh", [&] { return gs::gelu_tanh(x); }},
      {"silu", [&] { return gs::silu(x); }},
      {"sigmoid", [&] { return gs::sigmoid(x); }},
      {"softplus", [&] { return gs::softplus(x); }}};
  for (const auto& [name, op] : ops)
    timed(ctx, name, n, 2 * n * f, reps, [&] {
      out = op();
      out.handle();
    });
}

// matmul of n x n by n x n (n = sqrt of the size), float32 and bfloat16; "bytes" are the
// flops (2 n^3), so that "gbps" reads as GFLOP/s.
// OpenBLAS's sgemm called directly on host copies of the operands, with its own threads (every
// core): the cpu backend's matmul target. Reported as library "openblas"; skipped where
// OpenBLAS cannot be loaded.
void run_openblas(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int reps) {
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
  using Threads = void (*)(int);
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
  auto threads = reinterpret_cast<Threads>(dlsym(lib, "openblas_set_num_threads"));
  if (!sgemm) return;
  if (threads) threads(static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<float> c(a.size());
  const int m = static_cast<int>(n);
  auto call = [&] {
    sgemm(101, 111, 111, m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
  };
  call();
  std::vector<double> each;
  for (int i = 0; i < reps; ++i) {
    const auto t = Clock::now();
    call();
    each.push_back(ms_since(t));
  }
  std::sort(each.begin(), each.end());
  const double ms = each[each.size() / 2], flops = 2.0 * double(n) * n * n;
  std::printf(
      "{\"library\": \"openblas\", \"bench\": \"matmul_f32\", \"n\": %lld, \"gpu_ms\": %.6f, "
      "\"wall_us_per_call\": %.3f, \"bytes\": %.0f, \"gbps\": %.3f}\n",
      static_cast<long long>(n), ms, ms * 1000, flops, flops / ms / 1e6);
  if (threads) threads(1);  // as the library's cpu devices call it
}

template <class T>
void run_matmul(gs::Context& ctx, int64_t n, int reps, const char* bench) {
  auto a = gs::random::uniform<float>(ctx, {n, n}, 1, -1.0f, 1.0f).astype<T>();
  auto b = gs::random::uniform<float>(ctx, {n, n}, 2, -1.0f, 1.0f).astype<T>();
  const auto av = a.to_vector(), bv = b.to_vector();
  const auto c = gs::matmul(a, b).to_vector();
  for (int64_t i : {int64_t(0), n / 2, n - 1}) {  // a few elements against float64
    double want = 0, scale = 0;
    for (int64_t l = 0; l < n; ++l)
      want += double(av[i * n + l]) * double(bv[l * n + i]),
          scale += std::abs(double(av[i * n + l]) * double(bv[l * n + i]));
    if (std::abs(double(c[i * n + i]) - want) > 1e-2 * scale) {
      std::fprintf(stderr, "bench_arrays: %s is wrong (%g, want %g)\n", bench, double(c[i * n + i]),
                   want);
      std::exit(1);
    }
  }
  gs::Array<T> out;
  timed(ctx, bench, n, 2.0 * double(n) * n * n, reps, [&] { out = gs::matmul(a, b); });
  if constexpr (std::is_same_v<T, float>)
    if (ctx.backend_name() == "cpu") run_openblas(av, bv, n, reps);
}

// A GPT-2-style block on (tokens, 768): layer_norm -> matmul (768 x 3072) -> gelu_tanh ->
// matmul (3072 x 768) -> residual add, in dtype T; bytes are the four matrices' traffic is
// not counted: the figure is the time per block (gpu_ms) beside torch eager's.
template <class T>
void run_gpt2(gs::Context& ctx, int64_t tokens, int reps, const char* bench) {
  const int64_t d = 768, h = 4 * d;
  auto x = gs::random::uniform<float>(ctx, {tokens, d}, 11, -1.0f, 1.0f).astype<T>();
  auto w1 = (gs::random::uniform<float>(ctx, {d, h}, 12, -1.0f, 1.0f) * 0.036f).astype<T>();
  auto w2 = (gs::random::uniform<float>(ctx, {h, d}, 13, -1.0f, 1.0f) * 0.018f).astype<T>();
  auto g = gs::ones<T>(ctx, {d});
  auto b = gs::zeros<T>(ctx, {d});
  auto block = [&] {
    return x + gs::matmul(gs::gelu_tanh(gs::matmul(gs::layer_norm(x, g, b), w1)), w2);
  };
  const auto y = block().to_vector();
  for (float v : {float(y[0]), float(y[y.size() / 2]), float(y.back())})
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "bench_arrays: %s is not finite\n", bench);
      std::exit(1);
    }
  gs::Array<T> out;
  timed(ctx, bench, tokens, 2.0 * 2.0 * double(tokens) * d * h, reps, [&] { out = block(); });
}

void run_fused(gs::Context& ctx, int64_t n, int reps) {
  const auto xv = random_floats(n, 7);
  run_activations(ctx, xv, n, reps);
  if (n < 4096) return;
  run_rows<float>(ctx, xv, n, reps, "", 2e-5);
  run_rows<gs::bfloat16>(ctx, xv, n, reps, "_bf16", 2e-2);
}

// Host time per call of the array library's parts at n elements (a loop of `reps` calls,
// then one synchronize): where a small call's time goes.
void run_overhead(gs::Context& ctx, int64_t n, int reps) {
  auto a = ctx.from_vector(random_floats(n, 1), {n}), b = ctx.from_vector(random_floats(n, 2), {n});
  const double f = sizeof(float);
  auto once = [&](const char* name, const std::function<void()>& call) {
    timed(ctx, name, n, 3 * n * f, reps, call);
  };
  once("part_expression", [&] { auto x = a + b; });
  once("part_empty", [&] { auto x = gs::empty<float>(ctx, {n}); });
  gs::Array<float> out = gs::empty<float>(ctx, {n});
  once("part_assign", [&] { out.assign(a + b); });
  once("part_add_fresh", [&] {
    out = a + b;
    out.handle();
  });
  once("part_chain_expression", [&] { auto x = gs::tanh(a * b + a) * 0.5f - a; });
  once("part_chain_fresh", [&] {
    out = gs::tanh(a * b + a) * 0.5f - a;
    out.handle();
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("gridspan's array benchmarks (JSON lines on stdout)");
  std::vector<int> sizes{12, 20, 28};
  int reps = 20;
  bool overhead = false, fused = false, matmul = false, gpt2 = false;
  app.add_option("--sizes", sizes, "log2 of the element counts");
  app.add_flag("--overhead", overhead, "time the parts of a small call instead");
  app.add_flag("--fused", fused, "time Cumo's fused operations instead (rows of 4096)");
  app.add_flag("--matmul", matmul, "time matmul of n x n matrices instead (--sizes: log2 of n)");
  app.add_flag("--gpt2", gpt2, "time a GPT-2-style block on (2^k tokens, 768) instead");
  app.add_option("--reps", reps, "timed calls per figure");
  app.add_option("--only", only, "time these figures only (copy, add, chain_fused, sum_all ...)");
  app.add_option("--chunks", chunks,
                 "the elementwise, sum and scan inputs in this many row chunks (default: "
                 "dist::automatic, gridspan's choice)")
      ->check(CLI::Range(0, 4096));
  CLI11_PARSE(app, argc, argv);
  return gs::run(argc, argv, [&](gs::Context& ctx) {
    for (int k : sizes) {
      const int64_t n = int64_t(1) << k;
      if (overhead)
        run_overhead(ctx, n, reps);
      else if (fused)
        run_fused(ctx, n, reps);
      else if (gpt2) {
        run_gpt2<float>(ctx, n, reps, "gpt2_f32");
        run_gpt2<gs::bfloat16>(ctx, n, reps, "gpt2_bf16");
      } else if (matmul) {
        run_matmul<float>(ctx, int64_t(1) << k, reps, "matmul_f32");
        run_matmul<gs::bfloat16>(ctx, int64_t(1) << k, reps, "matmul_bf16");
      } else
        run_size(ctx, n, reps);
    }
  });
}
