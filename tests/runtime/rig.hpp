// What the worker's tests share: a worker on a backend's devices (Rig), executables written
// in C++ (one that throws, a 3-point stencil), and the plans of a stencil problem.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gridspan/core/error.hpp"
#include "plan/planner.hpp"
#include "runtime/transfers.hpp"
#include "runtime/worker.hpp"
#include "support/devices.hpp"
#include "support/random.hpp"

namespace gridspan::runtime {

using plan::ChunkRef;
using plan::Task;

struct Rig {
  std::unique_ptr<backend::Backend> backend;
  std::vector<std::unique_ptr<backend::Device>> wrappers;  // in front of the backend's
  std::unique_ptr<MemoryManager> memory;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<Transfers> transfers;  // the worker's Send and Recv tasks
  plan::TaskId next = 0;

  using Wrap = std::function<std::unique_ptr<backend::Device>(backend::Device&)>;
  /// `staging` for the worker's default staging bound (GRIDSPAN_STAGING_BYTES unset).
  static constexpr std::size_t kDefaultStaging = SIZE_MAX;

  // `backend_name`: empty = the one GRIDSPAN_BACKEND names (scripts/gpu-check.sh runs these
  // on GPUs too). `wrap`: a device to put in front of each of the backend's. `capacity`: a
  // cpu device's memory (GRIDSPAN_DEVICE_MEMORY; 0: the backend's default).
  Rig(int devices, std::size_t device_bytes, std::size_t staging, std::string backend_name = "",
      const Wrap& wrap = {}, std::size_t capacity = 0) {
    Config c = Config::from_env();
    if (!backend_name.empty()) c.backend = backend_name;
    if (capacity) c.device_memory = capacity;
    test::use_devices(c, devices);
    c.cpu_threads = 2;
    // Quiet unless GRIDSPAN_LOG asks for more (a failing test run again with info).
    if (!std::getenv("GRIDSPAN_LOG")) c.log_level = LogLevel::error;
    backend = backend::make_backend(c);
    std::vector<backend::Device*> used = backend->devices();
    if (wrap)
      for (auto*& d : used) {
        wrappers.push_back(wrap(*d));
        d = wrappers.back().get();
      }
    memory = std::make_unique<MemoryManager>(used, MemoryLimits{device_bytes, 0, ""});
    if (staging == 0) staging = 1 << 20;
    worker = std::make_unique<Worker>(used, *memory, staging == kDefaultStaging ? 0 : staging);
    transfers = std::make_unique<Transfers>(*worker, used, *memory);
  }
  ~Rig() {
    worker.reset();
    transfers.reset();
    memory.reset();
  }
  Task task(int device, plan::Payload p, std::vector<plan::TaskId> deps = {}) {
    Task t;
    t.id = ++next;
    t.device = device;
    t.payload = std::move(p);
    t.deps = std::move(deps);
    return t;
  }
};

class Throws : public plan::Executable {
 public:
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame&) const override { throw AccessError("deliberate failure"); }
  std::string name_ = "throws";
};

// out[i] = in[i-1] + in[i] + in[i+1] (a missing neighbour counts 0) over a superblock of
// a 1-D launch of n threads, in C++: what a compiled kernel would do, without a compiler.
class Stencil3 : public plan::Executable {
 public:
  explicit Stencil3(int64_t n) : n_(n) {}
  const std::string& name() const override { return name_; }
  void run(const plan::ExecFrame& f) const override {
    const plan::Execute& e = f.exec;
    auto at = [&](int p, int64_t i) {
      return static_cast<float*>(f.data[p]) + (i - e.arrays[p].chunk.rect.lo[0]);
    };
    const int64_t lo = e.blocks.lo[0] * e.block[0], hi = std::min(n_, e.blocks.hi[0] * e.block[0]);
    for (int64_t i = lo; i < hi; ++i)
      *at(0, i) = (i > 0 ? *at(1, i - 1) : 0.0f) + *at(1, i) + (i + 1 < n_ ? *at(1, i + 1) : 0.0f);
  }

 private:
  int64_t n_;
  std::string name_ = "stencil3";
};

// The plans of a stencil problem over `devices` devices: two arrays in a chunk per device
// (halo 1) created, the first written with random values, `sweeps` launches of Stencil3
// alternating between them with superblocks of `superblock` threads, the last written
// read back into `out`; and `want`, what the host computes.
struct StencilProblem {
  /// `kernel`: what runs the sweeps (with the parameters out, in); null = a Stencil3.
  StencilProblem(int devices, int n, int64_t superblock, int sweeps, uint64_t salt,
                 std::shared_ptr<const plan::Executable> kernel = nullptr)
      : out(std::size_t(n), test::poison<float>()) {
    auto g = test::rng(salt);
    plan::Planner planner(devices, nullptr);
    std::vector<ParamInfo> params(2);
    params[0].name = "out";
    params[1].name = "in";
    for (auto& p : params) p.is_array = true, p.rank = 1, p.type_text = "Vector<float>";
    params[1].is_const = true;
    auto ann =
        annotation::Annotation::parse("global i => write out[i], read in[i-1:i+1]", params, {});
    std::vector<plan::ArrayMeta> arrays(2);
    for (auto& m : arrays) {
      m.shape = {n};
      for (auto& c : dist::stencil({n / devices}, {1}).chunks(m.shape, devices))
        m.chunks.push_back({0, c.region, c.owned, c.device});
      planner.assign_chunk_ids(m);
      plans.push_back(planner.create_array(m, nullptr));
    }
    want = test::random_vector<float>(std::size_t(n), g);
    auto data = std::make_shared<std::vector<unsigned char>>(std::size_t(n) * 4);
    std::memcpy(data->data(), want.data(), data->size());
    plans.push_back(planner.write_array(arrays[0], data));
    std::shared_ptr<const plan::Executable> exe = kernel ? kernel : std::make_shared<Stencil3>(n);
    for (int sweep = 0; sweep < sweeps; ++sweep) {
      plan::LaunchSpec s;
      s.executable = exe;
      s.annotation = &ann;
      s.params = &params;
      s.threads = {n};
      s.block = {25};
      s.superblocks = work::tiles({superblock}).superblocks(s.threads, s.block, devices);
      s.arrays = {&arrays[(sweep + 1) % 2], &arrays[sweep % 2]};
      s.int_scalars.assign(2, 0);
      s.scalar_offsets = std::make_shared<std::vector<uint32_t>>(2, 0);
      s.scalars = std::make_shared<std::vector<unsigned char>>();
      plans.push_back(planner.launch(s));
      std::vector<float> next(want.size());
      for (int i = 0; i < n; ++i)
        next[i] = (i > 0 ? want[i - 1] : 0.0f) + want[i] + (i + 1 < n ? want[i + 1] : 0.0f);
      want = next;
    }
    plans.push_back(planner.read_array(arrays[sweeps % 2], out.data()));
    executable = exe;
  }
  StencilProblem(const StencilProblem&) = delete;
  StencilProblem& operator=(const StencilProblem&) = delete;

  std::vector<float> out, want;
  std::vector<plan::Plan> plans;
  std::shared_ptr<const plan::Executable> executable;
};

}  // namespace gridspan::runtime
