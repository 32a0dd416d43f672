#!/usr/bin/env python3
"""The committed goldens read and checked outside C++, as a PyTorch or numpy user would.

1. Each golden is parsed by a minimal safetensors reader written here from the format's
   description (8-byte little-endian header length, JSON header, raw little-endian C-order data),
   independent of the C++ reader.
2. SPEC §4 and §5 are recomputed in numpy from the stored tensors alone: the weights w and w01
   from the tokens, loss mask, anchors and keep flags; then from the stored Y (output/hidden), the
   teacher rows G[a_n + k - 1] and W_lm the logsumexp, the per-row hybrid loss, loss, ce, kl,
   accuracy and W. Each must match the golden within 1e-12, relative to at least the size of the
   log-partition functions (the C++ check's floor).
3. The Python example of golden/README.md runs as written, against a stand-in for the
   functions of the `safetensors` package it uses (that package is not installed here); the
   stand-in also serves tests/golden/golden_compare_example.py.

Exit 0 when all pass, 1 on a mismatch, 77 (skipped) when numpy is not installed.
"""
import json
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

SOURCE = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-12
DTYPES = {"F64": "<f8", "I64": "<i8"}


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[8 + length + begin : 8 + length + end]
        tensors[name] = np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return metadata, tensors


def logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[..., 0]


def relative_error(mine, ref, floor=0.0):
    mine, ref = np.asarray(mine, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if mine.shape != ref.shape:
        return np.inf
    diff = np.max(np.abs(mine - ref), initial=0.0)
    scale = max(np.max(np.abs(ref), initial=0.0), floor)
    return 0.0 if diff == 0 else (diff / scale if scale > 0 else np.inf)


def spec_loss_outputs(config, t):
    """SPEC §4 weights and SPEC §5 hybrid loss from the stored inputs and Y."""
    x, m = t["input/tokens"], t["input/loss_mask"]
    anchors, keep = t["input/anchors"], t["input/keep"]
    G, W_lm, Y = t["input/teacher_hidden"], t["frozen/lm_head.weight"], t["output/hidden"]
    nseq, S = x.shape
    N, B = anchors.shape[1], config["block_size"]
    gamma = config["loss_decay_gamma"]
    h, s, tau = config["hard_weight"], config["soft_weight"], config["temperature"]

    w = np.zeros((nseq, N * B))
    w01 = np.zeros((nseq, N * B), dtype=bool)
    label = np.zeros((nseq, N * B), dtype=np.int64)
    teacher = np.zeros((nseq, N * B, G.shape[2]))
    for b in range(nseq):
        for n in range(N):
            for k in range(1, B):
                p, i = anchors[b, n] + k, n * B + k
                if keep[b, n] == 1 and p < S and m[b, p] == 1:
                    w01[b, i] = True
                    w[b, i] = 1.0 if gamma is None else np.exp(-(k - 1) / gamma)
                    label[b, i] = x[b, p]
                    teacher[b, i] = G[b, p - 1]

    z = Y @ W_lm.T
    t_logits = teacher @ W_lm.T
    lse_z, lse_zt, lse_tt = logsumexp(z), logsumexp(z / tau), logsumexp(t_logits / tau)
    log_q = t_logits / tau - lse_tt[..., None]
    log_p_tau = z / tau - lse_zt[..., None]
    ce = lse_z - np.take_along_axis(z, label[..., None], axis=-1)[..., 0]
    kl = (np.exp(log_q) * (log_q - log_p_tau)).sum(axis=-1)
    token_loss = h * ce + s * tau * tau * kl
    weight_sum = w.sum()
    correct = (z.argmax(axis=-1) == label) & w01
    magnitude = np.max(np.where(w01, 1 + np.abs(lse_z) + np.abs(lse_zt) + np.abs(lse_tt), 0.0))
    return {
        "output/weights": (w, 0.0),
        "output/weight_sum": (weight_sum, 0.0),
        "output/lse": (np.where(w01, lse_z, 0.0), magnitude),
        "output/token_loss": (np.where(w01, token_loss, 0.0), magnitude),
        "output/loss": ((w * token_loss).sum() / weight_sum, magnitude),
        "output/ce": ((w * ce).sum() / weight_sum, magnitude),
        "output/kl": ((w * kl).sum() / weight_sum, magnitude),
        "output/accuracy": (correct.sum() / max(w01.sum(), 1), 0.0),
    }


def check_goldens():
    failed = 0
    files = sorted((SOURCE / "golden" / "data").glob("*.safetensors"))
    if not files:
        print(f"FAIL: no goldens in {SOURCE / 'golden' / 'data'}")
        return 1
    for path in files:
        metadata, tensors = read_safetensors(path)
        assert metadata["format"] == "dflash-golden", path
        config = json.loads(metadata["config"])
        for name, (mine, floor) in spec_loss_outputs(config, tensors).items():
            err = relative_error(mine, tensors[name], floor)
            ok = err <= TOLERANCE
            failed += not ok
            print(f"{path.name:30s} {name:20s} {err:10.3e} {'PASS' if ok else 'FAIL'}")
    return failed


# A stand-in for the parts of the `safetensors` package the README examples use (load_file,
# save_file, safe_open(...).metadata(), for numpy and, where torch is installed, torch), written
# from the format's description. Files it writes are checked by the C++ reader when compared.
STAND_IN = '''
import json, struct
import numpy as _np
_KINDS = {"F64": "<f8", "F32": "<f4", "I64": "<i8"}
def _read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    return meta, {k: _np.frombuffer(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                    dtype=_KINDS[v["dtype"]]).reshape(v["shape"]) for k, v in header.items()}
def _write(path, entries, metadata=None):
    """entries: {name: (dtype name, shape, bytes)}"""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in sorted(entries):
        dtype, shape, raw = entries[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
def _numpy_entry(a):
    a = _np.asarray(a)  # keeps 0-d arrays 0-d (ascontiguousarray would make them [1])
    name = {_np.dtype("<f8"): "F64", _np.dtype("<f4"): "F32", _np.dtype("<i8"): "I64"}[a.dtype.newbyteorder("<")]
    return name, a.shape, a.astype(_KINDS[name]).tobytes()
class _Open:
    def __init__(self, path): self._meta = _read(path)[0]
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def metadata(self): return self._meta
def safe_open(path, framework, device="cpu"):
    assert framework in ("np", "pt")
    return _Open(path)
'''

STAND_IN_NUMPY = '''
from . import _read, _write, _numpy_entry
def load_file(path):
    return _read(path)[1]
def save_file(tensors, path, metadata=None):
    _write(path, {name: _numpy_entry(a) for name, a in tensors.items()}, metadata)
'''

STAND_IN_TORCH = '''
import torch
from . import _read, _write, _numpy_entry
def load_file(path, device="cpu"):
    return {name: torch.from_numpy(a.copy()) for name, a in _read(path)[1].items()}
def _entry(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return "BF16", tuple(t.shape), t.view(torch.int16).numpy().astype("<i2").tobytes()
    return _numpy_entry(t.numpy())
def save_file(tensors, path, metadata=None):
    _write(path, {name: _entry(t) for name, t in tensors.items()}, metadata)
'''


def install_stand_in(directory):
    """Writes the stand-in `safetensors` package into `directory` (put it on PYTHONPATH)."""
    package = pathlib.Path(directory) / "safetensors"
    package.mkdir()
    (package / "__init__.py").write_text(STAND_IN)
    (package / "numpy.py").write_text(STAND_IN_NUMPY)
    (package / "torch.py").write_text(STAND_IN_TORCH)


def readme_python_block(marker):
    """The python block of golden/README.md that follows `<!-- example: MARKER -->`."""
    readme = (SOURCE / "golden" / "README.md").read_text()
    blocks = re.findall(r"<!-- example: " + re.escape(marker) + r" -->\n```python\n(.*?)```", readme, flags=re.S)
    if len(blocks) != 1:
        raise SystemExit(f"FAIL: golden/README.md has {len(blocks)} python blocks marked '{marker}', expected 1")
    return blocks[0]


def check_readme_example():
    with tempfile.TemporaryDirectory() as tmp:
        install_stand_in(tmp)
        (pathlib.Path(tmp) / "example.py").write_text(readme_python_block("numpy-golden"))
        run = subprocess.run([sys.executable, str(pathlib.Path(tmp) / "example.py")], cwd=SOURCE,
                             env={"PYTHONPATH": tmp}, capture_output=True, text=True)
    print(run.stdout + run.stderr)
    if run.returncode != 0 or not re.search(r"^\d+ PASS, 0 FAIL$", run.stdout, flags=re.M):
        print("FAIL: the README example did not run to '<n> PASS, 0 FAIL'")
        return 1
    lse_line = re.search(r"output/lse  rel err (\S+)", run.stdout)
    if lse_line is None or float(lse_line.group(1)) > TOLERANCE:
        print("FAIL: the README example's lse does not match the golden")
        return 1
    return 0


if __name__ == "__main__":
    failures = check_goldens() + check_readme_example()
    print(f"{'all passed' if failures == 0 else f'{failures} failed'}")
    sys.exit(1 if failures else 0)
