// Per-chunk region records (see records.hpp).
#include "plan/records.hpp"

#include <algorithm>

namespace gridspan::plan {

RegionRecords::RegionRecords(std::function<bool(TaskId)> is_done) {
  if (is_done)
    done_filter_ = [is_done = std::move(is_done)](std::vector<TaskId>& tasks) {
      std::erase_if(tasks, is_done);
    };
}

// Every record of a finished task goes: the done filter is asked of all of the chunk's.
void RegionRecords::erase_done(Chunk& chunk) const {
  std::vector<TaskId> running;
  running.reserve(chunk.size());
  for (const Records* records : {&chunk.writes, &chunk.reads})
    for (const Record& r : *records) running.push_back(r.task);
  done_filter_(running);
  std::sort(running.begin(), running.end());
  for (Records* records : {&chunk.writes, &chunk.reads})
    std::erase_if(*records, [&](const Record& r) {
      return !std::binary_search(running.begin(), running.end(), r.task);
    });
}

void RegionRecords::erase_covered(Records& records, const Rect& by) {
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const Record& r) { return by.contains(r.region); }),
                records.end());
}

void RegionRecords::overlapping(const Records& records, const Rect& r, std::vector<TaskId>& deps) {
  for (const Record& rec : records)
    if (rec.region.overlaps(r)) deps.push_back(rec.task);
}

void RegionRecords::prune(Chunk& chunk) const {
  if (chunk.size() < chunk.prune_at || !done_filter_) return;
  erase_done(chunk);
  chunk.prune_at = std::max<std::size_t>(32, 2 * chunk.size());
}

void RegionRecords::read_deps(ChunkId c, const Rect& r, std::vector<TaskId>& deps) const {
  if (auto it = records_.find(c); it != records_.end()) overlapping(it->second.writes, r, deps);
}

void RegionRecords::write_deps(ChunkId c, const Rect& r, std::vector<TaskId>& deps) const {
  auto it = records_.find(c);
  if (it == records_.end()) return;
  overlapping(it->second.writes, r, deps);
  overlapping(it->second.reads, r, deps);
}

void RegionRecords::record(ChunkId c, const Rect& r, TaskId t, bool write) {
  Chunk& chunk = records_[c];
  if (write) {
    // A writer depends on every record it overlaps; those it covers are superseded.
    erase_covered(chunk.writes, r);
    erase_covered(chunk.reads, r);
  }
  prune(chunk);
  (write ? chunk.writes : chunk.reads).push_back(Record{r, t});
}

std::size_t RegionRecords::size() const {
  std::size_t n = 0;
  for (auto& [c, chunk] : records_) n += chunk.size();
  return n;
}

}  // namespace gridspan::plan
