// A test binary built like every other (dflash_test_main) whose tests skip, fail or pass on
// purpose. It is never run by the project's ctest: check_skip_reporting.sh runs it through its
// own CTest directory, one gtest filter per case, and checks what CTest reports for each.
#include <gtest/gtest.h>

TEST(SkipFixture, Skips) { GTEST_SKIP() << "skipped on purpose"; }

TEST(SkipFixture, Fails) { ADD_FAILURE() << "fails on purpose"; }

TEST(SkipFixture, Passes) { SUCCEED(); }
