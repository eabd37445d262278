#!/usr/bin/env python3
"""The CLI against a real Redis: `reshard selftest --via-store redis://...`
and `--transport ucx --rendezvous redis://...` on every golden scenario
up to 16 MiB, two processes that share nothing but the URI, a standing session whose
records go when it closes, every `reshard store` subcommand on a Redis
store (including a flipped byte in a payload chunk), unix sockets, and the
refusals: a bad URI, an unreachable server (named without its password).

Usage: redis_cli_test.py PATH/TO/reshard TESTS_DIR

Starts its own redis-server (loopback, a free port, a private data
directory, AOF with fsync always) and always stops it; it never talks to a
server it did not start. Standard library only.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Suite, check  # noqa: E402

RESHARD = None
SCENARIOS = None
TMP = None
SERVER = None
SUITE = Suite()
test = SUITE.test

CROSS_DIM = ("cross_dim_ep2_to_tp2_source.json",
             "cross_dim_ep2_to_tp2_target.json")
FOUR_AXIS = ("four_axis_uint8_source.json", "four_axis_uint8_target.json")


class RedisServer:
    """A private redis-server, killed with its parent (PR_SET_PDEATHSIG)."""

    def __init__(self, root):
        self.dir = os.path.join(root, "redis")
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "redis.sock")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        libc = ctypes.CDLL(None, use_errno=True)

        def die_with_parent():
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

        self.proc = subprocess.Popen(
            ["/usr/bin/redis-server", "--port", str(self.port), "--bind",
             "127.0.0.1", "--unixsocket", self.socket, "--unixsocketperm",
             "700", "--dir", self.dir, "--logfile",
             os.path.join(self.dir, "redis.log"), "--daemonize", "no",
             "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            preexec_fn=die_with_parent)
        deadline = time.time() + 10
        while self.cli("PING") != "PONG":
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def cli(self, *args):
        proc = subprocess.run(["redis-cli", "-s", self.socket, *args],
                              capture_output=True, timeout=30)
        return proc.stdout.decode("utf-8", "replace").strip()

    def uri(self, prefix):
        return "redis://127.0.0.1:%d?prefix=%s" % (self.port, prefix)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run(*args, timeout=120):
    proc = subprocess.run([RESHARD, *args], capture_output=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def scenario(pair):
    return [os.path.join(SCENARIOS, p) for p in pair]


def one_json(out):
    lines = out.decode("utf-8").splitlines()
    check(len(lines) == 1, "want one JSON line, got %r" % out[:300])
    return json.loads(lines[0])


def one_error_line(rc, out, err, needle):
    check(rc != 0, "exit 0, stdout %r" % out[:200])
    check(out == b"", "stdout must be empty: %r" % out[:200])
    lines = err.decode("utf-8").splitlines()
    check(len(lines) == 1 and needle in lines[0],
          "stderr %r lacks %r" % (err, needle))
    return lines[0]


def golden():
    """Every golden scenario that plans and fits in 16 MiB (a Redis server
    holds the whole revision in memory)."""
    with open(os.path.join(SCENARIOS, "expected.json")) as f:
        plans = json.load(f)["plans"]
    for name, p in sorted(plans.items()):
        if "error" in p or p["bytes"] > (16 << 20):
            continue
        yield (name, os.path.join(SCENARIOS, p["source"]),
               os.path.join(SCENARIOS, p["target"]), p)


@test
def via_store_on_every_golden_scenario():
    for i, (name, src, dst, p) in enumerate(golden()):
        rc, out, err = run("selftest", src, dst, "--via-store",
                           SERVER.uri("g%d" % i), "--json")
        if name == "dp_ownership":  # DP-owned snapshots are refused
            one_error_line(rc, out, err, "DP-owned tensor snapshots are not "
                           "supported: layers.0.owned_0")
            continue
        check(rc == 0, "%s: exit %d, stderr %r" % (name, rc, err))
        r = one_json(out)
        check(r["verified"] is True and r["transport"] == "store",
              "%s: %r" % (name, r))
        check(r["bytes"] == p["bytes"] and r["operations"] == p["regions"],
              "%s: bytes %r ops %r, plan %r %r" %
              (name, r["bytes"], r["operations"], p["bytes"], p["regions"]))
        # The revision is removed afterwards: no key of it is left.
        check(SERVER.cli("ZCARD", "g%d:index" % i) == "0",
              "%s: keys left in the index" % name)


@test
def ucx_rendezvous_on_every_golden_scenario():
    for i, (name, src, dst, p) in enumerate(golden()):
        procs = 1 if name == "cross_dim_single_participant" else 2
        rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                           "--procs", str(procs), "--rendezvous",
                           SERVER.uri("u%d" % i), "--json")
        if rc != 0 and b"at most one per participant" in err:
            rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                               "--procs", "1", "--rendezvous",
                               SERVER.uri("u%d" % i), "--json")
        check(rc == 0, "%s: exit %d, stderr %r" % (name, rc, err))
        r = one_json(out)
        check(r["verified"] is True and r["transport"] == "ucx",
              "%s: %r" % (name, r))
        check(r["bytes"] == p["bytes"], "%s: bytes %r, plan %r" %
              (name, r["bytes"], p["bytes"]))


@test
def two_processes_share_nothing_but_the_uri():
    src, dst = scenario(CROSS_DIM)
    uri = SERVER.uri("pair")
    procs = []
    for rank in (0, 1):
        cwd = os.path.join(TMP, "rank%d" % rank)
        os.makedirs(cwd)
        procs.append(subprocess.Popen(
            [RESHARD, "selftest", src, dst, "--transport", "ucx", "--procs",
             "2", "--rank", str(rank), "--rendezvous", uri, "--session",
             "across-hosts", "--json"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "rank %d: exit %d, %r" %
              (rank, p.returncode, err))
        check(one_json(out)["verified"] is True, "rank %d not verified" % rank)
    for rank in (0, 1):
        cwd = os.path.join(TMP, "rank%d" % rank)
        check(os.listdir(cwd) == [], "rank %d wrote files" % rank)
    keys = SERVER.cli("ZRANGE", "pair:index", "0", "-1").splitlines()
    check(keys and all(k.startswith("across-hosts/") for k in keys),
          "records %r" % keys[:5])


@test
def standing_session_removes_its_records_at_close():
    src, dst = scenario(FOUR_AXIS)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx", "--procs",
                       "2", "--rendezvous", SERVER.uri("standing"),
                       "--updates", "3", "--json")
    check(rc == 0, "exit %d, stderr %r" % (rc, err))
    r = one_json(out)
    check(r["verified"] is True and r["updates"] == 3, "%r" % r)
    keys = SERVER.cli("ZRANGE", "standing:index", "0", "-1").splitlines()
    # Only the self-test's own per-rank reports outlive the session.
    check(all("/report/" in k for k in keys), "records left: %r" % keys)


def kept_revision(prefix):
    src, dst = scenario(FOUR_AXIS)
    uri = SERVER.uri(prefix)
    rc, out, err = run("selftest", src, dst, "--via-store", uri,
                       "--keep-revision", "--json")
    check(rc == 0, "selftest exit %d, %r" % (rc, err))
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0, "ls exit %d, %r" % (rc, err))
    revs = one_json(out)
    check(len(revs) == 1 and revs[0]["state"] == "READY", "ls %r" % revs)
    return uri, revs[0]


@test
def store_subcommands_on_redis():
    uri, rev = kept_revision("ops")
    key = rev["manifest_key"]
    rc, out, err = run("store", "show", uri, key, "--json")
    check(rc == 0, "show exit %d, %r" % (rc, err))
    show = one_json(out)
    check(show["bytes"] == rev["bytes"] and show["manifest_key"] == key,
          "show %r" % show)
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 0, "verify exit %d, %r" % (rc, err))
    v = one_json(out)
    check(v["verified"] is True and v["objects"] == rev["fragments"],
          "verify %r" % v)
    rc, out, err = run("store", "gc", uri, "--json")
    check(rc == 0 and one_json(out)["keys_removed"] == 0,
          "gc of a clean store: %d %r %r" % (rc, out, err))
    rc, out, err = run("store", "rm", uri, key)
    check(rc == 0, "rm exit %d, %r" % (rc, err))
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0 and one_json(out) == [], "ls after rm: %r" % out)
    check(SERVER.cli("ZCARD", "ops:index") == "0", "keys left after rm")
    # The same rm again: nothing to remove is an error naming the key.
    rc, out, err = run("store", "rm", uri, key)
    one_error_line(rc, out, err, key)


@test
def flipped_byte_in_a_chunk_is_caught():
    uri, rev = kept_revision("flip")
    key = rev["manifest_key"]
    payloads = [k for k in SERVER.cli("ZRANGE", "flip:index", "0", "-1")
                .splitlines() if "/payload/" in k]
    check(payloads, "no payload keys")
    value = "flip:k:" + payloads[0]
    first = SERVER.cli("GETRANGE", value, "1", "1")
    check(len(first) == 1, "payload %s is not one value: %r" %
          (payloads[0], SERVER.cli("GETRANGE", value, "0", "20")))
    SERVER.cli("SETRANGE", value, "1", chr(ord(first) ^ 0x01))
    rc, out, err = run("store", "verify", uri, key)
    line = one_error_line(rc, out, err, "checksum mismatch in stored fragment")
    check(payloads[0] in line, "%r does not name %s" % (line, payloads[0]))


@test
def unix_socket_uri():
    uri = "unix://%s?prefix=unixs" % SERVER.socket
    src, dst = scenario(CROSS_DIM)
    rc, out, err = run("selftest", src, dst, "--via-store", uri, "--json")
    check(rc == 0 and one_json(out)["verified"] is True,
          "exit %d, %r" % (rc, err))


@test
def unreachable_server_is_named_without_its_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = "redis://admin:hunter2@127.0.0.1:%d" % port
    start = time.time()
    rc, out, err = run("store", "ls", uri)
    line = one_error_line(rc, out, err, "cannot connect to")
    check("redis://admin:***@127.0.0.1:%d" % port in line, line)
    check("hunter2" not in line, "password shown: %r" % line)
    check(time.time() - start < 15, "took %.1f s" % (time.time() - start))
    src, dst = scenario(CROSS_DIM)
    rc, out, err = run("selftest", src, dst, "--transport", "ucx",
                       "--rendezvous", uri, "--json")
    line = one_error_line(rc, out, err, "cannot connect to")
    check("hunter2" not in line, "password shown: %r" % line)


@test
def bad_redis_uris_are_refused():
    for uri, needle in (
            ("redis://127.0.0.1:99999", "port must be an integer"),
            ("redis://127.0.0.1:1?prefix=a*", "prefix must be"),
            ("redis://127.0.0.1:1?nope=1", 'unknown option "nope"')):
        rc, out, err = run("store", "ls", uri)
        line = one_error_line(rc, out, err, needle)
        check(uri in line, "%r does not name %s" % (line, uri))


@test
def stored_size_is_not_trusted():
    """Issue 38 finding 2: a descriptor claiming 1e17 bytes at a manifest
    key made ls/show/verify/gc/rm die of bad_alloc. Now the revision is
    CORRUPT, every command reports it cleanly, rm removes it, and the other
    revision is untouched."""
    uri, rev = kept_revision("huge")
    bad = "weights/default/x/1/0/manifest"
    SERVER.cli("SET", "huge:k:" + bad, "c99999999999999999 4194304 tok")
    SERVER.cli("ZADD", "huge:index", "0", bad)
    malformed = ("object %s in %s has a malformed descriptor" % (bad, uri))
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0, "ls exit %d, %r" % (rc, err))
    revs = {r["manifest_key"]: r for r in one_json(out)}
    check(sorted(revs) == sorted([rev["manifest_key"], bad]), "ls %r" % revs)
    check(revs[rev["manifest_key"]] == rev, "ls %r" % revs)
    check(revs[bad]["state"] == "CORRUPT" and revs[bad]["error"] == malformed,
          "ls %r" % revs[bad])
    rc, out, err = run("store", "show", uri, bad)
    check(one_error_line(rc, out, err, malformed) ==
          "reshard: error: " + malformed, "show %r" % err)
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 1, "verify exit %d, %r" % (rc, err))
    v = one_json(out)
    check(v["verified"] is False and v["corrupt"] ==
          [{"error": malformed, "manifest_key": bad}], "verify %r" % v)
    rc, out, err = run("store", "gc", uri, "--json")
    check(rc == 0, "gc exit %d, %r" % (rc, err))
    rc, out, err = run("store", "rm", uri, bad)
    check(rc == 0, "rm exit %d, %r" % (rc, err))
    rc, out, err = run("store", "ls", uri, "--json")
    check(rc == 0 and one_json(out) == [rev], "ls after rm: %r" % out)
    rc, out, err = run("store", "verify", uri, "--json")
    check(rc == 0 and one_json(out)["verified"] is True, "verify %r" % out)


@test
def passwords_never_leak():
    """Issue 38 finding 4: an unencoded '/', '?' or '@' in a password put it
    in the URI error of every command; now everything before the last '@'
    is hidden, and RESHARD_REDIS_PASSWORD keeps the password out of argv."""
    src, dst = scenario(CROSS_DIM)
    want = ('invalid Redis URI "redis://***@127.0.0.1:1": the user or '
            "password holds an unencoded '/', '?', '#' or '@'; "
            "percent-encode it (%2F, %3F, %23, %40)")
    for secret in ("admin:Sup3r/S3cret", "admin:Sup3r?S3cret",
                   "admin:Sup@3cret"):
        uri = "redis://%s@127.0.0.1:1" % secret
        for args in (("store", "ls", uri),
                     ("selftest", src, dst, "--via-store", uri),
                     ("selftest", src, dst, "--transport", "ucx",
                      "--rendezvous", uri)):
            rc, out, err = run(*args)
            line = one_error_line(rc, out, err, "invalid Redis URI")
            check(want in line, "%r: %r" % (args, line))
            check("3cret" not in line, "password shown: %r" % line)
    # A server with a password, given only through the environment.
    SERVER.cli("ACL", "SETUSER", "cliuser", "on", ">Env/S3cret", "~*",
               "+@all")
    uri = "redis://cliuser:@127.0.0.1:%d?prefix=envpw" % SERVER.port
    env = dict(os.environ, RESHARD_REDIS_PASSWORD="Env/S3cret")
    proc = subprocess.run([RESHARD, "selftest", src, dst, "--via-store", uri,
                           "--json"], capture_output=True, env=env,
                          timeout=120)
    check(proc.returncode == 0, "exit %d, %r" % (proc.returncode,
                                                 proc.stderr))
    env["RESHARD_REDIS_PASSWORD"] = "Wr0ng/S3cret"
    proc = subprocess.run([RESHARD, "store", "ls", uri], capture_output=True,
                          env=env, timeout=60)
    check(proc.returncode != 0 and b"S3cret" not in proc.stderr and
          b"AUTH on redis://cliuser:***@" in proc.stderr,
          "a wrong password: %r" % proc.stderr)


@test
def prefixes_never_collide():
    """Issue 38 finding 5: store x's records named index/pending were store
    x:k's index and pending sets. A prefix holds no ':' now."""
    rc, out, err = run("store", "ls", SERVER.uri("x:k"))
    one_error_line(rc, out, err, "prefix must be 1-128 characters of "
                   "[A-Za-z0-9._~/-] (no ':', which separates a prefix "
                   "from the store's own keys)")
    src, dst = scenario(CROSS_DIM)
    for prefix in ("nest", "nest/k"):
        rc, out, err = run("selftest", src, dst, "--via-store",
                           SERVER.uri(prefix), "--keep-revision", "--json")
        check(rc == 0, "selftest on %s: %d %r" % (prefix, rc, err))
    for prefix in ("nest", "nest/k"):
        rc, out, err = run("store", "ls", SERVER.uri(prefix), "--json")
        check(rc == 0 and [r["state"] for r in one_json(out)] == ["READY"],
              "ls %s: %r %r" % (prefix, out, err))


def main(argv):
    global RESHARD, SCENARIOS, SERVER, TMP
    RESHARD = os.path.abspath(argv[1])
    SCENARIOS = os.path.join(os.path.abspath(argv[2]), "data", "scenarios")
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        print("FAIL: redis-server and redis-cli are missing: run "
              "scripts/bootstrap.sh")
        return 1

    def on_tmp(tmp):
        global SERVER, TMP
        TMP = tmp
        SERVER = RedisServer(tmp)

    try:
        return SUITE.run("reshard-redis-cli-", on_tmp)
    finally:
        if SERVER is not None:
            SERVER.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
