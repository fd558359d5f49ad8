// Assertions shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "bitrank/error.hpp"

namespace bitrank::test {

// f() must throw bitrank::Error whose message contains `needle`.
template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace bitrank::test
