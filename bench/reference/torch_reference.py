#!/usr/bin/env python3
"""PyTorch float64 baseline of the CPU reference: the loss head and one drafter step, on the very
inputs bench_reference_vs_torch wrote (raw little-endian files listed in manifest.json), timed in
CPU seconds of this process (time.process_time: every thread's user + system time).

    python3 bench/reference/torch_reference.py --dir DIR --repeats 3

DIR/manifest.json names the case ("loss_head" or "drafter"), the scalars and the tensors. The
script writes DIR/torch.json (CPU and wall seconds per repeat, the loss) and DIR/torch_grads.f64
(the gradients, in the order manifest["grad_order"] lists them) for the C++ side to compare.
Exit status 3 with a line on stderr when torch cannot be imported (the benchmark reports the
baseline as skipped with that reason).

One thread: the benchmark measures the ratio against one thread of each. OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS are set before torch loads its BLAS, and torch.set_num_threads(1) after.
"""
import argparse
import json
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

try:
    import numpy as np
    import torch
except ImportError as error:  # the benchmark reports this line as the reason for skipping
    print(f"python3-torch is not available: {error}", file=sys.stderr)
    sys.exit(3)


def load_tensors(directory, manifest):
    tensors = {}
    for name, entry in manifest["tensors"].items():
        dtype = np.float64 if entry["dtype"] == "f64" else np.int64
        array = np.fromfile(os.path.join(directory, entry["file"]), dtype=dtype).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array)
    return tensors


def hybrid_loss(z, t, labels, weights, valid, s):
    """SPEC 5: sum_i w_i [h CE_i + s tau^2 KL(q_i || p_tau,i)] / W; t carries no gradient."""
    tau = s["temperature"]
    log_p = torch.log_softmax(z, dim=-1)
    log_p_tau = torch.log_softmax(z / tau, dim=-1)
    log_q = torch.log_softmax(t / tau, dim=-1)
    ce = -log_p.gather(1, torch.where(valid, labels, 0)[:, None]).squeeze(1)
    kl = (log_q.exp() * (log_q - log_p_tau)).sum(-1)
    rows = s["hard_weight"] * ce + s["soft_weight"] * tau * tau * kl
    return (weights * torch.where(valid, rows, 0.0)).sum() / s["weight_sum"]


def teacher_logits(teacher, valid, lm_head):
    with torch.no_grad():  # rows without a teacher may hold NaN: they are never read
        return torch.where(valid[:, None], teacher, 0.0) @ lm_head.T


def loss_head_case(x, s):
    y = x["hidden"].clone().requires_grad_(True)
    valid = x["valid"] != 0
    t = teacher_logits(x["teacher_hidden"], valid, x["lm_head"])
    loss = hybrid_loss(y @ x["lm_head"].T, t, x["labels"], x["weights"], valid, s)
    loss.backward()
    return loss.item(), [y.grad]


def rms_norm(v, w, eps):
    return w * (v * torch.rsqrt((v * v).mean(-1, keepdim=True) + eps))


def rope(v, positions, theta):
    """SPEC 3: x'[i] = x[i] cos - x[i+d/2] sin, x'[i+d/2] = x[i+d/2] cos + x[i] sin, phi = p theta^(-2i/d)."""
    d = v.shape[-1]
    half = d // 2
    inv_freq = torch.tensor([theta ** (-2.0 * i / d) for i in range(half)], dtype=torch.float64)
    phi = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    # cos and sin in double, rounded once to v's dtype (bfloat16 in torch_export_check.py)
    cos, sin = phi.cos()[:, None, :].to(v.dtype), phi.sin()[:, None, :].to(v.dtype)
    a, b = v[..., :half], v[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def dflash_attention(q, k, v, visible):
    """q [T, nh, d], k/v [S+T, nkv, d], visible [T, S+T]; a row that sees no key outputs 0."""
    T, nh, d = q.shape
    group = nh // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,khd->htk", q, k) / d**0.5
    empty = ~visible.any(-1)
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(empty[:, None], 0.0)
    probs = torch.softmax(scores, dim=-1) * visible
    return torch.einsum("htk,khd->thd", probs, v).reshape(T, nh * d)


def drafter_hidden(params, features, block_input, block_positions, visible, s):
    """SPEC 3's trunk, dropout off: Y [T, H] of one sequence from its features F [S, K H], the block
    rows' embeddings X [T, H] and positions, and each layer's visibility [T, S+T] (bool), in the
    dtype of the tensors given (float64 here, bfloat16 in bench/reference/torch_export_check.py)."""
    eps, theta = s["rms_norm_eps"], s["rope_theta"]
    nh, nkv, d = s["num_attention_heads"], s["num_key_value_heads"], s["head_dim"]
    S, T = features.shape[0], block_input.shape[0]
    ctx_pos, blk_pos = torch.arange(S), block_positions

    context = rms_norm(features @ params["fc.weight"].T, params["hidden_norm.weight"], eps)
    h = block_input
    for l in range(s["num_hidden_layers"]):
        p = lambda n: params[f"layers.{l}.{n}"]  # noqa: E731
        u = rms_norm(h, p("input_layernorm.weight"), eps)
        q = rope(rms_norm((u @ p("self_attn.q_proj.weight").T).view(T, nh, d), p("self_attn.q_norm.weight"), eps), blk_pos, theta)
        k_ctx = rope(rms_norm((context @ p("self_attn.k_proj.weight").T).view(S, nkv, d), p("self_attn.k_norm.weight"), eps), ctx_pos, theta)
        k_blk = rope(rms_norm((u @ p("self_attn.k_proj.weight").T).view(T, nkv, d), p("self_attn.k_norm.weight"), eps), blk_pos, theta)
        v_ctx = (context @ p("self_attn.v_proj.weight").T).view(S, nkv, d)
        v_blk = (u @ p("self_attn.v_proj.weight").T).view(T, nkv, d)
        o = dflash_attention(q, torch.cat((k_ctx, k_blk)), torch.cat((v_ctx, v_blk)), visible[l])
        h = h + o @ p("self_attn.o_proj.weight").T
        v = rms_norm(h, p("post_attention_layernorm.weight"), eps)
        gate, up = v @ p("mlp.gate_proj.weight").T, v @ p("mlp.up_proj.weight").T
        h = h + (torch.nn.functional.silu(gate) * up) @ p("mlp.down_proj.weight").T
    return rms_norm(h, params["norm.weight"], eps)


def drafter_case(x, s):
    """One drafter step (SPEC 3-5), dropout off: every trainable parameter and F get a gradient."""
    params = {name: x[name].clone().requires_grad_(True) for name in s["parameters"]}
    features = x["target_features"].clone().requires_grad_(True)
    visible = [x[f"visible.{l}"] != 0 for l in range(s["num_hidden_layers"])]
    y = drafter_hidden(params, features, x["block_input"], x["block_positions"], visible, s)

    valid = x["valid"] != 0
    t = teacher_logits(x["teacher_hidden"], valid, x["lm_head"])
    loss = hybrid_loss(y @ x["lm_head"].T, t, x["labels"], x["weights"], valid, s)
    loss.backward()
    return loss.item(), [params[name].grad for name in s["parameters"]] + [features.grad]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="the folder bench_reference_vs_torch wrote")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    tensors = load_tensors(args.dir, manifest)
    case = {"loss_head": loss_head_case, "drafter": drafter_case}[manifest["case"]]

    cpu, wall = [], []
    for _ in range(args.repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        loss, grads = case(tensors, manifest["scalars"])
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    np.concatenate([g.detach().reshape(-1).numpy() for g in grads]).tofile(os.path.join(args.dir, "torch_grads.f64"))
    with open(os.path.join(args.dir, "torch.json"), "w") as f:
        json.dump({"loss": loss, "cpu_s": cpu, "wall_s": wall, "torch": torch.__version__,
                   "threads": torch.get_num_threads()}, f)


if __name__ == "__main__":
    main()
