// The disk level of the memory manager: one file per spilled chunk,
// `<dir>/chunk-<pid>-<id>.spill`, a small header (magic, version, chunk id, byte count)
// and a CRC-32 of the payload that is verified on every reload, so a damaged file is an
// error and never wrong data. Safe to call from several threads at once for different
// chunks: the file I/O runs without the store's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace gridspan::runtime::detail {

class SpillStore {
 public:
  /// `dir` is created if missing and must be writable (checked now, IoError otherwise).
  /// Empty: a private folder under $TMPDIR (or /tmp), created on the first spill and
  /// removed with the store.
  explicit SpillStore(std::string dir);
  /// Removes the files this store wrote (and its private folder).
  ~SpillStore();
  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  /// The folder in use; empty while a private folder has not been created yet.
  std::string dir() const;
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
  std::string dir_;
  bool private_dir_ = false;
  std::set<uint64_t> files_;
};

}  // namespace gridspan::runtime::detail
