#!/usr/bin/env python3
"""--progress of the long CLI commands (`hf reshard`, `hf import`, `hf
export`, `store verify`, `store rm`, `store gc`, `selftest`): one updating
line on standard error when it is a
terminal (a pseudo-terminal here) or with `--progress always`, nothing
with `--progress never` or when standard error is a pipe, and standard
output (`--json`) never touched. The checkpoint is about 40 MB, made by the
test (hf_checkpoints.py).

Usage: progress_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import pty
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check  # noqa: E402

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

# A Llama of about 40 MB (bf16): enough bytes for a progress line.
CONFIG = dict(hfc.CONFIGS["llama"], hidden_size=512, vocab_size=8192,
              num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, intermediate_size=1536, head_dim=64)

# One drawing of the line: carriage return, clear to the end of the line.
DRAW = "\r\x1b[K"
PERCENT = re.compile(r"^(.*\S)\s+(\d{1,3}\.\d)%\s")


def run(args, tty):
    """Runs the CLI with standard output a pipe and standard error a
    pseudo-terminal (tty) or a pipe; returns (code, stdout, stderr)."""
    argv = [RESHARD, *map(str, args)]
    if not tty:  # bytes: a text pipe would turn "\r" into "\n"
        r = subprocess.run(argv, capture_output=True)
        return r.returncode, r.stdout.decode(), r.stderr.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave,
                         stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    out = p.stdout.read().decode()
    p.wait()
    reader.join(timeout=30)
    os.close(master)
    # The terminal turns "\n" into "\r\n".
    err = b"".join(chunks).decode().replace("\r\n", "\n")
    return p.returncode, out, err


def draws(err):
    """[(what, percentage)] of every drawing of the progress line."""
    parts = err.split(DRAW)[1:]
    got = []
    for part in parts:
        m = PERCENT.search(part)
        check(m is not None, "a drawing without a percentage: %r" % part)
        got.append((m.group(1), float(m.group(2))))
    return got


def ok(code, out, err, what):
    check(code == 0, "%s failed (%d): %s" % (what, code, err.strip()))


def shows_progress(err, what, at_least, figures="bytes"):
    got = draws(err)
    check(len(got) >= at_least,
          "%s: %d progress drawings (%r), wanted at least %d" %
          (what, len(got), err[-400:], at_least))
    for line in {w for w, _ in got}:  # each operation's own line
        mine = [p for w, p in got if w == line]
        check(mine == sorted(mine), "%s: percentages go back: %r" %
              (what, got))
        check(mine[-1] == 100.0, "%s: %s does not end at 100%%: %r" %
              (what, line, got))
    check(err.endswith("\n"), "%s: the line is not ended" % what)
    if figures == "bytes":
        check("B/s" in err and ("MiB" in err or "GiB" in err),
              "%s: no bytes or rate in %r" % (what, err[-200:]))
    elif figures:  # a count: "3 / 7 keys"
        check(re.search(r"\d+ / \d+ %s" % figures, err) is not None,
              "%s: no count of %s in %r" % (what, figures, err[-200:]))


def shows_none(err, what):
    check(DRAW not in err and "%" not in err,
          "%s: progress drawn: %r" % (what, err[:300]))


def checkpoint():
    d = os.path.join(TMP["dir"], "ckpt")
    if not os.path.exists(d):
        hfc.write_checkpoint(d, CONFIG, files=2)
        target = os.path.join(TMP["dir"], "tp2.json")
        code, out, err = run(["hf", "layout", os.path.join(d, "config.json"),
                              "--tp", 2, "--pp", 2, "--ep", 1, "--dp", 1,
                              "--checkpoint", d, "-o", target], tty=False)
        ok(code, out, err, "hf layout")
    return d, os.path.join(TMP["dir"], "tp2.json")


def fresh(name):
    TMP["n"] = TMP.get("n", 0) + 1
    return os.path.join(TMP["dir"], "%s-%d" % (name, TMP["n"]))


def reshard(tty, *flags):
    ckpt, target = checkpoint()
    return run(["hf", "reshard", ckpt, target, fresh("out"), *flags], tty)


def imported(*flags, tty=False):
    ckpt, _ = checkpoint()
    store = "fs://" + fresh("store")
    code, out, err = run(["hf", "import", ckpt, store, *flags], tty)
    return store, code, out, err


@SUITE.test
def hf_reshard_on_a_terminal_draws_loading_and_writing():
    code, out, err = reshard(True)
    ok(code, out, err, "hf reshard")
    # Loading and writing: each line drawn at 0% and at 100% at least.
    shows_progress(err, "hf reshard", 4)
    check("loading " in err and "writing " in err, "phases: %r" % err[-300:])
    check(out.startswith("loaded ") and DRAW not in out, "stdout: %r" % out)


@SUITE.test
def hf_reshard_progress_never_draws_nothing():
    code, out, err = reshard(True, "--progress", "never")
    ok(code, out, err, "hf reshard --progress never")
    shows_none(err, "--progress never")


@SUITE.test
def hf_reshard_json_to_a_pipe_is_only_the_document():
    for tty in (False, True):
        code, out, err = reshard(tty, "--json")
        ok(code, out, err, "hf reshard --json")
        doc = json.loads(out)  # the whole of standard output
        check(doc["bytes"] > 30_000_000, "bytes: %r" % doc)
        if tty:
            shows_progress(err, "hf reshard --json (stderr a terminal)", 4)
        else:
            shows_none(err, "hf reshard --json, stderr a pipe")
            check(err == "", "stderr: %r" % err)


@SUITE.test
def progress_always_draws_into_a_pipe():
    code, out, err = reshard(False, "--progress", "always")
    ok(code, out, err, "hf reshard --progress always")
    shows_progress(err, "--progress always", 4)


@SUITE.test
def hf_import_store_upload_progress():
    store, code, out, err = imported(tty=True)
    ok(code, out, err, "hf import")
    shows_progress(err, "hf import", 2)
    check("importing " in err, "what: %r" % err[-200:])
    _, code, out, err = imported("--progress", "never", tty=True)
    ok(code, out, err, "hf import --progress never")
    shows_none(err, "hf import --progress never")
    _, code, out, err = imported("--json")
    ok(code, out, err, "hf import --json")
    check(json.loads(out)["tensors"] > 0 and err == "", (out, err))


@SUITE.test
def hf_export_and_store_verify_store_load_progress():
    store, code, out, err = imported("--json")
    ok(code, out, err, "hf import --json")
    key = json.loads(out)["manifest_key"]
    code, out, err = run(["hf", "export", store, key, fresh("exp")], True)
    ok(code, out, err, "hf export")
    shows_progress(err, "hf export", 2)
    check("exporting " in err, "what: %r" % err[-200:])
    code, out, err = run(["hf", "export", store, key, fresh("exp"),
                          "--progress", "never"], True)
    ok(code, out, err, "hf export --progress never")
    shows_none(err, "hf export --progress never")
    code, out, err = run(["hf", "export", store, key, fresh("exp"), "--json"],
                         False)
    ok(code, out, err, "hf export --json")
    check(json.loads(out)["bytes"] > 30_000_000 and err == "", (out, err))
    code, out, err = run(["store", "verify", store, key], True)
    ok(code, out, err, "store verify")
    shows_progress(err, "store verify", 2)
    code, out, err = run(["store", "verify", store, key, "--json"], False)
    ok(code, out, err, "store verify --json")
    check(json.loads(out)["verified"] is True and err == "", (out, err))


@SUITE.test
def store_rm_and_gc_progress_in_keys_and_uploads():
    for tty, flags in ((True, []), (True, ["--progress", "never"]),
                       (False, ["--json"])):
        store, code, out, err = imported("--json")
        ok(code, out, err, "hf import --json")
        key = json.loads(out)["manifest_key"]
        code, out, err = run(["store", "rm", store, key, *flags], tty)
        ok(code, out, err, "store rm")
        code, gout, gerr = run(["store", "gc", store, *flags], tty)
        ok(code, gout, gerr, "store gc")
        if not flags:
            shows_progress(err, "store rm", 2, figures="keys")
            check("removing " + key in err, err[-300:])
            check(out == "removed %s\n" % key, out)
            shows_progress(gerr, "store gc", 1, figures="uploads")
            check("collecting " in gerr, gerr[-300:])
        elif flags[0] == "--progress":
            shows_none(err, "store rm --progress never")
            shows_none(gerr, "store gc --progress never")
        else:
            check(out == "" and err == "", (out, err))
            check(json.loads(gout)["keys_removed"] >= 0 and gerr == "",
                  (gout, gerr))


@SUITE.test
def selftest_updates_progress():
    _, target = checkpoint()
    argv = ["selftest", target, target, "--transport", "ucx", "--procs", 2,
            "--updates", 3]
    code, out, err = run(argv, True)
    ok(code, out, err, "selftest --updates")
    got = draws(err)
    # The line starts at 0% and ends at 100% (always drawn); in between it
    # is redrawn at most ten times a second (docs/cli.md), so an update
    # finished within 100 ms of the last draw is not drawn: the figures are
    # an ordered subsequence of the updates' fractions.
    shown = [p for w, p in got if w == "selftest updates"]
    check(shown[:1] == [0.0] and shown[-1:] == [100.0] and
          shown == sorted(shown) and len(set(shown)) == len(shown) and
          set(shown) <= {0.0, 33.3, 66.7, 100.0}, got)
    check(err.endswith("\n"), "the line is not ended: %r" % err[-100:])
    code, out, err = run(argv + ["--progress", "never"], True)
    ok(code, out, err, "selftest --progress never")
    shows_none(err, "selftest --progress never")
    code, out, err = run(argv + ["--json"], False)
    ok(code, out, err, "selftest --json")
    check(json.loads(out)["updates"] == 3 and DRAW not in err,
          (out[:200], err[-300:]))
    # The one-shot local run draws its phases, each ended at 100%.
    code, out, err = run(["selftest", target, target, "--progress",
                          "always"], False)
    ok(code, out, err, "selftest --progress always")
    phases = [w for w, p in draws(err) if p == 100.0]
    check(phases == ["selftest fill", "selftest transfer", "selftest verify"],
          draws(err))


@SUITE.test
def unknown_progress_mode_is_refused():
    code, out, err = reshard(False, "--progress", "sometimes")
    check(code != 0 and "--progress" in err, (code, err))


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-progress-", lambda d: TMP.update(dir=d)))
