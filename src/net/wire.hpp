// The byte format of what the driver and the workers of other processes exchange: tasks
// and the values inside them. Fixed-width little-endian integers, a length before every
// sequence; a reader checks every length and enum against what it may be and throws
// NetError naming what it was reading, so a truncated or corrupt message is an error,
// never a wrong task.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "core/bytes.hpp"
#include "gridspan/core/geometry.hpp"
#include "plan/task.hpp"

namespace gridspan::net {

/// Appends values to a byte buffer.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void bytes(const void* data, std::size_t n);  // length, then the bytes
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void dim(const Dim& d);
  void rect(const Rect& r);
  std::vector<unsigned char>& buffer() { return out_; }

 private:
  std::vector<unsigned char> out_;
};

/// Reads values back from a byte range it does not own; `what` names the message in errors.
class Reader {
 public:
  Reader(const void* data, std::size_t size, std::string what)
      : p_(static_cast<const unsigned char*>(data)), left_(size), what_(std::move(what)) {}
  uint8_t u8(const char* field);
  uint32_t u32(const char* field);
  uint64_t u64(const char* field);
  int64_t i64(const char* field) { return static_cast<int64_t>(u64(field)); }
  /// A length-prefixed byte sequence of at most `max` bytes.
  std::vector<unsigned char> bytes(const char* field, std::size_t max = SIZE_MAX);
  std::string str(const char* field, std::size_t max = 1 << 20);
  Dim dim(const char* field);
  Rect rect(const char* field);
  /// A count of items, each at least `item_bytes` long: bounded by what is left.
  std::size_t count(const char* field, std::size_t item_bytes);
  std::size_t left() const { return left_; }
  /// Throws NetError unless everything was read.
  void finish();
  [[noreturn]] void fail(const std::string& why) const;

 private:
  const unsigned char* take(std::size_t n, const char* field);
  const unsigned char* p_;
  std::size_t left_;
  std::string what_;
};

/// Reads a whole message with `read(reader)`: NetError unless it reads every byte.
template <class Read>
auto read_all(const Bytes& body, std::string what, Read read) {
  Reader r(body.data(), body.size(), std::move(what));
  auto value = read(r);
  r.finish();
  return value;
}

/// An error as it crosses processes: its kind and message (core/error.hpp).
void write_error(Writer& w, const std::exception_ptr& error);
std::exception_ptr read_error(Reader& r);

/// How Execute tasks name their kernel on the wire: the driver numbers its executables and
/// every worker keeps the same numbering (kernels are compiled on every worker).
using ExecutableId = uint64_t;
using IdOfExecutable = std::function<ExecutableId(const plan::Executable*)>;
using ExecutableOfId = std::function<const plan::Executable*(ExecutableId)>;

/// Tasks as one message. ReadBack tasks point into the driver's memory and never travel
/// (NetError); HostWrite tasks carry their data.
std::vector<unsigned char> encode_tasks(const std::vector<plan::Task>& tasks,
                                        const IdOfExecutable& id_of);
/// Throws NetError for a malformed message or an unknown executable.
std::vector<plan::Task> decode_tasks(const void* data, std::size_t size,
                                     const ExecutableOfId& executable_of);

}  // namespace gridspan::net
