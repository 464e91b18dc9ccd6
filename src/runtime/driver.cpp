// Driver: array metadata, planning under one lock, submission to the runner.
#include "runtime/driver.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/executable.hpp"

namespace gridspan::runtime {

Driver::Driver(const Config& config) : config_(config) {
  logging::set_level(config_.log_level);
  runner_ = make_runner(config_);
  planner_ = std::make_unique<plan::Planner>(
      runner_->device_count(), [this](plan::TaskId t) { return runner_->is_done(t); });
  planner_->set_ranks(runner_->rank_of_device());
  planner_->set_done_filter(
      [this](std::vector<plan::TaskId>& tasks) { runner_->drop_finished(tasks); });
  planner_->set_memoize(config_.memoize_launches);
  // Read-only copies of other devices' data are kept for later launches, up to a quarter
  // of each device's memory (the memory manager evicts them like any chunk when it must).
  std::vector<std::size_t> keep;
  for (const RankInfo& r : runner_->ranks())
    for (std::size_t bytes : r.device_memory) keep.push_back(bytes / 4);
  planner_->set_read_cache(std::move(keep));
  logging::info("{} backend with {} devices", runner_->backend().name(), runner_->device_count());
}

Driver::~Driver() {
  try {
    end();
  } catch (const std::exception& e) {
    logging::warn("an error was not reported before the context ended: {}", e.what());
  }
}

void Driver::end() {
  std::unique_ptr<Runner> runner;
  std::shared_ptr<LibraryState> library_state;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!runner_) return;
    library_state = std::move(library_state_);  // let go after the lock (it may hold arrays)
    runner = std::move(runner_);                // from now on every call says the run has ended
    planner_.reset();
  }
  std::exception_ptr unreported;
  try {
    runner->wait_all();
    // Every task has ended: the trials of finer cuts take what their last launches measured.
    if (granularity_) granularity_->end_trials(runner->costs());
  } catch (...) {
    unreported = std::current_exception();
  }
  // The library's kernels go while the devices they were loaded on are still there.
  library_state.reset();
  runner.reset();  // devices, and under mpirun the session on every rank, go
  if (unreported) std::rethrow_exception(unreported);
}

Runner& Driver::live() const {
  Runner* r = runner_.get();
  if (!r)
    throw Error(
        "this gs::Context has ended: its arrays, kernels and events can no longer be used; "
        "keep the Context alive (gs::run's lambda, or a Context in an outer scope) while you "
        "use them");
  return *r;
}

plan::Planner& Driver::planner() {
  live();  // the planner goes with the runner
  return *planner_;
}

namespace {
// The bytes a task copies between memories (devices, ranks, the host).
std::size_t bytes_copied(const plan::Task& task) {
  return std::visit(
      [](const auto& p) -> std::size_t {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, plan::Copy> || std::is_same_v<P, plan::Send> ||
                      std::is_same_v<P, plan::HostWrite> || std::is_same_v<P, plan::ReadBack> ||
                      std::is_same_v<P, plan::RecvHost>)
          return static_cast<std::size_t>(p.region.volume()) * p.elem_size;
        else
          return 0;
      },
      task.payload);
}
}  // namespace

plan::TaskId Driver::submit(plan::Plan plan) {
  const plan::TaskId done = plan.done;
  std::size_t moved = 0;
  for (const plan::Task& t : plan.tasks) moved += bytes_copied(t);
  counters_.tasks += plan.tasks.size();
  counters_.bytes_moved += moved;
  Runner& runner = live();
  runner.submit(std::move(plan));
  planner_->reuse_tasks(runner.spare_tasks());
  return done;
}

std::shared_ptr<plan::ArrayMeta> Driver::create_array(DType dtype, const Dim& shape,
                                                      const DataDistribution& dist,
                                                      const void* fill) {
  outside_tasks("makes an array");
  auto meta = std::make_shared<plan::ArrayMeta>();
  meta->dtype = dtype;
  meta->elem_size = dtype_size(dtype);
  meta->shape = shape;
  meta->automatic = dist.is_automatic() && dist.automatic_halo().rank() == 0;
  const DataDistribution& chosen =
      dist.is_automatic() ? granularity().distribution(dtype, shape, dist.automatic_halo()) : dist;
  for (const ChunkSpec& c : chosen.chunks(shape, device_count()))
    meta->chunks.push_back(plan::ChunkMeta{0, c.region, c.owned, c.device});
  std::lock_guard<std::mutex> lock(mutex_);
  meta->id = ++next_array_;
  planner().assign_chunk_ids(*meta);
  submit(planner().create_array(*meta, static_cast<const unsigned char*>(fill)));
  return meta;
}

Granularity& Driver::granularity() {
  live();  // a gs::Error once the run has ended
  std::call_once(granularity_once_, [&] { granularity_ = std::make_unique<Granularity>(*this); });
  return *granularity_;
}

void Driver::release_array(const plan::ArrayMeta& meta) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!runner_) return;  // the run has ended: its memory is gone with it
    submit(planner_->delete_array(meta));
  } catch (const std::exception& e) {
    if (runner_ && runner_->failed()) return;  // said when the run failed
    logging::warn("could not release {}: {}", meta.describe(), e.what());
  }
}

plan::TaskId Driver::write_array(const plan::ArrayMeta& meta, std::vector<unsigned char> data) {
  return write_array(meta, std::make_shared<const std::vector<unsigned char>>(std::move(data)));
}
plan::TaskId Driver::write_array(const plan::ArrayMeta& meta, plan::HostBytes data) {
  outside_tasks("writes an array");
  std::lock_guard<std::mutex> lock(mutex_);
  return submit(planner().write_array(meta, std::move(data)));
}

void Driver::read_array(const plan::ArrayMeta& meta, void* dst) {
  wait(read_array_async(meta, dst));
}
plan::TaskId Driver::read_array_async(const plan::ArrayMeta& meta, void* dst) {
  outside_tasks("reads an array");
  std::lock_guard<std::mutex> lock(mutex_);
  return submit(planner().read_array(meta, dst));
}
bool Driver::ended() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !runner_;
}

void Driver::outside_tasks(const char* what) const {
  if (const std::string* name = native_running())
    throw Error(fmt::format(
        "native function `{}` {} inside its task; a task cannot launch kernels, make, write or "
        "read arrays or wait for the devices (it would wait for itself): do the work on the "
        "task's views, or launch it after this one",
        *name, what));
}

plan::TaskId Driver::launch(const plan::LaunchSpec& spec) {
  outside_tasks("launches a kernel");
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.launches;
  plan::Plan plan = planner().launch(spec);
  if (keep_plans_) last_dot_ = plan.to_dot();
  return submit(std::move(plan));
}

void Driver::add_executable(std::shared_ptr<const plan::Executable> executable) {
  std::lock_guard<std::mutex> lock(mutex_);
  live().add_executable(std::move(executable));
}

std::string Driver::last_plan_dot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_dot_;
}

}  // namespace gridspan::runtime
