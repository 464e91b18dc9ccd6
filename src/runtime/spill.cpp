// SpillStore: spill files with a verified header and payload checksum, written and read
// with plain POSIX calls so every failure carries the system's reason.
#include "runtime/spill.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"

namespace gridspan::runtime::detail {

namespace {

constexpr char kMagic[8] = {'G', 'S', 'S', 'P', 'I', 'L', 'L', '\0'};
constexpr uint32_t kVersion = 1;
// magic[8], version u32, header bytes u32, chunk id u64, payload bytes u64, crc u64.
constexpr std::size_t kHeaderBytes = 40;

struct Header {
  uint32_t version = kVersion;
  uint64_t chunk = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

void encode(const Header& h, unsigned char* out) {
  uint32_t header_bytes = kHeaderBytes;
  std::memcpy(out, kMagic, 8);
  std::memcpy(out + 8, &h.version, 4);
  std::memcpy(out + 12, &header_bytes, 4);
  std::memcpy(out + 16, &h.chunk, 8);
  std::memcpy(out + 24, &h.bytes, 8);
  std::memcpy(out + 32, &h.checksum, 8);
}

std::string system_reason(int error) {
  return std::strerror(error);
}

// Writes all of `bytes`; returns 0 or the errno of the failure.
int write_all(int fd, const void* data, std::size_t bytes) {
  auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, std::min<std::size_t>(bytes, std::size_t(1) << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return ENOSPC;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return 0;
}

// Reads up to `bytes`, stopping early only at the end of the file; sets `error` to the
// errno of a failure (0 otherwise) and returns the bytes read.
std::size_t read_all(int fd, void* data, std::size_t bytes, int& error) {
  auto* p = static_cast<unsigned char*>(data);
  std::size_t done = 0;
  error = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd, p + done, std::min<std::size_t>(bytes - done, std::size_t(1) << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return done;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

class FileGuard {
 public:
  explicit FileGuard(int fd) : fd_(fd) {}
  ~FileGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
  int get() const { return fd_; }
  // Closes now and returns 0 or the errno of a failed close.
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

std::atomic<uint64_t> probe_counter{0};

}  // namespace

SpillStore::SpillStore(std::string dir) : base_(std::move(dir)) {
  if (base_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base_ = tmp && *tmp ? tmp : "/tmp";
    remove_dead_runs(base_);
    return;
  }
  auto unwritable = [&](const std::string& reason) {
    return IoError(
        fmt::format("GRIDSPAN_SPILL_DIR '{}' cannot be written: {}; point it at a "
                    "writable folder",
                    base_, reason));
  };
  std::error_code ec;
  std::filesystem::create_directories(base_, ec);
  if (ec) throw unwritable("cannot create it (" + ec.message() + ")");
  if (!std::filesystem::is_directory(base_, ec)) throw unwritable("it is not a folder");
  std::string probe = fmt::format("{}/.gridspan-probe-{}-{}", base_, ::getpid(), probe_counter++);
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw unwritable("cannot create a file in it (" + system_reason(errno) + ")");
  FileGuard file(fd);
  int error = write_all(fd, kMagic, sizeof kMagic);
  if (error == 0) error = file.close();
  ::unlink(probe.c_str());
  if (error != 0) throw unwritable("cannot write a file in it (" + system_reason(error) + ")");
  remove_dead_runs(base_);
}

SpillStore::~SpillStore() {
  if (dir_.empty()) return;
  for (uint64_t id : files_) ::unlink(path(id).c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string SpillStore::run_prefix() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (char* c = host; *c; ++c)
    if (*c == '-' || *c == '/') *c = '_';  // the name's separators stay unambiguous
  return fmt::format("gridspan-spill-{}-{}-", host, ::getpid());
}

int SpillStore::remove_dead_runs(const std::string& base) {
  const std::string mine = run_prefix();
  const std::string host_part = mine.substr(0, mine.rfind('-', mine.size() - 2) + 1);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(host_part, 0) != 0 || !entry.is_directory(ec)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + host_part.size(), &end, 10);
    if (pid <= 0 || *end != '-' || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue;  // not a run folder, or its process is alive (or not ours to ask)
    std::filesystem::remove_all(entry.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

void SpillStore::ensure_dir() {
  if (!dir_.empty()) return;
  std::string pattern = fmt::format("{}/{}XXXXXX", base_, run_prefix());
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw IoError(
        fmt::format("cannot create this run's spill folder under '{}': {}; set "
                    "GRIDSPAN_SPILL_DIR to a writable folder",
                    base_, system_reason(errno)));
  }
  dir_ = pattern;
}

std::string SpillStore::file_name(uint64_t id) const {
  return fmt::format("chunk-{}-{}.spill", ::getpid(), id);
}

std::string SpillStore::dir() const {
  std::lock_guard lock(mutex_);
  return dir_;
}

std::string SpillStore::path(uint64_t id) const {
  std::lock_guard lock(mutex_);
  return dir_ + "/" + file_name(id);
}

uint32_t SpillStore::checksum(const void* data, std::size_t bytes) {
  auto* p = static_cast<const Bytef*>(data);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (bytes > 0) {
    std::size_t n = std::min<std::size_t>(bytes, std::size_t(1) << 30);
    crc = crc32(crc, p, static_cast<uInt>(n));
    p += n;
    bytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

void SpillStore::write(uint64_t id, const void* data, std::size_t bytes) {
  std::string file;
  {
    std::lock_guard lock(mutex_);
    ensure_dir();
    file = dir_ + "/" + file_name(id);
  }
  auto failed = [&](int error) {
    ::unlink(file.c_str());
    std::lock_guard lock(mutex_);
    files_.erase(id);
    return IoError(
        fmt::format("cannot write spill file '{}' of chunk {}: {}; check the free "
                    "space and permissions of the folder behind GRIDSPAN_SPILL_DIR",
                    file, id, system_reason(error)));
  };
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw failed(errno);
  FileGuard guard(fd);
  {
    std::lock_guard lock(mutex_);
    files_.insert(id);
  }
  Header header;
  header.chunk = id;
  header.bytes = bytes;
  header.checksum = checksum(data, bytes);
  unsigned char encoded[kHeaderBytes];
  encode(header, encoded);
  int error = write_all(fd, encoded, kHeaderBytes);
  if (error == 0) error = write_all(fd, data, bytes);
  if (error == 0) error = guard.close();
  if (error != 0) throw failed(error);
}

void SpillStore::read(uint64_t id, void* data, std::size_t bytes) {
  std::string file = path(id);
  auto lost = [&](const std::string& what) {
    return IoError(
        fmt::format("spill file '{}' of chunk {} {}; the data of this chunk is lost; "
                    "check the disk behind GRIDSPAN_SPILL_DIR",
                    file, id, what));
  };
  auto corrupt = [&](const std::string& detail) { return lost("is corrupt: " + detail); };
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw lost("cannot be opened (" + system_reason(errno) + ")");
  FileGuard guard(fd);
  int error = 0;
  unsigned char encoded[kHeaderBytes];
  std::size_t got = read_all(fd, encoded, kHeaderBytes, error);
  if (error != 0) throw lost("cannot be read (" + system_reason(error) + ")");
  if (got < kHeaderBytes) {
    throw corrupt(
        fmt::format("it ends after {} bytes, inside its {}-byte header", got, kHeaderBytes));
  }
  Header header;
  uint32_t header_bytes = 0;
  std::memcpy(&header.version, encoded + 8, 4);
  std::memcpy(&header_bytes, encoded + 12, 4);
  std::memcpy(&header.chunk, encoded + 16, 8);
  std::memcpy(&header.bytes, encoded + 24, 8);
  std::memcpy(&header.checksum, encoded + 32, 8);
  if (std::memcmp(encoded, kMagic, 8) != 0 || header.version != kVersion ||
      header_bytes != kHeaderBytes) {
    throw corrupt("its header is not a gridspan spill header of version 1");
  }
  if (header.chunk != id) {
    throw corrupt(fmt::format("its header names chunk {}", header.chunk));
  }
  if (header.bytes != bytes) {
    throw corrupt(fmt::format("its header says {} bytes, the chunk has {}", header.bytes, bytes));
  }
  got = read_all(fd, data, bytes, error);
  if (error != 0) throw lost("cannot be read (" + system_reason(error) + ")");
  if (got < bytes) {
    throw corrupt(fmt::format("it ends after {} of {} payload bytes", got, bytes));
  }
  unsigned char extra = 0;
  if (read_all(fd, &extra, 1, error) != 0) throw corrupt("it is longer than its header says");
  uint32_t found = checksum(data, bytes);
  if (found != header.checksum) {
    throw corrupt(fmt::format("checksum mismatch (expected {:#010x}, found {:#010x})",
                              header.checksum, found));
  }
}

void SpillStore::remove(uint64_t id) {
  std::string file;
  {
    std::lock_guard lock(mutex_);
    if (files_.erase(id) == 0) return;
    file = dir_ + "/" + file_name(id);
  }
  ::unlink(file.c_str());
}

}  // namespace gridspan::runtime::detail
