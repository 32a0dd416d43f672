#!/usr/bin/env bash
# ci/gpu run on a carry of stubs (no GPU needed). Its test list (tests.tsv, as prepare writes it
# from ctest's JSON) names six tests; two are shell stubs that "pass", one is an ELF stub that
# needs a library nowhere to be found, one an ELF stub that takes a library from this machine
# rather than the carry, two are missing; dflash's verify exits 0 while reporting a SKIPPED row.
# A binary beside them needs a symbol version its carried library lacks (an older glibc, say);
# its copy relaxed by ci/elf-relax-version starts and passes.
# Run 1 (DFLASH_REQUIRE_GPU=1): ci/gpu must exit 1 and name each reason: the unresolved and the
# outside library, the missing binaries, the SKIPPED verify row, the missing benchmarks; a
# compute-sanitizer that cannot attach is NOT AVAILABLE, one that finds errors a failure.
# Run 2: the same carry with both libraries in its lib/ and a 100 s budget: the closure passes and
# a check whose estimate does not fit is "NOT RUN: no time left", in results.md too.
# Runs 3 to 11 each on a carry of their own: a check's own time limit, a timeout that needs
# SIGKILL, skip expressions, failing exits under "0 errors", --stage, the budget's reserve, a
# library in lib/ (3, 4); the benchmark summaries' verdicts and the exit code of a run with nothing
# failed but checks not available, and a carry built from this tree or another (5, 6); the
# budget's cut and the machine's library path (7); --stage multi on 2 GPUs and on 1 (8 to 11).
# Then `ci/gpu train-cuda` on a dflash stub, and ci/gpu_plan.py's arithmetic.
#   ci_gpu_honesty.sh ROOT
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# ci/gpu unpacks into $TMPDIR/dflash-gpu: this test's own, not one another run may be using; and no
# run may import torch (the PyTorch peers and the export check would run, or not, by machine)
export TMPDIR=$work
mkdir -p "$work/notorch"
echo 'raise ImportError("torch is not installed on this runtime (ci_gpu_honesty)")' > "$work/notorch/torch.py"
export PYTHONPATH=$work/notorch
u=$work/carry/root
mkdir -p "$u/bin" "$u/lib" "$work/build"
for name in test_loss_head_gpu test_cuda_golden_gpu; do
  cat > "$u/bin/$name" << 'STUB'
#!/usr/bin/env bash
[ "${1:-}" = "--gtest_list_tests" ] && exit 0
echo "[  PASSED  ] 1 test."
STUB
done
cat > "$u/bin/dflash" << 'STUB'
#!/usr/bin/env bash
if [ "$1" = verify ]; then
  echo "cuda  T37  chunk_recompute/c5  -  2.0e+00  0  SKIPPED  no GPU"
  echo "1 rows: 0 PASS, 0 FAIL, 1 SKIPPED"
fi
exit 0
STUB
printf '#!/usr/bin/env bash\nexit 0\n' > "$u/bin/mpirun"
# ELF stubs: one needs libdflash_gone.so (built, linked against, then removed), one libz.so.1 from
# this machine's /lib.
cat > "$work/build/gone.c" << 'C'
int dflash_gone(void) { return 0; }
C
cat > "$work/build/stub.c" << 'C'
#include <stdio.h>
int LIBRARY_CALL(void);
int main(void) { puts("[  PASSED  ] 1 test."); return LIBRARY_CALL() * 0; }
C
# A third, versioned_stub (not a test), needs version DFLASH_2 of libdflash_versioned.so, and the
# carry's copy of that library has only DFLASH_1: as a machine's glibc older than the build's.
cat > "$work/build/versioned.c" << 'C'
int dflash_old(void) { return 0; }
int dflash_new(void) { return 0; }
C
printf 'DFLASH_1 { global: dflash_old; local: *; };\nDFLASH_2 { global: dflash_new; } DFLASH_1;\n' > "$work/build/v2.map"
printf 'DFLASH_1 { global: dflash_old; dflash_new; local: *; };\n' > "$work/build/v1.map"
mkdir -p "$work/build/v2"
cc -shared -fPIC -Wl,--version-script="$work/build/v2.map" -Wl,-soname,libdflash_versioned.so \
   -o "$work/build/v2/libdflash_versioned.so" "$work/build/versioned.c" &&
  printf '#include <stdio.h>\nint dflash_old(void);\nint dflash_new(void);\nint main(void) { puts("[  PASSED  ] 1 test."); return dflash_old() + dflash_new(); }\n' > "$work/build/versioned_stub.c" &&
  cc -o "$u/bin/versioned_stub" "$work/build/versioned_stub.c" -L"$work/build/v2" -ldflash_versioned &&
  cc -shared -fPIC -Wl,--version-script="$work/build/v1.map" -Wl,-soname,libdflash_versioned.so \
   -o "$u/lib/libdflash_versioned.so" "$work/build/versioned.c" &&
  cp "$u/bin/versioned_stub" "$u/bin/relaxed_stub" ||
  { echo "ci_gpu_honesty: cannot build the versioned stub"; exit 1; }
# relaxed_stub is the same file after ci/elf-relax-version (what ci/gpu prepare does to libevent's
# glibc 2.36 references): it starts with the older library and the closure check accepts it.
"$root/ci/elf-relax-version" "$u/bin/relaxed_stub" DFLASH_2 dflash_new ||
  { echo "ci_gpu_honesty: ci/elf-relax-version failed"; exit 1; }
LD_LIBRARY_PATH=$u/lib "$u/bin/relaxed_stub" > /dev/null ||
  { echo "ci_gpu_honesty: the relaxed stub does not start with the older library"; exit 1; }
! LD_LIBRARY_PATH=$u/lib "$u/bin/versioned_stub" > /dev/null 2>&1 ||
  { echo "ci_gpu_honesty: the unrelaxed stub starts with the older library"; exit 1; }
# ci/arc4random.c, the carry's arc4random for a glibc older than 2.36, linked ahead of glibc so
# that the calls reach it: two 32-byte draws differ, and arc4random_uniform(10) stays below 10 and
# gives every value in 2000 draws.
cat > "$work/build/arc4random_check.c" << 'C'
#include <stdint.h>
#include <stdio.h>
#include <string.h>
void arc4random_buf(void*, size_t);
uint32_t arc4random_uniform(uint32_t);
int main(void) {
  unsigned char a[32], b[32];
  arc4random_buf(a, sizeof a);
  arc4random_buf(b, sizeof b);
  if (memcmp(a, b, sizeof a) == 0) return puts("two draws are equal"), 1;
  int seen[10] = {0};
  for (int i = 0; i < 2000; ++i) {
    const uint32_t r = arc4random_uniform(10);
    if (r >= 10) return printf("arc4random_uniform(10) gave %u\n", r), 1;
    seen[r] = 1;
  }
  for (int v = 0; v < 10; ++v)
    if (!seen[v]) return printf("arc4random_uniform(10) never gave %d\n", v), 1;
  return arc4random_uniform(1) != 0;
}
C
cc -shared -fPIC -Wl,-soname,libdflash_arc4random.so -o "$work/build/libdflash_arc4random.so" "$root/ci/arc4random.c" &&
  cc -o "$work/build/arc4random_check" "$work/build/arc4random_check.c" -L"$work/build" -ldflash_arc4random &&
  LD_LIBRARY_PATH=$work/build "$work/build/arc4random_check" ||
  { echo "ci_gpu_honesty: ci/arc4random.c fails its check"; exit 1; }
[ "$(LD_LIBRARY_PATH=$work/build LD_DEBUG=bindings "$work/build/arc4random_check" 2>&1 |
     grep -c "binding file .*arc4random_check.* to .*libdflash_arc4random.so")" -ge 2 ] ||
  { echo "ci_gpu_honesty: the check's calls did not reach ci/arc4random.c"; exit 1; }
zlib=$(ldconfig -p | awk '/libz.so.1 /{print $NF; exit}')
cc -shared -fPIC -o "$work/build/libdflash_gone.so" "$work/build/gone.c" &&
  cc -DLIBRARY_CALL=dflash_gone -o "$u/bin/test_trunk_gpu" "$work/build/stub.c" -L"$work/build" -ldflash_gone &&
  cc -DLIBRARY_CALL=zlibVersion -o "$u/bin/test_attention_gpu" "$work/build/stub.c" "$zlib" ||
  { echo "ci_gpu_honesty: cannot build the ELF stubs"; exit 1; }
for name in test_loss_head_gpu test_cuda_golden_gpu test_trunk_gpu test_attention_gpu test_cuda_memory_plan_gpu \
            test_cuda_training_golden_gpu; do
  printf '%s\t60\t77\t-\t1\t@bin@/%s\n' "$name" "$name"
done > "$u/tests.tsv"
chmod +x "$u/bin"/*
# compute-sanitizer as three runtimes answer: memcheck cannot attach (error 999), racecheck finds
# hazards (racecheck prints no ERROR SUMMARY, only its own), synccheck finds none
mkdir -p "$work/tools"
cat > "$work/tools/compute-sanitizer" << 'STUB'
#!/usr/bin/env bash
case $2 in
  memcheck) echo "========= Error: Device not supported (error 999)"; exit 1 ;;
  racecheck) echo "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"; exit 99 ;;
  synccheck) echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
esac
STUB
chmod +x "$work/tools/compute-sanitizer"

failed=0
expect() {
  if ! grep -qF -- "$2" "$work/log$1"; then
    echo "ci_gpu_honesty: run $1's log does not say: $2"
    failed=1
  fi
}
# gpu_run N EXIT CARRY [VAR=value ...] [-- ARGS ...]: `ci/gpu run ARGS` on the carry folder CARRY with
# those variables, its log $work/logN and its OUT $work/outN; it must exit EXIT (-: not checked).
gpu_run() {
  local n=$1 want=$2 carry=$3 vars=() rc
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env DFLASH_GPU_CARRY="$carry" OUT="$work/out$n" "${vars[@]}" "$root/ci/gpu" run "$@" > "$work/log$n" 2>&1
  rc=$?
  [ "$want" = - ] || [ "$rc" -eq "$want" ] || { echo "ci_gpu_honesty: run $n: ci/gpu exited $rc, not $want"; failed=1; }
}
gpu_run 1 1 "$work/carry" PATH="$work/tools:$PATH" DFLASH_REQUIRE_GPU=1 DFLASH_BENCH_SHAPE="--rows 8"
# each reason in the closing list of what failed (what the exit code is made of)
expect 1 "FAILED: library closure:"
expect 1 "test_trunk_gpu needs libdflash_gone.so: not found"
expect 1 "test_attention_gpu takes libz.so.1 from $zlib, outside the carry"
expect 1 "versioned_stub needs version DFLASH_2 of libdflash_versioned.so, which the libdflash_versioned.so it loads lacks"
expect 1 "FAILED: test_cuda_memory_plan_gpu: not in the carry"
expect 1 "FAILED: test_cuda_training_golden_gpu: not in the carry"
expect 1 "FAILED: test_trunk_gpu: exit 127"
expect 1 "FAILED: bench_cuda_loss_head: not in the carry"
expect 1 "FAILED: bench_cuda_drafter_step: not in the carry"
expect 1 "FAILED: dflash verify --device cuda: rows SKIPPED under DFLASH_REQUIRE_GPU=1"
expect 1 "FAILED: dflash train --backend cuda (mid, 10 steps) + export: train-cuda: dflash train exited 0 but wrote no metrics.jsonl"
expect 1 "ci/gpu: [sanitizers] compute-sanitizer --tool memcheck: NOT AVAILABLE (on this runtime"
expect 1 "FAILED: compute-sanitizer --tool racecheck: exit 99"
expect 1 "ci/gpu: [sanitizers] compute-sanitizer --tool synccheck: PASS"
expect 1 "ci/gpu: FAIL"
if grep -q "relaxed_stub" "$work/log1"; then
  echo "ci_gpu_honesty: run 1's closure check names the relaxed stub:"; grep "relaxed_stub" "$work/log1"; failed=1
fi
tail -1 "$work/log1" | grep -q "^ci/gpu: FAIL" || { echo "ci_gpu_honesty: run 1: the verdict is not the last line"; failed=1; }

# run 2: a drafter-step benchmark that counts nothing is planned at 240 s, more than a 100 s budget.
# dflash is an ELF that needs a library of the carry's lib/: a PyTorch check, which runs under the
# machine's own library path, starts it only through ci/gpu's wrapper (the load check asks).
cp "$work/build/libdflash_gone.so" "$zlib" "$work/build/v2/libdflash_versioned.so" "$u/lib/"
cc -DLIBRARY_CALL=dflash_gone -o "$u/bin/dflash" "$work/build/stub.c" -L"$work/build" -ldflash_gone ||
  { echo "ci_gpu_honesty: cannot build the dflash stub"; exit 1; }
printf '#!/usr/bin/env bash\nexit 0\n' > "$u/bin/bench_cuda_drafter_step"
chmod +x "$u/bin/bench_cuda_drafter_step"
gpu_run 2 - "$work/carry" DFLASH_REQUIRE_GPU=1 DFLASH_GPU_BUDGET_S=100 DFLASH_BENCH_SHAPE="--rows 8"
expect 2 "s of a 100 s budget"
expect 2 "ci/gpu: [load] library closure: PASS"
expect 2 "ci/gpu: [load] binaries start: PASS"
expect 2 "ci/gpu: [bench] bench_cuda_drafter_step: NOT RUN (no time left"
grep -q "| bench | bench_cuda_drafter_step | NOT RUN |" "$work/out2/results.md" 2> /dev/null ||
  { echo "ci_gpu_honesty: run 2: results.md does not list the check that did not run"; failed=1; }
# The plan's rates: the measured cards by their exact names; a near name (another card) and no name
# at the slower rates, so that a plan errs long.
python3 - "$root/ci" << 'PY' || { echo "ci_gpu_honesty: ci/gpu_plan.py picks the wrong card's rates"; failed=1; }
import sys
sys.path.insert(0, sys.argv[1])
from gpu_plan import card_of
cases = {"NVIDIA H200, 580.159.03, 143771 MiB": "H200", "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB": "H100",
         "NVIDIA H100 PCIe, 580.159.04, 81559 MiB": None, "NVIDIA GH200 480GB, 580.159.04, 97871 MiB": None,
         "no nvidia-smi": None, "": None, None: None}
wrong = {name: card_of(name) for name, card in cases.items() if card_of(name) != card}
print(f"card_of: {wrong}" if wrong else "card_of: as expected")
sys.exit(1 if wrong else 0)
PY

# A carry of stubs at $1 (bin/, lib/, tests.tsv): every stub answers --help and --gtest_list_tests
# at once, mpirun starts; tests.tsv gets the lines on stdin.
new_carry() {
  mkdir -p "$1/root/bin" "$1/root/lib"
  printf '#!/usr/bin/env bash\nexit 0\n' > "$1/root/bin/mpirun"
  chmod +x "$1/root/bin/mpirun"
  cat > "$1/root/tests.tsv"
}
stub() {  # carry name body: a shell stub that runs body unless asked to list or to help
  { echo '#!/usr/bin/env bash'
    echo 'case ${1:-} in --help|--gtest_list_tests) exit 0 ;; esac'
    echo "$3"; } > "$1/root/bin/$2"
  chmod +x "$1/root/bin/$2"
}
passing='echo "[  PASSED  ] 1 test."'

# run 3, --stage correctness without a GPU required: a test that ignores SIGTERM is killed at its
# own 2 s limit (exit 137) and is a timeout; one killed at once (exit 137, as the out-of-memory
# killer does) is not; a test whose output matches its skip expression is
# SKIPPED, not PASS; `dflash verify` exiting 1 and a sanitizer exiting 1 with "0 errors" (the test
# under it failed) are failures; a sanitizer that outlasts its 2 s limit on a test that passed alone
# is NOT RUN (the tool's slowdown), not a failure; no benchmark runs.
c3=$work/carry3
printf 'hang_gpu\t2\t77\t-\t1\t@bin@/hang_gpu\nkilled_gpu\t60\t77\t-\t1\t@bin@/killed_gpu\nskip_gpu\t60\t77\tSKIPPED\t1\t@bin@/skip_gpu\ntest_loss_head_gpu\t60\t77\t-\t1\t@bin@/test_loss_head_gpu\n' |
  new_carry "$c3"
stub "$c3" hang_gpu "trap '' TERM; sleep 30"
stub "$c3" killed_gpu 'kill -9 $$'
stub "$c3" skip_gpu 'echo "no usable GPU: SKIPPED"'
stub "$c3" test_loss_head_gpu "$passing"
stub "$c3" dflash '[ "$1" = verify ] && { echo "cuda  T1  x  -  2.0e+00  1e-2  FAIL"; echo "1 rows: 0 PASS, 1 FAIL, 0 SKIPPED"; exit 1; }; exit 0'
mkdir -p "$work/tools3"
cat > "$work/tools3/compute-sanitizer" << 'STUB'
#!/usr/bin/env bash
[ "$2" = synccheck ] && exec sleep 30
if [ "$2" = racecheck ]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else echo "========= ERROR SUMMARY: 0 errors"; fi
[ "$2" = memcheck ] && exit 1
exit 0
STUB
chmod +x "$work/tools3/compute-sanitizer"
gpu_run 3 1 "$c3" PATH="$work/tools3:$PATH" DFLASH_REQUIRE_GPU=0 DFLASH_GPU_SANITIZER_CAP_S=2 -- --stage correctness
one_case=$(python3 -c 'import math, sys; sys.path.insert(0, sys.argv[1]); import gpu_plan as g
print(math.ceil((g.PROCESS_START_S + g.CASE_S) * g.SLACK))' "$root/ci")
expect 3 "== [correctness] hang_gpu (estimate $one_case s, limit 2 s"
expect 3 "FAILED: hang_gpu: timed out after 2 s (estimate"
expect 3 "FAILED: killed_gpu: exit 137 after "
expect 3 "before its 60 s limit (killed, or a timeout inside it)"
expect 3 "ci/gpu: [correctness] skip_gpu: SKIPPED"
expect 3 "ci/gpu: [correctness] test_loss_head_gpu: PASS"
expect 3 "FAILED: dflash verify --device cuda: exit 1"
expect 3 "FAILED: compute-sanitizer --tool memcheck: exit 1"
expect 3 "ci/gpu: [sanitizers] compute-sanitizer --tool racecheck: PASS"
expect 3 "ci/gpu: [sanitizers] compute-sanitizer --tool synccheck: NOT RUN (not finished within 2 s under the tool; test_loss_head_gpu passed on its own)"
if grep -q "\[bench\]" "$work/log3"; then echo "ci_gpu_honesty: run 3 (--stage correctness) ran a benchmark"; failed=1; fi

# run 4, a 60 s budget: a test that takes 14 s leaves at most 60 - 14 - the 10 s reserve for the
# summary = 36 s, under the next test's 40 s estimate: it is NOT RUN (the reserve forgotten, it
# would fit while the load stage takes under 6 s). No dflash in the carry, and a library in lib/
# that needs one nowhere to be found. The cases that make 40 s come from ci/gpu_plan.py's costs.
late_cases=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import gpu_plan as g
print(round((40 / g.SLACK - g.PROCESS_START_S) / g.CASE_S))' "$root/ci")
c4=$work/carry4
printf 'slow_gpu\t60\t77\t-\t1\t@bin@/slow_gpu\nlate_gpu\t60\t77\t-\t%s\t@bin@/late_gpu\n' "$late_cases" | new_carry "$c4"
stub "$c4" slow_gpu "sleep 14; $passing"
stub "$c4" late_gpu "$passing"
printf 'int dflash_gone(void);\nint dflash_needs_gone(void) { return dflash_gone(); }\n' > "$work/build/needs_gone.c"
cc -shared -fPIC -o "$c4/root/lib/libdflash_needs_gone.so" "$work/build/needs_gone.c" -L"$work/build" -ldflash_gone ||
  { echo "ci_gpu_honesty: cannot build the library stub"; exit 1; }
gpu_run 4 1 "$c4" DFLASH_REQUIRE_GPU=0 DFLASH_GPU_BUDGET_S=60 DFLASH_BENCH_SHAPE="--rows 8"
expect 4 "ci/gpu: [correctness] slow_gpu: PASS"
expect 4 "ci/gpu: [correctness] late_gpu: NOT RUN (no time left: estimate 40 s"
expect 4 "FAILED: dflash: not in the carry"
expect 4 "libdflash_needs_gone.so needs libdflash_gone.so: not found"

# run 7, a 30 s budget: a test whose estimate (about 8 s) fits the time left but that runs on is
# stopped by the budget within 3 times its estimate, before its own 600 s limit: NOT RUN, the run
# INCOMPLETE (exit 2), not a failure. (A check stopped past 3 times its estimate is a hang: run 3's.)
# And the carry's binaries keep the machine's own library path after the carry's (where a GPU
# machine may keep its driver), without the empty entry its trailing ':' would add (the current
# directory): driver_gpu passes only if it sees that path.
c7=$work/carry7
mkdir -p "$work/machine-lib"
printf 'driver_gpu\t60\t77\t-\t1\t@bin@/driver_gpu\nover_gpu\t600\t77\t-\t100\t@bin@/over_gpu\ntest_loss_head_gpu\t60\t77\t-\t1\t@bin@/test_loss_head_gpu\n' |
  new_carry "$c7"
stub "$c7" driver_gpu "case :\$LD_LIBRARY_PATH: in *::*) echo \"an empty entry in \$LD_LIBRARY_PATH\"; exit 1 ;;
  *:$work/machine-lib:*) $passing ;; *) echo \"not on \$LD_LIBRARY_PATH\"; exit 1 ;; esac"
stub "$c7" over_gpu "sleep 120; $passing"
stub "$c7" test_loss_head_gpu "$passing"
stub "$c7" dflash 'exit 0'
gpu_run 7 2 "$c7" DFLASH_REQUIRE_GPU=0 DFLASH_GPU_BUDGET_S=30 LD_LIBRARY_PATH="$work/machine-lib:" -- --stage correctness
expect 7 "ci/gpu: [correctness] driver_gpu: PASS"
expect 7 "ci/gpu: [correctness] over_gpu: NOT RUN (the budget ran out: stopped at the"
expect 7 "ci/gpu: INCOMPLETE"

# runs 8 and 9, --stage multi on a machine whose nvidia-smi lists 2 GPUs: the carried mpirun runs
# each rank count asked for, with the relocation and the container-safe copy exported (the stub
# refuses without them); the communicator test passes on 2 ranks; the step test that says
# "[  SKIPPED ]" and exits 0 (the MPI tests' main does) fails under DFLASH_REQUIRE_GPU=1; the
# training runs on 1 and 2 ranks compare within their tolerances (8), or not when the stub's losses
# drift with the ranks (9). Before them, on any machine, 2 ranks of the CPU backend under the
# carried mpirun (8). CUDA_VISIBLE_DEVICES "1,,0" shows CUDA one GPU (it reads up to the
# empty entry): every check NOT AVAILABLE, exit 77, nothing run (10). A carry without the
# communicator test, not even in its list, is a failure naming it, and a dflash that finds no GPU
# makes the training check SKIPPED without DFLASH_REQUIRE_GPU (11).
c8=$work/carry8
printf 'test_nccl_communicator_gpu\t100\t-\t\\[  SKIPPED \\]\t3\t@bin@/mpirun --allow-run-as-root --oversubscribe -np 1 @bin@/test_nccl_communicator_gpu\ntest_cuda_train_step_nccl_gpu\t100\t-\t\\[  SKIPPED \\]\t5\t@bin@/mpirun --allow-run-as-root --oversubscribe -np 1 @bin@/test_cuda_train_step_nccl_gpu\n' |
  new_carry "$c8"
cat > "$c8/root/bin/mpirun" << 'STUB'
#!/usr/bin/env bash
[ -n "${OPAL_PREFIX:-}" ] || { echo "mpirun stub: OPAL_PREFIX is not set"; exit 3; }
[ "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" = none ] || { echo "mpirun stub: single copy not off"; exit 3; }
while [ $# -gt 0 ] && [ "$1" != -np ]; do shift; done
export STUB_RANKS=$2
shift 2
exec "$@"
STUB
stub "$c8" test_nccl_communicator_gpu "[ \"\$STUB_RANKS\" = 2 ] || { echo \"\$STUB_RANKS ranks\"; exit 1; }; $passing"
stub "$c8" test_cuda_train_step_nccl_gpu 'echo "[  SKIPPED ] 1 test, listed below:"; exit 0'
stub "$c8" dflash 'if [ "$1" = train ]; then
  while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
  [ -n "${DFLASH_STUB_NOGPU:-}" ] && { echo "dflash: no GPU is available (stub)"; exit 1; }
  mkdir -p "$out"
  for s in 0 1 2 3 4 5; do echo "{\"step\": $s, \"loss\": $(( 30 - s )).${DFLASH_STUB_DRIFT:+$STUB_RANKS}0, \"grad_norm\": 2.5}"; done > "$out/metrics.jsonl"
fi
exit 0'
mkdir -p "$work/tools8"
printf '#!/usr/bin/env bash\n[ "$1" = -L ] && { echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"; }\nexit 0\n' \
  > "$work/tools8/nvidia-smi"
chmod +x "$work/tools8/nvidia-smi"
gpu_run 8 1 "$c8" PATH="$work/tools8:$PATH" DFLASH_REQUIRE_GPU=1 -- --stage multi
expect 8 "ci/gpu: [multi] 2 CPU ranks under the carried mpirun: PASS (train-ranks: 2 ranks, 6 steps, loss 30 -> 25)"
expect 8 "ci/gpu: [multi] test_nccl_communicator_gpu: PASS (3 cases on 2 ranks)"
expect 8 "FAILED: test_cuda_train_step_nccl_gpu: skipped under DFLASH_REQUIRE_GPU=1"
expect 8 "ci/gpu: [multi] dflash train on 1 rank and every GPU: PASS (2 ranks: train-multi: step 0 loss relative error 0"
if grep -qE "\[(correctness|sanitizers|bench)\]" "$work/log8"; then
  echo "ci_gpu_honesty: run 8 (--stage multi) ran a check of another stage"; failed=1
fi
gpu_run 9 1 "$c8" PATH="$work/tools8:$PATH" DFLASH_REQUIRE_GPU=1 DFLASH_STUB_DRIFT=1 -- --stage multi
expect 9 "FAILED: dflash train on 1 rank and every GPU: train-multi: outside a tolerance: step 0 loss relative error 0.00332 (tolerance 1e-12)"
gpu_run 10 77 "$c8" PATH="$work/tools8:$PATH" DFLASH_REQUIRE_GPU=1 CUDA_VISIBLE_DEVICES=1,,0 -- --stage multi
expect 10 "ci/gpu: [multi] test_nccl_communicator_gpu: NOT AVAILABLE (1 GPU(s) here; the multi-rank checks need at least 2)"
expect 10 "ci/gpu: [multi] dflash train on 1 rank and every GPU: NOT AVAILABLE"
expect 10 "ci/gpu: NOT A PASS"
c11=$work/carry11
cp -r "$c8" "$c11"
rm "$c11/root/bin/test_nccl_communicator_gpu"
sed -i '/^test_nccl_communicator_gpu	/d' "$c11/root/tests.tsv"
gpu_run 11 1 "$c11" PATH="$work/tools8:$PATH" DFLASH_REQUIRE_GPU=0 DFLASH_STUB_NOGPU=1 -- --stage multi
expect 11 "FAILED: test_nccl_communicator_gpu: not in the carry (nor in its test list)"
expect 11 "ci/gpu: [multi] dflash train on 1 rank and every GPU: SKIPPED (no GPU: no GPU is available"

# runs 5 and 6, --stage bench: the benchmarks' stubs write the results the summaries judge (the
# PyTorch peers' files too, since torch cannot be imported here: NOT AVAILABLE). Run 5: the loss
# head correct but a target missed (SLOW), the drafter step correct and on target (PASS): no
# failure, but checks not available, so exit 77 and not a pass. Run 6: the drafter step's loss
# beyond its bound against PyTorch (FAIL); the loss head writes its own result only, and the
# PyTorch result an earlier run left in OUT is not taken for this run's: with no peer result the
# comparison is what the peer was, NOT AVAILABLE.
mkdir -p "$work/json"
python3 - "$root/tests/bench" "$work/json" << 'PY' || { echo "ci_gpu_honesty: cannot write the benchmark results"; exit 1; }
import copy, json, os, sys
sys.path.insert(0, sys.argv[1])
import summarize_check as lh
import summarize_step_check as step
def write(name, data):
    json.dump(data, open(os.path.join(sys.argv[2], name), "w"))
slow = lh.cuda_results()
slow["runs"][0]["model_fraction_of_card_rate"] = 0.5
write("lh_cuda.json", slow)
write("lh_torch.json", lh.GOOD_TORCH)
write("step_cuda.json", step.GOOD_CUDA)
write("step_torch.json", step.GOOD_TORCH)
write("step_torch_far.json", dict(step.GOOD_TORCH, loss=20.2))
PY
bench_carry() {  # carry step_torch_file loss_head_writes (both: its JSON and the peer's; cuda: its own; none)
  printf 'test_loss_head_gpu\t60\t77\t-\t1\t@bin@/test_loss_head_gpu\n' | new_carry "$1"
  stub "$1" test_loss_head_gpu "$passing"
  stub "$1" dflash 'exit 0'
  cc -shared -fPIC -o "$1/root/bin/libdflash_bench_data.so" "$work/build/gone.c" ||
    { echo "ci_gpu_honesty: cannot build the library stub"; exit 1; }
  local json_of='json=; while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done'
  case $3 in
    both) stub "$1" bench_cuda_loss_head "$json_of; cp '$work/json/lh_cuda.json' \"\$json\"; cp '$work/json/lh_torch.json' \"\$OUT/bench_torch.json\"" ;;
    cuda) stub "$1" bench_cuda_loss_head "$json_of; cp '$work/json/lh_cuda.json' \"\$json\"" ;;
    *) stub "$1" bench_cuda_loss_head 'exit 0' ;;
  esac
  stub "$1" bench_cuda_drafter_step "case \" \$* \" in *' --count '*) exit 1 ;; esac; $json_of
cp '$work/json/step_cuda.json' \"\$json\"; cp '$work/json/$2' \"\$(dirname \"\$json\")/torch.json\""
}
bench_carry "$work/carry5" step_torch.json both
bench_carry "$work/carry6" step_torch_far.json cuda
mkdir -p "$work/out6" && cp "$work/json/lh_torch.json" "$work/out6/bench_torch.json"  # an earlier run's
# The carries' record of the tree they were built from (TREE.sha256, as prepare writes it): carry 5's
# is this tree but for a document and a script (read from the tree, not built); carry 6's differs in
# a header too, and lacks a source file the tree has (a file added since).
"$root/ci/gpu" tree-hashes > "$work/tree.sha256"
zero=0000000000000000000000000000000000000000000000000000000000000000
sed -E "s#^[0-9a-f]{64}  (README\.md|ci/gpu_plan\.py)\$#$zero  \1#" "$work/tree.sha256" > "$work/carry5/TREE.sha256"
sed -E -e "s#^[0-9a-f]{64}  (README\.md|cuda/drafter/gemms\.hpp)\$#$zero  \1#" -e '\#  cuda/drafter/step\.cpp$#d' \
  "$work/tree.sha256" > "$work/carry6/TREE.sha256"
gpu_run 5 77 "$work/carry5" DFLASH_REQUIRE_GPU=0 DFLASH_BENCH_SHAPE="--rows 8" -- --stage bench
gpu_run 6 1 "$work/carry6" DFLASH_REQUIRE_GPU=0 DFLASH_BENCH_SHAPE="--rows 8" -- --stage bench
expect 5 "ci/gpu: [bench] loss_head_torch.py: NOT AVAILABLE (python3 cannot import torch here)"
expect 5 "ci/gpu: [bench] loss head vs PyTorch: SLOW (summarize.py: correct, a performance target missed)"
expect 5 "ci/gpu: [bench] drafter step vs PyTorch: PASS"
expect 5 "ci/gpu: NOT A PASS"
grep -q "| bench | loss head vs PyTorch | SLOW |" "$work/out5/results.md" 2> /dev/null ||
  { echo "ci_gpu_honesty: run 5: results.md does not list the missed target"; failed=1; }
expect 6 "FAILED: drafter step vs PyTorch: summarize_step.py exit 1: correctness: FAIL"
expect 5 "ci/gpu: [load] carry built from this tree: PASS (no build input differs; read from this tree: README.md ci/gpu_plan.py"
expect 6 "FAILED: carry built from this tree: built from another tree, build inputs differ (run ci/gpu prepare again): cuda/drafter/gemms.hpp cuda/drafter/step.cpp (new)"
expect 1 "ci/gpu: [load] carry built from this tree: NOT AVAILABLE"
expect 6 "ci/gpu: [bench] loss head vs PyTorch: NOT AVAILABLE (no result from loss_head_torch.py to compare with)"

# ci/gpu train-cuda on a dflash stub whose run is what the check wants (ten falling losses, two
# held-out records at steps 4 and 9, an export): exit 0; held-out records at step 4 only, or an
# export that fails: exit 1, each named.
tc=$work/train-stub
mkdir -p "$tc"
cat > "$tc/dflash" << 'STUB'
#!/usr/bin/env bash
if [ "$1" = train ]; then
  while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
  mkdir -p "$out"
  for s in 0 1 2 3 4 5 6 7 8 9; do echo "{\"step\": $s, \"loss\": $(( 30 - s ))}"; done > "$out/metrics.jsonl"
  for s in $DFLASH_STUB_EVAL_STEPS; do echo "{\"step\": $s, \"loss\": 25.0, \"sequences\": 8}"; done > "$out/eval.jsonl"
fi
[ "$1" = export ] && exit "${DFLASH_STUB_EXPORT_RC:-0}"
exit 0
STUB
chmod +x "$tc/dflash"
train_stub() {  # eval steps, export exit code, expected exit code, expected line
  local out
  out=$(DFLASH_STUB_EVAL_STEPS=$1 DFLASH_STUB_EXPORT_RC=$2 bash "$root/ci/gpu" train-cuda "$tc" 2>&1)
  local rc=$?
  if [ "$rc" -ne "$3" ] || ! grep -qF -- "$4" <<< "$out"; then
    echo "ci_gpu_honesty: train-cuda (held-out steps '$1', export exit $2): exit $rc (expected $3), '$4' not said:"
    echo "$out"
    failed=1
  fi
}
train_stub "4 9" 0 0 "ci/gpu: CUDA held-out losses [25.0, 25.0]"
train_stub "4" 0 1 "train-cuda: eval.jsonl is not two finite records of 8 sequences"
train_stub "4 9" 1 1 "train-cuda: dflash export failed"

# The plan's arithmetic: a test's estimate is its cases at the per-case cost plus its start,
# rounded up by the slack (never down), and the drafter-step benchmark runs exactly one of its
# three configurations with the attention on the kind the step does not use.
python3 - "$root/ci" "$work" << 'PY' || { echo "ci_gpu_honesty: ci/gpu_plan.py estimates wrongly"; failed=1; }
import math, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import gpu_plan as g
work = sys.argv[2]
wrong = []
manifest = os.path.join(work, "plan-tests.tsv")
open(manifest, "w").write("a_gpu\t60\t77\t-\t620\t@bin@/a_gpu\n")
out = subprocess.run([sys.executable, os.path.join(sys.argv[1], "gpu_plan.py"), "--manifest", manifest, "--bin", work,
                      "--root", os.path.dirname(sys.argv[1]), "--stage", "correctness"], capture_output=True, text=True)
rows = {l.split("\t")[0]: int(l.split("\t")[1]) for l in out.stdout.splitlines()}
want = math.ceil((g.PROCESS_START_S + 620 * g.CASE_S) * g.SLACK)
if rows.get("a_gpu") != want or want <= g.PROCESS_START_S + 620 * g.CASE_S:
    wrong.append(f"a 620-case test planned at {rows.get('a_gpu')} s, not {want} s")
counter = os.path.join(work, "count_stub")
rate, _ = g.simt_attention_flop_per_s(os.path.dirname(sys.argv[1]))
def on(executed, simt):  # a step of `executed` FLOPs, its 2e13 of attention on CUDA cores or not
    return g.seconds(executed - 2e13, simt_flops=2e13, simt_rate=rate) if simt else g.seconds(executed)
for attention in ("tensor_cores", "cuda_cores"):
    open(counter, "w").write("#!/bin/sh\necho 'count steps 4'\necho 'count chunk_recompute 1e15 2e13'\n"
                             "echo 'count chunk_grad_in_forward 9e14 2e13'\n"
                             f"echo 'count step_attention {attention}'\n")
    os.chmod(counter, 0o755)
    total, _ = g.drafter_step_bench(counter, "c.json", 4096, os.path.dirname(sys.argv[1]))
    step_simt = attention == "cuda_cores"
    # chunk_recompute and chunk_grad_in_forward on the step's kind, chunk_recompute on the other
    want = g.PROCESS_START_S + g.CARD_RATE_S + 4 * (on(1e15, step_simt) + on(9e14, step_simt) + on(1e15, not step_simt))
    if not math.isclose(total, want, rel_tol=1e-12):
        wrong.append(f"drafter step with {attention} attention planned at {total:.3f} s, not {want:.3f} s")
print("plan: " + ("; ".join(wrong) if wrong else "as expected"))
sys.exit(1 if wrong else 0)
PY

if [ "$failed" -ne 0 ]; then
  for n in 1 2 3 4 5 6 7 8 9 10 11; do echo "---- ci/gpu log, run $n ----"; cat "$work/log$n"; done
  exit 1
fi
echo "ci_gpu_honesty: ci/gpu named every unresolved library, missing check and check without time"
