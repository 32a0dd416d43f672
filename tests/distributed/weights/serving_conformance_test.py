#!/usr/bin/env python3
"""The serving-loader conformance check (harness/serving/conformance.py) on real exports, and on one
broken export per rule, each of which it must catch:

  1. `dflash data synth` + `dflash train` (configs/tiny-train.json, 2 steps) + `dflash export`: the
     exported directory passes, with num_target_layers equal to the synthetic target's
     num_hidden_layers;
  2. the full-scale config (configs/qwen3.6-27b.json): the manifest of what an export writes there
     (config.json and every tensor's dtype and shape, from export_manifest) passes, with
     num_target_layers 64 (Qwen3.6-27B's depth);
  3. each plant below, made on a copy of export 1, fails naming its rule.

  serving_conformance_test.py DFLASH EXPORT_MANIFEST SOURCE_DIR WORK_DIR
"""
import copy
import json
import os
import shutil
import sys

source = sys.argv[3]
sys.path.insert(0, os.path.join(source, "harness", "serving"))
import conformance  # noqa: E402

sys.path.insert(0, os.path.join(source, "tests", "support"))
from cli_script import read_safetensors, run, write_safetensors  # noqa: E402

dflash, manifest_tool, work = sys.argv[1], sys.argv[2], sys.argv[4]
failures = []


# 1. A real export.
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
with open(os.path.join(source, "configs", "tiny-train.json")) as f:
    config = json.load(f)
config.update(total_steps=2, warmup_steps=1)
config_path = os.path.join(work, "config.json")
with open(config_path, "w") as f:
    json.dump(config, f)
data = os.path.join(work, "data")
run(dflash, "data", "synth", "--config", config_path, "--out", data, "--sequences", "8", "--shards", "1")
run(dflash, "train", "--config", config_path, "--data", os.path.join(data, "features"), "--target",
    os.path.join(data, "target"), "--out", os.path.join(work, "run"))
exported = os.path.join(work, "export")
run(dflash, "export", "--checkpoint", os.path.join(work, "run"), "--out", exported)
with open(os.path.join(data, "target", "config.json")) as f:
    depth = json.load(f)["num_hidden_layers"]
with open(os.path.join(exported, "config.json")) as f:
    good_config = json.load(f)
if good_config.get("num_target_layers") != depth:
    failures.append(f"tiny export: num_target_layers {good_config.get('num_target_layers')} is not the target's "
                    f"num_hidden_layers {depth}")
report = conformance.check(*conformance.read_directory(exported, conformance.Report()), num_target_layers=depth)
for rule, message in report.violations:
    failures.append(f"tiny export fails {rule}: {message}")
print(f"tiny export: {len(report.violations)} violation(s), num_target_layers {good_config.get('num_target_layers')}"
      f" = target depth {depth}")

# 2. The full-scale config's export, as a manifest.
manifest = json.loads(run(manifest_tool, os.path.join(source, "configs", "qwen3.6-27b.json")))
report = conformance.check(manifest["config"], manifest["tensors"], num_target_layers=64)
for rule, message in report.violations:
    failures.append(f"full-scale export fails {rule}: {message}")
print(f"full-scale export: {len(manifest['tensors'])} tensors, {len(report.violations)} violation(s), "
      f"num_target_layers {manifest['config'].get('num_target_layers')}")

# 3. One plant per rule.
good_tensors, metadata = read_safetensors(os.path.join(exported, "model.safetensors"))
K, H = len(good_config["dflash_config"]["target_layer_ids"]), good_config["hidden_size"]


def config_plant(edit):
    def apply(c, t):
        edit(c)
    return apply


def set_key(key, value):
    return config_plant(lambda c: c.__setitem__(key, value))


def set_nested(key, value):
    return config_plant(lambda c: c["dflash_config"].__setitem__(key, value))


def tensor_plant(edit):
    def apply(c, t):
        edit(t)
    return apply


def rename(old, new):
    return tensor_plant(lambda t: t.__setitem__(new, t.pop(old)))


def as_f64(name):
    def edit(t):
        dtype, shape, blob = t[name]
        t[name] = ("F64", shape, blob * 4)
    return tensor_plant(edit)


def fc_narrower(t):
    dtype, shape, blob = t["fc.weight"]
    t["fc.weight"] = (dtype, [H, (K - 1) * H], blob[: H * (K - 1) * H * 2])


def add_bias(t):
    t["layers.0.self_attn.q_proj.bias"] = ("BF16", [16], bytes(32))


plants = [
    ("num_target_layers is K (the old export)", set_key("num_target_layers", K), "target_layer_ids"),
    ("num_target_layers absent", config_plant(lambda c: c.pop("num_target_layers")), "num_target_layers"),
    ("num_target_layers not the target's depth", set_key("num_target_layers", depth + 1), "num_target_layers"),
    ("num_target_layers a string", set_key("num_target_layers", str(depth)), "num_target_layers"),
    ("a negative target layer id", set_nested("target_layer_ids", [-1, 3]), "target_layer_ids"),
    ("target_layer_ids empty", set_nested("target_layer_ids", []), "target_layer_ids"),
    ("another architecture", set_key("architectures", ["Qwen3ForCausalLM"]), "architecture"),
    ("another model_type", set_key("model_type", "llama"), "model_type"),
    ("mask_token_id a bool", set_nested("mask_token_id", True), "mask_token_id"),
    ("mask_token_id beyond the vocabulary", set_nested("mask_token_id", good_config["vocab_size"]), "mask_token_id"),
    ("block_size 0", set_key("block_size", 0), "block_size"),
    ("hidden_act gelu", set_key("hidden_act", "gelu"), "hidden_act"),
    ("attention_bias true", set_key("attention_bias", True), "attention_bias"),
    ("rope scaling", set_key("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "rope"),
    ("a layer type too few", config_plant(lambda c: c["layer_types"].pop()), "layer_types"),
    ("an unknown layer type", config_plant(lambda c: c["layer_types"].__setitem__(0, "local")), "layer_types"),
    ("sliding layers without a window", set_key("sliding_window", None), "sliding_window"),
    ("is_causal written", set_key("is_causal", True), "causal"),
    ("dflash_config.causal written", set_nested("causal", False), "causal"),
    ("num_key_value_heads not dividing", set_key("num_key_value_heads", 3), "num_key_value_heads"),
    ("names with model. prefix", rename("fc.weight", "model.fc.weight"), "tensor_prefix"),
    ("a tensor missing", tensor_plant(lambda t: t.pop("layers.1.mlp.down_proj.weight")), "tensor_missing"),
    ("an unknown tensor", tensor_plant(add_bias), "tensor_unknown"),
    ("fc narrower than K * H", tensor_plant(fc_narrower), "fc_width"),
    ("an F64 tensor", as_f64("norm.weight"), "tensor_dtype"),
    ("a transposed projection", tensor_plant(lambda t: t.__setitem__(
        "layers.0.mlp.up_proj.weight", (t["layers.0.mlp.up_proj.weight"][0],
                                         t["layers.0.mlp.up_proj.weight"][1][::-1],
                                         t["layers.0.mlp.up_proj.weight"][2]))), "tensor_shape"),
]
for i, (what, apply, rule) in enumerate(plants):
    directory = os.path.join(work, f"plant-{i:02d}")
    shutil.copytree(exported, directory)
    c, t = copy.deepcopy(good_config), dict(good_tensors)
    apply(c, t)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(c, f)
    write_safetensors(os.path.join(directory, "model.safetensors"), t, metadata)
    report = conformance.check(*conformance.read_directory(directory, conformance.Report()), num_target_layers=depth)
    rules = sorted({r for r, _ in report.violations})
    print(f"plant {what!r}: caught by {rules}")
    if rule not in rules:
        failures.append(f"plant {what!r} was not caught by rule {rule} (violations: {rules})")

# A truncated file: the reader's own rule.
directory = os.path.join(work, "plant-truncated")
shutil.copytree(exported, directory)
path = os.path.join(directory, "model.safetensors")
os.truncate(path, os.path.getsize(path) - 2)
report = conformance.Report()
conformance.read_directory(directory, report)
if "safetensors" not in {r for r, _ in report.violations}:
    failures.append("a truncated model.safetensors was not caught")

for f in failures:
    print("FAIL:", f)
print(f"serving conformance: {len(plants) + 1} plants, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
