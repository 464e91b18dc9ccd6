// The driver's side of a session over several processes (see cluster.hpp).
#include "runtime/cluster.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/log.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/executable.hpp"

namespace gridspan::runtime {

namespace {

// "rank 2: why", unless the message names its rank already.
std::string on_rank(int rank, const std::string& message) {
  if (rank == 0 || message.rfind(fmt::format("rank {}", rank), 0) == 0) return message;
  return fmt::format("rank {}: {}", rank, message);
}

}  // namespace

Cluster::Cluster(Process& process, const Config& config)
    : process_(process), transport_(process.transport()), splitter_(plan::Placement{}) {
  if (process_.failed())
    throw NetError(
        "this run lost a rank earlier (see the first error): no session can start; every "
        "rank ends when the program does");
  if (!config.trace_file.empty()) check_trace_path(config.trace_file);
  trace_file_ = config.trace_file;
  local_ = std::make_unique<LocalRunner>(config, /*whole_run=*/false);
  service_ = std::make_unique<WorkerService>(
      transport_, local_->worker(), local_->transfers(), nullptr,
      [this](const BarrierReport& r) { on_report(r); }, 0);
  service_->on_error([this](const RankError& e) { on_error(e); });
  if (config.lend_memory) service_->lend_to(transport_.node_peers(), config.lend_min);
  service_->on_message([this](net::Message& m) { return on_message(m); });
  net::Writer w;
  write_config(w, config);
  const int ranks = transport_.size();
  for (int r = 1; r < ranks; ++r)
    transport_.send(r, tag::open, std::vector<unsigned char>(w.buffer()));
  std::unique_lock lock(mutex_);
  const bool all = wait_for(lock, [&] { return int(hellos_.size()) == ranks - 1; });
  if (!all) {
    lock.unlock();
    for (int r = 1; r < ranks; ++r) transport_.send(r, tag::shutdown, {});
    service_.reset();
    std::rethrow_exception(failure_);
  }
  ranks_.push_back(local_->describe(0));
  std::vector<int> counts{static_cast<int>(ranks_[0].devices.size())};
  for (auto& [rank, info] : hellos_) {
    counts.push_back(static_cast<int>(info.devices.size()));
    ranks_.push_back(std::move(info));
  }
  splitter_ = plan::PlanSplitter(plan::Placement::by_rank(counts));
  std::string where;
  for (const RankInfo& r : ranks_)
    where += fmt::format("{}rank {} ({}): {} {} device{}", where.empty() ? "" : ", ", r.rank,
                         r.host, r.devices.size(), r.backend, r.devices.size() == 1 ? "" : "s");
  logging::info("a session over {} ranks: {}", ranks, where);
}

Cluster::~Cluster() {
  try {
    wait_all();
  } catch (const std::exception& e) {
    logging::warn("an error was not reported before the context ended: {}", e.what());
  }
  const int ranks = transport_.size();
  try {
    for (int r = 1; r < ranks; ++r) transport_.send(r, tag::shutdown, {});
    std::unique_lock lock(mutex_);
    wait_for(lock, [&] { return closed_ == ranks - 1; });
  } catch (const std::exception& e) {
    logging::warn("the session did not close on every rank: {}", e.what());
  }
  // Nothing more comes for rank 0's worker from ranks that are gone.
  local_->transfers().fail_all(
      std::make_exception_ptr(NetError("the session ended before this transfer came")));
  service_.reset();
  if (!trace_file_.empty()) write_trace();
  local_.reset();
}

// Every rank's events in one file: rank 0's, and those the others sent before they closed.
void Cluster::write_trace() noexcept {
  std::vector<RankTrace> ranks{RankTrace{ranks_[0], local_->take_trace()}};
  std::lock_guard lock(mutex_);
  for (auto& [rank, events] : traces_) ranks.push_back(RankTrace{ranks_[rank], std::move(events)});
  write_trace_file(trace_file_, ranks);
}

template <class Ready>
bool Cluster::wait_for(std::unique_lock<std::mutex>& lock, Ready ready) {
  changed_.wait(lock, [&] { return ready() || failure_; });
  return ready();
}

void Cluster::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
    failure_ = error;
  }
  process_.mark_failed();
  logging::write(LogLevel::error, describe_error(error).message);
  changed_.notify_all();
  local_->transfers().fail_all(error);
}

void Cluster::on_error(const RankError& e) {
  fail(std::make_exception_ptr(NetError(on_rank(e.rank, e.message))));
}

bool Cluster::on_message(net::Message& m) {
  switch (m.tag) {
    case tag::hello: {
      RankInfo info = net::read_all(m.body, "hello", read_rank_info);
      std::lock_guard lock(mutex_);
      hellos_[m.source] = std::move(info);
      break;
    }
    case tag::stats: {
      auto stats = net::read_all(m.body, "memory figures", read_stats);
      std::lock_guard lock(mutex_);
      stats_[m.source] = std::move(stats);
      break;
    }
    case tag::trace: {
      auto events = net::read_all(m.body, "trace", read_trace_events);
      std::lock_guard lock(mutex_);
      traces_[m.source] = std::move(events);
      break;
    }
    case tag::closed: {
      std::lock_guard lock(mutex_);
      ++closed_;
      break;
    }
    default:
      return false;
  }
  changed_.notify_all();
  return true;
}

void Cluster::add_executable(std::shared_ptr<const plan::Executable> e) {
  const auto* kernel = dynamic_cast<const KernelExecutable*>(e.get());
  if (!kernel && !find_native(e->name()))
    throw Error(fmt::format(
        "native function `{}` is not registered: under mpirun the other ranks do not run "
        "this code and find native functions by name; call gs::register_native on its "
        "NativeDef before gs::run (or at static initialisation)",
        e->name()));
  const net::ExecutableId id = ids_.size() + 1;
  ids_[e.get()] = id;
  for (int r = 1; r < transport_.size(); ++r) {
    if (kernel)
      WorkerService::send_compile(transport_, r, id, kernel->source());
    else
      WorkerService::send_native(transport_, r, id, e->name());
  }
  local_->add_executable(std::move(e));
}

void Cluster::submit(plan::Plan plan) {
  std::vector<plan::Task>& tasks = plan.tasks;
  const plan::TaskId done = plan.done;
  if (tasks.empty() || tasks.back().id != done)
    throw Error(fmt::format("internal error: a plan for several ranks must end in its barrier"));
  PlanState state;
  // The plan's tasks are numbered from `first` to its barrier, though not in the order they
  // come (a launch numbers its execute before the temporaries it makes for it).
  state.first = std::min_element(tasks.begin(), tasks.end(), [](const auto& a, const auto& b) {
                  return a.id < b.id;
                })->id;
  {
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    // Tasks of failed plans stay known: data they wrote carry their error into the plans
    // that read them (each rank's worker remembers its failed tasks).
    if (complete_through_ > forgotten_through_) {
      forgotten_through_ = complete_through_;
      splitter_.forget(complete_through_, [&](plan::TaskId t) {
        auto it = failed_plans_.lower_bound(t);
        return it != failed_plans_.end() && it->second.first <= t;
      });
    }
  }
  auto parts = splitter_.split(std::move(tasks));
  state.parts_left = static_cast<int>(splitter_.barrier_ranks(done).size());
  {
    std::lock_guard lock(mutex_);
    plans_[done] = state;
  }
  auto id_of = [this](const plan::Executable* e) {
    auto it = ids_.find(e);
    if (it == ids_.end())
      throw Error(
          fmt::format("internal error: kernel `{}` was not made known to every rank", e->name()));
    return it->second;
  };
  for (int r = 1; r < transport_.size(); ++r)
    if (!parts[r].empty()) WorkerService::send_tasks(transport_, r, parts[r], id_of);
  if (!parts[0].empty()) local_->worker().submit(std::move(parts[0]));
}

void Cluster::on_report(const BarrierReport& r) {
  {
    std::lock_guard lock(mutex_);
    auto it = plans_.find(r.barrier);
    if (it == plans_.end()) {
      logging::debug("a report of barrier {} from rank {}, which no plan waits for", r.barrier,
                     r.rank);
      return;
    }
    PlanState& s = it->second;
    if (r.error) s.errors.push_back(r.error);
    if (--s.parts_left > 0) return;
    s.complete = true;
    // The plan's error: a task of its own that failed rather than one passed on from an
    // earlier plan (each rank's part fails with the first error it met).
    bool own = false;
    for (const std::exception_ptr& e : s.errors) {
      const auto task = failed_task(describe_error(e).message);
      const bool mine = task && *task >= s.first && *task <= r.barrier;
      if (!s.error || (mine && !own)) s.error = e;
      own = own || mine;
    }
    if (s.error) {
      failed_plans_[r.barrier] = FailedPlan{s.first, s.error};
      if (own) unreported_.insert(r.barrier);
    }
    while (!plans_.empty() && plans_.begin()->second.complete) {
      complete_through_ = plans_.begin()->first;
      plans_.erase(plans_.begin());
    }
  }
  changed_.notify_all();
}

bool Cluster::is_done(plan::TaskId task) const {
  std::lock_guard lock(mutex_);
  if (task <= complete_through_) return true;
  auto it = plans_.lower_bound(task);
  return it != plans_.end() && it->second.first <= task && it->second.complete;
}

void Cluster::wait(plan::TaskId done) {
  std::unique_lock lock(mutex_);
  auto complete = [&] {
    if (done <= complete_through_) return true;
    auto it = plans_.find(done);
    return it == plans_.end() || it->second.complete;
  };
  if (!wait_for(lock, complete)) {
    failure_reported_ = true;
    std::rethrow_exception(failure_);
  }
  auto f = failed_plans_.find(done);
  if (f == failed_plans_.end()) return;
  std::exception_ptr error = f->second.error;
  reported(done, error);
  std::rethrow_exception(error);
}

std::optional<plan::TaskId> Cluster::failed_plan_of(plan::TaskId task) const {
  auto it = failed_plans_.lower_bound(task);
  if (it == failed_plans_.end() || it->second.first > task) return std::nullopt;
  return it->first;
}

void Cluster::reported(plan::TaskId barrier, const std::exception_ptr& error) {
  unreported_.erase(barrier);
  // Plans after a failed one fail with its error (remade on each rank): that plan's failure
  // has reached the program now too.
  if (auto task = failed_task(describe_error(error).message))
    if (auto origin = failed_plan_of(*task)) unreported_.erase(*origin);
}

bool Cluster::failed() const {
  std::lock_guard lock(mutex_);
  return failure_ != nullptr;
}

void Cluster::wait_all() {
  std::unique_lock lock(mutex_);
  if (!wait_for(lock, [&] { return plans_.empty(); })) {
    if (failure_reported_) return;  // the run is over; it was said
    failure_reported_ = true;
    std::rethrow_exception(failure_);
  }
  if (!unreported_.empty()) {
    const plan::TaskId barrier = *unreported_.begin();
    std::exception_ptr e = failed_plans_.at(barrier).error;
    reported(barrier, e);
    std::rethrow_exception(e);
  }
}

std::vector<MemoryStats> Cluster::gather_stats(bool free_blocks) {
  // One request at a time: another caller's would clear the figures this one waits for.
  std::lock_guard one(stats_call_mutex_);
  if (free_blocks) local_->free_all_blocks();
  const std::vector<MemoryStats> local = local_->memory_stats();
  const int ranks = transport_.size();
  {
    std::lock_guard lock(mutex_);
    stats_.clear();
    stats_[0] = local;
  }
  // The body says whether the rank's pools give their free blocks back first.
  for (int r = 1; r < ranks; ++r)
    transport_.send(r, tag::stats_request,
                    std::vector<unsigned char>{static_cast<unsigned char>(free_blocks)});
  std::unique_lock lock(mutex_);
  if (!wait_for(lock, [&] { return int(stats_.size()) == ranks; }))
    std::rethrow_exception(failure_);
  std::vector<MemoryStats> out;
  MemoryStats host, disk;
  for (auto& [rank, spaces] : stats_) {
    const std::size_t devices = ranks_[rank].devices.size();
    if (spaces.size() != devices + 2)
      throw NetError(fmt::format("rank {} sent figures of {} spaces for {} devices", rank,
                                 spaces.size(), devices));
    for (std::size_t d = 0; d < devices; ++d) {  // "rank 1 cpu:0": each rank names its own
      out.push_back(spaces[d]);
      out.back().name = fmt::format("rank {} {}", rank, spaces[d].name);
    }
    for (auto [sum, s] :
         {std::pair{&host, &spaces[devices]}, std::pair{&disk, &spaces[devices + 1]}}) {
      sum->name = s->name;
      sum->used_bytes += s->used_bytes;
      sum->total_bytes += s->total_bytes;
      sum->limit_bytes += s->limit_bytes;
      sum->spilled_bytes += s->spilled_bytes;
      sum->peak_bytes += s->peak_bytes;
      sum->cached_bytes += s->cached_bytes;
      sum->copied_out_bytes += s->copied_out_bytes;
      sum->copied_in_bytes += s->copied_in_bytes;
    }
  }
  out.push_back(host);
  out.push_back(disk);
  return out;
}

}  // namespace gridspan::runtime
