// gs::float16 and gs::bfloat16: 16-bit floating-point value types for host code. They hold
// the 16 bits and convert to and from float (rounding to nearest even); arithmetic goes
// through float, as on a GPU.
//
//   gs::float16 h = 2049.0f;   // 2048
//   float f = h;
#pragma once

#include <cstdint>

#include "gridspan/core/half.hpp"

namespace gridspan {

/// IEEE binary16: 5 exponent and 10 mantissa bits (integers exact to 2048, largest 65504).
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  float16(float f) : bits(float_to_half(f)) {}
  float16(double d) : float16(static_cast<float>(d)) {}
  float16(int i) : float16(static_cast<float>(i)) {}
  operator float() const { return half_to_float(bits); }
  static float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

/// bfloat16: float's 8 exponent bits and 7 mantissa bits (integers exact to 256).
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) : bits(float_to_bf16(f)) {}
  bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
  bfloat16(int i) : bfloat16(static_cast<float>(i)) {}
  operator float() const { return bf16_to_float(bits); }
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

}  // namespace gridspan
