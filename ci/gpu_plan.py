#!/usr/bin/env python3
"""ci/gpu's plan: each check's time on the GPU machine, estimated before anything runs.

An estimate is counted work at the card's measured rates plus fixed start costs: FLOPs of the
products at the bf16 GEMM rate, bytes moved at the copy rate, test cases at a per-case cost, and
the starts (a process with its CUDA context, mpirun with NCCL, PyTorch). ci/gpu runs a check only
when its estimate fits the time left of the budget, so the order and the budget are planned.
results.md puts every measured time beside its estimate: the start and per-case costs below are
planning values until a run on the machine replaces them.

  ci/gpu_plan.py --manifest tests.tsv --bin BIN --root TREE [--stage all|correctness|bench|multi]
prints one line per check: name, whole seconds, how it was counted (tab-separated).
Environment: DFLASH_BENCH_SHAPE as ci/gpu (the smaller benchmark shapes); DFLASH_GPU_NAME, the
card's name as nvidia-smi gives it (picks CARD_RATES; the slower card's when not one of them).
"""
import argparse
import glob
import math
import os
import re
import subprocess
import sys

# The cards' rates, measured on each: cuBLAS bf16 on 8192^3 random data, a device-to-device copy
# counting the bytes read and written. H200: 769-798 TFLOP/s, 4.3 TB/s; H100 80 GB HBM3: 798
# TFLOP/s, 3.0 TB/s. ci/gpu passes the card's name (nvidia-smi) in DFLASH_GPU_NAME; a card not
# named here is planned at the slower rates of the two, so that its plan errs long, not short.
# Keyed by the exact name nvidia-smi gives the measured cards: a near name ("NVIDIA H100 PCIe",
# HBM2e at ~2 TB/s; "NVIDIA GH200 ...") is another card, planned at the slower rates.
CARD_RATES = {"H200": (790e12, 4.3e12), "H100": (790e12, 3.0e12)}
CARD_NAMES = {"NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100"}


def card_of(name):
    """The CARD_RATES key of nvidia-smi's "name, driver, memory" line ("NVIDIA H100 80GB HBM3,
    580.159.04, 81559 MiB"), else None."""
    return CARD_NAMES.get((name or "").split(",")[0].strip())


CARD = card_of(os.environ.get("DFLASH_GPU_NAME")) or "H100"
BF16_GEMM_FLOP_PER_S, COPY_BYTE_PER_S = CARD_RATES[CARD]
# The CUDA-core attention kernels (cuda/attention/simt_program.hpp; the drafter step benchmark's
# CUDA-core configuration) are bound by shared memory, not by fp32 arithmetic: every inner loop
# (the scores q.k and dO.v, (f P) V, dS K, dS^T q, (f P)^T dO) has a warp load one bf16 operand per
# lane from rows `stride` apart and one it shares (a broadcast), then do 32 FMAs. Shared memory
# serves one 128-byte wavefront per clock per multiprocessor, and an access whose lanes meet w
# times in one bank takes w wavefronts: (w + 1) wavefronts per 64 FLOPs. w is the kernels' designed
# degree, kAttentionSharedBankWays, read from the header (one home; the CPU test
# test_attention_simt_banks measures it over the real partition). At 1 the ceiling is
# 64/2 FLOP per clock on each of 132 multiprocessors at 1.98 GHz (H100 and H200 alike): 8.4 TFLOP/s.
MULTIPROCESSORS = 132
CLOCK_HZ = 1.98e9
SHARED_FLOPS_PER_ACCESS_PAIR = 64.0  # 32 lanes x one FMA after one lane-private and one broadcast load
# The fraction of that ceiling the kernels reach, a planning value until a run measures it: the
# 0.72 TFLOP/s estimated for the kernels before their rows were padded (30 s a step of 2.16e13
# attention FLOPs at full scale; issue 20) over the same model's ceiling for that layout, where the
# score loops (3 of the step's 7 attention products: q.k forward, q.k and dO.v backward) met 32-way
# and the other 4 loops were conflict-free.
SIMT_UNPADDED_ESTIMATE_FLOP_PER_S = 0.72e12


def simt_ceiling_flop_per_s(wavefronts_per_access_pair):
    return MULTIPROCESSORS * CLOCK_HZ * SHARED_FLOPS_PER_ACCESS_PAIR / wavefronts_per_access_pair


SIMT_EFFICIENCY = SIMT_UNPADDED_ESTIMATE_FLOP_PER_S / simt_ceiling_flop_per_s((3 * (32 + 1) + 4 * 2) / 7)


def simt_attention_flop_per_s(root):
    """The CUDA-core attention rate for the designed bank degree in the tree's header."""
    header = open(os.path.join(root, "cuda/attention/simt_program.hpp")).read()
    found = re.search(r"kAttentionSharedBankWays\s*=\s*(\d+)\s*;", header)
    if not found:
        raise RuntimeError("cuda/attention/simt_program.hpp declares no kAttentionSharedBankWays")
    ways = int(found.group(1))
    return SIMT_EFFICIENCY * simt_ceiling_flop_per_s(ways + 1), ways


# Start costs (planning values; results.md shows what the machine measured).
PROCESS_START_S = 1.0  # exec and dynamic loading of a ~50 MB binary, the CUDA context, module loading
MPI_START_S = 3.0  # mpirun, its PMIx server, the rank's NCCL communicator
TORCH_START_S = 15.0  # import torch, its CUDA context and cuBLAS handle
# The peer's first step compiles flex_attention's forward and backward and two block masks through
# Inductor and Triton, from a cold cache on a fresh machine: not measured here; 30 to 90 s is what
# such cold compiles take, so the plan takes the middle and starts the peer only with that left.
FLEX_COMPILE_S = 60.0
TORCH_IMPORT_S = 4.0  # import torch for a CPU-only script (no CUDA context): 2.6 s measured here
CASE_S = 0.05  # one GoogleTest case or property case: launches, a synchronisation, a small host reference
CARD_RATE_S = 1.5  # bench/cuda/gemm_rate: the 8192^3 bf16 product timed over >= 1 s, and its warm-up
SANITIZER_START_S = 10.0  # compute-sanitizer attaching to the process and patching its modules
# x the filtered cases' own time. Not x the process start: exec and dynamic loading run outside the
# tool's instrumentation, and the context and module patching it slows are SANITIZER_START_S.
SANITIZER_SLOWDOWN = {"memcheck": 30, "racecheck": 60, "synccheck": 30}
SANITIZED_CASES = 8  # the filtered test_loss_head_gpu cases (ci/gpu's sanitizer_filter)
VERIFY_CUDA_ROWS_UNCOUNTED = 50  # where the binary cannot list them (50 at 49414b5)
VERIFY_CASES_PER_ROW = 4  # a `dflash verify --group cuda` row: a short GPU run and its reference
GOLDEN_CASE_S = 2.0  # a golden file read and recomputed on the GPU (the files are small shapes)
TRAIN_STEPS = 10  # the short CUDA training run on configs/mid.json (ci/gpu train-cuda)
TRAIN_FIXED_S = 8.0  # its two `data synth`, the plan, the checkpoint, `dflash export`: host work
SLACK = 1.25  # every estimate is rounded up by a quarter: a plan that fits exactly does not fit


def seconds(flops=0.0, nbytes=0.0, fixed=0.0, simt_flops=0.0, simt_rate=1.0):
    return fixed + flops / BF16_GEMM_FLOP_PER_S + nbytes / COPY_BYTE_PER_S + simt_flops / simt_rate


def shape_flag(shape, flag, default):
    words = shape.split()
    return int(words[words.index(flag) + 1]) if flag in words else default


def loss_head_bench(shape):
    """bench_cuda_loss_head (bench/cuda/loss_head_bench.cpp): chunk_grad_in_forward and
    chunk_recompute at each chunk size and materialize, each one warm-up + reps steps; 3 V-wide
    products a step (5 for chunk_recompute), each 2 T V H FLOPs, its [T, V] bf16 output written and
    read once; 14 more products per chunk size (measure_chunk_products)."""
    T, H, V = (shape_flag(shape, f, d) for f, d in (("--rows", 32768), ("--hidden", 5120), ("--vocab", 248320)))
    reps = shape_flag(shape, "--reps", 3)
    chunks = [2048, 512]
    passes = [3, 5] * len(chunks) + ([] if "--no-materialize" in shape else [3])
    product = 2.0 * T * V * H
    flops = sum(passes) * (1 + reps) * product + sum(14 * 2.0 * min(c, T) * V * H for c in chunks)
    nbytes = sum(passes) * (1 + reps) * 2 * 2.0 * T * V
    how = f"{sum(passes) * (1 + reps)} products of 2x{T}x{V}x{H}, {nbytes:.2e} B, card rate"
    return seconds(flops, nbytes, PROCESS_START_S + CARD_RATE_S), how


def loss_head_torch(shape):
    """loss_head_torch.py: chunked (5 passes) at full T, materialized at full T (out of memory
    at full scale) then half; fp32 elementwise over [T, V]: ~16 tensors read and written forward
    and as many backward (64 B a logit each way)."""
    T, H, V = (shape_flag(shape, f, d) for f, d in (("--rows", 32768), ("--hidden", 5120), ("--vocab", 248320)))
    steps = 1 + shape_flag(shape, "--reps", 3)
    product = 2.0 * T * V * H
    materialized = 0.0 if "--no-materialize" in shape else 1.0
    flops = steps * (5 * product + materialized * 3 * product / 2)
    nbytes = steps * (1.0 + materialized * 0.5) * 128.0 * T * V
    return seconds(flops, nbytes, TORCH_START_S + CARD_RATE_S), f"{steps} x (5 + 1.5) products of 2x{T}x{V}x{H}, {nbytes:.2e} B"


def verify_cuda_rows(binary):
    """The rows `dflash verify --device cuda --group cuda` runs, counted by the binary itself with
    every GPU hidden (CUDA_VISIBLE_DEVICES empty): each row is then listed SKIPPED at once, the
    same rows a GPU runs (verify/cuda_rows.cpp and cuda_step_rows.cpp skip row by row)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", DFLASH_REQUIRE_GPU="0")
    try:
        out = subprocess.run([binary, "verify", "--device", "cuda", "--group", "cuda"], capture_output=True, text=True,
                             timeout=60, env=env)
        found = re.search(r"^(\d+) rows: \d+ PASS, \d+ FAIL, (\d+) SKIPPED$", out.stdout, re.M)
        if found and found.group(1) == found.group(2):
            return int(found.group(1)), "counted"
        why = f"exit {out.returncode}, no all-SKIPPED summary"
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    print(f"ci/gpu_plan.py: {binary} listed no cuda rows ({why}): planning {VERIFY_CUDA_ROWS_UNCOUNTED}", file=sys.stderr)
    return VERIFY_CUDA_ROWS_UNCOUNTED, "not counted"


def drafter_step_counts(binary, config, context):
    """What bench_cuda_drafter_step --count says each configuration executes (no GPU used)."""
    out = subprocess.run([binary, "--config", config, "--context", str(context), "--count"], capture_output=True,
                         text=True, timeout=60)
    counts = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if words and words[0] == "count":
            counts[words[1]] = words[2:]
    if out.returncode != 0 or "steps" not in counts:
        raise RuntimeError(f"{binary} --count: exit {out.returncode}: {out.stderr.strip()[:200]}")
    return counts


def drafter_step_bench(binary, config, context, root):
    """bench_cuda_drafter_step: per_layer x chunk_recompute and x chunk_grad_in_forward with the step's
    attention kernels, then chunk_recompute with the other kind; each warm-up + reps steps of the
    FLOPs the bench itself counts (--count); tensor-core work at the GEMM rate, CUDA-core
    attention at its own."""
    c = drafter_step_counts(binary, config, context)
    steps = int(c["steps"][0])
    recompute, recompute_attn = (float(x) for x in c["chunk_recompute"])
    grad_in_forward, _ = (float(x) for x in c["chunk_grad_in_forward"])
    step_simt = c["step_attention"][0] == "cuda_cores"
    simt_rate, ways = simt_attention_flop_per_s(root)
    runs = [(recompute, recompute_attn, step_simt), (grad_in_forward, recompute_attn, step_simt),
            (recompute, recompute_attn, not step_simt)]
    total = PROCESS_START_S + CARD_RATE_S
    for executed, attention, simt in runs:
        total += steps * (seconds(executed - attention, simt_flops=attention, simt_rate=simt_rate)
                          if simt else seconds(executed))
    return total, (f"3 configurations x {steps} steps of {recompute:.2e} / {grad_in_forward:.2e} FLOPs, attention "
                   f"{recompute_attn:.2e} (one on CUDA cores at {simt_rate / 1e12:.1f} TFLOP/s, {ways}-way banks)")


def drafter_step_torch(binary, config, context):
    """drafter_step_torch.py: warm-up (compiles flex_attention) + reps steps of the same executed
    FLOPs (checkpoint per layer, chunk_recompute-like loss chunks), all at the GEMM rate."""
    c = drafter_step_counts(binary, config, context)
    steps = int(c["steps"][0])
    recompute = float(c["chunk_recompute"][0])
    return (seconds(steps * recompute, fixed=TORCH_START_S + FLEX_COMPILE_S),
            f"{steps} steps of {recompute:.2e} FLOPs + flex compile {FLEX_COMPILE_S:.0f} s")


MULTI_TRAIN_STEPS = 6  # ci/gpu train-multi: 6 steps on 1 rank, then on every GPU


def multi_rank_rows(manifest):
    """--stage multi (ci/gpu stage_multi): 2 CPU ranks of the tiny config (the launch), the two NCCL
    tests on several ranks (their cases from the manifest, one mpirun start; the cases run on the
    ranks at once), and train-multi's two runs."""
    cases = {}
    if os.path.exists(manifest):
        for line in open(manifest):
            f = line.rstrip("\n").split("\t")
            cases[f[0]] = int(f[4])
    rows = [("2 CPU ranks under the carried mpirun", seconds(fixed=2 * PROCESS_START_S + MPI_START_S + 2.0),
             "tiny config, CPU backend: the launch")]
    rows += [(name, seconds(fixed=PROCESS_START_S + MPI_START_S + cases.get(name, 0) * CASE_S),
             f"{cases.get(name, 0)} cases on several ranks")
            for name in ("test_nccl_communicator_gpu", "test_cuda_train_step_nccl_gpu")]
    rows.append(("dflash train on 1 rank and every GPU",
                 seconds(fixed=3 * PROCESS_START_S + 2 * MPI_START_S + TRAIN_FIXED_S +
                         2 * MULTI_TRAIN_STEPS * 20 * CASE_S), f"2 runs of {MULTI_TRAIN_STEPS} steps, host work"))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--stage", default="all", choices=["all", "correctness", "bench", "multi"])
    a = p.parse_args()
    shape = os.environ.get("DFLASH_BENCH_SHAPE", "")
    name = (os.environ.get("DFLASH_GPU_NAME") or "").split(",")[0].strip()
    why = "the card found" if card_of(name) else (f"card not measured ({name})" if name else "no card named") + ": the slower"
    print(f"ci/gpu_plan.py: the {CARD}'s rates ({why}), "
          f"bf16 GEMM {BF16_GEMM_FLOP_PER_S / 1e12:.0f} TFLOP/s, copy {COPY_BYTE_PER_S / 1e12:.1f} TB/s",
          file=sys.stderr)
    rows = [("library closure", 20.0, "the loader's trace of every staged file"),
            ("binaries start", 2.0 + 0.2 * 20, "each binary lists its cases; mpirun starts")]
    if a.stage == "multi":
        rows += multi_rank_rows(a.manifest)
    if a.stage in ("all", "correctness"):
        if os.path.exists(a.manifest):
            for line in open(a.manifest):
                f = line.rstrip("\n").split("\t")
                name, cases = f[0], int(f[4])
                fixed = PROCESS_START_S + (MPI_START_S if "@bin@/mpirun" in f[5:] else 0)
                rows.append((name, seconds(fixed=fixed + cases * CASE_S), f"{cases} cases"))
        goldens = len(glob.glob(os.path.join(a.root, "golden/data/*.safetensors")))
        training = len(glob.glob(os.path.join(a.root, "golden/data/training/*.safetensors")))
        verify_rows, how = verify_cuda_rows(os.path.join(a.bin, "dflash"))
        rows += [("dflash verify --device cuda",
                  seconds(fixed=PROCESS_START_S + verify_rows * VERIFY_CASES_PER_ROW * CASE_S),
                  f"{verify_rows} rows ({how})"),
                 ("dflash golden check --impl cuda-loss-head", seconds(fixed=PROCESS_START_S + goldens * GOLDEN_CASE_S),
                  f"{goldens} files"),
                 ("dflash golden check --impl cuda", seconds(fixed=PROCESS_START_S + goldens * GOLDEN_CASE_S),
                  f"{goldens} files"),
                 ("dflash golden check-training --impl cuda",
                  seconds(fixed=PROCESS_START_S + training * GOLDEN_CASE_S), f"{training} files"),
                 ("dflash train --backend cuda (mid, 10 steps) + export",
                  seconds(fixed=5 * PROCESS_START_S + TRAIN_FIXED_S + TRAIN_STEPS * 20 * CASE_S),
                  f"{TRAIN_STEPS} steps, host work"),
                 ("torch_export_check",
                  seconds(fixed=2 * TORCH_IMPORT_S + 12 * PROCESS_START_S + TRAIN_FIXED_S),
                  "2 CPU torch imports; synth, train, export, 2 goldens, 6 compares")]
        for tool, slowdown in SANITIZER_SLOWDOWN.items():
            rows.append((f"compute-sanitizer --tool {tool}",
                         seconds(fixed=SANITIZER_START_S + PROCESS_START_S + slowdown * SANITIZED_CASES * CASE_S),
                         f"{SANITIZED_CASES} cases x {slowdown}"))
    if a.stage in ("all", "bench"):
        rows.append(("bench_cuda_loss_head",) + loss_head_bench(shape))
        rows.append(("loss_head_torch.py",) + loss_head_torch(shape))
        if shape:
            config, context = os.path.join(a.root, "bench/cuda/drafter_step_quick.json"), 1024
        else:
            config, context = os.path.join(a.root, "configs/qwen3.6-27b.json"), 4096
        binary = os.path.join(a.bin, "bench_cuda_drafter_step")
        try:
            rows.append(("bench_cuda_drafter_step",) + drafter_step_bench(binary, config, context, a.root))
            rows.append(("drafter_step_torch.py",) + drafter_step_torch(binary, config, context))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            print(f"ci/gpu_plan.py: no count from {binary}: {e}", file=sys.stderr)
            rows += [("bench_cuda_drafter_step", 240.0, "not counted (no binary)"),
                     ("drafter_step_torch.py", 240.0, "not counted (no binary)")]
    for name, s, how in rows:
        print(f"{name}\t{math.ceil(s * SLACK)}\t{how}")


if __name__ == "__main__":
    main()
