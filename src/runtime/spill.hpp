// The disk level of the memory manager: one file per spilled chunk,
// `<run folder>/chunk-<pid>-<id>.spill`, a small header (magic, version, chunk id, byte count)
// and a CRC-32 of the payload that is verified on every reload, so a damaged file is an
// error and never wrong data. Each run spills into a folder of its own under the spill
// folder (`gridspan-spill-<host>-<pid>-XXXXXX`), removed at its end; a run removes the
// folders of runs on this host whose process is gone (killed before they could). Safe to
// call from several threads at once for different chunks: the file I/O runs without the
// store's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace gridspan::runtime::detail {

class SpillStore {
 public:
  /// `dir` (GRIDSPAN_SPILL_DIR; empty: $TMPDIR, or /tmp) is created if missing and must be
  /// writable (checked now, IoError otherwise). This run's folder in it is made on the
  /// first spill. Folders of dead runs in it are removed now.
  explicit SpillStore(std::string dir);
  /// Removes this run's folder and the files in it.
  ~SpillStore();
  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  /// This run's folder; empty before the first spill.
  std::string dir() const;
  /// The name of this run's folder before its random part: gridspan-spill-<host>-<pid>-.
  static std::string run_prefix();
  /// Removes the run folders in `base` of runs on this host whose process is gone; how many.
  static int remove_dead_runs(const std::string& base);
  /// Where chunk `id` is spilled (under dir(), which is empty before the first write).
  std::string path(uint64_t id) const;

  /// Writes the chunk's file, replacing an older one. IoError (naming the file and the
  /// system's reason) when it cannot; no partial file is left behind.
  void write(uint64_t id, const void* data, std::size_t bytes);
  /// Reads the chunk's file into `data` and verifies header and checksum. IoError for a
  /// missing, short or corrupt file.
  void read(uint64_t id, void* data, std::size_t bytes);
  /// Deletes the chunk's file if this store wrote one.
  void remove(uint64_t id);

  /// The CRC-32 of a buffer of any size.
  static uint32_t checksum(const void* data, std::size_t bytes);

 private:
  void ensure_dir();  // under mutex_
  std::string file_name(uint64_t id) const;

  mutable std::mutex mutex_;  // dir_ and files_; never held while reading or writing a file
  std::string base_;          // the spill folder
  std::string dir_;           // this run's folder in it, once made
  std::set<uint64_t> files_;
};

}  // namespace gridspan::runtime::detail
