// Error types and the byte formatter used in their messages.
#include "gridspan/core/error.hpp"

#include <fmt/format.h>

namespace gridspan {

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} bytes", bytes);
  return fmt::format("{:.2f} {} ({} bytes)", value, units[unit], bytes);
}

OutOfMemoryError::OutOfMemoryError(const std::string& space, std::size_t requested,
                                   std::size_t in_use, std::size_t limit, const std::string& advice)
    : Error(fmt::format("out of memory in {}: requested {}, in use {}, limit {}; {}", space,
                        format_bytes(requested), format_bytes(in_use), format_bytes(limit),
                        advice)),
      space_(space),
      requested_(requested),
      in_use_(in_use),
      limit_(limit) {}
namespace {

// The kinds' numbers travel between processes: append, never renumber.
enum Kind : uint8_t {
  kOther = 0,
  kError,
  kAnnotation,
  kCompile,
  kLaunch,
  kAccess,
  kConfig,
  kDevice,
  kNet,
  kIo,
  kOutOfMemory
};

}  // namespace

ErrorInfo describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const AnnotationError& e) {
    return {kAnnotation, e.what()};
  } catch (const CompileError& e) {
    return {kCompile, e.what()};
  } catch (const LaunchError& e) {
    return {kLaunch, e.what()};
  } catch (const AccessError& e) {
    return {kAccess, e.what()};
  } catch (const ConfigError& e) {
    return {kConfig, e.what()};
  } catch (const DeviceError& e) {
    return {kDevice, e.what()};
  } catch (const NetError& e) {
    return {kNet, e.what()};
  } catch (const IoError& e) {
    return {kIo, e.what()};
  } catch (const OutOfMemoryError& e) {
    return {kOutOfMemory, e.what()};
  } catch (const Error& e) {
    return {kError, e.what()};
  } catch (const std::exception& e) {
    return {kOther, e.what()};
  } catch (...) {
    return {kOther, "an exception that is not a std::exception"};
  }
}

std::exception_ptr make_error(uint8_t kind, const std::string& message) {
  switch (kind) {
    case kAnnotation:
      return std::make_exception_ptr(AnnotationError(message));
    case kCompile:
      return std::make_exception_ptr(CompileError(message));
    case kLaunch:
      return std::make_exception_ptr(LaunchError(message));
    case kAccess:
      return std::make_exception_ptr(AccessError(message));
    case kConfig:
      return std::make_exception_ptr(ConfigError(message));
    case kDevice:
      return std::make_exception_ptr(DeviceError(message));
    case kNet:
      return std::make_exception_ptr(NetError(message));
    case kIo:
      return std::make_exception_ptr(IoError(message));
    case kOutOfMemory:
      return std::make_exception_ptr(OutOfMemoryError(message));
    default:
      return std::make_exception_ptr(Error(message));
  }
}

std::exception_ptr error_in(const std::exception_ptr& error, const std::string& context) {
  ErrorInfo info = describe_error(error);
  return make_error(info.kind, context + ": " + info.message);
}

}  // namespace gridspan
