#!/usr/bin/env python3
"""Regenerates fuzz/metrics/corpus/: seed metrics.jsonl files for its fuzzer.

Lines as distributed/metrics/step_record.cpp writes them (step_record_json), then files with one
thing wrong each. Run: python3 fuzz/metrics/make_corpus.py
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from seed_corpus import write_corpus  # noqa: E402 (fuzz/seed_corpus.py)



def record(step, **changes):
    r = {"lr": 0.001, "grad_norm": 0.5, "clipped": False, "tokens_per_s": 1234.5, "step_s": 0.25,
         "peak_bytes": {"activations": 4096, "weights": 1024}, "step": step, "loss": 3.0,
         "ce": 3.0, "kl": 0.25, "accuracy": 0.125, "weight_sum": 12.0, "tokens": 48, "truncated_sequences": 0,
         "accuracy_by_position": [0.5, 0.25, 0.0], "acceptance_length": 1.5}
    for key, value in changes.items():
        if value is None:
            r.pop(key, None)
        else:
            r[key] = value
    return json.dumps(r, separators=(",", ":"))


def lines(*texts):
    return ("\n".join(texts) + "\n").encode()


def seeds():
    yield "valid_three_steps", lines(record(0, loss=3.25), record(1, loss=3.0), record(2, loss=2.5))
    yield "valid_one_step", lines(record(5))
    yield "valid_resumed_relogged", lines(record(0), record(1), record(2), record(1), record(2))
    yield "valid_blank_lines", lines(record(0), "", record(1))
    yield "valid_flat_series", lines(record(0, loss=1.0), record(1, loss=1.0))
    yield "no_records_empty", b""
    yield "no_records_blank_only", b"\n\n\n"
    yield "bad_not_json", lines(record(0), '{"step": 1,')
    yield "bad_missing_key", lines(record(0, loss=None))
    yield "bad_step_string", lines(record("1"))
    yield "bad_step_fraction", lines(record(1.5))
    yield "bad_step_huge_float", lines(record(1e300))
    yield "bad_tokens_huge_float", lines(record(0, tokens=-1e300))
    yield "bad_peak_bytes_float", lines(record(0, peak_bytes={"weights": 1e300}))
    yield "bad_accuracy_by_position_not_list", lines(record(0, accuracy_by_position=0.5))
    yield "bad_clipped_number", lines(record(0, clipped=1))
    yield "bad_number_beyond_double", b'{"step": 0, "loss": 1e999}\n'


def main():
    write_corpus(__file__, ".jsonl", seeds())


if __name__ == "__main__":
    main()
