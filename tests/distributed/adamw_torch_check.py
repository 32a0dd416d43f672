#!/usr/bin/env python3
"""Our optimizer step (TRAINING §12) against torch.optim.AdamW and torch.nn.utils.clip_grad_norm_.

Runs adamw_trace (four steps of clipping + schedule + AdamW on the tiny drafter's parameters under
seeded gradients), replays the same gradients through torch in float64 (matrices in a param group
with the weight decay, norm weights in one without; lr set per step from §12's schedule), and
compares the final parameters, exp_avg and exp_avg_sq tensor by tensor, and each step's norm.
Exits 77 (skipped) when torch is not importable; Debian: python3-torch.
"""
import json
import math
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIPPED: torch is not importable ({e}); install python3-torch")
    sys.exit(77)

# Both sides are float64 and evaluate the same formulas with a few operations in another order
# (torch's lerp for m, our b1 m + (1 - b1) g): SPEC §10's bound for the reference against itself.
TOLERANCE = 1e-12


def relative_error(a, b):
    diff = (a - b).abs().max().item()
    scale = b.abs().max().item()
    return 0.0 if diff == 0 else (diff / scale if scale > 0 else math.inf)


def learning_rate(t, c):
    lr, low, warm, total = c["learning_rate"], c["min_learning_rate"], c["warmup_steps"], c["total_steps"]
    if t < warm:
        return lr * (t + 1) / warm
    if t >= total:
        return low
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * (t - warm) / max(1, total - warm)))


def main():
    trace = json.loads(subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout)
    c = trace["training"]
    initial = torch.tensor(trace["initial"], dtype=torch.float64)
    params, offset = [], 0
    for t in trace["tensors"]:
        n = math.prod(t["shape"])
        params.append(torch.nn.Parameter(initial[offset:offset + n].clone().reshape(t["shape"])))
        offset += n
    decay = [p for p, t in zip(params, trace["tensors"]) if t["decay"]]
    plain = [p for p, t in zip(params, trace["tensors"]) if not t["decay"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=c["learning_rate"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_epsilon"])
    failures = 0
    for step, s in enumerate(trace["steps"]):
        g = torch.tensor(s["gradient"], dtype=torch.float64)
        offset = 0
        for p in params:
            p.grad = g[offset:offset + p.numel()].clone().reshape(p.shape)
            offset += p.numel()
        norm = torch.nn.utils.clip_grad_norm_(params, c["max_grad_norm"]).item()
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, c)
        opt.step()
        err = abs(norm - s["grad_norm"]) / norm
        lr_err = abs(learning_rate(step, c) - s["lr"]) / s["lr"]
        print(f"step {step}: norm {norm:.6g} (ours {s['grad_norm']:.6g}, rel err {err:.1e}), lr rel err {lr_err:.1e},"
              f" clipped {s['clipped']}")
        failures += err > TOLERANCE or lr_err > TOLERANCE
    final = {k: torch.tensor(v, dtype=torch.float64) for k, v in trace["final"].items()}
    clipped = [s["clipped"] for s in trace["steps"]]
    if not (any(clipped) and not all(clipped)):
        print(f"FAIL: clipping must be active in some steps and not in others: {clipped}")
        failures += 1
    offset = 0
    for p, t in zip(params, trace["tensors"]):
        n = p.numel()
        state = opt.state[p]
        for what, mine in (("params", p.detach().reshape(-1)), ("exp_avg", state["exp_avg"].reshape(-1)),
                           ("exp_avg_sq", state["exp_avg_sq"].reshape(-1))):
            err = relative_error(final[what][offset:offset + n], mine)
            if err > TOLERANCE:
                print(f"FAIL {what} of {t['name']}: relative error {err:.2e}")
                failures += 1
        offset += n
    print("PASS" if failures == 0 else f"{failures} FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
