#!/usr/bin/env python3
"""Regenerates fuzz/config/corpus/: seed configs for the config fuzzer.

The project's configs/*.json as they are (valid_), then configs/tiny-train.json changed one field at a
time in each way the readers must refuse (bad_) or accept (valid_). Run: python3 fuzz/config/make_corpus.py
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)

HERE = pathlib.Path(__file__).resolve().parent
CONFIGS = HERE.parent.parent / "configs"


def changed(base, **fields):
    out = dict(base)
    for key, value in fields.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return json.dumps(out, indent=1).encode()


def seeds():
    for path in sorted(CONFIGS.glob("*.json")):
        yield f"valid_{path.stem}", path.read_bytes()
    base = json.loads((CONFIGS / "tiny-train.json").read_text())
    yield "valid_nested_dflash_config", changed(base, dflash_config={"block_size": base["block_size"],
                                                                     "mask_token_id": base["mask_token_id"]})
    yield "valid_rope_parameters", changed(base, rope_theta=None,
                                           rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    yield "bad_not_json", b'{"hidden_size": 16,'
    yield "bad_not_object", b"[16, 32]"
    yield "bad_not_utf8", b'{"hidden_size": 16, "x": "\xff\xfe"}'
    yield "bad_deep", b'{"rope_parameters": ' + b"[" * 300 + b"]" * 300 + b"}"
    yield "bad_hidden_size_negative", changed(base, hidden_size=-16)
    yield "bad_hidden_size_huge", changed(base, hidden_size=2 ** 63)
    yield "bad_hidden_size_fraction", changed(base, hidden_size=16.5)
    yield "bad_vocab_size_2_62", changed(base, vocab_size=2 ** 62)
    yield "bad_heads_not_dividing", changed(base, num_key_value_heads=3)
    yield "bad_target_layer_ids_string", changed(base, target_layer_ids="[1, 3]")
    yield "bad_layer_types_short", changed(base, layer_types=["full_attention"])
    yield "bad_sliding_without_window", changed(base, sliding_window=None)
    yield "bad_rope_scaling", changed(base, rope_scaling={"type": "linear", "factor": 2.0})
    yield "bad_nested_conflict", changed(base, dflash_config={"block_size": base["block_size"] + 1})
    yield "bad_attention_bias", changed(base, attention_bias=True)
    yield "bad_loss_policy", changed(base, loss_policy="fastest")
    yield "bad_seed_negative", changed(base, seed=-1)
    yield "bad_temperature_nan_text", changed(base, temperature="nan")
    yield "bad_total_steps_missing", changed(base, total_steps=None)
    yield "bad_zero_stage_2", changed(base, zero_stage=2)
    yield "bad_beta_one", changed(base, adam_beta2=1.0)
    yield "bad_learning_rate_huge", b'{"learning_rate": 1e999, "total_steps": 1}'


def main():
    write_corpus(__file__, ".json", seeds())


if __name__ == "__main__":
    main()
