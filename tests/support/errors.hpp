// Bad input's errors: that `f` throws a gs::Error whose message holds `part`.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "gridspan/core/error.hpp"

namespace gridspan::test {

template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace gridspan::test
