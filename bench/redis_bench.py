#!/usr/bin/env python3
"""The weight store on Redis against raw Redis throughput, in one run.

A private redis-server (loopback, a free port, AOF with fsync always, as a
durable store needs) serves both sides. Its AOF is compacted
(BGREWRITEAOF, waited for) after every round's keys are deleted, outside
the timed regions, and never automatically: an automatic rewrite forks a
child that compresses the whole dataset (up to the 1 GiB just written) on
one of the machine's cores, at a moment set by the AOF's growth, and so
slowed whichever side's round it fell in. The upload's sources and the
load's targets are read once right before each (outside the timer), as
the raw client's buffer always is (its GETs wrote what its SETs send):
on this VM, memory left idle for a few seconds reads several times
slower at first (hashing 256 MiB: 23-45 ms right after use, 43-533 ms
after 5-15 s idle, without a page fault), and a trainer's weights are
fresh from its optimizer step.

* baseline: a minimal raw client (RawClient below) that SETs 256 distinct
  values of the store's chunk size (4 MiB; 1 GiB) from one buffer and GETs
  them back into it, pipelining 4 on one connection (redis-benchmark is
  not used: it cannot GET distinct keys it is sure to have SET, and it
  discards what it reads), measured before and after every store round
  (the round is judged against the mean of the two);
* reshard: `WeightStore.upload` of a 1 GiB layout (one uint8 tensor,
  TP4 rows; XXH3 checksums and the commit included), then `load` into a
  TP8 column split (every chunk verified), timed from Python around the
  native calls (the GIL is released inside them);
* RSS growth of the loading process during the load (targets allocated and
  touched before), against the load's staging limit.

One unjudged warm-up round of each side comes first. Verdicts on the
medians of the --runs rounds' ratios.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/redis_bench.py [--runs N]
"""

import argparse
import ctypes
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time

import torch

import reshard

GIB = 1 << 30
VALUE = 4 << 20


def start_redis(root):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    libc = ctypes.CDLL(None)
    proc = subprocess.Popen(
        ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", root, "--save", "", "--appendonly", "yes",
         "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0",
         "--logfile", os.path.join(root, "log")],
        preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))
    deadline = time.time() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "PING"],
                         capture_output=True).stdout.strip() != b"PONG":
        if time.time() > deadline:
            proc.kill()
            raise SystemExit("redis-server did not start")
        time.sleep(0.02)
    return proc, port


def compact(port):
    """Rewrites the server's AOF (BGREWRITEAOF) and waits for the rewrite
    to finish, so that no rewrite runs inside a timed round."""
    cli = ["redis-cli", "-p", str(port)]
    subprocess.run(cli + ["BGREWRITEAOF"], capture_output=True, check=True)
    deadline = time.time() + 120
    while True:
        info = subprocess.run(cli + ["INFO", "persistence"], capture_output=True,
                              text=True, check=True).stdout
        if ("aof_rewrite_in_progress:0" in info and
                "aof_rewrite_scheduled:0" in info):
            return
        if time.time() > deadline:
            raise SystemExit("the AOF rewrite did not finish in 120 s")
        time.sleep(0.05)


def touch(tensors):
    """Reads every tensor of {participant: {name: tensor}} once."""
    for named in tensors.values():
        for t in named.values():
            t.max()


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s in /proc/self/status" % field)


class RawClient:
    """A minimal RESP client: SETs written from, and GET replies received
    into, one preallocated 1 GiB buffer, pipelining `depth` commands (the
    store's pipeline depth), over one connection."""

    def __init__(self, port, depth=4):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.depth = depth
        self.pending = b""

    def line(self):
        while b"\r\n" not in self.pending:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SystemExit("redis closed the connection")
            self.pending += chunk
        head, self.pending = self.pending.split(b"\r\n", 1)
        return head

    def exact(self, view):
        n = min(len(view), len(self.pending))
        view[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        while n < len(view):
            n += self.sock.recv_into(view[n:])

    def run(self, buf, op):
        view = memoryview(buf)
        count = len(buf) // VALUE
        sent = done = 0
        while done < count:
            while sent < count and sent - done < self.depth:
                key = b"raw:%d" % sent
                if op == "set":
                    self.sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" %
                                      (len(key), key, VALUE))
                    self.sock.sendall(view[sent * VALUE:(sent + 1) * VALUE])
                    self.sock.sendall(b"\r\n")
                else:
                    self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" %
                                      (len(key), key))
                sent += 1
            head = self.line()
            if op == "set":
                if head != b"+OK":
                    raise SystemExit("SET failed: %r" % head)
            else:
                if head != b"$%d" % VALUE:
                    raise SystemExit("GET returned %r" % head)
                self.exact(view[done * VALUE:(done + 1) * VALUE])
                crlf = bytearray(2)
                self.exact(memoryview(crlf))
            done += 1


def raw_gbps(client, buf):
    """SET then GET of 256 distinct 4 MiB values (1 GiB) with RawClient."""
    t0 = time.perf_counter()
    client.run(buf, "set")
    t1 = time.perf_counter()
    client.run(buf, "get")
    t2 = time.perf_counter()
    return len(buf) / (t1 - t0) / 1e9, len(buf) / (t2 - t1) / 1e9


def layout(name, tp, dim):
    """A [16384, 65536] uint8 tensor (1 GiB) split over tp ranks on dim."""
    shape = (16384, 65536)
    parts, frags = [], []
    for r in range(tp):
        rank = reshard.ParallelRank(tp=r)
        parts.append(reshard.TopologyParticipant(f"{name}-{r}", rank))
        local = list(shape)
        local[dim] //= tp
        offset = [0, 0]
        offset[dim] = r * local[dim]
        frags.append(reshard.PlacementFragment("w", offset, local,
                                               local[0] * local[1], rank))
    topo = reshard.ParallelTopology(tp_size=tp, participants=parts)
    tensor = reshard.TensorDescriptor("w", shape, "uint8", 1,
                                      shard_dims=(dim,),
                                      parallel_axes=(reshard._reshard.SplitAxis("tp", dim),))
    return reshard.Placement.from_fragments("bench", "r", 1, name, topo,
                                            [tensor], frags)


def timed_load(store, manifest, dst, targets, full):
    """Seconds of one verified load into `targets`, and the RSS growth in
    MiB during it; the loaded bytes are checked against `full`."""
    touch(targets)
    before = rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak
    t0 = time.perf_counter()
    store.load(manifest.manifest_key, dst, targets)
    seconds = time.perf_counter() - t0
    growth = (rss_kib("VmHWM") - before) / 1024
    for part in dst.parts:
        f = part.fragments[0]
        box = tuple(slice(o, o + n) for o, n in
                    zip(f.global_offset, f.local_shape))
        if not torch.equal(targets[part.participant_id]["w"], full[box]):
            raise SystemExit("loaded bytes differ")
    return seconds, growth


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=7,
                   help="rounds of raw SET/GET, upload and load (at least 3; "
                   "verdicts on the medians)")
    a = p.parse_args()
    if a.runs < 3:
        p.error("--runs must be at least 3 (verdicts on medians)")
    src, dst = layout("src", 4, 0), layout("dst", 8, 1)
    full = torch.arange(GIB, dtype=torch.int64).remainder_(251).to(torch.uint8)
    full = full.reshape(16384, 65536)
    sources = {}
    for part in src.parts:
        f = part.fragments[0]
        rows = slice(f.global_offset[0], f.global_offset[0] + f.local_shape[0])
        sources[part.participant_id] = {"w": full[rows].clone()}
    targets = {part.participant_id: {"w": torch.ones(part.fragments[0].local_shape,
                                                     dtype=torch.uint8)}
               for part in dst.parts}
    raw = bytearray(GIB)
    raw[::4096] = bytes(range(256)) * (GIB // 4096 // 256)
    rows = []
    with tempfile.TemporaryDirectory(prefix="reshard-redis-bench-") as root:
        proc, port = start_redis(root)
        try:
            # Both sides are opened once and kept, as a trainer or rollout
            # engine keeps its store across steps; the first load of a
            # freshly opened store is reported apart.
            client = RawClient(port)
            store = reshard.WeightStore(f"redis://127.0.0.1:{port}?prefix=bench")
            raw_keys = ["raw:%d" % i for i in range(GIB // VALUE)]

            def raw_round():
                speeds = raw_gbps(client, raw)
                subprocess.run(["redis-cli", "-p", str(port), "DEL"] + raw_keys,
                               capture_output=True, check=True)
                compact(port)
                return speeds

            def store_round():
                touch(sources)
                t0 = time.perf_counter()
                manifest = store.upload(src, sources)
                up = time.perf_counter() - t0
                load, growth = timed_load(store, manifest, dst, targets, full)
                store.rm(manifest.manifest_key)
                compact(port)
                return GIB / up / 1e9, GIB / load / 1e9, growth

            # A warm-up round of each, not judged: the process's and the
            # server's first round runs slower (first touches, the server's
            # allocations). Then the baseline brackets every store round: a
            # raw round before and after it (the one after is the next
            # round's before), each store round judged against the mean of
            # its two, so that the VM's drift moves both sides alike.
            raw_round()
            store_round()
            raws = [raw_round()]
            for run in range(a.runs):
                up, load, growth = store_round()
                raws.append(raw_round())
                base_set = (raws[-2][0] + raws[-1][0]) / 2
                base_get = (raws[-2][1] + raws[-1][1]) / 2
                rows.append((up, base_set, load, base_get, growth))
            # The first load of a store opened just before it.
            manifest = store.upload(src, sources)
            fresh = reshard.WeightStore(f"redis://127.0.0.1:{port}?prefix=bench")
            first_load, _ = timed_load(fresh, manifest, dst, targets, full)
            client.sock.close()
        finally:
            proc.kill()
            proc.wait()
    print("1 GiB, TP4 rows -> TP8 columns, private redis-server (AOF, fsync "
          "always, compacted between rounds); baseline a raw RESP client, "
          "%d MiB values, same server, same run, the mean of a round "
          "before and after each store round; after a warm-up round of "
          "each" % (VALUE >> 20))
    print()
    print("| run | upload GB/s | raw SET GB/s | ratio | load GB/s | "
          "raw GET GB/s | ratio | RSS growth in load MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for i, (u, s, l, g, r) in enumerate(rows):
        print(f"| {i + 1} | {u:.2f} | {s:.2f} | {u / s:.2f}x | {l:.2f} | "
              f"{g:.2f} | {l / g:.2f}x | {r:.0f} |")
    med = lambda k: statistics.median(x[k] / x[k + 1] for x in rows)  # noqa
    print()
    verdict = lambda r: "meets" if r >= 0.7 else "misses"  # noqa
    print(f"median ratio: upload {med(0):.2f}x ({verdict(med(0))}), load "
          f"{med(2):.2f}x ({verdict(med(2))}) (goal >= 0.7x)")
    print(f"first load of a freshly opened store: {GIB / first_load / 1e9:.2f} "
          f"GB/s ({GIB / first_load / 1e9 / raws[-1][1]:.2f}x the last raw GET)")


if __name__ == "__main__":
    main()
