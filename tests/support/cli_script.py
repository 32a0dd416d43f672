"""What the Python test scripts that drive `dflash` share (the Python side of cli_run.hpp): running a
command, and safetensors read and written as raw bytes, so that a test can hand `dflash` a file it
made and compare bitwise what `dflash` wrote.

A tensor is (dtype, shape, bytes): the header's dtype name and shape, and the bytes of its range,
neither decoded nor converted, so that nothing of this module stands between the file and the test.
Standard library only: the scripts that import it run under whichever python3 their test names.

A script puts this folder on its path from the source directory its command line gives it:

    sys.path.insert(0, os.path.join(source, "tests", "support"))
    from cli_script import read_safetensors, run, write_safetensors
"""
import json
import struct
import subprocess
import sys


def run(*args):
    """stdout of the command; the script exits naming the command, its status and its output when
    it fails (every step after it would fail for that reason)."""
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def read_safetensors(path):
    """({name: (dtype, shape, bytes)} in the header's order, the __metadata__ object or None): the
    format's 8-byte little-endian header length, JSON header, data. write_safetensors(path,
    *read_safetensors(path)) writes the same tensors and metadata back."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items() if k != "__metadata__"}
    return tensors, header.get("__metadata__")


def write_safetensors(path, tensors, metadata=None):
    """The tensors in the order given (a script that wants them sorted by name, as `dflash export`
    writes them, builds the dict so), packed back to back; metadata, when given, first as
    __metadata__ (a released drafter carries {"format": "pt"}). The header is padded with spaces
    to a multiple of 8 bytes, as the format recommends, so the data starts aligned."""
    header, blobs, offset = ({} if metadata is None else {"__metadata__": metadata}), [], 0
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
