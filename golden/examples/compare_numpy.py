"""A numpy implementation judged by `dflash golden compare`, end to end (golden/README.md).

Run from a directory holding configs/mid.json with DFLASH naming the binary; tested by
tests/golden/golden_compare_example.py.
"""
import json
import os
import subprocess
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

DFLASH = os.environ.get("DFLASH", "dflash")
golden_path, result_path = "mid.safetensors", "mid-result.safetensors"

# 1. A golden at the mid config: 1 sequence, S = 48 (T = 32 x 16 = 512 rows).
if not os.path.exists(golden_path):
    subprocess.run([DFLASH, "golden", "generate", "--config", "configs/mid.json", "--sequences", "1",
                    "--context", "48", "--out", golden_path], check=True)
g = load_file(golden_path)
with safe_open(golden_path, framework="np") as f:
    config = json.loads(f.metadata()["config"])


# 2. Your implementation, here SPEC §4-§5 in float32: weights, then the hybrid loss from Y.
def logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[..., 0]


def loss_head(config, g, dtype=np.float32):
    x, m, anchors, keep = g["input/tokens"], g["input/loss_mask"], g["input/anchors"], g["input/keep"]
    Y, G, W_lm = (g[k].astype(dtype) for k in ("output/hidden", "input/teacher_hidden", "frozen/lm_head.weight"))
    (nseq, S), N, B = x.shape, anchors.shape[1], config["block_size"]
    gamma, tau = config["loss_decay_gamma"], dtype(config["temperature"])
    h, s = dtype(config["hard_weight"]), dtype(config["soft_weight"])
    w = np.zeros((nseq, N * B), dtype)
    labelled = np.zeros((nseq, N * B), bool)
    label = np.zeros((nseq, N * B), np.int64)
    teacher = np.zeros((nseq, N * B, G.shape[2]), dtype)
    for b in range(nseq):
        for n in range(N):
            for k in range(1, B):  # k = 0 is the anchor itself: no label
                p, i = anchors[b, n] + k, n * B + k
                if keep[b, n] == 1 and p < S and m[b, p] == 1:
                    labelled[b, i], label[b, i], teacher[b, i] = True, x[b, p], G[b, p - 1]
                    w[b, i] = 1 if gamma is None else np.exp(-(k - 1) / gamma)
    z, t = Y @ W_lm.T, teacher @ W_lm.T
    lse_z, lse_zt, lse_tt = logsumexp(z), logsumexp(z / tau), logsumexp(t / tau)
    log_q, log_p = t / tau - lse_tt[..., None], z / tau - lse_zt[..., None]
    ce = lse_z - np.take_along_axis(z, label[..., None], axis=-1)[..., 0]
    kl = (np.exp(log_q) * (log_q - log_p)).sum(axis=-1)
    token_loss = h * ce + s * tau * tau * kl
    W = w.sum()
    correct = ((z.argmax(axis=-1) == label) & labelled).sum()
    return {
        "output/weights": w, "output/weight_sum": W,
        "output/lse": np.where(labelled, lse_z, 0), "output/token_loss": np.where(labelled, token_loss, 0),
        "output/loss": (w * token_loss).sum() / W, "output/ce": (w * ce).sum() / W, "output/kl": (w * kl).sum() / W,
        "output/accuracy": correct / max(labelled.sum(), 1),
    }


result = loss_head(config, g)
# Y and the gradients: the golden's, cast to float32 (your trunk's forward and backward go here).
for name in g:
    if name == "output/hidden" or name.startswith("grad/"):
        result[name] = g[name]

# 3. Write the result file: the golden's names, float32.
save_file({name: np.asarray(value, dtype=np.float32) for name, value in result.items()}, result_path)

# 4. Compare under the fp32 rule; the exit code is compare's (0: every tensor PASS).
sys.exit(subprocess.run([DFLASH, "golden", "compare", "--golden", golden_path, "--result", result_path,
                         "--rule", "fp32"]).returncode)
