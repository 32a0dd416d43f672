#!/usr/bin/env python3
"""Regenerates fuzz/feature_shard/corpus/: seed shards for the feature shard fuzzer.

Assembled byte by byte from TRAINING §14's layout (H 4, K 2: the fuzz target's fixed shape), a valid
shard and one malformed shard per kind of rejection. Run: python3 fuzz/feature_shard/make_corpus.py
"""
import json
import pathlib
import sys
import struct

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)



def shard(rows=(2, 1), meta_over=None, drop=None, token=3, mask=1, feature=0.5):
    n, total = len(rows), sum(rows)
    offsets = [0]
    for r in rows:
        offsets.append(offsets[-1] + r)
    tensors = [("offsets", "I64", [n + 1], struct.pack(f"<{n + 1}q", *offsets)),
               ("tokens", "I32", [total], struct.pack(f"<{total}i", *([token] * total))),
               ("loss_mask", "U8", [total], bytes([mask] * total)),
               ("target_features", "F32", [total, 8], struct.pack(f"<{total * 8}f", *([feature] * total * 8))),
               ("teacher_hidden", "F32", [total, 4], struct.pack(f"<{total * 4}f", *([1.0] * total * 4)))]
    meta = {"format": "dflash-features", "version": "1", "hidden_size": "4", "target_layer_ids": "[1, 3]",
            "num_sequences": str(n)}
    meta.update(meta_over or {})
    header, data = {"__metadata__": meta}, b""
    for name, dtype, shape, raw in tensors:
        if name == drop:
            continue
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def seeds():
    yield "valid_two_sequences", shard()
    yield "valid_one_sequence", shard(rows=(3,))
    yield "bad_format", shard(meta_over={"format": "other"})
    yield "bad_layer_ids_not_json", shard(meta_over={"target_layer_ids": "[1,"})
    yield "bad_hidden_size_huge", shard(meta_over={"hidden_size": str(2 ** 62)})
    yield "bad_num_sequences", shard(meta_over={"num_sequences": "5"})
    yield "bad_missing_teacher", shard(drop="teacher_hidden")
    yield "bad_token", shard(token=-1)
    yield "bad_mask", shard(mask=2)
    yield "bad_nan_feature", shard(feature=float("nan"))


def main():
    write_corpus(__file__, ".safetensors", seeds())


if __name__ == "__main__":
    main()
