#!/usr/bin/env bash
# A rank that throws ends every rank of the job within seconds, naming itself (TRAINING §13 faults).
# usage: expect_rank_failure.sh MPIRUN PROBE RANKS FAILING_RANK
set -uo pipefail
mpirun=$1 probe=$2 ranks=$3 failing=$4
limit=20  # seconds: the job must end well before this; a hang is killed here and fails the test
start=$(date +%s)
output=$(timeout "$limit" "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$probe" "$failing" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit status $status after ${elapsed}s"
if (( status == 0 )); then echo "FAIL: the job exited 0 although rank $failing failed"; exit 1; fi
if (( status == 124 || status == 137 )); then echo "FAIL: the job hung until the ${limit}s timeout"; exit 1; fi
if ! grep -q "dflash: rank $failing of $ranks failed: planted failure" <<<"$output"; then
  echo "FAIL: no message naming rank $failing"; exit 1
fi
echo "PASS"
