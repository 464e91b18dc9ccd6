// A GPU as a gridspan device. Work is queued on one of the compute streams by the device's
// launch thread (or by the submitting thread: without one, or when the device is idle); an
// event recorded after it is waited for by the stream's completion thread, which then reports
// the end (never a device-wide synchronisation on this path). The memory manager's moves
// between spaces use one copy stream per direction and wait for their own event only, so they
// overlap with kernels.
#include "backend/cuda/device.hpp"

#include "backend/lent.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread_name.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::backend::cuda {
namespace {

// What the calling thread's submitted work queues on.
struct Current {
  const CudaDevice* device = nullptr;
  CUstream stream = nullptr;
  LaunchLabel* label = nullptr;
  void* timer = nullptr;  // the work's std::unique_ptr<CudaDevice::Timer>
};
thread_local Current t_current;
// The device whose context this thread made current, by id: a primary context released and
// retained again may come back under the same handle, so handles cannot tell.
thread_local uint64_t t_bound = 0;
std::atomic<uint64_t> g_next_id{1};

// The region as up to three axes (outermost first) with offsets and strides in both boxes.
GsBox make_box(const Rect& dst_rect, const Rect& src_rect, const Rect& region) {
  GsBox b{};
  const int r = region.rank;
  auto stride = [&](const Rect& rect, int a) -> int64_t {
    if (a < 0) return 0;
    int64_t s = 1;
    for (int x = a + 1; x < r; ++x) s *= rect.extent(x);
    return s;
  };
  for (int k = 0; k < 3; ++k) {
    const int a = r - 3 + k;
    b.extent[k] = a >= 0 ? region.extent(a) : 1;
  }
  b.dst_offset = dst_rect.offset_of(region.lo);
  b.src_offset = src_rect.offset_of(region.lo);
  b.dst_stride[0] = stride(dst_rect, r - 3);
  b.dst_stride[1] = stride(dst_rect, r - 2);
  b.src_stride[0] = stride(src_rect, r - 3);
  b.src_stride[1] = stride(src_rect, r - 2);
  return b;
}

int64_t volume(const GsBox& b) {
  return b.extent[0] * b.extent[1] * b.extent[2];
}

// True when the box's elements are one run in the box with these strides.
bool contiguous(const GsBox& b, const int64_t stride[2]) {
  return (b.extent[1] == 1 || stride[1] == b.extent[2]) &&
         (b.extent[0] == 1 || stride[0] == b.extent[1] * b.extent[2]);
}

const char* op_tag(annotation::ReduceOp op) {
  switch (op) {
    case annotation::ReduceOp::add:
      return "add";
    case annotation::ReduceOp::mul:
      return "mul";
    case annotation::ReduceOp::min:
      return "min";
    case annotation::ReduceOp::max:
      return "max";
    case annotation::ReduceOp::bit_and:
      return "and";
    case annotation::ReduceOp::bit_or:
      return "or";
  }
  return "?";
}

}  // namespace

CudaDevice::CudaDevice(const DriverApi& api, int index, int ordinal,
                       const CudaDeviceOptions& options)
    : api_(api),
      id_(g_next_id.fetch_add(1)),
      index_(index),
      ordinal_(ordinal),
      poll_us_(std::max(0, options.poll_us)),
      idle_direct_(options.idle_direct) {
  const std::string where = fmt::format("GPU {}", ordinal);
  GRIDSPAN_CHECK_CU(api_.cuDeviceGet(&device_, ordinal), where);
  char name[256] = {};
  api_.cuDeviceGetName(name, sizeof name - 1, device_);
  name_ = fmt::format("cuda:{} ({})", index, name);
  int major = 0, minor = 0;
  api_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
  api_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  arch_ = major * 10 + minor;
  int unified = 0;
  api_.cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device_);
  if (!unified)
    throw ConfigError(fmt::format("{} has no unified addressing, which gridspan needs", name_));
  GRIDSPAN_CHECK_CU(api_.cuDevicePrimaryCtxRetain(&context_, device_), name_);
  bind();
  std::size_t free = 0, total = 0;
  GRIDSPAN_CHECK_CU(api_.cuMemGetInfo(&free, &total), name_);
  // The driver, modules, kernels' local memory and libraries such as cuBLAS need some room.
  const std::size_t reserve = (std::size_t(1) << 30) + total / 64;
  capacity_ = free > reserve ? free - reserve : free / 2;
  if (options.budget) capacity_ = std::min(capacity_, options.budget);
  // The compute lanes, then one per direction for transfers (submit_on).
  for (int s = 0; s < std::max(1, options.streams) + 2; ++s) {
    auto lane = std::make_unique<Lane>();
    lane->stream = Stream(api_, name_);
    lanes_.push_back(std::move(lane));
  }
  to_host_ = Stream(api_, name_);
  from_host_ = Stream(api_, name_);
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->thread = std::thread([this, l] {
      name_this_thread("gs-cuda-lane");
      // Its sleeps between looks last what they ask for, not 50 us more (Linux's default).
      if (poll_us_ > 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
      completion_loop(*l);
    });
  }
  if (options.launch_thread) {
    launcher_ = std::make_unique<Launcher>();
    launcher_->thread = std::thread([this] {
      name_this_thread("gs-cuda-launch");
      launch_loop();
    });
  }
}

CudaDevice::~CudaDevice() {
  logging::debug(
      "{}: works queued at once {}, by the launch thread {}, by waiters {}; launch "
      "thread woken {} times",
      name_, counts_.at_once.load(), counts_.by_launcher.load(), counts_.by_waiter.load(),
      counts_.wakes.load());
  if (launcher_) {  // it queues what was submitted before it stops
    {
      std::lock_guard lock(launcher_->mutex);
      launcher_->stop = true;
    }
    launcher_->cv.notify_all();
    launcher_->thread.join();
  }
  for (auto& lane : lanes_) {
    {
      std::lock_guard lock(lane->mutex);
      lane->stop = true;
    }
    lane->cv.notify_all();
    lane->poll_cv.notify_all();
    lane->thread.join();
  }
  bind();  // the handles go in this device's context, before it is released
  for (auto& lane : lanes_) lane->stream.reset();
  to_host_.reset();
  from_host_.reset();
  events_.clear();
  for (auto& [key, o] : opened_) api_.cuIpcCloseMemHandle(o.base);
  builtins_.reset();
  // This thread should not keep a context that may be gone once released.
  api_.cuCtxSetCurrent(nullptr);
  t_bound = 0;
  api_.cuDevicePrimaryCtxRelease(device_);
}

void CudaDevice::bind() const {
  if (t_bound == id_) return;
  GRIDSPAN_CHECK_CU(api_.cuCtxSetCurrent(context_), name_);
  t_bound = id_;
}

void* CudaDevice::allocate(std::size_t bytes) {
  bind();
  CUdeviceptr p = 0;
  const CuCall r = GRIDSPAN_CU(api_.cuMemAlloc(&p, std::max<std::size_t>(bytes, 1)));
  if (r.result == CUDA_ERROR_OUT_OF_MEMORY) {
    std::size_t free = 0, total = 0;
    api_.cuMemGetInfo(&free, &total);
    throw OutOfMemoryError(name_, bytes, allocated_.load(), capacity_,
                           fmt::format("the GPU has {} free of {}; lower GRIDSPAN_DEVICE_MEMORY "
                                       "or free GPU memory held outside gridspan",
                                       format_bytes(free), format_bytes(total)));
  }
  r.check(name_);
  allocated_ += bytes;
  return reinterpret_cast<void*>(p);
}

void CudaDevice::deallocate(void* p, std::size_t bytes) {
  if (!p) return;
  bind();
  CUresult r = api_.cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) logging::warn("cuMemFree failed on {}: {}", name_, describe(r));
  allocated_ -= bytes;
}

// Host blocks of at least a huge page come from mmap and are pinned by cuMemHostRegister:
// cuMemHostAlloc holds a driver lock for its whole run (milliseconds per megabyte), so every
// other thread's launches and copies stall meanwhile (14 ms a launch beside 64 MiB blocks on
// the H200 machine, docs/PERFORMANCE.md), where registering pages already touched holds up
// nobody, and huge pages halve the time. Smaller blocks (checked mode's report, which kernels
// address) stay with cuMemHostAlloc. deallocate_host gets the bytes allocate_host got.
namespace {
constexpr std::size_t kHugePage = std::size_t(2) << 20;
bool registered(std::size_t bytes) {
  return bytes >= kHugePage;
}
std::size_t in_pages(std::size_t bytes) {
  return (bytes + 4095) / 4096 * 4096;
}

// MADV_POPULATE_WRITE over [p, p + bytes), a large block in pieces on up to four threads (the
// kernel zeroes each page on the thread that faults it in, a few GB/s per core): 0, or the
// errno of a piece that failed.
int populate(void* p, std::size_t bytes) {
  constexpr std::size_t kPiece = std::size_t(16) << 20;
  const std::size_t threads = std::min<std::size_t>(4, bytes / kPiece);
  if (threads <= 1) return madvise(p, bytes, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
  const std::size_t part = (bytes / threads + kHugePage - 1) / kHugePage * kHugePage;
  std::vector<int> errors(threads, 0);
  auto run = [&](std::size_t k) {
    if (k * part >= bytes) return;
    char* at = static_cast<char*>(p) + k * part;
    if (madvise(at, std::min(part, bytes - k * part), MADV_POPULATE_WRITE) != 0) errors[k] = errno;
  };
  std::vector<std::thread> helpers;
  for (std::size_t k = 1; k < threads; ++k) {
    try {
      helpers.emplace_back(run, k);
    } catch (const std::system_error&) {
      run(k);  // no thread to be had: this one does it
    }
  }
  run(0);
  for (auto& t : helpers) t.join();
  for (int e : errors)
    if (e) return e;
  return 0;
}

// `bytes` (whole pages) of zeroed memory that starts at a huge page, touched; null when the
// system has no memory for it.
void* map_touched(std::size_t bytes) {
  void* raw =
      mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  if (const std::size_t tail = start + kHugePage - aligned)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint; without it the pages are 4 KiB
  const int error = populate(p, bytes);
  if (error == 0) return p;
  if (error != EINVAL) {  // out of memory (EINVAL: a kernel before 5.14, touched below)
    munmap(p, bytes);
    return nullptr;
  }
  for (std::size_t at = 0; at < bytes; at += 4096) static_cast<volatile char*>(p)[at] = 0;
  return p;
}
}  // namespace

void* CudaDevice::allocate_host(std::size_t bytes) {
  bind();
  const auto out_of_memory = [&] {
    return OutOfMemoryError("pinned host memory", bytes, 0, 0,
                            "lower GRIDSPAN_HOST_MEMORY or free host memory");
  };
  void* p = nullptr;
  if (!registered(bytes)) {
    const CuCall r = GRIDSPAN_CU(api_.cuMemHostAlloc(
        &p, std::max<std::size_t>(bytes, 1), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    if (r.result == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory();
    r.check(name_);
    return p;
  }
  const std::size_t mapped = in_pages(bytes);
  p = map_touched(mapped);
  if (!p) throw out_of_memory();
  const CuCall r = GRIDSPAN_CU(api_.cuMemHostRegister(
      p, mapped, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  if (r.result != CUDA_SUCCESS) munmap(p, mapped);
  if (r.result == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory();
  r.check(name_);
  return p;
}

void CudaDevice::deallocate_host(void* p, std::size_t bytes) {
  if (!p) return;
  bind();
  if (!registered(bytes)) {
    CUresult r = api_.cuMemFreeHost(p);
    if (r != CUDA_SUCCESS) logging::warn("cuMemFreeHost failed on {}: {}", name_, describe(r));
    return;
  }
  CUresult r = api_.cuMemHostUnregister(p);
  if (r != CUDA_SUCCESS) logging::warn("cuMemHostUnregister failed on {}: {}", name_, describe(r));
  munmap(p, in_pages(bytes));
}

// A spare event of `pool` (under events_mutex_), else a new one.
template <class E>
E CudaDevice::take_from(std::vector<E>& pool) {
  {
    std::lock_guard lock(events_mutex_);
    if (!pool.empty()) {
      E e = std::move(pool.back());
      pool.pop_back();
      return e;
    }
  }
  bind();
  return E(api_, name_);
}

Event CudaDevice::take_event() {
  return take_from(events_);
}

void CudaDevice::give_event(Event e) {
  std::lock_guard lock(events_mutex_);
  events_.push_back(std::move(e));
}

TimingEvent CudaDevice::take_timing_event() {
  return take_from(timing_events_);
}

bool CudaDevice::time_work(std::function<void(double)> report) {
  CUstream s = current_stream("time_work");
  if (!t_current.timer) return false;
  auto& timer = *static_cast<std::unique_ptr<Timer>*>(t_current.timer);
  if (timer) return false;
  auto t = std::make_unique<Timer>();
  t->start = take_timing_event();
  t->end = take_timing_event();
  GRIDSPAN_CHECK_CU(api_.cuEventRecord(t->start, s), name_);
  t->report = std::move(report);
  timer = std::move(t);
  return true;
}

// A timing failure costs the sample, never the work.
void CudaDevice::report_time(Timer& timer) {
  float ms = 0;
  const bool ok = api_.cuEventElapsedTime(&ms, timer.start, timer.end) == CUDA_SUCCESS;
  {
    std::lock_guard lock(events_mutex_);
    timing_events_.push_back(std::move(timer.start));
    timing_events_.push_back(std::move(timer.end));
  }
  if (ok) timer.report(double(ms) * 1e-3);
}

void CudaDevice::blocking_copy(CUstream stream, const std::function<CuCall()>& queue_copy) {
  bind();
  queue_copy().check(name_);
  Event e = take_event();
  CuCall r = GRIDSPAN_CU(api_.cuEventRecord(e, stream));
  if (r.ok()) r = GRIDSPAN_CU(api_.cuEventSynchronize(e));
  give_event(std::move(e));
  r.check(name_);
}

void CudaDevice::copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (!bytes) return;
  blocking_copy(to_host_, [&] {
    return GRIDSPAN_CU(
        api_.cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(device), bytes, to_host_));
  });
}

void CudaDevice::copy_from_host(void* device, const void* host, std::size_t bytes) {
  if (!bytes) return;
  blocking_copy(from_host_, [&] {
    return GRIDSPAN_CU(
        api_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device), host, bytes, from_host_));
  });
}

Device::Ticket CudaDevice::submit(std::function<void()> work,
                                  std::function<void(std::exception_ptr)> done,
                                  const std::vector<Ticket>& after) {
  return submit_on(Queue::compute, std::move(work), std::move(done), after);
}

// A stream runs its works in order, and its completion thread reports them in order: a
// transfer queued behind a long kernel it does not need would wait for it (and so would
// the process it goes to). Transfers have a lane per direction of their own. Compute work
// queued behind earlier works goes to the lane of the first of them still in flight: the
// stream orders it behind them without an event wait (a wait across streams costs the GPU
// microseconds per link of a chain); other compute work takes the lanes in turn.
std::size_t CudaDevice::lane_for(Queue queue, const std::vector<Ticket>& after) {
  const std::size_t compute = lanes_.size() - 2;
  if (queue == Queue::to_host) return compute;
  if (queue == Queue::from_host) return compute + 1;
  if (!after.empty()) {
    std::lock_guard tickets(tickets_mutex_);
    for (Ticket t : after)
      if (auto it = in_flight_.find(t); it != in_flight_.end() && it->second.lane < compute)
        return it->second.lane;
  }
  return next_lane_.fetch_add(1, std::memory_order_relaxed) % compute;
}

// With a launch thread the work waits in its slots; it is queued on a stream there, in
// the order of submission, so a ticket in `after` was queued before the work that names it.
Device::Ticket CudaDevice::submit_on(Queue queue, std::function<void()> work,
                                     std::function<void(std::exception_ptr)> done,
                                     const std::vector<Ticket>& after) {
  // Queued here: without a launch thread, or holding its `queuing` (queue_at_once).
  const bool waited =
      launcher_ && launcher_->host_waited.exchange(false, std::memory_order_acq_rel);
  if (!launcher_ || queue_at_once(waited)) {
    std::unique_lock<std::mutex> turn;
    if (launcher_) turn = std::unique_lock(launcher_->queuing, std::adopt_lock);
    const Ticket ticket = last_ticket_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (launcher_) counts_.at_once.fetch_add(1, std::memory_order_relaxed);
    queue_work(queue, work, done, after, ticket);
    return ticket;
  }
  Launcher& l = *launcher_;
  Ticket ticket = 0;
  bool wake = false;
  {
    std::lock_guard lock(l.mutex);
    if (l.count == l.slots.size()) l.slots.emplace_back();
    Submission& s = l.slots[l.count++];
    ticket = last_ticket_.fetch_add(1, std::memory_order_relaxed) + 1;
    s.queue = queue;
    s.work = std::move(work);
    s.done = std::move(done);
    s.after.assign(after.begin(), after.end());
    s.ticket = ticket;
    l.unqueued.fetch_add(1, std::memory_order_release);
    wake = l.idle == Launcher::Idle::asleep || (l.idle == Launcher::Idle::napping && l.count > 1);
  }
  if (wake) {
    counts_.wakes.fetch_add(1, std::memory_order_relaxed);
    l.cv.notify_one();
  }
  return ticket;
}

// A work for an idle device (GRIDSPAN_LAUNCH_IDLE_DIRECT: nothing on its streams, nothing
// waiting to be queued, nobody queuing) that a host thread has waited for since the last
// submit has nothing to overlap with the hand-over to the launch thread: the submitting
// thread queues it itself (true: the caller holds `queuing`), so that a host thread that
// waits for it next finds it running already. So does a work that finds the launch thread
// asleep (a launch's kernel behind its fill, after a pause of more than a millisecond):
// waking it would cost the work tens of microseconds, queuing it a few; the launch thread is
// roused meanwhile and takes the works once it is up. A work it names in `after` was
// submitted before, so it is queued. Launches in a stream (no wait since the last) go to the
// launch thread even when the GPU has run dry: queuing them here made a host that was slower
// than the GPU slower still (the driver's calls on its own thread), a state it then stayed in.
bool CudaDevice::queue_at_once(bool host_waited) {
  Launcher& l = *launcher_;
  if (!idle_direct_ || l.unqueued.load(std::memory_order_acquire) > 0) return false;
  if (!host_waited && !launcher_down()) return false;  // launches in a stream
  const bool busy = active_.load(std::memory_order_acquire) > 0;
  if (busy && !launcher_down()) return false;
  if (!l.queuing.try_lock()) return false;
  if (l.unqueued.load(std::memory_order_acquire) == 0) {
    if (busy) rouse_launcher();
    return true;
  }
  l.queuing.unlock();
  return false;
}

bool CudaDevice::launcher_down() const {
  const Launcher::Idle idle = launcher_->idle.load(std::memory_order_acquire);
  return idle == Launcher::Idle::asleep || idle == Launcher::Idle::roused;
}

void CudaDevice::rouse_launcher() {
  Launcher& l = *launcher_;
  {
    std::lock_guard lock(l.mutex);
    if (l.idle != Launcher::Idle::asleep) return;
    l.idle = Launcher::Idle::roused;
  }
  l.cv.notify_one();
}

// The launch thread: queues every work submitted so far, in turn. Out of work, it naps
// (20 us at a time, for up to 1 ms, then it sleeps): a submit wakes a napping thread only
// once two works wait, so that a single work a host thread waits for next is queued by that
// thread (flush) without paying for a wake-up, while one that nobody waits for starts within
// a nap. Roused from sleep (rouse_launcher), it naps again. (A work for an idle device, or
// one submitted while this thread sleeps, does not come here: queue_at_once.)
void CudaDevice::launch_loop() {
  Launcher& l = *launcher_;
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // naps of 20 us, not 70
  for (;;) {
    {
      std::unique_lock lock(l.mutex);
      auto idle_since = std::chrono::steady_clock::now();
      while (!l.stop && l.count == 0) {
        if (l.idle == Launcher::Idle::roused) idle_since = std::chrono::steady_clock::now();
        if (std::chrono::steady_clock::now() - idle_since < std::chrono::milliseconds(1)) {
          l.idle = Launcher::Idle::napping;
          l.cv.wait_for(lock, std::chrono::microseconds(20));
        } else {
          l.idle = Launcher::Idle::asleep;
          l.cv.wait(lock,
                    [&] { return l.stop || l.count > 0 || l.idle == Launcher::Idle::roused; });
        }
      }
      l.idle = Launcher::Idle::busy;
      if (l.count == 0) return;  // stopping, and everything submitted is queued
    }
    counts_.by_launcher.fetch_add(queue_submitted(), std::memory_order_relaxed);
  }
}

// Queues every work submitted so far, in turn, once it has the turn (`queuing`). Whoever
// waits for the turn looks again and yields meanwhile: a thread asleep on the mutex would
// cost the one that lets it go a wake-up, and a waiting host thread its own.
std::size_t CudaDevice::queue_submitted() {
  Launcher& l = *launcher_;
  std::unique_lock queuing(l.queuing, std::try_to_lock);
  while (!queuing) {
    if (l.unqueued.load(std::memory_order_acquire) == 0) return 0;  // the other one queued them
    std::this_thread::yield();
    queuing.try_lock();
  }
  std::size_t n = 0;
  {
    std::lock_guard lock(l.mutex);
    std::swap(l.slots, l.taken);
    n = std::exchange(l.count, 0);
  }
  for (std::size_t k = 0; k < n; ++k) {
    Submission& s = l.taken[k];
    queue_work(s.queue, s.work, s.done, s.after, s.ticket);
    s.work = nullptr;
    s.done = nullptr;
    l.unqueued.fetch_sub(1, std::memory_order_release);
  }
  return n;
}

// A host thread about to wait queues what the launch thread has not taken yet itself: the
// works' data are in its caches, and the hand-over costs the wait microseconds.
void CudaDevice::flush() {
  if (launcher_) launcher_->host_waited.store(true, std::memory_order_release);
  if (launcher_ && launcher_->unqueued.load(std::memory_order_acquire) > 0)
    counts_.by_waiter.fetch_add(queue_submitted(), std::memory_order_relaxed);
}

void CudaDevice::queue_work(Queue queue, std::function<void()>& work,
                            std::function<void(std::exception_ptr)>& done,
                            const std::vector<Ticket>& after, Ticket ticket) {
  const std::size_t index = lane_for(queue, after);
  Lane& lane = *lanes_[index];
  active_.fetch_add(1, std::memory_order_acq_rel);  // until its report (completion_loop)
  LaunchLabel label;
  std::exception_ptr error;
  Event event;
  std::unique_ptr<Timer> timer;
  {
    std::lock_guard lock(lane.submit_mutex);
    const Current saved = t_current;
    t_current = Current{this, lane.stream, &label, &timer};
    try {
      bind();
      if (!after.empty()) {
        // The GPU holds this work back until the earlier works' events have fired; the
        // host does not wait. Finished works' events are gone (and may be reused).
        std::lock_guard tickets(tickets_mutex_);
        for (Ticket t : after)
          if (auto it = in_flight_.find(t); it != in_flight_.end() && it->second.lane != index)
            GRIDSPAN_CHECK_CU(api_.cuStreamWaitEvent(lane.stream, it->second.event, 0), name_);
      }
      work();
    } catch (...) {
      error = std::current_exception();
    }
    t_current = saved;
    // Recorded even after a failure: what the work did queue must finish before its
    // memory is released.
    try {
      if (timer && (error || api_.cuEventRecord(timer->end, lane.stream) != CUDA_SUCCESS))
        timer.reset();
      event = take_event();
      GRIDSPAN_CHECK_CU(api_.cuEventRecord(event, lane.stream), name_);
      std::lock_guard tickets(tickets_mutex_);
      add_in_flight(ticket, InFlight{event.get(), index});
    } catch (...) {
      if (event) give_event(std::move(event));
      event = Event();
      if (!error) error = std::current_exception();
    }
  }
  {
    std::lock_guard lock(lane.mutex);
    push_pending(lane, Pending{std::move(event), ticket, std::move(done), error, std::move(label),
                               std::move(timer)});
  }
  lane.cv.notify_one();
}

// The lane's next work, or one without a `done` when the lane stops. A lane that has just
// reported a work watches its queue for a while before it sleeps: in a stream of launches
// the next work comes within microseconds, and waking a sleeping thread costs as much.
CudaDevice::Pending CudaDevice::next_pending(Lane& lane) {
  constexpr auto kWatch = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kWatch;
  while (lane.queued.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  std::unique_lock lock(lane.mutex);
  lane.cv.wait(lock, [&] { return lane.stop || lane.head < lane.queue.size(); });
  if (lane.head == lane.queue.size()) return Pending{};  // stopping, and everything reported
  Pending p = std::move(lane.queue[lane.head++]);
  if (lane.head == lane.queue.size()) {
    lane.queue.clear();
    lane.head = 0;
  }
  lane.queued.store(lane.queue.size() - lane.head, std::memory_order_release);
  return p;
}

void CudaDevice::push_pending(Lane& lane, Pending p) {
  // A lane that never runs dry drops its reported works now and then.
  if (lane.head > 64 && lane.head * 2 > lane.queue.size()) {
    lane.queue.erase(lane.queue.begin(),
                     lane.queue.begin() + static_cast<std::ptrdiff_t>(lane.head));
    lane.head = 0;
  }
  lane.queue.push_back(std::move(p));
  lane.queued.store(lane.queue.size() - lane.head, std::memory_order_release);
}

void CudaDevice::add_in_flight(Ticket ticket, InFlight flight) {
  if (spare_flights_.empty()) {
    in_flight_.emplace(ticket, flight);
    return;
  }
  auto node = std::move(spare_flights_.back());
  spare_flights_.pop_back();
  node.key() = ticket;
  node.mapped() = flight;
  in_flight_.insert(std::move(node));
}

void CudaDevice::drop_in_flight(Ticket ticket) {
  auto node = in_flight_.extract(ticket);
  if (node && spare_flights_.size() < 256) spare_flights_.push_back(std::move(node));
}

void CudaDevice::completion_loop(Lane& lane) {
  while (true) {
    Pending p = next_pending(lane);
    if (!p.done) return;
    if (p.event) {
      bind();
      CUresult r = wait_event(lane, p.event);
      {
        std::lock_guard tickets(tickets_mutex_);
        drop_in_flight(p.ticket);
      }
      give_event(std::move(p.event));
      if (r != CUDA_SUCCESS && !p.error) {
        p.error = std::make_exception_ptr(DeviceError(fmt::format(
            "{} reported {} while running {} (or work queued beside it). The GPU's context "
            "cannot be used after such a fault; end the program and fix the kernel (run it "
            "with GRIDSPAN_CHECK=1 on the cpu backend, or under compute-sanitizer)",
            name_, describe(r), p.label.str())));
      }
    }
    if (p.timer && !p.error) report_time(*p.timer);
    active_.fetch_sub(1, std::memory_order_acq_rel);
    p.done(p.error);
  }
}

// A work's end. The driver's wait spins on a core, and a thread spinning there slows the
// launching thread's driver calls (docs/PERFORMANCE.md: about 1.2 us per launch on an H200
// machine); with poll_us_ the lane looks now and then instead, except while a host thread
// waits for work (begin_wait), when the end is what matters and the driver finds it first.
CUresult CudaDevice::wait_event(Lane& lane, CUevent event) {
  const auto period = std::chrono::microseconds(poll_us_);
  while (poll_us_ > 0 && waiters_.load(std::memory_order_acquire) == 0) {
    const CUresult r = api_.cuEventQuery(event);
    if (r != CUDA_ERROR_NOT_READY) return r;
    std::unique_lock lock(lane.mutex);
    if (lane.stop) break;
    lane.poll_cv.wait_for(
        lock, period, [&] { return lane.stop || waiters_.load(std::memory_order_acquire) > 0; });
  }
  return api_.cuEventSynchronize(event);
}

void CudaDevice::begin_wait() {
  if (poll_us_ == 0 || waiters_.fetch_add(1, std::memory_order_acq_rel) > 0) return;
  for (auto& lane : lanes_) {
    std::lock_guard lock(lane->mutex);  // a lane between its look and its sleep hears it
    lane->poll_cv.notify_all();
  }
}

void CudaDevice::end_wait() {
  if (poll_us_ > 0) waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

CUstream CudaDevice::current_stream(const char* what) const {
  if (t_current.device != this)
    throw Error(fmt::format("internal error: {} on {} outside work submitted to it", what, name_));
  return t_current.stream;
}

void* CudaDevice::stream() const {
  return t_current.device == this ? t_current.stream : nullptr;
}

void CudaDevice::synchronize() {
  CUstream s = current_stream("synchronize");
  CUresult r = api_.cuStreamSynchronize(s);
  if (r != CUDA_SUCCESS)
    throw DeviceError(fmt::format("{} reported {} while running {}", name_, describe(r),
                                  t_current.label ? t_current.label->str() : "work"));
}

// Waits as plain CUDA's synchronize does (the driver spins while cores are spare); a fault
// is left for the completion threads to report.
void CudaDevice::wait_queued() {
  flush();  // whatever the launch thread was queuing is queued once flush has the turn
  bind();
  for (auto& lane : lanes_) api_.cuStreamSynchronize(lane->stream);
}

void CudaDevice::launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                        void** params, const LaunchLabel& label) {
  CUstream s = current_stream("a kernel launch");
  if (t_current.label) *t_current.label = label;
  CUresult r = api_.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, s,
                                   params, nullptr);
  if (r != CUDA_SUCCESS)
    throw DeviceError(
        fmt::format("launching {} on {} failed: {}", label.str(), name_, describe(r)));
}

bool CudaDevice::enable_peer(const CudaDevice& other) {
  int can = 0;
  api_.cuDeviceCanAccessPeer(&can, device_, other.device_);
  if (!can) return false;
  bind();
  CUresult r = api_.cuCtxEnablePeerAccess(other.context_, 0);
  return r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

void CudaDevice::load_builtins(const std::string& cubin) {
  bind();
  builtins_ = Module(api_, cubin, "the built-in kernels", name_);
  auto get = [&](const std::string& name) { return builtins_.function(name.c_str(), name_); };
  for (int k = 0; k < 5; ++k) {
    copy_[k] = get(fmt::format("gs_copy_{}", 1 << k));
    fill_[k] = get(fmt::format("gs_fill_{}", 1 << k));
  }
  using annotation::ReduceOp;
  for (DType t : {DType::i8, DType::i16, DType::i32, DType::i64, DType::u8, DType::u16, DType::u32,
                  DType::u64, DType::f16, DType::bf16, DType::f32, DType::f64})
    for (ReduceOp op : {ReduceOp::add, ReduceOp::mul, ReduceOp::min, ReduceOp::max,
                        ReduceOp::bit_and, ReduceOp::bit_or}) {
      const bool bitwise = op == ReduceOp::bit_and || op == ReduceOp::bit_or;
      if (!bitwise || !dtype_is_float(t))
        combine_[{t, op}] = get(fmt::format("gs_combine_{}_{}", dtype_name(t), op_tag(op)));
    }
  narrow_f16_ = get("gs_narrow_" + dtype_name(DType::f16));
  narrow_bf16_ = get("gs_narrow_" + dtype_name(DType::bf16));
}

CUfunction CudaDevice::sized_builtin(const CUfunction (&table)[5], std::size_t elem,
                                     const char* what) const {
  for (int k = 0; k < 5; ++k)
    if (elem == std::size_t(1) << k) return table[k];
  throw Error(fmt::format("internal error: {} of {}-byte elements", what, elem));
}

CUfunction CudaDevice::combine_builtin(DType dtype, annotation::ReduceOp op) const {
  // Booleans combine as bytes, as on the cpu backend.
  auto it = combine_.find({dtype == DType::boolean ? DType::u8 : dtype, op});
  if (it == combine_.end())
    throw Error(fmt::format("internal error: no {} reduction of {} on the GPU",
                            annotation::op_name(op), dtype_name(dtype)));
  return it->second;
}

std::string LaunchLabel::str() const {
  if (!kernel) return "a copy, fill or reduction";
  return fmt::format("kernel `{}` on the superblock of blocks [{}..{}) x [{}..{}) x [{}..{})",
                     *kernel, lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]);
}

// Geometry of a copy between two boxes through cuMemcpy3D (one call for any box).
void CudaDevice::copy_box(void* dst, CUmemorytype dst_type, const Rect& dst_rect, const void* src,
                          CUmemorytype src_type, const Rect& src_rect, const Rect& region,
                          std::size_t elem, CUstream stream) {
  if (region.empty()) return;
  const GsBox b = make_box(dst_rect, src_rect, region);
  auto* d = static_cast<unsigned char*>(dst) + b.dst_offset * int64_t(elem);
  auto* s = static_cast<const unsigned char*>(src) + b.src_offset * int64_t(elem);
  if (contiguous(b, b.dst_stride) && contiguous(b, b.src_stride)) {
    const std::size_t bytes = std::size_t(volume(b)) * elem;
    const auto dd = reinterpret_cast<CUdeviceptr>(d);
    const auto sd = reinterpret_cast<CUdeviceptr>(s);
    if (src_type == CU_MEMORYTYPE_HOST)
      GRIDSPAN_CHECK_CU(api_.cuMemcpyHtoDAsync(dd, s, bytes, stream), name_);
    else if (dst_type == CU_MEMORYTYPE_HOST)
      GRIDSPAN_CHECK_CU(api_.cuMemcpyDtoHAsync(d, sd, bytes, stream), name_);
    else
      GRIDSPAN_CHECK_CU(api_.cuMemcpyAsync(dd, sd, bytes, stream), name_);
    return;
  }
  CUDA_MEMCPY3D m;
  std::memset(&m, 0, sizeof m);
  auto set_side = [&](CUmemorytype type, const void* p, const int64_t stride[2],
                      CUmemorytype& mtype, const void*& host, CUdeviceptr& dev, std::size_t& pitch,
                      std::size_t& height) {
    mtype = type;
    if (type == CU_MEMORYTYPE_HOST)
      host = p;
    else
      dev = reinterpret_cast<CUdeviceptr>(p);
    pitch = std::size_t(stride[1]) * elem;
    height = stride[0] && stride[1] ? std::size_t(stride[0] / stride[1]) : std::size_t(b.extent[1]);
  };
  set_side(src_type, s, b.src_stride, m.srcMemoryType, m.srcHost, m.srcDevice, m.srcPitch,
           m.srcHeight);
  const void* dst_host = nullptr;
  set_side(dst_type, d, b.dst_stride, m.dstMemoryType, dst_host, m.dstDevice, m.dstPitch,
           m.dstHeight);
  m.dstHost = const_cast<void*>(dst_host);
  m.WidthInBytes = std::size_t(b.extent[2]) * elem;
  m.Height = std::size_t(b.extent[1]);
  m.Depth = std::size_t(b.extent[0]);
  GRIDSPAN_CHECK_CU(api_.cuMemcpy3DAsync(&m, stream), name_);
}

void CudaDevice::copy(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                      const Rect& region, std::size_t elem) {
  CUstream s = current_stream("copy");
  if (region.empty()) return;
  const GsBox b = make_box(dst_rect, src_rect, region);
  const bool straight = contiguous(b, b.dst_stride) && contiguous(b, b.src_stride);
  const bool sized = elem == 1 || elem == 2 || elem == 4 || elem == 8 || elem == 16;
  if (!straight && sized && peer_everywhere_) {
    // A strided box: one kernel, which reads another GPU's memory over peer access.
    CUfunction f = sized_builtin(copy_, elem, "a box copy");
    GsBox box = b;
    void* dp = dst;
    const void* sp = src;
    void* params[] = {&dp, &sp, &box};
    const int64_t n = volume(b);
    const unsigned grid[3] = {unsigned(std::min<int64_t>((n + 255) / 256, 65535)), 1, 1};
    const unsigned block[3] = {256, 1, 1};
    GRIDSPAN_CHECK_CU(api_.cuLaunchKernel(f, grid[0], 1, 1, block[0], 1, 1, 0, s, params, nullptr),
                      name_);
    return;
  }
  copy_box(dst, CU_MEMORYTYPE_UNIFIED, dst_rect, src, CU_MEMORYTYPE_UNIFIED, src_rect, region, elem,
           s);
}

void CudaDevice::upload(void* dst, const Rect& dst_rect, const void* host, const Rect& host_rect,
                        const Rect& region, std::size_t elem) {
  copy_box(dst, CU_MEMORYTYPE_DEVICE, dst_rect, host, CU_MEMORYTYPE_HOST, host_rect, region, elem,
           current_stream("upload"));
}

void CudaDevice::download(void* host, const Rect& host_rect, const void* src, const Rect& src_rect,
                          const Rect& region, std::size_t elem) {
  copy_box(host, CU_MEMORYTYPE_HOST, host_rect, src, CU_MEMORYTYPE_DEVICE, src_rect, region, elem,
           current_stream("download"));
}

void CudaDevice::fill(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
                      std::size_t elem) {
  CUstream s = current_stream("fill");
  if (region.empty()) return;
  const GsBox b = make_box(dst_rect, dst_rect, region);
  bool zero = true;
  for (std::size_t i = 0; i < elem; ++i)
    zero = zero && !static_cast<const unsigned char*>(value)[i];
  if (zero && contiguous(b, b.dst_stride)) {
    auto p = reinterpret_cast<CUdeviceptr>(static_cast<unsigned char*>(dst) + b.dst_offset * elem);
    GRIDSPAN_CHECK_CU(api_.cuMemsetD8Async(p, 0, std::size_t(volume(b)) * elem, s), name_);
    return;
  }
  CUfunction f = sized_builtin(fill_, elem, "a fill");
  alignas(16) unsigned char v[16] = {};
  std::memcpy(v, value, elem);
  GsBox box = b;
  void* p = dst;
  void* params[] = {&p, &box, v};
  const int64_t n = volume(b);
  const unsigned grid = unsigned(std::min<int64_t>((n + 255) / 256, 65535));
  GRIDSPAN_CHECK_CU(api_.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, params, nullptr), name_);
}

void CudaDevice::combine(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                         annotation::ReduceOp op, DType dtype) {
  CUstream s = current_stream("a reduction");
  const Rect region = dst_rect.intersect(src_rect);
  if (region.empty()) return;
  const std::size_t elem = dtype_size(dtype);
  CUdeviceptr staged = 0;
  if (!peer_everywhere_) {
    // The source may be on a GPU this one cannot address: bring it here first.
    int ordinal = ordinal_;
    api_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                               reinterpret_cast<CUdeviceptr>(src));
    if (ordinal != ordinal_) {
      const std::size_t bytes = std::size_t(src_rect.volume()) * elem;
      GRIDSPAN_CHECK_CU(api_.cuStreamSynchronize(s), name_);
      GRIDSPAN_CHECK_CU(api_.cuMemAlloc(&staged, bytes), name_);
      GRIDSPAN_CHECK_CU(api_.cuMemcpyAsync(staged, reinterpret_cast<CUdeviceptr>(src), bytes, s),
                        name_);
      src = reinterpret_cast<const void*>(staged);
    }
  }
  CUfunction f = combine_builtin(dtype, op);
  GsBox box = make_box(dst_rect, src_rect, region);
  void* dp = dst;
  const void* sp = src;
  void* params[] = {&dp, &sp, &box};
  const int64_t n = volume(box);
  const unsigned grid = unsigned(std::min<int64_t>((n + 255) / 256, 65535));
  CuCall r = GRIDSPAN_CU(api_.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, params, nullptr));
  if (staged) {
    const CuCall w = GRIDSPAN_CU(api_.cuStreamSynchronize(s));
    api_.cuMemFree(staged);
    if (r.ok()) r = w;
  }
  r.check(name_);
}

void CudaDevice::narrow(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
                        const Rect& region, DType dtype) {
  CUstream s = current_stream("a rounding to 16 bits");
  if (region.empty()) return;
  if (dtype != DType::f16 && dtype != DType::bf16)
    throw Error(fmt::format("internal error: narrowing float32 to {}", dtype_name(dtype)));
  CUfunction f = dtype == DType::f16 ? narrow_f16_ : narrow_bf16_;
  GsBox box = make_box(dst_rect, src_rect, region);
  void* dp = dst;
  const void* sp = src;
  void* params[] = {&dp, &sp, &box};
  const unsigned grid = unsigned(std::min<int64_t>((volume(box) + 255) / 256, 65535));
  GRIDSPAN_CHECK_CU(api_.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, params, nullptr), name_);
}

// Another process of this node copies from a GPU's memory through CUDA IPC: the handle of
// the allocation the memory lies in, and where in it. Both sides are one build on one
// node, so the description is a plain struct.
namespace {
struct LentGpu {
  char magic[4] = {'g', 's', 'c', '1'};
  uint32_t pid = 0;
  CUipcMemHandle handle{};
  uint64_t address = 0;  // in the lending process (used when that is this process)
  uint64_t offset = 0;   // from the allocation's start
  uint64_t bytes = 0;
};

LentGpu read_lent(const std::vector<unsigned char>& lent, const std::string& where) {
  LentGpu g;
  if (!unpack_lent(lent, g))
    throw LendingError(fmt::format("{}: the lent memory's description is not a GPU's", where));
  return g;
}

std::string handle_key(const LentGpu& g) {
  return std::string(reinterpret_cast<const char*>(&g.handle), sizeof g.handle);
}
}  // namespace

std::vector<unsigned char> CudaDevice::lend(const void* ptr, std::size_t bytes) {
  bind();
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  LentGpu g;
  if (api_.cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS ||
      api_.cuIpcGetMemHandle(&g.handle, base) != CUDA_SUCCESS)
    return {};  // not memory IPC can lend: the bytes go through the host
  g.pid = static_cast<uint32_t>(getpid());
  g.address = p;
  g.offset = p - base;
  g.bytes = bytes;
  return pack_lent(g);
}

void CudaDevice::copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                           const Rect& src_rect, const Rect& region, std::size_t elem) {
  CUstream s = current_stream("copy_lent");
  const LentGpu g = read_lent(lent, name_);
  check_lent_box(name_, src_rect, elem, g.bytes);
  CUdeviceptr src = 0;
  if (g.pid == static_cast<uint32_t>(getpid())) {
    src = g.address;  // ranks of one process (tests): the pointer itself
  } else {
    std::lock_guard lock(opened_mutex_);
    Opened& o = opened_[handle_key(g)];
    if (o.users == 0) {
      CUresult r = api_.cuIpcOpenMemHandle(&o.base, g.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS) {
        opened_.erase(handle_key(g));
        throw LendingError(
            fmt::format("{} cannot open GPU memory of process {}: {}", name_, g.pid, describe(r)));
      }
    }
    ++o.users;
    src = o.base + g.offset;
  }
  copy_box(dst, CU_MEMORYTYPE_DEVICE, dst_rect, reinterpret_cast<const void*>(src),
           CU_MEMORYTYPE_UNIFIED, src_rect, region, elem, s);
}

// Closed once no copy uses it (before this rank's reply lets the lender free it).
void CudaDevice::release_lent(const std::vector<unsigned char>& lent) {
  const LentGpu g = read_lent(lent, name_);
  if (g.pid == static_cast<uint32_t>(getpid())) return;
  std::lock_guard lock(opened_mutex_);
  auto it = opened_.find(handle_key(g));
  if (it == opened_.end() || --it->second.users > 0) return;
  bind();
  CUresult r = api_.cuIpcCloseMemHandle(it->second.base);
  if (r != CUDA_SUCCESS)
    logging::warn("closing GPU memory of process {} on {} failed: {}", g.pid, name_, describe(r));
  opened_.erase(it);
}

}  // namespace gridspan::backend::cuda
