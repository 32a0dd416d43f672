"""Writing dflash feature shards (TRAINING §14) with numpy alone.

A shard is a safetensors file: an 8-byte little-endian header length, a JSON header (tensor
dtypes, shapes and byte ranges, plus "__metadata__"), then the raw little-endian C-order data.
Sequences are packed one after another; `offsets` says where each starts.

    from dflash_features import ShardWriter, features_from_hidden_states
    writer = ShardWriter(hidden_size=H, target_layer_ids=[1, 16, 31, 46, 61], target_model="Qwen/...")
    out = model(input_ids, output_hidden_states=True)          # a Hugging Face causal LM
    hs = [h[0].float().cpu().numpy() for h in out.hidden_states]  # L+1 arrays [S, H]
    features, teacher = features_from_hidden_states(hs, writer.target_layer_ids)
    writer.add(tokens, loss_mask, features, teacher)
    writer.write("features/shard-00000.safetensors")          # dtype="bfloat16" by default
"""

import json
import os
import struct
import tempfile

import numpy as np

_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_INT32_MAX = 2**31 - 1  # a shard stores tokens as int32


def _refuse_first(bad, seq, name, values, why):
    """ValueError naming the first entry of `values` where `bad` holds, with its value."""
    if np.any(bad):
        at = tuple(int(k) for k in np.argwhere(bad)[0])
        raise ValueError(f"sequence {seq}: {name}[{', '.join(map(str, at))}] = {values[at].item()!r} {why}")


def features_from_hidden_states(hidden_states, target_layer_ids):
    """SPEC §2's F and G from Hugging Face `output_hidden_states` of one sequence.

    hidden_states[0] is the embedding output and hidden_states[i + 1] the output of layer i, so
    F concatenates hidden_states[id + 1] over target_layer_ids (in that order) and G is the last
    entry, which Hugging Face decoders return after the final norm.
    """
    features = np.concatenate([np.asarray(hidden_states[i + 1], dtype=np.float32) for i in target_layer_ids], axis=-1)
    teacher = np.asarray(hidden_states[-1], dtype=np.float32)
    return features, teacher


def _bfloat16_bits(values):
    """float32 -> bfloat16 bits, rounded to nearest, ties to even (NaN kept NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


class ShardWriter:
    def __init__(self, hidden_size, target_layer_ids, target_model=None):
        self.hidden_size = int(hidden_size)
        self.target_layer_ids = [int(i) for i in target_layer_ids]
        self.target_model = target_model
        self.tokens, self.loss_mask, self.features, self.teacher = [], [], [], []

    def add(self, tokens, loss_mask, features, teacher):
        """One sequence: tokens [S] ints, loss_mask [S] 0/1, features [S, K H], teacher [S, H].

        Raises ValueError naming the sequence, the entry and its value when something is wrong (a
        shape, a token that is not an integer in [0, 2^31 - 1] as the shard's int32 stores it, a
        mask value other than 0 and 1, a feature that is not finite or overflows float32): caught
        here, not in `dflash data check` after a long extraction. Whether a token is below the
        vocabulary size is the check's to say (the writer does not know the config)."""
        seq = len(self.tokens)
        KH = len(self.target_layer_ids) * self.hidden_size
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.shape[0] < 1:
            raise ValueError(f"sequence {seq}: tokens has shape {list(tokens.shape)}; expected [S] with S >= 1")
        S = tokens.shape[0]
        expected = {"loss_mask": (np.shape(loss_mask), (S,)), "features": (np.shape(features), (S, KH)),
                    "teacher": (np.shape(teacher), (S, self.hidden_size))}
        for name, (shape, want) in expected.items():
            if tuple(shape) != want:
                raise ValueError(f"sequence {seq}: {name} has shape {list(shape)}; expected {list(want)} "
                                 f"(S = {S} tokens, K H = {KH}, H = {self.hidden_size})")
        if not (np.issubdtype(tokens.dtype, np.integer) or np.issubdtype(tokens.dtype, np.floating)):
            raise ValueError(f"sequence {seq}: tokens are {tokens.dtype}; expected integers")
        # Compared in float64, which holds 2^31 - 1 and 2^31 exactly: under NumPy 2's promotion a
        # float32 array compared with 2^31 - 1 would round the bound to 2^31 and let 2^31 through.
        wide = tokens.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(wide) | (wide != np.floor(wide)) | (wide < 0) | (wide > _INT32_MAX)
        _refuse_first(bad, seq, "tokens", tokens, "is not a token id (an integer in [0, 2^31 - 1])")
        loss_mask = np.asarray(loss_mask)
        _refuse_first(~np.isin(loss_mask, (0, 1)), seq, "loss_mask", loss_mask, "is neither 0 nor 1")
        checked = []
        for name, values in (("features", features), ("teacher", teacher)):
            values = np.asarray(values)
            if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
                raise ValueError(f"sequence {seq}: {name} are {values.dtype}; expected numbers")
            _refuse_first(~np.isfinite(values), seq, name, values, "is not finite")
            with np.errstate(over="ignore"):
                narrow = values.astype(np.float32)
            _refuse_first(~np.isfinite(narrow), seq, name, values, "overflows float32")
            checked.append(narrow)
        self.tokens.append(tokens.astype(np.int64))
        self.loss_mask.append(loss_mask.astype(np.uint8))
        self.features.append(checked[0])
        self.teacher.append(checked[1])

    def write(self, path, dtype="bfloat16"):
        """The sequences added so far as one shard at `path` (TRAINING §14), in `dtype` (bfloat16,
        float16 or float32): all of it or, whatever fails, none of it under that name."""
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(_DTYPES)}")
        if not self.tokens:
            raise ValueError(f"{path}: no sequence was added")
        lengths = [len(t) for t in self.tokens]
        floats = {"target_features": np.concatenate(self.features), "teacher_hidden": np.concatenate(self.teacher)}
        tensors = [
            ("offsets", "I64", np.concatenate([[0], np.cumsum(lengths)]).astype("<i8")),
            ("tokens", "I32", np.concatenate(self.tokens).astype("<i4")),
            ("loss_mask", "U8", np.concatenate(self.loss_mask).astype(np.uint8)),
        ]
        for name, values in floats.items():
            if dtype == "bfloat16":
                stored = _bfloat16_bits(values).astype("<u2")
                overflow = (stored & 0x7F80) == 0x7F80  # exponent all ones: rounded to infinity
            else:
                with np.errstate(over="ignore"):
                    stored = values.astype(np.dtype(dtype).newbyteorder("<"))
                overflow = ~np.isfinite(stored)
            if overflow.any():  # every value was finite in float32 (add): rounding took it past the format
                row, col = (int(k) for k in np.argwhere(overflow)[0])
                seq = int(np.searchsorted(np.cumsum(lengths), row, side="right"))  # the add() it came from
                raise ValueError(f"{path}: sequence {seq}: {name}[{row - sum(lengths[:seq])}, {col}] = "
                                 f"{values[row, col].item()!r} overflows {dtype}; "
                                 "write the shard as float32 or scale the hidden states")
            tensors.append((name, _DTYPES[dtype], stored))
        metadata = {"format": "dflash-features", "version": "1", "hidden_size": str(self.hidden_size),
                    "target_layer_ids": json.dumps(self.target_layer_ids), "num_sequences": str(len(lengths))}
        if self.target_model:
            metadata["target_model"] = self.target_model
        header, offset = {"__metadata__": metadata}, 0
        for name, dt, values in tensors:
            shape = list(floats[name].shape) if name in floats else [len(values)]
            header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + values.nbytes]}
            offset += values.nbytes
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        _write_atomically(path, [struct.pack("<Q", len(text)), text] + [values.tobytes() for _, _, values in tensors])


def _write_atomically(path, pieces):
    """`path` replaced whole by the pieces: written to a temporary created exclusively beside it
    (a random name, O_EXCL: a link planted anywhere is never followed), flushed to disk, renamed
    over `path`, the folder flushed (a rename is durable only then). A failure removes the
    temporary: the final name holds its old contents or all of the new ones."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would keep a training run under another account out
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
