// The Device contract, written once and run on every backend present (Kokkos's category
// files): region operations against the host's own box operations, the order of dependent
// works across an asynchronous device's lanes, and faults (a failing work reports its error
// and the device stays usable). Backends: cpu, cpu devices that behave as GPUs (work queued on
// lanes and reported later, device memory apart from host memory), and cuda on a machine
// with a GPU (skipped elsewhere, saying so).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.hpp"
#include "backend/regions.hpp"
#include "gridspan/core/error.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan::test {
namespace {

using backend::Device;

// The reports of a device's works, by number, to wait for.
struct Reports {
  explicit Reports(int works) : done(works) {
    for (auto& d : done) got.push_back(d.get_future());
  }
  std::function<void(std::exception_ptr)> of(int k) {
    return [this, k](std::exception_ptr e) { done[k].set_value(e); };
  }
  std::vector<std::promise<std::exception_ptr>> done;
  std::vector<std::future<std::exception_ptr>> got;
};

struct Contract : testing::TestWithParam<std::string> {
  std::unique_ptr<backend::Backend> backend;
  Device* dev = nullptr;

  void SetUp() override {
    Config c;
    c.log_level = LogLevel::error;
    c.cpu_devices = 1;
    c.gpus = 1;
    c.cpu_threads = 2;
    c.backend = cuda() ? "cuda" : "cpu";
    c.cpu_async = GetParam() == "cpu_async";
    if (GetParam() == "cuda_poll") c.completion_poll_us = 20;
    if (GetParam() == "cuda_direct") c.launch_thread = false;
    if (GetParam() == "cuda_thread_only") c.launch_idle_direct = false;
    if (cuda() && gpus_present() == 0)
      GTEST_SKIP() << "no GPU here: the cuda backend's contract runs on a GPU machine "
                      "(scripts/gpu-check.sh)";
    backend = backend::make_backend(c);
    dev = backend->devices().at(0);
  }

  bool cuda() const { return GetParam().starts_with("cuda"); }

  // n values in [-1000, 1000] from the test seed and `salt`.
  template <class T>
  static std::vector<T> small_values(std::size_t n, uint64_t salt) {
    auto g = rng(salt);
    std::vector<T> v(n);
    for (auto& x : v) x = static_cast<T>(static_cast<int64_t>(g() % 2001) - 1000);
    return v;
  }

  // Submits `work` behind the work of ticket `last` (0: none) on an asynchronous device.
  Device::Ticket submit_after(Device::Ticket last, std::function<void()> work,
                              std::function<void(std::exception_ptr)> done) {
    std::vector<Device::Ticket> after;
    if (dev->asynchronous() && last) after.push_back(last);
    return dev->submit(std::move(work), std::move(done), after);
  }

  // Runs `work` as submitted work and waits for its report; rethrows its error.
  void run(const std::function<void()>& work) {
    std::promise<std::exception_ptr> done;
    dev->submit(work, [&](std::exception_ptr e) { done.set_value(e); }, {});
    if (auto e = done.get_future().get()) std::rethrow_exception(e);
  }

  // n small values on the device and n threes: each triple() multiplies the first by the
  // second, so after k of them the device holds 3^k times the values (expect_tripled).
  struct Tripling {
    std::vector<int64_t> x0;
    void* x = nullptr;
    void* threes = nullptr;
    Rect box;
  };
  Tripling tripling(int n, uint64_t salt) {
    Tripling t{small_values<int64_t>(n, salt), nullptr, nullptr, Rect(1, {0, 0, 0}, {n, 1, 1})};
    t.x = upload_all(t.x0);
    t.threes = upload_all(std::vector<int64_t>(n, 3));
    return t;
  }
  void triple(const Tripling& t) {
    dev->combine(t.x, t.box, t.threes, t.box, annotation::ReduceOp::mul, DType::i64);
  }
  // Checks that the device holds 3^k times the values.
  void expect_tripled(const Tripling& t, int k) {
    std::vector<int64_t> want = t.x0;
    for (int64_t& v : want)
      for (int i = 0; i < k; ++i) v *= 3;
    EXPECT_EQ(download_all<int64_t>(t.x, want.size()), want);
  }
  void release(const Tripling& t) {
    dev->deallocate(t.x, t.x0.size() * 8);
    dev->deallocate(t.threes, t.x0.size() * 8);
  }

  // Device memory holding `values`, and back.
  template <class T>
  void* upload_all(const std::vector<T>& values) {
    void* p = dev->allocate(values.size() * sizeof(T));
    dev->copy_from_host(p, values.data(), values.size() * sizeof(T));
    return p;
  }
  template <class T = int>
  std::vector<T> download_all(const void* p, std::size_t n) {
    std::vector<T> out(n, poison<T>());
    dev->copy_to_host(out.data(), p, n * sizeof(T));
    return out;
  }
};

// A random box inside `outer` (never empty).
Rect random_box(const Rect& outer, std::mt19937_64& g) {
  Rect r = outer;
  for (int a = 0; a < outer.rank; ++a) {
    const int64_t n = outer.extent(a);
    const int64_t lo = outer.lo[a] + static_cast<int64_t>(g() % n);
    r.lo[a] = lo;
    r.hi[a] = lo + 1 + static_cast<int64_t>(g() % (outer.hi[a] - lo));
  }
  return r;
}

// Upload, copy between chunks with different boxes, fill, combine and download of random
// 3-d regions give what the host's box operations give.
TEST_P(Contract, RegionOperationsMatchTheHost) {
  auto g = rng(91);
  for (int round = 0; round < 12; ++round) {
    const Rect a_box(3, {0, 0, 0}, {6, 7, 9}), b_box(3, {2, 1, 3}, {9, 8, 12});
    const Rect common = a_box.intersect(b_box);
    const std::size_t na = a_box.volume(), nb = b_box.volume();
    std::vector<int> a = random_vector<int>(na, g), b = random_vector<int>(nb, g);
    std::vector<int> host = random_vector<int>(nb, g);
    void* da = upload_all(a);
    void* db = upload_all(b);
    const Rect up = random_box(b_box, g), cp = random_box(common, g), fl = random_box(a_box, g);
    const int value = static_cast<int>(g() % 1000) - 500;
    run([&] {
      dev->upload(db, b_box, host.data(), b_box, up, 4);
      dev->copy(da, a_box, db, b_box, cp, 4);
      dev->fill(da, a_box, fl, &value, 4);
      dev->combine(db, b_box, da, a_box, annotation::ReduceOp::add, DType::i32);
    });
    // The same on the host.
    backend::copy_region(b.data(), b_box, host.data(), b_box, up, 4);
    backend::copy_region(a.data(), a_box, b.data(), b_box, cp, 4);
    backend::fill_region(a.data(), a_box, fl, &value, 4);
    backend::combine_region(b.data(), b_box, a.data(), a_box, annotation::ReduceOp::add,
                            DType::i32);
    EXPECT_EQ(download_all(da, na), a) << "round " << round;
    std::vector<int> region(cp.volume(), poison<int>());
    run([&] { dev->download(region.data(), cp, db, b_box, cp, 4); });
    std::vector<int> want(cp.volume());
    backend::copy_region(want.data(), cp, b.data(), b_box, cp, 4);
    EXPECT_EQ(region, want) << "round " << round;
    EXPECT_EQ(download_all(db, nb), b) << "round " << round;
    dev->deallocate(da, na * 4);
    dev->deallocate(db, nb * 4);
  }
}

// Rounding float32 into float16 and bfloat16 (the end of a 16-bit sum's partials): random
// regions between boxes of different shapes give what the host gives, which rounds each
// element to nearest even (ties, subnormals, overflow to infinity and infinities included).
TEST_P(Contract, NarrowRoundsLikeTheHost) {
  auto g = rng(93);
  const Rect src_box(2, {0, 0, 0}, {9, 40, 1}), dst_box(2, {3, 5, 0}, {12, 33, 1});
  const Rect common = src_box.intersect(dst_box);
  const float specials[] = {
      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 2049.0f, 65520.0f, 1e6f, -1e-7f, 0x1p-24f,
      INFINITY,        -INFINITY,           40000.0f};
  std::uniform_real_distribution<float> any(-70000.0f, 70000.0f);
  for (DType dtype : {DType::f16, DType::bf16}) {
    std::vector<float> src(src_box.volume());
    for (std::size_t i = 0; i < src.size(); ++i)
      src[i] = i < std::size(specials) ? specials[i] : g() % 2 ? any(g) : any(g) * 0x1p-20f;
    std::vector<uint16_t> want = random_vector<uint16_t>(dst_box.volume(), g);
    void* ds = upload_all(src);
    void* dd = upload_all(want);
    const Rect region = random_box(common, g);
    run([&] { dev->narrow(dd, dst_box, ds, src_box, region, dtype); });
    backend::narrow_region(want.data(), dst_box, src.data(), src_box, region, dtype);
    EXPECT_EQ(download_all<uint16_t>(dd, want.size()), want) << dtype_name(dtype);
    dev->deallocate(ds, src.size() * 4);
    dev->deallocate(dd, want.size() * 2);
  }
  // The host's rounding itself, on the specials.
  std::vector<uint16_t> h(std::size(specials)), b(std::size(specials));
  const Rect row(1, {0, 0, 0}, {int64_t(std::size(specials)), 1, 1});
  backend::narrow_region(h.data(), row, specials, row, row, DType::f16);
  backend::narrow_region(b.data(), row, specials, row, row, DType::bf16);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3C00, 0x3C02, 0x6800, 0x7C00, 0x7C00, 0x8002, 0x0001,
                                      0x7C00, 0xFC00, 0x78E2}));
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3F80, 0x3F80, 0x4500, 0x4780, 0x4974, 0xB3D7, 0x3380,
                                      0x7F80, 0xFF80, 0x471C}));
}

// Works that each depend on the one before (its ticket) run in that order on an
// asynchronous device, whichever lane each goes to, without the host waiting between them:
// x = 3x + k is not commutative.
TEST_P(Contract, DependentWorksRunInOrderAcrossLanes) {
  const int n = 64, works = 24;
  const auto x0 = small_values<int64_t>(n, 92);  // small, so that 3^24 x stays inside 64 bits
  void* x = upload_all(x0);
  std::vector<void*> adds;
  for (int k = 1; k <= works; ++k) adds.push_back(upload_all(std::vector<int64_t>(n, k)));
  void* threes = upload_all(std::vector<int64_t>(n, 3));
  const Rect box(1, {0, 0, 0}, {n, 1, 1});
  Reports reports(works);
  Device::Ticket last = 0;
  for (int k = 0; k < works; ++k) {
    last = submit_after(
        last,
        [&, k] {
          dev->combine(x, box, threes, box, annotation::ReduceOp::mul, DType::i64);
          dev->combine(x, box, adds[k], box, annotation::ReduceOp::add, DType::i64);
        },
        reports.of(k));
    // A synchronous device orders nothing itself: the worker waits for each dependency.
    if (!dev->asynchronous()) reports.got[k].wait();
  }
  for (auto& r : reports.got) EXPECT_EQ(r.get(), nullptr);
  std::vector<int64_t> want = x0;
  for (int k = 1; k <= works; ++k)
    for (int64_t& v : want) v = 3 * v + k;
  EXPECT_EQ(download_all<int64_t>(x, n), want);
  dev->deallocate(x, n * 8);
  dev->deallocate(threes, n * 8);
  for (void* p : adds) dev->deallocate(p, n * 8);
}

// On an asynchronous device, wait_queued returns once every work submitted before has run
// (their reports may come later): what they wrote is there. Works on the cpu lanes sleep
// first, so that a wait that returned early would see the old values.
TEST_P(Contract, WaitQueuedReturnsOnceTheQueuedWorksHaveRun) {
  if (!dev->asynchronous())
    GTEST_SKIP() << "a synchronous device's works end with their reports, which the worker "
                    "waits for";
  const int works = 8;
  const Tripling t = tripling(1 << 22, 93);
  std::vector<std::promise<void>> done(works);
  Device::Ticket last = 0;
  for (int k = 0; k < works; ++k) {
    last = submit_after(
        last,
        [&] {
          if (!cuda()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          triple(t);
        },
        [&, k](std::exception_ptr) { done[k].set_value(); });
  }
  dev->wait_queued();
  expect_tripled(t, works);  // read before the reports
  for (auto& d : done) d.get_future().wait();
  release(t);
}

// A work that throws reports that error (and runs nothing more); the device stays usable.
TEST_P(Contract, AFailingWorkReportsItsErrorAndTheDeviceGoesOn) {
  EXPECT_THROW(run([] { throw IoError("deliberate failure"); }), IoError);
  try {
    run([] { throw std::runtime_error("user code failed"); });
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "user code failed");
  }
  auto g = rng(93);
  std::vector<int> v = random_vector<int>(100, g);
  void* p = upload_all(std::vector<int>(100, poison<int>()));
  const Rect box(1, {0, 0, 0}, {100, 1, 1});
  run([&] { dev->upload(p, box, v.data(), box, box, 4); });
  EXPECT_EQ(download_all(p, 100), v);
  dev->deallocate(p, 400);
}

TEST_P(Contract, DescribesItselfAndAllocates) {
  EXPECT_FALSE(dev->name().empty());
  EXPECT_GT(dev->memory_capacity(), 0u);
  EXPECT_EQ(dev->asynchronous(), GetParam() != "cpu");
  for (std::size_t bytes : {1, 64, 1000, 1 << 20}) {
    void* p = dev->allocate(bytes);
    void* h = dev->allocate_host(bytes);
    EXPECT_NE(p, nullptr);
    EXPECT_NE(h, nullptr);
    dev->deallocate(p, bytes);
    dev->deallocate_host(h, bytes);
  }
}

// Host memory of every size (on a GPU: small blocks from cuMemHostAlloc, those of a huge page
// and more mapped and registered) carries copies to the device and back.
TEST_P(Contract, HostMemoryOfEverySizeCarriesCopiesBothWays) {
  auto g = rng(98);
  for (std::size_t bytes : {std::size_t(1000), std::size_t(2) << 20, (std::size_t(3) << 20) + 5,
                            (std::size_t(64) << 20) + 4103}) {
    SCOPED_TRACE(bytes);
    auto* out = static_cast<unsigned char*>(dev->allocate_host(bytes));
    auto* back = static_cast<unsigned char*>(dev->allocate_host(bytes));
    for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(g() % 255 + 1);
    std::memset(back, 0, bytes);  // poison: the values are never zero
    void* p = dev->allocate(bytes);
    dev->copy_from_host(p, out, bytes);
    dev->copy_to_host(back, p, bytes);
    EXPECT_EQ(std::memcmp(out, back, bytes), 0);
    dev->deallocate(p, bytes);
    dev->deallocate_host(out, bytes);
    dev->deallocate_host(back, bytes);
  }
}

// Every work is reported, in and out of a host thread's wait (begin_wait to end_wait, which
// nest). With GRIDSPAN_COMPLETION_POLL_US (cuda_poll) a GPU's lanes look for ends now and
// then outside such a wait and wait in the driver within it.
TEST_P(Contract, WorksAreReportedInAndOutOfAHostThreadsWait) {
  const int n = 1 << 16, works = 24;
  const auto x0 = small_values<int32_t>(n, 94);
  void* x = upload_all(x0);
  void* ones = upload_all(std::vector<int32_t>(n, 1));
  const Rect box(1, {0, 0, 0}, {n, 1, 1});
  Reports reports(works);
  Device::Ticket last = 0;
  for (int k = 0; k < works; ++k) {
    if (k == 8 || k == 10) dev->begin_wait();
    if (k == 14 || k == 16) dev->end_wait();
    last = submit_after(
        last, [&] { dev->combine(x, box, ones, box, annotation::ReduceOp::add, DType::i32); },
        reports.of(k));
    if (!dev->asynchronous()) reports.got[k].wait();
  }
  for (int k = 0; k < works; ++k) {
    // A lost report would hang here: a minute is far beyond any lane's look.
    ASSERT_EQ(reports.got[k].wait_for(std::chrono::seconds(60)), std::future_status::ready) << k;
    EXPECT_EQ(reports.got[k].get(), nullptr) << k;
  }
  std::vector<int32_t> want = x0;
  for (int32_t& v : want) v += works;
  EXPECT_EQ(download_all<int32_t>(x, n), want);
  dev->deallocate(x, n * 4);
  dev->deallocate(ones, n * 4);
}

// With a launch thread (GRIDSPAN_LAUNCH_THREAD, on by default) that queues every work
// (GRIDSPAN_LAUNCH_IDLE_DIRECT off) a GPU's submit returns before the work is queued: a work
// that waits for the submitting thread to go on gets its signal (without one it would wait
// out its 30 seconds). Later works keep their order.
TEST_P(Contract, ALaunchThreadQueuesWorksAfterTheirSubmitReturned) {
  if (GetParam() != "cuda_thread_only") GTEST_SKIP() << "a launch thread that queues every work";
  std::promise<void> submitted;
  auto signal = submitted.get_future().share();
  bool signalled = false;
  const int works = 16;
  const Tripling t = tripling(1 << 12, 95);
  Reports reports(works);
  Device::Ticket last = submit_after(
      0,
      [&] { signalled = signal.wait_for(std::chrono::seconds(30)) == std::future_status::ready; },
      reports.of(0));
  submitted.set_value();
  for (int k = 1; k < works; ++k)
    last = submit_after(
        last, [&] { triple(t); }, reports.of(k));
  for (auto& r : reports.got) EXPECT_EQ(r.get(), nullptr);
  EXPECT_TRUE(signalled);
  expect_tripled(t, works - 1);
  release(t);
}

// Once flush returns, every work submitted before it has begun (its host part has run and
// its operations are queued), though the launch thread is busy with an earlier one.
TEST_P(Contract, AfterAFlushEveryWorkSubmittedBeforeHasBegun) {
  if (!cuda()) GTEST_SKIP() << "a cpu device's works begin on its executors";
  Reports reports(3);
  std::atomic<int> begun{0};
  const Device::Ticket first = submit_after(
      0,
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ++begun;
      },
      reports.of(0));
  submit_after(
      first, [&] { ++begun; }, reports.of(1));
  submit_after(
      0, [&] { ++begun; }, reports.of(2));
  dev->flush();
  EXPECT_EQ(begun.load(), 3);
  for (auto& r : reports.got) EXPECT_EQ(r.get(), nullptr);
}

// With the launch thread and GRIDSPAN_LAUNCH_IDLE_DIRECT (both on by default) the first
// work, for an idle device, is queued by the submitting thread. It submits the others while
// it is on the streams itself: the launch thread queues those, in order.
TEST_P(Contract, AWorkForAnIdleDeviceIsQueuedByItsSubmitter) {
  if (GetParam() != "cuda") GTEST_SKIP() << "a launch thread queuing works for an idle device";
  const int works = 8;
  const Tripling t = tripling(1 << 12, 96);
  std::vector<std::thread::id> by(works);
  Reports reports(works);
  submit_after(
      0,
      [&] {
        by[0] = std::this_thread::get_id();
        Device::Ticket last = 0;
        for (int k = 1; k < works; ++k)
          last = submit_after(
              last,
              [&, k] {
                by[k] = std::this_thread::get_id();
                triple(t);
              },
              reports.of(k));
      },
      reports.of(0));
  for (auto& r : reports.got) EXPECT_EQ(r.get(), nullptr);
  EXPECT_EQ(by[0], std::this_thread::get_id());
  for (int k = 1; k < works; ++k) EXPECT_NE(by[k], std::this_thread::get_id()) << k;
  expect_tripled(t, works - 1);
  release(t);
}

// Launches in a stream (no host wait between them) go to the launch thread even when the GPU
// has run dry; after a host wait (flush) the next work for the idle GPU is queued by its
// submitter. Each round: a work queued at once hands a second to the launch thread (which
// then naps for a millisecond); both reported, a third goes without a wait before it, and a
// fourth after one. The third can only find the launch thread asleep when its round took
// over a millisecond (a loaded machine), so one round of five must show it.
TEST_P(Contract, LaunchesInAStreamGoToTheLaunchThreadEvenForAnIdleGpu) {
  if (GetParam() != "cuda") GTEST_SKIP() << "a launch thread queuing works for an idle device";
  const auto me = std::this_thread::get_id();
  int streamed = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread::id> by(4);
    Reports reports(4);
    dev->flush();  // a host wait: the first is queued at once
    submit_after(
        0,
        [&] {
          by[0] = std::this_thread::get_id();
          submit_after(
              0, [&] { by[1] = std::this_thread::get_id(); }, reports.of(1));
        },
        reports.of(0));
    for (int k : {0, 1}) EXPECT_EQ(reports.got[k].get(), nullptr);
    submit_after(
        0, [&] { by[2] = std::this_thread::get_id(); }, reports.of(2));
    EXPECT_EQ(reports.got[2].get(), nullptr);
    dev->flush();
    submit_after(
        0, [&] { by[3] = std::this_thread::get_id(); }, reports.of(3));
    EXPECT_EQ(reports.got[3].get(), nullptr);
    EXPECT_EQ(by[0], me);
    EXPECT_NE(by[1], me);
    EXPECT_EQ(by[3], me) << "after a host wait the submitter queues the work for an idle GPU";
    streamed += by[2] != me;
  }
  EXPECT_GT(streamed, 0) << "a work submitted without a host wait before it was queued by "
                            "its submitter in every round";
}

// A work submitted while the GPU is busy but the launch thread sleeps (nothing was submitted
// for over a millisecond: a launch's kernel behind its fill) is queued by its submitter, since
// waking the thread would cost it tens of microseconds. The thread is roused meanwhile: once it
// is up it queues the works submitted to it (without the rousing it would sleep on, and every
// work would go on being queued by its submitter).
TEST_P(Contract, AWorkSubmittedWhileTheLaunchThreadSleepsIsQueuedByItsSubmitter) {
  if (GetParam() != "cuda") GTEST_SKIP() << "a launch thread queuing works for an idle device";
  const int64_t n = int64_t(1) << 25;
  const std::vector<int32_t> x0 = small_values<int32_t>(std::size_t(n), 97);
  void* x = upload_all(x0);
  void* ones = upload_all(std::vector<int32_t>(std::size_t(n), 1));
  const Rect box(1, {0, 0, 0}, {n, 1, 1});
  auto add_one = [&] { dev->combine(x, box, ones, box, annotation::ReduceOp::add, DType::i32); };
  const int busy_adds = 100, later = 20;  // ~10 ms of GPU work, then 20 works over ~1 ms
  std::vector<std::thread::id> by(2 + later);
  Reports reports(2 + later);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // naps for 1 ms, then sleeps
  Device::Ticket last = submit_after(
      0,
      [&] {
        by[0] = std::this_thread::get_id();
        for (int k = 0; k < busy_adds; ++k) add_one();
      },
      reports.of(0));
  for (int k = 1; k < 2 + later; ++k) {
    if (k > 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
    last = submit_after(
        last,
        [&, k] {
          by[k] = std::this_thread::get_id();
          add_one();
        },
        reports.of(k));
  }
  for (auto& r : reports.got) EXPECT_EQ(r.get(), nullptr);
  const auto me = std::this_thread::get_id();
  EXPECT_EQ(by[0], me);
  EXPECT_EQ(by[1], me) << "the launch thread slept, so the submitter should have queued it";
  EXPECT_GT(std::count_if(by.begin() + 2, by.end(), [&](auto id) { return id != me; }), 0)
      << "the launch thread was not roused: every later work was queued by its submitter";
  std::vector<int32_t> want = x0;
  for (int32_t& v : want) v += busy_adds + 1 + later;
  EXPECT_EQ(download_all<int32_t>(x, std::size_t(n)), want);
  dev->deallocate(x, std::size_t(n) * 4);
  dev->deallocate(ones, std::size_t(n) * 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, Contract,
                         testing::Values("cpu", "cpu_async", "cuda", "cuda_poll", "cuda_direct",
                                         "cuda_thread_only"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gridspan::test
