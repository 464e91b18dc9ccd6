#include "runtime/cost.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "backend/jit.hpp"
#include "core/log.hpp"

namespace gridspan::runtime {

namespace {
int size_class(int64_t threads) {
  return std::bit_width(static_cast<uint64_t>(std::max<int64_t>(threads, 1))) - 1;
}
}  // namespace

CostModel::Estimate CostModel::of(const Class& c) {
  return Estimate{c.seconds / c.threads,
                  c.bytes / c.seconds,
                  int64_t(std::llround(c.threads)),
                  c.samples,
                  c.share / c.threads,
                  c.earlier};
}

bool CostModel::should_time(const plan::Executable& e) {
  const uint32_t n = e.runs.fetch_add(1, std::memory_order_relaxed);
  return n < kFirst || n % kEvery == 0;
}

void CostModel::record(const plan::Executable& e, int64_t threads, std::size_t bytes,
                       double seconds, double share) {
  if (threads <= 0 || !(seconds > 0)) return;
  std::lock_guard lock(mutex_);
  Entry& en = *entry(e, true);
  en.recorded = true;
  Class& c = en.classes[size_class(threads)];
  ++c.samples;
  const double w = 1.0 / std::min<int>(c.samples, kEvery);
  c.seconds += w * (seconds - c.seconds);
  c.threads += w * (double(threads) - c.threads);
  c.bytes += w * (double(bytes) - c.bytes);
  c.share += w * (share - c.share);
}

std::optional<CostModel::Estimate> CostModel::estimate(const plan::Executable& e,
                                                       int64_t threads) const {
  std::lock_guard lock(mutex_);
  const Entry* en = entry(e, false);
  if (!en) return std::nullopt;
  const int want = size_class(threads);
  auto best = en->classes.begin();
  for (auto c = en->classes.begin(); c != en->classes.end(); ++c)
    if (std::abs(c->first - want) < std::abs(best->first - want)) best = c;
  return of(best->second);
}

std::optional<CostModel::Estimate> CostModel::measured(const plan::Executable& e,
                                                       int64_t threads) const {
  std::lock_guard lock(mutex_);
  const Entry* en = entry(e, false);
  if (!en) return std::nullopt;
  auto c = en->classes.find(size_class(threads));
  if (c == en->classes.end()) return std::nullopt;
  return of(c->second);
}

std::optional<double> CostModel::best_bandwidth(std::size_t min_bytes) const {
  std::lock_guard lock(mutex_);
  std::optional<double> best;
  for (const auto& [e, entry] : entries_)
    for (const auto& [k, c] : entry.classes)
      if (c.bytes >= double(min_bytes)) best = std::max(best.value_or(0), c.bytes / c.seconds);
  return best;
}

void CostModel::forget(const plan::Executable& e) {
  std::lock_guard lock(mutex_);
  Entry& en = *entry(e, true);
  en.classes.clear();  // its history too
  en.recorded = false;
  e.runs.store(0, std::memory_order_relaxed);  // timed again from its next run
}

CostModel::Entry* CostModel::entry(const plan::Executable& e, bool create) const {
  auto it = entries_.find(&e);
  if (it == entries_.end()) {
    if (!create && folder_.empty()) return nullptr;
    Entry made;
    made.name = e.name(), made.key = e.history_key();
    it = entries_.emplace(&e, std::move(made)).first;
  }
  Entry& en = it->second;
  if (!en.read && !folder_.empty()) {
    en.read = true;
    read_history(en);
  }
  return create || !en.classes.empty() ? &en : nullptr;
}

void CostModel::keep_history(std::string folder) {
  std::lock_guard lock(mutex_);
  folder_ = std::move(folder);
}

std::string CostModel::history_path(const std::string& key) const {
  backend::jit::Hasher h;
  h.add(key);
  return fmt::format("{}/{}.txt", folder_, h.hex());
}

// A history file: "gridspan costs 2", the executable's key, then a line per size class:
// class, samples, seconds, threads, bytes, share (the running means); and a line per
// trial of finer cuts: "cut", the launch and the factor it settled on; or "trial", the
// launch, the finest factor that paid so far, the one to try next and, where that run
// measured it, the seconds a launch at the first took.
void CostModel::read_history(Entry& en) const {
  std::string text;
  if (!backend::jit::read_file(history_path(en.key), text)) return;
  std::istringstream in(text);
  std::string head, key, line;
  std::getline(in, head);
  std::getline(in, key);
  Entry read;
  std::map<int, Class> classes;
  bool whole = head == "gridspan costs 2" && key == en.key;
  while (whole && std::getline(in, line)) whole = read_line(line, read, classes);
  if (!whole) {
    logging::debug("cost history of `{}`: {} is not one, left alone", en.name,
                   history_path(en.key));
    return;
  }
  for (const auto& [klass, r] : classes) en.classes.emplace(klass, r);  // this run's first
  for (const auto& [launch, f] : read.cuts) en.cuts.emplace(launch, f);
}

// One line of a history file into `read` (cuts) or `classes`; false if it is not one.
bool CostModel::read_line(const std::string& line, Entry& read, std::map<int, Class>& classes) {
  std::istringstream in(line);
  std::string launch;
  if (line.rfind("cut ", 0) == 0 || line.rfind("trial ", 0) == 0) {
    Cut c{0, line[0] == 'c', 0};
    if (!(in >> launch >> launch >> c.factor) || c.factor < 1 ||
        !std::has_single_bit(uint64_t(c.factor)) || (!c.settled && !(in >> c.probe)) ||
        (!c.settled && c.probe != 2 * c.factor && c.probe != 4 * c.factor))
      return false;
    if (!c.settled && !(in >> std::ws).eof() &&
        (!(in >> c.period) || !(c.period > 0) || !std::isfinite(c.period)))
      return false;
    read.cuts[launch] = c;
    return (in >> std::ws).eof();
  }
  int k = 0;
  Class c;
  if (!(in >> k >> c.samples >> c.seconds >> c.threads >> c.bytes >> c.share) || k < 0 || k > 62 ||
      c.samples <= 0 || !(c.seconds > 0) || !(c.threads >= 1) || !(c.bytes >= 0) ||
      !(c.share >= 0) || !std::isfinite(c.seconds + c.threads + c.bytes))
    return false;
  c.samples = std::min(c.samples, kHistorySamples);
  c.earlier = true;
  classes[k] = c;
  return (in >> std::ws).eof();
}

std::optional<CostModel::Cut> CostModel::kept_cut(const plan::Executable& e,
                                                  const std::string& launch) const {
  std::lock_guard lock(mutex_);
  const Entry* en = entry(e, false);
  if (!en) return std::nullopt;
  auto c = en->cuts.find(launch);
  if (c == en->cuts.end()) return std::nullopt;
  return c->second;
}

void CostModel::keep_cut(const plan::Executable& e, const std::string& launch, Cut cut) {
  std::lock_guard lock(mutex_);
  Entry& en = *entry(e, true);
  en.cuts[launch] = cut;
  en.recorded = true;
}

void CostModel::save() const {
  std::lock_guard lock(mutex_);
  if (folder_.empty()) return;
  for (const auto& [e, en] : entries_) {
    if (!en.recorded || en.classes.empty()) continue;
    std::string text = "gridspan costs 2\n" + en.key + "\n";
    for (const auto& [k, c] : en.classes)
      text += fmt::format("{} {} {:.9g} {:.9g} {:.9g} {:.9g}\n", k, c.samples, c.seconds, c.threads,
                          c.bytes, c.share);
    for (const auto& [launch, c] : en.cuts)
      text += c.settled ? fmt::format("cut {} {}\n", launch, c.factor)
                        : fmt::format("trial {} {} {}{}\n", launch, c.factor, c.probe,
                                      c.period > 0 ? fmt::format(" {:.9g}", c.period) : "");
    try {
      backend::jit::make_dirs(folder_);
      backend::jit::write_file_atomically(history_path(en.key), text);
    } catch (const std::exception& ex) {
      logging::debug("cost history of `{}` not kept: {}", en.name, ex.what());
    }
  }
}

CostModel::~CostModel() {
  save();
}

std::vector<KernelCost> CostModel::report() const {
  std::lock_guard lock(mutex_);
  std::vector<KernelCost> out;
  for (const auto& [e, entry] : entries_)
    for (const auto& [k, c] : entry.classes)
      out.push_back(
          KernelCost{entry.name, int64_t(std::llround(c.threads)), c.samples, c.seconds, c.bytes});
  std::sort(out.begin(), out.end(), [](const KernelCost& a, const KernelCost& b) {
    return std::tie(a.kernel, a.threads) < std::tie(b.kernel, b.threads);
  });
  return out;
}

void LaunchClocks::open(uint32_t id, int64_t tasks) {
  std::lock_guard lock(mutex_);
  auto [c, made] = clocks_.try_emplace(id, Clock{tasks, {}});
  if (!made && c->second.tasks != tasks) c->second = Clock{tasks, {}};  // another launch
}

void LaunchClocks::close(uint32_t id) {
  std::lock_guard lock(mutex_);
  clocks_.erase(id);
}

void LaunchClocks::close_all() {
  std::lock_guard lock(mutex_);
  clocks_.clear();
}

void LaunchClocks::tick(uint32_t id) {
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  auto c = clocks_.find(id);
  if (c == clocks_.end()) return;
  std::vector<double>& ends = c->second.ends;
  if (ends.size() == kMostTicks) ends.erase(ends.begin(), ends.begin() + kMostTicks / 2);
  ends.push_back(now);
}

std::vector<double> LaunchClocks::windows(uint32_t id) const {
  auto c = clocks_.find(id);
  if (c == clocks_.end() || c->second.tasks <= 0) return {};
  const std::size_t n = std::size_t(c->second.tasks);
  const std::vector<double>& ends = c->second.ends;
  if (ends.size() < n * (1 + kLaunches)) return {};
  std::vector<double> out;
  for (std::size_t k = n; k + n < ends.size(); ++k) out.push_back(ends[k + n] - ends[k]);
  return out;
}

std::optional<double> LaunchClocks::period(uint32_t id) const {
  std::lock_guard lock(mutex_);
  std::vector<double> w = windows(id);
  if (w.empty()) return std::nullopt;
  auto mid = w.begin() + std::ptrdiff_t(w.size() / 2);
  std::nth_element(w.begin(), mid, w.end());
  return *mid;
}

std::optional<std::pair<double, double>> LaunchClocks::spread(uint32_t id) const {
  std::lock_guard lock(mutex_);
  const std::vector<double> w = windows(id);
  if (w.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
  return std::pair{*lo, *hi};
}

void ShareClock::advance(Time now) {
  if (running_ > 0 && now > last_)
    reading_ += std::chrono::duration<double>(now - last_).count() / running_;
  if (now > last_) last_ = now;
}

double ShareClock::enter(Time now) {
  std::lock_guard lock(mutex_);
  advance(now);
  ++running_;
  return reading_;
}

double ShareClock::leave(double entered, Time now) {
  std::lock_guard lock(mutex_);
  advance(now);
  --running_;
  return reading_ - entered;
}

}  // namespace gridspan::runtime
