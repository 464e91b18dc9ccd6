// gs::PinnedBuffer<T>: page-locked host memory for transfers that do not wait (Cumo's and
// CuPy's pinned memory). Array::read_async and Array::write_async copy between an array and
// a buffer of exactly its size and return at once with a gs::Event; a GPU copies such a
// buffer by DMA while the host goes on.
//
//   gs::PinnedBuffer<float> buf(ctx, a.size());
//   gs::Event e = a.read_async(buf);  // returns at once
//   ...                               // other work, launches
//   float first = buf[0];             // waits for the transfer first
//
// While a transfer is in flight the buffer and the array stay alive; the buffer's next
// access (data(), [], to_vector, another transfer) and its destruction wait for it, and the
// array's next write or free comes after it (the runtime orders them). On the cpu backend
// the memory is ordinary host memory and the same rules hold.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "gridspan/api/event.hpp"

namespace gridspan {

class Context;

namespace detail {
/// A buffer's memory and its transfer in flight (defined in the library).
struct PinnedBlock;
std::shared_ptr<PinnedBlock> pinned_block(const Context& ctx, std::size_t bytes);
/// The memory, after the transfer in flight has finished (rethrows its error).
unsigned char* pinned_wait(PinnedBlock& b);
bool pinned_page_locked(const PinnedBlock& b);
Event pinned_event(const PinnedBlock& b);
}  // namespace detail

template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// `n` elements, uninitialised, from the process's pool of page-locked blocks (taking one
  /// does not wait for the devices). Page-locked once a GPU backend runs in this process.
  PinnedBuffer(const Context& ctx, std::size_t n)
      : b_(detail::pinned_block(ctx, n * sizeof(T))), n_(n) {}

  std::size_t size() const { return n_; }
  /// Whether the memory is page-locked (false on the cpu backend, or when the driver had
  /// no pinned memory left: then ordinary memory).
  bool page_locked() const { return b_ && detail::pinned_page_locked(*b_); }

  /// The elements, after the transfer in flight (if any) has finished.
  T* data() { return b_ ? reinterpret_cast<T*>(detail::pinned_wait(*b_)) : nullptr; }
  const T* data() const {
    return b_ ? reinterpret_cast<const T*>(detail::pinned_wait(*b_)) : nullptr;
  }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + n_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + n_; }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  /// The last transfer started with this buffer (a default Event, ready, if none).
  Event event() const { return b_ ? detail::pinned_event(*b_) : Event(); }
  /// Waits for the transfer in flight; throws its error.
  void wait() const {
    if (b_) detail::pinned_wait(*b_);
  }

  /// For Array::read_async and write_async.
  const std::shared_ptr<detail::PinnedBlock>& block() const { return b_; }

 private:
  std::shared_ptr<detail::PinnedBlock> b_;
  std::size_t n_ = 0;
};

}  // namespace gridspan
