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
#include <source_location>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "gridspan/api/pinned.hpp"
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
  /// Offered to the array library for reuse when it goes, rather than released.
  bool recyclable = false;
  /// A native task's array (NativeContext::array; no driver): the task's run, its buffer,
  /// whether the task may only read it, and how many assignments inside the task have
  /// written it (an expression built before one of them may not read it after).
  uint64_t task = 0;
  const void* task_data = nullptr;
  bool task_read_only = false;
  uint64_t task_writes = 0;
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
/// A linear view (reshape_in_place) instead counts in the storage's row-major order: the
/// element at view index v is the storage's element number offset + sum of strides[k] * v[k].
struct ViewMap {
  Point start{0, 0, 0};
  std::array<int64_t, kMaxRank> step{1, 1, 1};
  std::array<int, kMaxRank> axis{-1, -1, -1};
  bool linear = false;
  int64_t offset = 0;
  std::array<int64_t, kMaxRank> strides{0, 0, 0};
};

/// One array as the user holds it: its storage, or what will produce it (pending), or a
/// view of another's storage. Copies of an Array share one handle.
struct ArrayHandle {
  std::shared_ptr<runtime::Driver> driver;
  std::shared_ptr<ArrayStorage> storage;  // null while pending
  DType dtype = DType::f32;
  Dim shape;
  bool is_view = false;
  ViewMap view;       // for a view: where its elements lie in `storage`
  uint64_t task = 0;  // a native task's array or expression: the task's run (0: a context's)
  std::shared_ptr<Producer> producer;
  std::atomic<bool> pending{false};
  /// While pending: the pending arrays that read this one. Once it settles they become its
  /// storage's pending readers, so that a later write to it launches them first.
  std::vector<std::weak_ptr<ArrayHandle>> pending_dependents;
  std::size_t dependents_kept = 0;  // pending_dependents' size after its last pruning

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
/// Array::read_async and write_async: `n` is the buffer's element count.
Event array_read_async(const ArrayHandle& h, const std::shared_ptr<PinnedBlock>& b, std::size_t n);
Event array_write_async(const ArrayHandle& h, const std::shared_ptr<PinnedBlock>& b, std::size_t n);
std::vector<ChunkSpec> array_chunks(const ArrayHandle& h);
[[noreturn]] void throw_null_array();
/// Inside a native function's task: the array whose view (of `dtype`, rank `rank`) starts at
/// `data`, as an array of the task's (NativeContext::array).
std::shared_ptr<ArrayHandle> task_array(const void* data, DType dtype, bool read_only);
/// Throws a gs::Error naming `what` when `h` is a task's array or expression: its values
/// are the task's, on its device, and an expression of the task is computed only where it
/// is assigned into one of the task's arrays.
void require_context_array(const ArrayHandle& h, const char* what);
}  // namespace detail

template <class T>
class Array;

/// A range of indices for Array::slice: lo to hi (exclusive) by step, as Python's lo:hi:step
/// (negative lo and hi count from the end; a negative step walks backwards from lo).
struct Range {
  int64_t lo = 0, hi = 0, step = 1;
};
inline Range range(int64_t lo, int64_t hi, int64_t step = 1) {
  return Range{lo, hi, step};
}
/// The whole of an axis in Array::slice (NumPy's `:`); called on an array, whether every
/// element is true (array/reduce.hpp).
struct AllTag {
  template <class T>
  auto operator()(const Array<T>& a) const;
  template <class T>
  auto operator()(const Array<T>& a, int axis, bool keepdims = false) const;
};
inline constexpr AllTag all{};

/// One axis of a slice: an index (the axis goes), a range, or all of it.
struct Index {
  enum Kind : uint8_t { at, range, whole } kind = whole;
  Range r;
  Index(int64_t i) : kind(at), r{i, i + 1, 1} {}
  Index(int i) : Index(static_cast<int64_t>(i)) {}
  Index(Range rr) : kind(range), r(rr) {}
  Index(AllTag) : kind(whole) {}
};

namespace detail {
std::shared_ptr<ArrayHandle> view_slice(const std::shared_ptr<ArrayHandle>& h,
                                        const std::vector<Index>& indices);
std::shared_ptr<ArrayHandle> view_transpose(const std::shared_ptr<ArrayHandle>& h,
                                            std::vector<int> axes);
std::shared_ptr<ArrayHandle> view_reshape(const std::shared_ptr<ArrayHandle>& h, const Dim& shape);
std::shared_ptr<ArrayHandle> array_reshape(const std::shared_ptr<ArrayHandle>& h, const Dim& shape);
std::shared_ptr<ArrayHandle> array_copy(const std::shared_ptr<ArrayHandle>& h, DType dtype);
bool is_contiguous(const ArrayHandle& h);
/// Where a host read waits: says so under GRIDSPAN_SHOW_SYNC_WARNING, and throws inside a
/// NoSyncGuard. `what` names the operation; `file` and `line` the caller's place.
void host_wait(const ArrayHandle& h, const char* what, const char* file, unsigned line);
}  // namespace detail

/// While one lives, a host read on this thread (to_vector, item, printing) throws a gs::Error
/// naming the operation: proof that a loop keeps its scalars on the devices.
///   { gs::NoSyncGuard guard; for (...) { alpha = rs / pap; x += p * alpha; } }
class NoSyncGuard {
 public:
  NoSyncGuard();
  ~NoSyncGuard();
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
};

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
  std::vector<T> to_vector(
      const std::source_location& where = std::source_location::current()) const {
    detail::host_wait(held(), "to_vector()", where.file_name(), where.line());
    return read_all();
  }
  /// Overwrites the whole array from host data (row-major, size() elements).
  void copy_from(const std::vector<T>& values) {
    if (static_cast<int64_t>(values.size()) != size())
      throw Error(fmt::format("copy_from: got {} values for an array of shape {} ({} elements)",
                              values.size(), shape().str(), size()));
    if constexpr (std::is_same_v<T, bool>) {
      const std::vector<unsigned char> bytes(values.begin(), values.end());
      detail::array_write(handle(), bytes.data(), bytes.size());
    } else {
      detail::array_write(handle(), values.data(), values.size() * sizeof(T));
    }
  }
  /// Copies the array into `buffer` (exactly size() elements, row-major) without waiting:
  /// the Event, and the buffer's next access, say when it is there. A view is copied first.
  Event read_async(PinnedBuffer<T>& buffer) const {
    if (held().is_view) return copy().read_async(buffer);
    return detail::array_read_async(handle(), buffer.block(), buffer.size());
  }
  /// Overwrites the whole array from `buffer` (exactly size() elements) without waiting:
  /// the buffer is read when the chunks are written, so leave it alone until the Event (its
  /// own accessors wait). Later launches and reads of the array come after it.
  Event write_async(const PinnedBuffer<T>& buffer) {
    return detail::array_write_async(handle(), buffer.block(), buffer.size());
  }
  /// The value of a 0-d array (or of a one-element array); waits for it.
  T item(const std::source_location& where = std::source_location::current()) const {
    if (size() != 1)
      throw Error(fmt::format("item(): the array has shape {} ({} elements); item() needs one",
                              shape().str(), size()));
    detail::host_wait(held(), "item()", where.file_name(), where.line());
    return read_all()[0];
  }

  // ---- views and copies (array/views.hpp) ------------------------------------------------
  /// A view: per axis an index (the axis goes), gs::range(lo, hi [, step]) or gs::all;
  /// axes not named are whole. Writing through it writes this array.
  template <class... I>
  Array<T> slice(const I&... indices) const {
    return Array<T>(detail::view_slice(h_, {Index(indices)...}));
  }
  /// The axes reversed, as a view.
  Array<T> transpose() const { return Array<T>(detail::view_transpose(h_, {})); }
  /// A copy with another shape of the same size.
  Array<T> reshape(Dim shape) const { return Array<T>(detail::array_reshape(h_, shape)); }
  /// The same elements seen with another shape, without a copy: contiguous arrays only.
  Array<T> reshape_in_place(Dim shape) const { return Array<T>(detail::view_reshape(h_, shape)); }
  /// A new, contiguous array holding the same values.
  Array<T> copy() const { return Array<T>(detail::array_copy(h_, dtype_v<T>)); }
  /// A copy converted to U (a float into an integer rounds toward zero, saturating; NaN is 0).
  template <class U>
  Array<U> astype() const {
    return Array<U>(detail::array_copy(h_, dtype_v<U>));
  }
  /// Whether the elements lie one after another in row-major order (an axis of length one
  /// never breaks that, as in Cumo).
  bool is_contiguous() const { return detail::is_contiguous(held()); }
  /// NumPy's view[...] = b: b (broadcast, converted) written into this array or view.
  template <class B>
  void assign(const B& b);
  /// Every element of this array or view set to `value`.
  void fill(T value);
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

  /// Every element on the host, without the sync checks (printing's read).
  std::vector<T> read_all() const {
    if (held().is_view) return copy().read_all();
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs its bits
      std::vector<unsigned char> bytes(static_cast<std::size_t>(size()));
      detail::array_read(handle(), bytes.data(), bytes.size());
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(static_cast<std::size_t>(size()));
      detail::array_read(handle(), out.data(), out.size() * sizeof(T));
      return out;
    }
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
