// main() of every test binary made by dflash_add_test (in place of GTest::gtest_main): the run's
// exit code says "skipped, nothing failed" apart from "passed" and "failed" (gtest_exit_code.hpp).
#include <gtest/gtest.h>

#include "harness/gtest_exit_code.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return dflash::testing_support::gtest_exit_code(RUN_ALL_TESTS());
}
