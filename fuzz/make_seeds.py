#!/usr/bin/env python3
"""Writes the seed corpora of the JSON-file fuzz targets from the test data:
fuzz/corpus/{fuzz_placement,fuzz_placement_parts,fuzz_model_spec,
fuzz_canonical_json}/, and of fuzz_delta_message (a region shape and a
delta message in each of its forms, fuzz/fuzz_delta_message.cc). The
store-record corpora come from make_seeds.cc.

Usage: fuzz/make_seeds.py  (from the repository root)"""

import glob
import hashlib
import json
import os
import struct

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
    delta_seeds()
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


def delta_message(regions):
    """fuzz_delta_message's input: shape bytes, then the message (base
    generation 7) of `regions`, each (itemsize log2, elements, mode,
    payload bytes). The fuzz target's base check accepts a base hash of 0
    and refuses others, so both paths are seeded."""
    shape = bytes([len(regions) - 1])
    body = b"RSD1" + struct.pack("<IQ", len(regions), 7)
    for log2, elements, mode, payload in regions:
        shape += bytes([log2]) + struct.pack("<H", elements)
        body += bytes([mode]) + bytes(7) + struct.pack("<Q", len(payload))
        body += struct.pack("<Q", 0)  # base hash (0: any base, see below)
        body += payload
    return shape + body


def delta_seeds():
    raw = bytes(range(64))
    runs = bytes([3, 1, 0xAA, 0xBB, 10, 2]) + bytes(4)  # gap, count, values
    bitmap = bytes([0b00000101, 0]) + bytes([1, 2, 3, 4])
    for regions in [
        [(0, 64, 0, raw)],                         # raw, 1-byte elements
        [(1, 100, 1, runs)],                       # runs of 2-byte elements
        [(1, 16, 2, bitmap)],                      # bitmap
        [(2, 8, 1, b"")],                          # nothing changed
        [(0, 64, 0, raw), (1, 100, 1, runs), (3, 4, 0, bytes(32))],
    ]:
        write("fuzz_delta_message", delta_message(regions))


if __name__ == "__main__":
    main()
