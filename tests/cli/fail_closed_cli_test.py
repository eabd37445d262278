#!/usr/bin/env python3
"""Fail-closed regressions of the CLI's files and streams: outputs never
replace what is not a regular file, whole-file reads stop at their caps
(also under a 4 GiB address-space limit), read-only store commands never
create a store, standard output failures fail the command, byte totals do
not wrap, selftest timeouts are bounded, floating-point flags are whole
finite numbers and config.json keys are unique.

Usage: fail_closed_cli_test.py PATH/TO/reshard TESTS_DIR

Every test names the finding it holds; device nodes and FIFOs are made in
the test's own temporary directory, never under /dev. Standard library
only.
"""

import json
import os
import resource
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Suite, check  # noqa: E402

RESHARD = None
TESTS_DIR = None
TMP = None

SUITE = Suite()
test = SUITE.test

ADDRESS_SPACE = 4 << 30
TEN_TB = 10 << 40
PLACEMENT_CAP_HINT = ("the cap of placement inputs; "
                      "RESHARD_MAX_PLACEMENT_BYTES raises it")


def limited():
    """preexec_fn: a 4 GiB address space, as a small host would give."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(*args, env=None, preexec=None, stdout=subprocess.PIPE, stdin=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([RESHARD] + list(args), stdout=stdout,
                          stderr=subprocess.PIPE, env=full_env,
                          preexec_fn=preexec, timeout=300, stdin=stdin)
    return proc.returncode, proc.stdout or b"", proc.stderr.decode()


def expect_error(rc, err, line):
    check(rc == 1, "exit %d (a negative code is a signal): %r" % (rc, err))
    check(err == "reshard: error: " + line + "\n",
          "stderr %r, want %r" % (err, line))


def scenario(name):
    return os.path.join(TESTS_DIR, "data", "scenarios", name + ".json")


SRC = None
DST = None


def fresh_dir(name):
    path = os.path.join(TMP, name)
    os.makedirs(path)
    return path


def snapshot(directory):
    """Every entry: name -> (type, size, content of regular files)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        st = os.lstat(p)
        body = None
        if stat.S_ISREG(st.st_mode):
            with open(p, "rb") as handle:
                body = handle.read()
        elif stat.S_ISLNK(st.st_mode):
            body = os.readlink(p)
        out[name] = (stat.S_IFMT(st.st_mode), body)
    return out


def sparse(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


# ------------------------------------------------------------ output files

@test
def outputs_never_replace_a_fifo_or_device_node():
    """`plan --html/--svg` onto a FIFO without a reader is refused; onto a
    character device it writes through; neither is replaced, and nothing
    else in the directory changes."""
    d = fresh_dir("outputs_special")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    null = os.path.join(d, "null")
    have_null = True
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        have_null = False
    before = snapshot(d)
    rc, _, err = run("plan", SRC, DST, "--svg", fifo)
    expect_error(rc, err, "--svg %s: cannot write: a FIFO with no reader" %
                 fifo)
    rc, _, err = run("plan", SRC, DST, "--html", fifo)
    expect_error(rc, err, "--html %s: cannot write: a FIFO with no reader" %
                 fifo)
    if have_null:
        rc, out, err = run("plan", SRC, DST, "--html", null, "--svg", null)
        check(rc == 0, "plan --html onto a device: %d %r" % (rc, err))
    check(snapshot(d) == before, "directory changed: %r" % snapshot(d))
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "FIFO replaced")
    if have_null:
        check(stat.S_ISCHR(os.lstat(null).st_mode), "device node replaced")


@test
def outputs_refuse_a_directory():
    d = fresh_dir("outputs_dir")
    sub = os.path.join(d, "report.html")
    os.makedirs(sub)
    rc, _, err = run("plan", SRC, DST, "--html", sub)
    expect_error(rc, err, "--html %s: is a directory; an output must be a "
                 "regular file, a character device or a FIFO" % sub)
    check(os.listdir(sub) == [], "directory changed")


@test
def outputs_write_through_a_symbolic_link():
    """A link stays a link; the file it names gets the report."""
    d = fresh_dir("outputs_link")
    real = os.path.join(d, "real.svg")
    with open(real, "w") as handle:
        handle.write("old")
    link = os.path.join(d, "link.svg")
    os.symlink("real.svg", link)
    rc, _, err = run("plan", SRC, DST, "--svg", link)
    check(rc == 0, "plan --svg through a link: %d %r" % (rc, err))
    check(os.path.islink(link) and os.readlink(link) == "real.svg",
          "link replaced")
    with open(real, "rb") as handle:
        check(b"<svg" in handle.read(), "target not written")
    check(sorted(os.listdir(d)) == ["link.svg", "real.svg"],
          "stray files: %r" % os.listdir(d))


@test
def outputs_gen_onto_a_full_disk_leaves_no_partial_file():
    """A write that fails part way (a file size limit stands in for a full
    disk) leaves neither the output nor a temporary file behind, and an
    existing output as it was."""
    d = fresh_dir("outputs_full")
    model = os.path.join(TESTS_DIR, "..", "examples", "models",
                         "tiny-moe.json")
    out = os.path.join(d, "out.json")

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))

    rc, _, err = run("gen", "--model", model, "--tp", "2", "-o", out,
                     preexec=small_files)
    expect_error(rc, err, "-o %s: cannot write: File too large" % out)
    check(os.listdir(d) == [], "left behind: %r" % os.listdir(d))
    with open(out, "w") as handle:
        handle.write("previous")
    rc, _, err = run("gen", "--model", model, "--tp", "2", "-o", out,
                     preexec=small_files)
    expect_error(rc, err, "-o %s: cannot write: File too large" % out)
    check(snapshot(d) == {"out.json": (stat.S_IFREG, b"previous")},
          "output changed: %r" % snapshot(d))


@test
def stdout_write_failure_is_an_error():
    """`plan --json > /dev/full` exits 1 naming standard output."""
    with open("/dev/full", "wb") as full:
        rc, _, err = run("plan", SRC, DST, "--json", stdout=full)
    expect_error(rc, err,
                 "writing to standard output: No space left on device")
    with open("/dev/full", "wb") as full:
        rc, _, err = run("validate", SRC, stdout=full)
    expect_error(rc, err,
                 "writing to standard output: No space left on device")


# ---------------------------------------------------------- bounded reads

def dev_zero():
    return open("/dev/zero", "rb")


@test
def unbounded_reads_validate_dev_zero_stops_at_the_cap():
    # A path must name a regular file; a stream is read from standard
    # input ("-"), and no further than the cap.
    rc, _, err = run("validate", "/dev/zero", preexec=limited)
    expect_error(rc, err, "/dev/zero is not a regular file (a character "
                 "device)")
    with dev_zero() as zero:
        rc, _, err = run("validate", "-", preexec=limited, stdin=zero,
                         env={"RESHARD_MAX_PLACEMENT_BYTES": "1048576"})
    expect_error(rc, err, "standard input is larger than 1048576 bytes (%s)"
                 % PLACEMENT_CAP_HINT)
    # At the default 4 GiB cap, under a 4 GiB address space: the cap or
    # the memory runs out first, either way one error line, no signal.
    with dev_zero() as zero:
        rc, _, err = run("validate", "-", preexec=limited, stdin=zero)
    check(rc == 1, "exit %d: %r" % (rc, err))
    check(err.count("\n") == 1 and (
        err == "reshard: error: standard input is larger than 4294967296 "
               "bytes (%s)\n" % PLACEMENT_CAP_HINT or
        err.startswith("reshard: error: out of memory reading standard "
                       "input")),
        "stderr %r" % err)


@test
def unbounded_reads_placement_cap_override_is_checked():
    rc, _, err = run("validate", SRC,
                     env={"RESHARD_MAX_PLACEMENT_BYTES": "lots"})
    expect_error(rc, err, "RESHARD_MAX_PLACEMENT_BYTES must be a positive "
                 "byte count, not \"lots\"")
    size = os.path.getsize(SRC)
    rc, _, err = run("validate", SRC,
                     env={"RESHARD_MAX_PLACEMENT_BYTES": str(size - 1)})
    expect_error(rc, err, "%s is larger than %d bytes (%s)" %
                 (SRC, size - 1, PLACEMENT_CAP_HINT))
    rc, _, err = run("validate", SRC,
                     env={"RESHARD_MAX_PLACEMENT_BYTES": str(size)})
    check(rc == 0, "a placement of exactly the cap: %d %r" % (rc, err))


@test
def unbounded_reads_sparse_config_json():
    d = fresh_dir("sparse_config")
    config = os.path.join(d, "config.json")
    sparse(config, TEN_TB)
    rc, _, err = run("hf", "layout", config, "-o", os.path.join(d, "o.json"),
                     preexec=limited)
    expect_error(rc, err, "%s is larger than 67108864 bytes (the cap of "
                 "config.json files)" % config)
    check(os.listdir(d) == ["config.json"], "outputs: %r" % os.listdir(d))


@test
def unbounded_reads_gen_model_dev_zero():
    d = fresh_dir("gen_zero")
    with dev_zero() as zero:
        rc, _, err = run("gen", "--model", "-", "-o",
                         os.path.join(d, "o.json"), preexec=limited,
                         stdin=zero)
    expect_error(rc, err, "standard input is larger than 67108864 bytes (the "
                 "cap of model specs)")
    check(os.listdir(d) == [], "outputs: %r" % os.listdir(d))


@test
def unbounded_reads_import_legacy_dev_zero():
    d = fresh_dir("legacy_zero")
    with dev_zero() as zero:
        rc, _, err = run("import-legacy", "-", "-o",
                         os.path.join(d, "o.json"), preexec=limited,
                         env={"RESHARD_MAX_PLACEMENT_BYTES": "65536"},
                         stdin=zero)
    expect_error(rc, err, "standard input is larger than 65536 bytes (%s)" %
                 PLACEMENT_CAP_HINT)
    check(os.listdir(d) == [], "outputs: %r" % os.listdir(d))


@test
def unbounded_reads_sparse_store_manifest_is_corrupt_and_removable():
    """A 10 TB sparse manifest: `store ls` lists it as CORRUPT (under a
    4 GiB address space, at once), `rm` removes it and only it."""
    d = fresh_dir("sparse_store")
    key = "weights/ns/model/r1/0/manifest"
    sparse(os.path.join(d, key), TEN_TB)
    keep = os.path.join(d, "unrelated.txt")
    with open(keep, "w") as handle:
        handle.write("kept")
    rc, out, err = run("store", "ls", d, "--json", preexec=limited)
    check(rc == 0, "ls: %d %r" % (rc, err))
    revs = json.loads(out)
    want = ("record %s is larger than 4294967296 bytes (a corrupt record or "
            "manifest)" % key)
    check(len(revs) == 1 and revs[0]["state"] == "CORRUPT" and
          revs[0]["manifest_key"] == key and revs[0]["error"] == want,
          "ls %r" % revs)
    rc, out, err = run("store", "rm", d, key, preexec=limited)
    check(rc == 0, "rm: %d %r" % (rc, err))
    check(sorted(os.listdir(d)) == ["unrelated.txt"],
          "after rm: %r" % os.listdir(d))


# ------------------------------------------------------ read-only stores

@test
def read_only_store_commands_never_create_a_store():
    base = os.path.join(TMP, "no_store")
    path = os.path.join(base, "deep", "path")
    key = "weights/ns/model/r1/0/manifest"
    out_dir = os.path.join(TMP, "no_store_export")
    for args in (["store", "ls", path], ["store", "ls", "fs://" + path],
                 ["store", "show", path, key], ["store", "verify", path],
                 ["store", "gc", path], ["store", "rm", path, key],
                 ["hf", "export", path, key, out_dir]):
        rc, out, err = run(*args)
        expect_error(rc, err, "store directory %s does not exist" % path)
        check(out == b"", "%s printed %r" % (args, out))
        check(not os.path.exists(base), "%s created %s" % (args, base))
        check(not os.path.exists(out_dir), "%s created %s" % (args, out_dir))


# -------------------------------------------------- totals and timeouts

@test
def selftest_timeout_must_be_finite_and_in_range():
    for value in ("nan", "inf", "1e300", "0", "-1", "0.0001", "86401", "",
                  " 5", "5s"):
        rc, _, err = run("selftest", SRC, DST, "--transport", "ucx",
                         "--timeout", value)
        expect_error(rc, err, "--timeout must be a number of seconds from "
                     "0.001 to 86400, not '%s'" % value)


@test
def change_fraction_empty_or_not_a_number_is_refused():
    """`--change-fraction ''` was taken as 0: the flag's whole text must be
    one finite number in [0, 1]."""
    for value in ("", "abc", "0.5x", " 0.5", "+0.5", "0x1p-1", "nan", "inf",
                  "-inf", "1e400", "1.5", "-0.25"):
        rc, out, err = run("selftest", SRC, DST, "--transport", "ucx",
                           "--updates", "2", "--change-fraction", value)
        expect_error(rc, err, "--change-fraction must be a number from 0 to "
                     "1, not '%s'" % value)
        check(out == b"", "printed %r" % out)


@test
def gbps_empty_or_not_a_number_is_refused():
    """The other floating-point flag of the CLI, `plan --gbps`, had the
    same hole (`--gbps ''` measured memcpy instead): refused, and no report
    is written."""
    d = fresh_dir("gbps")
    html = os.path.join(d, "r.html")
    for value in ("", "abc", "10 ", "nan", "inf", "1e400", "0", "-1"):
        rc, out, err = run("plan", SRC, DST, "--html", html, "--gbps", value)
        expect_error(rc, err, "--gbps must be a positive finite number of "
                     "GB/s, not '%s'" % value)
        check(out == b"", "printed %r" % out)
        check(os.listdir(d) == [], "wrote %r" % os.listdir(d))


@test
def config_json_duplicate_keys_are_refused():
    d = fresh_dir("dup_config")
    config = os.path.join(d, "config.json")
    text = ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '
            '"hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4, '
            '"num_attention_heads": 4, "num_key_value_heads": 2, '
            '"intermediate_size": 48, "hidden_size": 64, '
            '"tie_word_embeddings": false, "torch_dtype": "bfloat16"}')
    with open(config, "w") as handle:
        handle.write(text)
    out = os.path.join(d, "o.json")
    rc, _, err = run("hf", "layout", config, "-o", out)
    expect_error(rc, err, "%s: config.json: $: duplicate JSON field "
                 "\"hidden_size\"" % config)
    check(os.listdir(d) == ["config.json"], "outputs: %r" % os.listdir(d))


LLAMA = ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '
         '"hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4, '
         '"num_attention_heads": 4, "num_key_value_heads": 2, '
         '"intermediate_size": 48, "tie_word_embeddings": false, '
         '"torch_dtype": "bfloat16"}')


def engine_layout(d, *outputs):
    config = os.path.join(d, "config.json")
    if not os.path.exists(config):
        with open(config, "w") as handle:
            handle.write(LLAMA)
    return run("engine", "layout", config, "--engine", "vllm", "--tp", "2",
               *outputs)


@test
def engine_layout_writes_no_output_when_params_fails():
    """`engine layout` wrote -o although --params then failed: every path
    is checked first, and nothing is written when one cannot be."""
    d = fresh_dir("layout_params_fails")
    placement = os.path.join(d, "placement.json")
    missing = os.path.join(d, "no-such-dir", "params.json")
    rc, _, err = engine_layout(d, "-o", placement, "--params", missing)
    expect_error(rc, err, "--params %s: cannot write: No such file or "
                 "directory" % missing)
    check(os.listdir(d) == ["config.json"], "outputs: %r" % os.listdir(d))
    rc, _, err = engine_layout(d, "-o", placement, "--params", d)
    expect_error(rc, err, "--params %s: is a directory; an output must be a "
                 "regular file, a character device or a FIFO" % d)
    check(os.listdir(d) == ["config.json"], "outputs: %r" % os.listdir(d))
    dangling = os.path.join(d, "dangling")
    os.symlink(os.path.join(d, "nothing"), dangling)
    rc, _, err = engine_layout(d, "-o", placement, "--params", dangling)
    expect_error(rc, err, "--params %s: is a symbolic link to nothing "
                 "usable: No such file or directory" % dangling)
    check(sorted(os.listdir(d)) == ["config.json", "dangling"],
          "outputs: %r" % os.listdir(d))
    # Both writable: both written.
    params = os.path.join(d, "params.json")
    rc, out, err = engine_layout(d, "-o", placement, "--params", params)
    check(rc == 0, "engine layout: %d %r" % (rc, err))
    with open(placement) as a, open(params) as b:
        check(json.load(b)["placement_id"] == json.load(a)["placement_id"],
              "params of another placement")


@test
def engine_layout_refuses_one_file_for_both_outputs():
    """`-o F --params F` exited 0 with the placement overwritten by the
    maps: the same file, through any spelling, a symbolic link or an
    existing inode, is refused naming both flags, and nothing is written."""
    d = fresh_dir("layout_same_file")
    f = os.path.join(d, "out.json")
    rc, _, err = engine_layout(d, "-o", f, "--params", f)
    expect_error(rc, err, "-o %s and --params %s name the same file" % (f, f))
    other = os.path.join(d, ".", "sub", "..", "out.json")
    os.makedirs(os.path.join(d, "sub"))
    rc, _, err = engine_layout(d, "-o", f, "--params", other)
    expect_error(rc, err, "-o %s and --params %s name the same file" %
                 (f, other))
    check(sorted(os.listdir(d)) == ["config.json", "sub"],
          "outputs: %r" % os.listdir(d))
    # An existing file, and a link to it; a hard link (one inode).
    with open(f, "w") as handle:
        handle.write("keep")
    link = os.path.join(d, "link.json")
    os.symlink(f, link)
    hard = os.path.join(d, "hard.json")
    os.link(f, hard)
    for a, b in ((f, link), (link, f), (hard, f)):
        rc, _, err = engine_layout(d, "-o", a, "--params", b)
        expect_error(rc, err, "-o %s and --params %s name the same file" %
                     (a, b))
        with open(f) as handle:
            check(handle.read() == "keep", "%s overwritten" % f)
    # Standard output twice.
    rc, out, err = engine_layout(d, "-o", "-", "--params", "-")
    expect_error(rc, err, "-o - and --params - name the same file")
    check(out == b"", "printed %d bytes" % len(out))
    check(sorted(os.listdir(d)) == ["config.json", "hard.json", "link.json",
                                     "out.json", "sub"],
          "outputs: %r" % os.listdir(d))


@test
def report_script_escapes_the_attributes_it_sets():
    """The explorer's script sets data-p and data-tensor through the same
    escaping as the attributes rendered into the page (a bidirectional
    override was escaped in one and raw in the other)."""
    d = fresh_dir("report_escape")
    html = os.path.join(d, "r.html")
    rc, _, err = run("plan", SRC, DST, "--html", html, "--gbps", "10")
    check(rc == 0, "plan --html: %d %r" % (rc, err))
    with open(html, encoding="utf-8") as handle:
        page = handle.read()
    for attr in ("data-p", "data-tensor"):
        sets = [line for line in page.splitlines()
                if "setAttribute('%s'" % attr in line]
        check(sets and all("printable(" in line for line in sets),
              "%s set without printable: %r" % (attr, sets))


def main(argv):
    global RESHARD, TESTS_DIR, SRC, DST
    RESHARD = os.path.abspath(argv[1])
    TESTS_DIR = os.path.abspath(argv[2])
    SRC = scenario("cross_dim_ep2_to_tp2_source")
    DST = scenario("cross_dim_ep2_to_tp2_target")

    def set_tmp(tmp):
        global TMP
        TMP = tmp

    return SUITE.run("reshard_fail_closed_", set_tmp)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
