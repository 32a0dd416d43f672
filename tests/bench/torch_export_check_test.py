#!/usr/bin/env python3
"""`dflash export` checked by a second implementation (bench/reference/torch_export_check.py):

  1. a released-style drafter shaped as configs/tiny-train.json, with weights that make every part
     of the forward count (matrices ~ N(0, 1/fan_in), norm weights 1 +- 0.5, so that attention,
     RoPE and each projection move Y by far more than bf16 rounding), goes through
     `dflash train --init` (one step at learning rate 0) and `dflash export`;
  2. `dflash golden generate --config --weights` of the export: the reference's Y at its weights;
  3. the torch drafter on the export and the golden's inputs, in bfloat16, must pass
     `dflash golden compare --rule bf16`, and in float64 `--rule exact`;
  4. each planted broken export (a square tensor transposed, rope_theta off, a sliding layer made
     full) must fail the bf16 rule on output/hidden: the torch side reads what the export says,
     the golden holds what the project means;
  5. a golden with dropout and an export of another K are refused, naming the golden.

  torch_export_check_test.py DFLASH SOURCE_DIR WORK_DIR

Exit 0 when all hold, 1 on a failure, 77 (skipped, with the reason) when torch is not importable.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys

dflash, source, work = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
check = os.path.join(source, "bench", "reference", "torch_export_check.py")
sys.path.insert(0, os.path.join(source, "tests", "support"))
from cli_script import read_safetensors, run, write_safetensors  # noqa: E402

try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError as error:
    print(f"SKIPPED: torch (with numpy) is not importable by {sys.executable}: {error}")
    sys.exit(77)
# In this process (torch starts once); the command line once, as a user runs it.
sys.path.insert(0, os.path.dirname(check))
import torch_export_check  # noqa: E402

TARGET_DEPTH = 6
failures = []


def bf16_bits(value):
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even


def released_drafter(directory, c):
    H, I, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    nh, nkv, d, K = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], len(c["target_layer_ids"])
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
        count = shape[0] * (shape[1] if len(shape) == 2 else 1)
        values = ([rng.gauss(0, 1 / shape[1] ** 0.5) for _ in range(count)] if len(shape) == 2 else
                  [1 + rng.uniform(-0.5, 0.5) for _ in range(count)])
        tensors[name] = ("BF16", shape, struct.pack(f"<{count}H", *(bf16_bits(v) for v in values)))
    os.makedirs(directory)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    config = {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
              "model_type": "qwen3", "num_target_layers": TARGET_DEPTH,
              "dflash_config": {"mask_token_id": c["mask_token_id"], "target_layer_ids": c["target_layer_ids"]},
              "torch_dtype": "bfloat16", "use_sliding_window": True}
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "num_hidden_layers", "rms_norm_eps", "rope_theta", "vocab_size", "block_size", "layer_types",
                "sliding_window"):
        config[key] = c[key]
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def torch_result(export, golden, out, dtype):
    try:
        print(torch_export_check.export_forward(export, golden, out, dtype))
    except torch_export_check.Unusable as error:
        sys.exit(f"torch_export_check on {export} refused it: {error}")


def compare(golden, result, rule):
    r = subprocess.run([dflash, "golden", "compare", "--golden", golden, "--result", result, "--rule", rule, "--json"],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"dflash golden compare failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    report = json.loads(r.stdout)
    rows = {t["name"]: t for t in report["tensors"]}
    return r.returncode, rows


# 1. A released-style drafter through --init and export.
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
with open(os.path.join(source, "configs", "tiny-train.json")) as f:
    train_config = json.load(f)
train_config.update(learning_rate=0.0, min_learning_rate=0.0, warmup_steps=0, total_steps=1)
train_path, synth_path = os.path.join(work, "train.json"), os.path.join(work, "synth.json")
with open(train_path, "w") as f:
    json.dump(train_config, f)
with open(synth_path, "w") as f:
    json.dump(dict(train_config, num_target_layers=TARGET_DEPTH), f)
released = os.path.join(work, "released")
released_drafter(released, train_config)
data = os.path.join(work, "data")
run(dflash, "data", "synth", "--config", synth_path, "--out", data, "--sequences", "6", "--shards", "1")
run(dflash, "train", "--config", train_path, "--data", os.path.join(data, "features"), "--target",
    os.path.join(data, "target"), "--init", released, "--out", os.path.join(work, "run"))
exported = os.path.join(work, "export")
run(dflash, "export", "--checkpoint", os.path.join(work, "run"), "--out", exported)

# 2. The reference at the export's weights: 3 sequences, a context that holds every block.
golden = os.path.join(work, "golden.safetensors")
out = run(dflash, "golden", "generate", "--config", train_path, "--weights", exported, "--sequences", "3",
          "--context", "20", "--out", golden)
if not re.search(r"parameters from ", out):
    failures.append(f"golden generate did not say where the parameters came from:\n{out}")

# 3. The torch drafter on the export agrees: bf16 under the bf16 rule, float64 under the exact rule;
# bf16 through the command line, as documented.
for dtype, rule in (("bfloat16", "bf16"), ("float64", "exact")):
    result = os.path.join(work, f"torch-{dtype}.safetensors")
    if dtype == "bfloat16":
        print(run(sys.executable, check, "--export", exported, "--golden", golden, "--out", result).strip())
    else:
        torch_result(exported, golden, result, dtype)
    code, rows = compare(golden, result, rule)
    row = rows.get("output/hidden")
    if row is None or code != 0 or not row["passed"]:
        failures.append(f"torch {dtype} on the export fails rule {rule}: {row}")
    else:
        print(f"torch {dtype} vs the golden at the export's weights: output/hidden error {row['error']:.3e}, "
              f"bound {row['bound']:.3e} (rule {rule}): PASS")


# 4. Planted broken exports: the bf16 forward must fail the bf16 rule on each.
def plant_transposed(directory):
    path = os.path.join(directory, "model.safetensors")
    tensors, _ = read_safetensors(path)
    name = "layers.0.self_attn.q_proj.weight"  # [nh d, H] = [16, 16]: a loader cannot see the transposition
    dtype, shape, blob = tensors[name]
    rows, cols = shape
    words = struct.unpack(f"<{rows * cols}H", blob)
    tensors[name] = (dtype, shape, struct.pack(f"<{rows * cols}H", *(words[c * cols + r] for r in range(rows)
                                                                          for c in range(cols))))
    write_safetensors(path, tensors)


def plant_config(change):
    def plant(directory):
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        change(config)
        with open(path, "w") as f:
            json.dump(config, f)
    return plant


plants = {
    "q_proj transposed": plant_transposed,
    "rope_theta 1e6 instead of 1e4": plant_config(lambda c: c.update(rope_theta=1e6)),
    "layer 0 full instead of sliding": plant_config(lambda c: c.update(layer_types=["full_attention"] * 2)),
}
for what, plant in plants.items():
    broken = os.path.join(work, "broken")
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(exported, broken)
    plant(broken)
    result = os.path.join(work, "torch-broken.safetensors")
    os.remove(result) if os.path.exists(result) else None
    torch_result(broken, golden, result, "bfloat16")
    code, rows = compare(golden, result, "bf16")
    row = rows.get("output/hidden")
    if code != 1 or row is None or row["passed"]:
        failures.append(f"planted '{what}' was not caught: compare exit {code}, {row}")
    else:
        print(f"planted '{what}': output/hidden error {row['error']:.3e} > bound {row['bound']:.3e}: caught")

# 5. What the forward cannot reproduce is refused, naming the file: dropout (its masks are the
# reference's Philox streams), features of another width than the export's K H.
dropout_golden = os.path.join(work, "dropout.safetensors")
run(dflash, "golden", "generate", "--config", train_path, "--weights", exported, "--sequences", "1", "--context", "20",
    "--hidden-dropout", "0.1", "--out", dropout_golden)
wide = os.path.join(work, "wide")
shutil.rmtree(wide, ignore_errors=True)
shutil.copytree(exported, wide)
plant_config(lambda c: c["dflash_config"].update(target_layer_ids=[1, 2, 3]))(wide)
for what, export, golden_file, named in (
        ("a golden with dropout", exported, dropout_golden, "hidden_dropout = 0.1"),
        ("an export of another K", wide, golden, "input/target_features has width 32, the export's K H = 3 x 16")):
    try:
        torch_export_check.export_forward(export, golden_file, os.path.join(work, "refused.safetensors"))
        failures.append(f"{what} was not refused")
    except torch_export_check.Unusable as error:
        if golden_file not in str(error) or named not in str(error):
            failures.append(f"{what}: the refusal '{error}' does not name {golden_file} and '{named}'")
        else:
            print(f"{what}: refused ({error})")

for f in failures:
    print("FAIL:", f)
print(f"torch export check: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
