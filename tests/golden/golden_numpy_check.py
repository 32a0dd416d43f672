#!/usr/bin/env python3
"""The committed goldens read and checked outside C++, as a PyTorch or numpy user would.

1. Each golden is parsed by a minimal safetensors reader written here from the format's
   description (8-byte little-endian header length, JSON header, raw little-endian C-order data),
   independent of the C++ reader.
2. The whole SPEC §3 forward is recomputed in numpy from the stored inputs and parameters:
   Y (output/hidden) of every golden, with SPEC §6's dropout masks drawn by a Philox4x32-10
   written here in uint32 arithmetic (checked against the three known answers of SPEC §6 first).
   It must match within 1e-12 (norm-wise relative), so a trunk bug that the C++ tests cannot see
   because they compare the implementation with itself (a RoPE position, the GQA head map, a
   dropout element index) fails here, even in goldens regenerated with the bug.
3. SPEC §4 and §5 are recomputed in numpy from the stored tensors alone: the weights w and w01
   from the tokens, loss mask, anchors and keep flags; then from the stored Y (output/hidden), the
   teacher rows G[a_n + k - 1] and W_lm the logsumexp, the per-row hybrid loss, loss, ce, kl,
   accuracy and W. Each must match the golden within 1e-12, relative to at least the size of the
   log-partition functions (the C++ check's floor).
4. The loss head at temperatures other than the goldens' own: for each golden and several τ the
   SPEC §5 outputs are recomputed twice in numpy (log-softmax form, and the streaming-statistics
   form every implementation uses: running max and sum-exp over vocabulary chunks), and the
   gradient ∂ℓ/∂z of SPEC §5 is checked against central differences of ℓ. With --dflash, the
   golden is also rewritten with that τ and the numpy outputs, and `dflash golden check --impl
   reference-loss-head` must accept it, and must reject the same file claiming another τ.
5. The Python example of golden/README.md runs as written, against a stand-in for the
   functions of the `safetensors` package it uses (that package is not installed here); the
   stand-in also serves tests/golden/golden_compare_example.py.

Usage: golden_numpy_check.py [SOURCE] [--dir GOLDEN_DIR] [--dflash BINARY]
(GOLDEN_DIR defaults to SOURCE/golden/data; golden/examples/read_golden.py always reads SOURCE's goldens.)

Exit 0 when all pass, 1 on a mismatch, 77 (skipped) when numpy is not installed.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

# The source tree: this file's, unless the command line names another (importers such as
# golden_compare_example.py use this default).
SOURCE = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-12  # SPEC §10: the reference against itself (another order of the same float64 sums)
DTYPES = {"F64": "<f8", "I64": "<i8"}


def read_safetensors(path):
    """(metadata, {name: array}): the stand-in's reader (STAND_IN below), the only one here."""
    return _STAND_IN["_read"](path)


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


# --- SPEC §6: Philox4x32-10 and the dropout masks, in uint32 arithmetic -----------------------

PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
PHILOX_BUMP = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
LOW32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key):
    """Philox4x32-10 of Random123. counter: four uint32 arrays (broadcast together); key: two
    uint32 scalars. Returns the four output words as uint32 arrays."""
    c = [np.asarray(w, dtype=np.uint32) for w in np.broadcast_arrays(*counter)]
    k = [np.uint32(key[0]), np.uint32(key[1])]
    for round_index in range(10):
        if round_index > 0:
            k = [np.uint32((int(k[0]) + int(PHILOX_BUMP[0])) & 0xFFFFFFFF),
                 np.uint32((int(k[1]) + int(PHILOX_BUMP[1])) & 0xFFFFFFFF)]
        product0 = c[0].astype(np.uint64) * PHILOX_M[0]
        product1 = c[2].astype(np.uint64) * PHILOX_M[1]
        hi0, lo0 = (product0 >> np.uint64(32)).astype(np.uint32), (product0 & LOW32).astype(np.uint32)
        hi1, lo1 = (product1 >> np.uint64(32)).astype(np.uint32), (product1 & LOW32).astype(np.uint32)
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
    return c


PHILOX_KNOWN_ANSWERS = [  # SPEC §6: (counter, key) -> words
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def check_philox():
    failed = 0
    for counter, key, expected in PHILOX_KNOWN_ANSWERS:
        words = tuple(int(w) for w in philox4x32_10(counter, key))
        ok = words == expected
        failed += not ok
        print(f"philox known answer {' '.join(f'{w:08x}' for w in words)} {'PASS' if ok else 'FAIL'}")
    return failed


def rng_stream(sequence, layer, site):
    return (sequence << 12) | (layer << 4) | site


def dropout_factors(p, seed, step, stream, count):
    """Factor of elements 0..count-1 of one site (SPEC §6): 0 where dropped, 1/(1-p) where kept."""
    if p == 0:
        return np.ones(count)
    e = np.arange(count, dtype=np.uint64)
    block = e // np.uint64(4)
    words = philox4x32_10(((block & LOW32).astype(np.uint32), (block >> np.uint64(32)).astype(np.uint32),
                           np.uint32(stream), np.uint32(step)),
                          (seed & 0xFFFFFFFF, seed >> 32))
    word = np.choose((e % np.uint64(4)).astype(np.int64), words)
    threshold = int(np.floor(p * 2.0**32))
    return np.where(word.astype(np.int64) < threshold, 0.0, 1.0 / (1.0 - p))


# --- SPEC §3: the drafter forward ----------------------------------------------------------------

SITE_ATTENTION_PROBS, SITE_ATTENTION_RESIDUAL, SITE_MLP_RESIDUAL = 1, 2, 3


def rms_norm(x, w, eps):
    return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def rope(x, positions, theta):
    """x [rows, heads, d] rotated at one position per row."""
    d = x.shape[-1]
    half = d // 2
    phi = positions[:, None].astype(np.float64) * theta ** (-2.0 * np.arange(half) / d)  # [rows, d/2]
    cos, sin = np.cos(phi)[:, None, :], np.sin(phi)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def visible_keys(config, layer_type, anchors, keep, S):
    """M_l as a boolean [T, S + T]: which keys [context; block] query row n B + k sees."""
    B, N = config["block_size"], len(anchors)
    T = N * B
    visible = np.zeros((T, S + T), dtype=bool)
    sliding = layer_type == "sliding_attention"
    for n in range(N):
        if keep[n] != 1:
            continue
        a = anchors[n]
        for k in range(B):
            i = n * B + k
            for j in range(a):
                visible[i, j] = not sliding or j >= a + k - (config["sliding_window"] - 1)
            for k2 in range(B):
                visible[i, S + n * B + k2] = not sliding or k2 <= k
    return visible


def drafter_hidden(config, t, sequence, step):
    """Y [T, H] of one sequence (SPEC §3) from the stored inputs and parameters."""
    P = lambda name: t["param/" + name]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    nh, nkv, d, B = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"], config["block_size"]
    H, seed = config["hidden_size"], config["seed"]
    x, anchors, keep = t["input/tokens"][sequence], t["input/anchors"][sequence], t["input/keep"][sequence]
    S, N = len(x), len(anchors)
    T = N * B

    C = rms_norm(t["input/target_features"][sequence] @ P("fc.weight").T, P("hidden_norm.weight"), eps)
    tokens = np.full(T, config["mask_token_id"], dtype=np.int64)
    positions = np.zeros(T, dtype=np.int64)
    for n in range(N):
        for k in range(B):
            positions[n * B + k] = anchors[n] + k
        if keep[n] == 1:
            tokens[n * B] = x[anchors[n]]
    X = t["frozen/embed_tokens.weight"][tokens]
    context_positions = np.arange(S)

    def heads(m, count):
        return m.reshape(m.shape[0], count, d)

    for layer, layer_type in enumerate(config["layer_types"]):
        L = lambda name: P(f"layers.{layer}.{name}")
        q_norm, k_norm = L("self_attn.q_norm.weight"), L("self_attn.k_norm.weight")
        Wq, Wk, Wv = L("self_attn.q_proj.weight"), L("self_attn.k_proj.weight"), L("self_attn.v_proj.weight")
        u = rms_norm(X, L("input_layernorm.weight"), eps)
        Q = rope(rms_norm(heads(u @ Wq.T, nh), q_norm, eps), positions, theta)                   # [T, nh, d]
        Kc = rope(rms_norm(heads(C @ Wk.T, nkv), k_norm, eps), context_positions, theta)          # [S, nkv, d]
        Kb = rope(rms_norm(heads(u @ Wk.T, nkv), k_norm, eps), positions, theta)                  # [T, nkv, d]
        keys = np.concatenate([Kc, Kb])                                                          # [S + T, nkv, d]
        values = np.concatenate([heads(C @ Wv.T, nkv), heads(u @ Wv.T, nkv)])
        visible = visible_keys(config, layer_type, anchors, keep, S)
        attention_drop = dropout_factors(config["attention_dropout"], seed, step,
                                         rng_stream(sequence, layer, SITE_ATTENTION_PROBS),
                                         nh * T * (S + T)).reshape(nh, T, S + T)  # element (h T + i)(S + T) + j
        O = np.zeros((T, nh, d))
        for h in range(nh):
            g = h // (nh // nkv)
            scores = np.where(visible, Q[:, h, :] @ keys[:, g, :].T / np.sqrt(d), -np.inf)
            top = scores.max(axis=1)
            top = np.where(np.isfinite(top), top, 0.0)  # a row that sees no key: P = 0
            probs = np.where(visible, np.exp(scores - top[:, None]), 0.0)
            total = probs.sum(axis=1)
            probs = np.divide(probs, total[:, None], out=np.zeros_like(probs), where=total[:, None] > 0)
            O[:, h, :] = (probs * attention_drop[h]) @ values[:, g, :]
        residual_drop = lambda site: dropout_factors(config["hidden_dropout"], seed, step,
                                                     rng_stream(sequence, layer, site), T * H).reshape(T, H)
        X = X + residual_drop(SITE_ATTENTION_RESIDUAL) * (O.reshape(T, nh * d) @ L("self_attn.o_proj.weight").T)
        v = rms_norm(X, L("post_attention_layernorm.weight"), eps)
        gate, up = v @ L("mlp.gate_proj.weight").T, v @ L("mlp.up_proj.weight").T
        mlp = (gate / (1 + np.exp(-gate)) * up) @ L("mlp.down_proj.weight").T
        X = X + residual_drop(SITE_MLP_RESIDUAL) * mlp
    return rms_norm(X, P("norm.weight"), eps)


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


def check_goldens(golden_dir):
    failed = check_philox()
    files = sorted(golden_dir.glob("*.safetensors"))
    if not files:
        print(f"FAIL: no goldens in {golden_dir}")
        return failed + 1
    for path in files:
        metadata, tensors = read_safetensors(path)
        assert metadata["format"] == "dflash-golden", path
        config = json.loads(metadata["config"])
        step = int(metadata["step"])
        hidden = np.stack([drafter_hidden(config, tensors, b, step) for b in range(tensors["input/tokens"].shape[0])])
        results = {"output/hidden": (hidden, 0.0)}
        results.update(spec_loss_outputs(config, tensors))
        for name, (mine, floor) in results.items():
            err = relative_error(mine, tensors[name], floor)
            ok = err <= TOLERANCE
            failed += not ok
            print(f"{path.name:30s} {name:20s} {err:10.3e} {'PASS' if ok else 'FAIL'}")
    return failed


# --- SPEC §5 at other temperatures ---------------------------------------------------------------

OTHER_TEMPERATURES = (0.35, 0.8, 1.6, 3.0)  # below and above 1, none equal to a golden's own τ
STREAM_CHUNK = 7  # vocabulary columns per streaming step: several steps, a short last one
# Central differences of ℓ along a unit direction in z with step 1e-4: truncation ε²|ℓ'''|/6 and
# rounding ~1e-16|ℓ|/ε are each ~1e-12..1e-11 here (seen: at most 4e-11, relative to |∂ℓ/∂z|);
# a gradient with a wrong power of τ is off by ~3e-3 (seen), without the soft term by more.
FD_STEP = 1e-4
FD_TOLERANCE = 1e-8


def streaming_row_losses(z, t_logits, label, tau, h, s):
    """ℓ, CE, KL and lse(z) per row from running statistics over vocabulary chunks (SPEC §5: no
    implementation needs a [T, V] tensor): running max and sum-exp of z, z/τ, t/τ; z[y]; and
    Σ exp(t/τ - max)·(t - z), rescaled with the running max of t/τ."""
    rows = z.shape[:-1]
    stats = {name: (np.full(rows, -np.inf), np.zeros(rows)) for name in ("z", "zt", "tt")}
    q_dot = np.zeros(rows)
    for begin in range(0, z.shape[-1], STREAM_CHUNK):
        zc, tc = z[..., begin : begin + STREAM_CHUNK], t_logits[..., begin : begin + STREAM_CHUNK]
        for name, values in (("z", zc), ("zt", zc / tau), ("tt", tc / tau)):
            top, total = stats[name]
            new_top = np.maximum(top, values.max(axis=-1))
            rescale = np.exp(top - new_top)
            if name == "tt":
                q_dot = q_dot * rescale + (np.exp(values - new_top[..., None]) * (tc - zc)).sum(axis=-1)
            stats[name] = (new_top, total * rescale + np.exp(values - new_top[..., None]).sum(axis=-1))
    lse = {name: top + np.log(total) for name, (top, total) in stats.items()}
    z_label = np.take_along_axis(z, label[..., None], axis=-1)[..., 0]
    ce = lse["z"] - z_label
    kl = q_dot / stats["tt"][1] / tau - lse["tt"] + lse["zt"]
    return h * ce + s * tau * tau * kl, ce, kl, lse["z"]


def row_loss_and_gradient(z, t_row, label, tau, h, s):
    """ℓ of one row (log-softmax form) and SPEC §5's ∂ℓ/∂z = h (p - onehot(y)) + s τ (pτ - q)."""
    def softmax(x):
        e = np.exp(x - x.max())
        return e / e.sum()

    def loss(zz):
        log_q = t_row / tau - logsumexp(t_row / tau)
        log_p_tau = zz / tau - logsumexp(zz / tau)
        return h * (logsumexp(zz) - zz[label]) + s * tau * tau * (np.exp(log_q) * (log_q - log_p_tau)).sum()

    onehot = np.zeros_like(z)
    onehot[label] = 1.0
    return loss, h * (softmax(z) - onehot) + s * tau * (softmax(z / tau) - softmax(t_row / tau))


def write_safetensors(path, metadata, tensors):
    """SPEC §9's dtypes (floats F64, integers I64) through the stand-in's writer, the only one here."""
    def entry(value):
        return _STAND_IN["_numpy_entry"](np.asarray(value, dtype=DTYPES["F64" if value.dtype.kind == "f" else "I64"]))
    _STAND_IN["_write"](path, {name: entry(value) for name, value in tensors.items()}, metadata)


def golden_at_temperature(config, metadata, tensors, tau, claimed_tau):
    """The golden with its loss outputs recomputed at τ, claiming `claimed_tau` in its config."""
    outputs = spec_loss_outputs(dict(config, temperature=tau), tensors)
    rewritten = {name: outputs[name][0] if name in outputs else value for name, value in tensors.items()}
    rewritten = {name: np.asarray(value) for name, value in rewritten.items()}
    return dict(metadata, config=json.dumps(dict(config, temperature=claimed_tau))), rewritten


def check_other_temperatures(golden_dir, dflash):
    failed = 0
    goldens = [read_safetensors(path) for path in sorted(golden_dir.glob("*.safetensors"))]
    rng = np.random.default_rng(20261130)
    for metadata, tensors in goldens:
        config = json.loads(metadata["config"])
        h, s = config["hard_weight"], config["soft_weight"]
        W_lm = tensors["frozen/lm_head.weight"]
        z = tensors["output/hidden"] @ W_lm.T
        for tau in OTHER_TEMPERATURES:
            outputs = spec_loss_outputs(dict(config, temperature=tau), tensors)
            w01 = outputs["output/weights"][0] > 0
            label = np.zeros(z.shape[:-1], dtype=np.int64)
            teacher = np.zeros(z.shape[:-1] + (W_lm.shape[1],))
            x, anchors, B = tensors["input/tokens"], tensors["input/anchors"], config["block_size"]
            for b, i in zip(*np.nonzero(w01)):
                p = anchors[b, i // B] + i % B
                label[b, i], teacher[b, i] = x[b, p], tensors["input/teacher_hidden"][b, p - 1]
            t_logits = teacher @ W_lm.T
            token_loss, _, _, lse = streaming_row_losses(z, t_logits, label, tau, h, s)
            floor = outputs["output/lse"][1]
            for name, mine in (("output/token_loss", token_loss), ("output/lse", lse)):
                err = relative_error(np.where(w01, mine, 0.0), outputs[name][0], floor)
                ok = err <= TOLERANCE
                failed += not ok
                print(f"{metadata['case']:20s} tau {tau:4.2f} streaming {name:18s} {err:10.3e} {'PASS' if ok else 'FAIL'}")
            worst = 0.0
            for b, i in list(zip(*np.nonzero(w01)))[:3]:
                loss, gradient = row_loss_and_gradient(z[b, i], t_logits[b, i], label[b, i], tau, h, s)
                direction = rng.standard_normal(z.shape[-1])
                direction /= np.linalg.norm(direction)
                fd = (loss(z[b, i] + FD_STEP * direction) - loss(z[b, i] - FD_STEP * direction)) / (2 * FD_STEP)
                worst = max(worst, abs(fd - gradient @ direction) / max(np.linalg.norm(gradient), 1e-300))
            ok = worst <= FD_TOLERANCE
            failed += not ok
            print(f"{metadata['case']:20s} tau {tau:4.2f} dl/dz vs central differences {worst:10.3e} {'PASS' if ok else 'FAIL'}")
    if dflash is None:
        return failed
    with tempfile.TemporaryDirectory() as tmp:
        # The C++ reference loss head on every golden's Y at each τ, against the numpy outputs;
        # then the same files claiming a τ they were not computed at, which it must reject.
        for tau, claimed in [(tau, tau) for tau in OTHER_TEMPERATURES] + [(OTHER_TEMPERATURES[0], 1.0)]:
            directory = pathlib.Path(tmp) / f"tau-{tau}-claims-{claimed}"
            directory.mkdir()
            for metadata, tensors in goldens:
                new_metadata, new_tensors = golden_at_temperature(json.loads(metadata["config"]), metadata, tensors,
                                                                  tau, claimed)
                write_safetensors(directory / f"{metadata['case']}.safetensors", new_metadata, new_tensors)
            run = subprocess.run([str(dflash), "golden", "check", "--impl", "reference-loss-head", "--dir",
                                  str(directory)], capture_output=True, text=True)
            expected = 0 if tau == claimed else 1
            ok = run.returncode == expected
            failed += not ok
            print(f"dflash golden check --impl reference-loss-head, numpy outputs at tau {tau} claiming {claimed}: "
                  f"exit {run.returncode} (expected {expected}) {'PASS' if ok else 'FAIL'}")
            if not ok:
                print(run.stdout + run.stderr)
    return failed


# A stand-in for the parts of the `safetensors` package golden/examples/ use (load_file,
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

# The stand-in's reader and writer are this script's too: one safetensors implementation.
_STAND_IN = {}
exec(STAND_IN, _STAND_IN)

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


def example_source(name):
    """golden/examples/NAME.py, the example golden/README.md points to."""
    path = SOURCE / "golden" / "examples" / f"{name}.py"
    if not path.is_file():
        raise SystemExit(f"FAIL: {path} is missing")
    return path.read_text()


def check_readme_example():
    with tempfile.TemporaryDirectory() as tmp:
        install_stand_in(tmp)
        (pathlib.Path(tmp) / "example.py").write_text(example_source("read_golden"))
        run = subprocess.run([sys.executable, str(pathlib.Path(tmp) / "example.py")], cwd=SOURCE,
                             env={"PYTHONPATH": tmp}, capture_output=True, text=True)
    print(run.stdout + run.stderr)
    if run.returncode != 0 or not re.search(r"^\d+ PASS, 0 FAIL$", run.stdout, flags=re.M):
        print("FAIL: golden/examples/read_golden.py did not run to '<n> PASS, 0 FAIL'")
        return 1
    lse_line = re.search(r"output/lse  rel err (\S+)", run.stdout)
    if lse_line is None or float(lse_line.group(1)) > TOLERANCE:
        print("FAIL: golden/examples/read_golden.py's lse does not match the golden")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", nargs="?", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2])
    parser.add_argument("--dir", type=pathlib.Path, help="goldens to check (default: SOURCE/golden/data)")
    parser.add_argument("--dflash", type=pathlib.Path, help="the dflash binary, for the loss head at other temperatures")
    args = parser.parse_args()
    SOURCE = args.source
    golden_dir = args.dir or SOURCE / "golden" / "data"
    failures = check_goldens(golden_dir) + check_other_temperatures(golden_dir, args.dflash) + check_readme_example()
    print(f"{'all passed' if failures == 0 else f'{failures} failed'}")
    sys.exit(1 if failures else 0)
