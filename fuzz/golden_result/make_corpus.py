#!/usr/bin/env python3
"""Regenerates fuzz/golden_result/corpus/: seed result files for the golden compare fuzzer.

Each seed is one byte picking the rule (0 exact, 1 fp32, 2 bf16), then a safetensors result file made
from the fuzz target's golden, golden/data/tiny-full.safetensors: some of its output/ and grad/
tensors as stored (F64), narrowed to F32 or BF16, and changed in one way each. Run:
python3 fuzz/golden_result/make_corpus.py
"""
import json
import math
import pathlib
import sys
import struct

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE.parent.parent / "golden" / "data" / "tiny-full.safetensors"
EXACT, FP32, BF16 = 0, 1, 2


def golden_tensors():
    raw = GOLDEN.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F64":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["shape"], list(struct.unpack(f"<{(end - begin) // 8}d", data[begin:end])))
    return out


def bf16_bytes(values):
    out = b""
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        out += struct.pack("<H", bits >> 16)
    return out


def encode(dtype, values):
    if dtype == "F64":
        return struct.pack(f"<{len(values)}d", *values)
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "BF16":
        return bf16_bytes(values)
    return struct.pack(f"<{len(values)}i", *[int(v) for v in values])


def result(tensors):
    header, data = {}, b""
    for name, dtype, shape, values in tensors:
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def seeds():
    g = golden_tensors()
    scalars = ["output/loss", "output/ce", "output/kl", "output/accuracy", "output/weight_sum"]
    rows = ["output/lse", "output/token_loss"]
    small_grads = ["grad/norm.weight", "grad/layers.0.self_attn.q_norm.weight"]

    def pick(names, dtype="F64"):
        return [(n, dtype, g[n][0], g[n][1]) for n in names]

    yield "valid_exact_scalars", bytes([EXACT]) + result(pick(scalars))
    yield "valid_exact_rows_and_grads", bytes([EXACT]) + result(pick(rows + small_grads))
    yield "valid_fp32_narrowed", bytes([FP32]) + result(pick(scalars + rows, "F32"))
    yield "valid_bf16_narrowed", bytes([BF16]) + result(pick(scalars + small_grads, "BF16"))
    yield "valid_ignores_inputs", bytes([EXACT]) + result(pick(["output/loss"]) + [("input/x", "F64", [1], [0.0])])
    yield "fails_too_coarse_for_exact", bytes([EXACT]) + result(pick(scalars, "BF16"))
    yield "fails_off_by_a_lot", bytes([FP32]) + result([("output/loss", "F64", [], [g["output/loss"][1][0] + 1.0])])
    yield "fails_nan", bytes([BF16]) + result([("output/ce", "F32", [], [math.nan])])
    yield "fails_shape", bytes([EXACT]) + result([("output/lse", "F64", [24], g["output/lse"][1])])
    yield "fails_not_a_golden_name", bytes([EXACT]) + result([("output/speed", "F64", [], [1.0])])
    yield "fails_integer_dtype", bytes([EXACT]) + result([("output/weight_sum", "I32", [], [12])])
    yield "bad_empty", bytes([EXACT])
    yield "bad_no_tensors", bytes([EXACT]) + result([])
    yield "bad_not_safetensors", bytes([FP32]) + b"not a safetensors file"
    yield "bad_truncated", bytes([EXACT]) + result(pick(rows))[:-5]


def main():
    write_corpus(__file__, ".bin", seeds())


if __name__ == "__main__":
    main()
