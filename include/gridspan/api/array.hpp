// gs::Array<T>: a distributed n-d array (rank 0 to 3, row-major). A handle: copies share
// the data; the chunks are freed when the last handle goes, after every task using them.
//
//   auto a = ctx.from_vector<float>(values, {n}, gs::dist::rows(1 << 20));
//   std::vector<float> back = a.to_vector();  // waits only for the tasks producing `a`
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "gridspan/core/dtype.hpp"
#include "gridspan/core/error.hpp"
#include "gridspan/core/geometry.hpp"
#include "gridspan/distribution/distribution.hpp"

namespace gridspan {

namespace runtime {
class Driver;
}
namespace plan {
struct ArrayMeta;
}

namespace detail {
/// Shared state of an Array: the driver and the array's metadata.
struct ArrayHandle {
  std::shared_ptr<runtime::Driver> driver;
  std::shared_ptr<plan::ArrayMeta> meta;
  ArrayHandle(std::shared_ptr<runtime::Driver> d, std::shared_ptr<plan::ArrayMeta> m);
  ~ArrayHandle();
  ArrayHandle(const ArrayHandle&) = delete;
  ArrayHandle& operator=(const ArrayHandle&) = delete;
};
std::shared_ptr<ArrayHandle> array_create(const std::shared_ptr<runtime::Driver>& driver,
                                          DType dtype, const Dim& shape,
                                          const DataDistribution& dist, const void* fill);
void array_read(const ArrayHandle& h, void* dst, std::size_t bytes);
void array_write(const ArrayHandle& h, const void* src, std::size_t bytes);
const Dim& array_shape(const ArrayHandle& h);
DType array_dtype(const ArrayHandle& h);
std::vector<ChunkSpec> array_chunks(const ArrayHandle& h);
[[noreturn]] void throw_null_array();
}  // namespace detail

template <class T>
class Array {
 public:
  using value_type = T;
  Array() = default;
  explicit Array(std::shared_ptr<detail::ArrayHandle> h) : h_(std::move(h)) {}

  Dim shape() const { return detail::array_shape(handle()); }
  int rank() const { return shape().rank(); }
  int64_t size() const { return shape().volume(); }
  DType dtype() const { return dtype_v<T>; }
  bool valid() const { return h_ != nullptr; }

  /// The whole array on the host (row-major); waits for the tasks that produce it.
  std::vector<T> to_vector() const {
    std::vector<T> out(static_cast<std::size_t>(size()));
    detail::array_read(handle(), out.data(), out.size() * sizeof(T));
    return out;
  }
  /// Overwrites the whole array from host data (row-major, size() elements).
  void copy_from(const std::vector<T>& values) {
    if (static_cast<int64_t>(values.size()) != size())
      throw Error(fmt::format("copy_from: got {} values for an array of shape {} ({} elements)",
                              values.size(), shape().str(), size()));
    detail::array_write(handle(), values.data(), values.size() * sizeof(T));
  }
  /// The value of a 0-d array (or of a one-element array); waits for it.
  T item() const {
    if (size() != 1)
      throw Error(fmt::format("item(): the array has shape {} ({} elements); item() needs one",
                              shape().str(), size()));
    return to_vector()[0];
  }
  const detail::ArrayHandle& handle() const {
    if (!h_) detail::throw_null_array();
    return *h_;
  }

 private:
  std::shared_ptr<detail::ArrayHandle> h_;
};

namespace work {
/// Superblocks that follow the chunks of `array` (each chunk's owned box, on its device).
template <class T>
WorkDistribution like(const Array<T>& array) {
  return like_chunks(detail::array_chunks(array.handle()), "array");
}
}  // namespace work

}  // namespace gridspan
