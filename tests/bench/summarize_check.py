#!/usr/bin/env python3
"""bench/cuda/summarize.py's verdicts on synthetic results of the loss-head benchmark: on target and
correct (exit 0), each performance target missed on its own (exit 3, the target named), a failed
full-scale gate, the loss beyond the bound, the PyTorch baseline missing or no CUDA run (exit 1).
Needs only python3.

  summarize_check.py

cuda_results() holds exactly the keys bench/cuda/loss_head_bench.cpp's write_json spells (read
from its source here), so that a key renamed on one side only fails here, not on the GPU machine.
loss_head_torch_check.py feeds summarize.py the PyTorch baseline's own JSON beside it.
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "cuda", "summarize.py")
BENCHMARK = os.path.join(ROOT, "bench", "cuda", "loss_head_bench.cpp")
GIB = 2 ** 30


def written_keys(source):
    """Every key the benchmark's write_json spells (`\\"key\\":` in its C++ source)."""
    text = open(source).read()
    start = text.index("void write_json(")
    return set(re.findall(r'\\"(\w+)\\":', text[start:text.index("\n}\n", start)]))


def document_keys(document):
    """Every key of a JSON document, at any depth."""
    if isinstance(document, dict):
        return set(document) | set().union(*(document_keys(v) for v in document.values()))
    if isinstance(document, list):
        return set().union(*(document_keys(v) for v in document))
    return set()


def same_keys(document, source, failures):
    """The synthetic document spells the benchmark's keys, no more, no fewer."""
    written, synthetic = written_keys(source), document_keys(document)
    if not written:
        failures.append(f"no key found in {source}'s write_json")
    elif written != synthetic:
        failures.append(f"keys of {os.path.basename(source)} not in the synthetic document: "
                        f"{sorted(written - synthetic)}; in it but not written: {sorted(synthetic - written)}")


def cuda_run(policy, chunk, ms, loss):
    """One entry of write_json's "runs", on target at the target chunk."""
    return {"policy": policy, "chunk": chunk, "ms_median": ms, "ms": [ms], "gemm_passes": 5 if policy == "chunk_recompute" else 3,
            "model_tflops": 600.0, "executed_tflops": 650.0, "model_fraction_of_card_rate": 0.8,
            "executed_fraction_of_card_rate": 0.85, "gemm_ms": 0.9 * ms, "non_gemm_share": 0.1, "elementwise_ms": 0.03 * ms,
            "elementwise_share": 0.03, "gate_ok": True, "gate_worst_ratio": 0.4, "peak_transient_bytes": GIB,
            "peak_loss_saved_bytes": GIB // 4, "peak_gradients_bytes": GIB // 2, "peak_outputs_bytes": 2 ** 20,
            "peak_loss_head_bytes": 2 * GIB, "device_used_above_inputs_bytes": 2 * GIB, "loss": loss, "ce": loss,
            "kl": 0.1, "accuracy": 0.0}


def cuda_results(loss=12.0):
    """write_json's document, every target met, every run's loss `loss`."""
    return {"device": "NVIDIA H200, sm_90, 132 SMs, 143771 MiB", "rows": 32768, "hidden": 5120, "vocab": 248320,
            "seed": 20261129, "weight_sum": 1000.0, "weighted_rows": 31744, "valid_rows": 31744,
            "card_bf16_tflops": 750.0, "card_rate_ms": 1.5, "baseline_loss_tolerance": 1e-3,
            "targets": {"model_rate": 0.7, "elementwise_share": 0.05, "transient_bytes": 2 * GIB, "chunk": 2048},
            "gemm_shapes": [{"what": "8192^3", "m": 8192, "n": 8192, "k": 8192, "ms": 1.5, "tflops": 750.0}],
            "runs": [cuda_run("chunk_grad_in_forward", 2048, 100.0, loss), cuda_run("chunk_recompute", 2048, 140.0, loss),
                     cuda_run("materialize", 32768, 90.0, loss)]}


GOOD_TORCH = {"torch": "2.11", "device": "NVIDIA H200", "rows": 32768, "hidden": 5120, "vocab": 248320,
              "seed": 20261129, "card_bf16_tflops": 780.0, "weight_sum": 1000.0,
              "chunked": {"ms_median": 300.0, "ms": [300.0], "peak_bytes_above_inputs": 10 * GIB, "loss": 12.005,
                          "ce": 12.0, "kl": 0.1, "accuracy": 0.0, "chunk": 2048, "gemm_passes": 5},
              "materialized": [{"rows": 32768, "out_of_memory": "CUDA out of memory."},
                               {"rows": 16384, "ms_median": 120.0, "ms": [120.0], "peak_bytes_above_inputs": 60 * GIB,
                                "loss": 12.0, "ce": 12.0, "kl": 0.1, "accuracy": 0.0}]}


def summarize(cuda, torch, script=SCRIPT):
    """(exit code, stdout, stderr) of a summary script (summarize.py, summarize_step.py) on a CUDA
    and a PyTorch document (None: that file is missing)."""
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, "cuda.json"), os.path.join(d, "torch.json")]
        for path, data in zip(paths, (cuda, torch)):
            if data is not None:
                with open(path, "w") as f:
                    json.dump(data, f)
        p = subprocess.run([sys.executable, script] + paths, capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr


def concluded(rc, out, code):
    """The script ran to its verdict: exit `code` and, last, the correctness line that goes with it
    (a traceback also exits 1, but prints no verdict)."""
    lines = out.strip().splitlines()
    return rc == code and bool(lines) and lines[-1] == ("correctness: FAIL" if code == 1 else "correctness: PASS")


def verdicts(script, failures):
    """expect(what, cuda, torch, code, phrase): the script concludes with exit `code` and its
    report (stdout) says `phrase`, else a line goes to `failures`."""
    def expect(what, cuda, torch, code, phrase):
        rc, out, err = summarize(cuda, torch, script)
        if not concluded(rc, out, code) or phrase not in out:
            failures.append(f"{what}: exit {rc} (expected {code}), '{phrase}' {'found' if phrase in out else 'missing'}"
                            f"\n{out}{err}")
    return expect


def report(name, failures):
    """Prints the failures and the verdict line; the exit code."""
    for f in failures:
        print(f"{name}: {f}")
    print(f"{name}: " + ("every verdict as expected" if not failures else f"{len(failures)} wrong"))
    return 1 if failures else 0


def main():
    failures = []
    same_keys(cuda_results(), BENCHMARK, failures)
    expect = verdicts(SCRIPT, failures)

    good = cuda_results()
    expect("on target", good, GOOD_TORCH, 0, "correctness: PASS")
    expect("PyTorch's materialized run out of memory", good, GOOD_TORCH, 0, "PyTorch materialized, T 32768 | - | out of memory")

    def changed(run, **fields):
        c = copy.deepcopy(good)
        c["runs"][run].update(fields)
        return c

    expect("model-FLOP rate below the target", changed(0, model_fraction_of_card_rate=0.69), GOOD_TORCH, 3,
           "model-FLOP rate 69.0% < 70%")
    expect("elementwise share above the target", changed(0, elementwise_share=0.051), GOOD_TORCH, 3,
           "elementwise share 5.1% > 5%")
    expect("transient above 2 GiB", changed(0, peak_transient_bytes=2 * GIB + 1), GOOD_TORCH, 3, "transient")
    expect("more than 1/4 of PyTorch's peak", changed(0, peak_loss_head_bytes=3 * GIB), GOOD_TORCH, 3,
           "peak 0.300 of PyTorch's > 1/4")
    expect("a target missed off the target run only", changed(1, model_fraction_of_card_rate=0.1), GOOD_TORCH, 0,
           "performance targets: met")
    expect("the target chunk not measured", changed(0, chunk=512), GOOD_TORCH, 3, "chunk 2048 not measured")
    expect("a failed gate", changed(1, gate_ok=False, gate_worst_ratio=1.7), GOOD_TORCH, 1,
           "chunk_recompute chunk 2048: full-scale gate (worst ratio 1.70)")
    expect("the loss beyond the bound", changed(2, loss=12.03), GOOD_TORCH, 1, "materialize chunk 32768: loss")
    expect("the loss within the bound", changed(2, loss=12.011), GOOD_TORCH, 0, "correctness: PASS")
    expect("a NaN loss", changed(2, loss=float("nan")), GOOD_TORCH, 1, "materialize chunk 32768: loss nan")
    # the cells worked by hand: PyTorch's chunked 300 ms over the target run's 100 ms; the
    # materialized run at T 16384 does 3 products of 2 T V H = 1.2498e14 FLOPs in 120 ms
    expect("the speed-up over PyTorch", good, GOOD_TORCH, 0, "| CUDA chunk_grad_in_forward | 2048 | 100.0 |")
    expect("the speed-up over PyTorch", good, GOOD_TORCH, 0, "| 3.00x |")
    expect("PyTorch materialized at half T", good, GOOD_TORCH, 0, "| PyTorch materialized, T 16384 | - | 120.0 | 3 | | | 1041.5 |")
    expect("no PyTorch baseline", good, None, 1, "no PyTorch baseline")
    none = copy.deepcopy(good)
    none["runs"] = []
    expect("no CUDA run", none, GOOD_TORCH, 1, "no CUDA run completed")
    expect("no CUDA results", None, GOOD_TORCH, 1, "no CUDA benchmark results")
    return report("summarize_check.py", failures)


if __name__ == "__main__":
    sys.exit(main())
