// What Array<T> declares for views and copies and the array library defines: assignment
// into arrays and views, fill, and printing as NumPy prints (gs::to_string, operator<<).
//
//   auto top = a.slice(gs::range(0, 2), gs::all);   // a view of the first two rows
//   top.fill(7);                                    // a[0:2, :] = 7
//   std::cout << a << "\n";
#pragma once

#include <ostream>
#include <source_location>
#include <string>

#include "gridspan/array/elementwise.hpp"

namespace gridspan {

template <class T>
template <class B>
void Array<T>::assign(const B& b) {
  detail::assign(h_, detail::ew_arg(b));
}

template <class T>
void Array<T>::fill(T value) {
  detail::assign(h_, detail::ew_arg(value));
}

/// The axes of `a` permuted: axis j of the view is axis axes[j] of `a` (a view).
template <class T>
Array<T> transpose(const Array<T>& a, std::vector<int> axes) {
  return Array<T>(detail::view_transpose(a.shared(), std::move(axes)));
}

namespace detail {
/// NumPy's str() of `shape.volume()` elements of `dtype` (16-bit floats as their bits).
std::string format_array(const void* values, DType dtype, const Dim& shape);
}  // namespace detail

/// The array as NumPy prints it (summarised with ... past 1000 elements); waits for it.
template <class T>
std::string to_string(const Array<T>& a,
                      const std::source_location& where = std::source_location::current()) {
  detail::host_wait(a.held(), "printing", where.file_name(), where.line());
  const auto values = a.read_all();
  if constexpr (std::is_same_v<T, bool>) {
    const std::vector<unsigned char> bytes(values.begin(), values.end());
    return detail::format_array(bytes.data(), dtype_v<T>, a.shape());
  } else {
    return detail::format_array(values.data(), dtype_v<T>, a.shape());
  }
}

template <class T>
std::ostream& operator<<(std::ostream& out, const Array<T>& a) {
  return out << to_string(a);
}

}  // namespace gridspan
