// The exit code of every GoogleTest binary of the project, read by CTest. A binary in which at
// least one test skipped (GTEST_SKIP: no GPU, say) and none failed exits with
// DFLASH_SKIP_RETURN_CODE, which dflash_add_test registers as the test's SKIP_RETURN_CODE, so
// CTest reports it Skipped, never Passed. Any failure exits 1 and CTest reports Failed, whatever
// was skipped beside it. (A regex on the "[  SKIPPED ]" line, the old way, turned a binary with
// one skipped and one failing test into "Skipped".)
#pragma once

#include <gtest/gtest.h>

namespace dflash::testing_support {

// `run_all_tests_result` is what RUN_ALL_TESTS() returned.
inline int gtest_exit_code(int run_all_tests_result) {
  if (run_all_tests_result != 0) return run_all_tests_result;  // a failure, whatever else skipped
  return testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? DFLASH_SKIP_RETURN_CODE : 0;
}

}  // namespace dflash::testing_support
