"""The one writer of a fuzz target's committed seed corpus, for every fuzz/<reader>/make_corpus.py.

write_corpus(__file__, ".json", seeds()) replaces fuzz/<reader>/corpus/*.json with one file a seed,
named <name>.json, where seeds() yields (name, bytes); `make_corpus.py DIR` writes them to DIR
instead (the tree check `tree_corpora` compares that with the committed corpus). A name says what
the reader must do with the input (valid_, bad_, convert_, ...: CONTRIBUTING.md, "Fuzzing"); two
seeds of one name would leave only the second, so a repeated name is refused before anything is
written.
"""
import pathlib
import sys


def write_corpus(script, suffix, seeds):
    corpus = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(script).resolve().parent / "corpus"
    seeds = list(seeds)
    names = [name for name, _ in seeds]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SystemExit(f"{script}: repeated seed names {', '.join(repeated)}")
    corpus.mkdir(exist_ok=True)
    for old in corpus.glob("*" + suffix):
        old.unlink()
    for name, data in seeds:
        (corpus / f"{name}{suffix}").write_bytes(data)
