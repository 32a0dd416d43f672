#!/usr/bin/env python3
"""Merge the CUDA benchmark's and the PyTorch baseline's JSON into one markdown table, with the
issue's targets checked:
  chunk_grad_in_forward >= 60% of the card's measured bf16 rate over its 3 GEMM passes,
  chunk_recompute >= 60% over its 5, both faster than the PyTorch chunked baseline with at most a
  quarter of its peak bytes, and peak transient bytes <= 2 GiB at chunk 2048.

  python3 bench/cuda/summarize.py CUDA.json TORCH.json > results.md
(TORCH.json may be missing: the PyTorch columns are then empty.)"""
import json
import os
import sys

GIB = 2 ** 30


def load(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def yes(ok):
    return "yes" if ok else "**NO**"


def main():
    cuda = load(sys.argv[1])
    torch = load(sys.argv[2] if len(sys.argv) > 2 else None)
    if cuda is None:
        print("no CUDA benchmark results")
        return 1
    lines = [f"# CUDA loss head, T {cuda['rows']}, H {cuda['hidden']}, V {cuda['vocab']}", "",
             f"Device: {cuda['device']}.", "",
             f"Measured bf16 rate (8192^3, random data): cuBLAS {cuda['card_bf16_tflops']:.1f} TFLOP/s"
             + (f", PyTorch {torch['card_bf16_tflops']:.1f} TFLOP/s (torch {torch['torch']})." if torch else "."), ""]
    lines += ["| product | ms | TFLOP/s |", "|---|---:|---:|"]
    for g in cuda["gemm_shapes"]:
        lines.append(f"| {g['what']} | {g['ms']:.3f} | {g['tflops']:.1f} |")
    lines.append("")
    tch = torch["chunked"] if torch else None
    lines += ["| implementation | chunk | ms fwd+bwd | GEMM passes | GEMM TFLOP/s | % of card | >= 60% | "
              "peak transient GiB | peak loss-head GiB | cudaMemGetInfo GiB | vs torch chunked: speed | memory | "
              "loss |", "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in cuda["runs"]:
        pct = 100 * r["fraction_of_card_rate"]
        target = "" if r["policy"] == "materialize" else yes(pct >= 60)
        transient = r["peak_transient_bytes"] / GIB
        if r["chunk"] == 2048 and r["policy"] != "materialize":
            transient_cell = f"{transient:.3f} ({yes(r['peak_transient_bytes'] <= 2 * GIB)} <= 2)"
        else:
            transient_cell = f"{transient:.3f}"
        speed = memory = ""
        if tch and r["policy"] != "materialize":
            speed = f"{tch['ms_median'] / r['ms_median']:.2f}x ({yes(r['ms_median'] < tch['ms_median'])})"
            if tch["peak_bytes_above_inputs"] > 0:
                ratio = r["peak_loss_head_bytes"] / tch["peak_bytes_above_inputs"]
                memory = f"{ratio:.3f} ({yes(ratio <= 0.25)} <= 1/4)"
        lines.append(f"| CUDA {r['policy']} | {r['chunk']} | {r['ms_median']:.1f} | {r['gemm_passes']} | "
                     f"{r['gemm_tflops']:.1f} | {pct:.1f} | {target} | {transient_cell} | "
                     f"{r['peak_loss_head_bytes'] / GIB:.3f} | {r['device_used_above_inputs_bytes'] / GIB:.3f} | "
                     f"{speed} | {memory} | {r['loss']:.6f} |")
    if torch:
        flops = 2.0 * cuda["rows"] * cuda["vocab"] * cuda["hidden"]
        lines.append(f"| PyTorch checkpointed chunks | {tch['chunk']} | {tch['ms_median']:.1f} | 5 | "
                     f"{5 * flops / (tch['ms_median'] * 1e-3) / 1e12:.1f} | | | | "
                     f"{tch['peak_bytes_above_inputs'] / GIB:.3f} | | | | {tch['loss']:.6f} |")
        for m in torch["materialized"]:
            if "out_of_memory" in m:
                lines.append(f"| PyTorch materialized, T {m['rows']} | - | out of memory | | | | | | | | | | |")
            else:
                mflops = 2.0 * m["rows"] * cuda["vocab"] * cuda["hidden"]
                lines.append(f"| PyTorch materialized, T {m['rows']} | - | {m['ms_median']:.1f} | 3 | "
                             f"{3 * mflops / (m['ms_median'] * 1e-3) / 1e12:.1f} | | | | "
                             f"{m['peak_bytes_above_inputs'] / GIB:.3f} | | | | {m['loss']:.6f} |")
        first = cuda["runs"][0]
        rel = abs(first["loss"] - tch["loss"]) / abs(tch["loss"])
        lines += ["", f"Same data (Philox, seed {cuda['seed']}); loss CUDA {first['loss']:.6f} vs PyTorch "
                      f"{tch['loss']:.6f}: relative difference {rel:.2e} (both round logits to bf16)."]
    lines += ["", "Peak loss-head bytes: everything the loss head allocated (counted by category: transient, "
                  "loss_saved, gradients = dL/dY in fp32, outputs), inputs excluded; PyTorch: "
                  "max_memory_allocated above the inputs. cudaMemGetInfo: device bytes in use after the runs "
                  "above those before (the allocator's pool trimmed first)."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
