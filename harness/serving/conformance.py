#!/usr/bin/env python3
"""Would SGLang and vLLM load this exported DFlash drafter? A check of an exported directory
(config.json + model.safetensors, or a sharded index) against the rules their DFlash loaders apply,
written from a reading of (not copied from):

  SGLang  python/sglang/srt/speculative/dflash_utils.py  @ 00731f0bc9fa81c39802754fb4b62e9cce967582
          (parse_dflash_draft_config, DFlashDraftConfig.resolve_target_layer_ids,
          get_dflash_layer_types, get_dflash_attention_sliding_window_size)
  SGLang  python/sglang/srt/models/dflash.py             @ 003b23d7388eabdfbfecd2610c7e228f9f6a2734
          (DFlashAttention, DFlashMLP, DFlashDraftModel.__init__ and load_weights)
  vLLM    vllm/model_executor/models/qwen3_dflash.py     @ 036a00d1f5d00d449d02dce9babdd15a5b4d06c9
          (_dflash_layer_causal, _resolve_layer_attention, _get_dflash_fc_input_size,
          DFlashQwen3Model.hf_to_vllm_mapper and load_weights)

Each rule has a name; a violation prints "RULE: what is wrong" and the check exits 1. Where a
loader is lenient in a way that would load a wrong drafter without an error (SGLang ignores
unknown tensors and never reports a missing one; it falls back to the drafter's own depth when
num_target_layers is absent), the rule is strict: an export must be complete and say what it means.

  conformance.py DIR [--num-target-layers N]   an exported directory; N: the target's layer count
  conformance.py --manifest FILE               {"config": {...}, "tensors": {name: {"dtype", "shape"}}}
                                               (what an export at a config would write, for shapes
                                               too large to write in CI)
Only the Python standard library is used.
"""
import argparse
import json
import os
import struct
import sys

ACCEPTED_DTYPES = {"BF16", "F16", "F32"}  # what the loaders' weight_loader copies into bf16 params
LAYER_TYPES = {"full_attention", "sliding_attention"}
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def is_int(v):
    # JSON integers only: SGLang refuses a bool mask_token_id, and int(true) would pass silently elsewhere.
    return isinstance(v, int) and not isinstance(v, bool)


def dflash_field(config, key):
    """SGLang reads dflash_config first, then the top level (parse_dflash_draft_config)."""
    nested = config.get("dflash_config")
    if isinstance(nested, dict) and key in nested:
        return nested[key]
    return config.get(key)


class Report:
    def __init__(self):
        self.violations = []
        self.notes = []

    def fail(self, rule, message):
        self.violations.append((rule, message))


def check_config(config, report, num_target_layers=None):
    """The config rules. Returns the dimensions the tensor rules need, or None."""
    if not isinstance(config, dict):
        report.fail("config", "config.json is not a JSON object")
        return None
    archs = config.get("architectures")
    if not isinstance(archs, list) or "DFlashDraftModel" not in archs:
        report.fail("architecture", f"architectures is {archs!r}; both loaders dispatch on \"DFlashDraftModel\"")
    if config.get("model_type") != "qwen3":
        report.fail("model_type", f"model_type is {config.get('model_type')!r}; vLLM reads the draft as a Qwen3Config")

    dims = {}
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size"):
        v = config.get(key)
        if not is_int(v) or v < 1:
            report.fail(key, f"{key} is {v!r}, not an integer >= 1")
            dims[key] = None
        else:
            dims[key] = v
    nh, H = dims["num_attention_heads"], dims["hidden_size"]
    nkv = config.get("num_key_value_heads", nh)
    if not is_int(nkv) or nkv < 1 or (nh and nh % nkv):
        report.fail("num_key_value_heads", f"num_key_value_heads is {nkv!r}; it must divide num_attention_heads {nh}")
        nkv = None
    d = config.get("head_dim", (H // nh) if (H and nh) else None)
    if not is_int(d) or d < 1:
        report.fail("head_dim", f"head_dim is {d!r}, not an integer >= 1")
        d = None
    dims.update(num_key_value_heads=nkv, head_dim=d)

    L = dims["num_hidden_layers"]
    depth = dflash_field(config, "num_target_layers")
    if depth is None:
        report.fail("num_target_layers", "absent: SGLang then takes the drafter's num_hidden_layers as the target's "
                    "depth and refuses every target_layer_id at or above it")
    elif not is_int(depth) or depth < 1:
        report.fail("num_target_layers", f"num_target_layers is {depth!r}, not an integer >= 1")
        depth = None
    elif num_target_layers is not None and depth != num_target_layers:
        report.fail("num_target_layers", f"num_target_layers is {depth} but the target has {num_target_layers} layers")

    ids = dflash_field(config, "target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(is_int(i) for i in ids):
        report.fail("target_layer_ids", f"target_layer_ids is {ids!r}, not a non-empty list of integers")
        ids = None
    else:
        for i, v in enumerate(ids):
            if v < 0 or (is_int(depth) and v >= depth):
                report.fail("target_layer_ids", f"target_layer_ids[{i}] = {v} is outside [0, num_target_layers = "
                            f"{depth}) (SGLang: 'contains an out-of-range layer id')")
    dims["K"] = len(ids) if ids else None

    block = dflash_field(config, "block_size")
    if not is_int(block) or block < 1:
        report.fail("block_size", f"block_size is {block!r}, not an integer >= 1")
    mask = dflash_field(config, "mask_token_id")
    if not is_int(mask) or mask < 0 or (dims["vocab_size"] and mask >= dims["vocab_size"]):
        report.fail("mask_token_id", f"mask_token_id is {mask!r}; it must be an integer (not a bool) in [0, vocab_size)")

    act = config.get("hidden_act", "silu")
    if act != "silu":
        report.fail("hidden_act", f"hidden_act is {act!r}; SGLang's DFlashMLP supports only silu")
    if config.get("attention_bias", False) is not False:
        report.fail("attention_bias", f"attention_bias is {config.get('attention_bias')!r}: the loaders would expect "
                    "q/k/v/o biases the drafter does not have")
    if config.get("rope_scaling") not in (None, {}) or (isinstance(config.get("rope_parameters"), dict) and
                                                         config["rope_parameters"].get("rope_type", "default") != "default"):
        report.fail("rope", "rope scaling is set: the drafter was trained with plain RoPE")

    types = config.get("layer_types")
    sliding = False
    if types is not None:
        if isinstance(types, str) or not isinstance(types, list) or (L and len(types) != L):
            report.fail("layer_types", f"layer_types is {types!r}; one entry per layer ({L}) is needed")
        else:
            bad = [t for t in types if t not in LAYER_TYPES]
            if bad:
                report.fail("layer_types", f"layer_types holds {bad!r}; only full_attention and sliding_attention load")
            sliding = "sliding_attention" in types
            if sliding and "full_attention" in types:
                report.notes.append("vLLM loads mixed sliding/full layers only with VLLM_USE_V2_MODEL_RUNNER=1")
    if sliding:
        window = config.get("sliding_window")
        if not is_int(window) or window < 1:
            report.fail("sliding_window", f"sliding_window is {window!r}; sliding_attention layers need an integer >= 1")
    elif config.get("use_sliding_window") is True and types is None:
        report.fail("layer_types", "use_sliding_window is true without layer_types: which layers slide is ambiguous")

    # vLLM's _dflash_layer_causal: is_causal or dflash_config.causal overrides the per-layer rule
    # (sliding layers causal, full layers bidirectional) that SPEC §3's mask is.
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    if "is_causal" in config or "causal" in nested:
        report.fail("causal", "is_causal / dflash_config.causal is present: vLLM would apply it to every layer")
    if nested.get("use_swa"):
        report.fail("causal", "dflash_config.use_swa is set: vLLM would make every layer sliding")
    return dims


def expected_tensors(dims):
    H, I, L, nh, nkv, d, K = (dims[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                 "num_attention_heads", "num_key_value_heads", "head_dim", "K"))
    # SGLang's DFlashDraftModel: fc [H, K*H] (ReplicatedLinear(K*H -> H)), hidden_norm, norm, and per layer
    # the Qwen3 attention (q/k/v stacked into qkv_proj, per-head q_norm/k_norm) and MLP (gate/up stacked).
    want = {"fc.weight": [H, K * H], "hidden_norm.weight": [H], "norm.weight": [H]}
    for i in range(L):
        p = f"layers.{i}."
        want.update({
            p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
            p + "self_attn.q_proj.weight": [nh * d, H], p + "self_attn.k_proj.weight": [nkv * d, H],
            p + "self_attn.v_proj.weight": [nkv * d, H], p + "self_attn.o_proj.weight": [H, nh * d],
            p + "self_attn.q_norm.weight": [d], p + "self_attn.k_norm.weight": [d],
            p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H], p + "mlp.down_proj.weight": [H, I],
        })
    return want


def check_tensors(tensors, dims, report):
    """tensors: {name: {"dtype": str, "shape": [int]}} as the safetensors headers give them."""
    if dims is None or any(dims[k] is None for k in dims):
        report.fail("tensors", "not checked: the config's dimensions are invalid (above)")
        return
    want = expected_tensors(dims)
    for name, info in sorted(tensors.items()):
        if name.startswith("model."):
            report.fail("tensor_prefix", f"'{name}': vLLM prepends 'model.' itself, so it would look for "
                        f"'model.{name}'; store names unprefixed")
            continue
        if name not in want:
            report.fail("tensor_unknown", f"'{name}' is not a tensor of this drafter (SGLang would drop it silently)")
            continue
        if info["dtype"] not in ACCEPTED_DTYPES:
            report.fail("tensor_dtype", f"'{name}' is {info['dtype']}; the loaders take BF16, F16 or F32")
        if list(info["shape"]) != want[name]:
            rule = "fc_width" if name == "fc.weight" else "tensor_shape"
            report.fail(rule, f"'{name}' has shape {list(info['shape'])}, the config needs {want[name]}"
                        + (" (fc in-features = K * hidden_size, K = len(target_layer_ids))" if rule == "fc_width" else ""))
    for name in sorted(set(want) - set(tensors) - {n[len('model.'):] for n in tensors if n.startswith("model.")}):
        report.fail("tensor_missing", f"'{name}' is missing (SGLang would keep its random init without a word)")


def read_safetensors_header(path, report):
    """{name: {"dtype", "shape"}} of one file, checking what a reader needs: the length word, the
    JSON header, and every tensor's byte range inside the file and as long as its shape says."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            report.fail("safetensors", f"{path}: shorter than the 8-byte header length")
            return {}
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            report.fail("safetensors", f"{path}: header length {n} runs past the file's {size} bytes")
            return {}
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            report.fail("safetensors", f"{path}: header is not JSON ({e})")
            return {}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info.get("dtype"), info.get("shape"), info.get("data_offsets", (0, -1))
        count = 1
        for s in shape:
            count *= s
        if dtype not in DTYPE_BYTES or not (0 <= begin <= end <= size - 8 - n) or end - begin != count * DTYPE_BYTES[dtype]:
            report.fail("safetensors", f"{path}: tensor '{name}' ({dtype}, {shape}, bytes {begin}..{end}) does not fit "
                        "the file")
        tensors[name] = {"dtype": dtype, "shape": shape}
    return tensors


def read_directory(directory, report):
    config_path = os.path.join(directory, "config.json")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        report.fail("config", f"{config_path}: {e}")
        return None, {}
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            report.fail("safetensors", f"{path} is missing")
            continue
        tensors.update(read_safetensors_header(path, report))
    return config, tensors


def check(config, tensors, num_target_layers=None):
    report = Report()
    dims = check_config(config, report, num_target_layers)
    check_tensors(tensors, dims, report)
    return report


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?")
    parser.add_argument("--manifest")
    parser.add_argument("--num-target-layers", type=int)
    args = parser.parse_args(argv)
    if (args.directory is None) == (args.manifest is None):
        parser.error("give an exported directory or --manifest FILE")
    report = Report()
    if args.manifest:
        with open(args.manifest) as f:
            manifest = json.load(f)
        config, tensors, what = manifest["config"], manifest["tensors"], args.manifest
    else:
        config, tensors = read_directory(args.directory, report)
        what = args.directory
    if config is not None:
        checked = check(config, tensors, args.num_target_layers)
        report.violations += checked.violations
        report.notes += checked.notes
    for rule, message in report.violations:
        print(f"{rule}: {message}")
    for note in report.notes:
        print(f"note: {note}")
    if report.violations:
        print(f"conformance: {what}: {len(report.violations)} rule(s) violated")
        return 1
    print(f"conformance: {what}: loads under SGLang's and vLLM's DFlash rules ({len(tensors)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
