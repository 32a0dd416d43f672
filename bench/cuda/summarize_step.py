#!/usr/bin/env python3
"""Merge bench_cuda_drafter_step's and drafter_step_torch.py's JSON into one markdown report.

  python3 bench/cuda/summarize_step.py CUDA.json TORCH.json > results_step.md

Correctness (the last line, PASS or FAIL; exit 1 on FAIL): both CUDA policies ran with the step's
attention kernels, and each run's loss (the one with the kernels switched too) differs from the
PyTorch peer's by at most baseline_loss_tolerance relative
(kStepBaselineLossTolerance in bench/cuda/drafter_step_metrics.hpp, passed through the JSON). A
missing PyTorch result is a FAIL: the comparison did not run. (The benchmark itself checks that
every loss and gradient is finite and that its runs agree bitwise.)

Performance targets (their own line; exit 3 when missed and everything is correct), for each CUDA
policy run with the step's attention kernels ("step_kernels"): MFU >= targets.mfu of the measured
large-GEMM rate and faster than the PyTorch peer; for every run, each category's peak <= (1 +
targets.plan_excess) x `dflash plan`'s. The run with the attention kernels switched is measured for
its attention times, not held to the step's speed.

Each parameter's gradient norm is shown beside the peer's (the relative difference, largest and
median): information, not a verdict (the peer's gradients are bf16)."""
import statistics
import sys

from summarize import GIB, conclude, load  # the loss-head summary's (same folder)


def verdicts(cuda, torch):
    """(missed, wrong): the targets missed and the correctness failures."""
    missed, wrong = [], []
    targets = cuda["targets"]
    card = cuda["card_bf16_tflops"]
    step_runs = [r for r in cuda["runs"] if r["step_kernels"]]
    if len(step_runs) < 2:
        wrong.append(f"{2 - len(step_runs)} CUDA policies did not complete with the step's attention kernels")
    for r in cuda["runs"]:
        name = f"per_layer x {r['loss_policy']}" + ("" if r["step_kernels"] else ", attention kernels switched")
        if r["step_kernels"] and r["mfu_of_card"] < targets["mfu"]:
            missed.append(f"{name}: MFU {100 * r['mfu_of_card']:.1f}% < {100 * targets['mfu']:.0f}% of {card:.0f} TFLOP/s")
        for m in r["memory"]:
            if m["measured"] > (1 + targets["plan_excess"]) * m["planned"]:
                missed.append(f"{name}: {m['category']} peak {m['measured'] / GIB:.3f} GiB > planned "
                              f"{m['planned'] / GIB:.3f} GiB + {100 * targets['plan_excess']:.0f}%")
        if torch is None:
            continue
        if r["step_kernels"] and r["ms_median"] >= torch["ms_median"]:
            missed.append(f"{name}: {r['ms_median']:.1f} ms, not faster than PyTorch's {torch['ms_median']:.1f} ms")
        rel = abs(r["loss"] - torch["loss"]) / abs(torch["loss"])
        if not rel <= cuda["baseline_loss_tolerance"]:
            wrong.append(f"{name}: loss {r['loss']:.6f} vs PyTorch {torch['loss']:.6f} ({rel:.2e} > "
                         f"{cuda['baseline_loss_tolerance']:g} relative)")
    if torch is None:
        wrong.append("no PyTorch peer result: the loss comparison did not run")
    return missed, wrong


def report(cuda, torch):
    m = cuda["dims"]
    card, sheet = cuda["card_bf16_tflops"], cuda["datasheet_bf16_tflops"]
    flops = cuda["flops"]
    lines = [f"# CUDA drafter step, T {m['T']} ({m['N']} blocks of {m['B']}), S {m['S']}, H {m['H']}, I {m['I']}, "
             f"heads {m['nh']}/{m['nkv']}, d {m['d']}, L {m['L']}, V {m['V']}", "",
             f"Device: {cuda['device']}. Config {cuda['config']}, seed {cuda['seed']}, W = {cuda['weight_sum']:.1f}.", "",
             f"Measured bf16 rate (cuBLAS 8192^3, >= 1 s): {card:.1f} TFLOP/s; H100/H200 SXM datasheet dense bf16 peak "
             f"{sheet:.0f} TFLOP/s.", "",
             f"Model FLOPs per step (no recomputation): {flops['model']:.4g} = trunk projections "
             f"{flops['block_linear']:.4g} + context path {flops['context']:.4g} + attention "
             f"{flops['attention_forward'] + flops['attention_backward']:.4g} + loss head {flops['loss_head']:.4g}.",
             "", "| implementation | ms / step | model TFLOP/s | MFU (measured) | MFU (datasheet) | executed TFLOP/s | "
             "attention fwd ms | attention bwd ms | attention TFLOP/s | peak GiB | plan GiB | vs PyTorch | loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in cuda["runs"]:
        s = r["ms_median"] * 1e-3
        attention_s = (r["attention_forward_ms"] + r["attention_backward_ms"]) * 1e-3
        speed = f"{torch['ms_median'] / r['ms_median']:.2f}x" if torch else ""
        kernel = {"tensor_cores": ", tensor-core attention forward",
                  "cuda_cores": ", CUDA-core attention forward"}.get(r.get("attention_forward_kernel"), "")
        kernel += {"tensor_cores": ", tensor-core backward",
                   "cuda_cores": ", CUDA-core backward"}.get(r.get("attention_backward_kernel"), "")
        lines.append(f"| CUDA per_layer x {r['loss_policy']}{kernel} | {r['ms_median']:.1f} | {flops['model'] / s / 1e12:.1f} | "
                     f"{100 * r['mfu_of_card']:.1f}% | {100 * r['mfu_of_datasheet']:.1f}% | "
                     f"{r['executed_flops'] / s / 1e12:.1f} | {r['attention_forward_ms']:.1f} | "
                     f"{r['attention_backward_ms']:.1f} | {r['attention_executed_flops'] / attention_s / 1e12:.1f} | "
                     f"{r['peak_total_bytes'] / GIB:.2f} | {r['planned_total_bytes'] / GIB:.2f} | {speed} | "
                     f"{r['loss']:.6f} |")
    if torch:
        s = torch["ms_median"] * 1e-3
        lines.append(f"| PyTorch {torch['torch']} ({torch['attention']} attention, checkpoint per layer, "
                     f"{torch['chunk']}-row loss chunks under checkpoint) | {torch['ms_median']:.1f} | "
                     f"{flops['model'] / s / 1e12:.1f} | {100 * flops['model'] / s / 1e12 / card:.1f}% | "
                     f"{100 * flops['model'] / s / 1e12 / sheet:.1f}% | | | | | "
                     f"{torch.get('peak_bytes', 0) / GIB:.2f} | | 1.00x | {torch['loss']:.6f} |")
        if "flex_error" in torch:
            lines += ["", f"flex_attention could not run ({torch['flex_error']}); the peer fell back to SDPA."]
        lines += ["", f"PyTorch's first step (compilation included): {torch['first_step_s']:.1f} s."]
    # the categories anything was planned or held in
    shown = sorted({c["category"] for r in cuda["runs"] for c in r["memory"] if c["planned"] or c["measured"]},
                   key=lambda name: [c["category"] for c in cuda["runs"][0]["memory"]].index(name))
    lines += ["", "Peak bytes per category (the DeviceAllocator's tracker) against `dflash plan` for the same "
                  "config and policies on one GPU:", "",
              "| policy | " + " | ".join(shown) + " |", "|---|" + "---:|" * len(shown)]
    for r in cuda["runs"]:
        cells = {c["category"]: f"{c['measured'] / GIB:.3f} / {c['planned'] / GIB:.3f}" for c in r["memory"]}
        lines.append(f"| {r['loss_policy']} | " + " | ".join(cells[name] for name in shown) + " |")
    lines += ["", "Cells: measured / planned GiB. Peak GiB above: the tracker's peak of the sum; plan GiB: the sum "
                  "of the plan's category peaks."]
    if torch and cuda["runs"]:
        names = cuda["parameters"]
        # (relative difference, name) of each parameter whose PyTorch norm is non-zero: a name stays
        # with its own difference when a zero norm is left out
        diffs = [(abs(a - torch["grad_norms"][n]) / torch["grad_norms"][n], n)
                 for n, a in zip(names, cuda["runs"][0]["grad_norms"]) if torch["grad_norms"].get(n, 0) > 0]
        if diffs:
            worst, worst_name = max(diffs)
            lines += ["", f"Gradient norms, CUDA vs PyTorch, over {len(diffs)} parameters: relative difference median "
                          f"{statistics.median(d for d, _ in diffs):.2e}, largest {worst:.2e} ({worst_name})."]
        rel = abs(cuda["runs"][0]["loss"] - torch["loss"]) / abs(torch["loss"])
        lines.append(f"Same data (Philox, seed {cuda['seed']}); loss CUDA {cuda['runs'][0]['loss']:.6f} vs PyTorch "
                     f"{torch['loss']:.6f}: relative difference {rel:.2e} (bound {cuda['baseline_loss_tolerance']:g}).")
    return lines


def main():
    cuda = load(sys.argv[1])
    torch = load(sys.argv[2] if len(sys.argv) > 2 else None)
    if cuda is None:
        print("no CUDA drafter step results\n\ncorrectness: FAIL")
        return 1
    missed, wrong = verdicts(cuda, torch)
    return conclude(report(cuda, torch) + [""], missed, wrong)


if __name__ == "__main__":
    sys.exit(main())
