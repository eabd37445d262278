#!/usr/bin/env python3
"""The independent Python oracle and the reshard CLI agree on every golden file.

Usage: oracle_vs_cli.py PATH/TO/reshard TESTS_DIR

For every placement JSON under data/fixtures/placements, data/fixtures/plans
and data/scenarios (expected.json files excluded):

  * `reshard validate --json FILE` succeeds and reports the same placement_id,
    digest, topology_id and fragment/tensor/participant counts as the oracle;
  * the oracle's own validation accepts the file too;
  * `reshard canonicalize FILE` prints the file's bytes (they are canonical)
    plus one newline, equal to the oracle's ensure_ascii=True encoding, and
    `--utf8` equals the oracle's ensure_ascii=False encoding;
  * the values agree with the golden expected.json of the directory.

Prints one line per file and a final line 'N passed, M failed'; exits
non-zero on any failure. Standard library only.
"""

import importlib.util
import json
import os
import subprocess
import sys

COMPARED = ("placement_id", "digest", "topology_id", "fragments", "tensors",
            "participants")


def load_oracle(tests_dir):
    path = os.path.join(tests_dir, "oracle", "reshard_oracle.py")
    spec = importlib.util.spec_from_file_location("reshard_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(reshard, *args):
    proc = subprocess.run([reshard] + list(args), capture_output=True,
                          timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def topology_sizes(placement):
    topo = placement["topology"]
    return {k: topo[k + "_size"] for k in ("dp", "ep", "pp", "tp")}


def golden_tables(tests_dir):
    """file path -> expected dict, from the three expected.json files."""
    data = os.path.join(tests_dir, "data")
    golden = {}

    fixtures = os.path.join(data, "fixtures", "placements")
    with open(os.path.join(fixtures, "expected.json"), "rb") as handle:
        for name, want in json.loads(handle.read().decode("utf-8")).items():
            golden[os.path.join(fixtures, name)] = dict(want)

    scenarios = os.path.join(data, "scenarios")
    with open(os.path.join(scenarios, "expected.json"), "rb") as handle:
        table = json.loads(handle.read().decode("utf-8"))
    for name, want in table["placements"].items():
        golden[os.path.join(scenarios, name)] = dict(want)

    plans = os.path.join(data, "fixtures", "plans")
    with open(os.path.join(plans, "expected.json"), "rb") as handle:
        table = json.loads(handle.read().decode("utf-8"))
    for pair in table.values():
        for role in ("source", "target"):
            entry = golden.setdefault(os.path.join(plans, pair[role]), {})
            sizes = pair.get(role + "_sizes")
            if sizes is not None:
                entry["sizes"] = sizes
    return golden


def placement_files(tests_dir):
    data = os.path.join(tests_dir, "data")
    folders = [os.path.join(data, "fixtures", "placements"),
               os.path.join(data, "fixtures", "plans"),
               os.path.join(data, "scenarios")]
    files = []
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json") and name != "expected.json":
                files.append(os.path.join(folder, name))
    return files


def check_file(reshard, oracle, path, golden):
    problems = []
    with open(path, "rb") as handle:
        raw = handle.read()
    _, placement = oracle.load_json(path)
    summary = oracle.summarize(path, placement)
    summary["tensors"] = len(placement["tensors"])
    summary["participants"] = len(placement["topology"]["participants"])

    # The oracle's own verdict: the golden files are all valid.
    try:
        oracle.validate(placement)
    except (ValueError, KeyError, TypeError) as exc:
        problems.append("oracle rejects the file: %s" % exc)
    consistency = oracle.check(raw, placement, summary)
    for key in ("fragment_ids_match", "topology_id_match",
                "placement_id_match"):
        if consistency[key] is not True:
            problems.append("oracle: %s is false" % key)

    # reshard validate --json
    rc, out, err = run(reshard, "validate", "--json", path)
    if rc != 0:
        problems.append("validate exit %d: %s" %
                        (rc, err.decode("utf-8", "replace").strip()))
    else:
        text = out.decode("utf-8")
        try:
            obj, end = json.JSONDecoder().raw_decode(text)
            if text[end:] != "\n":
                problems.append("validate --json: trailing output %r" %
                                text[end:])
        except ValueError as exc:
            obj = {}
            problems.append("validate --json: not JSON (%s): %r" % (exc, text))
        if err:
            problems.append("validate wrote to stderr: %r" % err)
        if obj.get("valid") is not True:
            problems.append("validate --json: valid is %r" % obj.get("valid"))
        for key in COMPARED:
            if obj.get(key) != summary[key]:
                problems.append("%s: cli %r != oracle %r" %
                                (key, obj.get(key), summary[key]))
        for key in ("resource_id", "revision", "weight_generation"):
            if key in obj and obj[key] != placement[key]:
                problems.append("%s: cli %r != file %r" %
                                (key, obj[key], placement[key]))

    # reshard canonicalize: the golden files are canonical, no newline.
    ascii_text = oracle.canonical(placement, ensure_ascii=True).encode("utf-8")
    utf8_text = oracle.canonical(placement, ensure_ascii=False).encode("utf-8")
    if ascii_text != raw:
        problems.append("file is not the oracle's canonical encoding")
    rc, out, err = run(reshard, "canonicalize", path)
    if rc != 0:
        problems.append("canonicalize exit %d: %s" %
                        (rc, err.decode("utf-8", "replace").strip()))
    elif not out.endswith(b"\n"):
        problems.append("canonicalize output lacks the trailing newline")
    else:
        if out[:-1] != raw:
            problems.append("canonicalize output differs from the file bytes")
        if out[:-1] != ascii_text:
            problems.append("canonicalize output differs from the oracle")
    rc, out, err = run(reshard, "canonicalize", "--utf8", path)
    if rc != 0:
        problems.append("canonicalize --utf8 exit %d" % rc)
    elif out != utf8_text + b"\n":
        problems.append("canonicalize --utf8 differs from the oracle")

    # Golden expected.json.
    want = golden.get(path)
    if want is None:
        problems.append("no expected.json entry")
    else:
        for key in COMPARED:
            if key in want and want[key] != summary[key]:
                problems.append("expected.json %s %r != oracle %r" %
                                (key, want[key], summary[key]))
        if "sizes" in want and want["sizes"] != topology_sizes(placement):
            problems.append("expected.json sizes %r != topology %r" %
                            (want["sizes"], topology_sizes(placement)))
    return problems


def main(argv):
    if len(argv) != 3:
        print("usage: oracle_vs_cli.py PATH/TO/reshard TESTS_DIR",
              file=sys.stderr)
        return 2
    reshard = os.path.abspath(argv[1])
    tests_dir = os.path.abspath(argv[2])
    oracle = load_oracle(tests_dir)
    golden = golden_tables(tests_dir)
    files = placement_files(tests_dir)
    passed = failed = 0
    if not files:
        print("FAIL no placement files found under %s" % tests_dir)
        failed += 1
    # Every golden entry must name a file that exists.
    for path in sorted(set(golden) - set(files)):
        print("FAIL %s: listed in expected.json but missing" %
              os.path.relpath(path, tests_dir))
        failed += 1
    for path in files:
        rel = os.path.relpath(path, tests_dir)
        try:
            problems = check_file(reshard, oracle, path, golden)
        except Exception as exc:  # noqa: BLE001 - report and keep going
            problems = ["unexpected %s: %s" % (type(exc).__name__, exc)]
        if problems:
            failed += 1
            print("FAIL %s: %s" % (rel, "; ".join(problems)))
        else:
            passed += 1
            print("PASS %s" % rel)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
