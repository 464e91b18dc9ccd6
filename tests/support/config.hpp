// A configuration with a random value in every setting (tests of the table of settings and
// of its copy between ranks: no field left at its default).
#pragma once

#include <random>
#include <string>

#include "core/settings.hpp"

namespace gridspan::test {

inline Config random_config(std::mt19937_64& g) {
  Config c;
  for (const settings::Setting& s : settings::all()) {
    switch (s.kind) {
      case settings::Kind::flag:
        settings::apply(s, g() % 2 ? "on" : "off", c);
        break;
      case settings::Kind::size:
        settings::apply(s, std::to_string(g() % (std::size_t(1) << 40) + 1), c);
        break;
      case settings::Kind::count:
        settings::apply(s, std::to_string(s.lo + static_cast<long>(g() % (s.hi - s.lo + 1))), c);
        break;
      case settings::Kind::seconds:
        settings::apply(s, std::to_string(static_cast<double>(g() % 1000 + 1) / 8), c);
        break;
      case settings::Kind::text:
        settings::apply(s, "/some/path" + std::to_string(g() % 1000), c);
        break;
      case settings::Kind::choice:
        settings::apply(s, g() % 2 ? "cpu" : "auto", c);
        break;
      case settings::Kind::level:
        settings::apply(s, g() % 2 ? "error" : "info", c);
        break;
      case settings::Kind::tooling:
        break;
    }
  }
  return c;
}

}  // namespace gridspan::test
