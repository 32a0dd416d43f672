"""The same in PyTorch: the loss head in bf16, judged by `dflash golden compare --rule bf16`.

Run from a directory holding configs/mid.json with DFLASH naming the binary; tested by
tests/golden/golden_compare_example.py where torch is installed.
"""
import json
import os
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DFLASH = os.environ.get("DFLASH", "dflash")
golden_path, result_path = "mid.safetensors", "mid-result-torch.safetensors"
if not os.path.exists(golden_path):
    subprocess.run([DFLASH, "golden", "generate", "--config", "configs/mid.json", "--sequences", "1",
                    "--context", "48", "--out", golden_path], check=True)
g = load_file(golden_path)
with safe_open(golden_path, framework="pt") as f:
    config = json.loads(f.metadata()["config"])


class LossHead(torch.nn.Module):
    """SPEC §5 from the block rows' Y, labels, weights and teacher rows (bf16 logits, fp32 sums)."""

    def __init__(self, lm_head, h, s, tau):
        super().__init__()
        self.lm_head, self.h, self.s, self.tau = lm_head, h, s, tau

    def forward(self, Y, teacher, label, w, labelled):
        z = (Y @ self.lm_head.T).float()
        t = (teacher @ self.lm_head.T).float()
        log_q = torch.log_softmax(t / self.tau, dim=-1)
        ce = torch.logsumexp(z, -1) - z.gather(-1, label[..., None])[..., 0]
        kl = (log_q.exp() * (log_q - torch.log_softmax(z / self.tau, dim=-1))).sum(-1)
        token_loss = torch.where(labelled, self.h * ce + self.s * self.tau**2 * kl, 0.0)
        W = w.sum()
        return {"output/lse": torch.where(labelled, torch.logsumexp(z, -1), 0.0), "output/token_loss": token_loss,
                "output/loss": (w * token_loss).sum() / W, "output/ce": (w * ce).sum() / W,
                "output/kl": (w * kl).sum() / W, "output/weight_sum": W,
                "output/accuracy": ((z.argmax(-1) == label) & labelled).sum() / labelled.sum().clamp(min=1)}


# SPEC §4: labels, weights and teacher rows of every block row, from the stored anchors.
x, m, anchors, keep, G = g["input/tokens"], g["input/loss_mask"], g["input/anchors"], g["input/keep"], g["input/teacher_hidden"]
(nseq, S), N, B, gamma = x.shape, anchors.shape[1], config["block_size"], config["loss_decay_gamma"]
label = torch.zeros(nseq, N * B, dtype=torch.int64)
labelled = torch.zeros(nseq, N * B, dtype=torch.bool)
w = torch.zeros(nseq, N * B, dtype=torch.float32)
teacher = torch.zeros(nseq, N * B, G.shape[2], dtype=torch.float64)
for b in range(nseq):
    for n in range(N):
        for k in range(1, B):
            p, i = int(anchors[b, n]) + k, n * B + k
            if keep[b, n] == 1 and p < S and m[b, p] == 1:
                labelled[b, i], label[b, i], teacher[b, i] = True, x[b, p], G[b, p - 1]
                w[b, i] = 1.0 if gamma is None else torch.exp(torch.tensor(-(k - 1) / gamma))

head = LossHead(g["frozen/lm_head.weight"].bfloat16(), config["hard_weight"], config["soft_weight"], config["temperature"])
with torch.no_grad():
    result = head(g["output/hidden"].bfloat16(), teacher.bfloat16(), label, w, labelled)
result["output/weights"] = w
# Row statistics and losses in fp32 (as the CUDA loss head keeps them: bf16 would round lse by more
# than the rule allows); Y as a bf16 trunk would hand it over.
result = {name: value.float().contiguous() for name, value in result.items()}
result["output/hidden"] = g["output/hidden"].bfloat16().contiguous()
save_file(result, result_path)
sys.exit(subprocess.run([DFLASH, "golden", "compare", "--golden", golden_path, "--result", result_path,
                         "--rule", "bf16"]).returncode)
