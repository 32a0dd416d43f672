#!/usr/bin/env python3
"""PyTorch peer of bench_cuda_drafter_step: one DFlash drafter training step (SPEC 3-5) written as
its users would write it, on the same data.

A bf16 nn.Module (Hugging Face layout and names: fc, hidden_norm, layers.{l}.self_attn.{q,k,v,o}_proj,
q_norm/k_norm, mlp.{gate,up,down}_proj, norm; RMSNorm in fp32 then cast back, as Qwen3's), every layer
under torch.utils.checkpoint, DFlash attention through flex_attention with a BlockMask (block n's B
queries see context keys [0, a_n), within the window on sliding layers, and their own block's keys,
k' <= k on sliding layers; GQA), the hybrid loss in chunks of loss_chunk_rows under checkpoint
(loss_head_torch.py's hybrid_loss_sums), one backward. Dropout is off in the benchmark's configs.

The inputs come from libdflash_bench_data.so (ctypes): the synthetic sequence's anchors and block
rows (host), then the parameters, E, W_lm, F and the teacher rows filled on the GPU by the very
Philox streams bench_cuda_drafter_step uses, so both peers see bit-identical data.

Attention: --attention flex (torch.compile'd flex_attention; the default on CUDA where torch has it),
sdpa (scaled_dot_product_attention with an explicit [T, S+T] mask: a fallback that computes every
masked pair), eager (the softmax written out: the CPU dry run).

  python3 bench/cuda/drafter_step_torch.py --lib build/bench/cuda/libdflash_bench_data.so \\
      --config configs/qwen3.6-27b.json --context 4096 --json out.json
  python3 bench/cuda/drafter_step_torch.py --device cpu --lib ... --config configs/tiny.json --context 64
      (a dry run on the CPU: same block rows, torch's own random parameters and data)

Reports the step time (median of --reps after a warm-up that also compiles), the peak memory
(torch.cuda.max_memory_allocated), the loss statistics and each parameter's gradient norm.
Exit 0, or 77 (skipped) where torch cannot be imported.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as error:
    print(f"drafter_step_torch.py: SKIPPED, torch cannot be imported: {error}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loss_head_torch import (add_run_arguments, hybrid_loss_sums, skipped_without_gpu,  # noqa: E402
                             synchronize, timed_steps, write_json)

LOGIT_SCALE = 4.0  # W_lm's amplitude, as bench_cuda_drafter_step's kLogitScale


def wide(dtype):
    """The dtype statistics are computed in: fp32, or the tensor's own when wider (the float64 check)."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.to(wide(x.dtype))
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(positions, d, theta, dtype):
    """cos, sin [n, 1, d] at the given positions (SPEC 3's RoPE: phi = p theta^(-2i/d), halves rotated)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=wide(dtype), device=positions.device) / d))
    phi = positions.to(wide(dtype))[:, None] * inv_freq[None, :]
    phi = torch.cat((phi, phi), dim=-1)[:, None, :]
    return phi.cos().to(dtype), phi.sin().to(dtype)


def apply_rope(x, table):
    cos, sin = table
    return x * cos + rotate_half(x) * sin


class DFlashMask:
    """SPEC 3's mask of one layer type over keys [context; block rows], as a predicate on (query, key)."""

    def __init__(self, anchors, keep, S, B, sliding, window):
        self.anchors, self.keep, self.S, self.B, self.sliding, self.window = anchors, keep, S, B, sliding, window

    def visible(self, q_idx, kv_idx):
        n, k = q_idx // self.B, q_idx % self.B
        a = self.anchors[n]
        ctx = kv_idx < a
        blk = (kv_idx - self.S) // self.B == n
        if self.sliding:
            ctx = ctx & (kv_idx >= a + k - (self.window - 1))
            blk = blk & ((kv_idx - self.S) % self.B <= k)
        # A block without an anchor (keep 0) sees nothing; it attends everywhere here and its
        # output is multiplied by 0 (SPEC 3: P = 0), which keeps its softmax finite.
        return (self.keep[n] == 0) | torch.where(kv_idx < self.S, ctx, blk)

    def dense(self, T):
        q = torch.arange(T, device=self.anchors.device)[:, None]
        kv = torch.arange(self.S + T, device=self.anchors.device)[None, :]
        return self.visible(q, kv)


def layer_masks(x, S, c):
    """The masks of a sequence's layers by kind ({sliding: DFlashMask}), for the kinds the config's
    layers use."""
    return {sliding: DFlashMask(x["anchors"], x["keep"], S, c["block_size"], sliding, c.get("sliding_window") or 0)
            for sliding in {t == "sliding_attention" for t in c["layer_types"]}}


class Attention:
    """One attention implementation for all layers: flex (BlockMask per layer type), sdpa or eager."""

    def __init__(self, kind, masks, T):
        self.kind, self.masks = kind, masks
        if kind == "flex":
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            self.flex = torch.compile(flex_attention, dynamic=False)
            self.block_masks = {}
            for sliding, m in masks.items():
                mask_mod = lambda b, h, q, kv, m=m: m.visible(q, kv)  # noqa: E731
                # compiled: the mask built tile by tile, never as a [T, S+T] tensor
                try:
                    self.block_masks[sliding] = create_block_mask(mask_mod, None, None, T, m.S + T,
                                                                  device=m.anchors.device, _compile=True)
                except TypeError:  # a torch without the flag
                    self.block_masks[sliding] = torch.compile(create_block_mask)(mask_mod, None, None, T, m.S + T,
                                                                                 device=m.anchors.device)
        else:
            self.dense = {sliding: m.dense(T) for sliding, m in masks.items()}

    def __call__(self, q, k, v, sliding):
        """q [T, nh, d], k/v [S+T, nkv, d] -> [T, nh d]."""
        T, nh, d = q.shape
        group = nh // k.shape[1]
        if self.kind == "flex":
            o = self.flex(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                          block_mask=self.block_masks[sliding], enable_gqa=True)[0].transpose(0, 1)
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            mask = self.dense[sliding]
            if self.kind == "sdpa":
                o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                   v.transpose(0, 1)[None], attn_mask=mask)[0].transpose(0, 1)
            else:
                scores = torch.einsum("thd,khd->htk", q.to(wide(q.dtype)), k.to(wide(k.dtype))) / math.sqrt(d)
                probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).to(q.dtype)
                o = torch.einsum("htk,khd->thd", probs, v)
        row_keep = self.masks[sliding].keep.repeat_interleave(self.masks[sliding].B).to(o.dtype)
        return (o * row_keep[:, None, None]).reshape(T, nh * d)


class SelfAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, nh, nkv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.nh, self.nkv, self.d = nh, nkv, d
        self.q_proj = torch.nn.Linear(H, nh * d, bias=False)
        self.k_proj = torch.nn.Linear(H, nkv * d, bias=False)
        self.v_proj = torch.nn.Linear(H, nkv * d, bias=False)
        self.o_proj = torch.nn.Linear(nh * d, H, bias=False)
        self.q_norm = RMSNorm(d, c["rms_norm_eps"])
        self.k_norm = RMSNorm(d, c["rms_norm_eps"])

    def forward(self, u, context, rope_blk, rope_ctx, attention, sliding):
        T, S = u.shape[0], context.shape[0]
        q = apply_rope(self.q_norm(self.q_proj(u).view(T, self.nh, self.d)), rope_blk)
        k_blk = apply_rope(self.k_norm(self.k_proj(u).view(T, self.nkv, self.d)), rope_blk)
        k_ctx = apply_rope(self.k_norm(self.k_proj(context).view(S, self.nkv, self.d)), rope_ctx)
        v_blk = self.v_proj(u).view(T, self.nkv, self.d)
        v_ctx = self.v_proj(context).view(S, self.nkv, self.d)
        o = attention(q, torch.cat((k_ctx, k_blk)), torch.cat((v_ctx, v_blk)), sliding)
        return self.o_proj(o)


class MLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = torch.nn.Linear(H, I, bias=False)
        self.up_proj = torch.nn.Linear(H, I, bias=False)
        self.down_proj = torch.nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self, c, sliding):
        super().__init__()
        self.sliding = sliding
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = SelfAttention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, context, rope_blk, rope_ctx, attention):
        x = x + self.self_attn(self.input_layernorm(x), context, rope_blk, rope_ctx, attention, self.sliding)
        return x + self.mlp(self.post_attention_layernorm(x))


class Drafter(torch.nn.Module):
    """Parameters registered in SPEC 3's order (= reference drafter_parameter_shapes)."""

    def __init__(self, c):
        super().__init__()
        H, K = c["hidden_size"], len(c["target_layer_ids"])
        self.fc = torch.nn.Linear(K * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, c["rms_norm_eps"])
        self.layers = torch.nn.ModuleList(Layer(c, t == "sliding_attention") for t in c["layer_types"])
        self.norm = RMSNorm(H, c["rms_norm_eps"])

    def forward(self, features, tokens, embed, rope_blk, rope_ctx, attention):
        context = self.hidden_norm(self.fc(features))
        x = F.embedding(tokens, embed)
        for layer in self.layers:
            x = checkpoint(layer, x, context, rope_blk, rope_ctx, attention, use_reentrant=False)
        return self.norm(x)


def load_library(path):
    lib = ctypes.CDLL(path)
    p, ll, ull, u = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_uint
    lib.dflash_bench_drafter_sequence.argtypes = [ll] * 5 + [ctypes.c_double, ull, ull] + [p] * 8 + [p, ll]
    lib.dflash_bench_fill_drafter_matrix.argtypes = [p, ll, ll, ull, u]
    lib.dflash_bench_fill_frozen.argtypes = [p, p, ll, ll, ull, ctypes.c_float]
    lib.dflash_bench_fill_drafter_inputs.argtypes = [p, ll, ll, p, p, ll, ll, ull]
    for f in ("dflash_bench_drafter_sequence", "dflash_bench_fill_drafter_matrix", "dflash_bench_fill_frozen",
              "dflash_bench_fill_drafter_inputs"):
        getattr(lib, f).restype = ctypes.c_int
    return lib


def ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def check(status, what):
    if status != 0:
        sys.exit(f"drafter_step_torch.py: {what} failed with status {status}")


def sequence_rows(lib, c, S, seed):
    """The synthetic sequence's anchor slots and block rows (host), as bench_cuda_drafter_step's."""
    N, B = c["max_anchors"], c["block_size"]
    T = N * B
    rows = {"anchors": torch.empty(N, dtype=torch.int64), "keep": torch.empty(N, dtype=torch.uint8),
            "tokens": torch.empty(T, dtype=torch.int64), "positions": torch.empty(T, dtype=torch.int64),
            "labels": torch.empty(T, dtype=torch.int64), "teacher_rows": torch.empty(T, dtype=torch.int64),
            "weights": torch.empty(T, dtype=torch.float32), "valid": torch.empty(T, dtype=torch.uint8)}
    error = ctypes.create_string_buffer(512)
    gamma = c.get("loss_decay_gamma") or 0.0
    if lib.dflash_bench_drafter_sequence(S, c["vocab_size"], B, c["mask_token_id"], N, gamma, seed, c.get("seed", 0),
                                         *(ptr(rows[k]) for k in ("anchors", "keep", "tokens", "positions", "labels",
                                                                  "teacher_rows", "weights", "valid")),
                                         error, len(error)) != 0:
        sys.exit(f"drafter_step_torch.py: {error.value.decode()}")
    return rows


def make_inputs(args, c, lib, model, device, dtype):
    """Block rows, parameters, frozen weights, F and teacher rows on `device`."""
    S, H, V, K = args.context, c["hidden_size"], c["vocab_size"], len(c["target_layer_ids"])
    rows = {k: v.to(device) for k, v in sequence_rows(lib, c, S, args.seed).items()}
    T = rows["tokens"].shape[0]
    embed = torch.empty(V, H, device=device, dtype=dtype)
    lm_head = torch.empty(V, H, device=device, dtype=dtype)
    features = torch.empty(S, K * H, device=device, dtype=dtype)
    teacher = torch.empty(T, H, device=device, dtype=dtype)
    with torch.no_grad():
        if device == "cuda":
            torch.cuda.synchronize()
            for index, (name, p) in enumerate(model.named_parameters()):
                if p.dim() == 2:
                    check(lib.dflash_bench_fill_drafter_matrix(ptr(p), p.shape[0], p.shape[1], args.seed, index), name)
                else:
                    p.fill_(1.0)
            check(lib.dflash_bench_fill_frozen(ptr(embed), ptr(lm_head), V, H, args.seed, LOGIT_SCALE), "frozen")
            check(lib.dflash_bench_fill_drafter_inputs(ptr(features), S, K * H, ptr(teacher), ptr(rows["teacher_rows"]),
                                                       T, H, args.seed), "inputs")
        else:
            gen = torch.Generator().manual_seed(args.seed)
            uniform = lambda *shape: torch.rand(*shape, generator=gen) * 2 - 1  # noqa: E731
            for name, p in model.named_parameters():
                p.copy_(uniform(*p.shape) * (3.0 / p.shape[1]) ** 0.5 if p.dim() == 2 else torch.ones(p.shape))
            embed.copy_(uniform(V, H))
            lm_head.copy_(uniform(V, H) * LOGIT_SCALE * (3.0 / H) ** 0.5)
            features.copy_(uniform(S, K * H))
            teacher.copy_(uniform(T, H) * (rows["teacher_rows"] >= 0)[:, None])
    rows.update(embed=embed, lm_head=lm_head, features=features, teacher=teacher,
                valid=rows["valid"].bool(), labels=rows["labels"].clamp(min=0), W=float(rows["weights"].double().sum()))
    return rows


def drafter_step(model, x, attention, c, chunk):
    """Forward + backward of one sequence; returns (loss, ce, kl, accuracy)."""
    model.zero_grad(set_to_none=True)
    d, theta, S = c["head_dim"], c["rope_theta"], x["features"].shape[0]
    rope_blk = rope_tables(x["positions"], d, theta, x["embed"].dtype)
    rope_ctx = rope_tables(torch.arange(S, device=x["positions"].device), d, theta, x["embed"].dtype)
    y = model(x["features"], x["tokens"], x["embed"], rope_blk, rope_ctx, attention)
    tau, hard, soft = c.get("temperature", 1.0), c.get("hard_weight", 0.85), c.get("soft_weight", 0.15)
    parts = []
    for r0 in range(0, y.shape[0], chunk):
        r1 = min(y.shape[0], r0 + chunk)
        parts.append(checkpoint(hybrid_loss_sums, y[r0:r1], x["teacher"][r0:r1], x["lm_head"], x["labels"][r0:r1],
                                x["weights"][r0:r1], x["valid"][r0:r1], tau, hard, soft, use_reentrant=False))
    loss = sum(p[0] for p in parts) / x["W"]
    loss.backward()
    valid_rows = int(x["valid"].sum())
    correct = int(sum(int(p[3]) for p in parts))
    return (float(loss), float(sum(p[1] for p in parts) / x["W"]), float(sum(p[2] for p in parts) / x["W"]),
            correct / valid_rows if valid_rows else 0.0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="libdflash_bench_data.so")
    p.add_argument("--config", required=True)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--attention", default="auto", choices=["auto", "flex", "sdpa", "eager"])
    add_run_arguments(p)
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        return skipped_without_gpu("drafter_step_torch.py")
    with open(args.config) as f:
        c = json.load(f)
    if c.get("attention_dropout", 0) or c.get("hidden_dropout", 0):
        sys.exit("drafter_step_torch.py: dropout is not implemented here (the benchmark's configs have none)")
    kind = args.attention
    if kind == "auto":
        try:
            from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
            kind = "flex" if args.device == "cuda" else "eager"
        except ImportError:
            kind = "sdpa" if args.device == "cuda" else "eager"
    dtype = torch.bfloat16
    device = args.device
    lib = load_library(args.lib)
    if device == "cuda":
        with torch.device(device):  # initialised where it runs: 1.7e9 parameters at full scale
            model = Drafter(c).to(dtype=dtype)
    else:
        model = Drafter(c).to(dtype=dtype)
    x = make_inputs(args, c, lib, model, device, dtype)
    T = x["tokens"].shape[0]
    masks = layer_masks(x, args.context, c)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "config": args.config, "context": args.context, "tokens": T, "seed": args.seed, "attention": kind,
           "weight_sum": x["W"], "chunk": c["loss_chunk_rows"]}
    t0 = time.perf_counter()
    try:
        attention = Attention(kind, masks, T)
        result = drafter_step(model, x, attention, c, c["loss_chunk_rows"])  # warm-up: compiles flex
    except Exception as e:  # noqa: BLE001  (flex/compile unavailable on this machine: say so, fall back)
        if kind != "flex":
            raise
        print(f"drafter_step_torch.py: flex_attention failed ({type(e).__name__}: {str(e).splitlines()[0]}); "
              "falling back to sdpa with an explicit mask")
        out["flex_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        kind = out["attention"] = "sdpa"
        attention = Attention(kind, masks, T)
        result = drafter_step(model, x, attention, c, c["loss_chunk_rows"])
    synchronize(device)
    out["first_step_s"] = time.perf_counter() - t0
    times, result, base, peak = timed_steps(lambda: drafter_step(model, x, attention, c, c["loss_chunk_rows"]),
                                            args.reps, device)
    out.update(ms_median=statistics.median(times), ms=times, loss=result[0], ce=result[1], kl=result[2],
               accuracy=result[3],
               grad_norms={name: float(q.grad.float().norm()) for name, q in model.named_parameters()})
    if device == "cuda":
        out["peak_bytes"] = base + peak
        out["peak_bytes_above_inputs"] = peak
    print(f"torch drafter step ({kind} attention, checkpoint per layer, {c['loss_chunk_rows']}-row loss chunks): "
          f"{out['ms_median']:.1f} ms (first step {out['first_step_s']:.1f} s), loss {out['loss']:.6f}"
          + (f", peak {out['peak_bytes'] / 2**30:.2f} GiB" if device == "cuda" else ""))
    if not math.isfinite(out["loss"]):
        print("drafter_step_torch.py: the loss is not finite")
        return 1
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
