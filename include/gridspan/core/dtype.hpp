// Element types of arrays and scalar kernel parameters, with the C++ names kernels use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "gridspan/core/float16.hpp"

namespace gridspan {

enum class DType : uint8_t { i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, boolean };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return 1;
    case DType::i16:
    case DType::u16:
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i32:
    case DType::u32:
    case DType::f32:
      return 4;
    default:
      return 8;
  }
}
bool dtype_is_float(DType t);
bool dtype_is_signed(DType t);
/// The C++ spelling used in generated kernel code ("float", "int64_t", "__half" ...).
std::string dtype_cpp_name(DType t);
/// The NumPy-like short name ("float32", "int64" ...), used in messages.
std::string dtype_name(DType t);
/// Parses a C++ type spelling as written in a kernel signature ("unsigned int", "long long",
/// "int64_t", "float"); returns false when it names no scalar type gridspan knows.
bool dtype_from_cpp(const std::string& spelling, DType& out);

template <class T>
struct dtype_of;
#define GRIDSPAN_DTYPE_OF(T, D)              \
  template <>                                \
  struct dtype_of<T> {                       \
    static constexpr DType value = DType::D; \
  };
GRIDSPAN_DTYPE_OF(int8_t, i8)
GRIDSPAN_DTYPE_OF(int16_t, i16)
GRIDSPAN_DTYPE_OF(int32_t, i32)
GRIDSPAN_DTYPE_OF(int64_t, i64)
GRIDSPAN_DTYPE_OF(uint8_t, u8)
GRIDSPAN_DTYPE_OF(uint16_t, u16)
GRIDSPAN_DTYPE_OF(uint32_t, u32)
GRIDSPAN_DTYPE_OF(uint64_t, u64)
GRIDSPAN_DTYPE_OF(float, f32)
GRIDSPAN_DTYPE_OF(double, f64)
GRIDSPAN_DTYPE_OF(bool, boolean)
GRIDSPAN_DTYPE_OF(float16, f16)
GRIDSPAN_DTYPE_OF(bfloat16, bf16)
#undef GRIDSPAN_DTYPE_OF
// `long long` is a distinct type from int64_t (long) on LP64.
template <>
struct dtype_of<long long> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<unsigned long long> {
  static constexpr DType value = DType::u64;
};
template <class T>
constexpr DType dtype_v = dtype_of<std::remove_cv_t<T>>::value;

}  // namespace gridspan
