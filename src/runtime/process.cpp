// This process as one rank of a run under mpirun (see process.hpp).
#include "runtime/process.hpp"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <sched.h>

#include <fmt/format.h>

#include "backend/device.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "gridspan/core/error.hpp"
#include "runtime/local.hpp"
#include "runtime/service.hpp"
#include "runtime/trace.hpp"

namespace gridspan::runtime {

// --- what sessions exchange ---------------------------------------------------------------

// Every setting of the table, in its order, by the type of its field.
void write_config(net::Writer& w, const Config& c) {
  for (const settings::Setting& s : settings::all()) {
    std::visit(
        [&](auto field) {
          using F = decltype(field);
          if constexpr (std::is_same_v<F, std::string Config::*>) w.str(c.*field);
          if constexpr (std::is_same_v<F, bool Config::*>) w.u8(c.*field ? 1 : 0);
          if constexpr (std::is_same_v<F, std::size_t Config::*>) w.u64(c.*field);
          if constexpr (std::is_same_v<F, int Config::*>) w.i64(c.*field);
          if constexpr (std::is_same_v<F, double Config::*>)
            w.u64(std::bit_cast<uint64_t>(c.*field));
          if constexpr (std::is_same_v<F, LogLevel Config::*>) w.u8(static_cast<uint8_t>(c.*field));
        },
        s.field);
  }
}

Config read_config(net::Reader& r) {
  Config c;
  for (const settings::Setting& s : settings::all()) {
    std::visit(
        [&](auto field) {
          using F = decltype(field);
          if constexpr (std::is_same_v<F, std::string Config::*>) c.*field = r.str(s.name);
          if constexpr (std::is_same_v<F, bool Config::*>) c.*field = r.u8(s.name) != 0;
          if constexpr (std::is_same_v<F, std::size_t Config::*>) c.*field = r.u64(s.name);
          if constexpr (std::is_same_v<F, int Config::*>)
            c.*field = static_cast<int>(r.i64(s.name));
          if constexpr (std::is_same_v<F, double Config::*>)
            c.*field = std::bit_cast<double>(r.u64(s.name));
          if constexpr (std::is_same_v<F, LogLevel Config::*>) {
            const uint8_t level = r.u8(s.name);
            if (level > static_cast<uint8_t>(LogLevel::debug))
              r.fail(fmt::format("log level {}", level));
            c.*field = static_cast<LogLevel>(level);
          }
        },
        s.field);
  }
  return c;  // with the trace file: each rank records, the driver's rank writes
}

void write_rank_info(net::Writer& w, const RankInfo& info) {
  w.u32(static_cast<uint32_t>(info.rank));
  w.str(info.host);
  w.str(info.backend);
  w.u32(static_cast<uint32_t>(info.devices.size()));
  for (std::size_t d = 0; d < info.devices.size(); ++d) {
    w.str(info.devices[d]);
    w.u64(info.device_memory[d]);
  }
  w.u64(info.host_memory);
}

RankInfo read_rank_info(net::Reader& r) {
  RankInfo info;
  info.rank = static_cast<int>(r.u32("rank"));
  info.host = r.str("host name");
  info.backend = r.str("backend");
  const std::size_t n = r.count("devices", 4 + 8);
  for (std::size_t d = 0; d < n; ++d) {
    info.devices.push_back(r.str("device name"));
    info.device_memory.push_back(r.u64("device memory"));
  }
  info.host_memory = r.u64("host memory");
  return info;
}

void write_stats(net::Writer& w, const std::vector<MemoryStats>& stats) {
  w.u32(static_cast<uint32_t>(stats.size()));
  for (const MemoryStats& s : stats) {
    w.str(s.name);
    for (std::size_t v : {s.used_bytes, s.total_bytes, s.limit_bytes, s.spilled_bytes, s.peak_bytes,
                          s.cached_bytes, s.copied_out_bytes, s.copied_in_bytes})
      w.u64(v);
  }
}

std::vector<MemoryStats> read_stats(net::Reader& r) {
  std::vector<MemoryStats> out(r.count("spaces", 4 + 8 * 8));
  for (MemoryStats& s : out) {
    s.name = r.str("space name");
    for (std::size_t* v : {&s.used_bytes, &s.total_bytes, &s.limit_bytes, &s.spilled_bytes,
                           &s.peak_bytes, &s.cached_bytes, &s.copied_out_bytes, &s.copied_in_bytes})
      *v = r.u64("space figure");
  }
  return out;
}

// --- the process --------------------------------------------------------------------------

bool Process::distributed() {
  static const bool on = [] {
    if (!net::launched_by_mpi()) return false;
    Config c;
    try {
      c = Config::from_env();
    } catch (const Error&) {
      return true;  // the Context reports the bad value
    }
    return c.mpi;
  }();
  return on;
}

int Process::count() {
  return distributed() ? get().size() : 1;
}

int Process::run_program(const std::function<int()>& program) {
  if (!distributed()) return program();
  Process* p;
  try {
    p = &get();
  } catch (const Error& e) {
    std::fprintf(stderr, "gridspan error: %s\n", e.what());
    return 1;
  }
  if (p->size() == 1) return program();
  if (p->rank() != 0) return p->serve();
  return p->finish(program());
}

namespace {
std::mutex g_process_mutex;
std::unique_ptr<Process> g_process;  // ends with the process: the driver's exit, MPI_Finalize
}  // namespace

Process& Process::get() {
  std::lock_guard lock(g_process_mutex);
  if (!g_process) g_process.reset(new Process());
  return *g_process;
}

Process::Process() {
  const Config c = Config::from_env();
  auto mpi = net::make_mpi_transport();
  std::vector<int> peers;  // the driver watches every rank, the others the driver
  if (mpi->rank() == 0)
    for (int r = 1; r < mpi->size(); ++r) peers.push_back(r);
  else
    peers.push_back(0);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(c.net_timeout * 1000));
  transport_ = net::watch(std::move(mpi), std::move(peers), timeout);
  logging::set_prefix(fmt::format("rank {}", transport_->rank()));
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof cores, &cores) == 0 && CPU_COUNT(&cores) == 1 &&
      std::thread::hardware_concurrency() > 1)
    logging::warn(
        "this rank may run on one core only (mpirun binds each of up to 2 ranks to a core by "
        "default), but gridspan runs threads for every device: start it with mpirun "
        "--bind-to none (or --bind-to socket)");
}

Process::~Process() {
  if (transport_ && rank() == 0 && !finished_) {
    try {
      finish(0);
    } catch (const std::exception& e) {
      logging::warn("the run could not end in order: {}", e.what());
    }
  }
}

int Process::finish(int code) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return code;
    finished_ = true;
  }
  if (failed_) {
    logging::write(LogLevel::error, fmt::format("ending every rank (exit code {})", code));
    transport_->abort(code ? code : 1);
  }
  net::Writer w;
  w.u32(static_cast<uint32_t>(code));
  for (int r = 0; r < size(); ++r)
    if (r != rank()) transport_->send(r, tag::exit, std::vector<unsigned char>(w.buffer()));
  transport_.reset();  // every queued message goes, then MPI_Finalize
  return code;
}

int Process::serve() {
  try {
    while (true) {
      auto m = transport_->receive(std::chrono::milliseconds(200));
      if (!m) continue;
      if (m->tag == tag::open) {
        if (auto code = serve_session(*m)) {
          finished_ = true;
          transport_.reset();
          return *code;
        }
        continue;
      }
      if (m->tag == tag::exit) {
        const int code = static_cast<int>(net::read_all(
            m->body, "exit message", [](net::Reader& r) { return r.u32("exit code"); }));
        finished_ = true;
        transport_.reset();
        return code;
      }
      if (m->tag == tag::shutdown) {  // of a session that could not start or broke here
        transport_->send(m->source, tag::closed, {});
        continue;
      }
      logging::debug("ignored a message (tag {}) from rank {} outside a session", m->tag,
                     m->source);
    }
  } catch (const std::exception& e) {
    logging::write(LogLevel::error, fmt::format("this rank cannot go on: {}", e.what()));
  }
  transport_->abort(1);
  std::_Exit(1);  // not reached
}

std::optional<int> Process::serve_session(const net::Message& open) {
  Config config = net::read_all(open.body, "session", read_config);
  config.node_rank = transport_->node_rank();
  config.node_ranks = transport_->node_size();
  logging::set_level(config.log_level);
  const int driver = open.source;
  std::unique_ptr<LocalRunner> local;
  std::unique_ptr<WorkerService> service;
  RankInfo info;
  try {
    local = std::make_unique<LocalRunner>(config, /*whole_run=*/false);
    service = std::make_unique<WorkerService>(*transport_, local->worker(), local->transfers(),
                                              nullptr, nullptr, driver);
    service->compile_with(&local->backend());
    if (config.lend_memory) service->lend_to(transport_->node_peers(), config.lend_min);
    service->on_message([&](net::Message& m) {
      if (m.tag != tag::stats_request) return false;
      if (!m.body.empty() && m.body.data()[0]) local->free_all_blocks();
      net::Writer w;
      write_stats(w, local->memory_stats());
      transport_->send(driver, tag::stats, std::move(w.buffer()));
      return true;
    });
    info = local->describe(rank());
  } catch (const std::exception& e) {
    net::Writer w;
    w.str(fmt::format("rank {} could not start its part of the session: {}", rank(), e.what()));
    transport_->send(driver, tag::error, std::move(w.buffer()));
    return std::nullopt;  // the driver's shutdown follows
  }
  {
    net::Writer w;
    write_rank_info(w, info);
    transport_->send(driver, tag::hello, std::move(w.buffer()));
  }
  bool broken = false;
  try {
    service->serve_until_shutdown();
  } catch (const std::exception& e) {  // the driver has heard why
    logging::debug("the session broke here: {}", e.what());
    broken = true;
  }
  local->transfers().fail_all(std::make_exception_ptr(
      NetError(fmt::format("rank {}: the session ended before this transfer came", rank()))));
  try {
    local->wait_all();
  } catch (const std::exception& e) {  // reported with its barrier
    logging::debug("a failure at the end of the session: {}", e.what());
  }
  std::optional<int> code = broken ? std::nullopt : service->exit_code();
  service.reset();
  if (!broken && !config.trace_file.empty()) {  // the driver's rank writes every rank's
    net::Writer w;
    write_trace_events(w, local->take_trace());
    transport_->send(driver, tag::trace, std::move(w.buffer()));
  }
  local.reset();
  if (!broken && !code) transport_->send(driver, tag::closed, {});
  return code;
}

}  // namespace gridspan::runtime
