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

}  // namespace gridspan
