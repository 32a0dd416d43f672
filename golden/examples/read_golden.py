"""Reads a golden with numpy, checks the lse of its stored Y and compares gradients (golden/README.md).

Run from the repository root; tested by tests/golden/golden_numpy_check.py.
"""
import json

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

path = "golden/data/gqa-sliding.safetensors"
golden = load_file(path)  # {name: np.ndarray}: float64 and int64
with safe_open(path, framework="np") as f:
    meta = f.metadata()  # format, version, case, config, seed, step (all strings)
assert meta["format"] == "dflash-golden" and meta["version"] == "1"
config = json.loads(meta["config"])  # Hugging Face fields + training fields
step = int(meta["step"])


def relative_error(mine, ref, floor=0.0):
    """max |mine - ref| / max(max |ref|, floor): the norm-wise relative error of SPEC §10."""
    mine, ref = np.asarray(mine, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if mine.shape != ref.shape:
        return np.inf
    diff = np.max(np.abs(mine - ref), initial=0.0)
    scale = max(np.max(np.abs(ref), initial=0.0), floor)
    return 0.0 if diff == 0 else (diff / scale if scale > 0 else np.inf)


# 1. An output numpy computes from the stored Y: lse of the student logits z = Y W_lm^T on the
#    labelled rows (weight > 0); the golden stores 0 on the others.
Y = golden["output/hidden"]                      # [nseq, T, H]
z = Y @ golden["frozen/lm_head.weight"].T        # [nseq, T, V]
top = z.max(axis=-1, keepdims=True)
lse = (top + np.log(np.exp(z - top).sum(axis=-1, keepdims=True)))[..., 0]
lse = np.where(golden["output/weights"] > 0, lse, 0.0)
print(f"output/lse  rel err {relative_error(lse, golden['output/lse'], floor=1.0):.2e}")

# 2. Your gradients. Run your step on golden["input/..."], golden["frozen/..."] and
#    golden["param/<name>"] with this config and step, using the stored anchors and keep flags,
#    and fill {name: dL/dparam}. (Here: the golden's own, so the example runs as is.)
names = sorted(k[len("grad/"):] for k in golden if k.startswith("grad/"))
my_grads = {name: golden["grad/" + name].copy() for name in names}

# A float64 implementation that sums in another order typically differs by ~1e-14..1e-12;
# the reference itself is held to 1e-12 (SPEC §10).
tolerance = 1e-10
failed = 0
for name in names:
    err = relative_error(my_grads[name], golden["grad/" + name])
    failed += err > tolerance
    print(f"{name:45s} {err:.2e} {'PASS' if err <= tolerance else 'FAIL'}")
print(f"{len(names) - failed} PASS, {failed} FAIL")
