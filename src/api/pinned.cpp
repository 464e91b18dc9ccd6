// Pinned buffers and the transfers that do not wait (api/pinned.hpp, Array::read_async and
// write_async). A buffer's memory is a block of the process's host buffer pool (core/bytes),
// which a GPU backend fills with page-locked memory; the block remembers its transfer in
// flight. A read writes the buffer when its task runs, so the buffer waits for it before
// anyone touches or frees the memory; a write's tasks hold the block themselves until every
// chunk has its bytes.
#include <fmt/format.h>

#include <mutex>

#include "core/bytes.hpp"
#include "gridspan/api/array.hpp"
#include "gridspan/api/context.hpp"
#include "gridspan/api/pinned.hpp"
#include "gridspan/core/error.hpp"
#include "plan/task.hpp"
#include "runtime/driver.hpp"

namespace gridspan::detail {

struct PinnedBlock {
  explicit PinnedBlock(std::size_t n) : bytes(Bytes::pooled(n)) {}
  ~PinnedBlock() {
    // A read in flight writes this memory: it must end first. (A write's tasks own the
    // block, so it cannot go while one is in flight.)
    if (reading) try {
        wait();
      } catch (const std::exception&) {  // the transfer failed: said where it was waited for
      }
  }
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;

  void wait() {
    std::lock_guard lock(mutex);
    if (!driver) return;
    // After the Context's end every task had finished; its events can no longer be asked.
    if (!driver->ended()) driver->wait(task);
    driver.reset();
    reading = false;
  }
  void start(const std::shared_ptr<runtime::Driver>& d, plan::TaskId t, bool read) {
    std::lock_guard lock(mutex);
    driver = d;
    task = t;
    reading = read;
  }

  Bytes bytes;
  std::mutex mutex;
  std::shared_ptr<runtime::Driver> driver;  // the transfer in flight's, null when none
  plan::TaskId task = 0;
  bool reading = false;
  Event last;  // the last transfer's
};

std::shared_ptr<PinnedBlock> pinned_block(const Context& ctx, std::size_t bytes) {
  if (context_driver(ctx)->ended())
    throw Error("PinnedBuffer: this gs::Context has ended; make buffers while it lives");
  try {
    return std::make_shared<PinnedBlock>(bytes);
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format(
        "PinnedBuffer: {} bytes of host memory could not be allocated; use a smaller buffer "
        "(a part of the array) or free others first",
        bytes));
  }
}
unsigned char* pinned_wait(PinnedBlock& b) {
  b.wait();
  return b.bytes.data();
}
bool pinned_page_locked(const PinnedBlock& b) {
  return b.bytes.pinned();
}
Event pinned_event(const PinnedBlock& b) {
  return b.last;
}

namespace {

// The buffer must be there and hold exactly the array's elements.
void check_buffer(const ArrayHandle& h, const std::shared_ptr<PinnedBlock>& b, std::size_t n,
                  const char* what) {
  require_context_array(h, what);
  if (!b)
    throw Error(fmt::format(
        "{}: the pinned buffer is empty (default-constructed or moved from); make one of the "
        "array's size: gs::PinnedBuffer<T> buf(ctx, a.size())",
        what));
  const auto want = static_cast<std::size_t>(h.shape.volume());
  if (n != want)
    throw Error(fmt::format(
        "{}: the pinned buffer holds {} elements, the array of shape {} has {}; a buffer "
        "must hold exactly the array (gs::PinnedBuffer<T> buf(ctx, a.size()))",
        what, n, h.shape.str(), want));
  if (h.is_view)
    throw Error(fmt::format(
        "{}: this array of shape {} is a view (a slice or transpose) of another; write a "
        "whole array and assign it to the view (view.assign(whole))",
        what, h.shape.str()));
}

Event started(const ArrayHandle& h, PinnedBlock& b, plan::TaskId task, bool read) {
  b.start(h.driver, task, read);
  b.last = Event(h.driver, task);
  return b.last;
}

}  // namespace

Event array_read_async(const ArrayHandle& h, const std::shared_ptr<PinnedBlock>& b, std::size_t n) {
  check_buffer(h, b, n, "read_async");
  b->wait();  // one transfer at a time per buffer
  const plan::TaskId task = h.driver->read_array_async(h.meta(), b->bytes.data());
  return started(h, *b, task, true);
}

Event array_write_async(const ArrayHandle& h, const std::shared_ptr<PinnedBlock>& b,
                        std::size_t n) {
  check_buffer(h, b, n, "write_async");
  h.driver->outside_tasks("writes an array");  // before the library's lock (lazy_mutex)
  settle_readers(*h.storage);
  b->wait();
  plan::HostBytes bytes(b, b->bytes.data(), b->bytes.size());
  const plan::TaskId task = h.driver->write_array(h.meta(), std::move(bytes));
  return started(h, *b, task, false);
}

}  // namespace gridspan::detail
