// gs::Array<T>: a distributed n-d array (rank 0 to 3, row-major). A handle: copies share
// the data; the chunks are freed when the last handle goes, after every task using them.
//
//   auto a = ctx.from_vector<float>(values, {n}, gs::dist::rows(1 << 20));
//   std::vector<float> back = a.to_vector();  // waits only for the tasks producing `a`
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
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
struct ArrayHandle;

/// The distributed data of an array, shared by the array and its views; its chunks are
/// released (deleted after every task using them) when the last of them goes.
struct ArrayStorage {
  std::shared_ptr<runtime::Driver> driver;
  std::shared_ptr<plan::ArrayMeta> meta;
  /// Pending arrays (lazy expressions) that read this storage: launched before anything
  /// writes it, so that they read the values they were built from.
  std::vector<std::weak_ptr<ArrayHandle>> pending_readers;
  std::size_t readers_kept = 0;  // pending_readers' size after its last pruning
  ArrayStorage(std::shared_ptr<runtime::Driver> d, std::shared_ptr<plan::ArrayMeta> m);
  ~ArrayStorage();
  ArrayStorage(const ArrayStorage&) = delete;
  ArrayStorage& operator=(const ArrayStorage&) = delete;
};

/// What produces a pending array's values: the array library's lazy expressions.
class Producer {
 public:
  virtual ~Producer() = default;
  /// Gives `into` its storage and launches (asynchronously) what writes it.
  virtual void produce(ArrayHandle& into) = 0;
};

/// Where a view's elements lie in its storage: along storage axis b at
/// start[b] + step[b] * (the index on view axis axis[b]), or at start[b] where axis[b] < 0.
struct ViewMap {
  Point start{0, 0, 0};
  std::array<int64_t, kMaxRank> step{1, 1, 1};
  std::array<int, kMaxRank> axis{-1, -1, -1};
};

/// One array as the user holds it: its storage, or what will produce it (pending), or a
/// view of another's storage. Copies of an Array share one handle.
struct ArrayHandle {
  std::shared_ptr<runtime::Driver> driver;
  std::shared_ptr<ArrayStorage> storage;  // null while pending
  DType dtype = DType::f32;
  Dim shape;
  bool is_view = false;
  ViewMap view;  // for a view: where its elements lie in `storage`
  std::shared_ptr<Producer> producer;
  std::atomic<bool> pending{false};

  ArrayHandle() = default;
  ArrayHandle(const ArrayHandle&) = delete;
  ArrayHandle& operator=(const ArrayHandle&) = delete;
  const plan::ArrayMeta& meta() const { return *storage->meta; }
};

std::shared_ptr<ArrayHandle> array_create(const std::shared_ptr<runtime::Driver>& driver,
                                          DType dtype, const Dim& shape,
                                          const DataDistribution& dist, const void* fill);
/// The array library's lock: pending arrays are built and produced under it.
std::recursive_mutex& lazy_mutex();
/// Runs a pending array's producer (once, under the library's lock).
void array_settle(ArrayHandle& h);
/// Launches every pending array that reads `storage`, before something writes it.
void settle_readers(ArrayStorage& storage);
void array_read(const ArrayHandle& h, void* dst, std::size_t bytes);
void array_write(const ArrayHandle& h, const void* src, std::size_t bytes);
std::vector<ChunkSpec> array_chunks(const ArrayHandle& h);
[[noreturn]] void throw_null_array();
}  // namespace detail

template <class T>
class Array {
 public:
  using value_type = T;
  Array() = default;
  explicit Array(std::shared_ptr<detail::ArrayHandle> h) : h_(std::move(h)) {}

  Dim shape() const { return held().shape; }
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
  /// The handle with its values produced (a pending array's work launched).
  const detail::ArrayHandle& handle() const {
    detail::ArrayHandle& h = held();
    if (h.pending.load(std::memory_order_acquire)) detail::array_settle(h);
    return h;
  }
  /// The handle as it is (pending or not).
  detail::ArrayHandle& held() const {
    if (!h_) detail::throw_null_array();
    return *h_;
  }
  const std::shared_ptr<detail::ArrayHandle>& shared() const { return h_; }

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
