#!/usr/bin/env bash
# Runs the skip fixtures' own CTest directory (tests/support/CMakeLists.txt writes it, with the
# SKIP_RETURN_CODE of dflash_add_test) and checks what CTest reports for each case: a binary with a
# skipped and a failing test must be Failed, one whose tests all skipped Skipped, one that skipped
# and passed Skipped, one that only passed Passed.
#   check_skip_reporting.sh CTEST FIXTURE_TEST_DIR
set -uo pipefail
ctest=$1
dir=$2
log=$("$ctest" --test-dir "$dir" --no-tests=error 2>&1)
echo "$log"

status=0
expect() {  # expect CASE RESULT
  if ! grep -Eq "Test +#[0-9]+: $1 \.+ *(\*\*\*)?$2( |$)" <<<"$log"; then
    echo "check_skip_reporting: expected CTest to report '$1' as $2" >&2
    status=1
  fi
}
expect skip_and_fail Failed
expect all_skipped Skipped
expect skip_and_pass Skipped
expect pass_only Passed
exit $status
