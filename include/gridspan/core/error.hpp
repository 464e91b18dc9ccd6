// The one exception hierarchy of gridspan. Every failure a user can cause or meet is a
// gs::Error whose message says what went wrong, where, and what to do about it.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace gridspan {

/// Base of every error gridspan throws. `what()` is the full, user-facing message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A malformed or invalid access annotation (message quotes it with a caret).
class AnnotationError : public Error {
 public:
  using Error::Error;
};

/// A kernel that does not compile, or a signature gridspan cannot read.
class CompileError : public Error {
 public:
  using Error::Error;
};

/// A launch whose arguments, shapes or distributions do not fit the kernel.
class LaunchError : public Error {
 public:
  using Error::Error;
};

/// A kernel that touched memory outside its declared access (checked mode).
class AccessError : public Error {
 public:
  using Error::Error;
};

/// A bad configuration value or distribution.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A failure the GPU or its driver reported (a kernel that faulted, a lost device).
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// A failure between processes: a malformed message, a worker that died or stopped
/// answering.
class NetError : public Error {
 public:
  using Error::Error;
};

/// An I/O failure or corrupt data in a spill file.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A memory space that cannot hold what is asked of it, with nothing left to evict.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& space, std::size_t requested, std::size_t in_use,
                   std::size_t limit, const std::string& advice);
  const std::string& space() const { return space_; }
  std::size_t requested() const { return requested_; }
  std::size_t in_use() const { return in_use_; }
  std::size_t limit() const { return limit_; }

 private:
  friend std::exception_ptr make_error(uint8_t, const std::string&);
  explicit OutOfMemoryError(const std::string& message)
      : Error(message), requested_(0), in_use_(0), limit_(0) {}
  std::string space_;
  std::size_t requested_, in_use_, limit_;
};

/// Errors that cross processes: the kind of an exception (its gs::Error class) and its
/// message, and an exception of that kind made again from them on the other side, so a
/// `catch (const gs::AccessError&)` on the driver catches an access error of any rank. Not
/// a gs::Error (a std::exception from user code): kind 0, thrown again as a gs::Error.
/// An OutOfMemoryError made again keeps its message; its figures read 0.
struct ErrorInfo {
  uint8_t kind = 0;
  std::string message;
};
ErrorInfo describe_error(const std::exception_ptr& error);
std::exception_ptr make_error(uint8_t kind, const std::string& message);
/// The same error with `context` before its message ("rank 1, task 7 (Copy): ...").
std::exception_ptr error_in(const std::exception_ptr& error, const std::string& context);

/// Formats a byte count for messages: "1.50 MiB (1572864 bytes)".
std::string format_bytes(std::size_t bytes);

}  // namespace gridspan
