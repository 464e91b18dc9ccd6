// Descriptions of device memory lent to another process of the node (Device::lend): a
// plain struct whose first member is a 4-byte `magic`, sent as its bytes (both processes
// are one build on one node).
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gridspan/core/error.hpp"
#include "gridspan/core/geometry.hpp"

namespace gridspan::backend {

template <class T>
std::vector<unsigned char> pack_lent(const T& description) {
  std::vector<unsigned char> out(sizeof description);
  std::memcpy(out.data(), &description, sizeof description);
  return out;
}

/// Reads `bytes` into `out` (default-constructed: its magic says which kind it wants);
/// false when they are not such a description (another backend's).
template <class T>
bool unpack_lent(const std::vector<unsigned char>& bytes, T& out) {
  if (bytes.size() != sizeof out || std::memcmp(bytes.data(), out.magic, sizeof out.magic) != 0)
    return false;
  std::memcpy(&out, bytes.data(), sizeof out);
  return true;
}

/// The box a copy reads must lie within the `bytes` lent.
inline void check_lent_box(const std::string& device, const Rect& box, std::size_t elem_size,
                           uint64_t bytes) {
  if (std::size_t(box.volume()) * elem_size > bytes)
    throw NetError(
        fmt::format("{}: a box of {} elements of {} bytes is more than the {} bytes "
                    "lent",
                    device, box.volume(), elem_size, bytes));
}

}  // namespace gridspan::backend
