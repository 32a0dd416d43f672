#!/usr/bin/env python3
"""Regenerates fuzz/trainer_state/corpus/: seed trainer_state.json files for its fuzzer.

As distributed/checkpoint/save_restore.cpp writes them for the fuzz target's checkpoint
(fuzz/tiny_checkpoint.hpp: step 1, cursor (0, 3), seed 7, 12 tokens), with the placeholders the
target replaces by the real hashes; then changed one key at a time. Run:
python3 fuzz/trainer_state/make_corpus.py
"""
import copy
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)


CONFIG = {"hidden_size": 4, "intermediate_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 2, "num_hidden_layers": 1, "vocab_size": 8, "block_size": 2, "mask_token_id": 7,
          "target_layer_ids": [1], "max_anchors": 2, "loss_chunk_rows": 2}
STATE = {"format": "dflash-checkpoint", "version": 1, "step": 1, "data_cursor": {"epoch": 0, "position": 3},
         "seed": 7, "tokens_seen": 12, "config": CONFIG, "world_size": 1,
         "sha256": {"model.safetensors": "@model.safetensors@",
                    "optimizer.safetensors": "@optimizer.safetensors@"}}


def state(**changes):
    out = copy.deepcopy(STATE)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return (json.dumps(out, indent=2) + "\n").encode()


def seeds():
    yield "valid", state()
    yield "valid_two_ranks", state(world_size=2, data_cursor={"epoch": 1, "position": 0})
    yield "bad_not_json", b'{"step": 1,'
    yield "bad_not_object", b"[1, 2]"
    yield "bad_missing_sha256", state(sha256=None)
    yield "bad_hash_mismatch", state(sha256={"model.safetensors": "00" * 32,
                                             "optimizer.safetensors": "@optimizer.safetensors@"})
    yield "bad_hash_not_string", state(sha256={"model.safetensors": 7, "optimizer.safetensors": 7})
    yield "bad_step_string", state(step="1")
    yield "bad_step_fraction", state(step=1.5)
    yield "bad_step_huge_float", state(step=1e300)
    yield "bad_step_beyond_int64", b'{"step": 18446744073709551615}'
    yield "bad_cursor_not_object", state(data_cursor=[0, 3])
    yield "bad_seed_negative", state(seed=-7)
    yield "bad_world_size_huge", state(world_size=2 ** 40)
    yield "bad_config_not_object", state(config="tiny")
    yield "bad_config_invalid", state(config=dict(CONFIG, num_key_value_heads=3))
    yield "bad_number_beyond_double", b'{"step": 1e999}'
    # Issue 22, class 12: counters no run can have, and a state another writer made.
    yield "bad_step_of_another_directory", state(step=2)
    yield "bad_step_negative", state(step=-1)
    yield "bad_world_size_zero", state(world_size=0)
    yield "bad_tokens_seen_negative", state(tokens_seen=-12)
    yield "bad_cursor_position_negative", state(data_cursor={"epoch": 0, "position": -3})
    yield "bad_format_unknown", state(format="other-trainer")
    yield "bad_version_unknown", state(version=2)
    # Class 13: the data set's fingerprint, as save records it.
    yield "valid_with_data_set", state(data_set={"shards": [{"file": "shard-00000.safetensors", "bytes": 4096,
                                                             "sequences": 3}], "sequences": 3})


def main():
    write_corpus(__file__, ".json", seeds())


if __name__ == "__main__":
    main()
