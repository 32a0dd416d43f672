#!/usr/bin/env bash
# ci/gpu run on a staged folder of stubs: test_loss_head_gpu and test_cuda_host "pass", dflash's
# verify exits 0 while reporting a SKIPPED row, every other binary is missing. ci/gpu must exit 1
# and name each reason: the missing binaries, the SKIPPED verify row, the missing benchmark.
#   ci_gpu_honesty.sh ROOT
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/carry/bin" "$work/out"
for name in test_loss_head_gpu test_cuda_host; do
  cat > "$work/carry/bin/$name" <<'STUB'
#!/usr/bin/env bash
[ "${1:-}" = "--gtest_list_tests" ] && exit 0
echo "[  PASSED  ] 1 test."
STUB
done
cat > "$work/carry/bin/dflash" <<'STUB'
#!/usr/bin/env bash
if [ "$1" = verify ]; then
  echo "cuda  T37  chunk_recompute/c5  -  2.0e+00  0  SKIPPED  no GPU"
  echo "1 rows: 0 PASS, 0 FAIL, 1 SKIPPED"
fi
exit 0
STUB
chmod +x "$work/carry/bin"/*

DFLASH_GPU_CARRY=$work/carry OUT=$work/out DFLASH_REQUIRE_GPU=1 DFLASH_BENCH_SHAPE="--rows 8" \
  "$root/ci/gpu" run > "$work/log" 2>&1
rc=$?
failed=0
expect() {
  if ! grep -qF -- "$1" "$work/log"; then
    echo "ci_gpu_honesty: the log does not say: $1"
    failed=1
  fi
}
[ "$rc" -eq 1 ] || { echo "ci_gpu_honesty: ci/gpu exited $rc, not 1"; failed=1; }
# each reason in the closing list of what failed (what the exit code is made of)
expect "FAILED: missing: test_cuda_memory_plan_gpu"
expect "FAILED: missing: bench_cuda_loss_head"
expect "FAILED: missing: bench_cuda_drafter_step"
expect "FAILED: missing: test_loss_head_row_program"
expect "FAILED: dflash verify --device cuda: rows SKIPPED under DFLASH_REQUIRE_GPU=1"
expect "FAILED: missing: test_cuda_train_step_nccl_gpu"
expect "FAILED: missing: test_cuda_training_golden_gpu"
expect "FAILED: dflash train --backend cuda: the loss is not finite or did not fall"
expect "ci/gpu: FAIL"
if [ "$failed" -ne 0 ]; then
  echo "---- ci/gpu log ----"
  cat "$work/log"
  exit 1
fi
echo "ci_gpu_honesty: ci/gpu exited 1 and named every missing check"
