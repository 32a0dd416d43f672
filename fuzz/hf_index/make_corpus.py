#!/usr/bin/env python3
"""Regenerates fuzz/hf_index/corpus/: seed model.safetensors.index.json files for its fuzzer.

The shards and decoys are the fuzz target's (fuzz/hf_index/fuzz_hf_index.cpp): valid indexes of them,
then one per refusal. Run: python3 fuzz/hf_index/make_corpus.py
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)

FIRST, SECOND = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
MAP = {"embed_tokens.weight": FIRST, "norm.weight": FIRST, "lm_head.weight": SECOND, "position_ids": SECOND}


def index(weight_map=None, **top):
    out = {"metadata": {"total_size": 112}, "weight_map": MAP if weight_map is None else weight_map}
    out.update(top)
    return json.dumps(out, indent=2).encode()


def seeds():
    yield "valid_two_shards", index()
    yield "valid_one_shard_subset", index({"lm_head.weight": SECOND})
    yield "valid_no_metadata", json.dumps({"weight_map": MAP}).encode()
    yield "valid_extra_top_level_key", index(format="pt")
    yield "bad_not_json", b'{"weight_map": {'
    yield "bad_not_object", b'["weight_map"]'
    yield "bad_not_utf8", b'{"weight_map": {"a\xff": "x"}}'
    yield "bad_deep", b'{"metadata": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b', "weight_map": {}}'
    yield "bad_duplicate_key", (b'{"weight_map": {"norm.weight": "' + FIRST.encode() + b'", "norm.weight": "'
                                + SECOND.encode() + b'"}}')
    yield "bad_metadata_not_object", index(metadata=[1])
    yield "bad_no_weight_map", json.dumps({"metadata": {}}).encode()
    yield "bad_weight_map_empty", index({})
    yield "bad_weight_map_list", index([FIRST])
    yield "bad_shard_not_string", index({"norm.weight": 1})
    yield "bad_shard_parent", index({"norm.weight": "../" + FIRST})
    yield "bad_shard_absolute", index({"norm.weight": "/etc/passwd"})
    yield "bad_shard_missing", index({"norm.weight": "model-00003-of-00003.safetensors"})
    yield "bad_shard_directory", index({"norm.weight": "subdir.safetensors"})
    yield "bad_shard_fifo", index({"norm.weight": "fifo.safetensors"})
    yield "bad_shard_dev_zero", index({"norm.weight": "zero.safetensors"})
    yield "bad_shard_is_index", index({"norm.weight": "model.safetensors.index.json"})
    yield "bad_tensor_in_other_shard", index({"norm.weight": SECOND})
    yield "bad_tensor_nowhere", index(dict(MAP, **{"q_proj.bias": FIRST}))


def main():
    write_corpus(__file__, ".json", seeds())


if __name__ == "__main__":
    main()
