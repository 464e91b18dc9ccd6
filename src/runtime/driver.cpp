// Driver: array metadata, planning under one lock, submission to the in-process worker.
#include "runtime/driver.hpp"

#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan::runtime {

Driver::Driver(const Config& config) : config_(config) {
  log::set_level(config_.log_level);
  Process* process = nullptr;
  if (Process::distributed() && config_.mpi) {
    process = &Process::get();
    if (process->size() == 1) process = nullptr;  // mpirun -np 1: a run of one process
  }
  if (process) {
    if (process->rank() != 0)
      throw Error(fmt::format(
          "internal error: a driver on rank {}; under mpirun only rank 0 drives", process->rank()));
    config_.node_rank = process->transport().node_rank();
    config_.node_ranks = process->transport().node_size();
  }
  backend_ = backend::make_backend(config_);
  auto devices = backend_->devices();
  devices_ = static_cast<int>(devices.size());
  memory_ = std::make_unique<MemoryManager>(devices, memory_limits(config_));
  worker_ =
      std::make_unique<Worker>(devices, *memory_, config_.staging_bytes, config_.stream_order);
  if (!config_.trace_file.empty()) worker_->enable_trace();
  if (process) {
    cluster_ = std::make_unique<Cluster>(*process, config_, *worker_,
                                         describe_rank(0, *backend_, *memory_));
    devices_ = static_cast<int>(cluster_->placement().rank.size());
    planner_ = std::make_unique<plan::Planner>(
        devices_, [this](plan::TaskId t) { return cluster_->is_done(t); });
    planner_->set_ranks(cluster_->placement().rank);
  } else {
    planner_ = std::make_unique<plan::Planner>(
        devices_, [this](plan::TaskId t) { return worker_->is_done(t); });
  }
  // Read-only copies of other devices' data are kept for later launches, up to a quarter
  // of each device's memory (the memory manager evicts them like any chunk when it must).
  std::vector<std::size_t> keep;
  for (const RankInfo& r : ranks())
    for (std::size_t bytes : r.device_memory) keep.push_back(bytes / 4);
  planner_->set_read_cache(std::move(keep));
  log::info("{} backend with {} devices", backend_->name(), devices_);
}

int Driver::rank_count() const {
  return cluster_ ? static_cast<int>(cluster_->ranks().size()) : 1;
}

std::vector<RankInfo> Driver::ranks() const {
  if (cluster_) return cluster_->ranks();
  return {describe_rank(0, *backend_, *memory_)};
}

Driver::~Driver() {
  const bool several = cluster_ != nullptr;
  cluster_.reset();  // every rank's part waited for (errors reported), the session closed
  try {
    worker_->wait_all();
  } catch (const std::exception& e) {
    if (!several) log::warn("an error was not reported before the context ended: {}", e.what());
  }
  if (!config_.trace_file.empty()) write_trace();
  worker_.reset();
  memory_.reset();
}

int Driver::device_count() const {
  return devices_;
}

// Chrome / Perfetto trace JSON: one complete event per task, a track per device.
void Driver::write_trace() noexcept {
  try {
    nlohmann::json events = nlohmann::json::array();
    auto devices = backend_->devices();
    for (std::size_t d = 0; d < devices.size(); ++d)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 0},
                        {"tid", d},
                        {"args", {{"name", devices[d]->name()}}}});
    for (const auto& e : worker_->take_trace())
      events.push_back({{"name", e.name},
                        {"cat", e.kind},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", e.device},
                        {"ts", e.start_us},
                        {"dur", e.end_us - e.start_us},
                        {"args", {{"task", e.task}, {"bytes", e.bytes}}}});
    std::ofstream out(config_.trace_file);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
    if (!out)
      log::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", config_.trace_file,
                std::strerror(errno));
  } catch (const std::exception& e) {
    log::warn("could not write the trace to GRIDSPAN_TRACE='{}': {}", config_.trace_file, e.what());
  }
}

plan::TaskId Driver::submit(plan::Plan plan) {
  if (keep_plans_) last_dot_ = plan.to_dot();
  plan::TaskId done = plan.done;
  if (cluster_)
    cluster_->submit(std::move(plan.tasks), done);
  else
    worker_->submit(std::move(plan.tasks));
  return done;
}

std::shared_ptr<plan::ArrayMeta> Driver::create_array(DType dtype, const Dim& shape,
                                                      const DataDistribution& dist,
                                                      const void* fill) {
  auto meta = std::make_shared<plan::ArrayMeta>();
  meta->dtype = dtype;
  meta->elem_size = dtype_size(dtype);
  meta->shape = shape;
  for (const ChunkSpec& c : dist.chunks(shape, device_count()))
    meta->chunks.push_back(plan::ChunkMeta{0, c.region, c.owned, c.device});
  std::lock_guard<std::mutex> lock(mutex_);
  meta->id = ++next_array_;
  planner_->assign_chunk_ids(*meta);
  submit(planner_->create_array(*meta, static_cast<const unsigned char*>(fill)));
  return meta;
}

void Driver::release_array(const plan::ArrayMeta& meta) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    submit(planner_->delete_array(meta));
  } catch (const std::exception& e) {
    if (cluster_ && cluster_->failed()) return;  // said when the run failed
    log::warn("could not release {}: {}", meta.describe(), e.what());
  }
}

plan::TaskId Driver::write_array(const plan::ArrayMeta& meta, std::vector<unsigned char> data) {
  auto shared = std::make_shared<const std::vector<unsigned char>>(std::move(data));
  std::lock_guard<std::mutex> lock(mutex_);
  return submit(planner_->write_array(meta, shared));
}

void Driver::read_array(const plan::ArrayMeta& meta, void* dst) {
  plan::TaskId done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = submit(planner_->read_array(meta, dst));
  }
  wait(done);
}

plan::TaskId Driver::launch(const plan::LaunchSpec& spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  return submit(planner_->launch(spec));
}

void Driver::add_kernel(std::shared_ptr<const plan::Executable> executable,
                        const backend::KernelSource& src) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cluster_) cluster_->add_kernel(executable.get(), src);
  executables_.push_back(std::move(executable));
}

void Driver::add_native(std::shared_ptr<const plan::Executable> executable,
                        const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cluster_) cluster_->add_native(executable.get(), name);
  executables_.push_back(std::move(executable));
}

void Driver::wait(plan::TaskId task) {
  if (cluster_)
    cluster_->wait(task);
  else
    worker_->wait(task);
}
bool Driver::is_done(plan::TaskId task) const {
  return cluster_ ? cluster_->is_done(task) : worker_->is_done(task);
}
void Driver::synchronize() {
  if (cluster_)
    cluster_->wait_all();
  else
    worker_->wait_all();
}
std::vector<MemoryStats> Driver::memory_stats() const {
  return cluster_ ? cluster_->memory_stats(memory_->stats()) : memory_->stats();
}
WorkerStats Driver::worker_stats() const {
  return worker_->stats();
}

std::string Driver::last_plan_dot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_dot_;
}

// --- kernels ----------------------------------------------------------------------------

KernelExecutable::KernelExecutable(std::string name, std::vector<ParamInfo> params,
                                   std::shared_ptr<backend::CompiledKernel> kernel, bool checked)
    : name_(std::move(name)),
      params_(std::move(params)),
      kernel_(std::move(kernel)),
      checked_(checked) {}

void frame_arguments(const std::vector<ParamInfo>& params, const plan::ExecFrame& frame,
                     GsArrayArg* arrays, const void** scalars) {
  const plan::Execute& ex = frame.exec;
  for (std::size_t p = 0; p < params.size(); ++p) {
    GsArrayArg& a = arrays[p];
    std::memset(&a, 0, sizeof a);
    scalars[p] = nullptr;
    if (!params[p].is_array) {
      scalars[p] = ex.scalars->data() + (*ex.scalar_offsets)[p];
      continue;
    }
    const plan::ExecArg& arg = ex.arrays[p];
    a.data = frame.data[p];
    a.rank = params[p].rank;
    a.mode = static_cast<int32_t>(arg.mode);
    a.op = static_cast<int32_t>(arg.op);
    a.elem_size = static_cast<int32_t>(dtype_size(params[p].dtype));
    for (int ax = 0; ax < 3; ++ax) {
      a.lo[ax] = arg.chunk.rect.lo[ax];
      a.extent[ax] = arg.chunk.rect.hi[ax] - arg.chunk.rect.lo[ax];
      a.region_lo[ax] = arg.region.lo[ax];
      a.region_hi[ax] = arg.region.hi[ax];
    }
    if (!a.data) {  // untouched in this superblock: an empty view
      for (int ax = 0; ax < 3; ++ax) a.extent[ax] = 0, a.region_hi[ax] = a.region_lo[ax];
    }
  }
}

void KernelExecutable::run(const plan::ExecFrame& frame) const {
  const plan::Execute& ex = frame.exec;
  std::size_t n = params_.size();
  GsArrayArg arrays_small[16];
  const void* scalars_small[16];
  std::vector<GsArrayArg> arrays_heap;
  std::vector<const void*> scalars_heap;
  GsArrayArg* arrays = arrays_small;
  const void** scalars = scalars_small;
  if (n > 16) {
    arrays_heap.resize(n);
    scalars_heap.resize(n);
    arrays = arrays_heap.data();
    scalars = scalars_heap.data();
  }
  frame_arguments(params_, frame, arrays, scalars);
  GsLaunch launch;
  std::memset(&launch, 0, sizeof launch);
  for (int ax = 0; ax < 3; ++ax) {
    launch.block_lo[ax] = ex.blocks.lo[ax];
    launch.block_hi[ax] = ex.blocks.hi[ax];
    launch.block_dim[ax] = static_cast<uint32_t>(ex.block.get(ax));
    launch.grid_dim[ax] = static_cast<uint32_t>(ex.grid.get(ax));
  }
  launch.num_params = static_cast<int32_t>(n);
  launch.arrays = arrays;
  launch.scalars = scalars;
  if (!checked_) {
    kernel_->run(launch, *frame.dev);
    return;
  }
  // The check state must be addressable by the kernel: pinned, mapped host memory.
  backend::Device& dev = *frame.dev;
  struct CheckMemory {
    backend::Device& dev;
    GsCheckState* p = static_cast<GsCheckState*>(dev.allocate_host(sizeof(GsCheckState)));
    ~CheckMemory() { dev.deallocate_host(p, sizeof(GsCheckState)); }
  } check_memory{dev};
  GsCheckState& check = *check_memory.p;
  std::memset(&check, 0, sizeof check);
  launch.check = &check;
  // Read-only arrays are compared before and after, so a write through a `read` rule shows.
  std::vector<std::vector<unsigned char>> before(n);
  auto region_bytes = [&](std::size_t p, std::vector<unsigned char>& out) {
    const plan::ExecArg& arg = ex.arrays[p];
    std::size_t elem = dtype_size(params_[p].dtype);
    out.resize(static_cast<std::size_t>(arg.region.volume()) * elem);
    dev.download(out.data(), arg.region, frame.data[p], arg.chunk.rect, arg.region, elem);
  };
  for (std::size_t p = 0; p < n; ++p)
    if (params_[p].is_array && frame.data[p] && ex.arrays[p].mode == annotation::Mode::read)
      region_bytes(p, before[p]);
  kernel_->run(launch, dev);
  dev.synchronize();
  auto where = [&](std::size_t p, const Point& idx) {
    std::string s;
    for (int ax = 0; ax < params_[p].rank; ++ax) s += fmt::format("{}{}", ax ? ", " : "", idx[ax]);
    return s;
  };
  if (check.violated) {
    std::size_t p = static_cast<std::size_t>(check.param);
    Point idx{check.index[0], check.index[1], check.index[2]};
    throw AccessError(fmt::format(
        "kernel `{}` accessed `{}[{}]` outside its declared access region {} ({}) in the "
        "superblock of blocks {}; fix the annotation or guard the access in the kernel",
        name_, params_[p].name, where(p, idx), ex.arrays[p].region.str(),
        annotation::mode_name(ex.arrays[p].mode), ex.blocks.str()));
  }
  std::vector<std::vector<unsigned char>> after(n);
  for (std::size_t p = 0; p < n; ++p)
    if (!before[p].empty()) region_bytes(p, after[p]);
  dev.synchronize();
  for (std::size_t p = 0; p < n; ++p) {
    if (before[p].empty() || after[p] == before[p]) continue;
    std::size_t elem = dtype_size(params_[p].dtype);
    const Rect& r = ex.arrays[p].region;
    // The same array may be passed twice, once to be written: its writes through the other
    // parameter are legitimate (same chunk, inside that parameter's declared region).
    auto written_elsewhere = [&](const Point& idx) {
      for (std::size_t q = 0; q < n; ++q)
        if (q != p && params_[q].is_array && ex.arrays[q].write &&
            ex.arrays[q].chunk.id == ex.arrays[p].chunk.id && ex.arrays[q].region.contains(idx))
          return true;
      return false;
    };
    // Every element written through the read rule is put back, so the array keeps its data;
    // the first one is reported.
    Point first = r.lo;
    bool found = false;
    for (std::size_t k = 0; k * elem < after[p].size(); ++k) {
      if (std::memcmp(&after[p][k * elem], &before[p][k * elem], elem) == 0) continue;
      Point idx = r.lo;
      int64_t rest = static_cast<int64_t>(k);
      for (int ax = r.rank - 1; ax >= 0; --ax) {
        idx[ax] = r.lo[ax] + rest % r.extent(ax);
        rest /= r.extent(ax);
      }
      if (written_elsewhere(idx)) continue;
      Point hi = idx;
      for (int ax = 0; ax < r.rank; ++ax) ++hi[ax];
      Rect one(r.rank, idx, hi);
      dev.upload(frame.data[p], ex.arrays[p].chunk.rect, &before[p][k * elem], one, one, elem);
      if (!found) first = idx;
      found = true;
    }
    if (!found) continue;
    dev.synchronize();
    Point idx = first;
    throw AccessError(fmt::format(
        "kernel `{}` wrote `{}[{}]`, but the annotation declares `{}` read-only (read {}) in "
        "the superblock of blocks {}; declare it `write` or `readwrite`, or do not write it",
        name_, params_[p].name, where(p, idx), params_[p].name, r.str(), ex.blocks.str()));
  }
}

}  // namespace gridspan::runtime
