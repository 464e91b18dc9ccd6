// Per-chunk region records (see records.hpp).
#include "plan/records.hpp"

#include <algorithm>

namespace gridspan::plan {

void RegionRecords::erase_done(Records& records) const {
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const Record& r) { return is_done_(r.task); }),
                records.end());
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
  if (chunk.size() < chunk.prune_at || !is_done_) return;
  erase_done(chunk.writes);
  erase_done(chunk.reads);
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
