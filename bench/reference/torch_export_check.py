#!/usr/bin/env python3
"""An exported drafter run by a second implementation: bench/reference/torch_reference.py's PyTorch
drafter (drafter_hidden) loads the Hugging Face directory `dflash export` wrote (config.json +
model.safetensors, or a sharded index) with nothing of the project in between, runs SPEC §3's
forward on a golden's inputs, and writes Y as a result file for `dflash golden compare`:

    python3 bench/reference/torch_export_check.py --export DIR --golden G.safetensors \
        --out result.safetensors [--dtype bfloat16|float64]
    dflash golden compare --golden G.safetensors --result result.safetensors --rule bf16

G is `dflash golden generate --config FILE --weights DIR` of the same directory. Everything the
model needs comes from the directory, read as serving stacks read it (SGLang's parse_dflash_draft_config,
vLLM's qwen3_dflash.py): the Qwen3 fields, rope_theta (top level or rope_parameters), layer_types
and sliding_window (use_sliding_window false: every layer full), dflash_config's mask_token_id and
target_layer_ids, and the weights under their names, a `model.` prefix dropped. From the golden:
the tokens, target features, anchors, keep flags and the target's embedding E (not in an export).
The block rows and masks are built here from SPEC §3 (tok, pos_blk, M_l).

--dtype bfloat16 (the default) computes as a bf16 serving forward does: weights as stored, E, F
and every activation bf16 (torch's CPU kernels accumulate products and sums in fp32); the result
is BF16, judged by compare's bf16 rule (golden/compare_rules.hpp, SPEC §10). float64 computes in
double from the same values: judged by --rule exact.

Exit 0 with the result written, 1 for an export or golden it cannot use (the reason on stderr), 77
when torch cannot be imported (the reason on stderr).
"""
import argparse
import json
import os
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError as error:
    print(f"torch_export_check: SKIPPED: torch (with numpy) is not importable here: {error}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import drafter_hidden  # noqa: E402

NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64}


class Unusable(Exception):
    """An export or golden this check cannot use; the message names the file and the problem."""


def fail(message):
    raise Unusable(message)


def read_safetensors(path):
    """{name: torch tensor} (BF16 kept as bfloat16) and the metadata: the format's 8-byte header
    length, JSON header, raw little-endian C-order data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(data[begin:end], dtype="<i2").reshape(entry["shape"])
            tensors[name] = torch.from_numpy(bits.copy()).view(torch.bfloat16)
        elif entry["dtype"] in NUMPY_DTYPES:
            array = np.frombuffer(data[begin:end], dtype=np.dtype(NUMPY_DTYPES[entry["dtype"]]).newbyteorder("<"))
            tensors[name] = torch.from_numpy(array.reshape(entry["shape"]).copy())
        else:
            fail(f"{path}: tensor '{name}' has dtype {entry['dtype']}, not BF16, F16, F32, F64 or I64")
    return tensors, header.get("__metadata__", {})


def write_safetensors(path, tensors):
    """BF16 or F64 tensors, sorted by name, written to a temporary name and renamed."""
    header, blobs, offset = {}, [], 0
    for name, t in sorted(tensors.items()):
        t = t.detach().contiguous()
        blob = t.view(torch.int16).numpy().astype("<i2").tobytes() if t.dtype == torch.bfloat16 else \
            t.to(torch.float64).numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "BF16" if t.dtype == torch.bfloat16 else "F64", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "xb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(temporary, path)


def read_export(directory):
    """config.json and the weights by unprefixed name (model.safetensors, or the index's shards)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for file in files:
        tensors, _ = read_safetensors(os.path.join(directory, file))
        for name, t in tensors.items():
            weights[name.removeprefix("model.")] = t
    return config, weights


def model_fields(config):
    """What a DFlash loader takes from config.json (SGLang's and vLLM's reading)."""
    dflash = config.get("dflash_config", {})
    rope = config.get("rope_parameters") or {}
    layers = config["num_hidden_layers"]
    types = config.get("layer_types") or ["full_attention"] * layers
    sliding = config.get("use_sliding_window", True) and config.get("sliding_window") is not None
    return {
        "hidden_size": config["hidden_size"],
        "num_attention_heads": config["num_attention_heads"],
        "num_key_value_heads": config["num_key_value_heads"],
        "head_dim": config.get("head_dim", config["hidden_size"] // config["num_attention_heads"]),
        "num_hidden_layers": layers,
        "rms_norm_eps": config.get("rms_norm_eps", 1e-6),
        "rope_theta": config["rope_theta"] if "rope_theta" in config else rope["rope_theta"],
        "block_size": config.get("block_size", dflash.get("block_size")),
        "mask_token_id": dflash.get("mask_token_id", config.get("mask_token_id")),
        "target_layer_ids": dflash.get("target_layer_ids", config.get("target_layer_ids")),
        "window": [config["sliding_window"] if sliding and t == "sliding_attention" else None for t in types],
    }


def block_rows(tokens, anchors, keep, embed, m):
    """SPEC §3 for one sequence: X = E[tok] and pos_blk of the T = N B block rows, and each layer's
    visibility [T, S + T] (context keys, then block keys)."""
    S, N, B = tokens.shape[0], anchors.shape[0], m["block_size"]
    T = N * B
    tok = torch.full((T,), m["mask_token_id"], dtype=torch.int64)
    positions = torch.zeros(T, dtype=torch.int64)
    for n in range(N):
        if keep[n] == 1:
            tok[n * B] = tokens[anchors[n]]
        positions[n * B:(n + 1) * B] = anchors[n] + torch.arange(B)
    visible = []
    for window in m["window"]:
        v = torch.zeros(T, S + T, dtype=torch.bool)
        for n in range(N):
            if keep[n] != 1:
                continue
            a = int(anchors[n])
            for k in range(B):
                i = n * B + k
                first = 0 if window is None else max(0, a + k - (window - 1))
                v[i, first:a] = True  # context keys j < a_n (and within the window)
                v[i, S + n * B:S + n * B + (B if window is None else k + 1)] = True  # its own block
        visible.append(v)
    return embed[tok], positions, visible


def export_forward(export, golden_path, out, dtype_name="bfloat16"):
    """Y of the export on the golden's inputs, written to `out` as output/hidden; Unusable if the
    export or the golden cannot be used. Returns the line main() prints."""
    dtype = getattr(torch, dtype_name)
    config, weights = read_export(export)
    m = model_fields(config)
    golden, metadata = read_safetensors(golden_path)
    golden_config = json.loads(metadata["config"])
    for p in ("attention_dropout", "hidden_dropout"):
        if golden_config.get(p, 0) != 0:
            fail(f"{golden_path}: {p} = {golden_config[p]}; this forward has no dropout "
                 f"(generate with --{p.replace('_', '-')} 0)")
    features = golden["input/target_features"]
    H, K = m["hidden_size"], len(m["target_layer_ids"])
    if features.shape[2] != K * H:
        fail(f"{golden_path}: input/target_features has width {features.shape[2]}, the export's K H = {K} x {H}")
    params = {name: t.to(dtype) for name, t in weights.items()}
    embed = golden["frozen/embed_tokens.weight"].to(dtype)

    hidden = []
    with torch.no_grad():
        for b in range(features.shape[0]):
            x, positions, visible = block_rows(golden["input/tokens"][b], golden["input/anchors"][b],
                                               golden["input/keep"][b], embed, m)
            hidden.append(drafter_hidden(params, features[b].to(dtype), x, positions, visible, m))
    write_safetensors(out, {"output/hidden": torch.stack(hidden)})
    return (f"torch_export_check: torch {torch.__version__}, {dtype_name}: Y of {len(hidden)} sequences x "
            f"{hidden[0].shape[0]} block rows from {export} -> {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="the Hugging Face drafter directory")
    parser.add_argument("--golden", required=True, help="`dflash golden generate --weights` of that directory")
    parser.add_argument("--out", required=True, help="the result file to write (output/hidden)")
    parser.add_argument("--dtype", choices=("bfloat16", "float64"), default="bfloat16")
    args = parser.parse_args()
    try:
        print(export_forward(args.export, args.golden, args.out, args.dtype))
    except Unusable as error:
        print(f"torch_export_check: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
