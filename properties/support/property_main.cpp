// main() of every property-test binary. RapidCheck reads RC_PARAMS at its first property; when the
// caller has not set it, CI's fixed, bounded configuration applies (DFLASH_RC_PARAMS). RapidCheck
// prints the seed of every failing case, and `RC_PARAMS="seed=<n>"` replays it.
#include <cstdlib>
#include <iostream>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) setenv("RC_PARAMS", DFLASH_RC_PARAMS, 1);
  std::cout << "RC_PARAMS=\"" << std::getenv("RC_PARAMS") << "\" (set RC_PARAMS to override; a failure prints "
            << "the seed that reproduces it)\n";
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
