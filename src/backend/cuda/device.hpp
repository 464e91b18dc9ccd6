// One GPU: its primary context, compute streams with a completion thread each, one copy
// stream per direction, and the backend's own kernels (fills, reductions).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/cuda/handles.hpp"
#include "backend/cuda/loader.hpp"
#include "backend/device.hpp"
#include "core/mutex.hpp"

namespace gridspan::backend::cuda {

/// What a work's last kernel was: kept as numbers on the launch path, written out only when
/// the GPU reports a fault.
struct LaunchLabel {
  const std::string* kernel = nullptr;           // null: no kernel (copies, fills, reductions)
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};  // the superblock, in blocks
  std::string str() const;
};

/// How a GPU device runs (from the Config's settings of the same names).
struct CudaDeviceOptions {
  std::size_t budget = 0;  // bytes the memory manager may hold (0: free memory less a reserve)
  int streams = 2;         // compute streams
  // The completion threads look for a work's end every `poll_us` microseconds while no host
  // thread waits (begin_wait); 0 = they wait in the driver, which spins.
  int poll_us = 0;
  // Works are queued on the streams by a thread of the device's own, so that submit returns
  // at once; false: by the submitting thread.
  bool launch_thread = false;
  // With a launch thread: a work submitted while the device has none queued or running, and
  // none waits to be queued, is queued by the submitting thread.
  bool idle_direct = false;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(const DriverApi& api, int index, int ordinal, const CudaDeviceOptions& options);
  ~CudaDevice() override;  // waits for everything queued, then frees streams and context

  int index() const override { return index_; }
  std::string name() const override { return name_; }
  std::size_t memory_capacity() const override { return capacity_; }
  bool unified() const override { return false; }
  bool asynchronous() const override { return true; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* p, std::size_t bytes) override;
  void copy_to_host(void* host, const void* device, std::size_t bytes) override;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override;
  Ticket submit(std::function<void()> work, std::function<void(std::exception_ptr)> done,
                const std::vector<Ticket>& after) override;
  Ticket submit_on(Queue queue, std::function<void()> work,
                   std::function<void(std::exception_ptr)> done,
                   const std::vector<Ticket>& after) override;
  void copy(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
            const Rect& region, std::size_t elem_size) override;
  void fill(void* dst, const Rect& dst_rect, const Rect& region, const void* value,
            std::size_t elem_size) override;
  void combine(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
               annotation::ReduceOp op, DType dtype) override;
  void narrow(void* dst, const Rect& dst_rect, const void* src, const Rect& src_rect,
              const Rect& region, DType dtype) override;
  void upload(void* dst, const Rect& dst_rect, const void* host, const Rect& host_rect,
              const Rect& region, std::size_t elem_size) override;
  void download(void* host, const Rect& host_rect, const void* src, const Rect& src_rect,
                const Rect& region, std::size_t elem_size) override;
  void synchronize() override;
  void wait_queued() override;
  void flush() override;
  void begin_wait() override;
  void end_wait() override;
  void* stream() const override;
  bool time_work(std::function<void(double)> report) override;
  std::vector<unsigned char> lend(const void* ptr, std::size_t bytes) override;
  void copy_lent(void* dst, const Rect& dst_rect, const std::vector<unsigned char>& lent,
                 const Rect& src_rect, const Rect& region, std::size_t elem_size) override;
  void release_lent(const std::vector<unsigned char>& lent) override;

  int ordinal() const { return ordinal_; }
  int arch() const { return arch_; }  // compute capability as 90 for 9.0
  CUcontext context() const { return context_; }
  /// Makes this device's context current on the calling thread.
  void bind() const;
  /// Loads the backend's own kernels and looks every one up (once, before any work).
  void load_builtins(const std::string& cubin);
  /// Inside submitted work: launches `f` on the work's stream, labelled for fault messages.
  void launch(CUfunction f, const unsigned grid[3], const unsigned block[3], void** params,
              const LaunchLabel& label);
  /// Peer access to `other` (both ways are asked for separately); false when impossible.
  bool enable_peer(const CudaDevice& other);

 private:
  // A work timed on the GPU (time_work): events around what it queued, and who hears.
  struct Timer {
    TimingEvent start, end;
    std::function<void(double)> report;
  };
  struct Pending {
    Event event;
    Ticket ticket;
    std::function<void(std::exception_ptr)> done;
    std::exception_ptr error;
    LaunchLabel label;
    std::unique_ptr<Timer> timer;  // null unless the work was timed
  };
  struct Lane {
    Stream stream;
    std::mutex submit_mutex;  // one work queues at a time, so labels and events pair up
    AdaptiveMutex mutex;      // the mutexes the completion thread shares spin before they sleep
    std::condition_variable_any cv;
    std::condition_variable_any poll_cv;  // a polling completion thread sleeps on it
    // Works to report, from `head` on: a vector that keeps its memory (no allocation per
    // work on the launching thread, no free on the completion thread).
    std::vector<Pending> queue;
    std::size_t head = 0;
    std::atomic<std::size_t> queued{0};  // works to report, read without the mutex
    bool stop = false;
    std::thread thread;
  };
  // A work handed to the launch thread, in the order of submission. Slots are reused, so
  // that neither side allocates per work.
  struct Submission {
    Queue queue = Queue::compute;
    std::function<void()> work;
    std::function<void(std::exception_ptr)> done;
    std::vector<Ticket> after;
    Ticket ticket = 0;
  };
  struct Launcher {
    AdaptiveMutex mutex;
    std::condition_variable_any cv;
    std::vector<Submission> slots;  // [0, count) wait to be queued
    std::size_t count = 0;
    std::atomic<std::size_t> unqueued{0};  // submitted, not yet on a stream
    std::atomic<bool> host_waited{true};   // a host thread waited (flush) since the last submit
    // napping: woken when two works wait; asleep: by any; roused: woken by a submitter
    // that queued a work itself meanwhile (queue_at_once), not yet up. Written under
    // `mutex`; queue_at_once reads it without.
    enum class Idle { busy, napping, asleep, roused };
    std::atomic<Idle> idle{Idle::busy};
    bool stop = false;
    // Held by whoever queues works (the launch thread, or a host thread about to wait),
    // so that they are queued in the order of submission; `taken` is theirs under it.
    std::mutex queuing;
    std::vector<Submission> taken;
    std::thread thread;
  };
  void launch_loop();
  std::size_t queue_submitted();    // what was submitted so far, on the calling thread: how many
  bool queue_at_once(bool waited);  // whether a submit now queues its work itself (idle_direct)
  bool launcher_down() const;       // the launch thread sleeps, or is roused and not yet up
  void rouse_launcher();            // a sleeping launch thread gets up to nap (for what follows)
  // Queues one work on a lane's stream with its event, and hands it to the lane's
  // completion thread (on the launch thread, or the submitting thread without one).
  void queue_work(Queue queue, std::function<void()>& work,
                  std::function<void(std::exception_ptr)>& done, const std::vector<Ticket>& after,
                  Ticket ticket);
  void completion_loop(Lane& lane);
  CUresult wait_event(Lane& lane, CUevent event);  // on the lane's completion thread
  Pending next_pending(Lane& lane);
  static void push_pending(Lane& lane, Pending p);                      // under the lane's mutex
  std::size_t lane_for(Queue queue, const std::vector<Ticket>& after);  // index in lanes_
  Event take_event();
  void give_event(Event e);
  TimingEvent take_timing_event();
  template <class E>
  E take_from(std::vector<E>& pool);
  void report_time(Timer& timer);  // on the completion thread; gives the events back
  CUstream current_stream(const char* what) const;
  void copy_box(void* dst, CUmemorytype dst_type, const Rect& dst_rect, const void* src,
                CUmemorytype src_type, const Rect& src_rect, const Rect& region,
                std::size_t elem_size, CUstream stream);
  void blocking_copy(CUstream stream, const std::function<CuCall()>& queue_copy);
  /// A built-in kernel looked up at load: gs_copy_<bytes>, gs_fill_<bytes>, or the combine
  /// of `dtype` with `op`; throws when there is none (a bitwise op on floats).
  CUfunction sized_builtin(const CUfunction (&table)[5], std::size_t elem, const char* what) const;
  CUfunction combine_builtin(DType dtype, annotation::ReduceOp op) const;

  const DriverApi& api_;
  uint64_t id_;  // unique in the process
  int index_, ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  std::size_t capacity_ = 0;
  int arch_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<unsigned> next_lane_{0};
  const int poll_us_;
  const bool idle_direct_;
  std::atomic<int64_t> active_{0};      // works begun on the streams and not yet reported
  std::unique_ptr<Launcher> launcher_;  // null: the submitting thread queues the works
  // Who queued the works, logged at debug when the device goes: the submitting thread at
  // once (queue_at_once), the launch thread, or a host thread about to wait (flush); and how
  // often a submit woke the launch thread.
  struct QueueCounts {
    std::atomic<uint64_t> at_once{0}, by_launcher{0}, by_waiter{0}, wakes{0};
  } counts_;
  std::atomic<int> waiters_{0};  // host threads between begin_wait and end_wait
  Stream to_host_, from_host_;
  AdaptiveMutex events_mutex_;
  std::vector<Event> events_;               // finished works' events, for the next
  std::vector<TimingEvent> timing_events_;  // the same for timed works
  // The events of submitted works that have not finished, by ticket: a later work's stream
  // waits on them. An event leaves here before it is recycled, under the same mutex.
  AdaptiveMutex tickets_mutex_;
  struct InFlight {
    CUevent event;
    std::size_t lane;  // index in lanes_
  };
  std::unordered_map<Ticket, InFlight> in_flight_;
  std::vector<std::unordered_map<Ticket, InFlight>::node_type> spare_flights_;  // reused
  void add_in_flight(Ticket ticket, InFlight flight);  // under tickets_mutex_
  void drop_in_flight(Ticket ticket);                  // under tickets_mutex_
  std::atomic<Ticket> last_ticket_{0};
  Module builtins_;
  CUfunction copy_[5] = {}, fill_[5] = {};  // by element size 1, 2, 4, 8, 16
  std::map<std::pair<DType, annotation::ReduceOp>, CUfunction> combine_;
  CUfunction narrow_f16_ = nullptr, narrow_bf16_ = nullptr;  // gs_narrow_<dtype_name>
  std::atomic<std::size_t> allocated_{0};
  // Other processes' memory opened here (CUDA IPC), by handle, while copies use it. Closed
  // as soon as none does: the lender may free it once its Send ends, and freeing memory
  // another process still has open is undefined behaviour.
  struct Opened {
    CUdeviceptr base = 0;
    int users = 0;
  };
  std::mutex opened_mutex_;
  std::unordered_map<std::string, Opened> opened_;
  bool peer_everywhere_ = true;  // every other device's memory is addressable from kernels
  friend class CudaBackend;
};

}  // namespace gridspan::backend::cuda
