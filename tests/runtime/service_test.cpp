// Workers served over transports (three ranks in one process): the driver's task batches
// travel encoded, transfers go between the ranks' services, every barrier part is reported
// to the driver's rank, a failure comes back with its rank and message, and shutdown ends
// serving.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "annotation/signature.hpp"
#include "plan/split.hpp"
#include "runtime/executable.hpp"
#include "runtime/process.hpp"
#include "runtime/rig.hpp"
#include "runtime/service.hpp"
#include "support/config.hpp"

namespace gridspan::runtime {
namespace {

// Three ranks of two cpu devices each, with their services; the driver is rank 0.
struct Cluster {
  static constexpr int kRanks = 3;
  std::vector<std::unique_ptr<net::Transport>> transports = net::make_local_transports(kRanks);
  std::vector<std::unique_ptr<Rig>> rigs;
  std::vector<std::unique_ptr<WorkerService>> services;
  plan::PlanSplitter splitter{plan::Placement::by_rank({2, 2, 2})};
  const plan::Executable* executable = nullptr;  // the driver's kernel
  const plan::Executable* remote = nullptr;      // what ranks 1 and 2 run for it
  std::mutex mutex;
  std::condition_variable reported;
  std::map<plan::TaskId, std::vector<BarrierReport>> reports;

  Cluster(const plan::Executable* exe, const plan::Executable* remote_exe)
      : executable(exe), remote(remote_exe) {
    for (int r = 0; r < kRanks; ++r) {
      rigs.push_back(std::make_unique<Rig>(2, 1 << 20, 1 << 20, "cpu"));
      services.push_back(std::make_unique<WorkerService>(
          *transports[r], *rigs[r]->worker, *rigs[r]->transfers,
          [this](net::ExecutableId id) { return id == 1 ? remote : nullptr; },
          [this](const BarrierReport& b) {
            std::lock_guard lock(mutex);
            reports[b.barrier].push_back(b);
            reported.notify_all();
          }));
    }
  }
  ~Cluster() {
    services.clear();
    rigs.clear();
  }
  // As the driver does: rank 0's part to its own worker, the others' through the transport.
  int sends = 0;  // Send tasks in the plans so far
  void submit(const plan::Plan& p) {
    auto parts = splitter.split(p.tasks);
    for (const auto& part : parts)
      for (const Task& t : part) sends += std::holds_alternative<plan::Send>(t.payload);
    rigs[0]->worker->submit(std::move(parts[0]));
    for (int r = 1; r < kRanks; ++r)
      WorkerService::send_tasks(*transports[0], r, parts[r], [this](const plan::Executable* e) {
        EXPECT_EQ(e, executable);
        return net::ExecutableId(1);
      });
  }
  // Every part of a barrier reported (or 30 s passed): the reports.
  std::vector<BarrierReport> wait(plan::TaskId barrier) {
    const std::size_t parts = splitter.barrier_ranks(barrier).size();
    std::unique_lock lock(mutex);
    reported.wait_for(lock, std::chrono::seconds(30),
                      [&] { return reports[barrier].size() == parts; });
    return reports[barrier];
  }
  // Every plan's barrier reported, as the driver waits before it shuts the ranks down
  // (Cluster::~Cluster): a halo of an earlier plan that a later one does not read may still
  // be on its way. Shutting down at the last plan's barrier lost it now and then (1 run in
  // 100-300, three at a time), and the receiving worker's destructor waited for it forever.
  void wait_all(const std::vector<plan::Plan>& plans) {
    for (const plan::Plan& p : plans) wait(p.done);
  }
};

// A session's settings reach the other ranks whole: every setting of the table, random
// values.
TEST(SessionConfig, EverySettingGoesToTheOtherRanks) {
  auto g = test::rng(72);
  for (int round = 0; round < 20; ++round) {
    const Config sent = test::random_config(g);
    net::Writer w;
    write_config(w, sent);
    const Bytes body(std::move(w.buffer()));
    const Config got = net::read_all(body, "session", read_config);
    for (const settings::Setting& s : settings::all()) {
      if (s.kind == settings::Kind::tooling) continue;
      EXPECT_EQ(settings::show(s, got), settings::show(s, sent)) << s.name;
    }
    EXPECT_EQ(got.net_timeout, sent.net_timeout);
  }
}

TEST(WorkerService, ThreeRanksComputeWhatOneWould) {
  StencilProblem problem(6, 1200, 100, 4, 36);
  Cluster c(problem.executable.get(), problem.executable.get());
  for (const plan::Plan& p : problem.plans) c.submit(p);
  auto done = c.wait(problem.plans.back().done);
  ASSERT_EQ(done.size(), 3u);  // the read-back's barrier: every rank sends to the driver
  std::set<int> ranks;
  for (const BarrierReport& b : done) {
    EXPECT_FALSE(b.failed()) << "rank " << b.rank << ": " << b.message();
    ranks.insert(b.rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(problem.out, problem.want);
  c.wait_all(problem.plans);
  for (int r = 1; r < 3; ++r) WorkerService::send_shutdown(*c.transports[0], r);
  for (int r = 1; r < 3; ++r) c.services[r]->serve_until_shutdown();
}

// Ranks 1 and 2 fail their superblocks: their halo sends fail, so rank 0's receives fail
// too (instead of waiting forever), and every part of the read-back's barrier reports the
// failure, rank 0's naming the rank it came from.
TEST(WorkerService, AFailureOnAnotherRankReachesTheDriverWithItsRank) {
  Throws throws;
  StencilProblem problem(6, 1200, 200, 1, 37);
  Cluster c(problem.executable.get(), &throws);
  for (const plan::Plan& p : problem.plans) c.submit(p);
  auto done = c.wait(problem.plans.back().done);
  c.wait_all(problem.plans);
  ASSERT_EQ(done.size(), 3u);
  for (const BarrierReport& b : done) {
    EXPECT_TRUE(b.failed()) << "rank " << b.rank;
    if (b.failed()) EXPECT_THROW(std::rethrow_exception(b.error), AccessError);  // its kind kept
    EXPECT_NE(b.message().find("deliberate failure"), std::string::npos) << b.message();
    // Every part names where the failure began: rank 1 or 2, and the task.
    EXPECT_TRUE(b.message().find("rank 1, task ") != std::string::npos ||
                b.message().find("rank 2, task ") != std::string::npos)
        << b.message();
  }
  // A message the protocol does not have stops the rank's service with an error.
  c.transports[0]->send(2, 999, {});
  EXPECT_THROW(c.services[2]->serve_until_shutdown(), NetError);
}

// The stencil as a kernel the cpu backend compiles (the launch's threads are its n).
const char* kStencil = R"(
__device__ void stencil3(dim3 blockIdx, gridspan::Vector<float> out,
                         const gridspan::Vector<float> in) {
  const int n = gridDim.x * blockDim.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = (i > 0 ? in[i - 1] : 0.0f) + in[i] + (i + 1 < n ? in[i + 1] : 0.0f);
}
)";

backend::KernelSource stencil_source(const char* source) {
  backend::KernelSource src;
  src.name = "stencil3";
  src.source = source;
  src.params = annotation::parse_signature(kStencil, "stencil3");
  return src;
}

// The driver compiles the kernel, sends it to the other ranks, which compile it too and
// run their superblocks with it: the same result as the host's.
TEST(WorkerService, KernelsAreCompiledOnEveryRank) {
  Cluster c(nullptr, nullptr);
  for (int r = 0; r < Cluster::kRanks; ++r) c.services[r]->compile_with(c.rigs[r]->backend.get());
  backend::KernelSource src = stencil_source(kStencil);
  auto kernel = KernelExecutable::compile(*c.rigs[0]->backend, src);
  c.executable = kernel.get();
  for (int r = 1; r < Cluster::kRanks; ++r)
    WorkerService::send_compile(*c.transports[0], r, 1, src);
  StencilProblem problem(6, 1200, 200, 3, 40, kernel);
  for (const plan::Plan& p : problem.plans) c.submit(p);
  for (const plan::Plan& p : problem.plans)
    for (const BarrierReport& b : c.wait(p.done)) EXPECT_FALSE(b.failed()) << b.message();
  EXPECT_EQ(problem.out, problem.want);
}

// A kernel that does not compile on a rank stops that rank, and the driver hears why.
TEST(WorkerService, ARankThatCannotCompileTellsTheDriver) {
  Cluster c(nullptr, nullptr);
  std::mutex mutex;
  std::condition_variable heard;
  std::vector<RankError> errors;
  c.services[0]->on_error([&](const RankError& e) {
    std::lock_guard lock(mutex);
    errors.push_back(e);
    heard.notify_all();
  });
  c.services[2]->compile_with(c.rigs[2]->backend.get());
  backend::KernelSource broken = stencil_source(kStencil);
  broken.source += "\n#error deliberately broken\n";
  WorkerService::send_compile(*c.transports[0], 2, 1, broken);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(heard.wait_for(lock, std::chrono::seconds(60), [&] { return !errors.empty(); }));
  EXPECT_EQ(errors[0].rank, 2);
  EXPECT_NE(errors[0].message.find("deliberately broken"), std::string::npos) << errors[0].message;
  EXPECT_THROW(c.services[2]->serve_until_shutdown(), CompileError);
}

// s += in[i] over a superblock of a 1-D launch into its partial of `reduce(+) s` (int64).
class SumInto : public plan::Executable {
 public:
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame& f) const override {
    const plan::Execute& e = f.exec;
    const auto* in = static_cast<const int32_t*>(f.data[0]);
    int64_t sum = 0;
    for (int64_t i = e.arrays[0].region.lo[0]; i < e.arrays[0].region.hi[0]; ++i)
      sum += in[i - e.arrays[0].chunk.rect.lo[0]];
    *static_cast<int64_t*>(f.data[1]) += sum;
  }

 private:
  std::string name_ = "sum";
};

// A sum over six devices of three ranks: each rank combines its devices' partials, then the
// ranks' partials go across as a tree (rank 1's to rank 0, rank 2's to rank 0), two
// transfers; the total is exact.
TEST(WorkerService, ReductionsGoAcrossRanksAsATree) {
  auto g = test::rng(39);
  const int devices = 6, n = 6000;
  plan::Planner planner(devices, nullptr);
  planner.set_ranks({0, 0, 1, 1, 2, 2});
  ParamInfo in, s;
  in.name = "in", in.is_array = true, in.rank = 1, in.is_const = true;
  in.type_text = "Vector<int>";
  s.name = "s", s.is_array = true, s.rank = 0, s.type_text = "Scalar<int64_t>";
  std::vector<ParamInfo> params{in, s};
  auto ann = annotation::Annotation::parse("global i => read in[i], reduce(+) s", params, {});
  auto meta = [&](const Dim& shape, DType dtype, const DataDistribution& dist) {
    plan::ArrayMeta m;
    m.shape = shape;
    m.dtype = dtype;
    m.elem_size = dtype_size(dtype);
    for (auto& c : dist.chunks(shape, devices))
      m.chunks.push_back({0, c.region, c.owned, c.device});
    planner.assign_chunk_ids(m);
    return m;
  };
  plan::ArrayMeta a = meta({n}, DType::i32, dist::rows(n / 12));
  plan::ArrayMeta total = meta({}, DType::i64, dist::centralized(0));
  auto values = test::random_vector<int32_t>(n, g);
  int64_t want = 0;
  for (int32_t v : values) want += v;
  auto data = std::make_shared<std::vector<unsigned char>>(std::size_t(n) * 4);
  std::memcpy(data->data(), values.data(), data->size());
  SumInto sum;
  Cluster c(&sum, &sum);
  plan::LaunchSpec spec;
  spec.executable = std::shared_ptr<const plan::Executable>(&sum, [](const plan::Executable*) {});
  spec.annotation = &ann;
  spec.params = &params;
  spec.threads = {n};
  spec.block = {50};
  spec.superblocks = work::tiles({n / 12}).superblocks(spec.threads, spec.block, devices);
  spec.arrays = {&a, &total};
  spec.int_scalars.assign(2, 0);
  spec.scalar_offsets = std::make_shared<std::vector<uint32_t>>(2, 0);
  spec.scalars = std::make_shared<std::vector<unsigned char>>();
  int64_t got = test::poison<int64_t>();
  std::vector<plan::Plan> plans;
  plans.push_back(planner.create_array(a, nullptr));
  plans.push_back(planner.create_array(total, nullptr));
  plans.push_back(planner.write_array(a, data));
  plans.push_back(planner.launch(spec));
  plans.push_back(planner.read_array(total, &got));
  for (const plan::Plan& p : plans) c.submit(p);
  for (const plan::Plan& p : plans) {
    auto reports = c.wait(p.done);
    EXPECT_EQ(reports.size(), c.splitter.barrier_ranks(p.done).size());
    for (const BarrierReport& b : reports) EXPECT_FALSE(b.failed()) << b.message();
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(c.sends, 2);  // the launch's: ranks 1 and 2 each send their partial once
}

}  // namespace
}  // namespace gridspan::runtime
