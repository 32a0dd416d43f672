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
#   ci_gpu_honesty.sh ROOT
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
u=$work/carry/root
mkdir -p "$u/bin" "$u/lib" "$work/out" "$work/build"
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
# errors, synccheck finds none
mkdir -p "$work/tools"
cat > "$work/tools/compute-sanitizer" << 'STUB'
#!/usr/bin/env bash
case $2 in
  memcheck) echo "========= Error: Device not supported (error 999)"; exit 1 ;;
  racecheck) echo "========= ERROR SUMMARY: 2 errors"; exit 99 ;;
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
PATH=$work/tools:$PATH DFLASH_GPU_CARRY=$work/carry OUT=$work/out DFLASH_REQUIRE_GPU=1 DFLASH_BENCH_SHAPE="--rows 8" \
  "$root/ci/gpu" run > "$work/log1" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { echo "ci_gpu_honesty: run 1: ci/gpu exited $rc, not 1"; failed=1; }
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

# run 2: a drafter-step benchmark that counts nothing is planned at 240 s, more than a 100 s budget
cp "$work/build/libdflash_gone.so" "$zlib" "$work/build/v2/libdflash_versioned.so" "$u/lib/"
printf '#!/usr/bin/env bash\nexit 0\n' > "$u/bin/bench_cuda_drafter_step"
chmod +x "$u/bin/bench_cuda_drafter_step"
rm -rf "$work/out"
DFLASH_GPU_CARRY=$work/carry OUT=$work/out DFLASH_REQUIRE_GPU=1 DFLASH_GPU_BUDGET_S=100 DFLASH_BENCH_SHAPE="--rows 8" \
  "$root/ci/gpu" run > "$work/log2" 2>&1
expect 2 "s of a 100 s budget"
expect 2 "ci/gpu: [load] library closure: PASS"
expect 2 "ci/gpu: [bench] bench_cuda_drafter_step: NOT RUN (no time left"
grep -q "| bench | bench_cuda_drafter_step | NOT RUN |" "$work/out/results.md" 2> /dev/null ||
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
if [ "$failed" -ne 0 ]; then
  for n in 1 2; do echo "---- ci/gpu log, run $n ----"; cat "$work/log$n"; done
  exit 1
fi
echo "ci_gpu_honesty: ci/gpu named every unresolved library, missing check and check without time"
