// Random inputs for tests: one base seed per run (printed, GRIDSPAN_TEST_SEED overrides),
// never all zeros; and a poison value for outputs so unwritten elements show.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace gridspan::test {

inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("GRIDSPAN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) %
           1000000007ull;
  }();
  return seed;
}

/// A generator seeded from the base seed and a per-test salt.
inline std::mt19937_64 rng(uint64_t salt) {
  return std::mt19937_64(base_seed() * 0x9E3779B97F4A7C15ull + salt);
}

/// n random values, none zero, small enough that sums stay exact in float for integers.
template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937_64& g) {
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      std::uniform_real_distribution<double> d(0.5, 2.0);
      x = static_cast<T>(std::bernoulli_distribution(0.5)(g) ? d(g) : -d(g));
    } else {
      std::uniform_int_distribution<int> d(1, 100);
      x = static_cast<T>(d(g));
    }
  }
  return v;
}

template <class T>
T poison() {
  if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::quiet_NaN();
  else
    return static_cast<T>(0x5A5A5A5A5A5A5A5Aull);
}

}  // namespace gridspan::test
