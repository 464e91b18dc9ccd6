// Atomic read-modify-write on the cpu backend, shared by the CUDA built-ins and the views.
// Plain C++ (no macros, no globals), so host code that includes the views stays clean.
#pragma once

#ifndef __CUDACC__

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace gridspan::cpu_detail {

// Bit-level helpers shared by the atomics and the reducers.
template <class T>
using bits_t =
    std::conditional_t<sizeof(T) == 1, uint8_t,
                       std::conditional_t<sizeof(T) == 2, uint16_t,
                                          std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// Atomically replaces *p by f(*p); returns the old value. Works for any trivially copyable
// T of 1, 2, 4 or 8 bytes (float, double, __half ...).
template <class T, class F>
inline T atomic_update(T* p, F f) {
  using B = bits_t<T>;
  static_assert(sizeof(T) == sizeof(B), "atomic on an unsupported size");
  B* bp = reinterpret_cast<B*>(p);
  B old_bits = __atomic_load_n(bp, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    memcpy(&old_value, &old_bits, sizeof(T));
    const T new_value = f(old_value);
    B new_bits;
    memcpy(&new_bits, &new_value, sizeof(T));
    if (__atomic_compare_exchange_n(bp, &old_bits, new_bits, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return old_value;
  }
}
template <class T>
struct identity {
  using type = T;
};
template <class T>
using identity_t = typename identity<T>::type;
}  // namespace gridspan::cpu_detail

#endif  // __CUDACC__
