// Per-chunk region records (see records.hpp).
#include "plan/records.hpp"

#include <algorithm>

namespace gridspan::plan {

void RegionRecords::prune(std::vector<Record>& records) const {
  if (records.size() < 32 || !is_done_) return;
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const Record& r) { return is_done_(r.task); }),
                records.end());
}

void RegionRecords::read_deps(ChunkId c, const Rect& r, std::vector<TaskId>& deps) const {
  auto it = records_.find(c);
  if (it == records_.end()) return;
  for (const Record& rec : it->second)
    if (rec.write && rec.region.overlaps(r)) deps.push_back(rec.task);
}

void RegionRecords::write_deps(ChunkId c, const Rect& r, std::vector<TaskId>& deps) const {
  auto it = records_.find(c);
  if (it == records_.end()) return;
  for (const Record& rec : it->second)
    if (rec.region.overlaps(r)) deps.push_back(rec.task);
}

void RegionRecords::record(ChunkId c, const Rect& r, TaskId t, bool write) {
  auto& recs = records_[c];
  if (write) {
    // A writer depends on every record it overlaps; those it covers are superseded.
    recs.erase(std::remove_if(recs.begin(), recs.end(),
                              [&](const Record& rec) { return r.contains(rec.region); }),
               recs.end());
  }
  prune(recs);
  recs.push_back(Record{r, t, write});
}

std::size_t RegionRecords::size() const {
  std::size_t n = 0;
  for (auto& [c, r] : records_) n += r.size();
  return n;
}

}  // namespace gridspan::plan
