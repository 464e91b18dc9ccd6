// The one table of GRIDSPAN_* settings. It drives the environment's parsing
// (Config::with_env), the copy of a session's settings sent to the other ranks, `gridspan
// info`, and the README's table of settings (`gridspan settings` prints it; a test compares
// the two). Flags take 1/on/yes/true and 0/off/no/false in any case; a flag or log level
// that is neither keeps its default and warns once; any other bad value is a ConfigError.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "gridspan/core/config.hpp"

namespace gridspan::settings {

enum class Kind {
  text,     // any text (a path, a program)
  flag,     // on or off
  size,     // bytes: 4096, 64KiB, 2GiB
  count,    // a whole number in [lo, hi]
  seconds,  // a positive number of seconds
  choice,   // one of `choices` (any case)
  level,    // error, warn, info, debug
  tooling,  // read by gridspan's own tests and tools, not a setting of a run
};

using Field =
    std::variant<std::monostate, std::string Config::*, bool Config::*, std::size_t Config::*,
                 int Config::*, double Config::*, LogLevel Config::*>;

struct Setting {
  const char* name;  // the environment variable
  Kind kind;
  Field field;                    // where it goes in Config (none for tooling)
  const char* summary;            // what it does, for the README and `gridspan info`
  const char* by_default;         // the default in words
  long lo = 0, hi = 0;            // counts: the range
  const char* choices = nullptr;  // choices: "auto, cuda, cpu"
};

/// Every setting, in the README's order.
const std::vector<Setting>& all();
/// The setting named `name` (GRIDSPAN_...), or null.
const Setting* find(const std::string& name);

/// Sets `setting`'s field of `config` from `value` by the policy above.
void apply(const Setting& setting, const std::string& value, Config& config);
/// The field's value as one would write it in the environment ("on", "536870912", "auto").
std::string show(const Setting& setting, const Config& config);
/// Warns once for each GRIDSPAN_* variable of `environ` that is no setting, naming the
/// nearest one.
void check_unknown(char** environ);
/// The README's table of settings, in Markdown.
std::string markdown_table();

}  // namespace gridspan::settings
