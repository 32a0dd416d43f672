#!/usr/bin/env python3
"""bench/cuda/drafter_step_torch.py's step (eager attention, float64, on the CPU) against
bench/reference/torch_reference.py's drafter_case (the float64 PyTorch step that
reference_vs_torch_check holds to the C++ reference), on one tiny problem with the anchors and
block rows of libdflash_bench_data.so: same loss, same gradient of every parameter.

  drafter_step_torch_check.py LIB CONFIG

The mask handed to drafter_case is written here from SPEC 3 pair by pair, independently of the
peer's DFlashMask. Anchor slots outnumber the candidates, so unkept blocks (rows that see nothing)
are covered. Then the script end to end as ci/gpu runs it, on the CPU in bf16 at CONFIG, and its
JSON through summarize_step.py. Exit 0 when all agree, 1 when not, 77 (skipped) where torch cannot
be imported.
"""
import argparse
import copy
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as error:
    print(f"drafter_step_torch_check.py: SKIPPED, torch cannot be imported: {error}")
    sys.exit(77)

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(root, "bench", "cuda"))
sys.path.insert(0, os.path.join(root, "bench", "reference"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drafter_step_torch as peer  # noqa: E402
import summarize_check  # noqa: E402
import summarize_step_check  # noqa: E402
import torch_reference  # noqa: E402

# Both steps are float64 except the peer's loss head (loss_head_torch.hybrid_loss_sums), which
# computes logits and their softmaxes in fp32 as a bf16 user would: relative error ~1e-7 per
# logit, so 1e-5 relative on the loss and on each gradient's L2 norm of the difference leaves
# room for the accumulation over rows, while a wrong mask entry, window edge, RoPE angle or
# norm changes them by far more.
TOLERANCE = 1e-5


def spec_visible(anchors, keep, S, B, sliding, window):
    """SPEC 3, one (query, key) pair at a time: [T, S + T] of 0/1."""
    N = len(anchors)
    T = N * B
    visible = torch.zeros(T, S + T, dtype=torch.int64)
    for n in range(N):
        if not keep[n]:
            continue
        a = int(anchors[n])
        for k in range(B):
            for j in range(S):
                visible[n * B + k, j] = int(j < a and (not sliding or j >= a + k - (window - 1)))
            for kb in range(B):
                visible[n * B + k, S + n * B + kb] = int(not sliding or kb <= k)
    return visible


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lib")
    p.add_argument("config")
    args = p.parse_args()
    with open(args.config) as f:
        c = json.load(f)
    S = 12
    c["max_anchors"] = 12  # S = 12 with a prompt of 3 leaves 8 candidates: 4 slots unkept
    c["loss_chunk_rows"] = 7  # chunks that do not divide T
    lib = peer.load_library(args.lib)
    torch.manual_seed(0)
    model = peer.Drafter(c).to(dtype=torch.float64)
    x = peer.make_inputs(argparse.Namespace(context=S, seed=5), c, lib, model, "cpu", torch.float64)
    with torch.no_grad():  # norm weights away from 1, so that their gradients matter
        for _, q in model.named_parameters():
            if q.dim() == 1:
                q.add_(0.1 * torch.rand(q.shape, dtype=torch.float64))
    keep = x["keep"].tolist()
    assert 0 < sum(keep) < len(keep), f"keep {keep}: the check needs kept and unkept blocks"
    T = x["tokens"].shape[0]
    masks = peer.layer_masks(x, S, c)  # the peer's own, as its main() builds them
    loss = peer.drafter_step(model, x, peer.Attention("eager", masks, T), c, c["loss_chunk_rows"])[0]
    grads = {name: q.grad.clone() for name, q in model.named_parameters()}

    names = [name for name, _ in model.named_parameters()]
    tensors = {name: q.detach().clone() for name, q in model.named_parameters()}
    tensors.update({"target_features": x["features"], "block_input": x["embed"][x["tokens"]],
                    "block_positions": x["positions"], "teacher_hidden": x["teacher"], "lm_head": x["lm_head"],
                    "labels": x["labels"], "weights": x["weights"].double(), "valid": x["valid"].to(torch.uint8)})
    for l, t in enumerate(c["layer_types"]):
        tensors[f"visible.{l}"] = spec_visible(x["anchors"].tolist(), keep, S, c["block_size"],
                                               t == "sliding_attention", c["sliding_window"])
    scalars = {k: c[k] for k in ("rms_norm_eps", "rope_theta", "num_attention_heads", "num_key_value_heads",
                                 "head_dim", "num_hidden_layers", "temperature", "hard_weight", "soft_weight")}
    # W from the weights (decaying with gamma), not the peer's own: its normaliser is under test too
    W = float(x["weights"].double().sum())
    scalars.update(parameters=names, weight_sum=W)
    ref_loss, ref_grads = torch_reference.drafter_case(tensors, scalars)

    failures = []
    if not abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss):
        failures.append(f"loss {loss!r} vs reference {ref_loss!r}")
    for name, ref in zip(names, ref_grads):
        error = float((grads[name] - ref).norm()) / max(float(ref.norm()), 1e-300)
        if not error <= TOLERANCE:
            failures.append(f"gradient of {name}: relative L2 difference {error:.3e}")
    print(f"drafter_step_torch_check.py: loss {loss:.12f} vs {ref_loss:.12f}, {len(names)} gradients: "
          + ("agree" if not failures else "DISAGREE"))
    failures += script_end_to_end(args.lib, args.config)
    for f in failures:
        print(f"drafter_step_torch_check.py: {f}")
    return 1 if failures else 0


def script_end_to_end(lib, config):
    """The script as ci/gpu runs it, on the CPU in bf16 at the config (context 64): a finite loss, its
    JSON, and that JSON through summarize_step.py beside a CUDA result of the same loss and
    gradient norms (summarize_step_check.py's, on target): correctness PASS."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "torch.json")
        p = subprocess.run([sys.executable, os.path.join(root, "bench", "cuda", "drafter_step_torch.py"), "--device",
                            "cpu", "--lib", lib, "--config", config, "--context", "64", "--reps", "1", "--json", out],
                           capture_output=True, text=True)
        print(p.stdout.strip())
        if p.returncode != 0 or not os.path.exists(out):
            return [f"drafter_step_torch.py --device cpu: exit {p.returncode}\n{p.stdout}{p.stderr}"]
        with open(out) as f:
            result = json.load(f)
    if not math.isfinite(result.get("loss", math.nan)) or not result.get("grad_norms"):
        return [f"drafter_step_torch.py's JSON: {json.dumps(result)[:400]}"]
    cuda = copy.deepcopy(summarize_step_check.GOOD_CUDA)
    cuda["parameters"] = list(result["grad_norms"])
    for r in cuda["runs"]:
        r.update(loss=result["loss"], grad_norms=list(result["grad_norms"].values()),
                 ms_median=result["ms_median"] / 2)
    rc, report, errors = summarize_check.summarize(cuda, result, summarize_step_check.SCRIPT)
    if not summarize_check.concluded(rc, report, 0):
        return [f"summarize_step.py on the peer's JSON: exit {rc}\n{report}{errors}"]
    return []


if __name__ == "__main__":
    sys.exit(main())
