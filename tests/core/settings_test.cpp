// The table of settings: the README's copy, parsing by the one flag policy, sizes up to 64
// bits, warnings said once, unknown GRIDSPAN_* variables named with the nearest setting.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/settings.hpp"
#include "gridspan/core/error.hpp"
#include "support/config.hpp"
#include "support/random.hpp"

namespace gridspan {
namespace {

struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~Env() { unsetenv(name.c_str()); }
};

// The README's settings table is the one `gridspan settings` prints from the table.
TEST(Settings, TheReadmeHasTheTable) {
  std::ifstream in(GRIDSPAN_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "cannot read README.md";
  std::stringstream readme;
  readme << in.rdbuf();
  EXPECT_NE(readme.str().find(settings::markdown_table()), std::string::npos)
      << "README.md's table of settings differs from the table in src/core/settings.cpp; put "
         "`gridspan settings`'s output in its place:\n"
      << settings::markdown_table();
}

// Every setting of a run writes a field of its own, and what show() writes, apply() reads
// back to the same value (random values, so that no field is left at its default).
TEST(Settings, EverySettingReadsBackWhatItShows) {
  auto g = test::rng(71);
  std::set<std::string> names;
  for (const settings::Setting& s : settings::all()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " is in the table twice";
    EXPECT_EQ(std::string(s.name).rfind("GRIDSPAN_", 0), 0u) << s.name;
  }
  const Config want = test::random_config(g);
  Config back;
  for (const settings::Setting& s : settings::all()) {
    if (s.kind == settings::Kind::tooling) continue;
    settings::apply(s, settings::show(s, want), back);
    EXPECT_EQ(settings::show(s, back), settings::show(s, want)) << s.name;
  }
  EXPECT_EQ(back.device_memory, want.device_memory);
  EXPECT_EQ(back.net_timeout, want.net_timeout);
  EXPECT_EQ(back.cpu_threads, want.cpu_threads);
  EXPECT_EQ(back.spill_dir, want.spill_dir);
}

TEST(Settings, SizesUpTo64Bits) {
  EXPECT_EQ(parse_size("18446744073709551615", "x"), std::size_t(18446744073709551615ull));
  EXPECT_EQ(parse_size("4096", "x"), 4096u);
  EXPECT_EQ(parse_size("64KiB", "x"), 64u << 10);
  EXPECT_EQ(parse_size("1.5GB", "x"), std::size_t(3) << 29);
  EXPECT_EQ(parse_size("16777215TiB", "x"), std::size_t(16777215) << 40);
  for (const char* big : {"10000000000000000000000", "18446744073709551616", "16777216TiB",
                          "20000000000000000000.5"}) {
    try {
      parse_size(big, "GRIDSPAN_DEVICE_MEMORY");
      ADD_FAILURE() << big << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("more bytes than 64 bits hold"), std::string::npos)
          << e.what();
    }
  }
  Env a("GRIDSPAN_HOST_MEMORY", "18446744073709551616");
  EXPECT_THROW(Config::from_env(), ConfigError);
}

// One flag policy: anything that is not a flag keeps the default and warns, once.
TEST(Settings, ABadFlagKeepsTheDefaultAndWarnsOnce) {
  for (const char* name : {"GRIDSPAN_MPI", "GRIDSPAN_CPU_ASYNC", "GRIDSPAN_LEND_MEMORY",
                           "GRIDSPAN_STREAM_ORDER", "GRIDSPAN_MEMOIZE", "GRIDSPAN_CHECK"}) {
    Env a(name, "sometimes");
    testing::internal::CaptureStderr();
    const Config first = Config::from_env();
    const Config second = Config::from_env();
    const std::string err = testing::internal::GetCapturedStderr();
    const settings::Setting& s = *settings::find(name);
    EXPECT_EQ(settings::show(s, first), settings::show(s, Config{})) << name;
    EXPECT_EQ(settings::show(s, second), settings::show(s, Config{})) << name;
    const std::string line = std::string(name) + "='sometimes' is not a flag";
    const auto at = err.find(line);
    EXPECT_NE(at, std::string::npos) << err;
    EXPECT_EQ(err.find(line, at + 1), std::string::npos) << "said twice:\n" << err;
  }
  Env on("GRIDSPAN_CPU_ASYNC", "TRUE");
  EXPECT_TRUE(Config::from_env().cpu_async);
}

TEST(Settings, AnUnknownVariableNamesTheNearestSetting) {
  Env a("GRIDSPAN_DEVICE_MEMROY", "1GiB");
  testing::internal::CaptureStderr();
  Config::from_env();
  Config::from_env();
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string line =
      "GRIDSPAN_DEVICE_MEMROY is not a gridspan setting, so it changes nothing; did you mean "
      "GRIDSPAN_DEVICE_MEMORY?";
  const auto at = err.find(line);
  EXPECT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(line, at + 1), std::string::npos) << "said twice:\n" << err;
  // Nothing near: no guess.
  Env b("GRIDSPAN_WIBBLE", "1");
  testing::internal::CaptureStderr();
  Config::from_env();
  const std::string far = testing::internal::GetCapturedStderr();
  EXPECT_NE(far.find("GRIDSPAN_WIBBLE is not a gridspan setting, so it changes nothing; "
                     "`gridspan settings` lists them"),
            std::string::npos)
      << far;
}

TEST(Settings, BadValuesOfOtherKindsAreErrors) {
  for (auto [name, bad] :
       {std::pair{"GRIDSPAN_CPU_DEVICES", "lots"}, std::pair{"GRIDSPAN_GPUS", "-2"},
        std::pair{"GRIDSPAN_BACKEND", "gpu"}, std::pair{"GRIDSPAN_NET_TIMEOUT", "5s"},
        std::pair{"GRIDSPAN_LEND_MIN", "a little"}}) {
    Env a(name, bad);
    try {
      Config::from_env();
      ADD_FAILURE() << name << "='" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gridspan
