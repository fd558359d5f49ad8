// Assertions shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
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

// f() must throw bitrank::Error whose message contains every piece (the
// file, the tensor or key, the reason).
template <class F>
void expect_error_with(F&& f, std::initializer_list<std::string> pieces) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning: " << *pieces.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : pieces) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace bitrank::test
