#!/usr/bin/env python3
"""Writes the seed corpora of the JSON-file fuzz targets from the test data:
fuzz/corpus/{fuzz_placement,fuzz_placement_parts,fuzz_model_spec,
fuzz_canonical_json}/. The store-record corpora come from make_seeds.cc.

Usage: fuzz/make_seeds.py  (from the repository root)"""

import glob
import hashlib
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
MAX_SEED = 8192  # bytes; small seeds keep the fuzzers fast


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def compact(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def main():
    placements = sorted(
        glob.glob(os.path.join(ROOT, "tests/data/scenarios/*.json"))
        + glob.glob(os.path.join(ROOT, "tests/data/fixtures/placements/*.json"))
    )
    for path in placements:
        if os.path.basename(path) == "expected.json":
            continue
        with open(path, "rb") as f:
            text = f.read()
        if len(text) > MAX_SEED:
            continue
        write("fuzz_placement", text)
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        # The parts of the placement decoder, one object per seed.
        if "topology" in doc:
            write("fuzz_placement_parts", compact(doc["topology"]))
        for t in doc.get("tensors", [])[:2]:
            write("fuzz_placement_parts", compact(t))
            for a in t.get("parallel_axes", []):
                write("fuzz_placement_parts", compact(a))
        for p in doc.get("parts", [])[:1]:
            write("fuzz_placement_parts", compact(p.get("rank")))
            for fr in p.get("fragments", [])[:2]:
                write("fuzz_placement_parts", compact(fr))
    for path in sorted(glob.glob(os.path.join(ROOT, "examples/models/*.json"))):
        with open(path, "rb") as f:
            write("fuzz_model_spec", f.read())
    small = [p for p in placements if os.path.getsize(p) < 2500][:6]
    for path in small:
        with open(path, "rb") as f:
            write("fuzz_canonical_json", f.read())
    for text in [
        '{"b":1,"a":[true,false,null],"c":{"d":"\\u00e9\\ud83d\\ude00"}}',
        '["\\n\\t\\"\\\\\\/",-0,9223372036854775807,18446744073709551615]',
        '{"k":"caf\xc3\xa9","\\u0000":"\\u001f"}',
        '[[[[[[[[[[]]]]]]]]]]',
        '{"a":1,"a":2}',
        '1.5e3',
    ]:
        write("fuzz_canonical_json", text)


if __name__ == "__main__":
    main()
