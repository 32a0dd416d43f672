#!/usr/bin/env python3
"""The tree's own rules, checked on every CI run (CONTRIBUTING.md, "Layers" and "Names").

  check_tree.py ROOT layers      every #include "..." edge is allowed by CONTRIBUTING.md's layer table
  check_tree.py ROOT names       library files do not repeat a folder name; test binaries are named
                                 after their main source, `_gpu` exactly for the `gpu` label
  check_tree.py ROOT tolerances  every constexpr tolerance, floor or bound lives in common/tolerances.hpp
  check_tree.py ROOT doc-paths   every repository path a README or CONTRIBUTING.md names exists
  check_tree.py ROOT doc-words   the reference READMEs stay within their word limit
  check_tree.py ROOT mutants     every row of tests/mutants/*.tsv still matches the tree (ci/mutate's
                                 rule: its text occurs once, its tests exist and are not gpu tests), and
                                 every production header with DFLASH_HD code has a row
  check_tree.py ROOT corpora     every fuzz/<reader>/corpus/ is what its make_corpus.py writes, byte for
                                 byte (a seed added by hand, or a corpus not remade after a change, fails)
  check_tree.py ROOT device-syncs  production code makes no device-wide synchronizing CUDA call, and
                                 calls cublasCreate and cublasDestroy only in cuda/gemm/ and the device
                                 probe (CONTRIBUTING.md, "Adding a kernel": a step never waits for the
                                 whole device, which would bypass the communicator's wait for a failed
                                 peer). That a run makes its handles once is the GPU test's
                                 (test_cuda_train_step_gpu), not this check's.
  check_tree.py ROOT self-test   each check above fails on a planted violation (so none passes vacuously)

Exit 0 when the rule holds, 1 with one line per violation otherwise. The layer table is read from
CONTRIBUTING.md itself, so the table is the contract and this script has no copy of it.
"""
import itertools
import os
import re
import subprocess
import sys
import tempfile

SOURCE_SUFFIXES = (".hpp", ".cpp", ".cu", ".cuh", ".h", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"], check=True,
                         capture_output=True, text=True).stdout
    return sorted(f for f in out.split("\n") if f and os.path.isfile(os.path.join(root, f)))


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read()


# ---- layers ---------------------------------------------------------------------------------------

def layer_table(contributing_text):
    """{layer: set of entries it may include}, from the table under "## Layers" in CONTRIBUTING.md.
    A row is | `folder/` | what it holds | `a/`, `b/**`, ... | : `a/` allows the files of layer a
    itself, `b/**` those of b and of every layer under it; "anything" allows every layer, "-" none
    but the row's own. A file belongs to the longest row folder that holds it."""
    section = re.search(r"^## Layers\n(.*?)(?=^## )", contributing_text, re.M | re.S)
    if not section:
        raise SystemExit("check_tree: CONTRIBUTING.md has no '## Layers' section")
    table = {}
    for line in section.group(1).split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        allowed = cells[-1]
        if allowed == "anything":
            table[folder] = None
        else:
            table[folder] = {a.strip("` ").rstrip("/") for a in allowed.split(",") if a.strip("` -")}
            table[folder] = {a[:-3] + "/**" if a.endswith("/**") else a for a in table[folder]}
    if not table:
        raise SystemExit("check_tree: the '## Layers' table of CONTRIBUTING.md has no rows")
    return table


def layer_of(path, table):
    """The longest table folder that holds path (a table may list a subfolder, e.g. distributed/cuda)."""
    best = None
    for folder in table:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def check_layers(root, files, contributing_text, overrides=None):
    table = layer_table(contributing_text)
    problems = []
    for f in files:
        if not f.endswith(SOURCE_SUFFIXES):
            continue
        text = overrides.get(f) if overrides and f in overrides else read(root, f)
        source = layer_of(f, table)
        if source is None:
            if "/" in f:  # every source file lives in a layer of the table
                problems.append(f"{f}: its folder is not in CONTRIBUTING.md's layer table")
            continue
        allowed = table[source]
        for target in INCLUDE.findall(text):
            if "/" not in target:
                if os.path.exists(os.path.join(root, os.path.dirname(f), target)) or target.endswith(".hpp"):
                    problems.append(f"{f}: includes \"{target}\": project include paths are from the "
                                    f"repository root (CONTRIBUTING.md, Style)")
                continue
            target_layer = layer_of(target, table)
            if target_layer is None:
                if os.path.exists(os.path.join(root, target)):
                    problems.append(f"{f}: includes {target}, which is in no layer of the table")
                continue  # a system or generated header
            if target_layer == source or allowed is None:
                continue
            if not any(target_layer == a or (a.endswith("/**") and (target_layer == a[:-3] or
                                                                    target_layer.startswith(a[:-2])))
                       for a in allowed):
                problems.append(f"{f}: includes {target}: {source}/ may not include {target_layer}/ "
                                f"(CONTRIBUTING.md, Layers)")
    return problems


# ---- names ----------------------------------------------------------------------------------------

LIBRARY_LAYERS = ("common", "io", "reference", "planner", "cuda", "distributed", "golden", "harness",
                  "verify", "app")


def check_library_names(files):
    """A library file's name does not repeat a folder it is in: `cuda/loss_head_cuda.cpp` says cuda
    twice, `golden/golden_check.cpp` golden twice (the include path already says it)."""
    problems = []
    for f in files:
        parts = f.split("/")
        if parts[0] not in LIBRARY_LAYERS or not f.endswith(SOURCE_SUFFIXES):
            continue
        stem_tokens = os.path.splitext(parts[-1])[0].split("_")
        for folder in parts[:-1]:
            folder_tokens = folder.split("_")
            n = len(folder_tokens)
            if any(stem_tokens[i:i + n] == folder_tokens for i in range(len(stem_tokens) - n + 1)):
                problems.append(f"{f}: the file name repeats its folder '{folder}'")
    return problems


def cmake_calls(text, command):
    """The argument lists of every call of `command` in a CMakeLists text (comments dropped)."""
    text = re.sub(r"#[^\n]*", "", text)
    calls = []
    for m in re.finditer(r"\b" + re.escape(command) + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        calls.append(text[m.end():i - 1].split())
    return calls


def keyword_values(args, keyword, keywords=("SOURCES", "LIBS", "LABELS", "TIMEOUT", "MAX_SUCCESS", "MAIN",
                                            "NAME", "TARGET", "RANKS")):
    if keyword not in args:
        return []
    values = []
    for a in args[args.index(keyword) + 1:]:
        if a in keywords:
            break
        values.append(a)
    return values


def check_test_names(root, files, overrides=None):
    """A test binary test_X has test_X.cpp among its sources, or all its sources are test_X_*.cpp,
    or X is its folder under tests/ joined by '_' (the folder's suite); a property binary
    properties_X is built from X_properties.cpp. Names end in _gpu exactly when labelled gpu."""
    problems = []
    for cmake in files:
        if not cmake.endswith("CMakeLists.txt") or not cmake.startswith(("tests/", "properties/")):
            continue
        text = overrides.get(cmake) if overrides and cmake in overrides else read(root, cmake)
        folder = os.path.dirname(cmake)
        for_each = re.search(r"foreach\(\s*name\s+([^)]*)\)", text)
        for kind in ("test", "property_test"):
            for args in cmake_calls(text, "dflash_add_" + kind):
                name, sources, labels = args[0], keyword_values(args, "SOURCES"), keyword_values(args, "LABELS")
                if name == "${name}":  # foreach(name a b c): each built from ${name}.cpp
                    entries = [(n, [n + ".cpp"]) for n in (for_each.group(1).split() if for_each else [])]
                else:
                    entries = [(name, sources)]
                for n, srcs in entries:
                    if kind == "property_test":
                        ok = n.startswith("properties_") and n[len("properties_"):] + "_properties.cpp" in srcs
                        rule = "properties_X is built from X_properties.cpp"
                    else:
                        suite = "test_" + "_".join(folder.split("/")[1:])
                        ok = (n + ".cpp" in srcs or bool(srcs) and all(x.startswith(n + "_") for x in srcs)
                              or n == suite)
                        rule = f"test_X has test_X.cpp, or only test_X_*.cpp sources, or X is its folder ({suite})"
                    if not ok:
                        problems.append(f"{cmake}: test binary {n} ({' '.join(srcs)}): {rule}")
                    gpu = "gpu" in labels
                    if gpu != n.endswith("_gpu"):
                        problems.append(f"{cmake}: test binary {n} is{'' if gpu else ' not'} labelled gpu: "
                                        f"its name {'must' if gpu else 'must not'} end in _gpu")
        executables = {args[0]: args[1:] for args in cmake_calls(text, "add_executable") if args}
        for args in cmake_calls(text, "dflash_add_mpi_test"):
            name, target = keyword_values(args, "NAME")[0], keyword_values(args, "TARGET")[0]
            labels = keyword_values(args, "LABELS")
            sources = [os.path.basename(x) for x in executables.get(target, [])]
            if target + ".cpp" not in sources and target.replace("properties_", "", 1) + "_properties.cpp" not in sources:
                problems.append(f"{cmake}: mpi test binary {target} is built from {' '.join(sources) or '?'}: "
                                f"it is named after its main source")
            if ("gpu" in labels) != name.endswith("_gpu"):
                problems.append(f"{cmake}: mpi test {name}: its name ends in _gpu exactly when it is labelled gpu")
    return problems


# ---- tolerances -----------------------------------------------------------------------------------

TOLERANCE = re.compile(r"\bconstexpr\s+(?:double|float|long double|auto)\s+(k\w*(?:Tolerance|Floor|Bound))\s*=")


def check_tolerances(root, files, overrides=None):
    problems = []
    for f in files:
        if not f.endswith(SOURCE_SUFFIXES) or f == "common/tolerances.hpp":
            continue
        text = overrides.get(f) if overrides and f in overrides else read(root, f)
        for name in TOLERANCE.findall(text):
            problems.append(f"{f}: defines {name}: every tolerance, floor and bound lives in "
                            f"common/tolerances.hpp, with why it has its value")
    return problems


# ---- paths named by the docs ----------------------------------------------------------------------

DOCS_PATH = re.compile(r"`([A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-*{},]+)+/?)`")
TOP_FOLDERS = ("app", "bench", "ci", "cmake", "common", "configs", "cuda", "distributed", "fuzz", "golden",
               "harness", "io", "planner", "properties", "reference", "tests", "verify", ".ci")


def expand(path):
    """`cuda/loss_head/{head,problem}.hpp` names two files; `x.{hpp,cpp}` two."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in expand(path[:m.start()] + alt + path[m.end():])]


def check_doc_paths(root, files, overrides=None):
    import glob
    docs = [f for f in files if f.endswith("README.md") or f == "CONTRIBUTING.md"]
    problems = []
    for doc in docs:
        text = overrides.get(doc) if overrides and doc in overrides else read(root, doc)
        for raw in DOCS_PATH.findall(text):
            path = raw.split("::")[0]
            here = os.path.dirname(doc)
            local = {f[len(here) + 1:].split("/")[0] for f in files if here and f.startswith(here + "/")}
            if path.split("/")[0] not in set(TOP_FOLDERS) | local:
                continue  # a file of a run (RUN/metrics.jsonl), a URL part, a spec path
            for candidate in expand(path):
                # from the repository root, or from the README's own folder (a relative link)
                patterns = [os.path.join(base, candidate.rstrip("/"))
                            for base in (root, os.path.join(root, os.path.dirname(doc)))]
                if not any(glob.glob(p) or glob.glob(p + ".*") for p in patterns):
                    problems.append(f"{doc}: names `{raw}`, which does not exist")
    return problems


# A folder README is a reference (what is there, how it fits, how to change it), not a history, and a
# reference a newcomer reads end to end stays short: these READMEs are held to 1,500 words (`wc -w`).
# A folder joins the list when its README is rewritten as a reference.
DOC_WORD_LIMITS = {"cuda/README.md": 1500, "golden/README.md": 1500}


def check_doc_words(root, files, overrides=None):
    problems = []
    for doc, limit in DOC_WORD_LIMITS.items():
        if doc not in files:
            problems.append(f"{doc}: missing (listed in DOC_WORD_LIMITS)")
            continue
        text = overrides.get(doc) if overrides and doc in overrides else read(root, doc)
        words = len(text.split())
        if words > limit:
            problems.append(f"{doc}: {words} words, over its limit of {limit}")
    return problems


# ---- mutants -------------------------------------------------------------------------------------

def declared_tests(root, files, overrides=None):
    """{test name: labels} of every dflash_add_test / dflash_add_property_test / dflash_add_mpi_test
    call and every plain add_test(NAME ...) in the tree's CMakeLists, without a build (a
    foreach(name ...) test is each of its names; an add_test whose name is a variable, in a function
    or loop, is left out)."""
    tests = {}
    for cmake in files:
        if not cmake.endswith("CMakeLists.txt"):
            continue
        text = overrides.get(cmake) if overrides and cmake in overrides else read(root, cmake)
        for_each = re.search(r"foreach\(\s*name\s+([^)]*)\)", text)
        for kind in ("test", "property_test"):
            for args in cmake_calls(text, "dflash_add_" + kind):
                names = for_each.group(1).split() if args[0] == "${name}" and for_each else [args[0]]
                for n in names:
                    tests[n] = keyword_values(args, "LABELS")
        for args in cmake_calls(text, "dflash_add_mpi_test"):
            for n in keyword_values(args, "NAME"):
                tests[n] = keyword_values(args, "LABELS")
        # Plain add_test(NAME n COMMAND ...) (Python and command tests), labelled by
        # set_tests_properties(n ... PROPERTIES LABELS a b <NEXT_PROPERTY> ...).
        for args in cmake_calls(text, "add_test"):
            for n in keyword_values(args, "NAME")[:1]:
                if "${" not in n:
                    tests.setdefault(n.strip('"'), [])
        for args in cmake_calls(text, "set_tests_properties"):
            if "PROPERTIES" not in args or "LABELS" not in args:
                continue
            after = args[args.index("LABELS") + 1:]
            labels = [label for a in itertools.takewhile(lambda a: not re.fullmatch(r"[A-Z_]+", a), after)
                      for label in a.strip('"').split(";")]
            for n in args[:args.index("PROPERTIES")]:
                if n.strip('"') in tests:
                    tests[n.strip('"')] = labels
    return tests


def load_mutate(root):
    """ci/mutate as a module: its table reader and staleness rule are the one home of the format."""
    import importlib.machinery
    import importlib.util
    sys.dont_write_bytecode = True
    loader = importlib.machinery.SourceFileLoader("ci_mutate", os.path.join(root, "ci", "mutate"))
    spec = importlib.util.spec_from_loader("ci_mutate", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# Kernel-logic headers that need no mutant rows: the macro itself.
MUTANT_EXEMPT = {"common/hd.hpp": "defines DFLASH_HD, no logic"}
NOT_PRODUCTION = ("tests/", "harness/", "bench/", "properties/", "fuzz/")


def kernel_logic_headers(root, files, overrides=None):
    """Production headers with DFLASH_HD code: what the GPU runs and CI runs only on the CPU
    (device-only .cuh files have nothing a CPU test can run)."""
    headers = []
    for f in files:
        if not f.endswith(".hpp") or f.startswith(NOT_PRODUCTION) or f in MUTANT_EXEMPT:
            continue
        text = overrides.get(f) if overrides and f in overrides else read(root, f)
        if "DFLASH_HD" in text:
            headers.append(f)
    return headers


def check_mutants(root, files, overrides=None, tables=None):
    mutate = load_mutate(root)
    known = declared_tests(root, files, overrides)
    problems = []
    covered = set()
    for table in tables or [f for f in files if f.startswith("tests/mutants/") and f.endswith(".tsv")]:
        try:
            rows = mutate.read_table(os.path.join(root, table))
        except SystemExit as e:
            problems.append(str(e))
            continue
        for number, row in rows:
            covered.add(row["file"])
            why = mutate.staleness(root, row, known)
            if why:
                problems.append(f"{table}:{number}: {row['id']}: {why}")
    for header in kernel_logic_headers(root, files, overrides):
        if header not in covered:
            problems.append(f"{header}: DFLASH_HD code with no row in tests/mutants/*.tsv (add the bugs its "
                            f"cpu tests must catch; CONTRIBUTING.md, \"Adding a kernel\")")
    return problems


# ---- corpora --------------------------------------------------------------------------------------

def corpus_difference(expected_dir, committed_dir):
    """The files that differ between two corpus folders: missing, extra, or other bytes."""
    def contents(d):
        return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))} if os.path.isdir(d) else {}
    expected, committed = contents(expected_dir), contents(committed_dir)
    problems = [f"{n}: not committed" for n in expected if n not in committed]
    problems += [f"{n}: committed, but make_corpus.py does not write it" for n in committed if n not in expected]
    problems += [f"{n}: other bytes than make_corpus.py writes" for n in expected
                 if n in committed and committed[n] != expected[n]]
    return problems


def check_corpora(root, files, committed=None):
    """Regenerates each reader's corpus into a temporary folder and compares it with the committed
    one (`committed(reader)` replaces the committed folder in the self-test)."""
    problems = []
    scripts = sorted(f for f in files if re.fullmatch(r"fuzz/[^/]+/make_corpus\.py", f))
    for script in scripts:
        reader = script.split("/")[1]
        with tempfile.TemporaryDirectory() as out:
            ran = subprocess.run([sys.executable, os.path.join(root, script), out], capture_output=True, text=True)
            if ran.returncode != 0:
                problems.append(f"{script}: exit {ran.returncode}: {ran.stderr.strip()[-300:]}")
                continue
            target = committed(reader) if committed else os.path.join(root, "fuzz", reader, "corpus")
            problems += [f"fuzz/{reader}/corpus/{p} (run {script})" for p in corpus_difference(out, target)]
    if not scripts:
        problems.append("no fuzz/<reader>/make_corpus.py found")
    return problems


# ---- device-wide synchronization -------------------------------------------------------------------

# Calls that wait for (or serialize) the whole device, not one stream: cudaDeviceSynchronize itself,
# the synchronous allocator and copies (the project's allocator is stream-ordered), and cuBLAS's
# handle calls (cublasDestroy synchronizes the device, so a handle lives for a run).
DEVICE_SYNC = re.compile(r"\b(cudaDeviceSynchronize|cudaDeviceReset|cudaMalloc|cudaFree|cudaMemcpy|cudaMemset|"
                         r"cudaMallocHost|cudaFreeHost|cudaHostAlloc|cublasCreate|cublasDestroy)\s*\(")
# Where a cuBLAS handle may be made and destroyed: the one function that makes every handle and
# the two owners' destructors (held for a run by cuda/drafter/gemms.hpp), and the once-per-process
# device probe.
CUBLAS_HANDLE_HOMES = ("cuda/gemm/cublas.cpp", "cuda/gemm/linear.cpp", "cuda/runtime/device_probe.cpp")
CHECKING_HARNESS = ("tests/", "bench/", "properties/", "harness/", "fuzz/")


def check_device_syncs(root, files, overrides=None):
    problems = []
    for f in files:
        if not f.endswith(SOURCE_SUFFIXES) or f.startswith(CHECKING_HARNESS):
            continue
        text = overrides.get(f) if overrides and f in overrides else read(root, f)
        for number, line in enumerate(text.split("\n"), 1):
            code = line.split("//", 1)[0]
            for call in DEVICE_SYNC.findall(code):
                if call.startswith("cublas") and f in CUBLAS_HANDLE_HOMES:
                    continue
                problems.append(f"{f}:{number}: calls {call}, which synchronizes the whole device: use the "
                                f"allocator's stream-ordered calls, or a run's cuBLAS handles (cuda/drafter/gemms.hpp)")
    return problems


# ---- self-test ------------------------------------------------------------------------------------

def self_test(root, files, contributing_text):
    """Each check must fail on one planted violation, or it proves nothing."""
    failures = []
    planted = {"common/hd.hpp": read(root, "common/hd.hpp") + '\n#include "app/commands.hpp"\n'}
    if not any("common/hd.hpp: includes app/commands.hpp" in p
               for p in check_layers(root, files, contributing_text, planted)):
        failures.append("layers: an upward include common/ -> app/ was not reported")
    if not check_library_names(files + ["golden/golden_planted.cpp"]):
        failures.append("names: golden/golden_planted.cpp was not reported")
    cmake = "tests/common/CMakeLists.txt"
    planted = {cmake: read(root, cmake) + "\ndflash_add_test(test_planted_gpu\n  SOURCES test_other.cpp\n  LABELS cpu)\n"}
    found = check_test_names(root, files, planted)
    if not any("test_planted_gpu (test_other.cpp)" in p for p in found) or \
       not any("test_planted_gpu is not labelled gpu" in p for p in found):
        failures.append("names: a test binary named after no source, _gpu without the label, was not reported")
    planted = {"tests/common/test_philox.cpp": "constexpr double kPlantedTolerance = 1e-3;\n"}
    if not check_tolerances(root, files, planted):
        failures.append("tolerances: a local kPlantedTolerance was not reported")
    planted = {"CONTRIBUTING.md": contributing_text + "\n`cuda/no_such_file.hpp`\n"}
    if not check_doc_paths(root, files, planted):
        failures.append("doc-paths: `cuda/no_such_file.hpp` was not reported")
    planted = {"cuda/README.md": read(root, "cuda/README.md") + " word" * 1500}
    if not check_doc_words(root, files, planted):
        failures.append("doc-words: cuda/README.md at 1,500 words more was not reported")
    handle, stale = tempfile.mkstemp(suffix=".tsv")
    with os.fdopen(handle, "w", encoding="utf-8") as f:
        f.write("P01\tcommon/hd.hpp\tno such text in hd.hpp\tx\ttest_philox\tplanted\n"
                "P02\tcommon/hd.hpp\t#pragma once\t#pragma twice\ttest_planted_nothing\tplanted\n")
    try:
        found = check_mutants(root, files, tables=[stale])
    finally:
        os.remove(stale)
    if not any("P01: 'no such text" in p for p in found) or not any("P02: no test named" in p for p in found):
        failures.append("mutants: a row whose text is gone and one naming no test were not reported")
    planted = {"common/zz_planted.hpp": "DFLASH_HD inline int planted() { return 1; }\n"}
    found = check_mutants(root, files + list(planted), overrides=planted)
    if not any(p.startswith("common/zz_planted.hpp: DFLASH_HD code with no row") for p in found):
        failures.append("mutants: a DFLASH_HD header with no mutant row was not reported")
    with tempfile.TemporaryDirectory() as planted_corpus:
        source = os.path.join(root, "fuzz", "metrics", "corpus")
        names = sorted(os.listdir(source))
        for n in names[1:]:  # the first seed left out
            with open(os.path.join(source, n), "rb") as f, open(os.path.join(planted_corpus, n), "wb") as g:
                g.write(f.read() + (b" " if n == names[-1] else b""))  # and the last one changed
        found = check_corpora(root, [f for f in files if f == "fuzz/metrics/make_corpus.py"],
                              committed=lambda reader: planted_corpus)
    if not any("not committed" in p for p in found) or not any("other bytes" in p for p in found):
        failures.append("corpora: a seed left out of the corpus and one changed were not reported")
    step = "distributed/cuda/train_step.cpp"
    planted = {step: read(root, step) + "\nvoid planted() { cudaDeviceSynchronize(); }\n",
               "cuda/drafter/step.cpp": read(root, "cuda/drafter/step.cpp") + "\n  cublasDestroy (h);\n"}
    found = check_device_syncs(root, files, planted)
    if not any(p.startswith(step) and "cudaDeviceSynchronize" in p for p in found) or \
       not any(p.startswith("cuda/drafter/step.cpp") and "cublasDestroy" in p for p in found):
        failures.append("device-syncs: a cudaDeviceSynchronize in the step and a cublasDestroy outside "
                        "cuda/gemm/ were not reported")
    return failures


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, what = argv[1], argv[2]
    files = tracked_files(root)
    contributing = read(root, "CONTRIBUTING.md")
    checks = {
        "layers": lambda: check_layers(root, files, contributing),
        "names": lambda: check_library_names(files) + check_test_names(root, files),
        "tolerances": lambda: check_tolerances(root, files),
        "doc-paths": lambda: check_doc_paths(root, files),
        "doc-words": lambda: check_doc_words(root, files),
        "mutants": lambda: check_mutants(root, files),
        "corpora": lambda: check_corpora(root, files),
        "device-syncs": lambda: check_device_syncs(root, files),
        "self-test": lambda: self_test(root, files, contributing),
    }
    if what not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    problems = checks[what]()
    for p in problems:
        print(p)
    print(f"check_tree {what}: {len(problems)} problem(s) in {len(files)} files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
