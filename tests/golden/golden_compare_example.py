#!/usr/bin/env python3
"""golden/examples/compare_{numpy,torch}.py (golden/README.md's `golden compare` examples) run as written, as a user would run them.

In a scratch directory holding configs/mid.json, with DFLASH pointing at the built binary:
1. the numpy example generates a mid-shape golden (1 sequence, S = 48), computes the loss head in
   float32 numpy, writes a float32 result file and runs `dflash golden compare --rule fp32`: it
   must exit 0 with a table of the result's tensors, all PASS;
2. the same result with one gradient scaled by 1.1 must make compare exit 1 naming that tensor
   (so a PASS above is not an accident of a compare that passes everything);
3. the PyTorch example runs on the same golden where torch is installed; otherwise it is skipped,
   saying why.
The `safetensors` package is not installed on the project's machines: the examples run against
the stand-in of golden_numpy_check.py.

Usage: golden_compare_example.py SOURCE_DIR DFLASH_BINARY. Exit 0 when all pass, 1 on a failure,
77 (skipped) when numpy is not installed.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from golden_numpy_check import install_stand_in, example_source  # noqa: E402 (exits 77 without numpy)

import numpy as np  # noqa: E402

DFLASH = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else "dflash"


def run_example(work, marker):
    script = pathlib.Path(work) / f"{marker}.py"
    script.write_text(example_source(marker))
    env = {"PYTHONPATH": str(pathlib.Path(work) / "pkg"), "DFLASH": DFLASH, "PATH": os.environ.get("PATH", "")}
    run = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True)
    print(run.stdout + run.stderr)
    return run


def check_passes(run, what):
    summary = re.search(r"^(\d+) tensors, rule \w+: (\d+) PASS, 0 FAIL$", run.stdout, flags=re.M)
    if run.returncode != 0 or summary is None or summary.group(1) != summary.group(2):
        print(f"FAIL: the {what} example did not end with every tensor PASS (exit {run.returncode})")
        return 1
    return 0


def check_planted_error(work):
    """The numpy example's result with one gradient 10 % off: compare must fail on exactly it."""
    sys.path.insert(0, str(pathlib.Path(work) / "pkg"))
    from safetensors.numpy import load_file, save_file

    result = load_file(str(pathlib.Path(work) / "mid-result.safetensors"))
    tampered = {name: np.array(value) for name, value in result.items()}
    tampered["grad/fc.weight"] = tampered["grad/fc.weight"] * np.float32(1.1)
    path = pathlib.Path(work) / "tampered.safetensors"
    save_file(tampered, str(path))
    run = subprocess.run([DFLASH, "golden", "compare", "--golden", str(pathlib.Path(work) / "mid.safetensors"),
                          "--result", str(path), "--rule", "fp32"], capture_output=True, text=True)
    print(run.stdout + run.stderr)
    if run.returncode != 1 or not re.search(r"^grad/fc.weight +F32 .* FAIL$", run.stdout, flags=re.M) \
            or " PASS, 1 FAIL" not in run.stdout:
        print("FAIL: a gradient scaled by 1.1 was not the one failure")
        return 1
    return 0


def main():
    source = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        (pathlib.Path(work) / "configs").mkdir()
        shutil.copy(source / "configs" / "mid.json", pathlib.Path(work) / "configs" / "mid.json")
        (pathlib.Path(work) / "pkg").mkdir()
        install_stand_in(pathlib.Path(work) / "pkg")

        numpy_failed = check_passes(run_example(work, "compare_numpy"), "numpy")
        failures += numpy_failed if numpy_failed else check_planted_error(work)
        try:
            import torch  # noqa: F401
        except ImportError as e:
            print(f"SKIPPED the PyTorch example: torch is not installed ({e})")
        else:
            failures += check_passes(run_example(work, "compare_torch"), "PyTorch")
    print("all passed" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
