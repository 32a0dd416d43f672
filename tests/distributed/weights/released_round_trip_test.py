#!/usr/bin/env python3
"""A released drafter survives `--init` + `export` unchanged (issue 23, TRAINING §16).

The fixture is a tiny drafter in the form z-lab's released DFlash drafters ship (config.json with
auto_map, dflash_config {mask_token_id, target_layer_ids}, num_target_layers = the target's depth,
the rope_parameters form of rope_theta, token ids, dtype keys, and a key nobody models; BF16
model.safetensors under unprefixed names), shaped as configs/tiny-train.json. The test

  1. writes a synthetic target of that depth (`dflash data synth`, num_target_layers 6, deeper than
     the deepest target_layer_id + 1 = 4, so the value is carried, not re-derived),
  2. trains 1 step from the fixture (`dflash train --init`) at learning_rate 0 (the update is
     exactly zero: p - 0 * u = p for finite p and u),
  3. exports (`dflash export`) and requires
     - config.json: every key of the fixture, modelled or not, with the same value and JSON type
       (1e-06 stays 1e-06, the integer rope_theta stays an integer), and no key added;
     - model.safetensors: every tensor of the fixture, same dtype, shape and bytes; no other;
     - harness/serving/conformance.py accepts the export at the target's depth.

  released_round_trip_test.py DFLASH SOURCE_DIR WORK_DIR
"""
import json
import os
import random
import shutil
import struct
import sys

dflash, source, work = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(source, "harness", "serving"))
import conformance  # noqa: E402

sys.path.insert(0, os.path.join(source, "tests", "support"))
from cli_script import read_safetensors, run, write_safetensors  # noqa: E402

TARGET_DEPTH = 6

RELEASED_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "block_size": 4,
    "bos_token_id": 0,
    "dflash_config": {"mask_token_id": 63, "target_layer_ids": [1, 3]},
    "dtype": "bfloat16",
    "eos_token_id": 1,
    "head_dim": 4,
    "hidden_act": "silu",
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 40960,
    "max_window_layers": 2,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "num_target_layers": TARGET_DEPTH,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000, "rope_type": "default"},
    "rope_scaling": None,
    "sliding_window": 6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.57.1",
    "use_cache": True,
    "use_sliding_window": True,
    "vocab_size": 64,
    "x_fixture_made_up": {"kept": [1, 2.5, None, "verbatim"]},
}


def random_bf16(rng, count):
    """Finite BF16 bit patterns over every mantissa bit and a range of exponents (|x| ~ 2^-7 .. 2^3),
    with a subnormal among them: any rounding on the way through would change some."""
    words = [(rng.getrandbits(1) << 15) | (rng.randint(120, 130) << 7) | rng.getrandbits(7) for _ in range(count)]
    words[0] = 0x0003  # a BF16 subnormal, 3 * 2^-133
    return struct.pack(f"<{count}H", *words)


def released_tensors(c):
    H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    nh, nkv, d, K = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], len(
        c["dflash_config"]["target_layer_ids"])
    shapes = {"fc.weight": [H, K * H], "hidden_norm.weight": [H], "norm.weight": [H]}
    for i in range(L):
        p = f"layers.{i}."
        shapes.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                       p + "self_attn.q_proj.weight": [nh * d, H], p + "self_attn.k_proj.weight": [nkv * d, H],
                       p + "self_attn.v_proj.weight": [nkv * d, H], p + "self_attn.o_proj.weight": [H, nh * d],
                       p + "self_attn.q_norm.weight": [d], p + "self_attn.k_norm.weight": [d],
                       p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                       p + "mlp.down_proj.weight": [H, I]})
    rng = random.Random(20261204)
    tensors = {}
    for name, shape in sorted(shapes.items()):
        count = 1
        for s in shape:
            count *= s
        tensors[name] = ("BF16", shape, random_bf16(rng, count))
    return tensors


shutil.rmtree(work, ignore_errors=True)
released = os.path.join(work, "released")
os.makedirs(released)
with open(os.path.join(released, "config.json"), "w") as f:
    json.dump(RELEASED_CONFIG, f, indent=2)
fixture_tensors = released_tensors(RELEASED_CONFIG)
write_safetensors(os.path.join(released, "model.safetensors"), fixture_tensors, {"format": "pt"})

# The run's config: tiny-train.json, one step at learning rate 0; it does not name the depth (the
# target and --init do). data synth's config names it, so that the target is TARGET_DEPTH deep.
with open(os.path.join(source, "configs", "tiny-train.json")) as f:
    train_config = json.load(f)
train_config.update(learning_rate=0.0, min_learning_rate=0.0, warmup_steps=0, total_steps=1)
train_path, synth_path = os.path.join(work, "train.json"), os.path.join(work, "synth.json")
with open(train_path, "w") as f:
    json.dump(train_config, f)
with open(synth_path, "w") as f:
    json.dump(dict(train_config, num_target_layers=TARGET_DEPTH), f)

data = os.path.join(work, "data")
run(dflash, "data", "synth", "--config", synth_path, "--out", data, "--sequences", "6", "--shards", "1")
run(dflash, "train", "--config", train_path, "--data", os.path.join(data, "features"), "--target",
    os.path.join(data, "target"), "--init", released, "--out", os.path.join(work, "run"))
exported = os.path.join(work, "export")
run(dflash, "export", "--checkpoint", os.path.join(work, "run"), "--out", exported)

failures = []
with open(os.path.join(exported, "config.json")) as f:
    exported_config = json.load(f)
modelled = {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "rms_norm_eps", "rope_parameters", "vocab_size", "block_size", "dflash_config",
            "layer_types", "sliding_window", "num_target_layers", "use_sliding_window"}


def canonical(value):
    return json.dumps(value, sort_keys=True)  # 10000 and 10000.0 differ here, as in the file


for key, value in RELEASED_CONFIG.items():
    kind = "modelled" if key in modelled else "unmodelled"
    if key not in exported_config:
        failures.append(f"{kind} key '{key}' was dropped")
    elif canonical(exported_config[key]) != canonical(value):
        failures.append(f"{kind} key '{key}' is {canonical(exported_config[key])}, the released config has "
                        f"{canonical(value)}")
for key in sorted(set(exported_config) - set(RELEASED_CONFIG)):
    failures.append(f"key '{key}' = {canonical(exported_config[key])} was added")

exported_tensors, _ = read_safetensors(os.path.join(exported, "model.safetensors"))
for name, (dtype, shape, blob) in sorted(fixture_tensors.items()):
    if name not in exported_tensors:
        failures.append(f"tensor '{name}' is missing from the export")
        continue
    got = exported_tensors[name]
    if (got[0], got[1]) != (dtype, shape):
        failures.append(f"tensor '{name}' is {got[0]} {got[1]}, the released one {dtype} {shape}")
    elif got[2] != blob:
        changed = sum(1 for i in range(0, len(blob), 2) if got[2][i:i + 2] != blob[i:i + 2])
        failures.append(f"tensor '{name}': {changed} of {len(blob) // 2} elements differ bitwise")
for name in sorted(set(exported_tensors) - set(fixture_tensors)):
    failures.append(f"tensor '{name}' was added")

report = conformance.check(*conformance.read_directory(exported, conformance.Report()),
                           num_target_layers=TARGET_DEPTH)
for rule, message in report.violations:
    failures.append(f"conformance {rule}: {message}")

for f in failures:
    print("FAIL:", f)
print(f"released round trip: {len(RELEASED_CONFIG)} config keys, {len(fixture_tensors)} tensors "
      f"({sum(len(b) // 2 for _, _, b in fixture_tensors.values())} BF16 values), {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
