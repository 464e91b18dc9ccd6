// Config parsing: sizes, flags and the GRIDSPAN_* environment.
#include "gridspan/core/config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <unistd.h>

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/settings.hpp"
#include "gridspan/core/error.hpp"

namespace gridspan {

namespace {

// Bytes per unit (b, k/kb/kib, m..., g..., t...), or 0 for what is no unit.
double unit_scale(std::string unit) {
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  if (unit.empty() || unit == "b") return 1;
  const std::string prefixes = "kmgt";
  const std::size_t power = prefixes.find(unit[0]);
  const std::string rest = unit.substr(1);
  if (power == std::string::npos || (!rest.empty() && rest != "b" && rest != "ib")) return 0;
  return std::ldexp(1.0, 10 * static_cast<int>(power + 1));
}

}  // namespace

std::size_t parse_size(const std::string& text, const std::string& what) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  std::size_t pos = 0;
  while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.'))
    ++pos;
  const std::string number = t.substr(0, pos);
  const double scale = unit_scale(t.substr(pos));
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || value < 0 || (end && *end) || std::isnan(value))
    throw ConfigError(fmt::format(
        "{}: '{}' is not a size; write a number of bytes with an optional unit, such as "
        "4096, 64KiB, 512MiB or 2GiB",
        what, text));
  // Whole numbers exactly (every 64-bit value), fractions through a double.
  unsigned __int128 bytes = 0;
  if (number.find('.') == std::string::npos) {
    for (char d : number)
      if ((bytes = bytes * 10 + static_cast<unsigned>(d - '0')) >> 64) break;
    bytes *= static_cast<unsigned __int128>(scale);
  } else if (value * scale < 0x1p64) {
    bytes = static_cast<unsigned __int128>(value * scale);
  } else {
    bytes = static_cast<unsigned __int128>(1) << 64;
  }
  if (bytes >> 64)
    throw ConfigError(fmt::format(
        "{}: '{}' is more bytes than 64 bits hold (at most 18446744073709551615, 16 EiB)", what,
        text));
  return static_cast<std::size_t>(bytes);
}

std::optional<bool> parse_flag(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), ::tolower);
  if (t == "1" || t == "on" || t == "yes" || t == "true") return true;
  if (t == "0" || t == "off" || t == "no" || t == "false") return false;
  return std::nullopt;
}

Config Config::from_env() {
  return Config{}.with_env();
}

Config Config::with_env() const {
  Config c = *this;
  auto value = [](const settings::Setting& s) -> const char* {
    const char* v = std::getenv(s.name);
    return v && *v ? v : nullptr;
  };
  // The log level first, so that what the others warn of is said at it.
  const settings::Setting& level = *settings::find("GRIDSPAN_LOG");
  if (const char* v = value(level)) settings::apply(level, v, c);
  logging::set_level(c.log_level);
  for (const settings::Setting& s : settings::all())
    if (const char* v = value(s); v && &s != &level) settings::apply(s, v, c);
  settings::check_unknown(environ);
  return c;
}

}  // namespace gridspan
