#!/usr/bin/env python3
"""PyTorch baseline of the CUDA loss head: the same maths (SPEC section 5) on the same data.

The inputs come from libdflash_bench_data.so (built beside bench_cuda_loss_head), which fills
torch's own tensors through ctypes with the very Philox stream the CUDA benchmark uses, so the
two runs see bit-identical Y, G, W_lm, labels and weights.

Two baselines, each forward + backward (dL/dY), bf16 matmuls, fp32 softmax statistics:
  chunked       2048-row chunks under torch.utils.checkpoint (recompute in backward: 5 GEMM passes)
  materialized  all rows at once, tried at the full T and then at smaller T until it fits
plus the card's bf16 matmul rate (8192^3, random data).

  python3 bench/cuda/loss_head_torch.py --lib build/bench/cuda/libdflash_bench_data.so --json out.json
  python3 bench/cuda/loss_head_torch.py --device cpu --rows 64 --hidden 32 --vocab 1000 --chunk 16
      (a dry run of the maths on the CPU with torch's own random data)
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.checkpoint import checkpoint


def hybrid_loss_sums(y, g, lm_head, labels, weights, valid, tau, hard, soft):
    """Sum over rows of w*l, w*ce, w*kl and of w01*[argmax z = y] (SPEC 5); only y carries a gradient."""
    z = (y @ lm_head.T).float()
    with torch.no_grad():
        t = (g @ lm_head.T).float()
        log_q = torch.log_softmax(t / tau, dim=-1)
        q = log_q.exp()
    log_p = torch.log_softmax(z, dim=-1)
    ce = -log_p.gather(1, labels[:, None]).squeeze(1)
    log_p_tau = torch.log_softmax(z / tau, dim=-1)
    kl = (q * (log_q - log_p_tau)).sum(-1)
    loss_rows = hard * ce + soft * tau * tau * kl
    correct = ((z.detach().argmax(-1) == labels) & valid).sum()
    return (weights * loss_rows).sum(), (weights * ce).sum().detach(), (weights * kl).sum().detach(), correct


def loss_head_step(data, chunk, tau, hard, soft):
    """Forward + backward; returns (loss, ce, kl, accuracy); dL/dY lands in data['y'].grad."""
    y, g, w_lm, labels, weights, valid, W = (data[k] for k in ("y", "g", "lm_head", "labels", "weights", "valid", "W"))
    y.grad = None
    T = y.shape[0]
    parts = []
    for r0 in range(0, T, chunk):
        r1 = min(T, r0 + chunk)
        args = (y[r0:r1], g[r0:r1], w_lm, labels[r0:r1], weights[r0:r1], valid[r0:r1], tau, hard, soft)
        if chunk >= T:
            parts.append(hybrid_loss_sums(*args))
        else:
            parts.append(checkpoint(hybrid_loss_sums, *args, use_reentrant=False))
    loss = sum(p[0] for p in parts) / W
    loss.backward()
    valid_rows = int(valid.sum())
    correct = int(sum(int(p[3]) for p in parts))
    return (float(loss), float(sum(p[1] for p in parts) / W), float(sum(p[2] for p in parts) / W),
            correct / valid_rows if valid_rows else 0.0)


def out_of_memory_message(message):
    """Whether a RuntimeError's message is a failed device allocation (cuBLAS's or the runtime's)."""
    return any(m in message for m in ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED"))


def add_run_arguments(p):
    """The options every PyTorch peer of a CUDA benchmark takes: repetitions, data seed, JSON output."""
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--json", help="write the numbers here")


def write_json(path, out):
    """The peer's results at `path`, whole or not at all: a temporary created exclusively beside it
    (no link followed), then renamed."""
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(out, f, indent=2)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def skipped_without_gpu(script):
    """Says so and returns the exit code, as the CUDA benchmarks: 0, or 1 under DFLASH_REQUIRE_GPU=1."""
    print(f"{script}: SKIPPED, torch sees no GPU")
    return 1 if os.environ.get("DFLASH_REQUIRE_GPU") == "1" else 0


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed_steps(step, reps, device):
    """Wall milliseconds of `reps` calls of step(), each synchronized; the last result; the bytes
    held before and the peak above them (torch.cuda.max_memory_allocated; 0 on the CPU)."""
    base = 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = step()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, result, base, (torch.cuda.max_memory_allocated() - base if device == "cuda" else 0)


def time_steps(data, chunk, args):
    """Median wall time of args.reps steps after one warm-up, and the peak bytes above what was held before."""
    device = args.device
    result = loss_head_step(data, chunk, args.tau, args.hard, args.soft)
    synchronize(device)
    data["y"].grad = None
    times, result, _, peak = timed_steps(lambda: loss_head_step(data, chunk, args.tau, args.hard, args.soft),
                                         args.reps, device)
    return {"ms_median": statistics.median(times), "ms": times, "peak_bytes_above_inputs": peak,
            "loss": result[0], "ce": result[1], "kl": result[2], "accuracy": result[3]}


def matmul_rate(device):
    """bf16 TFLOP/s of an 8192^3 product on random data (3 warm-ups, 10 timed)."""
    if device != "cuda":
        return 0.0
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    stop.record()
    torch.cuda.synchronize()
    return 2 * n ** 3 / (start.elapsed_time(stop) / 10 * 1e-3) / 1e12


def make_data(args, rows):
    """The benchmark's inputs: through libdflash_bench_data.so on the GPU, torch's own generator on the CPU."""
    T, H, V = rows, args.hidden, args.vocab
    dev = args.device
    y = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    g = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    w_lm = torch.empty(V, H, device=dev, dtype=torch.bfloat16)
    labels = torch.empty(T, device=dev, dtype=torch.int64)
    weights = torch.empty(T, device=dev, dtype=torch.float32)
    valid = torch.empty(T, device=dev, dtype=torch.uint8)
    if dev == "cuda":
        lib = ctypes.CDLL(args.lib)
        fill = lib.dflash_bench_fill_loss_head_inputs
        fill.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 3 + [ctypes.c_ulonglong, ctypes.c_float,
                                                                            ctypes.c_float]
        fill.restype = ctypes.c_int
        torch.cuda.synchronize()
        status = fill(*(ctypes.c_void_p(t.data_ptr()) for t in (y, g, w_lm, labels, weights, valid)), T, H, V,
                      args.seed, 4.0, 1.0)
        if status != 0:
            sys.exit(f"loss_head_torch.py: dflash_bench_fill_loss_head_inputs failed with cudaError {status}")
    else:
        gen = torch.Generator().manual_seed(args.seed)
        y.copy_(torch.rand(T, H, generator=gen) * 2 - 1)
        g.copy_(torch.rand(T, H, generator=gen) * 2 - 1)
        w_lm.copy_((torch.rand(V, H, generator=gen) * 2 - 1) * 4.0 * (3.0 / H) ** 0.5)
        k = torch.arange(T) % 32
        valid.copy_(k != 0)
        labels.copy_(torch.randint(0, V, (T,), generator=gen))
        weights.copy_(torch.where(k != 0, torch.exp(-(k - 1).float() / 7.0), torch.zeros(())))
    y.requires_grad_(True)
    return {"y": y, "g": g, "lm_head": w_lm, "labels": labels, "weights": weights, "valid": valid.bool(),
            "W": float(weights.double().sum())}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libdflash_bench_data.so (needed with --device cuda)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--rows", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=5120)
    p.add_argument("--vocab", type=int, default=248320)
    p.add_argument("--chunk", type=int, default=2048)
    # DFLASH_BENCH_SHAPE's flags reach this script and bench_cuda_loss_head alike (ci/gpu): each one
    # the CUDA benchmark takes is taken here too.
    p.add_argument("--no-materialize", action="store_true", help="skip the materialized runs (as the CUDA benchmark)")
    p.add_argument("--chunks", help="the CUDA benchmark's chunk sizes; the baseline runs --chunk alone (its target's)")
    add_run_arguments(p)
    p.add_argument("--tau", type=float, default=1.0)
    p.add_argument("--hard", type=float, default=0.85)
    p.add_argument("--soft", type=float, default=0.15)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        return skipped_without_gpu("loss_head_torch.py")
    if args.device == "cuda" and not args.lib:
        p.error("--lib is required with --device cuda")

    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "rows": args.rows, "hidden": args.hidden, "vocab": args.vocab, "seed": args.seed,
           "card_bf16_tflops": matmul_rate(args.device)}
    data = make_data(args, args.rows)
    out["weight_sum"] = data["W"]
    out["chunked"] = dict(time_steps(data, args.chunk, args), chunk=args.chunk, gemm_passes=5)
    print(f"torch chunked ({args.chunk} rows, checkpoint): {out['chunked']['ms_median']:.1f} ms, "
          f"peak {out['chunked']['peak_bytes_above_inputs'] / 2**30:.2f} GiB above inputs, loss {out['chunked']['loss']:.6f}")
    del data
    # The chunked result is written before the materialized runs, so that a failure there keeps it.
    out["materialized"] = []
    if args.json:
        write_json(args.json, out)

    # Materialized: the full batch first; on out-of-memory halve T until it fits (or T < 1024).
    rows = args.rows
    while not args.no_materialize and rows >= min(1024, args.rows):
        entry = {"rows": rows}
        out["materialized"].append(entry)
        try:
            data = make_data(args, rows)
            entry.update(time_steps(data, rows, args))
            print(f"torch materialized, T {rows}: {entry['ms_median']:.1f} ms, "
                  f"peak {entry['peak_bytes_above_inputs'] / 2**30:.2f} GiB above inputs")
            break
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            # An allocation that fails inside cuBLAS or a kernel launch comes back as a plain RuntimeError.
            if not isinstance(e, torch.cuda.OutOfMemoryError) and not out_of_memory_message(str(e)):
                raise
            entry["out_of_memory"] = str(e).split("\n")[0]
            print(f"torch materialized, T {rows}: out of memory")
        # Out of the except clause: the exception's frames (holding the failed step's tensors) are gone.
        data = None
        gc.collect()
        torch.cuda.empty_cache()
        rows //= 2
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
