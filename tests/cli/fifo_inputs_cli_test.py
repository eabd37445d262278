#!/usr/bin/env python3
"""Every input path of the CLI against a FIFO with no writer.

A FIFO (or a device) where a command expects a file must never hang it:
every input named by a path (placements, bindings, model specs, legacy
inventories, config.json files, checkpoint files, engine parameter files,
weight-store files) is opened without blocking and refused unless it is a
regular file, in one line, within 2 seconds, leaving no output behind.
Standard input stays readable through '-'.

Usage: fifo_inputs_cli_test.py RESHARD TESTS_DIR
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check  # noqa: E402

RESHARD = sys.argv[1]
TESTS_DIR = sys.argv[2]
SUITE = Suite()
TMP = {}
# The budget of a refusal; a hang is cut off at HANG_S.
REFUSE_S = 2.0
HANG_S = 20


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def scenario(name):
    return os.path.join(TESTS_DIR, "data", "scenarios", name + ".json")


SRC = scenario("cross_dim_ep2_to_tp2_source")
DST = scenario("cross_dim_ep2_to_tp2_target")


def fifo(name):
    p = path(name)
    os.mkfifo(p)
    return p


def run(*args):
    t0 = time.monotonic()
    try:
        r = subprocess.run([RESHARD, *map(str, args)], capture_output=True,
                           text=True, timeout=HANG_S,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, HANG_S
    return r, time.monotonic() - t0


def refused(args, message, outputs=()):
    """`reshard *args` exits 1 within REFUSE_S with exactly
    `reshard: error: <message>` and writes none of `outputs`."""
    what = " ".join(map(str, args))
    r, took = run(*args)
    check(r is not None, "%s: still running after %d s" % (what, HANG_S))
    check(took < REFUSE_S, "%s: took %.2f s to refuse" % (what, took))
    check(r.returncode == 1, "%s: exit %d: %r" % (what, r.returncode,
                                                  r.stderr))
    check(r.stderr == "reshard: error: " + message + "\n",
          "%s: stderr\n  %r\nnot\n  %r" % (what, r.stderr,
                                           "reshard: error: " + message))
    for o in outputs:
        check(not os.path.exists(o) or (os.path.isdir(o) and
                                        not os.listdir(o)),
              "%s: %s written on a refusal" % (what, o))


def not_regular(p):
    return "%s is not a regular file (a FIFO)" % p


# ------------------------------------------------ placements, specs, JSON

@SUITE.test
def placement_inputs():
    f = fifo("placement.json")
    out = path("out.json")
    refused(("validate", f), not_regular(f))
    refused(("validate", SRC, "--binding", f), not_regular(f))
    refused(("canonicalize", f), not_regular(f))
    refused(("plan", f, DST), not_regular(f))
    refused(("plan", SRC, f), not_regular(f))
    refused(("selftest", f, DST), not_regular(f))
    refused(("selftest", SRC, f), not_regular(f))
    refused(("gen", "--model", f, "-o", out), not_regular(f), [out])
    refused(("import-legacy", f, "-o", out), not_regular(f), [out])


@SUITE.test
def standard_input_stays_readable_through_a_dash():
    with open(SRC, "rb") as source:
        r = subprocess.run([RESHARD, "validate", "-"], stdin=source,
                           capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "validate - <SRC: %d %r" % (r.returncode,
                                                       r.stderr))


# ------------------------------------------------------------- configs

def checkpoint(name):
    d = path(name)
    if not os.path.isdir(d):
        hfc.write_checkpoint(d, hfc.CONFIGS["llama"])
    return d


def replaced_by_fifo(src_dir, name, member):
    """A copy of checkpoint `src_dir` whose `member` is a FIFO."""
    d = path(name)
    shutil.copytree(src_dir, d)
    os.remove(os.path.join(d, member))
    os.mkfifo(os.path.join(d, member))
    return d, os.path.join(d, member)


@SUITE.test
def config_inputs():
    f = fifo("config.json")
    out, params = path("cfg-out.json"), path("cfg-params.json")
    refused(("hf", "layout", f, "-o", out), not_regular(f), [out])
    refused(("engine", "layout", f, "--engine", "vllm", "-o", out,
             "--params", params), not_regular(f), [out, params])
    src = path("cfg-srcdir")
    os.makedirs(src)
    dst = path("cfg-dstdir")
    for via in ("local", "ucx", "fs://" + path("cfg-store")):
        refused(("engine", "reshard", src, dst, "--config", f, "--from",
                 "vllm", "--to", "megatron", "--via", via), not_regular(f),
                [dst])


@SUITE.test
def declared_maps_inputs():
    ck = checkpoint("ckpt")
    f = fifo("declared.json")
    out = path("decl-out")
    refused(("engine", "load", ck, "--engine", "vllm", "--tp", "2", "-o",
             out, "--declared-maps", f), not_regular(f), [out])
    src = path("decl-srcdir")
    os.makedirs(src)
    for via in ("local", "ucx", "fs://" + path("decl-store")):
        refused(("engine", "reshard", src, out, "--config",
                 os.path.join(ck, "config.json"), "--from", "vllm", "--to",
                 "vllm", "--to-tp", "2", "--via", via, "--declared-maps", f),
                not_regular(f), [out])


# ---------------------------------------------------------- checkpoints

@SUITE.test
def checkpoint_inputs():
    ck = checkpoint("ckpt")
    target = path("ckpt-target.json")
    r = subprocess.run([RESHARD, "hf", "layout",
                        os.path.join(ck, "config.json"), "--tp", "2", "-o",
                        target], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, r.stderr)
    shard = "model-00002-of-00003.safetensors"
    index = "model.safetensors.index.json"
    for member in ("config.json", shard, index):
        d, f = replaced_by_fifo(ck, "ckpt-fifo-" + member.split(".")[0],
                                member)
        # config.json is read by the CLI itself; the checkpoint's files by
        # the checkpoint reader, whose refusal names the file alike.
        want = not_regular(f)
        out = path("ckpt-out-" + member.split(".")[0])
        store = "fs://" + path("ckpt-store-" + member.split(".")[0])
        refused(("hf", "import", d, store), want, [store[len("fs://"):]])
        if member != "config.json":  # read only by the commands below
            refused(("hf", "reshard", d, target, out), want, [out])
            refused(("hf", "source", d, target, "-o", out + ".json"), want,
                    [out + ".json"])
        refused(("engine", "load", d, "--engine", "vllm", "--tp", "2", "-o",
                 out), want, [out])
        if member != "config.json":
            refused(("hf", "layout", os.path.join(ck, "config.json"),
                     "--checkpoint", d, "-o", out + ".json"), want,
                    [out + ".json"])
            refused(("engine", "layout", os.path.join(ck, "config.json"),
                     "--engine", "vllm", "--checkpoint", d, "-o",
                     out + ".json"), want, [out + ".json"])


# ------------------------------------------------------- parameter files

@SUITE.test
def parameter_file_inputs():
    ck = checkpoint("ckpt")
    src = path("params-src")
    r = subprocess.run([RESHARD, "engine", "load", ck, "--engine", "vllm",
                        "--tp", "2", "-o", src], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, r.stderr)
    f = os.path.join(src, "p-d0-p0-e0-t1.safetensors")
    os.remove(f)
    os.mkfifo(f)
    cfg = os.path.join(ck, "config.json")
    for n, via in enumerate(("local", "ucx",
                             "fs://" + path("params-store"))):
        dst = path("params-dst-%d" % n)
        # Over UCX the sources are read by rank 0, and its error says so.
        rank = "rank 0 (sources): " if via == "ucx" else ""
        refused(("engine", "reshard", src, dst, "--config", cfg, "--from",
                 "vllm", "--from-tp", "2", "--to", "megatron", "--via", via),
                rank + not_regular(f), [dst])


# ---------------------------------------------------------- store files

@SUITE.test
def store_file_inputs():
    ck = checkpoint("ckpt")
    clean = path("store-clean")
    r = subprocess.run([RESHARD, "hf", "import", ck, "fs://" + clean,
                        "--json"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, r.stderr)
    key = json.loads(r.stdout)["manifest_key"]
    revision = os.path.join(clean, os.path.dirname(key))
    payloads = []
    for root, _, files in os.walk(os.path.join(revision, "payload")):
        payloads += [os.path.join(root, f) for f in files]
    check(payloads, "no payload files under %s" % revision)
    for n, victim in enumerate((os.path.join(clean, key), payloads[0])):
        store = path("store-%d" % n)
        shutil.copytree(clean, store)
        f = os.path.join(store, os.path.relpath(victim, clean))
        os.remove(f)
        os.mkfifo(f)
        uri = "fs://" + store
        rel = os.path.relpath(victim, clean)
        out = path("store-out-%d" % n)
        commands = [("store", "verify", uri, key),
                    ("hf", "export", uri, key, out)]
        if victim.endswith("manifest"):  # show reads the manifest only
            commands.append(("store", "show", uri, key))
        for args in commands:
            r, took = run(*args)
            what = " ".join(args)
            check(r is not None, "%s: still running after %d s" % (what,
                                                                    HANG_S))
            check(took < REFUSE_S, "%s: took %.2f s" % (what, took))
            check(r.returncode == 1, "%s: exit %d %r" % (what, r.returncode,
                                                         r.stderr))
            # The store's backend holds objects, and a FIFO at a key is no
            # object: the key is named as absent.
            lines = r.stderr.splitlines()
            check(len(lines) == 1 and lines[0].startswith("reshard: error: ")
                  and (rel in lines[0] or key in lines[0]),
                  "%s: stderr %r" % (what, r.stderr))
            check(not os.path.exists(out), "%s: wrote %s" % (what, out))
        # The FIFO is left where it was.
        check(os.path.exists(f) and not os.path.isfile(f), "FIFO replaced")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-fifo-", lambda t: TMP.update(dir=t)))
