#!/usr/bin/env python3
"""bench/cuda/loss_head_torch.py, the PyTorch baseline of the CUDA loss head, on the CPU, so that it
cannot rot between GPU runs (summarize.py holds the CUDA loss to within 1e-3 of its loss):

1. its step (loss_head_step: checkpointed chunks, the sums divided by W, dL/dY by backward) on its
   CPU data taken to float64 (the step still takes the logits' softmaxes in fp32), against bench/reference/torch_reference.py's loss_head_case (the
   float64 PyTorch loss head that reference_vs_torch_check holds to the C++ reference): the same
   loss and dL/dY; the chunked step equals the unchunked one; ce, kl and accuracy against the
   same sums written here from SPEC 5;
2. the script end to end (--device cpu, a small shape, --json), and its JSON through summarize.py
   beside a CUDA result of the same loss (tests/bench/summarize_check.py's): correctness PASS.

  loss_head_torch_check.py
Exit 0 when all agree, 1 when not, 77 (skipped) where torch cannot be imported.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as error:
    print(f"loss_head_torch_check.py: SKIPPED, torch cannot be imported: {error}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path.insert(0, os.path.join(root, "bench", "cuda"))
sys.path.insert(0, os.path.join(root, "bench", "reference"))
sys.path.insert(0, here)
import loss_head_torch as baseline  # noqa: E402
import summarize_check  # noqa: E402
import torch_reference  # noqa: E402

# The baseline computes the logits' softmaxes in fp32 (as a bf16 user would), the reference in
# float64: relative error ~1e-7 per logit, so 1e-5 relative on the loss and on dL/dY's L2 norm of
# the difference leaves room for the sums over rows and vocabulary, while a lost 1/W, tau^2, weight
# or row changes them by far more. Chunked against unchunked: the same fp32 rows, summed in
# another order.
TOLERANCE = 1e-5
CHUNK_TOLERANCE = 1e-6
T, H, V, CHUNK = 64, 32, 1000, 16
HYPER = {"tau": 0.7, "hard": 0.6, "soft": 0.4}


def relative(a, b):
    if torch.is_tensor(a):
        return float((a - b).norm() / b.norm())
    return abs(a - b) / abs(b) if b != 0 else abs(a)


def spec_sums(data, tau, hard, soft):
    """SPEC 5 row by row in float64: (ce, kl) per row and the accuracy over valid rows."""
    z = data["y"].detach() @ data["lm_head"].T
    t = data["g"] @ data["lm_head"].T
    log_p = torch.log_softmax(z, -1)
    log_q = torch.log_softmax(t / tau, -1)
    ce = -log_p[torch.arange(T), data["labels"]]
    kl = (log_q.exp() * (log_q - torch.log_softmax(z / tau, -1))).sum(-1)
    hits = ((z.argmax(-1) == data["labels"]) & data["valid"]).sum()
    return ce, kl, float(hits) / float(data["valid"].sum())


def check_step(failures):
    args = argparse.Namespace(device="cpu", hidden=H, vocab=V, seed=7, lib=None)
    data = baseline.make_data(args, T)
    data = {k: (v.detach().double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in data.items()}
    # Random labels hit almost never: every third row's label is made its argmax, so that the
    # accuracy counts hits (and the rows without a label must not count).
    with torch.no_grad():
        best = (data["y"] @ data["lm_head"].T).argmax(-1)
    data["labels"][::3] = best[::3]
    data["y"].requires_grad_(True)
    # W from the weights themselves, not the baseline's own: its normaliser is under test too (the
    # weights are not all 1, so a count of valid rows would differ)
    W = float(data["weights"].sum())
    if W == float(data["valid"].sum()):
        failures.append("the weights sum to the count of valid rows: a wrong normaliser would not show")
    s = {"temperature": HYPER["tau"], "hard_weight": HYPER["hard"], "soft_weight": HYPER["soft"], "weight_sum": W}
    x = {"hidden": data["y"].detach(), "teacher_hidden": data["g"], "lm_head": data["lm_head"], "labels": data["labels"],
         "weights": data["weights"], "valid": data["valid"].long()}
    ref_loss, (ref_grad,) = torch_reference.loss_head_case(x, s)

    loss, ce, kl, accuracy = baseline.loss_head_step(data, CHUNK, **HYPER)
    grad = data["y"].grad.clone()
    whole = baseline.loss_head_step(data, T, **HYPER)
    whole_grad = data["y"].grad.clone()
    row_ce, row_kl, spec_accuracy = spec_sums(data, **HYPER)
    w = data["weights"]
    expected = {"loss": (loss, ref_loss, TOLERANCE), "dL/dY": (grad, ref_grad, TOLERANCE),
                "ce": (ce, float((w * row_ce).sum()) / W, TOLERANCE),
                "kl": (kl, float((w * row_kl).sum()) / W, TOLERANCE),
                "accuracy": (accuracy, spec_accuracy, 0.0),
                "loss, chunks against one": (loss, whole[0], CHUNK_TOLERANCE),
                "dL/dY, chunks against one": (grad, whole_grad, CHUNK_TOLERANCE)}
    for name, (got, want, bound) in expected.items():
        err = relative(got, want)
        if not err <= bound:
            failures.append(f"{name}: relative error {err:.2e} > {bound:g}")
    print(f"loss_head_torch_check.py: step of {T} rows in chunks of {CHUNK}: loss {loss:.12f} vs the reference's "
          f"{ref_loss:.12f}, dL/dY relative error {relative(grad, ref_grad):.1e}")


def run_baseline(failures, what, extra):
    """loss_head_torch.py on the CPU at this file's shape with `extra` flags: its JSON, or None (and
    a failure named by `what`)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "torch.json")
        p = subprocess.run([sys.executable, os.path.join(root, "bench", "cuda", "loss_head_torch.py"), "--device", "cpu",
                            "--rows", str(T), "--hidden", str(H), "--vocab", str(V), "--chunk", str(CHUNK), "--reps", "1",
                            *extra, "--json", out], capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(out):
            failures.append(f"loss_head_torch.py {what}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return None
        with open(out) as f:
            return json.load(f)


def check_script(failures):
    result = run_baseline(failures, "--device cpu", [])
    if result is None:
        return
    chunked, materialized = result["chunked"], result["materialized"]
    if not (math.isfinite(chunked["loss"]) and chunked["chunk"] == CHUNK and materialized
            and materialized[0].get("rows") == T and math.isfinite(materialized[0].get("loss", math.nan))):
        failures.append(f"loss_head_torch.py's JSON: {json.dumps(result)[:400]}")
        return
    if relative(materialized[0]["loss"], chunked["loss"]) > CHUNK_TOLERANCE:
        failures.append(f"materialized loss {materialized[0]['loss']} vs chunked {chunked['loss']}")
    cuda = summarize_check.cuda_results(loss=chunked["loss"])
    rc, report, errors = summarize_check.summarize(cuda, result)
    if not summarize_check.concluded(rc, report, 0):
        failures.append(f"summarize.py on the baseline's JSON: exit {rc}\n{report}{errors}")


def check_shape_flags(failures):
    """ci/gpu hands DFLASH_BENCH_SHAPE to bench_cuda_loss_head and to this baseline alike: every flag
    the CUDA benchmark takes must be taken here (--no-materialize skips the materialized runs)."""
    result = run_baseline(failures, "with the CUDA benchmark's flags",
                          ["--chunks", f"{CHUNK},{CHUNK // 2}", "--no-materialize", "--seed", "7"])
    if result is not None and (result["materialized"] or not math.isfinite(result["chunked"]["loss"])):
        failures.append(f"loss_head_torch.py --no-materialize: {json.dumps(result)[:400]}")


def main():
    failures = []
    check_step(failures)
    check_script(failures)
    check_shape_flags(failures)
    for f in failures:
        print(f"loss_head_torch_check.py: {f}")
    print("loss_head_torch_check.py: " + ("the baseline agrees" if not failures else f"{len(failures)} wrong"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
