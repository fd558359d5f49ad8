// Test runner: registers the op-parity cases on every available backend,
// then runs everything.
#include <gtest/gtest.h>

#include "support/parity.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bitrank::test::register_parity_tests();
  return RUN_ALL_TESTS();
}
