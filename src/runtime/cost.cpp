#include "runtime/cost.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

namespace gridspan::runtime {

namespace {
int size_class(int64_t threads) {
  return std::bit_width(static_cast<uint64_t>(std::max<int64_t>(threads, 1))) - 1;
}
}  // namespace

CostModel::Estimate CostModel::of(const Class& c) {
  return Estimate{c.seconds / c.threads, c.bytes / c.seconds, int64_t(std::llround(c.threads)),
                  c.samples, c.share / c.threads};
}

bool CostModel::should_time(const plan::Executable& e) {
  const uint32_t n = e.runs.fetch_add(1, std::memory_order_relaxed);
  return n < kFirst || n % kEvery == 0;
}

void CostModel::record(const plan::Executable& e, int64_t threads, std::size_t bytes,
                       double seconds, double share) {
  if (threads <= 0 || !(seconds > 0)) return;
  std::lock_guard lock(mutex_);
  Entry& entry = entries_[&e];
  if (entry.name.empty()) entry.name = e.name();
  Class& c = entry.classes[size_class(threads)];
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
  auto it = entries_.find(&e);
  if (it == entries_.end() || it->second.classes.empty()) return std::nullopt;
  const auto& classes = it->second.classes;
  const int want = size_class(threads);
  auto best = classes.begin();
  for (auto c = classes.begin(); c != classes.end(); ++c)
    if (std::abs(c->first - want) < std::abs(best->first - want)) best = c;
  return of(best->second);
}

std::optional<CostModel::Estimate> CostModel::measured(const plan::Executable& e,
                                                       int64_t threads) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(&e);
  if (it == entries_.end()) return std::nullopt;
  auto c = it->second.classes.find(size_class(threads));
  if (c == it->second.classes.end()) return std::nullopt;
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
  entries_.erase(&e);
  e.runs.store(0, std::memory_order_relaxed);  // timed again from its next run
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
