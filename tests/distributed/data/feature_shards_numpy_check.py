"""The numpy shard writer of distributed/data/dflash_features.py (the README's example) against
`dflash data check`: shards written from fake Hugging Face hidden states pass, and the values read
back are the writer's (bf16 rounding checked bit for bit); a broken shard is refused naming it.
Exit 77 (skip) without numpy."""

import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skipped: numpy is not installed (Debian: python3-numpy)")
    sys.exit(77)

dflash, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "distributed", "data"))
from dflash_features import ShardWriter, _bfloat16_bits, features_from_hidden_states  # noqa: E402

config = json.load(open(os.path.join(root, "configs", "tiny-train.json")))
H, ids, V = config["hidden_size"], config["target_layer_ids"], config["vocab_size"]
rng = np.random.default_rng(5)

# bf16 rounding: ties to even, and a value exactly representable stays.
assert _bfloat16_bits(np.array([1.0], np.float32))[0] == 0x3F80
assert _bfloat16_bits(np.array([1.0 + 2**-8], np.float32))[0] == 0x3F80      # tie -> even
assert _bfloat16_bits(np.array([1.0 + 3 * 2**-8], np.float32))[0] == 0x3F82  # tie -> even (up)

with tempfile.TemporaryDirectory() as tmp:
    shards = os.path.join(tmp, "features")
    os.makedirs(shards)
    for s, dtype in enumerate(["bfloat16", "float16", "float32"]):
        writer = ShardWriter(H, ids, target_model="fake/target")
        for q in range(3):
            S = 5 + q
            # What model(input_ids, output_hidden_states=True) returns: L + 1 = 5 arrays [S, H].
            hidden_states = [rng.standard_normal((S, H)).astype(np.float32) for _ in range(5)]
            features, teacher = features_from_hidden_states(hidden_states, ids)
            assert features.shape == (S, len(ids) * H)
            assert np.array_equal(features[:, H:2 * H], hidden_states[ids[1] + 1])
            writer.add(rng.integers(0, V - 1, S), (rng.random(S) > 0.3).astype(np.uint8), features, teacher)
        writer.write(os.path.join(shards, f"shard-{s:05d}.safetensors"), dtype=dtype)
    run = subprocess.run([dflash, "data", "check", shards, "--config", os.path.join(root, "configs", "tiny-train.json")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "3 shard(s), 9 sequences" in run.stdout, run.stdout

    # A token at vocab_size is refused, naming the file, tensor and index.
    writer = ShardWriter(H, ids)
    tokens = np.zeros(4, np.int64)
    tokens[2] = V
    writer.add(tokens, np.ones(4, np.uint8), np.zeros((4, len(ids) * H)), np.zeros((4, H)))
    bad = os.path.join(shards, "shard-99999.safetensors")
    writer.write(bad)
    run = subprocess.run([dflash, "data", "check", shards, "--config", os.path.join(root, "configs", "tiny-train.json")],
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert bad in run.stderr and "'tokens'[2]" in run.stderr, run.stderr
    os.remove(bad)

    # Bad sequences are refused when added, naming the sequence and what is wrong.
    def refused(what, *sequence):
        writer = ShardWriter(H, ids)
        writer.add(np.zeros(2, np.int64), np.ones(2, np.uint8), np.zeros((2, len(ids) * H)), np.zeros((2, H)))
        try:
            writer.add(*sequence)
        except ValueError as e:
            assert "sequence 1" in str(e) and what in str(e), f"{what}: {e}"
            return
        raise AssertionError(f"{what}: not refused")

    S, KH = 3, len(ids) * H
    good = (np.arange(S), np.ones(S, np.uint8), np.zeros((S, KH)), np.zeros((S, H)))
    refused("features has shape [3, 1]", good[0], good[1], np.zeros((S, 1)), good[3])
    refused("teacher has shape [2, 16]", good[0], good[1], good[2], np.zeros((2, H)))
    refused("loss_mask has shape [4]", good[0], np.ones(4), good[2], good[3])
    refused("tokens has shape [0]", np.zeros(0, np.int64), np.ones(0), np.zeros((0, KH)), np.zeros((0, H)))
    refused("tokens[1] = -1 is not a token id", np.array([0, -1, 2]), *good[1:])
    refused("tokens[1] = 1.5 is not a token id", np.array([0, 1.5, 2]), *good[1:])
    refused("tokens[1] = inf is not a token id", np.array([0, np.inf, 2]), *good[1:])
    refused("tokens[2] = 2147483648 is not a token id", np.array([0, 1, 2**31]), *good[1:])
    refused("tokens[2] = 2147483648.0 is not a token id", np.array([0, 1, 2**31], np.float32), *good[1:])
    refused("loss_mask[1] = 2 is neither 0 nor 1", good[0], np.array([0, 2, 1]), good[2], good[3])
    nan = np.zeros((S, KH))
    nan[2, 5] = np.nan
    refused("features[2, 5] = nan is not finite", good[0], good[1], nan, good[3])
    inf = np.zeros((S, H))
    inf[1, 3] = -np.inf
    refused("teacher[1, 3] = -inf is not finite", good[0], good[1], good[2], inf)
    huge = np.zeros((S, H))
    huge[0, 0] = 1e39
    refused("teacher[0, 0] = 1e+39 overflows float32", good[0], good[1], good[2], huge)
    assert ShardWriter(H, ids).add(np.array([0.0, 1.0, 2.0]), np.array([True, False, True]), *good[2:]) is None

    def write_refused(what, writer, dtype="bfloat16"):
        try:
            writer.write(os.path.join(tmp, "refused.safetensors"), dtype=dtype)
        except ValueError as e:
            assert what in str(e), f"{what}: {e}"
            assert not os.path.exists(os.path.join(tmp, "refused.safetensors"))
            return
        raise AssertionError(f"{what}: written")

    write_refused("no sequence was added", ShardWriter(H, ids))
    writer = ShardWriter(H, ids)
    writer.add(*good)
    write_refused("dtype 'int8'", writer, "int8")
    big = np.zeros((S, KH))
    big[1, 2] = 70000.0
    writer = ShardWriter(H, ids)
    writer.add(*good)
    writer.add(good[0], good[1], big, good[3])
    write_refused("sequence 1: target_features[1, 2] = 70000.0 overflows float16", writer, "float16")
    big[1, 2] = 3.4e38
    writer = ShardWriter(H, ids)
    writer.add(good[0], good[1], big, good[3])
    write_refused("overflows bfloat16", writer, "bfloat16")

    # write() never follows a link: neither one planted at the final name nor one at the name a
    # fixed temporary would have had; the file they point at is left as it was.
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("keep")
    writer = ShardWriter(H, ids)
    writer.add(*good)
    for planted in ("shard-00010.safetensors", "shard-00011.safetensors.tmp"):
        os.symlink(victim, os.path.join(shards, planted))
    writer.write(os.path.join(shards, "shard-00010.safetensors"))
    writer.write(os.path.join(shards, "shard-00011.safetensors"))
    assert open(victim).read() == "keep"
    assert not os.path.islink(os.path.join(shards, "shard-00010.safetensors"))
    # Readable by the training run whoever it runs as, as the C++ writer's files (0644).
    assert os.stat(os.path.join(shards, "shard-00010.safetensors")).st_mode & 0o777 == 0o644
    os.remove(os.path.join(shards, "shard-00011.safetensors.tmp"))
    assert sorted(f for f in os.listdir(shards) if f.endswith(".tmp")) == [], os.listdir(shards)
    run = subprocess.run([dflash, "data", "check", shards, "--config", os.path.join(root, "configs", "tiny-train.json")],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "5 shard(s), 11 sequences" in run.stdout, run.stdout + run.stderr
print("feature_shards_numpy: OK")
