#!/usr/bin/env python3
"""Regenerates fuzz/checkpoint/corpus/: seeds for the checkpoint fuzzer.

Each seed is one byte picking the file (0 model.safetensors, 1 optimizer.safetensors, 2 latest), then
that file's bytes. The tensors are those of fuzz/tiny_checkpoint.hpp's drafter (TRAINING §15 names,
as drafter_parameter_shapes lists them for H 4, I 4, one layer, nkv 1, d 2, K 1). Run:
python3 fuzz/checkpoint/make_corpus.py
"""
import json
import math
import pathlib
import sys
import struct

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)


SHAPES = [("fc.weight", [4, 4]), ("hidden_norm.weight", [4]), ("layers.0.input_layernorm.weight", [4]),
          ("layers.0.mlp.down_proj.weight", [4, 4]), ("layers.0.mlp.gate_proj.weight", [4, 4]),
          ("layers.0.mlp.up_proj.weight", [4, 4]), ("layers.0.post_attention_layernorm.weight", [4]),
          ("layers.0.self_attn.k_norm.weight", [2]), ("layers.0.self_attn.k_proj.weight", [2, 4]),
          ("layers.0.self_attn.o_proj.weight", [4, 4]), ("layers.0.self_attn.q_norm.weight", [2]),
          ("layers.0.self_attn.q_proj.weight", [4, 4]), ("layers.0.self_attn.v_proj.weight", [2, 4]),
          ("norm.weight", [4])]
PACK = {"F32": "f", "F64": "d"}


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in tensors:
        raw = struct.pack(f"<{len(values)}{PACK.get(dtype, 'f')}", *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def weights(prefix="", dtype="F32", value=0.25, skip=None, shape_of=None):
    out = []
    for name, shape in SHAPES:
        if name == skip:
            continue
        shape = (shape_of or {}).get(name, shape)
        out.append((prefix + name, dtype, shape, [value] * math.prod(shape)))
    return out


def seeds():
    model, optimizer, latest = 0, 1, 2
    yield "valid_model", bytes([model]) + safetensors(weights(), {"format": "pt"})
    yield "valid_model_f64", bytes([model]) + safetensors(weights(dtype="F64"), {"format": "pt"})
    yield "valid_optimizer", bytes([optimizer]) + safetensors(weights("exp_avg/", value=0.0) +
                                                              weights("exp_avg_sq/", value=1e-6))
    yield "valid_latest", bytes([latest]) + b"step-00000001\n"
    yield "bad_model_missing_tensor", bytes([model]) + safetensors(weights(skip="norm.weight"))
    yield "bad_model_shape", bytes([model]) + safetensors(weights(shape_of={"fc.weight": [4, 5]}))
    yield "bad_model_dtype_i32", bytes([model]) + safetensors(weights(dtype="I32"))
    yield "bad_model_truncated", bytes([model]) + safetensors(weights())[:-9]
    yield "bad_optimizer_no_exp_avg_sq", bytes([optimizer]) + safetensors(weights("exp_avg/"))
    yield "bad_optimizer_empty", bytes([optimizer])
    yield "bad_latest_short_name", bytes([latest]) + b"step-1\n"
    yield "bad_latest_outside_run", bytes([latest]) + b"../step-00000001"
    yield "bad_latest_empty", bytes([latest])
    yield "valid_latest_crlf_other_step", bytes([latest]) + b"step-00000002\r\n"


def main():
    write_corpus(__file__, ".bin", seeds())


if __name__ == "__main__":
    main()
