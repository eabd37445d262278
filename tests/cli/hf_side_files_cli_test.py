#!/usr/bin/env python3
"""CLI contract of a checkpoint's side files (config.json, generation
config, tokenizer files) through `reshard hf import`, `hf export` and
`hf reshard`: byte-for-byte round trips, and hostile sources and outputs
refused naming the file before anything is written.

Usage: hf_side_files_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check  # noqa: E402

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

SIDE = {
    "generation_config.json": b'{"do_sample": true}',
    "tokenizer.json": b'{"v": "\x00\xff\x1b[31m"}',
    "tokenizer_config.json": b'{"chat_template": null}',
    "chat_template.jinja": b"{{ messages }}\n",
    "merges.txt": b"",
}
IGNORED = ("README.md", "modeling_x.py", "config.json\n", "vocab.txt\x1b[2J")


def run(*args):
    return subprocess.run([RESHARD, *map(str, args)], capture_output=True)


def ok(r, what):
    check(r.returncode == 0, "%s failed (%d): %s" % (what, r.returncode,
                                                     r.stderr.strip()))
    return r


def fails(r, message):
    err = r.stderr.decode().strip()
    check(r.returncode == 1 and err.startswith("reshard: error: ") and
          len(err.splitlines()) == 1, "not one error line: %r" % err)
    check(message in err, "%r not in %r" % (message, err))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def source(name):
    d = os.path.join(TMP["dir"], name)
    hfc.write_checkpoint(d, hfc.CONFIGS["llama"], files=2)
    for n, b in SIDE.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(b)
    for n in IGNORED:
        with open(os.path.join(d, n), "wb") as f:
            f.write(b"{}")
    return d


def expect_side_files(src, out):
    names = set(SIDE) | {"config.json"}
    for n in names:
        check(read(os.path.join(out, n)) == read(os.path.join(src, n)),
              "%s differs in %s" % (n, out))
    for n in IGNORED:
        check(not os.path.lexists(os.path.join(out, n)), "%r written" % n)
    check(hfc.read_checkpoint(out) == hfc.read_checkpoint(src),
          "weights differ in %s" % out)


@SUITE.test
def import_export_round_trip():
    src = source("ckpt")
    uri = "fs://" + os.path.join(TMP["dir"], "store")
    imp = json.loads(ok(run("hf", "import", src, uri, "--json"),
                        "hf import").stdout)
    check(imp["side_files"] == len(SIDE) + 1, imp)
    key = imp["manifest_key"]
    verify = json.loads(ok(run("store", "verify", uri, key, "--json"),
                           "store verify").stdout)
    check(verify.get("verified") is not False, verify)
    out = os.path.join(TMP["dir"], "exported")
    r = ok(run("hf", "export", uri, key, out), "hf export")
    check(r.stdout.decode().endswith("and 6 side files to %s\n" % out),
          r.stdout)
    expect_side_files(src, out)
    # Into a directory already holding a side file: refused, unchanged.
    again = os.path.join(TMP["dir"], "again")
    os.mkdir(again)
    with open(os.path.join(again, "config.json"), "wb") as f:
        f.write(b"mine")
    fails(run("hf", "export", uri, key, again),
          "%s/config.json exists: refusing to overwrite a checkpoint's side "
          "file" % again)
    check(os.listdir(again) == ["config.json"], os.listdir(again))
    # The same import again: refused, the first revision whole.
    fails(run("hf", "import", src, uri), "conflicting weight revision")
    ok(run("store", "gc", uri), "store gc")
    ok(run("store", "verify", uri, key), "store verify after gc")
    # A stored side file damaged: verify and export name it.
    store = os.path.join(TMP["dir"], "store")
    damaged = None
    for root, _, files in os.walk(store):
        if "file-tokenizer.json" in files and "/payload/" in root + "/":
            damaged = os.path.join(root, "file-tokenizer.json")
    check(damaged is not None, "no stored tokenizer.json")
    data = bytearray(read(damaged))
    data[3] ^= 1
    os.chmod(damaged, 0o644)
    os.unlink(damaged)
    with open(damaged, "wb") as f:
        f.write(data)
    fails(run("store", "verify", uri, key), "file-tokenizer.json")
    broken = os.path.join(TMP["dir"], "broken")
    fails(run("hf", "export", uri, key, broken), "file-tokenizer.json")
    check(not os.path.exists(broken), "export wrote a damaged revision")


@SUITE.test
def revision_without_side_files():
    src = os.path.join(TMP["dir"], "bare")
    hfc.write_checkpoint(src, hfc.CONFIGS["llama"], files=1)
    os.unlink(os.path.join(src, "config.json"))
    config = os.path.join(TMP["dir"], "bare-config.json")
    with open(config, "w") as f:
        json.dump(hfc.CONFIGS["llama"], f)
    # Import reads config.json from the directory; without one the import
    # is refused, so store a revision with config.json, then withdraw its
    # side files as a revision imported before they were stored.
    os.symlink(config, os.path.join(src, "config.json"))
    uri = "fs://" + os.path.join(TMP["dir"], "bare-store")
    imp = json.loads(ok(run("hf", "import", src, uri, "--json"),
                        "hf import").stdout)
    check(imp["side_files"] == 1, imp)
    for root, _, files in os.walk(uri[5:]):
        if "files" in files and root.endswith("/transactions/" +
                                              os.path.basename(root)):
            os.unlink(os.path.join(root, "files"))
    out = os.path.join(TMP["dir"], "bare-out")
    r = ok(run("hf", "export", uri, imp["manifest_key"], out, "--json"),
           "hf export")
    check(json.loads(r.stdout)["side_files"] == 0, r.stdout)
    check(b"holds no side files (config.json, tokenizer)" in r.stderr,
          r.stderr)
    check(not os.path.lexists(os.path.join(out, "config.json")),
          "config.json written")
    check(hfc.read_checkpoint(out) == hfc.read_checkpoint(src), "weights")


@SUITE.test
def hostile_sources_are_refused_before_the_store_is_touched():
    src = source("hostile")
    uri = "fs://" + os.path.join(TMP["dir"], "hostile-store")
    tok = os.path.join(src, "tokenizer.json")
    os.unlink(tok)
    os.mkfifo(tok)
    fails(run("hf", "import", src, uri),
          "%s is not a regular file (a FIFO)" % tok)
    check(not os.path.exists(uri[5:]) or not os.listdir(uri[5:]) or
          not any(f for _, _, f in os.walk(uri[5:])), "store written")
    placement = os.path.join(TMP["dir"], "hostile.json")
    ok(run("hf", "layout", os.path.join(src, "config.json"), "--tp", 1,
           "-o", placement), "hf layout")
    out = os.path.join(TMP["dir"], "hostile-out")
    fails(run("hf", "reshard", src, placement, out),
          "%s is not a regular file (a FIFO)" % tok)
    check(not os.path.exists(out), "reshard output created")
    os.unlink(tok)
    with open(tok, "wb") as f:
        f.truncate((64 << 20) + 1)
    fails(run("hf", "import", src, uri),
          "side file %s holds 67108865 bytes; side files hold at most "
          "67108864 bytes each" % tok)


@SUITE.test
def reshard_writes_the_side_files_beside_its_output():
    src = source("for-reshard")
    placement = os.path.join(TMP["dir"], "tp2.json")
    ok(run("hf", "layout", os.path.join(src, "config.json"), "--tp", 2,
           "--checkpoint", src, "-o", placement), "hf layout")
    out = os.path.join(TMP["dir"], "resharded")
    r = json.loads(ok(run("hf", "reshard", src, placement, out, "--json"),
                      "hf reshard").stdout)
    check(r["side_files"] == len(SIDE) + 1, r)
    expect_side_files(src, out)


sys.exit(SUITE.run("reshard-hf-side-", lambda t: TMP.update(dir=t)))
