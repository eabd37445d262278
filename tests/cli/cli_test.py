#!/usr/bin/env python3
"""Contract tests of the `reshard` command-line tool.

Usage: cli_test.py PATH/TO/reshard TESTS_DIR

Checks exit codes, stdout/stderr shape and the distinctive error messages of
`reshard validate` and `reshard canonicalize`. Invalid inputs are mutated
copies of a golden fixture written to a temporary directory; where a mutation
touches hashed content, the ids are recomputed with the (standard-library
only) reference oracle so that exactly one contract rule is broken.

Prints one line per test and a final line 'N passed, M failed'; exits
non-zero on any failure. Standard library only.
"""

import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Failure, Suite, check  # noqa: E402

RESHARD = None
TESTS_DIR = None
ORACLE = None
TMP = None
FIXTURE = "placement_100.json"

SUITE = Suite()
test = SUITE.test




def canonical(obj, ensure_ascii=True):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=ensure_ascii)


def run(*args, stdin=None):
    proc = subprocess.run([RESHARD] + list(args), input=stdin,
                          capture_output=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def fixture_path(name=FIXTURE):
    return os.path.join(TESTS_DIR, "data", "fixtures", "placements", name)


def fixture():
    with open(fixture_path(), "rb") as handle:
        raw = handle.read()
    return raw, json.loads(raw.decode("utf-8"))


def expected(name=FIXTURE):
    path = os.path.join(TESTS_DIR, "data", "fixtures", "placements",
                        "expected.json")
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))[name]


def write(name, data):
    path = os.path.join(TMP, name)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def reseal(placement):
    """Recomputes every derived id so that only the intended rule breaks."""
    for part in placement["parts"]:
        for frag in part["fragments"]:
            frag["placement_fragment_id"] = ORACLE.fragment_id(frag)
        part["fragments"].sort(key=lambda f: f["placement_fragment_id"])
    placement["topology"]["topology_id"] = ORACLE.topology_id(
        placement["topology"])
    placement["placement_id"] = ORACLE.placement_id(placement)
    return placement


def oracle_error(placement):
    try:
        ORACLE.validate(placement)
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc)
    return None


def expect_one_line_error(rc, out, err, needle, json_mode=False):
    check(rc != 0, "exit status is 0, want non-zero")
    text = err.decode("utf-8")
    lines = text.splitlines()
    check(len(lines) == 1, "want exactly one stderr line, got %r" % text)
    check(text.endswith("\n"), "stderr line must end with a newline: %r" % text)
    check(lines[0].startswith("reshard: error:"),
          "stderr must start with 'reshard: error:': %r" % lines[0])
    check(needle in lines[0], "stderr %r lacks %r" % (lines[0], needle))
    if json_mode:
        body = out.decode("utf-8")
        check(body.count("\n") == 1 and body.endswith("\n"),
              "--json error output must be one line: %r" % body)
        obj = json.loads(body)
        check(obj.get("valid") is False, "--json error must say valid:false")
        check(needle in obj.get("error", ""),
              "--json error %r lacks %r" % (obj.get("error"), needle))
        check(lines[0] == "reshard: error: " + obj["error"],
              "stderr and --json error disagree")
    else:
        check(out == b"", "stdout must be empty on error, got %r" % out)
    return lines[0]


def expect_invalid(path, needle):
    rc, out, err = run("validate", path)
    expect_one_line_error(rc, out, err, needle)
    rc, out, err = run("validate", "--json", path)
    expect_one_line_error(rc, out, err, needle, json_mode=True)


# ---------------------------------------------------------------------------
# validate: success
# ---------------------------------------------------------------------------

@test
def info_json_reports_the_cuda_and_m2n_backends_and_ucx_cuda_memory():
    rc, out, err = run("info", "--json")
    check(rc == 0 and err == b"", "exit %d, stderr %r" % (rc, err))
    check(out.endswith(b"\n") and out.count(b"\n") == 1,
          "one line: %r" % out)
    info = json.loads(out)
    check(sorted(info) == ["cuda", "nccl_m2n", "ucx"], "keys %r" % sorted(info))
    cuda = info["cuda"]
    check(sorted(cuda) == ["built", "devices", "runtime"],
          "cuda keys %r" % sorted(cuda))
    check(isinstance(cuda["built"], bool), "built %r" % cuda["built"])
    check(isinstance(cuda["devices"], int) and cuda["devices"] >= 0,
          "devices %r" % cuda["devices"])
    if cuda["built"]:
        major, _, minor = cuda["runtime"].partition(".")
        check(major.isdigit() and minor.isdigit(),
              "runtime %r is not MAJOR.MINOR" % cuda["runtime"])
        text = "cuda: built, runtime %s, %d device%s\n" % (
            cuda["runtime"], cuda["devices"],
            "" if cuda["devices"] == 1 else "s")
    else:
        check(cuda["runtime"] == "" and cuda["devices"] == 0,
              "without CUDA: %r" % cuda)
        text = "cuda: not built (configure with -DRESHARD_CUDA=ON)\n"
    m2n = info["nccl_m2n"]
    check(sorted(m2n) == ["built", "plugin"], "nccl_m2n keys %r" % sorted(m2n))
    check(isinstance(m2n["built"], bool), "m2n built %r" % m2n["built"])
    if m2n["built"]:
        check(m2n["plugin"].endswith("/libreshard_m2n.so"),
              "plugin %r" % m2n["plugin"])
        text += "nccl m2n: built, plugin %s\n" % m2n["plugin"]
    else:
        check(m2n["plugin"] == "", "without M2N: %r" % m2n)
        text += "nccl m2n: not built (make m2n-venv, then configure)\n"
    # Whether "ucx" moves CUDA memory: this machine's UCX (Debian's: cma, ib,
    # rdmacm transports) has no CUDA support.
    check(info["ucx"] == {"cuda_memory": False}, "ucx %r" % info["ucx"])
    text += ("ucx: host memory only (CUDA fragments staged in pinned host "
             "memory)\n")
    # The human form says the same.
    rc, out, err = run("info")
    check(rc == 0 and out.decode() == text, "info printed %r" % out)


@test
def validate_human_output_has_ids():
    want = expected()
    rc, out, err = run("validate", fixture_path())
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    check(err == b"", "stderr must be empty: %r" % err)
    text = out.decode("utf-8")
    for key in ("placement_id", "digest", "topology_id"):
        check(want[key] in text, "human output lacks %s %s" % (key, want[key]))
    check("placement_id: " + want["placement_id"] in text.splitlines(),
          "placement_id line missing")
    check(text.endswith("\n"), "output must end with a newline")


@test
def validate_json_prints_one_object():
    want = expected()
    _, placement = fixture()
    rc, out, err = run("validate", "--json", fixture_path())
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    check(err == b"", "stderr must be empty: %r" % err)
    text = out.decode("utf-8")
    check(text.endswith("\n") and text.count("\n") == 1,
          "want exactly one line: %r" % text)
    decoder = json.JSONDecoder()
    obj, end = decoder.raw_decode(text)
    check(text[end:] == "\n", "trailing content after the object: %r" %
          text[end:])
    check(isinstance(obj, dict), "want a JSON object")
    for key in ("placement_id", "digest", "topology_id", "tensors",
                "fragments", "participants"):
        check(key in obj, "missing key %s in %r" % (key, obj))
    check(obj["placement_id"] == want["placement_id"], "placement_id")
    check(obj["digest"] == want["digest"], "digest")
    check(obj["topology_id"] == want["topology_id"], "topology_id")
    check(obj["fragments"] == want["fragments"], "fragments")
    check(obj["tensors"] == len(placement["tensors"]), "tensors")
    check(obj["participants"] == len(placement["topology"]["participants"]),
          "participants")
    check(obj.get("valid") is True, "valid must be true")
    # The object itself is canonical JSON.
    check(canonical(obj) == text[:-1], "--json output is not canonical")


@test
def validate_json_counts_match_every_fixture():
    folder = os.path.join(TESTS_DIR, "data", "fixtures", "placements")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name == "expected.json":
            continue
        want = expected(name)
        rc, out, err = run("validate", "--json", os.path.join(folder, name))
        check(rc == 0, "%s: exit %d %r" % (name, rc, err))
        obj = json.loads(out)
        for key in ("placement_id", "digest", "topology_id", "fragments"):
            check(obj[key] == want[key], "%s: %s differs" % (name, key))


@test
def validate_reads_stdin():
    raw, _ = fixture()
    rc, out, err = run("validate", "--json", "-", stdin=raw)
    check(rc == 0, "exit %d %r" % (rc, err))
    check(json.loads(out)["placement_id"] == expected()["placement_id"],
          "stdin placement_id")


@test
def validate_accepts_non_canonical_encoding():
    # Whitespace and key order are not part of the logical content.
    _, placement = fixture()
    path = write("pretty.json", json.dumps(placement, indent=3,
                                           ensure_ascii=False))
    rc, out, err = run("validate", "--json", path)
    check(rc == 0, "exit %d %r" % (rc, err))
    obj = json.loads(out)
    want = expected()
    check(obj["placement_id"] == want["placement_id"], "placement_id")
    check(obj["digest"] == want["digest"], "digest is over canonical wire")


# ---------------------------------------------------------------------------
# validate: failures
# ---------------------------------------------------------------------------

@test
def invalid_nbytes():
    _, placement = fixture()
    frag = placement["parts"][0]["fragments"][0]
    frag["nbytes"] += 1
    reseal(placement)
    check("fragment byte size mismatch" in (oracle_error(placement) or ""),
          "oracle disagrees about the mutation")
    expect_invalid(write("nbytes.json", canonical(placement)),
                   "fragment byte size mismatch")


@test
def invalid_dropped_fragment():
    _, base = fixture()
    chosen = None
    for pi, part in enumerate(base["parts"]):
        for fi in range(len(part["fragments"])):
            placement = copy.deepcopy(base)
            del placement["parts"][pi]["fragments"][fi]
            reseal(placement)
            if "not fully covered" in (oracle_error(placement) or ""):
                chosen = placement
                break
        if chosen:
            break
    check(chosen is not None, "no fragment drop breaks coverage in fixture")
    expect_invalid(write("dropped.json", canonical(chosen)),
                   "not fully covered")


@test
def invalid_placement_id():
    _, placement = fixture()
    pid = placement["placement_id"]
    last = "0" if pid[-1] != "0" else "1"
    placement["placement_id"] = pid[:-1] + last
    expect_invalid(write("pid.json", canonical(placement)),
                   "placement_id does not match canonical logical content")


@test
def invalid_unknown_field():
    _, placement = fixture()
    placement["extra_field"] = 1
    expect_invalid(write("unknown.json", canonical(placement)),
                   'unknown field "extra_field"')


@test
def invalid_unknown_nested_field():
    _, placement = fixture()
    placement["parts"][0]["fragments"][0]["colour"] = "red"
    path = write("unknown_nested.json", canonical(placement))
    rc, out, err = run("validate", path)
    line = expect_one_line_error(rc, out, err, 'unknown field "colour"')
    check("parts[0].fragments[0]" in line, "path missing from %r" % line)


@test
def invalid_missing_field():
    _, placement = fixture()
    del placement["revision"]
    expect_invalid(write("missing.json", canonical(placement)),
                   'missing field "revision"')


@test
def invalid_duplicate_key():
    raw, _ = fixture()
    text = raw.decode("utf-8")
    check(text.startswith("{"), "fixture must be an object")
    dup = '{"revision":"other",' + text[1:]
    expect_invalid(write("dup.json", dup), "duplicate JSON field")


@test
def invalid_truncated():
    raw, _ = fixture()
    expect_invalid(write("truncated.json", raw[: len(raw) // 2]),
                   "invalid JSON")


@test
def invalid_empty_file():
    expect_invalid(write("empty.json", b""), "invalid JSON")


@test
def invalid_non_finite():
    raw, _ = fixture()
    text = raw.decode("utf-8").replace('"weight_generation":0',
                                       '"weight_generation":NaN')
    check("NaN" in text, "fixture lacks weight_generation 0")
    expect_invalid(write("nan.json", text),
                   "non-finite JSON number is unsupported")


@test
def invalid_huge_integer():
    raw, _ = fixture()
    text = raw.decode("utf-8").replace(
        '"weight_generation":0', '"weight_generation":18446744073709551616')
    expect_invalid(write("huge.json", text),
                   "must fit in an unsigned 64-bit integer")


@test
def invalid_utf8():
    raw, _ = fixture()
    bad = raw.replace(b'"step-7"', b'"step-\xff"')
    check(bad != raw, "fixture lacks revision step-7")
    expect_invalid(write("badutf8.json", bad), "invalid JSON")


@test
def invalid_missing_file():
    path = os.path.join(TMP, "does-not-exist.json")
    expect_invalid(path, "cannot read")


@test
def invalid_forged_field_name_stays_one_escaped_line():
    # A field name with a newline, an ANSI escape and a C1 control used to
    # print a second, forged "reshard: ok:" line on stderr.
    path = write("forged.json",
                 b'{"x\\n\\u001b[32mreshard: ok: valid\\u009b2J\\u202e":1}')
    rc, out, err = run("validate", path)
    line = expect_one_line_error(rc, out, err, "unknown field")
    check(b"\x1b" not in err and b"\xc2\x9b" not in err,
          "control characters reach the terminal: %r" % err)
    check("x\\n\\e[32mreshard: ok: valid\\u{009b}2J\\u{202e}" in line,
          "field name not shown escaped: %r" % line)
    expect_invalid(path, "x\\n\\e[32mreshard: ok: valid")


@test
def invalid_huge_unknown_key_is_shortened():
    # A 50 MB unknown key used to be echoed whole into stderr and the JSON
    # error.
    key = "k" * (50 << 20)
    path = write("huge-key.json", ('{"%s":1}' % key).encode())
    for args in (("validate", path), ("validate", "--json", path)):
        rc, out, err = run(*args)
        check(len(err) < 2048, "stderr is %d bytes" % len(err))
        check(len(out) < 2048, "stdout is %d bytes" % len(out))
        expect_one_line_error(rc, out, err, "... (52428800 bytes)",
                              json_mode="--json" in args)


@test
def usage_errors_are_one_escaped_line():
    rc, out, err = run("validate", fixture_path(),
                       "--bogus\n\x1b[2Jreshard: ok")
    check(rc != 0, "unknown option must fail")
    text = err.decode("utf-8")
    check(len(text.splitlines()) == 1 and "\x1b" not in text,
          "want one escaped stderr line, got %r" % text)
    check(text.startswith("reshard: error: ") and "--bogus\\n\\e[2J" in text,
          "usage error line %r" % text)


@test
def missing_subcommand_fails():
    rc, out, err = run()
    check(rc != 0, "no subcommand must fail")
    rc, out, err = run("validate")
    check(rc != 0, "validate without a file must fail")


# ---------------------------------------------------------------------------
# canonicalize
# ---------------------------------------------------------------------------

NON_CANONICAL = {
    "zeta": [3, 2, 1, {"b": None, "a": True}],
    "Alpha": "caf\u00e9 \U0001F680 \u2028 \x7f tab\t nl\n quote\" bs\\ \x01",
    "\uffff": "U+FFFF key",
    "\U0001F680": "rocket key",
    "\u00e9t\u00e9": {"nested": {"z": 0, "y": -1,
                                 "x": 18446744073709551615}},
    "": [],
    "a\u0000b": {},
    "big": -9223372036854775808,
}


@test
def canonicalize_non_canonical_ascii():
    text = json.dumps(NON_CANONICAL, indent=4, ensure_ascii=False)
    path = write("noncanon.json", text)
    rc, out, err = run("canonicalize", path)
    check(rc == 0, "exit %d %r" % (rc, err))
    check(err == b"", "stderr must be empty")
    want = canonical(json.loads(text), ensure_ascii=True)
    check(out == want.encode("utf-8") + b"\n",
          "ascii mode differs:\n got %r\nwant %r" % (out, want))


@test
def canonicalize_non_canonical_utf8():
    text = json.dumps(NON_CANONICAL, indent="\t", ensure_ascii=True)
    path = write("noncanon_ascii_in.json", text)
    rc, out, err = run("canonicalize", "--utf8", path)
    check(rc == 0, "exit %d %r" % (rc, err))
    want = canonical(json.loads(text), ensure_ascii=False)
    check(out == want.encode("utf-8") + b"\n",
          "utf8 mode differs:\n got %r\nwant %r" % (out, want.encode("utf-8")))


@test
def canonicalize_reordered_fixture_round_trips():
    raw, placement = fixture()

    def reverse_keys(v):
        if isinstance(v, dict):
            return {k: reverse_keys(v[k]) for k in sorted(v, reverse=True)}
        if isinstance(v, list):
            return [reverse_keys(x) for x in v]
        return v

    text = json.dumps(reverse_keys(placement), indent=2, ensure_ascii=False)
    path = write("reordered.json", text)
    rc, out, err = run("canonicalize", path)
    check(rc == 0, "exit %d %r" % (rc, err))
    check(out == raw + b"\n", "canonical form of the fixture differs")
    rc, out, err = run("canonicalize", "--utf8", path)
    check(rc == 0, "exit %d %r" % (rc, err))
    check(out == canonical(placement, False).encode("utf-8") + b"\n",
          "--utf8 canonical form of the fixture differs")


@test
def canonicalize_stdin():
    rc, out, err = run("canonicalize", "-",
                       stdin=b' { "b" : 1 , "a" : [ 1 , null , true , "x" ] ,'
                             b' "A" : 2 } ')
    check(rc == 0, "exit %d %r" % (rc, err))
    check(out == b'{"A":2,"a":[1,null,true,"x"],"b":1}\n', "got %r" % out)


@test
def canonicalize_scalars_and_escapes():
    cases = [
        '"\\u00e9"', '"\\ud83d\\ude80"', '"\\u007f"', '[0,-0,1]',
        '"\\/"', '{"\\ud83d\\ude80":1,"\\uffff":2}', 'null', '[]', '{}',
    ]
    for i, text in enumerate(cases):
        path = write("scalar%d.json" % i, text)
        for flag, ascii_mode in (((), True), (("--utf8",), False)):
            rc, out, err = run("canonicalize", *(flag + (path,)))
            check(rc == 0, "%s: exit %d %r" % (text, rc, err))
            want = canonical(json.loads(text), ascii_mode).encode("utf-8")
            check(out == want + b"\n", "%s: got %r want %r" % (text, out, want))


@test
def canonicalize_errors():
    cases = [
        ('{"a":1,"a":2}', 'duplicate JSON field "a"'),
        ('[1.5]', "floating-point"),
        ('[NaN]', "non-finite JSON number is unsupported"),
        ('[1,', "invalid JSON"),
        ('[18446744073709551616]', "must fit in an unsigned 64-bit integer"),
    ]
    for i, (text, needle) in enumerate(cases):
        path = write("canon_err%d.json" % i, text)
        rc, out, err = run("canonicalize", path)
        line = expect_one_line_error(rc, out, err, needle)
        check(path in line, "error must name the file: %r" % line)
    rc, out, err = run("canonicalize", os.path.join(TMP, "nope.json"))
    expect_one_line_error(rc, out, err, "cannot read")


@test
def two_bad_placements_report_in_a_fixed_order():
    # Both placements of a pair decode at once on two threads; whichever
    # finishes first, plan names the target and selftest the source, as
    # when they were decoded one after the other.
    good = fixture_path()
    bad_src = write("pair_bad_src.json", '{"parts": [1,')
    bad_dst = write("pair_bad_dst.json", '{"a":1}')
    src_error, dst_error = "invalid JSON", 'unknown field "a"'
    cases = [("plan", bad_src, bad_dst, bad_dst, dst_error),
             ("selftest", bad_src, bad_dst, bad_src, src_error)] * 5
    cases += [("plan", bad_src, good, bad_src, src_error),
              ("selftest", good, bad_dst, bad_dst, dst_error)]
    for command, src, dst, named, needle in cases:
        rc, out, err = run(command, src, dst)
        line = expect_one_line_error(rc, out, err, needle)
        check(named in line, "%s must name %s: %r" % (command, named, line))


@test
def large_placement_found_not_canonical_late_reads_the_file_again():
    # A 10 MB placement gives its text back as it decodes; a flaw seen
    # only in its last part makes the general decoder read the file again
    # (a regular file) and decode it as before: a space (not canonical,
    # same placement) and a wrong byte size (an error naming it). From a
    # pipe nothing is given back, and the results are the same.
    path = os.path.join(TMP, "large.json")
    model = os.path.join(TESTS_DIR, "..", "examples", "models",
                         "qwen3-235b-a22b.json")
    rc, out, err = run("gen", "--model", model, "--tp", "4", "--ep", "8",
                       "-o", path)
    check(rc == 0, "gen failed: %r" % err)
    with open(path, "rb") as handle:
        text = handle.read()
    check(len(text) > 8 << 20, "the placement must be large: %d" % len(text))
    rc, out, err = run("validate", "--json", path)
    check(rc == 0, "canonical: %r" % err)
    want = json.loads(out)
    end = text.rfind(b'],"placement_id"')
    spaced = write("large_spaced.json", text[:end] + b" " + text[end:])
    at = text.rfind(b'"nbytes":')
    bad = write("large_bad.json",
                text[:at] + b'"nbytes":7' + text[text.index(b",", at):])
    for name, feed in (("file", None), ("pipe", "-")):
        rc, out, err = run("validate", "--json", feed or spaced,
                           stdin=open(spaced, "rb").read() if feed else None)
        check(rc == 0, "%s, spaced: %r" % (name, err))
        got = json.loads(out)
        check(got["placement_id"] == want["placement_id"] and
              got["digest"] == want["digest"],
              "%s, spaced: %r vs %r" % (name, got, want))
        rc, out, err = run("validate", feed or bad,
                           stdin=open(bad, "rb").read() if feed else None)
        line = expect_one_line_error(rc, out, err,
                                     "fragment byte size mismatch")
        check(line.startswith("reshard: error: %s: parts[" % (feed or bad))
              and line.endswith(", got 7"), "%s, bad: %r" % (name, line))


# ---------------------------------------------------------------------------

def main(argv):
    global RESHARD, TESTS_DIR, ORACLE, TMP
    if len(argv) != 3:
        print("usage: cli_test.py PATH/TO/reshard TESTS_DIR", file=sys.stderr)
        return 2
    RESHARD = os.path.abspath(argv[1])
    TESTS_DIR = os.path.abspath(argv[2])
    spec = importlib.util.spec_from_file_location(
        "reshard_oracle", os.path.join(TESTS_DIR, "oracle", "reshard_oracle.py"))
    ORACLE = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ORACLE)

    def set_tmp(tmp):
        global TMP
        TMP = tmp

    return SUITE.run("reshard_cli_test_", set_tmp)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
