#!/usr/bin/env bash
# A rank that fails ends every rank of the job within seconds, naming why (TRAINING §13 faults).
# usage: expect_rank_failure.sh MPIRUN PROBE RANKS FAILING_RANK [MODE]
#   throw (default)  the failing rank throws: the message names it;
#   stall            it stops without failing: the others give up after DFLASH_MPI_TIMEOUT_S (2 s
#                    here) and the message names a waiting rank, the collective and the variable;
#   bad-limit        the failing rank alone reads DFLASH_MPI_TIMEOUT_S=2s: it refuses it by name
#                    before MPI starts, and the job ends instead of waiting for it.
set -uo pipefail
mpirun=$1 probe=$2 ranks=$3 failing=$4 mode=${5:-throw}
limit=20  # seconds: the job must end well before this; a hang is killed here and fails the test
case $mode in
  throw) export DFLASH_MPI_TIMEOUT_S=0 ;;  # no limit: the guard alone must end the job
  stall) export DFLASH_MPI_TIMEOUT_S=2 ;;
  bad-limit) export DFLASH_MPI_TIMEOUT_S=0 ;;  # the others: no limit, so only the refusal ends the job
  *) echo "unknown mode $mode"; exit 2 ;;
esac
start=$(date +%s)
output=$(timeout "$limit" "$mpirun" --allow-run-as-root --oversubscribe -x DFLASH_MPI_TIMEOUT_S -np "$ranks" \
  "$probe" "$failing" "$mode" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit status $status after ${elapsed}s ($mode)"
if (( status == 0 )); then echo "FAIL: the job exited 0 although rank $failing failed"; exit 1; fi
if (( status == 124 || status == 137 )); then echo "FAIL: the job hung until the ${limit}s timeout"; exit 1; fi
case $mode in
  throw) want="dflash: rank $failing of $ranks failed: planted failure" ;;
  stall) want="dflash: rank [0-9]+ of $ranks failed: MPI_Allreduce not finished after 2 s \(DFLASH_MPI_TIMEOUT_S\)" ;;
  bad-limit) want="dflash: error: invalid DFLASH_MPI_TIMEOUT_S: '2s' is not a number of seconds" ;;
esac
if ! grep -Eq "$want" <<<"$output"; then echo "FAIL: no line matching: $want"; exit 1; fi
if grep -q "rank $failing of $ranks failed: MPI" <<<"$output"; then
  echo "FAIL: the stopped rank $failing is named as the one that gave up"; exit 1
fi
echo "PASS"
