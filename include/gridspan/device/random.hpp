// Counter-based random numbers for gs::random::uniform / normal: element i (row-major linear
// index) of an array gets a value that depends only on (seed, i, stream), never on how the
// array is split over devices, superblocks or threads, so every split and backend agrees.
//
// The generator is Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC'11; the constants of Random123 and cuRAND), one call per element:
//   key     = {lo32(seed), hi32(seed)}
//   counter = {lo32(i), hi32(i), stream, 0}
// `stream` tells apart the draws that share a seed (0 for uniform, 1 for normal).
//
// From the four output words v0..v3 of the element's counter, with
// bits53(a, b) = (a << 21) | (b >> 11) (the high 32 bits of a, the high 21 of b):
//   uniform_float   (v0 >> 8) * 2^-24                                 in [0, 1)
//   uniform_double  bits53(v0, v1) * 2^-53                            in [0, 1)
//   normal_float    u1 = ((v0 >> 8) + 1) * 2^-24                      in (0, 1]
//                   u2 = (v1 >> 8) * 2^-24                            in [0, 1)
//                   sqrtf(-2 logf(u1)) * cosf(2 pi u2)                |z| <= 5.77
//   normal_double   u1 = (bits53(v0, v1) + 1) * 2^-53                 in (0, 1]
//                   u2 = bits53(v2, v3) * 2^-53                       in [0, 1)
//                   sqrt(-2 log(u1)) * cos(2 pi u2)                   |z| <= 8.57
// (the sine half of each Box-Muller pair is not used.)
//
// The bits, the uniforms and every arithmetic step are exact or one IEEE-rounded operation
// (no a * b + c a compiler could contract into an fma), so uniforms and the inputs of the
// math functions are bit-identical on every backend. The normals go through logf / sqrtf /
// cosf (log / sqrt / cos): sqrt is correctly rounded everywhere, but log and cos are the
// math library's, glibc's on the cpu backend and CUDA's on the GPU, each within a few ulp
// of the exact value (CUDA Math API's and glibc's tables) but not always the same float.
// So a normal may differ by a few ulp between the cpu and cuda backends (measured over 2^24
// elements, H200 with CUDA 13.0 against glibc 2.39: 78% of the float and 85% of the double
// normals identical, the rest at most 3 ulp apart); between runs, splits and devices of
// one backend it is identical. (Under --use_fast_math CUDA would use __logf / __cosf
// instead, far less accurate; the kernels are not built so.)
//
// For the caller scaling a uniform to [lo, hi): lo + (hi - lo) * u is contracted into an fma
// by nvcc / NVRTC (and by g++ where the target has one) but not by g++ on x86-64 without
// -march, so it can differ in the last bit between backends; fmaf(hi - lo, u, lo) (fma) is
// one rounding on both. Either way the rounding can give hi itself for u close to 1.
//
// Compiles under NVRTC (no standard headers), nvcc, the cpu backend's g++ and in host code.
#pragma once

#include "abi.h"
#include "views.hpp"

#ifndef __CUDACC__
#include <math.h>
#endif

namespace gridspan {
namespace rng {

/// Four 32-bit words: a Philox counter or its output.
struct Philox4 {
  uint32_t v[4];
};

/// A Philox4x32 key: two 32-bit words.
struct PhiloxKey {
  uint32_t v[2];
};

namespace detail {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // (golden ratio - 1) * 2^32
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // (sqrt(3) - 1) * 2^32

constexpr float kTwoPiF = 6.28318530717958647692f;
constexpr double kTwoPi = 6.28318530717958647692;
constexpr float kTwoPow24F = 16777216.0f;  // 2^24
constexpr float kTwoPowM24F = 1.0f / kTwoPow24F;
constexpr double kTwoPowM53 = 1.0 / 9007199254740992.0;  // 2^-53

/// The high 32 bits of the 64-bit product a * b.
GRIDSPAN_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

/// One Philox4x32 round.
GRIDSPAN_HD Philox4 philox_round(Philox4 c, PhiloxKey k) {
  const uint32_t hi0 = mulhi32(kPhiloxM0, c.v[0]);
  const uint32_t lo0 = kPhiloxM0 * c.v[0];
  const uint32_t hi1 = mulhi32(kPhiloxM1, c.v[2]);
  const uint32_t lo1 = kPhiloxM1 * c.v[2];
  Philox4 r;
  r.v[0] = hi1 ^ c.v[1] ^ k.v[0];
  r.v[1] = lo1;
  r.v[2] = hi0 ^ c.v[3] ^ k.v[1];
  r.v[3] = lo0;
  return r;
}

/// 53 random bits from two words: the high 32 of a, the high 21 of b.
GRIDSPAN_HD uint64_t bits53(uint32_t a, uint32_t b) {
  return (static_cast<uint64_t>(a) << 21) | static_cast<uint64_t>(b >> 11);
}

}  // namespace detail

/// Philox4x32-10: ten rounds, the key bumped by the Weyl constants between them.
GRIDSPAN_HD Philox4 philox4x32_10(Philox4 counter, PhiloxKey key) {
  counter = detail::philox_round(counter, key);
  for (int r = 1; r < 10; ++r) {
    key.v[0] += detail::kPhiloxW0;
    key.v[1] += detail::kPhiloxW1;
    counter = detail::philox_round(counter, key);
  }
  return counter;
}

/// The four words of element i: key {lo32(seed), hi32(seed)}, counter {lo32(i), hi32(i),
/// stream, 0}.
GRIDSPAN_HD Philox4 philox_words(uint64_t seed, int64_t i, uint32_t stream) {
  const uint64_t u = static_cast<uint64_t>(i);
  Philox4 c;
  c.v[0] = static_cast<uint32_t>(u);
  c.v[1] = static_cast<uint32_t>(u >> 32);
  c.v[2] = stream;
  c.v[3] = 0u;
  PhiloxKey k;
  k.v[0] = static_cast<uint32_t>(seed);
  k.v[1] = static_cast<uint32_t>(seed >> 32);
  return philox4x32_10(c, k);
}

/// Uniform in [0, 1): 24 random bits * 2^-24 (every float of the form m * 2^-24).
GRIDSPAN_HD float uniform_float(uint64_t seed, int64_t i, uint32_t stream) {
  const Philox4 r = philox_words(seed, i, stream);
  return static_cast<float>(r.v[0] >> 8) * detail::kTwoPowM24F;
}

/// Uniform in [0, 1): 53 random bits (of two words) * 2^-53.
GRIDSPAN_HD double uniform_double(uint64_t seed, int64_t i, uint32_t stream) {
  const Philox4 r = philox_words(seed, i, stream);
  return static_cast<double>(detail::bits53(r.v[0], r.v[1])) * detail::kTwoPowM53;
}

/// Standard normal (Box-Muller, cosine half) in float: |z| <= sqrt(-2 ln 2^-24) ~ 5.77.
GRIDSPAN_HD float normal_float(uint64_t seed, int64_t i, uint32_t stream) {
  const Philox4 r = philox_words(seed, i, stream);
  const float u1 = static_cast<float>((r.v[0] >> 8) + 1u) * detail::kTwoPowM24F;  // (0, 1]
  const float u2 = static_cast<float>(r.v[1] >> 8) * detail::kTwoPowM24F;         // [0, 1)
  const float radius = ::sqrtf(-2.0f * ::logf(u1));
  const float theta = detail::kTwoPiF * u2;
  return radius * ::cosf(theta);
}

/// Standard normal (Box-Muller, cosine half) in double: |z| <= sqrt(-2 ln 2^-53) ~ 8.57.
GRIDSPAN_HD double normal_double(uint64_t seed, int64_t i, uint32_t stream) {
  const Philox4 r = philox_words(seed, i, stream);
  const double u1 =
      static_cast<double>(detail::bits53(r.v[0], r.v[1]) + 1u) * detail::kTwoPowM53;  // (0, 1]
  const double u2 =
      static_cast<double>(detail::bits53(r.v[2], r.v[3])) * detail::kTwoPowM53;  // [0, 1)
  const double radius = ::sqrt(-2.0 * ::log(u1));
  const double theta = detail::kTwoPi * u2;
  return radius * ::cos(theta);
}

}  // namespace rng
}  // namespace gridspan
