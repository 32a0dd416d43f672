#!/usr/bin/env python3
"""Merge the CUDA benchmark's and the PyTorch baseline's JSON into one markdown table.

  python3 bench/cuda/summarize.py CUDA.json TORCH.json > results.md

Correctness (the last line, PASS or FAIL; exit 1 on FAIL): every CUDA run passed its full-scale
gate (fp64 recomputation of sampled rows under SPEC 10's bf16 rule, in the benchmark), and the
CUDA loss differs from the PyTorch chunked baseline's by at most the benchmark's
baseline_loss_tolerance (kBaselineLossTolerance in common/tolerances.hpp, 1e-3 relative). A
missing PyTorch result is a FAIL: the comparison did not run.

Performance targets (their own line; exit 3 when missed and everything is correct), for
chunk_grad_in_forward at the target chunk (2048): model-FLOP rate >= 70% of the measured
large-GEMM rate, elementwise kernels' share of the step <= 5%, peak transient <= 2 GiB, peak loss-head bytes
<= 1/4 of the PyTorch checkpointed baseline's. The thresholds come from the CUDA JSON."""
import json
import os
import sys

GIB = 2 ** 30


def load(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def conclude(lines, missed, wrong):
    """Prints the report, then its targets line and, last, its correctness line; returns the exit
    code: 1 a correctness failure, 3 only a target missed, 0 neither (as the benchmarks)."""
    lines = lines + ["performance targets: " + ("met" if not missed else "MISSED; " + "; ".join(missed))]
    lines += [f"wrong: {w}" for w in wrong]
    lines.append("correctness: " + ("PASS" if not wrong else "FAIL"))
    print("\n".join(lines))
    if wrong:
        return 1
    return 3 if missed else 0


def yes(ok):
    return "yes" if ok else "**NO**"


def main():
    cuda = load(sys.argv[1])
    torch = load(sys.argv[2] if len(sys.argv) > 2 else None)
    if cuda is None:
        print("no CUDA benchmark results\n\ncorrectness: FAIL")
        return 1
    targets = cuda["targets"]
    card = cuda["card_bf16_tflops"]
    lines = [f"# CUDA loss head, T {cuda['rows']}, H {cuda['hidden']}, V {cuda['vocab']}", "",
             f"Device: {cuda['device']}.", "",
             f"Measured bf16 rate (8192^3, random data, timed over >= 1 s): cuBLAS {card:.1f} TFLOP/s"
             + (f", PyTorch {torch['card_bf16_tflops']:.1f} TFLOP/s (torch {torch['torch']})." if torch else "."), ""]
    lines += ["| product | ms | TFLOP/s |", "|---|---:|---:|"]
    for g in cuda["gemm_shapes"]:
        lines.append(f"| {g['what']} | {g['ms']:.3f} | {g['tflops']:.1f} |")
    lines.append("")
    tch = torch["chunked"] if torch else None
    lines += ["| implementation | chunk | ms fwd+bwd | GEMM passes | model TFLOP/s | % of card | executed TFLOP/s | "
              "% of card | elementwise % (non-GEMM %) | gate | peak transient GiB | peak loss-head GiB | cudaMemGetInfo GiB | "
              "vs torch chunked: speed | memory | loss |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    wrong, missed = [], []
    target_runs = [r for r in cuda["runs"]
                   if r["policy"] == "chunk_grad_in_forward" and r["chunk"] == targets["chunk"]]
    if not target_runs:
        missed.append(f"chunk_grad_in_forward at chunk {targets['chunk']} not measured")
    for r in cuda["runs"]:
        if not r["gate_ok"]:
            wrong.append(f"{r['policy']} chunk {r['chunk']}: full-scale gate (worst ratio {r['gate_worst_ratio']:.2f})")
        model_pct = 100 * r["model_fraction_of_card_rate"]
        share = r["elementwise_share"]
        non_gemm = r["non_gemm_share"]
        share_cell = ("n/a" if share < 0 else f"{100 * share:.1f}") + \
            (" (n/a)" if non_gemm < 0 else f" ({100 * non_gemm:.1f})")
        transient = r["peak_transient_bytes"] / GIB
        is_target = r in target_runs
        speed = memory = ""
        if tch and r["policy"] != "materialize":
            speed = f"{tch['ms_median'] / r['ms_median']:.2f}x"
            if tch["peak_bytes_above_inputs"] > 0:
                ratio = r["peak_loss_head_bytes"] / tch["peak_bytes_above_inputs"]
                memory = f"{ratio:.3f}"
                if is_target:
                    memory += f" ({yes(ratio <= 0.25)} <= 1/4)"
                    if ratio > 0.25:
                        missed.append(f"peak {ratio:.3f} of PyTorch's > 1/4")
        if is_target:
            if r["model_fraction_of_card_rate"] < targets["model_rate"]:
                missed.append(f"model-FLOP rate {model_pct:.1f}% < {100 * targets['model_rate']:.0f}%")
            if share > targets["elementwise_share"]:
                missed.append(f"elementwise share {100 * share:.1f}% > {100 * targets['elementwise_share']:.0f}%")
            if r["peak_transient_bytes"] > targets["transient_bytes"]:
                missed.append(f"transient {transient:.3f} GiB > {targets['transient_bytes'] / GIB:.0f} GiB")
        lines.append(f"| CUDA {r['policy']} | {r['chunk']} | {r['ms_median']:.1f} | {r['gemm_passes']} | "
                     f"{r['model_tflops']:.1f} | {model_pct:.1f} | {r['executed_tflops']:.1f} | "
                     f"{100 * r['executed_fraction_of_card_rate']:.1f} | {share_cell} | "
                     f"{'pass' if r['gate_ok'] else '**FAIL**'} | {transient:.3f} | "
                     f"{r['peak_loss_head_bytes'] / GIB:.3f} | {r['device_used_above_inputs_bytes'] / GIB:.3f} | "
                     f"{speed} | {memory} | {r['loss']:.6f} |")
    if torch:
        flops = 2.0 * cuda["rows"] * cuda["vocab"] * cuda["hidden"]
        model = 3 * 2.0 * cuda["weighted_rows"] * cuda["vocab"] * cuda["hidden"]
        lines.append(f"| PyTorch checkpointed chunks | {tch['chunk']} | {tch['ms_median']:.1f} | 5 | "
                     f"{model / (tch['ms_median'] * 1e-3) / 1e12:.1f} | | "
                     f"{5 * flops / (tch['ms_median'] * 1e-3) / 1e12:.1f} | | | | | "
                     f"{tch['peak_bytes_above_inputs'] / GIB:.3f} | | | | {tch['loss']:.6f} |")
        for m in torch["materialized"]:
            if "out_of_memory" in m:
                lines.append(f"| PyTorch materialized, T {m['rows']} | - | out of memory | | | | | | | | | | | | | |")
            else:
                mflops = 2.0 * m["rows"] * cuda["vocab"] * cuda["hidden"]
                lines.append(f"| PyTorch materialized, T {m['rows']} | - | {m['ms_median']:.1f} | 3 | | | "
                             f"{3 * mflops / (m['ms_median'] * 1e-3) / 1e12:.1f} | | | | | "
                             f"{m['peak_bytes_above_inputs'] / GIB:.3f} | | | | {m['loss']:.6f} |")
        tolerance = cuda["baseline_loss_tolerance"]
        lines.append("")
        for r in cuda["runs"]:
            rel = abs(r["loss"] - tch["loss"]) / abs(tch["loss"])
            if not rel <= tolerance:  # a NaN loss is not within the bound
                wrong.append(f"{r['policy']} chunk {r['chunk']}: loss {r['loss']:.6f} vs PyTorch {tch['loss']:.6f} "
                             f"({rel:.2e} > {tolerance:g} relative)")
        first = cuda["runs"][0] if cuda["runs"] else None
        if first:
            rel = abs(first["loss"] - tch["loss"]) / abs(tch["loss"])
            lines.append(f"Same data (Philox, seed {cuda['seed']}); loss CUDA {first['loss']:.6f} vs PyTorch "
                         f"{tch['loss']:.6f}: relative difference {rel:.2e} (bound {tolerance:g}; both round logits "
                         f"to bf16).")
    else:
        wrong.append("no PyTorch baseline: the loss comparison did not run")
    if not cuda["runs"]:
        wrong.append("no CUDA run completed")
    lines += ["", "Model TFLOP/s: the 3 useful V-wide products (2 V H each) over the rows that carry weight "
                  f"({cuda['weighted_rows']} of {cuda['rows']}); executed: every product the policy runs "
                  f"(chunk_recompute 5 passes) over the valid rows it computes ({cuda['valid_rows']}). Elementwise: "
                  "the loss head's kernels other than the products (input checks, valid-row list, zeroing, gather, "
                  "row statistics, gradient, scatter, totals), each timed by cudaEvents, as a share of the step; "
                  "non-GEMM: the step time less its products' measured time (those kernels, launch gaps, host "
                  "round trips). Gate: lse, token loss and dL/dY on sampled "
                  "rows against an fp64 recomputation under the bf16 rule.",
              "", "Peak loss-head bytes: everything the loss head allocated (counted by category: transient, "
                  "loss_saved, gradients = dL/dY in fp32, outputs), inputs excluded; PyTorch: "
                  "max_memory_allocated above the inputs. cudaMemGetInfo: device bytes in use after the runs "
                  "above those before (the allocator's pool trimmed first).", ""]
    return conclude(lines, missed, wrong)


if __name__ == "__main__":
    sys.exit(main())
