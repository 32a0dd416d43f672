#!/usr/bin/env python3
"""Regenerates fuzz/safetensors/corpus/: small seed files for the safetensors fuzzer.

The files are assembled byte by byte from the format description (no safetensors package
needed): valid files (most in the writer's layout, some in other legal ones) and one malformed
file per kind of rejection, so the fuzzer starts next to every boundary the reader checks.
Run from anywhere: python3 fuzz/safetensors/make_corpus.py
"""
import json
import pathlib
import sys
import struct

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)



def file_bytes(header: str, data: bytes = b"", pad: bool = True) -> bytes:
    raw = header.encode("utf-8")
    if pad:
        raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    yield "valid_f32", file_bytes(compact({"a": entry("F32", [2, 2], 0, 16)}), f32)

    mixed = {
        "__metadata__": {"format": "dflash-golden", "config": '{"hidden_size": 8}'},
        "d": entry("I64", [1], 0, 8),
        "z": entry("F64", [], 8, 16),
        "c": entry("I32", [1], 16, 20),
        "b": entry("BF16", [1], 20, 22),
        "e": entry("F16", [1], 22, 24),
        "a": entry("U8", [2], 24, 26),
        "f": entry("BOOL", [1, 1], 26, 27),
    }
    data = (struct.pack("<q", -9) + struct.pack("<d", 0.25) + struct.pack("<i", 7) + bytes([0xC0, 0x3F])
            + struct.pack("<e", 0.5) + bytes([1, 255, 1]))
    yield "valid_all_dtypes", file_bytes(compact(mixed), data)

    yield "valid_no_tensors", file_bytes(compact({"__metadata__": {"format": "pt"}}))
    yield "valid_empty_tensors", file_bytes(
        compact({"e0": entry("F64", [0], 0, 0), "x": entry("F64", [], 0, 8), "e1": entry("I32", [2, 0], 8, 8)}),
        struct.pack("<d", 1.0))
    yield "valid_unpadded_pretty", file_bytes(
        json.dumps({"w": entry("BF16", [2], 0, 4), "__metadata__": {"k": "v"}}, indent=1), bytes([0xC0, 0x3F, 0, 0xBF]),
        pad=False)

    # Malformed, one per kind of check.
    yield "bad_short_file", b"\x05\x00\x00"
    yield "bad_header_beyond_file", struct.pack("<Q", 64) + b"{}"
    yield "bad_utf8", file_bytes('{"a":1}').replace(b'"a"', b'"\xff"')
    yield "bad_json", file_bytes('{"a":{"dtype":"F32",')
    yield "bad_not_object", file_bytes("[1,2]")
    yield "bad_unknown_dtype", file_bytes(compact({"a": entry("F8_E4M3", [4], 0, 4)}), bytes(4))
    yield "bad_negative_dim", file_bytes('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', bytes(4))
    yield "bad_shape_overflow", file_bytes(compact({"a": entry("U8", [2**32, 2**32], 0, 0)}))
    yield "bad_size_mismatch", file_bytes(compact({"a": entry("F32", [2, 2], 0, 12)}), bytes(12))
    yield "bad_begin_after_end", file_bytes(compact({"a": entry("F32", [], 8, 4)}), bytes(8))
    yield "bad_out_of_bounds", file_bytes(compact({"a": entry("F32", [4], 0, 16)}), bytes(12))
    yield "bad_overlap", file_bytes(compact({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}), bytes(12))
    yield "bad_hole", file_bytes(compact({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}), bytes(12))
    yield "bad_trailing", file_bytes(compact({"a": entry("F32", [1], 0, 4)}), bytes(9))
    yield "bad_duplicate", file_bytes(
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        bytes(8))
    yield "bad_metadata", file_bytes('{"__metadata__":{"step":3}}')
    yield "convert_bad_bool", file_bytes(compact({"f": entry("BOOL", [2], 0, 2)}), bytes([1, 2]))
    yield "bad_deep", file_bytes('{"a":{"dtype":"F32","shape":[[[[[1]]]]],"data_offsets":[0,4]}}', bytes(4))


def main():
    write_corpus(__file__, ".safetensors", seeds())


if __name__ == "__main__":
    main()
