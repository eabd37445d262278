#!/usr/bin/env python3
"""Contract tests of `reshard selftest --transport ucx`, `--via-store` and
`reshard store`.

Usage: live_store_cli_test.py PATH/TO/reshard TESTS_DIR

Runs the live self-test between real processes over UCX (shared memory, TCP
on loopback, push and pull, one rank per invocation), its failure paths
(missing options, a killed rank, a stale generation), and the weight-store
self-test plus every `store` subcommand on an fs:// store, including a
payload with one flipped byte. Expected numbers come from `reshard plan
--json` and from the placement files themselves.

Prints one line per test and a final line 'N passed, M failed'; exits
non-zero on any failure. Standard library only.
"""

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Failure, Suite, check  # noqa: E402
import urllib.parse

RESHARD = None
TESTS_DIR = None
TMP = None

SCENARIOS = None
FOUR_AXIS = ("four_axis_uint8_source.json", "four_axis_uint8_target.json")
CROSS_DIM = ("cross_dim_ep2_to_tp2_source.json",
             "cross_dim_ep2_to_tp2_target.json")

UCX_KEYS = ["bytes", "gbps", "memcpy_gbps", "messages", "mismatch",
            "operations", "packed_messages", "plan_seconds", "procs",
            "ranks_ready", "seconds", "segments", "transport", "verified",
            "verified_regions", "verify_seconds", "wire_bytes"]
# --updates K adds the standing session's keys.
UPDATES_KEYS = sorted(UCX_KEYS + ["failed_updates", "failures",
                                  "fixed_seconds", "open_seconds", "opens",
                                  "rejoins", "update_seconds", "updates"])
STORE_KEYS = ["bytes", "gbps", "load_seconds", "memcpy_gbps", "mismatch",
              "operations", "plan_seconds", "seconds", "segments",
              "transport", "upload_seconds", "verified"]
FLOAT_KEYS = ("gbps", "memcpy_gbps", "plan_seconds", "seconds",
              "load_seconds", "upload_seconds")
LS_KEYS = ["bytes", "error", "fragments", "leases", "manifest_key",
           "resource_id", "revision", "state", "weight_generation"]
SHOW_KEYS = ["bytes", "created_at", "fragments", "manifest_digest",
             "manifest_key", "namespace", "resource_id", "revision",
             "tensors", "weight_generation"]
VERIFY_KEYS = ["bytes", "chunks", "corrupt", "objects", "revisions",
               "verified"]
# transactions_completed: uploads gc published (as Python's gc() reports).
GC_KEYS = ["bytes_removed", "keys_removed", "skipped", "temporaries_removed",
           "transactions_completed", "transactions_removed"]

UCX_LOG = re.compile(r"^\[\d+\.\d+\] \[[^\]]*\] +\S+:\d+ +UCX +[A-Z]+ ")

SUITE = Suite()
test = SUITE.test




def run(*args, timeout=120, env=None):
    proc = subprocess.run([RESHARD] + list(args), capture_output=True,
                          timeout=timeout, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def scenario(pair):
    return [os.path.join(SCENARIOS, name) for name in pair]


def fresh_dir(name):
    path = os.path.join(TMP, name)
    os.makedirs(path)
    return path


def load(path):
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


_PLANS = {}


def plan(src, dst):
    """`reshard plan --json` of a pair (cached)."""
    if (src, dst) not in _PLANS:
        rc, out, err = run("plan", src, dst, "--json")
        check(rc == 0, "plan exit %d: %r" % (rc, err))
        _PLANS[(src, dst)] = json.loads(out.decode("utf-8"))
    return _PLANS[(src, dst)]


def run_two_ranks(src, dst, rdv, session, env=None):
    """`selftest --rank` for ranks 0 and 1 of a two-process UCX session,
    run at once; [(returncode, stdout, stderr)] in rank order."""
    procs = []
    try:
        for rank in ("0", "1"):
            procs.append(subprocess.Popen(
                [RESHARD, "selftest", src, dst, "--transport", "ucx",
                 "--procs", "2", "--rendezvous", rdv, "--session", session,
                 "--rank", rank, "--timeout", "30", "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
        results = [proc.communicate(timeout=90) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [(proc.returncode, out, err)
            for proc, (out, err) in zip(procs, results)]


def expected_ranks_ready(dst, procs):
    """Target ranks holding fragments: targets fill [procs/2, procs)."""
    parts = sum(1 for p in load(dst)["parts"] if p["fragments"])
    if procs == 1:
        return 1
    return min(parts, procs - max(1, procs // 2))


def model_bytes(placement_path):
    placement = load(placement_path)
    return sum(math.prod(t["global_shape"]) * t["itemsize"]
               for t in placement["tensors"])


def one_json_line(out, want_keys=None):
    """Parses stdout that must be one compact JSON line with sorted,
    unique keys; returns the value."""
    text = out.decode("utf-8")
    check(text.endswith("\n") and text.count("\n") == 1,
          "want one JSON line, got %r" % text)
    line = text[:-1]
    seen = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        check(keys == sorted(keys), "keys not sorted: %r" % keys)
        check(len(set(keys)) == len(keys), "duplicate keys: %r" % keys)
        seen.append(keys)
        return dict(pairs)

    value = json.loads(line, object_pairs_hook=hook)
    # Compact: no whitespace outside strings.
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
    check(not re.search(r"\s", stripped), "JSON is not compact: %r" % line)
    if want_keys is not None:
        check(isinstance(value, dict), "want an object: %r" % line)
        check(list(value.keys()) == want_keys,
              "keys %r, want %r" % (list(value.keys()), want_keys))
    return value


def check_floats(report):
    for key in FLOAT_KEYS:
        if key in report:
            v = report[key]
            check(isinstance(v, float) and v >= 0,
                  "%s must be a non-negative number: %r" % (key, v))


def expect_one_line_error(rc, out, err, needle, code=1):
    check(rc == code, "exit status %d, want %d (stderr %r)" % (rc, code, err))
    text = err.decode("utf-8")
    lines = text.splitlines()
    check(len(lines) == 1, "want exactly one stderr line, got %r" % text)
    check(text.endswith("\n"), "stderr line must end with a newline: %r" % text)
    check(lines[0].startswith("reshard: error: "),
          "stderr must start with 'reshard: error: ': %r" % lines[0])
    check(needle in lines[0], "stderr %r lacks %r" % (lines[0], needle))
    check(out == b"", "stdout must be empty on error, got %r" % out)
    return lines[0]


def expect_error_line(rc, out, err, needle):
    """Like expect_one_line_error, but tolerates UCX's own diagnostics on
    other stderr lines (fault-injection runs)."""
    check(rc == 1, "exit status %d, want 1 (stderr %r)" % (rc, err))
    # UCX writes its own log lines ("[time] [host:pid:thread] file:line UCX
    # ERROR ...") when a peer dies mid-connection: to stderr, never stdout.
    check(out == b"", "stdout must be empty on error, got %r" % out)
    lines = [l for l in err.decode("utf-8").splitlines()
             if l.startswith("reshard: error: ")]
    check(len(lines) == 1, "want one 'reshard: error: ' line, got %r" % err)
    check(needle in lines[0], "stderr %r lacks %r" % (lines[0], needle))
    return lines[0]


def check_ucx_report(report, src, dst, procs):
    p = plan(src, dst)
    check(report["verified"] is True, "verified %r" % report["verified"])
    check(report["mismatch"] == "", "mismatch %r" % report["mismatch"])
    check(report["transport"] == "ucx", "transport %r" % report["transport"])
    check(report["procs"] == procs, "procs %r, want %d" %
          (report["procs"], procs))
    check(report["bytes"] == p["bytes"],
          "bytes %r, plan says %r" % (report["bytes"], p["bytes"]))
    check(report["operations"] == p["regions"],
          "operations %r, plan has %r regions" %
          (report["operations"], p["regions"]))
    # At most one message per region: small regions between two ranks
    # share messages (docs/live.md, coalescing).
    check(1 <= report["messages"] <= p["regions"],
          "messages %r, want 1..%r (at most one per region)" %
          (report["messages"], p["regions"]))
    check(report["segments"] == p["segments"],
          "segments %r, plan says %r" % (report["segments"], p["segments"]))
    check(0 <= report["packed_messages"] <= 2 * report["messages"],
          "packed_messages %r out of range" % report["packed_messages"])
    want_ready = expected_ranks_ready(dst, procs)
    check(report["ranks_ready"] == want_ready,
          "ranks_ready %r, want %d" % (report["ranks_ready"], want_ready))
    check_floats(report)


def ucx_selftest_json(pair_paths, procs, *extra):
    src, dst = pair_paths
    # The launcher's temporary rendezvous goes under TMPDIR and must be
    # removed afterwards.
    tmpdir = tempfile.mkdtemp(dir=TMP, prefix="tmpdir_")
    env = dict(os.environ, TMPDIR=tmpdir)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       str(procs), "--json", *extra, env=env)
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    check(err == b"", "stderr must be empty: %r" % err)
    report = one_json_line(out, UCX_KEYS)
    check_ucx_report(report, src, dst, procs)
    check(os.listdir(tmpdir) == [],
          "rendezvous left behind in TMPDIR: %r" % os.listdir(tmpdir))
    return report


# ---------------------------------------------------------------------------
# selftest --delta: only changed elements travel after the first update
# ---------------------------------------------------------------------------

DELTA_KEYS = sorted(UPDATES_KEYS + ["apply_seconds", "delta_regions",
                                    "encode_seconds", "full_regions",
                                    "snapshot_bytes"])


def small_moe_pair():
    """small-moe from TP2/EP2 to TP4 (84 MB of bfloat16, 62 tensors)."""
    model = os.path.join(TESTS_DIR, "..", "examples", "models",
                         "small-moe.json")
    paths = []
    for name, grid in (("src", ["--tp", "2", "--ep", "2"]),
                       ("dst", ["--tp", "4"])):
        path = os.path.join(TMP, "small_moe_%s.json" % name)
        if not os.path.exists(path):
            rc, _, err = run("gen", "--model", model, *grid, "-o", path)
            check(rc == 0, "gen failed: %r" % err)
        paths.append(path)
    return paths


def delta_selftest(fraction, *extra):
    src, dst = small_moe_pair()
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "2", "--updates", "3", "--delta", "--change-fraction",
                       str(fraction), "--json", *extra, timeout=300)
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    report = one_json_line(out, DELTA_KEYS)
    check(report["verified"] is True and report["updates"] == 3,
          "not verified: %r" % report)
    wire = report["wire_bytes"]
    check(len(wire) == 3 and wire[0] >= report["bytes"],
          "the first update moves every byte: %r" % wire)
    check(report["snapshot_bytes"] == report["bytes"],
          "snapshot of every byte sent: %r" % report)
    # The first update is full: nothing encoded or applied as a delta;
    # every later one scans its sources and hashes its targets.
    for key in ("encode_seconds", "apply_seconds"):
        seconds = report[key]
        check(len(seconds) == 3 and seconds[0] == 0 and
              all(s > 0 for s in seconds[1:]), "%s: %r" % (key, seconds))
    return report


@test
def delta_one_percent_costs_at_most_five_percent():
    for extra in ([], ["--ucx-tls", "tcp", "--ucx-net-devices", "lo"]):
        report = delta_selftest(0.01, *extra)
        wire = report["wire_bytes"]
        for k in (1, 2):
            check(wire[k] <= 0.05 * wire[0],
                  "update %d carried %d of %d bytes" % (k + 1, wire[k],
                                                        wire[0]))
        check(report["full_regions"] == [0, 0, 0], "%r" % report)


@test
def delta_sixty_percent_costs_no_more_than_full():
    wire = delta_selftest(0.6)["wire_bytes"]
    check(all(w <= 1.05 * wire[0] for w in wire[1:]), "%r" % wire)


@test
def delta_flags_are_refused_without_updates_or_ucx():
    src, dst = scenario(CROSS_DIM)
    for args, message in (
            (["--transport", "ucx", "--delta"],
             "--delta and --change-fraction need --updates K"),
            (["--delta"], "--delta needs --transport ucx"),
            (["--transport", "ucx", "--updates", "2", "--change-fraction",
              "1.5"],
             "--change-fraction must be a number from 0 to 1, not '1.5'")):
        rc, out, err = run("selftest", src, dst, *args)
        check(rc != 0 and out == b"", "accepted %r" % args)
        check(message in err.decode(), "%r: %r" % (args, err))


# ---------------------------------------------------------------------------
# selftest --updates: verified on arrival, failed updates, rejoined ranks
# ---------------------------------------------------------------------------

def updates_selftest_json(transport, procs, updates, *extra):
    """A standing self-test's --json report (exit 0, nothing on stderr,
    the rendezvous removed), checked against the plan like any live run."""
    src, dst = scenario(FOUR_AXIS)
    tmpdir = tempfile.mkdtemp(dir=TMP, prefix="tmpdir_")
    env = dict(os.environ, TMPDIR=tmpdir)
    rc, out, err = run("selftest", src, dst, "--transport", transport,
                       "--procs", str(procs), "--updates", str(updates),
                       "--session", "s", "--timeout", "20", "--json", *extra,
                       env=env, timeout=180)
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    check(err == b"", "stderr must be empty: %r" % err)
    report = one_json_line(out, UPDATES_KEYS)
    p = plan(src, dst)
    check(report["verified"] is True and report["mismatch"] == "",
          "not verified: %r" % report)
    check(report["transport"] == transport and report["procs"] == procs and
          report["updates"] == updates, "%r" % report)
    check(report["bytes"] == p["bytes"], "bytes %r" % report["bytes"])
    check(report["operations"] == p["regions"], "%r" % report["operations"])
    check(report["ranks_ready"] == expected_ranks_ready(dst, procs),
          "ranks_ready %r" % report["ranks_ready"])
    for key in ("verify_seconds", "update_seconds", "fixed_seconds"):
        check(len(report[key]) == updates and
              all(isinstance(v, float) and v >= 0 for v in report[key]),
              "%s: %r" % (key, report[key]))
    check(os.listdir(tmpdir) == [],
          "rendezvous left behind in TMPDIR: %r" % os.listdir(tmpdir))
    return report, p


@test
def updates_report_verified_regions_and_one_open():
    for transport in ("ucx", "inproc"):
        report, p = updates_selftest_json(transport, 3, 3)
        n, b = p["regions"], p["bytes"]
        check(report["verified_regions"] == [n, n, n],
              "%s: verified_regions %r, want every region of every update"
              % (transport, report["verified_regions"]))
        check(report["wire_bytes"] == [b, b, b], "%r" % report["wire_bytes"])
        check(report["opens"] == 1 and report["rejoins"] == 0 and
              report["failed_updates"] == [] and report["failures"] == [],
              "%s: %r" % (transport, report))


@test
def one_shot_reports_verified_regions():
    report = ucx_selftest_json(scenario(FOUR_AXIS), 3)
    p = plan(*scenario(FOUR_AXIS))
    check(report["verified_regions"] == p["regions"],
          "verified_regions %r, want %d" % (report["verified_regions"],
                                            p["regions"]))
    check(isinstance(report["verify_seconds"], float) and
          report["verify_seconds"] >= 0, "%r" % report["verify_seconds"])


@test
def no_verify_checks_no_region():
    """--no-verify: no region is checked on arrival (every target byte is
    still checked by the self-test); it needs a live transport."""
    report, p = updates_selftest_json("ucx", 3, 2, "--no-verify")
    check(report["verified"] and report["verified_regions"] == [0, 0],
          "verified_regions %r" % report["verified_regions"])
    src, dst = scenario(FOUR_AXIS)
    rc, out, err = run("selftest", src, dst, "--no-verify")
    check(rc != 0 and err.decode("utf-8").strip() ==
          "reshard: error: --no-verify needs --transport ucx",
          "exit %d, stderr %r" % (rc, err))


CORRUPT_PREFIX = ("update 2: Aborted: live session s failed as decided by "
                  "rank 1: DataLoss: live session s, rank 1, update 2: "
                  "region ")


@test
def corrupt_message_fails_update_two_and_the_session_recovers():
    for transport, extra in (("ucx", []),
                             ("ucx", ["--ucx-tls", "tcp", "--ucx-net-devices",
                                      "lo"]),
                             ("inproc", [])):
        report, p = updates_selftest_json(
            transport, 3, 4, "--inject-fault", "corrupt-message", *extra)
        n, b = p["regions"], p["bytes"]
        what = "%s %s" % (transport, extra)
        check(report["failed_updates"] == [2],
              "%s: failed_updates %r" % (what, report["failed_updates"]))
        failures = report["failures"]
        check(len(failures) == 1 and failures[0].startswith(CORRUPT_PREFIX),
              "%s: failures %r" % (what, failures))
        # The region, its tensor, the target participant and the peer.
        check(re.match(re.escape(CORRUPT_PREFIX) +
                       r"\d+ \(tensor layers\.\d\.[\w.]+, target "
                       r"participant p-d0-p1-e0-t\d\) from rank 0 \(source "
                       r"p-d0-p0-e0-t0 and 127 more\): the bytes received "
                       r"differ from what the source sent \(XXH3-64 "
                       r"[0-9a-f]{16} here, [0-9a-f]{16} at the source\) "
                       r"\(the session stays open: retry the update or run "
                       r"the next one\)$", failures[0]),
              "%s: failure %r" % (what, failures[0]))
        check(report["verified_regions"] == [n, 0, n, n],
              "%s: verified_regions %r" % (what, report["verified_regions"]))
        check(report["wire_bytes"] == [b, 0, b, b],
              "%s: wire_bytes %r" % (what, report["wire_bytes"]))
        check(report["update_seconds"][1] == 0, "%r" % report)
        check(report["opens"] == 1 and report["rejoins"] == 0,
              "%s: opens %r, rejoins %r" % (what, report["opens"],
                                            report["rejoins"]))


@test
def restart_rank_rejoins_the_session():
    for extra in ([], ["--ucx-protocol", "push"],
                  ["--ucx-tls", "tcp", "--ucx-net-devices", "lo"]):
        report, p = updates_selftest_json(
            "ucx", 3, 4, "--inject-fault", "restart-rank", *extra)
        n, b = p["regions"], p["bytes"]
        check(report["rejoins"] == 1 and report["opens"] == 1,
              "%s: rejoins %r, opens %r" % (extra, report["rejoins"],
                                            report["opens"]))
        check(report["failed_updates"] == [] and report["failures"] == [],
              "%s: %r" % (extra, report["failures"]))
        check(report["verified_regions"] == [n, n, n, n],
              "%s: verified_regions %r" % (extra, report["verified_regions"]))
        check(report["wire_bytes"] == [b, b, b, b],
              "%s: wire_bytes %r" % (extra, report["wire_bytes"]))


@test
def recovery_faults_human_output():
    src, dst = scenario(FOUR_AXIS)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "3", "--updates", "3", "--session", "s",
                       "--inject-fault", "corrupt-message", timeout=180)
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    lines = out.decode("utf-8").splitlines()
    check(lines[0] == "selftest: every target byte verified", "%r" % lines)
    want = [re.compile(r"^  failed updates +1$"),
            re.compile("^    " + re.escape(CORRUPT_PREFIX)),
            re.compile(r"^  sessions opened +1$"),
            re.compile(r"^  ranks rejoined +0$")]
    at = [i for w in want for i, line in enumerate(lines) if w.match(line)]
    check(len(at) == 4 and at == sorted(at), "lines %r" % lines)


@test
def recovery_faults_are_refused_where_they_cannot_run():
    src, dst = scenario(FOUR_AXIS)
    for args, message in (
            (["--transport", "inproc", "--procs", "3", "--updates", "3",
              "--inject-fault", "restart-rank"],
             "the inproc transport runs every rank as a thread of one "
             "process: it cannot run a single --rank or kill a rank (use "
             "ucx)"),
            (["--transport", "ucx", "--procs", "3", "--updates", "2",
              "--inject-fault", "corrupt-message"],
             "--inject-fault corrupt-message needs --updates 3 or more and "
             "--procs 2 or more"),
            (["--transport", "ucx", "--procs", "1", "--updates", "3",
              "--inject-fault", "restart-rank"],
             "--inject-fault restart-rank needs --updates 3 or more and "
             "--procs 2 or more"),
            (["--inject-fault", "restart-rank"],
             "--inject-fault needs --transport ucx")):
        rc, out, err = run("selftest", src, dst, *args)
        line = expect_one_line_error(rc, out, err, message)
        check(line == "reshard: error: " + message,
              "%r: unexpected line %r" % (args, line))


# ---------------------------------------------------------------------------
# selftest --transport ucx: success
# ---------------------------------------------------------------------------

@test
def ucx_json_three_procs_matches_plan():
    ucx_selftest_json(scenario(FOUR_AXIS), 3)


@test
def ucx_json_tcp_on_loopback():
    ucx_selftest_json(scenario(FOUR_AXIS), 3, "--ucx-tls", "tcp",
                      "--ucx-net-devices", "lo")


@test
def ucx_json_push():
    ucx_selftest_json(scenario(FOUR_AXIS), 3, "--ucx-protocol", "push")


@test
def ucx_json_pull():
    ucx_selftest_json(scenario(FOUR_AXIS), 3, "--ucx-protocol", "pull")


@test
def ucx_json_cross_dim_two_procs():
    report = ucx_selftest_json(scenario(CROSS_DIM), 2)
    check(report["ranks_ready"] == 1, "ranks_ready %r" % report["ranks_ready"])


@test
def ucx_json_generated_four_axis_layouts():
    model = os.path.join(TESTS_DIR, "..", "examples", "models",
                         "tiny-moe.json")
    src = os.path.join(TMP, "gen_tp4_pp2_ep8_dp2.json")
    dst = os.path.join(TMP, "gen_tp8_pp4_ep2_dp4.json")
    for path, grid in ((src, ("4", "2", "8", "2")), (dst, ("8", "4", "2", "4"))):
        rc, out, err = run("gen", "--model", model, "--tp", grid[0], "--pp",
                           grid[1], "--ep", grid[2], "--dp", grid[3], "-o",
                           path)
        check(rc == 0, "gen exit %d: %r" % (rc, err))
    report = ucx_selftest_json((src, dst), 4)
    # Strided regions are packed by UCX generic datatypes.
    check(report["packed_messages"] > 0,
          "packed_messages %r, want > 0" % report["packed_messages"])


@test
def ucx_human_output():
    src, dst = scenario(FOUR_AXIS)
    p = plan(src, dst)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "3")
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    text = out.decode("utf-8")
    lines = text.splitlines()
    check(lines and lines[0] == "selftest: every target byte verified",
          "first line %r" % (lines[:1],))
    check("selftest: every target byte verified" in text, "no verdict")
    check("ranks activation-ready" in text, "no ranks activation-ready line")

    def value(label):
        for line in lines:
            m = re.match(r"^  %s +(\S+)" % re.escape(label), line)
            if m:
                return m.group(1)
        raise Failure("no %r line in %r" % (label, text))

    check(value("bytes moved") == str(p["bytes"]), "bytes moved")
    check(value("operations") == str(p["regions"]), "operations")
    check(value("processes") == "3", "processes")
    check(1 <= int(value("UCX messages")) <= p["regions"], "UCX messages")
    check(value("ranks activation-ready") ==
          str(expected_ranks_ready(dst, 3)), "ranks activation-ready")


# ---------------------------------------------------------------------------
# selftest --transport ucx: errors
# ---------------------------------------------------------------------------

@test
def rank_needs_rendezvous():
    src, dst = scenario(FOUR_AXIS)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "2", "--rank", "0", "--session", "s")
    line = expect_one_line_error(
        rc, out, err, "--rank needs --rendezvous DIR shared by every rank")
    check(line == "reshard: error: --rank needs --rendezvous DIR shared by "
          "every rank", "unexpected line %r" % line)


@test
def rank_needs_session():
    src, dst = scenario(FOUR_AXIS)
    rdv = fresh_dir("rank_needs_session")
    for extra in ((), ("--rendezvous", rdv)):
        rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                           "--procs", "2", "--rank", "0", *extra)
        line = expect_one_line_error(rc, out, err, "--rank needs --session")
        check(line == "reshard: error: --rank needs --session",
              "unexpected line %r" % line)
    check(os.listdir(rdv) == [], "rendezvous written: %r" % os.listdir(rdv))


@test
def kill_source_fails_fast():
    src, dst = scenario(FOUR_AXIS)
    rdv = fresh_dir("kill_source")
    t0 = time.monotonic()
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "4", "--inject-fault", "kill-source", "--timeout",
                       "10", "--rendezvous", rdv, "--session", "fault",
                       timeout=60)
    seconds = time.monotonic() - t0
    line = expect_error_line(rc, out, err, "rank 0 died of signal 9 (Killed)")
    check(line == "reshard: error: live self-test failed: rank 0 died of "
          "signal 9 (Killed)", "unexpected line %r" % line)
    check(seconds < 7, "took %.1f s, want well under the 10 s timeout" %
          seconds)
    ready = os.path.join(rdv, "fault", "ready")
    ready_records = os.listdir(ready) if os.path.isdir(ready) else []
    check(ready_records == [], "a rank reported ready: %r" % ready_records)
    abort = os.path.join(rdv, "fault", "abort")
    check(os.path.isdir(abort) and os.listdir(abort),
          "no abort record under %s" % abort)


@test
def stale_generation_fails():
    src, dst = scenario(FOUR_AXIS)
    t0 = time.monotonic()
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "4", "--inject-fault", "stale-generation",
                       "--timeout", "10", timeout=60)
    seconds = time.monotonic() - t0
    line = expect_error_line(
        rc, out, err, "acquired runtime binding generation differs from plan")
    check("source participant p-d0-p0-e0-t0: planned 1, current 2" in line,
          "error does not name the stale participant: %r" % line)
    check(seconds < 7, "took %.1f s" % seconds)


@test
def bogus_protocol_is_rejected():
    src, dst = scenario(FOUR_AXIS)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                       "--ucx-protocol", "bogus")
    check(rc != 0, "exit status 0 for --ucx-protocol bogus")
    check(rc != 1 or b"reshard: error:" not in err,
          "want a command-line validation error, got %r" % err)
    text = err.decode("utf-8")
    check("--ucx-protocol" in text and "bogus" in text,
          "stderr does not name the option and value: %r" % text)
    check(out == b"", "stdout must be empty: %r" % out)


# ---------------------------------------------------------------------------
# selftest --rank: one rank per invocation
# ---------------------------------------------------------------------------

@test
def rank_mode_two_invocations():
    src, dst = scenario(FOUR_AXIS)
    p = plan(src, dst)
    rdv = fresh_dir("rank_mode")
    reports = []
    for rank, (rc, out, err) in enumerate(run_two_ranks(src, dst, rdv, "s1")):
        check(rc == 0, "rank %d exit %d, stderr %r" % (rank, rc, err))
        report = one_json_line(out, UCX_KEYS)
        check(report["verified"] is True, "rank %d not verified" % rank)
        check(report["mismatch"] == "", "rank %d mismatch" % rank)
        check(report["transport"] == "ucx" and report["procs"] == 2,
              "rank %d: %r" % (rank, report))
        check(report["segments"] == p["segments"], "rank %d segments" % rank)
        check_floats(report)
        reports.append(report)
    # Rank 0 hosts every source, rank 1 every target.
    check(reports[0]["ranks_ready"] == 0, "rank 0 ranks_ready %r" %
          reports[0]["ranks_ready"])
    check(reports[1]["ranks_ready"] == 1, "rank 1 ranks_ready %r" %
          reports[1]["ranks_ready"])
    check(reports[0]["bytes"] == 0 and reports[1]["bytes"] == p["bytes"],
          "bytes %r / %r, plan %r" %
          (reports[0]["bytes"], reports[1]["bytes"], p["bytes"]))
    check(reports[1]["operations"] == p["regions"],
          "target rank operations %r" % reports[1]["operations"])
    check(1 <= reports[0]["messages"] + reports[1]["messages"] <= p["regions"],
          "messages %r + %r, want 1..%r" % (reports[0]["messages"],
                                             reports[1]["messages"],
                                             p["regions"]))
    session = os.path.join(rdv, "s1")
    check(sorted(os.listdir(os.path.join(session, "ready"))) == ["1"],
          "ready records %r" % os.listdir(os.path.join(session, "ready")))
    check(sorted(os.listdir(os.path.join(session, "done"))) == ["0", "1"],
          "done records %r" % os.listdir(os.path.join(session, "done")))
    check(not os.path.exists(os.path.join(session, "abort")),
          "abort records in a successful session")


# ---------------------------------------------------------------------------
# selftest --transport ucx: sessions, records and limits fail closed
# ---------------------------------------------------------------------------

@test
def ucx_session_reuse_is_refused():
    # The second run of one command used to print the first run's figures
    # with "verified": true and exit 0 while its own ranks failed.
    src, dst = scenario(CROSS_DIM)
    rdv = fresh_dir("session_reuse")
    args = ("selftest", src, dst, "--transport", "ucx", "--procs", "2",
            "--rendezvous", rdv, "--session", "again", "--json")
    rc, out, err = run(*args)
    check(rc == 0, "first run: exit %d, stderr %r" % (rc, err))
    one_json_line(out, UCX_KEYS)
    session = os.path.join(rdv, "again")
    before = sorted(os.path.join(d, f) for d, _, fs in os.walk(session)
                    for f in fs)
    rc, out, err = run(*args)
    line = expect_one_line_error(rc, out, err, "already has")
    check(line == "reshard: error: live session again already has %d "
          "record(s) in rendezvous %s (again/address/0, ...); use a new "
          "--session or remove them" % (len(before), rdv),
          "unexpected line %r" % line)
    after = sorted(os.path.join(d, f) for d, _, fs in os.walk(session)
                   for f in fs)
    check(before == after, "records changed: %r -> %r" % (before, after))


@test
def ucx_malformed_report_record_is_one_error_line():
    # Used to die of SIGABRT (an uncaught std::invalid_argument).
    src, dst = scenario(CROSS_DIM)
    rdv = fresh_dir("malformed_report")
    os.makedirs(os.path.join(rdv, "s", "report"))
    with open(os.path.join(rdv, "s", "report", "1"), "wb") as handle:
        handle.write(b"verified=1\nbytes=lots\n")
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "2", "--rendezvous", rdv, "--session", "s",
                       "--timeout", "5", "--json")
    line = expect_one_line_error(rc, out, err, "s/report/1")
    check(line == "reshard: error: live session s already has 1 record(s) "
          "in rendezvous %s (s/report/1); use a new --session or remove them"
          % rdv, "unexpected line %r" % line)


@test
def ucx_malformed_peer_address_is_one_error_line():
    # 64 bytes of 0x02 as rank 1's address used to kill rank 0 inside UCX
    # (an assertion in ucp_address_unpack, SIGABRT). Rank 1 publishes its
    # real records and times out alone; its address is then replaced, raw
    # and as a well-formed record (digest and all) of the same bytes.
    import hashlib
    src, dst = scenario(CROSS_DIM)
    garbage = b"\x02" * 64
    forged = json.dumps({"address": garbage.hex(), "rank": 1,
                         "sha256": hashlib.sha256(garbage).hexdigest()},
                        sort_keys=True, separators=(",", ":")).encode()
    for name, address, want in (
            ("raw", garbage, "malformed address record raw/address/1: "
             "invalid JSON"),
            ("forged", forged, "UCX worker address has format version 2, "
             "this UCX writes version 0")):
        rdv = fresh_dir("malformed_address_" + name)
        common = ("selftest", src, dst, "--transport", "ucx", "--procs", "2",
                  "--rendezvous", rdv, "--session", name)
        rc, out, err = run(*common, "--rank", "1", "--timeout", "0.5")
        check(rc == 1 and b"timed out" in err,
              "rank 1 alone: exit %d, stderr %r" % (rc, err))
        session = os.path.join(rdv, name)
        os.remove(os.path.join(session, "abort", "1"))
        os.remove(os.path.join(session, "address", "1"))
        with open(os.path.join(session, "address", "1"), "wb") as handle:
            handle.write(address)
        rc, out, err = run(*common, "--rank", "0", "--timeout", "5",
                           "--json")
        line = expect_one_line_error(rc, out, err, want)
        check(line.startswith("reshard: error: live session %s, rank 0: " %
                              name), "unexpected line %r" % line)
        record = load(os.path.join(session, "abort", "0"))
        # Not final: the rank failed opening, it did not give up for good.
        check(sorted(record) == ["final", "generation", "rank", "reason"]
              and record["final"] is False and record["generation"] == 0
              and record["rank"] == 0 and want in record["reason"],
              "abort record %r" % record)


@test
def ucx_failed_rank_fails_the_run_whatever_its_report_says():
    # A record of another writer under this run's session: a successful
    # report for rank 1 appears while the run is going on, so rank 1's own
    # report cannot be written and it exits with status 1. The launcher's
    # result is the ranks' exit statuses; the forged figures must not be
    # printed. (Before, the launcher died of SIGABRT on this record.)
    src, dst = scenario(FOUR_AXIS)
    forged = json.dumps({
        "bytes": 1, "error": "", "messages": 1, "mismatch": "",
        "open_ns": 0, "operations": 1, "packed_messages": 0, "plan_ns": 1,
        "rank": 1, "ready": True, "transfer_ns": 1, "update_ns": [],
        "wire_bytes": [], "delta_regions": [], "full_regions": [],
        "encode_ns": [], "apply_ns": [], "snapshot_bytes": 0,
        "verified": True, "verified_regions": [], "verify_ns": [],
        "opens": 0, "rejoins": 0, "failed_updates": [], "failures": []},
        sort_keys=True, separators=(",", ":")).encode()
    # Rank 1 reports well after it publishes; should it ever report before
    # the forged record lands, run again.
    for attempt in range(3):
        rdv = fresh_dir("forged_report_%d" % attempt)
        session = os.path.join(rdv, "s")
        staged = os.path.join(rdv, "staged")
        with open(staged, "wb") as handle:
            handle.write(forged)
        proc = subprocess.Popen(
            [RESHARD, "selftest", src, dst, "--transport", "ucx", "--procs",
             "2", "--rendezvous", rdv, "--session", "s", "--timeout", "20",
             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        planted = False
        try:
            marker = os.path.join(session, "rank", "1")
            deadline = time.monotonic() + 30
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.0005)
            check(os.path.exists(marker), "rank 1 never published")
            os.makedirs(os.path.join(session, "report"), exist_ok=True)
            try:
                os.link(staged, os.path.join(session, "report", "1"))
                planted = True
            except FileExistsError:
                pass
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if planted:
            break
    check(planted, "rank 1 reported before the forged record, three times")
    line = expect_one_line_error(proc.returncode, out, err, "rank 1")
    check(line == "reshard: error: live self-test failed: rank 1: exited "
          "with status 1 (its report record holds no error)",
          "unexpected line %r" % line)


@test
def ucx_unsupported_rendezvous_uri():
    src, dst = scenario(CROSS_DIM)
    cwd = fresh_dir("rendezvous_uri")
    for uri in ("rediss://h:1", "s3://bucket/rdv"):
        proc = subprocess.run(
            [RESHARD, "selftest", src, dst, "--transport", "ucx",
             "--rendezvous", uri, "--session", "s"],
            capture_output=True, timeout=60, cwd=cwd)
        line = expect_one_line_error(proc.returncode, proc.stdout,
                                     proc.stderr, uri)
        check(line == 'reshard: error: unsupported rendezvous URI "%s" '
              '(supported: fs://PATH or a directory, redis://HOST:PORT, '
              'unix:///PATH)' % uri,
              "unexpected line %r" % line)
    check(os.listdir(cwd) == [], "created %r" % os.listdir(cwd))
    rdv = os.path.join(cwd, "rdv")
    rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                       "--rendezvous", "fs://" + rdv, "--session", "s",
                       "--json")
    check(rc == 0, "fs:// rendezvous: exit %d, stderr %r" % (rc, err))
    check(one_json_line(out, UCX_KEYS)["verified"] is True, "not verified")
    check(os.path.isdir(os.path.join(rdv, "s", "done")), "no records in %s"
          % rdv)


@test
def ucx_procs_beyond_use_or_cap_are_refused():
    src, dst = scenario(CROSS_DIM)
    parts = sum(1 for path in (src, dst) for p in load(path)["parts"]
                if p["fragments"])
    # The count beyond use first: code without the limits runs it (and
    # fails here) instead of forking 4096 ranks.
    for procs, want in (
            (parts + 1, "--procs %d is more than the %d processes the "
             "placements can use" % (parts + 1, parts)),
            (65, "--procs 65 is over the limit of 64 processes"),
            (4096, "--procs 4096 is over the limit of 64 processes")):
        t0 = time.monotonic()
        rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                           "--procs", str(procs), timeout=30)
        line = expect_one_line_error(rc, out, err, want)
        check(time.monotonic() - t0 < 5, "--procs %d took %.1f s" %
              (procs, time.monotonic() - t0))


@test
def ucx_warnings_never_reach_stdout():
    # UCX warns about an unknown UCX_* variable on its log, which is stdout
    # unless redirected; --json output must stay one JSON object, in the
    # launcher and in a rank run here.
    src, dst = scenario(CROSS_DIM)
    env = dict(os.environ, UCX_RESHARD_TEST_UNKNOWN="1")
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "2", "--json", env=env)
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    one_json_line(out, UCX_KEYS)
    check(any(UCX_LOG.match(l) and "UCX_RESHARD_TEST_UNKNOWN" in l
              for l in err.decode("utf-8", "replace").splitlines()),
          "UCX did not warn (the test proves nothing): %r" % err)
    rdv = fresh_dir("ucx_warnings")
    ranks = run_two_ranks(src, dst, rdv, "w", env=env)
    for rank, (rc, out, err) in enumerate(ranks):
        check(rc == 0, "rank %d exit %d, stderr %r" % (rank, rc, err))
        one_json_line(out, UCX_KEYS)
        check(b"UCX_RESHARD_TEST_UNKNOWN" in err,
              "rank %d: UCX did not warn: %r" % (rank, err))


# ---------------------------------------------------------------------------
# selftest --via-store and `reshard store`
# ---------------------------------------------------------------------------

def q(component):
    s = urllib.parse.quote(component, safe="")
    return "%2E" + s[1:] if s.startswith(".") else s


def keep_revision(name, json_mode=True):
    """Uploads FOUR_AXIS into a fresh fs:// store, keeps the revision and
    returns (store dir, uri, the ls entry)."""
    src, dst = scenario(FOUR_AXIS)
    store_dir = os.path.join(TMP, name)
    uri = "fs://" + store_dir
    args = ["selftest", src, dst, "--via-store", uri, "--keep-revision"]
    rc, out, err = run(*(args + (["--json"] if json_mode else [])))
    check(rc == 0, "selftest exit %d, stderr %r" % (rc, err))
    if json_mode:
        report = one_json_line(out, STORE_KEYS)
        check(report["verified"] is True, "not verified")
    else:
        text = out.decode("utf-8")
        for needle in ("selftest: every target byte verified\n",
                       "  upload + commit ", "  load "):
            check(needle in text, "human output lacks %r: %r" % (needle, text))
        check("UCX messages" not in text, "UCX lines in a store run")
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0, "ls exit %d: %r" % (rc, err))
    revs = one_json_line(out)
    check(isinstance(revs, list) and len(revs) == 1,
          "want one revision, got %r" % revs)
    check(list(revs[0].keys()) == LS_KEYS, "ls keys %r" % list(revs[0]))
    return store_dir, uri, revs[0]


def payload_files(store_dir, key):
    root = os.path.join(store_dir, os.path.dirname(key), "payload")
    out = []
    for dirpath, _, files in os.walk(root):
        out.extend(os.path.join(dirpath, f) for f in files)
    return sorted(out)


@test
def store_selftest_json_removes_revision():
    src, dst = scenario(FOUR_AXIS)
    p = plan(src, dst)
    store_dir = os.path.join(TMP, "store_removed")
    uri = "fs://" + store_dir
    rc, out, err = run("selftest", src, dst, "--via-store", uri, "--json")
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    check(err == b"", "stderr must be empty: %r" % err)
    report = one_json_line(out, STORE_KEYS)
    check(report["transport"] == "store", "transport %r" % report["transport"])
    check(report["verified"] is True and report["mismatch"] == "",
          "not verified: %r" % report)
    check(report["bytes"] == p["bytes"], "bytes %r, plan %r" %
          (report["bytes"], p["bytes"]))
    check(report["operations"] == p["regions"], "operations %r" %
          report["operations"])
    check(report["segments"] == p["segments"], "segments %r" %
          report["segments"])
    check_floats(report)
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0 and out == b"[]\n", "ls after selftest: %d %r %r" %
          (rc, out, err))
    files = [os.path.join(d, f) for d, _, fs in os.walk(store_dir) for f in fs]
    check(files == [], "files left in the store: %r" % files[:5])


@test
def store_keep_revision_ls_show_verify():
    src, _ = scenario(FOUR_AXIS)
    placement = load(src)
    store_dir, uri, rev = keep_revision("store_kept", json_mode=False)
    check(rev["state"] == "READY", "state %r" % rev["state"])
    check(rev["leases"] == 0, "leases %r" % rev["leases"])
    check(rev["fragments"] > 0, "fragments %r" % rev["fragments"])
    # One logical model, whatever the DP size.
    check(rev["bytes"] == model_bytes(src),
          "bytes %r, model has %r" % (rev["bytes"], model_bytes(src)))
    check(rev["resource_id"] == placement["resource_id"], "resource_id")
    check(rev["revision"] == placement["revision"], "revision")
    check(rev["weight_generation"] == placement["weight_generation"],
          "weight_generation")
    key = rev["manifest_key"]
    check(os.path.isfile(os.path.join(store_dir, key)),
          "no manifest file at %s" % key)
    check(len(payload_files(store_dir, key)) == rev["fragments"],
          "payload files %d, fragments %d" %
          (len(payload_files(store_dir, key)), rev["fragments"]))

    rc, out, err = run("store", "show", uri, key, "--json")
    check(rc == 0, "show exit %d: %r" % (rc, err))
    show = one_json_line(out, SHOW_KEYS)
    for k in ("bytes", "fragments", "manifest_key", "resource_id",
              "revision", "weight_generation"):
        check(show[k] == rev[k], "show %s %r, ls %r" % (k, show[k], rev[k]))
    check(show["tensors"] == len(placement["tensors"]),
          "tensors %r" % show["tensors"])
    check(re.fullmatch(r"[0-9a-f]{64}", show["manifest_digest"]),
          "manifest_digest %r" % show["manifest_digest"])
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", show["created_at"]),
          "created_at %r" % show["created_at"])
    want_key = "weights/%s/%s/%s/%d/manifest" % (
        q(show["namespace"]), q(show["resource_id"]), q(show["revision"]),
        show["weight_generation"])
    check(key == want_key, "manifest_key %r, want %r" % (key, want_key))

    for extra in ((), (key,)):
        rc, out, err = run("store", "verify", uri, *extra, "--json")
        check(rc == 0, "verify exit %d: %r" % (rc, err))
        v = one_json_line(out, VERIFY_KEYS)
        check(v["verified"] is True, "verified %r" % v["verified"])
        check(v["objects"] == rev["fragments"],
              "objects %r, fragments %r" % (v["objects"], rev["fragments"]))
        check(v["bytes"] == rev["bytes"], "verify bytes %r" % v["bytes"])
        check(v["revisions"] == 1, "revisions %r" % v["revisions"])
        # Every payload is smaller than one 1 MiB chunk.
        check(v["chunks"] == v["objects"], "chunks %r" % v["chunks"])


@test
def store_verify_detects_flipped_byte():
    store_dir, uri, rev = keep_revision("store_corrupt")
    key = rev["manifest_key"]
    files = payload_files(store_dir, key)
    check(files, "no payload files under %s" % store_dir)
    victim = files[0]
    with open(victim, "rb") as handle:
        original = handle.read()
    check(original, "empty payload %s" % victim)
    with open(victim, "wb") as handle:
        handle.write(bytes([original[0] ^ 0xFF]) + original[1:])
    object_key = os.path.relpath(victim, store_dir)
    fid = os.path.basename(victim)
    want = ("reshard: error: checksum mismatch in stored fragment %s "
            "\\(object %s\\) at bytes \\[0, %d\\): expected [0-9a-f]{16}, got "
            "[0-9a-f]{16}" % (re.escape(fid), re.escape(object_key),
                              min(len(original), 1 << 20)))
    rc, out, err = run("store", "verify", uri, key)
    line = expect_one_line_error(rc, out, err,
                                 "checksum mismatch in stored fragment")
    check(re.fullmatch(want, line), "%r does not match %r" % (line, want))
    # --json: the same one error line, and the report says which revision.
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 1, "verify --json exit %d" % rc)
    lines = err.decode("utf-8").splitlines()
    check(len(lines) == 1 and re.fullmatch(want, lines[0]),
          "stderr %r does not match %r" % (err, want))
    v = one_json_line(out, VERIFY_KEYS)
    check(v["verified"] is False and v["revisions"] == 1 and
          v["objects"] == 0,
          "verify --json report %r" % v)
    check(v["corrupt"] == [{"error": lines[0][len("reshard: error: "):],
                            "manifest_key": key}],
          "corrupt %r" % v["corrupt"])
    # Restored, the revision verifies again.
    with open(victim, "wb") as handle:
        handle.write(original)
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 0 and one_json_line(out)["verified"] is True,
          "verify after restore: %d %r" % (rc, err))


@test
def store_gc_then_rm():
    store_dir, uri, rev = keep_revision("store_gc_rm")
    key = rev["manifest_key"]
    rc, out, err = run("store", "gc", uri, "--json")
    check(rc == 0, "gc exit %d: %r" % (rc, err))
    gc = one_json_line(out, GC_KEYS)
    check(gc == {"bytes_removed": 0, "keys_removed": 0, "skipped": [],
                 "temporaries_removed": 0, "transactions_completed": [],
                 "transactions_removed": []},
          "gc collected something: %r" % gc)
    # gc never touches a published revision.
    rc, out, err = run("store", "verify", uri, key, "--json")
    check(rc == 0, "verify after gc exit %d: %r" % (rc, err))

    rc, out, err = run("store", "rm", uri, key)
    check(rc == 0, "rm exit %d: %r" % (rc, err))
    check(out.decode("utf-8") == "removed %s\n" % key, "rm output %r" % out)
    check(err == b"", "rm stderr %r" % err)
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0 and out == b"[]\n", "ls after rm: %d %r %r" % (rc, out, err))
    files = [os.path.join(d, f) for d, _, fs in os.walk(store_dir) for f in fs]
    check(files == [], "files left after rm: %r" % files[:5])
    for sub in ("show", "verify", "rm"):
        rc, out, err = run("store", sub, uri, key)
        line = expect_one_line_error(rc, out, err,
                                     "no published weight revision")
        check(line == "reshard: error: no published weight revision " + key,
              "store %s: %r" % (sub, line))


def tree_snapshot(root):
    """Every path under `root` (and `root`): type, size, content hash and
    mtime, never following a link."""
    snap = {}

    def add(path):
        st = os.lstat(path)
        entry = (st.st_mode, st.st_size, st.st_mtime_ns)
        if os.path.islink(path):
            entry += (os.readlink(path),)
        elif os.path.isfile(path):
            with open(path, "rb") as handle:
                entry += (hashlib.sha256(handle.read()).hexdigest(),)
        snap[os.path.relpath(path, root)] = entry

    add(root)
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            add(os.path.join(dirpath, name))
    return snap


def make_sentinel(name):
    sentinel = fresh_dir(name)
    os.makedirs(os.path.join(sentinel, "sub", "deeper"))
    for rel, text in (("file", "sentinel"), ("manifest", "not a manifest"),
                      ("sub/file2", "sentinel 2"),
                      ("sub/deeper/file3", "sentinel 3"),
                      (".tmp.host.1.2.3", "an old temporary")):
        with open(os.path.join(sentinel, rel), "w") as handle:
            handle.write(text)
    old = time.time() - 86400
    os.utime(os.path.join(sentinel, ".tmp.host.1.2.3"), (old, old))
    return sentinel


@test
def store_commands_never_follow_links():
    """Links to a sentinel directory planted at every directory level of a
    store, where an object would be, as an abandoned upload's payload
    directory and as a revision's manifest: every `store` command leaves the
    sentinel exactly as it was."""
    store_dir, uri, rev = keep_revision("store_links")
    key = rev["manifest_key"]
    base = os.path.dirname(key)
    sentinel = make_sentinel("store_links_sentinel")
    payload = os.path.join(store_dir, base, "payload")
    txn = os.listdir(payload)[0]
    dirs = [d for d, _, _ in os.walk(store_dir)]
    for d in dirs:
        os.symlink(sentinel, os.path.join(d, "zz-link"))
    os.symlink(os.path.join(sentinel, "file"),
               os.path.join(payload, txn, "0" * 24))
    # An abandoned upload whose payload directory is a link (no started
    # record: gc --grace 0 collects it).
    os.symlink(sentinel, os.path.join(payload, "f" * 32))
    # A revision whose manifest is a link.
    linked = os.path.join(os.path.dirname(os.path.dirname(base)),
                          "linked", "0")
    os.makedirs(os.path.join(store_dir, linked))
    linked_key = linked + "/manifest"
    os.symlink(os.path.join(sentinel, "manifest"),
               os.path.join(store_dir, linked_key))
    before = tree_snapshot(sentinel)
    link_error = ("cannot read record %s: %s is a symbolic link (a store "
                  "never follows links)" % (linked_key, linked_key))

    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0, "ls exit %d: %r" % (rc, err))
    revs = {r["manifest_key"]: r for r in one_json_line(out)}
    check(sorted(revs) == sorted([key, linked_key]), "ls %r" % revs)
    check(revs[key] == rev, "ls entry changed: %r" % revs[key])
    check(revs[linked_key] == {"bytes": 0, "error": link_error,
                               "fragments": 0, "leases": 0,
                               "manifest_key": linked_key,
                               "resource_id": "", "revision": "",
                               "state": "CORRUPT", "weight_generation": 0},
          "corrupt entry %r" % revs[linked_key])
    rc, out, err = run("store", "ls", uri)
    check(rc == 0 and ("CORRUPT" in out.decode() and
                       link_error in out.decode()),
          "ls: %d %r %r" % (rc, out, err))
    rc, out, err = run("store", "show", uri, key, "--json")
    check(rc == 0, "show exit %d: %r" % (rc, err))
    rc, out, err = run("store", "show", uri, linked_key)
    line = expect_one_line_error(rc, out, err, "is a symbolic link")
    check(line == "reshard: error: " + link_error, "show %r" % line)
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 1, "verify exit %d: %r" % (rc, err))
    check(err.decode() == "reshard: error: %s\n" % link_error,
          "verify stderr %r" % err)
    v = one_json_line(out, VERIFY_KEYS)
    check(v["revisions"] == 2 and v["objects"] == rev["fragments"] and
          v["verified"] is False and
          v["corrupt"] == [{"error": link_error,
                            "manifest_key": linked_key}],
          "verify %r" % v)
    rc, out, err = run("store", "verify", uri, key)
    check(rc == 0, "verify of the kept revision: %d %r" % (rc, err))
    rc, out, err = run("store", "gc", uri, "--grace", "0", "--json")
    check(rc == 0, "gc exit %d: %r" % (rc, err))
    gc = one_json_line(out, GC_KEYS)
    check("%s/%s" % (base, "f" * 32) in gc["transactions_removed"],
          "gc did not collect the linked upload: %r" % gc)
    check({"error": link_error, "key": linked_key} in gc["skipped"],
          "gc skipped %r" % gc["skipped"])
    check(not os.path.lexists(os.path.join(payload, "f" * 32)),
          "the link of the collected upload is still there")
    rc, out, err = run("store", "rm", uri, linked_key)
    check(rc == 0 and out.decode() == "removed %s\n" % linked_key,
          "rm of the corrupt revision: %d %r %r" % (rc, out, err))
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 0 and one_json_line(out)["verified"] is True,
          "verify after rm: %d %r" % (rc, err))
    rc, out, err = run("store", "rm", uri, key)
    check(rc == 0, "rm exit %d: %r" % (rc, err))
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0 and out == b"[]\n", "ls after rm: %d %r %r" %
          (rc, out, err))
    check(tree_snapshot(sentinel) == before, "the sentinel changed")


@test
def store_corrupt_revisions_do_not_hide_the_rest():
    """A garbage manifest and a manifest copied from another revision are
    reported as CORRUPT by ls, verify and gc; the healthy revision is listed,
    verified and kept; rm removes each corrupt one, only its own files."""
    store_dir, uri, rev = keep_revision("store_tampered")
    key = rev["manifest_key"]
    base = os.path.dirname(key)
    parent = os.path.dirname(os.path.dirname(base))
    copied = parent + "/copied/0"
    shutil.copytree(os.path.join(store_dir, base),
                    os.path.join(store_dir, copied))
    garbage = parent + "/garbage/0"
    os.makedirs(os.path.join(store_dir, garbage))
    with open(os.path.join(store_dir, garbage, "manifest"), "wb") as handle:
        handle.write(b"garbage")
    kept_files = tree_snapshot(os.path.join(store_dir, base))
    corrupt = {copied + "/manifest": "manifest key mismatch: %s/manifest "
                                     "holds %s" % (copied, key),
               garbage + "/manifest": "corrupt manifest %s/manifest: " %
                                      garbage}

    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0, "ls exit %d: %r" % (rc, err))
    revs = {r["manifest_key"]: r for r in one_json_line(out)}
    check(sorted(revs) == sorted([key] + list(corrupt)), "ls %r" % revs)
    check(revs[key] == rev, "healthy entry changed: %r" % revs[key])
    for k, msg in corrupt.items():
        check(revs[k]["state"] == "CORRUPT" and
              revs[k]["error"].startswith(msg), "entry %r" % revs[k])

    rc, out, err = run("store", "verify", uri)
    check(rc == 1, "verify exit %d" % rc)
    check(out.decode().startswith("ok  %s: %d objects" %
                                  (key, rev["fragments"])) and
          out.decode().count("\n") == 1, "verify stdout %r" % out)
    lines = err.decode().splitlines()
    check(len(lines) == 2, "want one error line per corrupt revision: %r" %
          err)
    for line, (k, msg) in zip(lines, sorted(corrupt.items())):
        check(line.startswith("reshard: error: " + msg), "%r" % line)
    rc, out, err = run("store", "verify", uri, "--json")
    v = one_json_line(out, VERIFY_KEYS)
    check(rc == 1 and v["revisions"] == 3 and v["verified"] is False and
          [c["manifest_key"] for c in v["corrupt"]] == sorted(corrupt),
          "verify --json %d %r" % (rc, v))

    rc, out, err = run("store", "gc", uri, "--grace", "0", "--json")
    check(rc == 0, "gc exit %d: %r" % (rc, err))
    gc = one_json_line(out, GC_KEYS)
    check(sorted(p["key"] for p in gc["skipped"]) == sorted(corrupt) and
          gc["transactions_removed"] == [], "gc %r" % gc)
    rc, out, err = run("store", "gc", uri)
    check(rc == 0 and "gc: skipped %s/manifest: " % garbage in out.decode(),
          "gc human output %r" % out)
    for k in sorted(corrupt):
        rc, out, err = run("store", "rm", uri, k)
        check(rc == 0 and out.decode() == "removed %s\n" % k,
              "rm %s: %d %r %r" % (k, rc, out, err))
        check(not os.path.exists(os.path.join(store_dir, os.path.dirname(k))),
              "files left under %s" % k)
    check(tree_snapshot(os.path.join(store_dir, base)) == kept_files,
          "the healthy revision's files changed")
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 0 and one_json_line(out)["verified"] is True,
          "verify after rm: %d %r" % (rc, err))


@test
def store_unsupported_uri():
    for args in (("ls", "s3://x"), ("ls", "s3://x", "--json"),
                 ("gc", "s3://x")):
        rc, out, err = run("store", *args)
        line = expect_one_line_error(rc, out, err, "unsupported store URI")
        check('"s3://x"' in line, "error does not name the URI: %r" % line)



@test
def demo_runs_all_three_paths():
    """`reshard demo` needs nothing but the binary: in memory, live over
    UCX and through a store, every byte verified, one row each."""
    rc, out, err = run("demo", "--procs", "2", timeout=300)
    check(rc == 0, "demo exited %d: %s" % (rc, err.decode()[-400:]))
    lines = out.decode().splitlines()
    check(lines and lines[0].startswith("small-moe: trainer TP4/PP2/EP8/DP2"),
          "first line: %r" % (lines[:1],))
    rows = [l for l in lines
            if not l.startswith("demo:") and "verified" in l.split()]
    check(len(rows) == 3, "expected 3 verified rows, got %r" % (lines,))
    for prefix in ("in memory", "live, 2 processes over UCX", "weight store"):
        check(any(r.startswith(prefix) for r in rows),
              "no row for %r in %r" % (prefix, rows))
    # The three paths move the same bytes over the same regions.
    check(len({tuple(r.split()[-4:-2]) for r in rows}) == 1,
          "bytes/regions differ between paths: %r" % (rows,))
    check(lines[-1] ==
          "demo: ok, every target byte verified on all three paths",
          "last line: %r" % (lines[-1],))
    rc, out, err = run("demo", "--procs", "1")
    check(rc != 0 and b"--procs" in err, "--procs 1 accepted: %r" % (err,))

# ---------------------------------------------------------------------------

def main(argv):
    global RESHARD, TESTS_DIR, TMP, SCENARIOS
    if len(argv) != 3:
        print("usage: live_store_cli_test.py PATH/TO/reshard TESTS_DIR",
              file=sys.stderr)
        return 2
    RESHARD = os.path.abspath(argv[1])
    TESTS_DIR = os.path.abspath(argv[2])
    SCENARIOS = os.path.join(TESTS_DIR, "data", "scenarios")

    def set_tmp(tmp):
        global TMP
        TMP = tmp

    return SUITE.run("reshard_live_store_test_", set_tmp)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
