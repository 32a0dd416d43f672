// main() of every property-test binary. RapidCheck reads RC_PARAMS at its first property; when the
// caller has not set it, CI's fixed, bounded configuration applies (DFLASH_RC_PARAMS, or the
// binary's own MAX_SUCCESS: dflash_add_property_test generates dflash_default_rc_params). RapidCheck
// prints the seed of every failing case, and `RC_PARAMS="seed=<n>"` replays it. The exit code is
// every test binary's (harness/gtest_exit_code.hpp): skipped only when nothing failed.
#include <cstdlib>
#include <iostream>

#include <gtest/gtest.h>

#include "harness/gtest_exit_code.hpp"

extern const char* const dflash_default_rc_params;

int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) setenv("RC_PARAMS", dflash_default_rc_params, 1);
  std::cout << "RC_PARAMS=\"" << std::getenv("RC_PARAMS") << "\" (set RC_PARAMS to override; a failure prints "
            << "the seed that reproduces it)\n";
  testing::InitGoogleTest(&argc, argv);
  return dflash::testing_support::gtest_exit_code(RUN_ALL_TESTS());
}
